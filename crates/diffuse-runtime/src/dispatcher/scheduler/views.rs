//! What the scheduler answers with: submissions accepted or refused, the counters of
//! `/v1/status` and `/metrics`, and the views of a task, an attempt, a batch and a link. Plain
//! types, shared by the scheduler's modules and the HTTP API, and read back by the `diffuse`
//! client commands: each answer of the API has one definition here (or in the module that
//! owns it, re-exported by [`crate::dispatcher::answers`]), serialized by the dispatcher and
//! deserialized by the client, so that a field renamed on one side is an error on the other.
//! A field the dispatcher always sends has no `#[serde(default)]`: a client that finds it
//! missing refuses the answer instead of showing 0.

use super::pool::{PoolView, WorkerView};
use super::tasks::{BatchCounts, Listed};
use crate::dispatcher::metrics::Histogram;
use crate::journal::TaskOutcome;
use crate::proto::Traffic;
use serde::{Deserialize, Serialize};

/// Most workers listed in `/v1/status`: a pool of thousands would make every status answer
/// megabytes long (10,000 workers: 0.47 s at the median while dispatching, bench/scale.sh).
pub const STATUS_WORKER_ROWS: usize = 100;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A page of workers (`GET /v1/workers`), in name order.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerPage {
    /// The workers.
    pub workers: Vec<WorkerView>,
    /// The name to pass as `after` for the next page (None: this is the last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// Why a submission was refused (nothing of it was accepted).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// A task with this id was submitted before.
    #[error("task '{0}' already exists")]
    Duplicate(String),
    /// The journal could not commit it.
    #[error("journal: {0}")]
    Journal(String),
    /// Its dependencies are wrong (a cycle, a tmp:// input nobody writes, an unknown `after`).
    #[error("{0}")]
    Invalid(String),
}

/// An accepted submission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submitted {
    /// Tasks accepted.
    pub submitted: usize,
    /// The batch they belong to (`GET /v1/batches/{batch}`).
    pub batch: u64,
}

/// Which tasks a listing wants.
#[derive(Clone, Debug)]
pub struct ListQuery {
    /// Only tasks in this state.
    pub state: Option<Listed>,
    /// Only tasks after this cursor (from a previous page's `next`).
    pub after: Option<u64>,
    /// At most this many.
    pub limit: usize,
}

/// One measured link: what transfers from `from` to `to` achieved, and what is predicted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkView {
    /// A worker's name, or `storage`.
    pub from: String,
    /// A worker's name.
    pub to: String,
    /// Predicted bytes per second (the mean of the window, times the feedback scale).
    pub predicted_bytes_per_s: f64,
    /// Transfers in the window.
    pub samples: usize,
}

