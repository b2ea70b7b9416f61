//! The scheduler thread's one input: [`SchedulerMsg`], a command from the HTTP API, a worker's
//! session or the elastic pool, or a [`SchedulerQuery`] that changes nothing. Each question carries the
//! channel its answer goes back on.

use super::batches::{StageAsk, StageView};
use super::comm::WorkerLink;
use super::jobs::{JobCancelled, JobView};
use super::objects::{ObjectView, PlaceError};
use super::series::Point;
use super::views::{BatchView, ListQuery, Status, SubmitError, Submitted, TaskView};
use crate::proto::ToDispatcher;
use crate::provisioner::PoolEvent;
use crate::spec::TaskDef;
use tokio::sync::oneshot;

/// A command for the scheduler thread, or a [`SchedulerQuery`].
pub enum SchedulerMsg {
    /// Accept a batch; answered once it is journaled.
    Submit(
        Vec<TaskDef>,
        oneshot::Sender<Result<Submitted, SubmitError>>,
    ),
    /// A worker connected and said hello.
    WorkerUp {
        /// Connection id (unique per WebSocket).
        conn: u64,
        /// Its hello.
        hello: ToDispatcher,
        /// Where its messages go (kept by the scheduler's [`super::comm::Comm`]).
        link: WorkerLink,
    },
    /// A message from a worker.
    FromWorker(u64, ToDispatcher),
    /// A worker's connection closed.
    WorkerDown(u64),
    /// Cancel a task.
    Cancel(String, oneshot::Sender<Result<String, String>>),
    /// The kept results' counts; with `clear`, forget them all first.
    Results {
        /// Forget every kept result and input digest.
        clear: bool,
        /// Where the counts go.
        reply: oneshot::Sender<super::results::ResultsView>,
    },
    /// Cancel every unfinished task of a job (None: no task names it).
    CancelJob(String, oneshot::Sender<Option<JobCancelled>>),
    /// Place a `tmp://` object on the named worker.
    Place(String, String, oneshot::Sender<Result<String, PlaceError>>),
    /// Ask every worker to finish and exit.
    ShutdownWorkers,
    /// News from the elastic pool.
    Pool(PoolEvent),
    /// Stage a batch of objects to workers: its number, or why not.
    Stage(StageAsk, oneshot::Sender<Result<u64, String>>),
    /// A question that changes nothing ([`SchedulerQuery`]).
    Query(SchedulerQuery),
}

/// A question for the scheduler thread that changes nothing, answered from its owners as they
/// stand ([`super::queries`]).
pub enum SchedulerQuery {
    /// Counters.
    Status(oneshot::Sender<Status>),
    /// A page of workers by name: those after `after`, at most `limit`.
    Workers {
        /// The last name of the previous page.
        after: Option<String>,
        /// Most workers on the page.
        limit: usize,
        /// Where the page goes.
        reply: oneshot::Sender<super::views::WorkerPage>,
    },
    /// The dashboard's samples after this number.
    Series(u64, oneshot::Sender<Vec<Point>>),
    /// One task's view (its outcome is read from the journal by the caller).
    Task(String, oneshot::Sender<Option<TaskView>>),
    /// A page of tasks, and the cursor of the next page.
    List(ListQuery, oneshot::Sender<(Vec<TaskView>, Option<u64>)>),
    /// The views of the tasks named (outcomes read by the caller), and the names not known.
    Tasks(Vec<String>, oneshot::Sender<(Vec<TaskView>, Vec<String>)>),
    /// A batch's counters.
    Batch(u64, oneshot::Sender<Option<BatchView>>),
    /// Names of the workers holding an object.
    Locate(String, oneshot::Sender<Vec<String>>),
    /// A job's counters (None: no task names it).
    Job(String, oneshot::Sender<Option<JobView>>),
    /// Where an object is and its state (None: no task names it).
    Object(String, oneshot::Sender<Option<ObjectView>>),
    /// The peer data URL of the connected worker of this name.
    PeerOf(String, oneshot::Sender<Option<String>>),
    /// Tasks whose outcome was journaled after the first `n`, in that order: (id, state); and
    /// the new count.
    Ended(usize, oneshot::Sender<(Vec<(String, String)>, usize)>),
    /// A staged batch's progress (None: no such batch).
    StageView(u64, oneshot::Sender<Option<StageView>>),
}

impl From<SchedulerQuery> for SchedulerMsg {
    fn from(q: SchedulerQuery) -> SchedulerMsg {
        SchedulerMsg::Query(q)
    }
}
