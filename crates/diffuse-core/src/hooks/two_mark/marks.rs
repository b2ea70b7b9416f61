//! 2Mark (data-diffusion-falkon.txt, section 3.2 and Figure 1): one eviction policy for all the
//! nodes' caches together, marking objects at two levels.
//!
//! An object is *local-marked* at a store when that store was asked for it in the store's
//! current local phase, and *global-marked* when any store was asked for it in the current
//! global phase. A local phase ends when a store must evict and every object it holds is
//! local-marked; a global phase ends when an object must come from persistent storage, room
//! must be made, and every object held anywhere is global-marked. Then the marks of that
//! level are cleared. On a request for `p` at store X (a task dispatched to X reads `p`):
//!
//! 1. `p` on X: nothing moves.
//! 2. X has room: `p` is fetched (from a peer holding it, else from storage).
//! 3. X is full and `p` is on a peer Y (a 1-fault): X gives Y a local-unmarked object `q` in
//!    exchange for `p` (Y drops `p` if it needs the room; a `q` local-marked... see below).
//! 4. X is full and `p` is nowhere (an s-fault): X evicts a global-unmarked object; if all it
//!    holds are global-marked, it moves a local-unmarked `q` to a store Y that has room or a
//!    global-unmarked object to give up.
//!
//! Then `p` is global- and local-marked at X. Every object loaded from storage thus stays in
//! the system for the rest of its global phase, which is what bounds 2Mark's cost to
//! O(N*M) times the optimum.
//!
//! Departures from the paper, for a system that keeps replicas and objects of many sizes:
//!
//! - **Replicas are evicted before last copies.** The paper's model keeps one copy of each
//!   object; ours keeps several (peer reads leave one on the reader). A victim that another
//!   store also holds is evicted where it is (the object stays in the system), before any last
//!   copy of its class, and is never moved.
//! - **Sizes.** A store is full when the next object does not fit its byte quota; victims are
//!   taken until it does.
//! - **"Arbitrary" is the least recently requested** in its class, so runs are deterministic.
//! - **Exchanges are one-way moves.** `q` goes to Y ([`Plan::moves`]); Y gives up `p` only if
//!   it needs the room for `q`, and further room on Y comes from its global-unmarked objects.
//! - **Pinned objects** (intermediate outputs a worker keeps, the other inputs of the task
//!   asking, objects still on their way to the store) count against the quota and are never
//!   chosen.
//!
//! This is bookkeeping only: [`TwoMark::request`] returns what to evict and move, and the core
//! turns that into actions. Its model of the stores follows the reports (`cached`,
//! `evicted`), so a copy the driver drops on its own is forgotten here too.

use crate::ids::{NodeId, ObjectId};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};

/// How many entries of a victim class are looked at for a replica before taking the oldest.
const REPLICA_SCAN: usize = 64;

#[derive(Clone, Copy, Debug)]
struct Copy {
    size: u64,
    local: bool,
    tick: u64,
}

#[derive(Clone, Debug, Default)]
struct Store {
    quota: u64,
    used: u64,
    objects: FxHashMap<ObjectId, Copy>,
    /// Held copies not local-marked, oldest request first.
    local_unmarked: BTreeSet<(u64, ObjectId)>,
    /// Held copies of objects not global-marked, oldest request first.
    global_unmarked: BTreeSet<(u64, ObjectId)>,
}

impl Store {
    fn room(&self) -> u64 {
        self.quota.saturating_sub(self.used)
    }
}

/// What a request asks the driver to do, besides fetching the requested object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Copies to delete: (store, object).
    pub evict: Vec<(NodeId, ObjectId)>,
    /// Copies to move: (object, from, to); `from` drops its copy once `to` has it.
    pub moves: Vec<(ObjectId, NodeId, NodeId)>,
}

