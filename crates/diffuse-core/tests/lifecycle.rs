//! Task and node lifecycle through `Core`: cancellation, fencing of stale attempts, node loss and
//! the crash limit, error cases, invalidation, and dynamic provisioning.

mod support;

use diffuse_core::{
    Action, CoreConfig, CoreError, Outcome, PolicyKind, Provisioning, Source, StepPolicy,
    TaskState, Time,
};
use std::time::Duration;
use support::{config, dynamic, n, o, spec, t, TestEnv};

// ----- cancellation -----

#[test]
fn cancel_of_a_queued_task_ends_it_at_once() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.task(1, &[(10, 5)]).task(2, &[(10, 5)]);
    assert_eq!(env.cancel(1), Some(TaskState::Cancelled));
    assert_eq!(env.state(1), None);
    let c = env.counts();
    assert_eq!((c.queued, c.cancelled), (1, 1));

    // A node joins: only t2 runs.
    env.node(1, 2);
    let d = env.take_one();
    assert_eq!(d.task, t(2));
    assert_eq!(
        env.core.handle_cancel(t(1), env.now),
        Err(CoreError::UnknownTask(t(1)))
    );
}

#[test]
fn cancel_of_a_running_task_ends_it_when_its_run_is_reported() {
    for outcome in [Outcome::Succeeded, Outcome::Failed("killed".into())] {
        let mut env = TestEnv::new(PolicyKind::Mcu);
        env.node(1, 1).task(1, &[]).task(2, &[]);
        assert_eq!(env.take_one().task, t(1));
        assert_eq!(env.cancel(1), None);
        // Still running, still holding its slot; cancelling twice is harmless.
        assert!(matches!(env.state(1), Some(TaskState::Running { .. })));
        assert_eq!(env.cancel(1), None);
        assert!(env.take_dispatches().is_empty());
        assert_eq!(env.counts().cancelled, 0);

        assert_eq!(env.finish_with(1, outcome.clone()), TaskState::Cancelled);
        assert_eq!(env.state(1), None);
        let c = env.counts();
        assert_eq!(
            (c.running, c.cancelled, c.succeeded, c.failed),
            (0, 1, 0, 0),
            "{outcome:?}"
        );
        // The freed slot goes to t2.
        assert_eq!(env.take_one().task, t(2));
    }
}

#[test]
fn cancelled_running_task_on_a_lost_node_ends_cancelled_not_requeued() {
    let mut env = TestEnv::with_config(CoreConfig {
        crash_limit: 1,
        ..config(PolicyKind::Mcu)
    });
    env.node(1, 2).task(1, &[]).task(2, &[]);
    assert_eq!(env.take_dispatches().len(), 2);
    env.cancel(1);
    // crash_limit 1: t2 fails; t1 was cancelled, so it ends cancelled (and is not reported as
    // failed).
    assert_eq!(env.lose(1), vec![t(2)]);
    assert_eq!(env.state(1), None);
    assert_eq!(env.state(2), None);
    let c = env.counts();
    assert_eq!((c.queued, c.running, c.cancelled, c.failed), (0, 0, 1, 1));
}

// ----- fencing -----

#[test]
fn stale_attempt_is_refused_after_node_lost_and_redispatch() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 1).task(1, &[(10, 5)]);
    let d1 = env.take_one();
    assert_eq!((d1.node, d1.attempt), (n(1), 1));

    assert!(env.lose(1).is_empty());
    assert_eq!(env.state(1), Some(TaskState::Queued));
    // Not running at all now.
    assert_eq!(env.report(1, 1), Err(CoreError::NotRunning(t(1))));

    env.advance(5).node(2, 1);
    let d2 = env.take_one();
    assert_eq!((d2.task, d2.node, d2.attempt), (t(1), n(2), 2));

    let before = env.counts();
    assert_eq!(
        env.report(1, 1),
        Err(CoreError::StaleAttempt {
            task: t(1),
            got: 1,
            current: 2
        })
    );
    // The error changed nothing.
    assert_eq!(env.counts(), before);
    assert_eq!(
        env.state(1),
        Some(TaskState::Running {
            node: n(2),
            attempt: 2,
            since: Time::ZERO + Duration::from_secs(5)
        })
    );
    assert_eq!(
        env.report(1, 2),
        Ok(TaskState::Finished(Outcome::Succeeded))
    );
    assert_eq!(env.counts().succeeded, 1);
    assert_eq!(env.report(1, 2), Err(CoreError::UnknownTask(t(1))));
}

