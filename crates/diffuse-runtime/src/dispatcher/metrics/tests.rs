//! The exposition's contract: every metric's name, type and HELP text as docs/runtime.md lists
//! them (and as they were when the text was written by hand), its samples and labels, and what
//! is left out when a feature is off.

use super::*;

/// A scrape with every feature on: an elastic pool, 2Mark, a storage cap, measured links.
fn full() -> Scrape {
    let mut h = Histogram::default();
    for v in [0.02, 0.02, 7.0, 5000.0, -1.0, f64::NAN] {
        h.observe(v);
    }
    Scrape {
        queued: 5,
        running: 3,
        held_ready: 1,
        succeeded: 10,
        failed: 4,
        cancelled: 1,
        unschedulable: 2,
        slots: 8,
        busy_slots: 3,
        nodes: 2,
        workers_by_state: [("idle".to_string(), 1), ("running".to_string(), 1)].into(),
        pool: Some(PoolScrape {
            failed_requests: 6,
            extra_jobs_adopted: 7,
            extra_jobs_cancelled: 8,
            startup_seconds: h.clone(),
        }),
        traffic: Traffic {
            local: 1,
            peer: 2,
            storage: 3,
            bytes_local: 100,
            bytes_peer: 200,
            bytes_storage: 300,
        },
        prefetch: PrefetchStats {
            issued: 9,
            issued_bytes: 900,
            ..Default::default()
        },
        two_mark: Some(TwoMarkStats {
            moved: 11,
            ..Default::default()
        }),
        links: vec![LinkRate {
            from: "storage".into(),
            to: "a".into(),
            bytes_per_s: 1.25e8,
        }],
        storage_cap: Some(StorageCap {
            bytes_per_s: 1e9,
            used_bytes_per_s: 12,
        }),
        task_run_seconds: h.clone(),
        task_staging_seconds: Histogram::default(),
        warm: crate::proto::WarmUse {
            processes: 2,
            calls: 15,
            rss: 1 << 20,
        },
        connections_evicted: 13,
        connections_refused: 14,
    }
}

/// `(name, type, help)` of every `# HELP`/`# TYPE` pair, in order.
fn families(text: &str) -> Vec<(String, String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.strip_prefix("# HELP ") else {
            continue;
        };
        let (name, help) = rest.split_once(' ').expect("name and help");
        let kind = lines[i + 1]
            .strip_prefix(&format!("# TYPE {name} "))
            .unwrap_or_else(|| panic!("no TYPE after HELP of {name}"));
        out.push((name.into(), kind.into(), help.into()));
    }
    out
}

