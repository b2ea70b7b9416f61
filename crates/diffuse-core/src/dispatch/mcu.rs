//! MCU, max-compute-util (data diffusion, section 2.2): every free slot gets a task, the one
//! with the most data on the node first, else the oldest in the window.

use super::policy::DispatchPolicy;
use super::view::SchedView;
use crate::ids::{NodeId, TaskId};
use crate::time::Time;

/// Max-compute-util: every free slot gets a task, preferring local data.
#[derive(Clone, Debug, Default)]
pub struct MaxComputeUtil;

impl DispatchPolicy for MaxComputeUtil {
    fn choose_local(&mut self, view: &SchedView<'_>, node: NodeId, _now: Time) -> Option<TaskId> {
        view.best_local(node, false).map(|(t, _)| t)
    }
    fn choose_any(&mut self, view: &SchedView<'_>, _node: NodeId, _now: Time) -> Option<TaskId> {
        view.oldest()
    }
    fn any_ignores_node(&self) -> bool {
        true
    }
}
