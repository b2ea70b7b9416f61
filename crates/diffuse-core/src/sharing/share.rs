//! The [`JobSharing`] trait: what a job order hears (tasks joining and leaving the queue), what
//! it sees of the core when a slot is free ([`ShareView`]) and what it answers (the
//! [`Share`]s to ask, in turn).

use crate::dispatch::PolicyKind;
use crate::ids::{JobId, TaskId};
use crate::queue::WaitQueue;

/// Who chooses for a free slot, and among which tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// The tasks of the jobs using this policy (None: the core's own).
    Policy(Option<PolicyKind>),
    /// The tasks of one job, by its policy.
    Job(JobId),
}

/// What a job order sees of the core when it lists the shares of a free slot.
pub struct ShareView<'a> {
    /// The wait queue.
    pub queue: &'a WaitQueue,
    /// The scheduling window's bound (order numbers below it are in the window).
    pub window_bound: u64,
    /// Some job has a dispatch policy of its own.
    pub job_policies: bool,
    /// A queued task's policy group (None: the core's own policy).
    pub kind_of: &'a dyn Fn(TaskId) -> Option<PolicyKind>,
    /// How many policy groups have a queued task (while jobs have policies of their own).
    pub groups: usize,
    /// Cores the running tasks of a job hold.
    pub held: &'a dyn Fn(JobId) -> u64,
}

/// An order between jobs. The core tells it of every task that joins or leaves the queue, and
/// asks it whose tasks a free slot is offered first.
#[allow(unused_variables)]
pub trait JobSharing: Send {
    /// A task of `job` joined the queue at order number `seq`.
    fn queued(&mut self, job: JobId, seq: u64) {}

    /// The task of `job` at order number `seq` left the queue.
    fn dequeued(&mut self, job: JobId, seq: u64) {}

    /// The shares a free slot asks in turn, each through its policy, until one chooses a task.
    /// None: the core's own policy chooses from the whole window.
    fn shares(&self, view: &ShareView<'_>) -> Option<Vec<Share>>;

    /// `jobs`, each with the order number of its oldest task, in the order they take turns;
    /// `held`: what a job holds now (cores, and whatever else the caller counts against it).
    fn rank(&self, jobs: Vec<(JobId, u64)>, held: &dyn Fn(JobId) -> u64) -> Vec<JobId>;

    /// Check the order's state against the queue (`job_of`: a queued task's job; `queued`:
    /// how many tasks are queued).
    fn check(
        &self,
        queue: &WaitQueue,
        job_of: &dyn Fn(TaskId) -> JobId,
        queued: u64,
    ) -> Result<(), String> {
        Ok(())
    }
}
