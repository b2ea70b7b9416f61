//! End-to-end tests of the live runtime with real processes: `diffuse dispatcher`,
//! `diffuse worker` and `diffuse run`, spoken to over the dispatcher's HTTP API.
//!
//! Every test works in its own temporary directory, picks free ports, and kills every process it
//! started when it ends, whether it passed or panicked (the [`Proc`] guard). A failing test
//! prints the tail of each process's log. Nothing waits a fixed time: every wait polls with a
//! deadline, and no assertion is about timing.
//!
//! The S3 test needs `moto[server]` (`python3 -m pip install 'moto[server]'`); without it the test
//! fails with that hint rather than skipping.

mod common;

use common::cluster::*;
use common::Output;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

// ----- 1. local hits -----

#[test]
fn second_access_is_a_local_hit() {
    let mut c = Cluster::start(&[]);
    c.worker("A", 1, "100MB");
    c.wait_workers(1);
    let size = 1 << 20;
    let x = c.data("x.bin", &random_bytes(size));
    let uri = file_uri(&x);

    c.submit(&[wc_task("t1", &uri)]);
    let (t1, r1) = c.wait_succeeded("t1");
    assert_eq!(t1["node"], "A");
    let size = size as u64;
    assert_eq!(
        traffic(&r1["traffic"]),
        [0, 0, 1, 0, 0, size],
        "t1 reads X from storage: {r1}"
    );
    assert!(
        stdout_of(&r1).contains(&size.to_string()),
        "wc -c output: {:?}",
        stdout_of(&r1)
    );

    c.submit(&[wc_task("t2", &uri)]);
    let (_, r2) = c.wait_succeeded("t2");
    assert_eq!(
        traffic(&r2["traffic"]),
        [1, 0, 0, size, 0, 0],
        "t2 finds X in the local cache: {r2}"
    );
    assert!(stdout_of(&r2).contains(&size.to_string()));
    assert!(r2["uncached"].as_array().is_some_and(|u| u.is_empty()));

    let s = c.status();
    assert_eq!(s["succeeded"], 2, "{s}");
    assert_eq!(
        traffic(&s["traffic"]),
        [1, 0, 1, size, 0, size],
        "dispatcher totals: {s}"
    );
}

/// A worker killed with SIGKILL leaves no clean-shutdown marker: at restart it verifies every
/// cached object, so a byte flipped in its cache meanwhile is caught, the object dropped, and the
/// next task reads the right bytes from storage.
#[test]
fn after_an_unclean_stop_a_corrupted_cached_object_is_dropped_and_fetched_again() {
    let mut c = Cluster::start(&[]);
    c.worker("A", 1, "100MB");
    c.wait_workers(1);
    let x = c.data("x.bin", &random_bytes(1 << 20));
    let uri = file_uri(&x);
    c.submit(&[wc_task("t1", &uri)]);
    c.wait_succeeded("t1");

    let mut a = c.workers.pop().expect("worker A");
    a.kill_worker_proper();
    a.child.wait().expect("reap worker A's guard");
    c.wait_workers(0);
    let objects = c.path("wA").join("objects");
    let object = std::fs::read_dir(&objects)
        .expect("objects dir")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_none())
        .expect("the cached object");
    let mut perms = std::fs::metadata(&object).expect("meta").permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&object, perms).expect("make writable");
    let mut bytes = std::fs::read(&object).expect("read object");
    bytes[12345] ^= 0xff;
    std::fs::write(&object, &bytes).expect("flip a byte, same size");

    c.worker("A", 1, "100MB");
    c.wait_workers(1);
    let cmp = json!({"id": "t2", "cmd": ["cmp", "{inputs[0]}", x.display().to_string()], "inputs": [uri]});
    c.submit(&[cmp]);
    let (_, r2) = c.wait_succeeded("t2");
    assert_eq!(
        traffic(&r2["traffic"])[2],
        1,
        "t2 read X from storage again: {r2}"
    );
    let log = c.workers.last().expect("worker A again").log_text();
    assert!(log.contains("verifying every cached object"), "{log}");
}

// ----- 2. peer fetch -----

