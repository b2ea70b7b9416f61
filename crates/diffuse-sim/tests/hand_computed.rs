//! Small simulations whose results are worked out by hand.
//!
//! Every run uses a custom testbed with round numbers (storage 100 B/s, NIC and disk 1000 B/s,
//! no latencies, nodes up at once unless a test says otherwise), a `Workload::Custom` list of
//! arrivals, and `check_invariants: true`, so the core's invariants and the agreement of every
//! node's cache with the location index are checked after every step. The expected values are
//! derived in the comments next to each assertion.
//!
//! Rules of the model used in the derivations (see `flows.rs` and `engine/`):
//! - a storage read crosses storage and the reader's NIC in; a peer read crosses the holder's
//!   NIC out and the reader's NIC in; a local read crosses the node's disk;
//! - each resource is split equally between the flows crossing it, and a flow moves at its
//!   smallest share;
//! - compute starts when the last input is read; node ids are given in order and the core offers
//!   free nodes in id order, so with everything free the oldest task goes to node 0.

use diffuse_core::{CoreConfig, EvictionPolicy, HandoffConfig, ObjectId, PolicyKind, StepPolicy};
use diffuse_sim::{
    simulate, Arrival, DynamicSettings, HandoffReport, Sample, SimConfig, Summary, Testbed,
    Workload,
};
use std::time::Duration;

const EPS: f64 = 1e-6;

/// The hand testbed: storage 100 B/s, NIC 1000 B/s each way, disk 1000 B/s, no latencies.
fn testbed(nodes: u32, slots: u32) -> Testbed {
    Testbed {
        name: "hand".into(),
        cache_bytes: None,
        nodes,
        slots_per_node: slots,
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

/// An arrival at `time` reading `(object, bytes)` pairs, then computing `compute_s`.
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

/// GCC (threshold 0.9), window 2500, LRU, static, every node of the testbed, invariants checked.
fn config(tb: Testbed, arrivals: Vec<Arrival>, cache_size: u64) -> SimConfig {
    SimConfig {
        check_invariants: true,
        ..SimConfig::new(Workload::Custom(arrivals), tb, cache_size)
    }
}

/// Run to completion, and check what must hold for any run: every task finished once, every
/// distinct input of every task read once, and the per-second samples add up to the summary.
fn run(cfg: SimConfig) -> (Summary, Vec<Sample>) {
    let Workload::Custom(arrivals) = cfg.workload.clone() else {
        panic!("hand tests use custom workloads");
    };
    let (s, samples) = simulate(cfg).expect("simulation completes");
    assert_eq!(s.tasks, arrivals.len() as u64, "every task finishes once");

    let mut accesses = 0u64;
    let mut bytes = 0u64;
    for a in &arrivals {
        let mut seen: Vec<ObjectId> = Vec::new();
        for (o, size) in &a.inputs {
            if !seen.contains(o) {
                seen.push(*o);
                accesses += 1;
                bytes += size;
            }
        }
    }
    assert_eq!(
        s.bytes_local + s.bytes_peer + s.bytes_storage,
        bytes,
        "every distinct input read exactly once"
    );
    let sampled: [u64; 3] = samples.iter().fold([0; 3], |a, x| {
        [
            a[0] + x.accesses[0],
            a[1] + x.accesses[1],
            a[2] + x.accesses[2],
        ]
    });
    assert_eq!(sampled.iter().sum::<u64>(), accesses, "accesses in samples");
    if accesses > 0 {
        let n = accesses as f64;
        close(s.hit_local, sampled[0] as f64 / n, "hit_local vs samples");
        close(s.hit_peer, sampled[1] as f64 / n, "hit_peer vs samples");
        close(s.miss, sampled[2] as f64 / n, "miss vs samples");
        close(s.hit_local + s.hit_peer + s.miss, 1.0, "fractions add up");
    }
    let sum = |f: fn(&Sample) -> f64| samples.iter().map(f).sum::<f64>();
    close(sum(|x| x.bytes_local), s.bytes_local as f64, "local bytes");
    close(sum(|x| x.bytes_peer), s.bytes_peer as f64, "peer bytes");
    close(
        sum(|x| x.bytes_storage),
        s.bytes_storage as f64,
        "storage bytes",
    );
    close(
        s.efficiency,
        s.ideal_makespan_s / s.makespan_s,
        "efficiency",
    );
    (s, samples)
}

fn summary(cfg: SimConfig) -> Summary {
    run(cfg).0
}

#[track_caller]
fn close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() < EPS,
        "{what}: got {got}, want {want} (difference {})",
        got - want
    );
}

