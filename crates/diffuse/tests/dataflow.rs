//! Dataflow, live: tasks that read other tasks' `tmp://` outputs, kept on the workers that wrote
//! them and never on storage; failures that travel down the pipeline; a producer run again
//! when the worker holding the only copy of its output is killed. Real processes, real sockets.

mod common;

use common::cluster::*;
use serde_json::{json, Value};
use std::path::Path;

/// Every file under `dir`, relative, sorted.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// Split (one part per line), map (upper-case each part), reduce (join them into a file under
/// `out`): the reduce is listed first, to show a batch runs in dependency order whatever order
/// it is written in.
fn pipeline(input: &str, out: &Path, parts: usize) -> Vec<Value> {
    let mut tasks = Vec::new();
    let ups: Vec<String> = (0..parts).map(|i| format!("tmp://up{i}")).collect();
    let cat: Vec<String> = (0..parts).map(|i| format!("{{inputs[{i}]}}")).collect();
    tasks.push(json!({
        "id": "reduce",
        "cmd": format!("cat {} > {{outputs[0]}}", cat.join(" ")),
        "inputs": ups,
        "outputs": [file_uri(&out.join("result.txt"))],
    }));
    let split: Vec<String> = (0..parts)
        .map(|i| format!("sed -n {}p {{inputs[0]}} > {{outputs[{i}]}}", i + 1))
        .collect();
    tasks.push(json!({
        "id": "split",
        "cmd": split.join(" && "),
        "inputs": [input],
        "outputs": (0..parts).map(|i| format!("tmp://part{i}")).collect::<Vec<_>>(),
    }));
    for i in 0..parts {
        tasks.push(json!({
            "id": format!("map{i}"),
            "cmd": "tr a-z A-Z < {inputs[0]} > {outputs[0]}",
            "inputs": [format!("tmp://part{i}")],
            "outputs": [format!("tmp://up{i}")],
        }));
    }
    tasks
}

#[test]
fn a_three_stage_pipeline_keeps_its_intermediates_off_storage() {
    let mut c = Cluster::start(&[]);
    c.worker("a", 2, "100MB");
    c.worker("b", 2, "100MB");
    c.wait_workers(2);
    let text = "alpha beta\ngamma delta\nepsilon zeta\neta theta\n";
    let input = c.data("words.txt", text.as_bytes());
    let out = c.path("out");
    c.submit(&pipeline(&file_uri(&input), &out, 4));
    let (_, r) = c.wait_succeeded("reduce");
    assert_eq!(
        std::fs::read_to_string(out.join("result.txt")).unwrap(),
        text.to_uppercase()
    );
    // The maps and the reduce read their inputs from workers, never from storage.
    let t = traffic(&r["traffic"]);
    assert_eq!(t[2], 0, "reduce read storage: {r}");
    for i in 0..4 {
        let (_, m) = c.wait_succeeded(&format!("map{i}"));
        let t = traffic(&m["traffic"]);
        assert_eq!((t[0] + t[1], t[2]), (1, 0), "map{i}: {m}");
    }
    // Storage was read once, for the input; nothing but the input and the result is there.
    let status = c.status();
    assert_eq!(
        status["traffic"]["bytes_storage"].as_u64(),
        Some(text.len() as u64),
        "{status}"
    );
    assert_eq!(files_under(&c.path("data")), ["words.txt"]);
    assert_eq!(files_under(&out), ["result.txt"]);
    // Every intermediate object is released once its readers are done.
    for name in ["part0", "part3", "up0", "up3"] {
        poll(&format!("tmp://{name} to be released"), || {
            let v = c.get(&format!("/v1/locate?uri=tmp://{name}"));
            v["nodes"].as_array().unwrap().is_empty().then_some(())
        });
    }
}

