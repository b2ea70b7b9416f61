//! Time as the core sees it: a point on the driver's clock, passed in with every call.
//!
//! The core never reads a clock. The simulator passes virtual time; the live runtime passes the
//! time elapsed since the dispatcher started. Nanosecond resolution in a `u64` covers 584 years.

use serde::{Deserialize, Serialize};
use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time on the driver's clock, in nanoseconds since the driver's epoch.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Time(pub u64);

impl Time {
    /// The driver's epoch.
    pub const ZERO: Time = Time(0);
    /// Later than any time a driver will pass.
    pub const NEVER: Time = Time(u64::MAX);

    /// Time from seconds (negative and NaN saturate to zero).
    pub fn from_secs_f64(s: f64) -> Time {
        Time((s.max(0.0) * 1e9).round() as u64)
    }

    /// Seconds since the epoch.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// Time elapsed since `earlier`, zero if `earlier` is later.
    pub fn since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        Time(
            self.0
                .saturating_add(d.as_nanos().min(u64::MAX as u128) as u64),
        )
    }
}

impl Sub<Time> for Time {
    type Output = Duration;
    fn sub(self, other: Time) -> Duration {
        self.since(other)
    }
}