#[test]
fn busy_holder_sends_the_task_to_a_free_node_that_fetches_from_the_peer() {
    let mut c = Cluster::start(&[]);
    c.worker("A", 1, "100MB");
    c.wait_workers(1);
    let size = 1 << 20;
    let x = c.data("x.bin", &random_bytes(size));
    let size = size as u64;
    let uri = file_uri(&x);

    c.submit(&[wc_task("t1", &uri)]);
    let (_, r1) = c.wait_succeeded("t1");
    assert_eq!(traffic(&r1["traffic"]), [0, 0, 1, 0, 0, size], "{r1}");

    // Keep A's only slot busy until the gate opens.
    let gate = c.path("gate");
    c.submit(&[gated_task("t2", &gate)]);
    let t2 = c.wait_state("t2", "running");
    assert_eq!(t2["node"], "A", "{t2}");

    c.worker("B", 1, "100MB");
    c.wait_workers(2);
    assert_eq!(
        c.task("t2")["state"],
        "running",
        "t2 must still hold A's slot"
    );

    // A holds X but is busy; utilisation 1/2 < 0.9, so GCC runs t3 on B, reading X from A.
    c.submit(&[wc_task("t3", &uri)]);
    let (t3, r3) = c.wait_succeeded("t3");
    assert_eq!(t3["node"], "B", "t3 should run on the free worker: {t3}");
    assert_eq!(
        traffic(&r3["traffic"]),
        [0, 1, 0, 0, size, 0],
        "t3 reads X from peer A: {r3}"
    );
    assert!(stdout_of(&r3).contains(&size.to_string()));

    let s = c.status();
    assert_eq!(
        traffic(&s["traffic"]),
        [0, 1, 1, 0, size, size],
        "storage was read once (t1), the peer once (t3): {s}"
    );
    assert_eq!(s["traffic"]["bytes_storage"], size);

    let r = c
        .http
        .get(format!("{}/v1/locate", c.url))
        .query(&[("uri", &uri)])
        .bearer_auth(&c.client_token)
        .send()
        .expect("locate");
    assert!(r.status().is_success(), "{}", r.status());
    let loc: Value = r.json().expect("locate JSON");
    let mut nodes: Vec<&str> = loc["nodes"]
        .as_array()
        .unwrap_or_else(|| panic!("{loc}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    nodes.sort_unstable();
    assert_eq!(nodes, ["A", "B"], "{loc}");

    std::fs::write(&gate, b"").expect("open the gate");
    let (t2, _) = c.wait_succeeded("t2");
    assert_eq!(t2["node"], "A");
}

// ----- 3. changed source -----

#[test]
fn changed_source_is_fetched_again() {
    let mut c = Cluster::start(&[]);
    c.worker("A", 1, "100MB");
    c.wait_workers(1);
    let x = c.data("x.txt", b"aaaa");
    let uri = file_uri(&x);

    c.submit(&[cat_task("t1", &uri)]);
    let (_, r1) = c.wait_succeeded("t1");
    assert_eq!(stdout_of(&r1), "aaaa");
    assert_eq!(traffic(&r1["traffic"]), [0, 0, 1, 0, 0, 4], "{r1}");

    std::fs::write(&x, b"bbbbbbbbbb").expect("rewrite X");
    c.submit(&[cat_task("t2", &uri)]);
    let (_, r2) = c.wait_succeeded("t2");
    assert_eq!(stdout_of(&r2), "bbbbbbbbbb", "t2 must see the new content");
    assert_eq!(
        traffic(&r2["traffic"]),
        [0, 0, 1, 0, 0, 10],
        "the stale copy must not be used: {r2}"
    );

    // The new version is cached now.
    c.submit(&[cat_task("t3", &uri)]);
    let (_, r3) = c.wait_succeeded("t3");
    assert_eq!(stdout_of(&r3), "bbbbbbbbbb");
    assert_eq!(traffic(&r3["traffic"]), [1, 0, 0, 10, 0, 0], "{r3}");
}

// ----- 4. S3 -----

#[test]
fn s3_input_from_a_real_s3_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (moto, port) = moto_server(dir.path());
    let endpoint = format!("http://127.0.0.1:{port}");
    let client = http();
    let r = client
        .put(format!("{endpoint}/bucket1"))
        .send()
        .expect("create bucket");
    assert!(r.status().is_success(), "create bucket: {}", r.status());
    let body = format!("hello from s3 {}\n", random_token());
    let r = client
        .put(format!("{endpoint}/bucket1/data/obj1"))
        .body(body.clone())
        .send()
        .expect("put object");
    assert!(r.status().is_success(), "put object: {}", r.status());

    let mut c = Cluster::start(&[
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL", &endpoint),
        ("AWS_ALLOW_HTTP", "true"),
    ]);
    c.extra.push(moto);
    c.worker("A", 1, "100MB");
    c.wait_workers(1);
    let uri = "s3://bucket1/data/obj1";
    let n = body.len() as u64;

    c.submit(&[cat_task("t1", uri)]);
    let t1 = c.wait_done("t1");
    assert_eq!(t1["state"], "succeeded", "{t1}");
    let r1 = report(&t1);
    assert_eq!(stdout_of(&r1), body);
    assert_eq!(traffic(&r1["traffic"]), [0, 0, 1, 0, 0, n], "{r1}");

    // Its ETag-based version matches on the second read: a local hit.
    c.submit(&[cat_task("t2", uri)]);
    let (_, r2) = c.wait_succeeded("t2");
    assert_eq!(stdout_of(&r2), body);
    assert_eq!(traffic(&r2["traffic"]), [1, 0, 0, n, 0, 0], "{r2}");

    // A missing key fails the task with `not found`.
    c.submit(&[cat_task("t3", "s3://bucket1/data/missing")]);
    let t3 = c.wait_done("t3");
    assert_eq!(t3["state"], "failed", "{t3}");
    let err = t3["outcome"]["error"].as_str().unwrap_or_default();
    assert!(
        err.contains("not found: s3://bucket1/data/missing"),
        "error: {t3}"
    );
}

// ----- 5. many tasks, each accounted once -----

#[test]
fn ten_thousand_tasks_are_each_accounted_exactly_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 10_000;
    let file = dir.path().join("tasks.jsonl");
    let text: String = (0..n)
        .map(|i| format!("{}\n", json!({"id": format!("t{i}"), "cmd": ["true"]})))
        .collect();
    std::fs::write(&file, text).expect("write task file");
    let run_dir = dir.path().join("run");
    let out = diffuse(
        &[
            "run",
            file.to_str().expect("utf-8 path"),
            "--workers",
            "2",
            "--slots-per-worker",
            "4",
            "--run-dir",
            run_dir.to_str().expect("utf-8 path"),
            "--json",
        ],
        Duration::from_secs(300),
    );
    assert_eq!(out.code, Some(0), "stderr: {}", tail(&out.stderr, 4000));
    let summary: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("summary JSON: {e}: {}", out.stdout));
    assert_eq!(summary["tasks_ok"], n, "{summary}");
    assert_eq!(summary["tasks_failed"], 0, "{summary}");

    let res = results(&run_dir);
    assert_eq!(res.len(), n, "results.jsonl lines");
    let ids: std::collections::HashSet<&str> =
        res.iter().filter_map(|r| r["id"].as_str()).collect();
    assert_eq!(ids.len(), n, "distinct ids");
    for i in 0..n {
        assert!(ids.contains(format!("t{i}").as_str()), "t{i} missing");
    }
    for r in &res {
        assert_eq!(r["state"], "succeeded", "{r}");
        assert_eq!(r["exit_code"], 0, "{r}");
    }
    // Both workers ran tasks.
    let nodes: std::collections::HashSet<&str> =
        res.iter().filter_map(|r| r["node"].as_str()).collect();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
}

