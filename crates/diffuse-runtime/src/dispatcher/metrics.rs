//! `GET /metrics`: what the dispatcher shows Prometheus, encoded in the Prometheus text format
//! (0.0.4) by `prometheus-client`, the Prometheus project's Rust client. The output passes
//! `promtool check metrics` (`crates/diffuse/tests/surfaces.rs`).
//!
//! The values are the scheduler's counters at the moment of the scrape: the API fills a
//! [`Scrape`] from the scheduler's status and the server's connection counters, and this
//! module, which imports nothing from the scheduler, names, describes and encodes them: one
//! table, `METRICS`, gives each metric's name, type, HELP text and samples, and a
//! [`Collector`] over the snapshot writes them. It also holds [`Histogram`], the seconds
//! histogram the scheduler records into.

use crate::proto::Traffic;
use diffuse_core::PrefetchStats;
use diffuse_core::TwoMarkStats;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    prometheus_text, DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType::{self, Counter, Gauge, Histogram as Hist};
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The `Content-Type` of [`metrics_text`]'s output.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Upper bounds of the buckets of the seconds histograms, from 10 ms to an hour.
pub const SECONDS_BUCKETS: [f64; 14] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// A histogram over [`SECONDS_BUCKETS`]: counts per bucket (not cumulative; the last counts
/// what is above every bound), their sum and count.
///
/// Kept here rather than `prometheus_client::metrics::histogram::Histogram` because it is
/// also data: `/v1/status` serializes it (`diffuse calibrate` reads `pool.startup_seconds`),
/// and the scheduler hands out copies of it in each status snapshot. prometheus-client's
/// histogram is a shared atomic cell with no serde and no way to read its buckets back but
/// encoding them. Only the recording is ours; the exposition is prometheus-client's
/// ([`EncodeMetric`]).
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
}

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> fmt::Result {
        // Per-bucket counts with their upper bounds; the encoder sums them and adds `+Inf`.
        let buckets: Vec<(f64, u64)> = SECONDS_BUCKETS
            .iter()
            .enumerate()
            .map(|(i, bound)| (*bound, self.buckets.get(i).copied().unwrap_or(0)))
            .collect();
        encoder.encode_histogram::<NoLabelSet>(self.sum, self.count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// What one scrape of `GET /metrics` shows: the scheduler's counters and the API server's
/// connection counters at that moment. An `Option` left `None` leaves its metrics out.
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    /// Tasks waiting in the queue (and for their inputs to be looked up).
    pub queued: u64,
    /// Tasks dispatched and not finished.
    pub running: u64,
    /// Tasks held ready on a worker, not started (`--ready-tasks`).
    pub held_ready: u64,
    /// Tasks finished with exit code 0.
    pub succeeded: u64,
    /// Tasks finished otherwise.
    pub failed: u64,
    /// Tasks cancelled.
    pub cancelled: u64,
    /// Queued tasks that ask for more than any connected worker has.
    pub unschedulable: u64,
    /// Slots on connected workers.
    pub slots: u64,
    /// Slots running a task.
    pub busy_slots: u64,
    /// Connected workers.
    pub nodes: u32,
    /// Workers by state (requested, pending, starting, running, idle, lost, releasing).
    pub workers_by_state: BTreeMap<String, u32>,
    /// The elastic pool's counters (none for a static pool).
    pub pool: Option<PoolScrape>,
    /// Input accesses and bytes by source, over finished attempts.
    pub traffic: Traffic,
    /// What the transfer scheduler's prefetches became.
    pub prefetch: PrefetchStats,
    /// What 2Mark did (`--two-mark`).
    pub two_mark: Option<TwoMarkStats>,
    /// The rates predicted between workers (and from storage).
    pub links: Vec<LinkRate>,
    /// The cap on storage reads and its budget in use (`--storage-bandwidth-cap`).
    pub storage_cap: Option<StorageCap>,
    /// Seconds from a task's process start to its end, over finished attempts.
    pub task_run_seconds: Histogram,
    /// Seconds attempts spent staging their inputs.
    pub task_staging_seconds: Histogram,
    /// The connected workers' warm Python processes, summed.
    pub warm: crate::proto::WarmUse,
    /// Connections closed at the connection limit to make room for a new one.
    pub connections_evicted: u64,
    /// New connections closed at once at the connection limit.
    pub connections_refused: u64,
}

/// An elastic pool's counters in a [`Scrape`].
#[derive(Clone, Debug, Default)]
pub struct PoolScrape {
    /// Pool requests whose worker never connected.
    pub failed_requests: u64,
    /// Jobs no request owned, adopted as workers.
    pub extra_jobs_adopted: u64,
    /// Jobs no request owned, cancelled.
    pub extra_jobs_cancelled: u64,
    /// Seconds from asking for a worker to its joining.
    pub startup_seconds: Histogram,
}

/// One predicted link rate in a [`Scrape`].
#[derive(Clone, Debug, Default)]
pub struct LinkRate {
    /// A worker's name, or `storage`.
    pub from: String,
    /// A worker's name.
    pub to: String,
    /// Predicted bytes per second.
    pub bytes_per_s: f64,
}

/// The storage cap in a [`Scrape`].
#[derive(Clone, Copy, Debug, Default)]
pub struct StorageCap {
    /// The cap, bytes per second.
    pub bytes_per_s: f64,
    /// The budgeted rate of the storage reads under way.
    pub used_bytes_per_s: u64,
}

/// The Prometheus text exposition (0.0.4) of one scrape.
pub fn metrics_text(scrape: Scrape) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scrape));
    let mut out = String::new();
    prometheus_text::encode(&mut out, &registry).expect("writing to a String cannot fail");
    out
}

