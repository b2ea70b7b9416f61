//! Jobs, live: a task's `job` (default `default`) names the group it belongs to. Each job is
//! the core's [`JobId`] (its unread intermediate objects are released when it ends), has
//! counters (`GET /v1/jobs/{job}`, `diffuse status --job`) and can be cancelled whole
//! (`POST /v1/jobs/{job}/cancel`, `diffuse cancel --job`): its queued tasks end at once and its
//! running tasks' processes are stopped.

use super::tasks::Listed;
use super::{Scheduler, SubmitError};
use crate::spec::TaskDef;
use diffuse_core::{JobId, PolicyKind, TaskId};
use rustc_hash::FxHashMap;
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
    /// Record task `t` (taken in, new or replayed) in its job; a job's first task gives the
    /// core the job's policy, if it has one.
    pub(super) fn join_job(&mut self, t: TaskId) -> JobId {
        let def = &self.tasks.get(t).def;
        let name = def.job().to_string();
        let policy = def.more.as_ref().and_then(|m| m.job_policy);
        let next = JobId(self.jobs.len() as u32);
        let entry = self.jobs.entry(name).or_insert_with(|| JobTasks {
            id: next,
            tasks: Vec::new(),
        });
        entry.tasks.push(t);
        let (id, first) = (entry.id, entry.tasks.len() == 1);
        if let (true, Some(kind)) = (first, policy) {
            if let Err(e) = self.core.handle_job_policy(id, kind) {
                tracing::error!("job policy: {e}");
            }
        }
        id
    }

    /// A job's policy is stated on its tasks (`job_policy`): every task of a job must state
    /// the same one or none, and a job that already has tasks keeps the policy it has. Each
    /// task of the batch is given its job's policy, so the journal replays it with its first.
    pub(super) fn resolve_job_policies(&self, defs: &mut [TaskDef]) -> Result<(), SubmitError> {
        let mut chosen: FxHashMap<String, (PolicyKind, String)> = FxHashMap::default();
        for d in defs.iter() {
            let Some(kind) = d.more.as_ref().and_then(|m| m.job_policy) else {
                continue;
            };
            let job = d.job();
            let refuse = |why: String| {
                Err(SubmitError::Invalid(format!(
                    "task '{}': field 'job_policy': {why}",
                    d.id
                )))
            };
            if let Some(j) = self.jobs.get(job) {
                let has = self.core.job_policy(j.id);
                if has != Some(kind) {
                    let has = has.map_or("the dispatcher's policy".to_string(), |k| {
                        format!("policy {k}")
                    });
                    return refuse(format!(
                        "job '{job}' already has tasks, dispatched by {has}: a job's policy is set with its first tasks"
                    ));
                }
            }
            match chosen.get(job) {
                Some((k, other)) if *k != kind => {
                    return refuse(format!(
                        "task '{other}' of job '{job}' says {k}, this one {kind}"
                    ));
                }
                Some(_) => {}
                None => {
                    chosen.insert(job.to_string(), (kind, d.id.clone()));
                }
            }
        }
        for d in defs.iter_mut() {
            if let Some((kind, _)) = chosen.get(d.job()) {
                d.more.get_or_insert_with(Default::default).job_policy = Some(*kind);
            }
        }
        Ok(())
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
