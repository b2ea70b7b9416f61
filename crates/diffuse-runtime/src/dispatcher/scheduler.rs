//! The scheduler thread: the one owner of the scheduling core.
//!
//! Everything that changes state arrives as a [`Cmd`] on one channel. Each round the thread
//! drains every pending command, commits all of the round's submissions to the journal in one
//! transaction (group commit), and only then answers the submitters and dispatches their tasks:
//! a submission is acknowledged only once it is on disk, and never runs before that.
//!
//! Dispatched attempts and outcomes go to a journal writer thread that group-commits them in the
//! background, so no fsync sits between a task finishing and its slot getting the next task.
//! Until the writer confirms an outcome, the scheduler keeps it in memory for queries. If the
//! dispatcher dies before the confirmation, the task has no outcome on disk and runs again
//! after restart (at-least-once execution, one recorded outcome).

use crate::journal::{Journal, OutcomeState, StoredTask, SubmittedTask, TaskOutcome};
use crate::proto::{
    AssignedInput, Assignment, Held, InputSource, TaskReport, ToDispatcher, ToWorker, Traffic,
};
use crate::spec::TaskDef;
use diffuse_core::{
    Action, Core, CoreError, Input, NodeId, ObjectId, Outcome, Source, TaskId, TaskSpec, TaskState,
    Time,
};
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc::UnboundedSender, oneshot};

/// What storage said of one input at submission: (size, version), or why the task must fail.
pub type InputStat = Result<(u64, String), String>;

/// A task ready for the scheduler: its definition and what storage said of each input.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The task as submitted.
    pub def: TaskDef,
    /// Per distinct input: URI and (size, version), or the error that makes the task fail.
    pub inputs: Vec<(String, InputStat)>,
}

/// Why a submission was refused (nothing of it was accepted).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// A task with this id was submitted before.
    #[error("task '{0}' already exists")]
    Duplicate(String),
    /// The journal could not commit it.
    #[error("journal: {0}")]
    Journal(String),
}

/// A query or command for the scheduler thread.
pub enum Cmd {
    /// Accept a batch; answered once it is journaled.
    Submit(Vec<Prepared>, oneshot::Sender<Result<usize, SubmitError>>),
    /// A worker connected and said hello.
    WorkerUp {
        /// Connection id (unique per WebSocket).
        conn: u64,
        /// Its hello.
        hello: ToDispatcher,
        /// Where to send it messages.
        tx: UnboundedSender<ToWorker>,
    },
    /// A message from a worker.
    FromWorker(u64, ToDispatcher),
    /// A worker's connection closed.
    WorkerDown(u64),
    /// Cancel a task.
    Cancel(String, oneshot::Sender<Result<String, String>>),
    /// Counters.
    Status(oneshot::Sender<Status>),
    /// One task's view.
    Task(String, oneshot::Sender<Option<TaskView>>),
    /// Tasks in a state (`queued`, `running`, `succeeded`, `failed`, `cancelled`), at most `limit`.
    List(Option<String>, usize, oneshot::Sender<Vec<TaskView>>),
    /// Names of the workers holding an object.
    Locate(String, oneshot::Sender<Vec<String>>),
    /// Ask every worker to finish and exit.
    ShutdownWorkers,
}

/// Dispatcher-wide counters (`/v1/status`, `/metrics`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Status {
    /// Tasks ever submitted (including those replayed from the journal).
    pub submitted: u64,
    /// Waiting in the queue.
    pub queued: u64,
    /// Dispatched and not finished.
    pub running: u64,
    /// Finished with exit code 0.
    pub succeeded: u64,
    /// Finished otherwise.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
    /// Connected workers.
    pub workers: u32,
    /// Slots on connected workers.
    pub slots: u64,
    /// Slots running a task.
    pub busy_slots: u64,
    /// Accesses and bytes by source, summed over finished attempts.
    pub traffic: Traffic,
    /// Seconds since the dispatcher started.
    pub uptime_s: f64,
}

