//! Unit tests of the scheduler through its [`Comm`] seam, as HyperQueue tests tako's: a
//! [`RecordingComm`] stands for the workers' sessions, the pool task and the journal writer,
//! messages are handed to [`Scheduler::handle`] one at a time, [`Scheduler::round`] and
//! [`Scheduler::tick`] are called by hand, and [`Env::check`] checks the invariants after every
//! step. No socket, thread or process: the journal is a real SQLite file in a temp directory.
//! Time is the test's: it stands still until [`Env::advance`] moves it, so the timeouts
//! (heartbeat, hand-off, the dashboard's sampling) are tested without waiting.

mod cases;
mod journal;
mod reuse;
mod stage;
mod timeouts;

use super::comm::RecordingComm;
use super::pool::PoolLink;
use super::{Now, Scheduler, SchedulerConfig, SchedulerMsg, Status, Submitted};
use crate::journal::Journal;
use crate::proto::{Assignment, KeptOutput, LookupResult, TaskReport, ToDispatcher, ToWorker};
use diffuse_core::{Core, CoreConfig, NodeId, TaskId, TaskState};
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::sync::oneshot;

/// The heartbeat timeout of every test's scheduler (the dispatcher's default).
pub(super) const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);

/// A scheduler, what it sent, and the connections of its workers.
pub(super) struct Env {
    pub s: Scheduler,
    pub comm: RecordingComm,
    /// The test's clock: moved only by [`Env::advance`].
    pub now: Now,
    /// Messages of the recording already taken by [`Env::take_runs`] and friends.
    seen: usize,
    next_conn: u64,
    _dir: tempfile::TempDir,
}

/// A worker as a test sees it: its connection and the core's node id.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct W {
    pub conn: u64,
    pub node: NodeId,
}

impl Env {
    /// A scheduler over a core with `cfg`, an empty journal, a static pool.
    pub fn new(cfg: CoreConfig) -> Env {
        Env::build(cfg, None, false)
    }

    /// The same with results reused by content (`--reuse on`).
    pub fn with_reuse(cfg: CoreConfig) -> Env {
        Env::build(cfg, None, true)
    }

    /// The same with an elastic pool between `min` and `max` workers.
    pub fn with_pool(cfg: CoreConfig, min: u32, max: u32) -> Env {
        Env::build(cfg, Some(PoolLink::new("local", min, max)), false)
    }

    fn build(cfg: CoreConfig, pool: Option<PoolLink>, reuse: bool) -> Env {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("journal.db");
        let journal = Journal::open(&path).expect("journal");
        let comm = RecordingComm::default();
        let now = Now::read();
        let s = Scheduler::new(
            Core::new(cfg),
            journal,
            SchedulerConfig {
                heartbeat: Duration::from_secs(2),
                heartbeat_timeout: HEARTBEAT_TIMEOUT,
                journal: path,
                lookup_timeout: Duration::from_secs(10),
                task_defaults: Default::default(),
                fixed_pool: None,
                reuse,
                results_store: None,
            },
            Box::new(comm.clone()),
            now,
        )
        .expect("scheduler");
        let s = match pool {
            Some(p) => s.with_pool(p),
            None => s,
        };
        let env = Env {
            s,
            comm,
            now,
            seen: 0,
            next_conn: 1,
            _dir: dir,
        };
        env.check();
        env
    }

    /// Hand the scheduler one message, end the round, check.
    pub fn send(&mut self, msg: SchedulerMsg) {
        self.s.handle(msg, self.now);
        self.round();
    }

    /// End a round (commits, lookups, the core's actions, the writer's confirmations), check.
    pub fn round(&mut self) {
        self.s.round(self.now);
        self.check();
    }

    /// The periodic checks (the core's provisioning among them), then a round.
    pub fn tick(&mut self) {
        self.s.tick(self.now);
        self.round();
    }

    /// The journal's file.
    pub fn journal_path(&self) -> std::path::PathBuf {
        self._dir.path().join("journal.db")
    }

    /// Move the test's clock `d` on (nothing happens until the next step).
    pub fn advance(&mut self, d: Duration) {
        self.now = self.now.after(d);
    }

