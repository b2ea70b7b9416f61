//! Data transfers as fluid flows over shared resources (persistent storage, NICs, local disks).
//!
//! A flow crosses up to four resources. Each resource's capacity is split among the flows
//! crossing it in proportion to their weights (equally by default), and a flow moves at the
//! smallest share it gets on any of its resources ("weighted share at the bottleneck"). This
//! is not full max-min fairness: bandwidth a flow cannot use on one resource is not handed to
//! the others. Rates are recomputed whenever a flow starts or ends; with at most one flow per
//! slot and input, that is O(flows) per change (a flow of weight 1 reads each resource's share,
//! computed once per resource whose flows changed, with no division of its own).
//!
//! Weights model what equal shares miss: concurrent TCP readers of one server do not get equal
//! rates, and the spread keeps identical tasks from moving in lockstep (docs/simulation.md,
//! "Simulated and measured").

/// A resource's index in the network.
pub type ResourceId = u32;

/// Most resources one flow crosses: a peer read between racks crosses the holder's NIC, both
/// racks' uplinks and the reader's NIC; a storage read, storage, its cap, the reader's uplink
/// and NIC.
pub const MAX_PATH: usize = 4;

/// The resources one flow crosses, in order: at most [`MAX_PATH`], kept inline (no allocation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Route {
    ids: [ResourceId; MAX_PATH],
    len: u8,
}

impl Route {
    /// A route over `ids` (at most four).
    pub fn of(ids: &[ResourceId]) -> Route {
        let mut r = Route::default();
        for id in ids {
            r.push(*id);
        }
        r
    }

    /// `id` is crossed next.
    pub fn push(&mut self, id: ResourceId) {
        self.ids[self.len as usize] = id;
        self.len += 1;
    }
}

impl std::ops::Deref for Route {
    type Target = [ResourceId];

    fn deref(&self) -> &[ResourceId] {
        &self.ids[..self.len as usize]
    }
}

/// The drivers' clock resolution (`Time` counts nanoseconds), seconds.
const CLOCK_STEP_S: f64 = 1e-9;

#[derive(Clone, Debug)]
struct Resource {
    capacity: f64,
    flows: u32,
    /// Sum of the weights of the flows crossing it.
    weight: f64,
    /// A flow of weight 1's share, `capacity / weight`, as of the last recompute.
    unit: f64,
    /// Its flows changed since the last recompute (`unit` is stale).
    changed: bool,
}

/// A flow in progress.
#[derive(Clone, Debug)]
pub struct Flow<T> {
    /// What the driver wants back when the flow completes.
    pub tag: T,
    /// Total bytes of the flow.
    pub bytes: u64,
}

/// What a flow in progress is, apart from the two numbers every step reads.
#[derive(Clone, Debug)]
struct Crossing<T> {
    /// What the driver wants back when the flow completes.
    tag: T,
    resources: [ResourceId; MAX_PATH],
    used: usize,
    /// Its share of each resource is `weight / (sum of the weights there)`.
    weight: f64,
    /// Total bytes of the flow.
    bytes: u64,
}

/// All flows and resources. The flows in progress are kept as parallel lists, in the same
/// order (`remaining[i]`, `rate[i]` and `paths[i]` are one flow), so that moving time on and
/// finding the next completion read two dense lists of numbers.
#[derive(Clone, Debug, Default)]
pub struct FlowNet<T> {
    resources: Vec<Resource>,
    /// Bytes still to move, per flow.
    remaining: Vec<f64>,
    /// Bytes per second at the current allocation, per flow.
    rate: Vec<f64>,
    paths: Vec<Crossing<T>>,
    /// Resources whose flows changed since the last recompute.
    changed: Vec<ResourceId>,
    /// Time (seconds) at which `remaining` and `rate` were last brought up to date.
    now: f64,
    dirty: bool,
}

impl<T: Clone> FlowNet<T> {
    /// An empty network at time 0.
    pub fn new() -> Self {
        FlowNet {
            resources: Vec::new(),
            remaining: Vec::new(),
            rate: Vec::new(),
            paths: Vec::new(),
            changed: Vec::new(),
            now: 0.0,
            dirty: false,
        }
    }

    /// Add a resource of `capacity` bytes/s.
    pub fn add_resource(&mut self, capacity: f64) -> ResourceId {
        self.resources.push(Resource {
            capacity,
            flows: 0,
            weight: 0.0,
            unit: 0.0,
            changed: false,
        });
        self.resources.len() as ResourceId - 1
    }

