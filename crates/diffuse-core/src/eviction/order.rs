//! The eviction order trait: how a node cache ranks the objects it holds.

use crate::ids::ObjectId;
use std::fmt;

/// An object's place in its order, kept by the cache with the object and handed back to the
/// order on every call about it (so an order needs no map of its own).
pub type Key = (u64, u64);

/// A node cache's eviction order: which held object goes first.
///
/// Objects carry an eviction priority: every object of a lower priority is evicted before any
/// of a higher one, and the order ranks objects within a priority. The cache
/// ([`crate::cache::NodeCache`]) keeps each object's size, priority and [`Key`]; the order keeps
/// what it ranks them by. A policy's name (for `--eviction`) and how it is built are written
/// once, in [`super::registry`].
pub trait EvictionOrder: fmt::Debug + Send {
    /// `object` of `priority` is now held; returns its key. `at`: the key it had, when it only
    /// changes priority (it keeps its place within the order); None for a new arrival.
    fn insert(&mut self, object: ObjectId, priority: i16, at: Option<Key>) -> Key;
    /// A use of held `object` (a local hit); returns its new key.
    fn touch(&mut self, object: ObjectId, priority: i16, key: Key) -> Key;
    /// Held `object` is gone (evicted, invalidated, corrupt, or changing priority).
    fn remove(&mut self, object: ObjectId, priority: i16, key: Key);
    /// The object to evict next.
    fn next_victim(&mut self) -> Option<ObjectId>;
    /// Held objects from the one it would evict last to its next victim (empty when the order
    /// ranks nothing, as Random).
    fn hottest_first(&self) -> Box<dyn Iterator<Item = ObjectId> + '_>;
    /// Nothing is held any more.
    fn clear(&mut self);
    /// A copy, for a cache that is cloned.
    fn boxed_clone(&self) -> Box<dyn EvictionOrder>;
}
