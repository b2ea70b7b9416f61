//! The simulator: drives the scheduling core in virtual time over a cluster model.
//!
//! Events (arrivals, dispatch deliveries, transfer starts, compute completions, node start-ups,
//! per-second samples) sit in a time-ordered heap; transfers are fluid flows in a [`FlowNet`]
//! whose completions are computed from current rates. Each step jumps to the earliest of the
//! next event, the next flow completion and the core's timeout, feeds what happened to the core
//! and carries out the core's actions, exactly as the live dispatcher does.

use crate::flows::{FlowNet, ResourceId};
use crate::report::{percentile, HandoffReport, ModelReport, Sample, Summary};
use crate::testbed::Testbed;
use crate::workload::{Arrival, Workload};
use diffuse_core::model::{predict, ModelInput};
use diffuse_core::{
    Action, Admission, Core, CoreConfig, DadConfig, DynamicConfig, EvictionPolicy, Handoff,
    HandoffConfig, Input, JobId, JobOrder, NodeCache, NodeId, ObjectId, Outcome, PolicyKind,
    PrefetchConfig, Provisioning, Resources, Source, StepPolicy, TaskId, TaskSpec, Time,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustc_hash::{FxHashMap, FxHashSet};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;
use thiserror::Error;

mod handoff;
mod reads;
mod transfers;

/// Settings of one simulation.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The workload.
    pub workload: Workload,
    /// The cluster model.
    pub testbed: Testbed,
    /// Dispatch policy.
    pub policy: PolicyKind,
    /// GCC utilisation threshold.
    pub threshold: f64,
    /// Scheduling window.
    pub window: usize,
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
    /// Most concurrent peer reads a node serves (0: no limit); see `CoreConfig::peer_read_limit`.
    pub peer_read_limit: u32,
    /// Cache hand-off on release (dynamic provisioning only; None: a released node's cache is
    /// lost, as in the paper). Pushes are peer transfers from the released node, which stays
    /// allocated (and billed) until they end or the time bound cuts them off.
    pub handoff: Option<HandoffConfig>,
    /// Run `Core::check_invariants` after every step (slow; for tests).
    pub check_invariants: bool,
    /// DAD's parameters (the `dad` policy).
    pub dad: DadConfig,
    /// Objects already on nodes' disks when they start, as `(node index, object, bytes)`:
    /// files a distributed file system keeps on its compute nodes (Gfarm in the DAD paper).
    /// They are cached entries of those nodes, known to the core.
    pub placed: Vec<(u32, ObjectId, u64)>,
    /// How jobs share the slots (FIFO or Fair).
    pub job_order: JobOrder,
    /// Bytes per second that all reads from persistent storage may take together (None: only
    /// the storage's own bandwidth bounds them). Modelled as one more resource every storage
    /// read crosses.
    pub storage_cap: Option<f64>,
    /// MixApart's transfer scheduler (None: no prefetching), within `storage_cap`.
    pub prefetch: Option<PrefetchConfig>,
    /// 2Mark decides what every node evicts (`CoreConfig::two_mark`); the nodes' caches then
    /// never evict on their own.
    pub two_mark: bool,
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
    /// Defaults for a workload on a testbed: GCC, threshold 0.9, window 2500, LRU, all nodes.
    pub fn new(workload: Workload, testbed: Testbed, cache_size: u64) -> SimConfig {
        SimConfig {
            workload,
            nodes: testbed.nodes,
            testbed,
            policy: PolicyKind::Gcc,
            threshold: 0.9,
            window: 2500,
            cache_size,
            eviction: EvictionPolicy::Lru,
            dynamic: None,
            seed: 1,
            peer_read_limit: CoreConfig::default().peer_read_limit,
            handoff: None,
            check_invariants: false,
            dad: DadConfig::default(),
            placed: Vec::new(),
            job_order: JobOrder::Fifo,
            storage_cap: None,
            prefetch: None,
            two_mark: false,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrival,
    Deliver(TaskId),
    FlowStart(TaskId, u32),
    ComputeDone(TaskId),
    NodeUp(NodeId),
    Sample,
    /// A hand-off push starts moving (after the peer latency).
    PushStart(u64),
    /// A released node's time bound for its pushes is up.
    HandoffDeadline(NodeId),
    /// A prefetch starts moving (after the storage latency).
    PrefetchStart(u64),
    /// A 2Mark move starts (after the peer latency).
    MoveStart(u64),
}

/// What a flow in the network carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tag {
    /// Input `i` of a task's current attempt.
    Input(TaskId, u32),
    /// A hand-off push.
    Push(u64),
    /// A prefetch from storage.
    Prefetch(u64),
    /// A 2Mark move between nodes.
    Move(u64),
}

/// A hand-off push from a released node.
struct Push {
    from: NodeId,
    handoff: Handoff,
}

/// How a push ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    /// The target holds the object.
    Cached,
    /// The time bound was up.
    Cut,
    /// The target was released, or had no room left.
    Lost,
}

