//! Regressions found by review (stop 21): each failed before its fix.

mod support;

use diffuse_core::{
    Action, CoreConfig, NodeName, Outcome, Placement, PolicyKind, Resources, TaskId, TaskSpec,
};
use std::time::Duration;
use support::*;

fn hard(task: TaskSpec, name: u32) -> TaskSpec {
    task.with_hint(Placement {
        node: NodeName(name),
        strict: true,
        wait: Duration::ZERO,
    })
}
fn named(env: &mut TestEnv, id: u32, slots: u32) {
    env.node(id, slots);
    env.core.handle_node_named(n(id), NodeName(id)).unwrap();
}

/// A remade producer P2 is abandoned once by dependency_failed (when P1's remake cannot start)
/// and then again by copies_lost's loop over `waiting`: a second outcome for a task that succeeded.
#[test]
fn remade_reader_is_abandoned_twice_when_upstream_remake_cannot_start() {
    let mut env = TestEnv::new(PolicyKind::Fa);
    named(&mut env, 0, 1); // A
    named(&mut env, 1, 1); // B
                           // P1 (t1) writes o10, hard-hinted at A.
    env.submit(hard(spec(1, &[]), 0).with_produces(vec![o(10)]));
    assert_eq!(env.take_one().node, n(0));
    // R (t2) reads o10, held for ever: keeps o10 needed.
    env.submit(spec(2, &[(10, 0)]).held());
    env.cached(0, 10);
    env.finish(1);
    // Z (t5) occupies A.
    env.submit(hard(spec(5, &[]), 0));
    assert_eq!(env.take_one().node, n(0));
    // P2 (t3) reads o10, writes o20: runs on B.
    env.submit(spec(3, &[(10, 0)]).with_produces(vec![o(20)]));
    assert_eq!(env.take_one().node, n(1));
    // C (t4) reads o20, held.
    env.submit(spec(4, &[(20, 0)]).held());
    env.cached(1, 20);
    env.finish(3);
    env.take_actions();
    // B lost: o20 gone, P2 remade (queued: A is busy).
    env.lose(1);
    env.take_actions();
    let failed_before = env.counts().failed;
    // A lost: o10 gone; P1's remake cannot start (its hard hint's node left).
    env.lose(0);
    let abandons: Vec<TaskId> = env
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Abandon { task, .. } => Some(task),
            _ => None,
        })
        .collect();
    assert!(
        !abandons.contains(&t(3)),
        "P2 succeeded; it must not get an Abandon: {abandons:?}"
    );
    assert!(
        env.counts().failed - failed_before <= 3,
        "R, C, Z fail; P2 must not be counted"
    );
}

/// DAD decides a task's node over all free nodes, but `fits` is asked only for the node
/// deciding: a retried task whose best node is the one it avoids is passed over by both.
#[test]
fn dad_never_runs_a_retried_task_whose_best_free_node_is_the_one_it_avoids() {
    let mut env = TestEnv::new(PolicyKind::Dad);
    env.node(0, 1).node(1, 1);
    env.submit(spec(1, &[]).with_retries(1));
    let d = env.take_one();
    assert_eq!(d.node, n(0));
    env.finish_with(1, Outcome::Retryable("transient".into()));
    // Both nodes free and idle; t1 avoids node 0 and DAD's least loaded free node is node 0.
    for _ in 0..5 {
        env.advance(1);
        env.core.handle_node_load(n(1), 0.0); // any event: another pass
        let d = env.take_dispatches();
        if !d.is_empty() {
            return;
        }
    }
    panic!(
        "t1 never ran though nodes 0 and 1 are free: {:?}",
        env.state(1)
    );
}

