//! The journal writer thread: group-commits dispatched attempts and outcomes off the scheduler
//! thread, and confirms each committed outcome back to it.
//!
//! A commit the journal refuses for a reason that may pass (its disk full, an I/O error) is
//! tried again once a second until it goes through, and nothing of it is confirmed meanwhile:
//! its tasks show as running (ending), never as ended, so no client sees an outcome that a
//! restart would not find. [`Writer::failing`] holds the error while it lasts (`/v1/status`
//! shows it). An error no retry can mend (an outcome for a task the journal does not know, or a
//! second one) is logged and its commit dropped, as before.

use crate::journal::{Journal, JournalError, TaskOutcome};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the writer commits to: the journal (a test puts one that can fail in front of it).
pub trait Records: Send + 'static {
    /// Attempts dispatched: (task id, attempt, worker name).
    fn record_attempts(&mut self, a: &[(String, u32, String)]) -> Result<(), JournalError>;
    /// Reports of retried attempts: (task id, attempt, report JSON).
    fn record_attempt_results(&mut self, r: &[(String, u32, String)]) -> Result<(), JournalError>;
    /// Outcomes, in one transaction.
    fn record_outcomes(&mut self, o: &[TaskOutcome]) -> Result<(), JournalError>;
}

impl Records for Journal {
    fn record_attempts(&mut self, a: &[(String, u32, String)]) -> Result<(), JournalError> {
        Journal::record_attempts(self, a)
    }
    fn record_attempt_results(&mut self, r: &[(String, u32, String)]) -> Result<(), JournalError> {
        Journal::record_attempt_results(self, r)
    }
    fn record_outcomes(&mut self, o: &[TaskOutcome]) -> Result<(), JournalError> {
        Journal::record_outcomes(self, o)
    }
}

/// How long a refused commit waits before it is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// How long, once the scheduler has closed the writer, a refused commit is still tried: then it
/// is given up (its tasks run again after a restart, and none was shown as ended).
const RETRY_AT_CLOSE: Duration = Duration::from_secs(10);

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
    /// The journal's error while a commit is refused and being tried again.
    pub failing: Arc<Mutex<Option<String>>>,
    thread: std::thread::JoinHandle<()>,
}

impl Writer {
    /// Open a second connection to the journal at `path` and start the thread.
    pub fn start(path: &std::path::Path) -> Result<Writer, JournalError> {
        let journal = Journal::reopen(path, false)?;
        journal.relax_durability()?;
        Ok(Writer::on(journal))
    }

    /// Start the thread writing to `records`.
    pub fn on(records: impl Records) -> Writer {
        let (tx, rx) = std::sync::mpsc::channel::<Write>();
        let (done_tx, committed) = std::sync::mpsc::channel();
        let failing = Arc::new(Mutex::new(None));
        let shown = Arc::clone(&failing);
        let thread = std::thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || write_until_closed(records, rx, done_tx, &shown))
            .expect("spawn journal writer");
        Writer {
            tx,
            committed,
            failing,
            thread,
        }
    }

    /// Wait until everything sent has been committed (see [`skip_ended_attempts`]).
    pub fn close(self) {
        drop(self.tx);
        let _ = self.thread.join();
    }
}

/// How long a dispatched attempt waits for its outcome before it is written on its own. A task
/// shorter than this gets no attempt row: its outcome records the attempt.
const ATTEMPT_WAIT: Duration = Duration::from_millis(20);

