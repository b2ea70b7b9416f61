//! What a round owes the journal, and the outcomes the journal writer has not confirmed yet.
//!
//! Submissions are committed by the scheduler thread itself at the end of the round that took
//! them, and only then answered (group commit). Attempts, retried attempts' reports and outcomes
//! go to the journal writer through the [`Comm`]; an outcome stays *unconfirmed* (its task shown
//! as running) until the writer says it is committed.

use super::comm::Comm;
use super::views::{SubmitError, Submitted};
use super::writer::Write;
use crate::journal::{Journal, SubmittedTask, TaskOutcome};
use rustc_hash::FxHashMap;
use tokio::sync::oneshot;

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

    /// Commit this round's submissions, then answer the submitters.
    pub fn flush_submissions(&mut self, journal: &mut Journal) {
        if !self.new_tasks.is_empty() {
            let tasks = std::mem::take(&mut self.new_tasks);
            if let Err(e) = journal.submit(&tasks) {
                // Should not happen (duplicates are refused before); refuse the whole round.
                tracing::error!("journal: {e}");
                for (reply, _) in self.replies.drain(..) {
                    let _ = reply.send(Err(SubmitError::Journal(e.to_string())));
                }
            }
        }
        for (reply, n) in self.replies.drain(..) {
            let _ = reply.send(Ok(n));
        }
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
