//! The simulator: drives the scheduling core in virtual time over a cluster model.
//!
//! Events (arrivals, dispatch deliveries, transfer starts, compute completions, node start-ups,
//! per-second samples) sit in a time-ordered queue; transfers are fluid flows in a network
//! whose completions are computed from current rates. Each step jumps to the earliest of the
//! next event, the next flow completion and the core's timeout, feeds what happened to the core
//! and carries out the core's actions, exactly as the live dispatcher does.
//!
//! [`Simulation`] composes the owners below and carries out each event and action between them
//! and the core; each owner keeps its own state.
//!
//! | module | what it owns or decides |
//! |---|---|
//! | `config` | a simulation's settings ([`SimConfig`]), the core's config made of them, [`SimError`], [`TaskTrace`] |
//! | `events` | what is due when: the event queue |
//! | `network` | the network model: flows and the resources they cross (disks, NICs, racks, storage and its cap) |
//! | `nodes` | the allocated nodes: each one's cache, its ports, when it joined |
//! | `tasks` | the workload's tasks from arrival to completion, and each running attempt's inputs |
//! | `reads` | where an input is really read from, and the fetches other tasks wait for (single-flight) |
//! | `copies` | MixApart's prefetches and 2Mark's moves under way |
//! | `handoff` | cache hand-off on release: leaving nodes, pushes, pushed copies unread, its report |
//! | `tally` | what the run measures (bytes, accesses, samples, completions, CPU time) and the summary |

use crate::report::{Sample, Summary};
use diffuse_core::{
    Action, Admission, Core, Handoff, NodeCache, NodeId, ObjectId, Outcome, RackId, Source, TaskId,
    Time,
};
use std::time::Duration;

mod config;
mod copies;
mod events;
mod handoff;
mod network;
mod nodes;
mod reads;
mod tally;
mod tasks;

pub use config::{DynamicSettings, SimConfig, SimError, TaskTrace};

use crate::flows::Route;
use copies::{Copies, Move, Prefetch};
use diffuse_core::bandwidth::Endpoint;
use events::{Ev, Events};
use handoff::{Ended, Handoffs};
use network::{peer_path, Network, Tag};
use nodes::{Nodes, SimNode};
use reads::Fetches;
use tally::{Ends, Tally};
use tasks::{Tasks, Used};

/// The simulator state: the core, and the owners it composes.
pub struct Simulation {
    cfg: SimConfig,
    core: Core,
    now: Time,
    events: Events,
    tasks: Tasks,
    nodes: Nodes,
    net: Network,
    /// Fetches in progress to a node, with the tasks waiting for each.
    fetches: Fetches,
    copies: Copies,
    handoff: Handoffs,
    tally: Tally,
}

fn secs(t: Time) -> f64 {
    t.as_secs_f64()
}

/// The core refused an event at `now`: a simulator bug.
fn core_err(now: Time, e: impl ToString) -> SimError {
    SimError::Core {
        time: secs(now),
        message: e.to_string(),
    }
}

impl Simulation {
    /// Set up a simulation; static nodes join at time 0.
    pub fn new(cfg: SimConfig) -> Simulation {
        let core = Core::new(cfg.core_config());
        let net = Network::new(&cfg.testbed, cfg.core.storage_cap, cfg.seed);
        let tasks = Tasks::new(cfg.workload.arrivals(cfg.seed));
        let mut sim = Simulation {
            core,
            now: Time::ZERO,
            events: Events::default(),
            tasks,
            nodes: Nodes::default(),
            net,
            fetches: Fetches::default(),
            copies: Copies::default(),
            handoff: Handoffs::default(),
            tally: Tally::default(),
            cfg,
        };
        if sim.cfg.dynamic.is_none() {
            for _ in 0..sim.cfg.nodes {
                let id = sim.nodes.new_id();
                sim.events.push(Time::ZERO, Ev::NodeUp(id));
            }
        }
        if let Some(t) = sim.tasks.next_arrival() {
            sim.events.push(t, Ev::Arrival);
        }
        sim.events.push(Time::from_secs_f64(1.0), Ev::Sample);
        sim
    }

