//! What the after-dispatch hooks ([`crate::hooks`]) see of the core: [`View`], the owners they
//! read, borrowed read-only while a hook is called.

use super::copies::Copies;
use super::dataflow::Dataflow;
use super::hints::Hints;
use super::nodes::Nodes;
use super::policies::Policies;
use super::queued::Queued;
use super::state::{JobEntry, Phase, TaskTable};
use crate::hooks::hook::CoreView;
use crate::ids::{JobId, NodeId, ObjectId, TaskId};
use crate::index::LocationIndex;
use crate::locality::Locality;
use crate::sharing::share::JobSharing;
use crate::task::Input;
use rustc_hash::FxHashMap;

/// The owners a hook reads, borrowed for one call.
pub(super) struct View<'a> {
    /// The scheduling window's depth (`CoreConfig::window`).
    pub(super) window: usize,
    /// The tasks the core keeps.
    pub(super) tasks: &'a TaskTable,
    /// The jobs.
    pub(super) jobs: &'a FxHashMap<JobId, JobEntry>,
    /// The intermediate objects.
    pub(super) dataflow: &'a Dataflow,
    /// The wait queue and the job order.
    pub(super) queued: &'a Queued,
    /// What nodes hold and what is on its way.
    pub(super) copies: &'a Copies,
    /// The bound hints (they widen the window).
    pub(super) hints: &'a Hints,
    /// The dispatch policies in use.
    pub(super) policies: &'a Policies,
    /// The nodes in the pool.
    pub(super) nodes: &'a Nodes,
}

/// Whether `task`'s policy reads through caches (its job's policy; the core's own for a task
/// the core does not know).
pub(super) fn caches_for(tasks: &TaskTable, policies: &Policies, task: TaskId) -> bool {
    match tasks.get(&task) {
        Some(t) => policies.caches_for_job(t.job),
        None => policies.own_caches(),
    }
}

/// The scheduling window's bound: `window` tasks deep, not counting the tasks a hint binds to a
/// node (they are offered to that node only, so they must not crowd the others out).
pub(super) fn window_bound(queued: &Queued, hints: &Hints, window: usize) -> u64 {
    queued.window_bound(window + hints.bound())
}

impl CoreView for View<'_> {
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
        self.tasks.get(&task).map_or(&[], |t| &t.inputs[..])
    }

    fn task_job(&self, task: TaskId) -> Option<JobId> {
        self.tasks.get(&task).map(|t| t.job)
    }

    fn is_running(&self, task: TaskId) -> bool {
        matches!(
            self.tasks.get(&task).map(|t| &t.phase),
            Some(Phase::Running(_))
        )
    }

    fn caches_for(&self, task: TaskId) -> bool {
        caches_for(self.tasks, self.policies, task)
    }

    fn caching_enabled(&self) -> bool {
        self.policies.caching()
    }

    fn locality(&self) -> &Locality {
        self.copies.locality()
    }

    fn window_bound(&self) -> u64 {
        window_bound(self.queued, self.hints, self.window)
    }

    fn job_cores(&self, job: JobId) -> u64 {
        self.jobs.get(&job).map_or(0, |j| j.running_cores)
    }

    fn slots(&self) -> u64 {
        self.nodes.slots()
    }

    fn job_order(&self) -> &dyn JobSharing {
        self.queued.job_order()
    }
}
