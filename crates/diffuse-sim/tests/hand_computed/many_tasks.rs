//! Hand-computed runs, continued: determinism, many-task runs checked for exactly-once
//! completion under every policy, single-flight fetches, pipelines, and unequal storage shares.
//! (Moved from `hand_computed.rs` to keep each file under 1,000 lines; same helpers, same
//! assertions.)

use super::*;

// ----- determinism and many-task runs -----

/// A deterministic pseudo-random stream (SplitMix64), so the tests do not depend on `rand`.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// An MI-like workload: `tasks` tasks over `files` 10 MB files, arrival rate rising from 1/s by
/// x1.5 every 3 s (capped at 100/s), spread evenly within each second; files skewed towards low
/// ids; every fifth task reads a second file (partial locality).
fn mi_like(tasks: usize, files: u64, seed: u64) -> Vec<Arrival> {
    const MB10: u64 = 10_000_000;
    let mut rng = Mix(seed);
    let mut out = Vec::with_capacity(tasks);
    let mut rate = 1.0f64;
    let mut sec = 0u64;
    while out.len() < tasks {
        if sec > 0 && sec.is_multiple_of(3) {
            rate = (rate * 1.5).ceil().min(100.0);
        }
        let a = rate as u64;
        for k in 0..a {
            if out.len() == tasks {
                break;
            }
            let time = sec as f64 + k as f64 / a as f64;
            let file = rng.below(files).min(rng.below(files));
            let mut inputs = vec![(ObjectId(file), MB10)];
            if out.len() % 5 == 4 {
                inputs.push((ObjectId(rng.below(files)), MB10));
            }
            out.push(Arrival {
                time,
                inputs,
                compute_s: 0.01 + rng.below(10) as f64 * 0.01,
                cores: 1,
                produces: Vec::new(),
                after: Vec::new(),
                job: 0,
                priority: 0,
            });
        }
        sec += 1;
    }
    out
}

/// A scaled-down TeraGrid: 4 nodes of 2 slots, 1.6 Gb/s storage (20 files of 10 MB per
/// second), 1 Gb/s NICs, 2 Gb/s disks, 2 s start-up.
fn small_teragrid() -> Testbed {
    Testbed {
        name: "small".into(),
        cache_bytes: None,
        nodes: 4,
        slots_per_node: 2,
        storage_bw: 0.2e9,
        storage_latency_s: 0.001,
        nic_bw: 125e6,
        disk_bw: 250e6,
        peer_latency_s: 0.001,
        dispatch_latency_s: 0.002,
        node_startup_s: 2.0,
        rack_size: 0,
        rack_uplink_bw: 0.0,
        storage_share_spread: 0.0,
    }
}

#[test]
fn same_config_and_seed_give_the_same_summary() {
    let cfg = SimConfig {
        eviction: EvictionPolicy::Random,
        dynamic: dynamic(StepPolicy::Exponential, 2.0),
        seed: 7,
        ..config(small_teragrid(), mi_like(300, 40, 1), 30_000_000)
    };
    let (mut a, sa) = run(cfg.clone());
    let (mut b, sb) = run(cfg);
    a.sim_wall_s = 0.0;
    b.sim_wall_s = 0.0;
    assert_eq!(a, b);
    assert_eq!(sa, sb);
}

#[test]
fn many_tasks_with_handoff_under_every_eviction_policy_finish_exactly_once() {
    // Short idle timeouts release nodes all along; every release hands off within 40 MB and
    // 0.5 s. `run` checks every task finishes once and every input is read once; the simulator
    // checks the core's invariants (its cache model included) and every cache against the
    // index at every step. Same config, same summary.
    // Bursts of 40 tasks every 10 s, and in between one task every 0.5 s: after a burst the
    // pool shrinks to the nodes the trickle keeps busy, which receive the others' objects.
    const MB10: u64 = 10_000_000;
    let mut rng = Mix(5);
    let mut arrivals = Vec::new();
    for burst in 0..8 {
        let start = burst as f64 * 10.0;
        for k in 0..40 {
            arrivals.push(at(start + k as f64 * 0.01, &[(rng.below(30), MB10)], 0.05));
        }
        for k in 2..20 {
            arrivals.push(at(start + k as f64 * 0.5, &[(rng.below(30), MB10)], 0.05));
        }
    }
    for eviction in [
        EvictionPolicy::Lru,
        EvictionPolicy::Fifo,
        EvictionPolicy::Lfu,
        EvictionPolicy::Random,
    ] {
        let cfg = SimConfig {
            eviction,
            dynamic: dynamic(StepPolicy::Exponential, 1.0),
            core: CoreConfig {
                handoff: handoff(40_000_000, 0.5),
                ..CoreConfig::default()
            },
            ..config(small_teragrid(), arrivals.clone(), 200_000_000)
        };
        let (mut a, _) = run(cfg.clone());
        let (mut b, _) = run(cfg);
        let h = a.handoff;
        assert!(h.releases > 0 && h.pushed > 0, "{eviction}: {h:?}");
        assert_eq!(h.planned, h.pushed + h.cut + h.lost, "{eviction}: {h:?}");
        assert!(h.useful <= h.pushed, "{eviction}");
        a.sim_wall_s = 0.0;
        b.sim_wall_s = 0.0;
        assert_eq!(a, b, "{eviction}: deterministic");
    }
}

