//! The dispatch policies in use ([`Policies`]): the core's own, and those jobs chose for
//! themselves.
//!
//! A job may choose its own policy before its first task ([`crate::Core::handle_job_policy`]);
//! its tasks are then chosen by that policy, and read through caches or not as it says. One
//! instance of each policy chosen serves all the jobs that chose it. Which jobs, or groups of
//! jobs, a free slot asks first is the job order's decision ([`crate::sharing`]); this type
//! asks each share's policy in that turn.

use crate::dispatch::{DispatchPolicy, PolicyKind, PolicyParams, SchedView};
use crate::ids::{JobId, NodeId, TaskId};
use crate::sharing::Share;
use crate::time::Time;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// The dispatch policies in use, and the queued tasks counted by policy.
pub(super) struct Policies {
    /// The core's own policy: for every job that chose none.
    own: Box<dyn DispatchPolicy>,
    /// Jobs with a dispatch policy of their own (the others use `own`).
    by_job: FxHashMap<JobId, PolicyKind>,
    /// One instance of each policy jobs chose.
    by_kind: BTreeMap<PolicyKind, Box<dyn DispatchPolicy>>,
    /// Queued tasks by policy group (None: the core's own), while jobs have policies.
    queued: FxHashMap<Option<PolicyKind>, u64>,
    /// Some policy in use reads cached data (the queued tasks are then in the locality
    /// candidate sets).
    caching: bool,
}

impl Policies {
    /// The core's own policy, and no job with one of its own.
    pub(super) fn new(own: Box<dyn DispatchPolicy>) -> Policies {
        let caching = own.uses_locality();
        Policies {
            own,
            by_job: FxHashMap::default(),
            by_kind: BTreeMap::new(),
            queued: FxHashMap::default(),
            caching,
        }
    }

    /// Job `job` is dispatched by `kind` (built with `params` if no job chose it before);
    /// `queued` tasks are in the queue now, all of jobs without a policy of their own. Returns
    /// true if the first policy that reads cached data is now in use.
    pub(super) fn choose_for_job(
        &mut self,
        job: JobId,
        kind: PolicyKind,
        params: &PolicyParams,
        queued: u64,
    ) -> bool {
        if self.by_job.is_empty() && queued > 0 {
            // Every task queued so far belongs to a job of the core's own policy.
            self.queued.insert(None, queued);
        }
        self.by_job.insert(job, kind);
        let policy = self
            .by_kind
            .entry(kind)
            .or_insert_with(|| kind.build(params));
        let started = policy.uses_locality() && !self.caching;
        self.caching |= started;
        started
    }

    /// A task of `job` joined (`queued`) or left the queue: the count of queued tasks by
    /// policy, kept while jobs have policies of their own.
    pub(super) fn count(&mut self, job: JobId, queued: bool) {
        if self.by_job.is_empty() {
            return;
        }
        let kind = self.by_job.get(&job).copied();
        let n = self.queued.entry(kind).or_default();
        if queued {
            *n += 1;
        } else {
            *n -= 1;
            if *n == 0 {
                self.queued.remove(&kind);
            }
        }
    }

    /// The policy job `job` chose, if any.
    pub(super) fn of_job(&self, job: JobId) -> Option<PolicyKind> {
        self.by_job.get(&job).copied()
    }

    /// Whether some job chose a policy of its own.
    pub(super) fn any_by_job(&self) -> bool {
        !self.by_job.is_empty()
    }

    /// How many policy groups have a queued task (while jobs have policies of their own).
    pub(super) fn groups(&self) -> usize {
        self.queued.len()
    }

    /// Whether some policy in use reads cached data.
    pub(super) fn caching(&self) -> bool {
        self.caching
    }

    /// Whether the policy of job `job` reads through caches.
    pub(super) fn caches_for_job(&self, job: JobId) -> bool {
        match self.by_job.get(&job) {
            Some(kind) => self.by_kind[kind].uses_locality(),
            None => self.own.uses_locality(),
        }
    }

    /// Whether the core's own policy decides every task (no job has one of its own) and its
    /// `choose_any` ignores the node ([`DispatchPolicy::any_ignores_node`]).
    pub(super) fn any_ignores_node(&self) -> bool {
        self.by_job.is_empty() && self.own.any_ignores_node()
    }

    /// Whether the core's own policy reads through caches.
    pub(super) fn own_caches(&self) -> bool {
        self.own.uses_locality()
    }

    /// When a policy in use wants its next round, if that is after `last_pass`.
    pub(super) fn next_round(&self, last_pass: Option<Time>) -> Option<Time> {
        std::iter::once(&self.own)
            .chain(self.by_kind.values())
            .filter_map(|p| p.wake_at())
            .filter(|t| last_pass.is_none_or(|last| *t > last))
            .min()
    }

    /// The task `node` takes: chosen by the core's own policy from the whole `view` (`shares`
    /// None), or by each share's policy in turn from that share's tasks, until one chooses.
    /// `local`: the pass that takes only tasks with data on `node`; `job_of`: a task's job.
    pub(super) fn choose(
        &mut self,
        shares: Option<Vec<Share>>,
        view: &SchedView<'_>,
        job_of: &dyn Fn(TaskId) -> JobId,
        node: NodeId,
        now: Time,
        local: bool,
    ) -> Option<TaskId> {
        let ask = |policy: &mut dyn DispatchPolicy, view: &SchedView<'_>| {
            if local {
                policy.choose_local(view, node, now)
            } else {
                policy.choose_any(view, node, now)
            }
        };
        let Some(shares) = shares else {
            return ask(self.own.as_mut(), view);
        };
        let by_job = &self.by_job;
        let kind_of = |t: TaskId| by_job.get(&job_of(t)).copied();
        for g in shares {
            let fits_g = |t: TaskId| {
                (match g {
                    Share::Policy(k) => kind_of(t) == k,
                    Share::Job(j) => job_of(t) == j,
                }) && (view.fits)(t)
            };
            let view_g = view.with_fits(&fits_g);
            let kind = match g {
                Share::Policy(k) => k,
                Share::Job(j) => by_job.get(&j).copied(),
            };
            let policy = match kind {
                None => self.own.as_mut(),
                Some(k) => self
                    .by_kind
                    .get_mut(&k)
                    .expect("a policy per kind")
                    .as_mut(),
            };
            let chosen = ask(policy, &view_g);
            if chosen.is_some() {
                return chosen;
            }
        }
        None
    }

    /// The queued tasks counted by policy are the queued tasks (`queued_jobs`: the job of
    /// each, one entry per task).
    pub(super) fn check(&self, queued_jobs: impl Iterator<Item = JobId>) -> Result<(), String> {
        if self.by_job.is_empty() {
            return Ok(());
        }
        let mut by_kind: FxHashMap<Option<PolicyKind>, u64> = FxHashMap::default();
        for job in queued_jobs {
            *by_kind.entry(self.by_job.get(&job).copied()).or_default() += 1;
        }
        if by_kind != self.queued {
            return Err(format!(
                "queued by policy {:?}, counted {:?}",
                by_kind, self.queued
            ));
        }
        Ok(())
    }
}