// ----- 6. bad input -----

const MALFORMED: &str = concat!(
    "{\"id\":\"a\",\"cmd\":\"true\"}\n",
    "{\"id\":\"b\",\"cmd\":[\"true\"]}\n",
    "{\"id\":\"c\",\"cmd\":\"true\",\"inputs\":[5]}\n",
);

#[test]
fn malformed_line_is_refused_by_run_and_by_the_api() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.jsonl");
    std::fs::write(&file, MALFORMED).expect("write");
    let run_dir = dir.path().join("run");
    let out = diffuse(
        &[
            "run",
            file.to_str().expect("utf-8"),
            "--run-dir",
            run_dir.to_str().expect("utf-8"),
        ],
        DEADLINE,
    );
    assert_eq!(out.code, Some(2), "stderr: {}", out.stderr);
    assert!(out.stderr.contains("line 3"), "{}", out.stderr);
    assert!(out.stderr.contains("inputs[0]"), "{}", out.stderr);
    assert!(
        !run_dir.join("journal.sqlite").exists(),
        "nothing may be started for a malformed file"
    );

    let c = Cluster::start(&[]);
    let (code, v) = c.post_tasks(MALFORMED, Some(&c.client_token));
    assert_eq!(code, 400, "{v}");
    let err = v["error"].as_str().unwrap_or_default();
    assert!(err.contains("line 3"), "{v}");
    assert!(err.contains("inputs[0]"), "{v}");
    let s = c.status();
    assert_eq!(s["submitted"], 0, "{s}");
    assert_eq!(s["queued"], 0, "{s}");
    // None of the batch's ids exists.
    for id in ["a", "b", "c"] {
        let r = c
            .http
            .get(format!("{}/v1/tasks/{id}", c.url))
            .bearer_auth(&c.client_token)
            .send()
            .expect("GET task");
        assert_eq!(r.status().as_u16(), 404, "task {id}");
    }
}

