//! A cap on how fast this process reads persistent storage (MixApart's storage bandwidth cap):
//! the dispatcher divides `--storage-bandwidth-cap` among its workers and tells each its share,
//! and every storage read of the worker draws from one schedule.
//!
//! The schedule is strict: a chunk of `n` bytes may start only once the chunks before it have
//! had `n / rate` seconds each, so over any interval of T seconds a worker takes in at most
//! `rate * T` bytes plus one chunk per concurrent read. No burst is saved up while idle, so the
//! sum of the shares is never exceeded, only approached. `file://` reads use chunks of 50 ms
//! at the rate (64 KiB to 1 MiB) while throttled, so the one chunk read ahead stays small.
//!
//! What the operating system reads ahead is outside this schedule: an `http(s)://` or `s3://`
//! connection's TCP receive window (the kernel grows it to a few MiB on a fast link), or an NFS
//! client's read-ahead, can reach storage before the worker takes it in, early in a read.

use std::sync::Mutex;
use std::time::Duration;
// tokio's clock: the same as std's, and pausable in tests.
use tokio::time::Instant;

/// A shared read-rate limit (None: unlimited).
#[derive(Debug, Default)]
pub struct Throttle {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Bytes per second, if limited.
    rate: Option<f64>,
    /// When the bytes already granted will have had their time.
    free_at: Option<Instant>,
}

impl Throttle {
    /// Limit reads to `rate` bytes per second from now on (None: no limit).
    pub fn set_rate(&self, rate: Option<f64>) {
        let mut s = self.state.lock().expect("throttle lock");
        s.rate = rate.filter(|r| r.is_finite() && *r > 0.0);
    }

    /// The current limit.
    pub fn rate(&self) -> Option<f64> {
        self.state.lock().expect("throttle lock").rate
    }

    /// How much to read at a time: 1 MiB unlimited, else 50 ms at the rate (64 KiB to 1 MiB).
    pub fn chunk_size(&self) -> usize {
        match self.rate() {
            None => 1 << 20,
            Some(r) => ((r * 0.05) as usize).clamp(64 << 10, 1 << 20),
        }
    }

    /// Wait until `n` more bytes may be read.
    pub async fn take(&self, n: usize) {
        let wait = {
            let mut s = self.state.lock().expect("throttle lock");
            let Some(rate) = s.rate else {
                return;
            };
            let now = Instant::now();
            let start = s.free_at.map_or(now, |t| t.max(now));
            s.free_at = Some(start + Duration::from_secs_f64(n as f64 / rate));
            start - now
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// `stream`'s chunks, each let through when `throttle` allows its bytes.
pub fn throttled<'a, E: Send + 'a>(
    stream: impl futures_util::Stream<Item = Result<bytes::Bytes, E>> + Send + 'a,
    throttle: &'a Throttle,
) -> impl futures_util::Stream<Item = Result<bytes::Bytes, E>> + Send + Unpin + 'a {
    use futures_util::StreamExt;
    Box::pin(stream.then(move |chunk| async move {
        if let Ok(c) = &chunk {
            throttle.take(c.len()).await;
        }
        chunk
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn reads_are_spaced_at_the_rate() {
        let t = Throttle::default();
        let start = tokio::time::Instant::now();
        t.take(1000).await;
        assert_eq!(start.elapsed(), Duration::ZERO, "unlimited");
        t.set_rate(Some(1000.0));
        for _ in 0..5 {
            t.take(500).await;
        }
        // The first chunk goes at once; the other four wait 0.5 s each (the paused clock
        // advances while sleeping).
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(1990) && waited <= Duration::from_millis(2100),
            "{waited:?}"
        );
    }
}
