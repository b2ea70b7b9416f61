//! What a task, a client or a stranger on the network can and cannot do (docs/security.md):
//! tasks see no token, cannot read their worker's memory, environment or token file; idle
//! connections cannot lock clients out; the dispatcher reads no storage for clients; input roots
//! confine file inputs; a metrics token reads counters only. Real processes and sockets; the
//! tests that need root (another user, resource limits) say so when they cannot run.

mod common;

use common::cluster::*;
use common::host::{is_root, read_or_closed, silent_server, skip, HttpServer};
use serde_json::{json, Value};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn stdout_and_stderr(r: &Value) -> String {
    let read = |k: &str| {
        r[k].as_str()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    };
    format!("{}{}", read("stdout"), read("stderr"))
}

// ----- item 1: tasks cannot take the worker's token -----

#[test]
fn a_task_sees_no_token_in_its_environment() {
    let mut c = Cluster::start(&[("DIFFUSE_EXTRA_SECRET", "s3cr3t-value")]);
    c.worker("A", 1, "10MB");
    c.wait_workers(1);
    c.submit(&[json!({"id": "env", "cmd": "env"})]);
    let (_, r) = c.wait_succeeded("env");
    let env = stdout_of(&r);
    assert!(env.contains("PATH="), "the environment is passed: {env}");
    for secret in [
        c.worker_token.as_str(),
        c.client_token.as_str(),
        "s3cr3t-value",
    ] {
        assert!(!env.contains(secret), "a secret reached the task:\n{env}");
    }
    // Only the variables the worker sets for each task start with DIFFUSE_.
    let mut ours: Vec<&str> = env
        .lines()
        .filter(|l| l.starts_with("DIFFUSE_"))
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    ours.sort_unstable();
    assert_eq!(
        ours,
        [
            "DIFFUSE_ATTEMPT",
            "DIFFUSE_CORES",
            "DIFFUSE_NODE",
            "DIFFUSE_TASK_DIR",
            "DIFFUSE_TASK_ID"
        ],
        "{env}"
    );
}

/// The worker runs as an ordinary user (nobody), like its tasks: they must not read its
/// environment or memory through /proc.
#[test]
fn a_task_of_the_same_user_cannot_read_its_workers_environment() {
    if !is_root() {
        return skip("needs root to start the worker as another user");
    }
    let mut c = Cluster::start(&[]);
    // nobody must reach the binary and its cache directory.
    std::fs::set_permissions(c.path(""), std::fs::Permissions::from_mode(0o777)).unwrap();
    let (cmd, _) = c.worker_cmd("A", 1, "10MB");
    let mut as_nobody = Command::new("setpriv");
    as_nobody
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    c.envs(&mut as_nobody);
    let log = c.path("worker-nobody.log");
    c.workers
        .push(Proc::spawn("worker A (nobody)", &mut as_nobody, log));
    c.wait_workers(1);
    c.submit(&[json!({
        "id": "peek",
        "cmd": "id -u; cat /proc/$PPID/environ | tr '\\0' '\\n'; cat /proc/$PPID/cmdline; head -c 100 /proc/$PPID/mem; echo done"
    })]);
    let t = c.wait_done("peek");
    let r = report(&t);
    let seen = stdout_and_stderr(&r);
    assert!(
        seen.starts_with("65534\n"),
        "the task ran as nobody: {seen}"
    );
    assert!(seen.contains("done"), "{seen}");
    assert!(
        !seen.contains(&c.worker_token),
        "the task read the worker token through /proc:\n{seen}"
    );
    assert!(seen.contains("Permission denied"), "{seen}");
}