/// `diffuse run` over `tasks` in a fresh directory with extra flags; returns the output and
/// the run directory's results.
fn run_tasks(tasks: &[Value], flags: &[&str]) -> (Output, Vec<Value>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("tasks.jsonl");
    let text: String = tasks.iter().map(|t| format!("{t}\n")).collect();
    std::fs::write(&file, text).expect("write task file");
    let run_dir = dir.path().join("run");
    let mut args = vec![
        "run",
        file.to_str().expect("utf-8"),
        "--run-dir",
        run_dir.to_str().expect("utf-8"),
        "--json",
    ];
    args.extend_from_slice(flags);
    let out = diffuse(&args, DEADLINE);
    let res = if run_dir.join("results.jsonl").exists() {
        results(&run_dir)
    } else {
        Vec::new()
    };
    (out, res, dir)
}

#[test]
fn missing_input_fails_only_its_task() {
    let data = tempfile::tempdir().expect("tempdir");
    let present = data.path().join("present.txt");
    std::fs::write(&present, b"here\n").expect("write");
    let missing = file_uri(&data.path().join("no-such-file.txt"));
    let (out, res, _dir) = run_tasks(
        &[
            cat_task("t1", &file_uri(&present)),
            cat_task("t2", &missing),
            json!({"id": "t3", "cmd": ["true"]}),
        ],
        &["--workers", "1"],
    );
    assert_eq!(out.code, Some(1), "a task failed: stderr {}", out.stderr);
    let summary: Value = serde_json::from_str(&out.stdout).expect("summary");
    assert_eq!(summary["tasks_ok"], 2, "{summary}");
    assert_eq!(summary["tasks_failed"], 1, "{summary}");
    assert_eq!(res.len(), 3, "{res:?}");
    assert_eq!(result_of(&res, "t1")["state"], "succeeded");
    assert_eq!(result_of(&res, "t3")["state"], "succeeded");
    let t2 = result_of(&res, "t2");
    assert_eq!(t2["state"], "failed", "{t2}");
    let err = t2["error"].as_str().unwrap_or_default();
    assert!(
        err.contains(&format!("not found: {missing}")),
        "error should name the URI: {t2}"
    );
    assert!(missing.starts_with("file:///"));
}

#[test]
fn unknown_program_fails_with_an_exec_error() {
    let (out, res, _dir) = run_tasks(
        &[
            json!({"id": "ok1", "cmd": ["true"]}),
            json!({"id": "bad", "cmd": ["no-such-program-xyz", "arg"]}),
            json!({"id": "ok2", "cmd": "echo hi"}),
        ],
        &["--workers", "1"],
    );
    assert_eq!(out.code, Some(1), "stderr {}", out.stderr);
    assert_eq!(res.len(), 3, "{res:?}");
    assert_eq!(result_of(&res, "ok1")["state"], "succeeded");
    let ok2 = result_of(&res, "ok2");
    assert_eq!(ok2["state"], "succeeded");
    assert_eq!(
        std::fs::read_to_string(ok2["report"]["stdout"].as_str().expect("stdout path"))
            .expect("read stdout"),
        "hi\n"
    );
    let bad = result_of(&res, "bad");
    assert_eq!(bad["state"], "failed", "{bad}");
    let err = bad["error"].as_str().unwrap_or_default();
    assert!(err.contains("exec"), "{bad}");
    assert!(err.contains("no-such-program-xyz"), "{bad}");
}

