//! The scheduler's time. The scheduler reads no clock: whoever drives it (the round loop of
//! [`super::Scheduler::run`], or a unit test) reads one here, [`Now::read`], and hands the
//! reading in with every message, tick and round, as the core is handed its `now`. So
//! heartbeats, hand-offs, lookup deadlines and the dashboard's sampling are tested with a clock
//! a test moves by hand ([`Now::after`]), not by waiting. `scripts/structure.py` checks that no
//! other file of the scheduler reads a clock (the journal writer, a thread of its own behind
//! the [`super::Comm`] seam, keeps its own).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One reading of the clock: the monotonic instant (for timeouts) and the Unix time (for the
/// times shown and journaled).
#[derive(Clone, Copy, Debug)]
pub struct Now {
    /// Monotonic time, for durations and deadlines.
    pub instant: Instant,
    /// Seconds since 1970 (0 if the clock is before 1970), for timestamps.
    pub unix: f64,
}

impl Now {
    /// The clock now: the scheduler's one clock read.
    pub fn read() -> Now {
        Now {
            instant: Instant::now(),
            unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        }
    }

    /// The reading `d` later (a test's clock moved on).
    pub fn after(self, d: Duration) -> Now {
        Now {
            instant: self.instant + d,
            unix: self.unix + d.as_secs_f64(),
        }
    }

    /// How long after `earlier` this is (zero if it is not after it).
    pub fn since(&self, earlier: Instant) -> Duration {
        self.instant.saturating_duration_since(earlier)
    }
}
