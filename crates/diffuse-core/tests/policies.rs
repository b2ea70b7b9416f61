//! Each dispatch policy's choice on hand-built states (section 2.2 of the data diffusion paper;
//! the semantics are in the module doc of `diffuse_core::dispatch`).

mod support;

use diffuse_core::{CoreConfig, PolicyKind, Source, TaskState};
use support::{config, n, o, source, t, TestEnv};

/// Fill every slot of `node` (which must be the only free node) with input-less tasks numbered
/// from `first`.
fn fill(env: &mut TestEnv, node: u32, slots: u32, first: u64) {
    for i in 0..slots as u64 {
        env.task(first + i, &[]);
    }
    let d = env.take_dispatches();
    assert_eq!(d.len(), slots as usize);
    assert!(d.iter().all(|d| d.node == n(node)), "{d:?}");
}

// ----- FA -----

#[test]
fn fa_takes_oldest_task_and_reads_everything_from_storage() {
    let mut env = TestEnv::new(PolicyKind::Fa);
    assert!(!env.core.caching_enabled());
    env.node(1, 1).cached(1, 20);
    env.task(1, &[(10, 5)]).task(2, &[(20, 5)]);
    let d = env.take_one();
    assert_eq!((d.task, d.node, d.attempt), (t(1), n(1), 1));
    assert_eq!(d.inputs, vec![(o(10), Source::Storage)]);

    env.finish(1);
    let d = env.take_one();
    assert_eq!(d.task, t(2));
    // n1 holds o20 and the index knows it, but FA never uses cached data.
    assert_eq!(env.core.locate(o(20)), &[n(1)]);
    assert_eq!(d.inputs, vec![(o(20), Source::Storage)]);
}

#[test]
fn fa_ignores_a_peer_holder_too() {
    let mut env = TestEnv::new(PolicyKind::Fa);
    env.node(1, 1);
    fill(&mut env, 1, 1, 100);
    env.cached(1, 10).node(2, 1).task(1, &[(10, 5), (11, 5)]);
    let d = env.take_one();
    assert_eq!(d.node, n(2));
    assert_eq!(
        d.inputs,
        vec![(o(10), Source::Storage), (o(11), Source::Storage)]
    );
}

// ----- MCU -----

#[test]
fn mcu_free_node_takes_its_local_task_over_older_ones() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    assert!(env.core.caching_enabled());
    env.node(1, 1).cached(1, 30);
    env.task(1, &[(10, 5)])
        .task(2, &[(20, 5)])
        .task(3, &[(30, 5)]);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(3), n(1)));
    assert_eq!(d.inputs, vec![(o(30), Source::Local)]);
}

#[test]
fn mcu_without_local_data_takes_oldest_with_peer_or_storage_source() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 1);
    fill(&mut env, 1, 1, 100);
    env.cached(1, 10);
    env.task(1, &[(10, 5)]).task(2, &[(20, 5)]);
    // Nothing free yet: n1 is busy.
    assert!(env.take_dispatches().is_empty());

    env.node(2, 2);
    let d = env.take_dispatches();
    assert_eq!(d.len(), 2, "MCU keeps every slot busy: {d:?}");
    assert_eq!((d[0].task, d[0].node), (t(1), n(2)));
    assert_eq!(d[0].inputs, vec![(o(10), Source::Peer(n(1)))]);
    assert_eq!((d[1].task, d[1].node), (t(2), n(2)));
    assert_eq!(d[1].inputs, vec![(o(20), Source::Storage)]);
}

#[test]
fn mcu_mixed_sources_in_one_dispatch() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 1);
    fill(&mut env, 1, 1, 100);
    env.cached(1, 11).node(2, 1).cached(2, 10);
    env.task(1, &[(10, 5), (11, 5), (12, 5), (10, 5)]);
    let d = env.take_one();
    assert_eq!(d.node, n(2));
    // One entry per distinct input, in the task's order.
    assert_eq!(
        d.inputs,
        vec![
            (o(10), Source::Local),
            (o(11), Source::Peer(n(1))),
            (o(12), Source::Storage)
        ]
    );
}

// ----- MCH -----

#[test]
fn mch_leaves_a_node_idle_while_the_data_is_on_a_busy_node() {
    let mut env = TestEnv::new(PolicyKind::Mch);
    env.node(1, 1);
    fill(&mut env, 1, 1, 100);
    env.cached(1, 10).node(2, 1).task(1, &[(10, 5)]);
    assert!(env.take_dispatches().is_empty(), "n2 has no data for t1");
    assert_eq!(env.state(1), Some(TaskState::Queued));
    assert_eq!(env.counts().busy_slots, 1);

    // The holder frees up and takes it, reading locally.
    env.finish(100);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(1), n(1)));
    assert_eq!(d.inputs, vec![(o(10), Source::Local)]);
}

