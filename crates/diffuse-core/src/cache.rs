//! A node's cache (the paper's *store*): which objects it holds, within a byte quota, and which
//! one it evicts next under its eviction policy (Random, FIFO, LRU or LFU, each an
//! [`EvictionOrder`] in [`crate::eviction`]).
//!
//! Each held object has an eviction *priority* (default 0; the live worker gives it the
//! `eviction_priority` of the last task that read it): objects of a lower priority are all
//! evicted before any of a higher one, and the policy orders objects within a priority.
//!
//! This is bookkeeping only: the simulator's nodes and the live worker's on-disk cache both keep
//! one, so that both evict by the same rules. (The simulator gives every read object priority
//! 0 and written intermediates the highest: its workloads state no `eviction_priority`.)
//! Invariant: `used() <= quota()` after every call, except that an object larger than the
//! quota is never admitted.

use crate::eviction::{EvictionOrder, Key};
use crate::ids::ObjectId;
use rustc_hash::FxHashMap;

pub use crate::eviction::EvictionPolicy;

/// What happened when an object was offered to the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Stored; these objects were evicted to make room (in eviction order).
    Stored(Vec<ObjectId>),
    /// Already present: counted as a use.
    AlreadyPresent,
    /// Larger than the whole quota: not stored, nothing evicted.
    TooLarge,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    size: u64,
    /// Its place in `order`.
    key: Key,
    priority: i16,
}

/// A byte-quota cache of object ids with a pluggable eviction order.
#[derive(Debug)]
pub struct NodeCache {
    policy: EvictionPolicy,
    quota: u64,
    used: u64,
    entries: FxHashMap<ObjectId, Entry>,
    /// The eviction order of what is held: by priority, then as the policy ranks.
    order: Box<dyn EvictionOrder>,
}

impl Clone for NodeCache {
    fn clone(&self) -> Self {
        NodeCache {
            policy: self.policy,
            quota: self.quota,
            used: self.used,
            entries: self.entries.clone(),
            order: self.order.boxed_clone(),
        }
    }
}

impl NodeCache {
    /// An empty cache of `quota` bytes; `seed` drives the Random policy.
    pub fn new(policy: EvictionPolicy, quota: u64, seed: u64) -> Self {
        NodeCache {
            policy,
            quota,
            used: 0,
            entries: FxHashMap::default(),
            order: policy.build(seed),
        }
    }

    /// Bytes held.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Byte quota.
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// Number of objects held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `object` is held.
    pub fn contains(&self, object: ObjectId) -> bool {
        self.entries.contains_key(&object)
    }

