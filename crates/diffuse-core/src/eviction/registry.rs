//! The one list of node-cache eviction policies: each one's name (for `--eviction`, parsing
//! and display) and how its order is built.
//!
//! Adding a policy: write its file beside this one (a type implementing
//! [`EvictionOrder`]), declare it in `eviction/mod.rs` (`mod name;`), and add one line to the
//! `evictions!` list below.

use super::fifo::Fifo;
use super::lfu::Lfu;
use super::lru::Lru;
use super::order::EvictionOrder;
use super::random::Random;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// `evictions! { Variant = "name" => |seed| build, ... }`: the enum [`EvictionPolicy`] with
/// one variant per line, its name and its builder.
macro_rules! evictions {
    ($( $(#[$attr:meta])* $variant:ident = $name:literal => $build:expr, )*) => {
        /// Which object a full cache gives up first.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub enum EvictionPolicy {
            $( $(#[$attr])* #[serde(rename = $name)] $variant, )*
        }

        impl EvictionPolicy {
            /// Every eviction policy, in the order of the list.
            pub const ALL: &'static [EvictionPolicy] = &[$(EvictionPolicy::$variant),*];

            /// Its name, as on the command line.
            pub fn name(self) -> &'static str {
                match self {
                    $(EvictionPolicy::$variant => $name,)*
                }
            }

            /// Its order, empty; `seed` drives a policy that draws at random.
            pub fn build(self, seed: u64) -> Box<dyn EvictionOrder> {
                match self {
                    $(EvictionPolicy::$variant => {
                        let build: fn(u64) -> Box<dyn EvictionOrder> = $build;
                        build(seed)
                    })*
                }
            }
        }
    };
}

evictions! {
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

impl FromStr for EvictionPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.to_ascii_lowercase();
        if let Some(p) = Self::ALL.iter().find(|p| p.name() == lower) {
            return Ok(*p);
        }
        let names: Vec<&str> = Self::ALL.iter().map(|p| p.name()).collect();
        let expected = match names.split_last() {
            Some((last, [])) => last.to_string(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        };
        Err(format!(
            "unknown eviction policy '{s}' (expected {expected})"
        ))
    }
}

impl fmt::Display for EvictionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
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