// ----- node loss -----

#[test]
fn node_lost_requeues_its_tasks_and_fails_them_at_the_crash_limit() {
    let mut env = TestEnv::with_config(CoreConfig {
        crash_limit: 2,
        ..config(PolicyKind::Mcu)
    });
    env.node(1, 1).node(2, 1).task(1, &[]).task(2, &[]);
    let d = env.take_dispatches();
    assert_eq!(d.len(), 2);
    assert_eq!((d[0].task, d[0].node), (t(1), n(1)));

    // First loss: t1 queued again, t2 untouched.
    assert!(env.lose(1).is_empty());
    assert_eq!(env.state(1), Some(TaskState::Queued));
    assert!(matches!(
        env.state(2),
        Some(TaskState::Running { node, .. }) if node == n(2)
    ));
    let c = env.counts();
    assert_eq!((c.queued, c.running, c.nodes, c.slots), (1, 1, 1, 1));

    env.node(3, 1);
    let d = env.take_one();
    assert_eq!((d.task, d.node, d.attempt), (t(1), n(3), 2));

    // Second loss: t1 reached the crash limit.
    assert_eq!(env.lose(3), vec![t(1)]);
    assert_eq!(env.state(1), None);
    let c = env.counts();
    assert_eq!((c.queued, c.running, c.failed), (0, 1, 1));
    assert_eq!(env.report(1, 2), Err(CoreError::UnknownTask(t(1))));
    assert_eq!(env.finish(2), TaskState::Finished(Outcome::Succeeded));
}

#[test]
fn a_node_that_leaves_cleanly_requeues_its_tasks_without_counting_a_crash() {
    let mut env = TestEnv::with_config(CoreConfig {
        crash_limit: 1,
        ..config(PolicyKind::Mcu)
    });
    env.node(1, 2).task(1, &[]).task(2, &[]);
    assert_eq!(env.take_dispatches().len(), 2);
    let mut on = env.core.running_on(n(1)).to_vec();
    on.sort();
    assert_eq!(on, vec![t(1), t(2)]);
    env.cancel(2);
    // Under crash_limit 1 a loss would fail t1; a clean leave queues it again.
    let gone = env.core.handle_node_left(n(1), env.now).unwrap();
    env.check();
    assert_eq!((gone.failed, gone.cancelled), (vec![], vec![t(2)]));
    assert_eq!(env.state(1), Some(TaskState::Queued));
    assert!(env.core.running_on(n(1)).is_empty());
    env.node(2, 1);
    let d = env.take_one();
    assert_eq!((d.task, d.attempt), (t(1), 2));
    // Still no crash on record: losing its next node fails it (the first crash).
    assert_eq!(env.lose(2), vec![t(1)]);
}

#[test]
fn node_lost_forgets_its_cache_and_its_peer_reads() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 1).node(2, 1).cached(1, 10).cached(2, 11);
    assert!(env.lose(1).is_empty());
    assert!(env.core.locate(o(10)).is_empty());
    assert_eq!(env.core.locate(o(11)), &[n(2)]);
    assert_eq!(
        env.core.handle_object_cached(n(1), o(10), env.now),
        Err(CoreError::UnknownNode(n(1)))
    );
    env.task(1, &[(10, 5), (11, 5)]);
    let d = env.take_one();
    assert_eq!(d.node, n(2));
    assert_eq!(
        d.inputs,
        vec![(o(10), Source::Storage), (o(11), Source::Local)]
    );
}