/// What the API shows of a task.
#[derive(Clone, Debug, Serialize)]
pub struct TaskView {
    /// Task id.
    pub id: String,
    /// `queued`, `running`, `succeeded`, `failed` or `cancelled`.
    pub state: String,
    /// Worker it runs or ran on.
    pub node: Option<String>,
    /// Current or last attempt.
    pub attempt: u32,
    /// The recorded outcome, once there is one.
    pub outcome: Option<TaskOutcome>,
}

enum Phase {
    Live,
    Done(OutcomeState),
}

struct LiveTask {
    id: String,
    def: TaskDef,
    inputs: Vec<(ObjectId, u64)>,
    phase: Phase,
}

struct Session {
    conn: u64,
    name: String,
    peer_url: String,
    slots: u32,
    tx: UnboundedSender<ToWorker>,
    last_seen: Instant,
}

/// What the journal writer thread commits.
enum Write {
    Attempts(Vec<(String, u32, String)>),
    Outcomes(Vec<TaskOutcome>),
}

/// The journal writer thread and the channel of its commit confirmations.
struct Writer {
    tx: std::sync::mpsc::Sender<Write>,
    committed: Receiver<Vec<String>>,
    thread: std::thread::JoinHandle<()>,
}

impl Writer {
    fn start(path: &std::path::Path) -> Result<Writer, crate::journal::JournalError> {
        let mut journal = Journal::open(path)?;
        journal.relax_durability()?;
        let (tx, rx) = std::sync::mpsc::channel::<Write>();
        let (done_tx, committed) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    // Group commit: let a short window of writes accumulate.
                    std::thread::sleep(Duration::from_millis(20));
                    let mut attempts = Vec::new();
                    let mut outcomes = Vec::new();
                    for w in std::iter::once(first).chain(rx.try_iter()) {
                        match w {
                            Write::Attempts(a) => attempts.extend(a),
                            Write::Outcomes(o) => outcomes.extend(o),
                        }
                    }
                    if let Err(e) = journal.record_attempts(&attempts) {
                        tracing::error!("journal: {e}");
                    }
                    if let Err(e) = journal.record_outcomes(&outcomes) {
                        tracing::error!("journal: {e}");
                    }
                    let _ = done_tx.send(outcomes.into_iter().map(|o| o.id).collect());
                }
            })
            .expect("spawn journal writer");
        Ok(Writer {
            tx,
            committed,
            thread,
        })
    }
}

/// Settings of the scheduler thread.
pub struct SchedulerConfig {
    /// Heartbeat interval told to workers.
    pub heartbeat: Duration,
    /// A worker silent this long is given up.
    pub heartbeat_timeout: Duration,
    /// The journal file (the writer thread opens its own connection to it).
    pub journal: std::path::PathBuf,
}

/// The scheduler's state.
pub struct Scheduler {
    core: Core,
    journal: Journal,
    cfg: SchedulerConfig,
    start: Instant,
    tasks: Vec<LiveTask>,
    ids: FxHashMap<String, TaskId>,
    objects: FxHashMap<String, ObjectId>,
    uris: Vec<String>,
    versions: Vec<String>,
    sessions: FxHashMap<NodeId, Session>,
    /// Workers were told to finish: one that connects later is told at once.
    shutting_down: bool,
    /// Outcomes sent to the writer and not yet confirmed committed.
    unconfirmed: FxHashMap<String, TaskOutcome>,
    writer: Option<Writer>,
    conns: FxHashMap<u64, NodeId>,
    next_node: u32,
    status: Status,
    // this round's work
    new_tasks: Vec<SubmittedTask>,
    new_attempts: Vec<(String, u32, String)>,
    new_outcomes: Vec<TaskOutcome>,
    replies: Vec<(oneshot::Sender<Result<usize, SubmitError>>, usize)>,
}

