//! The core's settings ([`CoreConfig`]), its errors ([`CoreError`]) and what it reports
//! ([`Counts`], [`LostTasks`]): plain types, no state.

use crate::dispatch::{PolicyKind, PolicyParams};
use crate::hooks::handoff::planner::HandoffConfig;
use crate::ids::{JobId, NodeId, ObjectId, TaskId};
use crate::provision::Provisioning;
use crate::sharing::JobOrder;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Settings of a core.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CoreConfig {
    /// Dispatch policy.
    pub policy: PolicyKind,
    /// GCC's utilisation threshold, in (0, 1].
    pub threshold: f64,
    /// Scheduling window: how many queued tasks a decision looks at, at most.
    pub window: usize,
    /// Static or dynamic provisioning.
    pub provisioning: Provisioning,
    /// A task whose node is lost this many times fails (a poison task must not take the whole
    /// cluster down).
    pub crash_limit: u32,
    /// Most peer reads one node is told to serve at once (0: no limit). A holder at the limit is
    /// passed over for another holder, or for persistent storage when every holder is at it, so
    /// a newly popular object spreads as a tree of replicas instead of every node queueing on the
    /// first holder's NIC.
    pub peer_read_limit: u32,
    /// Cache hand-off on release (None: off, a released node's cache is lost). It acts only
    /// when dynamic provisioning releases a node, and only toward nodes whose driver reported
    /// their cache with [`Core::handle_node_cache`](crate::Core::handle_node_cache).
    #[serde(default)]
    pub handoff: Option<HandoffConfig>,
    /// Copies of each intermediate object made ahead of time: when its producer succeeds, the
    /// core asks for `tmp_replicas - 1` more ([`Action::Replicate`](crate::Action::Replicate)), so losing one node loses
    /// no object and remakes nothing. 1 (the default): only the producer's copy.
    #[serde(default = "one")]
    pub tmp_replicas: u32,
    /// DAD's parameters (used by the `dad` policy).
    #[serde(default)]
    pub dad: crate::dad::DadConfig,
    /// How jobs share the slots: FIFO (one queue order) or Fair (fewest cores held first).
    #[serde(default)]
    pub job_order: JobOrder,
    /// Bytes per second all reads from persistent storage may take together (None: no cap).
    /// The drivers enforce it on the bytes; the core budgets the storage reads under way
    /// against it ([`Core::storage_reads`](crate::Core::storage_reads)) and plans prefetches within it.
    #[serde(default)]
    pub storage_cap: Option<f64>,
    /// MixApart's data transfer scheduler: prefetch the inputs of the tasks expected next
    /// within `storage_cap` (None, or no cap: off). See [`crate::hooks::prefetch::config::PrefetchConfig`].
    #[serde(default)]
    pub prefetch: Option<crate::hooks::prefetch::config::PrefetchConfig>,
    /// 2Mark ([`crate::hooks::two_mark::marks`]): the core decides what every node's cache evicts, across
    /// nodes, and asks for it with [`Action::Evict`](crate::Action::Evict) and [`Action::Move`](crate::Action::Move). Nodes must report
    /// their cache quota ([`Core::handle_node_cache`](crate::Core::handle_node_cache)); a node that does not is left alone.
    #[serde(default)]
    pub two_mark: bool,
    /// Bandwidth prediction from past transfers ([`crate::bandwidth`]): which holder a reader
    /// reads from.
    #[serde(default)]
    pub bandwidth: crate::bandwidth::BandwidthConfig,
    /// Tasks each node may hold ready beyond its cores (one core each): the next task waits on
    /// the node while one runs, so a slot starts it as soon as a task ends instead of after a
    /// round trip to the driver (Falkon's executors pre-fetched tasks). Nodes with a free core
    /// are offered tasks first; a ready slot takes a task only when none has. 0: none.
    #[serde(default)]
    pub ready_tasks: u32,
    /// A node holds a task ready only while one of the tasks it runs has run for less than
    /// this many seconds and belongs to a job whose attempts have held a node for less than
    /// that on average (dispatch to end, a moving average): the ready task then waits behind a
    /// short task, and never behind a long one while another node idles at the end of a run. Before a job's first attempt
    /// ends, its tasks count as long. Infinity: a node holds tasks ready whatever it runs.
    #[serde(default = "ready_below_s")]
    pub ready_below_s: f64,
}

