//! The one list of dispatch policies: each one's name (for `--policy`, a job's `job_policy`,
//! parsing and display) and how it is built from the core's settings ([`PolicyParams`]).
//!
//! Adding a policy: write its file beside this one (a type implementing
//! [`DispatchPolicy`]), declare it in `dispatch/mod.rs`
//! (`mod name;`), and add one line to the `registry!` list below. [`PolicyKind`], its
//! parsing, display, serde form and [`PolicyKind::ALL`] follow from that line.

use super::dad::{DadConfig, DataAwareDispatch};
use super::fa::FirstAvailable;
use super::gcc::GoodCacheCompute;
use super::mch::MaxCacheHit;
use super::mcu::MaxComputeUtil;
use super::policy::DispatchPolicy;
use super::tiers::LocalityTiers;
use crate::registry::registry;

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

registry! {
    /// The built-in policies by name, for configuration.
    #[derive(PartialOrd, Ord, Hash)]
    pub enum PolicyKind: "policy", fn build(params: &PolicyParams) -> Box<dyn DispatchPolicy>;
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
