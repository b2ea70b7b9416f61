//! The wait queue and what is kept beside it ([`Queued`]): the queue in priority and submission
//! order, the queued tasks that may fit no node (`demanding`) or not every node (`avoiding`), and
//! the job order that shares the slots among the queued tasks' jobs. A task enters and leaves
//! all of them at once, here.

use super::state::TaskEntry;
use crate::ids::TaskId;
use crate::queue::WaitQueue;
use crate::sharing::share::JobSharing;
use std::collections::BTreeSet;

/// The queued tasks, in order, and the sets and job order kept beside the queue.
pub(super) struct Queued {
    queue: WaitQueue,
    /// Queued tasks that ask for more than one core, or anything else (the ones that may fit no
    /// node).
    demanding: BTreeSet<TaskId>,
    /// Queued tasks that avoid a node (retries) or state a walltime (which some node may not
    /// have left). With none of these and no demanding task, every queued task fits any node
    /// with a free core, and decisions skip the check.
    avoiding: BTreeSet<TaskId>,
    /// How jobs share the slots ([`crate::sharing`]): whose tasks a free slot is offered first.
    job_order: Box<dyn JobSharing>,
}

impl Queued {
    /// An empty queue, its jobs shared by `job_order`.
    pub(super) fn new(job_order: Box<dyn JobSharing>) -> Queued {
        Queued {
            queue: WaitQueue::new(),
            demanding: BTreeSet::new(),
            avoiding: BTreeSet::new(),
            job_order,
        }
    }

    /// The wait queue.
    pub(super) fn queue(&self) -> &WaitQueue {
        &self.queue
    }

    /// The queued tasks that may fit no node, in id order.
    pub(super) fn demanding(&self) -> &BTreeSet<TaskId> {
        &self.demanding
    }

    /// Whether every queued task fits any node with a free core as far as the queue knows (no
    /// demanding task, none avoiding a node or stating a walltime).
    pub(super) fn uniform(&self) -> bool {
        self.demanding.is_empty() && self.avoiding.is_empty()
    }

    /// How jobs share the slots.
    pub(super) fn job_order(&self) -> &dyn JobSharing {
        self.job_order.as_ref()
    }

    /// `task` (entry `t`) joins the back of its priority; returns its order number.
    pub(super) fn push(&mut self, task: TaskId, t: &TaskEntry) -> u64 {
        let seq = self.queue.push_at(task, t.priority);
        if !t.resources.is_one_core() {
            self.demanding.insert(task);
        }
        if t.rare().avoid.is_some() || t.rare().walltime.is_some() {
            self.avoiding.insert(task);
        }
        self.job_order.queued(t.job, seq);
        seq
    }

    /// `task` (entry `t`), queued at `seq`, leaves the queue.
    pub(super) fn remove(&mut self, task: TaskId, t: &TaskEntry, seq: u64) {
        self.queue.remove(seq);
        self.demanding.remove(&task);
        self.avoiding.remove(&task);
        self.job_order.dequeued(t.job, seq);
    }

    /// The scheduling window's bound: `depth` tasks deep.
    pub(super) fn window_bound(&self, depth: usize) -> u64 {
        self.queue.window_bound(depth)
    }
}