/// Hard-hinted tasks waiting for a busy node fill the window; a free node sees nothing to run.
#[test]
fn hinted_tasks_filling_the_window_idle_every_other_node() {
    let mut env = TestEnv::with_config(CoreConfig {
        policy: PolicyKind::Fa,
        window: 2,
        ..CoreConfig::default()
    });
    named(&mut env, 0, 1);
    env.task(9, &[]);
    assert_eq!(env.take_one().node, n(0));
    env.submit(hard(spec(1, &[]), 0))
        .submit(hard(spec(2, &[]), 0))
        .task(3, &[]);
    named(&mut env, 1, 1);
    let d = env.take_dispatches();
    assert_eq!(
        d.len(),
        1,
        "node 1 is free and t3 may run anywhere, yet: {d:?}"
    );
}

/// A hard hint at a node too small for the task: it can never run, and nothing says so.
#[test]
fn hard_hint_at_a_node_too_small_is_not_reported_unschedulable() {
    let mut env = TestEnv::new(PolicyKind::Fa);
    named(&mut env, 0, 1);
    named(&mut env, 1, 4);
    env.submit(hard(
        spec(1, &[]).with_resources(Resources::cores_only(2)),
        0,
    ));
    assert!(env.take_dispatches().is_empty());
    assert_eq!(
        env.core.unschedulable(),
        vec![t(1)],
        "it fits no node of its hint's name"
    );
}

/// DAD's delay is counted in dispatch passes, and a pass needs an event: with nothing else
/// happening, a delayed task waits for the busy node however long, while another node idles,
/// and the core asks for no timeout.
#[test]
fn dad_delay_is_unbounded_in_time_when_no_event_comes() {
    let mut env = TestEnv::new(PolicyKind::Dad);
    env.node(1, 1).cached(1, 10);
    env.task(9, &[(10, 5)]);
    env.take_one();
    env.node(2, 1);
    env.task(1, &[(10, 5)]);
    assert!(env.take_dispatches().is_empty(), "round 1: delayed");
    // The core asks for the next round a second later (DadConfig::round_s), and DAD's delay
    // of two rounds is spent by then: t1 runs on node 2.
    let round = env.core.poll_timeout().expect("a round is asked for");
    assert_eq!(round, env.now + Duration::from_secs(1));
    env.advance(1);
    assert!(env.take_dispatches().is_empty(), "round 2: delayed");
    env.advance(1);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(1), n(2)));
    assert_eq!(env.core.poll_timeout(), None, "nothing delayed any more");
}

/// A strict hint set on a queued task at a name whose last node has left ends it at once (it
/// could never run), rather than binding it for ever.
#[test]
fn a_strict_hint_at_a_departed_name_ends_the_task() {
    let mut env = TestEnv::new(PolicyKind::Fa);
    named(&mut env, 0, 1);
    env.task(9, &[]);
    assert_eq!(env.take_one().node, n(0));
    named(&mut env, 1, 1);
    env.lose(1);
    env.task(1, &[]);
    let hint = Placement {
        node: NodeName(1),
        strict: true,
        wait: Duration::ZERO,
    };
    assert!(env.core.handle_hint(t(1), hint, env.now).unwrap());
    env.check();
    let ended = env
        .take_actions()
        .into_iter()
        .any(|a| matches!(a, Action::Abandon { task, .. } if task == t(1)));
    assert!(ended, "t1 must end: its only node left");
}

/// A node renamed leaves its old name without a node: hard hints at it end.
#[test]
fn renaming_the_last_node_of_a_name_ends_its_hard_hinted_tasks() {
    let mut env = TestEnv::new(PolicyKind::Fa);
    named(&mut env, 0, 1);
    env.task(9, &[]);
    env.take_one();
    env.submit(hard(spec(1, &[]), 0));
    assert!(env.take_dispatches().is_empty(), "n0 is busy");
    env.core.handle_node_named(n(0), NodeName(7)).unwrap();
    env.check();
    let ended = env
        .take_actions()
        .into_iter()
        .any(|a| matches!(a, Action::Abandon { task, .. } if task == t(1)));
    assert!(ended, "no node is named 0 any more");
}
