//! Random eviction: a uniformly random object of the lowest priority held, from a seeded
//! ChaCha8, so a run is the same every time.

use super::order::{EvictionOrder, Key};
use crate::ids::ObjectId;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// A uniformly random victim (seeded).
#[derive(Clone, Debug)]
pub struct Random {
    /// Dense lists of the held objects, by priority, for a uniform choice.
    slots: BTreeMap<i16, Vec<ObjectId>>,
    /// Each held object's index in its priority's list.
    at: FxHashMap<ObjectId, usize>,
    rng: ChaCha8Rng,
}

impl Random {
    /// Nothing held; `seed` drives the choices.
    pub fn new(seed: u64) -> Random {
        Random {
            slots: BTreeMap::new(),
            at: FxHashMap::default(),
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }
}

impl EvictionOrder for Random {
    fn insert(&mut self, object: ObjectId, priority: i16, _: Option<Key>) -> Key {
        let slots = self.slots.entry(priority).or_default();
        slots.push(object);
        self.at.insert(object, slots.len() - 1);
        (0, 0)
    }
    fn touch(&mut self, _: ObjectId, _: i16, key: Key) -> Key {
        key
    }
    fn remove(&mut self, object: ObjectId, priority: i16, _: Key) {
        let Some(idx) = self.at.remove(&object) else {
            return;
        };
        let slots = self.slots.get_mut(&priority).expect("priority has slots");
        slots.swap_remove(idx);
        if let Some(moved) = slots.get(idx).copied() {
            self.at.insert(moved, idx);
        }
        if slots.is_empty() {
            self.slots.remove(&priority);
        }
    }
    fn next_victim(&mut self) -> Option<ObjectId> {
        let (_, slots) = self.slots.iter().find(|(_, s)| !s.is_empty())?;
        Some(slots[self.rng.random_range(0..slots.len())])
    }
    fn hottest_first(&self) -> Box<dyn Iterator<Item = ObjectId> + '_> {
        Box::new(std::iter::empty())
    }
    fn clear(&mut self) {
        self.slots.clear();
        self.at.clear();
    }
    fn boxed_clone(&self) -> Box<dyn EvictionOrder> {
        Box::new(self.clone())
    }
}
