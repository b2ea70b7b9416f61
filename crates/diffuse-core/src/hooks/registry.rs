//! The one list of after-dispatch policies: which hooks a core runs, in the order they hear
//! each event, from its settings. Adding a hook: one line in [`registry`].

use super::handoff::CacheHandoff;
use super::hook::Hook;
use super::prefetch::TransferScheduler;
use super::two_mark::TwoMarkHook;
use crate::hooks::handoff::planner::HandoffConfig;
use crate::hooks::prefetch::config::PrefetchConfig;

/// The settings the hooks are chosen and built with (from `CoreConfig`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct HookSettings<'a> {
    /// Cache hand-off on release (`CoreConfig::handoff`).
    pub handoff: Option<&'a HandoffConfig>,
    /// The storage cap, bytes/s (`CoreConfig::storage_cap`): the transfer scheduler's budget.
    pub storage_cap: Option<f64>,
    /// Prefetching within the cap (`CoreConfig::prefetch`).
    pub prefetch: Option<PrefetchConfig>,
    /// 2Mark (`CoreConfig::two_mark`).
    pub two_mark: bool,
    /// The core's own dispatch policy reads through caches (all but FA).
    pub caching: bool,
}

/// The hooks in use, in the order they hear each event: the one list of after-dispatch policies.
pub(crate) fn registry(s: &HookSettings<'_>) -> Vec<Box<dyn Hook>> {
    let mut hooks: Vec<Box<dyn Hook>> = Vec::new();
    if let (Some(cfg), true) = (s.handoff, s.caching) {
        hooks.push(Box::new(CacheHandoff::new(cfg.clone())));
    }
    if let Some(cap) = s.storage_cap {
        hooks.push(Box::new(TransferScheduler::new(cap, s.prefetch)));
    }
    if s.two_mark && s.caching {
        hooks.push(Box::new(TwoMarkHook::new()));
    }
    hooks
}
