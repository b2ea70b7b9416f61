//! Node-cache eviction policies: which object a full node cache gives up first, within the
//! lowest eviction priority it holds. The cache itself ([`crate::cache::NodeCache`]) keeps the
//! bytes and priorities; an [`EvictionOrder`] ranks what it holds.
//!
//! | module | holds |
//! |---|---|
//! | [`order`] | the [`EvictionOrder`] trait |
//! | [`registry`] | [`EvictionPolicy`]: every policy's name and builder, in one list |
//! | [`random`], [`fifo`], [`lru`], [`lfu`] | the orders |
//! | [`ranked`] | the ordered set and clock FIFO, LRU and LFU share |
//!
//! 2Mark ([`crate::hooks::two_mark::marks`]) is not one of these: it ranks copies across all nodes by its
//! marks and the tick of their last request, in one model of every cache, and plans evictions
//! and moves centrally; the nodes' own orders stay as a guard.
//!
//! Adding a policy: a new file here, its `mod` line below, and one line in [`registry`].

pub mod fifo;
pub mod lfu;
pub mod lru;
pub mod order;
pub mod random;
pub mod ranked;
pub mod registry;

pub use order::{EvictionOrder, Key};
pub use registry::EvictionPolicy;