/// The writer thread's loop, until the scheduler drops its end of `rx`: everything received is
/// then committed before it returns.
///
/// Outcomes are committed in groups whose window grows with the load (10 us per row of the
/// last commit, at most 20 ms): idle, an outcome is committed, and a client waiting for it
/// answered, at once; busy, one commit carries many. Dispatched attempts are held back up to
/// [`ATTEMPT_WAIT`] for their outcome (no one waits for them to be on disk: they only number
/// the next attempt after a restart), so that a short task's attempt is never written even
/// when outcomes are committed at once.
fn write_until_closed(
    mut journal: impl Records,
    rx: Receiver<Write>,
    done_tx: std::sync::mpsc::Sender<Vec<String>>,
    failing: &Mutex<Option<String>>,
) {
    use std::sync::mpsc::RecvTimeoutError;
    use std::time::Instant;
    let mut last_rows = 0usize;
    // Attempts not yet written, with when they came, oldest first.
    let mut held: std::collections::VecDeque<(Instant, (String, u32, String))> = Default::default();
    let mut open = true;
    while open || !held.is_empty() {
        let first = match held.front() {
            _ if !open => None,
            None => match rx.recv() {
                Ok(w) => Some(w),
                Err(_) => {
                    open = false;
                    None
                }
            },
            Some((at, _)) => {
                let due = (*at + ATTEMPT_WAIT).saturating_duration_since(Instant::now());
                match rx.recv_timeout(due) {
                    Ok(w) => Some(w),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => {
                        open = false;
                        None
                    }
                }
            }
        };
        let mut results = Vec::new();
        let mut outcomes = Vec::new();
        if let Some(first) = first {
            let window = Duration::from_micros((last_rows as u64 * 10).min(20_000));
            if !window.is_zero() {
                std::thread::sleep(window);
            }
            let now = Instant::now();
            for w in std::iter::once(first).chain(rx.try_iter()) {
                match w {
                    Write::Attempts(a) => held.extend(a.into_iter().map(|a| (now, a))),
                    Write::AttemptResults(r) => results.extend(r),
                    Write::Outcomes(o) => outcomes.extend(o),
                }
            }
        }
        // The attempts whose outcome is here are left out; those due (all, at the end) are
        // written; the others wait on.
        let now = Instant::now();
        let (mut attempts, mut skipped) = (Vec::new(), Vec::new());
        let ended = ended_attempts(&outcomes);
        // A retried attempt's report is written into its attempt's row: the row goes first.
        let reported: std::collections::HashSet<(&str, u32)> =
            results.iter().map(|(id, n, _)| (id.as_str(), *n)).collect();
        for (at, a) in std::mem::take(&mut held) {
            if ended.contains(&(a.0.as_str(), a.1)) {
                skipped.push(a);
            } else if !open || now >= at + ATTEMPT_WAIT || reported.contains(&(a.0.as_str(), a.1)) {
                attempts.push(a);
            } else {
                held.push_back((at, a));
            }
        }
        drop((ended, reported));
        last_rows = attempts.len() + results.len() + outcomes.len();
        let ids: Vec<String> = outcomes.iter().map(|o| o.id.clone()).collect();
        let mut commit = Commit {
            attempts,
            results,
            outcomes,
            skipped,
        };
        if commit_until_done(&mut commit, &mut journal, failing, open) && !ids.is_empty() {
            let _ = done_tx.send(ids);
        }
    }
}

/// What one group commit writes; each part is emptied once it is on disk.
struct Commit {
    attempts: Vec<(String, u32, String)>,
    results: Vec<(String, u32, String)>,
    outcomes: Vec<TaskOutcome>,
    /// Attempts left out because their outcome is in this commit: written only if the
    /// outcomes cannot be (they number the next attempt after a restart).
    skipped: Vec<(String, u32, String)>,
}

impl Commit {
    /// Write what is left: attempts, the reports of retried attempts, outcomes.
    fn write(&mut self, journal: &mut impl Records) -> Result<(), JournalError> {
        if !self.attempts.is_empty() {
            journal.record_attempts(&self.attempts)?;
            self.attempts.clear();
        }
        if !self.results.is_empty() {
            journal.record_attempt_results(&self.results)?;
            self.results.clear();
        }
        if !self.outcomes.is_empty() {
            journal.record_outcomes(&self.outcomes)?;
            self.outcomes.clear();
        }
        Ok(())
    }
}