#[test]
fn cancel_brings_a_task_into_the_window() {
    let mut env = TestEnv::with_config(CoreConfig {
        window: 2,
        ..config(PolicyKind::Mch)
    });
    env.node(2, 1).task(100, &[]);
    assert_eq!(env.take_one().node, n(2));
    env.cached(2, 10).node(1, 1);
    // t1, t2 wait for busy n2; cold t3 is outside W=2, so n1 stays idle.
    env.task(1, &[(10, 5)])
        .task(2, &[(10, 5)])
        .task(3, &[(30, 5)]);
    assert!(env.take_dispatches().is_empty());
    // Cancelling t1 moves t3 into the window: n1 should take it.
    assert_eq!(env.cancel(1), Some(TaskState::Cancelled));
    let d = env.take_dispatches();
    assert_eq!(d.len(), 1, "t3 left waiting on a free node: {d:?}");
    assert_eq!((d[0].task, d[0].node), (t(3), n(1)));
}

#[test]
fn task_entering_the_window_during_a_pass_reaches_an_earlier_node() {
    let mut env = TestEnv::with_config(CoreConfig {
        window: 1,
        ..config(PolicyKind::Mch)
    });
    env.node(1, 1).node(2, 1).cached(1, 10).cached(2, 20);
    // W=1: only t1 is visible at first. n1 is visited first and has nothing for t1; n2 takes it,
    // which brings t2 (all of whose data is on free n1) into the window.
    env.task(1, &[(20, 5)]).task(2, &[(10, 5)]);
    let d = env.take_dispatches();
    assert_eq!((d[0].task, d[0].node), (t(1), n(2)));
    assert_eq!(
        d.len(),
        2,
        "t2 left queued although n1 is free and holds its data: {d:?}"
    );
    assert_eq!((d[1].task, d[1].node), (t(2), n(1)));
}

// ----- errors -----

#[test]
fn duplicate_and_unknown_ids_are_refused_without_change() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 1).task(1, &[]).task(2, &[]);
    assert_eq!(env.take_one().task, t(1));
    let before = env.counts();

    // t1 running, t2 queued: both ids taken.
    for id in [1, 2] {
        assert_eq!(
            env.core.handle_submit(spec(id, &[(10, 1)]), env.now),
            Err(CoreError::DuplicateTask(t(id)))
        );
    }
    assert_eq!(
        env.core.handle_node_joined(n(1), 4, env.now),
        Err(CoreError::DuplicateNode(n(1)))
    );
    assert_eq!(
        env.core.handle_node_joined(n(2), 0, env.now),
        Err(CoreError::NoSlots(n(2)))
    );
    assert_eq!(
        env.core.handle_node_lost(n(9), env.now),
        Err(CoreError::UnknownNode(n(9)))
    );
    assert_eq!(
        env.core.handle_object_cached(n(9), o(1), env.now),
        Err(CoreError::UnknownNode(n(9)))
    );
    assert_eq!(
        env.core.handle_object_evicted(n(9), o(1), env.now),
        Err(CoreError::UnknownNode(n(9)))
    );
    assert_eq!(
        env.core.handle_cancel(t(9), env.now),
        Err(CoreError::UnknownTask(t(9)))
    );
    assert_eq!(env.report(9, 1), Err(CoreError::UnknownTask(t(9))));
    assert_eq!(env.report(2, 1), Err(CoreError::NotRunning(t(2))));
    env.check();
    assert_eq!(env.counts(), before);
    assert!(env.take_dispatches().is_empty());

    // Once finished and forgotten, the id may be used again.
    env.finish(1);
    assert_eq!(env.take_one().task, t(2));
    env.task(1, &[]);
    assert_eq!(env.state(1), Some(TaskState::Queued));
    // And a lost node's id may join again.
    env.lose(1);
    env.node(1, 1);
}

#[test]
fn duplicate_inputs_are_read_once() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 1).cached(1, 10);
    // 10 of 10 + 10 bytes: the second listing of o10 (size 99) is ignored, so it is not a full
    // hit, and o20 is still read.
    env.task(1, &[(10, 10), (20, 10), (10, 99)]);
    let d = env.take_one();
    assert_eq!(
        d.inputs,
        vec![(o(10), Source::Local), (o(20), Source::Storage)]
    );
}

