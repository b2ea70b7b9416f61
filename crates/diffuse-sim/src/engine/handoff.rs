//! Cache hand-off on release, the bookkeeping: released nodes still pushing (allocated and
//! billed until their last push ends), the pushes under way, the pushed copies nobody has read
//! yet, and the hand-off report. The engine moves the pushes as network flows and caches them.

use super::nodes::SimNode;
use crate::report::HandoffReport;
use diffuse_core::{Handoff, NodeId, ObjectId};
use rustc_hash::{FxHashMap, FxHashSet};

/// How a push ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ended {
    /// The target holds the object.
    Cached,
    /// The time bound was up.
    Cut,
    /// The target was released, or had no room left.
    Lost,
}

/// A hand-off push from a released node.
struct Push {
    from: NodeId,
    handoff: Handoff,
}

/// A released node still pushing its hand-off.
struct Leaving {
    node: SimNode,
    /// Pushes not yet ended.
    pushes: u32,
    /// When the core released it, seconds.
    released: f64,
}

/// Every hand-off under way, and what hand-off did so far.
#[derive(Default)]
pub(super) struct Handoffs {
    /// Released nodes whose pushes are under way.
    leaving: FxHashMap<NodeId, Leaving>,
    pushes: FxHashMap<u64, Push>,
    next_push: u64,
    /// Copies hand-off made that nobody has read yet: (node, object).
    unread: FxHashSet<(NodeId, ObjectId)>,
    report: HandoffReport,
}

impl Handoffs {
    /// Released node `node` (`n`, released at `now` seconds) pushes `handoff`: the ids of its
    /// pushes, in order.
    pub(super) fn begin(
        &mut self,
        node: NodeId,
        n: SimNode,
        handoff: Vec<Handoff>,
        now: f64,
    ) -> Vec<u64> {
        self.report.releases += 1;
        self.report.planned += handoff.len() as u64;
        self.report.planned_bytes += handoff.iter().map(|h| h.size).sum::<u64>();
        self.leaving.insert(
            node,
            Leaving {
                node: n,
                pushes: handoff.len() as u32,
                released: now,
            },
        );
        let mut ids = Vec::with_capacity(handoff.len());
        for h in handoff {
            let id = self.next_push;
            self.next_push += 1;
            self.pushes.insert(
                id,
                Push {
                    from: node,
                    handoff: h,
                },
            );
            ids.push(id);
        }
        ids
    }

    /// Push `id`, if not ended: from which node, and what.
    pub(super) fn push(&self, id: u64) -> Option<(NodeId, Handoff)> {
        self.pushes.get(&id).map(|p| (p.from, p.handoff))
    }

    /// Released node `node`, if it is still pushing.
    pub(super) fn leaving(&self, node: NodeId) -> Option<&SimNode> {
        self.leaving.get(&node).map(|l| &l.node)
    }

    /// The pushes of `node` not ended, by id.
    pub(super) fn pushes_from(&self, node: NodeId) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .pushes
            .iter()
            .filter(|(_, p)| p.from == node)
            .map(|(id, _)| *id)
            .collect();
        ids.sort();
        ids
    }

    /// Push `id` ended `how` at `now` seconds: the slot-seconds to bill if it was its node's
    /// last (`slots` per node), from joining to now.
    pub(super) fn ended(&mut self, id: u64, how: Ended, now: f64, slots: f64) -> Option<f64> {
        let p = self.pushes.remove(&id)?;
        match how {
            Ended::Cached => {
                self.report.pushed += 1;
                self.report.pushed_bytes += p.handoff.size;
            }
            Ended::Cut => self.report.cut += 1,
            Ended::Lost => self.report.lost += 1,
        }
        let l = self.leaving.get_mut(&p.from)?;
        l.pushes -= 1;
        if l.pushes > 0 {
            return None;
        }
        let l = self.leaving.remove(&p.from).expect("leaving node");
        self.report.cpu_hours += (now - l.released) * slots / 3600.0;
        Some((now - l.node.joined) * slots)
    }

    /// The run ended at `end` seconds: nodes still pushing are billed to the end, as the others
    /// are. The slot-seconds to bill.
    pub(super) fn finish(&mut self, end: f64, slots: f64) -> Vec<f64> {
        let mut billed = Vec::new();
        for l in std::mem::take(&mut self.leaving).into_values() {
            billed.push((end - l.node.joined).max(0.0) * slots);
            self.report.cpu_hours += (end - l.released).max(0.0) * slots / 3600.0;
        }
        billed
    }

    /// `node` cached a pushed copy of `object`.
    pub(super) fn pushed(&mut self, node: NodeId, object: ObjectId) {
        self.unread.insert((node, object));
    }

    /// A task read `object` from `holder`: a pushed copy read for the first time was useful.
    pub(super) fn read(&mut self, holder: NodeId, object: ObjectId) {
        if self.unread.remove(&(holder, object)) {
            self.report.useful += 1;
        }
    }

    /// `node` no longer holds `object`.
    pub(super) fn forget(&mut self, node: NodeId, object: ObjectId) {
        self.unread.remove(&(node, object));
    }

    /// `node` was released: its copies are gone.
    pub(super) fn forget_node(&mut self, node: NodeId) {
        self.unread.retain(|(holder, _)| *holder != node);
    }

    /// What hand-off did.
    pub(super) fn report(&self) -> HandoffReport {
        self.report
    }
}