/// One row of [`METRICS`]: a metric's name, type and HELP text, and where its samples come
/// from in a scrape.
struct Def {
    /// The name; a counter's without `_total`, which the encoder appends.
    name: &'static str,
    kind: MetricType,
    help: &'static str,
    /// The samples; `None` leaves the metric out (its feature is off).
    samples: for<'a> fn(&'a Scrape) -> Option<Samples<'a>>,
}

/// A metric's samples in one scrape.
enum Samples<'a> {
    /// One sample without labels.
    One(Value),
    /// One sample per value of one label.
    By(&'static str, Vec<(&'a str, Value)>),
    /// One sample per link, labelled `from` and `to`.
    Links(&'a [LinkRate]),
    /// A histogram.
    Histogram(&'a Histogram),
}

/// A sample's value.
#[derive(Clone, Copy)]
enum Value {
    Int(u64),
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::Int(v)
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Int(v.into())
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}

impl Value {
    /// Write it as a sample of a metric of type `kind`.
    fn encode(self, kind: MetricType, encoder: MetricEncoder) -> fmt::Result {
        match (kind, self) {
            (MetricType::Counter, Value::Int(n)) => ConstCounter::new(n).encode(encoder),
            (MetricType::Counter, Value::Float(v)) => ConstCounter::new(v).encode(encoder),
            (_, Value::Int(n)) => ConstGauge::new(n).encode(encoder),
            (_, Value::Float(v)) => ConstGauge::new(v).encode(encoder),
        }
    }
}

/// A metric with one sample.
/// The warm processes' figures, left out where no worker has any (the feature is unused).
fn warm(s: &Scrape) -> Option<&crate::proto::WarmUse> {
    (s.warm.processes > 0 || s.warm.calls > 0).then_some(&s.warm)
}

fn one<'a>(v: impl Into<Value>) -> Option<Samples<'a>> {
    Some(Samples::One(v.into()))
}

/// A metric with a sample per value of label `key`.
fn by<'a, const N: usize>(key: &'static str, samples: [(&'a str, u64); N]) -> Option<Samples<'a>> {
    Some(Samples::By(
        key,
        samples.iter().map(|(k, n)| (*k, Value::Int(*n))).collect(),
    ))
}

/// Every metric of `GET /metrics`, in the order shown (docs/runtime.md lists them).
const METRICS: &[Def] = &[
    Def {
        name: "diffuse_queue_length",
        kind: Gauge,
        help: "Tasks waiting in the queue.",
        samples: |s| one(s.queued),
    },
    Def {
        name: "diffuse_slots",
        kind: Gauge,
        help: "Slots on connected workers.",
        samples: |s| one(s.slots),
    },
    Def {
        name: "diffuse_slots_busy",
        kind: Gauge,
        help: "Slots running a task.",
        samples: |s| one(s.busy_slots),
    },
    Def {
        name: "diffuse_nodes",
        kind: Gauge,
        help: "Connected workers.",
        samples: |s| one(s.nodes),
    },
    Def {
        name: "diffuse_workers",
        kind: Gauge,
        help: "Workers by state: requested, pending, starting (pool requests not yet \
               connected), running, idle, lost, releasing.",
        samples: |s| {
            let states = s.workers_by_state.iter();
            let samples = states.map(|(k, n)| (k.as_str(), Value::from(*n)));
            Some(Samples::By("state", samples.collect()))
        },
    },
    Def {
        name: "diffuse_pool_failed_requests",
        kind: Counter,
        help: "Pool requests whose worker never connected (failed submissions, jobs that \
               ended first).",
        samples: |s| one(s.pool.as_ref()?.failed_requests),
    },
    Def {
        name: "diffuse_pool_extra_jobs",
        kind: Counter,
        help: "Jobs under the pool's names that no request owned (a failed submission that \
               was made after all), by what was done: adopted or cancelled.",
        samples: |s| {
            let p = s.pool.as_ref()?;
            by(
                "action",
                [
                    ("adopted", p.extra_jobs_adopted),
                    ("cancelled", p.extra_jobs_cancelled),
                ],
            )
        },
    },
    Def {
        name: "diffuse_tasks",
        kind: Gauge,
        help: "Tasks by state.",
        samples: |s| {
            by(
                "state",
                [
                    ("queued", s.queued),
                    ("running", s.running),
                    ("held_ready", s.held_ready),
                    ("succeeded", s.succeeded),
                    ("failed", s.failed),
                    ("cancelled", s.cancelled),
                ],
            )
        },
    },
    Def {
        name: "diffuse_tasks_unschedulable",
        kind: Gauge,
        help: "Queued tasks that ask for more than any connected worker has.",
        samples: |s| one(s.unschedulable),
    },
    Def {
        name: "diffuse_accesses",
        kind: Counter,
        help: "Input accesses by source.",
        samples: |s| {
            let t = &s.traffic;
            by(
                "source",
                [("local", t.local), ("peer", t.peer), ("storage", t.storage)],
            )
        },
    },
    Def {
        name: "diffuse_bytes",
        kind: Counter,
        help: "Input bytes by source.",
        samples: |s| {
            let t = &s.traffic;
            by(
                "source",
                [
                    ("local", t.bytes_local),
                    ("peer", t.bytes_peer),
                    ("storage", t.bytes_storage),
                ],
            )
        },
    },
    Def {
        name: "diffuse_prefetches",
        kind: Counter,
        help: "Prefetches from storage by the transfer scheduler, by what became of them.",
        samples: |s| {
            let p = &s.prefetch;
            by(
                "event",
                [
                    ("issued", p.issued),
                    ("landed", p.landed),
                    ("failed", p.failed),
                    ("read", p.read),
                    ("evicted_unread", p.evicted_unread),
                ],
            )
        },
    },
    Def {
        name: "diffuse_prefetch_bytes",
        kind: Counter,
        help: "Bytes asked for by prefetches.",
        samples: |s| one(s.prefetch.issued_bytes),
    },
    Def {
        name: "diffuse_two_mark",
        kind: Counter,
        help: "What 2Mark did: local and global phases begun, copies evicted (of which \
               replicas), copies moved.",
        samples: |s| {
            let m = s.two_mark.as_ref()?;
            by(
                "event",
                [
                    ("local_phase", m.local_phases),
                    ("global_phase", m.global_phases),
                    ("evicted", m.evicted),
                    ("evicted_replica", m.evicted_replicas),
                    ("moved", m.moved),
                ],
            )
        },
    },
    Def {
        name: "diffuse_link_predicted_bytes_per_second",
        kind: Gauge,
        help: "The rate predicted from one worker (or storage) to another by the transfers \
               between them (GDS's mean over a window, times its feedback scale).",
        samples: |s| (!s.links.is_empty()).then_some(Samples::Links(&s.links)),
    },
    Def {
        name: "diffuse_storage_cap_bytes_per_second",
        kind: Gauge,
        help: "The cap on reads from persistent storage (--storage-bandwidth-cap).",
        samples: |s| one(s.storage_cap?.bytes_per_s),
    },
    Def {
        name: "diffuse_storage_budget_used_bytes_per_second",
        kind: Gauge,
        help: "The budgeted rate of the storage reads under way.",
        samples: |s| one(s.storage_cap?.used_bytes_per_s),
    },
    Def {
        name: "diffuse_warm_processes",
        kind: Gauge,
        help: "Warm Python processes on the connected workers (function tasks).",
        samples: |s| warm(s).and_then(|w| one(w.processes)),
    },
    Def {
        name: "diffuse_warm_calls",
        kind: Counter,
        help: "Calls the connected workers have run in warm Python processes since they started.",
        samples: |s| warm(s).and_then(|w| one(w.calls)),
    },
    Def {
        name: "diffuse_warm_resident_bytes",
        kind: Gauge,
        help:
            "Resident memory of the warm Python processes (pages shared by a fork counted in each).",
        samples: |s| warm(s).and_then(|w| one(w.rss)),
    },
    Def {
        name: "diffuse_task_run_seconds",
        kind: Hist,
        help: "Seconds from a task's process start to its end, over finished attempts.",
        samples: |s| Some(Samples::Histogram(&s.task_run_seconds)),
    },
    Def {
        name: "diffuse_task_staging_seconds",
        kind: Hist,
        help: "Seconds an attempt spent staging its inputs before its process started.",
        samples: |s| Some(Samples::Histogram(&s.task_staging_seconds)),
    },
    Def {
        name: "diffuse_pool_worker_startup_seconds",
        kind: Hist,
        help: "Seconds from asking the resource manager for a worker to its joining.",
        samples: |s| Some(Samples::Histogram(&s.pool.as_ref()?.startup_seconds)),
    },
    Def {
        name: "diffuse_connections_evicted",
        kind: Counter,
        help: "Connections that showed no valid token, closed to make room for a new one at \
               the connection limit.",
        samples: |s| one(s.connections_evicted),
    },
    Def {
        name: "diffuse_connections_refused",
        kind: Counter,
        help: "New connections closed at once: every place was held by an authorised or busy \
               one.",
        samples: |s| one(s.connections_refused),
    },
];

impl Collector for Scrape {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        for def in METRICS {
            let Some(samples) = (def.samples)(self) else {
                continue;
            };
            let mut metric = e.encode_descriptor(def.name, def.help, None, def.kind)?;
            match samples {
                Samples::One(v) => v.encode(def.kind, metric)?,
                Samples::By(key, values) => {
                    for (label, v) in values {
                        v.encode(def.kind, metric.encode_family(&[(key, label)])?)?;
                    }
                }
                Samples::Links(links) => {
                    for l in links {
                        let labels = [("from", l.from.as_str()), ("to", l.to.as_str())];
                        let v = Value::Float(l.bytes_per_s);
                        v.encode(def.kind, metric.encode_family(&labels)?)?;
                    }
                }
                Samples::Histogram(h) => h.encode(metric)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
