//! `diffuse run` as a user drives it: one-line bags of tasks with `--each`, answers printed with
//! `--print`, warm repeat runs on the caches kept between runs, two runs at once, `diffuse cache`,
//! and progress kept off stdout.

mod common;

use common::cluster::*;
use common::BIN;
use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};

/// `diffuse args…` in `dir` with its own cache root.
fn in_dir(dir: &std::path::Path, args: &[&str]) -> common::Output {
    common::run_diffuse(
        args,
        Some(dir),
        &[("XDG_CACHE_HOME", dir.join("xdg").to_str().unwrap())],
        DEADLINE,
    )
}

#[test]
fn each_runs_one_task_per_argument_and_print_keeps_stdout_for_the_answers() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let mut args = vec![
        "run".to_string(),
        "--each".into(),
        "wc -c < {} && echo {/.}".into(),
        "--print".into(),
        "--keep-order".into(),
    ];
    for i in 0..12 {
        let f = data.join(format!("f {i:02}.bin"));
        std::fs::write(&f, vec![b'x'; i * 3]).unwrap();
        args.push(f.display().to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = in_dir(dir.path(), &args);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let want: String = (0..12).map(|i| format!("{}\nf {i:02}\n", i * 3)).collect();
    assert_eq!(out.stdout, want, "stdout holds the answers alone, in order");
    assert!(out.stderr.contains("12 ok, 0 failed"), "{}", out.stderr);

    // Arguments from standard input, a non-file argument quoted as it is.
    let mut child = Command::new(BIN)
        .args(["run", "--each", "echo {#}: {}", "--print", "-"])
        .current_dir(dir.path())
        .env("XDG_CACHE_HOME", dir.path().join("xdg"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"it's one\n$HOME\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    lines.sort();
    assert_eq!(lines, ["1: it's one", "2: $HOME"]);
}

#[test]
fn submit_each_sends_one_task_per_argument() {
    let mut c = Cluster::start(&[]);
    c.worker("A", 2, "1MB");
    c.wait_workers(1);
    let state = c.path("state");
    let out = diffuse_with(
        &[
            "submit",
            "--each",
            "echo {}",
            "--id-prefix",
            "greet-",
            "hello",
            "world",
        ],
        None,
        &[
            ("DIFFUSE_DISPATCHER", c.url.as_str()),
            ("DIFFUSE_CLIENT_TOKEN", c.client_token.as_str()),
            ("XDG_STATE_HOME", state.to_str().unwrap()),
        ],
        DEADLINE,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let (_, r) = c.wait_succeeded("greet-2");
    assert_eq!(stdout_of(&r), "world\n");
}

/// The storage bytes and local hits of a summary.
fn storage_and_local(summary: &Value) -> (u64, f64) {
    (
        summary["bytes_storage"].as_u64().unwrap(),
        summary["hit_local"].as_f64().unwrap(),
    )
}

#[test]
fn a_second_run_over_the_same_data_is_warm() {
    let dir = tempfile::tempdir().unwrap();
    let tasks: String = (0..60)
        .map(|i| {
            let f = dir.path().join(format!("f{}", i % 20));
            if !f.exists() {
                std::fs::write(&f, random_bytes(50_000)).unwrap();
            }
            format!(
                "{}\n",
                json!({"id": format!("t{i}"), "cmd": ["md5sum", "{inputs[0]}"], "inputs": [file_uri(&f)]})
            )
        })
        .collect();
    let file = dir.path().join("tasks.jsonl");
    std::fs::write(&file, tasks).unwrap();
    let f = file.to_str().unwrap();
    let first = in_dir(dir.path(), &["run", f, "--json"]);
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let first: Value = serde_json::from_str(&first.stdout).expect("stdout holds the JSON alone");
    let (storage, _) = storage_and_local(&first);
    // Every file is read from storage; one may be read twice, when a task that needs it goes to
    // the other worker while the first is still fetching it (not yet a peer source).
    assert!(
        (20 * 50_000..40 * 50_000).contains(&storage),
        "the first run reads the files from storage: {first}"
    );
    let second = in_dir(dir.path(), &["run", f, "--json"]);
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert!(
        second.stderr.contains("60/60 done"),
        "progress on stderr: {}",
        second.stderr
    );
    let second: Value = serde_json::from_str(&second.stdout).unwrap();
    let (storage, local) = storage_and_local(&second);
    assert_eq!(
        storage, 0,
        "the second run reads nothing from storage: {second}"
    );
    // Mostly local: a task whose worker is busy may go to the other one, which reads the
    // holder's copy as a peer (warm all the same). Measured on 2 loaded cores: 0.90-1.0 local
    // for this build and the one before it alike (the checks of CI saw 0.92 once).
    assert!(local >= 0.8, "{second}");
    // The run directory holds the journal, the output and the results only.
    let run_dir = std::path::PathBuf::from(second["run_dir"].as_str().unwrap());
    let mut names: Vec<String> = std::fs::read_dir(&run_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["journal.sqlite", "logs", "results.jsonl", "run.json"],
        "{names:?}"
    );
    let info = in_dir(dir.path(), &["cache", "info"]);
    assert!(
        info.stdout.contains("worker-0") && info.stdout.contains("worker-1"),
        "{}",
        info.stdout
    );
    let total: u64 = {
        let json = in_dir(dir.path(), &["cache", "info", "--json"]);
        let v: Value = serde_json::from_str(&json.stdout).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|d| d["bytes"].as_u64().unwrap())
            .sum()
    };
    assert!(
        total >= 20 * 50_000,
        "every file is cached (some twice: replicas): {total}"
    );
    let cleared = in_dir(dir.path(), &["cache", "clear"]);
    assert!(cleared.stdout.contains("deleted"), "{}", cleared.stdout);
    let third = in_dir(dir.path(), &["run", f, "--json"]);
    let third: Value = serde_json::from_str(&third.stdout).unwrap();
    assert!(
        storage_and_local(&third).0 >= 20 * 50_000,
        "cold again after clear: {third}"
    );
}

#[test]
fn two_runs_at_once_use_their_own_caches_and_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let slow = dir.path().join("slow.jsonl");
    std::fs::write(&slow, format!("{}\n", gated_task("hold", &gate))).unwrap();
    let first = Command::new(BIN)
        .args(["run", slow.to_str().unwrap(), "--workers", "1"])
        .current_dir(dir.path())
        .env("XDG_CACHE_HOME", dir.path().join("xdg"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lock = dir.path().join("xdg/diffuse/worker-0.lock");
    poll("the first run to hold worker-0", || {
        // It is held once the first run's worker exists.
        (lock.exists() && dir.path().join("xdg/diffuse/worker-0/lock").exists()).then_some(())
    });
    let quick = dir.path().join("quick.jsonl");
    std::fs::write(&quick, "{\"id\":\"q\",\"cmd\":\"true\"}\n").unwrap();
    let second = in_dir(
        dir.path(),
        &["run", quick.to_str().unwrap(), "--workers", "1"],
    );
    std::fs::write(&gate, b"").unwrap();
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert!(
        second.stderr.contains("worker-0 of") && second.stderr.contains("this run uses worker-1"),
        "{}",
        second.stderr
    );
    let out = first.wait_with_output().unwrap();
    assert!(out.status.success());
}

#[test]
fn a_run_without_inputs_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    std::fs::write(&file, "{\"id\":\"a\",\"cmd\":\"true\"}\n").unwrap();
    let out = in_dir(dir.path(), &["run", file.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("accesses      no inputs"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("0.0% local"), "{}", out.stdout);
}

#[test]
fn a_task_no_local_worker_can_hold_fails_with_the_reason_instead_of_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    // Each of the two local workers has half of this machine's memory and no GPU here.
    let lines = [
        json!({"id": "fits", "cmd": "true", "memory": "1MB"}),
        json!({"id": "gpus", "cmd": "true", "gpus": 64}),
        json!({"id": "memory", "cmd": "true", "memory": "1000TB"}),
        json!({"id": "cores", "cmd": "true", "cores": 3}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&file, text).unwrap();
    let out = in_dir(
        dir.path(),
        &["run", file.to_str().unwrap(), "--cores-per-worker", "2"],
    );
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("1 ok, 3 failed"), "{}", out.stdout);
    for (id, want) in [
        (
            "gpus",
            "asks for 1 core, 64 GPUs: more than any of the 2 workers has",
        ),
        ("memory", "asks for 1 core, 1000TB of memory: more than any"),
        ("cores", "asks for 3 cores: more than any"),
    ] {
        assert!(
            out.stdout.contains(&format!("{id}: {want}")),
            "{id}: {}",
            out.stdout
        );
    }
}

#[test]
fn a_run_with_max_workers_starts_workers_as_needed_and_gives_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let mut args = vec![
        "run".to_string(),
        "--max-workers".into(),
        "3".into(),
        "--cores-per-worker".into(),
        "1".into(),
        "--idle-release".into(),
        "2s".into(),
        "--run-dir".into(),
        dir.path().join("r").display().to_string(),
        "--each".into(),
        "sleep 0.3; wc -c < {}".into(),
        "--print".into(),
        "--keep-order".into(),
    ];
    for i in 0..9 {
        let f = data.join(format!("f{i}"));
        std::fs::write(&f, vec![b'x'; i]).unwrap();
        args.push(f.display().to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = in_dir(dir.path(), &args);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let want: String = (0..9).map(|i| format!("{i}\n")).collect();
    assert_eq!(out.stdout, want);
    assert!(out.stderr.contains("9 ok, 0 failed"), "{}", out.stderr);
    // Its workers came from the pool (their caches and logs under <run-dir>/pool), and none
    // outlives the run.
    let pool: Vec<String> = std::fs::read_dir(dir.path().join("r/pool"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".log"))
        .collect();
    assert!((1..=3).contains(&pool.len()), "{pool:?}");
    let marker = dir.path().join("r/pool").display().to_string();
    assert!(
        common::host::processes_with(&marker).is_empty(),
        "a pool worker outlived its run"
    );
    let bad = in_dir(
        dir.path(),
        &["run", "--max-workers", "2", "--workers", "3", "x.jsonl"],
    );
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
}