// ----- cache reports -----

#[test]
fn object_invalidated_is_removed_from_the_index_and_no_longer_local() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 1)
        .node(2, 1)
        .cached(2, 10)
        .cached(1, 10)
        .cached(1, 11);
    let mut holders = env.core.handle_object_invalidated(o(10), env.now);
    env.check();
    holders.sort();
    assert_eq!(holders, vec![n(1), n(2)]);
    assert!(env.core.locate(o(10)).is_empty());
    assert!(!env.core.index().holds(n(1), o(10)));
    assert!(env.core.index().holds(n(1), o(11)));
    assert!(env
        .core
        .handle_object_invalidated(o(10), env.now)
        .is_empty());

    env.task(1, &[(10, 5)]);
    let d = env.take_one();
    assert_eq!(d.inputs, vec![(o(10), Source::Storage)]);
}

#[test]
fn evicted_object_is_no_longer_local() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 1).cached(1, 10).evicted(1, 10);
    // Evicting what is not held is a no-op.
    env.evicted(1, 10).evicted(1, 99);
    env.task(1, &[(10, 5)]);
    assert_eq!(env.take_one().inputs, vec![(o(10), Source::Storage)]);
}

#[test]
fn eviction_releases_a_task_that_mch_held_back() {
    let mut env = TestEnv::new(PolicyKind::Mch);
    env.node(1, 1).task(100, &[]);
    env.take_one();
    env.cached(1, 10).node(2, 1).task(1, &[(10, 5)]);
    assert!(env.take_dispatches().is_empty());
    // Its data is now nowhere: any free node may run it.
    env.evicted(1, 10);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(1), n(2)));
    assert_eq!(d.inputs, vec![(o(10), Source::Storage)]);
}

#[test]
fn invalidation_releases_a_task_that_mch_held_back() {
    // Same as `eviction_releases_a_task_that_mch_held_back`, but the object is invalidated.
    let mut env = TestEnv::new(PolicyKind::Mch);
    env.node(1, 1).task(100, &[]);
    env.take_one();
    env.cached(1, 10).node(2, 1).task(1, &[(10, 5)]);
    assert!(env.take_dispatches().is_empty());
    assert_eq!(
        env.core.handle_object_invalidated(o(10), env.now),
        vec![n(1)]
    );
    env.check();
    // t1's data is cached nowhere now, n2 is free: MCH must dispatch it.
    let d = env.take_dispatches();
    assert_eq!(d.len(), 1, "t1 left waiting on a free node: {d:?}");
    assert_eq!((d[0].task, d[0].node), (t(1), n(2)));
}

#[test]
fn zero_byte_inputs_do_not_starve_under_mch() {
    let mut env = TestEnv::new(PolicyKind::Mch);
    env.node(1, 1).task(100, &[]);
    env.take_one();
    // n1 (busy) holds both zero-byte inputs of t1; then drops them.
    env.cached(1, 10).cached(1, 11);
    env.core
        .handle_submit(spec(1, &[(10, 0), (11, 0)]), env.now)
        .unwrap();
    env.core
        .handle_object_evicted(n(1), o(10), env.now)
        .unwrap();
    env.core
        .handle_object_evicted(n(1), o(11), env.now)
        .unwrap();
    assert!(env.core.locate(o(10)).is_empty() && env.core.locate(o(11)).is_empty());
    // Nothing is cached anywhere now: t1 is cold and goes to a free node.
    env.core.handle_node_joined(n(2), 1, env.now).unwrap();
    let d = env.core.poll_action(env.now);
    assert!(
        matches!(&d, Some(Action::Dispatch(d)) if d.task == t(1)),
        "t1 starves on a free node: {d:?}"
    );
}

#[test]
fn zero_byte_input_keeps_the_invariants() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 1).cached(1, 10);
    env.core
        .handle_submit(spec(1, &[(10, 0)]), env.now)
        .unwrap();
    env.check();
    assert_eq!(env.take_one().inputs, vec![(o(10), Source::Local)]);
}

// ----- provisioning -----

