//! What a dispatch policy sees when it decides: [`SchedView`], the queue through the per-node
//! candidate sets of [`crate::locality`], so a decision costs O(|Ti| + log |Q|), not a scan of
//! the window.

use crate::ids::{NodeId, TaskId};
use crate::index::LocationIndex;
use crate::locality::{Locality, Score, FULL};
use crate::queue::WaitQueue;
use crate::racks::Racks;

/// What a policy can see when it decides.
pub struct SchedView<'a> {
    pub(crate) queue: &'a WaitQueue,
    pub(crate) locality: &'a Locality,
    /// What nodes hold or are fetching (`Core::effective`): what scoring sees.
    pub(crate) index: &'a LocationIndex,
    /// What nodes hold, as they reported it (no transfers under way).
    pub(crate) held: &'a LocationIndex,
    /// Which nodes share a rack.
    pub(crate) racks: &'a Racks,
    /// Sequence numbers below this are inside the scheduling window.
    pub(crate) window_bound: u64,
    pub(crate) busy_slots: u64,
    pub(crate) total_slots: u64,
    /// Whether a task can run on the node deciding now (its resources fit what is free there,
    /// and it is not avoiding that node).
    pub(crate) fits: &'a dyn Fn(TaskId) -> bool,
    /// Whether a task could run on another node with a free core (its resources fit there,
    /// it does not avoid it, its hint allows it): for policies that choose the node per task.
    pub(crate) fits_on: &'a dyn Fn(TaskId, NodeId) -> bool,
    /// Nodes with a free slot.
    pub(crate) free: &'a std::collections::BTreeSet<NodeId>,
    /// A node's load: busy slots over its slots, in [0, 1] (1 for an unknown node).
    pub(crate) load: &'a dyn Fn(NodeId) -> f64,
    /// A task's own DAD beta, if it states one.
    pub(crate) beta: &'a dyn Fn(TaskId) -> Option<f64>,
}

impl SchedView<'_> {
    /// The same view with another fit filter (one policy's share of the queue).
    pub(crate) fn with_fits<'b>(&'b self, fits: &'b dyn Fn(TaskId) -> bool) -> SchedView<'b> {
        SchedView {
            queue: self.queue,
            locality: self.locality,
            index: self.index,
            held: self.held,
            racks: self.racks,
            window_bound: self.window_bound,
            busy_slots: self.busy_slots,
            total_slots: self.total_slots,
            fits,
            fits_on: self.fits_on,
            free: self.free,
            load: self.load,
            beta: self.beta,
        }
    }

    /// Busy slots / allocated slots (1.0 when no slot is allocated).
    pub fn utilization(&self) -> f64 {
        if self.total_slots == 0 {
            1.0
        } else {
            self.busy_slots as f64 / self.total_slots as f64
        }
    }

    /// The first queued task that can run on this node: the oldest of the highest priority,
    /// unless it does not fit here, then the next one within the window.
    pub fn oldest(&self) -> Option<TaskId> {
        let (_, first) = self.queue.first()?;
        if (self.fits)(first) {
            return Some(first);
        }
        self.queue
            .iter()
            .take_while(|(o, _)| *o < self.window_bound)
            .map(|(_, t)| t)
            .find(|t| (self.fits)(*t))
    }

    /// The task in the window with the highest local-hit fraction on `node` (ties: oldest), and
    /// that fraction. With `only_where_most`, a task is skipped if another node holds more of its
    /// data (MCH: it waits for that node).
    pub fn best_local(&self, node: NodeId, only_where_most: bool) -> Option<(TaskId, Score)> {
        for (task, score) in self.locality.candidates_within(node, self.window_bound) {
            if !(self.fits)(task) {
                continue;
            }
            if only_where_most && score < FULL {
                let here = self.locality.local_bytes(task, node);
                if self.locality.max_local_bytes(task, self.index) > here {
                    continue;
                }
            }
            return Some((task, score));
        }
        None
    }

    /// The oldest task in the window whose inputs are cached nowhere.
    pub fn oldest_cold(&self) -> Option<TaskId> {
        self.locality
            .cold()
            .take_while(|(seq, _)| *seq < self.window_bound)
            .map(|(_, t)| t)
            .find(|t| (self.fits)(*t))
    }
}
