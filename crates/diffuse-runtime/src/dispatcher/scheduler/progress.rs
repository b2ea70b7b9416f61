//! What a round owes the journal, and the outcomes the journal writer has not confirmed yet.
//!
//! Submissions are committed by the scheduler thread itself at the end of the round that took
//! them, and only then answered (group commit). Attempts, retried attempts' reports and outcomes
//! go to the journal writer through the [`Comm`]; an outcome stays *unconfirmed* (its task shown
//! as running) until the writer says it is committed.
//!
//! A round whose submissions cannot be committed (the journal's disk full, say) is held: its
//! submitters wait, nothing of it is answered, and the scheduler moves no task on (no lookup, no
//! dispatch, nothing to the writer) until a retry, once a second, commits it. So nothing runs
//! that was not acknowledged, and nothing is refused that will run; `/v1/status` shows the error
//! while it lasts.

use super::comm::Comm;
use super::views::{SubmitError, Submitted};
use super::writer::Write;
use crate::journal::{Journal, JournalError, SubmittedTask, TaskOutcome};
use rustc_hash::FxHashMap;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Where the scheduler commits submissions: the [`Journal`] (tests put one that can be made to
/// fail in front of it).
pub trait TaskLog: Send {
    /// Commit `tasks` in one transaction, all or none.
    fn submit(&mut self, tasks: &[SubmittedTask]) -> Result<(), JournalError>;
}

impl TaskLog for Journal {
    fn submit(&mut self, tasks: &[SubmittedTask]) -> Result<(), JournalError> {
        Journal::submit(self, tasks)
    }
}

/// How long a round held by a failed commit waits before it tries again.
const RETRY: Duration = Duration::from_secs(1);

/// A commit that failed: why, since when, and when to try again.
#[derive(Clone, Debug)]
pub struct Held {
    /// The journal's error.
    pub error: String,
    /// When the first commit of this round failed.
    pub since: Instant,
    next_try: Instant,
}

/// A submitter waiting for its batch to reach the disk, and what it will be told.
type Reply = (oneshot::Sender<Result<Submitted, SubmitError>>, Submitted);

/// The journal traffic of the current round, and the outcomes not yet confirmed.
#[derive(Default)]
pub struct Progress {
    /// Outcomes sent to the writer and not yet confirmed committed, by task id.
    unconfirmed: FxHashMap<String, TaskOutcome>,
    new_tasks: Vec<SubmittedTask>,
    new_attempts: Vec<(String, u32, String)>,
    /// Reports of attempts retried (their task goes on).
    new_attempt_results: Vec<(String, u32, String)>,
    new_outcomes: Vec<TaskOutcome>,
    replies: Vec<Reply>,
    /// Set while the round's submissions cannot be committed.
    held: Option<Held>,
}

impl Progress {
    /// A task of this round's submissions.
    pub fn submitted(&mut self, task: SubmittedTask) {
        self.new_tasks.push(task);
    }

    /// Tasks submitted this round, not yet committed.
    pub fn submissions(&self) -> usize {
        self.new_tasks.len()
    }

    /// Answer `reply` with `n` once this round's submissions are committed.
    pub fn reply_when_committed(
        &mut self,
        reply: oneshot::Sender<Result<Submitted, SubmitError>>,
        n: Submitted,
    ) {
        self.replies.push((reply, n));
    }

    /// Commit the submissions taken so far, then answer their submitters. False if they could
    /// not be committed: the round is held (see the module doc) and tried again at the first
    /// call a second after the last try.
    pub fn flush_submissions(&mut self, log: &mut dyn TaskLog, now: Instant) -> bool {
        if let Some(h) = &self.held {
            if now < h.next_try {
                return false;
            }
        }
        if !self.new_tasks.is_empty() {
            if let Err(e) = log.submit(&self.new_tasks) {
                let since = self.held.as_ref().map_or(now, |h| h.since);
                if self.held.is_none() {
                    tracing::error!(
                        tasks = self.new_tasks.len(),
                        "journal: {e}; submissions wait and no task moves until it takes them \
                         (tried again every {} s)",
                        RETRY.as_secs()
                    );
                }
                self.held = Some(Held {
                    error: e.to_string(),
                    since,
                    next_try: now + RETRY,
                });
                return false;
            }
            self.new_tasks.clear();
        }
        if let Some(h) = self.held.take() {
            tracing::info!(
                "journal: the held submissions are committed after {:.1} s",
                now.saturating_duration_since(h.since).as_secs_f64()
            );
        }
        for (reply, n) in self.replies.drain(..) {
            let _ = reply.send(Ok(n));
        }
        true
    }

    /// Why the round is held, while it is.
    pub fn held(&self) -> Option<&Held> {
        self.held.as_ref()
    }

    /// Attempt `attempt` of task `id` was sent to worker `worker`.
    pub fn attempt(&mut self, id: String, attempt: u32, worker: String) {
        self.new_attempts.push((id, attempt, worker));
    }

    /// Attempt `attempt` of task `id` failed and the task goes on (a retry, a remake): its report.
    pub fn attempt_result(&mut self, id: String, attempt: u32, report_json: String) {
        self.new_attempt_results.push((id, attempt, report_json));
    }

    /// A task's outcome: journaled this round, unconfirmed until the writer says so.
    pub fn outcome(&mut self, o: TaskOutcome) {
        self.unconfirmed.insert(o.id.clone(), o.clone());
        self.new_outcomes.push(o);
    }

    /// Task `id`'s outcome, while not yet confirmed committed.
    pub fn unconfirmed(&self, id: &str) -> Option<&TaskOutcome> {
        self.unconfirmed.get(id)
    }

    /// Outcomes not yet confirmed committed.
    pub fn ending(&self) -> usize {
        self.unconfirmed.len()
    }

    /// Take the writer's confirmations (the outcomes now on disk); hand it this round's
    /// attempts and outcomes.
    pub fn flush(&mut self, comm: &mut dyn Comm) -> Vec<TaskOutcome> {
        let confirmed = comm
            .committed()
            .into_iter()
            .filter_map(|id| self.unconfirmed.remove(&id))
            .collect();
        if !self.new_attempts.is_empty() {
            comm.journal(Write::Attempts(std::mem::take(&mut self.new_attempts)));
        }
        if !self.new_attempt_results.is_empty() {
            comm.journal(Write::AttemptResults(std::mem::take(
                &mut self.new_attempt_results,
            )));
        }
        if !self.new_outcomes.is_empty() {
            comm.journal(Write::Outcomes(std::mem::take(&mut self.new_outcomes)));
        }
        confirmed
    }
}
