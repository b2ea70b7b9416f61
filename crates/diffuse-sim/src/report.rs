//! What a simulation reports: the summary (`--json`), the per-second samples behind the paper's
//! figures, and the time series aggregated for `--series` and `--plot`.

use diffuse_core::model::{ModelInput, ModelPrediction};
use serde::Serialize;
use std::io::Write;

/// One job of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct JobSummary {
    /// The job.
    pub job: u32,
    /// Its tasks that finished.
    pub tasks: u64,
    /// Its first task's arrival, seconds.
    pub first_arrival_s: f64,
    /// Its last task's completion, seconds.
    pub last_done_s: f64,
    /// From first arrival to last completion, seconds.
    pub duration_s: f64,
}

/// One second of the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Sample {
    /// Start of the second.
    pub t: f64,
    /// Bytes asked for by tasks that arrived in this second.
    pub demand_bytes: f64,
    /// Bytes delivered from local caches in this second.
    pub bytes_local: f64,
    /// Bytes delivered from peer caches.
    pub bytes_peer: f64,
    /// Bytes delivered from persistent storage.
    pub bytes_storage: f64,
    /// Accesses served locally / by a peer / by storage, started in this second.
    pub accesses: [u64; 3],
    /// Wait queue length at the end of the second.
    pub queue: u64,
    /// Nodes allocated at the end of the second.
    pub nodes: u32,
    /// Busy slots at the end of the second.
    pub busy_slots: u64,
}

/// One row of `--series`: the samples of one time step, aggregated.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SeriesRow {
    /// Start of the step, seconds.
    pub t: f64,
    /// Demand, Gb/s.
    pub demand_gbps: f64,
    /// Throughput, Gb/s (all sources).
    pub throughput_gbps: f64,
    /// Throughput from local caches, Gb/s.
    pub local_gbps: f64,
    /// Throughput from peer caches, Gb/s.
    pub peer_gbps: f64,
    /// Throughput from persistent storage, Gb/s.
    pub storage_gbps: f64,
    /// Wait queue length at the end of the step.
    pub queue: u64,
    /// Nodes allocated at the end of the step.
    pub nodes: u32,
    /// Mean busy slots over the step.
    pub busy_slots: f64,
    /// Fraction of the step's accesses that were local hits.
    pub hit_local: f64,
    /// Fraction that were peer hits.
    pub hit_peer: f64,
    /// Fraction that were misses.
    pub miss: f64,
}

/// Aggregate per-second samples into steps of `step` seconds.
pub fn series(samples: &[Sample], step: usize) -> Vec<SeriesRow> {
    let step = step.max(1);
    samples
        .chunks(step)
        .map(|c| {
            let secs = c.len() as f64;
            let sum = |f: fn(&Sample) -> f64| c.iter().map(f).sum::<f64>();
            let gbps = |b: f64| b * 8.0 / 1e9 / secs;
            let acc: [u64; 3] = c.iter().fold([0; 3], |a, s| {
                [
                    a[0] + s.accesses[0],
                    a[1] + s.accesses[1],
                    a[2] + s.accesses[2],
                ]
            });
            let total = (acc[0] + acc[1] + acc[2]).max(1) as f64;
            let last = c.last().expect("chunks are non-empty");
            let (l, p, s) = (
                sum(|s| s.bytes_local),
                sum(|s| s.bytes_peer),
                sum(|s| s.bytes_storage),
            );
            SeriesRow {
                t: c[0].t,
                demand_gbps: gbps(sum(|s| s.demand_bytes)),
                throughput_gbps: gbps(l + p + s),
                local_gbps: gbps(l),
                peer_gbps: gbps(p),
                storage_gbps: gbps(s),
                queue: last.queue,
                nodes: last.nodes,
                busy_slots: c.iter().map(|s| s.busy_slots as f64).sum::<f64>() / secs,
                hit_local: acc[0] as f64 / total,
                hit_peer: acc[1] as f64 / total,
                miss: acc[2] as f64 / total,
            }
        })
        .collect()
}

/// Write rows as CSV with a header.
pub fn write_csv(rows: &[SeriesRow], mut out: impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "t_s,demand_gbps,throughput_gbps,local_gbps,peer_gbps,storage_gbps,queue,nodes,busy_slots,hit_local,hit_peer,miss"
    )?;
    for r in rows {
        writeln!(
            out,
            "{},{:.4},{:.4},{:.4},{:.4},{:.4},{},{},{:.1},{:.4},{:.4},{:.4}",
            r.t,
            r.demand_gbps,
            r.throughput_gbps,
            r.local_gbps,
            r.peer_gbps,
            r.storage_gbps,
            r.queue,
            r.nodes,
            r.busy_slots,
            r.hit_local,
            r.hit_peer,
            r.miss
        )?;
    }
    Ok(())
}