/// For each input as written, its index among the distinct inputs (empty if none repeats).
fn positions(inputs: &[String]) -> Vec<u32> {
    let mut distinct: Vec<&String> = Vec::new();
    let mut pos = Vec::with_capacity(inputs.len());
    for uri in inputs {
        match distinct.iter().position(|d| *d == uri) {
            Some(i) => pos.push(i as u32),
            None => {
                distinct.push(uri);
                pos.push(distinct.len() as u32 - 1);
            }
        }
    }
    if distinct.len() == inputs.len() {
        Vec::new()
    } else {
        pos
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl Scheduler {
    /// A scheduler over `core`, replaying every task of `journal` that has no outcome yet.
    pub fn new(
        core: Core,
        journal: Journal,
        cfg: SchedulerConfig,
    ) -> Result<Scheduler, crate::journal::JournalError> {
        let stored = journal.load()?;
        let writer = Some(Writer::start(&cfg.journal)?);
        let mut s = Scheduler {
            core,
            journal,
            cfg,
            start: Instant::now(),
            tasks: Vec::new(),
            ids: FxHashMap::default(),
            objects: FxHashMap::default(),
            uris: Vec::new(),
            versions: Vec::new(),
            sessions: FxHashMap::default(),
            shutting_down: false,
            unconfirmed: FxHashMap::default(),
            writer,
            conns: FxHashMap::default(),
            next_node: 0,
            status: Status::default(),
            new_tasks: Vec::new(),
            new_attempts: Vec::new(),
            new_outcomes: Vec::new(),
            replies: Vec::new(),
        };
        for st in stored {
            s.restore(st);
        }
        Ok(s)
    }

    fn now(&self) -> Time {
        Time(self.start.elapsed().as_nanos() as u64)
    }

    fn restore(&mut self, st: StoredTask) {
        let Ok(def) =
            serde_json::from_str::<(TaskDef, Vec<(String, u64, String)>)>(&st.task.spec_json)
        else {
            tracing::error!(task = %st.task.id, "unreadable task in journal; skipped");
            return;
        };
        let (def, inputs) = def;
        let id = self.register(def, &inputs);
        self.status.submitted += 1;
        match st.outcome {
            Some(o) => {
                self.count_outcome(o.state);
                self.tasks[id.0 as usize].phase = Phase::Done(o.state);
            }
            None => {
                let spec = self.spec_of(id);
                let now = self.now();
                if self.core.handle_restore(spec, st.attempts, now).is_ok() {
                    self.status.queued += 1;
                }
            }
        }
    }

    fn object(&mut self, uri: &str, version: &str) -> ObjectId {
        if let Some(o) = self.objects.get(uri) {
            return *o;
        }
        let o = ObjectId(self.uris.len() as u64);
        self.objects.insert(uri.to_string(), o);
        self.uris.push(uri.to_string());
        self.versions.push(version.to_string());
        o
    }

    fn register(&mut self, def: TaskDef, inputs: &[(String, u64, String)]) -> TaskId {
        let id = TaskId(self.tasks.len() as u64);
        let inputs = inputs
            .iter()
            .map(|(uri, size, version)| (self.object(uri, version), *size))
            .collect();
        self.ids.insert(def.id.clone(), id);
        self.tasks.push(LiveTask {
            id: def.id.clone(),
            def,
            inputs,
            phase: Phase::Live,
        });
        id
    }

    fn spec_of(&self, id: TaskId) -> TaskSpec {
        let t = &self.tasks[id.0 as usize];
        TaskSpec::new(
            id,
            t.inputs
                .iter()
                .map(|(o, size)| Input {
                    object: *o,
                    size: *size,
                })
                .collect(),
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
    pub fn run(mut self, rx: Receiver<Cmd>) {
        let tick = Duration::from_millis(100);
        let mut next_check = Instant::now() + tick;
        loop {
            let mut wait = next_check.saturating_duration_since(Instant::now());
            if !self.unconfirmed.is_empty() {
                // Outcomes are waiting for the writer's confirmation (it commits every 20 ms).
                wait = wait.min(Duration::from_millis(5));
            }
            let first = match rx.recv_timeout(wait) {
                Ok(c) => Some(c),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => {
                    self.close_writer();
                    break;
                }
            };
            if let Some(c) = first {
                self.handle(c);
                // Group commit: take everything already waiting before touching the disk.
                while let Ok(c) = rx.try_recv() {
                    self.handle(c);
                    if self.new_tasks.len() > 50_000 {
                        break;
                    }
                }
            }
            if Instant::now() >= next_check {
                self.check_heartbeats();
                let now = self.now();
                if self.core.poll_timeout().is_some_and(|t| t <= now) {
                    self.core.handle_timeout(now);
                }
                next_check = Instant::now() + tick;
            }
            // Submissions reach the disk before any of their tasks is dispatched.
            self.flush_submissions();
            self.drain_actions();
            self.flush_progress();
        }
    }

    fn handle(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Submit(batch, reply) => self.submit(batch, reply),
            Cmd::WorkerUp { conn, hello, tx } => self.worker_up(conn, hello, tx),
            Cmd::FromWorker(conn, msg) => self.on_worker_message(conn, msg),
            Cmd::WorkerDown(conn) => {
                if let Some(node) = self.conns.remove(&conn) {
                    self.node_lost(node, "connection closed");
                }
            }
            Cmd::Cancel(id, reply) => {
                let _ = reply.send(self.cancel(&id));
            }
            Cmd::Status(reply) => {
                let _ = reply.send(self.status());
            }
            Cmd::Task(id, reply) => {
                let view = self.ids.get(&id).copied().map(|t| self.view(t));
                let _ = reply.send(view);
            }
            Cmd::List(state, limit, reply) => {
                let views = (0..self.tasks.len() as u64)
                    .map(TaskId)
                    .map(|t| self.view(t))
                    .filter(|v| state.as_deref().is_none_or(|s| s == v.state))
                    .take(limit)
                    .collect();
                let _ = reply.send(views);
            }
            Cmd::Locate(uri, reply) => {
                let names = match self.objects.get(&uri) {
                    Some(o) => self
                        .core
                        .locate(*o)
                        .iter()
                        .filter_map(|n| self.sessions.get(n).map(|s| s.name.clone()))
                        .collect(),
                    None => Vec::new(),
                };
                let _ = reply.send(names);
            }
            Cmd::ShutdownWorkers => {
                self.shutting_down = true;
                for s in self.sessions.values() {
                    let _ = s.tx.send(ToWorker::Shutdown);
                }
            }
        }
    }

    fn status(&self) -> Status {
        let c = self.core.counts();
        Status {
            queued: c.queued,
            workers: c.nodes,
            slots: c.slots,
            busy_slots: c.busy_slots,
            // Ended in the core, outcome not yet journaled: still running to the client.
            running: c.running + self.unconfirmed.len() as u64,
            uptime_s: self.start.elapsed().as_secs_f64(),
            ..self.status.clone()
        }
    }

    fn view(&self, t: TaskId) -> TaskView {
        let task = &self.tasks[t.0 as usize];
        let pending = self.unconfirmed.get(&task.id);
        let (state, node, attempt) = match (&task.phase, self.core.task_state(t)) {
            // Ended, outcome not yet journaled (see `record_outcome`).
            (Phase::Done(_), _) if pending.is_some() => (
                "running".into(),
                pending.and_then(|o| o.node.clone()),
                pending.map_or(0, |o| o.attempt),
            ),
            (Phase::Done(s), _) => (
                serde_json::to_value(s)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default(),
                None,
                0,
            ),
            (Phase::Live, Some(TaskState::Running { node, attempt, .. })) => (
                "running".into(),
                self.sessions.get(&node).map(|s| s.name.clone()),
                attempt,
            ),
            _ => ("queued".into(), None, 0),
        };
        let outcome = match task.phase {
            Phase::Done(_) if pending.is_none() => self.journal.outcome(&task.id).ok().flatten(),
            _ => None,
        };
        let node = node.or_else(|| outcome.as_ref().and_then(|o| o.node.clone()));
        let attempt = outcome.as_ref().map_or(attempt, |o| o.attempt);
        TaskView {
            id: task.id.clone(),
            state,
            node,
            attempt,
            outcome,
        }
    }

    fn submit(&mut self, batch: Vec<Prepared>, reply: oneshot::Sender<Result<usize, SubmitError>>) {
        for p in &batch {
            if self.ids.contains_key(&p.def.id) {
                let _ = reply.send(Err(SubmitError::Duplicate(p.def.id.clone())));
                return;
            }
        }
        let now = self.now();
        let n = batch.len();
        let at = unix_now();
        for p in batch {
            let known: Vec<(String, u64, String)> = p
                .inputs
                .iter()
                .map(|(uri, r)| match r {
                    Ok((size, version)) => (uri.clone(), *size, version.clone()),
                    Err(_) => (uri.clone(), 0, String::new()),
                })
                .collect();
            // A source whose version changed since it was cached is dropped everywhere.
            for (uri, _, version) in &known {
                if let Some(o) = self.objects.get(uri).copied() {
                    let old = &self.versions[o.0 as usize];
                    if !version.is_empty() && old != version {
                        self.versions[o.0 as usize] = version.clone();
                        self.invalidate(o, uri.clone(), now);
                    }
                }
            }
            let spec_json = serde_json::to_string(&(&p.def, &known)).expect("task serializes");
            self.new_tasks.push(SubmittedTask {
                id: p.def.id.clone(),
                spec_json,
                submitted_at: at,
            });
            let failure = p.inputs.iter().find_map(|(_, r)| r.as_ref().err().cloned());
            let id = self.register(p.def, &known);
            self.status.submitted += 1;
            match failure {
                Some(error) => self.finish_without_running(id, OutcomeState::Failed, Some(error)),
                None => {
                    let spec = self.spec_of(id);
                    self.core.handle_submit(spec, now).expect("new task id");
                }
            }
        }
        self.replies.push((reply, n));
    }

    fn invalidate(&mut self, o: ObjectId, uri: String, now: Time) {
        for node in self.core.handle_object_invalidated(o, now) {
            if let Some(s) = self.sessions.get(&node) {
                let _ = s.tx.send(ToWorker::Drop {
                    uris: vec![uri.clone()],
                });
            }
        }
    }

    fn finish_without_running(&mut self, id: TaskId, state: OutcomeState, error: Option<String>) {
        let task = &mut self.tasks[id.0 as usize];
        task.phase = Phase::Done(state);
        let task_id = task.id.clone();
        self.record_outcome(TaskOutcome {
            id: task_id,
            state,
            attempt: 0,
            node: None,
            exit_code: None,
            error,
            result_json: "{}".into(),
            finished_at: unix_now(),
        });
    }

    fn cancel(&mut self, id: &str) -> Result<String, String> {
        let t = *self
            .ids
            .get(id)
            .ok_or_else(|| format!("unknown task '{id}'"))?;
        if let Phase::Done(s) = self.tasks[t.0 as usize].phase {
            return Err(format!("task '{id}' already ended ({s:?})"));
        }
        let now = self.now();
        match self.core.handle_cancel(t, now).map_err(|e| e.to_string())? {
            Some(_) => {
                self.finish_without_running(t, OutcomeState::Cancelled, None);
                Ok("cancelled".into())
            }
            None => Ok("cancelling: it ends when its worker reports".into()),
        }
    }

    fn worker_up(&mut self, conn: u64, hello: ToDispatcher, tx: UnboundedSender<ToWorker>) {
        let ToDispatcher::Hello {
            name,
            slots,
            peer_url,
            held,
            ..
        } = hello
        else {
            return;
        };
        let node = NodeId(self.next_node);
        self.next_node += 1;
        let now = self.now();
        if let Err(e) = self.core.handle_node_joined(node, slots.max(1), now) {
            tracing::error!("worker {name}: {e}");
            return;
        }
        let _ = tx.send(ToWorker::Welcome {
            node: node.0,
            heartbeat_ms: self.cfg.heartbeat.as_millis() as u64,
        });
        if self.shutting_down {
            let _ = tx.send(ToWorker::Shutdown);
        }
        self.sessions.insert(
            node,
            Session {
                conn,
                name,
                peer_url,
                slots,
                tx,
                last_seen: Instant::now(),
            },
        );
        self.conns.insert(conn, node);
        self.cached(node, held);
    }

    fn cached(&mut self, node: NodeId, held: Vec<Held>) {
        let now = self.now();
        let mut stale = Vec::new();
        for h in held {
            let o = self.object(&h.uri, &h.version);
            if self.versions[o.0 as usize] == h.version {
                let _ = self.core.handle_object_cached(node, o, now);
            } else {
                stale.push(h.uri);
            }
        }
        if !stale.is_empty() {
            if let Some(s) = self.sessions.get(&node) {
                let _ = s.tx.send(ToWorker::Drop { uris: stale });
            }
        }
    }

    fn on_worker_message(&mut self, conn: u64, msg: ToDispatcher) {
        let Some(node) = self.conns.get(&conn).copied() else {
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
            ToDispatcher::Cached { objects } => self.cached(node, objects),
            ToDispatcher::Evicted { uris } => {
                for uri in uris {
                    if let Some(o) = self.objects.get(&uri) {
                        let _ = self.core.handle_object_evicted(node, *o, now);
                    }
                }
            }
            ToDispatcher::Finished(report) => self.finished(node, report),
        }
    }

    fn finished(&mut self, node: NodeId, report: TaskReport) {
        let Some(t) = self.ids.get(&report.task).copied() else {
            return;
        };
        let outcome = if report.succeeded() {
            Outcome::Succeeded
        } else {
            Outcome::Failed(
                report
                    .error
                    .clone()
                    .unwrap_or_else(|| format!("exit code {:?}", report.exit_code)),
            )
        };
        let now = self.now();
        match self
            .core
            .handle_task_finished(t, report.attempt, outcome, now)
        {
            Ok(state) => {
                let st = match state {
                    TaskState::Cancelled => OutcomeState::Cancelled,
                    TaskState::Finished(Outcome::Succeeded) => OutcomeState::Succeeded,
                    _ => OutcomeState::Failed,
                };
                let tr = report.traffic;
                let s = &mut self.status.traffic;
                s.local += tr.local;
                s.peer += tr.peer;
                s.storage += tr.storage;
                s.bytes_local += tr.bytes_local;
                s.bytes_peer += tr.bytes_peer;
                s.bytes_storage += tr.bytes_storage;
                let task = &mut self.tasks[t.0 as usize];
                task.phase = Phase::Done(st);
                self.record_outcome(TaskOutcome {
                    id: report.task.clone(),
                    state: st,
                    attempt: report.attempt,
                    node: self.sessions.get(&node).map(|s| s.name.clone()),
                    exit_code: report.exit_code,
                    error: report.error.clone(),
                    result_json: serde_json::to_string(&report).expect("report serializes"),
                    finished_at: report.finished_at,
                });
            }
            Err(CoreError::StaleAttempt { .. })
            | Err(CoreError::UnknownTask(_))
            | Err(CoreError::NotRunning(_)) => {
                tracing::warn!(task = %report.task, attempt = report.attempt, "stale result refused");
            }
            Err(e) => tracing::error!(task = %report.task, "result refused: {e}"),
        }
    }

    fn node_lost(&mut self, node: NodeId, why: &str) {
        let Some(session) = self.sessions.remove(&node) else {
            return;
        };
        self.conns.remove(&session.conn);
        tracing::warn!(worker = %session.name, "worker lost ({why}); its tasks run again elsewhere");
        let now = self.now();
        if let Ok(lost) = self.core.handle_node_lost(node, now) {
            let limit = self.core.config().crash_limit;
            for t in lost.failed {
                self.finish_without_running(
                    t,
                    OutcomeState::Failed,
                    Some(format!("its worker was lost {limit} times")),
                );
            }
            for t in lost.cancelled {
                self.finish_without_running(
                    t,
                    OutcomeState::Cancelled,
                    Some("cancelled; its worker was lost while it ran".into()),
                );
            }
        }
    }

    fn check_heartbeats(&mut self) {
        let late: Vec<NodeId> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.last_seen.elapsed() > self.cfg.heartbeat_timeout)
            .map(|(n, _)| *n)
            .collect();
        for node in late {
            self.node_lost(node, "heartbeat timeout");
        }
    }

    fn drain_actions(&mut self) {
        let now = self.now();
        while let Some(action) = self.core.poll_action(now) {
            match action {
                Action::Dispatch(d) => self.dispatch(d.task, d.attempt, d.node, d.inputs),
                Action::Provision { nodes } => {
                    // No provisioner backend yet: nodes are the workers that connect.
                    self.core.handle_provision_failed(nodes, now);
                }
                Action::Release { node } => {
                    if let Some(s) = self.sessions.remove(&node) {
                        self.conns.remove(&s.conn);
                        let _ = s.tx.send(ToWorker::Shutdown);
                    }
                }
            }
        }
    }

    fn dispatch(&mut self, t: TaskId, attempt: u32, node: NodeId, inputs: Vec<(ObjectId, Source)>) {
        let task = &self.tasks[t.0 as usize];
        let assigned = inputs
            .iter()
            .map(|(o, src)| {
                let size = task
                    .inputs
                    .iter()
                    .find(|(x, _)| x == o)
                    .map_or(0, |(_, s)| *s);
                let source = match src {
                    Source::Local => InputSource::Local,
                    Source::Peer(p) => match self.sessions.get(p) {
                        Some(s) => InputSource::Peer {
                            url: s.peer_url.clone(),
                        },
                        None => InputSource::Storage,
                    },
                    Source::Storage => InputSource::Storage,
                };
                AssignedInput {
                    uri: self.uris[o.0 as usize].clone(),
                    size,
                    version: self.versions[o.0 as usize].clone(),
                    source,
                }
            })
            .collect();
        let a = Assignment {
            task: task.id.clone(),
            attempt,
            cmd: task.def.cmd.clone(),
            inputs: assigned,
            outputs: task.def.outputs.clone(),
            caching: self.core.caching_enabled(),
            positions: positions(&task.def.inputs),
        };
        let Some(s) = self.sessions.get(&node) else {
            return;
        };
        self.new_attempts
            .push((task.id.clone(), attempt, s.name.clone()));
        if s.tx.send(ToWorker::Run(a)).is_err() {
            // The session is gone; its loss is being reported and will requeue the task.
            tracing::warn!(worker = %s.name, "dispatch to a closed session");
        }
    }

    /// Commit this round's submissions, then answer the submitters.
    fn flush_submissions(&mut self) {
        if !self.new_tasks.is_empty() {
            let tasks = std::mem::take(&mut self.new_tasks);
            if let Err(e) = self.journal.submit(&tasks) {
                // Should not happen (duplicates are refused before); refuse the whole round.
                tracing::error!("journal: {e}");
                for (reply, _) in self.replies.drain(..) {
                    let _ = reply.send(Err(SubmitError::Journal(e.to_string())));
                }
            }
        }
        for (reply, n) in self.replies.drain(..) {
            let _ = reply.send(Ok(n));
        }
    }

    /// Record an outcome. The writer journals it this round; until it confirms the commit the
    /// task still shows as running and is not counted as ended, so nothing a client has seen
    /// ended can run again after a crash of the dispatcher.
    fn record_outcome(&mut self, o: TaskOutcome) {
        if self.writer.is_none() {
            self.count_outcome(o.state);
        } else {
            self.unconfirmed.insert(o.id.clone(), o.clone());
        }
        self.new_outcomes.push(o);
    }

    /// Hand this round's dispatched attempts and outcomes to the journal writer.
    fn flush_progress(&mut self) {
        let Some(w) = &self.writer else { return };
        let committed: Vec<String> = w.committed.try_iter().flatten().collect();
        for id in committed {
            if let Some(o) = self.unconfirmed.remove(&id) {
                self.count_outcome(o.state);
            }
        }
        let Some(w) = &self.writer else { return };
        if !self.new_attempts.is_empty() {
            let _ =
                w.tx.send(Write::Attempts(std::mem::take(&mut self.new_attempts)));
        }
        if !self.new_outcomes.is_empty() {
            let _ =
                w.tx.send(Write::Outcomes(std::mem::take(&mut self.new_outcomes)));
        }
    }

    /// Wait for the journal writer to commit everything it was given.
    fn close_writer(&mut self) {
        if let Some(w) = self.writer.take() {
            drop(w.tx);
            let _ = w.thread.join();
        }
    }
}

/// Slots per session, for tests and diagnostics.
impl Scheduler {
    /// Connected workers and their slot counts.
    pub fn workers(&self) -> Vec<(String, u32)> {
        self.sessions
            .values()
            .map(|s| (s.name.clone(), s.slots))
            .collect()
    }
}
