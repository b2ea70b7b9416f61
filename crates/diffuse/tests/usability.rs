//! What a user meets first: stopping and resuming a run, placeholders in shell commands, task
//! listings, task-file errors, run directories, counters, and the README's promises.

mod common;

use common::cluster::*;
use common::host::{processes_starting, processes_with};
use common::BIN;
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::Duration;

/// `diffuse run FILE --run-dir DIR`, to completion.
fn run_in(file: &std::path::Path, run_dir: &std::path::Path) -> common::Output {
    diffuse(
        &[
            "run",
            file.to_str().unwrap(),
            "--run-dir",
            run_dir.to_str().unwrap(),
        ],
        DEADLINE,
    )
}

fn write_tasks(path: &std::path::Path, tasks: &[Value]) {
    let text: String = tasks.iter().map(|t| format!("{t}\n")).collect();
    std::fs::write(path, text).expect("write tasks");
}

// ----- item 10: Ctrl-C and --resume -----

#[test]
fn ctrl_c_stops_a_run_and_resume_finishes_it() {
    let dir = tempfile::tempdir().unwrap();
    let tag = format!("{}", random_u64() % 1_000_000 + 1);
    let gate = dir.path().join("gate");
    let mut tasks: Vec<Value> = (0..6)
        .map(|i| json!({"id": format!("quick{i}"), "cmd": ["echo", format!("q{i}")]}))
        .collect();
    for i in 0..4 {
        tasks.push(json!({"id": format!("slow{i}"), "cmd": format!(
            "if [ -e '{}' ]; then echo done; else sleep 60.{tag}; fi", gate.display())}));
    }
    let file = dir.path().join("tasks.jsonl");
    write_tasks(&file, &tasks);
    let run_dir = dir.path().join("run");
    let mut run = Command::new(BIN);
    let cache = dir.path().join("cache");
    run.arg("run")
        .arg(&file)
        .arg("--run-dir")
        .arg(&run_dir)
        .arg("--cache-dir")
        .arg(&cache)
        .args(["--workers", "2", "--slots-per-worker", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = run.spawn().unwrap();
    // Every slot runs a slow task: the quick ones are done.
    poll("four slow tasks to run", || {
        (processes_starting(&format!("sleep 60.{tag}")).len() == 4).then_some(())
    });
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(130),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("6 ok, 0 failed, 4 not run"), "{stdout}");
    assert!(stdout.contains("diffuse run --resume"), "{stdout}");
    assert!(
        processes_with(&format!(".{tag}")).is_empty(),
        "tasks outlived the run"
    );
    for w in 0..2 {
        assert!(
            cache.join(format!("worker-{w}/CLEAN")).exists(),
            "worker {w} did not stop cleanly"
        );
    }
    let first = results(&run_dir);
    assert_eq!(first.len(), 10);
    let ended = first.iter().filter(|r| r["state"] == "succeeded").count();
    assert_eq!(ended, 6);

    std::fs::write(&gate, b"go").unwrap();
    let out = diffuse(
        &[
            "run",
            "--resume",
            run_dir.to_str().unwrap(),
            "--workers",
            "2",
        ],
        DEADLINE,
    );
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("10 ok, 0 failed"), "{}", out.stdout);
    for r in &results(&run_dir) {
        assert_eq!(r["state"], "succeeded", "{r}");
        let id = r["id"].as_str().unwrap();
        if id.starts_with("quick") {
            assert_eq!(r["attempt"], 1, "a finished task ran again: {r}");
        }
    }
    // A second run in the same directory is refused, with the way to continue it.
    let out = run_in(&file, &run_dir);
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains("--resume"), "{}", out.stderr);
}

// ----- item 11: placeholders in shell commands -----

#[test]
fn placeholders_are_shell_quoted_and_checked_at_submission() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("my runs");
    std::fs::create_dir_all(&base).unwrap();
    let input = base.join("in put.txt");
    std::fs::write(&input, "b\nc\na\n").unwrap();
    let output = base.join("it's $out.txt");
    let file = base.join("tasks.jsonl");
    // The README's own example, in a run directory with a space.
    write_tasks(
        &file,
        &[
            json!({"id": "sort", "cmd": "sort {inputs[0]} > {outputs[0]}",
                 "inputs": [file_uri(&input).replace(' ', "%20")],
                 "outputs": [format!("file://{}", output.display()).replace(' ', "%20").replace('$', "%24")]}),
        ],
    );
    let run_dir = base.join("run one");
    let out = run_in(&file, &run_dir);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(std::fs::read_to_string(&output).unwrap(), "a\nb\nc\n");

    write_tasks(
        &file,
        &[
            json!({"id": "x", "cmd": "cat {inputs[1]}", "inputs": [file_uri(&input).replace(' ', "%20")]}),
        ],
    );
    let out = diffuse(
        &[
            "run",
            file.to_str().unwrap(),
            "--run-dir",
            base.join("r2").to_str().unwrap(),
        ],
        DEADLINE,
    );
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("line 1: field 'cmd': {inputs[1]} is out of range"),
        "{}",
        out.stderr
    );
}