/// The abstract model's inputs and predictions next to what the simulation measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelReport {
    /// What was fed to the model (hit ratios are the measured ones).
    pub input: ModelInput,
    /// What it predicts.
    pub predicted: ModelPrediction,
    /// Measured mean task execution time (dispatch to completion), seconds.
    pub measured_task_time_s: f64,
    /// Measured mean time of a local access (request to last byte), seconds.
    pub measured_r_local_s: f64,
    /// Measured mean time of a peer access, seconds.
    pub measured_r_peer_s: f64,
    /// Measured mean time of a persistent-storage access, seconds.
    pub measured_r_storage_s: f64,
}

/// The summary of one run (`diffuse sim … --json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Workload name.
    pub workload: String,
    /// Dispatch policy.
    pub policy: String,
    /// Testbed preset.
    pub testbed: String,
    /// Cache size per node, bytes.
    pub cache_size: u64,
    /// Eviction policy.
    pub eviction: String,
    /// Static or dynamic provisioning.
    pub provisioning: String,
    /// Maximum nodes.
    pub nodes: u32,
    /// Scheduling window.
    pub window: usize,
    /// GCC threshold.
    pub threshold: f64,
    /// Seed.
    pub seed: u64,
    /// Tasks completed.
    pub tasks: u64,
    /// Time from the start of the simulation (time 0) to the last completion, seconds.
    pub makespan_s: f64,
    /// Best possible makespan: the later of the last arrival plus one all-local task, and all
    /// tasks packed on all slots with every access a local read at the full disk rate.
    pub ideal_makespan_s: f64,
    /// ideal_makespan_s / makespan_s.
    pub efficiency: f64,
    /// Fraction of accesses served from the node's own cache.
    pub hit_local: f64,
    /// Fraction served from a peer's cache.
    pub hit_peer: f64,
    /// Fraction served from persistent storage.
    pub miss: f64,
    /// Mean of (completion - arrival) over tasks, seconds.
    pub avg_response_s: f64,
    /// Longest wait queue.
    pub peak_queue: u64,
    /// Slot-hours allocated (from node join to release or end of run).
    pub cpu_hours: f64,
    /// Bytes delivered over the makespan, Gb/s.
    pub throughput_avg_gbps: f64,
    /// 99th percentile of per-second throughput samples, Gb/s.
    pub throughput_peak_gbps: f64,
    /// Bytes read from local caches.
    pub bytes_local: u64,
    /// Bytes read from peer caches.
    pub bytes_peer: u64,
    /// Bytes read from persistent storage.
    pub bytes_storage: u64,
    /// Nodes acquired over the run (joined at least once).
    pub nodes_acquired: u64,
    /// Bytes prefetched from storage by the transfer scheduler (not in `bytes_storage`, which
    /// counts tasks' own reads).
    pub bytes_prefetched: u64,
    /// What the transfer scheduler did.
    pub prefetch: diffuse_core::PrefetchStats,
    /// Each job's tasks and duration (first arrival to last completion).
    pub jobs: Vec<JobSummary>,
    /// What 2Mark did (None: per-node eviction).
    pub two_mark: Option<diffuse_core::TwoMarkStats>,
    /// Cache hand-off on release: what was planned and what arrived.
    pub handoff: HandoffReport,
    /// The abstract model next to the measurement.
    pub model: ModelReport,
    /// Wall-clock time of the simulation, seconds.
    pub sim_wall_s: f64,
}

/// Cache hand-off over a run (all zero when it is off).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct HandoffReport {
    /// Releases whose plan pushed something.
    pub releases: u64,
    /// Objects planned.
    pub planned: u64,
    /// Bytes planned.
    pub planned_bytes: u64,
    /// Objects that arrived and were cached by their target.
    pub pushed: u64,
    /// Bytes that arrived and were cached.
    pub pushed_bytes: u64,
    /// Pushes cut off by the time bound.
    pub cut: u64,
    /// Pushes whose target was released (or its copy no longer fit) before they arrived.
    pub lost: u64,
    /// Pushed objects read at least once from their target afterwards (a local or peer hit
    /// that would otherwise have been a miss, or a fetch from another node).
    pub useful: u64,
    /// Slot-hours released nodes were kept for their pushes (part of `cpu_hours`).
    pub cpu_hours: f64,
}

/// The `p`-th percentile (0..=100) of `values` by nearest rank.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[5.0], 99.0), 5.0);
        assert_eq!(percentile(&[], 99.0), 0.0);
    }

    #[test]
    fn series_aggregates_steps() {
        let mut s = vec![Sample::default(); 4];
        for (i, x) in s.iter_mut().enumerate() {
            x.t = i as f64;
            x.bytes_local = 125e6; // 1 Gb/s
            x.accesses = [1, 0, 1];
            x.queue = i as u64;
        }
        let rows = series(&s, 2);
        assert_eq!(rows.len(), 2);
        assert!((rows[0].throughput_gbps - 1.0).abs() < 1e-12);
        assert_eq!(rows[1].queue, 3);
        assert_eq!(rows[1].hit_local, 0.5);
    }
}
