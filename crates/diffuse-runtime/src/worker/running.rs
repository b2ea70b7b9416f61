//! The attempts running on this worker and how to stop each: an attempt is listed as soon as
//! its `Run` arrives (so a `Cancel` right behind it finds it) and unlisted when it ends; a
//! signal stops them all, and marks the worker as leaving.

use super::process::Stop;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// A task id and an attempt number.
type Attempt = (String, u32);

/// How to reach one running attempt: its stop, and its withdrawal (before it starts).
struct Handles {
    stop: watch::Sender<Option<Stop>>,
    withdraw: watch::Sender<bool>,
}

/// The running attempts, and whether the worker is leaving.
#[derive(Default)]
pub(super) struct Running {
    stops: Mutex<HashMap<Attempt, Handles>>,
    /// A signal is stopping the worker.
    leaving: AtomicBool,
}

impl Running {
    /// List an attempt, as soon as its `Run` arrives.
    pub(super) fn register(self: &Arc<Self>, task: &str, attempt: u32) -> Registered {
        let (stop_tx, stop) = watch::channel(None);
        let (withdraw_tx, withdraw) = watch::channel(false);
        let key = (task.to_string(), attempt);
        self.stops.lock().expect("running lock").insert(
            key.clone(),
            Handles {
                stop: stop_tx,
                withdraw: withdraw_tx,
            },
        );
        Registered {
            running: self.clone(),
            key,
            stop,
            withdraw,
        }
    }

    /// Ask an attempt held ready to be given back, if it has not started.
    pub(super) fn withdraw(&self, task: String, attempt: u32) {
        if let Some(h) = self
            .stops
            .lock()
            .expect("running lock")
            .get(&(task, attempt))
        {
            let _ = h.withdraw.send(true);
        }
    }

    /// Ask one attempt to stop, if it is running.
    pub(super) fn stop(&self, task: String, attempt: u32, why: Stop) {
        if let Some(stop) = self
            .stops
            .lock()
            .expect("running lock")
            .get(&(task, attempt))
        {
            let _ = stop.stop.send(Some(why));
        }
    }

    /// Ask every running attempt to stop.
    pub(super) fn stop_all(&self, why: Stop) {
        if why == Stop::Leaving {
            self.leaving.store(true, Ordering::SeqCst);
        }
        for h in self.stops.lock().expect("running lock").values() {
            let _ = h.stop.send(Some(why));
        }
    }

    /// For a task that a signal not sent by this worker killed: whether the worker itself is
    /// being stopped too (within a second), as when a resource manager signals every process
    /// of a job at once and the task happened to die first.
    pub(super) async fn stopped_with_us(&self) -> bool {
        for _ in 0..20 {
            if self.leaving.load(Ordering::SeqCst) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }
}

/// An attempt in the list of running attempts; unlisted when dropped.
pub(super) struct Registered {
    running: Arc<Running>,
    key: Attempt,
    /// Why it is asked to stop, once it is.
    pub(super) stop: watch::Receiver<Option<Stop>>,
    /// Whether it is asked back (only before it starts: see [`Running::withdraw`]).
    pub(super) withdraw: watch::Receiver<bool>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.running
            .stops
            .lock()
            .expect("running lock")
            .remove(&self.key);
    }
}
