//! The dispatcher with pools of a cluster's size, made of emulated workers (`diffuse emulate`:
//! real sessions over TCP, tasks on timers). These tests check behaviour (every session is
//! served, nothing is lost, the emulator answers as a worker does); bench/scale.sh reports the
//! numbers.

mod common;

use common::cluster::{poll, Cluster};
use common::send_signal;
use common::BIN;
use rustix::process::Signal;
use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};

/// Start `diffuse emulate` against `c` with `workers` workers of `slots` slots.
fn emulate(c: &Cluster, workers: u32, slots: u32) -> Child {
    let mut cmd = Command::new(BIN);
    cmd.args(["emulate", "--dispatcher", &c.url])
        .args([
            "--workers",
            &workers.to_string(),
            "--slots",
            &slots.to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(c.path("emulator.log")).expect("log"));
    c.envs(&mut cmd);
    cmd.spawn().expect("start diffuse emulate")
}

/// SIGTERM the emulator (each session says it is leaving) and return its summary.
fn stop(emulator: Child) -> Value {
    send_signal(emulator.id(), false, Signal::TERM);
    let out = emulator.wait_with_output().expect("emulator exits");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("summary {text:?}: {e}"))
}

fn noop_tasks(prefix: &str, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"id": format!("{prefix}{i}"), "cmd": ["true"]}))
        .collect()
}

