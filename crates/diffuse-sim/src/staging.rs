//! Staging a batch of files to nodes, simulated (GDS, coordinated-transfers-gridftp-gds.txt,
//! section 5, scaled down): the core's [`Stager`] plans the chunks, and each part of a chunk is
//! a fluid flow over the source's NIC, a link between the two hosts, and the destination's NIC.
//!
//! The platform is the paper's four sites (Table 1: node-to-node bandwidths in Mb/s between BMI,
//! CSE, ORNL and ANL). The batch follows section 5.1: files of 10, 50 and 500 MB in proportions
//! 0.5, 0.35 and 0.15, each wanted on two BMI nodes; replicas first on ORNL, then added on ANL
//! and CSE as the degree of replication grows (Figure 2). The bandwidth predictor starts from one
//! past transfer per pair of hosts at Table 1's rate (the paper's scheduler had the history of
//! earlier GridFTP transfers), and learns from every chunk.

use crate::flows::{FlowNet, ResourceId};
use diffuse_core::bandwidth::{BandwidthConfig, Endpoint, Predictor};
use diffuse_core::staging::{Request, Schedule, StageConfig, Stager};
use diffuse_core::{NodeId, ObjectId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashMap;
use serde::Serialize;

/// Mb/s in bytes/s.
const MBPS: f64 = 1e6 / 8.0;

/// The sites, and the paper's node-to-node bandwidths between them (Mb/s).
pub const SITES: [&str; 4] = ["BMI", "CSE", "ORNL", "ANL"];
const TABLE_1: [[f64; 4]; 4] = [
    [880.0, 880.0, 100.0, 4.0],
    [880.0, 880.0, 120.0, 4.0],
    [100.0, 120.0, 900.0, 10.0],
    [4.0, 4.0, 300.0, 700.0],
];

/// Hosts of a platform: site of each host.
#[derive(Clone, Debug)]
pub struct Platform {
    /// The site (index into [`SITES`]) of each host, hosts numbered from 0.
    pub site: Vec<usize>,
    /// Each host's NIC, bytes/s each way.
    pub nic: f64,
}

impl Platform {
    /// `counts[s]` hosts at site `s`, in site order.
    pub fn new(counts: [usize; 4]) -> Platform {
        let site = counts
            .iter()
            .enumerate()
            .flat_map(|(s, n)| std::iter::repeat_n(s, *n))
            .collect();
        Platform {
            site,
            nic: 1000.0 * MBPS,
        }
    }

    /// The hosts of site `s`.
    pub fn hosts(&self, s: usize) -> Vec<u32> {
        (0..self.site.len() as u32)
            .filter(|h| self.site[*h as usize] == s)
            .collect()
    }

    /// Bytes/s between two hosts (Table 1).
    pub fn link(&self, a: u32, b: u32) -> f64 {
        TABLE_1[self.site[a as usize]][self.site[b as usize]] * MBPS
    }
}

/// A batch: requests and the copies that exist at the start.
#[derive(Clone, Debug)]
pub struct Batch {
    /// Requests.
    pub requests: Vec<Request>,
    /// Where each file starts.
    pub copies: Vec<(ObjectId, Endpoint)>,
}

/// The paper's batch, scaled down: `files` files wanted on `per_file` of the destination
/// hosts each, with `replicas` copies each: the first two on site `order[0]`, the third on
/// `order[1]`, the fourth and fifth on `order[2]` (Figure 2: ORNL, then ANL, then CSE), each on
/// another host of its site.
pub fn batch(
    platform: &Platform,
    files: u64,
    per_file: usize,
    replicas: usize,
    order: &[usize],
    seed: u64,
) -> Batch {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let dests = platform.hosts(0);
    let sites = [order[0], order[0], order[1], order[2], order[2]];
    let mut requests = Vec::new();
    let mut copies = Vec::new();
    for f in 0..files {
        let r: f64 = rng.random();
        let size = if r < 0.5 {
            10_000_000
        } else if r < 0.85 {
            50_000_000
        } else {
            500_000_000
        };
        let first = rng.random_range(0..dests.len());
        for k in 0..per_file.min(dests.len()) {
            requests.push(Request {
                object: ObjectId(f),
                size,
                dest: NodeId(dests[(first + k) % dests.len()]),
            });
        }
        for (k, site) in sites.iter().enumerate().take(replicas) {
            let hosts = platform.hosts(*site);
            let h = hosts[(f as usize + k) % hosts.len()];
            let copy = (ObjectId(f), Endpoint::Node(NodeId(h)));
            if !copies.contains(&copy) {
                copies.push(copy);
            }
        }
    }
    Batch { requests, copies }
}

/// How one batch went.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outcome {
    /// The schedule.
    pub schedule: String,
    /// Seconds until the last request was complete.
    pub makespan_s: f64,
    /// Bytes delivered over the makespan, Mb/s.
    pub throughput_mbps: f64,
    /// Mean seconds from the start to each request's completion.
    pub mean_response_s: f64,
    /// Chunks moved.
    pub chunks: u64,
    /// Bytes each source sent.
    pub by_source: Vec<(String, u64)>,
}

