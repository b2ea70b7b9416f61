//! Property tests of the core's data structures: random operations on `NodeCache` and
//! `LocationIndex` against reference models. (The core against a shadow model is in
//! properties.rs.)

use diffuse_core::index::LocationIndex;
use diffuse_core::{Admission, EvictionPolicy, NodeCache, NodeId, ObjectId};
use proptest::prelude::*;
use std::collections::HashMap;

// ======================================================================================
// NodeCache against a reference model
// ======================================================================================

#[derive(Clone, Debug)]
enum CacheOp {
    Insert(u64, u64),
    Touch(u64),
    Remove(u64),
    Clear,
}

fn cache_op() -> impl Strategy<Value = CacheOp> {
    prop_oneof![
        6 => (0..12u64, 0..40u64).prop_map(|(o, s)| CacheOp::Insert(o, s)),
        3 => (0..12u64).prop_map(CacheOp::Touch),
        2 => (0..12u64).prop_map(CacheOp::Remove),
        1 => Just(CacheOp::Clear),
    ]
}

#[derive(Clone, Copy, Debug)]
struct RefEntry {
    size: u64,
    inserted: u64,
    last_use: u64,
    uses: u64,
}

/// The eviction order each policy documents: smallest key goes first (None for Random).
fn victim_key(policy: EvictionPolicy, e: &RefEntry) -> Option<(u64, u64)> {
    match policy {
        EvictionPolicy::Random => None,
        EvictionPolicy::Fifo => Some((e.inserted, 0)),
        EvictionPolicy::Lru => Some((e.last_use, 0)),
        EvictionPolicy::Lfu => Some((e.uses, e.last_use)),
    }
}

fn ref_victim(policy: EvictionPolicy, held: &HashMap<ObjectId, RefEntry>) -> Option<ObjectId> {
    held.iter()
        .min_by_key(|(_, e)| victim_key(policy, e))
        .map(|(o, _)| *o)
}

