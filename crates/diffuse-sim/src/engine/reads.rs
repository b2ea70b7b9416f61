//! Reading inputs: where an input of a delivered task is really read from (its node's cache, a
//! peer, or storage: the core's plan may have gone stale in between) and what the read crosses,
//! and the fetches under way to each node that other tasks there wait for (single-flight).

use super::network::{peer_path, Network};
use super::nodes::Nodes;
use super::tasks::Used;
use crate::flows::Route;
use crate::testbed::Testbed;
use diffuse_core::{NodeId, ObjectId, Source, TaskId};
use rustc_hash::FxHashMap;

/// How `node` reads `object`, planned from `src`: the resources the read crosses, the source
/// used, and its latency, seconds. A peer is read only if the task caches (`caching`) and the
/// peer still holds the object; a local read only if the node still does; else storage.
pub(super) fn route(
    src: &Source,
    object: ObjectId,
    node: NodeId,
    caching: bool,
    nodes: &Nodes,
    net: &Network,
    tb: &Testbed,
) -> (Route, Used, f64) {
    let here = nodes.node(node);
    match src {
        Source::Local if here.cache.contains(object) => {
            (Route::of(&[here.ports.disk]), Used::Local, 0.0)
        }
        Source::Peer(p) if caching && nodes.holds(*p, object) => (
            peer_path(&nodes.node(*p).ports, &here.ports),
            Used::Peer,
            tb.peer_latency_s,
        ),
        _ => (
            net.storage_path(&here.ports),
            Used::Storage,
            tb.storage_latency_s,
        ),
    }
}

/// Fetches to nodes under way, with the (task, input) pairs waiting for each.
#[derive(Default)]
pub(super) struct Fetches {
    inflight: FxHashMap<(NodeId, ObjectId), Vec<(TaskId, u32)>>,
}

impl Fetches {
    /// Input `i` of `task` waits for `node`'s fetch of `object`, if one is under way.
    pub(super) fn join(&mut self, node: NodeId, object: ObjectId, task: TaskId, i: u32) -> bool {
        match self.inflight.get_mut(&(node, object)) {
            Some(waiters) => {
                waiters.push((task, i));
                true
            }
            None => false,
        }
    }

    /// A task's read of `object` to `node` starts: tasks sent there meanwhile wait for it.
    pub(super) fn started(&mut self, node: NodeId, object: ObjectId) {
        self.inflight.insert((node, object), Vec::new());
    }

    /// A prefetch of `object` to `node` starts: tasks sent there meanwhile wait for it (as do
    /// any already waiting).
    pub(super) fn prefetch_started(&mut self, node: NodeId, object: ObjectId) {
        self.inflight.entry((node, object)).or_default();
    }

    /// `node`'s fetch of `object` is in: the (task, input) pairs that waited for it.
    pub(super) fn done(&mut self, node: NodeId, object: ObjectId) -> Vec<(TaskId, u32)> {
        self.inflight.remove(&(node, object)).unwrap_or_default()
    }
}
