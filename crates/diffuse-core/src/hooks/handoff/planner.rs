//! Cache hand-off on release: before an idle node is given back, the objects that only it holds
//! are pushed to surviving nodes with room, so the cache is not lost with the node (the paper's
//! open question: "Should it be moved to another executor?").
//!
//! Two parts live here:
//!
//! * [`CacheModel`]: the core's picture of every node's cache (which objects, their sizes, their
//!   order under the node's eviction policy, and the node's quota), kept from events the core
//!   already sees: objects reported cached or evicted, local reads it dispatched, and the quota a
//!   driver reports with [`Core::handle_node_cache`](crate::Core::handle_node_cache).
//! * [`plan`]: a pure function from that picture to a list of pushes ([`Handoff`]).
//!
//! The model knows an object's size from the tasks that read it (learnt at submission, kept for
//! the life of the core, like the drivers' own per-object tables). An object reported cached
//! that no task has read is left out: it is never pushed, and its bytes do not count against
//! its node's room.
//!
//! What a plan picks, in order:
//! 1. only objects no other node holds or is fetching, and none already being pushed;
//! 2. first the objects queued tasks will read: most readers first, then the earliest reader in
//!    the queue;
//! 3. then the others, hottest first by the releasing node's eviction policy (LRU: most recently
//!    used; LFU: most used; FIFO: newest). Random ranks nothing, so under Random only objects
//!    queued tasks want are pushed;
//! 4. each to the surviving node with the most free room that takes it whole (free room =
//!    quota - bytes held - bytes already on their way to it); busy nodes before idle ones, which
//!    are the next to be released. Nobody's objects are evicted to make room;
//! 5. until the byte budget is spent (an object that does not fit the rest of the budget is
//!    skipped; a smaller one after it may still go).
//!
//! The index does not change with a plan: a target's copy counts once the target reports it
//! cached, as for any fetch. Until then (or for `time_bound`) the object's bytes are reserved on
//! the target, so two plans never fill the same room.

use crate::cache::{EvictionPolicy, NodeCache};
use crate::ids::{NodeId, ObjectId};
use crate::index::LocationIndex;
use crate::time::Time;
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Settings of cache hand-off. Off when the core has none (`CoreConfig::handoff`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandoffConfig {
    /// Most bytes one release pushes.
    pub budget: u64,
    /// How long the driver lets a release's pushes run; what has not arrived by then is given up.
    /// The core stops reserving room for a push after this long.
    pub time_bound: Duration,
}

/// One push of a release: send `object` (`size` bytes) from the releasing node to `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Handoff {
    /// The object.
    pub object: ObjectId,
    /// Its size in bytes.
    pub size: u64,
    /// The surviving node that receives it.
    pub to: NodeId,
}

/// What the queue wants of an object: how many queued tasks read it, and the queue position
/// (sequence number, lower runs sooner) of the earliest of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Want {
    /// Queued tasks that read it.
    pub readers: u32,
    /// Sequence number of the earliest of them.
    pub first: u64,
}

/// A node that may receive pushes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// The node.
    pub node: NodeId,
    /// It runs a task or serves a peer read (preferred: an idle node is the next to go).
    pub busy: bool,
}

/// Everything a plan is made from.
pub struct PlanInput<'a> {
    /// The node being released.
    pub node: NodeId,
    /// Which nodes hold or are fetching each object (the core's scored index).
    pub index: &'a LocationIndex,
    /// The nodes' caches: what the releasing node holds, in its policy's order, and the
    /// targets' room.
    pub caches: &'a CacheModel,
    /// Surviving nodes (not the releasing one, nor any other released in the same round).
    pub targets: &'a [Target],
    /// What queued tasks want of an object.
    pub wanted: &'a dyn Fn(ObjectId) -> Option<Want>,
    /// Most bytes to push.
    pub budget: u64,
}

