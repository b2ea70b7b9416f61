//! The scheduler's outgoing side, as a trait ([`Comm`]): everything the scheduler thread does to
//! the world outside it (a message to a worker's session, closing a session, a command to the
//! elastic pool, a write handed to the journal writer, and the writer's confirmations back) goes
//! through it, as HyperQueue's tako puts its `Comm` between its scheduler and the network.
//!
//! [`LiveComm`] is the dispatcher's: a channel per worker session (its WebSocket's writer task),
//! the pool task's channel, and the journal writer thread ([`super::writer`]).
//! [`RecordingComm`] is for tests: it records every message, round-trips each through JSON as
//! the WebSocket would, and confirms journal writes when told to; no socket, thread or process.

use super::writer::{Write, Writer};
use crate::journal::{JournalError, TaskOutcome};
use crate::proto::ToWorker;
use crate::provisioner::PoolCmd;
use diffuse_core::NodeId;
use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::mpsc::UnboundedSender;

/// Where a worker session's messages go: the sending half of its WebSocket writer's channel.
/// Dropping it closes the session.
pub type WorkerLink = UnboundedSender<ToWorker>;

/// What the scheduler does to the outside.
pub trait Comm: Send {
    /// A worker's session opened as `node`: messages to `node` go to `link`.
    fn attach(&mut self, node: NodeId, link: WorkerLink);
    /// `node`'s session is over for the scheduler: its link is dropped, which closes it.
    fn detach(&mut self, node: NodeId);
    /// Send `msg` to worker `node`. False if its session is closed (or unknown): its loss is
    /// being reported, or was.
    fn send(&mut self, node: NodeId, msg: ToWorker) -> bool;
    /// Tell the elastic pool task.
    fn pool(&mut self, cmd: PoolCmd);
    /// Hand the journal writer attempts, attempts' reports or outcomes to commit.
    fn journal(&mut self, write: Write);
    /// Ids of the tasks whose outcomes the writer committed since the last call.
    fn committed(&mut self) -> Vec<String>;
    /// The journal's error while the writer's commit is refused and tried again.
    fn writer_error(&self) -> Option<String>;
    /// Wait until everything handed to the journal writer is committed (at shutdown).
    fn close(&mut self);
}

/// The dispatcher's [`Comm`]: worker sessions' channels, the pool task's channel, the journal
/// writer thread.
pub struct LiveComm {
    links: FxHashMap<NodeId, WorkerLink>,
    pool: Option<UnboundedSender<PoolCmd>>,
    writer: Option<Writer>,
}

impl LiveComm {
    /// Start the journal writer on the journal at `journal` (its own connection); pool commands
    /// go to `pool`, if the pool is elastic.
    pub fn start(
        journal: &std::path::Path,
        pool: Option<UnboundedSender<PoolCmd>>,
    ) -> Result<LiveComm, JournalError> {
        Ok(LiveComm {
            links: FxHashMap::default(),
            pool,
            writer: Some(Writer::start(journal)?),
        })
    }
}

impl Comm for LiveComm {
    fn attach(&mut self, node: NodeId, link: WorkerLink) {
        self.links.insert(node, link);
    }

    fn detach(&mut self, node: NodeId) {
        self.links.remove(&node);
    }

    fn send(&mut self, node: NodeId, msg: ToWorker) -> bool {
        self.links.get(&node).is_some_and(|l| l.send(msg).is_ok())
    }

    fn pool(&mut self, cmd: PoolCmd) {
        if let Some(p) = &self.pool {
            let _ = p.send(cmd);
        }
    }

    fn journal(&mut self, write: Write) {
        if let Some(w) = &self.writer {
            let _ = w.tx.send(write);
        }
    }

    fn committed(&mut self) -> Vec<String> {
        match &self.writer {
            Some(w) => w.committed.try_iter().flatten().collect(),
            None => Vec::new(),
        }
    }

    fn writer_error(&self) -> Option<String> {
        let w = self.writer.as_ref()?;
        w.failing.lock().expect("the writer's error").clone()
    }

    fn close(&mut self) {
        if let Some(w) = self.writer.take() {
            w.close();
        }
    }
}

/// What a [`RecordingComm`] saw.
#[derive(Default)]
pub struct Recording {
    /// Sessions open now.
    pub attached: Vec<NodeId>,
    /// Sessions closed, in order.
    pub detached: Vec<NodeId>,
    /// Every message sent to a worker with an open session, in order, each after a JSON round
    /// trip (what the worker would read).
    pub sent: Vec<(NodeId, ToWorker)>,
    /// Messages for workers with no open session (dropped, as a closed channel drops them).
    pub undelivered: Vec<(NodeId, ToWorker)>,
    /// Every command to the pool, in order.
    pub pool: Vec<PoolCmd>,
    /// Attempts handed to the journal: (task id, attempt, worker name).
    pub attempts: Vec<(String, u32, String)>,
    /// Reports of retried attempts handed to the journal: (task id, attempt, report JSON).
    pub attempt_results: Vec<(String, u32, String)>,
    /// Outcomes handed to the journal.
    pub outcomes: Vec<TaskOutcome>,
    /// While true, outcomes are not confirmed committed.
    pub hold_commits: bool,
    /// What the writer would say of a refused commit.
    pub writer_error: Option<String>,
    /// Outcomes handed over and not yet confirmed.
    uncommitted: Vec<String>,
}

impl Recording {
    /// The messages sent since position `from` of [`Recording::sent`].
    pub fn sent_since(&self, from: usize) -> &[(NodeId, ToWorker)] {
        &self.sent[from.min(self.sent.len())..]
    }
}

/// A [`Comm`] that records, for tests of the scheduler without sockets, threads or processes.
/// A clone shares the recording, so a test keeps one and gives the scheduler the other. Journal
/// writes are kept, and their outcomes confirmed at the next [`Comm::committed`] (unless held
/// with [`Recording::hold_commits`]).
#[derive(Clone, Default)]
pub struct RecordingComm(Arc<Mutex<Recording>>);

impl RecordingComm {
    /// What was recorded so far.
    pub fn log(&self) -> MutexGuard<'_, Recording> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Comm for RecordingComm {
    fn attach(&mut self, node: NodeId, _link: WorkerLink) {
        self.log().attached.push(node);
    }

    fn detach(&mut self, node: NodeId) {
        let mut log = self.log();
        log.attached.retain(|n| *n != node);
        log.detached.push(node);
    }

    fn send(&mut self, node: NodeId, msg: ToWorker) -> bool {
        let text = serde_json::to_string(&msg).expect("message serializes");
        let msg: ToWorker = serde_json::from_str(&text).expect("message round-trips");
        let mut log = self.log();
        if log.attached.contains(&node) {
            log.sent.push((node, msg));
            true
        } else {
            log.undelivered.push((node, msg));
            false
        }
    }

    fn pool(&mut self, cmd: PoolCmd) {
        self.log().pool.push(cmd);
    }

    fn journal(&mut self, write: Write) {
        let mut log = self.log();
        match write {
            Write::Attempts(a) => log.attempts.extend(a),
            Write::AttemptResults(r) => log.attempt_results.extend(r),
            Write::Outcomes(o) => {
                log.uncommitted.extend(o.iter().map(|o| o.id.clone()));
                log.outcomes.extend(o);
            }
        }
    }

    fn committed(&mut self) -> Vec<String> {
        let mut log = self.log();
        if log.hold_commits {
            return Vec::new();
        }
        std::mem::take(&mut log.uncommitted)
    }

    fn writer_error(&self) -> Option<String> {
        self.log().writer_error.clone()
    }

    fn close(&mut self) {}
}
