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
//! Each child owns its state and is a leaf: it imports its siblings' types, never this module;
//! the scheduler composes them, and routes each message and each of the core's actions to the
//! owners it touches (the handlers that touch several owners are here).
//!
//! | module | what it decides or holds |
//! |---|---|
//! | this one | the scheduler: its owners, the round loop, messages and the core's actions routed; submission, cancellation, outcomes, workers coming and going |
//! | [`msg`] | [`SchedulerMsg`], the thread's one input |
//! | [`views`] | the answers: status counters, task, batch and link views, failures, submission errors |
//! | [`comm`] | the seam to the outside: [`Comm`], [`LiveComm`], [`comm::RecordingComm`] |
//! | [`shared`] | [`shared::Shared`]: the core, sessions, objects and comm borrowed for one step; peer reads |
//! | [`sessions`] | the registry of connected workers |
//! | [`progress`] | the round's journal traffic; outcomes not yet confirmed |
//! | [`tasks`] | the task table: phases, the index by state, batches |
//! | [`objects`] | the object table (URIs, versions, producers, sizes, placements); Hercules' locate view |
//! | [`workers`] | an attempt's assignment sent, a changed version dropped, a report's outcome and traffic |
//! | [`dataflow`] | a batch's dependencies checked and ordered; what a task waits for; abandoned tasks' errors; released objects; lookups deferred until producers succeed |
//! | [`lookup`] | input lookups asked of workers |
//! | [`jobs`] | jobs: their task lists and counters, a job's own dispatch policy |
//! | [`placement`] | workers' names for the core, strict hints checked at submission, Hercules' place |
//! | [`prefetch`] | MixApart: racks, prefetches carried out, the storage cap shared by demand; 2Mark's evictions and moves |
//! | [`pool`] | the elastic pool: provisioning decisions out, workers by state in, cache hand-off |
//! | [`batches`] | batches staged to workers (`diffuse stage`, GDS) |
//! | [`series`] | the dashboard's samples (`GET /v1/series`) and the last failures |
//! | [`writer`] | the journal writer thread |

pub mod batches;
pub mod comm;
pub mod dataflow;
pub mod jobs;
pub mod lookup;
pub mod msg;
pub mod objects;
pub mod placement;
pub mod pool;
pub mod prefetch;
pub mod progress;
pub mod series;
pub mod sessions;
pub mod shared;
pub mod tasks;
#[cfg(test)]
mod tests;
pub mod views;
pub mod workers;
pub mod writer;

pub use comm::{Comm, LiveComm};
pub use msg::SchedulerMsg;
pub use views::{
    AttemptView, BatchView, LinkView, ListQuery, Status, SubmitError, Submitted, TaskView,
};

use crate::journal::{Journal, OutcomeState, StoredTask, SubmittedTask, TaskOutcome};
use crate::proto::{Held, LookupResult, TaskReport, ToDispatcher, ToWorker};
use crate::provisioner::PoolCmd;
use crate::spec::TaskDef;
use batches::{Batches, StageAsk};
use comm::WorkerLink;
use dataflow::Deferred;
use diffuse_core::bandwidth::Endpoint;
use diffuse_core::{
    Action, Core, CoreError, Handoff, Input, NodeId, ObjectId, Outcome, Resources, TaskId,
    TaskSpec, TaskState, Time,
};
use jobs::{JobCancelled, Jobs};
use lookup::{Lookups, Waiter};
use objects::ObjectTable;
use placement::NodeNames;
use pool::PoolLink;
use prefetch::Prefetch;
use progress::Progress;
use serde::{Deserialize, Serialize};
use series::Series;
use sessions::{Session, Sessions};
use shared::Shared;
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

