//! Jobs, live: a job's counters (`diffuse status --job`), cancelling a whole job (its running
//! processes stopped, other jobs untouched), and an unread intermediate object released when
//! its own job ends. Real worker processes, real sockets.

mod common;

use common::cluster::*;
use serde_json::json;
use std::time::Duration;

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

/// Processes whose command line starts with `prefix` (the tasks' `sleep`, not their shells).
fn running(prefix: &str) -> usize {
    common::host::processes_starting(prefix).len()
}

#[test]
fn a_job_is_counted_and_cancelled_whole_and_other_jobs_go_on() {
    let mut c = Cluster::start(&[]);
    c.worker("a", 1, "10MB");
    c.worker("b", 1, "10MB");
    c.wait_workers(2);
    let marker = c.path("marker");
    // Job "long": two running tasks, a queued one, one waiting for it; each would leave a
    // marker if it were not stopped. Job "short": quick tasks queued behind them.
    let slow = |id: &str| {
        json!({"id": id, "job": "long",
               "cmd": format!("sleep 37.25; touch {}", marker.display())})
    };
    c.submit(&[
        slow("l0"),
        slow("l1"),
        slow("l2"),
        json!({"id": "l3", "job": "long", "cmd": "true", "after": ["l2"]}),
    ]);
    poll("two of job long running", || {
        (running("sleep 37.25") == 2).then_some(())
    });
    c.submit(&[
        json!({"id": "s0", "job": "short", "cmd": "true"}),
        json!({"id": "s1", "job": "short", "cmd": "true"}),
    ]);
    let (code, stdout, stderr) = cli(&c, &["status", "--job", "long"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout
            .contains("job long: 4 tasks; queued 2, running 2, succeeded 0, failed 0, cancelled 0"),
        "{stdout}"
    );

    let (code, stdout, stderr) = cli(&c, &["cancel", "--job", "long"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("job long: 2 cancelled, 2 running being stopped, 0 had already ended"),
        "{stdout}"
    );
    for id in ["l0", "l1", "l2", "l3"] {
        let t = c.wait_done(id);
        assert_eq!(t["state"], "cancelled", "{t}");
    }
    poll("the running tasks' processes stopped", || {
        (running("sleep 37.25") == 0).then_some(())
    });
    assert!(!marker.exists(), "a cancelled task went on to its end");
    c.wait_succeeded("s0");
    c.wait_succeeded("s1");
    let (_, stdout, _) = cli(&c, &["status", "--job", "long", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["cancelled"], 4, "{v}");
    let (_, stdout, _) = cli(&c, &["status", "--job", "short"]);
    assert!(
        stdout.contains("job short: 2 tasks; queued 0, running 0, succeeded 2"),
        "{stdout}"
    );

    for args in [["status", "--job", "nope"], ["cancel", "--job", "nope"]] {
        let (code, _, stderr) = cli(&c, &args);
        assert_eq!(code, Some(1), "{args:?}");
        assert!(stderr.contains("no task is in job 'nope'"), "{stderr}");
    }
}

#[test]
fn an_unread_intermediate_is_released_when_its_own_job_ends() {
    let mut c = Cluster::start(&[]);
    c.worker("a", 2, "10MB");
    c.wait_workers(1);
    let gate = c.path("gate");
    c.submit(&[
        json!({"id": "w", "job": "one", "cmd": "echo x > {outputs[0]}", "outputs": ["tmp://unread"]}),
        json!({"id": "other", "job": "two", "cmd": gated_task("g", &gate)["cmd"]}),
    ]);
    c.wait_succeeded("w");
    // Job one has ended; job two still runs: the object nobody read is gone.
    poll("tmp://unread released", || {
        let v = c.get("/v1/objects/tmp%3A%2F%2Funread");
        (v["state"] == "released").then_some(())
    });
    assert_eq!(c.task("other")["state"], "running");
    std::fs::write(&gate, b"").unwrap();
    c.wait_succeeded("other");
}

#[test]
fn a_jobs_eviction_priority_keeps_its_inputs_through_another_jobs_scan() {
    let mut c = Cluster::start(&[]);
    c.worker("a", 1, "4MB");
    c.wait_workers(1);
    let files: Vec<String> = (0..8)
        .map(|i| file_uri(&c.data(&format!("f{i}"), &random_bytes(1 << 20))))
        .collect();
    let read = |id: &str, job: &str, uri: &str, prio: i64| {
        json!({"id": id, "job": job, "cmd": "wc -c {inputs[0]}", "inputs": [uri],
               "eviction_priority": prio})
    };
    // Job "keep" (priority 10) reads two files; job "scan" (0) then reads six, one at a time,
    // through a cache that holds three.
    c.submit(&[
        read("k0", "keep", &files[0], 10),
        read("k1", "keep", &files[1], 10),
    ]);
    c.wait_succeeded("k0");
    c.wait_succeeded("k1");
    for (i, f) in files[2..].iter().enumerate() {
        c.submit(&[read(&format!("s{i}"), "scan", f, 0)]);
        c.wait_succeeded(&format!("s{i}"));
    }
    let holds = |uri: &str| c.get(&format!("/v1/locate?uri={uri}"))["nodes"] == json!(["a"]);
    assert!(
        holds(&files[0]) && holds(&files[1]),
        "job keep's inputs stayed"
    );
    assert!(
        !holds(&files[2]),
        "the scan evicted its own files, oldest first"
    );
    // Read again: local hits, nothing from storage.
    let before = c.status()["traffic"]["bytes_storage"].as_u64().unwrap();
    c.submit(&[
        read("again0", "keep", &files[0], 10),
        read("again1", "keep", &files[1], 10),
    ]);
    c.wait_succeeded("again0");
    c.wait_succeeded("again1");
    assert_eq!(
        c.status()["traffic"]["bytes_storage"].as_u64().unwrap(),
        before
    );
}

#[test]
fn a_job_chooses_its_dispatch_policy_and_bad_choices_are_refused() {
    let mut c = Cluster::start(&[]);
    c.worker("a", 1, "10MB");
    c.wait_workers(1);
    let f = file_uri(&c.data("f", &random_bytes(1 << 16)));
    let read = |id: &str, job: &str| json!({"id": id, "job": job, "cmd": "wc -c {inputs[0]}", "inputs": [&f]});
    c.submit(&[read("warm", "default")]);
    c.wait_succeeded("warm");
    // Job "direct" runs FA: it reads from storage though the file is cached on its worker;
    // the dispatcher's GCC job reads the cached copy.
    let mut direct = read("d0", "direct");
    direct["job_policy"] = json!("fa");
    c.submit(&[direct, read("d1", "direct")]);
    for id in ["d0", "d1"] {
        let (_, r) = c.wait_succeeded(id);
        assert_eq!(r["traffic"]["storage"], 1, "{id} read storage: {r}");
        assert_eq!(r["traffic"]["local"], 0, "{r}");
    }
    c.submit(&[read("g", "default")]);
    let (_, r) = c.wait_succeeded("g");
    assert_eq!(r["traffic"]["local"], 1, "{r}");

    let cases = [
        (
            vec![json!({"id": "x", "cmd": "true", "job": "default", "job_policy": "mch"})],
            "task 'x': field 'job_policy': job 'default' already has tasks, dispatched by the dispatcher's policy",
        ),
        (
            vec![json!({"id": "x", "cmd": "true", "job": "direct", "job_policy": "gcc"})],
            "job 'direct' already has tasks, dispatched by policy fa",
        ),
        (
            vec![
                json!({"id": "x", "cmd": "true", "job": "new", "job_policy": "fa"}),
                json!({"id": "y", "cmd": "true", "job": "new", "job_policy": "mcu"}),
            ],
            "task 'y': field 'job_policy': task 'x' of job 'new' says fa, this one mcu",
        ),
        (
            vec![json!({"id": "x", "cmd": "true", "job_policy": "lru"})],
            "unknown policy 'lru' (expected fa, mcu, mch, gcc, dad or mixapart)",
        ),
    ];
    for (tasks, want) in cases {
        let body: String = tasks.iter().map(|t| format!("{t}\n")).collect();
        let (code, v) = c.post_tasks(&body, Some(&c.client_token));
        assert_eq!(code, 400, "{body}: {v}");
        assert!(v.to_string().contains(want), "{body}: {v}");
    }
    // The journal keeps a job's policy: after a restart, job "direct" still runs FA.
    c.restart_dispatcher();
    c.worker("b", 1, "10MB");
    c.wait_workers(1);
    c.submit(&[read("g2", "default")]);
    c.wait_succeeded("g2");
    c.submit(&[read("d2", "direct")]);
    let (_, r) = c.wait_succeeded("d2");
    assert_eq!(r["traffic"]["storage"], 1, "{r}");
}

#[test]
fn dad_sends_a_multi_input_task_to_the_worker_holding_most_of_its_bytes() {
    let mut c = Cluster::start_with(&[], &["--policy", "dad"], &[]);
    c.worker("a", 1, "10MB");
    c.worker("b", 1, "10MB");
    c.wait_workers(2);
    let big = file_uri(&c.data("big", &random_bytes(3 << 20)));
    let small = file_uri(&c.data("small", &random_bytes(1 << 20)));
    let warm = |id: &str, uri: &str, node: &str| {
        json!({"id": id, "cmd": "wc -c {inputs[0]}", "inputs": [uri],
               "hint": {"node": node, "strict": true}})
    };
    c.submit(&[warm("wa", &small, "a"), warm("wb", &big, "b")]);
    c.wait_succeeded("wa");
    c.wait_succeeded("wb");
    // Both workers are free; b holds 3 MB of the task's 4 MB, a 1 MB. (MCU would let a, the
    // first free worker it asks, take it for its 1 MB.)
    c.submit(&[
        json!({"id": "both", "cmd": "cat {inputs[0]} {inputs[1]} | wc -c",
                      "inputs": [&small, &big]}),
    ]);
    let (t, r) = c.wait_succeeded("both");
    assert_eq!(t["outcome"]["node"], "b", "{t}");
    assert_eq!(r["traffic"]["local"], 1, "{r}");
    assert_eq!(r["traffic"]["peer"], 1, "the small file from a: {r}");
}

/// One two-slot worker; job "a" queues six tasks, then job "b" six. The jobs of the first six
/// tasks to start.
fn first_six(order: &str) -> Vec<String> {
    // No task held ready: a ready slot is filled in the job order when the task is sent, one
    // task's run time before it starts, which shifts the order of starts by one task per
    // worker (docs/runtime.md, "Tasks held ready").
    let mut c = Cluster::start_with(&[], &["--job-order", order, "--ready-tasks", "0"], &[]);
    c.worker("w", 2, "10MB");
    c.wait_workers(1);
    let batch = |job: &str| -> Vec<serde_json::Value> {
        (0..6)
            .map(|i| json!({"id": format!("{job}{i}"), "job": job, "cmd": "sleep 0.3"}))
            .collect()
    };
    c.submit(&batch("a"));
    c.submit(&batch("b"));
    let mut started: Vec<(f64, String)> = Vec::new();
    for job in ["a", "b"] {
        for i in 0..6 {
            let (_, r) = c.wait_succeeded(&format!("{job}{i}"));
            started.push((r["started_at"].as_f64().unwrap(), job.to_string()));
        }
    }
    started.sort_by(|x, y| x.0.partial_cmp(&y.0).unwrap());
    started.into_iter().take(6).map(|(_, j)| j).collect()
}

#[test]
fn two_jobs_under_fair_share_the_slots_and_under_fifo_the_first_goes_first() {
    let fifo = first_six("fifo");
    assert!(
        fifo.iter().all(|j| j == "a"),
        "FIFO: job a's six first: {fifo:?}"
    );
    let fair = first_six("fair");
    let b = fair.iter().filter(|j| *j == "b").count();
    assert!(
        b >= 2,
        "Fair: job b starts while job a still has tasks: {fair:?}"
    );
}
