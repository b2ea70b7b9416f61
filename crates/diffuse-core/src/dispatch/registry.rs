//! The one list of dispatch policies: each one's name (for `--policy`, a job's `job_policy`,
//! parsing and display) and how it is built from the core's settings ([`PolicyParams`]).
//!
//! Adding a policy: write its file beside this one (a type implementing
//! [`DispatchPolicy`]), declare it in `dispatch/mod.rs`
//! (`mod name;`), and add one line to the `policies!` list below. [`PolicyKind`], its
//! parsing, display, serde form and [`PolicyKind::ALL`] follow from that line.

use super::dad::{DadConfig, DataAwareDispatch};
use super::fa::FirstAvailable;
use super::gcc::GoodCacheCompute;
use super::mch::MaxCacheHit;
use super::mcu::MaxComputeUtil;
use super::policy::DispatchPolicy;
use super::tiers::LocalityTiers;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What the built-in policies are built with: the parameters of the core's settings that a
/// policy reads (`CoreConfig::policy_params`). The default is `CoreConfig`'s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PolicyParams {
    /// GCC's utilisation threshold (`CoreConfig::threshold`).
    pub threshold: f64,
    /// DAD's parameters (`CoreConfig::dad`).
    pub dad: DadConfig,
}

impl Default for PolicyParams {
    fn default() -> Self {
        PolicyParams {
            threshold: 0.9,
            dad: DadConfig::default(),
        }
    }
}

/// `policies! { Variant = "name" => |params| build, ... }`: the enum [`PolicyKind`] with one
/// variant per line, its name and its builder.
macro_rules! policies {
    ($( $(#[$attr:meta])* $variant:ident = $name:literal => $build:expr, )*) => {
        /// The built-in policies by name, for configuration.
        #[derive(
            Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize,
            Deserialize,
        )]
        pub enum PolicyKind {
            $( $(#[$attr])* #[serde(rename = $name)] $variant, )*
        }

        impl PolicyKind {
            /// Every built-in policy, in the order of the list.
            pub const ALL: &'static [PolicyKind] = &[$(PolicyKind::$variant),*];

            /// Its name, as on the command line.
            pub fn name(self) -> &'static str {
                match self {
                    $(PolicyKind::$variant => $name,)*
                }
            }

            /// Build the policy with `params` (GCC's threshold, DAD's parameters).
            pub fn build(self, params: &PolicyParams) -> Box<dyn DispatchPolicy> {
                match self {
                    $(PolicyKind::$variant => {
                        let build: fn(&PolicyParams) -> Box<dyn DispatchPolicy> = $build;
                        build(params)
                    })*
                }
            }
        }
    };
}

policies! {
    /// First-available.
    Fa = "fa" => |_| Box::new(FirstAvailable),
    /// Max-compute-util.
    Mcu = "mcu" => |_| Box::new(MaxComputeUtil),
    /// Max-cache-hit.
    Mch = "mch" => |_| Box::new(MaxCacheHit),
    /// Good-cache-compute.
    #[default]
    Gcc = "gcc" => |p| Box::new(GoodCacheCompute { threshold: p.threshold }),
    /// DAD's score (file locality and load) with a bounded delay ([`crate::dad`]).
    Dad = "dad" => |p| Box::new(DataAwareDispatch::new(p.dad)),
    /// MixApart's locality tiers: node-local, rack-local, in transfer, cached anywhere,
    /// storage ([`super::tiers`]).
    MixApart = "mixapart" => |_| Box::new(LocalityTiers),
}

impl PolicyKind {
    /// Whether the policy uses cached data (all but FA): what its built policy says.
    pub fn uses_locality(self) -> bool {
        self.build(&PolicyParams::default()).uses_locality()
    }
}

impl FromStr for PolicyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.to_ascii_lowercase();
        if let Some(kind) = Self::ALL.iter().find(|k| k.name() == lower) {
            return Ok(*kind);
        }
        let names: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
        let expected = match names.split_last() {
            Some((last, [])) => last.to_string(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        };
        Err(format!("unknown policy '{s}' (expected {expected})"))
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_parses_from_its_name_and_displays_it() {
        for kind in PolicyKind::ALL {
            assert_eq!(kind.name().parse::<PolicyKind>(), Ok(*kind));
            assert_eq!(
                kind.to_string().to_uppercase().parse::<PolicyKind>(),
                Ok(*kind)
            );
        }
        let err = "lru".parse::<PolicyKind>().unwrap_err();
        assert!(
            err.starts_with("unknown policy 'lru' (expected fa, mcu, mch, gcc, dad"),
            "{err}"
        );
        assert_eq!(PolicyKind::default(), PolicyKind::Gcc);
        assert!(!PolicyKind::Fa.uses_locality() && PolicyKind::Dad.uses_locality());
    }
}
