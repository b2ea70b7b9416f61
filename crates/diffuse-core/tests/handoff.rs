//! Cache hand-off on release, through the core: what a released node's plan holds, where it
//! goes, and when the index follows.

mod support;

use diffuse_core::{
    Action, CoreConfig, EvictionPolicy, Handoff, HandoffConfig, PolicyKind, Resources, StepPolicy,
};
use std::time::Duration;
use support::{config, dynamic, n, o, spec, TestEnv};

const SIZE: u64 = 10;

/// GCC, dynamic provisioning (one at a time, no minimum, 30 s idle), hand-off with `budget`.
fn env(budget: Option<u64>) -> TestEnv {
    TestEnv::with_config(CoreConfig {
        provisioning: dynamic(StepPolicy::OneAtATime, 0, 10, 2, 30),
        handoff: budget.map(|budget| HandoffConfig {
            budget,
            time_bound: Duration::from_secs(10),
        }),
        ..config(PolicyKind::Gcc)
    })
}

fn cache(env: &mut TestEnv, node: u32, quota: u64) {
    env.core
        .handle_node_cache(n(node), quota, EvictionPolicy::Lru, env.now)
        .unwrap();
}

/// A two-core task reading `inputs`: only a node with two cores can run it.
fn wide(env: &mut TestEnv, id: u64, inputs: &[(u64, u64)]) {
    env.submit(spec(id, inputs).with_resources(Resources {
        cores: 2,
        ..Resources::ONE_CORE
    }));
}

/// `node` reads each object in turn (from storage) for a one-input task, caches it and
/// finishes: afterwards it holds them in this order, the last the most recently used.
fn fetch(env: &mut TestEnv, node: u32, first_task: u64, objects: &[u64]) {
    for (k, &object) in objects.iter().enumerate() {
        let id = first_task + k as u64;
        env.task(id, &[(object, SIZE)]);
        assert_eq!(env.take_one().node, n(node));
        env.cached(node, object);
        env.finish(id);
    }
}

fn releases(actions: Vec<Action>) -> Vec<(u32, Vec<Handoff>)> {
    actions
        .into_iter()
        .filter_map(|a| match a {
            Action::Release { node, handoff } => Some((node.0, handoff)),
            _ => None,
        })
        .collect()
}

fn push(object: u64, to: u32) -> Handoff {
    Handoff {
        object: o(object),
        size: SIZE,
        to: n(to),
    }
}

/// n1 (one core) holds o1, o2, o3 (o3 most recently used); n2 (two cores) holds o2 and runs a
/// two-core task; a queued two-core task reads o1. n1 goes idle at 0 s.
fn scene(budget: Option<u64>, n2_quota: u64) -> TestEnv {
    let mut env = env(budget);
    env.node(1, 1);
    cache(&mut env, 1, 1000);
    fetch(&mut env, 1, 1, &[1, 2, 3]);
    env.node(2, 2);
    cache(&mut env, 2, n2_quota);
    env.cached(2, 2);
    wide(&mut env, 10, &[]);
    assert_eq!(env.take_one().node, n(2));
    wide(&mut env, 11, &[(1, SIZE)]);
    assert!(env.take_dispatches().is_empty());
    env
}

#[test]
fn a_released_node_pushes_what_only_it_holds_wanted_first_then_hottest() {
    let mut env = scene(Some(1000), 1000);
    env.advance(30).timeout();
    // o2 stays: n2 has it. o1 first (t11 reads it), then o3 (more recent than nothing else).
    assert_eq!(
        releases(env.take_actions()),
        vec![(1, vec![push(1, 2), push(3, 2)])]
    );
}

#[test]
fn the_budget_and_the_targets_room_bound_the_plan() {
    let mut env = scene(Some(SIZE), 1000);
    env.advance(30).timeout();
    assert_eq!(releases(env.take_actions()), vec![(1, vec![push(1, 2)])]);

    // n2 has room for one more object only (it holds o2).
    let mut env = scene(Some(1000), 2 * SIZE + SIZE / 2);
    env.advance(30).timeout();
    assert_eq!(releases(env.take_actions()), vec![(1, vec![push(1, 2)])]);
}

#[test]
fn off_a_release_pushes_nothing() {
    let mut env = scene(None, 1000);
    env.advance(30).timeout();
    assert_eq!(releases(env.take_actions()), vec![(1, vec![])]);
    assert!(env.core.cache_model().is_none());
}

#[test]
fn the_index_follows_only_when_the_target_reports_the_copy() {
    let mut env = scene(Some(1000), 1000);
    env.advance(30).timeout();
    assert_eq!(releases(env.take_actions()).len(), 1);
    // n1 and its copies are forgotten at once; o1's push is on its way, room held for it.
    assert!(env.core.locate(o(1)).is_empty());
    let model = env.core.cache_model().unwrap();
    assert_eq!(model.room(n(2)), Some(1000 - 3 * SIZE));
    env.cached(2, 1);
    assert_eq!(env.core.locate(o(1)), &[n(2)]);
    // Held now, no longer on its way: the room it takes is counted once.
    let model = env.core.cache_model().unwrap();
    assert_eq!(model.room(n(2)), Some(1000 - 3 * SIZE));
    assert_eq!(model.pending().count(), 1, "o3 still on its way");
    // o3 never arrives: after the time bound its room is free again.
    env.advance(10).timeout();
    let model = env.core.cache_model().unwrap();
    assert_eq!(model.pending().count(), 0);
    assert_eq!(model.room(n(2)), Some(1000 - 2 * SIZE));
}

#[test]
fn nodes_released_together_do_not_push_to_each_other() {
    let mut env = env(Some(1000));
    env.node(1, 1).node(3, 2);
    cache(&mut env, 1, 1000);
    cache(&mut env, 3, 1000);
    fetch(&mut env, 1, 1, &[1]);
    // n3 takes a two-core task, so o2's reader goes to n1 and o2 ends up there too.
    wide(&mut env, 10, &[]);
    assert_eq!(env.take_one().node, n(3));
    fetch(&mut env, 1, 2, &[2]);
    env.finish(10);
    // n1 and n3 both idle for 30 s: released in one round, nobody left to receive.
    env.advance(30).timeout();
    assert_eq!(releases(env.take_actions()), vec![(1, vec![]), (3, vec![])]);
}

#[test]
fn a_node_that_never_reported_its_cache_receives_nothing() {
    let mut env = env(Some(1000));
    env.node(1, 1);
    cache(&mut env, 1, 1000);
    fetch(&mut env, 1, 1, &[1]);
    env.node(2, 2);
    wide(&mut env, 10, &[]);
    assert_eq!(env.take_one().node, n(2));
    env.advance(30).timeout();
    assert_eq!(releases(env.take_actions()), vec![(1, vec![])]);
}

#[test]
fn a_push_and_a_fetch_of_the_same_object_count_it_once() {
    let mut env = scene(Some(1000), 1000);
    env.advance(30).timeout();
    env.take_actions();
    // t10 ends; t11 starts on n2 and fetches o1 from storage while the push is on its way.
    env.finish(10);
    let d = env.take_one();
    assert_eq!((d.task.0, d.node), (11, n(2)));
    env.cached(2, 1);
    let model = env.core.cache_model().unwrap();
    assert_eq!(model.used(n(2)), 2 * SIZE);
    assert_eq!(model.room(n(2)), Some(1000 - 3 * SIZE), "o3 still reserved");
}
