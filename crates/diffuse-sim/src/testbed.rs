//! Cluster models of the paper's testbeds, as named presets: one model per testbed, the same for
//! every experiment run on it, with no per-experiment correction factor.
//!
//! A testbed is also a file (`diffuse sim --testbed FILE.toml`): the fields of [`Testbed`]
//! under the names it serializes with, each carrying its unit (`_bytes_per_s`, `_s`). The
//! presets are such files in `testbeds/`, checked to match the code's.
//!
//! Figures come from the paper's section 4 where it gives them (node count, NIC speed, GPFS
//! aggregate rate, 2 ms dispatcher latency, <1 ms storage latency). The local disk read rate and
//! node start-up time are not given; the values chosen and why are in docs/simulation.md.

use serde::{Deserialize, Serialize};

/// Bytes per second in one gigabit per second.
pub const GBPS: f64 = 1e9 / 8.0;

/// A cluster model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Testbed {
    /// Its name (a preset's, or the file's).
    pub name: String,
    /// Nodes available (the provisioner's maximum).
    pub nodes: u32,
    /// Slots (processors) per node.
    pub slots_per_node: u32,
    /// Each node's cache, bytes, when the file gives one (None: the workload's default or
    /// `--cache-size`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole_bytes"
    )]
    pub cache_bytes: Option<u64>,
    /// Aggregate read bandwidth of persistent storage, bytes/s, shared by its concurrent readers.
    #[serde(rename = "storage_bytes_per_s")]
    pub storage_bw: f64,
    /// Latency of one persistent-storage access, seconds.
    pub storage_latency_s: f64,
    /// Node NIC bandwidth each way, bytes/s.
    #[serde(rename = "nic_bytes_per_s")]
    pub nic_bw: f64,
    /// Local disk read bandwidth per node, bytes/s, shared by the node's concurrent readers.
    #[serde(rename = "disk_bytes_per_s")]
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
    #[serde(rename = "rack_uplink_bytes_per_s")]
    pub rack_uplink_bw: f64,
    /// How unequally concurrent storage readers share its bandwidth: the coefficient of
    /// variation of their weights (0, the default: equal shares). Each storage read gets a
    /// weight drawn uniformly around 1 with this spread, from the run's seed. `diffuse
    /// calibrate` measures it from readers reading at once.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub storage_share_spread: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// The widest `storage_share_spread`: weights uniform on (0, 2), a coefficient of variation
/// of 1/sqrt(3).
pub const MAX_SHARE_SPREAD: f64 = 0.577;

impl Testbed {
    /// A storage read's weight: uniform around 1 with `storage_share_spread` as its
    /// coefficient of variation, from `u` uniform on [0, 1).
    pub fn storage_weight(&self, u: f64) -> f64 {
        let half = self.storage_share_spread * 3f64.sqrt();
        (1.0 + half * (2.0 * u - 1.0)).max(0.01)
    }
}

/// A byte count written as an integer or as a float with no fraction (`2e9`).
fn whole_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let x = f64::deserialize(d)?;
    if x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x < 2f64.powi(63) {
        Ok(Some(x as u64))
    } else {
        Err(serde::de::Error::custom(format!(
            "a whole number of bytes, not {x}"
        )))
    }
}

impl Testbed {
    /// ANL/UC TeraGrid as used for the MI workload (GPFS before its upgrade, ~4.4 Gb/s).
    pub fn teragrid_2007() -> Testbed {
        Testbed {
            name: "teragrid-2007".into(),
            nodes: 64,
            slots_per_node: 2,
            cache_bytes: None,
            storage_bw: 4.4 * GBPS,
            storage_latency_s: 0.001,
            nic_bw: GBPS,
            disk_bw: 250e6,
            peer_latency_s: 0.001,
            dispatch_latency_s: 0.002,
            node_startup_s: 30.0,
            rack_size: 0,
            rack_uplink_bw: 0.0,
            storage_share_spread: 0.0,
        }
    }

    /// ANL/UC TeraGrid after the GPFS upgrade (~8 Gb/s), as used for SW and AP.
    pub fn teragrid_2008() -> Testbed {
        Testbed {
            name: "teragrid-2008".into(),
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
            name: "local".into(),
            nodes: 6,
            slots_per_node: 1,
            cache_bytes: None,
            storage_bw: 1e9,
            storage_latency_s: 0.001,
            nic_bw: 2e9,
            disk_bw: 5e9,
            peer_latency_s: 0.001,
            dispatch_latency_s: 0.015,
            node_startup_s: 0.015,
            rack_size: 0,
            rack_uplink_bw: 0.0,
            storage_share_spread: 0.0,
        }
    }

