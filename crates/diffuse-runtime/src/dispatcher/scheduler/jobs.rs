//! Jobs, live: a task's `job` (default `default`) names the group it belongs to. Each job is
//! the core's [`JobId`] (its unread intermediate objects are released when it ends), has
//! counters (`GET /v1/jobs/{job}`, `diffuse status --job`) and can be cancelled whole
//! (`POST /v1/jobs/{job}/cancel`, `diffuse cancel --job`): its queued tasks end at once and its
//! running tasks' processes are stopped.

use super::tasks::Listed;
use super::Scheduler;
use diffuse_core::{JobId, TaskId};
use serde::Serialize;

/// The tasks of one job, in the order they were taken in.
pub struct JobTasks {
    /// The core's id.
    pub id: JobId,
    /// Its tasks (internal ids, increasing).
    pub tasks: Vec<TaskId>,
}

/// What `GET /v1/jobs/{job}` shows.
#[derive(Clone, Debug, Default, Serialize)]
pub struct JobView {
    /// Its name.
    pub job: String,
    /// Tasks submitted to it.
    pub tasks: u64,
    /// Not dispatched yet (waiting for lookups, dependencies or a slot).
    pub queued: u64,
    /// Dispatched, outcome not journaled yet.
    pub running: u64,
    /// Ended with exit code 0.
    pub succeeded: u64,
    /// Ended otherwise.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
}

/// What cancelling a job did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct JobCancelled {
    /// Its name.
    pub job: String,
    /// Tasks that ended cancelled at once (queued, blocked, looking up).
    pub cancelled: u64,
    /// Running tasks whose processes are being stopped (they end cancelled).
    pub stopping: u64,
    /// Tasks that had already ended.
    pub ended: u64,
}

impl Scheduler {
    /// The core's id of job `name`, and the task recorded in it.
    pub(super) fn join_job(&mut self, name: &str, t: TaskId) -> JobId {
        let next = JobId(self.jobs.len() as u32);
        let entry = self
            .jobs
            .entry(name.to_string())
            .or_insert_with(|| JobTasks {
                id: next,
                tasks: Vec::new(),
            });
        entry.tasks.push(t);
        entry.id
    }

    /// The core's id of job `name` (a name never seen gets the next id, unrecorded).
    pub(super) fn job_id(&self, name: &str) -> JobId {
        self.jobs
            .get(name)
            .map_or(JobId(self.jobs.len() as u32), |j| j.id)
    }

    /// Job `name`'s counters; None if no task names it.
    pub(super) fn job_view(&self, name: &str) -> Option<JobView> {
        let j = self.jobs.get(name)?;
        let mut v = JobView {
            job: name.to_string(),
            tasks: j.tasks.len() as u64,
            ..JobView::default()
        };
        for t in &j.tasks {
            match self.tasks.listed(*t) {
                Listed::Queued => v.queued += 1,
                Listed::Running => v.running += 1,
                Listed::Succeeded => v.succeeded += 1,
                Listed::Failed => v.failed += 1,
                Listed::Cancelled => v.cancelled += 1,
            }
        }
        Some(v)
    }

    /// Cancel every unfinished task of job `name`, the last taken in first (so a task ends
    /// cancelled before the task it depends on does). None if no task names it.
    pub(super) fn cancel_job(&mut self, name: &str) -> Option<JobCancelled> {
        let tasks = self.jobs.get(name)?.tasks.clone();
        let mut done = JobCancelled {
            job: name.to_string(),
            ..JobCancelled::default()
        };
        for t in tasks.into_iter().rev() {
            let id = self.tasks.get(t).def.id.clone();
            match self.cancel(&id) {
                Ok(r) if r == "cancelled" => done.cancelled += 1,
                Ok(_) => done.stopping += 1,
                // Ended already, or abandoned by the cancel of a task after it.
                Err(_) => done.ended += 1,
            }
        }
        Some(done)
    }
}
