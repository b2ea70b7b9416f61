//! 2Mark through the core: requests at dispatch become `Evict` and `Move` actions, the index
//! follows them at once, and a random driver with prefetching and node losses never breaks an
//! invariant (2Mark's model, the transfer budget, one outcome per task).

mod support;

use diffuse_core::{
    Action, CoreConfig, EvictionPolicy, NodeId, ObjectId, Outcome, PolicyKind, PrefetchConfig,
    Source, TaskState,
};
use proptest::prelude::*;
use support::*;

fn two_mark(policy: PolicyKind) -> TestEnv {
    TestEnv::with_config(CoreConfig {
        policy,
        two_mark: true,
        ..CoreConfig::default()
    })
}

/// A node of one slot and `quota` bytes of cache.
fn node(env: &mut TestEnv, id: u32, quota: u64) {
    env.node(id, 1);
    env.core
        .handle_node_cache(n(id), quota, EvictionPolicy::Lru, env.now)
        .unwrap();
}

/// Run `task` reading `object` (1 byte) to the end: dispatched, its fetched input cached.
fn run(env: &mut TestEnv, task: u64, object: u64) -> (NodeId, Vec<Action>) {
    env.task(task, &[(object, 1)]);
    let mut d = None;
    let mut other = Vec::new();
    for a in env.take_actions() {
        match a {
            Action::Dispatch(x) => d = Some(x),
            a => other.push(a),
        }
    }
    let d = d.expect("dispatched");
    if source(&d, object) != Source::Local {
        env.cached(d.node.0, object);
    }
    env.finish(task);
    other.extend(env.take_actions());
    (d.node, other)
}

#[test]
fn a_full_node_evicts_by_2mark_and_the_index_forgets_at_once() {
    let mut env = two_mark(PolicyKind::Gcc);
    node(&mut env, 0, 2);
    run(&mut env, 1, 1);
    run(&mut env, 2, 2);
    // o3 from storage: n0 is full, every object on it is marked at both levels: new phases,
    // and o1, the least recently requested, goes.
    let (_, actions) = run(&mut env, 3, 3);
    assert!(
        actions.contains(&Action::Evict {
            node: n(0),
            object: o(1)
        }),
        "{actions:?}"
    );
    assert!(!env.core.index().holds(n(0), o(1)));
    let s = env.core.two_mark_stats().unwrap();
    assert_eq!((s.global_phases, s.evicted), (1, 1));
}

#[test]
fn a_last_copy_moves_to_a_node_with_room_instead_of_leaving() {
    let mut env = two_mark(PolicyKind::Gcc);
    node(&mut env, 0, 2);
    node(&mut env, 1, 2);
    // Keep n1 busy so n0 takes everything. A task without inputs holds it.
    env.task(100, &[]);
    let busy = env.take_one();
    let other = if busy.node == n(0) { 1 } else { 0 };
    // The busy node holds o9, never asked for: global-unmarked, so global phases go on.
    env.cached(busy.node.0, 9);
    // Fill the free node: o1, o2, then o3 (o1, global-unmarked since a phase began, goes); o2
    // and o3 asked again (marked at both levels).
    for (t, obj) in [(1, 1), (2, 2), (3, 3), (4, 2), (5, 3)] {
        let (on, _) = run(&mut env, t, obj);
        assert_eq!(on.0, other);
    }
    // o4 from storage: everything on the node is global-marked (and o9 elsewhere is not, so no
    // new global phase), so a local-unmarked object is moved to the busy node, which has room,
    // instead of leaving the system.
    let (_, actions) = run(&mut env, 6, 4);
    let moved: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Move {
                object, from, to, ..
            } => Some((*object, *from, *to)),
            _ => None,
        })
        .collect();
    assert_eq!(moved.len(), 1, "{actions:?}");
    let (object, from, to) = moved[0];
    assert_eq!((from, to), (n(other), busy.node));
    // The core forgot the source's copy at once; the target reports its copy when it lands.
    assert!(!env.core.index().holds(from, object));
    env.cached(to.0, object.0);
    assert!(env.core.index().holds(to, object));
}