/// Counters of what 2Mark did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TwoMarkStats {
    /// Local phases begun (a store found everything it holds local-marked).
    pub local_phases: u64,
    /// Global phases begun.
    pub global_phases: u64,
    /// Copies evicted by plan.
    pub evicted: u64,
    /// Of those, copies another store also held (replicas).
    pub evicted_replicas: u64,
    /// Copies moved to another store instead of being evicted.
    pub moved: u64,
}

/// 2Mark's marks and its model of every store.
#[derive(Clone, Debug, Default)]
pub struct TwoMark {
    stores: BTreeMap<NodeId, Store>,
    /// Stores holding each object.
    holders: FxHashMap<ObjectId, Vec<NodeId>>,
    global: FxHashMap<ObjectId, bool>,
    /// Objects held somewhere and not global-marked.
    unmarked_held: usize,
    sizes: FxHashMap<ObjectId, u64>,
    tick: u64,
    stats: TwoMarkStats,
}

impl TwoMark {
    /// What it did so far.
    pub fn stats(&self) -> TwoMarkStats {
        self.stats
    }

    /// A store of `quota` bytes joined (or changed its quota).
    pub fn store(&mut self, node: NodeId, quota: u64) {
        self.stores.entry(node).or_default().quota = quota;
    }

    /// A store left, with everything it held.
    pub fn store_left(&mut self, node: NodeId) {
        let Some(s) = self.stores.get(&node) else {
            return;
        };
        let objects: Vec<ObjectId> = s.objects.keys().copied().collect();
        for o in objects {
            self.forget(node, o);
        }
        self.stores.remove(&node);
    }

    /// `object` is `size` bytes (learned when a task reading it is submitted).
    pub fn size(&mut self, object: ObjectId, size: u64) {
        if self.sizes.insert(object, size) == Some(size) {
            return;
        }
        for n in self.holders.get(&object).cloned().unwrap_or_default() {
            let s = self.stores.get_mut(&n).expect("holder is a store");
            let c = s.objects.get_mut(&object).expect("held");
            s.used = s.used - c.size + size;
            c.size = size;
        }
    }

    /// The size of `object`, if known.
    pub fn size_of(&self, object: ObjectId) -> Option<u64> {
        self.sizes.get(&object).copied()
    }

    /// Bytes `node` holds and its quota, as modelled.
    pub fn usage(&self, node: NodeId) -> Option<(u64, u64)> {
        self.stores.get(&node).map(|s| (s.used, s.quota))
    }

    /// Whether `node` holds `object`, as modelled.
    pub fn holds(&self, node: NodeId, object: ObjectId) -> bool {
        self.stores
            .get(&node)
            .is_some_and(|s| s.objects.contains_key(&object))
    }

    /// Whether `object` is global-marked.
    pub fn is_global_marked(&self, object: ObjectId) -> bool {
        self.global.get(&object).copied().unwrap_or(false)
    }

    /// Whether `object` is local-marked at `node`.
    pub fn is_local_marked(&self, node: NodeId, object: ObjectId) -> bool {
        self.stores
            .get(&node)
            .and_then(|s| s.objects.get(&object))
            .is_some_and(|c| c.local)
    }

    /// A store reports a copy (fetched, handed off, prefetched): it joins the model unmarked
    /// locally, if not there already.
    pub fn cached(&mut self, node: NodeId, object: ObjectId) {
        if !self.stores.contains_key(&node) || self.holds(node, object) {
            return;
        }
        self.add(node, object, false);
    }

    /// A store reports a copy gone.
    pub fn evicted(&mut self, node: NodeId, object: ObjectId) {
        if self.holds(node, object) {
            self.forget(node, object);
        }
    }

    /// Room that copies reported beyond a store's quota need (prefetches, hand-offs): victims
    /// by 2Mark's order, without marking anything.
    pub fn fit(&mut self, node: NodeId, pinned: &dyn Fn(NodeId, ObjectId) -> bool) -> Plan {
        let mut plan = Plan::default();
        while self.stores.get(&node).is_some_and(|s| s.used > s.quota) {
            let Some(q) = self
                .victim(node, Class::GlobalUnmarked, pinned, None)
                .or_else(|| self.victim(node, Class::LocalUnmarked, pinned, None))
                .or_else(|| self.victim(node, Class::Any, pinned, None))
            else {
                break;
            };
            self.evict(node, q, &mut plan);
        }
        plan
    }