/// The pushes to make before `input.node` goes (see the module documentation for the order).
pub fn plan(input: &PlanInput<'_>) -> Vec<Handoff> {
    let Some(source) = input.caches.nodes.get(&input.node) else {
        return Vec::new();
    };
    if input.budget == 0 || input.targets.is_empty() {
        return Vec::new();
    }
    // Candidates: held only here, not already on their way elsewhere.
    let only_here = |o: ObjectId| {
        input.index.holders(o) == [input.node] && !input.caches.pending_objects.contains_key(&o)
    };
    let mut ranked: Vec<(ObjectId, u64)> = Vec::new();
    let mut seen: BTreeSet<ObjectId> = BTreeSet::new();
    for (rank, o) in source.cache.hottest_first().enumerate() {
        seen.insert(o);
        if only_here(o) {
            ranked.push((o, rank as u64));
        }
    }
    // Objects the policy does not rank (Random) take part only if queued tasks want them.
    let mut unranked: Vec<ObjectId> = source
        .cache
        .objects()
        .filter(|o| !seen.contains(o) && only_here(*o))
        .collect();
    unranked.sort();
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    enum Key {
        Wanted(Reverse<u32>, u64, ObjectId),
        Hot(u64),
    }
    let mut candidates: Vec<(Key, ObjectId)> = Vec::new();
    for (o, rank) in ranked {
        let key = match (input.wanted)(o) {
            Some(w) => Key::Wanted(Reverse(w.readers), w.first, o),
            None => Key::Hot(rank),
        };
        candidates.push((key, o));
    }
    for o in unranked {
        if let Some(w) = (input.wanted)(o) {
            candidates.push((Key::Wanted(Reverse(w.readers), w.first, o), o));
        }
    }
    candidates.sort();

    // Targets by (idle, most room, id): the first of each class is the roomiest of it.
    let mut room: BTreeSet<(bool, Reverse<u64>, NodeId)> = input
        .targets
        .iter()
        .filter(|t| t.node != input.node)
        .filter_map(|t| Some((!t.busy, Reverse(input.caches.room(t.node)?), t.node)))
        .filter(|(_, Reverse(r), _)| *r > 0)
        .collect();
    let mut left = input.budget;
    let mut out = Vec::new();
    for (_, object) in candidates {
        let size = source.cache.size_of(object).expect("candidate is held");
        if size > left {
            continue;
        }
        let pick = [false, true].into_iter().find_map(|idle| {
            let first = *room.range((idle, Reverse(u64::MAX), NodeId(0))..).next()?;
            (first.0 == idle && first.1 .0 >= size).then_some(first)
        });
        let Some(entry) = pick else {
            continue;
        };
        room.remove(&entry);
        let (idle, Reverse(r), to) = entry;
        if r - size > 0 {
            room.insert((idle, Reverse(r - size), to));
        }
        left -= size;
        out.push(Handoff { object, size, to });
        if left == 0 || room.is_empty() {
            break;
        }
    }
    out
}

#[derive(Clone, Debug)]
struct ModelNode {
    /// Byte quota, once the driver reported it; a node without one receives no pushes.
    quota: Option<u64>,
    /// What it holds, in its policy's order (unbounded: the node reports its own evictions).
    cache: NodeCache,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    size: u64,
    since: Time,
}

/// The core's picture of the nodes' caches (see the module documentation).
#[derive(Clone, Debug, Default)]
pub struct CacheModel {
    nodes: FxHashMap<NodeId, ModelNode>,
    /// Size of every object a task read (learnt at submission).
    sizes: FxHashMap<ObjectId, u64>,
    /// Planned pushes not yet reported cached: (target, object).
    pending: BTreeMap<(NodeId, ObjectId), Pending>,
    /// Objects in `pending`, with their number of targets.
    pending_objects: FxHashMap<ObjectId, u32>,
    /// Bytes in `pending` per target.
    reserved: FxHashMap<NodeId, u64>,
}

fn model_cache(policy: EvictionPolicy) -> NodeCache {
    NodeCache::new(policy, u64::MAX, 0)
}

