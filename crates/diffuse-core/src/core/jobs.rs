//! Jobs sharing the queue.
//!
//! * **Per-job dispatch policies**: a job may choose its own policy before its first task; its
//!   tasks are then chosen by that policy, and read through caches or not as it says.
//! * **Order between jobs** ([`JobOrder`], MixApart's FIFO and Fair): which shares of the
//!   queue a free slot asks in turn, decided in [`crate::sharing`].

use super::*;
impl Core {
    /// Job `job` is dispatched by `kind` instead of the core's policy. Only before its first
    /// task ([`CoreError::JobStarted`] after).
    pub fn handle_job_policy(&mut self, job: JobId, kind: PolicyKind) -> Result<(), CoreError> {
        if self.jobs.contains_key(&job) {
            return Err(CoreError::JobStarted(job));
        }
        if self.job_policies.is_empty() && self.counts.queued > 0 {
            // Every task queued so far belongs to a job of the core's own policy.
            self.kind_queued.insert(None, self.counts.queued);
        }
        self.job_policies.insert(job, kind);
        let policy = self
            .kind_policies
            .entry(kind)
            .or_insert_with(|| kind.build(&self.cfg.policy_params()));
        if policy.uses_locality() && !self.tracking {
            self.start_tracking();
        }
        Ok(())
    }

    /// A task of `job` joined (+1) or left (-1) the queue: the count of queued tasks by
    /// policy, kept while jobs have policies of their own.
    pub(super) fn count_kind(&mut self, job: JobId, queued: bool) {
        if self.job_policies.is_empty() {
            return;
        }
        let kind = self.job_policies.get(&job).copied();
        let n = self.kind_queued.entry(kind).or_default();
        if queued {
            *n += 1;
        } else {
            *n -= 1;
            if *n == 0 {
                self.kind_queued.remove(&kind);
            }
        }
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
            Some(kind) => self.kind_policies[kind].uses_locality(),
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