/// The scheduler's state: the core, and the owners it composes.
pub struct Scheduler {
    core: Core,
    journal: Journal,
    cfg: SchedulerConfig,
    start: Instant,
    tasks: TaskTable,
    /// Every object named so far: URIs, versions, producers, placements.
    objects: ObjectTable,
    /// Workers' names as the core knows them.
    names: NodeNames,
    /// Every job's tasks.
    jobs: Jobs,
    /// Tasks whose input lookups wait for other tasks.
    deferred: Deferred,
    /// Connected workers.
    sessions: Sessions,
    /// The outside: workers' sessions, the pool, the journal writer.
    comm: Box<dyn Comm>,
    /// The elastic pool, unless static.
    pool: Option<PoolLink>,
    /// Workers were told to finish: one that connects later is told at once.
    shutting_down: bool,
    lookups: Lookups,
    /// Tasks in [`Phase::Lookup`].
    looking_up: u64,
    status: Status,
    /// This round's journal traffic; outcomes not yet confirmed.
    progress: Progress,
    /// Racks, storage shares, 2Mark's moves.
    prefetch: Prefetch,
    /// The dashboard's samples and last failures.
    series: Series,
    /// Batches staged to workers (`diffuse stage`).
    batches: Batches,
}

/// The scheduler's [`Shared`] borrow (core, sessions, objects, comm) at this moment, leaving
/// its other fields free to borrow alongside.
macro_rules! shared {
    ($s:ident) => {
        Shared {
            now: $s.now(),
            core: &mut $s.core,
            sessions: &$s.sessions,
            objects: &mut $s.objects,
            comm: &mut *$s.comm,
        }
    };
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
            objects: ObjectTable::default(),
            names: NodeNames::default(),
            jobs: Jobs::default(),
            deferred: Deferred::default(),
            sessions: Sessions::default(),
            comm,
            pool: None,
            shutting_down: false,
            lookups: Lookups::default(),
            looking_up: 0,
            status: Status::default(),
            progress: Progress::default(),
            prefetch: Prefetch::default(),
            series: Series::default(),
            batches: Batches::default(),
        };
        for st in stored {
            s.restore(st);
        }
        Ok(s)
    }

    /// Carry provisioning decisions out through this pool.
    pub fn with_pool(mut self, link: PoolLink) -> Scheduler {
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
                    .map(|u| self.objects.intern(u))
                    .collect();
                let t = self.tasks.insert(def, batch, inputs, Phase::Done(o.state));
                self.join_job(t);
                for p in &produces {
                    self.objects.set_producer(*p, t);
                }
                if o.state == OutcomeState::Succeeded && !produces.is_empty() {
                    // Kept as the producer of what it wrote: if no worker brings a copy back and
                    // a task needs it, it runs again.
                    let mut spec = self.spec_of(t).with_produces(produces);
                    // A remake keeps to the task's hint.
                    let def = self.tasks.get(t).def.clone();
                    spec.hint = self.names.placement_of(&def);
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
            let o = self.objects.intern(uri);
            if !inputs.iter().any(|(x, _)| *x == o) {
                inputs.push((o, 0));
            }
        }
        inputs
    }

    /// Take a task in (new or replayed; a batch in the order [`dataflow::check`] gives). It enters the core at once: held while workers look up its inputs' sizes and
    /// versions (`tmp://` inputs are not looked up: their producers report them), and blocked
    /// until what it depends on has succeeded. A dependency that already failed fails it.
    fn accept(&mut self, def: TaskDef, batch: u64, attempts: u32) {
        let deps = dataflow::deps_of(&def, &mut self.objects, &self.tasks, &self.core);
        let inputs = self.inputs_of(&def);
        let lookups: Vec<ObjectId> = inputs
            .iter()
            .map(|(o, _)| *o)
            .filter(|o| !crate::uri::is_tmp(self.objects.uri(*o)))
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
                        let o = self.objects.intern(&uri);
                        self.objects.set_producer(o, t);
                    }
                }
                self.tasks.get_mut(t).phase = Phase::Live;
                self.finish_without_running(t, OutcomeState::Failed, Some(e));
                return;
            }
        };
        for p in &produces {
            self.objects.set_producer(*p, t);
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
        spec.hint = self.names.placement_of(&def);
        if !lookups.is_empty() {
            spec = spec.held();
            self.looking_up += 1;
            if unfinished.is_empty() {
                self.want_lookups(t);
            } else {
                self.deferred.wait(t, unfinished);
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
            let uri = self.objects.uri(o);
            if !crate::uri::is_tmp(uri) {
                self.lookups.want(uri, t);
            }
        }
    }

    /// `t` succeeded: tasks whose lookups waited for it may now look up their inputs.
    fn wake_deferred(&mut self, t: TaskId) {
        for w in self.deferred.succeeded(t) {
            if matches!(self.tasks.get(w).phase, Phase::Lookup { .. }) {
                self.want_lookups(w);
            }
        }
    }

    /// Record task `t` in its job (see [`Jobs::join`]).
    fn join_job(&mut self, t: TaskId) {
        self.jobs.join(t, &self.tasks.get(t).def, &mut self.core);
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
        .with_job(self.jobs.id(task.def.job()))
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
        if let Some(p) = &mut self.pool {
            p.finish_handoffs(&mut *self.comm);
        }
        self.fail_unfit();
        self.prefetch.share_storage_cap(&mut shared!(self));
        if self.series.due() {
            let s = self.status();
            self.series.sample(&s, unix_now());
        }
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
            SchedulerMsg::Pool(ev) => {
                let now = self.now();
                if let Some(p) = &mut self.pool {
                    p.on_event(ev, &mut self.core, now);
                }
            }
            SchedulerMsg::Status(reply) => {
                let _ = reply.send(self.status());
            }
            SchedulerMsg::Series(since, reply) => {
                let _ = reply.send(self.series.points_since(since));
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
                        .locate(o)
                        .iter()
                        .filter_map(|n| self.sessions.name(n).map(str::to_string))
                        .collect(),
                    None => Vec::new(),
                };
                let _ = reply.send(names);
            }
            SchedulerMsg::Job(name, reply) => {
                let _ = reply.send(self.jobs.view(&name, &self.tasks));
            }
            SchedulerMsg::CancelJob(name, reply) => {
                let _ = reply.send(self.cancel_job(&name));
            }
            SchedulerMsg::Object(uri, reply) => {
                let view = self
                    .objects
                    .view(&uri, &self.core, &self.sessions, &self.tasks);
                let _ = reply.send(view);
            }
            SchedulerMsg::Place(uri, name, reply) => {
                let (sh, tasks) = (&mut shared!(self), &self.tasks);
                let _ = reply.send(placement::place(&uri, &name, sh, tasks, &mut self.names));
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
                let _ = reply.send(self.batches.view(id));
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
        let (worker_list, pool) =
            pool::workers_view(self.pool.as_ref(), &self.core, &self.sessions);
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
            recent_failures: self.series.recent_failures(),
            links: prefetch::links(&self.core, &self.sessions),
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
        let order = match placement::check_hints(&defs, &self.sessions, &self.core)
            .and_then(|()| self.jobs.resolve_policies(&mut defs, &self.core))
            .and_then(|()| dataflow::check(&defs, &self.objects, &self.tasks))
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
        self.series.note_failure(&o);
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

/// Messages from workers and the core's actions, routed among the owners.
impl Scheduler {
    fn worker_up(&mut self, conn: u64, hello: ToDispatcher, link: WorkerLink) {
        let ToDispatcher::Hello {
            name,
            slots,
            memory,
            gpus,
            disk,
            peer_url,
            held,
            request,
            leaves_in_s,
            eviction,
            cache_quota,
            rack,
            ..
        } = hello
        else {
            return;
        };
        let node = self.sessions.next_node();
        let now = self.now();
        let capacity = Resources {
            cores: slots.max(1),
            memory: memory.unwrap_or(u64::MAX),
            gpus,
            disk: disk.unwrap_or(u64::MAX),
        };
        if let Err(e) = self.core.handle_node_joined_with(node, capacity, now) {
            tracing::error!("worker {name}: {e}");
            return;
        }
        let label = self.names.id(&name);
        let _ = self.core.handle_node_named(node, label);
        let _ = self
            .core
            .handle_node_cache(node, cache_quota, eviction.unwrap_or_default(), now);
        if let Some(r) = rack.as_deref().filter(|r| !r.is_empty()) {
            let rack = self.prefetch.rack_id(r);
            let _ = self.core.handle_node_rack(node, rack);
        }
        if let Some(s) = leaves_in_s.filter(|s| s.is_finite() && *s >= 0.0) {
            let ends = now + Duration::from_secs_f64(s.min(1e9));
            self.core.handle_node_deadline(node, Some(ends));
        }
        self.comm.attach(node, link);
        self.comm.send(
            node,
            ToWorker::Welcome {
                node: node.0,
                heartbeat_ms: self.cfg.heartbeat.as_millis() as u64,
            },
        );
        if self.shutting_down {
            self.comm.send(node, ToWorker::Shutdown);
        }
        tracing::info!(worker = %name, slots, peer = %peer_url, "worker joined");
        if let Some(p) = &self.pool {
            p.joined(&request, &mut *self.comm);
        }
        self.sessions.insert(
            node,
            Session {
                conn,
                name,
                request,
                peer_url,
                slots,
                last_seen: Instant::now(),
                cache: (cache_quota, 0, 0),
            },
        );
        // Its share of the storage cap reaches it before any task or fetch does.
        self.prefetch.share_storage_cap(&mut shared!(self));
        self.cached(node, held);
    }

    /// `node` holds these objects. A version not yet known is taken as the current one until a
    /// lookup says otherwise; a copy of another version than the current one is dropped.
    fn cached(&mut self, node: NodeId, held: Vec<Held>) {
        let now = self.now();
        let mut stale = Vec::new();
        for h in held {
            let o = self.objects.intern(&h.uri);
            let known = self.objects.version_mut(o);
            if known.is_empty() {
                *known = h.version.clone();
            }
            if *known == h.version {
                let _ = self.core.handle_object_cached(node, o, now);
                if let Some(p) = &mut self.pool {
                    p.handed_off(node, o, &mut *self.comm);
                }
                self.prefetch.move_ended(node, o, &mut shared!(self));
                self.batches.cached(node, o, &mut shared!(self));
            } else {
                stale.push(h.uri);
            }
        }
        if !stale.is_empty() {
            shared!(self).send_connected(node, ToWorker::Drop { uris: stale });
        }
    }

    fn on_worker_message(&mut self, conn: u64, msg: ToDispatcher) {
        let Some(node) = self.sessions.node_of(conn) else {
            // A connection already given up: its results belong to attempts run again elsewhere.
            if let ToDispatcher::Finished(r) = msg {
                tracing::warn!(task = %r.task, attempt = r.attempt, "stale result refused (its worker was given up)");
            }
            return;
        };
        if let Some(s) = self.sessions.get_mut(&node) {
            s.last_seen = Instant::now();
        }
        let now = self.now();
        match msg {
            ToDispatcher::Heartbeat | ToDispatcher::Hello { .. } => {}
            ToDispatcher::Load {
                load1,
                cache_used,
                cache_objects,
            } => {
                let slots = self.sessions.get(&node).map_or(1, |s| s.slots.max(1));
                self.core.handle_node_load(node, load1 / slots as f64);
                if let (Some(s), Some(used)) = (self.sessions.get_mut(&node), cache_used) {
                    s.cache.1 = used;
                    s.cache.2 = cache_objects.unwrap_or(0);
                }
            }
            ToDispatcher::Cached { objects } => self.cached(node, objects),
            ToDispatcher::Evicted { uris } => {
                for uri in uris {
                    if let Some(o) = self.objects.get(&uri) {
                        let _ = self.core.handle_object_evicted(node, o, now);
                    }
                }
            }
            ToDispatcher::Finished(report) => self.finished(node, report),
            ToDispatcher::LookedUp { id, results } => self.looked_up(node, id, results),
            ToDispatcher::Leaving => self.node_lost(node, "it is stopping", false),
            ToDispatcher::FetchFailed { uri, error } => self.fetch_failed(node, &uri, &error),
            ToDispatcher::Transferred {
                from,
                bytes,
                seconds,
            } => self.transferred(node, from.as_deref(), bytes, seconds),
            ToDispatcher::BadCopy { uri, peer } => {
                prefetch::bad_copy(node, &uri, &peer, &mut shared!(self))
            }
        }
    }

    fn finished(&mut self, node: NodeId, mut report: TaskReport) {
        let Some(t) = self.tasks.id_of(&report.task) else {
            return;
        };
        report.hint_held = placement::hint_held(&self.tasks.get(t).def, &self.sessions, node);
        let lost = report
            .lost_input
            .as_ref()
            .and_then(|uri| self.objects.get(uri));
        let outcome = workers::outcome_of(&report, lost);
        let now = self.now();
        let current = matches!(self.core.task_state(t), Some(TaskState::Running { node: n, attempt, .. }) if n == node && attempt == report.attempt);
        if current && outcome == Outcome::Succeeded {
            // What it wrote to tmp:// is on its worker: readers may now be sent there.
            for k in &report.kept {
                let o = self.objects.intern(&k.uri);
                *self.objects.version_mut(o) = k.sha256.clone();
                self.objects.set_tmp_size(o, k.size);
                self.core.handle_intermediate_size(o, k.size);
                let _ = self.core.handle_object_cached(node, o, now);
                placement::copy_placed(o, &mut shared!(self));
            }
        }
        let remake = matches!(self.tasks.get(t).phase, Phase::Done(_));
        let result = self
            .core
            .handle_task_finished(t, report.attempt, outcome, now);
        if !report.kept.is_empty() && !matches!(result, Ok(TaskState::Finished(Outcome::Succeeded)))
        {
            // Not a success the core took: what it kept is no one's input.
            let uris = report.kept.iter().map(|k| k.uri.clone()).collect();
            shared!(self).send_connected(node, ToWorker::Drop { uris });
        }
        if remake && result.is_ok() {
            // A producer run again to remake a lost object: its recorded outcome stands.
            tracing::info!(task = %report.task, attempt = report.attempt, "ran again to remake its intermediate objects: {}", if report.succeeded() { "done".to_string() } else { report.failure() });
            self.attempt_failed(&report);
            return;
        }
        match result {
            Ok(TaskState::Queued) => {
                // A retryable failure with retries left: the task runs again; this attempt's
                // report is kept with the attempt.
                tracing::info!(task = %report.task, attempt = report.attempt, "failed ({}); retrying", report.failure());
                self.tasks.list_as(t, Listed::Queued);
                self.attempt_failed(&report);
            }
            Ok(state) => {
                let st = match state {
                    TaskState::Cancelled => OutcomeState::Cancelled,
                    TaskState::Finished(Outcome::Succeeded) => OutcomeState::Succeeded,
                    _ => OutcomeState::Failed,
                };
                workers::add_traffic(&mut self.status, &report);
                self.tasks.get_mut(t).phase = Phase::Done(st);
                let o = TaskOutcome {
                    id: report.task.clone(),
                    state: st,
                    attempt: report.attempt,
                    node: self.sessions.name(&node).map(str::to_string),
                    exit_code: report.exit_code,
                    error: report.error.clone(),
                    result_json: serde_json::to_string(&report).expect("report serializes"),
                    finished_at: report.finished_at,
                };
                self.record_outcome(t, o);
                if st == OutcomeState::Succeeded {
                    self.wake_deferred(t);
                }
            }
            Err(CoreError::StaleAttempt { .. })
            | Err(CoreError::UnknownTask(_))
            | Err(CoreError::NotRunning(_)) => {
                tracing::warn!(task = %report.task, attempt = report.attempt, "stale result refused");
            }
            Err(e) => tracing::error!(task = %report.task, "result refused: {e}"),
        }
    }

    /// An attempt ended and its task goes on (a retry, a remake): its traffic is counted and
    /// its report kept with the attempt.
    fn attempt_failed(&mut self, report: &TaskReport) {
        workers::add_traffic(&mut self.status, report);
        self.progress.attempt_result(
            report.task.clone(),
            report.attempt,
            serde_json::to_string(report).expect("report serializes"),
        );
    }

    /// `node` is gone: lost (`crashed`: its running tasks count a crash) or left cleanly.
    fn node_lost(&mut self, node: NodeId, why: &str, crashed: bool) {
        let Some(session) = self.sessions.remove(node) else {
            return;
        };
        self.comm.detach(node);
        self.lookups.node_lost(node);
        if let Some(p) = &self.pool {
            p.disconnected(&session, &mut *self.comm);
        }
        self.batches.node_left(node, &mut shared!(self));
        let running = self.core.running_on(node).to_vec();
        if crashed {
            tracing::warn!(worker = %session.name, "worker lost ({why}); its tasks run again elsewhere");
        } else {
            tracing::info!(worker = %session.name, "worker left ({why}); its tasks run again elsewhere");
        }
        let now = self.now();
        let lost = if crashed {
            self.core.handle_node_lost(node, now)
        } else {
            self.core.handle_node_left(node, now)
        };
        let Ok(lost) = lost else { return };
        let limit = self.core.config().crash_limit;
        for t in running {
            if lost.failed.contains(&t) {
                self.finish_without_running(
                    t,
                    OutcomeState::Failed,
                    Some(format!("its worker was lost {limit} times")),
                );
            } else if lost.cancelled.contains(&t) {
                self.finish_without_running(
                    t,
                    OutcomeState::Cancelled,
                    Some("cancelled; its worker was lost while it ran".into()),
                );
            } else if !matches!(self.tasks.get(t).phase, Phase::Done(_)) {
                self.tasks.list_as(t, Listed::Queued);
            }
        }
    }

    fn check_heartbeats(&mut self) {
        for node in self.sessions.silent(self.cfg.heartbeat_timeout) {
            self.node_lost(node, "heartbeat timeout", true);
        }
    }

    /// Send waiting lookups to the connected workers.
    fn send_lookups(&mut self) {
        // With no worker, an elastic pool grows for these tasks: the core counts them as
        // demand (`handle_waiting_demand`).
        if !self.lookups.has_queued() || self.sessions.is_empty() {
            return;
        }
        let mut workers: Vec<NodeId> = self.sessions.nodes().collect();
        workers.sort();
        self.lookups
            .send(&workers, &mut *self.comm, self.cfg.lookup_timeout);
    }

    /// A worker answered a lookup: record sizes and versions (a changed version invalidates every
    /// cached copy), and let the tasks whose every input is now known move on, in submission
    /// order: into the core's queue, or failed with their first lookup error.
    fn looked_up(&mut self, node: NodeId, id: u64, results: Vec<LookupResult>) {
        let mut ready = Vec::new();
        for (uri, result, waiters) in self.lookups.answered(node, id, results) {
            let o = self.objects.intern(&uri);
            let mut waiting = Vec::with_capacity(waiters.len());
            for w in waiters {
                match w {
                    Waiter::Task(t) => waiting.push(t),
                    Waiter::Stage(s) => self.batches.looked_up(s, o, &uri, &result),
                }
            }
            let error = match result {
                Ok((size, version)) => {
                    workers::note_version(o, &uri, version, &mut shared!(self));
                    for &t in &waiting {
                        if let Some(i) = self.tasks.get_mut(t).inputs.iter_mut().find(|i| i.0 == o)
                        {
                            i.1 = size;
                        }
                    }
                    None
                }
                Err(e) => Some(format!("input {}: {e}", crate::uri::redacted(&uri))),
            };
            for t in waiting {
                if let Phase::Lookup {
                    pending,
                    error: first,
                    ..
                } = &mut self.tasks.get_mut(t).phase
                {
                    *pending -= 1;
                    if first.is_none() {
                        first.clone_from(&error);
                    }
                    if *pending == 0 {
                        ready.push(t);
                    }
                }
            }
        }
        ready.sort();
        for t in ready {
            self.inputs_known(t);
        }
        self.batches.pump(&mut shared!(self));
    }

    /// Every input of `t` (in [`Phase::Lookup`]) was looked up: it enters the core's queue, or
    /// fails with its first lookup error.
    fn inputs_known(&mut self, t: TaskId) {
        let Phase::Lookup { error, .. } = self.tasks.get(t).phase.clone() else {
            return;
        };
        let now = self.now();
        match error {
            Some(e) => {
                // The tasks that depend on it are abandoned (`Action::Abandon`).
                let _ = self.core.handle_failed_unrun(t, now);
                self.finish_without_running(t, OutcomeState::Failed, Some(e))
            }
            None => {
                self.looking_up -= 1;
                self.tasks.get_mut(t).phase = Phase::Live;
                let sizes: Vec<(ObjectId, u64)> = self.tasks.get(t).inputs.clone();
                self.status.demand_bytes += sizes.iter().map(|(_, s)| s).sum::<u64>();
                if let Err(e) = self.core.handle_inputs_known(t, &sizes, now) {
                    tracing::error!(task = %self.tasks.get(t).def.id, "{e}");
                }
            }
        }
    }

    /// A worker could not fetch `uri`.
    fn fetch_failed(&mut self, node: NodeId, uri: &str, error: &str) {
        tracing::info!(uri = %crate::uri::redacted(uri), "fetch failed: {error}");
        if let Some(o) = self.objects.get(uri) {
            let now = self.now();
            self.core.handle_prefetch_failed(node, o, now);
            self.prefetch.move_ended(node, o, &mut shared!(self));
            self.batches
                .fetch_failed(node, o, error, &mut shared!(self));
        }
    }

    /// `node` received `bytes` from `from` (a peer's URL, None: storage) in `seconds`.
    fn transferred(&mut self, node: NodeId, from: Option<&str>, bytes: u64, seconds: f64) {
        let from = match from {
            None => Endpoint::Storage,
            Some(url) => match self.sessions.at_url(url) {
                Some(n) => Endpoint::Node(n),
                None => return, // it left
            },
        };
        self.core.handle_transfer(from, node, bytes, seconds);
        self.batches.transferred(node, from, bytes, &self.sessions);
    }

    /// Carry out the core's actions.
    fn drain_actions(&mut self) {
        let now = self.now();
        while let Some(action) = self.core.poll_action(now) {
            match action {
                Action::Dispatch(d) => workers::dispatch(
                    d,
                    &mut shared!(self),
                    &mut self.tasks,
                    &mut self.progress,
                    self.cfg.task_defaults.task_timeout,
                ),
                Action::Provision { nodes } => match &self.pool {
                    Some(_) => self.comm.pool(PoolCmd::Acquire(nodes)),
                    // Static: workers are the ones that connect.
                    None => self.core.handle_provision_failed(nodes, self.now()),
                },
                Action::Release { node, handoff } => self.release(node, handoff),
                Action::Abandon { task, why } => {
                    let limit = self.core.config().crash_limit;
                    let error = dataflow::abandoned_why(
                        why,
                        &self.tasks,
                        &self.objects,
                        &self.names,
                        limit,
                    );
                    if !matches!(self.tasks.get(task).phase, Phase::Done(_)) {
                        self.finish_without_running(task, OutcomeState::Failed, Some(error));
                    }
                }
                Action::DropObject { object, nodes } => {
                    dataflow::drop_object(&mut shared!(self), object, nodes)
                }
                Action::Replicate { object, from, to } => {
                    let size = self.objects.tmp_size(object).unwrap_or(0);
                    shared!(self).fetch_from_peer(object, size, from, to);
                }
                Action::Prefetch { object, size, node } => {
                    prefetch::prefetch_object(object, size, node, &mut shared!(self))
                }
                Action::Evict { node, object } => {
                    prefetch::evict_copy(node, object, &mut shared!(self))
                }
                Action::Move {
                    object,
                    size,
                    from,
                    to,
                } => self
                    .prefetch
                    .move_copy(object, size, from, to, &mut shared!(self)),
            }
        }
    }

    /// The core released idle worker `node`: its session is closed for the core, batches give
    /// up their requests to it, and it hands its cache off before it leaves (an elastic pool)
    /// or leaves at once.
    fn release(&mut self, node: NodeId, handoff: Vec<Handoff>) {
        // Its messages are no longer the core's business; its peer server still serves.
        let Some(s) = self.sessions.remove(node) else {
            return;
        };
        self.batches.node_left(node, &mut shared!(self));
        let sh = &mut shared!(self);
        match self.pool.as_mut() {
            Some(p) => p.release(node, s, handoff, sh),
            None => pool::finish_release(sh.comm, false, node, s),
        }
    }

    /// Accept a batch to stage (`diffuse stage`): its number, or why not.
    fn stage(&mut self, ask: StageAsk) -> Result<u64, String> {
        let drop = ask.drop;
        let id = self
            .batches
            .stage(ask, &mut shared!(self), &mut self.lookups)?;
        if !drop {
            self.send_lookups();
            self.batches.pump(&mut shared!(self));
        }
        Ok(id)
    }

    /// Cancel every unfinished task of job `name`, the last taken in first (so a task ends
    /// cancelled before the task it depends on does). None if no task names it.
    fn cancel_job(&mut self, name: &str) -> Option<JobCancelled> {
        let tasks = self.jobs.tasks(name)?.to_vec();
        let mut done = JobCancelled {
            job: name.to_string(),
            ..JobCancelled::default()
        };
        for t in tasks.into_iter().rev() {
            let id = self.tasks.get(t).def.id.clone();
            done.count(self.cancel(&id));
        }
        Some(done)
    }
}
