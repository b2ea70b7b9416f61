//! What the pool and the scheduler say to each other: [`PoolCmd`]s in, [`PoolEvent`]s out
//! through an [`EventSink`], and where a request stands ([`RequestState`]).

use super::job::RmState;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

/// Where a request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestState {
    /// Being submitted.
    Requested,
    /// Queued at the resource manager.
    Pending,
    /// Running there; its worker has not connected yet.
    Starting,
    /// Its worker is connected (the scheduler tells running from idle).
    Joined,
    /// Its worker was connected and is not now (it may reconnect).
    Lost,
    /// Given back: told to stop, its job ending.
    Releasing,
    /// Its job is gone.
    Gone,
}

impl RequestState {
    /// Where the request of a job the resource manager shows live stands: queued (pending),
    /// or running without its worker connected yet (starting).
    pub(super) fn of_live_job(job: &RmState) -> RequestState {
        match job {
            RmState::Pending => RequestState::Pending,
            _ => RequestState::Starting,
        }
    }
}

/// What the scheduler tells the pool.
#[derive(Debug)]
pub enum PoolCmd {
    /// Acquire this many more workers.
    Acquire(u32),
    /// The worker of this request connected.
    Joined(String),
    /// The worker of this request disconnected (it may come back).
    Disconnected(String),
    /// Give back this request's worker (it was told to shut down).
    Release(String),
    /// Give back every worker; answered when their jobs are cancelled.
    Shutdown(oneshot::Sender<()>),
}

/// Where the pool's [`PoolEvent`]s go: the dispatcher passes them on to the scheduler thread.
pub type EventSink = Box<dyn Fn(PoolEvent) + Send + Sync>;

/// What the pool tells the scheduler.
#[derive(Clone, Debug)]
pub enum PoolEvent {
    /// A request's state or job id changed.
    State {
        /// Request name.
        request: String,
        /// Its job id, once known.
        job: Option<String>,
        /// Its state.
        state: RequestState,
    },
    /// A request ended without its worker ever connecting: that worker will not come.
    NeverJoined {
        /// Request name.
        request: String,
        /// Why.
        reason: String,
    },
    /// A resource-manager call failed (shown in status until a later one succeeds).
    Error(Option<String>),
    /// A job under the pool's names that was not a request's own: adopted as a worker, or
    /// cancelled.
    Extra {
        /// Its job id.
        job: String,
        /// Its name.
        name: String,
        /// Adopted (else cancelled).
        adopted: bool,
        /// What was done and why, as logged.
        message: String,
    },
    /// A request's worker connected for the first time, this long after it was asked for
    /// (the resource manager's queue wait and the worker's start).
    Started {
        /// Request name.
        request: String,
        /// Seconds from asking to joining.
        seconds: f64,
    },
}