// ----- single reads -----

#[test]
fn one_storage_read_then_compute() {
    // 100 B from storage: min(storage 100, NIC 1000) = 100 B/s -> read 0..1 s, compute 1..2 s.
    let s = summary(config(testbed(1, 1), vec![at(0.0, &[(0, 100)], 1.0)], 1000));
    close(s.makespan_s, 2.0, "makespan");
    close(s.miss, 1.0, "miss");
    close(s.hit_local, 0.0, "hit_local");
    close(s.hit_peer, 0.0, "hit_peer");
    assert_eq!((s.bytes_local, s.bytes_peer, s.bytes_storage), (0, 0, 100));
    close(s.avg_response_s, 2.0, "response");
    close(s.model.measured_r_storage_s, 1.0, "storage access time");
    close(s.model.measured_task_time_s, 2.0, "task time");
    // Ideal: best task = 1 s + 100 B / 1000 B/s = 1.1 s; max(0 + 1.1, 1 x 1.1 / 1) = 1.1 s.
    close(s.ideal_makespan_s, 1.1, "ideal");
    close(s.efficiency, 1.1 / 2.0, "efficiency");
    // One node of one slot, from 0 to the last completion at 2 s.
    close(s.cpu_hours, 2.0 / 3600.0, "cpu hours");
    assert_eq!(s.nodes_acquired, 1);
    // 100 B = 800 bits over 2 s.
    close(s.throughput_avg_gbps, 800.0 / 1e9 / 2.0, "throughput");
    assert_eq!(
        (
            s.workload.as_str(),
            s.policy.as_str(),
            s.testbed.as_str(),
            s.provisioning.as_str()
        ),
        ("custom", "gcc", "hand", "static")
    );
}

#[test]
fn times_are_measured_from_time_zero() {
    // A single task arriving at 10 s ends at 12 s; `makespan_s` counts from time 0, as
    // documented, so it is 12.
    // Ideal: max(10 + 1.1, 1.1) = 11.1. The node is allocated from 0 to 12.
    let s = summary(config(
        testbed(1, 1),
        vec![at(10.0, &[(0, 100)], 1.0)],
        1000,
    ));
    close(s.makespan_s, 12.0, "makespan");
    close(s.ideal_makespan_s, 11.1, "ideal");
    close(s.avg_response_s, 2.0, "response");
    close(s.cpu_hours, 12.0 / 3600.0, "cpu hours");
}

#[test]
fn task_without_inputs_only_computes() {
    let s = summary(config(testbed(1, 1), vec![at(0.0, &[], 2.5)], 1000));
    close(s.makespan_s, 2.5, "makespan");
    // No access at all: every fraction is 0 (not NaN).
    assert_eq!((s.hit_local, s.hit_peer, s.miss), (0.0, 0.0, 0.0));
    close(s.ideal_makespan_s, 2.5, "ideal");
    close(s.efficiency, 1.0, "efficiency");
}

#[test]
fn latencies_add_to_access_and_response_times() {
    let tb = Testbed {
        dispatch_latency_s: 0.25,
        storage_latency_s: 0.5,
        ..testbed(1, 1)
    };
    // Dispatched at 0, delivered at 0.25, read requested then; bytes flow from 0.75 to 1.75;
    // compute 1.75..2.75.
    let s = summary(config(tb, vec![at(0.0, &[(0, 100)], 1.0)], 1000));
    close(s.makespan_s, 2.75, "makespan");
    close(s.avg_response_s, 2.75, "response");
    // Access time counts from the request (0.25) to the last byte (1.75).
    close(s.model.measured_r_storage_s, 1.5, "storage access time");
    // Task time counts from delivery (0.25) to completion (2.75).
    close(s.model.measured_task_time_s, 2.5, "task time");
}