// ----- item 12: listings -----

#[test]
fn task_listings_come_in_pages_by_state_and_refuse_unknown_parameters() {
    let c = Cluster::start(&[]);
    let tasks: Vec<Value> = (0..2500)
        .map(|i| json!({"id": format!("t{i:04}"), "cmd": "true"}))
        .collect();
    c.submit(&tasks);
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let q = match &after {
            Some(a) => format!("/v1/tasks?state=queued&limit=1000&after={a}"),
            None => "/v1/tasks?state=queued&limit=1000".into(),
        };
        let page = c.get(&q);
        pages += 1;
        for t in page["tasks"].as_array().unwrap() {
            seen.push(t["id"].as_str().unwrap().to_string());
        }
        match page["next"].as_str() {
            Some(n) => after = Some(n.to_string()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let want: Vec<String> = (0..2500).map(|i| format!("t{i:04}")).collect();
    assert_eq!(seen, want);
    assert!(c.get("/v1/tasks?state=running")["tasks"]
        .as_array()
        .unwrap()
        .is_empty());
    for bad in [
        "/v1/tasks?bogus=1",
        "/v1/tasks?state=queued&limt=5",
        "/v1/tasks?state=done",
        "/v1/tasks?after=x",
        "/v1/tasks?limit=0",
        "/v1/status?verbose=1",
        "/v1/locate?uri=file:///x&all=1",
    ] {
        let r = c
            .http
            .get(format!("{}{bad}", c.url))
            .bearer_auth(&c.client_token)
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{bad}");
        let v: Value = r.json().unwrap();
        assert!(v["error"].is_string(), "{bad}: {v}");
    }
}

/// A workflow engine's status poll: the tasks it names, in one request, however many others the
/// dispatcher holds; ids no task has are told apart, and a bad body is refused.
#[test]
fn the_states_of_named_tasks_come_in_one_request() {
    let c = Cluster::start(&[]);
    let tasks: Vec<Value> = (0..2500)
        .map(|i| json!({"id": format!("t{i:04}"), "cmd": "true"}))
        .collect();
    c.submit(&tasks);
    let post = |body: &str, token: &str| {
        let r = c
            .http
            .post(format!("{}/v1/states", c.url))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .unwrap();
        (
            r.status().as_u16(),
            r.json::<Value>().unwrap_or(Value::Null),
        )
    };
    let (code, v) = post(r#"{"ids": ["t2499", "nope", "t0007"]}"#, &c.client_token);
    assert_eq!(code, 200, "{v}");
    let got: Vec<(&str, &str)> = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["id"].as_str().unwrap(), t["state"].as_str().unwrap()))
        .collect();
    assert_eq!(got, [("t2499", "queued"), ("t0007", "queued")], "{v}");
    assert_eq!(v["unknown"], json!(["nope"]), "{v}");

    let many: Vec<String> = (0..10_001).map(|i| format!("x{i}")).collect();
    let too_many = json!({ "ids": many }).to_string();
    for bad in [r#"{"id": ["t0001"]}"#, "not json", too_many.as_str()] {
        let (code, v) = post(bad, &c.client_token);
        assert_eq!(code, 400, "{v}");
        assert!(v["error"].is_string(), "{v}");
    }
    assert_eq!(post(r#"{"ids": []}"#, "wrong").0, 401);
}

// ----- item 13: task-file errors -----

#[test]
fn task_file_errors_name_the_right_line() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, bytes: &[u8]| {
        let f = dir.path().join(name);
        std::fs::write(&f, bytes).unwrap();
        let rd = dir.path().join(format!("run-{name}"));
        diffuse(
            &[
                "run",
                f.to_str().unwrap(),
                "--run-dir",
                rd.to_str().unwrap(),
            ],
            DEADLINE,
        )
    };
    let out = run(
        "bom.jsonl",
        b"\xef\xbb\xbf{\"id\":\"a\",\"cmd\":\"true\"}\n",
    );
    assert_eq!(out.code, Some(0), "a BOM is accepted: {}", out.stderr);
    let out = run(
        "dup.jsonl",
        b"{\"id\":\"a\",\"cmd\":\"true\"}\n\n\n\n{\"id\":\"a\",\"cmd\":\"true\"}\n",
    );
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr
            .contains("line 5: field 'id': duplicate id 'a' (first on line 1)"),
        "{}",
        out.stderr
    );
    let out = run(
        "latin1.jsonl",
        b"{\"id\":\"a\",\"cmd\":\"true\"}\n\n{\"id\":\"b\",\"cmd\":\"echo caf\xe9\"}\n",
    );
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("line 3") && out.stderr.contains("UTF-8"),
        "{}",
        out.stderr
    );
    for (name, text) in [("empty.jsonl", &b""[..]), ("blank.jsonl", b"\n  \n")] {
        let out = run(name, text);
        assert_eq!(out.code, Some(2), "{name}");
        assert!(out.stderr.contains("no tasks"), "{name}: {}", out.stderr);
    }
}

