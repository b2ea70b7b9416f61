//! LRU eviction: the object used least recently goes first (the data diffusion paper's
//! experiments all use it).

use super::order::{EvictionOrder, Key};
use super::ranked::Ranked;
use crate::ids::ObjectId;

/// Least recently used.
#[derive(Clone, Debug, Default)]
pub struct Lru(Ranked);

impl EvictionOrder for Lru {
    fn insert(&mut self, object: ObjectId, priority: i16, at: Option<Key>) -> Key {
        let key = at.unwrap_or_else(|| (self.0.tick(), 0));
        self.0.insert(object, priority, key)
    }
    fn touch(&mut self, object: ObjectId, priority: i16, key: Key) -> Key {
        let new = (self.0.tick(), 0);
        self.0.rekey(object, priority, key, new)
    }
    fn remove(&mut self, object: ObjectId, priority: i16, key: Key) {
        self.0.remove(object, priority, key);
    }
    fn next_victim(&mut self) -> Option<ObjectId> {
        self.0.first()
    }
    fn hottest_first(&self) -> Box<dyn Iterator<Item = ObjectId> + '_> {
        self.0.last_first()
    }
    fn clear(&mut self) {
        self.0.clear();
    }
    fn boxed_clone(&self) -> Box<dyn EvictionOrder> {
        Box::new(self.clone())
    }
}
