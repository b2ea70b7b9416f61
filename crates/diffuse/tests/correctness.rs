//! Right bytes, no stray processes, no failure a full disk or a slow source should not cause,
//! `diffuse wait` and `diffuse submit` that do what they say: real processes, real sockets.

mod common;

use common::cluster::*;
use common::host::{is_root, processes_with, silent_server, skip, HttpServer, SmallDisk};
use common::BIN;
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

// ----- item 4: URIs used whole -----

#[test]
fn http_inputs_keep_their_query_and_userinfo_and_file_uris_are_decoded() {
    let server = HttpServer::start(|req| match req.target.as_str() {
        "/q?v=1" => (200, b"one\n".to_vec()),
        "/q?v=22" => (200, b"twenty-two\n".to_vec()),
        // user:pass
        "/private" if req.header("authorization") == Some("Basic dXNlcjpwYXNz") => {
            (200, b"secret\n".to_vec())
        }
        "/private" => (401, b"who are you?".to_vec()),
        _ => (404, Vec::new()),
    });
    let mut c = Cluster::start(&[]);
    c.worker("A", 2, "10MB");
    c.wait_workers(1);
    let spaced = c.data("my file.txt", b"spaced\n");
    let spaced_uri = format!(
        "file://{}/my%20file.txt",
        spaced.parent().unwrap().display()
    );
    c.submit(&[
        cat_task("v1", &server.url("/q?v=1")),
        cat_task("v22", &server.url("/q?v=22")),
        cat_task(
            "auth",
            &format!("http://user:pass@127.0.0.1:{}/private", server.port),
        ),
        cat_task("spaced", &spaced_uri),
        cat_task(
            "upper",
            &format!("FILE://{}", spaced.display()).replace(' ', "%20"),
        ),
    ]);
    for (id, want) in [
        ("v1", "one\n"),
        ("v22", "twenty-two\n"),
        ("auth", "secret\n"),
        ("spaced", "spaced\n"),
        ("upper", "spaced\n"),
    ] {
        let (_, r) = c.wait_succeeded(id);
        assert_eq!(stdout_of(&r), want, "{id}");
    }
    // The password is not shown back.
    let t = c.task("auth");
    assert!(
        !t["outcome"]["result_json"]
            .as_str()
            .unwrap_or_default()
            .contains("pass@"),
        "{t}"
    );
}

// ----- item 5: a task's processes end with it -----

/// A task that starts a background process and, after `secs`, touches `marker`.
fn lingering(id: &str, tag: &str, secs: u32, marker: &std::path::Path) -> Value {
    json!({"id": id, "cmd": format!(
        "sleep 1000.{tag} & sleep {secs}.{tag}; touch {}", marker.display())})
}