impl CacheModel {
    /// An empty model.
    pub fn new() -> Self {
        Self::default()
    }

    /// `object` is `size` bytes (a task reads it).
    pub fn learn_size(&mut self, object: ObjectId, size: u64) {
        self.sizes.insert(object, size);
    }

    /// A node joined with an empty cache of unknown quota (LRU order until told otherwise).
    pub fn node_joined(&mut self, node: NodeId) {
        self.nodes.insert(
            node,
            ModelNode {
                quota: None,
                cache: model_cache(EvictionPolicy::Lru),
            },
        );
    }

    /// `node`'s cache holds at most `quota` bytes and evicts by `policy`. Returns false for an
    /// unknown node.
    pub fn set_cache(&mut self, node: NodeId, quota: u64, policy: EvictionPolicy) -> bool {
        let Some(n) = self.nodes.get_mut(&node) else {
            return false;
        };
        n.quota = Some(quota);
        if n.cache.policy() != policy {
            // Keep what it holds, coldest first, so the new order starts from the old one.
            let mut order: Vec<ObjectId> = n.cache.hottest_first().collect();
            order.reverse();
            let ranked: FxHashSet<ObjectId> = order.iter().copied().collect();
            let mut rest: Vec<ObjectId> =
                n.cache.objects().filter(|o| !ranked.contains(o)).collect();
            rest.sort();
            let mut cache = model_cache(policy);
            for o in rest.into_iter().chain(order) {
                let size = n.cache.size_of(o).expect("held");
                cache.insert(o, size);
            }
            n.cache = cache;
        }
        true
    }

    /// `node` reports it holds `object`: a push to it has arrived, or a fetch.
    pub fn cached(&mut self, node: NodeId, object: ObjectId) {
        let pushed = self.unreserve(node, object);
        let Some(n) = self.nodes.get_mut(&node) else {
            return;
        };
        if let Some(size) = pushed.or_else(|| self.sizes.get(&object).copied()) {
            n.cache.insert(object, size);
        }
    }

    /// `node` reports it dropped `object`.
    pub fn evicted(&mut self, node: NodeId, object: ObjectId) {
        if let Some(n) = self.nodes.get_mut(&node) {
            n.cache.remove(object);
        }
    }

    /// `object` changed at its source: `holders` drop it and pushes of it are void.
    pub fn invalidated(&mut self, object: ObjectId, holders: &[NodeId]) {
        for h in holders {
            self.evicted(*h, object);
        }
        let targets: Vec<NodeId> = self
            .pending
            .keys()
            .filter(|(_, o)| *o == object)
            .map(|(n, _)| *n)
            .collect();
        for t in targets {
            self.unreserve(t, object);
        }
    }

    /// A task was sent to `node` to read its own copy of `object` (a use, for LRU and LFU).
    pub fn touched(&mut self, node: NodeId, object: ObjectId) {
        if let Some(n) = self.nodes.get_mut(&node) {
            n.cache.touch(object);
        }
    }

    /// `node` is gone, with its cache and the pushes on their way to it.
    pub fn node_removed(&mut self, node: NodeId) {
        self.nodes.remove(&node);
        let objects: Vec<ObjectId> = self
            .pending
            .range((node, ObjectId(0))..=(node, ObjectId(u64::MAX)))
            .map(|((_, o), _)| *o)
            .collect();
        for o in objects {
            self.unreserve(node, o);
        }
    }

    /// Reserve room on the targets of `plan`, made at `now`.
    pub fn reserve(&mut self, plan: &[Handoff], now: Time) {
        for h in plan {
            let fresh = self
                .pending
                .insert(
                    (h.to, h.object),
                    Pending {
                        size: h.size,
                        since: now,
                    },
                )
                .is_none();
            debug_assert!(fresh, "{} planned twice to {}", h.object, h.to);
            *self.pending_objects.entry(h.object).or_default() += 1;
            // An empty object reserves nothing (and leaves no zero entry behind).
            if h.size > 0 {
                *self.reserved.entry(h.to).or_default() += h.size;
            }
        }
    }

