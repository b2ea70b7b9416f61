//! 2Mark in the core (`CoreConfig::two_mark`): every request a dispatch makes goes through
//! [`TwoMark::request`], and its plan becomes actions: [`Action::Evict`] for copies to delete
//! and [`Action::Move`] for copies to keep in the system on another node. The nodes' own
//! caches then never need to evict (the simulator's do not; a live worker's own policy stays
//! as a guard, and what it evicts is reported and followed here).

use super::*;
use crate::twomark::{Plan, TwoMark, TwoMarkStats};

impl Core {
    /// What 2Mark did so far (None: 2Mark is off).
    pub fn two_mark_stats(&self) -> Option<TwoMarkStats> {
        self.two_mark.as_ref().map(TwoMark::stats)
    }

    /// `object` is `size` bytes: for a driver that knows the size of a copy the core has not
    /// seen a task read (objects placed on nodes before any task). Tasks' inputs and
    /// intermediate objects need no call.
    pub fn handle_object_size(&mut self, object: ObjectId, size: u64) {
        if let Some(m) = self.two_mark.as_mut() {
            m.size(object, size);
        }
    }

    pub(super) fn two_mark_sizes(&mut self, inputs: &[Input]) {
        if let Some(m) = self.two_mark.as_mut() {
            for i in inputs {
                m.size(i.object, i.size);
            }
        }
    }

    pub(super) fn two_mark_store(&mut self, node: NodeId, quota: u64) {
        if let Some(m) = self.two_mark.as_mut() {
            m.store(node, quota);
        }
    }

    pub(super) fn two_mark_store_left(&mut self, node: NodeId) {
        if let Some(m) = self.two_mark.as_mut() {
            m.store_left(node);
        }
    }

    /// A copy reported: into the model, and out again by 2Mark's order if it overflows.
    pub(super) fn two_mark_cached(&mut self, node: NodeId, object: ObjectId) {
        let Some(m) = self.two_mark.as_mut() else {
            return;
        };
        m.cached(node, object);
        let intermediates = &self.intermediates;
        let incoming = &self.incoming;
        let pinned = |n: NodeId, o: ObjectId| {
            intermediates.contains_key(&o) || o == object || incoming.contains_key(&(n, o))
        };
        let plan = m.fit(node, &pinned);
        self.apply_plan(plan);
    }

    pub(super) fn two_mark_evicted(&mut self, node: NodeId, object: ObjectId) {
        if let Some(m) = self.two_mark.as_mut() {
            m.evicted(node, object);
        }
    }

    /// `task`, dispatched to `node`, reads these inputs from these sources: 2Mark's requests.
    pub(super) fn two_mark_requests(
        &mut self,
        task: TaskId,
        node: NodeId,
        reads: &[(ObjectId, Source)],
    ) {
        let Some(m) = self.two_mark.as_mut() else {
            return;
        };
        let intermediates = &self.intermediates;
        let incoming = &self.incoming;
        let inputs = &self.tasks[&task].inputs;
        let pinned = |n: NodeId, o: ObjectId| {
            intermediates.contains_key(&o)
                || inputs.iter().any(|i| i.object == o)
                || incoming.contains_key(&(n, o))
        };
        let mut plan = Plan::default();
        for (object, source) in reads {
            let peer = match source {
                Source::Peer(p) => Some(*p),
                _ => None,
            };
            let p = m.request(node, *object, peer, &pinned);
            plan.evict.extend(p.evict);
            plan.moves.extend(p.moves);
        }
        self.apply_plan(plan);
    }

    /// Carry out a plan in the core (its copies leave the index) and ask the driver to.
    fn apply_plan(&mut self, plan: Plan) {
        for (node, object) in plan.evict {
            self.forget_copy(node, object);
            self.actions.push_back(Action::Evict { node, object });
        }
        for (object, from, to) in plan.moves {
            self.forget_copy(from, object);
            let size = self.two_mark_size(object);
            self.actions.push_back(Action::Move {
                object,
                size,
                from,
                to,
            });
        }
    }

    fn two_mark_size(&self, object: ObjectId) -> u64 {
        self.two_mark
            .as_ref()
            .and_then(|m| m.size_of(object))
            .unwrap_or(0)
    }

    /// The core forgets `node`'s copy of `object` (it asked for its deletion).
    fn forget_copy(&mut self, node: NodeId, object: ObjectId) {
        self.transfer_evicted(node, object);
        if self.index.remove(node, object) {
            self.effective_remove_if_unused(node, object);
            if let Some(c) = self.caches.as_mut() {
                c.evicted(node, object);
            }
            self.copies_lost(&[object]);
        }
    }

    /// Check 2Mark's model against the index: every copy it holds is held or on its way.
    pub(super) fn check_two_mark(&self) -> Result<(), String> {
        let Some(m) = self.two_mark.as_ref() else {
            return Ok(());
        };
        m.check()?;
        for (node, object) in self.index.pairs() {
            if self.nodes.contains_key(&node) && m.usage(node).is_some() && !m.holds(node, object) {
                return Err(format!("{node} holds {object}, which 2Mark does not know"));
            }
        }
        Ok(())
    }
}