    /// A worker connects with `slots` slots (answering pool request `request`).
    pub fn join(&mut self, name: &str, slots: u32, request: Option<&str>) -> W {
        let conn = self.next_conn;
        self.next_conn += 1;
        let hello = ToDispatcher::Hello {
            protocol: crate::proto::PROTOCOL,
            name: name.into(),
            slots,
            memory: None,
            gpus: 0,
            disk: None,
            cache_quota: 1 << 30,
            peer_url: format!("http://{name}:1"),
            held: Vec::new(),
            request: request.map(str::to_string),
            leaves_in_s: None,
            eviction: None,
            rack: None,
        };
        let link = tokio::sync::mpsc::unbounded_channel().0;
        self.send(SchedulerMsg::WorkerUp { conn, hello, link });
        let node = self.s.sessions.node_of(conn).expect("joined");
        W { conn, node }
    }

    /// A message from worker `w`.
    pub fn from(&mut self, w: W, msg: ToDispatcher) {
        self.send(SchedulerMsg::FromWorker(w.conn, msg));
    }

    /// Worker `w`'s connection closes.
    pub fn drop_conn(&mut self, w: W) {
        self.send(SchedulerMsg::WorkerDown(w.conn));
    }

    /// Submit tasks (JSON Lines); the answer comes once the round has committed them.
    pub fn submit(&mut self, lines: &str) -> Submitted {
        let defs = crate::spec::parse_tasks(lines).expect("tasks parse");
        let (tx, mut rx) = oneshot::channel();
        self.send(SchedulerMsg::Submit(defs, tx));
        rx.try_recv().expect("answered").expect("accepted")
    }

    /// `w` ran `a` and it ended with `exit_code`, keeping `kept` (`tmp://` outputs).
    pub fn finish(&mut self, w: W, a: &Assignment, exit_code: i32, kept: Vec<KeptOutput>) {
        let report = report(&a.task, a.attempt, exit_code, kept);
        self.from(w, ToDispatcher::Finished(Box::new(report)));
    }

    /// The counters.
    pub fn status(&self) -> Status {
        self.s.status()
    }

    /// The messages sent since the last `take_*`, and mark them taken.
    pub fn take(&mut self) -> Vec<(NodeId, ToWorker)> {
        let log = self.comm.log();
        let new = log.sent_since(self.seen).to_vec();
        self.seen = log.sent.len();
        new
    }

    /// Exactly `n` tasks sent to run since the last `take_*`: (worker, assignment), in order.
    pub fn take_runs(&mut self, n: usize) -> Vec<(NodeId, Assignment)> {
        let runs: Vec<(NodeId, Assignment)> = self
            .take()
            .into_iter()
            .filter_map(|(node, m)| match m {
                ToWorker::Run(a) => Some((node, *a)),
                _ => None,
            })
            .collect();
        assert_eq!(runs.len(), n, "runs sent: {runs:?}");
        runs
    }

    /// The worker of node `node`.
    pub fn w(&self, node: NodeId) -> W {
        let conn = self.s.sessions.get(&node).expect("connected").conn;
        W { conn, node }
    }

    /// The scheduler's invariants, checked after every step:
    /// - the core's own and the task ledger's (`check_invariants`);
    /// - every running task runs on a connected worker, whose session is open;
    /// - each attempt was sent once, and journaled once;
    /// - each task has at most one outcome, and a task whose outcome is confirmed is not in the
    ///   core's queue;
    /// - every task is counted in exactly one of the states of `status`, the index by state holds
    ///   every task once, and no more tasks run than slots are busy.
    pub fn check(&self) {
        let s = &self.s;
        s.core.check_invariants().expect("core invariants");
        s.ledger.check_invariants().expect("ledger invariants");
        let log = self.comm.log();
        for node in s.sessions.nodes() {
            assert!(log.attached.contains(&node), "{node:?} has no open session");
        }
        let mut running = 0;
        for i in 0..s.ledger.tasks.len() as u64 {
            if let Some(TaskState::Running { node, .. }) = s.core.task_state(TaskId(i)) {
                assert!(s.sessions.contains(&node), "task {i} runs on gone {node:?}");
                running += 1;
            }
        }
        let mut sent = BTreeSet::new();
        for (node, m) in &log.sent {
            if let ToWorker::Run(a) = m {
                assert!(log.attached.contains(node) || log.detached.contains(node));
                assert!(
                    sent.insert((a.task.clone(), a.attempt)),
                    "{} attempt {} sent twice",
                    a.task,
                    a.attempt
                );
            }
        }
        let journaled: BTreeSet<(String, u32)> = log
            .attempts
            .iter()
            .map(|(t, a, _)| (t.clone(), *a))
            .collect();
        assert_eq!(
            journaled.len(),
            log.attempts.len(),
            "an attempt journaled twice"
        );
        assert_eq!(journaled, sent, "attempts journaled = attempts sent");
        let mut ended = BTreeSet::new();
        for o in &log.outcomes {
            assert!(ended.insert(o.id.clone()), "two outcomes for {}", o.id);
        }
        drop(log);
        let st = s.status();
        assert_eq!(
            st.submitted,
            st.queued + st.running + st.ending + st.succeeded + st.failed + st.cancelled,
            "every task counted once: {st:?}"
        );
        assert_eq!(st.submitted as usize, s.ledger.tasks.len());
        let listed: usize = super::tasks::Listed::ALL
            .iter()
            .map(|l| s.ledger.tasks.page(Some(*l), None, usize::MAX - 1).0.len())
            .sum();
        assert_eq!(
            listed,
            s.ledger.tasks.len(),
            "the index by state holds each task once"
        );
        assert!(
            running <= st.busy_slots,
            "{running} running on {} busy slots",
            st.busy_slots
        );
    }
}

