//! A wave of arrivals on an elastic pool of local workers (`--provisioner local`): two crests of
//! tasks that read a file and sleep, with a lull between them longer than `--idle-release`.
//! The workers rise with the first crest, are all released in the lull, rise again from none
//! with the second crest, and every task succeeds. (bench/wave.sh runs the long version next to
//! the simulator; docs/provisioning.md shows it.)
//!
//! Also here: `diffuse sim arrivals`, which simulates such a list of arrivals, refuses a bad
//! arrivals file naming the line.

mod common;

use common::cluster::{file_uri, poll, Cluster};
use common::run_diffuse;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Workers the dispatcher counts in any state (requested to releasing), and those connected.
fn workers(status: &Value) -> (u64, u64) {
    let by = &status["workers_by_state"];
    let all = by
        .as_object()
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum());
    let connected = by["running"].as_u64().unwrap_or(0) + by["idle"].as_u64().unwrap_or(0);
    (all, connected)
}

/// One sample of `/v1/status`: seconds since the wave began, workers (all, connected), queued.
#[derive(Clone, Copy, Debug)]
struct Sample {
    t: f64,
    all: u64,
    connected: u64,
    queued: u64,
}

/// Arrival times (seconds) of a crest: `rate(s)` tasks in second `s` of `secs`, spread evenly.
fn crest(start: f64, secs: usize, peak: f64) -> Vec<f64> {
    let mut at = Vec::new();
    for s in 0..secs {
        // Half a sine over the crest: 1, 2, ..., peak, ..., 1 tasks per second.
        let x = (s as f64 + 0.5) / secs as f64 * std::f64::consts::PI;
        let n = (peak * x.sin()).round().max(1.0) as usize;
        at.extend((0..n).map(|k| start + s as f64 + k as f64 / n as f64));
    }
    at
}

