//! GCC, good-cache-compute (data diffusion, section 2.2): MCU while utilisation (busy slots /
//! allocated slots) is below a threshold, MCH at or above it.

use super::mch::MaxCacheHit;
use super::mcu::MaxComputeUtil;
use super::policy::DispatchPolicy;
use super::view::SchedView;
use crate::ids::{NodeId, TaskId};
use crate::time::Time;

/// Good-cache-compute: MCU below the utilisation threshold, MCH at or above it.
#[derive(Clone, Debug)]
pub struct GoodCacheCompute {
    /// Utilisation (busy / allocated slots) at which the policy switches from MCU to MCH.
    pub threshold: f64,
}

impl DispatchPolicy for GoodCacheCompute {
    fn choose_local(&mut self, view: &SchedView<'_>, node: NodeId, now: Time) -> Option<TaskId> {
        if view.utilization() < self.threshold {
            MaxComputeUtil.choose_local(view, node, now)
        } else {
            MaxCacheHit.choose_local(view, node, now)
        }
    }
    fn choose_any(&mut self, view: &SchedView<'_>, node: NodeId, now: Time) -> Option<TaskId> {
        if view.utilization() < self.threshold {
            MaxComputeUtil.choose_any(view, node, now)
        } else {
            MaxCacheHit.choose_any(view, node, now)
        }
    }
    /// Both halves ignore the node, and utilisation changes only with a dispatch.
    fn any_ignores_node(&self) -> bool {
        true
    }
}
