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
                while let Ok(first) = rx.recv() {
                    // Group commit: let a short window of writes accumulate.
                    std::thread::sleep(Duration::from_millis(20));
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
                    if let Err(e) = journal.record_attempts(&attempts) {
                        tracing::error!("journal: {e}");
                    }
                    if let Err(e) = journal.record_attempt_results(&results) {
                        tracing::error!("journal: {e}");
                    }
                    if let Err(e) = journal.record_outcomes(&outcomes) {
                        tracing::error!("journal: {e}");
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

    /// Wait until everything sent has been committed.
    pub fn close(self) {
        drop(self.tx);
        let _ = self.thread.join();
    }
}