    /// Flows in progress.
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// True if no flow is in progress.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Flows in progress crossing `r`.
    pub fn load(&self, r: ResourceId) -> u32 {
        self.resources[r as usize].flows
    }

    /// Start a flow of `bytes` over `resources` at time `now` (call `advance(now)` first).
    pub fn start(&mut self, now: f64, bytes: u64, resources: &[ResourceId], tag: T) {
        self.start_weighted(now, bytes, resources, 1.0, tag);
    }

    /// [`FlowNet::start`] a flow of `weight` (positive): it gets that many shares of each
    /// resource to a flow of weight 1.
    pub fn start_weighted(
        &mut self,
        now: f64,
        bytes: u64,
        resources: &[ResourceId],
        weight: f64,
        tag: T,
    ) {
        debug_assert!(!resources.is_empty() && resources.len() <= MAX_PATH);
        debug_assert!((now - self.now).abs() < 1e-9, "advance before start");
        debug_assert!(weight > 0.0, "a flow's weight is positive");
        let mut rs = [0; MAX_PATH];
        rs[..resources.len()].copy_from_slice(resources);
        for &id in resources {
            let r = &mut self.resources[id as usize];
            r.flows += 1;
            r.weight += weight;
            if !r.changed {
                r.changed = true;
                self.changed.push(id);
            }
        }
        self.remaining.push(bytes as f64);
        self.rate.push(0.0);
        self.paths.push(Crossing {
            tag,
            resources: rs,
            used: resources.len(),
            weight,
            bytes,
        });
        self.dirty = true;
    }

    /// Flow `i` leaves (as `Vec::swap_remove` does: the last flow takes its place); its
    /// resources no longer count it.
    fn take(&mut self, i: usize) -> Flow<T> {
        let p = self.paths.swap_remove(i);
        self.remaining.swap_remove(i);
        self.rate.swap_remove(i);
        for &id in &p.resources[..p.used] {
            let r = &mut self.resources[id as usize];
            r.flows -= 1;
            r.weight = if r.flows == 0 {
                0.0
            } else {
                r.weight - p.weight
            };
            if !r.changed {
                r.changed = true;
                self.changed.push(id);
            }
        }
        self.dirty = true;
        Flow {
            tag: p.tag,
            bytes: p.bytes,
        }
    }

    /// Every flow's rate: the smallest share it gets on its resources. A flow of weight 1
    /// reads each resource's `unit`, computed once per changed resource (the same number as
    /// `capacity * 1 / weight`).
    fn recompute(&mut self) {
        if !self.dirty {
            return;
        }
        for id in self.changed.drain(..) {
            let r = &mut self.resources[id as usize];
            r.changed = false;
            r.unit = if r.flows == 0 {
                0.0
            } else {
                r.capacity / r.weight
            };
        }
        let resources = &self.resources;
        for (rate, p) in self.rate.iter_mut().zip(&self.paths) {
            let path = &p.resources[..p.used];
            *rate = if p.weight == 1.0 {
                path.iter()
                    .map(|r| resources[*r as usize].unit)
                    .fold(f64::INFINITY, f64::min)
            } else {
                path.iter()
                    .map(|r| {
                        let r = &resources[*r as usize];
                        r.capacity * p.weight / r.weight
                    })
                    .fold(f64::INFINITY, f64::min)
            };
        }
        self.dirty = false;
    }

    /// When the next flow completes, if any.
    pub fn next_completion(&mut self) -> Option<f64> {
        self.recompute();
        if self.paths.is_empty() {
            return None;
        }
        // The smallest time left: adding `now` rounds monotonically, so `now` plus the smallest
        // is the smallest of `now` plus each. Four lanes, so the divisions run side by side.
        let mut lanes = [f64::INFINITY; 4];
        let rem = self.remaining.chunks_exact(4);
        let rate = self.rate.chunks_exact(4);
        let (rem_tail, rate_tail) = (rem.remainder(), rate.remainder());
        for (r, q) in rem.zip(rate) {
            for k in 0..4 {
                let left = r[k] / q[k];
                lanes[k] = if left < lanes[k] { left } else { lanes[k] };
            }
        }
        for (k, (r, q)) in rem_tail.iter().zip(rate_tail).enumerate() {
            let left = r / q;
            lanes[k] = if left < lanes[k] { left } else { lanes[k] };
        }
        let least = lanes
            .into_iter()
            .fold(f64::INFINITY, |a, b| if b < a { b } else { a });
        Some(self.now + least)
    }