    /// A request for `object` at `node`; `peer` is a store holding it that the core reads it
    /// from, if any (else it comes from storage, or is on `node` already). Returns what to evict
    /// and move so it fits.
    pub fn request(
        &mut self,
        node: NodeId,
        object: ObjectId,
        peer: Option<NodeId>,
        pinned: &dyn Fn(NodeId, ObjectId) -> bool,
    ) -> Plan {
        let mut plan = Plan::default();
        if !self.stores.contains_key(&node) {
            return plan;
        }
        self.tick += 1;
        if self.holds(node, object) {
            self.mark(node, object);
            return plan;
        }
        let size = self.sizes.get(&object).copied().unwrap_or(0);
        if size > self.stores[&node].quota {
            // Never cached here: it is read through.
            self.mark_global(object);
            return plan;
        }
        // The store Y of a 1-fault: a peer that really holds it.
        let peer = peer.filter(|y| *y != node && self.holds(*y, object));
        while self.stores[&node].room() < size {
            if self.all_local_marked(node, pinned) {
                self.local_phase(node);
            }
            let done = match peer {
                Some(y) => self.one_fault_room(node, y, object, pinned, &mut plan),
                None => self.s_fault_room(node, pinned, &mut plan),
            };
            if !done {
                break;
            }
        }
        self.add(node, object, true);
        self.mark(node, object);
        plan
    }

    /// A 1-fault: free room on X by giving a local-unmarked object to Y. Returns false if
    /// nothing on X can go.
    fn one_fault_room(
        &mut self,
        x: NodeId,
        y: NodeId,
        p: ObjectId,
        pinned: &dyn Fn(NodeId, ObjectId) -> bool,
        plan: &mut Plan,
    ) -> bool {
        let Some(q) = self
            .victim(x, Class::LocalUnmarked, pinned, Some(true))
            .or_else(|| self.victim(x, Class::LocalUnmarked, pinned, None))
            .or_else(|| self.victim(x, Class::Any, pinned, None))
        else {
            return false;
        };
        if self.is_replica(q) {
            self.evict(x, q, plan);
            return true;
        }
        let p_was_local = self.is_local_marked(y, p);
        let q_size = self.stores[&x].objects[&q].size;
        // Y takes q in exchange for p, giving up p if it needs the room.
        if self.stores[&y].room() < q_size && self.holds(y, p) && !pinned(y, p) {
            self.evict(y, p, plan);
        }
        if !self.make_room_for_move(y, q_size, pinned, plan) {
            self.evict(x, q, plan);
            return true;
        }
        self.move_copy(q, x, y, plan);
        if p_was_local {
            let s = self.stores.get_mut(&y).expect("store");
            let c = s.objects.get_mut(&q).expect("moved");
            c.local = true;
            s.local_unmarked.remove(&(c.tick, q));
        }
        true
    }

    /// An s-fault: free room on X for an object from storage. Returns false if nothing can go.
    fn s_fault_room(
        &mut self,
        x: NodeId,
        pinned: &dyn Fn(NodeId, ObjectId) -> bool,
        plan: &mut Plan,
    ) -> bool {
        if self.unmarked_held == 0 {
            self.global_phase();
        }
        if let Some(q) = self
            .victim(x, Class::GlobalUnmarked, pinned, Some(true))
            .or_else(|| self.victim(x, Class::GlobalUnmarked, pinned, None))
        {
            self.evict(x, q, plan);
            return true;
        }
        // Everything on X is global-marked: keep a local-unmarked object in the system by
        // moving it to a store with room or a global-unmarked object to give up.
        let Some(q) = self
            .victim(x, Class::LocalUnmarked, pinned, Some(true))
            .or_else(|| self.victim(x, Class::LocalUnmarked, pinned, None))
            .or_else(|| self.victim(x, Class::Any, pinned, None))
        else {
            return false;
        };
        if self.is_replica(q) {
            self.evict(x, q, plan);
            return true;
        }
        let size = self.stores[&x].objects[&q].size;
        match self.move_target(x, size, pinned) {
            Some(y) if self.make_room_for_move(y, size, pinned, plan) => {
                self.move_copy(q, x, y, plan);
            }
            _ => self.evict(x, q, plan),
        }
        true
    }