/// A worker's report of an attempt.
pub(super) fn report(
    task: &str,
    attempt: u32,
    exit_code: i32,
    kept: Vec<KeptOutput>,
) -> TaskReport {
    let mut r: TaskReport = serde_json::from_value(serde_json::json!({
        "task": task,
        "attempt": attempt,
        "exit_code": exit_code,
        "error": null,
        "started_at": 1.0,
        "staged_at": 1.5,
        "finished_at": 2.0,
        "stdout": null,
        "stderr": null,
        "outputs": [],
        "uncached": [],
        "traffic": crate::proto::Traffic::default(),
    }))
    .expect("a report");
    r.kept = kept;
    r
}

/// A worker's answer to a lookup: every URI found, `size` bytes, version `v1`.
pub(super) fn found(id: u64, uris: &[String], size: u64) -> ToDispatcher {
    ToDispatcher::LookedUp {
        id,
        results: uris
            .iter()
            .map(|u| LookupResult {
                uri: u.clone(),
                size: Some(size),
                version: Some("v1".into()),
                error: None,
            })
            .collect(),
    }
}

/// An elastic pool of 1 to 2 workers with cache hand-off (its time bound `bound`): worker a
/// (`dfs-1`) ran a task reading `file:///d/x` (1000 bytes) and holds it; then b (`dfs-2`)
/// joined. Both are idle and one is kept, so the next tick releases a (idle longer), which
/// pushes x to b first. Messages so far taken.
pub(super) fn two_workers_one_holding_x(bound: Duration) -> (Env, W, W) {
    use crate::proto::Held;
    use diffuse_core::{DynamicConfig, HandoffConfig, Provisioning, StepPolicy};
    let cfg = CoreConfig {
        provisioning: Provisioning::Dynamic(DynamicConfig {
            step: StepPolicy::AllAtOnce,
            min_nodes: 1,
            max_nodes: 2,
            slots_per_node: 1,
            idle_timeout: Duration::ZERO,
            check_interval: Duration::ZERO,
        }),
        handoff: Some(HandoffConfig {
            budget: 1 << 30,
            time_bound: bound,
        }),
        ..CoreConfig::default()
    };
    let mut env = Env::with_pool(cfg, 1, 2);
    let a = env.join("dfs-1", 1, Some("dfs-1"));
    env.take();
    env.submit(r#"{"id":"t","cmd":"true","inputs":["file:///d/x"]}"#);
    for (_, m) in env.take() {
        if let ToWorker::Lookup { id, uris, .. } = m {
            env.from(a, found(id, &uris, 1000));
        }
    }
    let (_, run) = env.take_runs(1).remove(0);
    let x = Held {
        uri: "file:///d/x".into(),
        version: "v1".into(),
    };
    env.from(a, ToDispatcher::Cached { objects: vec![x] });
    env.finish(a, &run, 0, vec![]);
    let b = env.join("dfs-2", 1, Some("dfs-2"));
    env.take();
    (env, a, b)
}
