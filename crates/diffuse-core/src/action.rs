//! What the core asks its driver to do (`Core::poll_action`).

use crate::hooks::handoff::planner::Handoff;
use crate::ids::{NodeId, NodeName, ObjectId, TaskId};
use serde::{Deserialize, Serialize};

/// Where a node should read one input from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Source {
    /// The node's own cache: a local hit. The node may still be fetching it for another of its
    /// tasks (the core counts objects in transfer to a node as local-to-be); the node then waits
    /// for that fetch instead of starting a second one, and reads from storage if it fails.
    Local,
    /// A peer's cache: a global (peer) hit.
    Peer(NodeId),
    /// Persistent storage: a miss.
    Storage,
}

/// Run `task` on `node`, reading each input from the named source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dispatch {
    /// The task.
    pub task: TaskId,
    /// Attempt number; the driver reports it back with the outcome.
    pub attempt: u32,
    /// Where it runs.
    pub node: NodeId,
    /// One entry per distinct input, in the task's order.
    pub inputs: Vec<(ObjectId, Source)>,
    /// Sent into a ready slot ([`crate::CoreConfig::ready_tasks`]): the node holds it until a
    /// core frees, and says when it starts ([`crate::Core::handle_task_started`]).
    pub held: bool,
}

/// Why the core ended a task without running it ([`Action::Abandon`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Abandoned {
    /// A task it depends on ended without success (failed, cancelled, or abandoned in turn).
    /// `object` is the intermediate input that task was to write, if the dependency is one
    /// (else the dependency was named in `after`).
    DependencyFailed {
        /// The task that did not succeed.
        task: TaskId,
        /// The intermediate object it was to write.
        object: Option<ObjectId>,
    },
    /// An intermediate input lost its every copy more often than the crash limit allows
    /// remaking it (its producer re-ran that many times).
    InputLost {
        /// The object.
        object: ObjectId,
        /// Its producer.
        producer: TaskId,
    },
    /// Its hard placement hint names a node that left (the last node of that name), so it can
    /// never run where it must.
    HintedNodeLeft {
        /// The name.
        node: NodeName,
    },
}

/// An instruction from the core to its driver.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Start a task.
    Dispatch(Dispatch),
    /// Acquire this many more nodes from the resource manager; each reports
    /// `handle_node_joined` when it is up.
    Provision {
        /// Number of nodes wanted.
        nodes: u32,
    },
    /// Give this node back. The core has already forgotten it and its cache.
    Release {
        /// The node, idle at the time of the decision.
        node: NodeId,
        /// Cache hand-off: push these objects from `node` to the named surviving nodes first
        /// (within the configured time bound), then release it. Each target reports
        /// `handle_object_cached` when its copy is complete; empty when hand-off is off.
        handoff: Vec<Handoff>,
    },
    /// The task ended failed without running: record that outcome. The core has forgotten it.
    Abandon {
        /// The task.
        task: TaskId,
        /// Why.
        why: Abandoned,
    },
    /// Copy intermediate object `object` from `from` to `to` ahead of time (`tmp_replicas`);
    /// `to` reports `handle_object_cached` when its copy is complete.
    Replicate {
        /// The object.
        object: ObjectId,
        /// A node that holds it (its producer's).
        from: NodeId,
        /// The node to copy it to.
        to: NodeId,
    },
    /// Copy `object` from persistent storage into `node`'s cache ahead of the tasks that read
    /// it (MixApart's transfer scheduler, [`crate::CoreConfig::prefetch`]); `node` reports
    /// `handle_object_cached` when the copy is complete, or the driver calls
    /// `handle_prefetch_failed`.
    Prefetch {
        /// The object.
        object: ObjectId,
        /// Its size, bytes.
        size: u64,
        /// The node to copy it to.
        node: NodeId,
    },
    /// Delete `object` from `node`'s cache (2Mark's choice, [`crate::CoreConfig::two_mark`]).
    /// The core has already removed the copy from its location index.
    Evict {
        /// The node.
        node: NodeId,
        /// The object.
        object: ObjectId,
    },
    /// Keep `object` in the system on another node (2Mark's exchange): `to` copies it from
    /// `from` and reports `handle_object_cached`; then `from` deletes its copy. The core has
    /// already removed `from`'s copy from its location index.
    Move {
        /// The object.
        object: ObjectId,
        /// Its size, bytes.
        size: u64,
        /// The node giving it up.
        from: NodeId,
        /// The node taking it.
        to: NodeId,
    },
    /// No unfinished task needs this intermediate object any more: delete it from these nodes.
    /// The core has already removed it from its location index.
    DropObject {
        /// The object.
        object: ObjectId,
        /// The nodes that held it.
        nodes: Vec<NodeId>,
    },
    /// Take back a task held ready on `node` ([`crate::CoreConfig::ready_tasks`]) if it has
    /// not started: another node has a free core and nothing else to run. The node answers
    /// with [`Outcome::Withdrawn`](crate::Outcome::Withdrawn) for this attempt if it had not
    /// started it (it is queued again), or runs it as usual if it had.
    Withdraw {
        /// The task.
        task: TaskId,
        /// Its attempt.
        attempt: u32,
        /// The node holding it.
        node: NodeId,
    },
}
