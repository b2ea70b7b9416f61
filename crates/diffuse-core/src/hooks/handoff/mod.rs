//! Cache hand-off as a hook (`CoreConfig::handoff`, with a policy that reads through caches):
//! the core's model of every node's cache follows the reports, and a node that provisioning
//! releases pushes what the survivors will read to them ([`crate::hooks::handoff::planner::plan`]).

pub(crate) mod planner;

use super::hook::{CoreView, Effects, Gone, Hook};
use crate::cache::EvictionPolicy;
use crate::ids::{NodeId, ObjectId};
use crate::task::Input;
use crate::time::Time;
use crate::Source;
use planner::{CacheModel, Handoff, HandoffConfig, PlanInput, Target, Want};
use std::collections::BTreeSet;

/// Cache hand-off: its settings and its model of the nodes' caches.
#[derive(Clone, Debug)]
pub(crate) struct CacheHandoff {
    cfg: HandoffConfig,
    model: CacheModel,
}

impl CacheHandoff {
    /// Hand-off with these settings, no node known.
    pub fn new(cfg: HandoffConfig) -> CacheHandoff {
        CacheHandoff {
            cfg,
            model: CacheModel::new(),
        }
    }

    /// The nodes' caches as hand-off sees them.
    pub fn model(&self) -> &CacheModel {
        &self.model
    }
}

impl Hook for CacheHandoff {
    fn task_admitted(&mut self, inputs: &[Input]) {
        for i in inputs {
            self.model.learn_size(i.object, i.size);
        }
    }

    fn input_size(&mut self, object: ObjectId, size: u64) {
        self.model.learn_size(object, size);
    }

    fn node_joined(&mut self, node: NodeId) {
        self.model.node_joined(node);
    }

    fn node_cache(&mut self, node: NodeId, quota: u64, eviction: EvictionPolicy) {
        self.model.set_cache(node, quota, eviction);
    }

    fn node_left(&mut self, node: NodeId) {
        self.model.node_removed(node);
    }

    /// What `node` pushes before it goes; the nodes in `releasing` go in the same round and
    /// receive nothing. The pushes reserve room on their targets.
    fn node_released(
        &mut self,
        view: &dyn CoreView,
        node: NodeId,
        releasing: &BTreeSet<NodeId>,
        now: Time,
    ) -> Vec<Handoff> {
        let targets: Vec<Target> = view
            .nodes_busy()
            .into_iter()
            .filter(|(id, _)| !releasing.contains(id))
            .map(|(node, busy)| Target { node, busy })
            .collect();
        let locality = view.locality();
        let wanted = |o: ObjectId| {
            locality
                .wanted(o)
                .map(|(readers, first)| Want { readers, first })
        };
        let plan = planner::plan(&PlanInput {
            node,
            index: view.effective(),
            caches: &self.model,
            targets: &targets,
            wanted: &wanted,
            budget: self.cfg.budget,
        });
        self.model.reserve(&plan, now);
        plan
    }

    fn object_cached(
        &mut self,
        _view: &dyn CoreView,
        node: NodeId,
        object: ObjectId,
        _fx: &mut Effects,
    ) {
        self.model.cached(node, object);
    }

    fn copy_gone(&mut self, node: NodeId, object: ObjectId, why: Gone, held: bool) {
        let gone = match why {
            Gone::Reported | Gone::Forgotten => held,
            Gone::Released => true,
            // Told with the holders at once (`object_invalidated`); a fetch never landed.
            Gone::Invalidated | Gone::NeverLanded => false,
        };
        if gone {
            self.model.evicted(node, object);
        }
    }

    fn object_invalidated(&mut self, object: ObjectId, holders: &[NodeId]) {
        self.model.invalidated(object, holders);
    }

    /// A task sent to read its node's own copy is a use (for LRU and LFU).
    fn dispatched(
        &mut self,
        _view: &dyn CoreView,
        _task: crate::ids::TaskId,
        node: NodeId,
        inputs: &[(ObjectId, Source)],
        _caches: bool,
        _fx: &mut Effects,
    ) {
        for (object, source) in inputs {
            if *source == Source::Local {
                self.model.touched(node, *object);
            }
        }
    }

    fn timeout(&mut self, now: Time) {
        self.model.expire(now, self.cfg.time_bound);
    }

    fn check(&self, view: &dyn CoreView) -> Result<(), String> {
        self.model.check(view.index())
    }
}