#[test]
fn two_core_tasks_share_a_two_core_node_one_at_a_time() {
    // One node, 2 cores. Four 2-core tasks of 10 s compute, no inputs: each holds both cores,
    // so they run one after another: 40 s. Four 1-core tasks run two at a time: 20 s.
    let wide: Vec<Arrival> = (0..4)
        .map(|_| Arrival {
            cores: 2,
            ..at(0.0, &[], 10.0)
        })
        .collect();
    let s = summary(config(testbed(1, 2), wide, 0));
    close(s.makespan_s, 40.0, "four 2-core tasks in series");
    let narrow: Vec<Arrival> = (0..4).map(|_| at(0.0, &[], 10.0)).collect();
    let s = summary(config(testbed(1, 2), narrow, 0));
    close(s.makespan_s, 20.0, "four 1-core tasks two at a time");
}

#[test]
fn second_read_on_the_same_node_is_a_local_hit() {
    // Task 0: storage read 0..1, compute 1..2; object 0 is now cached on node 0.
    // Task 1 at 5 s: local read 100 B / 1000 B/s = 0.1 s, compute 5.1..6.1.
    let s = summary(config(
        testbed(1, 1),
        vec![at(0.0, &[(0, 100)], 1.0), at(5.0, &[(0, 100)], 1.0)],
        1000,
    ));
    close(s.makespan_s, 6.1, "makespan");
    close(s.hit_local, 0.5, "hit_local");
    close(s.miss, 0.5, "miss");
    assert_eq!(
        (s.bytes_local, s.bytes_peer, s.bytes_storage),
        (100, 0, 100)
    );
    close(s.model.measured_r_local_s, 0.1, "local access time");
    close(s.model.measured_r_storage_s, 1.0, "storage access time");
    // Responses: 2 s and 1.1 s.
    close(s.avg_response_s, 1.55, "response");
    // Ideal: best task 1.1 s; max(last arrival 5 + 1.1, 2 x 1.1 / 1) = 6.1 s: the run is ideal.
    close(s.ideal_makespan_s, 6.1, "ideal");
    close(s.efficiency, 1.0, "efficiency");
}

#[test]
fn partly_local_task_reads_its_inputs_in_parallel() {
    // Task 1 reads object 0 locally (0.1 s on the disk) and object 1 from storage (1 s) at the
    // same time: inputs ready at 6, done at 7.
    let s = summary(config(
        testbed(1, 1),
        vec![
            at(0.0, &[(0, 100)], 1.0),
            at(5.0, &[(0, 100), (1, 100)], 1.0),
        ],
        1000,
    ));
    close(s.makespan_s, 7.0, "makespan");
    close(s.hit_local, 1.0 / 3.0, "hit_local");
    close(s.miss, 2.0 / 3.0, "miss");
    assert_eq!(
        (s.bytes_local, s.bytes_peer, s.bytes_storage),
        (100, 0, 200)
    );
    close(s.model.measured_r_local_s, 0.1, "local access time");
    close(s.model.measured_r_storage_s, 1.0, "storage access time");
}

// ----- peers -----

/// Two nodes of one slot, NIC 200 B/s (so a storage read is min(100, 200) = 100 B/s and a peer
/// read 200 B/s). Task 0 (t=0) runs on node 0: storage read 0..1, compute 1..2. Task 1 (t=1.5)
/// reads the same object while node 0 is still busy and node 1 is free.
fn peer_scenario(policy: PolicyKind, threshold: f64) -> SimConfig {
    let tb = Testbed {
        nic_bw: 200.0,
        ..testbed(2, 1)
    };
    SimConfig {
        core: CoreConfig {
            policy,
            threshold,
            ..CoreConfig::default()
        },
        ..config(
            tb,
            vec![at(0.0, &[(0, 100)], 1.0), at(1.5, &[(0, 100)], 1.0)],
            1000,
        )
    }
}

