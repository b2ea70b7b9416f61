//! MCH, max-cache-hit (data diffusion, section 2.2): a task runs only where most of its data
//! is, or anywhere if its data is cached nowhere; otherwise the slot stays idle and the task
//! waits for the node holding its data.

use super::policy::DispatchPolicy;
use super::view::SchedView;
use crate::ids::{NodeId, TaskId};
use crate::time::Time;

/// Max-cache-hit: a task runs only where most of its data is (or anywhere if it is nowhere).
#[derive(Clone, Debug, Default)]
pub struct MaxCacheHit;

impl DispatchPolicy for MaxCacheHit {
    fn choose_local(&mut self, view: &SchedView<'_>, node: NodeId, _now: Time) -> Option<TaskId> {
        view.best_local(node, true).map(|(t, _)| t)
    }
    fn choose_any(&mut self, view: &SchedView<'_>, _node: NodeId, _now: Time) -> Option<TaskId> {
        view.oldest_cold()
    }
    fn any_ignores_node(&self) -> bool {
        true
    }
}
