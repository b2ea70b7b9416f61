//! The scenarios: dispatch, a worker lost mid-task, a retry, a producer run again for a lost
//! intermediate object, the elastic pool growing and shrinking, a hand-off whose target leaves,
//! a task's inputs looked up before it runs (batches staged: `stage.rs`).

use super::Env;
use crate::journal::OutcomeState;
use crate::proto::{KeptOutput, LookupResult, ToDispatcher, ToWorker};
use crate::provisioner::{PoolCmd, PoolEvent, RequestState};
use diffuse_core::{CoreConfig, DynamicConfig, Provisioning, StepPolicy};
use std::time::Duration;

fn outcome(env: &Env, id: &str) -> (OutcomeState, u32) {
    let log = env.comm.log();
    let o = log
        .outcomes
        .iter()
        .find(|o| o.id == id)
        .unwrap_or_else(|| panic!("no outcome for {id}"));
    (o.state, o.attempt)
}

#[test]
fn tasks_go_to_free_slots_and_the_next_waits_for_one() {
    let mut env = Env::new(CoreConfig::default());
    let w1 = env.join("w1", 1, None);
    let w2 = env.join("w2", 1, None);
    let welcomes = env.take();
    assert!(welcomes
        .iter()
        .all(|(_, m)| matches!(m, ToWorker::Welcome { .. })));
    let b = env.submit(
        r#"{"id":"a","cmd":"true"}
{"id":"b","cmd":"true"}
{"id":"c","cmd":"true"}"#,
    );
    assert_eq!(b.submitted, 3);
    let runs = env.take_runs(2);
    let nodes: Vec<_> = runs.iter().map(|(n, _)| *n).collect();
    assert!(
        nodes.contains(&w1.node) && nodes.contains(&w2.node),
        "one each"
    );
    let st = env.status();
    assert_eq!((st.queued, st.running, st.busy_slots), (1, 2, 2));
    let (node, a) = &runs[0];
    env.finish(env.w(*node), a, 0, vec![]);
    let next = env.take_runs(1);
    assert_eq!(next[0].0, *node, "the freed slot takes the waiting task");
    assert_eq!(next[0].1.task, "c");
    // An outcome shows as ending until the writer confirms it (the round after it was handed
    // over), then as succeeded.
    env.round();
    assert_eq!(env.status().succeeded, 1);
    env.comm.log().hold_commits = true;
    let (n2, a2) = &runs[1];
    env.finish(env.w(*n2), a2, 0, vec![]);
    assert_eq!(env.status().ending, 1);
    env.comm.log().hold_commits = false;
    env.round();
    env.round();
    let (n3, a3) = &next[0];
    env.finish(env.w(*n3), a3, 0, vec![]);
    env.round();
    let st = env.status();
    assert_eq!((st.succeeded, st.running, st.ending), (3, 0, 0));
    assert_eq!(outcome(&env, "c"), (OutcomeState::Succeeded, 1));
}

