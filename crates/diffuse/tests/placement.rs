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

/// `diffuse ARGS --dispatcher URL` with the client token; (exit code, stdout, stderr).
fn cli(c: &Cluster, args: &[&str]) -> (Option<i32>, String, String) {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--dispatcher", &c.url]);
    let out = common::run_diffuse(
        &all,
        None,
        &[("DIFFUSE_CLIENT_TOKEN", &c.client_token)],
        Duration::from_secs(30),
    );
    (out.code, out.stdout, out.stderr)
}

#[test]
fn place_then_locate_an_intermediate_object() {
    let c = two_workers();
    let out = c.path("out.txt");
    c.submit(&[
        sleeper("gate", 1.5, json!({"node": "a", "strict": true})),
        json!({"id": "make", "cmd": "echo hello > {outputs[0]}", "outputs": ["tmp://x"], "after": ["gate"]}),
        json!({"id": "read", "cmd": "cat {inputs[0]} > {outputs[0]}", "inputs": ["tmp://x"],
               "outputs": [file_uri(&out)]}),
        sleeper("hold", 4.0, json!({"node": "a", "strict": true})),
        json!({"id": "late", "cmd": "cat {inputs[0]}", "inputs": ["tmp://x"], "after": ["hold"]}),
    ]);
    // Before its producer runs: place it on b.
    let (code, stdout, stderr) = cli(&c, &["place", "tmp://x", "b"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("its producer 'make' will run on 'b'"),
        "{stdout}"
    );
    let (code, stdout, _) = cli(&c, &["locate", "tmp://x"]);
    assert_eq!(code, Some(0));
    assert!(
        stdout.contains("tmp://x: pending")
            && stdout.contains("written by task 'make', placed on 'b'"),
        "{stdout}"
    );
    let (t, _) = c.wait_succeeded("make");
    assert_eq!(
        t["outcome"]["node"], "b",
        "the producer ran where its object was placed: {t}"
    );
    c.wait_succeeded("read");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "hello\n");
    // `late` still needs it: written, on b, 6 bytes.
    let v = c.object("tmp://x");
    assert_eq!(v["state"], "written", "{v}");
    assert_eq!(v["nodes"], json!(["b"]), "{v}");
    assert_eq!(v["size"], 6, "{v}");
    // Placed again once written: copied to a, and then on both.
    let (code, stdout, _) = cli(&c, &["place", "tmp://x", "a"]);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("being copied to 'a'"), "{stdout}");
    poll("the copy on a", || {
        let v = c.object("tmp://x");
        (v["nodes"].as_array()?.len() == 2).then_some(())
    });
    let (code, stdout, _) = cli(&c, &["locate", "tmp://x"]);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("written on "), "{stdout}");
    c.wait_succeeded("late");
    poll("released once nothing needs it", || {
        (c.object("tmp://x")["state"] == "released").then_some(())
    });

    // Refusals: exit 1 with the reason.
    for (args, want) in [
        (
            vec!["place", "tmp://nobody", "a"],
            "no task reads or writes tmp://nobody",
        ),
        (
            vec!["place", "tmp://x", "zz"],
            "no worker named 'zz' is connected",
        ),
        (
            vec!["place", "tmp://x", "a"],
            "tmp://x is released: there is nothing to place",
        ),
        (
            vec!["locate", "tmp://nobody"],
            "no task reads or writes tmp://nobody",
        ),
    ] {
        let (code, _, stderr) = cli(&c, &args);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
    let file = file_uri(&out);
    c.submit(&[json!({"id": "f", "cmd": "cat {inputs[0]}", "inputs": [file]})]);
    c.wait_succeeded("f");
    let (code, _, stderr) = cli(&c, &["place", &file, "a"]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("only tmp:// objects are placed"),
        "{stderr}"
    );
    let (_, stdout, _) = cli(&c, &["locate", &file]);
    assert!(stdout.contains(": cached on "), "{stdout}");
}