#[test]
fn mcu_runs_on_the_free_node_and_reads_from_the_peer() {
    // MCU (and GCC below its threshold: utilisation 1/2 < 0.9) puts task 1 on node 1 at once;
    // it reads from node 0 over NIC out -> NIC in at 200 B/s: 1.5..2.0, compute 2.0..3.0.
    for (policy, threshold) in [(PolicyKind::Mcu, 0.9), (PolicyKind::Gcc, 0.9)] {
        let s = summary(peer_scenario(policy, threshold));
        let what = format!("{policy}");
        close(s.makespan_s, 3.0, &what);
        close(s.hit_peer, 0.5, &what);
        close(s.miss, 0.5, &what);
        assert_eq!(
            (s.bytes_local, s.bytes_peer, s.bytes_storage),
            (0, 100, 100),
            "{what}"
        );
        close(s.model.measured_r_peer_s, 0.5, &what);
        close(s.model.measured_r_storage_s, 1.0, &what);
        assert_eq!(s.peak_queue, 0, "{what}");
    }
}

#[test]
fn mch_waits_for_the_node_that_holds_the_data() {
    // MCH (and GCC at its threshold: utilisation 1/2 >= 0.5) keeps task 1 queued for node 0,
    // which frees at 2 s: local read 2.0..2.1, compute 2.1..3.1; node 1 never runs anything.
    for (policy, threshold) in [(PolicyKind::Mch, 0.9), (PolicyKind::Gcc, 0.5)] {
        let s = summary(peer_scenario(policy, threshold));
        let what = format!("{policy} threshold {threshold}");
        close(s.makespan_s, 3.1, &what);
        close(s.hit_local, 0.5, &what);
        close(s.hit_peer, 0.0, &what);
        assert_eq!(
            (s.bytes_local, s.bytes_peer, s.bytes_storage),
            (100, 0, 100),
            "{what}"
        );
        assert_eq!(s.peak_queue, 1, "{what}");
        // Responses: 2 s, and 3.1 - 1.5 = 1.6 s.
        close(s.avg_response_s, 1.8, &what);
    }
}

#[test]
fn fa_never_caches_nor_reads_from_peers() {
    // Same object read twice on one node: FA reads from storage both times (5..6, 6..7).
    let s = summary(SimConfig {
        core: CoreConfig {
            policy: PolicyKind::Fa,
            ..CoreConfig::default()
        },
        ..config(
            testbed(1, 1),
            vec![at(0.0, &[(0, 100)], 1.0), at(5.0, &[(0, 100)], 1.0)],
            1000,
        )
    });
    close(s.makespan_s, 7.0, "makespan");
    close(s.miss, 1.0, "miss");
    assert_eq!((s.bytes_local, s.bytes_peer, s.bytes_storage), (0, 0, 200));

    // The peer scenario under FA: task 1 on node 1 reads from storage, 1.5..2.5, done at 3.5.
    let s = summary(peer_scenario(PolicyKind::Fa, 0.9));
    close(s.makespan_s, 3.5, "makespan");
    close(s.miss, 1.0, "miss");
    assert_eq!((s.bytes_local, s.bytes_peer, s.bytes_storage), (0, 0, 200));
}

// ----- shared bandwidth -----

#[test]
fn concurrent_storage_readers_share_storage_bandwidth() {
    // n tasks at t=0 on n nodes, each reading its own 100 B object: storage gives each 100/n
    // B/s (the NICs are 1000 B/s), so every read takes n seconds and every task ends at n + 1.
    for n in 1..=4u32 {
        let arrivals = (0..n).map(|i| at(0.0, &[(i as u64, 100)], 1.0)).collect();
        let s = summary(config(testbed(n, 1), arrivals, 1000));
        close(
            s.makespan_s,
            n as f64 + 1.0,
            &format!("makespan, {n} readers"),
        );
        close(
            s.model.measured_r_storage_s,
            n as f64,
            &format!("read time, {n} readers"),
        );
        close(s.avg_response_s, n as f64 + 1.0, &format!("response, {n}"));
        close(s.miss, 1.0, "miss");
    }
}

#[test]
fn readers_on_one_node_share_its_nic() {
    // One node with two slots and a 100 B/s NIC, storage 1000 B/s: the two reads share the NIC
    // at 50 B/s each, 0..2, and both tasks end at 3.
    let tb = Testbed {
        nic_bw: 100.0,
        storage_bw: 1000.0,
        ..testbed(1, 2)
    };
    let s = summary(config(
        tb,
        vec![at(0.0, &[(0, 100)], 1.0), at(0.0, &[(1, 100)], 1.0)],
        1000,
    ));
    close(s.makespan_s, 3.0, "makespan");
    close(s.model.measured_r_storage_s, 2.0, "read time");
}

