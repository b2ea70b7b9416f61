//! MixApart in the simulator, worked out by hand: racks (the rack-local tier, and what crossing
//! an uplink costs), the storage cap, and prefetches that tasks join.
//!
//! Testbed: 4 nodes of one slot, NIC and disk 1000 B/s, storage 1000 B/s, no latencies. Racks
//! of two (n0, n1 | n2, n3) with 100 B/s uplinks where a test says so.

use diffuse_core::{JobOrder, ObjectId, PolicyKind, PrefetchConfig};
use diffuse_sim::{simulate, Arrival, SimConfig, Summary, Testbed, Workload};

fn testbed(rack_uplink_bw: f64) -> Testbed {
    Testbed {
        name: "hand-racks".into(),
        cache_bytes: None,
        nodes: 4,
        slots_per_node: 1,
        storage_bw: 1000.0,
        storage_latency_s: 0.0,
        nic_bw: 1000.0,
        disk_bw: 1000.0,
        peer_latency_s: 0.0,
        dispatch_latency_s: 0.0,
        node_startup_s: 0.0,
        rack_size: 2,
        rack_uplink_bw,
        storage_share_spread: 0.0,
    }
}

fn at(time: f64, inputs: &[(u64, u64)], compute_s: f64) -> Arrival {
    Arrival {
        time,
        inputs: inputs.iter().map(|&(o, s)| (ObjectId(o), s)).collect(),
        compute_s,
        cores: 1,
        produces: Vec::new(),
        after: Vec::new(),
        job: 0,
        priority: 0,
    }
}

fn run(
    policy: PolicyKind,
    tb: Testbed,
    arrivals: Vec<Arrival>,
    placed: &[(u32, u64, u64)],
) -> Summary {
    let mut cfg = SimConfig::new(Workload::Custom(arrivals), tb, 1_000_000);
    cfg.core.policy = policy;
    cfg.check_invariants = true;
    cfg.placed = placed
        .iter()
        .map(|&(n, o, s)| (n, ObjectId(o), s))
        .collect();
    simulate(cfg).expect("simulation completes").0
}

fn close(got: f64, want: f64, what: &str) {
    assert!((got - want).abs() < 1e-6, "{what}: got {got}, want {want}");
}

/// o1 (1000 B) and o2 (10 B) are on n2 (rack 1). t0 reads o2 and computes 100 s: it runs on
/// n2, which holds o2, under either policy. t1 reads o1. MixApart sends it to n3, in n2's rack:
/// 1000 B at 1000 B/s, a 1 s read. MCU sends it to the first free node, n0, across both
/// uplinks at 100 B/s: a 10 s read.
#[test]
fn the_rack_local_tier_keeps_a_read_off_the_uplinks() {
    let arrivals = vec![at(0.0, &[(2, 10)], 100.0), at(0.0, &[(1, 1000)], 1.0)];
    let placed = [(2, 1, 1000), (2, 2, 10)];
    let mix = run(
        PolicyKind::MixApart,
        testbed(100.0),
        arrivals.clone(),
        &placed,
    );
    let mcu = run(PolicyKind::Mcu, testbed(100.0), arrivals, &placed);
    // The 100 s task is the makespan either way: compare the reads instead.
    close(
        mix.model.measured_r_peer_s,
        1.0,
        "MixApart: a read within the rack",
    );
    close(
        mcu.model.measured_r_peer_s,
        10.0,
        "MCU: a read across racks",
    );
}

/// A storage read crosses the reader's uplink: two readers in one rack share its 100 B/s,
/// 1000 B each: 20 s; in two racks, 10 s each.
#[test]
fn storage_reads_share_their_racks_uplink() {
    let arrivals = vec![at(0.0, &[(1, 1000)], 0.0), at(0.0, &[(2, 1000)], 0.0)];
    let s = run(PolicyKind::Fa, testbed(100.0), arrivals, &[]);
    // FA: t0 -> n0, t1 -> n1, both in rack 0.
    close(s.makespan_s, 20.0, "one uplink shared");
    let mut tb = testbed(100.0);
    tb.rack_size = 1;
    let arrivals = vec![at(0.0, &[(1, 1000)], 0.0), at(0.0, &[(2, 1000)], 0.0)];
    let s = run(PolicyKind::Fa, tb, arrivals, &[]);
    close(s.makespan_s, 10.0, "an uplink each");
}

/// The cap is a resource every storage read crosses: four readers of 1000 B under a 400 B/s
/// cap (storage itself 1000 B/s) take 4000 / 400 = 10 s.
#[test]
fn the_storage_cap_bounds_all_storage_reads_together() {
    let arrivals: Vec<Arrival> = (0..4).map(|i| at(0.0, &[(i, 1000)], 0.0)).collect();
    let mut cfg = SimConfig::new(Workload::Custom(arrivals), testbed(0.0), 1_000_000);
    cfg.core.policy = PolicyKind::Fa;
    cfg.check_invariants = true;
    cfg.core.storage_cap = Some(400.0);
    let s = simulate(cfg).unwrap().0;
    close(s.makespan_s, 10.0, "4000 B at 400 B/s");
}

/// One node of one slot, busy 10 s with t0; t1 and t2 read 1000 B each from storage. With the
/// transfer scheduler (cap 1000 B/s, one read at a time) o1 is prefetched during t0 (lands at
/// 1 s), then o2 (lands at 2 s): t1 starts at 10 s reading locally (1 s) and computes 1 s,
/// t2 likewise: makespan 10 + 2 + 2 = 14 s, and no task reads storage itself. Without it: t1
/// reads 1 s from storage, t2 too: 10 + 2 + 2 = 14 s as well, but 2000 B read by tasks.
#[test]
fn prefetches_land_during_compute_and_tasks_read_them_locally() {
    let arrivals = vec![
        at(0.0, &[], 10.0),
        at(0.0, &[(1, 1000)], 1.0),
        at(0.0, &[(2, 1000)], 1.0),
    ];
    let mut tb = testbed(0.0);
    tb.nodes = 1;
    let mut cfg = SimConfig::new(Workload::Custom(arrivals), tb, 1_000_000);
    cfg.core.policy = PolicyKind::MixApart;
    cfg.core.job_order = JobOrder::Fifo;
    cfg.check_invariants = true;
    cfg.core.storage_cap = Some(1000.0);
    cfg.core.prefetch = Some(PrefetchConfig {
        cache_share: 1.0,
        ..PrefetchConfig::default()
    });
    let s = simulate(cfg).unwrap().0;
    assert_eq!(s.bytes_prefetched, 2000);
    assert_eq!(
        s.bytes_storage, 0,
        "tasks read nothing from storage themselves"
    );
    assert_eq!((s.prefetch.issued, s.prefetch.read), (2, 2));
    close(s.hit_local, 1.0, "both reads local");
    close(
        s.makespan_s,
        14.0,
        "10 s, then two tasks of 1 s local read + 1 s compute",
    );
}