    /// Give up pushes planned `bound` or longer before `now` (the driver has given them up).
    pub fn expire(&mut self, now: Time, bound: Duration) {
        let old: Vec<(NodeId, ObjectId)> = self
            .pending
            .iter()
            .filter(|(_, p)| now.since(p.since) >= bound)
            .map(|(k, _)| *k)
            .collect();
        for (n, o) in old {
            self.unreserve(n, o);
        }
    }

    /// Drop a pending push; its size if there was one.
    fn unreserve(&mut self, node: NodeId, object: ObjectId) -> Option<u64> {
        let p = self.pending.remove(&(node, object))?;
        if let Some(c) = self.pending_objects.get_mut(&object) {
            *c -= 1;
            if *c == 0 {
                self.pending_objects.remove(&object);
            }
        }
        if let Some(r) = self.reserved.get_mut(&node) {
            *r -= p.size;
            if *r == 0 {
                self.reserved.remove(&node);
            }
        }
        Some(p.size)
    }

    /// Free room on `node`: quota - bytes held - bytes on their way to it (None: quota unknown).
    pub fn room(&self, node: NodeId) -> Option<u64> {
        let n = self.nodes.get(&node)?;
        let reserved = self.reserved.get(&node).copied().unwrap_or(0);
        Some(
            n.quota?
                .saturating_sub(n.cache.used())
                .saturating_sub(reserved),
        )
    }

    /// Bytes the model says `node` holds (objects of known size).
    pub fn used(&self, node: NodeId) -> u64 {
        self.nodes.get(&node).map_or(0, |n| n.cache.used())
    }