#[test]
fn bandwidth_freed_by_a_finished_read_goes_to_the_others() {
    // Two nodes; task 0 reads 100 B and task 1 reads 300 B from storage, both from 0 s. They
    // share storage at 50 B/s each until task 0's read ends at 2 s (task 1 has 200 B left);
    // task 1 then reads alone at 100 B/s until 4 s. Task 0 computes 2..3, task 1 4..5.
    let s = summary(config(
        testbed(2, 1),
        vec![at(0.0, &[(0, 100)], 1.0), at(0.0, &[(1, 300)], 1.0)],
        1000,
    ));
    close(s.makespan_s, 5.0, "makespan");
    close(s.avg_response_s, 4.0, "response (3 and 5 s)");
    close(
        s.model.measured_r_storage_s,
        3.0,
        "mean read time (2 and 4 s)",
    );
}

// ----- eviction -----

/// One node of one slot; `objects` read one per task every 10 s (each task ends within 2 s, so
/// the tasks never overlap).
fn sequence(objects: &[u64], cache_size: u64, eviction: EvictionPolicy) -> Summary {
    let arrivals = objects
        .iter()
        .enumerate()
        .map(|(i, &o)| at(10.0 * i as f64, &[(o, 100)], 1.0))
        .collect();
    summary(SimConfig {
        eviction,
        ..config(testbed(1, 1), arrivals, cache_size)
    })
}

#[test]
fn a_cache_smaller_than_two_objects_misses_on_every_alternation() {
    // Quota 150 B holds one 100 B object: X, Y, X, Y all miss (each evicts the other).
    let s = sequence(&[0, 1, 0, 1], 150, EvictionPolicy::Lru);
    close(s.miss, 1.0, "miss");
    assert_eq!((s.bytes_local, s.bytes_storage), (0, 400));
    // Last task: arrives 30, storage read 30..31, compute 31..32.
    close(s.makespan_s, 32.0, "makespan");

    // Quota 200 B holds both: X, Y miss; X, Y hit. Last task: 30..30.1 read, done 31.1.
    let s = sequence(&[0, 1, 0, 1], 200, EvictionPolicy::Lru);
    close(s.hit_local, 0.5, "hit_local");
    assert_eq!((s.bytes_local, s.bytes_storage), (200, 200));
    close(s.makespan_s, 31.1, "makespan");
}

#[test]
fn a_cache_smaller_than_one_object_stores_nothing() {
    // Quota 50 B: the 100 B object is never admitted, so both reads miss.
    let s = sequence(&[0, 0], 50, EvictionPolicy::Lru);
    close(s.miss, 1.0, "miss");
    assert_eq!(s.bytes_storage, 200);
}

#[test]
fn lru_fifo_and_lfu_evict_by_their_own_order() {
    // Quota 250 B (two objects). Reads: X Y X Z X Y.
    // LRU: X miss, Y miss, X hit, Z miss evicts Y (least recent), X hit, Y miss: 2 hits.
    // FIFO: X miss, Y miss, X hit, Z miss evicts X (first in), X miss evicts Y, Y miss: 1 hit.
    // LFU: X used twice, Y once when Z comes: Z evicts Y; X hit; Y miss evicts Z: 2 hits.
    let reads = [0, 1, 0, 2, 0, 1];
    for (eviction, hits) in [
        (EvictionPolicy::Lru, 2u64),
        (EvictionPolicy::Fifo, 1),
        (EvictionPolicy::Lfu, 2),
    ] {
        let s = sequence(&reads, 250, eviction);
        assert_eq!(
            (s.bytes_local, s.bytes_storage),
            (100 * hits, 100 * (6 - hits)),
            "{eviction}"
        );
        close(s.hit_local, hits as f64 / 6.0, &format!("{eviction}"));
        assert_eq!(s.eviction, eviction.to_string());
    }
}

// ----- ideal makespan and efficiency -----

