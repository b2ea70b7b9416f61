//! The scheduler thread: the one owner of the scheduling core.
//!
//! Everything that changes state arrives as a [`SchedulerMsg`] on one channel. Each round the
//! thread drains every pending message, commits all of the round's submissions to the journal in
//! one transaction (group commit), and only then answers the submitters and lets their tasks
//! move: a submission is acknowledged only once it is on disk, and never runs before that.
//!
//! A task with inputs first waits for their sizes and versions, which workers look up
//! ([`lookup`]); then it enters the core's queue. Dispatched attempts and outcomes go to a
//! journal writer thread ([`writer`]) that group-commits them in the background, so no fsync
//! sits between a task finishing and its slot getting the next task. Until the writer confirms
//! an outcome, the scheduler keeps it in memory and shows the task as running ([`progress`]). If
//! the dispatcher dies before the confirmation, the task has no outcome on disk and runs again
//! after restart (at-least-once execution, one recorded outcome).
//!
//! Everything the scheduler does to the outside (a message to a worker, closing a session, a
//! command to the pool, a journal write) goes through a [`Comm`]: [`LiveComm`] in the
//! dispatcher, [`comm::RecordingComm`] in the scheduler's unit tests (`tests/`), which drive it
//! one message and one round at a time, without sockets.
//!
//! | module | what it holds |
//! |---|---|
//! | this one | the scheduler's state, the round loop, messages handed to their owners; submission, cancellation, outcomes |
//! | [`msg`] | [`SchedulerMsg`], the thread's one input |
//! | [`views`] | the answers: status counters, task, batch and link views, submission errors |
//! | [`comm`] | the seam to the outside: [`Comm`], [`LiveComm`], [`comm::RecordingComm`] |
//! | [`sessions`] | the registry of connected workers |
//! | [`progress`] | the round's journal traffic; outcomes not yet confirmed |
//! | `workers` | what workers say (hello, reports, lookups, results), dispatch, losing a worker |
//! | [`tasks`] | the task table: phases, the index by state, batches |
//! | `dataflow` | a batch's dependencies checked and ordered; abandoned tasks; released objects |
//! | [`lookup`] | input lookups asked of workers |
//! | [`jobs`] | jobs: their counters, cancelling one whole, a job's own dispatch policy |
//! | [`objects`] | Hercules' locate and place (`GET /v1/objects/{uri}`, its placement) |
//! | `placement` | placement hints: workers' names to the core, strict hints checked at submission |
//! | `prefetch` | MixApart: racks, prefetches carried out, the storage cap shared by demand; 2Mark's moves |
//! | [`pool`] | the elastic pool: provisioning decisions out, workers by state in, cache hand-off |
//! | [`batches`] | batches staged to workers (`diffuse stage`, GDS) |
//! | [`series`] | the dashboard's samples (`GET /v1/series`) and the last failures |
//! | [`writer`] | the journal writer thread |

pub mod batches;
pub mod comm;
mod dataflow;
pub mod jobs;
pub mod lookup;
pub mod msg;
pub mod objects;
mod placement;
pub mod pool;
mod prefetch;
pub mod progress;
pub mod series;
pub mod sessions;
pub mod tasks;
#[cfg(test)]
mod tests;
pub mod views;
mod workers;
pub mod writer;

pub use comm::{Comm, LiveComm};
pub use msg::SchedulerMsg;
pub use views::{
    AttemptView, BatchView, LinkView, ListQuery, Status, SubmitError, Submitted, TaskView,
};

use crate::journal::{Journal, OutcomeState, StoredTask, SubmittedTask, TaskOutcome};
use crate::proto::ToWorker;
use crate::spec::TaskDef;
use diffuse_core::{Core, Input, NodeId, ObjectId, Resources, TaskId, TaskSpec, TaskState, Time};
use lookup::Lookups;
use progress::Progress;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use sessions::Sessions;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tasks::{Listed, Phase, TaskTable};
use tokio::sync::oneshot;

/// How a task is kept in the journal's `spec_json`: its definition and batch. Journals written
/// before batches existed hold `[definition, inputs as looked up]`, read as batch 0.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum StoredSpec {
    Current { def: TaskDef, batch: u64 },
    Before(TaskDef, serde_json::Value),
}

