//! The ordered set FIFO, LRU and LFU share: held objects by (priority, key), first = next
//! victim, with a logical clock (one tick per arrival or use) that breaks ties the same way in
//! every run.

use super::order::Key;
use crate::ids::ObjectId;
use std::collections::BTreeSet;

/// Held objects by priority, then key; and the clock the keys are made from.
#[derive(Clone, Debug, Default)]
pub struct Ranked {
    order: BTreeSet<(i16, Key, ObjectId)>,
    tick: u64,
}

impl Ranked {
    /// The next tick of the clock.
    pub fn tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Put `object` at `key`.
    pub fn insert(&mut self, object: ObjectId, priority: i16, key: Key) -> Key {
        self.order.insert((priority, key, object));
        key
    }

    /// Move `object` from `old` to `new`.
    pub fn rekey(&mut self, object: ObjectId, priority: i16, old: Key, new: Key) -> Key {
        self.order.remove(&(priority, old, object));
        self.order.insert((priority, new, object));
        new
    }

    /// Take `object` out.
    pub fn remove(&mut self, object: ObjectId, priority: i16, key: Key) {
        self.order.remove(&(priority, key, object));
    }

    /// The first object: the next victim.
    pub fn first(&self) -> Option<ObjectId> {
        self.order.first().map(|(_, _, o)| *o)
    }

    /// From the last victim to the first.
    pub fn last_first(&self) -> Box<dyn Iterator<Item = ObjectId> + '_> {
        Box::new(self.order.iter().rev().map(|(_, _, o)| *o))
    }

    /// Empty (the clock runs on).
    pub fn clear(&mut self) {
        self.order.clear();
    }
}
