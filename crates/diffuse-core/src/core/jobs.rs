//! Jobs sharing the queue.
//!
//! * **Per-job dispatch policies**: a job may choose its own policy before its first task; its
//!   tasks are then chosen by that policy, and read through caches or not as it says.
//! * **Order between jobs** ([`JobOrder`], MixApart's FIFO and Fair): under FIFO each policy in
//!   use chooses among its own jobs' tasks, and a free slot asks the policies in the order of
//!   their oldest task in the window, so a job's choice never starves another's older tasks.
//!   Under Fair a free slot asks the jobs with a task in the window, those holding the fewest
//!   cores first (then the oldest task), each through its own policy: work-conserving, since
//!   the next job is asked whenever one has nothing to run there.

use super::*;
use std::fmt;
use std::str::FromStr;

/// How jobs share the slots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobOrder {
    /// The oldest task first, whatever its job (one queue).
    #[default]
    Fifo,
    /// The job holding the fewest cores first.
    Fair,
}

impl FromStr for JobOrder {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "fifo" => Ok(JobOrder::Fifo),
            "fair" => Ok(JobOrder::Fair),
            _ => Err(format!("unknown job order '{s}' (expected fifo or fair)")),
        }
    }
}

impl fmt::Display for JobOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JobOrder::Fifo => "fifo",
            JobOrder::Fair => "fair",
        })
    }
}

/// Who chooses for a free slot, and among which tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Share {
    /// The tasks of the jobs using this policy (None: the core's own).
    Policy(Option<PolicyKind>),
    /// The tasks of one job, by its policy.
    Job(JobId),
}

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

/// Under Fair: the jobs with a task in the window, the fewest cores held first, then the
/// oldest task.
pub(super) fn fair_order(
    job_queues: &FxHashMap<JobId, BTreeSet<u64>>,
    jobs: &FxHashMap<JobId, JobEntry>,
    window_bound: u64,
) -> Vec<Share> {
    let mut order: Vec<(u64, u64, JobId)> = job_queues
        .iter()
        .filter_map(|(j, seqs)| {
            let first = *seqs.first()?;
            (first < window_bound).then(|| {
                let held = jobs.get(j).map_or(0, |e| e.running_cores);
                (held, first, *j)
            })
        })
        .collect();
    order.sort_unstable();
    order.into_iter().map(|(_, _, j)| Share::Job(j)).collect()
}

/// The policy groups (None: the core's own policy) with a task in the window, in the order of
/// their oldest task there; at most `groups` of them (all there are).
pub(super) fn groups_by_age(
    queue: &WaitQueue,
    window_bound: u64,
    kind_of: &dyn Fn(TaskId) -> Option<PolicyKind>,
    groups: usize,
) -> Vec<Share> {
    let mut out = Vec::with_capacity(groups);
    for (seq, task) in queue.iter() {
        if seq >= window_bound || out.len() == groups {
            break;
        }
        let g = Share::Policy(kind_of(task));
        if !out.contains(&g) {
            out.push(g);
        }
    }
    out
}