#[test]
fn mch_sends_a_task_whose_data_is_nowhere_to_any_free_node() {
    let mut env = TestEnv::new(PolicyKind::Mch);
    env.node(1, 1);
    fill(&mut env, 1, 1, 100);
    env.cached(1, 10).node(2, 1);
    env.task(1, &[(10, 5)]).task(2, &[(20, 5)]);
    // t1 (older) waits for n1; t2 is cold and goes to n2.
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(2), n(2)));
    assert_eq!(d.inputs, vec![(o(20), Source::Storage)]);
    assert_eq!(env.state(1), Some(TaskState::Queued));
}

#[test]
fn mch_multi_input_task_goes_to_the_node_with_most_bytes() {
    // (bytes of o10 held by n1, bytes of o20 held by n2): the bigger share wins, whatever the
    // node ids.
    for (a, b, winner) in [(10, 30, 2), (30, 10, 1)] {
        let mut env = TestEnv::new(PolicyKind::Mch);
        env.node(1, 1).node(2, 1).cached(1, 10).cached(2, 20);
        env.task(1, &[(10, a), (20, b)]);
        let d = env.take_one();
        assert_eq!(d.node, n(winner), "sizes {a}/{b}");
        let (local, peer, holder) = if winner == 1 {
            (10, 20, 2)
        } else {
            (20, 10, 1)
        };
        assert_eq!(source(&d, local), Source::Local);
        assert_eq!(source(&d, peer), Source::Peer(n(holder)));
        // The other node stays idle: nothing else is queued.
        assert!(env.take_dispatches().is_empty());
    }
}

#[test]
fn mch_partial_holder_defers_to_a_busy_node_with_more_bytes() {
    let mut env = TestEnv::new(PolicyKind::Mch);
    env.node(1, 1);
    fill(&mut env, 1, 1, 100);
    env.cached(1, 20).node(2, 1).cached(2, 10);
    // n2 holds 10 of 40 bytes, busy n1 holds 30: t1 waits for n1.
    env.task(1, &[(10, 10), (20, 30)]);
    assert!(env.take_dispatches().is_empty());
    env.finish(100);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(1), n(1)));
    assert_eq!(source(&d, 20), Source::Local);
    assert_eq!(source(&d, 10), Source::Peer(n(2)));
}

#[test]
fn mch_full_hit_is_taken_even_if_another_node_also_holds_it() {
    let mut env = TestEnv::new(PolicyKind::Mch);
    env.node(1, 1).node(2, 1).cached(1, 10).cached(2, 10);
    env.task(1, &[(10, 5)]).task(2, &[(10, 5)]);
    let d = env.take_dispatches();
    assert_eq!(d.len(), 2);
    assert_eq!((d[0].task, d[0].node), (t(1), n(1)));
    assert_eq!((d[1].task, d[1].node), (t(2), n(2)));
    assert!(d.iter().all(|d| d.inputs == vec![(o(10), Source::Local)]));
}

// ----- GCC -----

/// n1 with `busy` slots, all running; n1 holds o10; n2 joins with one free slot; t1 reads o10.
/// Utilisation at n2's decision is busy / (busy + 1).
fn gcc_state(busy: u32) -> TestEnv {
    let mut env = TestEnv::with_config(CoreConfig {
        threshold: 0.9,
        ..config(PolicyKind::Gcc)
    });
    env.node(1, busy);
    fill(&mut env, 1, busy, 100);
    env.cached(1, 10).node(2, 1).task(1, &[(10, 5)]);
    env
}

#[test]
fn gcc_below_threshold_behaves_like_mcu() {
    // 8 busy of 9 slots: 0.89 < 0.9.
    let mut env = gcc_state(8);
    let c = env.counts();
    assert!((c.busy_slots as f64 / c.slots as f64) < 0.9);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(1), n(2)));
    assert_eq!(d.inputs, vec![(o(10), Source::Peer(n(1)))]);
}