/// Stage `batch` on `platform` with `schedule`; the simulation of the flows.
pub fn run(platform: &Platform, b: &Batch, schedule: Schedule, seed: u64) -> Outcome {
    let caps: Vec<(Endpoint, f64)> = (0..platform.site.len() as u32)
        .map(|h| (Endpoint::Node(NodeId(h)), platform.nic))
        .collect();
    let cfg = StageConfig {
        schedule,
        chunk_fraction: 0.25,
        min_chunk: 8_000_000,
        default_cap: platform.nic,
        seed,
    };
    let mut stager = Stager::new(cfg, b.requests.clone(), &b.copies, &caps);
    let mut pred = Predictor::new(BandwidthConfig {
        default: 100.0 * MBPS,
        ..BandwidthConfig::default()
    });
    for a in 0..platform.site.len() as u32 {
        for d in 0..platform.site.len() as u32 {
            if a != d {
                let rate = platform.link(a, d).min(platform.nic);
                pred.observe(
                    Endpoint::Node(NodeId(a)),
                    Endpoint::Node(NodeId(d)),
                    rate as u64,
                    1.0,
                );
            }
        }
    }
    let mut net: FlowNet<(u64, usize)> = FlowNet::new();
    let hosts = platform.site.len() as u32;
    let nic_out: Vec<ResourceId> = (0..hosts).map(|_| net.add_resource(platform.nic)).collect();
    let nic_in: Vec<ResourceId> = (0..hosts).map(|_| net.add_resource(platform.nic)).collect();
    let mut links: FxHashMap<(u32, u32), ResourceId> = FxHashMap::default();
    // Per chunk: parts left, start time, seconds of each part, (object, destination, bytes).
    #[allow(clippy::type_complexity)]
    let mut open: FxHashMap<u64, (usize, f64, Vec<f64>, (ObjectId, NodeId, u64))> =
        FxHashMap::default();
    let mut done_at: FxHashMap<(ObjectId, NodeId), f64> = FxHashMap::default();
    let sizes: FxHashMap<ObjectId, u64> = b.requests.iter().map(|r| (r.object, r.size)).collect();
    let mut by_source: FxHashMap<Endpoint, u64> = FxHashMap::default();
    let mut landed: FxHashMap<(ObjectId, NodeId), u64> = FxHashMap::default();
    let mut now = 0.0;
    let mut chunks = 0;
    loop {
        while let Some(c) = stager.poll(&pred) {
            chunks += 1;
            open.insert(
                c.id,
                (
                    c.parts.len(),
                    now,
                    vec![0.0; c.parts.len()],
                    (c.object, c.dest, c.len),
                ),
            );
            for (k, part) in c.parts.iter().enumerate() {
                let Endpoint::Node(NodeId(from)) = part.from else {
                    unreachable!("no storage in this platform")
                };
                let to = c.dest.0;
                let link = *links
                    .entry((from, to))
                    .or_insert_with(|| net.add_resource(platform.link(from, to)));
                net.start(
                    now,
                    part.len,
                    &[nic_out[from as usize], link, nic_in[to as usize]],
                    (c.id, k),
                );
                *by_source.entry(part.from).or_default() += part.len;
            }
        }
        let Some(t) = net.next_completion() else {
            break;
        };
        now = t;
        for flow in net.advance(t) {
            let (id, k) = flow.tag;
            let entry = open.get_mut(&id).expect("an open chunk");
            entry.0 -= 1;
            entry.2[k] = now - entry.1;
            if entry.0 == 0 {
                let (_, _, secs, (o, d, len)) = open.remove(&id).expect("open");
                stager.done(id, &secs, &mut pred);
                let got = landed.entry((o, d)).or_default();
                *got += len;
                if *got >= sizes[&o] {
                    done_at.insert((o, d), now);
                }
            }
        }
    }
    assert!(stager.finished(), "the batch was not staged whole");
    let total: u64 = b.requests.iter().map(|r| r.size).sum();
    let mut by_source: Vec<(String, u64)> = by_source
        .into_iter()
        .map(|(e, bytes)| match e {
            Endpoint::Node(n) => (SITES[platform.site[n.0 as usize]].to_string(), bytes),
            Endpoint::Storage => ("storage".to_string(), bytes),
        })
        .fold(
            FxHashMap::default(),
            |mut m: FxHashMap<String, u64>, (s, b)| {
                *m.entry(s).or_default() += b;
                m
            },
        )
        .into_iter()
        .collect();
    by_source.sort();
    Outcome {
        schedule: schedule.to_string(),
        makespan_s: now,
        throughput_mbps: total as f64 * 8.0 / 1e6 / now.max(1e-9),
        mean_response_s: done_at.values().sum::<f64>() / done_at.len().max(1) as f64,
        chunks,
        by_source,
    }
}