/// Dispatcher-wide counters (`/v1/status`, `/metrics`). Every submitted task is counted in
/// exactly one of `queued`, `held_ready`, `running`, `ending`, `succeeded`, `failed` and
/// `cancelled`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Status {
    /// Tasks ever submitted (including those replayed from the journal).
    pub submitted: u64,
    /// Not yet dispatched: waiting in the queue, or for their inputs to be looked up.
    pub queued: u64,
    /// Of the queued, those waiting for input lookups (no worker has answered yet).
    pub looking_up: u64,
    /// Dispatched and not finished (at most the busy slots).
    pub running: u64,
    /// Dispatched and held ready on a worker, not started (`--ready-tasks`).
    #[serde(default)]
    pub held_ready: u64,
    /// Finished on their worker, outcome not yet journaled (shown as running).
    pub ending: u64,
    /// Finished with exit code 0.
    pub succeeded: u64,
    /// Finished otherwise.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
    /// Of the succeeded since the dispatcher started, those that did not run: an identical
    /// task's kept result stood for them.
    pub reused: u64,
    /// Of the succeeded, those running again to remake an intermediate object whose every
    /// copy was lost (not counted in `queued` or `running`).
    pub remaking: u64,
    /// Connected workers.
    pub workers: u32,
    /// Workers by state: requested, pending, starting (pool requests not yet connected),
    /// running, idle (connected), lost (disconnected, may come back), releasing.
    pub workers_by_state: std::collections::BTreeMap<String, u32>,
    /// The first [`STATUS_WORKER_ROWS`] workers with their state and resource-manager job id
    /// (`GET /v1/workers` pages through all of them); `workers_by_state` counts every one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worker_list: Vec<WorkerView>,
    /// Workers left out of `worker_list`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub worker_list_more: u64,
    /// The journal refuses what the dispatcher writes (its disk full, say): its error. While
    /// submissions cannot be committed (shown with for how long), submitters wait and no task
    /// moves; while outcomes cannot be, their tasks show as running and are not confirmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_error: Option<String>,
    /// The elastic pool's settings and errors (none for a static pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolView>,
    /// Slots on connected workers.
    pub slots: u64,
    /// Slots running a task.
    pub busy_slots: u64,
    /// Queued tasks that fit no connected worker (more cores, memory, GPUs or disk than any
    /// has).
    pub unschedulable: u64,
    /// Some of them: `id: what it asks for`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unschedulable_examples: Vec<String>,
    /// Accesses and bytes by source, summed over finished attempts.
    pub traffic: Traffic,
    /// What the transfer scheduler did (`--prefetch`): prefetches issued, landed, failed, read
    /// by a task, evicted unread.
    pub prefetch: diffuse_core::PrefetchStats,
    /// The cap on storage reads, bytes/s (`--storage-bandwidth-cap`), and the budgeted rate of
    /// the storage reads under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_cap: Option<f64>,
    /// See `storage_cap`.
    pub storage_budget_used: u64,
    /// Input bytes of the tasks queued so far (the paper's demand).
    pub demand_bytes: u64,
    /// The last failures (at most 20), newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_failures: Vec<Failure>,
    /// Seconds from a task's process start to its end, over finished attempts.
    pub task_run_seconds: Histogram,
    /// Seconds attempts spent staging their inputs.
    pub task_staging_seconds: Histogram,
    /// What 2Mark did (`--two-mark`): phases begun, copies evicted and moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub two_mark: Option<diffuse_core::TwoMarkStats>,
    /// The rates predicted between connected workers (and from storage) by past transfers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkView>,
    /// The connected workers' warm Python processes, summed (docs/warm.md).
    #[serde(default)]
    pub warm: crate::proto::WarmUse,
    /// Seconds since the dispatcher started.
    pub uptime_s: f64,
}

/// What the API shows of a task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskView {
    /// Task id.
    pub id: String,
    /// `queued`, `running`, `succeeded`, `failed` or `cancelled`.
    pub state: String,
    /// The batch it was submitted in.
    pub batch: u64,
    /// Worker it runs or ran on.
    pub node: Option<String>,
    /// Current or last attempt.
    pub attempt: u32,
    /// The recorded outcome, once there is one.
    pub outcome: Option<TaskOutcome>,
    /// Every attempt dispatched, with the report of each retried one (shown for one task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<AttemptView>>,
}

/// One attempt of a task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptView {
    /// Its number.
    pub attempt: u32,
    /// The worker it was sent to.
    pub node: String,
    /// Its report, if it failed and the task was retried (the last attempt's is the outcome's).
    pub report: Option<serde_json::Value>,
}

/// What the API shows of a batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchView {
    /// Batch number.
    pub batch: u64,
    /// Tasks not yet ended (or ended and not yet journaled).
    pub pending: u64,
    /// Counters.
    #[serde(flatten)]
    pub counts: BatchCounts,
}

/// A failed task, for the dashboard.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// Task id.
    pub id: String,
    /// Worker of its last attempt.
    pub node: Option<String>,
    /// Why, in a few words.
    pub why: String,
    /// Unix time it ended.
    pub at: f64,
}

/// A page of a task listing (`GET /v1/tasks`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskPage {
    /// The tasks, in submission order.
    pub tasks: Vec<TaskView>,
    /// The cursor of the next page (`after=`), or null on the last one.
    pub next: Option<String>,
}

/// The answer to `POST /v1/states`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskStates {
    /// The tasks known, as the listing shows them, in the order asked.
    pub tasks: Vec<TaskView>,
    /// The ids no task has.
    pub unknown: Vec<String>,
}

/// What a cancel did (`POST /v1/tasks/{id}/cancel`): `cancelled` (it ended at once) or
/// `stopping` (its processes are being stopped).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelAnswer {
    /// What happened.
    pub result: String,
}

/// The workers holding an object (`GET /v1/locate`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Located {
    /// The canonical URI.
    pub uri: String,
    /// Names of the workers holding it.
    pub nodes: Vec<String>,
}

/// What a placement did (`PUT /v1/objects/{uri}/placement`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placed {
    /// The canonical URI.
    pub uri: String,
    /// The worker it goes to.
    pub node: String,
    /// What the dispatcher did.
    pub result: String,
}

/// A staged batch accepted (`POST /v1/stage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageStarted {
    /// Its number (`GET /v1/stage/{id}`).
    pub id: u64,
}
