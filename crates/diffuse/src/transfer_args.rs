//! MixApart's storage cap and transfer scheduler on the command line, shared by `dispatcher`,
//! `run` and `sim`: `--storage-bandwidth-cap`, `--prefetch`, `--prefetch-share`.

use crate::size::parse_size;
use clap::Args;
use diffuse_core::{CoreConfig, PrefetchConfig};

/// `--storage-bandwidth-cap`, `--prefetch`, `--prefetch-share`.
#[derive(Args, Debug, Clone)]
pub struct TransferArgs {
    /// Most bytes per second the whole pool may read from persistent storage, e.g. 100MB/s:
    /// each worker's storage reads (its tasks' and its prefetches) are throttled to its share,
    /// which follows where reads are under way. Protects the storage's other users.
    #[arg(long, value_name = "RATE", value_parser = rate)]
    storage_bandwidth_cap: Option<f64>,
    /// Prefetch the inputs of the tasks expected to run next from storage into workers'
    /// caches, within --storage-bandwidth-cap, so their data is there (or on its way) when a
    /// slot frees (MixApart's transfer scheduler). Needs the cap, its budget.
    #[arg(long)]
    prefetch: bool,
    /// With --prefetch: the most of a worker's cache that prefetched objects no task has read
    /// yet may take, in (0, 1].
    #[arg(long, default_value_t = 0.25, value_parser = share, allow_hyphen_values = true)]
    prefetch_share: f64,
}

/// A rate such as `100MB/s` (the `/s` is optional), in bytes per second, more than zero.
pub fn rate(s: &str) -> Result<f64, String> {
    let b = parse_size(s.strip_suffix("/s").unwrap_or(s))?;
    if b == 0 {
        return Err(format!("'{s}' must be more than zero"));
    }
    Ok(b as f64)
}

fn share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(format!("'{s}' must be a number in (0, 1]")),
    }
}

impl TransferArgs {
    /// The settings checked together; the message names the flags.
    pub fn check(&self) -> Result<(), String> {
        if self.prefetch && self.storage_bandwidth_cap.is_none() {
            return Err("--prefetch needs --storage-bandwidth-cap: the transfer scheduler plans its transfers within that budget".into());
        }
        Ok(())
    }

    /// The cap, bytes per second.
    pub fn storage_cap(&self) -> Option<f64> {
        self.storage_bandwidth_cap
    }

    /// The transfer scheduler's settings, when on.
    pub fn prefetch(&self) -> Option<PrefetchConfig> {
        self.prefetch.then_some(PrefetchConfig {
            cache_share: self.prefetch_share,
            ..PrefetchConfig::default()
        })
    }

    /// Set the core's cap and transfer scheduler.
    pub fn apply(&self, cfg: &mut CoreConfig) {
        cfg.storage_cap = self.storage_cap();
        cfg.prefetch = self.prefetch();
    }
}