/// Write `commit`, trying again every [`RETRY`] while the journal refuses it for a reason that
/// may pass (for at most [`RETRY_AT_CLOSE`] once the writer is closed, `open` false). True if
/// its outcomes are on disk (or had to be dropped for an error no retry mends: logged).
fn commit_until_done(
    commit: &mut Commit,
    journal: &mut impl Records,
    failing: &Mutex<Option<String>>,
    open: bool,
) -> bool {
    let mut first_failure = None;
    loop {
        let e = match commit.write(journal) {
            Ok(()) => break,
            Err(e) if !e.may_pass() => {
                tracing::error!("journal: {e}; this commit is dropped");
                if !commit.outcomes.is_empty() {
                    if let Err(e) = journal.record_attempts(&commit.skipped) {
                        tracing::error!("journal: {e}");
                    }
                }
                break;
            }
            Err(e) => e,
        };
        let since = *first_failure.get_or_insert_with(std::time::Instant::now);
        if !open && since.elapsed() >= RETRY_AT_CLOSE {
            tracing::error!(
                "journal: {e}; given up at shutdown: {} outcomes not written (their tasks run again after a restart)",
                commit.outcomes.len()
            );
            return false;
        }
        let mut shown = failing.lock().expect("the writer's error");
        if shown.is_none() {
            tracing::error!(
                "journal: {e}; the writer tries again every {} s and confirms nothing meanwhile",
                RETRY.as_secs()
            );
        }
        *shown = Some(e.to_string());
        drop(shown);
        std::thread::sleep(RETRY);
    }
    if let Some(since) = first_failure {
        *failing.lock().expect("the writer's error") = None;
        tracing::info!(
            "journal: the writer's commit went through after {:.1} s",
            since.elapsed().as_secs_f64()
        );
    }
    true
}