fn ready_below_s() -> f64 {
    1.0
}

fn one() -> u32 {
    1
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            policy: PolicyKind::Gcc,
            threshold: 0.9,
            window: 2500,
            provisioning: Provisioning::Static,
            crash_limit: 3,
            peer_read_limit: 4,
            handoff: None,
            tmp_replicas: 1,
            dad: crate::dad::DadConfig::default(),
            job_order: JobOrder::Fifo,
            storage_cap: None,
            prefetch: None,
            two_mark: false,
            bandwidth: Default::default(),
            ready_tasks: 0,
            ready_below_s: ready_below_s(),
        }
    }
}

impl CoreConfig {
    /// The parameters the dispatch policies are built with (GCC's threshold, DAD's).
    pub fn policy_params(&self) -> PolicyParams {
        PolicyParams {
            threshold: self.threshold,
            dad: self.dad,
        }
    }
}

/// Errors from handling an event. The core's state is unchanged when one is returned.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CoreError {
    /// A task with this id is already queued or running.
    #[error("task {0} already exists")]
    DuplicateTask(TaskId),
    /// No queued or running task has this id.
    #[error("unknown task {0}")]
    UnknownTask(TaskId),
    /// A result for an attempt that is not the current one (fenced).
    #[error("stale result for {task}: attempt {got}, current attempt {current}")]
    StaleAttempt {
        /// The task.
        task: TaskId,
        /// Attempt reported.
        got: u32,
        /// Attempt the core is waiting for.
        current: u32,
    },
    /// A result for a task that is not running.
    #[error("task {0} is not running")]
    NotRunning(TaskId),
    /// A node with this id already joined.
    #[error("node {0} already joined")]
    DuplicateNode(NodeId),
    /// No node with this id.
    #[error("unknown node {0}")]
    UnknownNode(NodeId),
    /// A node must have at least one slot.
    #[error("node {0} has no slots")]
    NoSlots(NodeId),
    /// Another task already writes this intermediate object.
    #[error("intermediate object {0} already has a producer")]
    DuplicateProducer(ObjectId),
    /// A task reads an object it writes itself.
    #[error("task {0} reads {1}, which it writes")]
    ReadsOwnOutput(TaskId, ObjectId),
    /// A job's policy was set after its first task.
    #[error("job {0} already has tasks: its policy is set before them")]
    JobStarted(JobId),
}

/// The tasks that ended because their node was lost ([`Core::handle_node_lost`](crate::Core::handle_node_lost)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LostTasks {
    /// Failed: they have now lost `crash_limit` nodes.
    pub failed: Vec<TaskId>,
    /// Cancelled: their cancel was asked for while they ran.
    pub cancelled: Vec<TaskId>,
}

/// Counters for reports and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Tasks in the wait queue.
    pub queued: u64,
    /// Tasks waiting for the tasks they depend on (or their inputs' sizes), outside the queue.
    #[serde(default)]
    pub blocked: u64,
    /// Tasks dispatched and not finished.
    pub running: u64,
    /// Tasks finished with success.
    pub succeeded: u64,
    /// Tasks finished with failure.
    pub failed: u64,
    /// Tasks cancelled.
    pub cancelled: u64,
    /// Nodes allocated.
    pub nodes: u32,
    /// Nodes asked for and not yet joined.
    pub pending_nodes: u32,
    /// Slots on allocated nodes.
    pub slots: u64,
    /// Slots running a task.
    pub busy_slots: u64,
    /// Of the running, tasks held ready beyond a node's cores ([`CoreConfig::ready_tasks`]):
    /// sent to their node, not started there yet (as far as the core knows).
    #[serde(default)]
    pub held_ready: u64,
}