#[test]
fn ten_thousand_emulated_sessions_connect_work_and_leave_without_error() {
    let mut c = Cluster::start(&[]);
    let emulator = emulate(&c, 10_000, 4);
    c.wait_workers(10_000);
    let s = c.status();
    assert_eq!(s["slots"], 40_000, "{s}");
    // The status stays short: the first workers and a count of the rest; the counts by state
    // cover all of them, and GET /v1/workers pages through every one.
    let listed = s["worker_list"].as_array().expect("worker_list").len();
    assert_eq!(
        (listed, s["worker_list_more"].as_u64()),
        (100, Some(9_900)),
        "{}",
        s["worker_list_more"]
    );
    let by_state: u64 = s["workers_by_state"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(by_state, 10_000, "{}", s["workers_by_state"]);
    let mut names = std::collections::BTreeSet::new();
    let mut after = String::new();
    loop {
        let page = c.get(&format!("/v1/workers?limit=3000&after={after}"));
        let workers = page["workers"].as_array().expect("a page of workers");
        assert!(workers.len() <= 3000);
        for w in workers {
            assert!(
                names.insert(w["name"].as_str().unwrap().to_string()),
                "{w} twice"
            );
        }
        match page["next"].as_str() {
            Some(n) => after = n.to_string(),
            None => break,
        }
    }
    assert_eq!(names.len(), 10_000);
    c.submit(&noop_tasks("t", 20_000));
    poll("20,000 tasks to succeed", || {
        (c.status()["succeeded"] == 20_000).then_some(())
    });
    let summary = stop(emulator);
    assert_eq!(summary["connected"], 10_000, "{summary}");
    assert_eq!(summary["errors"], 0, "{summary}");
    assert_eq!(summary["finished"], 20_000, "{summary}");
    // Every session is gone, none of them counted as crashed, and nothing was lost.
    poll("every session closed", || {
        (c.status()["workers"] == 0).then_some(())
    });
    let s = c.status();
    for (key, want) in [
        ("succeeded", 20_000),
        ("failed", 0),
        ("queued", 0),
        ("running", 0),
    ] {
        assert_eq!(s[key], want, "{key}: {s}");
    }
    let log = std::fs::read_to_string(c.path("dispatcher-0-0.log")).unwrap_or_default();
    assert!(
        !log.contains("panicked"),
        "{}",
        common::cluster::tail(&log, 2000)
    );
}

#[test]
fn an_emulated_worker_runs_for_compute_s_and_answers_cancel_and_leave_as_a_worker_does() {
    let mut c = Cluster::start(&[]);
    let emulator = emulate(&c, 2, 1);
    c.wait_workers(2);
    c.submit(&[
        json!({"id": "long-a", "cmd": ["true"], "compute_s": 600}),
        json!({"id": "long-b", "cmd": ["true"], "compute_s": 600}),
    ]);
    poll("both long tasks running", || {
        (c.status()["running"] == 2).then_some(())
    });
    c.submit(&[json!({"id": "short", "cmd": ["true"], "compute_s": 0.2})]);
    // A cancelled emulated task ends now, not after its 600 s; its slot takes the short task,
    // which takes its compute time.
    let r = c
        .http
        .post(format!("{}/v1/tasks/long-a/cancel", c.url))
        .bearer_auth(&c.client_token)
        .send()
        .expect("cancel");
    assert!(r.status().is_success(), "{:?}", r.text());
    assert_eq!(c.wait_done("long-a")["state"], "cancelled");
    let (_, report) = c.wait_succeeded("short");
    let ran = report["finished_at"].as_f64().unwrap() - report["started_at"].as_f64().unwrap();
    assert!((0.2..60.0).contains(&ran), "ran {ran} s: {report}");
    // A worker that leaves gives its running task back: it is queued again, not failed.
    let summary = stop(emulator);
    assert_eq!(summary["errors"], 0, "{summary}");
    assert_eq!(
        (summary["finished"].as_u64(), summary["cancelled"].as_u64()),
        (Some(1), Some(1))
    );
    poll("long-b queued again", || {
        (c.task("long-b")["state"] == "queued").then_some(())
    });
}

/// `--ready-tasks 1`: each worker holds one task ready beyond its cores (Falkon's pre-fetched
/// tasks). A ready task waits on the worker without starting; cancelled, it ends without its
/// program ever running; when its worker leaves it is given back with the running one and
/// runs elsewhere; every task ends once. (`--ready-below inf`: held behind any task, even
/// these long ones.)
#[test]
fn a_task_held_ready_on_a_worker_is_cancelled_unstarted_and_given_back_when_the_worker_leaves() {
    let mut c = Cluster::start_with(&[], &["--ready-tasks", "1", "--ready-below", "inf"], &[]);
    c.worker("w1", 1, "10MB");
    c.wait_workers(1);
    let marks = c.path("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let task = |id: &str, secs: u32| json!({"id": id, "cmd": format!("touch {}/{id} && sleep {secs}", marks.display())});
    c.submit(&[task("a", 600), task("b", 600), task("c", 1)]);
    // a runs, b waits on the worker (dispatched, not started), c stays queued.
    poll("a started", || marks.join("a").exists().then_some(()));
    poll("b sent ahead", || {
        (c.task("b")["state"] == "running" && c.task("c")["state"] == "queued").then_some(())
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(
        !marks.join("b").exists(),
        "b started while a holds the only core"
    );
    // Cancelled while ready: it ends at once, its program never run; c takes the ready slot.
    let r = c
        .http
        .post(format!("{}/v1/tasks/b/cancel", c.url))
        .bearer_auth(&c.client_token)
        .send()
        .expect("cancel");
    assert!(r.status().is_success());
    assert_eq!(c.wait_done("b")["state"], "cancelled");
    assert!(!marks.join("b").exists(), "a cancelled ready task ran");
    poll("c sent ahead", || {
        (c.task("c")["state"] == "running").then_some(())
    });
    // The worker leaves (SIGTERM): a (running) and c (ready) are given back, not failed, and
    // run on the next worker.
    c.signal_worker(0, Signal::TERM);
    poll("w1 gone", || (c.status()["workers"] == 0).then_some(()));
    for id in ["a", "c"] {
        let t = c.task(id);
        assert_eq!(t["state"], "queued", "{id}: {t}");
    }
    c.worker("w2", 2, "10MB");
    let (_, report) = c.wait_succeeded("c");
    assert!(report["exit_code"] == 0, "{report}");
    let s = c.status();
    assert_eq!(
        (
            s["succeeded"].as_u64(),
            s["cancelled"].as_u64(),
            s["failed"].as_u64()
        ),
        (Some(1), Some(1), Some(0)),
        "{s}"
    );
    assert_eq!(c.task("a")["state"], "running", "a runs again on w2");
}

#[test]
fn calibrate_measures_an_emulated_pool_with_dispatch_only_and_the_simulator_takes_its_file() {
    let mut c = Cluster::start(&[]);
    let emulator = emulate(&c, 50, 2);
    c.wait_workers(50);
    let calibrate = |extra: &[&str]| {
        let mut args = vec!["calibrate", "--dispatcher", c.url.as_str()];
        args.extend_from_slice(extra);
        common::run_diffuse(
            &args,
            None,
            &[("DIFFUSE_CLIENT_TOKEN", c.client_token.as_str())],
            std::time::Duration::from_secs(120),
        )
    };
    // Without probes to read, calibrate asks for --scratch or --dispatch-only.
    let out = calibrate(&[]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--scratch"), "{}", out.stderr);

    let file = c.path("pool.toml");
    let out = calibrate(&[
        "--dispatch-only",
        "--node-startup",
        "2",
        "--out",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("an empty task costs"), "{}", out.stderr);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("NOT measured (--dispatch-only)"), "{text}");
    let t: toml::Table = toml::from_str(&text).unwrap();
    assert_eq!(t["nodes"].as_integer(), Some(50), "{text}");
    assert_eq!(t["slots_per_node"].as_integer(), Some(2), "{text}");
    assert_eq!(t["node_startup_s"].as_float(), Some(2.0), "{text}");
    let latency = t["dispatch_latency_s"].as_float().unwrap();
    assert!(latency > 0.0 && latency < 5.0, "{text}");
    // Its 1,000 empty tasks all ran on the emulated workers.
    assert_eq!(c.status()["succeeded"], 1_000, "{}", c.status());

    let tasks = c.path("tasks.jsonl");
    let lines: String = (0..200)
        .map(|i| {
            format!(
                "{}\n",
                json!({"id": format!("t{i}"), "cmd": ["true"], "compute_s": 1})
            )
        })
        .collect();
    std::fs::write(&tasks, lines).unwrap();
    let sim = common::run_diffuse(
        &[
            "sim",
            "run",
            tasks.to_str().unwrap(),
            "--testbed",
            file.to_str().unwrap(),
            "--provisioning",
            "static",
            "--json",
        ],
        None,
        &[],
        std::time::Duration::from_secs(120),
    );
    assert_eq!(sim.code, Some(0), "{}", sim.stderr);
    let s: Value = serde_json::from_str(&sim.stdout).unwrap();
    assert_eq!(s["nodes"], 50, "{s}");
    assert_eq!(s["tasks"], 200, "{s}");
    // Two waves of 1-s tasks on 100 slots, each task delayed by the calibrated cost.
    let makespan = s["makespan_s"].as_f64().unwrap();
    assert!(
        (makespan - 2.0 * (1.0 + latency)).abs() < 0.05,
        "makespan {makespan} for a cost of {latency}: {s}"
    );
    let summary = stop(emulator);
    assert_eq!(summary["errors"], 0, "{summary}");
}