impl crate::flow_bound::Network for Platform {
    fn out_cap(&self, _: Endpoint) -> f64 {
        self.nic
    }
    fn in_cap(&self, _: Endpoint) -> f64 {
        self.nic
    }
    fn path(&self, a: Endpoint, b: Endpoint) -> f64 {
        match (a, b) {
            (Endpoint::Node(a), Endpoint::Node(b)) => self.link(a.0, b.0),
            _ => f64::INFINITY,
        }
    }
}

/// A lower bound on the batch's makespan: the larger of the flow bound
/// ([`crate::flow_bound::flow_bound`], the paper's section 3 as a linear program) and
/// [`cut_bound`], which also sees the destination site's inbound total the flow bound's
/// per-path capacities do not.
pub fn lower_bound(platform: &Platform, b: &Batch) -> f64 {
    let flow = crate::flow_bound::flow_bound(&b.requests, &b.copies, platform).unwrap_or(0.0);
    flow.max(cut_bound(platform, b))
}

/// A lower bound on the batch's makespan from cuts of the platform: every destination host
/// must take in its bytes through its NIC; every file wanted at the destination site and held
/// nowhere there must cross into the site, at most at the bandwidth the source hosts holding
/// any of them can send there; and each request's file must reach its destination through the
/// paths from the hosts that hold it or will (its other destinations), at most the sum of
/// those paths' bandwidths.
pub fn cut_bound(platform: &Platform, b: &Batch) -> f64 {
    let mut per_dest: FxHashMap<NodeId, u64> = FxHashMap::default();
    for r in &b.requests {
        *per_dest.entry(r.dest).or_default() += r.size;
    }
    let nic_bound = per_dest
        .values()
        .map(|bytes| *bytes as f64 / platform.nic)
        .fold(0.0, f64::max);
    let dest_hosts = platform.hosts(0);
    let mut distinct: FxHashMap<ObjectId, u64> = FxHashMap::default();
    for r in &b.requests {
        distinct.insert(r.object, r.size);
    }
    let bytes_in: u64 = distinct
        .iter()
        .filter(|(o, _)| {
            !b.copies.iter().any(|(c, e)| {
                c == *o && matches!(e, Endpoint::Node(n) if platform.site[n.0 as usize] == 0)
            })
        })
        .map(|(_, s)| s)
        .sum();
    let mut senders: Vec<u32> = b
        .copies
        .iter()
        .filter_map(|(_, e)| match e {
            Endpoint::Node(n) if platform.site[n.0 as usize] != 0 => Some(n.0),
            _ => None,
        })
        .collect();
    senders.sort_unstable();
    senders.dedup();
    let into_site: f64 = senders
        .iter()
        .map(|s| {
            platform.nic.min(
                dest_hosts
                    .iter()
                    .map(|d| platform.link(*s, *d).min(platform.nic))
                    .sum(),
            )
        })
        .sum::<f64>()
        .min(platform.nic * dest_hosts.len() as f64);
    let mut holders: FxHashMap<ObjectId, Vec<u32>> = FxHashMap::default();
    for (o, e) in &b.copies {
        if let Endpoint::Node(n) = e {
            holders.entry(*o).or_default().push(n.0);
        }
    }
    for r in &b.requests {
        holders.entry(r.object).or_default().push(r.dest.0);
    }
    let path_bound = b
        .requests
        .iter()
        .map(|r| {
            let inflow: f64 = holders[&r.object]
                .iter()
                .filter(|h| **h != r.dest.0)
                .map(|h| platform.link(*h, r.dest.0).min(platform.nic))
                .sum::<f64>()
                .min(platform.nic);
            r.size as f64 / inflow.max(1e-9)
        })
        .fold(0.0, f64::max);
    nic_bound
        .max(bytes_in as f64 / into_site.max(1e-9))
        .max(path_bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_schedule_beats_the_flow_bound_on_any_of_the_papers_batches() {
        for r in experiments(1) {
            for o in &r.outcomes {
                assert!(
                    o.makespan_s >= r.bound_s * 0.999,
                    "{} {} x{} N={}: {} s < {} s",
                    o.schedule,
                    r.order,
                    r.per_file,
                    r.replicas,
                    o.makespan_s,
                    r.bound_s
                );
            }
        }
    }

    #[test]
    fn every_schedule_stages_the_whole_batch_and_none_beats_the_bound() {
        let p = Platform::new([4, 3, 3, 2]);
        let b = batch(&p, 24, 2, 2, &[2, 3, 1], 3);
        let bound = lower_bound(&p, &b);
        for s in [Schedule::Naive, Schedule::Lds, Schedule::Gds] {
            let o = run(&p, &b, s, 1);
            assert!(
                o.makespan_s >= bound * 0.999,
                "{s}: {} < {bound}",
                o.makespan_s
            );
            let sent: u64 = o.by_source.iter().map(|(_, b)| b).sum();
            let wanted: u64 = b.requests.iter().map(|r| r.size).sum();
            assert_eq!(sent, wanted, "{s}: every byte sent once");
        }
    }
}

/// One row of `diffuse sim stage`: a batch staged by every schedule, next to its bound.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// Where replicas are added, in order (site names).
    pub order: String,
    /// Destinations per file.
    pub per_file: usize,
    /// Replicas per file at the start.
    pub replicas: usize,
    /// The lower bound ([`lower_bound`]), seconds.
    pub bound_s: f64,
    /// Naive, LDS, GDS.
    pub outcomes: Vec<Outcome>,
}

