//! LRU eviction: the object used least recently goes first (the data diffusion paper's
//! experiments all use it).

use super::order::Key;
use super::ranked::{Clock, Ranked, Rule};

/// Least recently used: the key is the tick of the last arrival or use.
#[derive(Clone, Debug, Default)]
pub struct LruRule;

/// The LRU order.
pub type Lru = Ranked<LruRule>;

impl Rule for LruRule {
    fn arrival(clock: &mut Clock) -> Key {
        (clock.tick(), 0)
    }
    fn used(_: Key, clock: &mut Clock) -> Key {
        (clock.tick(), 0)
    }
}
