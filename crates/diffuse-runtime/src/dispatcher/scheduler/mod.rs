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
//! owners it touches. The handlers that touch several owners are functions of those owners, in
//! [`intake`], [`outcomes`] and [`worker_msgs`]: they take [`shared::Shared`] (the core,
//! sessions, objects and comm), the task [`ledger::Ledger`] and whichever other owner they
//! need, never the scheduler.
//!
//! | module | what it decides or holds |
//! |---|---|
//! | this one | the scheduler: its owners, the round loop, messages and the core's actions routed to them; a worker's session opened and closed |
//! | [`msg`] | [`SchedulerMsg`], the thread's one input |
//! | [`clock`] | [`Now`], the clock's reading its driver hands in with each step (the scheduler reads no clock) |
//! | [`ledger`] | the task ledger: the task table, jobs, lookups deferred for other tasks, journal traffic, the dashboard's series, the scheduler's own counters; what changes with a task's state |
//! | [`intake`] | tasks taken in: submitted, replayed, their inputs looked up, into the core's queue |
//! | [`outcomes`] | tasks ended or run again: a worker's report, a worker gone, a cancel, tasks a fixed pool cannot hold |
//! | [`worker_msgs`] | what workers say of themselves and their caches: hello, copies held, fetch failures, transfers |
//! | [`queries`] | questions that change nothing ([`SchedulerQuery`]) answered from the owners as they stand |
//! | [`views`] | the answers: status counters, task, batch and link views, failures, submission errors |
//! | [`comm`] | the seam to the outside: [`Comm`], [`LiveComm`], [`comm::RecordingComm`] |
//! | [`shared`] | [`shared::Shared`]: the core, sessions, objects and comm borrowed for one step; peer reads |
//! | [`sessions`] | the registry of connected workers |
//! | [`progress`] | the round's journal traffic; outcomes not yet confirmed (held by the ledger) |
//! | [`tasks`] | the task table: phases, the index by state, batches |
//! | [`objects`] | the object table (URIs, versions, producers, sizes, placements); Hercules' locate view |
//! | [`workers`] | an attempt's assignment sent, a changed version dropped, a report's outcome |
//! | [`dataflow`] | a batch's dependencies checked and ordered; what a task waits for; abandoned tasks' errors; released objects; lookups deferred until producers succeed ([`dataflow::Deferred`], held by the ledger) |
//! | [`lookup`] | input lookups asked of workers |
//! | [`jobs`] | jobs: their task lists and counters, a job's own dispatch policy (held by the ledger) |
//! | [`placement`] | workers' names for the core, strict hints checked at submission, Hercules' place |
//! | [`prefetch`] | MixApart: racks, prefetches carried out, the storage cap shared by demand; 2Mark's evictions and moves |
//! | [`pool`] | the elastic pool: provisioning decisions out, workers by state in, cache hand-off |
//! | [`results`] | results reused by content: kept results by identity, input digests, identical tasks in flight held back |
//! | [`batches`] | batches staged to workers (`diffuse stage`, GDS) |
//! | [`series`] | the dashboard's samples (`GET /v1/series`) and the last failures (held by the ledger) |
//! | [`writer`] | the journal writer thread |

pub mod batches;
pub mod clock;
pub mod comm;
pub mod dataflow;
pub mod intake;
pub mod jobs;
pub mod ledger;
pub mod lookup;
pub mod msg;
pub mod objects;
pub mod outcomes;
pub mod placement;
pub mod pool;
pub mod prefetch;
pub mod progress;
pub mod queries;
pub mod results;
pub mod series;
pub mod sessions;
pub mod shared;
pub mod tasks;
#[cfg(test)]
mod tests;
pub mod views;
pub mod worker_msgs;
pub mod workers;
pub mod writer;

pub use clock::Now;
pub use comm::{Comm, LiveComm};
pub use msg::{SchedulerMsg, SchedulerQuery};
pub use views::{
    AttemptView, BatchView, LinkView, ListQuery, Status, SubmitError, Submitted, TaskView,
};