#[test]
fn ideal_is_bounded_by_packing_all_tasks_on_all_slots() {
    // 4 tasks at 0, one node of 2 slots, own 100 B objects. Best task 1 + 100/1000 = 1.1 s;
    // ideal = max(0 + 1.1, 4 x 1.1 / 2) = 2.2 s.
    // Run: tasks 0 and 1 share storage (50 B/s) 0..2, compute 2..3; tasks 2 and 3 likewise
    // 3..5, 5..6.
    let arrivals = (0..4).map(|i| at(0.0, &[(i, 100)], 1.0)).collect();
    let s = summary(config(testbed(1, 2), arrivals, 1000));
    close(s.ideal_makespan_s, 2.2, "ideal");
    close(s.makespan_s, 6.0, "makespan");
    close(s.efficiency, 2.2 / 6.0, "efficiency");
    // Two tasks wait for a slot for 3 s: responses 3, 3, 6, 6.
    close(s.avg_response_s, 4.5, "response");
    assert_eq!(s.peak_queue, 2);
}

#[test]
fn ideal_is_bounded_by_the_last_arrival() {
    // Tasks at 0 and 10: ideal = max(10 + 1.1, 2 x 1.1 / 1) = 11.1 s; run ends at 12.
    let s = summary(config(
        testbed(1, 1),
        vec![at(0.0, &[(0, 100)], 1.0), at(10.0, &[(1, 100)], 1.0)],
        1000,
    ));
    close(s.ideal_makespan_s, 11.1, "ideal");
    close(s.makespan_s, 12.0, "makespan");
    close(s.efficiency, 11.1 / 12.0, "efficiency");
}

#[test]
fn ideal_uses_mean_bytes_and_compute_per_task() {
    // 100 B + 1 s and 300 B + 3 s: means 200 B and 2 s; best task 2 + 200/1000 = 2.2 s;
    // ideal = max(0 + 2.2, 2 x 2.2 / 1) = 4.4 s.
    // Run: 0..1 read, 1..2 compute; 2..5 read (300 B at 100 B/s), 5..8 compute.
    let s = summary(config(
        testbed(1, 1),
        vec![at(0.0, &[(0, 100)], 1.0), at(0.0, &[(1, 300)], 3.0)],
        1000,
    ));
    close(s.ideal_makespan_s, 4.4, "ideal");
    close(s.makespan_s, 8.0, "makespan");
    close(s.efficiency, 0.55, "efficiency");
}

// ----- dynamic provisioning -----

fn dynamic(step: StepPolicy, idle_timeout_s: f64) -> Option<DynamicSettings> {
    Some(DynamicSettings {
        step,
        idle_timeout_s,
        min_nodes: 0,
        check_interval_s: 1.0,
    })
}

/// Up to 2 nodes of one slot that take 5 s to start; object 0 read at 0 s and again at 20 s.
fn dynamic_scenario(idle_timeout_s: f64) -> SimConfig {
    let tb = Testbed {
        node_startup_s: 5.0,
        ..testbed(2, 1)
    };
    SimConfig {
        dynamic: dynamic(StepPolicy::OneAtATime, idle_timeout_s),
        ..config(
            tb,
            vec![at(0.0, &[(0, 100)], 1.0), at(20.0, &[(0, 100)], 1.0)],
            1000,
        )
    }
}

#[test]
fn dynamic_node_released_after_idle_timeout_loses_its_cache() {
    // t=0: task 0 queued, one node asked for; it joins at 5. Task 0 reads 5..6, computes 6..7.
    // The node is idle from 7; the once-a-second check at 10 sees 3 s idle and releases it
    // (5 slot-seconds). t=20: task 1 queued, a new node asked for, joins at 25; its cache is
    // empty, so storage read 25..26, compute 26..27 (2 slot-seconds to the end of the run).
    let s = summary(dynamic_scenario(3.0));
    close(s.makespan_s, 27.0, "makespan");
    assert_eq!(s.nodes_acquired, 2);
    close(s.miss, 1.0, "miss");
    close(s.cpu_hours, (5.0 + 2.0) / 3600.0, "cpu hours");
    // Both tasks: 5 s start-up + 1 s read + 1 s compute.
    close(s.avg_response_s, 7.0, "response");
    assert_eq!(s.provisioning, "dynamic");
}