#[test]
fn many_tasks_with_every_policy_finish_exactly_once() {
    let arrivals = mi_like(400, 30, 3);
    let evictions = [
        EvictionPolicy::Lru,
        EvictionPolicy::Fifo,
        EvictionPolicy::Lfu,
        EvictionPolicy::Random,
    ];
    let mut static_makespan = Vec::new();
    for (i, policy) in [
        PolicyKind::Fa,
        PolicyKind::Mcu,
        PolicyKind::Mch,
        PolicyKind::Gcc,
    ]
    .into_iter()
    .enumerate()
    {
        for dynamic_on in [false, true] {
            let cfg = SimConfig {
                core: CoreConfig {
                    policy,
                    window: 50,
                    ..CoreConfig::default()
                },
                eviction: evictions[i],
                dynamic: if dynamic_on {
                    dynamic(StepPolicy::Exponential, 3.0)
                } else {
                    None
                },
                // A 30 MB cache holds 3 files: evictions happen all along.
                ..config(small_teragrid(), arrivals.clone(), 30_000_000)
            };
            // `run` checks tasks == 400, each input read once, samples add up; the simulator
            // checked the core's invariants and every cache against the index at every step.
            let (s, _) = run(cfg);
            let what = format!("{policy} dynamic={dynamic_on}");
            assert!(s.makespan_s >= s.ideal_makespan_s - EPS, "{what}: {s:?}");
            assert!(s.efficiency > 0.0 && s.efficiency <= 1.0 + EPS, "{what}");
            if policy == PolicyKind::Fa {
                close(s.miss, 1.0, &what);
            } else {
                assert!(
                    s.hit_local + s.hit_peer > 0.0,
                    "{what}: no cache hit at all"
                );
            }
            if dynamic_on {
                assert!(s.nodes_acquired >= 1, "{what}");
            } else {
                assert_eq!(s.nodes_acquired, 4, "{what}");
                static_makespan.push((policy, s.makespan_s));
            }
        }
    }
    // Storage (20 files/s) cannot keep up with the arrivals at the end, so FA, which reads
    // everything from storage, is clearly the slowest (about 36 s against 29 s).
    let (_, fa) = static_makespan[0];
    for &(policy, m) in &static_makespan[1..] {
        assert!(m < fa, "{policy} took {m} s, FA {fa} s");
    }
}

#[test]
fn peer_read_limit_settings_all_complete() {
    // 0 (no limit), 1 and the default 4 over 10 popular files: every task still finishes once
    // (checked by `run`), whatever mix of peer and storage reads the limit leads to.
    let arrivals = mi_like(300, 10, 5);
    for limit in [0, 1, 4] {
        let (s, _) = run(SimConfig {
            core: CoreConfig {
                peer_read_limit: limit,
                policy: PolicyKind::Mcu,
                ..CoreConfig::default()
            },
            ..config(small_teragrid(), arrivals.clone(), 30_000_000)
        });
        assert!(s.hit_local + s.hit_peer > 0.0, "limit {limit}");
    }
}

#[test]
fn a_node_fetches_an_object_once_for_concurrent_tasks() {
    // One node, 2 slots; two tasks read the same 100-byte object at time 0. The core sends t0
    // to storage and t1 to the same node as Local (the object is in transfer there); the node
    // waits for its one fetch (100 B at 100 B/s, 0..1 s) instead of reading it twice, which at
    // 50 B/s each would end both reads at 2 s. Both compute 1 s: makespan 2 s.
    let arrivals = vec![at(0.0, &[(0, 100)], 1.0), at(0.0, &[(0, 100)], 1.0)];
    let s = summary(config(testbed(1, 2), arrivals, 1000));
    close(s.makespan_s, 2.0, "makespan");
    assert_eq!(s.bytes_storage, 100, "one fetch from storage");
    close(s.miss, 0.5, "miss");
    close(s.hit_local, 0.5, "the second access joins the fetch");
}

