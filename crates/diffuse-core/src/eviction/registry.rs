//! The one list of node-cache eviction policies: each one's name (for `--eviction`, parsing
//! and display) and how its order is built.
//!
//! Adding a policy: write its file beside this one (a type implementing
//! [`EvictionOrder`]), declare it in `eviction/mod.rs` (`mod name;`), and add one line to the
//! `registry!` list below.

use super::fifo::Fifo;
use super::lfu::Lfu;
use super::lru::Lru;
use super::order::EvictionOrder;
use super::random::Random;
use crate::registry::registry;

registry! {
    /// Which object a full cache gives up first.
    pub enum EvictionPolicy: "eviction policy", fn build(seed: u64) -> Box<dyn EvictionOrder>;
    /// A uniformly random object (seeded).
    Random = "random" => |seed| Box::new(Random::new(seed)),
    /// The object cached earliest.
    Fifo = "fifo" => |_| Box::new(Fifo::default()),
    /// The object used least recently (the paper's experiments all use LRU).
    #[default]
    Lru = "lru" => |_| Box::new(Lru::default()),
    /// The object used least often; ties go to the least recently used.
    Lfu = "lfu" => |_| Box::new(Lfu::default()),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_parses_from_its_name_and_displays_it() {
        for p in EvictionPolicy::ALL {
            assert_eq!(p.name().parse::<EvictionPolicy>(), Ok(*p));
            assert_eq!(
                p.to_string().to_uppercase().parse::<EvictionPolicy>(),
                Ok(*p)
            );
        }
        let err = "mru".parse::<EvictionPolicy>().unwrap_err();
        assert!(
            err.starts_with("unknown eviction policy 'mru' (expected random, fifo, lru"),
            "{err}"
        );
        assert_eq!(EvictionPolicy::default(), EvictionPolicy::Lru);
    }
}