    /// Objects held, in no particular order.
    pub fn objects(&self) -> impl Iterator<Item = ObjectId> + '_ {
        self.entries.keys().copied()
    }

    /// Size of `object` if it is held.
    pub fn size_of(&self, object: ObjectId) -> Option<u64> {
        self.entries.get(&object).map(|e| e.size)
    }

    /// The policy's own measure of heat: held objects from the one it would evict last to its
    /// next victim (most recently used first for LRU, most often used for LFU, newest for
    /// FIFO). Empty for Random, which ranks nothing.
    pub fn hottest_first(&self) -> impl Iterator<Item = ObjectId> + '_ {
        self.order.hottest_first()
    }

    /// Eviction policy.
    pub fn policy(&self) -> EvictionPolicy {
        self.policy
    }

    /// Record a use of `object` (a local hit). Returns false if it is not held.
    pub fn touch(&mut self, object: ObjectId) -> bool {
        let Some(e) = self.entries.get_mut(&object) else {
            return false;
        };
        e.key = self.order.touch(object, e.priority, e.key);
        true
    }

    /// The eviction priority of `object`, if held.
    pub fn priority_of(&self, object: ObjectId) -> Option<i16> {
        self.entries.get(&object).map(|e| e.priority)
    }

    /// Give held `object` eviction priority `priority` (its place within the policy's order
    /// is kept). Returns false if it is not held.
    pub fn set_priority(&mut self, object: ObjectId, priority: i16) -> bool {
        let Some(e) = self.entries.get(&object).copied() else {
            return false;
        };
        if e.priority == priority {
            return true;
        }
        self.remove(object);
        self.store(object, e.size, priority, Some(e.key));
        true
    }

    /// Offer `object` of `size` bytes: store it, evicting as the policy says.
    pub fn insert(&mut self, object: ObjectId, size: u64) -> Admission {
        self.insert_at(object, size, 0)
    }

    /// [`NodeCache::insert`] with eviction priority `priority` (a held object keeps its own).
    pub fn insert_at(&mut self, object: ObjectId, size: u64, priority: i16) -> Admission {
        if self.contains(object) {
            self.touch(object);
            return Admission::AlreadyPresent;
        }
        if size > self.quota {
            return Admission::TooLarge;
        }
        let mut evicted = Vec::new();
        while self.used + size > self.quota {
            let victim = self.next_victim().expect("used > 0 implies an entry");
            self.remove(victim);
            evicted.push(victim);
        }
        self.store(object, size, priority, None);
        Admission::Stored(evicted)
    }

    /// Add `object` (room made): under `key` in the order, or as a new arrival.
    fn store(&mut self, object: ObjectId, size: u64, priority: i16, key: Option<Key>) {
        let key = self.order.insert(object, priority, key);
        self.entries.insert(
            object,
            Entry {
                size,
                key,
                priority,
            },
        );
        self.used += size;
    }

    /// The object the policy would evict next.
    pub fn next_victim(&mut self) -> Option<ObjectId> {
        self.order.next_victim()
    }

    /// Drop `object` (evicted, invalidated or found corrupt). Returns its size if it was held.
    pub fn remove(&mut self, object: ObjectId) -> Option<u64> {
        let e = self.entries.remove(&object)?;
        self.used -= e.size;
        self.order.remove(object, e.priority, e.key);
        Some(e.size)
    }

    /// Change the byte quota, evicting as the policy says until the objects fit; returns the
    /// objects evicted, in eviction order.
    pub fn set_quota(&mut self, quota: u64) -> Vec<ObjectId> {
        self.quota = quota;
        let mut evicted = Vec::new();
        while self.used > self.quota {
            let victim = self.next_victim().expect("used > 0 implies an entry");
            self.remove(victim);
            evicted.push(victim);
        }
        evicted
    }

    /// Drop everything (a released node's cache is gone).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.order.clear();
        self.used = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(n: u64) -> ObjectId {
        ObjectId(n)
    }

    fn stored(a: Admission) -> Vec<ObjectId> {
        match a {
            Admission::Stored(v) => v,
            other => panic!("expected Stored, got {other:?}"),
        }
    }

    #[test]
    fn lru_evicts_least_recently_used() {
        let mut c = NodeCache::new(EvictionPolicy::Lru, 30, 0);
        for i in 1..=3 {
            assert!(stored(c.insert(o(i), 10)).is_empty());
        }
        c.touch(o(1));
        assert_eq!(stored(c.insert(o(4), 10)), vec![o(2)]);
        assert_eq!(stored(c.insert(o(5), 10)), vec![o(3)]);
        assert_eq!(stored(c.insert(o(6), 10)), vec![o(1)]);
    }

    #[test]
    fn a_lower_priority_is_evicted_first_under_every_policy() {
        for policy in [
            EvictionPolicy::Random,
            EvictionPolicy::Fifo,
            EvictionPolicy::Lru,
            EvictionPolicy::Lfu,
        ] {
            let mut c = NodeCache::new(policy, 40, 7);
            c.insert_at(o(1), 10, 5);
            c.insert_at(o(2), 10, 0);
            c.insert_at(o(3), 10, 5);
            c.insert_at(o(4), 10, -1);
            c.touch(o(4));
            assert_eq!(stored(c.insert(o(5), 10)), vec![o(4)], "{policy}: -1 first");
            assert_eq!(stored(c.insert(o(6), 10)), vec![o(2)], "{policy}: then 0");
            let third = stored(c.insert(o(7), 10));
            assert!(
                third == vec![o(5)] || third == vec![o(6)],
                "{policy}: {third:?}"
            );
            assert!(
                c.contains(o(1)) && c.contains(o(3)),
                "{policy}: priority 5 stays"
            );
            // Raised, an object leaves the lower class; lowered, it is next.
            c.set_priority(o(1), -3);
            assert_eq!(c.priority_of(o(1)), Some(-3));
            assert_eq!(stored(c.insert(o(8), 10)), vec![o(1)], "{policy}");
        }
    }

    #[test]
    fn a_new_priority_keeps_the_policy_order_within_it() {
        let mut c = NodeCache::new(EvictionPolicy::Lru, 30, 0);
        for i in 1..=3 {
            c.insert_at(o(i), 10, 1);
        }
        c.touch(o(1)); // LRU order now 2, 3, 1
        c.set_priority(o(2), 0);
        c.set_priority(o(2), 1);
        assert_eq!(stored(c.insert_at(o(4), 10, 1)), vec![o(2)]);
        assert_eq!(stored(c.insert_at(o(5), 10, 1)), vec![o(3)]);
    }

    #[test]
    fn fifo_ignores_uses() {
        let mut c = NodeCache::new(EvictionPolicy::Fifo, 30, 0);
        for i in 1..=3 {
            c.insert(o(i), 10);
        }
        c.touch(o(1));
        c.touch(o(1));
        assert_eq!(stored(c.insert(o(4), 10)), vec![o(1)]);
    }

    #[test]
    fn lfu_evicts_least_frequent_then_oldest_use() {
        let mut c = NodeCache::new(EvictionPolicy::Lfu, 30, 0);
        for i in 1..=3 {
            c.insert(o(i), 10);
        }
        c.touch(o(1));
        c.touch(o(1));
        c.touch(o(3));
        // counts: 1->3, 2->1, 3->2
        assert_eq!(stored(c.insert(o(4), 10)), vec![o(2)]);
        // counts: 1->3, 3->2, 4->1
        assert_eq!(stored(c.insert(o(5), 10)), vec![o(4)]);
        c.touch(o(5));
        // 3 and 5 both count 2; 3 was used earlier
        assert_eq!(stored(c.insert(o(6), 10)), vec![o(3)]);
    }

    #[test]
    fn random_is_seeded_and_stays_within_quota() {
        let run = |seed| {
            let mut c = NodeCache::new(EvictionPolicy::Random, 50, seed);
            let mut ev = Vec::new();
            for i in 0..100 {
                ev.extend(stored(c.insert(o(i), 10)));
                assert!(c.used() <= 50);
            }
            ev
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn hottest_first_is_the_reverse_of_the_eviction_order() {
        let mut lru = NodeCache::new(EvictionPolicy::Lru, 100, 0);
        let mut lfu = NodeCache::new(EvictionPolicy::Lfu, 100, 0);
        let mut fifo = NodeCache::new(EvictionPolicy::Fifo, 100, 0);
        let mut random = NodeCache::new(EvictionPolicy::Random, 100, 0);
        for c in [&mut lru, &mut lfu, &mut fifo, &mut random] {
            for i in 1..=3 {
                c.insert(o(i), 10);
            }
            c.touch(o(1));
            c.touch(o(1));
            c.touch(o(2));
        }
        let hot = |c: &NodeCache| c.hottest_first().collect::<Vec<_>>();
        assert_eq!(hot(&lru), vec![o(2), o(1), o(3)]);
        assert_eq!(hot(&lfu), vec![o(1), o(2), o(3)]);
        assert_eq!(hot(&fifo), vec![o(3), o(2), o(1)]);
        assert!(hot(&random).is_empty(), "Random ranks nothing");
        assert_eq!(lru.next_victim(), Some(o(3)));
        assert_eq!(lru.size_of(o(2)), Some(10));
        assert_eq!(lru.size_of(o(9)), None);
    }

    #[test]
    fn big_object_evicts_several_and_too_large_is_refused() {
        let mut c = NodeCache::new(EvictionPolicy::Lru, 30, 0);
        c.insert(o(1), 10);
        c.insert(o(2), 10);
        c.insert(o(3), 10);
        assert_eq!(stored(c.insert(o(4), 25)), vec![o(1), o(2), o(3)]);
        assert_eq!(c.used(), 25);
        assert_eq!(c.insert(o(5), 31), Admission::TooLarge);
        assert_eq!(c.insert(o(4), 25), Admission::AlreadyPresent);
        assert_eq!(c.used(), 25);
    }
}