fn dyn_env(step: StepPolicy, min_nodes: u32, idle_secs: u64) -> TestEnv {
    TestEnv::with_config(CoreConfig {
        provisioning: dynamic(step, min_nodes, 10, 2, idle_secs),
        ..config(PolicyKind::Mcu)
    })
}

#[test]
fn static_provisioning_has_no_timeout_and_never_acts() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    assert_eq!(env.core.config().provisioning, Provisioning::Static);
    assert_eq!(env.core.poll_timeout(), None);
    env.node(1, 1);
    for i in 0..5 {
        env.task(i, &[]);
    }
    env.advance(1000).timeout();
    let a = env.take_actions();
    assert_eq!(a.len(), 1);
    assert!(matches!(a[0], Action::Dispatch(_)));
    env.advance(1000).timeout();
    env.assert_idle();
    assert_eq!(env.counts().nodes, 1);
    assert_eq!(env.counts().pending_nodes, 0);
}

#[test]
fn dynamic_provisioning_asks_for_nodes_when_the_queue_exceeds_free_slots() {
    let mut env = dyn_env(StepPolicy::AllAtOnce, 0, 30);
    assert_eq!(env.core.poll_timeout(), Some(Time::ZERO));
    for i in 0..5 {
        env.task(i, &[]);
    }
    // 5 queued, no slot: 3 nodes of 2 slots.
    env.timeout();
    assert_eq!(env.take_actions(), vec![Action::Provision { nodes: 3 }]);
    assert_eq!(env.counts().pending_nodes, 3);
    assert_eq!(
        env.core.poll_timeout(),
        Some(Time::ZERO + Duration::from_secs(1))
    );

    // Before the next check: nothing, even with more work.
    env.task(5, &[]).task(6, &[]).timeout();
    env.assert_idle();

    // 7 queued, 3 pending nodes (6 slots): one more.
    env.advance(1).timeout();
    assert_eq!(env.take_actions(), vec![Action::Provision { nodes: 1 }]);
    assert_eq!(env.counts().pending_nodes, 4);

    // Nodes join: pending counts down and the queue drains.
    env.node(1, 2).node(2, 2);
    assert_eq!(env.counts().pending_nodes, 2);
    assert_eq!(env.take_dispatches().len(), 4);
    // 3 queued, 2 pending nodes: covered.
    env.advance(1).timeout();
    env.assert_idle();

    // One refused: 3 queued, 1 pending (2 slots): one more asked for.
    env.core.handle_provision_failed(1, env.now);
    env.check();
    assert_eq!(env.counts().pending_nodes, 1);
    env.advance(1).timeout();
    assert_eq!(env.take_actions(), vec![Action::Provision { nodes: 1 }]);
    assert_eq!(env.counts().pending_nodes, 2);
}

#[test]
fn dynamic_provisioning_releases_idle_nodes_but_keeps_min_nodes() {
    let mut env = dyn_env(StepPolicy::OneAtATime, 1, 30);
    env.node(1, 1).node(2, 1).node(3, 1);
    env.task(1, &[]);
    let d = env.take_one();
    assert_eq!(d.node, n(1));

    // n1 works until 20 s; n2 and n3 are idle from 0.
    env.advance(20);
    env.finish(1);
    env.timeout();
    env.assert_idle();

    // 35 s: n2 and n3 idle for 35 s, n1 for 15 s.
    env.advance(15).timeout();
    assert_eq!(
        env.take_actions(),
        vec![
            Action::Release {
                node: n(2),
                handoff: vec![]
            },
            Action::Release {
                node: n(3),
                handoff: vec![]
            }
        ]
    );
    let c = env.counts();
    assert_eq!((c.nodes, c.slots), (1, 1));
    assert!(env.core.index().contents(n(2)).next().is_none());

    // 60 s: n1 idle for 40 s, but it is the last of min_nodes = 1.
    env.advance(25).timeout();
    env.assert_idle();
    assert_eq!(env.counts().nodes, 1);
    // Released nodes are forgotten.
    assert_eq!(
        env.core.handle_node_lost(n(2), env.now),
        Err(CoreError::UnknownNode(n(2)))
    );
}