/// A thread that samples `/v1/status` every 200 ms into `samples` until `stop`.
fn sample_status(
    c: &Cluster,
    start: Instant,
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let (url, token) = (c.url.clone(), c.client_token.clone());
    std::thread::spawn(move || {
        let http = reqwest::blocking::Client::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let s: Option<Value> = http
                .get(format!("{url}/v1/status"))
                .bearer_auth(&token)
                .timeout(Duration::from_secs(5))
                .send()
                .ok()
                .and_then(|r| r.json().ok());
            if let Some(s) = s {
                let (all, connected) = workers(&s);
                samples.lock().unwrap().push(Sample {
                    t: start.elapsed().as_secs_f64(),
                    all,
                    connected,
                    queued: s["queued"].as_u64().unwrap_or(0),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    })
}

/// Submit each task at its arrival time (seconds after `start`; those due together in one
/// batch).
fn submit_on_time(c: &Cluster, tasks: &[Value], arrivals: &[f64], start: Instant) {
    let mut i = 0;
    while i < tasks.len() {
        let due = start + Duration::from_secs_f64(arrivals[i]);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let now = start.elapsed().as_secs_f64();
        let mut j = i;
        while j < tasks.len() && arrivals[j] <= now + 0.001 {
            j += 1;
        }
        c.submit(&tasks[i..j]);
        i = j;
    }
}

#[test]
fn workers_rise_with_each_crest_and_are_released_in_the_lull() {
    const MAX: u64 = 4;
    // Crest 1 in 0-12 s, a lull of 18 s (idle release 3 s), crest 2 in 30-42 s.
    let (crest1_end, crest2_start) = (12.0, 30.0);
    let mut arrivals = crest(0.0, 12, 4.0);
    arrivals.extend(crest(crest2_start, 12, 4.0));

    let mut c = Cluster::start_with(
        &[],
        &[
            "--provisioner",
            "local",
            "--max-workers",
            &MAX.to_string(),
            "--worker-cores",
            "1",
            "--worker-cache-size",
            "50MB",
            "--step",
            "all",
            "--idle-release",
            "3s",
            "--release-grace",
            "5s",
        ],
        &[],
    );
    let files: Vec<String> = (0..8)
        .map(|i| file_uri(&c.data(&format!("f{i}"), &vec![b'x'; 10_000 + i])))
        .collect();
    let tasks: Vec<Value> = arrivals
        .iter()
        .enumerate()
        .map(|(k, _)| {
            json!({
                "id": format!("t{k:03}"),
                "cmd": "cat {inputs[0]} > /dev/null; sleep 0.5",
                "inputs": [files[k % files.len()]],
            })
        })
        .collect();

    // Sample status every 200 ms from a thread, with its own client.
    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let start = Instant::now();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = sample_status(&c, start, samples.clone(), stop.clone());
    submit_on_time(&c, &tasks, &arrivals, start);
    for t in &tasks {
        let (task, _) = c.wait_succeeded(t["id"].as_str().unwrap());
        assert_eq!(task["state"], "succeeded", "{task}");
    }
    poll("the pool to be released after the last crest", || {
        (workers(&c.status()).0 == 0).then_some(())
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sampler.join().unwrap();
    let samples = samples.lock().unwrap().clone();
    let dump = || {
        samples
            .iter()
            .map(|s| format!("{:.1}s {}/{} q{}", s.t, s.connected, s.all, s.queued))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let most = |from: f64, to: f64| {
        samples
            .iter()
            .filter(|s| s.t >= from && s.t < to)
            .map(|s| s.connected)
            .max()
            .unwrap_or(0)
    };

    // The pool stays within --max-workers, counting workers starting and ending.
    let peak = samples.iter().map(|s| s.all).max().unwrap_or(0);
    assert!(peak <= MAX, "{peak} workers at once: {}", dump());
    // Rise with the first crest.
    let first = most(0.0, crest1_end + 1.0);
    assert!(
        first >= 2,
        "crest 1 had at most {first} worker(s): {}",
        dump()
    );
    // In the lull, every worker is released (none counted in any state) before crest 2.
    let released = samples
        .iter()
        .any(|s| s.t > crest1_end && s.t < crest2_start && s.all == 0);
    assert!(
        released,
        "the workers were not all released in the lull: {}",
        dump()
    );
    // Rise again, from none, with the second crest: tasks with inputs bring a worker to look
    // them up even when none is connected.
    let second = most(crest2_start, crest2_start + 13.0);
    assert!(
        second >= 2,
        "crest 2 had at most {second} worker(s): {}",
        dump()
    );
    let log = c.dispatcher.as_ref().unwrap().log_text();
    let released = log.matches("idle worker released").count();
    assert!(
        released >= first as usize + second as usize,
        "{released} releases in the log, yet {first} then {second} workers:\n{log}"
    );

    // SIGTERM the dispatcher, as a user stopping it would: it gives its workers back.
    let d = c.dispatcher.as_mut().unwrap();
    common::send_signal(d.child.id(), false, rustix::process::Signal::TERM);
    poll("the dispatcher to stop", || d.exited());
}

#[test]
fn sim_arrivals_simulates_a_file_and_refuses_a_bad_line() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.jsonl");
    std::fs::write(
        &good,
        "{\"time\": 0, \"compute_s\": 1, \"inputs\": [[0, 1000]]}\n\
         {\"time\": 0.5, \"compute_s\": 1, \"inputs\": [[0, 1000]], \"id\": \"b\"}\n\
         \n\
         {\"time\": 20, \"compute_s\": 1, \"inputs\": [[1, 1000]], \"cores\": 1}\n",
    )
    .unwrap();
    let out = run_diffuse(
        &[
            "sim",
            "arrivals",
            "--arrivals",
            good.to_str().unwrap(),
            "--nodes",
            "2",
            "--idle-timeout",
            "5",
            "--json",
        ],
        None,
        &[],
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let s: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(s["tasks"], 3, "{s}");
    assert_eq!(s["testbed"], "local", "{s}");
    assert_eq!(s["provisioning"], "dynamic", "{s}");
    // Released in the 19 s lull and acquired again for the last task.
    assert!(s["nodes_acquired"].as_u64().unwrap() >= 2, "{s}");

    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"time\": 0, \"compute_s\": 1}\n{\"time\": 1, \"compute_s\": 1, \"inputs\": [[0]]}\n",
    )
    .unwrap();
    let out = run_diffuse(
        &["sim", "arrivals", "--arrivals", bad.to_str().unwrap()],
        None,
        &[],
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("bad.jsonl: line 2:") && out.stderr.contains("inputs"),
        "{}",
        out.stderr
    );
    // The workload and the file go together.
    let out = run_diffuse(&["sim", "arrivals"], None, &[], Duration::from_secs(60));
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--arrivals"), "{}", out.stderr);
    let out = run_diffuse(
        &["sim", "mi", "--arrivals", good.to_str().unwrap()],
        None,
        &[],
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--arrivals"), "{}", out.stderr);
}
