//! What the emulated workers share: the settings ([`EmulatorConfig`]) and the counters of what
//! they did ([`Tally`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// How to emulate the pool.
#[derive(Clone, Debug)]
pub struct EmulatorConfig {
    /// Dispatcher URL (`http://host:port`).
    pub dispatcher: String,
    /// The worker token.
    pub token: String,
    /// How many workers.
    pub workers: u32,
    /// Slots of each.
    pub slots: u32,
    /// Worker names are `{prefix}{index}`.
    pub prefix: String,
    /// Sessions opened per second while connecting (a real pool does not connect in one
    /// instant either, and a burst of thousands overflows the listen backlog).
    pub connect_rate: f64,
    /// Whether a task's `compute_s` is slept (true) or every task ends at once (false).
    pub honour_compute: bool,
}

/// Counters the sessions share.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) connected: AtomicU64,
    pub(super) finished: AtomicU64,
    pub(super) cancelled: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) first_error: std::sync::Mutex<Option<String>>,
}

impl Tally {
    pub(super) fn error(&self, e: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().expect("tally lock");
        if first.is_none() {
            tracing::warn!("emulated worker: {e}");
            *first = Some(e);
        }
    }
}
