//! The task a user writes: its output kept, its failures explained, the cores, memory and GPUs
//! it holds, its time limit, its retries, its environment and its priority. Real processes.

mod common;

use common::cluster::*;
use common::host::{is_root, processes_with, skip};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// `diffuse run` of `tasks` in a fresh directory with `flags`: its output, results and directory.
fn run(tasks: &[Value], flags: &[&str]) -> (common::Output, Vec<Value>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let (out, results) = run_in(dir.path(), tasks, flags);
    (out, results, dir)
}

// ----- 1. output kept -----

#[test]
fn every_stdout_path_in_the_results_exists_and_holds_its_tasks_answer() {
    let dir = tempfile::tempdir().unwrap();
    let tasks: Vec<Value> = (0..40)
        .map(|i| {
            let f = dir.path().join(format!("f{i}"));
            std::fs::write(&f, vec![b'x'; i * 10]).unwrap();
            json!({"id": format!("t{i}"), "cmd": ["wc", "-c", "{inputs[0]}"], "inputs": [file_uri(&f)]})
        })
        .collect();
    let (out, results, _d) = run(&tasks, &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(results.len(), 40);
    for r in &results {
        let i: usize = r["id"].as_str().unwrap()[1..].parse().unwrap();
        let path = r["stdout"]
            .as_str()
            .unwrap_or_else(|| panic!("no stdout path: {r}"));
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(
            text.starts_with(&format!("{} ", i * 10)),
            "{}: {text}",
            r["id"]
        );
        assert!(r["stderr"].is_null(), "nothing on stderr: {r}");
    }
}

/// A task's `cwd`: a program named by a relative path is found there (issue 38, item 4), its
/// staged inputs are still absolute paths in its scratch directory (`DIFFUSE_TASK_DIR`), and a
/// missing directory fails the attempt naming it.
#[test]
fn a_task_runs_in_the_cwd_it_gives_and_a_missing_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let workflow = dir.path().join("workflow");
    std::fs::create_dir_all(workflow.join("bin")).unwrap();
    let tool = workflow.join("bin/tool");
    std::fs::write(&tool, "#!/bin/sh\necho \"$(pwd) $1\"; cat \"$1\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = dir.path().join("data.txt");
    std::fs::write(&data, "the data\n").unwrap();
    let wf = workflow.display().to_string();
    let tasks = [
        json!({"id": "rel", "cmd": ["bin/tool", "{inputs[0]}"], "inputs": [file_uri(&data)], "cwd": wf}),
        json!({"id": "shell", "cmd": "bin/tool {inputs[0]} && test -d \"$DIFFUSE_TASK_DIR/inputs\"", "inputs": [file_uri(&data)], "cwd": wf}),
        json!({"id": "scratch", "cmd": ["bin/tool", "x"]}),
        json!({"id": "gone", "cmd": ["true"], "cwd": "/no/such/dir"}),
    ];
    let (out, results, _d) = run(&tasks, &[]);
    assert_eq!(out.code, Some(1), "two tasks fail: {}", out.stderr);
    for id in ["rel", "shell"] {
        let r = result_of(&results, id);
        assert_eq!(r["state"], "succeeded", "{r}");
        let text = std::fs::read_to_string(r["stdout"].as_str().unwrap()).unwrap();
        assert!(
            text.starts_with(&format!("{wf} /")) && text.contains("/inputs/0/data.txt\nthe data\n"),
            "{id}: {text}"
        );
    }
    let r = result_of(&results, "scratch");
    assert_eq!(r["state"], "failed", "{r}");
    let r = result_of(&results, "gone");
    assert!(
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("working directory (cwd) /no/such/dir")),
        "{r}"
    );
    let (out, _, _d) = run(
        &[json!({"id": "rel", "cmd": ["true"], "cwd": "relative/dir"})],
        &[],
    );
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("cwd"), "{}", out.stderr);
}