    fn done(&mut self) -> bool {
        let c = self.core.counts();
        self.tasks.all_arrived() && c.queued == 0 && c.running == 0 && c.blocked == 0
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
            let t_event = self.events.next_time();
            let t_flow = self.net.next_completion().map(Time::from_secs_f64);
            let t_core = self.core.poll_timeout();
            let useful = t_event.is_some() || t_flow.is_some();
            let next = [t_event, t_flow, t_core].into_iter().flatten().min();
            let (Some(next), true) = (next, useful) else {
                return Err(self.stalled());
            };
            if t_event.is_none()
                && t_flow.is_none()
                && self.core.counts().nodes == 0
                && self.core.counts().pending_nodes == 0
                && self.cfg.dynamic.is_none()
            {
                return Err(self.stalled());
            }
            self.step(next.max(self.now))?;
        }
        let end = self.tally.last_done();
        let slots = self.cfg.testbed.slots_per_node as f64;
        for n in self.nodes.iter() {
            self.tally.bill((end - n.joined).max(0.0) * slots);
        }
        // Released nodes still pushing when the last task ended are billed to the end, as the
        // others are.
        for billed in self.handoff.finish(end, slots) {
            self.tally.bill(billed);
        }
        self.tally.close_sample(&self.core.counts());
        let ends = Ends {
            prefetch: self.core.prefetch_stats(),
            two_mark: self.core.two_mark_stats(),
            handoff: self.handoff.report(),
        };
        let summary = self
            .tally
            .summary(&self.cfg, ends, wall.elapsed().as_secs_f64());
        let (samples, trace) = self.tally.into_series();
        Ok((summary, samples, trace))
    }

    fn stalled(&self) -> SimError {
        let c = self.core.counts();
        SimError::Stalled {
            time: secs(self.now),
            left: c.queued + c.running + c.blocked,
        }
    }

    /// Move time on to `now`: flows that completed, events due, the core's timeout, then the
    /// core's actions.
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
        while let Some(ev) = self.events.pop_due(now) {
            self.event(ev)?;
        }
        if self.core.poll_timeout().is_some_and(|d| d <= now) {
            self.core.handle_timeout(now);
        }
        while let Some(action) = self.core.poll_action(now) {
            self.action(action);
        }
        self.tally.stepped(&self.core.counts());
        if self.cfg.check_invariants {
            let invariant = |message| SimError::Invariant { time: t, message };
            self.core.check_invariants().map_err(invariant)?;
            self.nodes.check(self.core.index()).map_err(invariant)?;
        }
        Ok(())
    }

    fn event(&mut self, ev: Ev) -> Result<(), SimError> {
        match ev {
            Ev::Arrival => self.arrivals()?,
            Ev::Deliver(task) => self.deliver(task)?,
            Ev::FlowStart(task, i) => self.start_input(task, i),
            Ev::ComputeDone(task) => self.compute_done(task)?,
            Ev::NodeUp(node) => self.node_up(node)?,
            Ev::Sample => {
                self.tally.close_sample(&self.core.counts());
                if !self.done() {
                    self.events
                        .push(self.now + Duration::from_secs(1), Ev::Sample);
                }
            }
            Ev::PushStart(id) => self.push_start(id),
            Ev::HandoffDeadline(node) => self.handoff_deadline(node),
            Ev::PrefetchStart(id) => self.prefetch_start(id),
            Ev::MoveStart(id) => self.move_start(id),
        }
        Ok(())
    }

    fn action(&mut self, action: Action) {
        match action {
            // Never asked for: the simulator's core keeps one copy (`tmp_replicas` 1).
            Action::Replicate { .. } => debug_assert!(false, "replicas are not simulated"),
            Action::Abandon { task, .. } => self.tasks.abandon(task),
            Action::DropObject { object, nodes } => {
                for node in nodes {
                    if let Some(n) = self.nodes.get_mut(node) {
                        n.cache.remove(object);
                    }
                }
            }
            Action::Dispatch(d) => {
                self.tasks.dispatched(&d);
                let at = self.now + Duration::from_secs_f64(self.cfg.testbed.dispatch_latency_s);
                self.events.push(at, Ev::Deliver(d.task));
            }
            Action::Provision { nodes } => {
                let at = self.now + Duration::from_secs_f64(self.cfg.testbed.node_startup_s);
                for _ in 0..nodes {
                    let id = self.nodes.new_id();
                    self.events.push(at, Ev::NodeUp(id));
                }
            }
            Action::Release { node, handoff } => self.release(node, handoff),
            Action::Prefetch { object, size, node } => self.prefetch(object, size, node),
            Action::Evict { node, object } => {
                if let Some(n) = self.nodes.get_mut(node) {
                    n.cache.remove(object);
                }
                self.handoff.forget(node, object);
            }
            Action::Move {
                object,
                size,
                from,
                to,
            } => self.move_copy(object, size, from, to),
            // The simulator holds no task ready (its `ready_tasks` is 0): nothing to take back.
            Action::Withdraw { .. } => {}
        }
    }

    // ----- tasks -----

    /// The arrivals due now are submitted to the core, and the next one scheduled.
    fn arrivals(&mut self) -> Result<(), SimError> {
        while let Some((id, a)) = self.tasks.take_due(self.now) {
            self.tally.arrived(&a);
            let Some(spec) = self.tasks.spec(id, &a) else {
                continue;
            };
            self.tally.submitted(&a);
            self.core
                .handle_submit(spec, self.now)
                .map_err(|e| core_err(self.now, e))?;
            self.tasks.submitted(id, a);
        }
        if let Some(next) = self.tasks.next_arrival() {
            self.events.push(next, Ev::Arrival);
        }
        Ok(())
    }

    /// `task`'s inputs are all in: its program runs for its compute time.
    fn compute(&mut self, task: TaskId) {
        let compute = self.tasks.running(task).compute_s;
        self.events.push(
            self.now + Duration::from_secs_f64(compute),
            Ev::ComputeDone(task),
        );
    }

    /// `task`'s program ended: what it wrote is cached on its node, the core told, the
    /// completion counted.
    fn compute_done(&mut self, task: TaskId) -> Result<(), SimError> {
        let t = secs(self.now);
        let r = self.tasks.take_running(task);
        // What it wrote is on its node before it reports (as a worker does), kept at the
        // highest eviction priority: evicted only when nothing else is left (a worker pins it
        // outright, and fails a producer whose output does not fit).
        let produces = if r.produces {
            self.tasks.arrival(task).produces.clone()
        } else {
            Vec::new()
        };
        for (object, size) in produces {
            self.core.handle_intermediate_size(object, size);
            let n = self.nodes.get_mut(r.node).expect("node of a running task");
            let admitted = n.cache.insert_at(object, size, i16::MAX);
            self.report_admission(r.node, object, admitted, false)?;
        }
        self.core
            .handle_task_finished(task, r.attempt, Outcome::Succeeded, self.now)
            .map_err(|e| core_err(self.now, e))?;
        if let Some(a) = self.tasks.succeeded(task) {
            self.tally.succeeded(task, &a, &r, t, self.cfg.trace);
        }
        Ok(())
    }

    // ----- nodes -----

    /// A provisioned node is up: its disk, NICs and cache, told to the core with its rack and
    /// the objects placed on its disk beforehand.
    fn node_up(&mut self, node: NodeId) -> Result<(), SimError> {
        let ports = self.net.attach(node);
        let rack = ports.rack();
        // Under 2Mark the core decides every eviction: the node's cache never evicts.
        let quota = if self.cfg.core.two_mark {
            u64::MAX
        } else {
            self.cfg.cache_size
        };
        let n = SimNode {
            cache: NodeCache::new(self.cfg.eviction, quota, self.cfg.seed ^ node.0 as u64),
            ports,
            joined: secs(self.now),
        };
        self.nodes.join(node, n);
        self.tally.node_acquired();
        let now = self.now;
        self.core
            .handle_node_joined(node, self.cfg.testbed.slots_per_node, now)
            .map_err(|e| core_err(now, e))?;
        self.core
            .handle_node_cache(node, self.cfg.cache_size, self.cfg.eviction, now)
            .map_err(|e| core_err(now, e))?;
        if let Some(r) = rack {
            self.core
                .handle_node_rack(node, RackId(r))
                .map_err(|e| core_err(now, e))?;
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
            let n = self.nodes.get_mut(node).expect("joined");
            let admitted = n.cache.insert(object, size);
            self.report_admission(node, object, admitted, false)?;
        }
        Ok(())
    }

    /// `node`'s cache took `object` as `admitted` says: what it evicted, then the new copy, are
    /// told to the core. Whether it was stored. With `forget_unread`, hand-off's unread copies
    /// among the evicted are forgotten (as task reads and prefetches always did; a producer's
    /// output, placed objects and 2Mark moves do not).
    fn report_admission(
        &mut self,
        node: NodeId,
        object: ObjectId,
        admitted: Admission,
        forget_unread: bool,
    ) -> Result<bool, SimError> {
        let Admission::Stored(evicted) = admitted else {
            return Ok(false);
        };
        let now = self.now;
        for o in evicted {
            if forget_unread {
                self.handoff.forget(node, o);
            }
            self.core
                .handle_object_evicted(node, o, now)
                .map_err(|e| core_err(now, e))?;
        }
        self.core
            .handle_object_cached(node, object, now)
            .map_err(|e| core_err(now, e))?;
        Ok(true)
    }

    // ----- reads -----

    /// The dispatch reached its node: decide where each input really comes from and start
    /// reading.
    fn deliver(&mut self, task: TaskId) -> Result<(), SimError> {
        let t = secs(self.now);
        let caching = self.core.caches_for(task);
        let mut r = self.tasks.take_running(task);
        r.delivered = t;
        r.caching = caching;
        let node = r.node;
        let mut starts = Vec::new();
        let mut joined = 0;
        for (i, (object, _size, src)) in r.inputs.iter().enumerate() {
            let object = *object;
            // Single-flight: an object this node is already fetching is waited for, not fetched
            // again (the core sends such tasks here on purpose, as `Source::Local`).
            if caching
                && !self.nodes.node(node).cache.contains(object)
                && self.fetches.join(node, object, task, i as u32)
            {
                self.tally.access(Used::Local);
                r.plan.push((Route::default(), Used::Local));
                r.requested.push(t);
                joined += 1;
                continue;
            }
            let (resources, used, latency) = reads::route(
                src,
                object,
                node,
                caching,
                &self.nodes,
                &self.net,
                &self.cfg.testbed,
            );
            match (used, src) {
                (Used::Local, _) => self.handoff.read(node, object),
                (Used::Peer, Source::Peer(p)) => self.handoff.read(*p, object),
                _ => {}
            }
            if used == Used::Local {
                let here = self.nodes.get_mut(node).expect("node");
                here.cache.touch(object);
            } else if caching {
                self.fetches.started(node, object);
            }
            self.tally.access(used);
            r.plan.push((resources, used));
            r.requested.push(t);
            starts.push((i as u32, latency));
        }
        r.pending = starts.len() as u32 + joined;
        let ready = starts.is_empty() && joined == 0;
        if ready {
            r.staged = t;
        }
        self.tasks.resume(task, r);
        if ready {
            self.compute(task);
        }
        for (i, latency) in starts {
            if latency > 0.0 {
                self.events.push(
                    self.now + Duration::from_secs_f64(latency),
                    Ev::FlowStart(task, i),
                );
            } else {
                self.start_input(task, i);
            }
        }
        Ok(())
    }

    /// Input `i` of `task` starts moving over the resources chosen at delivery.
    fn start_input(&mut self, task: TaskId, i: u32) {
        let r = self.tasks.running(task);
        let (resources, used) = r.plan[i as usize];
        let size = r.inputs[i as usize].1;
        let weight = match used {
            Used::Storage => self.net.storage_weight(),
            _ => 1.0,
        };
        self.net.start_weighted(
            secs(self.now),
            size,
            &resources,
            weight,
            Tag::Input(task, i),
        );
    }

    /// One input of `task` has been read: the predictor learns the rate, the copy is cached,
    /// tasks waiting for this fetch have it too.
    fn input_done(&mut self, task: TaskId, i: usize, bytes: u64) -> Result<(), SimError> {
        let now = secs(self.now);
        let r = self.tasks.running_mut(task);
        let caching = r.caching;
        let (object, size, planned) = r.inputs[i];
        let (used, node, requested) = (r.plan[i].1, r.node, r.requested[i]);
        r.pending -= 1;
        let ready = r.pending == 0;
        // The predictor learns the rate, as from a live worker's transfer report.
        let from = match (used, planned) {
            (Used::Peer, Source::Peer(p)) => Some(Endpoint::Node(p)),
            (Used::Storage, _) => Some(Endpoint::Storage),
            _ => None,
        };
        if let Some(from) = from {
            self.core
                .handle_transfer(from, node, bytes, now - requested);
        }
        self.tally.read(used, bytes, requested, now);
        if used != Used::Local && caching {
            let n = self.nodes.get_mut(node).expect("node of a running task");
            let admitted = n.cache.insert(object, size);
            self.report_admission(node, object, admitted, true)?;
        }
        if ready {
            self.tasks.running_mut(task).staged = now;
            self.compute(task);
        }
        if used != Used::Local {
            for (waiter, j) in self.fetches.done(node, object) {
                self.joined_fetch_done(waiter, j as usize);
            }
        }
        Ok(())
    }

    /// A task that waited for its node's fetch of an input (single-flight) has that input.
    fn joined_fetch_done(&mut self, task: TaskId, i: usize) {
        let t = secs(self.now);
        let r = self.tasks.running_mut(task);
        let (size, requested) = (r.inputs[i].1, r.requested[i]);
        r.pending -= 1;
        let ready = r.pending == 0;
        if ready {
            r.staged = t;
        }
        self.tally.joined_read(size, requested, t);
        if ready {
            self.compute(task);
        }
    }

    // ----- hand-off -----

    /// `node` is released: with hand-off, it stays allocated, serving only its pushes, until
    /// they end or the time bound is up; without, its billing ends now.
    fn release(&mut self, node: NodeId, handoff: Vec<Handoff>) {
        let Some(n) = self.nodes.remove(node) else {
            return;
        };
        self.handoff.forget_node(node);
        let now = secs(self.now);
        if handoff.is_empty() {
            let slots = self.cfg.testbed.slots_per_node as f64;
            self.tally.bill((now - n.joined) * slots);
            return;
        }
        let bound = self
            .cfg
            .core
            .handoff
            .as_ref()
            .map_or(Duration::ZERO, |h| h.time_bound);
        let start = self.now + Duration::from_secs_f64(self.cfg.testbed.peer_latency_s);
        for id in self.handoff.begin(node, n, handoff, now) {
            self.events.push(start, Ev::PushStart(id));
        }
        self.events
            .push(self.now + bound, Ev::HandoffDeadline(node));
    }

    /// A push's start: a flow from the leaving node to its target, or lost if either is gone.
    fn push_start(&mut self, id: u64) {
        let Some((from, h)) = self.handoff.push(id) else {
            return;
        };
        match (self.handoff.leaving(from), self.nodes.get(h.to)) {
            (Some(l), Some(target)) => {
                let path = peer_path(&l.ports, &target.ports);
                self.net.start(secs(self.now), h.size, &path, Tag::Push(id));
            }
            _ => self.push_ended(id, Ended::Lost),
        }
    }

    /// The time bound of `node`'s hand-off: what is still moving is cut, and pushes still
    /// waiting for their start go too.
    fn handoff_deadline(&mut self, node: NodeId) {
        if self.handoff.leaving(node).is_none() {
            return;
        }
        let ids = self.handoff.pushes_from(node);
        self.net
            .cancel(|tag| matches!(tag, Tag::Push(id) if ids.binary_search(id).is_ok()));
        for id in ids {
            self.push_ended(id, Ended::Cut);
        }
    }

    /// A push's transfer completed: the target caches the object if it still has room for it
    /// without evicting anything, and tells the core.
    fn push_done(&mut self, id: u64) -> Result<(), SimError> {
        let Some((_, h)) = self.handoff.push(id) else {
            return Ok(());
        };
        let mut ended = Ended::Lost;
        if let Some(target) = self.nodes.get_mut(h.to) {
            let c = &mut target.cache;
            if !c.contains(h.object) && c.used() + h.size <= c.quota() {
                let admitted = c.insert(h.object, h.size);
                debug_assert_eq!(admitted, Admission::Stored(Vec::new()));
                self.core
                    .handle_object_cached(h.to, h.object, self.now)
                    .map_err(|e| core_err(self.now, e))?;
                self.handoff.pushed(h.to, h.object);
                ended = Ended::Cached;
            } else if c.contains(h.object) {
                // The target fetched it meanwhile: nothing lost.
                ended = Ended::Cached;
            }
        }
        self.push_ended(id, ended);
        Ok(())
    }

    /// A push ended; the last one of a released node ends its billing.
    fn push_ended(&mut self, id: u64, how: Ended) {
        let slots = self.cfg.testbed.slots_per_node as f64;
        if let Some(billed) = self.handoff.ended(id, how, secs(self.now), slots) {
            self.tally.bill(billed);
        }
    }

    // ----- prefetches and moves -----

    /// The core asks for `object` (`size` bytes) to be copied from storage to `node`.
    fn prefetch(&mut self, object: ObjectId, size: u64, node: NodeId) {
        if !self.nodes.contains(node) {
            self.core.handle_prefetch_failed(node, object, self.now);
            return;
        }
        // Tasks the core sends to `node` for `object` meanwhile wait for this copy.
        self.fetches.prefetch_started(node, object);
        let id = self.copies.prefetch(Prefetch { node, object, size });
        let at = self.now + Duration::from_secs_f64(self.cfg.testbed.storage_latency_s);
        self.events.push(at, Ev::PrefetchStart(id));
    }

    fn prefetch_start(&mut self, id: u64) {
        let Some(p) = self.copies.prefetching(id) else {
            return;
        };
        let Some(n) = self.nodes.get(p.node) else {
            self.copies.prefetch_ended(id);
            return;
        };
        let path = self.net.storage_path(&n.ports);
        let weight = self.net.storage_weight();
        self.net
            .start_weighted(secs(self.now), p.size, &path, weight, Tag::Prefetch(id));
    }

    /// A prefetch landed: cache it on its node (reporting evictions), report it, and hand it to
    /// the tasks waiting for it there.
    fn prefetch_done(&mut self, id: u64, bytes: u64) -> Result<(), SimError> {
        let Some(p) = self.copies.prefetch_ended(id) else {
            return Ok(());
        };
        self.tally.prefetched(bytes);
        let Some(n) = self.nodes.get_mut(p.node) else {
            return Ok(());
        };
        let admitted = n.cache.insert(p.object, p.size);
        if !self.report_admission(p.node, p.object, admitted, true)? {
            self.core.handle_prefetch_failed(p.node, p.object, self.now);
        }
        for (waiter, j) in self.fetches.done(p.node, p.object) {
            self.joined_fetch_done(waiter, j as usize);
        }
        Ok(())
    }

    /// 2Mark moves `object` from `from` to `to`: `from` gives its copy up now (the bytes are in
    /// the pipe), `to` caches it when the flow ends.
    fn move_copy(&mut self, object: ObjectId, size: u64, from: NodeId, to: NodeId) {
        let held = self
            .nodes
            .get_mut(from)
            .is_some_and(|n| n.cache.remove(object).is_some());
        self.handoff.forget(from, object);
        if !held {
            return;
        }
        let id = self.copies.move_copy(Move {
            object,
            size,
            from,
            to,
        });
        let at = self.now + Duration::from_secs_f64(self.cfg.testbed.peer_latency_s);
        self.events.push(at, Ev::MoveStart(id));
    }

    fn move_start(&mut self, id: u64) {
        let Some(m) = self.copies.moving(id) else {
            return;
        };
        match (self.nodes.get(m.from), self.nodes.get(m.to)) {
            (Some(f), Some(d)) => {
                let path = peer_path(&f.ports, &d.ports);
                self.net.start(secs(self.now), m.size, &path, Tag::Move(id));
            }
            _ => {
                self.copies.move_ended(id);
            }
        }
    }

    fn move_done(&mut self, id: u64) -> Result<(), SimError> {
        let Some(m) = self.copies.move_ended(id) else {
            return Ok(());
        };
        let Some(n) = self.nodes.get_mut(m.to) else {
            return Ok(());
        };
        let admitted = n.cache.insert(m.object, m.size);
        self.report_admission(m.to, m.object, admitted, false)?;
        Ok(())
    }
}

/// Run a simulation to completion.
pub fn simulate(cfg: SimConfig) -> Result<(Summary, Vec<Sample>), SimError> {
    Simulation::new(cfg).run()
}
