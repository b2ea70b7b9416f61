//! MixApart's job mixes (mixapart-cache-over-shared-storage.txt, section 8.1.4, Table 1),
//! scaled to the simulator: two jobs of map tasks over 64 MB blocks on the `ec2-2013` testbed,
//! storage reads capped at 1 Gb/s, each job's duration next to an ideal run where every block
//! is on every node's disk (the paper's Hadoop with all data in HDFS).
//!
//! The paper does not give the jobs' sizes or reuse ratios. Here every job has 200 tasks of
//! one 64 MB block; an I/O-intensive task computes 10.24 s (a block at 50 Mb/s, the paper's
//! pageview job on uncompressed data), a CPU-intensive one 25.6 s (20 Mb/s, compressed);
//! "high reuse" is every block cached (Mix-2: "entirely in the cache"), "low reuse" half of
//! them, spread evenly over the nodes. Mixes with a high-priority job run FIFO; those with
//! equal priorities run Fair, which is how the paper's jobs came to run side by side.

use crate::engine::{simulate, SimConfig};
use crate::report::Summary;
use crate::testbed::{Testbed, GBPS};
use crate::workload::{Arrival, Workload};
use diffuse_core::{JobOrder, ObjectId, PolicyKind, PrefetchConfig};
use serde::Serialize;

/// Bytes in a block.
pub const BLOCK: u64 = 64_000_000;
/// Tasks (blocks) per job.
pub const TASKS: u64 = 200;

/// One job of a mix.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct JobSpec {
    /// `A1`, `B1`, ...
    pub name: &'static str,
    /// I/O-intensive (10.24 s a block) or CPU-intensive (25.6 s).
    pub io_intensive: bool,
    /// Fraction of its blocks cached at submission.
    pub reuse: f64,
    /// Marked high priority.
    pub high_priority: bool,
}

impl JobSpec {
    /// Compute per task, seconds.
    pub fn compute_s(&self) -> f64 {
        let rate = if self.io_intensive { 50e6 } else { 20e6 };
        BLOCK as f64 * 8.0 / rate
    }
}

/// A mix of Table 1.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mix {
    /// 1 to 4.
    pub number: u8,
    /// What it tests, as Table 1 says.
    pub test: &'static str,
    /// Its two jobs.
    pub jobs: [JobSpec; 2],
    /// How the jobs share the slots.
    pub job_order: JobOrder,
    /// The paper's durations, MixApart over Hadoop, per job (Figure 5).
    pub paper: [f64; 2],
}

/// The four mixes.
pub fn mixes() -> Vec<Mix> {
    let job = |name, io_intensive, reuse, high_priority| JobSpec {
        name,
        io_intensive,
        reuse,
        high_priority,
    };
    vec![
        Mix {
            number: 1,
            test: "data transfers for B1 while A1 runs",
            jobs: [job("A1", true, 1.0, true), job("B1", false, 0.5, false)],
            job_order: JobOrder::Fifo,
            paper: [1.02, 1.03],
        },
        Mix {
            number: 2,
            test: "just-in-time data transfers for B2",
            jobs: [job("A2", true, 1.0, false), job("B2", false, 0.5, false)],
            job_order: JobOrder::Fair,
            paper: [0.94, 1.07],
        },
        Mix {
            number: 3,
            test: "just-in-time transfers for both jobs at different I/O rates",
            jobs: [job("A3", true, 0.5, false), job("B3", false, 0.5, false)],
            job_order: JobOrder::Fair,
            paper: [1.11, 0.94],
        },
        Mix {
            number: 4,
            test: "work-conserving compute scheduling",
            jobs: [job("A4", false, 0.5, true), job("B4", true, 1.0, false)],
            job_order: JobOrder::Fifo,
            paper: [1.43, 0.0],
        },
    ]
}

/// How a mix is run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Variant {
    /// Every block on every node's disk: all reads local.
    Ideal,
    /// MixApart's tiers, storage reads capped at `cap_gbps`, with or without prefetching.
    MixApart {
        /// The cap, Gb/s.
        cap_gbps: f64,
        /// The transfer scheduler on.
        prefetch: bool,
    },
}

