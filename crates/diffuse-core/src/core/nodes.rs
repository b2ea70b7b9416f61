//! The nodes in the pool ([`Nodes`]): what each has and holds, which have a free core, and the
//! slot counts. The core tells it of every node that joins or leaves and of every task that
//! takes or gives back a node's resources; nothing else changes a node's record.

use super::config::CoreError;
use super::state::{NodeEntry, TaskTable};
use crate::ids::{NodeId, NodeName, TaskId};
use crate::resources::Resources;
use crate::task::Placement;
use crate::time::Time;
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;

/// The nodes in the pool, by id.
#[derive(Clone, Debug, Default)]
pub(super) struct Nodes {
    /// Each node's record (looked up on every offer of a slot: a hash map).
    nodes: FxHashMap<NodeId, NodeEntry>,
    /// The nodes' ids in order, for walks over all of them.
    ids: BTreeSet<NodeId>,
    /// Nodes with at least one free core.
    free: BTreeSet<NodeId>,
    /// Cores of all nodes.
    slots: u64,
    /// Cores the running tasks hold: on each node, at most its cores (tasks held ready beyond
    /// them do not count).
    busy: u64,
    /// One-core tasks each node may hold ready beyond its cores
    /// ([`crate::CoreConfig::ready_tasks`]).
    ready: u32,
    /// Nodes holding a task ready: more cores held than they have.
    holding_ready: BTreeSet<NodeId>,
    /// Nodes with a free core (`free` without those whose only room is a ready slot): what
    /// the policies see as free when cores are offered.
    free_cores: BTreeSet<NodeId>,
}

impl Nodes {
    /// No node yet; each node may hold `ready` one-core tasks beyond its cores.
    pub(super) fn new(ready: u32) -> Nodes {
        Nodes {
            ready,
            ..Nodes::default()
        }
    }

    /// Whether nodes hold tasks ready beyond their cores.
    pub(super) fn keeps_ready(&self) -> bool {
        self.ready > 0
    }

    /// `node` joined with `capacity`, idle since `now`.
    pub(super) fn join(
        &mut self,
        node: NodeId,
        capacity: Resources,
        now: Time,
    ) -> Result<(), CoreError> {
        if self.nodes.contains_key(&node) {
            return Err(CoreError::DuplicateNode(node));
        }
        if capacity.cores == 0 {
            return Err(CoreError::NoSlots(node));
        }
        self.nodes.insert(
            node,
            NodeEntry {
                capacity,
                used: Resources {
                    cores: 0,
                    memory: 0,
                    gpus: 0,
                    disk: 0,
                },
                running: Vec::new(),
                serving: 0,
                idle_since: Some(now),
                ends_at: None,
                name: None,
                reported_load: None,
            },
        );
        self.ids.insert(node);
        self.free.insert(node);
        self.free_cores.insert(node);
        self.slots += capacity.cores as u64;
        Ok(())
    }

    /// `node` is gone: its record, if it was in the pool.
    pub(super) fn remove(&mut self, node: NodeId) -> Option<NodeEntry> {
        let entry = self.nodes.remove(&node)?;
        self.ids.remove(&node);
        self.free.remove(&node);
        self.free_cores.remove(&node);
        self.holding_ready.remove(&node);
        self.slots -= entry.capacity.cores as u64;
        self.busy -= entry.used.cores.min(entry.capacity.cores) as u64;
        Some(entry)
    }

    /// `node`'s record.
    pub(super) fn get(&self, node: NodeId) -> Option<&NodeEntry> {
        self.nodes.get(&node)
    }

    /// Whether `node` is in the pool.
    pub(super) fn contains(&self, node: NodeId) -> bool {
        self.nodes.contains_key(&node)
    }

