//! Racks: which nodes share a switch, for MixApart's rack-local tier and for choosing a peer
//! source in the reader's own rack.
//!
//! A node belongs to at most one rack, named by the driver (`diffuse worker --rack`, or the
//! simulator's testbed). A node in no rack is rack-local to nothing but itself.

use crate::ids::{NodeId, RackId};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// Node -> rack and rack -> nodes, always agreeing.
#[derive(Clone, Debug, Default)]
pub struct Racks {
    of: FxHashMap<NodeId, RackId>,
    members: BTreeMap<RackId, Vec<NodeId>>,
}

impl Racks {
    /// No racks.
    pub fn new() -> Racks {
        Racks::default()
    }

    /// Whether no node has a rack.
    pub fn is_empty(&self) -> bool {
        self.of.is_empty()
    }

    /// Put `node` in `rack` (moving it if it was in another).
    pub fn set(&mut self, node: NodeId, rack: RackId) {
        self.remove(node);
        self.of.insert(node, rack);
        self.members.entry(rack).or_default().push(node);
    }

    /// Take `node` out of its rack.
    pub fn remove(&mut self, node: NodeId) {
        if let Some(rack) = self.of.remove(&node) {
            if let Some(m) = self.members.get_mut(&rack) {
                m.retain(|n| *n != node);
                if m.is_empty() {
                    self.members.remove(&rack);
                }
            }
        }
    }

    /// The rack of `node`, if it has one.
    pub fn rack_of(&self, node: NodeId) -> Option<RackId> {
        self.of.get(&node).copied()
    }

    /// The other nodes in `node`'s rack (empty if it has none).
    pub fn neighbours(&self, node: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        self.rack_of(node)
            .and_then(|r| self.members.get(&r))
            .into_iter()
            .flatten()
            .copied()
            .filter(move |n| *n != node)
    }

    /// Whether `a` and `b` are in one rack (a node is in its own).
    pub fn same_rack(&self, a: NodeId, b: NodeId) -> bool {
        a == b || self.rack_of(a).is_some_and(|r| self.rack_of(b) == Some(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moving_a_node_keeps_both_maps_in_step() {
        let mut r = Racks::new();
        r.set(NodeId(1), RackId(0));
        r.set(NodeId(2), RackId(0));
        r.set(NodeId(3), RackId(1));
        assert!(r.same_rack(NodeId(1), NodeId(2)));
        assert!(!r.same_rack(NodeId(1), NodeId(3)));
        assert_eq!(r.neighbours(NodeId(1)).collect::<Vec<_>>(), vec![NodeId(2)]);
        r.set(NodeId(2), RackId(1));
        assert_eq!(r.neighbours(NodeId(1)).count(), 0);
        assert_eq!(r.neighbours(NodeId(3)).collect::<Vec<_>>(), vec![NodeId(2)]);
        r.remove(NodeId(3));
        assert_eq!(r.neighbours(NodeId(2)).count(), 0);
        assert!(r.same_rack(NodeId(4), NodeId(4)));
        assert!(!r.same_rack(NodeId(4), NodeId(5)));
    }
}