#[test]
fn dynamic_node_kept_within_idle_timeout_serves_a_local_hit() {
    // As above, but with a 30 s idle timeout node 0 (joined at 5) is still there at 20: task 1
    // runs at once, local read 20..20.1, compute 20.1..21.1. Allocated 5..21.1 = 16.1 s.
    let s = summary(dynamic_scenario(30.0));
    close(s.makespan_s, 21.1, "makespan");
    assert_eq!(s.nodes_acquired, 1);
    close(s.hit_local, 0.5, "hit_local");
    close(s.cpu_hours, 16.1 / 3600.0, "cpu hours");
    // Responses: 7 s and 1.1 s.
    close(s.avg_response_s, 4.05, "response");
}

#[test]
fn dynamic_all_at_once_counts_slot_seconds() {
    // 4 tasks at 0, nodes of 2 slots (at most 4), start-up 5 s. All-at-once asks for
    // ceil(4 / 2) = 2 nodes at 0; both join at 5 and take two tasks each. Four storage reads
    // share 100 B/s: 25 B/s each, 5..9; compute 9..10.
    // CPU: 2 nodes x 2 slots x (10 - 5) s = 20 slot-seconds.
    let tb = Testbed {
        node_startup_s: 5.0,
        ..testbed(4, 2)
    };
    let arrivals = (0..4).map(|i| at(0.0, &[(i, 100)], 1.0)).collect();
    let (s, samples) = run(SimConfig {
        dynamic: dynamic(StepPolicy::AllAtOnce, 30.0),
        ..config(tb, arrivals, 1000)
    });
    // Sample i is closed at i + 1 s, after the flows that complete at that instant: no node
    // and no busy slot in the first four samples, all four reads requested in sample 5 (5..6).
    for x in &samples[..4] {
        assert_eq!(
            (x.nodes, x.busy_slots, x.queue),
            (0, 0, 4),
            "second {}",
            x.t
        );
    }
    assert_eq!(samples[5].accesses, [0, 0, 4]);
    assert_eq!((samples[5].nodes, samples[5].busy_slots), (2, 4));
    // A transfer's bytes are spread over the seconds it was in flight: the four reads move
    // 100 B/s together from 5 s to 9 s, so samples 5..=8 get 100 B each (storage's capacity).
    for (i, x) in samples.iter().enumerate() {
        let want = if (5..=8).contains(&i) { 100.0 } else { 0.0 };
        close(
            x.bytes_storage,
            want,
            &format!("storage bytes of second {i}"),
        );
    }
    // So the peak throughput (p99 of the per-second samples) is storage's 100 B/s.
    close(s.throughput_peak_gbps, 100.0 * 8.0 / 1e9, "peak throughput");
    close(s.makespan_s, 10.0, "makespan: nothing starts before 5 s");
    assert_eq!(s.nodes_acquired, 2);
    close(s.cpu_hours, 20.0 / 3600.0, "cpu hours");
    close(s.model.measured_r_storage_s, 4.0, "read time");
    assert_eq!(s.peak_queue, 4);
}

#[test]
fn dynamic_one_at_a_time_adds_a_node_per_check() {
    // 2 tasks at 0 (each 100 B from storage + 1 s), nodes of 1 slot, start-up 5 s.
    // Check at 0: 2 queued, nothing covers them: ask for 1 (joins at 5).
    // Check at 1: 2 queued, 1 slot pending: ask for 1 more (joins at 6).
    // Task 0 on node 0: read 5..6 alone (100 B/s), compute 6..7.
    // Task 1 on node 1 at 6: read 6..7 alone, compute 7..8.
    // CPU: node 0 from 5 to 8, node 1 from 6 to 8 = 5 slot-seconds.
    let tb = Testbed {
        node_startup_s: 5.0,
        ..testbed(4, 1)
    };
    let arrivals = (0..2).map(|i| at(0.0, &[(i, 100)], 1.0)).collect();
    let s = summary(SimConfig {
        dynamic: dynamic(StepPolicy::OneAtATime, 30.0),
        ..config(tb, arrivals, 1000)
    });
    close(s.makespan_s, 8.0, "makespan");
    assert_eq!(s.nodes_acquired, 2);
    close(s.cpu_hours, 5.0 / 3600.0, "cpu hours");
    close(s.avg_response_s, 7.5, "response");
}

// ----- cache hand-off on release -----

