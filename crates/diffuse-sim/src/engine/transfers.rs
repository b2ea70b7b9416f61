//! What a transfer crosses (disks, NICs, rack uplinks, storage and its cap), and MixApart's
//! prefetches, simulated: a flow from storage to the node the core named, which tasks sent to
//! that node join (single-flight), and whose copy is cached and reported when it lands.

use super::*;

/// The resources a read from a peer crosses: the holder's NIC out, both racks' uplinks when
/// the racks differ, the reader's NIC in.
pub(super) fn peer_path(from: &SimNode, to: &SimNode) -> Vec<ResourceId> {
    let mut path = vec![from.nic_out];
    if from.rack != to.rack {
        if let Some((up, _)) = from.uplink {
            path.push(up);
        }
        if let Some((_, down)) = to.uplink {
            path.push(down);
        }
    }
    path.push(to.nic_in);
    path
}

impl Simulation {
    /// Rack `r`'s uplink (up, down), made on first use; None when uplinks are not modelled.
    pub(super) fn uplink(&mut self, r: u32) -> Option<(ResourceId, ResourceId)> {
        let bw = self.cfg.testbed.rack_uplink_bw;
        if bw <= 0.0 {
            return None;
        }
        let net = &mut self.net;
        Some(
            *self
                .uplinks
                .entry(r)
                .or_insert_with(|| (net.add_resource(bw), net.add_resource(bw))),
        )
    }

    /// The resources a read from persistent storage to `node` crosses: storage, the cap on
    /// storage reads, the node's rack uplink, its NIC in.
    pub(super) fn storage_path(&self, node: &SimNode) -> Vec<ResourceId> {
        let mut path = vec![self.storage];
        path.extend(self.storage_cap);
        if let Some((_, down)) = node.uplink {
            path.push(down);
        }
        path.push(node.nic_in);
        path
    }

    /// The core asks for `object` (`size` bytes) to be copied from storage to `node`.
    pub(super) fn prefetch(&mut self, object: ObjectId, size: u64, node: NodeId) {
        if !self.nodes.contains_key(&node) {
            self.core.handle_prefetch_failed(node, object, self.now);
            return;
        }
        // Tasks the core sends to `node` for `object` meanwhile wait for this copy.
        self.inflight.entry((node, object)).or_default();
        let id = self.next_prefetch;
        self.next_prefetch += 1;
        self.prefetches.insert(id, (node, object, size));
        let at = self.now + Duration::from_secs_f64(self.cfg.testbed.storage_latency_s);
        self.push(at, Ev::PrefetchStart(id));
    }

    pub(super) fn prefetch_start(&mut self, id: u64, t: f64) {
        let Some(&(node, _, size)) = self.prefetches.get(&id) else {
            return;
        };
        let Some(n) = self.nodes.get(&node) else {
            self.prefetches.remove(&id);
            return;
        };
        let path = self.storage_path(n);
        let weight = self.storage_weight();
        self.net
            .start_weighted(t, size, &path, weight, Tag::Prefetch(id));
    }

    /// A prefetch landed: cache it on its node (reporting evictions), report it, and hand it to
    /// the tasks waiting for it there.
    pub(super) fn prefetch_done(&mut self, id: u64, bytes: u64) -> Result<(), SimError> {
        let Some((node, object, size)) = self.prefetches.remove(&id) else {
            return Ok(());
        };
        self.bytes_prefetched += bytes;
        self.current.bytes_storage += bytes as f64;
        let Some(n) = self.nodes.get_mut(&node) else {
            return Ok(());
        };
        if let Admission::Stored(evicted) = n.cache.insert(object, size) {
            for o in evicted {
                self.pushed_unread.remove(&(node, o));
                self.core
                    .handle_object_evicted(node, o, self.now)
                    .map_err(|e| self.core_err(e))?;
            }
            self.core
                .handle_object_cached(node, object, self.now)
                .map_err(|e| self.core_err(e))?;
        } else {
            self.core.handle_prefetch_failed(node, object, self.now);
        }
        for (waiter, j) in self.inflight.remove(&(node, object)).unwrap_or_default() {
            self.joined_fetch_done(waiter, j as usize);
        }
        Ok(())
    }

    /// 2Mark moves `object` from `from` to `to`: `from` gives its copy up now (the bytes are in
    /// the pipe), `to` caches it when the flow ends.
    pub(super) fn move_copy(&mut self, object: ObjectId, size: u64, from: NodeId, to: NodeId) {
        let held = self
            .nodes
            .get_mut(&from)
            .is_some_and(|n| n.cache.remove(object).is_some());
        self.pushed_unread.remove(&(from, object));
        if !held {
            return;
        }
        let id = self.next_prefetch;
        self.next_prefetch += 1;
        self.moves.insert(id, (object, size, from, to));
        let at = self.now + Duration::from_secs_f64(self.cfg.testbed.peer_latency_s);
        self.push(at, Ev::MoveStart(id));
    }

    pub(super) fn move_start(&mut self, id: u64, t: f64) {
        let Some(&(_, size, from, to)) = self.moves.get(&id) else {
            return;
        };
        match (self.nodes.get(&from), self.nodes.get(&to)) {
            (Some(f), Some(d)) => {
                let path = peer_path(f, d);
                self.net.start(t, size, &path, Tag::Move(id));
            }
            _ => {
                self.moves.remove(&id);
            }
        }
    }

    pub(super) fn move_done(&mut self, id: u64) -> Result<(), SimError> {
        let Some((object, size, _, to)) = self.moves.remove(&id) else {
            return Ok(());
        };
        let Some(n) = self.nodes.get_mut(&to) else {
            return Ok(());
        };
        if let Admission::Stored(evicted) = n.cache.insert(object, size) {
            for o in evicted {
                self.core
                    .handle_object_evicted(to, o, self.now)
                    .map_err(|e| self.core_err(e))?;
            }
            self.core
                .handle_object_cached(to, object, self.now)
                .map_err(|e| self.core_err(e))?;
        }
        Ok(())
    }
}
