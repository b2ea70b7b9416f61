//! The copies of objects on nodes ([`Copies`]): what nodes hold (the index, the only valid peer
//! sources), what is on its way to a node (a running task's fetch, a prefetch), what scoring
//! sees (the two together) and the per-node candidate sets built on what scoring sees. These
//! four change together: a copy that lands, goes, or starts or stops arriving updates each of
//! them here, and nowhere else.

use super::state::{Phase, TaskTable};
use crate::ids::{NodeId, ObjectId, TaskId};
use crate::index::LocationIndex;
use crate::locality::Locality;
use crate::task::Input;
use rustc_hash::FxHashMap;

/// What nodes hold and what is on its way to them, and the candidate sets scored on both.
#[derive(Clone, Debug, Default)]
pub(super) struct Copies {
    /// What nodes reported they hold: the only valid peer sources.
    index: LocationIndex,
    /// `index` plus objects being fetched to a node for a running task (MixApart's "in
    /// transfer" tier): what scoring sees, so a task goes to the node already fetching its data.
    effective: LocationIndex,
    /// Transfers under way to each (node, object) pair: running tasks' fetches and the hooks'.
    incoming: FxHashMap<(NodeId, ObjectId), u32>,
    /// The queued tasks' candidate sets, scored on `effective`.
    locality: Locality,
    /// A copy landed or what scoring sees changed since [`Copies::take_changed`]: a dispatch
    /// pass may now decide differently.
    changed: bool,
}

impl Copies {
    /// What nodes hold.
    pub(super) fn index(&self) -> &LocationIndex {
        &self.index
    }

    /// What scoring sees: what nodes hold and what is on its way to them.
    pub(super) fn effective(&self) -> &LocationIndex {
        &self.effective
    }

    /// The queued tasks' candidate sets.
    pub(super) fn locality(&self) -> &Locality {
        &self.locality
    }

    /// Whether a transfer of `object` to `node` is under way.
    pub(super) fn in_transfer(&self, node: NodeId, object: ObjectId) -> bool {
        self.incoming.contains_key(&(node, object))
    }

    /// Whether something changed that a dispatch pass reads, since the last call; clears it.
    pub(super) fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// `node` reports it holds `object`.
    pub(super) fn cached(&mut self, node: NodeId, object: ObjectId) {
        if self.index.add(node, object) {
            // A copy that landed can be read by peers now (MixApart's cached-anywhere tier).
            self.changed = true;
        }
        self.scored_add(node, object);
    }

    /// `node`'s copy of `object` no longer counts. Returns whether the index had it.
    pub(super) fn forget(&mut self, node: NodeId, object: ObjectId) -> bool {
        let held = self.index.remove(node, object);
        if held {
            self.scored_remove_if_unused(node, object);
        }
        held
    }

    /// One more transfer of `object` to `node` (a task's fetch or a prefetch) started.
    pub(super) fn transfer_started(&mut self, node: NodeId, object: ObjectId) {
        *self.incoming.entry((node, object)).or_default() += 1;
        self.scored_add(node, object);
    }

    /// One transfer of `object` to `node` ended. Returns true if it was the last one: the object
    /// is then no longer in transfer there.
    pub(super) fn transfer_ended(&mut self, node: NodeId, object: ObjectId) -> bool {
        let key = (node, object);
        let Some(c) = self.incoming.get_mut(&key) else {
            return false;
        };
        *c -= 1;
        if *c > 0 {
            return false;
        }
        self.incoming.remove(&key);
        self.scored_remove_if_unused(node, object);
        true
    }

    /// `node` left: its copies and the transfers to it are forgotten. Returns the objects it
    /// held.
    pub(super) fn remove_node(&mut self, node: NodeId) -> Vec<ObjectId> {
        let held = self.index.remove_node(node);
        self.incoming.retain(|(n, _), _| *n != node);
        for object in self.effective.remove_node(node) {
            self.locality.object_removed(node, object);
        }
        self.locality.remove_node(node);
        held
    }

    /// `task` entered the queue at `seq`: it enters the candidate sets.
    pub(super) fn enqueue(&mut self, task: TaskId, seq: u64, inputs: &[Input]) {
        self.locality.enqueue(task, seq, inputs, &self.effective);
    }

    /// `task`, queued at `seq`, left the queue: it leaves the candidate sets.
    pub(super) fn dequeue(&mut self, task: TaskId, seq: u64) {
        self.locality.dequeue(task, seq, &self.effective);
    }

    fn scored_add(&mut self, node: NodeId, object: ObjectId) {
        if self.effective.add(node, object) {
            self.locality.object_added(node, object);
            self.changed = true;
        }
    }

    /// Drop (node, object) from what scoring sees unless the node holds it or is fetching it.
    fn scored_remove_if_unused(&mut self, node: NodeId, object: ObjectId) {
        if !self.index.holds(node, object)
            && !self.incoming.contains_key(&(node, object))
            && self.effective.remove(node, object)
        {
            self.locality.object_removed(node, object);
            self.changed = true;
        }
    }

    /// What scoring sees is exactly what nodes hold and what is on its way; the in-transfer
    /// counts are the running tasks' fetches and the hooks' transfers (`hook_transfers`); with
    /// `caching` (the queued tasks are in the candidate sets), the sets agree with what
    /// scoring sees.
    pub(super) fn check(
        &self,
        tasks: &TaskTable,
        hook_transfers: impl Iterator<Item = (NodeId, ObjectId)>,
        caching: bool,
    ) -> Result<(), String> {
        let (index, effective, incoming) = (&self.index, &self.effective, &self.incoming);
        index.check()?;
        effective.check()?;
        for (node, object) in effective.pairs() {
            if !index.holds(node, object) && !incoming.contains_key(&(node, object)) {
                return Err(format!(
                    "{node} scored as holding {object}: neither held nor fetched"
                ));
            }
        }
        for (node, object) in index.pairs().chain(incoming.keys().copied()) {
            if !effective.holds(node, object) {
                return Err(format!("{object} on {node} missing from the scored index"));
            }
        }
        let mut fetches: FxHashMap<(NodeId, ObjectId), u32> = FxHashMap::default();
        for t in tasks.values() {
            if let Phase::Running(r) = &t.phase {
                for o in &r.fetching {
                    *fetches.entry((r.node, *o)).or_default() += 1;
                }
            }
        }
        for key in hook_transfers {
            *fetches.entry(key).or_default() += 1;
        }
        if fetches != *incoming {
            return Err("in-transfer counts disagree with running tasks and prefetches".into());
        }
        if caching {
            self.locality.check(&self.effective)?;
        }
        Ok(())
    }
}