#[test]
fn gcc_at_or_above_threshold_behaves_like_mch() {
    // 9 busy of 10 slots is exactly 0.9; 10 of 11 is above.
    for busy in [9, 10] {
        let mut env = gcc_state(busy);
        let c = env.counts();
        assert!((c.busy_slots as f64 / c.slots as f64) >= 0.9);
        assert!(
            env.take_dispatches().is_empty(),
            "busy {busy}: t1 must wait for n1"
        );
        assert_eq!(env.state(1), Some(TaskState::Queued));
        // Like MCH, a cold task still goes to the free node.
        env.task(2, &[(20, 5)]);
        let d = env.take_one();
        assert_eq!((d.task, d.node), (t(2), n(2)));
        assert_eq!(d.inputs, vec![(o(20), Source::Storage)]);
    }
}

#[test]
fn gcc_with_threshold_one_is_mcu_until_full() {
    let mut env = TestEnv::with_config(CoreConfig {
        threshold: 1.0,
        ..config(PolicyKind::Gcc)
    });
    env.node(1, 1);
    fill(&mut env, 1, 1, 100);
    env.cached(1, 10).node(2, 1).task(1, &[(10, 5)]);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(1), n(2)));
}

// ----- scheduling window -----

/// n1 (one slot) holds o30; t1 and t2 have their data on busy n2; t3 (queue position 3) is
/// fully local on n1.
fn window_state(policy: PolicyKind, window: usize) -> TestEnv {
    let mut env = TestEnv::with_config(CoreConfig {
        window,
        ..config(policy)
    });
    env.node(2, 1);
    fill(&mut env, 2, 1, 100);
    env.cached(2, 10).cached(2, 20).node(1, 1).cached(1, 30);
    env.task(1, &[(10, 5)])
        .task(2, &[(20, 5)])
        .task(3, &[(30, 5)]);
    env
}

#[test]
fn window_hides_a_local_task_beyond_it_from_mcu() {
    let mut env = window_state(PolicyKind::Mcu, 2);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(1), n(1)), "t3 is outside W=2");
    assert_eq!(d.inputs, vec![(o(10), Source::Peer(n(2)))]);

    let mut env = window_state(PolicyKind::Mcu, 3);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(3), n(1)), "t3 is inside W=3");
    assert_eq!(d.inputs, vec![(o(30), Source::Local)]);
}

#[test]
fn window_hides_a_local_task_beyond_it_from_mch() {
    let mut env = window_state(PolicyKind::Mch, 2);
    assert!(
        env.take_dispatches().is_empty(),
        "nothing for n1 within W=2"
    );

    let mut env = window_state(PolicyKind::Mch, 3);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(3), n(1)));
}

#[test]
fn window_applies_to_cold_tasks_under_mch() {
    // t1, t2 wait for busy n2; t3 is cold at position 3.
    for (window, expect) in [(2, None), (3, Some(t(3)))] {
        let mut env = TestEnv::with_config(CoreConfig {
            window,
            ..config(PolicyKind::Mch)
        });
        env.node(2, 1);
        fill(&mut env, 2, 1, 100);
        env.cached(2, 10).node(1, 1);
        env.task(1, &[(10, 5)])
            .task(2, &[(10, 5)])
            .task(3, &[(30, 5)]);
        let d = env.take_dispatches();
        assert_eq!(d.first().map(|d| d.task), expect, "W={window}");
    }
}

// ----- local-hit fraction -----

#[test]
fn full_local_task_beats_older_half_local_task() {
    for policy in [PolicyKind::Mcu, PolicyKind::Mch, PolicyKind::Gcc] {
        let mut env = TestEnv::new(policy);
        env.node(1, 1).cached(1, 10).cached(1, 30);
        env.task(1, &[(10, 10), (20, 10)]) // 50% local on n1
            .task(2, &[(30, 10), (10, 10)]); // 100% local on n1
        let d = env.take_one();
        assert_eq!(d.task, t(2), "{policy}");
        assert_eq!(
            d.inputs,
            vec![(o(30), Source::Local), (o(10), Source::Local)]
        );
        env.finish(2);
        let d = env.take_one();
        assert_eq!(d.task, t(1), "{policy}");
        assert_eq!(
            d.inputs,
            vec![(o(10), Source::Local), (o(20), Source::Storage)]
        );
    }
}

#[test]
fn higher_fraction_wins_and_ties_go_to_the_oldest() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 1).cached(1, 10);
    env.task(1, &[(10, 10), (20, 10)]) // 50%
        .task(2, &[(10, 30), (40, 10)]) // 75%
        .task(3, &[(10, 30), (50, 10)]) // 75%, younger
        .task(4, &[(60, 10)]); // 0%
    let order: Vec<_> = (0..4)
        .map(|_| {
            let d = env.take_one();
            env.finish(d.task.0);
            d.task
        })
        .collect();
    assert_eq!(order, vec![t(2), t(3), t(1), t(4)]);
}

