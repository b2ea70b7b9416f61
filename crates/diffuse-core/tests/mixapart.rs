//! MixApart's locality tiers on hand-built states: node-local, rack-local, in transfer, cached
//! anywhere, then storage; a free neighbour keeps its own tasks; peer sources in the reader's
//! rack first.

mod support;

use diffuse_core::{PolicyKind, RackId, Source};
use support::*;

/// n1 (rack 0) and n2 (rack 1) are busy; n0 (rack 0, two slots) runs t100, which fetches o9
/// from storage, and holds o5. n1 holds o1, n2 holds o2.
fn tiered() -> TestEnv {
    let mut env = TestEnv::new(PolicyKind::MixApart);
    env.node(1, 1).node(2, 1);
    env.core.handle_node_rack(n(1), RackId(0)).unwrap();
    env.core.handle_node_rack(n(2), RackId(1)).unwrap();
    env.task(101, &[]).task(102, &[]);
    assert_eq!(env.take_dispatches().len(), 2);
    env.cached(1, 1).cached(2, 2);
    env.node(0, 2);
    env.core.handle_node_rack(n(0), RackId(0)).unwrap();
    env.cached(0, 5);
    env.task(100, &[(9, 100)]);
    let d = env.take_one();
    assert_eq!(
        (d.task, d.node, source(&d, 9)),
        (t(100), n(0), Source::Storage)
    );
    env
}

#[test]
fn a_free_slot_takes_the_tiers_in_order() {
    let mut env = tiered();
    // Queued worst tier first, so queue order alone would pick them the other way round.
    env.task(1, &[(8, 100)]) // nowhere: storage
        .task(2, &[(2, 100)]) // on n2, another rack: cached anywhere
        .task(3, &[(9, 100)]) // on its way to n0: in transfer
        .task(4, &[(1, 100)]) // on n1, n0's rack: rack-local
        .task(5, &[(5, 100)]); // on n0: node-local
    let expected = [
        (5, 5, Source::Local),
        (4, 1, Source::Peer(n(1))),
        (3, 9, Source::Local),
        (2, 2, Source::Peer(n(2))),
        (1, 8, Source::Storage),
    ];
    for (task, object, src) in expected {
        let d = env.take_one();
        assert_eq!((d.task, d.node), (t(task), n(0)), "tier order");
        assert_eq!(source(&d, object), src, "t{task} reads o{object}");
        env.finish(task);
    }
}

#[test]
fn gcc_takes_the_in_transfer_task_as_soon_as_the_node_local_one() {
    // The control: GCC scores an object on its way to a node like one it holds, and takes the
    // older task first; MixApart takes what n0 holds first.
    for (policy, first) in [(PolicyKind::Gcc, 3), (PolicyKind::MixApart, 5)] {
        let mut env = TestEnv::new(policy);
        env.node(0, 2);
        env.cached(0, 5);
        env.task(100, &[(9, 100)]);
        assert_eq!(env.take_one().task, t(100));
        env.task(3, &[(9, 100)]).task(5, &[(5, 100)]);
        assert_eq!(env.take_one().task, t(first), "{policy}");
    }
}

#[test]
fn a_free_neighbour_keeps_its_own_node_local_task() {
    let mut env = TestEnv::new(PolicyKind::MixApart);
    env.node(0, 1).node(1, 1);
    env.core.handle_node_rack(n(0), RackId(0)).unwrap();
    env.core.handle_node_rack(n(1), RackId(0)).unwrap();
    env.cached(1, 1);
    env.task(1, &[(1, 100)]);
    let d = env.take_one();
    assert_eq!(
        (d.task, d.node, source(&d, 1)),
        (t(1), n(1), Source::Local),
        "n0 is visited first, but n1 is free and holds o1"
    );
}

#[test]
fn a_peer_source_in_the_readers_rack_comes_first() {
    // n1 (rack 1) and n3 (rack 0) hold o1 and are busy; n1 reported it first and has the lower
    // id. The reader n0 is in rack 0.
    let mut env = TestEnv::new(PolicyKind::MixApart);
    env.node(1, 1).node(3, 1);
    env.core.handle_node_rack(n(1), RackId(1)).unwrap();
    env.core.handle_node_rack(n(3), RackId(0)).unwrap();
    env.task(101, &[]).task(103, &[]);
    assert_eq!(env.take_dispatches().len(), 2);
    env.cached(1, 1).cached(3, 1);
    env.node(0, 1);
    env.core.handle_node_rack(n(0), RackId(0)).unwrap();
    env.task(1, &[(1, 100)]);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(1), n(0)));
    assert_eq!(source(&d, 1), Source::Peer(n(3)), "n3 shares n0's rack");
}

#[test]
fn without_racks_the_tiers_are_node_local_in_transfer_anywhere_storage() {
    let mut env = TestEnv::new(PolicyKind::MixApart);
    env.node(1, 1);
    env.task(101, &[]);
    env.take_one();
    env.cached(1, 1);
    env.node(0, 1);
    env.cached(0, 5);
    env.task(1, &[(8, 10)])
        .task(2, &[(1, 10)])
        .task(5, &[(5, 10)]);
    for (task, src) in [
        (5, Source::Local),
        (2, Source::Peer(n(1))),
        (1, Source::Storage),
    ] {
        let d = env.take_one();
        assert_eq!(d.task, t(task));
        assert_eq!(d.inputs[0].1, src);
        env.finish(task);
    }
}