/// The attempts (task id, attempt) that `outcomes` record as having run on a node.
fn ended_attempts(outcomes: &[TaskOutcome]) -> std::collections::HashSet<(&str, u32)> {
    outcomes
        .iter()
        .filter(|o| o.node.is_some())
        .map(|o| (o.id.as_str(), o.attempt))
        .collect()
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
        let mut j = journal_with(dir.path(), &["a", "b"]);
        // a: attempt 1 failed and was retried (its own row), attempt 2 ended in this commit;
        // b: dispatched, still running.
        j.record_attempts(&[("a".into(), 1, "w1".into())]).unwrap();
        let attempts = vec![("a".into(), 2, "w2".into()), ("b".into(), 1, "w1".into())];
        let outcomes = vec![outcome("a", 2, Some("w2"))];
        let ended = ended_attempts(&outcomes);
        let (skipped, attempts): (Vec<_>, Vec<_>) = attempts
            .into_iter()
            .partition(|(id, n, _): &(String, u32, String)| ended.contains(&(id.as_str(), *n)));
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
        assert!(ended_attempts(&[outcome("b", 1, None)]).is_empty());
    }

    /// A journal `j.sqlite` in `dir` holding the tasks `ids`.
    fn journal_with(dir: &std::path::Path, ids: &[&str]) -> Journal {
        let mut j = Journal::open(&dir.join("j.sqlite")).unwrap();
        let tasks: Vec<SubmittedTask> = ids
            .iter()
            .map(|id| SubmittedTask {
                id: id.to_string(),
                spec_json: format!(r#"{{"id":"{id}","cmd":"true"}}"#),
                submitted_at: 0.0,
            })
            .collect();
        j.submit(&tasks).unwrap();
        j
    }

    /// [`journal_with`], and a writer on it.
    fn journal_and_writer(dir: &std::path::Path, ids: &[&str]) -> (Journal, Writer) {
        let j = journal_with(dir, ids);
        (j, Writer::start(&dir.join("j.sqlite")).unwrap())
    }

    #[test]
    fn an_attempt_waits_for_its_outcome_and_is_written_alone_after_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let (j, w) = journal_and_writer(dir.path(), &["short", "long"]);
        w.tx.send(Write::Attempts(vec![
            ("short".into(), 1, "w1".into()),
            ("long".into(), 1, "w1".into()),
        ]))
        .unwrap();
        w.tx.send(Write::Outcomes(vec![outcome("short", 1, Some("w1"))]))
            .unwrap();
        assert_eq!(w.committed.recv().unwrap(), vec!["short".to_string()]);
        // The short task's attempt is read from its outcome and never written on its own.
        assert_eq!(j.attempts("short").unwrap(), vec![(1, "w1".to_string())]);
        // The long one's is written once it has waited ATTEMPT_WAIT, the writer still open.
        let start = std::time::Instant::now();
        while j.attempts("long").unwrap().is_empty() {
            assert!(start.elapsed() < Duration::from_secs(5), "never written");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(j.attempts("long").unwrap(), vec![(1, "w1".to_string())]);
        w.close();
        drop(j);
        let c = rusqlite::Connection::open(dir.path().join("j.sqlite")).unwrap();
        let rows: i64 = c
            .query_row("SELECT count(*) FROM attempts", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1, "only the long task's attempt has a row");
    }

    #[test]
    fn a_retried_attempts_report_is_kept_though_its_attempt_was_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let (j, w) = journal_and_writer(dir.path(), &["flaky"]);
        w.tx.send(Write::Attempts(vec![("flaky".into(), 1, "w1".into())]))
            .unwrap();
        w.tx.send(Write::AttemptResults(vec![(
            "flaky".into(),
            1,
            r#"{"exit_code":1}"#.into(),
        )]))
        .unwrap();
        w.close();
        assert_eq!(
            j.attempt_results("flaky").unwrap(),
            vec![(1, "w1".to_string(), Some(r#"{"exit_code":1}"#.to_string()))]
        );
    }

    #[test]
    fn closing_the_writer_writes_every_attempt_still_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let (j, w) = journal_and_writer(dir.path(), &["a"]);
        w.tx.send(Write::Attempts(vec![("a".into(), 3, "w2".into())]))
            .unwrap();
        w.close();
        assert_eq!(j.attempts("a").unwrap(), vec![(3, "w2".to_string())]);
        assert_eq!(j.load().unwrap()[0].attempts, 3);
    }

    /// The real journal, behind a switch that makes its outcome commits fail as a full disk
    /// does.
    struct Switched {
        journal: Journal,
        full: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Records for Switched {
        fn record_attempts(&mut self, a: &[(String, u32, String)]) -> Result<(), JournalError> {
            self.journal.record_attempts(a)
        }
        fn record_attempt_results(
            &mut self,
            r: &[(String, u32, String)],
        ) -> Result<(), JournalError> {
            self.journal.record_attempt_results(r)
        }
        fn record_outcomes(&mut self, o: &[TaskOutcome]) -> Result<(), JournalError> {
            if self.full.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(JournalError::disk_full());
            }
            self.journal.record_outcomes(o)
        }
    }

    #[test]
    fn an_outcome_the_journal_refuses_is_not_confirmed_until_a_retry_writes_it() {
        let dir = tempfile::tempdir().unwrap();
        let j = journal_with(dir.path(), &["a"]);
        let full = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let w = Writer::on(Switched {
            journal: Journal::reopen(&dir.path().join("j.sqlite"), false).unwrap(),
            full: Arc::clone(&full),
        });
        w.tx.send(Write::Outcomes(vec![outcome("a", 1, Some("w1"))]))
            .unwrap();
        let start = std::time::Instant::now();
        while w.failing.lock().unwrap().is_none() {
            assert!(start.elapsed() < Duration::from_secs(5), "no error shown");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(w
            .failing
            .lock()
            .unwrap()
            .as_deref()
            .unwrap()
            .contains("full"));
        std::thread::sleep(RETRY + RETRY / 2);
        assert!(
            w.committed.try_recv().is_err(),
            "confirmed though not written"
        );
        assert!(j.load().unwrap()[0].outcome.is_none());
        full.store(false, std::sync::atomic::Ordering::SeqCst);
        let ids = w
            .committed
            .recv_timeout(RETRY * 3)
            .expect("confirmed after a retry");
        assert_eq!(ids, vec!["a".to_string()]);
        assert!(w.failing.lock().unwrap().is_none());
        assert!(j.load().unwrap()[0].outcome.is_some());
        w.close();
    }

    #[test]
    fn an_outcome_no_retry_can_write_is_dropped_and_the_writer_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let (_j, w) = journal_and_writer(dir.path(), &["a"]);
        // "ghost" was never submitted: no retry mends that.
        w.tx.send(Write::Outcomes(vec![outcome("ghost", 1, Some("w1"))]))
            .unwrap();
        w.tx.send(Write::Outcomes(vec![outcome("a", 1, Some("w1"))]))
            .unwrap();
        let mut confirmed = Vec::new();
        while confirmed.len() < 2 {
            confirmed.extend(w.committed.recv_timeout(RETRY).expect("the writer goes on"));
        }
        assert!(w.failing.lock().unwrap().is_none());
        w.close();
    }
}