#[test]
fn fraction_is_by_bytes_not_by_count() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 1).cached(1, 10).cached(1, 11);
    // t1: 2 of 3 inputs local but 2 of 102 bytes; t2: 1 of 2 inputs local but 90 of 100 bytes.
    env.task(1, &[(10, 1), (11, 1), (12, 100)])
        .task(2, &[(10, 90), (13, 10)]);
    assert_eq!(env.take_one().task, t(2));
}

// ----- peer choice -----

#[test]
fn peer_source_is_the_holder_serving_fewest_peer_reads() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 1).node(2, 1);
    env.task(100, &[]).task(101, &[]);
    assert_eq!(env.take_dispatches().len(), 2);
    env.cached(1, 10).cached(2, 10);

    // Both holders serve nothing: the lower id.
    env.node(3, 1).task(1, &[(10, 5)]);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(1), n(3)));
    assert_eq!(d.inputs, vec![(o(10), Source::Peer(n(1)))]);

    // n1 serves one read now: n2, despite its higher id.
    env.node(4, 1).task(2, &[(10, 5)]);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(2), n(4)));
    assert_eq!(d.inputs, vec![(o(10), Source::Peer(n(2)))]);

    // t1 finished: n1 serves nothing again, n2 still serves t2.
    env.finish(1);
    env.task(3, &[(10, 5)]);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(3), n(3)));
    assert_eq!(d.inputs, vec![(o(10), Source::Peer(n(1)))]);

    // Both serve nothing again: t4 gets n1 (lower id), and that read, counted at once, makes
    // n2 the choice for t5 in the same dispatch pass.
    env.finish(3);
    env.finish(2);
    env.task(4, &[(10, 5)]).task(5, &[(10, 5)]);
    let d = env.take_dispatches();
    assert_eq!(d.len(), 2);
    assert_eq!(d[0].inputs, vec![(o(10), Source::Peer(n(1)))]);
    assert_eq!(d[1].inputs, vec![(o(10), Source::Peer(n(2)))]);
}

#[test]
fn local_source_is_preferred_to_a_peer() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 1).node(2, 1).cached(1, 10).cached(2, 10);
    env.task(1, &[(10, 5)]).task(2, &[(10, 5)]);
    let d = env.take_dispatches();
    assert_eq!(d.len(), 2);
    assert!(d.iter().all(|d| d.inputs == vec![(o(10), Source::Local)]));
}

// ----- local pass before fallback -----

#[test]
fn a_free_holder_wins_over_a_free_node_visited_before_it() {
    // Every free node is offered its local tasks before any node falls back, so n2 (holding o10)
    // gets t1 although n1 is visited first and MCU would give n1 the oldest task.
    for policy in [PolicyKind::Mcu, PolicyKind::Gcc] {
        let mut env = TestEnv::new(policy);
        env.node(1, 1).node(2, 1).cached(2, 10);
        env.task(1, &[(10, 5)]).task(2, &[(20, 5)]);
        let d = env.take_dispatches();
        assert_eq!(d.len(), 2, "{policy}");
        assert_eq!((d[0].task, d[0].node), (t(1), n(2)), "{policy}");
        assert_eq!(d[0].inputs, vec![(o(10), Source::Local)]);
        assert_eq!((d[1].task, d[1].node), (t(2), n(1)), "{policy}");
        assert_eq!(d[1].inputs, vec![(o(20), Source::Storage)]);
    }
}

// ----- in transfer (MixApart's "in progress" tier) -----

#[test]
fn an_object_in_transfer_counts_as_local_to_be() {
    for policy in [PolicyKind::Mcu, PolicyKind::Mch, PolicyKind::Gcc] {
        let mut env = TestEnv::new(policy);
        env.node(1, 2).node(2, 1);
        env.task(1, &[(10, 5)]);
        let d = env.take_one();
        assert_eq!(
            source(&d, 10),
            Source::Storage,
            "{policy}: o10 is cached nowhere yet"
        );
        assert_eq!(d.node, n(1), "{policy}: free nodes are visited in id order");
        // t2 reads the same object: it goes to the node already fetching it, told Local (join
        // that fetch), even though another node is free and holds nothing.
        env.task(2, &[(10, 5)]);
        let d = env.take_dispatches();
        assert_eq!(d.len(), 1, "{policy}: {d:?}");
        assert_eq!((d[0].task, d[0].node), (t(2), n(1)), "{policy}");
        assert_eq!(source(&d[0], 10), Source::Local, "{policy}");
        // When the fetch ends without the object being cached (too large), it stops counting.
        env.finish(1);
        env.take_dispatches();
        assert!(
            env.core.locate(o(10)).is_empty(),
            "{policy}: never reported cached"
        );
        env.check();
    }
}