/// A worker started as root with `--task-user` runs tasks as that user: its token file, its
/// cache and root-only files are out of their reach, as inputs and as outputs.
#[test]
fn with_a_task_user_tasks_cannot_read_the_token_file_or_root_only_files() {
    if !is_root() {
        return skip("--task-user needs root");
    }
    let mut c = Cluster::start(&[]);
    let token_file = c.path("worker.token");
    std::fs::write(&token_file, &c.worker_token).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(c.path(""), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = c.path("data");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let public = c.data("public.txt", b"for everyone\n");
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o644)).unwrap();
    let private = c.data("private.txt", b"root only\n");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    let closed = c.path("closed");
    std::fs::create_dir(&closed).unwrap();
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o755)).unwrap();
    let open = c.path("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();

    let (mut cmd, _) = c.worker_cmd("A", 2, "10MB");
    cmd.args(["--task-user", "nobody"])
        .arg("--token-file")
        .arg(&token_file)
        .env_remove("DIFFUSE_WORKER_TOKEN");
    let log = c.path("worker-A.log");
    c.workers.push(Proc::spawn("worker A", &mut cmd, log));
    c.wait_workers(1);
    let cache = c.path("wA");
    c.submit(&[
        json!({"id": "who", "cmd": format!(
            "id -u; cat {} ; ls {}/objects; cat {{inputs[0]}}; echo done",
            token_file.display(), cache.display()), "inputs": [file_uri(&public)]}),
        json!({"id": "private-in", "cmd": "cat {inputs[0]}", "inputs": [file_uri(&private)]}),
        json!({"id": "private-out", "cmd": "echo x > {outputs[0]}",
               "outputs": [file_uri(&closed.join("o.txt"))]}),
        json!({"id": "link-out", "cmd": format!("ln -s {} {{outputs[0]}}", private.display()),
               "outputs": [file_uri(&open.join("leak.txt"))]}),
        json!({"id": "open-out", "cmd": "echo fine > {outputs[0]}",
               "outputs": [file_uri(&open.join("ok.txt"))]}),
    ]);
    let t = c.wait_done("who");
    let seen = stdout_and_stderr(&report(&t));
    assert!(seen.starts_with("65534\n"), "{seen}");
    assert!(
        seen.contains("for everyone") && seen.contains("done"),
        "{seen}"
    );
    assert!(
        !seen.contains(&c.worker_token),
        "the token file was read:\n{seen}"
    );
    assert!(seen.matches("Permission denied").count() >= 2, "{seen}");

    let t = c.wait_done("private-in");
    assert_eq!(t["state"], "failed", "{t}");
    let err = t["outcome"]["error"].as_str().unwrap_or_default();
    assert!(
        err.contains("not readable by the task user 'nobody'"),
        "{t}"
    );
    for (id, why) in [
        ("private-out", "not writable by the task user"),
        ("link-out", "not a regular file"),
    ] {
        let t = c.wait_done(id);
        assert_eq!(t["state"], "failed", "{t}");
        let err = t["outcome"]["error"].as_str().unwrap_or_default();
        assert!(err.contains(why), "{id}: {t}");
    }
    assert!(!open.join("leak.txt").exists());
    assert!(!closed.join("o.txt").exists());
    c.wait_succeeded("open-out");
    assert_eq!(
        std::fs::read_to_string(open.join("ok.txt")).unwrap(),
        "fine\n"
    );
}

#[test]
fn a_worker_refuses_a_task_user_unless_it_runs_as_root() {
    if is_root() {
        // As root the flag is accepted; the refusal is what non-root users see. Show it by
        // dropping to nobody.
        let c = Cluster::start(&[]);
        std::fs::set_permissions(c.path(""), std::fs::Permissions::from_mode(0o777)).unwrap();
        let (cmd, _) = c.worker_cmd("A", 1, "1MB");
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(cmd.get_program())
            .args(cmd.get_args())
            .args(["--task-user", "daemon"])
            .env("DIFFUSE_WORKER_TOKEN", &c.worker_token)
            .output()
            .expect("run the worker");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--task-user needs the worker to run as root"),
            "{err}"
        );
    }
    let out = diffuse_with(
        &[
            "worker",
            "--cache-dir",
            "/tmp/x",
            "--cache-size",
            "1MB",
            "--task-user",
            "root",
        ],
        None,
        &[("DIFFUSE_WORKER_TOKEN", "w")],
        DEADLINE,
    );
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr.contains("--task-user must not be root"),
        "{}",
        out.stderr
    );
}

// ----- item 2: idle connections -----

#[test]
fn idle_connections_are_closed_and_do_not_lock_clients_out() {
    if !is_root()
        && rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum < Some(2000)
    {
        return skip("needs an open-files limit of 2000 for the test's own connections");
    }
    // This process holds 1,100 connections.
    let mut limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    limit.current = limit.maximum;
    let _ = rustix::process::setrlimit(rustix::process::Resource::Nofile, limit);
    // The dispatcher may have 1,024 files at most (soft and hard).
    let c = Cluster::start_with(
        &[],
        &["--header-timeout", "2"],
        &["prlimit", "--nofile=1024:1024", "--"],
    );
    let addr = c.url.trim_start_matches("http://").to_string();
    let mut idle = Vec::new();
    for _ in 0..1100 {
        if let Ok(s) = TcpStream::connect(&addr) {
            idle.push(s);
        }
    }
    assert!(idle.len() >= 1000, "opened {}", idle.len());
    // A client gets in within seconds: idle connections are closed after the header timeout.
    let start = Instant::now();
    poll(
        "a client to be served while 1,100 idle connections are open",
        || {
            let r = c
                .http
                .get(format!("{}/v1/status", c.url))
                .bearer_auth(&c.client_token)
                .timeout(Duration::from_secs(2))
                .send();
            r.ok().filter(|r| r.status().is_success()).map(|_| ())
        },
    );
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    // Every idle connection was closed by the server.
    std::thread::sleep(Duration::from_secs(3));
    let mut closed = 0;
    for s in &mut idle {
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        if read_or_closed(s).is_none() {
            closed += 1;
        }
    }
    assert_eq!(closed, idle.len(), "idle connections still open");
    drop(idle);
    // The dispatcher raised its soft limit to the hard one: seen under a soft limit below it.
    let c2 = Cluster::start_with(&[], &[], &["prlimit", "--nofile=512:4096", "--"]);
    let pid = c2.dispatcher.as_ref().unwrap().child.id();
    let pids =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    let dispatcher_pid = pids
        .split_whitespace()
        .next()
        .map_or(pid.to_string(), String::from);
    let limits = std::fs::read_to_string(format!("/proc/{dispatcher_pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    assert!(
        line.split_whitespace().filter(|w| *w == "4096").count() == 2,
        "soft limit not raised: {line}"
    );
}

// ----- item 3: the trust model -----

#[test]
fn the_dispatcher_reads_no_file_and_sends_no_request_for_clients() {
    let c = Cluster::start(&[]);
    let http = HttpServer::start(|_| (200, b"internal".to_vec()));
    // No worker: nothing may look these up.
    c.submit(&[
        json!({"id": "shadow", "cmd": "true", "inputs": ["file:///etc/shadow"]}),
        json!({"id": "missing", "cmd": "true", "inputs": ["file:///no/such/file"]}),
        json!({"id": "internal", "cmd": "true", "inputs": [http.url("/admin")]}),
    ]);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        http.connections.load(Ordering::SeqCst),
        0,
        "the dispatcher sent a request on a client's behalf"
    );
    // An existing and a missing file look the same to the client until a worker reads them.
    for id in ["shadow", "missing", "internal"] {
        assert_eq!(c.task(id)["state"], "queued", "{id}");
    }
    let s = c.status();
    assert_eq!(s["looking_up"], 3, "{s}");
}