use crate::journal::Journal;
use crate::proto::{ToDispatcher, ToWorker};
use crate::provisioner::PoolCmd;
use batches::{Batches, StageAsk};
use comm::WorkerLink;
use diffuse_core::{Action, Core, Handoff, NodeId, Time};
use ledger::Ledger;
use lookup::Lookups;
use objects::ObjectTable;
use placement::NodeNames;
use pool::PoolLink;
use prefetch::Prefetch;
use results::Results;
use sessions::Sessions;
use shared::Shared;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};
use tasks::Phase;

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
    /// Reuse kept results (`--reuse`).
    pub reuse: bool,
    /// Where the result index is kept: the journal's file unless set (`diffuse run` keeps it
    /// beside its worker caches).
    pub results_store: Option<std::path::PathBuf>,
}

/// The scheduler's state: the core, and the owners it composes.
pub struct Scheduler {
    core: Core,
    /// Where submissions are committed (the journal).
    journal: Box<dyn progress::TaskLog>,
    cfg: SchedulerConfig,
    /// When it started (the core's time 0).
    start: Instant,
    /// The clock's reading for the step under way, handed in by its driver.
    clock: Now,
    /// Tasks read back from the journal at start, and how many of them had ended.
    replayed: (u64, u64),
    /// Every task and what changes with its state.
    ledger: Ledger,
    /// Every object named so far: URIs, versions, producers, placements.
    objects: ObjectTable,
    /// Workers' names as the core knows them.
    names: NodeNames,
    /// Connected workers.
    sessions: Sessions,
    /// The outside: workers' sessions, the pool, the journal writer.
    comm: Box<dyn Comm>,
    /// The elastic pool, unless static.
    pool: Option<PoolLink>,
    /// Workers were told to finish: one that connects later is told at once.
    shutting_down: bool,
    /// Input lookups asked of workers.
    lookups: Lookups,
    /// Racks, storage shares, 2Mark's moves.
    prefetch: Prefetch,
    /// Batches staged to workers (`diffuse stage`).
    batches: Batches,
    /// Kept results, input digests, identical tasks in flight.
    results: Results,
}

/// The scheduler's [`Shared`] borrow (core, sessions, objects, comm) at this moment, leaving
/// its other fields free to borrow alongside.
macro_rules! shared {
    ($s:ident) => {
        Shared {
            now: core_time($s.start, $s.clock),
            at: $s.clock,
            core: &mut $s.core,
            sessions: &$s.sessions,
            objects: &mut $s.objects,
            comm: &mut *$s.comm,
        }
    };
}

/// The core's time at `now`: since the scheduler started.
fn core_time(start: Instant, now: Now) -> Time {
    Time(now.since(start).as_nanos() as u64)
}

impl Scheduler {
    /// A scheduler over `core` started at `now`, replaying every task of `journal`: those with
    /// an outcome are shown as ended, the others are queued again. What it does to the outside
    /// goes through `comm` ([`LiveComm`] in the dispatcher).
    pub fn new(
        core: Core,
        journal: Journal,
        cfg: SchedulerConfig,
        comm: Box<dyn Comm>,
        now: Now,
    ) -> Result<Scheduler, crate::journal::JournalError> {
        let start = now.instant;
        let mut comm = comm;
        let (mut core, mut ledger) = (core, Ledger::new(cfg.task_defaults));
        let (mut objects, mut names) = (ObjectTable::default(), NodeNames::default());
        let (sessions, mut lookups) = (Sessions::default(), Lookups::default());
        let mut sh = Shared {
            now: Time(0),
            at: now,
            core: &mut core,
            sessions: &sessions,
            objects: &mut objects,
            comm: &mut *comm,
        };
        let (journal, submitted, ended) =
            intake::replay(journal, &mut sh, &mut ledger, &mut names, &mut lookups)?;
        let store_path = cfg.results_store.clone().unwrap_or(cfg.journal.clone());
        let store = crate::reuse::store::Store::open(&store_path).map_err(|source| {
            crate::journal::JournalError::Open {
                path: format!("{} (its result index)", store_path.display()),
                source,
            }
        })?;
        let results = Results::new(cfg.reuse, Some(store));
        Ok(Scheduler {
            core,
            journal: Box::new(journal),
            ledger,
            cfg,
            start,
            clock: now,
            replayed: (submitted, ended),
            objects,
            names,
            sessions,
            comm,
            pool: None,
            shutting_down: false,
            lookups,
            prefetch: Prefetch::default(),
            batches: Batches::default(),
            results,
        })
    }

    /// Carry provisioning decisions out through this pool.
    pub fn with_pool(mut self, link: PoolLink) -> Scheduler {
        self.pool = Some(link);
        self
    }