#[test]
fn in_transfer_ends_when_the_fetching_task_ends() {
    let mut env = TestEnv::new(PolicyKind::Mch);
    env.node(1, 1).node(2, 1);
    env.task(1, &[(10, 5)]);
    let d = env.take_one();
    assert_eq!(d.node, n(1));
    // Under MCH t2 waits for n1, which is fetching o10 (local-to-be), though n2 is free.
    env.task(2, &[(10, 5)]);
    env.assert_idle();
    // The fetch ends and n1 reports o10: t2 runs there as a local hit.
    env.cached(1, 10);
    env.finish(1);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(2), n(1)));
    assert_eq!(source(&d, 10), Source::Local);
}

// ----- per-job policies -----

#[test]
fn a_job_with_its_own_policy_is_dispatched_by_it() {
    use diffuse_core::JobId;
    // The core runs GCC; job 1 chose FA. Node 1 holds o10.
    let mut env = TestEnv::new(PolicyKind::Gcc);
    env.core
        .handle_job_policy(JobId(1), PolicyKind::Fa)
        .unwrap();
    env.node(1, 1).node(2, 1).cached(1, 10);
    let fa = support::spec(1, &[(10, 5)]).with_job(JobId(1));
    env.submit(fa).task(2, &[(10, 5)]);
    let d = env.take_dispatches();
    let of = |task: u64| d.iter().find(|d| d.task == t(task)).unwrap().clone();
    // GCC's task takes the node holding its data; FA's goes elsewhere and reads storage.
    assert_eq!(of(2).node, n(1));
    assert_eq!(source(&of(2), 10), Source::Local);
    assert_eq!(of(1).node, n(2));
    assert_eq!(source(&of(1), 10), Source::Storage);
    assert!(!env.core.caches_for(t(1)) && env.core.caches_for(t(2)));
    // Too late for a job that has tasks.
    assert!(env
        .core
        .handle_job_policy(JobId(1), PolicyKind::Mch)
        .is_err());
}

#[test]
fn policies_take_turns_by_their_oldest_task() {
    use diffuse_core::JobId;
    // One slot. Job 1 (MCH) queues first: its task's data is on no node, so MCH takes it (cold).
    // Then the core's GCC job's task. The slot serves the older group first, each time.
    let mut env = TestEnv::new(PolicyKind::Gcc);
    env.core
        .handle_job_policy(JobId(1), PolicyKind::Mch)
        .unwrap();
    env.node(1, 1);
    fill(&mut env, 1, 1, 100);
    env.submit(support::spec(1, &[(10, 5)]).with_job(JobId(1)))
        .task(2, &[])
        .submit(support::spec(3, &[(11, 5)]).with_job(JobId(1)));
    env.finish(100);
    assert_eq!(env.take_one().task, t(1), "job 1's task is the oldest");
    env.finish(1);
    assert_eq!(env.take_one().task, t(2), "then the core's job's");
    env.finish(2);
    assert_eq!(env.take_one().task, t(3));
}

#[test]
fn a_caching_policy_for_one_job_under_fa_tracks_locality_from_then_on() {
    use diffuse_core::JobId;
    let mut env = TestEnv::new(PolicyKind::Fa);
    env.node(1, 1);
    fill(&mut env, 1, 1, 100);
    env.task(1, &[(10, 5)]);
    assert!(!env.core.caching_enabled());
    env.core
        .handle_job_policy(JobId(1), PolicyKind::Gcc)
        .unwrap();
    env.check();
    assert!(env.core.caching_enabled());
    env.cached(1, 20).node(2, 1);
    env.submit(support::spec(2, &[(20, 5)]).with_job(JobId(1)));
    let d = env.take_one();
    assert_eq!(
        (d.task, d.node),
        (t(1), n(2)),
        "FA's task is older: the free node takes it"
    );
    assert_eq!(source(&d, 10), Source::Storage);
    env.finish(100);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(2), n(1)));
    assert_eq!(source(&d, 20), Source::Local);
}
