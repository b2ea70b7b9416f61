//! The nodes allocated now: each one's cache (what its disk holds, as the core's `NodeCache`),
//! its place in the network, and when it joined (for billing). Node ids are given in order of
//! provisioning and never reused.

use super::network::Ports;
use diffuse_core::index::LocationIndex;
use diffuse_core::{NodeCache, NodeId, ObjectId};
use rustc_hash::FxHashMap;

/// One allocated node.
pub(super) struct SimNode {
    /// What its disk holds.
    pub(super) cache: NodeCache,
    /// Its disk and NICs.
    pub(super) ports: Ports,
    /// When it joined, seconds.
    pub(super) joined: f64,
}

/// The allocated nodes, by id.
#[derive(Default)]
pub(super) struct Nodes {
    live: FxHashMap<NodeId, SimNode>,
    next_id: u32,
}

impl Nodes {
    /// The id of the next node provisioned.
    pub(super) fn new_id(&mut self) -> NodeId {
        self.next_id += 1;
        NodeId(self.next_id - 1)
    }

    /// `node` is up.
    pub(super) fn join(&mut self, node: NodeId, n: SimNode) {
        self.live.insert(node, n);
    }

    /// `node` is released: it is no longer allocated.
    pub(super) fn remove(&mut self, node: NodeId) -> Option<SimNode> {
        self.live.remove(&node)
    }

    /// `node`, if allocated.
    pub(super) fn get(&self, node: NodeId) -> Option<&SimNode> {
        self.live.get(&node)
    }

    /// `node`, if allocated, to change.
    pub(super) fn get_mut(&mut self, node: NodeId) -> Option<&mut SimNode> {
        self.live.get_mut(&node)
    }

    /// `node`, which must be allocated.
    pub(super) fn node(&self, node: NodeId) -> &SimNode {
        &self.live[&node]
    }

    /// Whether `node` is allocated.
    pub(super) fn contains(&self, node: NodeId) -> bool {
        self.live.contains_key(&node)
    }

    /// Whether `node` is allocated and holds `object`.
    pub(super) fn holds(&self, node: NodeId, object: ObjectId) -> bool {
        self.live
            .get(&node)
            .is_some_and(|n| n.cache.contains(object))
    }

    /// Every allocated node.
    pub(super) fn iter(&self) -> impl Iterator<Item = &SimNode> {
        self.live.values()
    }

    /// Every node's cache is within its quota and agrees with the core's location index.
    pub(super) fn check(&self, index: &LocationIndex) -> Result<(), String> {
        for (id, n) in &self.live {
            if n.cache.used() > n.cache.quota() {
                return Err(format!("{id} cache over quota"));
            }
            if index.count(*id) != n.cache.len() || n.cache.objects().any(|o| !index.holds(*id, o))
            {
                return Err(format!("{id}: index differs from cache"));
            }
        }
        Ok(())
    }
}
