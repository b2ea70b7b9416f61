//! FA, first-available (data diffusion, section 2.2): the oldest task, wherever its data is.
//! It ignores locality: every input is read from persistent storage.

use super::policy::DispatchPolicy;
use super::view::SchedView;
use crate::ids::{NodeId, TaskId};
use crate::time::Time;

/// First-available: the oldest task, wherever its data is.
#[derive(Clone, Debug, Default)]
pub struct FirstAvailable;

impl DispatchPolicy for FirstAvailable {
    fn uses_locality(&self) -> bool {
        false
    }
    fn choose_local(&mut self, _: &SchedView<'_>, _: NodeId, _: Time) -> Option<TaskId> {
        None
    }
    fn choose_any(&mut self, view: &SchedView<'_>, _node: NodeId, _now: Time) -> Option<TaskId> {
        view.oldest()
    }
}