#[test]
fn input_larger_than_the_cache_is_read_uncached() {
    let data = tempfile::tempdir().expect("tempdir");
    let big = data.path().join("big.bin");
    let size = 3_000_000;
    std::fs::write(&big, random_bytes(size)).expect("write");
    let uri = file_uri(&big);
    let (out, res, _dir) = run_tasks(
        &[wc_task("big", &uri)],
        &["--workers", "1", "--cache-size", "1MB"],
    );
    assert_eq!(out.code, Some(0), "stderr {}", out.stderr);
    let r = result_of(&res, "big");
    assert_eq!(r["state"], "succeeded", "{r}");
    let rep = &r["report"];
    let uncached: Vec<&str> = rep["uncached"]
        .as_array()
        .unwrap_or_else(|| panic!("{rep}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(uncached, [uri.as_str()], "{rep}");
    assert_eq!(
        traffic(&rep["traffic"]),
        [0, 0, 1, 0, 0, size as u64],
        "{rep}"
    );
    assert!(
        stdout_of(rep).contains(&size.to_string()),
        "{}",
        stdout_of(rep)
    );
}

#[test]
fn wrong_or_missing_tokens_are_refused() {
    let mut c = Cluster::start(&[]);
    let body = "{\"id\":\"t1\",\"cmd\":\"true\"}\n";
    let before = c.status()["submitted"].clone();
    assert_eq!(before, 0);
    for (what, token) in [
        ("no token", None),
        ("the worker token", Some(c.worker_token.clone())),
        ("a wrong token", Some(random_token())),
    ] {
        let (code, v) = c.post_tasks(body, token.as_deref());
        assert_eq!(code, 401, "POST /v1/tasks with {what}: {v}");
    }
    assert_eq!(c.status()["submitted"], before, "nothing was submitted");

    for path in ["/metrics", "/v1/status", "/v1/tasks"] {
        let r = c
            .http
            .get(format!("{}{path}", c.url))
            .send()
            .expect("GET without token");
        assert_eq!(r.status().as_u16(), 401, "GET {path} without token");
    }
    let r = c
        .http
        .get(format!("{}/metrics", c.url))
        .bearer_auth(&c.worker_token)
        .send()
        .expect("GET /metrics");
    assert_eq!(
        r.status().as_u16(),
        401,
        "GET /metrics with the worker token"
    );

    // A worker with a wrong token cannot connect: it exits non-zero.
    let (mut cmd, _) = c.worker_cmd("W", 1, "10MB");
    cmd.env("DIFFUSE_WORKER_TOKEN", random_token());
    let mut w = Proc::spawn("worker W (wrong token)", &mut cmd, c.path("worker-W.log"));
    let st = poll("the worker with a wrong token to exit", || w.exited());
    assert!(!st.success(), "exit status {st}; log:\n{}", w.log_text());
    c.extra.push(w);
    // The client token is no worker token either.
    let (mut cmd, _) = c.worker_cmd("V", 1, "10MB");
    cmd.env("DIFFUSE_WORKER_TOKEN", &c.client_token);
    let mut v = Proc::spawn("worker V (client token)", &mut cmd, c.path("worker-V.log"));
    let st = poll("the worker with the client token to exit", || v.exited());
    assert!(!st.success(), "exit status {st}; log:\n{}", v.log_text());
    c.extra.push(v);
    assert_eq!(c.status()["workers"], 0);

    // A worker's peer data server wants the worker token.
    let peer = c.worker("A", 1, "10MB");
    c.wait_workers(1);
    let key = "0".repeat(64);
    let url = format!("{peer}/v1/cache/{key}");
    let r = c.http.get(&url).send().expect("GET peer without token");
    assert_eq!(r.status().as_u16(), 401, "peer GET without token");
    let r = c
        .http
        .get(&url)
        .bearer_auth(&c.client_token)
        .send()
        .expect("GET peer with the client token");
    assert_eq!(r.status().as_u16(), 401, "peer GET with the client token");
    let r = c
        .http
        .get(&url)
        .bearer_auth(&c.worker_token)
        .send()
        .expect("GET peer with the worker token");
    assert_eq!(
        r.status().as_u16(),
        404,
        "peer GET of an object it does not hold, with the worker token"
    );
    assert_eq!(c.status()["workers"], 1);
}

// ----- 7. metrics -----

#[test]
fn metrics_count_tasks_and_bytes() {
    let mut c = Cluster::start(&[]);
    c.worker("A", 1, "100MB");
    c.wait_workers(1);
    let size = 200_000;
    let x = c.data("x.bin", &random_bytes(size));
    let uri = file_uri(&x);
    c.submit(&[
        wc_task("t1", &uri),
        wc_task("t2", &uri),
        json!({"id": "t3", "cmd": ["false"]}),
        json!({"id": "t4", "cmd": ["true"]}),
    ]);
    for id in ["t1", "t2", "t3", "t4"] {
        c.wait_done(id);
    }
    let r = c
        .http
        .get(format!("{}/metrics", c.url))
        .bearer_auth(&c.client_token)
        .send()
        .expect("GET /metrics");
    assert!(r.status().is_success(), "{}", r.status());
    let ctype = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(ctype.starts_with("text/plain"), "{ctype}");
    let text = r.text().expect("metrics text");
    let sample = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no sample {name} in:\n{text}"))
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    assert!(text.contains("# TYPE diffuse_queue_length gauge"), "{text}");
    assert_eq!(sample("diffuse_queue_length"), 0.0);
    assert_eq!(sample("diffuse_tasks{state=\"succeeded\"}"), 3.0);
    assert_eq!(sample("diffuse_tasks{state=\"failed\"}"), 1.0);
    assert_eq!(sample("diffuse_tasks{state=\"running\"}"), 0.0);
    assert_eq!(sample("diffuse_nodes"), 1.0);
    assert_eq!(sample("diffuse_slots"), 1.0);
    // One slot: t1 reads X from storage, t2 then finds it cached.
    assert_eq!(
        sample("diffuse_bytes_total{source=\"storage\"}"),
        size as f64
    );
    assert_eq!(sample("diffuse_bytes_total{source=\"local\"}"), size as f64);
    assert_eq!(sample("diffuse_bytes_total{source=\"peer\"}"), 0.0);
    assert_eq!(sample("diffuse_accesses_total{source=\"storage\"}"), 1.0);
    assert_eq!(sample("diffuse_accesses_total{source=\"local\"}"), 1.0);
}

// ----- placeholders and outputs -----

#[test]
fn placeholders_follow_the_input_order_and_outputs_are_written() {
    let data = tempfile::tempdir().expect("tempdir");
    let x = data.path().join("x.txt");
    let y = data.path().join("y.txt");
    std::fs::write(&x, b"X").expect("write");
    std::fs::write(&y, b"Y").expect("write");
    let (ux, uy) = (file_uri(&x), file_uri(&y));
    let out = data.path().join("out/result.txt");
    let (o, res, _dir) = run_tasks(
        &[
            json!({"id": "xy", "cmd": ["cat", "{inputs[0]}", "{inputs[1]}"], "inputs": [ux, uy]}),
            json!({"id": "yx", "cmd": ["cat", "{inputs[0]}", "{inputs[1]}"], "inputs": [uy, ux]}),
            json!({"id": "w", "cmd": "cat {inputs[0]} {inputs[1]} > {outputs[0]}",
                   "inputs": [uy, ux], "outputs": [file_uri(&out)]}),
        ],
        &["--workers", "1"],
    );
    assert_eq!(o.code, Some(0), "stderr {}", o.stderr);
    assert_eq!(stdout_of(&result_of(&res, "xy")["report"]), "XY");
    assert_eq!(stdout_of(&result_of(&res, "yx")["report"]), "YX");
    assert_eq!(std::fs::read_to_string(&out).expect("output written"), "YX");
}

#[test]
fn a_repeated_input_expands_in_every_position() {
    let data = tempfile::tempdir().expect("tempdir");
    let x = data.path().join("x.txt");
    let y = data.path().join("y.txt");
    std::fs::write(&x, b"X").expect("write");
    std::fs::write(&y, b"Y").expect("write");
    let (ux, uy) = (file_uri(&x), file_uri(&y));
    let (o, res, _dir) = run_tasks(
        &[
            json!({"id": "xyx", "cmd": ["cat", "{inputs[0]}", "{inputs[1]}", "{inputs[2]}"],
                 "inputs": [ux, uy, ux]}),
        ],
        &["--workers", "1"],
    );
    let r = result_of(&res, "xyx");
    assert_eq!(o.code, Some(0), "{r}");
    assert_eq!(stdout_of(&r["report"]), "XYX", "{r}");
}

// ----- relative directories -----

#[test]
fn run_with_the_default_relative_run_dir() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("x.txt"), b"relative").expect("write");
    let uri = file_uri(&dir.path().join("x.txt"));
    std::fs::write(
        dir.path().join("tasks.jsonl"),
        format!(
            "{}\n{}\n",
            cat_task("c", &uri),
            json!({"id": "o", "cmd": "cat {inputs[0]} > {outputs[0]}", "inputs": [uri],
                   "outputs": [file_uri(&dir.path().join("out.txt"))]})
        ),
    )
    .expect("write tasks");
    let out = diffuse_with(
        &["run", "tasks.jsonl", "--workers", "1", "--json"],
        Some(dir.path()),
        &[],
        DEADLINE,
    );
    let runs: Vec<PathBuf> = std::fs::read_dir(dir.path().join("diffuse-runs"))
        .expect("diffuse-runs/ under the working directory")
        .map(|e| e.expect("dir entry").path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let res = results(&runs[0]);
    assert_eq!(out.code, Some(0), "{res:?}\nstderr {}", out.stderr);
    let c = result_of(&res, "c");
    let stdout = c["report"]["stdout"].as_str().expect("stdout path");
    assert_eq!(
        std::fs::read_to_string(dir.path().join(stdout)).expect("read stdout"),
        "relative"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).expect("output"),
        "relative"
    );
}

