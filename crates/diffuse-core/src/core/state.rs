//! What the core keeps of each task and node ([`TaskEntry`], [`Phase`], [`NodeEntry`]): plain
//! records, read and changed by the core's own modules.

use crate::ids::{JobId, NodeId, NodeName, ObjectId, TaskId};
use crate::resources::Resources;
use crate::task::{Input, Placement, TaskSpec};
use crate::time::Time;
use std::time::Duration;

/// Where a task the core keeps is in its life.
#[derive(Clone, Debug)]
pub(super) enum Phase {
    /// Waiting for dependencies, its inputs' sizes, or a copy of an intermediate input.
    Blocked,
    /// Succeeded, and kept as the producer of intermediate objects that may be needed again.
    Done,
    /// In the wait queue, at order number `seq`.
    Queued { seq: u64 },
    /// Dispatched to `node` at `since`, reading from `peers`.
    Running {
        node: NodeId,
        since: Time,
        peers: Vec<NodeId>,
        /// Inputs this attempt fetches to its node (counted in transfer by [`super::copies::Copies`]).
        fetching: Vec<ObjectId>,
        cancelled: bool,
    },
}

/// The tasks the core keeps, by id. Each entry is boxed: a map's buckets hold a whole value
/// each, and with room to grow a map has up to twice as many buckets as entries, so unboxed
/// entries of ~300 bytes cost ~700 bytes a queued task (bench/queued_rss.sh).
pub(super) type TaskTable = rustc_hash::FxHashMap<TaskId, Box<TaskEntry>>;

/// A task the core keeps (blocked, queued, running, or kept as a producer).
#[derive(Clone, Debug)]
pub(super) struct TaskEntry {
    /// Distinct inputs, in the order submitted.
    pub(super) inputs: Vec<Input>,
    pub(super) phase: Phase,
    /// Attempts dispatched so far; the current attempt when running.
    pub(super) attempt: u32,
    /// Times its node was lost under it.
    pub(super) crashes: u32,
    /// What it holds of a node while it runs.
    pub(super) resources: Resources,
    pub(super) priority: i16,
    /// Retryable failures it may still have.
    pub(super) retries_left: u32,
    /// The node of its last failed attempt: another node is preferred for the next one.
    pub(super) avoid: Option<NodeId>,
    /// The most time it runs, as stated: it goes only to a node that stays that long.
    pub(super) walltime: Option<Duration>,
    pub(super) job: JobId,
    /// Dependencies it is waiting for (it is in each one's `dependents` list).
    pub(super) waiting_on: Vec<TaskId>,
    /// Its inputs' sizes are not known yet.
    pub(super) held: bool,
    /// Intermediate objects it writes.
    pub(super) produces: Vec<ObjectId>,
    /// Times it was run again to remake its objects.
    pub(super) remakes: u32,
    /// It is running again (queued, blocked or running) to remake its objects.
    pub(super) remaking: bool,
    /// Where it asks to run.
    pub(super) hint: Option<Placement>,
    /// Its hint binds it now (queued, and hard or within a soft hint's wait).
    pub(super) hint_live: bool,
    /// When its soft hint lapses (set at the first dispatch pass after it is queued).
    pub(super) hint_until: Option<Time>,
    /// Its own DAD beta.
    pub(super) dad_beta: Option<f64>,
}

impl TaskEntry {
    /// A task as the core first keeps it: blocked (or `Done` for a producer restored after a
    /// restart), `attempts` dispatched before, its distinct inputs in order.
    pub(super) fn new(
        spec: &TaskSpec,
        inputs: Vec<Input>,
        phase: Phase,
        attempts: u32,
    ) -> TaskEntry {
        TaskEntry {
            inputs,
            phase,
            attempt: attempts,
            crashes: 0,
            resources: spec.resources,
            priority: spec.priority,
            retries_left: spec.retries,
            avoid: None,
            walltime: spec.walltime,
            job: spec.job,
            waiting_on: Vec::new(),
            held: spec.held,
            produces: spec.produces.clone(),
            remakes: 0,
            remaking: false,
            hint: spec.hint,
            hint_live: false,
            hint_until: None,
            dad_beta: spec.dad_beta,
        }
    }
}

/// A node in the pool.
#[derive(Clone, Debug)]
pub(super) struct NodeEntry {
    /// What it has.
    pub(super) capacity: Resources,
    /// What its running tasks hold.
    pub(super) used: Resources,
    pub(super) running: Vec<TaskId>,
    /// Peer reads from this node that running tasks were told to make.
    pub(super) serving: u32,
    pub(super) idle_since: Option<Time>,
    /// When it will leave (a batch job's time limit), if it knows.
    pub(super) ends_at: Option<Time>,
    /// The driver's name for it ([`Core::handle_node_named`](crate::Core::handle_node_named)), which hints name.
    pub(super) name: Option<NodeName>,
    /// Its load as the driver last measured it ([`Core::handle_node_load`](crate::Core::handle_node_load)), in [0, 1].
    pub(super) reported_load: Option<f64>,
}

/// Tasks of one job not yet ended, and the intermediate objects its tasks write.
#[derive(Clone, Debug, Default)]
pub(super) struct JobEntry {
    pub(super) unfinished: u64,
    /// Cores its running tasks hold (what Fair sharing evens out).
    pub(super) running_cores: u64,
    pub(super) objects: Vec<ObjectId>,
}
