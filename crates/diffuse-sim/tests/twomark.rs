//! 2Mark in the simulator: with invariants checked after every step (the core's, 2Mark's
//! model against the index, the nodes' caches against the index), a random workload runs to
//! completion; and on a hand-built case a copy 2Mark moves is read from a peer where LRU would
//! have read storage again.

use diffuse_core::{EvictionPolicy, ObjectId, PolicyKind};
use diffuse_sim::{simulate, Arrival, SimConfig, Summary, Testbed, Workload};

fn testbed(nodes: u32) -> Testbed {
    Testbed {
        name: "hand-2mark".into(),
        cache_bytes: None,
        nodes,
        slots_per_node: 1,
        storage_bw: 100.0,
        storage_latency_s: 0.0,
        nic_bw: 1000.0,
        disk_bw: 1000.0,
        peer_latency_s: 0.0,
        dispatch_latency_s: 0.0,
        node_startup_s: 0.0,
        rack_size: 0,
        rack_uplink_bw: 0.0,
        storage_share_spread: 0.0,
    }
}

fn at(time: f64, object: u64, size: u64, compute_s: f64) -> Arrival {
    Arrival {
        time,
        inputs: vec![(ObjectId(object), size)],
        compute_s,
        cores: 1,
        produces: Vec::new(),
        after: Vec::new(),
        job: 0,
        priority: 0,
    }
}

fn run(two_mark: bool, nodes: u32, cache: u64, arrivals: Vec<Arrival>) -> Summary {
    let mut cfg = SimConfig::new(Workload::Custom(arrivals), testbed(nodes), cache);
    cfg.core.policy = PolicyKind::Gcc;
    cfg.eviction = EvictionPolicy::Lru;
    cfg.core.two_mark = two_mark;
    cfg.check_invariants = true;
    simulate(cfg).expect("simulation completes").0
}

#[test]
fn a_random_workload_keeps_every_invariant() {
    // 600 tasks over 60 objects of 10-40 B, 4 nodes of 100 B: the caches hold about a third.
    let mut x: u64 = 7;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let arrivals: Vec<Arrival> = (0..600)
        .map(|i| {
            let o = next() % 60;
            at(i as f64 * 0.05, o, 10 + (o % 4) * 10, 0.1)
        })
        .collect();
    let s = run(true, 4, 100, arrivals.clone());
    assert_eq!(s.tasks, 600);
    let m = s.two_mark.expect("2Mark on");
    assert!(m.evicted > 0 && m.global_phases > 0, "{m:?}");
    let lru = run(false, 4, 100, arrivals);
    assert_eq!(lru.tasks, 600);
    assert!(lru.two_mark.is_none());
}

/// Two nodes of 20 B, objects of 10 B. n0 holds o9 from the start (placed, never asked for:
/// global-unmarked) and is busy for 30 s with a task reading nothing. n1 reads o1, o2, o1, o2,
/// then o3: everything on n1 is global-marked, and o9 is not, so no new global phase begins;
/// 2Mark moves n1's least recently asked object, o1, to n0, which has room, instead of dropping
/// it. The task reading o1 at 6 s runs on n1 and gets it from n0 (a peer hit, a 1-fault): n1
/// is full, so it exchanges o1 for o2, its least recently asked (n0 gives o1 up for o2). Under
/// LRU n1 drops o1 at o3 and that task reads storage.
#[test]
fn a_moved_copy_is_read_from_a_peer_where_lru_reads_storage() {
    let busy = Arrival {
        inputs: Vec::new(),
        ..at(0.0, 0, 0, 30.0)
    };
    let arrivals = vec![
        busy,
        at(0.0, 1, 10, 0.1),
        at(1.0, 2, 10, 0.1),
        at(2.0, 1, 10, 0.1),
        at(3.0, 2, 10, 0.1),
        at(4.0, 3, 10, 0.1),
        at(6.0, 1, 10, 0.1),
    ];
    let run = |two_mark: bool| {
        let mut cfg = SimConfig::new(Workload::Custom(arrivals.clone()), testbed(2), 20);
        cfg.core.policy = PolicyKind::Gcc;
        cfg.core.two_mark = two_mark;
        cfg.check_invariants = true;
        cfg.placed = vec![(0, ObjectId(9), 10)];
        simulate(cfg).expect("simulation completes").0
    };
    let (two, lru) = (run(true), run(false));
    let m = two.two_mark.unwrap();
    assert_eq!(
        (m.moved, m.evicted),
        (2, 1),
        "o1 and o2 moved; n0's o1 given up: {m:?}"
    );
    assert_eq!(two.bytes_peer, 10, "o1 read from n0");
    assert_eq!(lru.bytes_peer, 0);
    assert_eq!(two.bytes_storage, 30, "o1, o2, o3 once each");
    assert_eq!(lru.bytes_storage, 40, "o1 twice");
}