#[test]
fn dynamic_provisioning_keeps_busy_and_serving_nodes() {
    let mut env = dyn_env(StepPolicy::OneAtATime, 0, 30);
    env.node(1, 1).node(2, 1).cached(1, 10);
    env.task(100, &[]);
    assert_eq!(env.take_one().node, n(1));
    env.task(1, &[(10, 5)]);
    let d = env.take_one();
    assert_eq!((d.node, d.inputs[0].1), (n(2), Source::Peer(n(1))));
    // n1 idle from 0 s but serving t1's read; n2 running t1.
    env.finish(100);
    env.advance(40).timeout();
    env.assert_idle();
    assert_eq!(env.counts().nodes, 2);

    // t1 done at 40 s: n1 no longer serves and goes; n2 has been idle for 1 s only.
    env.finish(1);
    env.advance(1).timeout();
    assert_eq!(
        env.take_actions(),
        vec![Action::Release {
            node: n(1),
            handoff: vec![]
        }]
    );
    assert!(env.core.locate(o(10)).is_empty());
    // n2 goes once idle long enough (min_nodes 0).
    env.advance(30).timeout();
    assert_eq!(
        env.take_actions(),
        vec![Action::Release {
            node: n(2),
            handoff: vec![]
        }]
    );
    assert_eq!(env.counts().nodes, 0);
}

#[test]
fn dynamic_provisioning_brings_the_pool_up_to_min_nodes() {
    let mut env = dyn_env(StepPolicy::OneAtATime, 2, 30);
    env.timeout();
    assert_eq!(env.take_actions(), vec![Action::Provision { nodes: 2 }]);
    env.advance(1).timeout();
    env.assert_idle();
    env.node(1, 2);
    assert_eq!(env.counts().pending_nodes, 1);
}

#[test]
fn rejoined_node_keeps_its_own_peer_read_count() {
    let mut env = dyn_env(StepPolicy::OneAtATime, 0, 30);
    env.node(1, 1).node(2, 1).cached(1, 10);
    env.task(100, &[]);
    assert_eq!(env.take_one().node, n(1));
    // t1 on n2 reads o10 from n1.
    env.task(1, &[(10, 5)]);
    assert_eq!(env.take_one().inputs, vec![(o(10), Source::Peer(n(1)))]);
    // n1 is lost and its id joins again; t100 is requeued and runs on the new n1.
    assert!(env.lose(1).is_empty());
    env.node(1, 1);
    assert_eq!(env.take_one().task, t(100));
    env.cached(1, 10).node(3, 1);
    // t2 on n3 reads o10 from the new (busy) n1.
    env.task(2, &[(10, 5)]);
    let d = env.take_one();
    assert_eq!((d.node, d.inputs[0].1), (n(3), Source::Peer(n(1))));
    // t1 finishing must not touch the new n1's count of reads it serves.
    env.finish(1);
    env.finish(100);
    // n1 has no task but still serves t2's read, which is running.
    assert!(matches!(env.state(2), Some(TaskState::Running { .. })));
    env.advance(40).timeout();
    let a = env.take_actions();
    assert!(
        !a.contains(&Action::Release {
            node: n(1),
            handoff: vec![]
        }),
        "n1 released while serving t2's read: {a:?}"
    );
}

#[test]
fn tasks_waiting_outside_the_core_count_as_demand_for_nodes() {
    // The live driver holds tasks back while workers look their inputs up; an empty pool must
    // still grow for them, or no worker would come to do the lookups.
    let mut env = dyn_env(StepPolicy::AllAtOnce, 0, 30);
    env.core.handle_waiting_demand(5);
    env.timeout();
    assert_eq!(env.take_actions(), vec![Action::Provision { nodes: 3 }]);
    // Once they are submitted the driver stops counting them: no node is asked for twice.
    env.core.handle_waiting_demand(0);
    for i in 0..5 {
        env.task(i, &[]);
    }
    env.advance(1).timeout();
    env.assert_idle();
}