/// A released node still pushing its hand-off.
struct Leaving {
    node: SimNode,
    /// Pushes not yet ended.
    pushes: u32,
    /// When the core released it, seconds.
    released: f64,
}

/// Source actually used for an access (the planned one may have vanished in between).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Used {
    Local,
    Peer,
    Storage,
}

struct SimNode {
    cache: NodeCache,
    disk: ResourceId,
    nic_in: ResourceId,
    nic_out: ResourceId,
    joined: f64,
    /// Its rack's uplink (up, down), if racks are modelled.
    uplink: Option<(ResourceId, ResourceId)>,
    /// Its rack, if the testbed has racks.
    rack: Option<u32>,
}

struct Running {
    node: NodeId,
    attempt: u32,
    /// Per input: object, size, source planned by the core.
    inputs: Vec<(ObjectId, u64, Source)>,
    /// Per input: resources and source used, decided at delivery.
    plan: Vec<(Vec<ResourceId>, Used)>,
    /// Per input: when its read was requested (latency included in the access time).
    requested: Vec<f64>,
    pending: u32,
    delivered: f64,
    /// When its last input was in (its program starts).
    staged: f64,
}

/// The simulator state.
pub struct Simulation {
    cfg: SimConfig,
    core: Core,
    now: Time,
    heap: BinaryHeap<Reverse<(Time, u64, Ev)>>,
    seq: u64,
    arrivals: std::iter::Peekable<Box<dyn Iterator<Item = Arrival> + Send>>,
    /// Queued and running tasks: arrival record.
    waiting: FxHashMap<TaskId, Arrival>,
    /// Finished tasks that wrote intermediate objects: kept, the core may run them again.
    kept: FxHashMap<TaskId, Arrival>,
    /// Tasks the core abandoned (a dependency failed or an input was lost for good).
    abandoned: FxHashSet<TaskId>,
    running: FxHashMap<TaskId, Running>,
    nodes: FxHashMap<NodeId, SimNode>,
    net: FlowNet<Tag>,
    /// Fetches in progress to a node, with the (task, input) pairs waiting for each.
    inflight: FxHashMap<(NodeId, ObjectId), Vec<(TaskId, u32)>>,
    storage: ResourceId,
    /// The cap on storage reads, if any: a resource every storage read crosses.
    storage_cap: Option<ResourceId>,
    /// Each rack's uplink (up, down).
    uplinks: FxHashMap<u32, (ResourceId, ResourceId)>,
    /// Prefetches: (node, object, bytes), by id.
    prefetches: FxHashMap<u64, (NodeId, ObjectId, u64)>,
    next_prefetch: u64,
    /// 2Mark's moves: (object, bytes, from, to), by id.
    moves: FxHashMap<u64, (ObjectId, u64, NodeId, NodeId)>,
    bytes_prefetched: u64,
    /// Per job: tasks finished, first arrival, last completion.
    jobs: std::collections::BTreeMap<u32, crate::report::JobSummary>,
    next_task: u64,
    next_node: u32,
    /// Released nodes whose hand-off pushes are under way.
    leaving: FxHashMap<NodeId, Leaving>,
    pushes: FxHashMap<u64, Push>,
    next_push: u64,
    /// Copies hand-off made that nobody has read yet: (node, object).
    pushed_unread: FxHashSet<(NodeId, ObjectId)>,
    handoff: HandoffReport,
    // metrics
    samples: Vec<Sample>,
    current: Sample,
    bytes: [u64; 3],
    accesses: [u64; 3],
    /// Sum of access times (request to last byte) by source, seconds.
    access_time: [f64; 3],
    finished: u64,
    response_sum: f64,
    exec_sum: f64,
    last_done: f64,
    peak_queue: u64,
    cpu_seconds: f64,
    nodes_acquired: u64,
    /// Tasks as they ran, if `cfg.trace`.
    trace: Vec<TaskTrace>,
    /// Draws storage reads' weights (`Testbed::storage_share_spread`).
    shares: ChaCha8Rng,
}