/// Settings of the scheduler thread.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Heartbeat interval told to workers.
    pub heartbeat: Duration,
    /// A worker silent this long is given up.
    pub heartbeat_timeout: Duration,
    /// The journal file (the writer thread opens its own connection to it).
    pub journal: std::path::PathBuf,
    /// Most time a worker may take to look up one input.
    pub lookup_timeout: Duration,
    /// What a task that does not say gets (`--retries`, `--task-timeout`).
    pub task_defaults: crate::spec::TaskDefaults,
    /// The pool is exactly this many workers (`diffuse run`): once all of them are connected, a
    /// task that none of them could ever hold fails at once instead of waiting for a bigger
    /// worker that will not come.
    pub fixed_pool: Option<u32>,
}

/// The scheduler's state.
pub struct Scheduler {
    core: Core,
    journal: Journal,
    cfg: SchedulerConfig,
    start: Instant,
    tasks: TaskTable,
    objects: FxHashMap<String, ObjectId>,
    uris: Vec<String>,
    /// The task that writes each intermediate (`tmp://`) object, ended or not.
    tmp_producer: FxHashMap<ObjectId, TaskId>,
    /// Sizes of intermediate objects, as their producers reported them.
    tmp_sizes: FxHashMap<ObjectId, u64>,
    /// Workers' names as the core knows them (placement hints name them).
    node_names: FxHashMap<String, diffuse_core::NodeName>,
    /// The names, by `NodeName`.
    name_list: Vec<String>,
    /// `tmp://` objects placed on a worker (`PUT /v1/objects/{uri}/placement`).
    placed: FxHashMap<ObjectId, String>,
    /// Every job's tasks, by job name.
    jobs: FxHashMap<String, jobs::JobTasks>,
    /// Tasks whose input lookups wait for these tasks to succeed (they may write the inputs).
    deferred: FxHashMap<TaskId, Vec<TaskId>>,
    /// For each such task, how many of its dependencies have not succeeded yet.
    deferred_left: FxHashMap<TaskId, u32>,
    /// Source version of each object: empty until a lookup or a worker's report gives one.
    versions: Vec<String>,
    /// Connected workers.
    sessions: Sessions,
    /// The outside: workers' sessions, the pool, the journal writer.
    comm: Box<dyn Comm>,
    /// The elastic pool, unless static.
    pool: Option<pool::PoolLink>,
    /// Workers were told to finish: one that connects later is told at once.
    shutting_down: bool,
    lookups: Lookups,
    /// Tasks in [`Phase::Lookup`].
    looking_up: u64,
    status: Status,
    /// This round's journal traffic; outcomes not yet confirmed.
    progress: Progress,
    /// Workers' racks, by name.
    racks: FxHashMap<String, diffuse_core::RackId>,
    /// Each worker's share of the storage cap, as last sent.
    storage_shares: FxHashMap<NodeId, f64>,
    /// 2Mark's moves under way: (object, to) -> from.
    moving: FxHashMap<(ObjectId, NodeId), NodeId>,
    /// The dashboard's samples and last failures.
    series: series::Series,
    /// Batches being staged (`diffuse stage`), by number.
    stages: std::collections::BTreeMap<u64, batches::StageRun>,
    next_stage: u64,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl Scheduler {
    /// A scheduler over `core`, replaying every task of `journal`: those with an outcome are
    /// shown as ended, the others are queued again. What it does to the outside goes through
    /// `comm` ([`LiveComm`] in the dispatcher).
    pub fn new(
        core: Core,
        journal: Journal,
        cfg: SchedulerConfig,
        comm: Box<dyn Comm>,
    ) -> Result<Scheduler, crate::journal::JournalError> {
        let stored = journal.load()?;
        let mut s = Scheduler {
            core,
            journal,
            cfg,
            start: Instant::now(),
            tasks: TaskTable::default(),
            objects: FxHashMap::default(),
            uris: Vec::new(),
            tmp_producer: FxHashMap::default(),
            tmp_sizes: FxHashMap::default(),
            node_names: FxHashMap::default(),
            name_list: Vec::new(),
            placed: FxHashMap::default(),
            jobs: FxHashMap::default(),
            deferred: FxHashMap::default(),
            deferred_left: FxHashMap::default(),
            versions: Vec::new(),
            sessions: Sessions::default(),
            comm,
            pool: None,
            shutting_down: false,
            lookups: Lookups::default(),
            looking_up: 0,
            status: Status::default(),
            progress: Progress::default(),
            racks: FxHashMap::default(),
            storage_shares: FxHashMap::default(),
            moving: FxHashMap::default(),
            series: series::Series::default(),
            stages: std::collections::BTreeMap::new(),
            next_stage: 1,
        };
        for st in stored {
            s.restore(st);
        }
        Ok(s)
    }

    /// Carry provisioning decisions out through this pool.
    pub fn with_pool(mut self, link: pool::PoolLink) -> Scheduler {
        self.pool = Some(link);
        self
    }

    fn now(&self) -> Time {
        Time(self.start.elapsed().as_nanos() as u64)
    }

    fn restore(&mut self, st: StoredTask) {
        let (def, batch) = match serde_json::from_str::<StoredSpec>(&st.task.spec_json) {
            Ok(StoredSpec::Current { def, batch }) => (def, batch),
            Ok(StoredSpec::Before(def, _)) => (def, 0),
            Err(e) => {
                tracing::error!(task = %st.task.id, "unreadable task in journal ({e}); skipped");
                return;
            }
        };
        self.status.submitted += 1;
        match st.outcome {
            Some(o) => {
                self.count_outcome(o.state);
                let inputs = self.inputs_of(&def);
                let produces: Vec<ObjectId> = def
                    .outputs
                    .iter()
                    .filter(|u| crate::uri::is_tmp(u))
                    .map(|u| self.object(u))
                    .collect();
                let t = self.tasks.insert(def, batch, inputs, Phase::Done(o.state));
                self.join_job(t);
                for p in &produces {
                    self.tmp_producer.insert(*p, t);
                }
                if o.state == OutcomeState::Succeeded && !produces.is_empty() {
                    // Kept as the producer of what it wrote: if no worker brings a copy back and
                    // a task needs it, it runs again.
                    let mut spec = self.spec_of(t).with_produces(produces);
                    // A remake keeps to the task's hint.
                    let def = self.tasks.get(t).def.clone();
                    spec.hint = self.placement_of(&def);
                    let now = self.now();
                    if let Err(e) = self.core.handle_restore_done(spec, now) {
                        tracing::error!("journal replay: {e}");
                    }
                }
            }
            None => self.accept(def, batch, st.attempts),
        }
    }

    /// The distinct inputs of `def` as objects, sizes not yet known.
    fn inputs_of(&mut self, def: &TaskDef) -> Vec<(ObjectId, u64)> {
        let mut inputs: Vec<(ObjectId, u64)> = Vec::with_capacity(def.inputs.len());
        for uri in &def.inputs {
            let o = self.object(uri);
            if !inputs.iter().any(|(x, _)| *x == o) {
                inputs.push((o, 0));
            }
        }
        inputs
    }

    /// Take a task in (new or replayed; a batch in the order [`Scheduler::check_dataflow`]
    /// gives). It enters the core at once: held while workers look up its inputs' sizes and
    /// versions (`tmp://` inputs are not looked up: their producers report them), and blocked
    /// until what it depends on has succeeded. A dependency that already failed fails it.
    fn accept(&mut self, def: TaskDef, batch: u64, attempts: u32) {
        let deps = self.deps_of(&def);
        let inputs = self.inputs_of(&def);
        let lookups: Vec<ObjectId> = inputs
            .iter()
            .map(|(o, _)| *o)
            .filter(|o| !crate::uri::is_tmp(&self.uris[o.0 as usize]))
            .collect();
        let phase = if lookups.is_empty() {
            Phase::Live
        } else {
            Phase::Lookup {
                pending: lookups.len() as u32,
                attempts,
                error: None,
            }
        };
        let t = self.tasks.insert(def, batch, inputs, phase);
        self.join_job(t);
        let (after, produces) = match deps {
            dataflow::Deps::Wait { after, produces } => (after, produces),
            dataflow::Deps::Failed(e) => {
                for uri in self.tasks.get(t).def.outputs.clone() {
                    if crate::uri::is_tmp(&uri) {
                        let o = self.object(&uri);
                        self.tmp_producer.insert(o, t);
                    }
                }
                self.tasks.get_mut(t).phase = Phase::Live;
                self.finish_without_running(t, OutcomeState::Failed, Some(e));
                return;
            }
        };
        for p in &produces {
            self.tmp_producer.insert(*p, t);
        }
        // Its inputs are looked up once the tasks it waits for have succeeded: they may be
        // what writes them.
        let unfinished: Vec<TaskId> = after
            .iter()
            .copied()
            .filter(|d| !matches!(self.tasks.get(*d).phase, Phase::Done(_)))
            .collect();
        let mut spec = self.spec_of(t).with_after(after).with_produces(produces);
        let def = self.tasks.get(t).def.clone();
        spec.hint = self.placement_of(&def);
        if !lookups.is_empty() {
            spec = spec.held();
            self.looking_up += 1;
            if unfinished.is_empty() {
                self.want_lookups(t);
            } else {
                self.deferred_left.insert(t, unfinished.len() as u32);
                for d in unfinished {
                    self.deferred.entry(d).or_default().push(t);
                }
            }
        }
        let now = self.now();
        if let Err(e) = self.core.handle_restore(spec, attempts, now) {
            // Checked at submission; a journal written by another version may still disagree.
            tracing::error!(task = %self.tasks.get(t).def.id, "refused by the core: {e}");
            self.finish_without_running(t, OutcomeState::Failed, Some(e.to_string()));
        }
    }

    /// Ask workers for the size and version of `t`'s inputs (not its `tmp://` ones).
    fn want_lookups(&mut self, t: TaskId) {
        let objects: Vec<ObjectId> = self.tasks.get(t).inputs.iter().map(|(o, _)| *o).collect();
        for o in objects {
            let uri = &self.uris[o.0 as usize];
            if !crate::uri::is_tmp(uri) {
                self.lookups.want(&uri.clone(), t);
            }
        }
    }

    /// `t` succeeded: tasks whose lookups waited for it may now look up their inputs.
    fn wake_deferred(&mut self, t: TaskId) {
        for w in self.deferred.remove(&t).unwrap_or_default() {
            let Some(left) = self.deferred_left.get_mut(&w) else {
                continue;
            };
            *left -= 1;
            if *left == 0 {
                self.deferred_left.remove(&w);
                if matches!(self.tasks.get(w).phase, Phase::Lookup { .. }) {
                    self.want_lookups(w);
                }
            }
        }
    }

    fn object(&mut self, uri: &str) -> ObjectId {
        if let Some(o) = self.objects.get(uri) {
            return *o;
        }
        let o = ObjectId(self.uris.len() as u64);
        self.objects.insert(uri.to_string(), o);
        self.uris.push(uri.to_string());
        self.versions.push(String::new());
        o
    }

    fn spec_of(&self, id: TaskId) -> TaskSpec {
        let task = self.tasks.get(id);
        let more = task.def.more();
        TaskSpec::new(
            id,
            task.inputs
                .iter()
                .map(|(o, size)| Input {
                    object: *o,
                    size: *size,
                })
                .collect(),
        )
        .with_resources(Resources {
            cores: more.cores.unwrap_or(1),
            memory: more.memory.unwrap_or(0),
            gpus: more.gpus.unwrap_or(0),
            disk: more.disk.unwrap_or(0),
        })
        .with_priority(more.priority)
        .with_job(self.job_id(task.def.job()))
        .with_dad_beta(more.dad_beta)
        .with_retries(more.retries.unwrap_or(self.cfg.task_defaults.retries))
        .with_walltime(
            more.walltime_s
                .or(more.timeout_s)
                .map(Duration::from_secs_f64)
                .or(self.cfg.task_defaults.task_timeout),
        )
    }

    fn count_outcome(&mut self, state: OutcomeState) {
        match state {
            OutcomeState::Succeeded => self.status.succeeded += 1,
            OutcomeState::Failed => self.status.failed += 1,
            OutcomeState::Cancelled => self.status.cancelled += 1,
        }
    }

    /// Run until every sender of `rx` is gone.
    pub fn run(mut self, rx: Receiver<SchedulerMsg>) {
        let tick = Duration::from_millis(100);
        let mut next_check = Instant::now() + tick;
        loop {
            let mut wait = next_check.saturating_duration_since(Instant::now());
            if self.progress.ending() > 0 {
                // Outcomes are waiting for the writer's confirmation (it commits every 20 ms).
                wait = wait.min(Duration::from_millis(5));
            }
            let first = match rx.recv_timeout(wait) {
                Ok(c) => Some(c),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => {
                    self.comm.close();
                    break;
                }
            };
            if let Some(c) = first {
                self.handle(c);
                // Group commit: take everything already waiting before touching the disk.
                while let Ok(c) = rx.try_recv() {
                    self.handle(c);
                    if self.progress.submissions() > 50_000 {
                        break;
                    }
                }
            }
            if Instant::now() >= next_check {
                self.tick();
                next_check = Instant::now() + tick;
            }
            self.round();
        }
    }

    /// The periodic checks (every 100 ms): heartbeats, hand-offs, tasks no worker can hold,
    /// the storage cap's shares, the dashboard's sample, the core's timers.
    pub fn tick(&mut self) {
        self.check_heartbeats();
        self.finish_handoffs();
        self.fail_unfit();
        self.share_storage_cap();
        self.sample();
        let now = self.now();
        self.core.handle_waiting_demand(self.looking_up);
        if self.core.poll_timeout().is_some_and(|t| t <= now) {
            self.core.handle_timeout(now);
        }
    }

    /// The end of a round: commit its submissions (they reach the disk before any of their
    /// tasks moves on), send lookups, carry out the core's actions, hand the journal writer
    /// what happened and take its confirmations.
    pub fn round(&mut self) {
        self.progress.flush_submissions(&mut self.journal);
        self.send_lookups();
        self.drain_actions();
        for o in self.progress.flush(&mut *self.comm) {
            self.count_outcome(o.state);
            if let Some(t) = self.tasks.id_of(&o.id) {
                self.tasks.ended(t, o.state);
            }
        }
    }

    /// Take one message.
    pub fn handle(&mut self, cmd: SchedulerMsg) {
        match cmd {
            SchedulerMsg::Submit(defs, reply) => self.submit(defs, reply),
            SchedulerMsg::WorkerUp { conn, hello, link } => self.worker_up(conn, hello, link),
            SchedulerMsg::FromWorker(conn, msg) => self.on_worker_message(conn, msg),
            SchedulerMsg::WorkerDown(conn) => {
                if let Some(node) = self.sessions.node_of(conn) {
                    self.node_lost(node, "connection closed", true);
                }
            }
            SchedulerMsg::Cancel(id, reply) => {
                let _ = reply.send(self.cancel(&id));
            }
            SchedulerMsg::Pool(ev) => self.on_pool_event(ev),
            SchedulerMsg::Status(reply) => {
                let _ = reply.send(self.status());
            }
            SchedulerMsg::Series(since, reply) => {
                let _ = reply.send(self.points_since(since));
            }
            SchedulerMsg::Task(id, reply) => {
                let view = self.tasks.id_of(&id).map(|t| self.view(t));
                let _ = reply.send(view);
            }
            SchedulerMsg::List(q, reply) => {
                let (page, next) = self.tasks.page(q.state, q.after, q.limit);
                let views = page.into_iter().map(|t| self.view(t)).collect();
                let _ = reply.send((views, next));
            }
            SchedulerMsg::Batch(b, reply) => {
                let view = self.tasks.batch(b).map(|counts| BatchView {
                    batch: b,
                    pending: counts.tasks - counts.succeeded - counts.failed - counts.cancelled,
                    counts: counts.clone(),
                });
                let _ = reply.send(view);
            }
            SchedulerMsg::Locate(uri, reply) => {
                let names = match self.objects.get(&uri) {
                    Some(o) => self
                        .core
                        .locate(*o)
                        .iter()
                        .filter_map(|n| self.sessions.name(n).map(str::to_string))
                        .collect(),
                    None => Vec::new(),
                };
                let _ = reply.send(names);
            }
            SchedulerMsg::Job(name, reply) => {
                let _ = reply.send(self.job_view(&name));
            }
            SchedulerMsg::CancelJob(name, reply) => {
                let _ = reply.send(self.cancel_job(&name));
            }
            SchedulerMsg::Object(uri, reply) => {
                let _ = reply.send(self.object_view(&uri));
            }
            SchedulerMsg::Place(uri, name, reply) => {
                let _ = reply.send(self.place(&uri, &name));
            }
            SchedulerMsg::PeerOf(name, reply) => {
                let url = self
                    .sessions
                    .values()
                    .find(|s| s.name == name)
                    .map(|s| s.peer_url.clone());
                let _ = reply.send(url);
            }
            SchedulerMsg::Ended(after, reply) => {
                let (ended, n) = self.tasks.ended_since(after);
                let views = ended
                    .into_iter()
                    .map(|t| {
                        (
                            self.tasks.get(t).def.id.clone(),
                            self.tasks.listed(t).as_str().to_string(),
                        )
                    })
                    .collect();
                let _ = reply.send((views, n));
            }
            SchedulerMsg::Stage(ask, reply) => {
                let _ = reply.send(self.stage(ask));
            }
            SchedulerMsg::StageView(id, reply) => {
                let _ = reply.send(self.stage_view(id));
            }
            SchedulerMsg::ShutdownWorkers => {
                self.shutting_down = true;
                for node in self.sessions.nodes() {
                    self.comm.send(node, ToWorker::Shutdown);
                }
            }
        }
    }

    fn status(&self) -> Status {
        let c = self.core.counts();
        let (remakes_waiting, remakes_running) = self.core.remakes();
        let unfit = self.core.unschedulable();
        let examples = unfit
            .iter()
            .take(5)
            .map(|t| {
                let task = self.tasks.get(*t);
                format!("{}: {}", task.def.id, self.spec_of(*t).resources)
            })
            .collect();
        let (worker_list, pool) = self.workers_view();
        let mut workers_by_state: std::collections::BTreeMap<String, u32> = pool::WORKER_STATES
            .iter()
            .map(|s| (s.to_string(), 0))
            .collect();
        for w in &worker_list {
            *workers_by_state.entry(w.state.clone()).or_default() += 1;
        }
        Status {
            workers_by_state,
            worker_list,
            pool,
            unschedulable: unfit.len() as u64,
            unschedulable_examples: examples,
            queued: c.queued + c.blocked - remakes_waiting,
            looking_up: self.looking_up,
            running: c.running - remakes_running,
            remaking: remakes_waiting + remakes_running,
            ending: self.progress.ending() as u64,
            workers: c.nodes,
            slots: c.slots,
            busy_slots: c.busy_slots,
            uptime_s: self.start.elapsed().as_secs_f64(),
            prefetch: self.core.prefetch_stats(),
            storage_cap: self.core.config().storage_cap,
            storage_budget_used: self.core.storage_budget_used(),
            two_mark: self.core.two_mark_stats(),
            recent_failures: self.recent_failures(),
            links: self.links(),
            ..self.status.clone()
        }
    }

    /// A task's view without its journaled outcome (the API reads that from the journal, off
    /// this thread).
    fn view(&self, t: TaskId) -> TaskView {
        let task = self.tasks.get(t);
        let (node, attempt) = match (&task.phase, self.core.task_state(t)) {
            (Phase::Live, Some(TaskState::Running { node, attempt, .. })) => {
                (self.sessions.name(&node).map(str::to_string), attempt)
            }
            (Phase::Done(_), _) => match self.progress.unconfirmed(&task.def.id) {
                Some(o) => (o.node.clone(), o.attempt),
                None => (None, 0),
            },
            _ => (None, 0),
        };
        TaskView {
            id: task.def.id.clone(),
            state: self.tasks.listed(t).as_str().to_string(),
            batch: task.batch,
            node,
            attempt,
            outcome: None,
            attempts: None,
        }
    }

    fn submit(
        &mut self,
        mut defs: Vec<TaskDef>,
        reply: oneshot::Sender<Result<Submitted, SubmitError>>,
    ) {
        for d in &defs {
            if self.tasks.id_of(&d.id).is_some() {
                let _ = reply.send(Err(SubmitError::Duplicate(d.id.clone())));
                return;
            }
        }
        let order = match self
            .check_hints(&defs)
            .and_then(|()| self.resolve_job_policies(&mut defs))
            .and_then(|()| self.check_dataflow(&defs))
        {
            Ok(order) => order,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let mut defs: Vec<Option<TaskDef>> = defs.into_iter().map(Some).collect();
        let defs: Vec<TaskDef> = order
            .into_iter()
            .map(|i| defs[i].take().expect("each once"))
            .collect();
        let batch = self.tasks.next_batch();
        let n = defs.len();
        let at = unix_now();
        for def in defs {
            let spec_json = serde_json::to_string(&StoredSpec::Current {
                def: def.clone(),
                batch,
            })
            .expect("task serializes");
            self.progress.submitted(SubmittedTask {
                id: def.id.clone(),
                spec_json,
                submitted_at: at,
            });
            self.status.submitted += 1;
            self.accept(def, batch, 0);
        }
        self.progress.reply_when_committed(
            reply,
            Submitted {
                submitted: n,
                batch,
            },
        );
    }

    /// A task ends without (another) run: failed lookup, cancelled, lost too often.
    fn finish_without_running(&mut self, t: TaskId, state: OutcomeState, error: Option<String>) {
        let task = self.tasks.get_mut(t);
        if matches!(task.phase, Phase::Lookup { .. }) {
            self.looking_up -= 1;
        }
        task.phase = Phase::Done(state);
        let id = task.def.id.clone();
        self.record_outcome(
            t,
            TaskOutcome {
                id,
                state,
                attempt: 0,
                node: None,
                exit_code: None,
                error,
                result_json: "{}".into(),
                finished_at: unix_now(),
            },
        );
    }

    fn cancel(&mut self, id: &str) -> Result<String, String> {
        let t = self
            .tasks
            .id_of(id)
            .ok_or_else(|| format!("unknown task '{id}'"))?;
        match &self.tasks.get(t).phase {
            Phase::Done(s) => Err(format!("task '{id}' already ended ({s:?})")),
            Phase::Lookup { .. } => {
                let now = self.now();
                let _ = self.core.handle_cancel(t, now);
                self.finish_without_running(t, OutcomeState::Cancelled, None);
                Ok("cancelled".into())
            }
            Phase::Live => {
                let now = self.now();
                match self.core.handle_cancel(t, now).map_err(|e| e.to_string())? {
                    Some(_) => {
                        self.finish_without_running(t, OutcomeState::Cancelled, None);
                        Ok("cancelled".into())
                    }
                    None => {
                        if let Some(TaskState::Running { node, attempt, .. }) =
                            self.core.task_state(t)
                        {
                            if self.sessions.contains(&node) {
                                self.comm.send(
                                    node,
                                    ToWorker::Cancel {
                                        task: id.to_string(),
                                        attempt,
                                    },
                                );
                            }
                        }
                        Ok("cancelling: its processes are being stopped".into())
                    }
                }
            }
        }
    }

    /// With a fixed pool, all of it connected: fail the queued tasks no worker could ever hold.
    fn fail_unfit(&mut self) {
        let Some(pool) = self.cfg.fixed_pool else {
            return;
        };
        if (self.sessions.len() as u32) < pool {
            return;
        }
        let now = self.now();
        for t in self.core.unschedulable() {
            let want = self.spec_of(t).resources;
            if let Ok(Some(_)) = self.core.handle_cancel(t, now) {
                let error = format!(
                    "asks for {want}: more than any of the {pool} workers has, and no other will join"
                );
                self.finish_without_running(t, OutcomeState::Failed, Some(error));
            }
        }
    }

    /// Record an outcome. The writer journals it this round; until it confirms the commit the
    /// task still shows as running and is not counted as ended, so nothing a client has seen
    /// ended can run again after a crash of the dispatcher.
    fn record_outcome(&mut self, t: TaskId, o: TaskOutcome) {
        self.note_failure(&o);
        self.tasks.list_as(t, Listed::Running);
        self.progress.outcome(o);
    }

    /// Connected workers and their slot counts (diagnostics).
    pub fn workers(&self) -> Vec<(String, u32)> {
        self.sessions
            .values()
            .map(|s| (s.name.clone(), s.slots))
            .collect()
    }
}
