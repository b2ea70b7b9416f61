//! FIFO eviction: the object cached earliest goes first; uses change nothing.

use super::order::Key;
use super::ranked::{Clock, Ranked, Rule};

/// First in, first out: the key is the arrival tick.
#[derive(Clone, Debug, Default)]
pub struct FifoRule;

/// The FIFO order.
pub type Fifo = Ranked<FifoRule>;

impl Rule for FifoRule {
    fn arrival(clock: &mut Clock) -> Key {
        (clock.tick(), 0)
    }
    fn used(key: Key, _: &mut Clock) -> Key {
        key
    }
}