    /// Commit submissions to `log` instead of the journal (a test's, which can fail).
    #[cfg(test)]
    pub(crate) fn set_task_log(&mut self, log: Box<dyn progress::TaskLog>) {
        self.journal = log;
    }

    /// Count the outcomes confirmed on disk in `ended` (the API's long polls wait on it).
    pub fn with_ended(mut self, ended: tokio::sync::watch::Sender<u64>) -> Scheduler {
        self.ledger.ended = Some(ended);
        self
    }

    /// Tasks read back from the journal at start, and how many of them had ended.
    pub fn replayed(&self) -> (u64, u64) {
        self.replayed
    }

    /// The core's time of the step under way.
    fn now(&self) -> Time {
        core_time(self.start, self.clock)
    }

    /// Run until every sender of `rx` is gone: the driver of the live dispatcher, which reads
    /// the clock for each message, tick and round.
    pub fn run(mut self, rx: Receiver<SchedulerMsg>) {
        let tick = Duration::from_millis(100);
        let mut next_check = Now::read().instant + tick;
        loop {
            let mut wait = next_check.saturating_duration_since(Now::read().instant);
            if self.ledger.progress.ending() > 0 {
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
                self.handle(c, Now::read());
                // Group commit: take everything already waiting before touching the disk.
                while let Ok(c) = rx.try_recv() {
                    self.handle(c, Now::read());
                    if self.ledger.progress.submissions() > 50_000 {
                        break;
                    }
                }
            }
            let now = Now::read();
            if now.instant >= next_check {
                self.tick(now);
                next_check = now.instant + tick;
            }
            self.round(now);
        }
    }

    /// The periodic checks at `now` (every 100 ms): heartbeats, hand-offs, tasks no worker can
    /// hold, the storage cap's shares, the dashboard's sample, the core's timers.
    pub fn tick(&mut self, now: Now) {
        self.clock = now;
        for node in self
            .sessions
            .silent(self.cfg.heartbeat_timeout, now.instant)
        {
            self.node_lost(node, "heartbeat timeout", true);
        }
        if let Some(p) = &mut self.pool {
            p.finish_handoffs(&mut *self.comm, now.instant);
        }
        if let Some(pool) = self.cfg.fixed_pool {
            outcomes::fail_unfit(pool, &mut shared!(self), &mut self.ledger);
        }
        let staging = self.batches.storage_reads();
        self.prefetch
            .share_storage_cap(&mut shared!(self), &staging);
        if self.ledger.series.due(now.instant) {
            let s = self.status();
            self.ledger.series.sample(&s, now);
        }
        let now = self.now();
        self.core.handle_waiting_demand(self.ledger.looking_up());
        if self.core.poll_timeout().is_some_and(|t| t <= now) {
            self.core.handle_timeout(now);
        }
    }

    /// The end of a round: commit its submissions (they reach the disk before any of their
    /// tasks moves on), send lookups, carry out the core's actions, hand the journal writer
    /// what happened and take its confirmations.
    pub fn round(&mut self, now: Now) {
        self.clock = now;
        if !(self.ledger.progress).flush_submissions(&mut *self.journal, now.instant) {
            // Held until the journal takes them: nothing moves meanwhile.
            return;
        }
        self.send_lookups();
        self.drain_actions();
        self.ledger.confirm_outcomes(&mut *self.comm);
    }

