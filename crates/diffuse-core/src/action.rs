//! What the core asks its driver to do (`Core::poll_action`).

use crate::handoff::Handoff;
use crate::ids::{NodeId, ObjectId, TaskId};
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
}
