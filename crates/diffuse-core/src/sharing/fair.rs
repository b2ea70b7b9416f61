//! Fair between jobs: a free slot asks the jobs with a task in the window, those holding the
//! fewest cores first (then the oldest task), each through its own policy. Work-conserving:
//! the next job is asked whenever one has nothing to run there.

use super::share::{JobSharing, Share, ShareView};
use crate::ids::{JobId, TaskId};
use crate::queue::WaitQueue;
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;

/// Fair: each job's queued tasks, by order number.
#[derive(Clone, Debug, Default)]
pub(crate) struct Fair {
    job_queues: FxHashMap<JobId, BTreeSet<u64>>,
}

impl JobSharing for Fair {
    fn queued(&mut self, job: JobId, seq: u64) {
        self.job_queues.entry(job).or_default().insert(seq);
    }

    fn dequeued(&mut self, job: JobId, seq: u64) {
        if let Some(q) = self.job_queues.get_mut(&job) {
            q.remove(&seq);
            if q.is_empty() {
                self.job_queues.remove(&job);
            }
        }
    }

    fn shares(&self, view: &ShareView<'_>) -> Option<Vec<Share>> {
        let in_window: Vec<(JobId, u64)> = self
            .job_queues
            .iter()
            .filter_map(|(j, seqs)| {
                let first = *seqs.first()?;
                (first < view.window_bound).then_some((*j, first))
            })
            .collect();
        Some(
            self.rank(in_window, view.held)
                .into_iter()
                .map(Share::Job)
                .collect(),
        )
    }

    fn rank(&self, jobs: Vec<(JobId, u64)>, held: &dyn Fn(JobId) -> u64) -> Vec<JobId> {
        let mut order: Vec<(u64, u64, JobId)> = jobs
            .into_iter()
            .map(|(j, first)| (held(j), first, j))
            .collect();
        order.sort_unstable();
        order.into_iter().map(|(_, _, j)| j).collect()
    }

    /// The per-job queues hold exactly the queued tasks, each under its job.
    fn check(
        &self,
        queue: &WaitQueue,
        job_of: &dyn Fn(TaskId) -> JobId,
        queued: u64,
    ) -> Result<(), String> {
        let listed: usize = self.job_queues.values().map(BTreeSet::len).sum();
        if listed as u64 != queued {
            return Err(format!("{listed} tasks in job queues, {queued} queued"));
        }
        for (job, seqs) in &self.job_queues {
            for seq in seqs {
                let t = queue
                    .get(*seq)
                    .ok_or(format!("{job} lists {seq}, not queued"))?;
                if job_of(t) != *job {
                    return Err(format!("{t} is listed under {job}, not its job"));
                }
            }
        }
        Ok(())
    }
}
