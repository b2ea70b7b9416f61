//! The Prometheus text exposition of the dispatcher's counters (`GET /metrics`), and the
//! histograms the scheduler keeps for it. The output passes `promtool check metrics`
//! (`crates/diffuse/tests/usability.rs`).

use super::scheduler::Status;
use serde::{Deserialize, Serialize};

/// Upper bounds of the buckets of the seconds histograms, from 10 ms to an hour.
pub const SECONDS_BUCKETS: [f64; 14] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// A Prometheus histogram over [`SECONDS_BUCKETS`]: counts per bucket (not cumulative; the
/// last counts what is above every bound), their sum and count.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    /// Observations per bucket; one more than the bounds (`+Inf`).
    pub buckets: Vec<u64>,
    /// Sum of the observations.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

impl Histogram {
    /// Record one observation (a negative or non-finite one is ignored).
    pub fn observe(&mut self, v: f64) {
        if !v.is_finite() || v < 0.0 {
            return;
        }
        if self.buckets.is_empty() {
            self.buckets = vec![0; SECONDS_BUCKETS.len() + 1];
        }
        let i = SECONDS_BUCKETS
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(SECONDS_BUCKETS.len());
        self.buckets[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    fn text(&self, name: &str, help: &str, out: &mut String) {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} histogram\n"));
        let mut cum = 0;
        for (i, bound) in SECONDS_BUCKETS.iter().enumerate() {
            cum += self.buckets.get(i).copied().unwrap_or(0);
            out.push_str(&format!("{name}_bucket{{le=\"{bound}\"}} {cum}\n"));
        }
        out.push_str(&format!(
            "{name}_bucket{{le=\"+Inf\"}} {}\n{name}_sum {}\n{name}_count {}\n",
            self.count, self.sum, self.count
        ));
    }
}

/// Prometheus text exposition format.
pub fn metrics_text(s: &Status) -> String {
    let mut histograms = String::new();
    s.task_run_seconds.text(
        "diffuse_task_run_seconds",
        "Seconds from a task's process start to its end, over finished attempts.",
        &mut histograms,
    );
    s.task_staging_seconds.text(
        "diffuse_task_staging_seconds",
        "Seconds an attempt spent staging its inputs before its process started.",
        &mut histograms,
    );
    if let Some(p) = &s.pool {
        p.startup_seconds.text(
            "diffuse_pool_worker_startup_seconds",
            "Seconds from asking the resource manager for a worker to its joining.",
            &mut histograms,
        );
    }
    let mut out = String::new();
    let mut metric = |name: &str, help: &str, kind: &str, samples: &[(&str, f64)]| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (labels, v) in samples {
            out.push_str(&format!("{name}{labels} {v}\n"));
        }
    };
    metric(
        "diffuse_queue_length",
        "Tasks waiting in the queue.",
        "gauge",
        &[("", s.queued as f64)],
    );
    metric(
        "diffuse_slots",
        "Slots on connected workers.",
        "gauge",
        &[("", s.slots as f64)],
    );
    metric(
        "diffuse_slots_busy",
        "Slots running a task.",
        "gauge",
        &[("", s.busy_slots as f64)],
    );
    metric(
        "diffuse_nodes",
        "Connected workers.",
        "gauge",
        &[("", s.workers as f64)],
    );
    let by_state: Vec<(String, f64)> = s
        .workers_by_state
        .iter()
        .map(|(k, n)| (format!("{{state=\"{k}\"}}"), *n as f64))
        .collect();
    let by_state: Vec<(&str, f64)> = by_state.iter().map(|(k, n)| (k.as_str(), *n)).collect();
    metric(
        "diffuse_workers",
        "Workers by state: requested, pending, starting (pool requests not yet connected), running, idle, lost, releasing.",
        "gauge",
        &by_state,
    );
    if let Some(p) = &s.pool {
        metric(
            "diffuse_pool_failed_requests_total",
            "Pool requests whose worker never connected (failed submissions, jobs that ended first).",
            "counter",
            &[("", p.failed_requests as f64)],
        );
        metric(
            "diffuse_pool_extra_jobs_total",
            "Jobs under the pool's names that no request owned (a failed submission that was made after all), by what was done: adopted or cancelled.",
            "counter",
            &[
                ("{action=\"adopted\"}", p.extra_jobs_adopted as f64),
                ("{action=\"cancelled\"}", p.extra_jobs_cancelled as f64),
            ],
        );
    }
    metric(
        "diffuse_tasks",
        "Tasks by state.",
        "gauge",
        &[
            ("{state=\"queued\"}", s.queued as f64),
            ("{state=\"running\"}", s.running as f64),
            ("{state=\"succeeded\"}", s.succeeded as f64),
            ("{state=\"failed\"}", s.failed as f64),
            ("{state=\"cancelled\"}", s.cancelled as f64),
        ],
    );
    metric(
        "diffuse_tasks_unschedulable",
        "Queued tasks that ask for more than any connected worker has.",
        "gauge",
        &[("", s.unschedulable as f64)],
    );
    let t = &s.traffic;
    metric(
        "diffuse_accesses_total",
        "Input accesses by source.",
        "counter",
        &[
            ("{source=\"local\"}", t.local as f64),
            ("{source=\"peer\"}", t.peer as f64),
            ("{source=\"storage\"}", t.storage as f64),
        ],
    );
    metric(
        "diffuse_bytes_total",
        "Input bytes by source.",
        "counter",
        &[
            ("{source=\"local\"}", t.bytes_local as f64),
            ("{source=\"peer\"}", t.bytes_peer as f64),
            ("{source=\"storage\"}", t.bytes_storage as f64),
        ],
    );
    let p = &s.prefetch;
    metric(
        "diffuse_prefetches_total",
        "Prefetches from storage by the transfer scheduler, by what became of them.",
        "counter",
        &[
            ("{event=\"issued\"}", p.issued as f64),
            ("{event=\"landed\"}", p.landed as f64),
            ("{event=\"failed\"}", p.failed as f64),
            ("{event=\"read\"}", p.read as f64),
            ("{event=\"evicted_unread\"}", p.evicted_unread as f64),
        ],
    );
    metric(
        "diffuse_prefetch_bytes_total",
        "Bytes asked for by prefetches.",
        "counter",
        &[("", p.issued_bytes as f64)],
    );
    if let Some(m) = &s.two_mark {
        metric(
            "diffuse_two_mark_total",
            "What 2Mark did: local and global phases begun, copies evicted (of which replicas), copies moved.",
            "counter",
            &[
                ("{event=\"local_phase\"}", m.local_phases as f64),
                ("{event=\"global_phase\"}", m.global_phases as f64),
                ("{event=\"evicted\"}", m.evicted as f64),
                ("{event=\"evicted_replica\"}", m.evicted_replicas as f64),
                ("{event=\"moved\"}", m.moved as f64),
            ],
        );
    }
    if !s.links.is_empty() {
        let samples: Vec<(String, f64)> = s
            .links
            .iter()
            .map(|l| {
                (
                    format!("{{from=\"{}\",to=\"{}\"}}", label(&l.from), label(&l.to)),
                    l.predicted_bytes_per_s,
                )
            })
            .collect();
        let samples: Vec<(&str, f64)> = samples.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        metric(
            "diffuse_link_predicted_bytes_per_second",
            "The rate predicted from one worker (or storage) to another by the transfers between them (GDS's mean over a window, times its feedback scale).",
            "gauge",
            &samples,
        );
    }
    if let Some(cap) = s.storage_cap {
        metric(
            "diffuse_storage_cap_bytes_per_second",
            "The cap on reads from persistent storage (--storage-bandwidth-cap).",
            "gauge",
            &[("", cap)],
        );
        metric(
            "diffuse_storage_budget_used_bytes_per_second",
            "The budgeted rate of the storage reads under way.",
            "gauge",
            &[("", s.storage_budget_used as f64)],
        );
    }
    out.push_str(&histograms);
    out
}

/// A label value with `\`, `"` and newlines escaped, as the exposition format wants.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
