//! A round the journal cannot take (its disk full): held, with nothing of it answered or run,
//! until a retry commits it.

use super::super::progress::TaskLog;
use super::super::SchedulerMsg;
use super::Env;
use crate::journal::{Journal, JournalError, SubmittedTask};
use diffuse_core::CoreConfig;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// The real journal, behind a switch that makes its commits fail as a full disk does.
struct Switched {
    journal: Journal,
    full: Arc<AtomicBool>,
    tries: Arc<std::sync::atomic::AtomicU32>,
}

impl TaskLog for Switched {
    fn submit(&mut self, tasks: &[SubmittedTask]) -> Result<(), JournalError> {
        self.tries.fetch_add(1, Ordering::SeqCst);
        if self.full.load(Ordering::SeqCst) {
            return Err(JournalError::disk_full());
        }
        self.journal.submit(tasks)
    }
}

#[test]
fn a_round_the_journal_cannot_take_is_held_and_nothing_of_it_runs_until_a_retry_commits_it() {
    let mut env = Env::new(CoreConfig::default());
    let (full, tries) = (Arc::new(AtomicBool::new(true)), Arc::default());
    let journal = Journal::reopen(&env.journal_path(), false).expect("a second connection");
    let log = Switched {
        journal,
        full: full.clone(),
        tries: Arc::clone(&tries),
    };
    env.s.set_task_log(Box::new(log));
    let w = env.join("w", 1, None);
    env.take();

    let defs = crate::spec::parse_tasks(r#"{"id":"a","cmd":"true"}"#).expect("parses");
    let (tx, mut rx) = oneshot::channel();
    env.send(SchedulerMsg::Submit(defs, tx));
    assert!(rx.try_recv().is_err(), "not answered before it is on disk");
    assert!(env.take().is_empty(), "nothing sent for a held round");
    let st = env.status();
    assert!(
        st.journal_error
            .as_deref()
            .is_some_and(|e| e.contains("disk is full")),
        "{:?}",
        st.journal_error
    );
    // Rounds within the second do not try again; a worker's message is still taken.
    let tried = tries.load(Ordering::SeqCst);
    env.advance(Duration::from_millis(600));
    env.from(w, crate::proto::ToDispatcher::Heartbeat);
    env.tick();
    assert_eq!(tries.load(Ordering::SeqCst), tried);
    assert!(env.take().is_empty());
    // Space is freed; the next try (a second after the last) commits the round.
    full.store(false, Ordering::SeqCst);
    env.advance(Duration::from_millis(300));
    env.round();
    assert!(rx.try_recv().is_err(), "the retry waits its second");
    env.advance(Duration::from_millis(100));
    env.round();
    let ok = rx.try_recv().expect("answered").expect("accepted");
    assert_eq!(ok.submitted, 1);
    assert_eq!(env.status().journal_error, None);
    let (_, a) = env.take_runs(1).remove(0);
    assert_eq!(a.task, "a");
    let journaled = Journal::reopen(&env.journal_path(), true)
        .expect("reopen")
        .load()
        .expect("load");
    assert_eq!(journaled.len(), 1);
    assert_eq!(journaled[0].task.id, "a");
}