// ----- the client commands -----

#[test]
fn submit_status_and_wait_commands() {
    let mut c = Cluster::start(&[]);
    c.worker("A", 2, "10MB");
    c.wait_workers(1);
    let state = c.path("state");
    let env = [
        ("DIFFUSE_DISPATCHER", c.url.as_str()),
        ("DIFFUSE_CLIENT_TOKEN", c.client_token.as_str()),
        ("XDG_STATE_HOME", state.to_str().expect("utf-8")),
    ];
    let dir = c.path("data");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p.to_str().expect("utf-8").to_string()
    };
    let ok = write(
        "ok.jsonl",
        "{\"id\":\"a\",\"cmd\":\"true\"}\n{\"id\":\"b\",\"cmd\":[\"echo\",\"b\"]}\n",
    );
    let out = diffuse_with(&["submit", &ok], None, &env, DEADLINE);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.starts_with("submitted 2 tasks in batch 1"),
        "{}",
        out.stdout
    );
    let out = diffuse_with(&["wait", "--json"], None, &env, DEADLINE);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let s: Value = serde_json::from_str(out.stdout.trim()).expect("wait --json");
    assert_eq!(s["succeeded"], 2, "{s}");
    assert_eq!(
        (s["tasks"].clone(), s["pending"].clone()),
        (json!(2), json!(0))
    );

    // The same ids again: refused as a whole.
    let out = diffuse_with(&["submit", &ok], None, &env, DEADLINE);
    assert_ne!(out.code, Some(0), "duplicate ids accepted: {}", out.stdout);
    assert!(out.stderr.contains("409"), "{}", out.stderr);

    let bad = write("bad.jsonl", MALFORMED);
    let out = diffuse_with(&["submit", &bad], None, &env, DEADLINE);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("line 3"), "{}", out.stderr);
    assert!(out.stderr.contains("inputs[0]"), "{}", out.stderr);

    let wrong = random_token();
    let out = diffuse_with(
        &[
            "submit",
            &write("c.jsonl", "{\"id\":\"c\",\"cmd\":\"true\"}\n"),
        ],
        None,
        &[
            ("DIFFUSE_DISPATCHER", &c.url),
            ("DIFFUSE_CLIENT_TOKEN", &wrong),
        ],
        DEADLINE,
    );
    assert_ne!(out.code, Some(0), "wrong token accepted");
    assert!(out.stderr.contains("401"), "{}", out.stderr);

    let failing = write("f.jsonl", "{\"id\":\"f\",\"cmd\":\"exit 3\"}\n");
    let out = diffuse_with(&["submit", &failing], None, &env, DEADLINE);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = diffuse_with(&["wait"], None, &env, DEADLINE);
    assert_eq!(out.code, Some(1), "a task failed: {}", out.stdout);
    assert!(out.stdout.contains("1 failed"), "{}", out.stdout);
    assert!(out.stdout.contains("failed: f"), "{}", out.stdout);
    let t = c.wait_done("f");
    assert_eq!(t["state"], "failed", "{t}");
    assert_eq!(t["outcome"]["exit_code"], 3, "{t}");

    let out = diffuse_with(&["status", "--json"], None, &env, DEADLINE);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let s: Value = serde_json::from_str(out.stdout.trim()).expect("status --json");
    assert_eq!(s["submitted"], 3, "{s}");
    assert_eq!(s["succeeded"], 2, "{s}");
    assert_eq!(s["failed"], 1, "{s}");
    assert_eq!(s["workers"], 1, "{s}");
    assert_eq!(s["slots"], 2, "{s}");
}