    /// A store other than `x` that has `size` bytes free, or enough global-unmarked objects
    /// to give up: the one with the most room first, then the one with the oldest
    /// global-unmarked object.
    fn move_target(
        &self,
        x: NodeId,
        size: u64,
        pinned: &dyn Fn(NodeId, ObjectId) -> bool,
    ) -> Option<NodeId> {
        let roomy = self
            .stores
            .iter()
            .filter(|(n, s)| **n != x && s.room() >= size && s.quota >= size)
            .max_by_key(|(n, s)| (s.room(), std::cmp::Reverse(**n)))
            .map(|(n, _)| *n);
        roomy.or_else(|| {
            self.stores
                .iter()
                .filter(|(n, s)| {
                    **n != x
                        && s.quota >= size
                        && s.room()
                            + s.global_unmarked
                                .iter()
                                .filter(|(_, o)| !pinned(**n, *o))
                                .map(|(_, o)| s.objects[o].size)
                                .sum::<u64>()
                            >= size
                })
                .min_by_key(|(n, s)| (s.global_unmarked.first().map(|(t, _)| *t), **n))
                .map(|(n, _)| *n)
        })
    }

    /// Evict global-unmarked objects of `y` until `size` bytes fit; false if they cannot.
    fn make_room_for_move(
        &mut self,
        y: NodeId,
        size: u64,
        pinned: &dyn Fn(NodeId, ObjectId) -> bool,
        plan: &mut Plan,
    ) -> bool {
        if self.stores[&y].quota < size {
            return false;
        }
        while self.stores[&y].room() < size {
            let Some(v) = self
                .victim(y, Class::GlobalUnmarked, pinned, Some(true))
                .or_else(|| self.victim(y, Class::GlobalUnmarked, pinned, None))
            else {
                return false;
            };
            self.evict(y, v, plan);
        }
        true
    }

    fn all_local_marked(&self, node: NodeId, pinned: &dyn Fn(NodeId, ObjectId) -> bool) -> bool {
        self.stores[&node]
            .local_unmarked
            .iter()
            .all(|(_, o)| pinned(node, *o))
    }

    /// Clear the local marks of `node`: a new local phase.
    fn local_phase(&mut self, node: NodeId) {
        let s = self.stores.get_mut(&node).expect("store");
        for (o, c) in s.objects.iter_mut() {
            if c.local {
                c.local = false;
                s.local_unmarked.insert((c.tick, *o));
            }
        }
        self.stats.local_phases += 1;
    }

    /// Clear every mark: a new global phase, and new local phases everywhere.
    fn global_phase(&mut self) {
        for v in self.global.values_mut() {
            *v = false;
        }
        for s in self.stores.values_mut() {
            for (o, c) in s.objects.iter_mut() {
                c.local = false;
                s.local_unmarked.insert((c.tick, *o));
                s.global_unmarked.insert((c.tick, *o));
            }
        }
        self.unmarked_held = self.holders.len();
        self.stats.global_phases += 1;
    }

    fn is_replica(&self, object: ObjectId) -> bool {
        self.holders.get(&object).is_some_and(|h| h.len() > 1)
    }