    /// Take one message, at `now`.
    pub fn handle(&mut self, cmd: SchedulerMsg, now: Now) {
        self.clock = now;
        let (ledger, names, lookups) = (&mut self.ledger, &mut self.names, &mut self.lookups);
        match cmd {
            SchedulerMsg::Submit(defs, reply) => {
                intake::submit(defs, reply, &mut shared!(self), ledger, names, lookups)
            }
            SchedulerMsg::WorkerUp { conn, hello, link } => self.worker_up(conn, hello, link),
            SchedulerMsg::FromWorker(conn, msg) => self.on_worker_message(conn, msg),
            SchedulerMsg::WorkerDown(conn) => {
                if let Some(node) = self.sessions.node_of(conn) {
                    self.node_lost(node, "connection closed", true);
                }
            }
            SchedulerMsg::Cancel(id, reply) => {
                let (sh, results) = (&mut shared!(self), &mut self.results);
                let _ = reply.send(outcomes::cancel(&id, sh, ledger, lookups, results));
            }
            SchedulerMsg::CancelJob(name, reply) => {
                let (sh, results) = (&mut shared!(self), &mut self.results);
                let _ = reply.send(outcomes::cancel_job(&name, sh, ledger, lookups, results));
            }
            SchedulerMsg::Results { clear, reply } => {
                let before = self.results.view();
                if clear {
                    self.results.clear();
                }
                let _ = reply.send(before);
            }
            SchedulerMsg::Pool(ev) => {
                let now = self.now();
                if let Some(p) = &mut self.pool {
                    p.on_event(ev, &mut self.core, now);
                }
            }
            SchedulerMsg::Query(q) => self.reader().answer(q),
            SchedulerMsg::Place(uri, name, reply) => {
                let (sh, tasks) = (&mut shared!(self), &self.ledger.tasks);
                let _ = reply.send(placement::place(&uri, &name, sh, tasks, names));
            }
            SchedulerMsg::Stage(ask, reply) => {
                let _ = reply.send(self.stage(ask));
            }
            SchedulerMsg::ShutdownWorkers => {
                self.shutting_down = true;
                for node in self.sessions.nodes() {
                    self.comm.send(node, ToWorker::Shutdown);
                }
            }
        }
    }

    /// The owners, borrowed to answer a question.
    fn reader(&self) -> queries::Reader<'_> {
        queries::Reader {
            core: &self.core,
            ledger: &self.ledger,
            sessions: &self.sessions,
            objects: &self.objects,
            pool: self.pool.as_ref(),
            batches: &self.batches,
            results: &self.results,
            start: self.start,
            clock: self.clock,
            writer_error: self.comm.writer_error(),
        }
    }

    /// The counters of `/v1/status`.
    fn status(&self) -> Status {
        self.reader().status()
    }

    /// Connected workers and their slot counts (diagnostics).
    pub fn workers(&self) -> Vec<(String, u32)> {
        self.sessions
            .values()
            .map(|s| (s.name.clone(), s.slots))
            .collect()
    }
}

