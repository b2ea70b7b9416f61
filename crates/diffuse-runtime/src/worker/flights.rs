//! Single-flight fetches: the objects being fetched into the cache now, so that a second task
//! needing one waits for that fetch instead of starting another.

use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::watch;

/// The fetches under way, by URI; each signals `true` when it ends.
#[derive(Default)]
pub(super) struct Flights(Mutex<HashMap<String, watch::Receiver<bool>>>);

impl Flights {
    /// Lead a fetch of `uri` (Ok: signal the end through it, then [`Flights::landed`]), or, if
    /// one is under way and this caller has not waited for one yet (`joined`), the fetch to
    /// wait for (Err).
    pub(super) fn lead_or_join(
        &self,
        uri: &str,
        joined: bool,
    ) -> Result<watch::Sender<bool>, watch::Receiver<bool>> {
        let mut inflight = self.0.lock().expect("inflight lock");
        match inflight.get(uri) {
            Some(rx) if !joined => Err(rx.clone()),
            _ => {
                let (tx, rx) = watch::channel(false);
                inflight.insert(uri.to_string(), rx);
                Ok(tx)
            }
        }
    }

    /// The fetch of `uri` led with `tx` has ended: unlist it, and wake those waiting.
    pub(super) fn landed(&self, uri: &str, tx: watch::Sender<bool>) {
        self.0.lock().expect("inflight lock").remove(uri);
        let _ = tx.send(true);
    }
}
