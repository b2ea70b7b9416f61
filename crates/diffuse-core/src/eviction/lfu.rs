//! LFU eviction: the object used least often goes first; ties go to the least recently used.

use super::order::Key;
use super::ranked::{Clock, Ranked, Rule};

/// Least frequently used; the key is (uses, last use).
#[derive(Clone, Debug, Default)]
pub struct LfuRule;

/// The LFU order.
pub type Lfu = Ranked<LfuRule>;

impl Rule for LfuRule {
    fn arrival(clock: &mut Clock) -> Key {
        (1, clock.tick())
    }
    fn used(key: Key, clock: &mut Clock) -> Key {
        (key.0 + 1, clock.tick())
    }
}