/// Workers' sessions opened and closed, their messages and the core's actions routed among the
/// owners.
impl Scheduler {
    /// A worker connects: the core learns it, its session opens, it is welcomed, and what it
    /// already holds is taken in.
    fn worker_up(&mut self, conn: u64, hello: ToDispatcher, link: WorkerLink) {
        if !matches!(hello, ToDispatcher::Hello { .. }) {
            return;
        }
        let node = self.sessions.next_node();
        let (names, prefetch) = (&mut self.names, &mut self.prefetch);
        let sh = &mut shared!(self);
        let Some((session, held)) = worker_msgs::introduce(conn, hello, node, sh, names, prefetch)
        else {
            return;
        };
        sh.comm.attach(node, link);
        sh.comm.send(
            node,
            ToWorker::Welcome {
                protocol: crate::proto::PROTOCOL,
                node: node.0,
                heartbeat_ms: self.cfg.heartbeat.as_millis() as u64,
                heartbeat_timeout_ms: Some(self.cfg.heartbeat_timeout.as_millis() as u64),
            },
        );
        if self.shutting_down {
            sh.comm.send(node, ToWorker::Shutdown);
        }
        tracing::info!(worker = %session.name, slots = session.slots, peer = %session.peer_url, "worker joined");
        if let Some(p) = &self.pool {
            p.joined(&session.request, sh.comm);
        }
        self.sessions.insert(node, session);
        // Its share of the storage cap reaches it before any task or fetch does.
        let staging = self.batches.storage_reads();
        self.prefetch
            .share_storage_cap(&mut shared!(self), &staging);
        let (pool, prefetch, batches) = (self.pool.as_mut(), &mut self.prefetch, &mut self.batches);
        worker_msgs::cached(node, held, &mut shared!(self), pool, prefetch, batches);
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
            s.last_seen = self.clock.instant;
        }
        let now = self.now();
        let (ledger, lookups) = (&mut self.ledger, &mut self.lookups);
        let (pool, prefetch, batches) = (self.pool.as_mut(), &mut self.prefetch, &mut self.batches);
        match msg {
            ToDispatcher::Heartbeat | ToDispatcher::Hello { .. } => {}
            ToDispatcher::Load {
                load1,
                cache_used,
                cache_objects,
                warm,
            } => {
                let slots = self.sessions.get(&node).map_or(1, |s| s.slots.max(1));
                self.core.handle_node_load(node, load1 / slots as f64);
                if let Some(s) = self.sessions.get_mut(&node) {
                    if let Some(used) = cache_used {
                        s.cache.1 = used;
                        s.cache.2 = cache_objects.unwrap_or(0);
                    }
                    s.warm = warm.unwrap_or_default();
                }
            }
            ToDispatcher::Started { task, attempt } => {
                if let Some(t) = self.ledger.tasks.id_of(&task) {
                    self.core.handle_task_started(t, attempt);
                }
            }
            ToDispatcher::Cached { objects } => {
                let sh = &mut shared!(self);
                worker_msgs::cached(node, objects, sh, pool, prefetch, batches)
            }
            ToDispatcher::Evicted { uris } => {
                for uri in uris {
                    if let Some(o) = self.objects.get(&uri) {
                        let _ = self.core.handle_object_evicted(node, o, now);
                    }
                }
            }
            ToDispatcher::Finished(report) => {
                let results = &mut self.results;
                outcomes::finished(node, *report, &mut shared!(self), ledger, lookups, results)
            }
            ToDispatcher::LookedUp { id, results } => {
                let sh = &mut shared!(self);
                intake::looked_up(node, id, results, sh, ledger, lookups, batches)
            }
            ToDispatcher::Leaving => self.node_lost(node, "it is stopping", false),
            ToDispatcher::FetchFailed { uri, error } => {
                let sh = &mut shared!(self);
                worker_msgs::fetch_failed(node, &uri, &error, sh, prefetch, batches)
            }
            ToDispatcher::Transferred {
                from,
                bytes,
                seconds,
            } => {
                let sh = &mut shared!(self);
                worker_msgs::transferred(node, from.as_deref(), bytes, seconds, sh, batches)
            }
            ToDispatcher::BadCopy { uri, peer } => {
                prefetch::bad_copy(node, &uri, &peer, &mut shared!(self))
            }
        }
    }

    /// `node` is gone: lost (`crashed`: its running tasks count a crash) or left cleanly. Its
    /// session closes, its lookups and batches' requests go to others, and its tasks run again
    /// elsewhere ([`outcomes::worker_gone`]).
    fn node_lost(&mut self, node: NodeId, why: &str, crashed: bool) {
        let Some(session) = self.sessions.remove(node) else {
            return;
        };
        self.comm.detach(node);
        self.lookups.node_lost(node);
        if let Some(p) = &mut self.pool {
            p.disconnected(&session, &mut *self.comm);
            p.target_left(node, &mut *self.comm);
        }
        self.batches.node_left(node, &mut shared!(self));
        let sh = &mut shared!(self);
        let (ledger, results) = (&mut self.ledger, &mut self.results);
        outcomes::worker_gone(node, &session.name, why, crashed, sh, ledger, results);
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

    /// Carry out the core's actions.
    fn drain_actions(&mut self) {
        let now = self.now();
        while let Some(action) = self.core.poll_action(now) {
            match action {
                Action::Dispatch(d) => {
                    let (ledger, results) = (&mut self.ledger, &mut self.results);
                    workers::dispatch(d, &mut shared!(self), ledger, results)
                }
                Action::Provision { nodes } => match &self.pool {
                    Some(_) => self.comm.pool(PoolCmd::Acquire(nodes)),
                    // Static: workers are the ones that connect.
                    None => self.core.handle_provision_failed(nodes, self.now()),
                },
                Action::Release { node, handoff } => self.release(node, handoff),
                Action::Abandon { task, why } => {
                    let limit = self.core.config().crash_limit;
                    let tasks = &self.ledger.tasks;
                    let error =
                        dataflow::abandoned_why(why, tasks, &self.objects, &self.names, limit);
                    if !matches!(tasks.get(task).phase, Phase::Done(_)) {
                        let failed = crate::journal::OutcomeState::Failed;
                        self.ledger.finish_without_running(
                            task,
                            failed,
                            Some(error),
                            self.clock.unix,
                        );
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
                Action::Withdraw {
                    task,
                    attempt,
                    node,
                } => {
                    let id = self.ledger.tasks.get(task).def.id.clone();
                    shared!(self).send_connected(node, ToWorker::Withdraw { task: id, attempt });
                }
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
            Some(p) => {
                p.target_left(node, sh.comm);
                p.release(node, s, handoff, sh)
            }
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
}
