//! Results reused by content, in the scheduler: identical tasks in flight run once (the
//! second waits, holding its slot, then is sent as a reuse of the first's result, or runs if
//! the first failed); a waiting task cancelled ends at once; a result whose copy is gone is
//! forgotten and its task runs.

use super::{report, Env};
use crate::proto::{ToDispatcher, ToWorker};
use crate::reuse::ResultFile;
use diffuse_core::CoreConfig;

const TWINS: &str = r#"{"id":"a","cmd":"sort -o {outputs[0]} /etc/hostname","outputs":["file:///o/x"]}
{"id":"b","cmd":"sort -o {outputs[0]} /etc/hostname","outputs":["file:///o/x"]}"#;

fn kept_file() -> ResultFile {
    ResultFile {
        name: "file:///o/x".into(),
        size: 3,
        sha256: "ab".repeat(32),
        written: Some("3:1".into()),
    }
}

/// `w` ran attempt `attempt` of `task` to exit code `code`, keeping the result file.
fn finished_keeping(task: &str, attempt: u32, code: i32) -> ToDispatcher {
    let mut r = report(task, attempt, code, vec![]);
    if code == 0 {
        r.result = Some(vec![kept_file()]);
    }
    ToDispatcher::Finished(Box::new(r))
}

#[test]
fn identical_tasks_in_flight_run_once_and_the_second_reuses_the_first() {
    let mut env = Env::with_reuse(CoreConfig::default());
    let w = env.join("w1", 2, None);
    env.take();
    env.submit(TWINS);
    let runs = env.take_runs(1);
    let (_, a) = &runs[0];
    assert_eq!(a.task, "a");
    assert!(a.keep_result && a.reuse.is_none());
    // The twin waits on its slot: running for the core, nothing sent.
    assert_eq!(env.status().busy_slots, 2);
    assert_eq!(env.s.results.view().waiting, 1);
    env.from(w, finished_keeping("a", 1, 0));
    let runs = env.take_runs(1);
    let (_, b) = &runs[0];
    assert_eq!(b.task, "b");
    let order = b.reuse.as_ref().expect("sent as a reuse");
    assert_eq!(order.from, "a");
    assert_eq!(order.files[0].file, kept_file());
    assert_eq!(order.files[0].source, crate::proto::InputSource::Local);
    let mut r = report("b", 1, 0, vec![]);
    r.reused_from = Some("a".into());
    r.result = Some(vec![kept_file()]);
    env.from(w, ToDispatcher::Finished(Box::new(r)));
    env.round();
    env.round();
    let st = env.status();
    assert_eq!((st.succeeded, st.reused), (2, 1));
    assert_eq!(env.s.results.view().results, 1);
}

#[test]
fn when_the_first_of_identical_tasks_fails_the_second_runs() {
    let mut env = Env::with_reuse(CoreConfig::default());
    let w = env.join("w1", 2, None);
    env.take();
    env.submit(TWINS);
    env.take_runs(1);
    env.from(w, finished_keeping("a", 1, 3));
    let runs = env.take_runs(1);
    let (_, b) = &runs[0];
    assert_eq!(b.task, "b");
    assert!(
        b.reuse.is_none() && b.keep_result,
        "it runs, and keeps its result"
    );
}

#[test]
fn a_waiting_twin_cancelled_ends_at_once_without_a_word_to_its_worker() {
    let mut env = Env::with_reuse(CoreConfig::default());
    let w = env.join("w1", 2, None);
    env.take();
    env.submit(TWINS);
    env.take_runs(1);
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    env.send(super::SchedulerMsg::Cancel("b".into(), tx));
    assert_eq!(rx.try_recv().unwrap(), Ok("cancelled".to_string()));
    assert!(
        env.take()
            .iter()
            .all(|(_, m)| !matches!(m, ToWorker::Cancel { .. })),
        "the worker never had it"
    );
    env.round();
    env.round();
    assert_eq!(env.status().cancelled, 1);
    assert_eq!(env.s.results.view().waiting, 0);
    // The first still ends as it would have.
    env.from(w, finished_keeping("a", 1, 0));
    env.round();
    env.round();
    assert_eq!(env.status().succeeded, 1);
}

#[test]
fn a_result_whose_copy_was_evicted_is_forgotten_and_its_task_runs() {
    let mut env = Env::with_reuse(CoreConfig::default());
    let w = env.join("w1", 1, None);
    env.take();
    env.submit(
        r#"{"id":"a","cmd":"sort -o {outputs[0]} /etc/hostname","outputs":["file:///o/x"]}"#,
    );
    env.take_runs(1);
    env.from(w, finished_keeping("a", 1, 0));
    env.from(
        w,
        ToDispatcher::Evicted {
            uris: vec![kept_file().object()],
        },
    );
    env.submit(
        r#"{"id":"b","cmd":"sort -o {outputs[0]} /etc/hostname","outputs":["file:///o/x"]}"#,
    );
    let runs = env.take_runs(1);
    assert!(runs[0].1.reuse.is_none(), "no copy left: it runs");
    assert_eq!(env.s.results.view().results, 0);
}