    /// Pushes planned and not yet arrived or given up: (target, object, size).
    pub fn pending(&self) -> impl Iterator<Item = (NodeId, ObjectId, u64)> + '_ {
        self.pending.iter().map(|((n, o), p)| (*n, *o, p.size))
    }

    /// Check the model against the index: every object it places on a node is held there, and
    /// the reservation counters agree with the pending pushes.
    pub fn check(&self, index: &LocationIndex) -> Result<(), String> {
        for (id, n) in &self.nodes {
            if let Some(o) = n.cache.objects().find(|o| !index.holds(*id, *o)) {
                return Err(format!(
                    "cache model places {o} on {id}, the index does not"
                ));
            }
        }
        let mut reserved: FxHashMap<NodeId, u64> = FxHashMap::default();
        let mut objects: FxHashMap<ObjectId, u32> = FxHashMap::default();
        for ((n, o), p) in &self.pending {
            if !self.nodes.contains_key(n) {
                return Err(format!("push of {o} pending to unknown {n}"));
            }
            *reserved.entry(*n).or_default() += p.size;
            *objects.entry(*o).or_default() += 1;
        }
        reserved.retain(|_, r| *r > 0);
        if reserved != self.reserved || objects != self.pending_objects {
            return Err("hand-off reservations disagree with pending pushes".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    fn n(i: u32) -> NodeId {
        NodeId(i)
    }
    fn o(i: u64) -> ObjectId {
        ObjectId(i)
    }

    /// Nodes with caches of `quota` bytes under `policy`, and an index that agrees with them.
    struct Scene {
        caches: CacheModel,
        index: LocationIndex,
        wanted: FxHashMap<ObjectId, Want>,
    }

    impl Scene {
        fn new(policy: EvictionPolicy, nodes: &[(u32, u64)]) -> Scene {
            let mut caches = CacheModel::new();
            for &(id, quota) in nodes {
                caches.node_joined(n(id));
                caches.set_cache(n(id), quota, policy);
            }
            Scene {
                caches,
                index: LocationIndex::new(),
                wanted: FxHashMap::default(),
            }
        }

        /// `node` caches `object` of `size` bytes (in this order: later is hotter for LRU).
        fn holds(&mut self, node: u32, object: u64, size: u64) -> &mut Self {
            self.caches.learn_size(o(object), size);
            self.caches.cached(n(node), o(object));
            self.index.add(n(node), o(object));
            self
        }

        fn want(&mut self, object: u64, readers: u32, first: u64) -> &mut Self {
            self.wanted.insert(o(object), Want { readers, first });
            self
        }

        fn plan(&self, node: u32, targets: &[(u32, bool)], budget: u64) -> Vec<(u64, u32)> {
            let targets: Vec<Target> = targets
                .iter()
                .map(|&(id, busy)| Target { node: n(id), busy })
                .collect();
            let wanted = |obj: ObjectId| self.wanted.get(&obj).copied();
            plan(&PlanInput {
                node: n(node),
                index: &self.index,
                caches: &self.caches,
                targets: &targets,
                wanted: &wanted,
                budget,
            })
            .into_iter()
            .map(|h| (h.object.0, h.to.0))
            .collect()
        }
    }

    #[test]
    fn only_objects_no_other_node_holds() {
        let mut s = Scene::new(EvictionPolicy::Lru, &[(1, 100 * MB), (2, 100 * MB)]);
        s.holds(1, 10, MB).holds(1, 11, MB).holds(2, 11, MB);
        assert_eq!(s.plan(1, &[(2, true)], 100 * MB), vec![(10, 2)]);
    }

    #[test]
    fn wanted_first_then_hottest() {
        let mut s = Scene::new(EvictionPolicy::Lru, &[(1, 100 * MB), (2, 4 * MB)]);
        // LRU order on n1, coldest to hottest: o1, o2, o3, o4, o5.
        for i in 1..=5 {
            s.holds(1, i, MB);
        }
        // o1 and o2 are wanted; o1 by two tasks, so first.
        s.want(2, 1, 7).want(1, 2, 9);
        // n2 takes 4 of the 5.
        assert_eq!(
            s.plan(1, &[(2, true)], 100 * MB),
            vec![(1, 2), (2, 2), (5, 2), (4, 2)]
        );
        // Same readers: the earlier in the queue first.
        s.want(1, 1, 9);
        assert_eq!(s.plan(1, &[(2, true)], 2 * MB), vec![(2, 2), (1, 2)]);
    }

    #[test]
    fn lfu_ranks_by_use_count() {
        let mut s = Scene::new(EvictionPolicy::Lfu, &[(1, 100 * MB), (2, 100 * MB)]);
        s.holds(1, 1, MB).holds(1, 2, MB).holds(1, 3, MB);
        s.caches.touched(n(1), o(1));
        s.caches.touched(n(1), o(1));
        s.caches.touched(n(1), o(3));
        assert_eq!(s.plan(1, &[(2, true)], 2 * MB), vec![(1, 2), (3, 2)]);
    }

    #[test]
    fn random_pushes_only_what_the_queue_wants() {
        let mut s = Scene::new(EvictionPolicy::Random, &[(1, 100 * MB), (2, 100 * MB)]);
        s.holds(1, 1, MB)
            .holds(1, 2, MB)
            .holds(1, 3, MB)
            .want(3, 1, 0);
        assert_eq!(s.plan(1, &[(2, true)], 100 * MB), vec![(3, 2)]);
    }

    #[test]
    fn within_the_budget_skipping_what_does_not_fit() {
        let mut s = Scene::new(EvictionPolicy::Lru, &[(1, 100 * MB), (2, 100 * MB)]);
        // Hottest first: o3 (1 MB), o2 (5 MB), o1 (2 MB).
        s.holds(1, 1, 2 * MB).holds(1, 2, 5 * MB).holds(1, 3, MB);
        assert_eq!(s.plan(1, &[(2, true)], 4 * MB), vec![(3, 2), (1, 2)]);
        assert!(s.plan(1, &[(2, true)], 0).is_empty());
    }

    #[test]
    fn to_the_roomiest_busy_target_and_never_over_its_room() {
        // n2 has 3 MB free (2 held), n3 5 MB free, n4 is idle with 50 MB free.
        let mut s = Scene::new(
            EvictionPolicy::Lru,
            &[(1, 100 * MB), (2, 5 * MB), (3, 5 * MB), (4, 50 * MB)],
        );
        s.holds(2, 20, 2 * MB);
        for i in 1..=9 {
            s.holds(1, i, MB);
        }
        let plan = s.plan(1, &[(2, true), (3, true), (4, false)], 100 * MB);
        // Hottest (o9) to n3 (5 free), then the two alternate by room, then the idle node.
        assert_eq!(
            plan,
            vec![
                (9, 3),
                (8, 3),
                (7, 2),
                (6, 3),
                (5, 2),
                (4, 3),
                (3, 2),
                (2, 3),
                (1, 4)
            ]
        );
        let mut to = FxHashMap::default();
        for (_, t) in &plan {
            *to.entry(*t).or_insert(0u64) += MB;
        }
        assert_eq!((to[&2], to[&3]), (3 * MB, 5 * MB));
    }

    #[test]
    fn a_target_of_unknown_quota_or_the_releasing_node_receives_nothing() {
        let mut s = Scene::new(EvictionPolicy::Lru, &[(1, 100 * MB)]);
        s.caches.node_joined(n(2));
        s.holds(1, 1, MB);
        assert!(s.plan(1, &[(2, true), (1, true)], 100 * MB).is_empty());
    }

    #[test]
    fn reservations_fill_room_and_hide_objects_on_their_way() {
        let mut s = Scene::new(
            EvictionPolicy::Lru,
            &[(1, 100 * MB), (2, 100 * MB), (3, 2 * MB)],
        );
        s.holds(1, 1, MB).holds(1, 2, MB).holds(2, 5, MB);
        let t0 = Time::ZERO;
        // A push of o5 (n2's only copy) to n3 is under way: 1 MB of n3's 2 left.
        s.caches.reserve(
            &[Handoff {
                object: o(5),
                size: MB,
                to: n(3),
            }],
            t0,
        );
        assert_eq!(s.caches.room(n(3)), Some(MB));
        assert_eq!(s.plan(1, &[(3, true)], 100 * MB), vec![(2, 3)]);
        assert!(
            s.plan(2, &[(3, true)], 100 * MB).is_empty(),
            "o5 is already on its way"
        );
        // It arrives: held, no longer reserved.
        s.caches.cached(n(3), o(5));
        s.index.add(n(3), o(5));
        assert_eq!(s.caches.room(n(3)), Some(MB));
        assert!(s.caches.pending().next().is_none());
        assert_eq!(s.caches.check(&s.index), Ok(()));
        // A push that never arrives stops holding room after the time bound.
        let plan = [Handoff {
            object: o(1),
            size: MB,
            to: n(3),
        }];
        s.caches.reserve(&plan, t0);
        assert_eq!(s.caches.room(n(3)), Some(0));
        s.caches
            .expire(t0 + Duration::from_secs(9), Duration::from_secs(10));
        assert_eq!(s.caches.room(n(3)), Some(0));
        s.caches
            .expire(t0 + Duration::from_secs(10), Duration::from_secs(10));
        assert_eq!(s.caches.room(n(3)), Some(MB));
        assert_eq!(s.caches.check(&s.index), Ok(()));
    }

    #[test]
    fn the_plan_is_deterministic() {
        let build = || {
            let mut s = Scene::new(
                EvictionPolicy::Random,
                &[(1, 100 * MB), (2, 10 * MB), (3, 10 * MB)],
            );
            for i in (1..=30).rev() {
                s.holds(1, i, MB).want(i, (i % 3) as u32 + 1, 100 - i);
            }
            s.plan(1, &[(3, true), (2, true)], 15 * MB)
        };
        let a = build();
        assert_eq!(a.len(), 15);
        assert_eq!(a, build());
    }
}
