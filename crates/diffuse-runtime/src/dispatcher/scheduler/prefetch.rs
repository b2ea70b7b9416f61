//! MixApart in the live dispatcher: racks as workers declare them, prefetches carried out as
//! storage fetches on the worker the core chose, and the storage bandwidth cap divided among
//! the workers by demand; 2Mark's evictions and moves carried out. [`Prefetch`] owns what they
//! keep: the racks, the shares last sent, the moves under way.
//!
//! The cap is enforced by the workers' reads (`storage::throttle`), each at its share. Every
//! tick the dispatcher gives each worker `cap * w / sum(w)`, where `w` is the number of storage
//! reads the core has under way to it (prefetches and tasks' own) plus a floor of 0.1, so the
//! shares always sum to the cap and a worker with no read under way can still start one.
//! A share is sent again when it changes by more than 5%.

use super::sessions::Sessions;
use super::shared::Shared;
use super::views::LinkView;
use crate::proto::{InputSource, ToWorker};
use diffuse_core::bandwidth::Endpoint;
use diffuse_core::{Core, NodeId, ObjectId, RackId};
use rustc_hash::FxHashMap;

/// A worker with no storage read under way still gets this weight.
const IDLE_WEIGHT: f64 = 0.1;

/// Racks, storage shares and 2Mark's moves.
#[derive(Default)]
pub struct Prefetch {
    /// Workers' racks, by name.
    racks: FxHashMap<String, RackId>,
    /// Each worker's share of the storage cap, as last sent.
    shares: FxHashMap<NodeId, f64>,
    /// 2Mark's moves under way: (object, to) -> from.
    moving: FxHashMap<(ObjectId, NodeId), NodeId>,
}

impl Prefetch {
    /// The rack id of a worker's `--rack` name.
    pub fn rack_id(&mut self, name: &str) -> RackId {
        let next = RackId(self.racks.len() as u32);
        *self.racks.entry(name.to_string()).or_insert(next)
    }

    /// Divide the storage cap among the connected workers by their storage reads under way:
    /// the core's (tasks' inputs, prefetches) and `staging`'s (a worker per copy of a batch).
    pub fn share_storage_cap(&mut self, sh: &mut Shared, staging: &[NodeId]) {
        let Some(cap) = sh.core.config().storage_cap else {
            return;
        };
        if sh.sessions.is_empty() {
            return;
        }
        let mut reads = sh.core.storage_reads();
        for node in staging {
            *reads.entry(*node).or_default() += 1;
        }
        let weight = |n: &NodeId| IDLE_WEIGHT + reads.get(n).copied().unwrap_or(0) as f64;
        let total: f64 = sh.sessions.nodes().map(|n| weight(&n)).sum();
        for node in sh.sessions.nodes() {
            let share = cap * weight(&node) / total;
            let old = self.shares.get(&node).copied();
            if old.is_none_or(|o| (share - o).abs() > 0.05 * o) {
                self.shares.insert(node, share);
                sh.comm.send(
                    node,
                    ToWorker::StorageRate {
                        bytes_per_s: Some(share),
                    },
                );
            }
        }
        self.shares.retain(|n, _| sh.sessions.contains(n));
    }

    /// Carry out 2Mark's `Move`: `to` fetches the object from `from`'s peer server; when `to`
    /// reports its copy (or fails to make one), `from` deletes its own.
    pub fn move_copy(&mut self, o: ObjectId, size: u64, from: NodeId, to: NodeId, sh: &mut Shared) {
        if sh.fetch_from_peer(o, size, from, to) {
            self.moving.insert((o, to), from);
        } else {
            evict_copy(from, o, sh);
        }
    }

    /// `node` now holds `o` (or failed to fetch it): a move to it is over, and its source
    /// deletes its copy.
    pub fn move_ended(&mut self, node: NodeId, o: ObjectId, sh: &mut Shared) {
        if let Some(from) = self.moving.remove(&(o, node)) {
            evict_copy(from, o, sh);
        }
    }
}

/// Carry out the core's `Prefetch`: the worker fetches the object from storage into its cache
/// and reports it `Cached` (or `FetchFailed`).
pub fn prefetch_object(o: ObjectId, size: u64, node: NodeId, sh: &mut Shared) {
    if !sh.sessions.contains(&node) {
        sh.core.handle_prefetch_failed(node, o, sh.now);
        return;
    }
    let input = sh.objects.input(o, size, InputSource::Storage);
    sh.comm.send(
        node,
        ToWorker::Fetch {
            inputs: vec![input],
        },
    );
}

/// Carry out 2Mark's `Evict`: the worker deletes its copy.
pub fn evict_copy(node: NodeId, o: ObjectId, sh: &mut Shared) {
    let uris = vec![sh.objects.uri(o).to_string()];
    sh.send_connected(node, ToWorker::Drop { uris });
}

/// `node` found the copy of `uri` it read from `peer` bad: the holder hashes it again and drops
/// it if it is.
pub fn bad_copy(node: NodeId, uri: &str, peer: &str, sh: &mut Shared) {
    let Some(holder) = sh.sessions.at_url(peer) else {
        return;
    };
    tracing::warn!(uri = %crate::uri::redacted(uri), reader = node.0, holder = holder.0, "a reader found a bad copy; its holder verifies it");
    sh.comm.send(
        holder,
        ToWorker::Verify {
            uris: vec![uri.to_string()],
        },
    );
}

/// The links measured between connected workers and from storage.
pub fn links(core: &Core, sessions: &Sessions) -> Vec<LinkView> {
    let name = |e: Endpoint| match e {
        Endpoint::Storage => Some("storage".to_string()),
        Endpoint::Node(n) => sessions.name(&n).map(str::to_string),
    };
    core.bandwidth_pairs()
        .into_iter()
        .filter_map(|p| {
            Some(LinkView {
                from: name(p.from)?,
                to: name(p.to)?,
                predicted_bytes_per_s: p.predicted,
                samples: p.samples,
            })
        })
        .collect()
}