/// Up to 3 nodes of one slot, up at once, 3 s idle timeout, all-at-once steps. At 0: task 0
/// reads o0 and computes 10 s, task 1 reads o1 and computes 1 s; at 8: task 2 reads o1.
fn handoff_scenario(handoff: Option<HandoffConfig>) -> SimConfig {
    let arrivals = vec![
        at(0.0, &[(0, 100)], 10.0),
        at(0.0, &[(1, 100)], 1.0),
        at(8.0, &[(1, 100)], 1.0),
    ];
    SimConfig {
        dynamic: dynamic(StepPolicy::AllAtOnce, 3.0),
        core: CoreConfig {
            handoff,
            ..CoreConfig::default()
        },
        ..config(testbed(3, 1), arrivals, 1000)
    }
}

fn handoff(budget: u64, time_bound_s: f64) -> Option<HandoffConfig> {
    Some(HandoffConfig {
        budget,
        time_bound: Duration::from_secs_f64(time_bound_s),
    })
}

#[test]
fn without_handoff_a_released_nodes_object_is_read_from_storage_again() {
    // Two nodes join at 0; tasks 0 and 1 share storage (50 B/s each) 0..2. Task 1 computes
    // 2..3 on node 1, which idles from 3 and goes at the check at 6 (6 slot-seconds), o1 with
    // it. Task 2 at 8: node 0 is busy until 12, so node 2 joins at 8 and reads o1 from storage
    // 8..9, computes 9..10. Nodes 0 and 2 count to the end (12): 12 + 4 slot-seconds.
    let s = summary(handoff_scenario(None));
    close(s.makespan_s, 12.0, "makespan");
    assert_eq!((s.bytes_storage, s.bytes_peer), (300, 0));
    close(s.cpu_hours, (6.0 + 12.0 + 4.0) / 3600.0, "cpu hours");
    assert_eq!(s.handoff, HandoffReport::default());
}

#[test]
fn a_released_node_pushes_its_only_copy_and_is_billed_until_the_push_ends() {
    // As above, but at 6 node 1 pushes o1 (its only copy) to node 0, busy with room: NIC to
    // NIC at 1000 B/s, 6..6.1; node 1 is billed to 6.1. Task 2 on node 2 reads o1 from node 0,
    // a peer, 8..8.1.
    let s = summary(handoff_scenario(handoff(1000, 10.0)));
    close(s.makespan_s, 12.0, "makespan");
    assert_eq!((s.bytes_storage, s.bytes_peer), (200, 100));
    close(s.hit_peer, 1.0 / 3.0, "task 2's read is a peer hit");
    close(s.cpu_hours, (6.1 + 12.0 + 4.0) / 3600.0, "cpu hours");
    let h = s.handoff;
    assert_eq!(
        (
            h.releases,
            h.planned,
            h.planned_bytes,
            h.pushed,
            h.pushed_bytes
        ),
        (1, 1, 100, 1, 100)
    );
    assert_eq!((h.cut, h.lost, h.useful), (0, 0, 1));
    close(h.cpu_hours, 0.1 / 3600.0, "hand-off slot-seconds");
}

#[test]
fn a_push_beyond_the_time_bound_is_cut_off() {
    // The bound is 0.05 s: the push (0.1 s) is cut at 6.05, node 1 is billed to then, and
    // task 2 reads o1 from storage as without hand-off.
    let s = summary(handoff_scenario(handoff(1000, 0.05)));
    assert_eq!((s.bytes_storage, s.bytes_peer), (300, 0));
    close(s.cpu_hours, (6.05 + 12.0 + 4.0) / 3600.0, "cpu hours");
    let h = s.handoff;
    assert_eq!((h.planned, h.pushed, h.cut, h.useful), (1, 0, 1, 0));
}

#[test]
fn a_budget_smaller_than_the_object_pushes_nothing() {
    let s = summary(handoff_scenario(handoff(99, 10.0)));
    assert_eq!((s.bytes_storage, s.handoff.planned), (300, 0));
    close(s.cpu_hours, (6.0 + 12.0 + 4.0) / 3600.0, "cpu hours");
}

// ----- determinism, many-task runs, unequal storage shares: in hand_computed/ -----

#[path = "hand_computed/many_tasks.rs"]
mod many_tasks;