    /// Stop the flows whose tag matches `cut` (call `advance(now)` first); returns them.
    pub fn cancel(&mut self, cut: impl Fn(&T) -> bool) -> Vec<Flow<T>> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.paths.len() {
            if cut(&self.paths[i].tag) {
                out.push(self.take(i));
            } else {
                i += 1;
            }
        }
        out
    }

    /// Move every flow forward to time `t`; returns the flows that completed by then.
    pub fn advance(&mut self, t: f64) -> Vec<Flow<T>> {
        self.recompute();
        let dt = t - self.now;
        let mut done = Vec::new();
        // Half a byte of slack absorbs floating-point error in `now + remaining / rate`; a
        // flow due within a nanosecond, the drivers' clock step, is done too (else a fast flow
        // a fraction of a byte over the slack is due at a time that rounds to `now`, and the
        // clock never moves).
        let is_done = |rem: f64, rate: f64| rem <= 0.5 || rem <= rate * CLOCK_STEP_S;
        let mut any = false;
        if dt > 0.0 {
            for (rem, rate) in self.remaining.iter_mut().zip(&self.rate) {
                *rem -= rate * dt;
                any |= is_done(*rem, *rate);
            }
        } else {
            for (rem, rate) in self.remaining.iter().zip(&self.rate) {
                any |= is_done(*rem, *rate);
            }
        }
        self.now = self.now.max(t);
        if !any {
            return done;
        }
        let mut i = 0;
        while i < self.paths.len() {
            if is_done(self.remaining[i], self.rate[i]) {
                done.push(self.take(i));
            } else {
                i += 1;
            }
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_resource_splits_bandwidth() {
        let mut net = FlowNet::new();
        let storage = net.add_resource(100.0);
        let nic_a = net.add_resource(1000.0);
        let nic_b = net.add_resource(30.0);
        net.start(0.0, 100, &[storage, nic_a], "a");
        net.start(0.0, 100, &[storage, nic_b], "b");
        // b is held to 30 B/s by its NIC; a gets an equal share of storage, 50 B/s.
        assert_eq!(net.next_completion(), Some(2.0));
        let done = net.advance(2.0);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].tag, "a");
        // b moved 60 bytes by t=2 and now has 40 left at min(100, 30) = 30 B/s.
        let t = net.next_completion().unwrap();
        assert!((t - (2.0 + 40.0 / 30.0)).abs() < 1e-9);
        assert_eq!(net.advance(t).len(), 1);
        assert!(net.is_empty());
    }

    #[test]
    fn a_cancelled_flow_gives_its_share_back() {
        let mut net = FlowNet::new();
        let nic = net.add_resource(100.0);
        net.start(0.0, 1000, &[nic], "a");
        net.start(0.0, 100, &[nic], "b");
        assert_eq!(net.next_completion(), Some(2.0));
        net.advance(1.0);
        let cut = net.cancel(|t| *t == "a");
        assert_eq!(cut.len(), 1);
        assert_eq!(net.load(nic), 1);
        // b moved 50 bytes at 50 B/s and now has the whole 100 B/s for its other 50.
        assert_eq!(net.next_completion(), Some(1.5));
    }

    #[test]
    fn weights_split_a_resource_in_proportion() {
        let mut net = FlowNet::new();
        let storage = net.add_resource(90.0);
        net.start_weighted(0.0, 60, &[storage], 2.0, "heavy");
        net.start(0.0, 60, &[storage], "light");
        // 60 and 30 B/s: the heavy flow ends at 1 s, having left the light one 30 bytes.
        assert_eq!(net.next_completion(), Some(1.0));
        let done = net.advance(1.0);
        assert_eq!(done[0].tag, "heavy");
        // Alone, the light flow takes the whole 90 B/s.
        let t = net.next_completion().unwrap();
        assert!((t - (1.0 + 30.0 / 90.0)).abs() < 1e-9, "{t}");
    }

    #[test]
    fn a_fast_flow_due_within_a_nanosecond_is_done() {
        let mut net = FlowNet::new();
        let disk = net.add_resource(2e9);
        net.start(0.0, 1_000_000, &[disk], "read");
        // 0.4 ns before its end, at 2 GB/s: 0.8 bytes left, more than the half-byte slack.
        let t = 1_000_000.0 / 2e9 - 0.4e-9;
        let done = net.advance(t);
        assert_eq!(done.len(), 1, "a clock in nanoseconds cannot reach its end");
    }
}
