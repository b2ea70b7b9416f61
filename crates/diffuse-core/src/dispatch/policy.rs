//! The dispatch policy trait: which queued task a free slot on a node takes.

use super::view::SchedView;
use crate::ids::{NodeId, TaskId};
use crate::time::Time;

/// A dispatch policy: picks a queued task for a free slot on `node`, or `None` to leave it idle.
///
/// The core asks in two passes. First every node with a free slot is offered `choose_local`:
/// tasks with data on that node, so a task goes to a free node holding its data before any node
/// without it is considered. Slots still free then get `choose_any`, the policy's fallback.
///
/// A policy's name (for `--policy` and a job's `job_policy`) and how it is built from the
/// core's settings are written once, in [`super::registry`].
pub trait DispatchPolicy: Send {
    /// Whether the policy uses cached data at all. FA does not: its tasks read only from
    /// persistent storage, and nodes need not cache.
    fn uses_locality(&self) -> bool {
        true
    }
    /// First pass: a task with data cached on `node`, or `None`.
    fn choose_local(&mut self, view: &SchedView<'_>, node: NodeId, now: Time) -> Option<TaskId>;
    /// Second pass: any task this policy allows on `node`, or `None` to leave the slot idle.
    fn choose_any(&mut self, view: &SchedView<'_>, node: NodeId, now: Time) -> Option<TaskId>;
    /// Whether `choose_any` gives every node the same answer while every queued task fits
    /// every node with a free core, and changes nothing of the policy's own: then once one node
    /// declines, the others of the same pass would too until a dispatch changes the queue, and
    /// the core does not ask them. False unless a policy states it.
    fn any_ignores_node(&self) -> bool {
        false
    }
    /// When the policy wants a dispatch pass even if nothing else happens (DAD while it delays
    /// a task: its next round). None: only when something changes.
    fn wake_at(&self) -> Option<Time> {
        None
    }
}