#[track_caller]
fn assert_gone(tag: &str) {
    let start = Instant::now();
    loop {
        let left = processes_with(&format!(".{tag}"));
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "processes of the task still run: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A cluster (dispatcher `args`) with one one-slot worker running task "t", a [`lingering`] task
/// of `secs` seconds; returns the cluster, the task's tag and its side-effect file.
fn lingering_on_one_worker(args: &[&str], secs: u32) -> (Cluster, String, std::path::PathBuf) {
    let mut c = Cluster::start_with(&[], args, &[]);
    c.worker("A", 1, "10MB");
    c.wait_workers(1);
    let tag = format!("{}", random_u64() % 1_000_000 + 1);
    let marker = c.path("side-effect");
    c.submit(&[lingering("t", &tag, secs, &marker)]);
    wait_running(&tag);
    (c, tag, marker)
}

/// Until the task's shell and its background `sleep` both run.
fn wait_running(tag: &str) {
    poll("the task's processes to start", || {
        (processes_with(&format!("1000.{tag}")).len() >= 2).then_some(())
    });
}

#[test]
fn a_killed_workers_task_processes_die_with_it() {
    let mut c = Cluster::start(&[]);
    c.worker("A", 1, "10MB");
    c.wait_workers(1);
    let tag = format!("{}", random_u64() % 1_000_000 + 1);
    let marker = c.path("side-effect");
    // One process even leaves the task's process group (and session).
    c.submit(&[json!({"id": "t", "cmd": format!(
        "setsid sleep 1001.{tag} & sleep 1000.{tag} & sleep 4.{tag}; touch {}",
        marker.display())})]);
    wait_running(&tag);
    poll("the process in its own session", || {
        (!processes_with(&format!("1001.{tag}")).is_empty()).then_some(())
    });
    c.kill_worker(0);
    assert_gone(&tag);
    std::thread::sleep(Duration::from_secs(5));
    assert!(!marker.exists(), "the task went on after its worker died");
}

#[test]
fn a_killed_guard_makes_its_worker_stop_its_tasks_and_leave() {
    // With a crash limit of 1, a crash would fail the task at once.
    let (mut c, tag, _) = lingering_on_one_worker(&["--crash-limit", "1"], 30);
    let worker = c.workers[0].worker_pid();
    // SIGKILL the process that was started (the guard), not the worker under it.
    let _ = c.workers[0].child.kill();
    assert_gone(&tag);
    poll("the worker to exit", || {
        (!std::path::Path::new(&format!("/proc/{worker}")).exists()).then_some(())
    });
    // It left cleanly: its cache is marked clean, and the task is queued again, no crash counted.
    assert!(c.path("wA/CLEAN").exists());
    c.worker("B", 1, "10MB");
    let t = c.wait_state("t", "running");
    assert_eq!(t["node"], "B", "{t}");
    assert_eq!(t["attempt"], 2, "{t}");
}

#[test]
fn a_lost_dispatcher_stops_the_whole_task() {
    let (mut c, tag, _) = lingering_on_one_worker(&[], 30);
    let d = c.dispatcher.as_mut().unwrap();
    let _ = d.child.kill();
    let _ = d.child.wait();
    assert_gone(&tag);
}

#[test]
fn cancelling_a_running_task_stops_its_processes() {
    let (c, tag, marker) = lingering_on_one_worker(&[], 30);
    let cancel = |ids: &[&str]| {
        let mut args = vec!["cancel", "--dispatcher", c.url.as_str()];
        args.extend_from_slice(ids);
        diffuse_with(
            &args,
            None,
            &[("DIFFUSE_CLIENT_TOKEN", c.client_token.as_str())],
            DEADLINE,
        )
    };
    let out = cancel(&["t"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.starts_with("t: cancelling"), "{}", out.stdout);
    assert_gone(&tag);
    let t = c.wait_done("t");
    assert_eq!(t["state"], "cancelled", "{t}");
    assert!(!marker.exists());
    // Cancelling it again, or a task that does not exist, is refused and named.
    let out = cancel(&["t", "nope"]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("t: task 't' already ended")
            && out.stderr.contains("nope: unknown task 'nope'"),
        "{}",
        out.stderr
    );
}

/// A cancel sent right behind the task's dispatch (the worker reads the `Run` and the `Cancel`
/// together) stops it: it used to be lost when the worker handled the `Cancel` before the task
/// it had just spawned had registered, and the task ran to its end (found by the Python
/// client's tests: `cancel_job` said 4 stopping, 2 ran their full 60 s).
#[test]
fn a_task_cancelled_right_after_its_dispatch_stops() {
    let mut c = Cluster::start(&[]);
    c.worker("A", 8, "10MB");
    c.wait_workers(1);
    let start = Instant::now();
    for i in 0..8 {
        let id = format!("t{i}");
        c.submit(&[json!({"id": id, "cmd": "sleep 30"})]);
        let r = c
            .http
            .post(format!("{}/v1/tasks/{id}/cancel", c.url))
            .bearer_auth(&c.client_token)
            .send()
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }
    for i in 0..8 {
        let t = c.wait_done(&format!("t{i}"));
        assert_eq!(t["state"], "cancelled", "{t}");
    }
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "all cancelled in {:?}, none after its 30 s",
        start.elapsed()
    );
}

/// A cancel that reaches the worker while the attempt is still staging its inputs (right after
/// its `Run`) stops it: its program never starts. It used to be lost, and the task ran to its
/// end before being recorded cancelled (found by the Python client's tests).
#[test]
fn a_task_cancelled_while_its_inputs_are_staged_never_starts() {
    let server = HttpServer::start(|_| {
        std::thread::sleep(Duration::from_millis(1500));
        (200, b"slow\n".to_vec())
    });
    let mut c = Cluster::start(&[]);
    c.worker("A", 1, "10MB");
    c.wait_workers(1);
    let marker = c.path("started");
    // The lookup (HEAD) is slow too: wait for the task to be dispatched, then cancel at once,
    // while its GET is still waiting.
    c.submit(&[
        json!({"id": "t", "cmd": format!("touch {}; sleep 30", marker.display()),
                      "inputs": [server.url("/slow")]}),
    ]);
    c.wait_state("t", "running");
    let start = Instant::now();
    let r = c
        .http
        .post(format!("{}/v1/tasks/t/cancel", c.url))
        .bearer_auth(&c.client_token)
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let t = c.wait_done("t");
    assert_eq!(t["state"], "cancelled", "{t}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "cancelled in {:?}, not after its 30 s",
        start.elapsed()
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(!marker.exists(), "its program never started");
}

#[test]
fn a_tasks_leftover_background_processes_end_with_it() {
    let mut c = Cluster::start(&[]);
    c.worker("A", 1, "10MB");
    c.wait_workers(1);
    let tag = format!("{}", random_u64() % 1_000_000 + 1);
    c.submit(&[json!({"id": "t", "cmd": format!("sleep 1000.{tag} & echo started")})]);
    let (_, r) = c.wait_succeeded("t");
    assert_eq!(stdout_of(&r), "started\n");
    assert_gone(&tag);
}

// ----- item 6: a small disk -----

#[test]
fn a_cache_on_a_disk_smaller_than_its_quota_evicts_instead_of_failing() {
    if !is_root() {
        return skip("mounting a small file system needs root");
    }
    let mut c = Cluster::start(&[]);
    let disk = SmallDisk::mount(&c.path("small"), 24);
    // A quota far above the disk's 24 MiB.
    let (mut cmd, _) = c.worker_cmd_in("A", 2, "200MB", &disk.dir.join("cache"));
    let log = c.path("worker-A.log");
    c.workers.push(Proc::spawn("worker A", &mut cmd, log));
    c.wait_workers(1);
    let text = c.workers[0].log_text();
    assert!(
        text.contains("is more than the disk"),
        "no warning of the capped quota:\n{text}"
    );
    // Something else takes 8 MiB of the disk after the worker started.
    std::fs::write(disk.dir.join("filler"), vec![7u8; 8 << 20]).unwrap();
    let files: Vec<_> = (0..20)
        .map(|i| c.data(&format!("f{i}"), &random_bytes(2 << 20)))
        .collect();
    let tasks: Vec<Value> = files
        .iter()
        .enumerate()
        .map(|(i, f)| wc_task(&format!("t{i}"), &file_uri(f)))
        .collect();
    c.submit(&tasks);
    for i in 0..20 {
        let t = c.wait_done(&format!("t{i}"));
        assert_eq!(t["state"], "succeeded", "{t}");
    }
    // Task directories are gone once their results are in (the kept functions' directory,
    // `.functions`, stays: it is the worker's, not a task's).
    let work = disk.dir.join("cache/work");
    let left: Vec<_> = std::fs::read_dir(&work)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != ".functions")
        .collect();
    assert!(left.is_empty(), "task directories left: {left:?}");
    assert!(disk.dir.join("filler").exists());
}

// ----- item 7: diffuse wait -----

#[test]
fn wait_follows_its_own_tasks_through_a_dispatcher_restart() {
    let mut c = Cluster::start(&[]);
    c.worker("A", 2, "10MB");
    c.wait_workers(1);
    // Somebody's earlier task failed.
    c.submit(&[json!({"id": "old", "cmd": "exit 1"})]);
    c.wait_done("old");
    let state = c.path("state");
    let env = [
        ("DIFFUSE_DISPATCHER", c.url.clone()),
        ("DIFFUSE_CLIENT_TOKEN", c.client_token.clone()),
        ("XDG_STATE_HOME", state.display().to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let gate = c.path("gate");
    let file = c.path("mine.jsonl");
    std::fs::write(
        &file,
        format!("{}\n{}\n", gated_task("m1", &gate), gated_task("m2", &gate)),
    )
    .unwrap();
    let out = diffuse_with(&["submit", file.to_str().unwrap()], None, &env, DEADLINE);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let mut wait = Command::new(BIN);
    wait.arg("wait")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let waiting = wait.spawn().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    // The dispatcher dies, stays away a moment, and comes back on the same port.
    let port: u16 = c.url.rsplit(':').next().unwrap().parse().unwrap();
    let mut d = c.dispatcher.take().unwrap();
    let _ = d.child.kill();
    let _ = d.child.wait();
    c.extra.push(d);
    std::thread::sleep(Duration::from_secs(2));
    c.spawn_dispatcher_on(Some(port));
    c.wait_workers(1);
    std::fs::write(&gate, b"go").unwrap();
    let out = waiting.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("2 tasks: 2 succeeded, 0 failed"),
        "{stdout}"
    );
    assert!(
        stderr.contains("retrying"),
        "it rode out the restart: {stderr}"
    );
    // Nothing left to wait for now.
    let out = diffuse_with(&["wait"], None, &env, DEADLINE);
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains("nothing to wait for"), "{}", out.stderr);
    // --all counts everything the dispatcher knows, the old failure included.
    let out = diffuse_with(&["wait", "--all"], None, &env, DEADLINE);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
}

#[test]
fn wait_warns_when_no_worker_is_connected() {
    let c = Cluster::start(&[]);
    c.submit(&[json!({"id": "t", "cmd": "true"})]);
    let mut wait = Command::new(BIN);
    wait.args(["wait", "1"])
        .env("DIFFUSE_DISPATCHER", &c.url)
        .env("DIFFUSE_CLIENT_TOKEN", &c.client_token)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = wait.spawn().unwrap();
    std::thread::sleep(Duration::from_secs(8));
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no worker is connected"), "{err}");
    assert!(err.contains("waiting: 0/1 done"), "{err}");
}

// ----- item 8: large task files -----

#[test]
fn a_million_line_task_file_submits() {
    let c = Cluster::start(&[]);
    let file = c.path("million.jsonl");
    let mut text = String::with_capacity(30 << 20);
    for i in 0..1_000_000 {
        text.push_str(&format!("{{\"id\":\"t{i}\",\"cmd\":\"true\"}}\n"));
    }
    std::fs::write(&file, text).unwrap();
    let state = c.path("state");
    let out = diffuse_with(
        &["submit", file.to_str().unwrap()],
        None,
        &[
            ("DIFFUSE_DISPATCHER", &c.url),
            ("DIFFUSE_CLIENT_TOKEN", &c.client_token),
            ("XDG_STATE_HOME", state.to_str().unwrap()),
        ],
        Duration::from_secs(600),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .starts_with("submitted 1000000 tasks in batches 1-20"),
        "{}",
        out.stdout
    );
    assert_eq!(c.status()["submitted"], 1_000_000);
}

#[test]
fn a_submission_refused_half_way_says_which_lines_went_in() {
    let c = Cluster::start(&[]);
    c.submit(&[json!({"id": "taken", "cmd": "true"})]);
    let file = c.path("tasks.jsonl");
    let mut text = String::new();
    for i in 1..=60_000 {
        let id = if i == 55_000 {
            "taken".to_string()
        } else {
            format!("t{i}")
        };
        text.push_str(&format!("{{\"id\":\"{id}\",\"cmd\":\"true\"}}\n"));
    }
    std::fs::write(&file, text).unwrap();
    let state = c.path("state");
    let env = [
        ("DIFFUSE_DISPATCHER", c.url.as_str()),
        ("DIFFUSE_CLIENT_TOKEN", c.client_token.as_str()),
        ("XDG_STATE_HOME", state.to_str().unwrap()),
    ];
    let f = file.to_str().unwrap();
    let out = diffuse_with(&["submit", f], None, &env, Duration::from_secs(300));
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("lines 50001-60000 were refused")
            && out.stderr.contains("task 'taken' already exists")
            && out.stderr.contains("50000 tasks of lines 1-50000")
            && out.stderr.contains("--from-line 50001"),
        "{}",
        out.stderr
    );
    assert_eq!(c.status()["submitted"], 50_001);
    // A body over the limit gets a clear answer.
    let big = "x".repeat(65 << 20);
    let r = c
        .http
        .post(format!("{}/v1/tasks", c.url))
        .bearer_auth(&c.client_token)
        .body(big)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    let v: Value = r.json().unwrap();
    assert!(v["error"].as_str().unwrap().contains("over 64 MiB"), "{v}");
}

// ----- item 9: a source that never answers -----

#[test]
fn a_hung_http_input_fails_its_own_task_not_the_batch() {
    let mut c = Cluster::start_with(&[], &["--lookup-timeout", "2"], &[]);
    c.worker("A", 2, "10MB");
    c.wait_workers(1);
    let (port, _) = silent_server();
    let x = c.data("x", b"fine\n");
    let t0 = Instant::now();
    c.submit(&[
        cat_task("hung", &format!("http://127.0.0.1:{port}/never")),
        cat_task("ok", &file_uri(&x)),
    ]);
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    let (_, r) = c.wait_succeeded("ok");
    assert_eq!(stdout_of(&r), "fine\n");
    let t = c.wait_done("hung");
    assert_eq!(t["state"], "failed", "{t}");
    let err = t["outcome"]["error"].as_str().unwrap_or_default();
    assert!(err.contains("no answer from storage within 2s"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
}