#[test]
fn output_over_the_cap_is_cut_and_marked_and_copied_to_its_uris() {
    let mut c = Cluster::start(&[]);
    let (mut cmd, _) = c.worker_cmd("A", 1, "10MB");
    cmd.args(["--max-output", "1KB"]);
    let log = c.path("worker-A.log");
    c.workers.push(Proc::spawn("worker A", &mut cmd, log));
    c.wait_workers(1);
    let dest = c.path("logs-out");
    c.submit(&[json!({
        "id": "big:one",
        "cmd": r"head -c 10000 /dev/zero | tr '\0' a; echo oops >&2",
        "stdout": format!("file://{}/{{id}}.{{attempt}}.out", dest.display()),
        "stderr": format!("file://{}/{{id}}.{{attempt}}.err", dest.display()),
    })]);
    let (_, r) = c.wait_succeeded("big:one");
    let kept = std::fs::read_to_string(r["stdout"].as_str().unwrap()).unwrap();
    assert!(kept.starts_with(&"a".repeat(1000)));
    assert!(
        kept.contains("output cut at 1000 bytes; 9000 more bytes were not kept"),
        "{kept}"
    );
    // {id} is the id made safe for a file name.
    let copied = std::fs::read_to_string(dest.join("big_one.1.out")).unwrap();
    assert_eq!(copied, kept);
    assert_eq!(
        std::fs::read_to_string(dest.join("big_one.1.err")).unwrap(),
        "oops\n"
    );
    // Through the dispatcher, from the worker that ran it.
    let env = [
        ("DIFFUSE_DISPATCHER", c.url.as_str()),
        ("DIFFUSE_CLIENT_TOKEN", c.client_token.as_str()),
    ];
    let out = diffuse_with(&["logs", "big:one", "--stderr"], None, &env, DEADLINE);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (Some(0), "oops\n"),
        "{}",
        out.stderr
    );
    let out = diffuse_with(&["logs", "big:one"], None, &env, DEADLINE);
    assert!(out.stdout.starts_with("aaaa"), "{}", out.stderr);
    let out = diffuse_with(&["logs", "big:one", "--attempt", "2"], None, &env, DEADLINE);
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains("has no attempt 2"), "{}", out.stderr);
}

// ----- 2. failures explained -----

