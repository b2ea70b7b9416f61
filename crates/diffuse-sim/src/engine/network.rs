//! The network model: the flows that move bytes ([`FlowNet`]) and the resources they cross
//! (storage and its cap, each node's disk and NIC, rack uplinks). It decides what a read from
//! storage or from a peer crosses, and the weight of a storage read; it knows nothing of tasks.
//! (MixApart's prefetches are in `copies.rs`; the name "transfers" is theirs elsewhere.)

use crate::flows::{Flow, FlowNet, ResourceId, Route};
use crate::testbed::Testbed;
use diffuse_core::{NodeId, TaskId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashMap;

/// What a flow in the network carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tag {
    /// Input `i` of a task's current attempt.
    Input(TaskId, u32),
    /// A hand-off push.
    Push(u64),
    /// A prefetch from storage.
    Prefetch(u64),
    /// A 2Mark move between nodes.
    Move(u64),
}

/// A node's place in the network: its disk, its NIC each way, and its rack.
#[derive(Clone, Debug)]
pub(super) struct Ports {
    /// Its local disk.
    pub(super) disk: ResourceId,
    nic_in: ResourceId,
    nic_out: ResourceId,
    /// Its rack's uplink (up, down), if racks are modelled.
    uplink: Option<(ResourceId, ResourceId)>,
    /// Its rack, if the testbed has racks.
    rack: Option<u32>,
}

impl Ports {
    /// Its rack, if the testbed has racks.
    pub(super) fn rack(&self) -> Option<u32> {
        self.rack
    }
}

/// The flows and the resources they share.
pub(super) struct Network {
    flows: FlowNet<Tag>,
    storage: ResourceId,
    /// The cap on storage reads, if any: a resource every storage read crosses.
    storage_cap: Option<ResourceId>,
    /// Each rack's uplink (up, down).
    uplinks: FxHashMap<u32, (ResourceId, ResourceId)>,
    testbed: Testbed,
    /// Draws storage reads' weights (`Testbed::storage_share_spread`).
    shares: ChaCha8Rng,
}

impl Network {
    /// The testbed's storage, with `storage_cap` bytes per second on all storage reads.
    pub(super) fn new(testbed: &Testbed, storage_cap: Option<f64>, seed: u64) -> Network {
        let mut flows = FlowNet::new();
        let storage = flows.add_resource(testbed.storage_bw);
        let storage_cap = storage_cap.map(|c| flows.add_resource(c));
        Network {
            flows,
            storage,
            storage_cap,
            uplinks: FxHashMap::default(),
            testbed: testbed.clone(),
            // Apart from the workload's draws, so a spread changes no file choice.
            shares: ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_5ba2e),
        }
    }

    /// A joining node's disk and NICs, and its rack (by order of joining) with its uplink.
    pub(super) fn attach(&mut self, node: NodeId) -> Ports {
        let tb = &self.testbed;
        let (disk_bw, nic_bw) = (tb.disk_bw, tb.nic_bw);
        let rack = (tb.rack_size > 0).then(|| node.0 / tb.rack_size);
        let uplink = rack.and_then(|r| self.uplink(r));
        Ports {
            disk: self.flows.add_resource(disk_bw),
            nic_in: self.flows.add_resource(nic_bw),
            nic_out: self.flows.add_resource(nic_bw),
            uplink,
            rack,
        }
    }

    /// Rack `r`'s uplink (up, down), made on first use; None when uplinks are not modelled.
    fn uplink(&mut self, r: u32) -> Option<(ResourceId, ResourceId)> {
        let bw = self.testbed.rack_uplink_bw;
        if bw <= 0.0 {
            return None;
        }
        let flows = &mut self.flows;
        Some(
            *self
                .uplinks
                .entry(r)
                .or_insert_with(|| (flows.add_resource(bw), flows.add_resource(bw))),
        )
    }

    /// The resources a read from persistent storage to `node` crosses: storage, the cap on
    /// storage reads, the node's rack uplink, its NIC in.
    pub(super) fn storage_path(&self, node: &Ports) -> Route {
        let mut path = Route::of(&[self.storage]);
        if let Some(cap) = self.storage_cap {
            path.push(cap);
        }
        if let Some((_, down)) = node.uplink {
            path.push(down);
        }
        path.push(node.nic_in);
        path
    }

    /// The weight of a storage read starting now (1 unless the testbed spreads shares).
    pub(super) fn storage_weight(&mut self) -> f64 {
        let tb = &self.testbed;
        if tb.storage_share_spread == 0.0 {
            return 1.0;
        }
        tb.storage_weight(self.shares.random())
    }

    /// Start a flow of `bytes` over `path` at time `t`.
    pub(super) fn start(&mut self, t: f64, bytes: u64, path: &[ResourceId], tag: Tag) {
        self.flows.start(t, bytes, path, tag);
    }

    /// Start a flow whose share of each resource is `weight` times an unweighted one's.
    pub(super) fn start_weighted(
        &mut self,
        t: f64,
        bytes: u64,
        path: &[ResourceId],
        weight: f64,
        tag: Tag,
    ) {
        self.flows.start_weighted(t, bytes, path, weight, tag);
    }

    /// Stop the flows whose tag `cut` selects (their shares go to the others).
    pub(super) fn cancel(&mut self, cut: impl Fn(&Tag) -> bool) {
        self.flows.cancel(cut);
    }

    /// When the next flow completes at current rates, seconds.
    pub(super) fn next_completion(&mut self) -> Option<f64> {
        self.flows.next_completion()
    }

    /// Move time on to `t`: the flows that completed.
    pub(super) fn advance(&mut self, t: f64) -> Vec<Flow<Tag>> {
        self.flows.advance(t)
    }
}

/// The resources a read from a peer crosses: the holder's NIC out, both racks' uplinks when
/// the racks differ, the reader's NIC in.
pub(super) fn peer_path(from: &Ports, to: &Ports) -> Route {
    let mut path = Route::of(&[from.nic_out]);
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
