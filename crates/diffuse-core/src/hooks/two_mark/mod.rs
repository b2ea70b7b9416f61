//! 2Mark as a hook (`CoreConfig::two_mark`, with a policy that reads through caches): every
//! request a dispatch makes goes through [`TwoMark::request`], and its plan becomes effects:
//! [`Action::Evict`] for copies to delete and [`Action::Move`] for copies to keep in the system
//! on another node, each forgotten by the core at once. The nodes' own caches then never need
//! to evict (the simulator's do not; a live worker's own policy stays as a guard, and what it
//! evicts is reported and followed here). The marking itself is [`crate::hooks::two_mark::marks`].

pub(crate) mod marks;

use super::hook::{CoreView, Effects, Gone, Hook, HookReport};
use crate::action::{Action, Source};
use crate::cache::EvictionPolicy;
use crate::hooks::two_mark::marks::{Plan, TwoMark};
use crate::ids::{NodeId, ObjectId, TaskId};
use crate::task::Input;

/// 2Mark's marks and its model of every node's cache.
#[derive(Clone, Debug, Default)]
pub(crate) struct TwoMarkHook {
    marks: TwoMark,
}

impl TwoMarkHook {
    /// No stores known.
    pub fn new() -> TwoMarkHook {
        TwoMarkHook::default()
    }

    /// Carry out a plan: its copies are forgotten, and the driver asked to delete or move them.
    fn apply(&self, plan: Plan, fx: &mut Effects) {
        for (node, object) in plan.evict {
            fx.forget(node, object);
            fx.act(Action::Evict { node, object });
        }
        for (object, from, to) in plan.moves {
            fx.forget(from, object);
            let size = self.marks.size_of(object).unwrap_or(0);
            fx.act(Action::Move {
                object,
                size,
                from,
                to,
            });
        }
    }
}

impl Hook for TwoMarkHook {
    fn task_submitted(&mut self, inputs: &[Input]) {
        for i in inputs {
            self.marks.size(i.object, i.size);
        }
    }

    fn input_size(&mut self, object: ObjectId, size: u64) {
        self.marks.size(object, size);
    }

    fn object_size(&mut self, object: ObjectId, size: u64) {
        self.marks.size(object, size);
    }

    fn node_cache(&mut self, node: NodeId, quota: u64, _eviction: EvictionPolicy) {
        self.marks.store(node, quota);
    }

    fn node_left(&mut self, node: NodeId) {
        self.marks.store_left(node);
    }

    /// A copy reported: into the model, and out again by 2Mark's order if it overflows.
    fn object_cached(
        &mut self,
        view: &dyn CoreView,
        node: NodeId,
        object: ObjectId,
        fx: &mut Effects,
    ) {
        self.marks.cached(node, object);
        let pinned = |n: NodeId, o: ObjectId| {
            view.is_intermediate(o) || o == object || view.in_transfer(n, o)
        };
        let plan = self.marks.fit(node, &pinned);
        self.apply(plan, fx);
    }

    fn copy_gone(&mut self, node: NodeId, object: ObjectId, _why: Gone, _held: bool) {
        self.marks.evicted(node, object);
    }

    /// `task`, dispatched to `node`, reads these inputs from these sources: 2Mark's requests.
    fn dispatched(
        &mut self,
        view: &dyn CoreView,
        task: TaskId,
        node: NodeId,
        reads: &[(ObjectId, Source)],
        caches: bool,
        fx: &mut Effects,
    ) {
        if !caches {
            return;
        }
        let inputs = view.task_inputs(task);
        let pinned = |n: NodeId, o: ObjectId| {
            view.is_intermediate(o)
                || inputs.iter().any(|i| i.object == o)
                || view.in_transfer(n, o)
        };
        let mut plan = Plan::default();
        for (object, source) in reads {
            let peer = match source {
                Source::Peer(p) => Some(*p),
                _ => None,
            };
            let p = self.marks.request(node, *object, peer, &pinned);
            plan.evict.extend(p.evict);
            plan.moves.extend(p.moves);
        }
        self.apply(plan, fx);
    }

    /// 2Mark's model against the index: every copy a node holds that has a store is modelled.
    fn check(&self, view: &dyn CoreView) -> Result<(), String> {
        self.marks.check()?;
        for (node, object) in view.index().pairs() {
            if view.has_node(node)
                && self.marks.usage(node).is_some()
                && !self.marks.holds(node, object)
            {
                return Err(format!("{node} holds {object}, which 2Mark does not know"));
            }
        }
        Ok(())
    }

    fn report(&self, out: &mut HookReport) {
        out.two_mark = Some(self.marks.stats());
    }
}
