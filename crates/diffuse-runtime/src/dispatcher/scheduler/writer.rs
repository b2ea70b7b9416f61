//! The journal writer thread: group-commits dispatched attempts and outcomes off the scheduler
//! thread, and confirms each committed outcome back to it.

use crate::journal::{Journal, JournalError, TaskOutcome};
use std::sync::mpsc::{Receiver, Sender};
use std::time::Duration;

/// What the writer thread commits.
pub enum Write {
    /// Attempts dispatched: (task id, attempt, worker name).
    Attempts(Vec<(String, u32, String)>),
    /// Reports of attempts that were retried: (task id, attempt, report JSON).
    AttemptResults(Vec<(String, u32, String)>),
    /// Outcomes.
    Outcomes(Vec<TaskOutcome>),
}

/// The journal writer thread and the channel of its commit confirmations.
pub struct Writer {
    /// Where to send writes.
    pub tx: Sender<Write>,
    /// Ids of the tasks whose outcomes were committed, one batch per commit.
    pub committed: Receiver<Vec<String>>,
    thread: std::thread::JoinHandle<()>,
}

impl Writer {
    /// Open a second connection to the journal at `path` and start the thread.
    pub fn start(path: &std::path::Path) -> Result<Writer, JournalError> {
        let mut journal = Journal::reopen(path, false)?;
        journal.relax_durability()?;
        let (tx, rx) = std::sync::mpsc::channel::<Write>();
        let (done_tx, committed) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || {
                let mut last_rows = 0usize;
                while let Ok(first) = rx.recv() {
                    // Group commit: let writes accumulate for a window that grows with the
                    // load (10 us per row of the last commit, at most 20 ms). Busy, a short
                    // task's attempt and outcome meet in one commit (the attempt is then not
                    // written, `skip_ended_attempts`); idle, an outcome is committed, and a
                    // client waiting for it answered, at once, not 20 ms later.
                    let window = Duration::from_micros((last_rows as u64 * 10).min(20_000));
                    if !window.is_zero() {
                        std::thread::sleep(window);
                    }
                    let mut attempts = Vec::new();
                    let mut results = Vec::new();
                    let mut outcomes = Vec::new();
                    for w in std::iter::once(first).chain(rx.try_iter()) {
                        match w {
                            Write::Attempts(a) => attempts.extend(a),
                            Write::AttemptResults(r) => results.extend(r),
                            Write::Outcomes(o) => outcomes.extend(o),
                        }
                    }
                    last_rows = attempts.len() + results.len() + outcomes.len();
                    let skipped = skip_ended_attempts(&mut attempts, &outcomes);
                    if let Err(e) = journal.record_attempts(&attempts) {
                        tracing::error!("journal: {e}");
                    }
                    if let Err(e) = journal.record_attempt_results(&results) {
                        tracing::error!("journal: {e}");
                    }
                    if let Err(e) = journal.record_outcomes(&outcomes) {
                        tracing::error!("journal: {e}");
                        // Without their outcomes, the attempts left out must be on disk: they
                        // number the next attempt after a restart.
                        if let Err(e) = journal.record_attempts(&skipped) {
                            tracing::error!("journal: {e}");
                        }
                    }
                    let _ = done_tx.send(outcomes.into_iter().map(|o| o.id).collect());
                }
            })
            .expect("spawn journal writer");
        Ok(Writer {
            tx,
            committed,
            thread,
        })
    }

    /// Wait until everything sent has been committed (see [`skip_ended_attempts`]).
    pub fn close(self) {
        drop(self.tx);
        let _ = self.thread.join();
    }
}

/// Leave out the attempts whose outcome is committed in the same transaction: the outcome row
/// records the attempt and its node, and both the restart (`Journal::load`) and the attempt
/// history (`Journal::attempt_results`) read it from there. A short task is dispatched and ends
/// within one group commit, so this halves what the writer does for it (an attempt row and an
/// update of the task's row, besides the outcome).
/// Returns the attempts left out.
fn skip_ended_attempts(
    attempts: &mut Vec<(String, u32, String)>,
    outcomes: &[TaskOutcome],
) -> Vec<(String, u32, String)> {
    if attempts.is_empty() || outcomes.is_empty() {
        return Vec::new();
    }
    let ended: std::collections::HashSet<(&str, u32)> = outcomes
        .iter()
        .filter(|o| o.node.is_some())
        .map(|o| (o.id.as_str(), o.attempt))
        .collect();
    let (skipped, kept) = std::mem::take(attempts)
        .into_iter()
        .partition(|(id, attempt, _)| ended.contains(&(id.as_str(), *attempt)));
    *attempts = kept;
    skipped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{OutcomeState, SubmittedTask};

    fn outcome(id: &str, attempt: u32, node: Option<&str>) -> TaskOutcome {
        TaskOutcome {
            id: id.into(),
            state: OutcomeState::Succeeded,
            attempt,
            node: node.map(String::from),
            exit_code: Some(0),
            error: None,
            result_json: "{}".into(),
            finished_at: 1.0,
        }
    }

    #[test]
    fn an_attempt_that_ends_in_the_same_commit_is_read_from_its_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.sqlite");
        let mut j = crate::journal::Journal::open(&path).unwrap();
        let tasks: Vec<SubmittedTask> = ["a", "b"]
            .iter()
            .map(|id| SubmittedTask {
                id: id.to_string(),
                spec_json: format!(r#"{{"id":"{id}","cmd":"true"}}"#),
                submitted_at: 0.0,
            })
            .collect();
        j.submit(&tasks).unwrap();
        // a: attempt 1 failed and was retried (its own row), attempt 2 ended in this commit;
        // b: dispatched, still running.
        j.record_attempts(&[("a".into(), 1, "w1".into())]).unwrap();
        let mut attempts = vec![("a".into(), 2, "w2".into()), ("b".into(), 1, "w1".into())];
        let outcomes = vec![outcome("a", 2, Some("w2"))];
        let skipped = skip_ended_attempts(&mut attempts, &outcomes);
        assert_eq!(attempts, vec![("b".to_string(), 1, "w1".to_string())]);
        assert_eq!(skipped, vec![("a".to_string(), 2, "w2".to_string())]);
        j.record_attempts(&attempts).unwrap();
        j.record_outcomes(&outcomes).unwrap();
        assert_eq!(
            j.attempts("a").unwrap(),
            vec![(1, "w1".to_string()), (2, "w2".to_string())]
        );
        assert_eq!(j.attempts("b").unwrap(), vec![(1, "w1".to_string())]);
        let loaded = j.load().unwrap();
        let counts: Vec<(&str, u32)> = loaded
            .iter()
            .map(|t| (t.task.id.as_str(), t.attempts))
            .collect();
        assert_eq!(counts, vec![("a", 2), ("b", 1)]);
        // An outcome with no node (cancelled before it ran) leaves every attempt in place.
        let mut attempts = vec![("b".into(), 1, "w1".into())];
        skip_ended_attempts(&mut attempts, &[outcome("b", 1, None)]);
        assert_eq!(attempts.len(), 1);
    }
}
