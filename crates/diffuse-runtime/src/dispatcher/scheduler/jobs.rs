//! Jobs, live: a task's `job` (default `default`) names the group it belongs to. Each job is
//! the core's [`JobId`] (its unread intermediate objects are released when it ends), has
//! counters (`GET /v1/jobs/{job}`, `diffuse status --job`) and can be cancelled whole
//! (`POST /v1/jobs/{job}/cancel`, `diffuse cancel --job`): its queued tasks end at once and its
//! running tasks' processes are stopped. [`Jobs`] owns every job's task list.

use super::tasks::{Listed, TaskTable};
use super::views::SubmitError;
use crate::spec::TaskDef;
use diffuse_core::{Core, JobId, PolicyKind, TaskId};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// The tasks of one job, in the order they were taken in.
pub struct JobTasks {
    /// The core's id.
    pub id: JobId,
    /// Its tasks (internal ids, increasing).
    pub tasks: Vec<TaskId>,
}

/// What `GET /v1/jobs/{job}` shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
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

impl JobCancelled {
    /// Count what cancelling one of the job's tasks answered.
    pub fn count(&mut self, answer: Result<String, String>) {
        match answer {
            Ok(r) if r == "cancelled" => self.cancelled += 1,
            Ok(_) => self.stopping += 1,
            // Ended already, or abandoned by the cancel of a task after it.
            Err(_) => self.ended += 1,
        }
    }
}

/// Every job's tasks, by job name.
#[derive(Default)]
pub struct Jobs {
    by_name: FxHashMap<String, JobTasks>,
}

impl Jobs {
    /// Record task `t` (`def`, taken in, new or replayed) in its job; a job's first task gives
    /// the core the job's policy, if it has one.
    pub fn join(&mut self, t: TaskId, def: &TaskDef, core: &mut Core) -> JobId {
        if let Some(entry) = self.by_name.get_mut(def.job()) {
            entry.tasks.push(t);
            return entry.id;
        }
        let id = JobId(self.by_name.len() as u32);
        let tasks = vec![t];
        self.by_name
            .insert(def.job().to_string(), JobTasks { id, tasks });
        if let Some(kind) = def.more.as_ref().and_then(|m| m.job_policy) {
            if let Err(e) = core.handle_job_policy(id, kind) {
                tracing::error!("job policy: {e}");
            }
        }
        id
    }

    /// A job's policy is stated on its tasks (`job_policy`): every task of a job must state
    /// the same one or none, and a job that already has tasks keeps the policy it has. Each
    /// task of the batch is given its job's policy, so the journal replays it with its first.
    pub fn resolve_policies(&self, defs: &mut [TaskDef], core: &Core) -> Result<(), SubmitError> {
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
            if let Some(j) = self.by_name.get(job) {
                let has = core.job_policy(j.id);
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
    pub fn id(&self, name: &str) -> JobId {
        self.by_name
            .get(name)
            .map_or(JobId(self.by_name.len() as u32), |j| j.id)
    }

    /// The tasks of job `name`, in the order they were taken in; None if no task names it.
    pub fn tasks(&self, name: &str) -> Option<&[TaskId]> {
        self.by_name.get(name).map(|j| j.tasks.as_slice())
    }

    /// Job `name`'s counters; None if no task names it.
    pub fn view(&self, name: &str, tasks: &TaskTable) -> Option<JobView> {
        let j = self.by_name.get(name)?;
        let mut v = JobView {
            job: name.to_string(),
            tasks: j.tasks.len() as u64,
            ..JobView::default()
        };
        for t in &j.tasks {
            match tasks.listed(*t) {
                Listed::Queued => v.queued += 1,
                Listed::Running => v.running += 1,
                Listed::Succeeded => v.succeeded += 1,
                Listed::Failed => v.failed += 1,
                Listed::Cancelled => v.cancelled += 1,
            }
        }
        Some(v)
    }
}