/// The simulation of `mix` run as `variant`.
pub fn config(mix: &Mix, variant: Variant) -> SimConfig {
    let mut arrivals = Vec::new();
    let mut placed = Vec::new();
    let testbed = Testbed::ec2_2013();
    let nodes = testbed.nodes;
    for (j, spec) in mix.jobs.iter().enumerate() {
        let cached = (spec.reuse * TASKS as f64).round() as u64;
        for k in 0..TASKS {
            let object = ObjectId(j as u64 * TASKS + k);
            arrivals.push(Arrival {
                time: 0.0,
                inputs: vec![(object, BLOCK)],
                compute_s: spec.compute_s(),
                cores: 1,
                produces: Vec::new(),
                after: Vec::new(),
                job: j as u32,
                priority: if spec.high_priority { 1 } else { 0 },
            });
            match variant {
                Variant::Ideal => {
                    placed.extend((0..nodes).map(|n| (n, object, BLOCK)));
                }
                Variant::MixApart { .. } if k < cached => {
                    placed.push(((j as u32 * 7 + k as u32) % nodes, object, BLOCK));
                }
                Variant::MixApart { .. } => {}
            }
        }
    }
    let mut cfg = SimConfig::new(Workload::Custom(arrivals), testbed, 100_000_000_000);
    cfg.core.policy = PolicyKind::MixApart;
    cfg.core.job_order = mix.job_order;
    cfg.placed = placed;
    if let Variant::MixApart { cap_gbps, prefetch } = variant {
        cfg.core.storage_cap = Some(cap_gbps * GBPS);
        cfg.core.prefetch = prefetch.then(|| PrefetchConfig {
            // Caches are large (the paper's 850 GB a node): room is not what limits prefetching.
            cache_share: 1.0,
            ..PrefetchConfig::default()
        });
    }
    cfg
}

/// Each job's duration in one run, seconds, and the bytes prefetched and read from storage.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Run {
    /// How it was run.
    pub variant: Variant,
    /// Per job: first arrival to last completion, seconds.
    pub durations: [f64; 2],
    /// Makespan of the mix.
    pub makespan_s: f64,
    /// Bytes the transfer scheduler fetched.
    pub bytes_prefetched: u64,
    /// Bytes tasks read from storage themselves.
    pub bytes_storage: u64,
    /// Fraction of accesses that were local hits (prefetched copies included).
    pub hit_local: f64,
}

/// One mix run every way: ideal, MixApart with and without prefetching at 1 Gb/s, and the
/// cap swept.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MixRow {
    /// The mix.
    pub mix: Mix,
    /// Runs, ideal first.
    pub runs: Vec<Run>,
}

fn run(mix: &Mix, variant: Variant) -> Result<Run, String> {
    let (s, _): (Summary, _) = simulate(config(mix, variant)).map_err(|e| e.to_string())?;
    let duration = |j: u32| {
        s.jobs
            .iter()
            .find(|x| x.job == j)
            .map_or(0.0, |x| x.duration_s)
    };
    Ok(Run {
        variant,
        durations: [duration(0), duration(1)],
        makespan_s: s.makespan_s,
        bytes_prefetched: s.bytes_prefetched,
        bytes_storage: s.bytes_storage,
        hit_local: s.hit_local,
    })
}

/// The variants every mix is run as.
pub fn variants() -> Vec<Variant> {
    let mut v = vec![Variant::Ideal];
    v.push(Variant::MixApart {
        cap_gbps: 1.0,
        prefetch: true,
    });
    v.push(Variant::MixApart {
        cap_gbps: 1.0,
        prefetch: false,
    });
    for cap in [0.5, 2.0, 4.0] {
        v.push(Variant::MixApart {
            cap_gbps: cap,
            prefetch: true,
        });
    }
    v
}

/// Every mix, every variant.
pub fn run_all() -> Result<Vec<MixRow>, String> {
    mixes()
        .into_iter()
        .map(|mix| {
            let runs = variants()
                .into_iter()
                .map(|v| run(&mix, v))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(MixRow { mix, runs })
        })
        .collect()
}

/// The table: per mix and job, the duration under each variant over the ideal.
pub fn print_table(rows: &[MixRow]) {
    println!(
        "MixApart's job mixes on ec2-2013 (50 nodes x 2 slots), {} tasks of 64 MB a job; durations over the ideal (all local)",
        TASKS
    );
    println!(
        "{:<5} {:<4} {:>8} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "mix", "job", "paper", "ideal s", "1 Gb/s", "no prefet", "0.5 Gb/s", "2 Gb/s", "4 Gb/s"
    );
    for r in rows {
        let ideal = &r.runs[0];
        for (j, spec) in r.mix.jobs.iter().enumerate() {
            let paper = if r.mix.paper[j] > 0.0 {
                format!("{:.2}", r.mix.paper[j])
            } else {
                "-".into()
            };
            let ratio = |run: &Run| run.durations[j] / ideal.durations[j];
            println!(
                "{:<5} {:<4} {:>8} {:>8.0} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
                r.mix.number,
                spec.name,
                paper,
                ideal.durations[j],
                ratio(&r.runs[1]),
                ratio(&r.runs[2]),
                ratio(&r.runs[3]),
                ratio(&r.runs[4]),
                ratio(&r.runs[5]),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_with_every_block_cached_reads_nothing_from_storage() {
        let mix = &mixes()[1];
        let r = run(
            mix,
            Variant::MixApart {
                cap_gbps: 1.0,
                prefetch: true,
            },
        )
        .unwrap();
        let ideal = run(mix, Variant::Ideal).unwrap();
        // B2 reads its 100 uncached blocks from storage once, through prefetches or itself.
        assert_eq!(r.bytes_prefetched + r.bytes_storage, 100 * BLOCK);
        assert_eq!(ideal.bytes_prefetched + ideal.bytes_storage, 0);
        assert!(r.durations[1] >= ideal.durations[1]);
    }
}
