//! The ordered set FIFO, LRU and LFU share: held objects by (priority, key), first = next
//! victim, with a logical clock (one tick per arrival or use) that breaks ties the same way in
//! every run. An order of this kind differs from the others only in its [`Rule`]: the key an
//! object arrives with and the key a use gives it; [`Ranked`] with a rule is the
//! [`EvictionOrder`].

use super::order::{EvictionOrder, Key};
use crate::ids::ObjectId;
use std::collections::BTreeSet;
use std::fmt::Debug;
use std::marker::PhantomData;

/// What sets one ranked order apart from another.
pub trait Rule: Clone + Debug + Default + Send + 'static {
    /// The key of an object cached now; `clock` gives the next tick.
    fn arrival(clock: &mut Clock) -> Key;
    /// The key after a use of an object at `key` (`key` itself: a use changes nothing).
    fn used(key: Key, clock: &mut Clock) -> Key;
}

/// The logical clock: one tick per arrival or use that asks for one.
#[derive(Clone, Debug, Default)]
pub struct Clock(u64);

impl Clock {
    /// The next tick.
    pub fn tick(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}

/// Held objects by priority, then key, ranked by the rule `R`; and the clock the keys are made
/// from.
#[derive(Clone, Debug, Default)]
pub struct Ranked<R> {
    order: BTreeSet<(i16, Key, ObjectId)>,
    clock: Clock,
    rule: PhantomData<R>,
}

impl<R: Rule> EvictionOrder for Ranked<R> {
    fn insert(&mut self, object: ObjectId, priority: i16, at: Option<Key>) -> Key {
        let key = at.unwrap_or_else(|| R::arrival(&mut self.clock));
        self.order.insert((priority, key, object));
        key
    }
    fn touch(&mut self, object: ObjectId, priority: i16, key: Key) -> Key {
        let new = R::used(key, &mut self.clock);
        if new != key {
            self.order.remove(&(priority, key, object));
            self.order.insert((priority, new, object));
        }
        new
    }
    fn remove(&mut self, object: ObjectId, priority: i16, key: Key) {
        self.order.remove(&(priority, key, object));
    }
    fn next_victim(&mut self) -> Option<ObjectId> {
        self.order.first().map(|(_, _, o)| *o)
    }
    fn hottest_first(&self) -> Box<dyn Iterator<Item = ObjectId> + '_> {
        Box::new(self.order.iter().rev().map(|(_, _, o)| *o))
    }
    fn clear(&mut self) {
        // The clock runs on.
        self.order.clear();
    }
    fn boxed_clone(&self) -> Box<dyn EvictionOrder> {
        Box::new(self.clone())
    }
}