// ----- restart -----

#[test]
fn killed_dispatcher_resumes_from_its_journal_and_workers_keep_their_caches() {
    let mut c = Cluster::start(&[]);
    c.worker("A", 1, "100MB");
    c.wait_workers(1);
    let size = 300_000;
    let x = c.data("x.bin", &random_bytes(size));
    let size = size as u64;
    let uri = file_uri(&x);
    c.submit(&[wc_task("t1", &uri)]);
    let (_, r1) = c.wait_succeeded("t1");
    assert_eq!(traffic(&r1["traffic"]), [0, 0, 1, 0, 0, size], "{r1}");

    let gate = c.path("gate");
    // t2 first and alone: submitted together, t3 and t4 (all data local) would go first.
    c.submit(&[gated_task("t2", &gate)]);
    c.wait_state("t2", "running");
    c.submit(&[wc_task("t3", &uri), wc_task("t4", &uri)]);
    assert_eq!(c.task("t3")["state"], "queued");

    let restarted_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    c.restart_dispatcher();
    std::fs::write(&gate, b"").expect("open the gate");
    let s = c.status();
    assert_eq!(s["submitted"], 4, "{s}");
    assert_eq!(s["succeeded"], 1, "{s}");
    assert_eq!(s["queued"], 3, "t2 runs again, t3 and t4 still wait: {s}");
    assert_eq!(s["workers"], 0, "{s}");
    let t1 = c.task("t1");
    assert_eq!(t1["state"], "succeeded", "{t1}");
    assert_eq!(report(&t1)["task"], "t1");

    // The same worker (same cache directory) comes back and says what it holds.
    c.worker("A", 1, "100MB");
    c.wait_workers(1);
    let (t2, r2) = c.wait_succeeded("t2");
    assert_eq!(t2["node"], "A", "{t2}");
    assert!(
        r2["started_at"].as_f64() >= Some(restarted_at),
        "t2 ran again after the restart: {t2}"
    );
    for id in ["t3", "t4"] {
        let (_, r) = c.wait_succeeded(id);
        assert_eq!(
            traffic(&r["traffic"]),
            [1, 0, 0, size, 0, 0],
            "{id} finds X in the cache kept across the restart: {r}"
        );
    }
    let (code, v) = c.post_tasks(&format!("{}\n", wc_task("t1", &uri)), Some(&c.client_token));
    assert_eq!(
        code, 409,
        "an id from before the restart is still taken: {v}"
    );
    assert_eq!(c.status()["submitted"], 4);
}

