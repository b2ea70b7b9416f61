//! What a simulation measures as it runs: bytes, accesses and access times by source, the
//! per-second samples behind the time series, completions and response times, jobs, CPU time
//! billed, and the trace of each task; and the [`Summary`] made of them at the end.

use super::config::{SimConfig, TaskTrace};
use super::tasks::{Running, Used};
use crate::report::{percentile, HandoffReport, JobSummary, ModelReport, Sample, Summary};
use crate::workload::Arrival;
use diffuse_core::model::{predict, ModelInput};
use diffuse_core::TwoMarkStats;
use diffuse_core::{Counts, PrefetchStats, TaskId};
use std::collections::BTreeMap;

/// The run's counters so far.
#[derive(Default)]
pub(super) struct Tally {
    samples: Vec<Sample>,
    current: Sample,
    bytes: [u64; 3],
    accesses: [u64; 3],
    /// Sum of access times (request to last byte) by source, seconds.
    access_time: [f64; 3],
    bytes_prefetched: u64,
    /// Per job: tasks finished, first arrival, last completion.
    jobs: BTreeMap<u32, JobSummary>,
    finished: u64,
    response_sum: f64,
    exec_sum: f64,
    last_done: f64,
    peak_queue: u64,
    cpu_seconds: f64,
    nodes_acquired: u64,
    /// Tasks as they ran, if `SimConfig::trace`.
    trace: Vec<TaskTrace>,
}

impl Tally {
    /// Arrival `a` came: what it asks for counts as demand in this second.
    pub(super) fn arrived(&mut self, a: &Arrival) {
        self.current.demand_bytes += a.inputs.iter().map(|(_, s)| *s as f64).sum::<f64>();
    }

    /// Arrival `a` was submitted: its job's first arrival.
    pub(super) fn submitted(&mut self, a: &Arrival) {
        let job = self.jobs.entry(a.job).or_insert(JobSummary {
            job: a.job,
            first_arrival_s: a.time,
            ..Default::default()
        });
        job.first_arrival_s = job.first_arrival_s.min(a.time);
    }

    /// An access started, served from `used`.
    pub(super) fn access(&mut self, used: Used) {
        self.accesses[used as usize] += 1;
        self.current.accesses[used as usize] += 1;
    }

    /// A read from `used` of `bytes`, requested at `requested`, ended at `now` (seconds).
    pub(super) fn read(&mut self, used: Used, bytes: u64, requested: f64, now: f64) {
        self.bytes[used as usize] += bytes;
        self.access_time[used as usize] += now - requested;
        self.book_bytes(requested, now, bytes, used);
    }

    /// A task that waited for its node's fetch of `bytes` (requested at `requested`) has them.
    pub(super) fn joined_read(&mut self, bytes: u64, requested: f64, now: f64) {
        self.bytes[Used::Local as usize] += bytes;
        self.access_time[Used::Local as usize] += now - requested;
        self.current.bytes_local += bytes as f64;
    }

    /// A prefetch of `bytes` landed.
    pub(super) fn prefetched(&mut self, bytes: u64) {
        self.bytes_prefetched += bytes;
        self.current.bytes_storage += bytes as f64;
    }

    /// `task` (arrival `a`, its attempt `r`) succeeded at `t`; traced if `trace`.
    pub(super) fn succeeded(
        &mut self,
        task: TaskId,
        a: &Arrival,
        r: &Running,
        t: f64,
        trace: bool,
    ) {
        self.finished += 1;
        if let Some(j) = self.jobs.get_mut(&a.job) {
            j.tasks += 1;
            j.last_done_s = t;
            j.duration_s = t - j.first_arrival_s;
        }
        self.response_sum += t - a.time;
        self.exec_sum += t - r.delivered;
        self.last_done = t;
        if trace {
            self.trace.push(TaskTrace {
                task: task.0,
                node: r.node.0,
                started_s: r.delivered,
                staged_s: r.staged,
                finished_s: t,
                local: r.count(Used::Local),
                peer: r.count(Used::Peer),
                storage: r.count(Used::Storage),
            });
        }
    }

    /// A node joined.
    pub(super) fn node_acquired(&mut self) {
        self.nodes_acquired += 1;
    }

    /// Slot-seconds billed (a node's time allocated times its slots).
    pub(super) fn bill(&mut self, cpu_seconds: f64) {
        self.cpu_seconds += cpu_seconds;
    }

    /// When the last task ended, seconds.
    pub(super) fn last_done(&self) -> f64 {
        self.last_done
    }

    /// The core's counts at the end of a step: the longest queue so far.
    pub(super) fn stepped(&mut self, c: &Counts) {
        self.peak_queue = self.peak_queue.max(c.queued);
    }

    /// The second under way ends, with the core's counts as they are.
    pub(super) fn close_sample(&mut self, c: &Counts) {
        let mut s = std::mem::take(&mut self.current);
        s.t = self.samples.len() as f64;
        s.queue = c.queued;
        s.nodes = c.nodes;
        s.busy_slots = c.busy_slots;
        self.samples.push(s);
    }