#[test]
fn input_roots_confine_file_inputs() {
    let mut c = Cluster::start(&[]);
    let root = c.path("data");
    let inside = c.data("in.txt", b"inside\n");
    std::os::unix::fs::symlink("/etc/passwd", root.join("link")).unwrap();
    let (mut cmd, _) = c.worker_cmd("A", 2, "10MB");
    cmd.arg("--input-root").arg(&root);
    let log = c.path("worker-A.log");
    c.workers.push(Proc::spawn("worker A", &mut cmd, log));
    c.wait_workers(1);
    c.submit(&[
        cat_task("in", &file_uri(&inside)),
        cat_task("passwd", "file:///etc/passwd"),
        cat_task(
            "dotdot",
            &format!("file://{}/../../../../etc/passwd", root.display()),
        ),
        cat_task("link", &file_uri(&root.join("link"))),
        cat_task("nowhere", "file:///no/such/dir/f"),
    ]);
    let (_, r) = c.wait_succeeded("in");
    assert_eq!(stdout_of(&r), "inside\n");
    for id in ["passwd", "dotdot", "link", "nowhere"] {
        let t = c.wait_done(id);
        assert_eq!(t["state"], "failed", "{t}");
        let err = t["outcome"]["error"].as_str().unwrap_or_default();
        assert!(err.contains("outside the input roots"), "{id}: {err}");
        assert!(!err.contains("root:"), "{id}: {err}");
    }
}

#[test]
fn a_metrics_token_reads_counters_and_nothing_else() {
    let metrics = random_token();
    let mut c = Cluster::start(&[("DIFFUSE_METRICS_TOKEN", &metrics)]);
    let get = |path: &str, token: &str| {
        c.http
            .get(format!("{}{path}", c.url))
            .bearer_auth(token)
            .send()
            .expect("GET")
            .status()
            .as_u16()
    };
    assert_eq!(get("/metrics", &metrics), 200);
    assert_eq!(get("/v1/status", &metrics), 200);
    assert_eq!(get("/metrics", &c.client_token), 200);
    for path in [
        "/v1/tasks",
        "/v1/tasks/x",
        "/v1/locate?uri=file:///x",
        "/v1/batches/1",
    ] {
        assert_eq!(get(path, &metrics), 401, "{path}");
    }
    let (code, _) = c.post_tasks("{\"id\":\"a\",\"cmd\":\"true\"}", Some(&metrics));
    assert_eq!(code, 401);
    // Nor can it join as a worker.
    c.worker_token = metrics.clone();
    c.worker("W", 1, "1MB");
    let log = poll("the worker to be refused", || {
        let w = &mut c.workers[0];
        w.exited().map(|_| w.log_text())
    });
    assert!(log.contains("401"), "{log}");
    // Tokens must differ.
    let out = diffuse_with(
        &[
            "dispatcher",
            "--listen",
            "127.0.0.1:0",
            "--journal",
            c.path("j2.sqlite").to_str().unwrap(),
        ],
        None,
        &[
            ("DIFFUSE_CLIENT_TOKEN", "same"),
            ("DIFFUSE_WORKER_TOKEN", "other"),
            ("DIFFUSE_METRICS_TOKEN", "same"),
        ],
        DEADLINE,
    );
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains("must differ"), "{}", out.stderr);
}

// ----- a silent source does not block the dispatcher (item 9 is in correctness.rs) -----

#[test]
fn a_silent_source_is_never_contacted_by_the_dispatcher() {
    let c = Cluster::start(&[]);
    let (port, contacted) = silent_server();
    let t0 = Instant::now();
    c.submit(&[
        json!({"id": "s", "cmd": "true", "inputs": [format!("http://127.0.0.1:{port}/x")]}),
    ]);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(contacted.load(Ordering::SeqCst), 0);
}
