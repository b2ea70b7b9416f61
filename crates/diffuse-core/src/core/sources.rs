//! Where a fetch reads from ([`Sources`]). Of the nodes holding an object, a reader takes the
//! one whose read is expected to end first: the rate predicted for that holder -> reader pair
//! ([`crate::bandwidth`], fed by [`crate::Core::handle_transfer`]) shared among the reads the
//! holder already serves, a holder in the reader's rack first. Before any transfer is measured
//! every pair is predicted alike, and this is the least busy holder.

use super::nodes::Nodes;
use crate::bandwidth::{Endpoint, Predictor};
use crate::ids::{NodeId, ObjectId};
use crate::index::LocationIndex;
use crate::racks::Racks;

/// The rates past transfers achieved, and the limit on the peer reads one node serves.
#[derive(Clone, Debug)]
pub(super) struct Sources {
    /// Rates achieved by past transfers, per pair.
    bandwidth: Predictor,
    /// Most peer reads one node is told to serve at once (0: no limit;
    /// `CoreConfig::peer_read_limit`).
    peer_read_limit: u32,
}

impl Sources {
    /// No transfer measured yet.
    pub(super) fn new(bandwidth: Predictor, peer_read_limit: u32) -> Sources {
        Sources {
            bandwidth,
            peer_read_limit,
        }
    }

    /// The holder (by `index`) `node` reads `object` from, if any may serve it (`kept`: an
    /// intermediate object, read from a holder however busy, as storage has no copy).
    pub(super) fn pick_holder(
        &self,
        index: &LocationIndex,
        nodes: &Nodes,
        racks: &Racks,
        node: NodeId,
        object: ObjectId,
        kept: bool,
    ) -> Option<NodeId> {
        let limit = self.peer_read_limit;
        index
            .holders(object)
            .iter()
            .filter_map(|h| {
                let serving = nodes.get(*h).map_or(u32::MAX, |n| n.serving);
                (kept || limit == 0 || serving < limit).then(|| {
                    let rate = self
                        .bandwidth
                        .predict(Endpoint::Node(*h), Endpoint::Node(node));
                    let expected = (serving as f64 + 1.0) / rate.max(1.0);
                    (!racks.same_rack(node, *h), expected, *h)
                })
            })
            .min_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)))
            .map(|(_, _, h)| h)
    }

    /// The holders (by `index`) of `object` other than `skip`, fastest predicted to `to` first.
    pub(super) fn holders_by_rate(
        &self,
        index: &LocationIndex,
        object: ObjectId,
        to: NodeId,
        skip: &[NodeId],
    ) -> Vec<NodeId> {
        let mut v: Vec<(f64, NodeId)> = index
            .holders(object)
            .iter()
            .filter(|h| !skip.contains(h))
            .map(|h| {
                let rate = self
                    .bandwidth
                    .predict(Endpoint::Node(*h), Endpoint::Node(to));
                (rate, *h)
            })
            .collect();
        v.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        v.into_iter().map(|(_, h)| h).collect()
    }

    /// The bandwidth predictor.
    pub(super) fn predictor(&self) -> &Predictor {
        &self.bandwidth
    }

    /// `to` received `bytes` from `from` in `secs`: the predictor learns the pair's rate.
    pub(super) fn observe(&mut self, from: Endpoint, to: NodeId, bytes: u64, secs: f64) {
        self.bandwidth
            .observe(from, Endpoint::Node(to), bytes, secs);
    }
}