    /// The least recently requested object of `class` on `node` (with `replica`, only one
    /// another store holds too, among the first few), skipping pinned ones.
    fn victim(
        &self,
        node: NodeId,
        class: Class,
        pinned: &dyn Fn(NodeId, ObjectId) -> bool,
        replica: Option<bool>,
    ) -> Option<ObjectId> {
        let s = self.stores.get(&node)?;
        let want =
            |o: &ObjectId| !pinned(node, *o) && replica.is_none_or(|r| self.is_replica(*o) == r);
        let limit = if replica.is_some() {
            REPLICA_SCAN
        } else {
            usize::MAX
        };
        match class {
            Class::LocalUnmarked => s
                .local_unmarked
                .iter()
                .take(limit)
                .map(|(_, o)| *o)
                .find(want),
            Class::GlobalUnmarked => s
                .global_unmarked
                .iter()
                .take(limit)
                .map(|(_, o)| *o)
                .find(want),
            Class::Any => {
                let mut all: Vec<(u64, ObjectId)> =
                    s.objects.iter().map(|(o, c)| (c.tick, *o)).collect();
                all.sort_unstable();
                all.into_iter().map(|(_, o)| o).find(want)
            }
        }
    }

    fn evict(&mut self, node: NodeId, object: ObjectId, plan: &mut Plan) {
        self.stats.evicted += 1;
        if self.is_replica(object) {
            self.stats.evicted_replicas += 1;
        }
        self.forget(node, object);
        plan.evict.push((node, object));
    }

    fn move_copy(&mut self, object: ObjectId, from: NodeId, to: NodeId, plan: &mut Plan) {
        self.stats.moved += 1;
        self.forget(from, object);
        self.add(to, object, false);
        plan.moves.push((object, from, to));
    }

    /// Put a copy in the model (unmarked locally unless `local`).
    fn add(&mut self, node: NodeId, object: ObjectId, local: bool) {
        let size = self.sizes.get(&object).copied().unwrap_or(0);
        let tick = self.tick;
        let global = self.is_global_marked(object);
        let Some(s) = self.stores.get_mut(&node) else {
            return;
        };
        if s.objects.contains_key(&object) {
            return;
        }
        s.objects.insert(object, Copy { size, local, tick });
        s.used += size;
        if !local {
            s.local_unmarked.insert((tick, object));
        }
        if !global {
            s.global_unmarked.insert((tick, object));
        }
        let h = self.holders.entry(object).or_default();
        h.push(node);
        if h.len() == 1 && !global {
            self.unmarked_held += 1;
        }
    }

    /// Take a copy out of the model.
    fn forget(&mut self, node: NodeId, object: ObjectId) {
        let Some(s) = self.stores.get_mut(&node) else {
            return;
        };
        let Some(c) = s.objects.remove(&object) else {
            return;
        };
        s.used -= c.size;
        s.local_unmarked.remove(&(c.tick, object));
        s.global_unmarked.remove(&(c.tick, object));
        if let Some(h) = self.holders.get_mut(&object) {
            h.retain(|n| *n != node);
            if h.is_empty() {
                self.holders.remove(&object);
                if !self.is_global_marked(object) {
                    self.unmarked_held -= 1;
                }
            }
        }
    }

    /// `object` was asked for at `node`: mark it at both levels, and make it the most recent.
    fn mark(&mut self, node: NodeId, object: ObjectId) {
        self.mark_global(object);
        let tick = self.tick;
        let s = self.stores.get_mut(&node).expect("store");
        if let Some(c) = s.objects.get_mut(&object) {
            s.local_unmarked.remove(&(c.tick, object));
            c.local = true;
            c.tick = tick;
        }
    }

    fn mark_global(&mut self, object: ObjectId) {
        if self.is_global_marked(object) {
            return;
        }
        self.global.insert(object, true);
        let holders = self.holders.get(&object).cloned().unwrap_or_default();
        if !holders.is_empty() {
            self.unmarked_held -= 1;
        }
        for n in holders {
            let s = self.stores.get_mut(&n).expect("holder is a store");
            let c = s.objects[&object];
            s.global_unmarked.remove(&(c.tick, object));
        }
    }

