//! What the dashboard draws: one sample of the dispatcher's counters a second, the last hour
//! of them kept (`GET /v1/series`), and the last failures (in `/v1/status`).

use super::clock::Now;
use super::views::{Failure, Status};
use crate::journal::{OutcomeState, TaskOutcome};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Samples kept: an hour at one a second.
const KEPT: usize = 3600;
/// Failures kept for the dashboard.
const FAILURES_KEPT: usize = 20;

/// The dispatcher's counters at one moment; the byte and access counts are cumulative (a
/// client takes differences for rates).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Its number, from 1 (ask for those after one with `?since=`).
    pub seq: u64,
    /// Unix time, seconds.
    pub t: f64,
    /// Tasks waiting (in the queue or for their inputs' lookups).
    pub queued: u64,
    /// Tasks running.
    pub running: u64,
    /// Connected workers.
    pub workers: u32,
    /// Their slots.
    pub slots: u64,
    /// Slots running a task.
    pub busy_slots: u64,
    /// Input bytes of the tasks queued so far (the paper's demand).
    pub demand_bytes: u64,
    /// Input bytes read from local caches, peers and storage by finished attempts.
    pub bytes_local: u64,
    /// See `bytes_local`.
    pub bytes_peer: u64,
    /// See `bytes_local`.
    pub bytes_storage: u64,
    /// Input accesses served locally, by peers, by storage.
    pub local: u64,
    /// See `local`.
    pub peer: u64,
    /// See `local`.
    pub storage: u64,
    /// Bytes prefetched (asked for).
    pub prefetch_bytes: u64,
    /// Tasks ended: succeeded, failed.
    pub succeeded: u64,
    /// See `succeeded`.
    pub failed: u64,
}

/// The samples and the last failures.
#[derive(Debug, Default)]
pub struct Series {
    points: VecDeque<Point>,
    next: u64,
    last: Option<Instant>,
    failures: VecDeque<Failure>,
}

impl Series {
    /// Whether a second has passed at `now` since the last sample (or none was taken).
    pub fn due(&self, now: Instant) -> bool {
        self.last
            .is_none_or(|l| now.saturating_duration_since(l) >= Duration::from_secs(1))
    }

    /// Take a sample of `s` at `now`.
    pub fn sample(&mut self, s: &Status, now: Now) {
        self.last = Some(now.instant);
        let t = now.unix;
        self.next += 1;
        let p = Point {
            seq: self.next,
            t,
            queued: s.queued,
            running: s.running,
            workers: s.workers,
            slots: s.slots,
            busy_slots: s.busy_slots,
            demand_bytes: s.demand_bytes,
            bytes_local: s.traffic.bytes_local,
            bytes_peer: s.traffic.bytes_peer,
            bytes_storage: s.traffic.bytes_storage,
            local: s.traffic.local,
            peer: s.traffic.peer,
            storage: s.traffic.storage,
            prefetch_bytes: s.prefetch.issued_bytes,
            succeeded: s.succeeded,
            failed: s.failed,
        };
        if self.points.len() == KEPT {
            self.points.pop_front();
        }
        self.points.push_back(p);
    }

    /// The samples after number `since`.
    pub fn points_since(&self, since: u64) -> Vec<Point> {
        self.points
            .iter()
            .filter(|p| p.seq > since)
            .cloned()
            .collect()
    }

    /// An outcome was recorded: a failure is kept for the dashboard.
    pub fn note_failure(&mut self, o: &TaskOutcome) {
        if o.state != OutcomeState::Failed {
            return;
        }
        let why = match (&o.error, o.exit_code) {
            (Some(e), _) => e.clone(),
            (None, Some(c)) => format!("exit code {c}"),
            (None, None) => "killed by a signal".into(),
        };
        if self.failures.len() == FAILURES_KEPT {
            self.failures.pop_front();
        }
        self.failures.push_back(Failure {
            id: o.id.clone(),
            node: o.node.clone(),
            why,
            at: o.finished_at,
        });
    }

    /// The last failures, newest first.
    pub fn recent_failures(&self) -> Vec<Failure> {
        self.failures.iter().rev().cloned().collect()
    }
}