    /// Every node, in id order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (NodeId, &NodeEntry)> {
        self.ids.iter().map(|id| (*id, &self.nodes[id]))
    }

    /// How many nodes are in the pool.
    pub(super) fn count(&self) -> u32 {
        self.nodes.len() as u32
    }

    /// Cores of all nodes.
    pub(super) fn slots(&self) -> u64 {
        self.slots
    }

    /// Cores the running tasks hold (tasks held ready beyond a node's cores not counted).
    pub(super) fn busy(&self) -> u64 {
        self.busy
    }

    /// Cores the running tasks hold, ready tasks included (for checks: it walks every node).
    pub(super) fn held_cores(&self) -> u64 {
        self.nodes.values().map(|n| n.used.cores as u64).sum()
    }

    /// Nodes with room for a task: a free core, or a ready slot.
    pub(super) fn free(&self) -> &BTreeSet<NodeId> {
        &self.free
    }

    /// Whether `node` has room for a task: a free core, or (with `ready`) a ready slot.
    pub(super) fn has_room(&self, node: NodeId, ready: bool) -> bool {
        let extra = if ready { self.ready } else { 0 };
        self.nodes
            .get(&node)
            .is_some_and(|n| n.used.cores < n.capacity.cores + extra)
    }

    /// `task` runs on `node`, holding `held`.
    pub(super) fn occupy(&mut self, node: NodeId, task: TaskId, held: Resources) {
        let n = self.nodes.get_mut(&node).expect("node exists");
        n.running.push(task);
        let before = n.used.cores.min(n.capacity.cores);
        n.used = n.used.plus(&held);
        n.idle_since = None;
        if n.used.cores >= n.capacity.cores + self.ready {
            self.free.remove(&node);
        }
        if n.used.cores >= n.capacity.cores {
            self.free_cores.remove(&node);
        }
        if n.used.cores > n.capacity.cores {
            self.holding_ready.insert(node);
        }
        self.busy += (n.used.cores.min(n.capacity.cores) - before) as u64;
    }

    /// `task` no longer runs on `node` and gives back `held`. False if it did not run there.
    pub(super) fn vacate(&mut self, node: NodeId, task: TaskId, held: Resources) -> bool {
        let Some(n) = self.nodes.get_mut(&node) else {
            return false;
        };
        let Some(pos) = n.running.iter().position(|t| *t == task) else {
            return false;
        };
        n.running.swap_remove(pos);
        let before = n.used.cores.min(n.capacity.cores);
        n.used = n.used.minus(&held);
        self.busy -= (before - n.used.cores.min(n.capacity.cores)) as u64;
        self.free.insert(node);
        if n.used.cores < n.capacity.cores {
            self.free_cores.insert(node);
        }
        if n.used.cores <= n.capacity.cores {
            self.holding_ready.remove(&node);
        }
        true
    }

    /// Nodes holding a task ready beyond their cores.
    pub(super) fn holding_ready(&self) -> &BTreeSet<NodeId> {
        &self.holding_ready
    }

    /// Cores held beyond the nodes' own, by tasks held ready.
    pub(super) fn held_ready(&self) -> u64 {
        self.holding_ready
            .iter()
            .filter_map(|n| self.nodes.get(n))
            .map(|n| n.used.cores.saturating_sub(n.capacity.cores) as u64)
            .sum()
    }

    /// How many nodes have a free core (a ready slot does not count), up to `most`.
    pub(super) fn with_a_free_core(&self, most: usize) -> usize {
        self.free_cores.len().min(most)
    }

    /// Nodes with a free core (a ready slot does not count).
    pub(super) fn free_cores(&self) -> &BTreeSet<NodeId> {
        &self.free_cores
    }

    /// `node` is idle from `now` if it runs nothing.
    pub(super) fn idle_if_empty(&mut self, node: NodeId, now: Time) {
        if let Some(n) = self.nodes.get_mut(&node) {
            if n.running.is_empty() {
                n.idle_since = Some(now);
            }
        }
    }

    /// `node` was told to serve one more peer read.
    pub(super) fn serve(&mut self, node: NodeId) {
        if let Some(n) = self.nodes.get_mut(&node) {
            n.serving += 1;
        }
    }

    /// A peer read `node` served ended.
    pub(super) fn served(&mut self, node: NodeId) {
        if let Some(n) = self.nodes.get_mut(&node) {
            n.serving = n.serving.saturating_sub(1);
        }
    }

    /// `node` now carries `name`; returns the name it carried before.
    pub(super) fn name(
        &mut self,
        node: NodeId,
        name: NodeName,
    ) -> Result<Option<NodeName>, CoreError> {
        let n = self
            .nodes
            .get_mut(&node)
            .ok_or(CoreError::UnknownNode(node))?;
        Ok(n.name.replace(name))
    }

    /// Whether a node named `name` is in the pool.
    pub(super) fn has_name(&self, name: NodeName) -> bool {
        self.nodes.values().any(|n| n.name == Some(name))
    }

    /// `node`'s load as the driver measured it, clamped to [0, 1] (NaN: none). False for an
    /// unknown node.
    pub(super) fn set_load(&mut self, node: NodeId, load: f64) -> bool {
        let Some(n) = self.nodes.get_mut(&node) else {
            return false;
        };
        n.reported_load = load.is_finite().then(|| load.clamp(0.0, 1.0));
        true
    }

    /// When `node` will leave (None: not known). False for an unknown node.
    pub(super) fn set_deadline(&mut self, node: NodeId, ends_at: Option<Time>) -> bool {
        let Some(n) = self.nodes.get_mut(&node) else {
            return false;
        };
        n.ends_at = ends_at;
        true
    }

    /// Whether no node of the pool could ever hold `want` (`hint`: a hard hint, only nodes
    /// of that name count; while none carries it, it is waited for, not reported).
    pub(super) fn never_holds(&self, want: Resources, hint: Option<Placement>) -> bool {
        match hint.filter(|h| h.strict) {
            Some(h) => {
                let mut named = self.nodes.values().filter(|n| n.name == Some(h.node));
                let mut any = false;
                let fits = named.any(|n| {
                    any = true;
                    want.fits_in(&n.capacity)
                });
                any && !fits
            }
            None => !self.nodes.values().any(|n| want.fits_in(&n.capacity)),
        }
    }

    /// Each node's used resources are what its running tasks hold and within what it has;
    /// the free set and the slot counts agree with them.
    pub(super) fn check(&self, tasks: &TaskTable) -> Result<(), String> {
        let mut busy = 0u64;
        let mut slots = 0u64;
        for (id, n) in self.iter() {
            let mut held = Resources {
                cores: 0,
                memory: 0,
                gpus: 0,
                disk: 0,
            };
            for t in &n.running {
                held = held.plus(&tasks[t].resources);
            }
            if held != n.used {
                return Err(format!("{id}: holds {held:?}, counted {:?}", n.used));
            }
            // Ready tasks may hold up to `ready` cores beyond the node's, one each.
            let room = Resources {
                cores: n.capacity.cores + self.ready,
                ..n.capacity
            };
            if !n.used.fits_in(&room) {
                return Err(format!("{id}: tasks hold {:?} of {:?}", n.used, n.capacity));
            }
            if (n.used.cores < room.cores) != self.free.contains(&id) {
                return Err(format!("{id}: free set disagrees with its cores"));
            }
            if (n.used.cores < n.capacity.cores) != self.free_cores.contains(&id) {
                return Err(format!("{id}: set of free cores disagrees with its cores"));
            }
            if (n.used.cores > n.capacity.cores) != self.holding_ready.contains(&id) {
                return Err(format!("{id}: set of nodes holding a task ready disagrees"));
            }
            busy += n.used.cores.min(n.capacity.cores) as u64;
            slots += n.capacity.cores as u64;
        }
        if busy != self.busy || slots != self.slots {
            return Err("slot counters disagree with nodes".into());
        }
        if self.ids.len() != self.nodes.len() {
            return Err("the list of node ids disagrees with the records".into());
        }
        for n in self.free.iter() {
            if !self.nodes.contains_key(n) {
                return Err(format!("free set lists unknown {n}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::NodeName;

    #[test]
    fn occupy_and_vacate_keep_the_free_set_and_the_counts() {
        let mut nodes = Nodes::default();
        let (a, b) = (NodeId(1), NodeId(2));
        nodes.join(a, Resources::cores_only(2), Time::ZERO).unwrap();
        nodes.join(b, Resources::cores_only(1), Time::ZERO).unwrap();
        assert_eq!(
            nodes.join(a, Resources::cores_only(1), Time::ZERO),
            Err(CoreError::DuplicateNode(a))
        );
        assert_eq!((nodes.count(), nodes.slots(), nodes.busy()), (2, 3, 0));
        nodes.occupy(b, TaskId(7), Resources::ONE_CORE);
        assert!(!nodes.has_room(b, false) && !nodes.free().contains(&b));
        assert_eq!(nodes.busy(), 1);
        assert!(!nodes.vacate(a, TaskId(7), Resources::ONE_CORE), "not on a");
        assert!(nodes.vacate(b, TaskId(7), Resources::ONE_CORE));
        assert!(nodes.free().contains(&b));
        assert_eq!(nodes.name(b, NodeName(3)), Ok(None));
        assert!(nodes.has_name(NodeName(3)));
        nodes.remove(b);
        assert_eq!((nodes.count(), nodes.slots(), nodes.busy()), (1, 2, 0));
        assert!(nodes.check(&super::TaskTable::default()).is_ok());
    }
}
