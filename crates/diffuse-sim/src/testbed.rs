//! Cluster models of the paper's testbeds, as named presets: one model per testbed, the same for
//! every experiment run on it, with no per-experiment correction factor.
//!
//! Figures come from the paper's section 4 where it gives them (node count, NIC speed, GPFS
//! aggregate rate, 2 ms dispatcher latency, <1 ms storage latency). The local disk read rate and
//! node start-up time are not given; the values chosen and why are in docs/simulation.md.

use serde::Serialize;

/// Bytes per second in one gigabit per second.
pub const GBPS: f64 = 1e9 / 8.0;

/// A cluster model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Testbed {
    /// Preset name.
    pub name: &'static str,
    /// Nodes available (the provisioner's maximum).
    pub nodes: u32,
    /// Slots (processors) per node.
    pub slots_per_node: u32,
    /// Aggregate read bandwidth of persistent storage, bytes/s, shared by its concurrent readers.
    pub storage_bw: f64,
    /// Latency of one persistent-storage access, seconds.
    pub storage_latency_s: f64,
    /// Node NIC bandwidth each way, bytes/s.
    pub nic_bw: f64,
    /// Local disk read bandwidth per node, bytes/s, shared by the node's concurrent readers.
    pub disk_bw: f64,
    /// Latency of one peer-cache access, seconds.
    pub peer_latency_s: f64,
    /// Dispatcher-to-executor latency, seconds.
    pub dispatch_latency_s: f64,
    /// Time from asking the resource manager for a node to the node joining, seconds.
    pub node_startup_s: f64,
    /// Nodes per rack, in the order they join (0: no racks). Racks matter to MixApart's
    /// rack-local tier and, with `rack_uplink_bw`, to what crosses racks.
    pub rack_size: u32,
    /// Each rack's uplink, bytes/s each way (0: not a bottleneck). A peer read between racks
    /// crosses both racks' uplinks; a storage read crosses its reader's.
    pub rack_uplink_bw: f64,
}

impl Testbed {
    /// ANL/UC TeraGrid as used for the MI workload (GPFS before its upgrade, ~4.4 Gb/s).
    pub fn teragrid_2007() -> Testbed {
        Testbed {
            name: "teragrid-2007",
            nodes: 64,
            slots_per_node: 2,
            storage_bw: 4.4 * GBPS,
            storage_latency_s: 0.001,
            nic_bw: GBPS,
            disk_bw: 250e6,
            peer_latency_s: 0.001,
            dispatch_latency_s: 0.002,
            node_startup_s: 30.0,
            rack_size: 0,
            rack_uplink_bw: 0.0,
        }
    }

    /// ANL/UC TeraGrid after the GPFS upgrade (~8 Gb/s), as used for SW and AP.
    pub fn teragrid_2008() -> Testbed {
        Testbed {
            name: "teragrid-2008",
            nodes: 100,
            storage_bw: 8.0 * GBPS,
            ..Testbed::teragrid_2007()
        }
    }

    /// `diffuse worker` processes on one machine, as `diffuse dispatcher --provisioner local`
    /// starts them, measured on the project's 2-core machine by bench/wave.sh (see
    /// docs/simulation.md): one-core workers that join 15 ms after they are asked for;
    /// storage and caches on the same disk through the page cache; peers over loopback. The
    /// dispatch latency includes what a live task costs beyond its compute: submission and
    /// dispatch (3 ms), staging (1 ms) and starting its `sh -c` (10 ms).
    pub fn local() -> Testbed {
        Testbed {
            name: "local",
            nodes: 6,
            slots_per_node: 1,
            storage_bw: 1e9,
            storage_latency_s: 0.001,
            nic_bw: 2e9,
            disk_bw: 5e9,
            peer_latency_s: 0.001,
            dispatch_latency_s: 0.015,
            node_startup_s: 0.015,
            rack_size: 0,
            rack_uplink_bw: 0.0,
        }
    }

    /// The DAD paper's cluster at the University of Tsukuba (Table II): 4 compute nodes with
    /// Gigabit Ethernet. Gfarm keeps files on the nodes' disks, so "storage" here is a remote
    /// Gfarm read: the holders' NICs, 4 x 1 Gb/s in all. The local read rate is not given:
    /// each node has four 146 GB 6 Gb/s disks, taken as 200 MB/s each, 800 MB/s per node.
    /// Five slots per node run the paper's 20 readgf tasks at once.
    pub fn tsukuba_2014() -> Testbed {
        Testbed {
            name: "tsukuba-2014",
            nodes: 4,
            slots_per_node: 5,
            storage_bw: 4.0 * GBPS,
            storage_latency_s: 0.001,
            nic_bw: GBPS,
            disk_bw: 800e6,
            peer_latency_s: 0.001,
            dispatch_latency_s: 0.002,
            node_startup_s: 0.0,
            rack_size: 0,
            rack_uplink_bw: 0.0,
        }
    }

    /// MixApart's testbed (mixapart-cache-over-shared-storage.txt, section 8.1.1): 50 EC2
    /// "standard-large" instances with 2 map slots and 1 Gb/s each, and an NFS server on a
    /// 10 Gb/s instance (the experiments cap its use at 1 Gb/s: `--storage-bandwidth-cap`).
    /// The instances' local disk rate is not given: 100 MB/s, an ephemeral disk of the time.
    /// Hadoop's own scheduling delays are not modelled (the same 2 ms as the other presets).
    pub fn ec2_2013() -> Testbed {
        Testbed {
            name: "ec2-2013",
            nodes: 50,
            slots_per_node: 2,
            storage_bw: 10.0 * GBPS,
            storage_latency_s: 0.001,
            nic_bw: GBPS,
            disk_bw: 100e6,
            peer_latency_s: 0.001,
            dispatch_latency_s: 0.002,
            node_startup_s: 30.0,
            rack_size: 0,
            rack_uplink_bw: 0.0,
        }
    }

    /// A preset by name.
    pub fn by_name(name: &str) -> Option<Testbed> {
        match name {
            "teragrid-2007" => Some(Self::teragrid_2007()),
            "teragrid-2008" => Some(Self::teragrid_2008()),
            "local" => Some(Self::local()),
            "tsukuba-2014" => Some(Self::tsukuba_2014()),
            "ec2-2013" => Some(Self::ec2_2013()),
            _ => None,
        }
    }

    /// Total slots at full size.
    pub fn slots(&self) -> u64 {
        self.nodes as u64 * self.slots_per_node as u64
    }
}
