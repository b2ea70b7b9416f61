//! `diffuse emulate`: many workers in one process, speaking the real protocol, for measuring a
//! dispatcher at a scale this machine cannot run as processes (Falkon measured its dispatcher
//! the same way, with emulated executors).
//!
//! Each emulated worker is one WebSocket session (`session`): it says hello with its slots,
//! "runs" each assigned task for the task's `compute_s` (0 when it gives none) on a timer
//! instead of spawning it, reports it as a worker does (a `Cached` for each input it was told
//! to fetch, before the `Finished`), answers cancels, drops, heartbeats and input lookups, and
//! leaves (`Leaving`) when the process is stopped. It reads no input and writes no output:
//! what it measures is the dispatcher, its scheduler, journal and sessions, not the data path.
//!
//! | module | what it decides |
//! |---|---|
//! | this one | the settings, starting the sessions (paced), the summary |
//! | `shared` | what the sessions share: the settings and the counters |
//! | `session` | one emulated worker: hello, the timers that stand for its tasks, reports |

mod session;
mod shared;

pub use shared::EmulatorConfig;
use shared::Tally;

use crate::storage::Storage;
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// What the emulated pool did, printed as JSON when it stops.
#[derive(Clone, Debug, Default, Serialize)]
pub struct EmulatorSummary {
    /// Workers asked for.
    pub workers: u32,
    /// Sessions that were welcomed.
    pub connected: u64,
    /// Seconds from start until every session was welcomed (or gave up).
    pub connect_s: f64,
    /// Tasks reported finished.
    pub finished: u64,
    /// Tasks reported cancelled.
    pub cancelled: u64,
    /// Sessions that ended with an error (refused, lost).
    pub errors: u64,
    /// The first error seen, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

/// Run the emulated pool until every session has ended: told to shut down by the dispatcher,
/// lost, or stopped when `stop` turns true (each session then says `Leaving`, as a worker does
/// when signalled, so its tasks run elsewhere).
pub async fn run(cfg: EmulatorConfig, stop: watch::Receiver<bool>) -> EmulatorSummary {
    let cfg = Arc::new(cfg);
    let tally = Arc::new(Tally::default());
    let storage = Arc::new(Storage::default());
    let started = Instant::now();
    let mut sessions = tokio::task::JoinSet::new();
    let pace = Duration::from_secs_f64(1.0 / cfg.connect_rate.max(1.0));
    let mut tick = tokio::time::interval(pace);
    for i in 0..cfg.workers {
        if *stop.borrow() {
            break;
        }
        tick.tick().await;
        let (cfg, tally, storage, stop) =
            (cfg.clone(), tally.clone(), storage.clone(), stop.clone());
        sessions.spawn(async move {
            let name = format!("{}{i}", cfg.prefix);
            if let Err(e) = session::serve(&cfg, name, &tally, storage, stop).await {
                tally.error(e);
            }
        });
    }
    // Wait until all are welcomed (or failed) to time the connection phase.
    let mut connect_s = None;
    loop {
        let settled =
            tally.connected.load(Ordering::Relaxed) + tally.errors.load(Ordering::Relaxed);
        if connect_s.is_none() && settled >= cfg.workers as u64 {
            connect_s = Some(started.elapsed().as_secs_f64());
            tracing::info!(
                "{} emulated workers connected in {:.2} s",
                tally.connected.load(Ordering::Relaxed),
                started.elapsed().as_secs_f64()
            );
        }
        tokio::select! {
            joined = sessions.join_next() => if joined.is_none() { break },
            () = tokio::time::sleep(Duration::from_millis(50)), if connect_s.is_none() => {}
        }
    }
    let first_error = tally.first_error.lock().expect("tally lock").clone();
    EmulatorSummary {
        workers: cfg.workers,
        connected: tally.connected.load(Ordering::Relaxed),
        connect_s: connect_s.unwrap_or_else(|| started.elapsed().as_secs_f64()),
        finished: tally.finished.load(Ordering::Relaxed),
        cancelled: tally.cancelled.load(Ordering::Relaxed),
        errors: tally.errors.load(Ordering::Relaxed),
        first_error,
    }
}
