//! What the after-dispatch hooks ([`crate::hooks`]) see of the core: [`CoreView`], read-only.

use super::state::Phase;
use super::Core;
use crate::hooks::hook::CoreView;
use crate::ids::{JobId, NodeId, ObjectId, TaskId};
use crate::index::LocationIndex;
use crate::locality::Locality;
use crate::sharing::share::JobSharing;
use crate::task::Input;

/// What the hooks see of the core: its state, read-only.
impl CoreView for Core {
    fn index(&self) -> &LocationIndex {
        self.copies.index()
    }

    fn effective(&self) -> &LocationIndex {
        self.copies.effective()
    }

    fn in_transfer(&self, node: NodeId, object: ObjectId) -> bool {
        self.copies.in_transfer(node, object)
    }

    fn is_intermediate(&self, object: ObjectId) -> bool {
        self.dataflow.contains(&object)
    }

    fn has_node(&self, node: NodeId) -> bool {
        self.nodes.contains(node)
    }

    fn nodes_busy(&self) -> Vec<(NodeId, bool)> {
        self.nodes
            .iter()
            .map(|(id, n)| (id, !n.running.is_empty() || n.serving > 0))
            .collect()
    }

    fn task_inputs(&self, task: TaskId) -> &[Input] {
        self.tasks.get(&task).map_or(&[], |t| t.inputs.as_slice())
    }

    fn task_job(&self, task: TaskId) -> Option<JobId> {
        self.tasks.get(&task).map(|t| t.job)
    }

    fn is_running(&self, task: TaskId) -> bool {
        matches!(
            self.tasks.get(&task).map(|t| &t.phase),
            Some(Phase::Running { .. })
        )
    }

    fn caches_for(&self, task: TaskId) -> bool {
        Core::caches_for(self, task)
    }

    fn caching_enabled(&self) -> bool {
        self.policies.caching()
    }

    fn locality(&self) -> &Locality {
        self.copies.locality()
    }

    fn window_bound(&self) -> u64 {
        Core::window_bound(self)
    }

    fn job_cores(&self, job: JobId) -> u64 {
        self.jobs.get(&job).map_or(0, |j| j.running_cores)
    }

    fn slots(&self) -> u64 {
        self.nodes.slots()
    }

    fn job_order(&self) -> &dyn JobSharing {
        self.job_order.as_ref()
    }
}