#[test]
fn a_failed_producer_fails_its_consumers_with_the_reason() {
    let mut c = Cluster::start(&[]);
    c.worker("a", 2, "100MB");
    c.wait_workers(1);
    c.submit(&[
        json!({"id": "p", "cmd": "exit 3", "outputs": ["tmp://x"]}),
        json!({"id": "q", "cmd": "cat {inputs[0]}", "inputs": ["tmp://x"], "outputs": ["tmp://y"]}),
        json!({"id": "r", "cmd": "true", "after": ["q"]}),
    ]);
    let q = c.wait_done("q");
    assert_eq!(q["state"], "failed");
    assert_eq!(
        q["outcome"]["error"], "input tmp://x: producer 'p' failed",
        "{q}"
    );
    let r = c.wait_done("r");
    assert_eq!(r["outcome"]["error"], "after: task 'q' failed", "{r}");
    // A task submitted later that reads what a failed task was to write fails at once.
    c.submit(&[json!({"id": "late", "cmd": "true", "inputs": ["tmp://y"]})]);
    let late = c.wait_done("late");
    assert_eq!(
        late["outcome"]["error"], "input tmp://y: producer 'q' failed",
        "{late}"
    );
}

#[test]
fn killing_the_worker_with_the_only_copy_makes_its_producer_run_again() {
    let mut c = Cluster::start(&[]);
    c.worker("a", 1, "100MB");
    c.worker("b", 1, "100MB");
    c.wait_workers(2);
    let gate = c.path("gate");
    // 200 KB of known bytes, made by the producer; the consumer waits for the gate too, so the
    // producer's worker can be killed while its output is still needed.
    c.submit(&[
        gated_task("gate", &gate),
        json!({"id": "make", "cmd": "seq 1 40000 > {outputs[0]}", "outputs": ["tmp://numbers"]}),
        json!({"id": "use", "cmd": "sha256sum < {inputs[0]}", "inputs": ["tmp://numbers"], "after": ["gate"]}),
    ]);
    let (made, _) = c.wait_succeeded("make");
    let holder = made["outcome"]["node"].as_str().unwrap().to_string();
    let v = c.get("/v1/locate?uri=tmp://numbers");
    assert_eq!(v["nodes"], json!([holder]), "{v}");
    let i = if holder == "a" { 0 } else { 1 };
    c.kill_worker(i);
    c.worker("c", 1, "100MB");
    // The producer runs again, on the new worker (the other one is held by the gate). Each
    // task is counted once meanwhile: the remake is not queued or running work.
    poll("the producer to run again", || {
        let s = c.status();
        let n = |k: &str| s[k].as_u64().unwrap();
        let counted = [
            "queued",
            "running",
            "ending",
            "held_ready",
            "succeeded",
            "failed",
            "cancelled",
        ]
        .map(n)
        .iter()
        .sum::<u64>();
        assert_eq!(counted, n("submitted"), "{s}");
        let v = c.get("/v1/locate?uri=tmp://numbers");
        (v["nodes"] == json!(["c"])).then_some(())
    });
    std::fs::write(&gate, b"").unwrap();
    let (_, used) = c.wait_succeeded("use");
    let want = std::process::Command::new("sh")
        .args(["-c", "seq 1 40000 | sha256sum"])
        .output()
        .unwrap();
    assert_eq!(stdout_of(&used), String::from_utf8_lossy(&want.stdout));
    // One outcome: the producer's recorded success is its first run's; the remake is an
    // attempt.
    let made = c.task("make");
    assert_eq!(made["state"], "succeeded");
    assert_eq!(made["outcome"]["attempt"], 1, "{made}");
    // The remake may first be held ready behind the gate on the other worker, and given back
    // unstarted when c joins (docs/runtime.md, "Tasks held ready"): such an attempt never ran.
    let ran: Vec<&Value> = made["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .filter(|a| a["report"]["withdrawn"] != true)
        .collect();
    assert_eq!(ran.len(), 2, "{made}");
    assert_eq!(ran[1]["node"], "c", "{made}");
}

#[test]
fn with_two_replicas_killing_the_producers_worker_runs_nothing_again() {
    let mut c = Cluster::start_with(&[], &["--tmp-replicas", "2"], &[]);
    for name in ["a", "b", "c"] {
        c.worker(name, 1, "100MB");
    }
    c.wait_workers(3);
    let gate = c.path("gate");
    c.submit(&[
        gated_task("gate", &gate),
        json!({"id": "make", "cmd": "seq 1 40000 > {outputs[0]}", "outputs": ["tmp://numbers"]}),
        json!({"id": "use", "cmd": "sha256sum < {inputs[0]}", "inputs": ["tmp://numbers"], "after": ["gate"]}),
    ]);
    let (made, _) = c.wait_succeeded("make");
    let holder = made["outcome"]["node"].as_str().unwrap().to_string();
    // A second copy is made ahead of time, on another worker.
    let nodes = poll("a replica", || {
        let v = c.get("/v1/locate?uri=tmp://numbers");
        let nodes: Vec<String> = serde_json::from_value(v["nodes"].clone()).ok()?;
        (nodes.len() == 2).then_some(nodes)
    });
    assert!(nodes.contains(&holder), "{nodes:?}");
    let i = ["a", "b", "c"].iter().position(|n| *n == holder).unwrap();
    c.kill_worker(i);
    std::fs::write(&gate, b"").unwrap();
    let (_, used) = c.wait_succeeded("use");
    let want = std::process::Command::new("sh")
        .args(["-c", "seq 1 40000 | sha256sum"])
        .output()
        .unwrap();
    assert_eq!(stdout_of(&used), String::from_utf8_lossy(&want.stdout));
    let made = c.task("make");
    let attempts = made["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 1, "the producer did not run again: {made}");
}

#[test]
fn bad_dependencies_are_refused_naming_the_task_and_field() {
    let c = Cluster::start(&[]);
    let cases = [
        (
            "{\"id\":\"a\",\"cmd\":\"true\",\"inputs\":[\"tmp://b\"],\"outputs\":[\"tmp://a\"]}\n{\"id\":\"b\",\"cmd\":\"true\",\"inputs\":[\"tmp://a\"],\"outputs\":[\"tmp://b\"]}",
            "its dependencies form a cycle",
        ),
        (
            "{\"id\":\"a\",\"cmd\":\"true\",\"inputs\":[\"tmp://nobody\"]}",
            "task 'a': field 'inputs[0]': no task writes tmp://nobody",
        ),
        (
            "{\"id\":\"a\",\"cmd\":\"true\",\"after\":[\"ghost\"]}",
            "task 'a': field 'after[0]': no task 'ghost'",
        ),
        (
            "{\"id\":\"a\",\"cmd\":\"true\",\"outputs\":[\"tmp://x\"]}\n{\"id\":\"b\",\"cmd\":\"true\",\"outputs\":[\"tmp://x\"]}",
            "task 'b': field 'outputs[0]': tmp://x is already written by task 'a'",
        ),
        (
            "{\"id\":\"a\",\"cmd\":\"true\",\"outputs\":[\"tmp://dir/x\"]}",
            "no path separator",
        ),
    ];
    for (body, want) in cases {
        let (code, v) = c.post_tasks(body, Some(&c.client_token));
        assert_eq!(code, 400, "{body}: {v}");
        let msg = v.to_string();
        assert!(msg.contains(want), "{body}: {msg}");
    }
    assert_eq!(
        c.status()["submitted"],
        0,
        "nothing of a refused batch is taken"
    );
}

#[test]
fn a_task_after_another_reads_the_file_it_wrote() {
    // Inputs are looked up once the tasks named in `after` have succeeded: at submission the
    // file does not exist yet.
    let mut c = Cluster::start(&[]);
    c.worker("a", 2, "100MB");
    c.wait_workers(1);
    let shared = file_uri(&c.path("data").join("stage1.txt"));
    c.submit(&[
        json!({"id": "read", "cmd": "cat {inputs[0]}", "inputs": [shared], "after": ["write"]}),
        json!({"id": "write", "cmd": "sleep 0.5; echo written > {outputs[0]}", "outputs": [shared]}),
    ]);
    let (_, r) = c.wait_succeeded("read");
    assert_eq!(stdout_of(&r), "written\n");
}
