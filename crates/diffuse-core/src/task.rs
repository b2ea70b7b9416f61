//! What a task is to the scheduler: its inputs (objects of known size), its job, its state.

use crate::ids::{JobId, NodeId, NodeName, ObjectId, TaskId};
use crate::resources::Resources;
use crate::time::Time;
use serde::{Deserialize, Serialize};

/// One input of a task: an object and its size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Input {
    /// The object read.
    pub object: ObjectId,
    /// Its size in bytes (known at submission: the driver stats the source).
    pub size: u64,
}

/// Where a task asks to run (Hercules' placement hint), and how firmly.
///
/// * **Hard** (`strict`): it runs only on a node named `node`. While no such node is there it
///   waits; if the last node of that name leaves while the task waits (or runs), the task ends
///   with [`crate::Abandoned::HintedNodeLeft`].
/// * **Soft**: for `wait` after it is queued, it may run only on a node named `node`, and such
///   a node takes its hinted tasks before any other. Past `wait` it is an ordinary task that
///   the dispatch policy places anywhere (that node included).
///
/// Either way, a node takes the tasks hinted at it in queue order before the policy chooses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The node's name.
    pub node: NodeName,
    /// Hard (true) or soft (false).
    pub strict: bool,
    /// Soft only: how long it waits for that node.
    pub wait: std::time::Duration,
}

/// A task as submitted to the core.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// Unique id, chosen by the driver.
    pub id: TaskId,
    /// The job it belongs to.
    pub job: JobId,
    /// Objects it reads. The same object listed twice is read once.
    pub inputs: Vec<Input>,
    /// What it needs of a node while it runs.
    pub resources: Resources,
    /// Higher first; equal priorities in submission order.
    pub priority: i16,
    /// How many more attempts a retryable failure ([`Outcome::Retryable`]) may have.
    pub retries: u32,
    /// The most time it runs, as its submitter states it: it is sent only to a node that will
    /// still be there that long (see [`crate::Core::handle_node_deadline`]). None: any node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub walltime: Option<std::time::Duration>,
    /// Tasks that must succeed before it runs, besides the producers of its intermediate inputs
    /// (which the core finds itself). Each must be known to the core: unfinished, or a producer
    /// it keeps (see [`crate::Core::handle_submit`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<TaskId>,
    /// Intermediate objects it writes: kept on its node, never on persistent storage, and read
    /// by the tasks that name them as inputs (Hercules' node-local intermediate data).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub produces: Vec<ObjectId>,
    /// Its inputs' sizes are not known yet (the driver is looking them up): it waits until
    /// [`crate::Core::handle_inputs_known`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
    /// Where it asks to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<Placement>,
    /// DAD's beta for this task, in [0, 1], in place of the policy's (the DAD paper's future
    /// work: how much its data's place matters against the nodes' load).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dad_beta: Option<f64>,
}

impl TaskSpec {
    /// A task of the default job: one core, priority 0, no retries.
    pub fn new(id: TaskId, inputs: Vec<Input>) -> Self {
        TaskSpec {
            id,
            job: JobId(0),
            inputs,
            resources: Resources::ONE_CORE,
            priority: 0,
            retries: 0,
            walltime: None,
            after: Vec::new(),
            produces: Vec::new(),
            held: false,
            hint: None,
            dad_beta: None,
        }
    }

    /// The same task with its own DAD beta.
    pub fn with_dad_beta(mut self, beta: Option<f64>) -> Self {
        self.dad_beta = beta;
        self
    }

    /// The same task in job `job`.
    pub fn with_job(mut self, job: JobId) -> Self {
        self.job = job;
        self
    }

    /// The same task asking to run on a node named as in `hint`.
    pub fn with_hint(mut self, hint: Placement) -> Self {
        self.hint = Some(hint);
        self
    }

    /// The same task waiting for `after` to succeed first.
    pub fn with_after(mut self, after: Vec<TaskId>) -> Self {
        self.after = after;
        self
    }

    /// The same task writing the intermediate objects `produces`.
    pub fn with_produces(mut self, produces: Vec<ObjectId>) -> Self {
        self.produces = produces;
        self
    }

    /// The same task held until its inputs' sizes are known.
    pub fn held(mut self) -> Self {
        self.held = true;
        self
    }

    /// The same task stating it runs at most `walltime`.
    pub fn with_walltime(mut self, walltime: Option<std::time::Duration>) -> Self {
        self.walltime = walltime;
        self
    }

    /// The same task asking for `resources`.
    pub fn with_resources(mut self, resources: Resources) -> Self {
        self.resources = resources;
        self
    }

    /// The same task with `priority`.
    pub fn with_priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }

    /// The same task with `retries`.
    pub fn with_retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// Total bytes over its distinct inputs.
    pub fn input_bytes(&self) -> u64 {
        let mut seen: Vec<ObjectId> = Vec::with_capacity(self.inputs.len());
        let mut total = 0;
        for i in &self.inputs {
            if !seen.contains(&i.object) {
                seen.push(i.object);
                total += i.size;
            }
        }
        total
    }
}

/// How a run of a task ended, as the driver reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The process exited 0 (or the simulated task completed).
    Succeeded,
    /// The task itself failed in a way another attempt would repeat (missing input, a program
    /// that cannot be started): it is not retried.
    Failed(String),
    /// The task failed in a way another attempt may not (a non-zero exit, a time-out): it runs
    /// again, preferably on another node, while it has retries left, and else ends as
    /// [`Outcome::Failed`].
    Retryable(String),
    /// An intermediate input could not be read: the node named as its source no longer had it
    /// (it left, or lost the copy). Not the task's fault: it waits until the object is made
    /// again (its producer re-runs if no copy is left) and runs again. Each such loss counts
    /// toward the crash limit, like a lost node.
    InputLost(ObjectId),
    /// The node could not run it for a reason of the node's own (its cache's disk full with
    /// nothing left to evict): not the task's fault, so not a failure. It runs again, on another
    /// node if one has room; each such attempt counts toward the crash limit, like a lost
    /// node, so a task that no node can run fails in the end, with this reason.
    NodeFault(String),
    /// Taken back before it started ([`crate::Action::Withdraw`]): it is queued again, with
    /// no retry spent and nothing counted against it.
    Withdrawn,
}

/// Where a task is in its life.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskState {
    /// Waiting for the tasks it depends on to succeed (or for its inputs' sizes).
    Blocked,
    /// In the wait queue (also: queued again after a retryable failure).
    Queued,
    /// Dispatched to a node; `attempt` fences results of older attempts.
    Running {
        /// Node it was sent to.
        node: NodeId,
        /// Attempt number, starting at 1.
        attempt: u32,
        /// When it was dispatched.
        since: Time,
    },
    /// Finished with a recorded outcome.
    Finished(Outcome),
    /// Cancelled before it finished.
    Cancelled,
}

impl TaskState {
    /// True once the task has its one recorded outcome.
    pub fn is_terminal(&self) -> bool {
        matches!(self, TaskState::Finished(_) | TaskState::Cancelled)
    }
}