/// The paper's experiments scaled down: 60 files on (BMI 4, CSE 3, ORNL 3, ANL 2) hosts, one or
/// two BMI destinations per file, 1 to 5 replicas added in the orders of Figures 2 and 3.
pub fn experiments(seed: u64) -> Vec<Row> {
    let p = Platform::new([4, 3, 3, 2]);
    let mut rows = Vec::new();
    for (order, name) in [
        (&[2usize, 3, 1][..], "ORNL-ANL-CSE"),
        (&[1, 2, 3][..], "CSE-ORNL-ANL"),
    ] {
        for per_file in [1, 2] {
            for replicas in 1..=5 {
                let b = batch(&p, 60, per_file, replicas, order, seed);
                let outcomes = [Schedule::Naive, Schedule::Lds, Schedule::Gds]
                    .into_iter()
                    .map(|s| run(&p, &b, s, seed))
                    .collect();
                rows.push(Row {
                    order: name.to_string(),
                    per_file,
                    replicas,
                    bound_s: lower_bound(&p, &b),
                    outcomes,
                });
            }
        }
    }
    rows
}

/// The rows as a table.
pub fn print_table(rows: &[Row]) {
    println!("Staging 60 files (10/50/500 MB at 0.5/0.35/0.15) to BMI hosts; throughput Mb/s (makespan s)");
    println!(
        "{:<13} {:>5} {:>4} {:>15} {:>15} {:>15} {:>9} {:>7}",
        "replicas on", "dests", "N", "naive", "LDS", "GDS", "bound s", "GDS/bd"
    );
    for r in rows {
        let cell = |o: &Outcome| format!("{:.0} ({:.0})", o.throughput_mbps, o.makespan_s);
        let gds = &r.outcomes[2];
        println!(
            "{:<13} {:>5} {:>4} {:>15} {:>15} {:>15} {:>9.0} {:>6.0}%",
            r.order,
            r.per_file,
            r.replicas,
            cell(&r.outcomes[0]),
            cell(&r.outcomes[1]),
            cell(gds),
            r.bound_s,
            100.0 * (gds.makespan_s / r.bound_s - 1.0)
        );
    }
}
