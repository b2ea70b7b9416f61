//! Where a fetch reads from. Of the nodes holding an object, a reader takes the one whose read
//! is expected to end first: the rate predicted for that holder -> reader pair
//! ([`crate::bandwidth`], fed by [`Core::handle_transfer`]) shared among the reads the holder
//! already serves, a holder in the reader's rack first. Before any transfer is measured every
//! pair is predicted alike, and this is the least busy holder.

use super::*;
use crate::bandwidth::{Endpoint, PairView};

impl Core {
    /// The holder `node` reads `object` from, if any may serve it (`kept`: an intermediate
    /// object, read from a holder however busy, as storage has no copy).
    pub(super) fn pick_holder(&self, node: NodeId, object: ObjectId, kept: bool) -> Option<NodeId> {
        let limit = self.cfg.peer_read_limit;
        self.index
            .holders(object)
            .iter()
            .filter_map(|h| {
                let serving = self.nodes.get(*h).map_or(u32::MAX, |n| n.serving);
                (kept || limit == 0 || serving < limit).then(|| {
                    let rate = self
                        .bandwidth
                        .predict(Endpoint::Node(*h), Endpoint::Node(node));
                    let expected = (serving as f64 + 1.0) / rate.max(1.0);
                    (!self.racks.same_rack(node, *h), expected, *h)
                })
            })
            .min_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)))
            .map(|(_, _, h)| h)
    }

    /// The holders of `object` other than `skip`, fastest predicted to `to` first: the sources
    /// a reader may take chunks from besides the one it was given.
    pub fn holders_by_rate(&self, object: ObjectId, to: NodeId, skip: &[NodeId]) -> Vec<NodeId> {
        let mut v: Vec<(f64, NodeId)> = self
            .index
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

    /// `to` received `bytes` from `from` in `secs`: the predictor learns the pair's rate.
    pub fn handle_transfer(&mut self, from: Endpoint, to: NodeId, bytes: u64, secs: f64) {
        self.bandwidth
            .observe(from, Endpoint::Node(to), bytes, secs);
    }

    /// The rate predicted from `from` to `to`, bytes per second.
    pub fn predicted_rate(&self, from: Endpoint, to: NodeId) -> f64 {
        self.bandwidth.predict(from, Endpoint::Node(to))
    }

    /// The bandwidth predictor (for the batch stager, [`crate::staging`]).
    pub fn predictor(&self) -> &crate::bandwidth::Predictor {
        &self.bandwidth
    }

    /// Every pair measured, with its prediction (for metrics).
    pub fn bandwidth_pairs(&self) -> Vec<PairView> {
        self.bandwidth.pairs()
    }
}
