//! Per-job dispatch policies: a job may choose its own policy (FA, MCU, MCH, GCC) before its
//! first task; its tasks are then chosen by that policy, and read through caches or not as it
//! says. Each policy in use chooses among its own jobs' tasks, and for each free slot the
//! policies are asked in the order of their oldest task in the window (FIFO across them), so
//! a job's choice never starves another's older tasks.

use super::*;

impl Core {
    /// Job `job` is dispatched by `kind` instead of the core's policy. Only before its first
    /// task ([`CoreError::JobStarted`] after).
    pub fn handle_job_policy(&mut self, job: JobId, kind: PolicyKind) -> Result<(), CoreError> {
        if self.jobs.contains_key(&job) {
            return Err(CoreError::JobStarted(job));
        }
        self.job_policies.insert(job, kind);
        self.kind_policies
            .entry(kind)
            .or_insert_with(|| kind.build(&self.cfg));
        if kind.uses_locality() && !self.tracking {
            self.start_tracking();
        }
        Ok(())
    }

    /// The policy of job `job`, if it chose one.
    pub fn job_policy(&self, job: JobId) -> Option<PolicyKind> {
        self.job_policies.get(&job).copied()
    }

    /// Whether `task`'s policy reads through caches: its inputs are cached on its node, read
    /// from a peer or locally when held (all but FA). Its intermediate inputs are read from
    /// their holders whatever the policy.
    pub fn caches_for(&self, task: TaskId) -> bool {
        match self
            .tasks
            .get(&task)
            .and_then(|t| self.job_policies.get(&t.job))
        {
            Some(kind) => kind.uses_locality(),
            None => self.policy.uses_locality(),
        }
    }

    /// A policy that reads cached data is now in use: the queued tasks enter the locality
    /// candidate sets.
    fn start_tracking(&mut self) {
        self.tracking = true;
        let queued: Vec<(u64, TaskId)> = self.queue.iter().collect();
        for (seq, task) in queued {
            let inputs = &self.tasks[&task].inputs;
            self.locality.enqueue(task, seq, inputs, &self.effective);
        }
    }
}

/// The policy groups (None: the core's own policy) with a task in the window, in the order of
/// their oldest task there; at most `groups` of them (all there are).
pub(super) fn groups_by_age(
    queue: &WaitQueue,
    window_bound: u64,
    kind_of: &dyn Fn(TaskId) -> Option<PolicyKind>,
    groups: usize,
) -> Vec<Option<PolicyKind>> {
    let mut out = Vec::with_capacity(groups);
    for (seq, task) in queue.iter() {
        if seq >= window_bound || out.len() == groups {
            break;
        }
        let g = kind_of(task);
        if !out.contains(&g) {
            out.push(g);
        }
    }
    out
}
