//! What a task asks for and what a node has: cores, memory, GPUs, disk.
//!
//! A task runs only on a node whose free resources cover its request, and holds them while it
//! runs. A node's slots are its cores: a task that asks for nothing else takes one core, as a
//! task took one slot before resources existed, so the policies' behaviour for such tasks is
//! unchanged.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Amounts of each resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Resources {
    /// Cores (slots).
    pub cores: u32,
    /// Memory, bytes.
    pub memory: u64,
    /// GPUs.
    pub gpus: u32,
    /// Scratch disk for the task's directory, bytes.
    pub disk: u64,
}

impl Resources {
    /// What a task asks for by default: one core, nothing else.
    pub const ONE_CORE: Resources = Resources {
        cores: 1,
        memory: 0,
        gpus: 0,
        disk: 0,
    };

    /// A node of `cores` cores whose memory and disk are not counted, and without GPUs.
    pub fn cores_only(cores: u32) -> Resources {
        Resources {
            cores,
            memory: u64::MAX,
            gpus: 0,
            disk: u64::MAX,
        }
    }

    /// Whether a request of `self` fits in `free`.
    pub fn fits_in(&self, free: &Resources) -> bool {
        self.cores <= free.cores
            && self.memory <= free.memory
            && self.gpus <= free.gpus
            && self.disk <= free.disk
    }

    /// `self` plus `other` (saturating).
    pub fn plus(&self, other: &Resources) -> Resources {
        Resources {
            cores: self.cores.saturating_add(other.cores),
            memory: self.memory.saturating_add(other.memory),
            gpus: self.gpus.saturating_add(other.gpus),
            disk: self.disk.saturating_add(other.disk),
        }
    }

    /// `self` less `other` (saturating at zero).
    pub fn minus(&self, other: &Resources) -> Resources {
        Resources {
            cores: self.cores.saturating_sub(other.cores),
            memory: self.memory.saturating_sub(other.memory),
            gpus: self.gpus.saturating_sub(other.gpus),
            disk: self.disk.saturating_sub(other.disk),
        }
    }

    /// Whether this is the default request (one core and nothing else): such a task fits any
    /// node with a free core.
    pub fn is_one_core(&self) -> bool {
        *self == Resources::ONE_CORE
    }
}

impl Default for Resources {
    fn default() -> Self {
        Resources::ONE_CORE
    }
}

/// A byte count as a person writes it in a task file: `512B`, `100MB`, `1.5GB` (powers of 1000,
/// at most two decimals).
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        for (unit, m) in [("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)] {
            if b >= m {
                return write!(f, "{}{unit}", (b / m * 100.0).round() / 100.0);
            }
        }
        write!(f, "{b}B")
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} core{}",
            self.cores,
            if self.cores == 1 { "" } else { "s" }
        )?;
        if self.memory > 0 && self.memory != u64::MAX {
            write!(f, ", {} of memory", Bytes(self.memory))?;
        }
        if self.gpus > 0 {
            write!(
                f,
                ", {} GPU{}",
                self.gpus,
                if self.gpus == 1 { "" } else { "s" }
            )?;
        }
        if self.disk > 0 && self.disk != u64::MAX {
            write!(f, ", {} of disk", Bytes(self.disk))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_fits_when_every_resource_does() {
        let node = Resources {
            cores: 4,
            memory: 8 << 30,
            gpus: 1,
            disk: 100 << 30,
        };
        assert!(Resources::ONE_CORE.fits_in(&node));
        let big = Resources {
            cores: 2,
            memory: 6 << 30,
            gpus: 1,
            disk: 0,
        };
        assert!(big.fits_in(&node));
        let left = node.minus(&big);
        assert!(!big.fits_in(&left), "the memory is taken");
        assert!(Resources::ONE_CORE.fits_in(&left));
        assert_eq!(left.plus(&big), node);
        assert!(!Resources {
            gpus: 1,
            ..Resources::ONE_CORE
        }
        .fits_in(&Resources::cores_only(8)));
    }

    #[test]
    fn a_request_reads_as_a_person_writes_it() {
        let r = Resources {
            cores: 2,
            memory: 1_500_000_000,
            gpus: 1,
            disk: 100_000_000,
        };
        assert_eq!(
            r.to_string(),
            "2 cores, 1.5GB of memory, 1 GPU, 100MB of disk"
        );
        assert_eq!(Resources::ONE_CORE.to_string(), "1 core");
        assert_eq!(Bytes(512).to_string(), "512B");
        assert_eq!(Bytes(1_234_567).to_string(), "1.23MB");
    }
}
