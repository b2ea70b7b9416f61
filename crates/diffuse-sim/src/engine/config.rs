//! A simulation's settings ([`SimConfig`], [`DynamicSettings`]) and the core's configuration
//! they make, what it records of each task ([`TaskTrace`]), and how it can fail ([`SimError`]).

use crate::testbed::Testbed;
use crate::workload::Workload;
use diffuse_core::{CoreConfig, DynamicConfig, EvictionPolicy, ObjectId, Provisioning, StepPolicy};
use std::time::Duration;
use thiserror::Error;

/// Settings of one simulation.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The workload.
    pub workload: Workload,
    /// The cluster model.
    pub testbed: Testbed,
    /// The scheduling core's settings, as the live dispatcher takes them: dispatch policy,
    /// window, GCC's threshold, DAD's parameters, job order, the peer-read limit, cache hand-off
    /// on release (dynamic provisioning only; pushes are peer transfers from the released node,
    /// which stays allocated until they end or the time bound cuts them off), the storage cap
    /// (one more resource every storage read crosses), MixApart's prefetch and 2Mark (the
    /// nodes' caches then never evict on their own). Its provisioning, crash limit, `tmp://`
    /// replicas and ready tasks are the simulation's own ([`SimConfig::core_config`]).
    pub core: CoreConfig,
    /// Cache quota per node, bytes.
    pub cache_size: u64,
    /// Eviction policy of every node.
    pub eviction: EvictionPolicy,
    /// Maximum nodes (static: all start at time 0).
    pub nodes: u32,
    /// Dynamic provisioning (None: static).
    pub dynamic: Option<DynamicSettings>,
    /// Seed for the workload's file choices and random eviction.
    pub seed: u64,
    /// Run `Core::check_invariants` after every step (slow; for tests).
    pub check_invariants: bool,
    /// Objects already on nodes' disks when they start, as `(node index, object, bytes)`:
    /// files a distributed file system keeps on its compute nodes (Gfarm in the DAD paper).
    /// They are cached entries of those nodes, known to the core.
    pub placed: Vec<(u32, ObjectId, u64)>,
    /// Keep a [`TaskTrace`] of every task that succeeds ([`Simulation::run_traced`]).
    pub trace: bool,
}

/// One task as it ran in the simulation: where, when, and where its inputs came from, as a
/// live task's report tells it (for comparing the two, `diffuse sim run --trace`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TaskTrace {
    /// Its position in the workload (a task file's line order), from 0.
    pub task: u64,
    /// The node it ran on, by order of joining from 0.
    pub node: u32,
    /// When its dispatch reached the node (its staging began), seconds.
    pub started_s: f64,
    /// When its inputs were all in and it started computing.
    pub staged_s: f64,
    /// When it ended.
    pub finished_s: f64,
    /// Inputs read from its node's cache (or a fetch already under way there).
    pub local: u32,
    /// Inputs read from a peer.
    pub peer: u32,
    /// Inputs read from storage.
    pub storage: u32,
}

/// Dynamic provisioning settings of a simulation.
#[derive(Clone, Debug)]
pub struct DynamicSettings {
    /// Allocation step policy.
    pub step: StepPolicy,
    /// Idle time after which a node is released, seconds.
    pub idle_timeout_s: f64,
    /// Nodes kept even when idle.
    pub min_nodes: u32,
    /// How often the core reviews the pool, seconds (1; the live dispatcher's is 0.5).
    pub check_interval_s: f64,
}

impl Default for DynamicSettings {
    fn default() -> Self {
        DynamicSettings {
            step: StepPolicy::Exponential,
            idle_timeout_s: 30.0,
            min_nodes: 0,
            check_interval_s: 1.0,
        }
    }
}

impl SimConfig {
    /// Defaults for a workload on a testbed: the core's defaults (GCC, threshold 0.9, window
    /// 2500), LRU, all nodes.
    pub fn new(workload: Workload, testbed: Testbed, cache_size: u64) -> SimConfig {
        SimConfig {
            workload,
            nodes: testbed.nodes,
            testbed,
            core: CoreConfig::default(),
            cache_size,
            eviction: EvictionPolicy::Lru,
            dynamic: None,
            seed: 1,
            check_invariants: false,
            placed: Vec::new(),
            trace: false,
        }
    }
}

/// A simulation that could not complete.
#[derive(Debug, Error)]
pub enum SimError {
    /// An invariant of the core broke (only with `check_invariants`).
    #[error("invariant broken at t={time:.3}s: {message}")]
    Invariant {
        /// Virtual time.
        time: f64,
        /// What broke.
        message: String,
    },
    /// The core refused an event the simulator fed it: a simulator bug.
    #[error("core refused an event at t={time:.3}s: {message}")]
    Core {
        /// Virtual time.
        time: f64,
        /// The core's error.
        message: String,
    },
    /// No more events, yet tasks remain (e.g. no nodes and static provisioning).
    #[error("simulation stalled at t={time:.3}s with {left} tasks unfinished")]
    Stalled {
        /// Virtual time.
        time: f64,
        /// Tasks not finished.
        left: u64,
    },
}

impl SimConfig {
    /// The scheduling core's configuration for this simulation.
    pub fn core_config(&self) -> CoreConfig {
        let provisioning = match &self.dynamic {
            None => Provisioning::Static,
            Some(d) => Provisioning::Dynamic(DynamicConfig {
                step: d.step,
                min_nodes: d.min_nodes,
                max_nodes: self.nodes,
                slots_per_node: self.testbed.slots_per_node,
                idle_timeout: Duration::from_secs_f64(d.idle_timeout_s),
                check_interval: Duration::from_secs_f64(d.check_interval_s),
            }),
        };
        CoreConfig {
            provisioning,
            crash_limit: 3,
            // Replicas ahead of time are not modelled (docs/simulation.md, "Not modelled").
            tmp_replicas: 1,
            bandwidth: Default::default(),
            // The simulator has no round trip between a task's end and the next dispatch, so
            // a task held ready would gain nothing (docs/simulation.md).
            ready_tasks: 0,
            ready_below_s: 1.0,
            ..self.core.clone()
        }
    }
}
