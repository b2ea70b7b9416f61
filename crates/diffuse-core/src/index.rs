//! The location index: which nodes hold which objects, as the nodes reported it.
//!
//! It is the paper's centralized index kept "loosely coherent" by executor updates: it changes
//! only through `add` and `remove`, which the core calls when a node reports an object cached or
//! evicted. Both directions (object -> nodes, node -> objects) are kept and always agree.

use crate::ids::{NodeId, ObjectId};
use rustc_hash::{FxHashMap, FxHashSet};

/// Object <-> node map of cached objects.
#[derive(Clone, Debug, Default)]
pub struct LocationIndex {
    holders: FxHashMap<ObjectId, Vec<NodeId>>,
    contents: FxHashMap<NodeId, FxHashSet<ObjectId>>,
}

impl LocationIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Nodes that hold `object` (in the order they reported it).
    pub fn holders(&self, object: ObjectId) -> &[NodeId] {
        self.holders.get(&object).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Whether `node` holds `object`.
    pub fn holds(&self, node: NodeId, object: ObjectId) -> bool {
        self.contents
            .get(&node)
            .is_some_and(|s| s.contains(&object))
    }

    /// Objects `node` holds.
    pub fn contents(&self, node: NodeId) -> impl Iterator<Item = ObjectId> + '_ {
        self.contents.get(&node).into_iter().flatten().copied()
    }

    /// Number of objects `node` holds.
    pub fn count(&self, node: NodeId) -> usize {
        self.contents.get(&node).map_or(0, |s| s.len())
    }

    /// Record that `node` holds `object`. Returns false if it was already known.
    pub fn add(&mut self, node: NodeId, object: ObjectId) -> bool {
        if !self.contents.entry(node).or_default().insert(object) {
            return false;
        }
        self.holders.entry(object).or_default().push(node);
        true
    }

    /// Record that `node` no longer holds `object`. Returns false if it was not known.
    pub fn remove(&mut self, node: NodeId, object: ObjectId) -> bool {
        let Some(set) = self.contents.get_mut(&node) else {
            return false;
        };
        if !set.remove(&object) {
            return false;
        }
        if let Some(h) = self.holders.get_mut(&object) {
            h.retain(|n| *n != node);
            if h.is_empty() {
                self.holders.remove(&object);
            }
        }
        true
    }

    /// Forget `node` entirely; returns the objects it held.
    pub fn remove_node(&mut self, node: NodeId) -> Vec<ObjectId> {
        let objects: Vec<ObjectId> = self.contents(node).collect();
        for o in &objects {
            self.remove(node, *o);
        }
        self.contents.remove(&node);
        objects
    }

    /// Every (node, object) pair.
    pub fn pairs(&self) -> impl Iterator<Item = (NodeId, ObjectId)> + '_ {
        self.contents
            .iter()
            .flat_map(|(n, set)| set.iter().map(move |o| (*n, *o)))
    }

    /// Number of (node, object) pairs; equal from both directions.
    pub fn replicas(&self) -> usize {
        self.contents.values().map(|s| s.len()).sum()
    }

    /// Check that both directions agree. Used by `Core::check_invariants`.
    pub fn check(&self) -> Result<(), String> {
        let by_object: usize = self.holders.values().map(|v| v.len()).sum();
        if by_object != self.replicas() {
            return Err(format!(
                "index directions disagree: {by_object} by object, {} by node",
                self.replicas()
            ));
        }
        for (o, nodes) in &self.holders {
            for n in nodes {
                if !self.holds(*n, *o) {
                    return Err(format!("{o} lists {n} but {n} does not list {o}"));
                }
            }
        }
        Ok(())
    }
}