// ----- item 14: the small ones -----

#[test]
fn a_journal_in_a_missing_directory_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("not/yet/there/journal.sqlite");
    let port = free_port();
    let mut cmd = Command::new(BIN);
    cmd.args([
        "dispatcher",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--journal",
    ])
    .arg(&journal)
    .env("DIFFUSE_CLIENT_TOKEN", "c-token")
    .env("DIFFUSE_WORKER_TOKEN", "w-token");
    let _d = Proc::spawn("dispatcher", &mut cmd, dir.path().join("d.log"));
    poll("the dispatcher to answer", || {
        http()
            .get(format!("http://127.0.0.1:{port}/v1/status"))
            .bearer_auth("c-token")
            .send()
            .ok()
            .filter(|r| r.status().is_success())
    });
    assert!(journal.exists());
}

#[test]
fn two_runs_started_together_get_their_own_directories() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    write_tasks(&file, &[json!({"id": "a", "cmd": "true"})]);
    let start = || {
        Command::new(BIN)
            .args(["run", file.to_str().unwrap(), "--workers", "1"])
            .env("XDG_CACHE_HOME", dir.path().join("cache"))
            .current_dir(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (start(), start());
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let runs = std::fs::read_dir(dir.path().join("diffuse-runs"))
        .unwrap()
        .count();
    assert_eq!(runs, 2);
}

#[test]
fn counters_never_show_more_running_tasks_than_slots_and_a_new_cache_is_not_verified() {
    let mut c = Cluster::start(&[]);
    c.worker("A", 2, "10MB");
    c.wait_workers(1);
    let log = c.workers[0].log_text();
    assert!(!log.contains("verifying every cached object"), "{log}");
    let tasks: Vec<Value> = (0..400)
        .map(|i| json!({"id": format!("t{i}"), "cmd": ["true"]}))
        .collect();
    c.submit(&tasks);
    poll("every task to end", || {
        let s = c.status();
        assert!(s["running"].as_u64().unwrap() <= 2, "{s}");
        (s["succeeded"] == 400).then_some(())
    });
}

#[test]
fn the_readme_tells_what_a_new_user_needs() {
    let readme = include_str!("../../../README.md");
    for needed in [
        "DIFFUSE_DISPATCHER",
        "--eviction",
        "`hint`",
        "`job`",
        "`compute_s`",
        "`timeout_s`",
        "`retries`",
        "`cores`, `memory`, `gpus`, `disk`",
        "--resume",
        "--each",
        "diffuse wait",
        "diffuse status --failed",
        "diffuse logs",
        "diffuse cancel",
        "docs/security.md",
        "--provisioner slurm",
        "`walltime_s`",
        "docs/provisioning.md",
    ] {
        assert!(readme.contains(needed), "README does not mention {needed}");
    }
}

#[test]
fn the_help_of_every_command_explains_its_options() {
    for (cmd, flags) in [
        (
            "worker",
            &[
                "--input-root",
                "--task-user",
                "--task-env-drop",
                "--advertise",
                "--max-connections",
                "--cores",
                "--memory",
                "--gpus",
                "--gpu-ids",
                "--max-output",
                "--log-retention",
                "--ends-in",
                "--leave-before",
            ][..],
        ),
        (
            "dispatcher",
            &[
                "--metrics-token-file",
                "--lookup-timeout",
                "--header-timeout",
                "--provisioner",
                "--max-workers",
                "--max-pending",
                "--idle-release",
                "--slurm-partition",
                "--start-command",
                "--rm-timeout",
            ],
        ),
        (
            "run",
            &[
                "--resume",
                "--input-root",
                "--each",
                "--print",
                "--retries",
                "--task-timeout",
                "--cores-per-worker",
                "--max-workers",
                "--idle-release",
            ],
        ),
        ("logs", &["--attempt", "--stderr"]),
        ("cancel", &["--dispatcher"]),
        ("status", &["--failed"]),
        ("submit", &["--from-line"]),
        ("wait", &["--all", "--reconnect-timeout"]),
    ] {
        let out = diffuse(&[cmd, "--help"], Duration::from_secs(20));
        assert_eq!(out.code, Some(0));
        for f in flags {
            assert!(out.stdout.contains(f), "{cmd} --help lacks {f}");
        }
    }
}