    /// Spread a transfer's bytes over the per-second samples it was in flight for, so the
    /// throughput series shows bytes as they moved, not when the transfer ended.
    fn book_bytes(&mut self, from: f64, to: f64, bytes: u64, used: Used) {
        let current = self.samples.len();
        let first = (from.max(0.0).floor() as usize).min(current);
        let last = (to.floor() as usize).min(current);
        let span = to - from;
        for k in first..=last {
            let share = if span <= 0.0 || first == last {
                1.0
            } else {
                let lo = from.max(k as f64);
                let hi = to.min(k as f64 + 1.0);
                ((hi - lo) / span).max(0.0)
            };
            let sample = if k == current {
                &mut self.current
            } else {
                &mut self.samples[k]
            };
            let b = bytes as f64 * share;
            match used {
                Used::Local => sample.bytes_local += b,
                Used::Peer => sample.bytes_peer += b,
                Used::Storage => sample.bytes_storage += b,
            }
        }
    }

    /// The time series and the traces, at the end.
    pub(super) fn into_series(self) -> (Vec<Sample>, Vec<TaskTrace>) {
        (self.samples, self.trace)
    }

    /// The summary of the run so far, next to the model's prediction for it.
    pub(super) fn summary(&self, cfg: &SimConfig, end: Ends, wall: f64) -> Summary {
        let tb = &cfg.testbed;
        let info = cfg.workload.info();
        let slots = cfg.nodes as f64 * tb.slots_per_node as f64;
        let per_slot_disk = tb.disk_bw / tb.slots_per_node as f64;
        // Best case: every access a local read at the node's full disk rate (a lower bound,
        // since a read never goes faster than the disk).
        let best_task = info.compute_s + info.bytes_per_task / tb.disk_bw;
        let ideal = (info.last_arrival_s + best_task).max(info.tasks as f64 * best_task / slots);
        let makespan = self.last_done;
        let total_acc = self.accesses.iter().sum::<u64>().max(1) as f64;
        let frac = |k: usize| self.accesses[k] as f64 / total_acc;
        let total_bytes: u64 = self.bytes.iter().sum();
        let per_sec: Vec<f64> = self
            .samples
            .iter()
            .map(|s| (s.bytes_local + s.bytes_peer + s.bytes_storage) * 8.0 / 1e9)
            .collect();
        let access_bytes = info.bytes_per_task / info.inputs_per_task.max(1.0);
        let r_storage = access_bytes / tb.nic_bw.min(tb.storage_bw / slots);
        let input = ModelInput {
            r_local: access_bytes / per_slot_disk,
            r_peer: access_bytes / tb.nic_bw,
            r_storage,
            compute: info.compute_s,
            hr_local: frac(0),
            hr_peer: frac(1),
            hr_storage: frac(2),
            accesses_per_task: info.inputs_per_task,
            tasks: info.tasks,
            processors: slots as u64,
            cache_bytes: cfg.cache_size * cfg.nodes as u64,
            working_set_bytes: info.dataset_bytes,
            arrival_rate: if info.last_arrival_s > 0.0 {
                info.tasks as f64 / info.last_arrival_s
            } else {
                0.0
            },
        };
        Summary {
            workload: info.name,
            policy: cfg.core.policy.to_string(),
            testbed: tb.name.to_string(),
            cache_size: cfg.cache_size,
            eviction: if cfg.core.two_mark {
                "2mark".into()
            } else {
                cfg.eviction.to_string()
            },
            provisioning: if cfg.dynamic.is_some() {
                "dynamic"
            } else {
                "static"
            }
            .into(),
            nodes: cfg.nodes,
            window: cfg.core.window,
            threshold: cfg.core.threshold,
            seed: cfg.seed,
            tasks: self.finished,
            makespan_s: makespan,
            ideal_makespan_s: ideal,
            efficiency: if makespan > 0.0 {
                ideal / makespan
            } else {
                0.0
            },
            hit_local: frac(0),
            hit_peer: frac(1),
            miss: frac(2),
            avg_response_s: self.response_sum / self.finished.max(1) as f64,
            peak_queue: self.peak_queue,
            cpu_hours: self.cpu_seconds / 3600.0,
            throughput_avg_gbps: if makespan > 0.0 {
                total_bytes as f64 * 8.0 / 1e9 / makespan
            } else {
                0.0
            },
            throughput_peak_gbps: percentile(&per_sec, 99.0),
            bytes_local: self.bytes[0],
            bytes_peer: self.bytes[1],
            bytes_storage: self.bytes[2],
            bytes_prefetched: self.bytes_prefetched,
            prefetch: end.prefetch,
            jobs: self.jobs.values().cloned().collect(),
            two_mark: end.two_mark,
            nodes_acquired: self.nodes_acquired,
            handoff: end.handoff,
            model: ModelReport {
                input,
                predicted: predict(&input),
                measured_task_time_s: self.exec_sum / self.finished.max(1) as f64,
                measured_r_local_s: self.access_time[0] / self.accesses[0].max(1) as f64,
                measured_r_peer_s: self.access_time[1] / self.accesses[1].max(1) as f64,
                measured_r_storage_s: self.access_time[2] / self.accesses[2].max(1) as f64,
            },
            sim_wall_s: wall,
        }
    }
}

/// What the summary takes from the run's other owners: the core's prefetch and 2Mark counts and
/// hand-off's report.
pub(super) struct Ends {
    /// MixApart's prefetch counts.
    pub(super) prefetch: PrefetchStats,
    /// 2Mark's counts, if on.
    pub(super) two_mark: Option<TwoMarkStats>,
    /// Hand-off's report.
    pub(super) handoff: HandoffReport,
}