fn secs(t: Time) -> f64 {
    t.as_secs_f64()
}

impl Simulation {
    /// Set up a simulation; static nodes join at time 0.
    pub fn new(cfg: SimConfig) -> Simulation {
        let provisioning = match &cfg.dynamic {
            None => Provisioning::Static,
            Some(d) => Provisioning::Dynamic(DynamicConfig {
                step: d.step,
                min_nodes: d.min_nodes,
                max_nodes: cfg.nodes,
                slots_per_node: cfg.testbed.slots_per_node,
                idle_timeout: Duration::from_secs_f64(d.idle_timeout_s),
                check_interval: Duration::from_secs_f64(d.check_interval_s),
            }),
        };
        let core = Core::new(CoreConfig {
            policy: cfg.policy,
            threshold: cfg.threshold,
            window: cfg.window,
            provisioning,
            crash_limit: 3,
            peer_read_limit: cfg.peer_read_limit,
            handoff: cfg.handoff.clone(),
            dad: cfg.dad,
            job_order: cfg.job_order,
            // Replicas ahead of time are not modelled (docs/simulation.md, "Not modelled").
            tmp_replicas: 1,
            storage_cap: cfg.storage_cap,
            prefetch: cfg.prefetch,
            two_mark: cfg.two_mark,
            bandwidth: Default::default(),
        });
        let mut net = FlowNet::new();
        let storage = net.add_resource(cfg.testbed.storage_bw);
        let storage_cap = cfg.storage_cap.map(|c| net.add_resource(c));
        let arrivals = cfg.workload.arrivals(cfg.seed).peekable();
        let mut sim = Simulation {
            core,
            now: Time::ZERO,
            heap: BinaryHeap::new(),
            seq: 0,
            arrivals,
            waiting: FxHashMap::default(),
            kept: FxHashMap::default(),
            abandoned: FxHashSet::default(),
            running: FxHashMap::default(),
            nodes: FxHashMap::default(),
            net,
            inflight: FxHashMap::default(),
            storage,
            storage_cap,
            uplinks: FxHashMap::default(),
            prefetches: FxHashMap::default(),
            next_prefetch: 0,
            moves: FxHashMap::default(),
            bytes_prefetched: 0,
            jobs: Default::default(),
            next_task: 0,
            next_node: 0,
            leaving: FxHashMap::default(),
            pushes: FxHashMap::default(),
            next_push: 0,
            pushed_unread: FxHashSet::default(),
            handoff: HandoffReport::default(),
            samples: Vec::new(),
            current: Sample::default(),
            bytes: [0; 3],
            accesses: [0; 3],
            access_time: [0.0; 3],
            finished: 0,
            response_sum: 0.0,
            exec_sum: 0.0,
            last_done: 0.0,
            peak_queue: 0,
            cpu_seconds: 0.0,
            nodes_acquired: 0,
            trace: Vec::new(),
            // Apart from the workload's draws, so a spread changes no file choice.
            shares: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5eed_5ba2e),
            cfg,
        };
        if sim.cfg.dynamic.is_none() {
            for _ in 0..sim.cfg.nodes {
                let id = sim.new_node_id();
                sim.push(Time::ZERO, Ev::NodeUp(id));
            }
        }
        if let Some(a) = sim.arrivals.peek() {
            let t = Time::from_secs_f64(a.time);
            sim.push(t, Ev::Arrival);
        }
        sim.push(Time::from_secs_f64(1.0), Ev::Sample);
        sim
    }

    /// The weight of a storage read starting now (1 unless the testbed spreads shares).
    fn storage_weight(&mut self) -> f64 {
        let tb = &self.cfg.testbed;
        if tb.storage_share_spread == 0.0 {
            return 1.0;
        }
        tb.storage_weight(self.shares.random())
    }

    fn new_node_id(&mut self) -> NodeId {
        self.next_node += 1;
        NodeId(self.next_node - 1)
    }

    fn push(&mut self, t: Time, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, ev)));
    }

    fn done(&mut self) -> bool {
        let c = self.core.counts();
        self.arrivals.peek().is_none() && c.queued == 0 && c.running == 0 && c.blocked == 0
    }

    /// Run to completion and summarise.
    pub fn run(self) -> Result<(Summary, Vec<Sample>), SimError> {
        self.run_traced()
            .map(|(summary, samples, _)| (summary, samples))
    }

    /// Run to completion: the summary, the time series, and the tasks as they ran (empty
    /// unless `SimConfig::trace`), in order of completion.
    pub fn run_traced(mut self) -> Result<(Summary, Vec<Sample>, Vec<TaskTrace>), SimError> {
        let wall = std::time::Instant::now();
        while !self.done() {
            let t_event = self.heap.peek().map(|Reverse((t, _, _))| *t);
            let t_flow = self.net.next_completion().map(Time::from_secs_f64);
            let t_core = self.core.poll_timeout();
            let useful = t_event.is_some() || t_flow.is_some();
            let next = [t_event, t_flow, t_core].into_iter().flatten().min();
            let (Some(next), true) = (next, useful) else {
                return Err(SimError::Stalled {
                    time: secs(self.now),
                    left: self.unfinished(),
                });
            };
            if t_event.is_none()
                && t_flow.is_none()
                && self.core.counts().nodes == 0
                && self.core.counts().pending_nodes == 0
                && self.cfg.dynamic.is_none()
            {
                return Err(SimError::Stalled {
                    time: secs(self.now),
                    left: self.unfinished(),
                });
            }
            self.step(next.max(self.now))?;
        }
        let end = self.last_done;
        let slots = self.cfg.testbed.slots_per_node as f64;
        for n in self.nodes.values() {
            self.cpu_seconds += (end - n.joined).max(0.0) * slots;
        }
        // Released nodes still pushing when the last task ended are billed to the end, as the
        // others are.
        for l in std::mem::take(&mut self.leaving).into_values() {
            self.cpu_seconds += (end - l.node.joined).max(0.0) * slots;
            self.handoff.cpu_hours += (end - l.released).max(0.0) * slots / 3600.0;
        }
        self.close_sample();
        let summary = self.summarise(wall.elapsed().as_secs_f64());
        Ok((summary, self.samples, self.trace))
    }

    fn unfinished(&self) -> u64 {
        let c = self.core.counts();
        c.queued + c.running + c.blocked
    }

    /// The arrival record of a queued, running or kept task.
    fn arrival(&self, task: TaskId) -> &Arrival {
        self.waiting
            .get(&task)
            .or_else(|| self.kept.get(&task))
            .expect("arrival record")
    }

    fn step(&mut self, now: Time) -> Result<(), SimError> {
        self.now = now;
        let t = secs(now);
        for flow in self.net.advance(t) {
            match flow.tag {
                Tag::Input(task, i) => self.input_done(task, i as usize, flow.bytes)?,
                Tag::Push(id) => self.push_done(id)?,
                Tag::Prefetch(id) => self.prefetch_done(id, flow.bytes)?,
                Tag::Move(id) => self.move_done(id)?,
            }
        }
        while let Some(Reverse((when, _, ev))) = self.heap.peek().copied() {
            if when > now {
                break;
            }
            self.heap.pop();
            self.event(ev)?;
        }
        if self.core.poll_timeout().is_some_and(|d| d <= now) {
            self.core.handle_timeout(now);
        }
        while let Some(action) = self.core.poll_action(now) {
            self.action(action);
        }
        self.peak_queue = self.peak_queue.max(self.core.counts().queued);
        if self.cfg.check_invariants {
            self.core
                .check_invariants()
                .map_err(|message| SimError::Invariant { time: t, message })?;
            self.check_nodes(t)?;
        }
        Ok(())
    }

    fn check_nodes(&self, t: f64) -> Result<(), SimError> {
        for (id, n) in &self.nodes {
            if n.cache.used() > n.cache.quota() {
                return Err(SimError::Invariant {
                    time: t,
                    message: format!("{id} cache over quota"),
                });
            }
            let index = self.core.index();
            if index.count(*id) != n.cache.len() || n.cache.objects().any(|o| !index.holds(*id, o))
            {
                return Err(SimError::Invariant {
                    time: t,
                    message: format!("{id}: index differs from cache"),
                });
            }
        }
        Ok(())
    }

    fn core_err(&self, e: impl ToString) -> SimError {
        SimError::Core {
            time: secs(self.now),
            message: e.to_string(),
        }
    }

    fn event(&mut self, ev: Ev) -> Result<(), SimError> {
        let t = secs(self.now);
        match ev {
            Ev::Arrival => {
                while self
                    .arrivals
                    .peek()
                    .is_some_and(|a| Time::from_secs_f64(a.time) <= self.now)
                {
                    let a = self.arrivals.next().expect("peeked");
                    let id = TaskId(self.next_task);
                    self.next_task += 1;
                    let inputs = a
                        .inputs
                        .iter()
                        .map(|(o, s)| Input {
                            object: *o,
                            size: *s,
                        })
                        .collect();
                    self.current.demand_bytes +=
                        a.inputs.iter().map(|(_, s)| *s as f64).sum::<f64>();
                    // An earlier task that is neither waiting nor kept has ended: it succeeded,
                    // unless the core abandoned it, which abandons this one too.
                    if a.after.iter().any(|x| self.abandoned.contains(&TaskId(*x))) {
                        self.abandoned.insert(id);
                        continue;
                    }
                    let after = a
                        .after
                        .iter()
                        .map(|x| TaskId(*x))
                        .filter(|x| self.waiting.contains_key(x) || self.kept.contains_key(x))
                        .collect();
                    let job = self.jobs.entry(a.job).or_insert(crate::report::JobSummary {
                        job: a.job,
                        first_arrival_s: a.time,
                        ..Default::default()
                    });
                    job.first_arrival_s = job.first_arrival_s.min(a.time);
                    let spec = TaskSpec::new(id, inputs)
                        .with_job(JobId(a.job))
                        .with_priority(a.priority)
                        .with_resources(Resources {
                            cores: a.cores,
                            ..Resources::ONE_CORE
                        })
                        .with_after(after)
                        .with_produces(a.produces.iter().map(|(o, _)| *o).collect());
                    self.core
                        .handle_submit(spec, self.now)
                        .map_err(|e| self.core_err(e))?;
                    self.waiting.insert(id, a);
                }
                if let Some(a) = self.arrivals.peek() {
                    let next = Time::from_secs_f64(a.time);
                    self.push(next, Ev::Arrival);
                }
            }
            Ev::Deliver(task) => self.deliver(task)?,
            Ev::FlowStart(task, i) => {
                let r = &self.running[&task];
                let (resources, _) = &r.plan[i as usize];
                let size = r.inputs[i as usize].1;
                let resources = resources.clone();
                let weight = match r.plan[i as usize].1 {
                    Used::Storage => self.storage_weight(),
                    _ => 1.0,
                };
                self.net
                    .start_weighted(t, size, &resources, weight, Tag::Input(task, i));
            }
            Ev::ComputeDone(task) => {
                let r = self.running.remove(&task).expect("running task");
                // What it wrote is on its node before it reports (as a worker does), kept at
                // the highest eviction priority: evicted only when nothing else is left (a
                // worker pins it outright, and fails a producer whose output does not fit).
                for (object, size) in self.arrival(task).produces.clone() {
                    self.core.handle_intermediate_size(object, size);
                    let n = self.nodes.get_mut(&r.node).expect("node of a running task");
                    if let Admission::Stored(evicted) = n.cache.insert_at(object, size, i16::MAX) {
                        for o in evicted {
                            self.core
                                .handle_object_evicted(r.node, o, self.now)
                                .map_err(|e| self.core_err(e))?;
                        }
                        self.core
                            .handle_object_cached(r.node, object, self.now)
                            .map_err(|e| self.core_err(e))?;
                    }
                }
                self.core
                    .handle_task_finished(task, r.attempt, Outcome::Succeeded, self.now)
                    .map_err(|e| self.core_err(e))?;
                let Some(a) = self.waiting.remove(&task) else {
                    // A kept producer ran again to remake what it wrote: not a new completion.
                    return Ok(());
                };
                if !a.produces.is_empty() {
                    self.kept.insert(task, a.clone());
                }
                self.finished += 1;
                if let Some(j) = self.jobs.get_mut(&a.job) {
                    j.tasks += 1;
                    j.last_done_s = t;
                    j.duration_s = t - j.first_arrival_s;
                }
                self.response_sum += t - a.time;
                self.exec_sum += t - r.delivered;
                self.last_done = t;
                if self.cfg.trace {
                    let count = |u: Used| r.plan.iter().filter(|p| p.1 == u).count() as u32;
                    self.trace.push(TaskTrace {
                        task: task.0,
                        node: r.node.0,
                        started_s: r.delivered,
                        staged_s: r.staged,
                        finished_s: t,
                        local: count(Used::Local),
                        peer: count(Used::Peer),
                        storage: count(Used::Storage),
                    });
                }
            }
            Ev::NodeUp(node) => {
                let tb = &self.cfg.testbed;
                let (disk_bw, nic_bw) = (tb.disk_bw, tb.nic_bw);
                let rack = (tb.rack_size > 0).then(|| node.0 / tb.rack_size);
                let uplink = rack.and_then(|r| self.uplink(r));
                // Under 2Mark the core decides every eviction: the node's cache never evicts.
                let quota = if self.cfg.two_mark {
                    u64::MAX
                } else {
                    self.cfg.cache_size
                };
                let n = SimNode {
                    cache: NodeCache::new(self.cfg.eviction, quota, self.cfg.seed ^ node.0 as u64),
                    disk: self.net.add_resource(disk_bw),
                    nic_in: self.net.add_resource(nic_bw),
                    nic_out: self.net.add_resource(nic_bw),
                    joined: t,
                    uplink,
                    rack,
                };
                self.nodes.insert(node, n);
                self.nodes_acquired += 1;
                self.core
                    .handle_node_joined(node, self.cfg.testbed.slots_per_node, self.now)
                    .map_err(|e| self.core_err(e))?;
                self.core
                    .handle_node_cache(node, self.cfg.cache_size, self.cfg.eviction, self.now)
                    .map_err(|e| self.core_err(e))?;
                if let Some(r) = rack {
                    self.core
                        .handle_node_rack(node, diffuse_core::RackId(r))
                        .map_err(|e| self.core_err(e))?;
                }
                let placed: Vec<(ObjectId, u64)> = self
                    .cfg
                    .placed
                    .iter()
                    .filter(|(i, _, _)| *i == node.0)
                    .map(|(_, o, s)| (*o, *s))
                    .collect();
                for (object, size) in placed {
                    self.core.handle_object_size(object, size);
                    let n = self.nodes.get_mut(&node).expect("joined");
                    if let Admission::Stored(evicted) = n.cache.insert(object, size) {
                        for o in evicted {
                            self.core
                                .handle_object_evicted(node, o, self.now)
                                .map_err(|e| self.core_err(e))?;
                        }
                        self.core
                            .handle_object_cached(node, object, self.now)
                            .map_err(|e| self.core_err(e))?;
                    }
                }
            }
            Ev::Sample => {
                self.close_sample();
                if !self.done() {
                    self.push(self.now + Duration::from_secs(1), Ev::Sample);
                }
            }
            Ev::PushStart(id) => self.push_start(id, t),
            Ev::HandoffDeadline(node) => self.handoff_deadline(node),
            Ev::PrefetchStart(id) => self.prefetch_start(id, t),
            Ev::MoveStart(id) => self.move_start(id, t),
        }
        Ok(())
    }

    fn close_sample(&mut self) {
        let c = self.core.counts();
        let mut s = std::mem::take(&mut self.current);
        s.t = self.samples.len() as f64;
        s.queue = c.queued;
        s.nodes = c.nodes;
        s.busy_slots = c.busy_slots;
        self.samples.push(s);
    }

    fn action(&mut self, action: Action) {
        match action {
            // Never asked for: the simulator's core keeps one copy (`tmp_replicas` 1).
            Action::Replicate { .. } => debug_assert!(false, "replicas are not simulated"),
            Action::Abandon { task, .. } => {
                self.waiting.remove(&task);
                self.abandoned.insert(task);
            }
            Action::DropObject { object, nodes } => {
                for node in nodes {
                    if let Some(n) = self.nodes.get_mut(&node) {
                        n.cache.remove(object);
                    }
                }
            }
            Action::Dispatch(d) => {
                let a = self.arrival(d.task);
                let inputs = d
                    .inputs
                    .iter()
                    .map(|(o, src)| {
                        let size = a.inputs.iter().find(|(x, _)| x == o).map_or(0, |(_, s)| *s);
                        (*o, size, *src)
                    })
                    .collect();
                self.running.insert(
                    d.task,
                    Running {
                        node: d.node,
                        attempt: d.attempt,
                        inputs,
                        plan: Vec::new(),
                        requested: Vec::new(),
                        pending: 0,
                        delivered: 0.0,
                        staged: 0.0,
                    },
                );
                let at = self.now + Duration::from_secs_f64(self.cfg.testbed.dispatch_latency_s);
                self.push(at, Ev::Deliver(d.task));
            }
            Action::Provision { nodes } => {
                let at = self.now + Duration::from_secs_f64(self.cfg.testbed.node_startup_s);
                for _ in 0..nodes {
                    let id = self.new_node_id();
                    self.push(at, Ev::NodeUp(id));
                }
            }
            Action::Release { node, handoff } => self.release(node, handoff),
            Action::Prefetch { object, size, node } => self.prefetch(object, size, node),
            Action::Evict { node, object } => {
                if let Some(n) = self.nodes.get_mut(&node) {
                    n.cache.remove(object);
                }
                self.pushed_unread.remove(&(node, object));
            }
            Action::Move {
                object,
                size,
                from,
                to,
            } => self.move_copy(object, size, from, to),
        }
    }

    fn summarise(&self, wall: f64) -> Summary {
        let cfg = &self.cfg;
        let tb = &cfg.testbed;
        let info = cfg.workload.info();
        let slots = cfg.nodes as f64 * tb.slots_per_node as f64;
        let per_slot_disk = tb.disk_bw / tb.slots_per_node as f64;
        // Best case: every access a local read at the node's full disk rate (a lower bound,
        // since a read never goes faster than the disk).
        let best_task = info.compute_s + info.bytes_per_task / tb.disk_bw;
        let ideal = (info.last_arrival_s + best_task).max(info.tasks as f64 * best_task / slots);
        let makespan = self.last_done;
        let total_acc = self.accesses.iter().sum::<u64>().max(1) as f64;
        let frac = |k: usize| self.accesses[k] as f64 / total_acc;
        let total_bytes: u64 = self.bytes.iter().sum();
        let per_sec: Vec<f64> = self
            .samples
            .iter()
            .map(|s| (s.bytes_local + s.bytes_peer + s.bytes_storage) * 8.0 / 1e9)
            .collect();
        let access_bytes = info.bytes_per_task / info.inputs_per_task.max(1.0);
        let r_storage = access_bytes / tb.nic_bw.min(tb.storage_bw / slots);
        let input = ModelInput {
            r_local: access_bytes / per_slot_disk,
            r_peer: access_bytes / tb.nic_bw,
            r_storage,
            compute: info.compute_s,
            hr_local: frac(0),
            hr_peer: frac(1),
            hr_storage: frac(2),
            accesses_per_task: info.inputs_per_task,
            tasks: info.tasks,
            processors: slots as u64,
            cache_bytes: cfg.cache_size * cfg.nodes as u64,
            working_set_bytes: info.dataset_bytes,
            arrival_rate: if info.last_arrival_s > 0.0 {
                info.tasks as f64 / info.last_arrival_s
            } else {
                0.0
            },
        };
        Summary {
            workload: info.name,
            policy: cfg.policy.to_string(),
            testbed: tb.name.to_string(),
            cache_size: cfg.cache_size,
            eviction: if cfg.two_mark {
                "2mark".into()
            } else {
                cfg.eviction.to_string()
            },
            provisioning: if cfg.dynamic.is_some() {
                "dynamic"
            } else {
                "static"
            }
            .into(),
            nodes: cfg.nodes,
            window: cfg.window,
            threshold: cfg.threshold,
            seed: cfg.seed,
            tasks: self.finished,
            makespan_s: makespan,
            ideal_makespan_s: ideal,
            efficiency: if makespan > 0.0 {
                ideal / makespan
            } else {
                0.0
            },
            hit_local: frac(0),
            hit_peer: frac(1),
            miss: frac(2),
            avg_response_s: self.response_sum / self.finished.max(1) as f64,
            peak_queue: self.peak_queue,
            cpu_hours: self.cpu_seconds / 3600.0,
            throughput_avg_gbps: if makespan > 0.0 {
                total_bytes as f64 * 8.0 / 1e9 / makespan
            } else {
                0.0
            },
            throughput_peak_gbps: percentile(&per_sec, 99.0),
            bytes_local: self.bytes[0],
            bytes_peer: self.bytes[1],
            bytes_storage: self.bytes[2],
            bytes_prefetched: self.bytes_prefetched,
            prefetch: self.core.prefetch_stats(),
            jobs: self.jobs.values().cloned().collect(),
            two_mark: self.core.two_mark_stats(),
            nodes_acquired: self.nodes_acquired,
            handoff: self.handoff,
            model: ModelReport {
                input,
                predicted: predict(&input),
                measured_task_time_s: self.exec_sum / self.finished.max(1) as f64,
                measured_r_local_s: self.access_time[0] / self.accesses[0].max(1) as f64,
                measured_r_peer_s: self.access_time[1] / self.accesses[1].max(1) as f64,
                measured_r_storage_s: self.access_time[2] / self.accesses[2].max(1) as f64,
            },
            sim_wall_s: wall,
        }
    }
}

/// Run a simulation to completion.
pub fn simulate(cfg: SimConfig) -> Result<(Summary, Vec<Sample>), SimError> {
    Simulation::new(cfg).run()
}