#[test]
fn a_pipeline_reads_its_intermediate_object_from_nodes_never_from_storage() {
    // Task 0 computes 1 s and writes object 100 (500 B) on node 0. Tasks 1 and 2 read it: they
    // wait for task 0 (time 1), then read it locally on node 0 (500 B / 1000 B/s disk = 0.5 s)
    // and from node 0 as a peer on node 1 (0.5 s over the NICs), and compute 1 s: 2.5 s.
    // Storage is never read. Task 3 waits for task 1 by `after` alone, and runs 2.5..3.5.
    let producer = Arrival {
        produces: vec![(ObjectId(100), 500)],
        ..at(0.0, &[], 1.0)
    };
    let gated = Arrival {
        after: vec![1],
        ..at(0.0, &[], 1.0)
    };
    let s = summary(config(
        testbed(2, 1),
        vec![
            producer,
            at(0.0, &[(100, 500)], 1.0),
            at(0.0, &[(100, 500)], 1.0),
            gated,
        ],
        1000,
    ));
    assert_eq!(s.tasks, 4);
    assert_eq!(
        s.bytes_storage, 0,
        "an intermediate object is not on storage"
    );
    assert_eq!((s.bytes_local, s.bytes_peer), (500, 500));
    close(s.makespan_s, 3.5, "makespan");
}

#[test]
fn an_intermediate_object_outlasts_a_scan_through_its_nodes_cache() {
    // One node, one slot, a 1000 B cache. Task 0 writes object 100 (400 B) at 1 s. Tasks 1 and
    // 2 read objects 1 and 2 (400 B each) from storage, 4 s each plus 1 s of compute: 1..6,
    // 6..11. Caching object 2 at 10 s must evict one object: object 1, not the intermediate
    // (kept at the highest eviction priority), though LRU alone would pick object 100. Task 3
    // (after task 2) then reads object 100 locally (0.4 s) and computes: 11..12.4. Had the
    // intermediate been evicted, task 0 would have run again first and the run would end at 13.4.
    let producer = Arrival {
        produces: vec![(ObjectId(100), 400)],
        ..at(0.0, &[], 1.0)
    };
    let reader = Arrival {
        after: vec![2],
        ..at(0.0, &[(100, 400)], 1.0)
    };
    let s = summary(config(
        testbed(1, 1),
        vec![
            producer,
            at(0.0, &[(1, 400)], 1.0),
            at(0.0, &[(2, 400)], 1.0),
            reader,
        ],
        1000,
    ));
    assert_eq!(s.tasks, 4);
    assert_eq!((s.bytes_storage, s.bytes_local), (800, 400));
    close(s.makespan_s, 12.4, "makespan");
}

// ----- unequal storage shares -----

/// 4 one-slot nodes, FA: 48 tasks, each reading its own 100-byte object from storage and then
/// computing 0.5 s.
fn lockstep_workload(spread: f64, seed: u64) -> Summary {
    let mut tb = testbed(4, 1);
    tb.storage_share_spread = spread;
    let arrivals = (0..48).map(|k| at(0.0, &[(k, 100)], 0.5)).collect();
    let mut cfg = config(tb, arrivals, 10_000);
    cfg.core.policy = PolicyKind::Fa;
    cfg.seed = seed;
    run(cfg).0
}

#[test]
fn equal_shares_keep_identical_tasks_in_lockstep_and_a_spread_breaks_it() {
    // Equal shares: the four read together (4 x 100 B at 100 B/s: 4 s), then compute together
    // (0.5 s) while storage idles: 12 rounds of 4.5 s.
    let equal = lockstep_workload(0.0, 1);
    assert!(
        (equal.makespan_s - 54.0).abs() < EPS,
        "{}",
        equal.makespan_s
    );
    // Unequal shares: one read ends first, its node computes while the others still read, and
    // the nodes drift apart, so storage idles less. Storage alone needs 48 s (4,800 B at
    // 100 B/s), plus at least the last task's compute (less the flows' half-byte slack, 5 ms
    // a read at 100 B/s).
    for seed in [1, 2, 3] {
        let spread = lockstep_workload(0.3, seed);
        assert!(
            spread.makespan_s >= 48.5 - 0.01 && spread.makespan_s < 0.97 * equal.makespan_s,
            "seed {seed}: {} s against {} s in lockstep",
            spread.makespan_s,
            equal.makespan_s
        );
        // The same seed gives the same run.
        assert_eq!(lockstep_workload(0.3, seed).makespan_s, spread.makespan_s);
    }
}
