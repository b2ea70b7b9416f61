//! MixApart's data transfer scheduler (mixapart-cache-over-shared-storage.txt, Algorithm 2):
//! its settings and counters. The planning is an after-dispatch hook of the core
//! (`hooks/prefetch/mod.rs`); MixApart's compute scheduler is a dispatch policy
//! ([`crate::dispatch::tiers`]).

/// MixApart's data transfer scheduler (Algorithm 2): settings. With it (and a
/// [`crate::CoreConfig::storage_cap`], its budget), the core plans [`crate::Action::Prefetch`]es
/// of the inputs of the tasks expected to run next, so that their data is on a node (or on its
/// way) when a slot frees.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PrefetchConfig {
    /// Most of a node's cache quota that prefetched objects no task has read yet may take, in
    /// (0, 1]: what keeps prefetching from evicting what queued tasks will read.
    pub cache_share: f64,
    /// Most queued tasks (in the window, in the order they are expected to run) whose inputs
    /// are looked at per plan.
    pub lookahead: usize,
}

impl Default for PrefetchConfig {
    fn default() -> Self {
        PrefetchConfig {
            cache_share: 0.25,
            lookahead: 1024,
        }
    }
}

impl PrefetchConfig {
    /// Check the ranges; the message names the setting.
    pub fn check(&self) -> Result<(), String> {
        if !(self.cache_share > 0.0 && self.cache_share <= 1.0) {
            return Err(format!(
                "prefetch cache share {} is outside (0, 1]",
                self.cache_share
            ));
        }
        if self.lookahead == 0 {
            return Err("prefetch lookahead must be at least 1".into());
        }
        Ok(())
    }
}

/// What the transfer scheduler did, for reports and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PrefetchStats {
    /// Prefetches asked for.
    pub issued: u64,
    /// Bytes asked for.
    pub issued_bytes: u64,
    /// Prefetches whose copy landed.
    pub landed: u64,
    /// Prefetches that failed (the driver said so, or the node left).
    pub failed: u64,
    /// Prefetched objects a task then read on that node.
    pub read: u64,
    /// Prefetched objects evicted before any task read them (wasted).
    pub evicted_unread: u64,
}
