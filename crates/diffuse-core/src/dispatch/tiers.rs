//! MixApart's data-aware compute scheduler (mixapart-cache-over-shared-storage.txt, Algorithm
//! 1): a free slot on node N takes, from the job whose turn it is, the first task found in this
//! order of tiers:
//!
//! | tier | the task's data is | read from |
//! |---|---|---|
//! | 1. node-local | held by N | N's cache |
//! | 2. rack-local | held by another node of N's rack | that node, through the rack's switch |
//! | 3. in transfer | on its way to N (a fetch or a prefetch under way) | N, once it lands |
//! | 4. cached anywhere | held by some other node | a peer |
//! | 5. storage | nowhere, not even on its way | persistent storage |
//!
//! Within a tier: node-local and in-transfer tasks by the fraction of their bytes on N, then
//! queue order (the candidate sets of [`crate::locality`]); the other tiers in queue order.
//! Jobs take turns as the core's job order says (FIFO or Fair, [`crate::JobOrder`]); the core
//! asks every free node for tiers 1-3 before any node falls back to tiers 4-5, so a task goes
//! to a free node holding its data before any other takes it.
//!
//! Departures, written down in docs/policies.md: a task whose data is only on its way to
//! another node (the paper's rack-local-in-progress and cache-local-in-progress tiers) waits:
//! it is taken by that node (tier 3) or, once the copy lands, from tier 2 or 4, never read
//! from storage a second time, which would also spend the storage cap twice; and tier 5
//! exists because our tasks may read storage themselves, where MixApart's wait for the
//! transfer scheduler ([`crate::core::Core`]'s prefetch) to start their transfer. A rack
//! neighbour with a free slot is passed over in tier 2: it takes its own node-local tasks in
//! the same pass.

use super::policy::DispatchPolicy;
use super::view::SchedView;
use crate::ids::{NodeId, TaskId};
use crate::time::Time;

/// Which tier a task falls in for a node (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    /// Held by the node.
    NodeLocal,
    /// Held by another node of its rack.
    RackLocal,
    /// On its way to the node.
    InTransfer,
    /// Held by some other node.
    CachedAnywhere,
    /// Nowhere, not even on its way: read from persistent storage.
    Storage,
}

/// The MixApart policy: locality tiers, no state of its own.
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalityTiers;

/// Whether `node` holds (not only fetches) some input of the queued task `task`.
fn holds_some(view: &SchedView<'_>, task: TaskId, node: NodeId) -> bool {
    view.locality
        .inputs(task)
        .is_some_and(|(inputs, _)| inputs.iter().any(|i| view.held.holds(node, i.object)))
}

impl LocalityTiers {
    /// Tiers 1 and 3 on `node`: its best task holding data there, else its best task whose data
    /// is only on its way there.
    fn on_node(view: &SchedView<'_>, node: NodeId) -> Option<(TaskId, Tier)> {
        let mut in_transfer = None;
        for (task, _) in view.locality.candidates_within(node, view.window_bound) {
            if !(view.fits)(task) {
                continue;
            }
            if holds_some(view, task, node) {
                return Some((task, Tier::NodeLocal));
            }
            in_transfer.get_or_insert(task);
        }
        in_transfer.map(|t| (t, Tier::InTransfer))
    }

    /// Tier 2: the oldest task held by a busy neighbour of `node`'s rack.
    fn rack_local(view: &SchedView<'_>, node: NodeId) -> Option<TaskId> {
        let mut best: Option<(u64, TaskId)> = None;
        for m in view.racks.neighbours(node) {
            if view.free.contains(&m) {
                continue;
            }
            let first = view
                .locality
                .candidates_within(m, view.window_bound)
                .map(|(t, _)| t)
                .find(|t| (view.fits)(*t) && holds_some(view, *t, m));
            if let Some(t) = first {
                let seq = view.locality.seq(t).expect("a candidate is queued");
                if best.is_none_or(|b| (seq, t) < b) {
                    best = Some((seq, t));
                }
            }
        }
        best.map(|(_, t)| t)
    }

    /// The task a free slot on `node` takes from tiers 1-3, and its tier.
    pub fn choose_near(view: &SchedView<'_>, node: NodeId) -> Option<(TaskId, Tier)> {
        let near = Self::on_node(view, node);
        if let Some((t, Tier::NodeLocal)) = near {
            return Some((t, Tier::NodeLocal));
        }
        if let Some(t) = Self::rack_local(view, node) {
            return Some((t, Tier::RackLocal));
        }
        near
    }

    /// The task a free slot takes from tiers 4-5, and its tier.
    pub fn choose_far(view: &SchedView<'_>) -> Option<(TaskId, Tier)> {
        let held_somewhere = |t: TaskId| {
            view.locality.inputs(t).is_some_and(|(inputs, _)| {
                inputs
                    .iter()
                    .any(|i| !view.held.holders(i.object).is_empty())
            })
        };
        let cached = view
            .locality
            .warm()
            .take_while(|(seq, _)| *seq < view.window_bound)
            .map(|(_, t)| t)
            .find(|t| (view.fits)(*t) && held_somewhere(*t));
        match cached {
            Some(t) => Some((t, Tier::CachedAnywhere)),
            None => view.oldest_cold().map(|t| (t, Tier::Storage)),
        }
    }
}

impl DispatchPolicy for LocalityTiers {
    fn choose_local(&mut self, view: &SchedView<'_>, node: NodeId, _now: Time) -> Option<TaskId> {
        Self::choose_near(view, node).map(|(t, _)| t)
    }
    fn choose_any(&mut self, view: &SchedView<'_>, _node: NodeId, _now: Time) -> Option<TaskId> {
        Self::choose_far(view).map(|(t, _)| t)
    }
}
