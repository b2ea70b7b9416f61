//! Placement hints, live: a strict hint runs only on the worker it names and fails clearly when
//! that worker leaves; a soft hint waits its stated bound for its worker and then runs
//! anywhere, and its result says whether it held; bad hints are refused at submission. Real
//! worker processes, real sockets.

mod common;

use common::cluster::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn sleeper(id: &str, secs: f64, hint: Value) -> Value {
    json!({"id": id, "cmd": format!("sleep {secs}"), "hint": hint})
}

/// Two one-slot workers, `a` and `b`.
fn two_workers() -> Cluster {
    let mut c = Cluster::start(&[]);
    c.worker("a", 1, "10MB");
    c.worker("b", 1, "10MB");
    c.wait_workers(2);
    c
}

#[test]
fn a_strict_hint_runs_only_on_its_worker() {
    let c = two_workers();
    let tasks: Vec<Value> = (0..4)
        .map(|i| sleeper(&format!("h{i}"), 0.2, json!({"node": "b", "strict": true})))
        .collect();
    c.submit(&tasks);
    for i in 0..4 {
        let (t, r) = c.wait_succeeded(&format!("h{i}"));
        assert_eq!(t["outcome"]["node"], "b", "{t}");
        assert_eq!(r["hint_held"], true, "{r}");
    }
    // A slot hint names the worker too.
    c.submit(&[sleeper("s", 0.1, json!({"slot": "a/0", "strict": true}))]);
    let (t, _) = c.wait_succeeded("s");
    assert_eq!(t["outcome"]["node"], "a", "{t}");
}

#[test]
fn a_soft_hint_waits_its_bound_for_its_worker_then_runs_anywhere() {
    let c = two_workers();
    c.submit(&[sleeper(
        "blocker",
        3.0,
        json!({"node": "a", "strict": true}),
    )]);
    c.wait_state("blocker", "running");
    let t0 = Instant::now();
    c.submit(&[
        sleeper("short", 0.1, json!({"node": "a", "wait_s": 0.3})),
        sleeper("long", 0.1, json!({"node": "a", "wait_s": 60})),
    ]);
    let (t, r) = c.wait_succeeded("short");
    assert_eq!(t["outcome"]["node"], "b", "a was busy past 0.3 s: {t}");
    assert_eq!(r["hint_held"], false, "{r}");
    assert!(
        t0.elapsed() < Duration::from_millis(2500),
        "it did not wait for the blocker: {:?}",
        t0.elapsed()
    );
    let (blocker, _) = c.wait_succeeded("blocker");
    let (t, r) = c.wait_succeeded("long");
    assert_eq!(t["outcome"]["node"], "a", "within 60 s, a freed: {t}");
    assert_eq!(r["hint_held"], true, "{r}");
    let started = r["started_at"].as_f64().unwrap();
    let blocker_ended = blocker["outcome"]["finished_at"].as_f64().unwrap();
    assert!(
        started >= blocker_ended,
        "long waited for a although b was free ({started} < {blocker_ended})"
    );
}

#[test]
fn a_strict_hint_fails_clearly_when_its_worker_leaves() {
    let mut c = two_workers();
    c.submit(&[
        sleeper("running", 60.0, json!({"node": "b", "strict": true})),
        sleeper("queued", 0.1, json!({"node": "b", "strict": true})),
        sleeper("free", 0.1, json!({"node": "b"})),
    ]);
    c.wait_state("running", "running");
    c.kill_worker(1);
    for id in ["running", "queued"] {
        let t = c.wait_done(id);
        assert_eq!(t["state"], "failed", "{t}");
        let err = t["outcome"]["error"].as_str().unwrap_or_default();
        assert!(
            err.contains("worker 'b' left the pool") && err.contains("strict"),
            "{id}: {err}"
        );
    }
    let (t, _) = c.wait_succeeded("free");
    assert_eq!(t["outcome"]["node"], "a", "a soft hint runs elsewhere: {t}");
    // Its name gone, a new strict hint at it is refused at submission.
    let (code, v) = c.post_tasks(
        &sleeper("late", 0.1, json!({"node": "b", "strict": true})).to_string(),
        Some(&c.client_token),
    );
    assert_eq!(code, 400, "{v}");
}

#[test]
fn bad_hints_are_refused_naming_the_task_and_field() {
    let c = two_workers();
    let cases = [
        (
            json!({"node": "w9", "strict": true}),
            "task 'x': field 'hint': no worker named 'w9' is connected, and a strict hint runs only there (connected: a, b)",
        ),
        (
            json!({"slot": "a/3", "strict": true}),
            "task 'x': field 'hint': worker 'a' has 1 slots (0 to 0), not slot 3",
        ),
        (
            json!({"node": "a", "slot": "a/0"}),
            "name either a node or a slot",
        ),
        (json!({"slot": "a"}), "must be NAME/INDEX"),
        (
            json!({"node": "a", "strict": true, "wait_s": 2}),
            "wait_s applies to a soft hint only",
        ),
        (json!({"node": "a", "wait_s": -1}), "wait_s must be 0 to 86400"),
        (json!({"host": "a"}), "unknown field"),
    ];
    for (hint, want) in cases {
        let body = format!("{}\n", json!({"id": "ok", "cmd": "true"}))
            + &sleeper("x", 0.1, hint.clone()).to_string();
        let (code, v) = c.post_tasks(&body, Some(&c.client_token));
        assert_eq!(code, 400, "{hint}: {v}");
        let msg = v.to_string();
        assert!(msg.contains(want), "{hint}: {msg}");
    }
    assert_eq!(
        c.status()["submitted"],
        0,
        "nothing of a refused batch is taken"
    );
    // A soft hint at a worker nobody has heard of is accepted: it runs elsewhere after its wait.
    c.submit(&[sleeper("soft", 0.1, json!({"node": "w9", "wait_s": 0.2}))]);
    let (_, r) = c.wait_succeeded("soft");
    assert_eq!(r["hint_held"], false, "{r}");
}
