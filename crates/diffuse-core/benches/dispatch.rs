//! Core decisions per second: GCC (and MCU, FA, DAD, MixApart) at W = 2500, 100 nodes x 2
//! slots, 10,000 cached objects per node, 20,000 queued tasks each reading one random object.
//!
//! One iteration is one scheduling decision in steady state: a running task finishes (freeing a
//! slot), a new task is submitted (keeping the queue length constant), and `poll_action` returns
//! the dispatch for the free slot. Run: `cargo bench -p diffuse-core --bench dispatch`.
//!
//! The `_cached` rows also report every fetched input cached on its node, as a driver does, so
//! the index changes under them; they compare GCC with GCC under 2Mark (every node's cache full:
//! each fetch is a 2Mark request that evicts) and with MixApart's transfer scheduler planning
//! prefetches within a storage cap.

use criterion::{criterion_main, Criterion, Throughput};
use diffuse_core::{
    Action, Core, CoreConfig, Input, NodeId, ObjectId, Outcome, PolicyKind, Source, TaskId,
    TaskSpec, Time,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;

const NODES: u32 = 100;
const SLOTS: u32 = 2;
const OBJECTS_PER_NODE: u64 = 10_000;
const QUEUED: u64 = 20_000;
const SIZE: u64 = 10_000_000;

struct Bench {
    core: Core,
    rng: ChaCha8Rng,
    next: u64,
    running: VecDeque<(TaskId, u32)>,
    now: u64,
    /// Report fetched inputs cached, as a driver does.
    report: bool,
}

impl Bench {
    fn new(policy: PolicyKind) -> Bench {
        Bench::with(
            CoreConfig {
                policy,
                window: 2500,
                ..CoreConfig::default()
            },
            false,
        )
    }

    fn with(cfg: CoreConfig, report: bool) -> Bench {
        let mut core = Core::new(cfg);
        let t0 = Time::ZERO;
        for n in 0..NODES {
            core.handle_node_joined(NodeId(n), SLOTS, t0).unwrap();
            // Full: 10,000 objects of SIZE bytes.
            core.handle_node_cache(
                NodeId(n),
                OBJECTS_PER_NODE * SIZE,
                diffuse_core::EvictionPolicy::Lru,
                t0,
            )
            .unwrap();
            for k in 0..OBJECTS_PER_NODE {
                core.handle_object_size(ObjectId(n as u64 * OBJECTS_PER_NODE + k), SIZE);
            }
            for k in 0..OBJECTS_PER_NODE {
                core.handle_object_cached(NodeId(n), ObjectId(n as u64 * OBJECTS_PER_NODE + k), t0)
                    .unwrap();
            }
        }
        let mut b = Bench {
            core,
            rng: ChaCha8Rng::seed_from_u64(7),
            next: 0,
            running: VecDeque::new(),
            now: 0,
            report,
        };
        for _ in 0..QUEUED + (NODES * SLOTS) as u64 {
            b.submit();
        }
        b.drain();
        assert_eq!(b.running.len(), (NODES * SLOTS) as usize);
        b
    }

    fn submit(&mut self) {
        let object = ObjectId(self.rng.random_range(0..NODES as u64 * OBJECTS_PER_NODE));
        let spec = TaskSpec::new(TaskId(self.next), vec![Input { object, size: SIZE }]);
        self.next += 1;
        self.core.handle_submit(spec, Time(self.now)).unwrap();
    }

    fn drain(&mut self) {
        let mut fetched = Vec::new();
        while let Some(a) = self.core.poll_action(Time(self.now)) {
            match a {
                Action::Dispatch(d) => {
                    self.running.push_back((d.task, d.attempt));
                    fetched.extend(
                        d.inputs
                            .iter()
                            .filter(|(_, s)| *s != Source::Local)
                            .map(|(o, _)| (d.node, *o)),
                    );
                }
                Action::Prefetch { object, node, .. } => fetched.push((node, object)),
                Action::Move { object, to, .. } => fetched.push((to, object)),
                _ => {}
            }
        }
        if self.report {
            for (node, object) in fetched {
                self.core
                    .handle_object_cached(node, object, Time(self.now))
                    .unwrap();
            }
        }
    }

    /// One decision: finish the oldest running task, submit one, dispatch.
    fn step(&mut self) {
        self.now += 1_000;
        let (task, attempt) = self.running.pop_front().expect("a running task");
        self.core
            .handle_task_finished(task, attempt, Outcome::Succeeded, Time(self.now))
            .unwrap();
        self.submit();
        self.drain();
    }
}

fn decisions(c: &mut Criterion) {
    let mut group = c.benchmark_group("decision");
    group.throughput(Throughput::Elements(1));
    for policy in [
        PolicyKind::Gcc,
        PolicyKind::Mcu,
        PolicyKind::Fa,
        PolicyKind::Dad,
        PolicyKind::MixApart,
    ] {
        let mut b = Bench::new(policy);
        group.bench_function(format!("{policy}_w2500_100nodes_10k_objects"), |bench| {
            bench.iter(|| b.step())
        });
    }
    let cfg = CoreConfig {
        window: 2500,
        ..CoreConfig::default()
    };
    let variants = [
        ("gcc_cached", cfg.clone()),
        (
            "gcc_2mark_cached",
            CoreConfig {
                two_mark: true,
                ..cfg.clone()
            },
        ),
        (
            "mixapart_prefetch_cached",
            CoreConfig {
                policy: PolicyKind::MixApart,
                storage_cap: Some(1e9),
                prefetch: Some(diffuse_core::PrefetchConfig::default()),
                ..cfg.clone()
            },
        ),
    ];
    for (name, cfg) in variants {
        let mut b = Bench::with(cfg, true);
        group.bench_function(format!("{name}_w2500_100nodes_10k_objects"), |bench| {
            bench.iter(|| b.step())
        });
    }
    group.finish();
}

#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::decisions);
}
use group::benches;
criterion_main!(benches);