    /// The DAD paper's cluster at the University of Tsukuba (Table II): 4 compute nodes with
    /// Gigabit Ethernet. Gfarm keeps files on the nodes' disks, so "storage" here is a remote
    /// Gfarm read: the holders' NICs, 4 x 1 Gb/s in all. The local read rate is not given:
    /// each node has four 146 GB 6 Gb/s disks, taken as 200 MB/s each, 800 MB/s per node.
    /// Five slots per node run the paper's 20 readgf tasks at once.
    pub fn tsukuba_2014() -> Testbed {
        Testbed {
            name: "tsukuba-2014".into(),
            nodes: 4,
            slots_per_node: 5,
            cache_bytes: None,
            storage_bw: 4.0 * GBPS,
            storage_latency_s: 0.001,
            nic_bw: GBPS,
            disk_bw: 800e6,
            peer_latency_s: 0.001,
            dispatch_latency_s: 0.002,
            node_startup_s: 0.0,
            rack_size: 0,
            rack_uplink_bw: 0.0,
            storage_share_spread: 0.0,
        }
    }

    /// MixApart's testbed (mixapart-cache-over-shared-storage.txt, section 8.1.1): 50 EC2
    /// "standard-large" instances with 2 map slots and 1 Gb/s each, and an NFS server on a
    /// 10 Gb/s instance (the experiments cap its use at 1 Gb/s: `--storage-bandwidth-cap`).
    /// The instances' local disk rate is not given: 100 MB/s, an ephemeral disk of the time.
    /// Hadoop's own scheduling delays are not modelled (the same 2 ms as the other presets).
    pub fn ec2_2013() -> Testbed {
        Testbed {
            name: "ec2-2013".into(),
            nodes: 50,
            slots_per_node: 2,
            cache_bytes: None,
            storage_bw: 10.0 * GBPS,
            storage_latency_s: 0.001,
            nic_bw: GBPS,
            disk_bw: 100e6,
            peer_latency_s: 0.001,
            dispatch_latency_s: 0.002,
            node_startup_s: 30.0,
            rack_size: 0,
            rack_uplink_bw: 0.0,
            storage_share_spread: 0.0,
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

    /// Every preset's name.
    pub const PRESETS: [&'static str; 5] = [
        "teragrid-2007",
        "teragrid-2008",
        "local",
        "tsukuba-2014",
        "ec2-2013",
    ];

    /// Check a testbed read from a file: counts at least 1, rates positive, latencies and
    /// times not negative, every number finite.
    pub fn check(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err("`name` is empty".into());
        }
        for (k, v) in [
            ("nodes", self.nodes),
            ("slots_per_node", self.slots_per_node),
        ] {
            if v == 0 {
                return Err(format!("`{k}` must be at least 1"));
            }
        }
        if self.cache_bytes == Some(0) {
            return Err("`cache_bytes` must be at least 1 (leave it out for the default)".into());
        }
        for (k, v) in [
            ("storage_bytes_per_s", self.storage_bw),
            ("nic_bytes_per_s", self.nic_bw),
            ("disk_bytes_per_s", self.disk_bw),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!(
                    "`{k}` must be a positive number of bytes/s, not {v}"
                ));
            }
        }
        for (k, v) in [
            ("storage_latency_s", self.storage_latency_s),
            ("peer_latency_s", self.peer_latency_s),
            ("dispatch_latency_s", self.dispatch_latency_s),
            ("node_startup_s", self.node_startup_s),
            ("rack_uplink_bytes_per_s", self.rack_uplink_bw),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("`{k}` must be a number, 0 or more, not {v}"));
            }
        }
        if !(0.0..=MAX_SHARE_SPREAD).contains(&self.storage_share_spread) {
            return Err(format!(
                "`storage_share_spread` must be from 0 to {MAX_SHARE_SPREAD}, not {}",
                self.storage_share_spread
            ));
        }
        Ok(())
    }

    /// Total slots at full size.
    pub fn slots(&self) -> u64 {
        self.nodes as u64 * self.slots_per_node as u64
    }
}
