//! MixApart in the live dispatcher: racks as workers declare them, prefetches carried out as
//! storage fetches on the worker the core chose, and the storage bandwidth cap divided among
//! the workers by demand.
//!
//! The cap is enforced by the workers' reads (`storage::throttle`), each at its share. Every
//! tick the dispatcher gives each worker `cap * w / sum(w)`, where `w` is the number of storage
//! reads the core has under way to it (prefetches and tasks' own) plus a floor of 0.1, so the
//! shares always sum to the cap and a worker with no read under way can still start one.
//! A share is sent again when it changes by more than 5%.

use super::views::LinkView;
use super::Scheduler;
use crate::proto::{AssignedInput, InputSource, ToWorker, MULTI_SOURCE_MIN};
use diffuse_core::bandwidth::Endpoint;
use diffuse_core::{NodeId, ObjectId, RackId};

/// A worker with no storage read under way still gets this weight.
const IDLE_WEIGHT: f64 = 0.1;

impl Scheduler {
    /// The rack id of a worker's `--rack` name.
    pub(super) fn rack_id(&mut self, name: &str) -> RackId {
        let next = RackId(self.racks.len() as u32);
        *self.racks.entry(name.to_string()).or_insert(next)
    }

    /// Carry out the core's `Prefetch`: the worker fetches the object from storage into its
    /// cache and reports it `Cached` (or `FetchFailed`).
    pub(super) fn prefetch_object(&mut self, o: ObjectId, size: u64, node: NodeId) {
        if !self.sessions.contains(&node) {
            let now = self.now();
            self.core.handle_prefetch_failed(node, o, now);
            return;
        }
        let input = AssignedInput {
            uri: self.uris[o.0 as usize].clone(),
            size,
            version: self.versions[o.0 as usize].clone(),
            source: InputSource::Storage,
        };
        self.comm.send(
            node,
            ToWorker::Fetch {
                inputs: vec![input],
            },
        );
    }

    /// A worker could not fetch `uri`.
    pub(super) fn fetch_failed(&mut self, node: NodeId, uri: &str, error: &str) {
        tracing::info!(uri = %crate::uri::redacted(uri), "fetch failed: {error}");
        if let Some(o) = self.objects.get(uri).copied() {
            let now = self.now();
            self.core.handle_prefetch_failed(node, o, now);
            self.move_ended(node, o);
            self.stage_fetch_failed(node, o, error);
        }
    }

    /// Divide the storage cap among the connected workers by their storage reads under way.
    pub(super) fn share_storage_cap(&mut self) {
        let Some(cap) = self.core.config().storage_cap else {
            return;
        };
        if self.sessions.is_empty() {
            return;
        }
        let reads = self.core.storage_reads();
        let weight = |n: &NodeId| IDLE_WEIGHT + reads.get(n).copied().unwrap_or(0) as f64;
        let total: f64 = self.sessions.nodes().map(|n| weight(&n)).sum();
        for node in self.sessions.nodes() {
            let share = cap * weight(&node) / total;
            let old = self.storage_shares.get(&node).copied();
            if old.is_none_or(|o| (share - o).abs() > 0.05 * o) {
                self.storage_shares.insert(node, share);
                self.comm.send(
                    node,
                    ToWorker::StorageRate {
                        bytes_per_s: Some(share),
                    },
                );
            }
        }
        self.storage_shares.retain(|n, _| self.sessions.contains(n));
    }

    /// Carry out 2Mark's `Evict`: the worker deletes its copy.
    pub(super) fn evict_copy(&mut self, node: NodeId, o: ObjectId) {
        if self.sessions.contains(&node) {
            self.comm.send(
                node,
                ToWorker::Drop {
                    uris: vec![self.uris[o.0 as usize].clone()],
                },
            );
        }
    }

    /// Carry out 2Mark's `Move`: `to` fetches the object from `from`'s peer server; when `to`
    /// reports its copy (or fails to make one), `from` deletes its own.
    pub(super) fn move_copy(&mut self, o: ObjectId, size: u64, from: NodeId, to: NodeId) {
        let (Some(source), true) = (self.sessions.get(&from), self.sessions.contains(&to)) else {
            self.evict_copy(from, o);
            return;
        };
        let input = AssignedInput {
            uri: self.uris[o.0 as usize].clone(),
            size,
            version: self.versions[o.0 as usize].clone(),
            source: InputSource::Peer {
                url: source.peer_url.clone(),
                also: self.other_holders(o, size, from, to),
            },
        };
        self.comm.send(
            to,
            ToWorker::Fetch {
                inputs: vec![input],
            },
        );
        self.moving.insert((o, to), from);
    }

    /// `node` now holds `o` (or failed to fetch it): a move to it is over, and its source
    /// deletes its copy.
    pub(super) fn move_ended(&mut self, node: NodeId, o: ObjectId) {
        if let Some(from) = self.moving.remove(&(o, node)) {
            self.evict_copy(from, o);
        }
    }

    /// The holders of `o` other than `from` that worker `to` may read it from at the same
    /// time, fastest predicted first, when it is large enough to be read in chunks
    /// (`worker::multi`): their peer URLs.
    pub(super) fn other_holders(
        &self,
        o: ObjectId,
        size: u64,
        from: NodeId,
        to: NodeId,
    ) -> Vec<String> {
        if size < MULTI_SOURCE_MIN {
            return Vec::new();
        }
        self.core
            .holders_by_rate(o, to, &[from, to])
            .iter()
            .filter_map(|h| self.sessions.get(h).map(|s| s.peer_url.clone()))
            .take(15)
            .collect()
    }

    /// `node` received `bytes` from `from` (a peer's URL, None: storage) in `seconds`.
    pub(super) fn transferred(
        &mut self,
        node: NodeId,
        from: Option<&str>,
        bytes: u64,
        seconds: f64,
    ) {
        let from = match from {
            None => Endpoint::Storage,
            Some(url) => match self.sessions.at_url(url) {
                Some(n) => Endpoint::Node(n),
                None => return, // it left
            },
        };
        self.core.handle_transfer(from, node, bytes, seconds);
        self.stage_transferred(node, from, bytes);
    }

    /// `node` found the copy of `uri` it read from `peer` bad: the holder hashes it again and
    /// drops it if it is.
    pub(super) fn bad_copy(&mut self, node: NodeId, uri: &str, peer: &str) {
        let Some(holder) = self.sessions.at_url(peer) else {
            return;
        };
        tracing::warn!(uri = %crate::uri::redacted(uri), reader = node.0, holder = holder.0, "a reader found a bad copy; its holder verifies it");
        self.comm.send(
            holder,
            ToWorker::Verify {
                uris: vec![uri.to_string()],
            },
        );
    }

    /// The links measured between connected workers and from storage.
    pub(super) fn links(&self) -> Vec<LinkView> {
        let name = |e: Endpoint| match e {
            Endpoint::Storage => Some("storage".to_string()),
            Endpoint::Node(n) => self.sessions.name(&n).map(str::to_string),
        };
        self.core
            .bandwidth_pairs()
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
}