#[test]
fn every_metric_keeps_its_name_type_and_help() {
    let want = [
        ("diffuse_queue_length", "gauge", "Tasks waiting in the queue."),
        ("diffuse_slots", "gauge", "Slots on connected workers."),
        ("diffuse_slots_busy", "gauge", "Slots running a task."),
        ("diffuse_nodes", "gauge", "Connected workers."),
        ("diffuse_workers", "gauge", "Workers by state: requested, pending, starting (pool requests not yet connected), running, idle, lost, releasing."),
        ("diffuse_pool_failed_requests_total", "counter", "Pool requests whose worker never connected (failed submissions, jobs that ended first)."),
        ("diffuse_pool_extra_jobs_total", "counter", "Jobs under the pool's names that no request owned (a failed submission that was made after all), by what was done: adopted or cancelled."),
        ("diffuse_tasks", "gauge", "Tasks by state."),
        ("diffuse_tasks_unschedulable", "gauge", "Queued tasks that ask for more than any connected worker has."),
        ("diffuse_accesses_total", "counter", "Input accesses by source."),
        ("diffuse_bytes_total", "counter", "Input bytes by source."),
        ("diffuse_prefetches_total", "counter", "Prefetches from storage by the transfer scheduler, by what became of them."),
        ("diffuse_prefetch_bytes_total", "counter", "Bytes asked for by prefetches."),
        ("diffuse_two_mark_total", "counter", "What 2Mark did: local and global phases begun, copies evicted (of which replicas), copies moved."),
        ("diffuse_link_predicted_bytes_per_second", "gauge", "The rate predicted from one worker (or storage) to another by the transfers between them (GDS's mean over a window, times its feedback scale)."),
        ("diffuse_storage_cap_bytes_per_second", "gauge", "The cap on reads from persistent storage (--storage-bandwidth-cap)."),
        ("diffuse_storage_budget_used_bytes_per_second", "gauge", "The budgeted rate of the storage reads under way."),
        ("diffuse_warm_processes", "gauge", "Warm Python processes on the connected workers (function tasks)."),
        ("diffuse_warm_calls_total", "counter", "Calls the connected workers have run in warm Python processes since they started."),
        ("diffuse_warm_resident_bytes", "gauge", "Resident memory of the warm Python processes (pages shared by a fork counted in each)."),
        ("diffuse_task_run_seconds", "histogram", "Seconds from a task's process start to its end, over finished attempts."),
        ("diffuse_task_staging_seconds", "histogram", "Seconds an attempt spent staging its inputs before its process started."),
        ("diffuse_pool_worker_startup_seconds", "histogram", "Seconds from asking the resource manager for a worker to its joining."),
        ("diffuse_connections_evicted_total", "counter", "Connections that showed no valid token, closed to make room for a new one at the connection limit."),
        ("diffuse_connections_refused_total", "counter", "New connections closed at once: every place was held by an authorised or busy one."),
    ];
    let got = families(&metrics_text(full()));
    let want: Vec<(String, String, String)> = want
        .iter()
        .map(|(n, k, h)| (n.to_string(), k.to_string(), h.to_string()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn samples_carry_their_labels_and_values() {
    let text = metrics_text(full());
    for line in [
        "diffuse_queue_length 5",
        "diffuse_nodes 2",
        "diffuse_workers{state=\"idle\"} 1",
        "diffuse_pool_extra_jobs_total{action=\"cancelled\"} 8",
        "diffuse_tasks{state=\"failed\"} 4",
        "diffuse_accesses_total{source=\"peer\"} 2",
        "diffuse_bytes_total{source=\"storage\"} 300",
        "diffuse_prefetches_total{event=\"issued\"} 9",
        "diffuse_prefetch_bytes_total 900",
        "diffuse_two_mark_total{event=\"moved\"} 11",
        "diffuse_link_predicted_bytes_per_second{from=\"storage\",to=\"a\"} 125000000",
        "diffuse_storage_cap_bytes_per_second 1000000000",
        "diffuse_storage_budget_used_bytes_per_second 12",
        "diffuse_connections_refused_total 14",
        "diffuse_warm_processes 2",
        "diffuse_warm_calls_total 15",
        "diffuse_warm_resident_bytes 1048576",
        // Cumulative buckets; the negative and NaN observations are ignored.
        "diffuse_task_run_seconds_bucket{le=\"0.01\"} 0",
        "diffuse_task_run_seconds_bucket{le=\"0.05\"} 2",
        "diffuse_task_run_seconds_bucket{le=\"10\"} 3",
        "diffuse_task_run_seconds_bucket{le=\"3600\"} 3",
        "diffuse_task_run_seconds_bucket{le=\"+Inf\"} 4",
        "diffuse_task_run_seconds_sum 5007.04",
        "diffuse_task_run_seconds_count 4",
        "diffuse_task_staging_seconds_bucket{le=\"+Inf\"} 0",
        "diffuse_pool_worker_startup_seconds_count 4",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(line)),
            "missing {line:?} in:\n{text}"
        );
    }
}

#[test]
fn label_values_are_escaped() {
    let mut s = full();
    s.links[0].from = "a\"b\\c\nd".into();
    let text = metrics_text(s);
    assert!(
        text.contains("{from=\"a\\\"b\\\\c\\nd\",to=\"a\"}"),
        "{text}"
    );
}

#[test]
fn metrics_of_features_that_are_off_are_left_out() {
    let text = metrics_text(Scrape::default());
    let names: Vec<String> = families(&text).into_iter().map(|(n, _, _)| n).collect();
    for off in [
        "diffuse_pool_failed_requests_total",
        "diffuse_pool_extra_jobs_total",
        "diffuse_pool_worker_startup_seconds",
        "diffuse_two_mark_total",
        "diffuse_link_predicted_bytes_per_second",
        "diffuse_storage_cap_bytes_per_second",
        "diffuse_storage_budget_used_bytes_per_second",
    ] {
        assert!(!names.iter().any(|n| n == off), "{off} in:\n{text}");
    }
    assert_eq!(names.len(), 15, "{text}");
    assert!(text.contains("diffuse_task_run_seconds_count 0"), "{text}");
}