#[test]
fn a_worker_lost_mid_task_gives_it_to_another_and_its_late_result_is_refused() {
    let mut env = Env::new(CoreConfig::default());
    let w1 = env.join("w1", 1, None);
    env.submit(r#"{"id":"a","cmd":"true"}"#);
    let run = env.take_runs(1).remove(0);
    assert_eq!(run.0, w1.node);
    env.drop_conn(w1);
    assert_eq!(env.comm.log().detached, vec![w1.node]);
    let st = env.status();
    assert_eq!((st.queued, st.running, st.workers), (1, 0, 0));
    // A result from the connection given up is refused.
    env.finish(w1, &run.1, 0, vec![]);
    assert_eq!(env.status().succeeded, 0);
    let w2 = env.join("w2", 1, None);
    let again = env.take_runs(1).remove(0);
    assert_eq!((again.0, again.1.attempt), (w2.node, 2));
    env.finish(w2, &again.1, 0, vec![]);
    env.round();
    assert_eq!(outcome(&env, "a"), (OutcomeState::Succeeded, 2));
}

#[test]
fn a_failed_attempt_with_retries_left_runs_again_and_keeps_its_report() {
    let mut env = Env::new(CoreConfig::default());
    env.join("w1", 1, None);
    env.join("w2", 1, None);
    env.submit(r#"{"id":"a","cmd":"false","retries":1}"#);
    let (n1, first) = env.take_runs(1).remove(0);
    env.finish(env.w(n1), &first, 1, vec![]);
    let (n2, second) = env.take_runs(1).remove(0);
    assert_eq!(second.attempt, 2);
    assert_ne!(n1, n2, "away from the worker it failed on");
    assert_eq!(env.status().queued + env.status().running, 1);
    assert_eq!(
        env.comm.log().attempt_results.len(),
        1,
        "the retried report"
    );
    env.finish(env.w(n2), &second, 1, vec![]);
    env.round();
    assert_eq!(outcome(&env, "a"), (OutcomeState::Failed, 2));
    assert_eq!(env.status().failed, 1);
}

#[test]
fn a_lost_intermediate_object_runs_its_producer_again_then_its_reader() {
    let mut env = Env::new(CoreConfig::default());
    let w1 = env.join("w1", 1, None);
    env.submit(
        r#"{"id":"p","cmd":"true","outputs":["tmp://x"]}
{"id":"c","cmd":"true","inputs":["tmp://x"]}"#,
    );
    let (_, p) = env.take_runs(1).remove(0);
    assert_eq!(p.task, "p", "the reader waits for its producer");
    let kept = || {
        vec![KeptOutput {
            uri: "tmp://x".into(),
            size: 10,
            sha256: "ab".repeat(32),
        }]
    };
    env.finish(w1, &p, 0, kept());
    let (_, c) = env.take_runs(1).remove(0);
    assert_eq!(c.task, "c");
    // The only copy goes with w1, while its reader runs there.
    let w2 = env.join("w2", 1, None);
    env.drop_conn(w1);
    let (n, remake) = env.take_runs(1).remove(0);
    assert_eq!((n, remake.task.as_str(), remake.attempt), (w2.node, "p", 2));
    assert_eq!(env.status().remaking, 1);
    env.finish(w2, &remake, 0, kept());
    let (n, c2) = env.take_runs(1).remove(0);
    assert_eq!((n, c2.task.as_str(), c2.attempt), (w2.node, "c", 2));
    env.finish(w2, &c2, 0, vec![]);
    env.round();
    // The remake is an attempt of p, not a second outcome.
    assert_eq!(outcome(&env, "p"), (OutcomeState::Succeeded, 1));
    assert_eq!(outcome(&env, "c"), (OutcomeState::Succeeded, 2));
    let st = env.status();
    assert_eq!((st.succeeded, st.remaking), (2, 0));
}

#[test]
fn the_pool_grows_for_queued_tasks_and_releases_idle_workers() {
    let cfg = CoreConfig {
        provisioning: Provisioning::Dynamic(DynamicConfig {
            step: StepPolicy::AllAtOnce,
            min_nodes: 0,
            max_nodes: 2,
            slots_per_node: 1,
            idle_timeout: Duration::ZERO,
            check_interval: Duration::ZERO,
        }),
        ..CoreConfig::default()
    };
    let mut env = Env::with_pool(cfg, 0, 2);
    env.submit(
        r#"{"id":"a","cmd":"true"}
{"id":"b","cmd":"true"}
{"id":"c","cmd":"true"}"#,
    );
    env.tick();
    assert!(
        matches!(env.comm.log().pool[..], [PoolCmd::Acquire(2)]),
        "two workers asked for (at most max)"
    );
    // The fake provisioner: two requests, whose workers join.
    for r in ["dfs-1", "dfs-2"] {
        env.send(super::SchedulerMsg::Pool(PoolEvent::State {
            request: r.into(),
            job: Some(format!("job-{r}")),
            state: RequestState::Starting,
        }));
    }
    assert_eq!(env.status().workers_by_state["starting"], 2);
    let w1 = env.join("dfs-1", 1, Some("dfs-1"));
    let w2 = env.join("dfs-2", 1, Some("dfs-2"));
    assert!(
        matches!(&env.comm.log().pool[1..], [PoolCmd::Joined(a), PoolCmd::Joined(b)] if a == "dfs-1" && b == "dfs-2")
    );
    let runs = env.take_runs(2);
    env.tick();
    for (n, a) in &runs {
        env.finish(env.w(*n), a, 0, vec![]);
    }
    let (n, last) = env.take_runs(1).remove(0);
    // The worker that ran nothing more is released once idle; the other once its task ends.
    env.tick();
    let other = if n == w1.node { w2 } else { w1 };
    assert_eq!(env.comm.log().detached, vec![other.node]);
    assert!(env
        .take()
        .iter()
        .any(|(to, m)| *to == other.node && matches!(m, ToWorker::Shutdown)));
    env.finish(env.w(n), &last, 0, vec![]);
    env.tick();
    let log = env.comm.log();
    let released: Vec<&str> = log
        .pool
        .iter()
        .filter_map(|c| match c {
            PoolCmd::Release(r) => Some(r.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(released.len(), 2, "both given back: {released:?}");
    assert!(log.attached.is_empty());
    drop(log);
    env.round();
    assert_eq!(env.status().succeeded, 3);
}

#[test]
fn a_hand_off_whose_target_leaves_ends_at_once() {
    let (mut env, a, b) = super::two_workers_one_holding_x(Duration::from_secs(600));
    // Both idle, one kept (--min-workers 1): a is released and pushes x to b first.
    env.tick();
    let sent = env.take();
    assert!(
        sent.iter()
            .any(|(to, m)| *to == b.node && matches!(m, ToWorker::Fetch { .. })),
        "a hand-off to the survivor: {sent:?}"
    );
    assert!(
        !sent.iter().any(|(_, m)| matches!(m, ToWorker::Shutdown)),
        "the released worker waits for its copy: {sent:?}"
    );
    // b leaves before it reports the copy: a is not held until the time bound (600 s).
    env.drop_conn(b);
    let sent = env.take();
    assert!(
        sent.iter()
            .any(|(to, m)| *to == a.node && matches!(m, ToWorker::Shutdown)),
        "{sent:?}"
    );
    assert!(env
        .comm
        .log()
        .pool
        .iter()
        .any(|c| matches!(c, PoolCmd::Release(r) if r == "dfs-1")));
}

#[test]
fn a_task_looks_up_its_inputs_before_it_runs_and_a_failed_lookup_fails_it() {
    let mut env = Env::new(CoreConfig::default());
    let w1 = env.join("w1", 1, None);
    env.take();
    env.submit(
        r#"{"id":"a","cmd":"true","inputs":["file:///data/in.bin"]}
{"id":"b","cmd":"true","inputs":["file:///data/missing.bin"]}"#,
    );
    let st = env.status();
    assert_eq!((st.looking_up, st.running), (2, 0), "{st:?}");
    let lookups: Vec<(u64, Vec<String>)> = env
        .take()
        .into_iter()
        .filter_map(|(_, m)| match m {
            ToWorker::Lookup { id, uris, .. } => Some((id, uris)),
            _ => None,
        })
        .collect();
    assert!(!lookups.is_empty(), "its inputs are looked up first");
    for (id, uris) in lookups {
        let results = uris
            .iter()
            .map(|u| LookupResult {
                uri: u.clone(),
                size: (!u.contains("missing")).then_some(1000),
                version: (!u.contains("missing")).then(|| "v1".into()),
                error: u.contains("missing").then(|| format!("not found: {u}")),
            })
            .collect();
        env.from(w1, ToDispatcher::LookedUp { id, results });
    }
    let (_, a) = env.take_runs(1).remove(0);
    assert_eq!((a.task.as_str(), a.inputs[0].size), ("a", 1000));
    env.round();
    let st = env.status();
    assert_eq!((st.looking_up, st.running, st.demand_bytes), (0, 1, 1000));
    assert_eq!(outcome(&env, "b").0, OutcomeState::Failed);
    env.finish(w1, &a, 0, vec![]);
    env.round();
    assert_eq!(outcome(&env, "a"), (OutcomeState::Succeeded, 1));
}