fn check_cache_ops(policy: EvictionPolicy, quota: u64, seed: u64, ops: &[CacheOp]) {
    let mut cache = NodeCache::new(policy, quota, seed);
    let mut held: HashMap<ObjectId, RefEntry> = HashMap::new();
    let mut clock = 0u64;
    for op in ops {
        clock += 1;
        match *op {
            CacheOp::Insert(o, size) => {
                let object = ObjectId(o);
                let got = cache.insert(object, size);
                if let Some(e) = held.get_mut(&object) {
                    assert_eq!(got, Admission::AlreadyPresent);
                    e.last_use = clock;
                    e.uses += 1;
                } else if size > quota {
                    assert_eq!(got, Admission::TooLarge);
                } else {
                    let Admission::Stored(evicted) = got else {
                        panic!("{object} of {size} bytes not stored: {got:?}")
                    };
                    let mut used: u64 = held.values().map(|e| e.size).sum();
                    for v in &evicted {
                        assert!(used + size > quota, "{v} evicted though {object} fitted");
                        if policy != EvictionPolicy::Random {
                            assert_eq!(Some(*v), ref_victim(policy, &held), "{policy} victim");
                        }
                        let e = held.remove(v).unwrap_or_else(|| panic!("{v} not held"));
                        used -= e.size;
                    }
                    assert!(used + size <= quota);
                    held.insert(
                        object,
                        RefEntry {
                            size,
                            inserted: clock,
                            last_use: clock,
                            uses: 1,
                        },
                    );
                }
            }
            CacheOp::Touch(o) => {
                let object = ObjectId(o);
                assert_eq!(cache.touch(object), held.contains_key(&object));
                if let Some(e) = held.get_mut(&object) {
                    e.last_use = clock;
                    e.uses += 1;
                }
            }
            CacheOp::Remove(o) => {
                let object = ObjectId(o);
                assert_eq!(cache.remove(object), held.remove(&object).map(|e| e.size));
            }
            CacheOp::Clear => {
                cache.clear();
                held.clear();
            }
        }
        let sum: u64 = held.values().map(|e| e.size).sum();
        assert!(cache.used() <= cache.quota());
        assert_eq!(cache.quota(), quota);
        assert_eq!(cache.used(), sum);
        assert_eq!(cache.len(), held.len());
        assert_eq!(cache.is_empty(), held.is_empty());
        let mut objects: Vec<ObjectId> = cache.objects().collect();
        objects.sort();
        let mut want: Vec<ObjectId> = held.keys().copied().collect();
        want.sort();
        assert_eq!(objects, want);
        for o in 0..12 {
            assert_eq!(cache.contains(ObjectId(o)), held.contains_key(&ObjectId(o)));
        }
        if policy != EvictionPolicy::Random {
            assert_eq!(cache.next_victim(), ref_victim(policy, &held));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Under every eviction policy: used() <= quota(), used() is the sum of the held objects'
    /// sizes, and (for the deterministic policies) victims come in the documented order.
    #[test]
    fn node_cache_respects_quota_and_policy(
        quota in 0..100u64,
        seed in any::<u64>(),
        ops in prop::collection::vec(cache_op(), 1..80),
    ) {
        for policy in [
            EvictionPolicy::Random,
            EvictionPolicy::Fifo,
            EvictionPolicy::Lru,
            EvictionPolicy::Lfu,
        ] {
            check_cache_ops(policy, quota, seed, &ops);
        }
    }
}

// ======================================================================================
// LocationIndex against a shadow map
// ======================================================================================

#[derive(Clone, Debug)]
enum IndexOp {
    Add(u32, u64),
    Remove(u32, u64),
    RemoveNode(u32),
}

fn index_op() -> impl Strategy<Value = IndexOp> {
    prop_oneof![
        5 => (0..4u32, 0..6u64).prop_map(|(n, o)| IndexOp::Add(n, o)),
        3 => (0..4u32, 0..6u64).prop_map(|(n, o)| IndexOp::Remove(n, o)),
        1 => (0..4u32).prop_map(IndexOp::RemoveNode),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Both directions of the index agree with a shadow object -> holders map (holders in the
    /// order they reported).
    #[test]
    fn location_index_matches_shadow_map(ops in prop::collection::vec(index_op(), 1..100)) {
        let mut index = LocationIndex::new();
        let mut shadow: HashMap<ObjectId, Vec<NodeId>> = HashMap::new();
        for op in &ops {
            match *op {
                IndexOp::Add(n, o) => {
                    let (node, object) = (NodeId(n), ObjectId(o));
                    let hs = shadow.entry(object).or_default();
                    let new = !hs.contains(&node);
                    if new {
                        hs.push(node);
                    }
                    prop_assert_eq!(index.add(node, object), new);
                }
                IndexOp::Remove(n, o) => {
                    let (node, object) = (NodeId(n), ObjectId(o));
                    let hs = shadow.entry(object).or_default();
                    let had = hs.contains(&node);
                    hs.retain(|h| *h != node);
                    prop_assert_eq!(index.remove(node, object), had);
                }
                IndexOp::RemoveNode(n) => {
                    let node = NodeId(n);
                    let mut want: Vec<ObjectId> = shadow
                        .iter()
                        .filter(|(_, hs)| hs.contains(&node))
                        .map(|(o, _)| *o)
                        .collect();
                    want.sort();
                    for hs in shadow.values_mut() {
                        hs.retain(|h| *h != node);
                    }
                    let mut got = index.remove_node(node);
                    got.sort();
                    prop_assert_eq!(got, want);
                    prop_assert_eq!(index.count(node), 0);
                }
            }
            prop_assert!(index.check().is_ok(), "{:?}", index.check());
            let mut replicas = 0;
            for o in 0..6 {
                let object = ObjectId(o);
                let want = shadow.get(&object).cloned().unwrap_or_default();
                prop_assert_eq!(index.holders(object), want.as_slice());
                replicas += want.len();
            }
            prop_assert_eq!(index.replicas(), replicas);
            for n in 0..4 {
                let node = NodeId(n);
                let mut got: Vec<ObjectId> = index.contents(node).collect();
                got.sort();
                let mut want: Vec<ObjectId> = shadow
                    .iter()
                    .filter(|(_, hs)| hs.contains(&node))
                    .map(|(o, _)| *o)
                    .collect();
                want.sort();
                prop_assert_eq!(index.count(node), want.len());
                for o in 0..6 {
                    prop_assert_eq!(index.holds(node, ObjectId(o)), want.contains(&ObjectId(o)));
                }
                prop_assert_eq!(got, want);
            }
        }
    }
}