#[test]
fn a_failed_tasks_exit_code_and_stderr_are_in_the_summary_results_and_status() {
    let tasks = [
        json!({"id": "bad", "cmd": "echo something went wrong >&2; exit 3"}),
        json!({"id": "nope", "cmd": ["no-such-program-here"]}),
        json!({"id": "ok", "cmd": "true"}),
    ];
    let (out, results, _d) = run(&tasks, &[]);
    assert_eq!(out.code, Some(1));
    assert!(out.stdout.contains("1 ok, 2 failed"), "{}", out.stdout);
    assert!(
        out.stdout.contains("bad: exit code 3 (on worker-"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("| something went wrong"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("nope: exec no-such-program-here: No such file"),
        "{}",
        out.stdout
    );
    let bad = result_of(&results, "bad");
    assert_eq!(bad["exit_code"], 3);
    assert_eq!(bad["stderr_tail"], "something went wrong\n");
    assert!(std::fs::read_to_string(bad["stderr"].as_str().unwrap())
        .unwrap()
        .contains("something went wrong"));

    let mut c = Cluster::start(&[]);
    c.worker("A", 1, "1MB");
    c.wait_workers(1);
    c.submit(&tasks);
    c.wait_done("bad");
    c.wait_done("nope");
    let out = diffuse_with(
        &["status", "--failed"],
        None,
        &[
            ("DIFFUSE_DISPATCHER", c.url.as_str()),
            ("DIFFUSE_CLIENT_TOKEN", c.client_token.as_str()),
        ],
        DEADLINE,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("bad: exit code 3 (on A, attempt 1)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("| something went wrong"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("nope: exec no-such-program-here"),
        "{}",
        out.stdout
    );
}

// ----- 3. resources -----

/// (start, end) of each task's run, from its report.
fn spans(results: &[Value]) -> Vec<(f64, f64)> {
    results
        .iter()
        .map(|r| {
            (
                r["report"]["staged_at"].as_f64().unwrap(),
                r["report"]["finished_at"].as_f64().unwrap(),
            )
        })
        .collect()
}

fn overlaps(s: &[(f64, f64)]) -> usize {
    let mut n = 0;
    for (i, a) in s.iter().enumerate() {
        for b in &s[i + 1..] {
            if a.0 < b.1 && b.0 < a.1 {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn two_core_tasks_never_overlap_on_a_two_core_worker_and_one_core_tasks_do() {
    let flags = ["--workers", "1", "--slots-per-worker", "2"];
    let wide: Vec<Value> = (0..4)
        .map(
            |i| json!({"id": format!("w{i}"), "cmd": "sleep 0.4; echo $DIFFUSE_CORES", "cores": 2}),
        )
        .collect();
    let (out, results, _d) = run(&wide, &flags);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(overlaps(&spans(&results)), 0, "{results:?}");
    let cores = std::fs::read_to_string(results[0]["stdout"].as_str().unwrap()).unwrap();
    assert_eq!(cores, "2\n");
    let narrow: Vec<Value> = (0..4)
        .map(|i| json!({"id": format!("n{i}"), "cmd": "sleep 0.4"}))
        .collect();
    let (out, results, _d) = run(&narrow, &flags);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(overlaps(&spans(&results)) >= 2, "{results:?}");
}

#[test]
fn gpus_of_the_allocation_are_handed_out_one_task_each_and_a_task_that_fits_no_worker_is_shown() {
    let mut c = Cluster::start(&[]);
    let (mut cmd, _) = c.worker_cmd("A", 4, "1MB");
    // As a resource manager starts it inside a job that was given GPUs 5 and 7.
    cmd.env("CUDA_VISIBLE_DEVICES", "5,7");
    let log = c.path("worker-A.log");
    c.workers.push(Proc::spawn("worker A", &mut cmd, log));
    c.wait_workers(1);
    let gate = c.path("gate");
    let hold = format!(
        "echo $CUDA_VISIBLE_DEVICES; while [ ! -e '{}' ]; do sleep 0.05; done",
        gate.display()
    );
    c.submit(&[
        json!({"id": "g1", "cmd": hold, "gpus": 1}),
        json!({"id": "g2", "cmd": hold, "gpus": 1}),
        json!({"id": "g3", "cmd": "echo $CUDA_VISIBLE_DEVICES", "gpus": 1}),
        json!({"id": "too-many", "cmd": "true", "gpus": 3}),
        json!({"id": "none", "cmd": "echo \"[$CUDA_VISIBLE_DEVICES]\""}),
    ]);
    c.wait_state("g1", "running");
    c.wait_state("g2", "running");
    // Both GPUs are taken: g3 waits although cores are free.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(c.task("g3")["state"], "queued");
    let s = c.status();
    assert_eq!(s["unschedulable"], 1, "{s}");
    assert!(
        s["unschedulable_examples"][0]
            .as_str()
            .unwrap()
            .starts_with("too-many: 1 core, 3 GPUs"),
        "{s}"
    );
    let metrics = c.metrics();
    assert!(
        metrics
            .lines()
            .any(|l| l == "diffuse_tasks_unschedulable 1"),
        "{metrics}"
    );
    std::fs::write(&gate, b"").unwrap();
    let mut seen = Vec::new();
    for id in ["g1", "g2", "g3"] {
        let (_, r) = c.wait_succeeded(id);
        seen.push(stdout_of(&r).trim().to_string());
    }
    let mut first_two = seen[..2].to_vec();
    first_two.sort();
    assert_eq!(first_two, ["5", "7"], "{seen:?}");
    assert!(["5", "7"].contains(&seen[2].as_str()));
    assert_eq!(
        c.wait_succeeded("g1").1["gpus"].as_array().unwrap().len(),
        1
    );
    // A task that asked for no GPU sees none.
    assert_eq!(stdout_of(&c.wait_succeeded("none").1).trim(), "[]");
}

#[test]
fn a_task_over_its_memory_is_killed_where_cgroups_allow() {
    if !is_root() {
        return skip("memory cgroups need root here");
    }
    let mut c = Cluster::start(&[]);
    c.worker("A", 1, "1MB");
    c.wait_workers(1);
    let log = c.workers[0].log_text();
    if !log.contains("memory requests are enforced") {
        return skip(&format!("this worker cannot make memory cgroups:\n{log}"));
    }
    c.submit(&[
        json!({"id": "hog", "cmd": ["python3", "-c", "x = bytearray(400 * 2**20); print(len(x))"], "memory": "100MB"}),
        json!({"id": "fits", "cmd": ["python3", "-c", "x = bytearray(20 * 2**20); print(len(x))"], "memory": "200MB"}),
    ]);
    let t = c.wait_done("hog");
    assert_eq!(t["state"], "failed", "{t}");
    let err = t["outcome"]["error"].as_str().unwrap_or_default();
    assert!(
        err.contains("used more than its memory limit of 100MB"),
        "{t}"
    );
    c.wait_succeeded("fits");
}

/// `memory` is what the scheduler packs by; `memory_limit` is what the kernel enforces, and
/// defaults to `memory` (as Slurm's `--mem`). Parsl's `resource_specification={'memory': 1}`
/// comes as a 1 MiB request with `memory_limit: "none"` and must not be killed.
#[test]
fn memory_is_a_request_and_memory_limit_the_limit_the_kernel_enforces() {
    if !is_root() {
        return skip("memory cgroups need root here");
    }
    let mut c = Cluster::start(&[]);
    c.worker("A", 1, "1MB");
    c.wait_workers(1);
    let log = c.workers[0].log_text();
    if !log.contains("memory requests are enforced") {
        return skip(&format!("this worker cannot make memory cgroups:\n{log}"));
    }
    let uses = |mib: u32| -> Value {
        json!([
            "python3",
            "-c",
            format!("x = bytearray({mib} * 2**20); print(len(x))")
        ])
    };
    c.submit(&[
        json!({"id": "request-only", "cmd": uses(50), "memory": "1MB", "memory_limit": "none"}),
        json!({"id": "capped", "cmd": uses(200), "memory": "1MB", "memory_limit": "50MB"}),
        json!({"id": "request-is-limit", "cmd": uses(200), "memory": "60MB"}),
        json!({"id": "under-limit", "cmd": uses(20), "memory": "1MB", "memory_limit": "200MB"}),
    ]);
    let (_, report) = c.wait_succeeded("request-only");
    assert_eq!(stdout_of(&report).trim(), (50u64 << 20).to_string());
    c.wait_succeeded("under-limit");
    for (id, limit) in [("capped", "50MB"), ("request-is-limit", "60MB")] {
        let t = c.wait_done(id);
        assert_eq!(t["state"], "failed", "{t}");
        let err = t["outcome"]["error"].as_str().unwrap_or_default();
        assert!(
            err.contains(&format!(
                "killed by the kernel: it used more than its memory limit of {limit}"
            )),
            "{t}"
        );
    }
    // A limit below the request is refused at submission, saying what to do.
    let (code, v) = c.post_tasks(
        &format!(
            "{}\n",
            json!({"id": "inverted", "cmd": "true", "memory": "100MB", "memory_limit": "50MB"})
        ),
        Some(&c.client_token),
    );
    assert_eq!(code, 400, "{v}");
    let text = v.to_string();
    assert!(
        text.contains("memory_limit") && text.contains("below its memory (100MB)"),
        "{v}"
    );
}

// ----- 4. time limits -----

#[test]
fn a_task_past_its_time_limit_fails_and_leaves_no_process() {
    let tag = format!("{}", random_u64() % 1_000_000 + 1);
    let start = Instant::now();
    let tasks = [json!({"id": "slow", "cmd": format!("sleep 30.{tag}"), "timeout_s": 1})];
    let (out, results, _d) = run(&tasks, &[]);
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    let r = result_of(&results, "slow");
    assert_eq!(r["error"], "timed out after 1 s", "{r}");
    assert_eq!(r["report"]["timed_out"], true);
    let took =
        r["report"]["finished_at"].as_f64().unwrap() - r["report"]["staged_at"].as_f64().unwrap();
    assert!(took < 5.0, "stopped within 5 s: {took}");
    assert!(processes_with(&format!("30.{tag}")).is_empty());
    // --task-timeout is the default for tasks that do not say.
    let tasks = [json!({"id": "slow2", "cmd": format!("sleep 31.{tag}")})];
    let (_, results, _d) = run(&tasks, &["--task-timeout", "1"]);
    assert_eq!(result_of(&results, "slow2")["error"], "timed out after 1 s");
}

// ----- 5. retries -----

#[test]
fn a_task_that_fails_twice_then_succeeds_ends_at_attempt_three_with_every_attempt_kept() {
    let mut c = Cluster::start(&[]);
    c.worker("A", 1, "1MB");
    c.worker("B", 1, "1MB");
    c.wait_workers(2);
    let counter = c.path("counter");
    let cmd = format!(
        "n=$(cat '{0}' 2>/dev/null || echo 0); n=$((n+1)); echo $n > '{0}'; echo try $n >&2; [ $n -ge 3 ]",
        counter.display()
    );
    // Alone, so the other worker is free when a retry looks for one (a retry prefers another
    // worker; with every other one busy it takes the same rather than wait).
    c.submit(&[json!({"id": "flaky", "cmd": cmd, "retries": 2})]);
    let (t, r) = c.wait_succeeded("flaky");
    assert_eq!(t["attempt"], 3, "{t}");
    assert_eq!(r["attempt"], 3);
    let attempts = t["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 3, "{t}");
    for (i, a) in attempts[..2].iter().enumerate() {
        assert_eq!(a["report"]["exit_code"], 1, "{a}");
        assert_eq!(a["report"]["stderr_tail"], format!("try {}\n", i + 1));
    }
    assert_ne!(
        attempts[0]["node"], attempts[1]["node"],
        "a retry prefers another worker: {t}"
    );
    // A failure another attempt would repeat is not retried.
    c.submit(&[json!({"id": "exec", "cmd": ["no-such-program-here"], "retries": 5})]);
    let t = c.wait_done("exec");
    assert_eq!(
        (t["state"].clone(), t["attempt"].clone()),
        (json!("failed"), json!(1))
    );
}

// ----- 6. environment and priority -----

#[test]
fn a_task_gets_its_env_and_diffuse_variables_and_priorities_order_the_queue() {
    let mut c = Cluster::start(&[]);
    c.worker("A", 1, "1MB");
    c.wait_workers(1);
    let gate = c.path("gate");
    c.submit(&[gated_task("hold", &gate)]);
    c.wait_state("hold", "running");
    let order = c.path("order");
    let note = |id: &str| format!("echo {id} >> '{}'", order.display());
    c.submit(&[
        json!({"id": "low", "cmd": note("low"), "priority": -1}),
        json!({"id": "mid", "cmd": note("mid")}),
        json!({"id": "high", "cmd": note("high"), "priority": 10}),
        json!({"id": "env", "cmd": "echo $GREETING $DIFFUSE_TASK_ID $DIFFUSE_ATTEMPT $DIFFUSE_NODE $DIFFUSE_CORES",
               "env": {"GREETING": "hello world"}, "priority": -5}),
    ]);
    std::fs::write(&gate, b"").unwrap();
    let (_, r) = c.wait_succeeded("env");
    assert_eq!(stdout_of(&r), "hello world env 1 A 1\n");
    assert_eq!(std::fs::read_to_string(&order).unwrap(), "high\nmid\nlow\n");
}