#[test]
fn under_fa_nothing_is_cached_so_2mark_does_nothing() {
    let mut env = two_mark(PolicyKind::Fa);
    node(&mut env, 0, 1);
    env.task(1, &[(1, 1)]);
    env.take_one();
    assert!(env.core.two_mark_stats().is_none());
}

#[derive(Clone, Debug)]
enum Op {
    Submit(u64),
    Finish(usize, bool),
    Land(usize, bool),
    Lose(u32),
    Join(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..12u64).prop_map(Op::Submit),
        4 => (0..64usize, any::<bool>()).prop_map(|(i, ok)| Op::Finish(i, ok)),
        3 => (0..64usize, any::<bool>()).prop_map(|(i, ok)| Op::Land(i, ok)),
        1 => (0..4u32).prop_map(Op::Lose),
        1 => (0..4u32).prop_map(Op::Join),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Random submissions, completions, transfers landing or failing, nodes lost and joining,
    /// under 2Mark with prefetching: every invariant holds after every step, and every task
    /// ends exactly once.
    #[test]
    fn two_mark_with_prefetching_keeps_every_invariant(ops in prop::collection::vec(op(), 1..120)) {
        let mut env = TestEnv::with_config(CoreConfig {
            policy: PolicyKind::MixApart,
            two_mark: true,
            storage_cap: Some(4.0),
            prefetch: Some(PrefetchConfig { cache_share: 0.5, lookahead: 16 }),
            ..CoreConfig::default()
        });
        let mut live = [false; 4];
        for i in 0..2u32 {
            node(&mut env, i, 3);
            live[i as usize] = true;
        }
        let mut next = 0u64;
        let mut ended = std::collections::BTreeSet::new();
        // Copies under way: (node, object) a driver will report or fail.
        let mut transfers: Vec<(NodeId, ObjectId, bool)> = Vec::new();
        let mut running: Vec<u64> = Vec::new();
        for op in ops {
            match op {
                Op::Submit(obj) => {
                    env.task(next, &[(obj, 1)]);
                    next += 1;
                }
                Op::Finish(i, ok) if !running.is_empty() => {
                    let t = running.swap_remove(i % running.len());
                    let outcome = if ok { Outcome::Succeeded } else { Outcome::Failed("x".into()) };
                    let s = env.finish_with(t, outcome);
                    if matches!(s, TaskState::Finished(_)) {
                        prop_assert!(ended.insert(t), "t{t} ended twice");
                    }
                }
                Op::Land(i, ok) if !transfers.is_empty() => {
                    let (node, obj, prefetch) = transfers.swap_remove(i % transfers.len());
                    if live[node.0 as usize] {
                        if ok {
                            env.cached(node.0, obj.0);
                        } else if prefetch {
                            env.core.handle_prefetch_failed(node, obj, env.now);
                            env.check();
                        }
                    }
                }
                Op::Lose(k) if live[k as usize] && live.iter().filter(|l| **l).count() > 1 => {
                    let r = env.core.handle_node_lost(n(k), env.now).unwrap();
                    env.check();
                    for t in r.failed.iter().chain(&r.cancelled) {
                        prop_assert!(ended.insert(t.0));
                    }
                    live[k as usize] = false;
                    running.retain(|t| env.state(*t).is_some_and(|s| matches!(s, TaskState::Running { .. })));
                    transfers.retain(|(nd, _, _)| *nd != n(k));
                }
                Op::Join(k) if !live[k as usize] => {
                    node(&mut env, k, 3);
                    live[k as usize] = true;
                }
                _ => {}
            }
            for a in env.take_actions() {
                match a {
                    Action::Dispatch(d) => {
                        running.push(d.task.0);
                        for (obj, src) in &d.inputs {
                            if *src != Source::Local {
                                transfers.push((d.node, *obj, false));
                            }
                        }
                    }
                    Action::Prefetch { object, node, .. } => transfers.push((node, object, true)),
                    Action::Move { object, to, .. } => transfers.push((to, object, false)),
                    Action::Evict { node, object } => {
                        prop_assert!(!env.core.index().holds(node, object));
                    }
                    Action::Abandon { task, .. } => {
                        prop_assert!(ended.insert(task.0));
                    }
                    _ => {}
                }
            }
            env.check();
        }
    }
}