// ----- consistency of task views -----

#[test]
fn a_finished_task_always_shows_its_outcome() {
    let mut c = Cluster::start(&[]);
    c.worker("A", 4, "10MB");
    c.wait_workers(1);
    let n = 600;
    let tasks: Vec<Value> = (0..n)
        .map(|i| json!({"id": format!("t{i}"), "cmd": ["true"]}))
        .collect();
    c.submit(&tasks);
    // Several clients look at the tasks while they finish; each remembers the bad views it saw.
    let (checked, bad) = std::thread::scope(|scope| {
        let lookers: Vec<_> = (0..3)
            .map(|_| {
                scope.spawn(|| {
                    let (mut checked, mut bad) = (0u64, Vec::new());
                    poll("every task to end", || {
                        let views = c.get("/v1/tasks?limit=10000");
                        let mut done = 0;
                        for v in views["tasks"].as_array().expect("a list of tasks") {
                            let s = v["state"].as_str().unwrap_or_default();
                            if ["succeeded", "failed", "cancelled"].contains(&s) {
                                done += 1;
                                checked += 1;
                                if v["outcome"].is_null()
                                    || v["node"].is_null()
                                    || v["attempt"] == 0
                                {
                                    bad.push(v.clone());
                                }
                            }
                        }
                        (done == n).then_some(())
                    });
                    (checked, bad)
                })
            })
            .collect();
        lookers.into_iter().map(|h| h.join().expect("looker")).fold(
            (0, Vec::new()),
            |(c, mut b), (c2, b2)| {
                b.extend(b2);
                (c + c2, b)
            },
        )
    });
    assert!(
        bad.is_empty(),
        "{} of {checked} views of ended tasks lack their outcome, e.g. {}",
        bad.len(),
        bad[0]
    );
    let s = c.status();
    assert_eq!(s["succeeded"], n, "{s}");
}