    /// Check the model's own bookkeeping.
    pub fn check(&self) -> Result<(), String> {
        let mut unmarked = 0;
        for (o, h) in &self.holders {
            if h.is_empty() {
                return Err(format!("{o} listed with no holder"));
            }
            if !self.is_global_marked(*o) {
                unmarked += 1;
            }
            for n in h {
                if !self.holds(*n, *o) {
                    return Err(format!("{o} listed on {n}, which does not hold it"));
                }
            }
        }
        if unmarked != self.unmarked_held {
            return Err(format!(
                "{} objects counted global-unmarked, {unmarked} are",
                self.unmarked_held
            ));
        }
        for (n, s) in &self.stores {
            let used: u64 = s.objects.values().map(|c| c.size).sum();
            if used != s.used {
                return Err(format!("{n}: {} bytes counted, {used} held", s.used));
            }
            for (o, c) in &s.objects {
                if c.local == s.local_unmarked.contains(&(c.tick, *o)) {
                    return Err(format!("{n}: local mark of {o} disagrees"));
                }
                if self.is_global_marked(*o) == s.global_unmarked.contains(&(c.tick, *o)) {
                    return Err(format!("{n}: global mark of {o} disagrees"));
                }
            }
            if s.local_unmarked.len() > s.objects.len() || s.global_unmarked.len() > s.objects.len()
            {
                return Err(format!("{n}: stale entries in a victim class"));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    LocalUnmarked,
    GlobalUnmarked,
    Any,
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: &dyn Fn(NodeId, ObjectId) -> bool = &|_, _| false;

    /// Two stores of 3 one-byte objects each.
    fn two_stores() -> TwoMark {
        let mut m = TwoMark::default();
        m.store(NodeId(0), 3);
        m.store(NodeId(1), 3);
        for o in 0..20 {
            m.size(ObjectId(o), 1);
        }
        m
    }

    fn req(m: &mut TwoMark, node: u32, object: u64) -> Plan {
        let plan = m.request(NodeId(node), ObjectId(object), None, NONE);
        m.check().unwrap();
        plan
    }

    #[test]
    fn a_full_store_begins_a_local_phase_when_everything_it_holds_is_local_marked() {
        let mut m = two_stores();
        for o in 0..3 {
            assert_eq!(req(&mut m, 0, o), Plan::default(), "room for three");
        }
        assert!((0..3).all(|o| m.is_local_marked(NodeId(0), ObjectId(o))));
        // The fourth object at store 0: all three are local-marked (a new local phase), and
        // every object in the system is global-marked (a new global phase): then the least
        // recently requested, o0, goes.
        let plan = req(&mut m, 0, 3);
        assert_eq!(m.stats().local_phases, 1);
        assert_eq!(m.stats().global_phases, 1);
        assert_eq!(plan.evict, vec![(NodeId(0), ObjectId(0))]);
        assert!(m.holds(NodeId(0), ObjectId(3)));
    }

    #[test]
    fn an_s_fault_evicts_a_global_unmarked_object_first() {
        let mut m = two_stores();
        req(&mut m, 0, 0);
        req(&mut m, 0, 1);
        req(&mut m, 0, 2);
        // A new global phase is forced by o3 (as above); o1, o2 are now unmarked at both
        // levels, o3 marked.
        req(&mut m, 0, 3);
        // o1 is asked for again at store 0: marked again.
        req(&mut m, 0, 1);
        // o4 from storage: the global-unmarked o2 goes, not o1 (older tick but marked).
        let plan = req(&mut m, 0, 4);
        assert_eq!(plan.evict, vec![(NodeId(0), ObjectId(2))]);
        assert!(m.is_global_marked(ObjectId(1)));
    }

    #[test]
    fn when_everything_on_a_store_is_global_marked_a_local_unmarked_object_moves_to_a_store_with_room(
    ) {
        let mut m = two_stores();
        // Store 1 holds o10 from an earlier global phase: make a phase boundary first.
        req(&mut m, 1, 10);
        req(&mut m, 0, 0);
        req(&mut m, 0, 1);
        req(&mut m, 0, 2);
        // Store 0 is full; every object in the system (o0, o1, o2, o10) is global-marked.
        // o3 from storage: a new global phase; o0 (oldest, global-unmarked now) is evicted.
        let plan = req(&mut m, 0, 3);
        assert_eq!(plan.evict, vec![(NodeId(0), ObjectId(0))]);
        // Mark o1 and o2 globally again (asked at store 1? no: at store 0, local too).
        req(&mut m, 0, 1);
        req(&mut m, 0, 2);
        // Now everything on store 0 (o3, o1, o2, requested in that order) is global-marked and
        // local-marked. o4 from storage: a local phase at store 0; o3, the least recently
        // requested, is not evicted but moved to store 1, which has room.
        let plan = req(&mut m, 0, 4);
        assert_eq!(plan.moves, vec![(ObjectId(3), NodeId(0), NodeId(1))]);
        assert!(plan.evict.is_empty());
        assert!(m.holds(NodeId(1), ObjectId(3)) && !m.holds(NodeId(0), ObjectId(3)));
        assert!(m.holds(NodeId(0), ObjectId(4)));
    }

    #[test]
    fn a_one_fault_exchanges_the_requested_object_for_a_local_unmarked_one() {
        let mut m = two_stores();
        for o in 0..3 {
            req(&mut m, 0, o);
        }
        for o in 5..8 {
            req(&mut m, 1, o);
        }
        // Store 0 asks for o5, which store 1 holds. Everything on store 0 is local-marked: a
        // local phase; o0 (oldest) goes to store 1, which gives up o5 to make room.
        let plan = m.request(NodeId(0), ObjectId(5), Some(NodeId(1)), NONE);
        m.check().unwrap();
        assert_eq!(plan.moves, vec![(ObjectId(0), NodeId(0), NodeId(1))]);
        assert_eq!(plan.evict, vec![(NodeId(1), ObjectId(5))]);
        assert!(m.holds(NodeId(0), ObjectId(5)) && m.holds(NodeId(1), ObjectId(0)));
        // o5 was local-marked at store 1, so o0 is, in its place.
        assert!(m.is_local_marked(NodeId(1), ObjectId(0)));
    }

    #[test]
    fn a_replica_is_evicted_before_a_last_copy_and_never_moved() {
        let mut m = two_stores();
        for o in 0..3 {
            req(&mut m, 0, o);
        }
        // o2 has a replica on store 1.
        m.cached(NodeId(1), ObjectId(2));
        m.request(NodeId(0), ObjectId(3), None, NONE);
        // New global phase; among global-unmarked o0, o1, o2 the replica o2 goes first.
        let plan = req(&mut m, 0, 4);
        let _ = plan;
        let s = m.stats();
        assert!(s.evicted_replicas >= 1, "{s:?}");
        assert!(!m.holds(NodeId(0), ObjectId(2)), "the replica went");
        assert!(m.holds(NodeId(1), ObjectId(2)), "the other copy stays");
    }

    #[test]
    fn pinned_objects_are_never_chosen() {
        let mut m = two_stores();
        for o in 0..3 {
            req(&mut m, 0, o);
        }
        let pinned: &dyn Fn(NodeId, ObjectId) -> bool = &|_, o| o.0 != 2;
        let plan = m.request(NodeId(0), ObjectId(3), None, pinned);
        assert_eq!(plan.evict, vec![(NodeId(0), ObjectId(2))]);
    }

    #[test]
    fn copies_reported_beyond_the_quota_are_fitted() {
        let mut m = two_stores();
        for o in 0..3 {
            req(&mut m, 0, o);
        }
        m.cached(NodeId(0), ObjectId(9));
        let plan = m.fit(NodeId(0), NONE);
        assert_eq!(plan.evict.len(), 1);
        assert_eq!(m.usage(NodeId(0)), Some((3, 3)));
        m.check().unwrap();
    }
}
