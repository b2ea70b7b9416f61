//! TLS, live: a dispatcher and workers serving with a certificate from a CA made in the test
//! (`common::pki`, with `rcgen`), clients and workers trusting that CA with `--tls-ca`. Tasks
//! run, one worker reads another's cache over TLS, and every client command works; a client or
//! worker that does not trust the CA, plain HTTP on the TLS port, and bad certificate files are
//! refused with a message that names the file or the peer, and never shows key material.

mod common;

use common::cluster::{diffuse_with, gated_task, http, poll, report, traffic, Cluster, DEADLINE};
use common::pki::Pki;
use common::Output;
use rustix::process::Signal;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn strict(node: &str) -> Value {
    json!({"node": node, "strict": true})
}

/// The port of a URL `scheme://host:port`.
fn port_of(url: &str) -> &str {
    url.rsplit(':').next().expect("a port")
}

#[track_caller]
fn ok(out: &Output, what: &str) {
    assert_eq!(out.code, Some(0), "{what}: {}\n{}", out.stdout, out.stderr);
}

/// `out` failed (exit code 1), and its stderr holds every one of `needles`.
#[track_caller]
fn refused(out: &Output, needles: &[&str]) {
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    for n in needles {
        assert!(
            out.stderr.contains(n),
            "stderr lacks {n:?}:\n{}",
            out.stderr
        );
    }
}

#[test]
fn a_tls_cluster_runs_tasks_reads_a_peer_over_tls_and_every_client_command_trusts_its_ca() {
    let mut c = Cluster::start_tls(&[], &[], Pki::new());
    let peer_a = c.worker("A", 3, "50MB");
    c.worker("B", 2, "50MB");
    c.wait_workers(2);
    let ca = c.tls.as_ref().expect("TLS").ca.display().to_string();

    // A peer data server serves TLS: an unknown object is 404 to the worker token, and plain
    // HTTP gets nothing but the advice to use https.
    assert!(peer_a.starts_with("https://127.0.0.1:"), "{peer_a}");
    let key = "0".repeat(64);
    let r = c
        .http
        .get(format!("{peer_a}/v1/cache/{key}"))
        .bearer_auth(&c.worker_token)
        .send()
        .expect("peer over TLS");
    assert_eq!(r.status().as_u16(), 404);
    let plain = peer_a.replacen("https://", "http://", 1);
    let r = http()
        .get(format!("{plain}/v1/cache/{key}"))
        .bearer_auth(&c.worker_token)
        .send()
        .expect("an answer in plain HTTP");
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().unwrap().contains("takes TLS only"));

    // `make` writes tmp://numbers on A; `use` must run on B, so it reads A's copy: a peer
    // transfer over TLS. `late` waits for `gate` and is placed on B with `diffuse place`;
    // `doomed` is cancelled with `diffuse cancel`. The gated tasks hold slots of A only.
    let gate = c.path("gate");
    let on_a = |mut t: Value| {
        t["hint"] = strict("A");
        t
    };
    let tasks = [
        json!({"id": "make", "cmd": "seq 1 20000 > {outputs[0]}", "outputs": ["tmp://numbers"], "hint": strict("A")}),
        json!({"id": "use", "cmd": "sha256sum < {inputs[0]}", "inputs": ["tmp://numbers"], "hint": strict("B")}),
        on_a(gated_task("gate", &gate)),
        json!({"id": "late", "cmd": "echo late > {outputs[0]}", "outputs": ["tmp://late"], "after": ["gate"]}),
        json!({"id": "read-late", "cmd": "cat {inputs[0]}", "inputs": ["tmp://late"]}),
        on_a(gated_task("doomed", &c.path("never"))),
    ];
    let file = c.path("tasks.jsonl");
    let text: String = tasks.iter().map(|t| format!("{t}\n")).collect();
    std::fs::write(&file, text).expect("task file");
    let state = c.path("state");
    let env = [
        ("DIFFUSE_CLIENT_TOKEN", c.client_token.as_str()),
        ("XDG_STATE_HOME", state.to_str().expect("utf-8")),
    ];
    let cli = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--dispatcher", &c.url, "--tls-ca", &ca]);
        diffuse_with(&all, None, &env, DEADLINE)
    };

    let out = cli(&["submit", file.to_str().expect("utf-8")]);
    ok(&out, "submit");
    assert!(
        out.stdout.starts_with("submitted 6 tasks"),
        "{}",
        out.stdout
    );

    let (t, r) = c.wait_succeeded("use");
    assert_eq!(t["node"], "B", "{t}");
    let [local, peer, storage, _, bytes_peer, _] = traffic(&r["traffic"]);
    assert_eq!((local, peer, storage), (0, 1, 0), "use read A's copy: {r}");
    let seq: String = (1..=20000).map(|i| format!("{i}\n")).collect();
    assert_eq!(bytes_peer, seq.len() as u64, "{r}");

    // `diffuse logs`: the dispatcher fetches it from B's peer server, over TLS.
    let out = cli(&["logs", "use"]);
    ok(&out, "logs");
    let digest = out.stdout.split_whitespace().next().unwrap_or_default();
    assert_eq!(digest.len(), 64, "{}", out.stdout);
    let (made, _) = c.wait_succeeded("make");
    assert_eq!(made["node"], "A", "{made}");

    let out = cli(&["locate", "tmp://late"]);
    ok(&out, "locate");
    assert!(
        out.stdout.starts_with("tmp://late: pending"),
        "{}",
        out.stdout
    );
    let out = cli(&["place", "tmp://late", "B"]);
    ok(&out, "place");
    let out = cli(&["cancel", "doomed"]);
    ok(&out, "cancel");
    assert!(out.stdout.starts_with("doomed: "), "{}", out.stdout);

    std::fs::write(&gate, b"").expect("open the gate");
    // `diffuse wait` with the CA and the dispatcher from the environment: `doomed` was
    // cancelled, so it exits 1.
    let env_wait = [
        ("DIFFUSE_CLIENT_TOKEN", c.client_token.as_str()),
        ("XDG_STATE_HOME", state.to_str().expect("utf-8")),
        ("DIFFUSE_DISPATCHER", c.url.as_str()),
        ("DIFFUSE_TLS_CA", ca.as_str()),
    ];
    let out = diffuse_with(&["wait"], None, &env_wait, DEADLINE);
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("6 tasks: 5 succeeded, 0 failed, 1 cancelled"),
        "{}",
        out.stdout
    );
    let late = c.task("late");
    assert_eq!(late["node"], "B", "placed on B: {late}");

    let out = cli(&["status"]);
    ok(&out, "status");
    assert!(out.stdout.contains("succeeded 5"), "{}", out.stdout);
    let out = cli(&["tasks", "--state", "succeeded", "--json"]);
    ok(&out, "tasks");
    let listed: Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(listed.as_array().map(Vec::len), Some(5), "{listed}");
    assert!(c.metrics().contains("diffuse_tasks{state=\"succeeded\"} 5"));
}

#[test]
fn without_the_ca_clients_and_workers_are_refused_and_plain_http_is_not_served() {
    let c = Cluster::start_tls(&[], &[], Pki::new());
    let pki = c.tls.as_ref().expect("TLS");
    let port = port_of(&c.url);
    let plain = format!("http://127.0.0.1:{port}");
    let env = [("DIFFUSE_CLIENT_TOKEN", c.client_token.as_str())];
    let deadline = Duration::from_secs(30);

    // A client that does not trust the CA: refused, saying why and what to do.
    let out = diffuse_with(&["status", "--dispatcher", &c.url], None, &env, deadline);
    refused(&out, &[&c.url, "not trusted", "--tls-ca"]);
    let other = pki.other_ca.display().to_string();
    let out = diffuse_with(
        &["status", "--dispatcher", &c.url, "--tls-ca", &other],
        None,
        &env,
        deadline,
    );
    refused(&out, &["not trusted"]);
    // `diffuse wait` retries an unreachable dispatcher for 600 s, but not an untrusted one.
    let start = Instant::now();
    let out = diffuse_with(
        &["wait", "--all", "--dispatcher", &c.url],
        None,
        &env,
        deadline,
    );
    refused(&out, &["not trusted"]);
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );

    // Plain HTTP on the TLS port: not served, and told to use https://.
    let out = diffuse_with(&["status", "--dispatcher", &plain], None, &env, deadline);
    refused(
        &out,
        &["takes TLS only", &format!("use https://127.0.0.1:{port}")],
    );
    let r = http()
        .get(format!("{plain}/v1/status"))
        .bearer_auth(&c.client_token)
        .send()
        .expect("an answer in plain HTTP");
    assert_eq!(r.status().as_u16(), 400);
    let body: Value = r.json().expect("JSON");
    assert!(body.get("queued").is_none(), "served in clear: {body}");

    // A worker that does not trust the CA, and one that speaks plain HTTP to the TLS port:
    // each exits at once (no retrying for --reconnect-timeout), naming the dispatcher and why.
    for (url, why) in [
        (c.url.as_str(), "not trusted"),
        (plain.as_str(), "takes TLS only"),
    ] {
        let dir = c.path(&format!("w-{}", url.len()));
        let start = Instant::now();
        let out = diffuse_with(
            &[
                "worker",
                "--dispatcher",
                url,
                "--cache-dir",
                dir.to_str().expect("utf-8"),
                "--cache-size",
                "10MB",
                "--listen",
                "127.0.0.1:0",
            ],
            None,
            &[("DIFFUSE_WORKER_TOKEN", c.worker_token.as_str())],
            deadline,
        );
        assert_ne!(out.code, Some(0), "{}", out.stderr);
        for n in [&format!("cannot connect to the dispatcher at {url}"), why] {
            assert!(
                out.stderr.contains(n),
                "stderr lacks {n:?}:\n{}",
                out.stderr
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            start.elapsed()
        );
    }
    assert_eq!(c.status()["workers"], 0);
    let log = c.dispatcher.as_ref().expect("dispatcher").log_text();
    assert!(!log.contains(&pki.key_material()), "the key is in the log");
    assert!(!log.contains(&c.client_token) && !log.contains(&c.worker_token));
}

#[test]
fn bad_certificate_files_are_refused_naming_the_file_and_showing_no_key() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("journal.sqlite");
    let s = |p: &std::path::Path| p.display().to_string();
    let (cert, key, ca) = (s(&pki.cert), s(&pki.key), s(&pki.ca));
    let missing = s(&pki.path("missing.pem"));
    let other_key = s(&pki.other_key);
    // A key readable by others is warned about (and here a missing certificate stops it).
    let open_key = pki.path("open-key.pem");
    std::fs::copy(&pki.key, &open_key).expect("copy");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&open_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let open_key = s(&open_key);
    let env = [
        ("DIFFUSE_CLIENT_TOKEN", "client-token-for-this-test"),
        ("DIFFUSE_WORKER_TOKEN", "worker-token-for-this-test"),
    ];
    let dispatcher = |tls: &[&str]| {
        let mut args = vec![
            "dispatcher",
            "--listen",
            "127.0.0.1:0",
            "--journal",
            journal.to_str().unwrap(),
        ];
        args.extend_from_slice(tls);
        diffuse_with(&args, None, &env, Duration::from_secs(30))
    };
    let cases: [(Vec<&str>, Vec<String>); 5] = [
        (
            vec!["--tls-cert", &missing, "--tls-key", &key],
            vec![format!(
                "--tls-cert/--tls-key: cannot read the TLS certificate {missing}"
            )],
        ),
        (
            vec!["--tls-cert", &cert, "--tls-key", &other_key],
            vec![format!(
                "the TLS key {other_key} does not match the certificate {cert}"
            )],
        ),
        (
            vec!["--tls-cert", &key, "--tls-key", &key],
            vec![format!("the TLS certificate {key} holds no certificate")],
        ),
        (
            vec!["--tls-cert", &missing, "--tls-key", &open_key],
            vec![
                format!("warning: {open_key} is readable by other users"),
                missing.clone(),
            ],
        ),
        (
            vec!["--tls-cert", &cert, "--tls-key", &key, "--tls-ca", &missing],
            vec![format!("--tls-ca: cannot read the TLS CA file {missing}")],
        ),
    ];
    for (flags, needles) in &cases {
        let out = dispatcher(flags);
        assert_eq!(out.code, Some(1), "{flags:?}: {}", out.stderr);
        for n in needles {
            assert!(
                out.stderr.contains(n),
                "{flags:?}: stderr lacks {n:?}:\n{}",
                out.stderr
            );
        }
        assert!(!out.stderr.contains(&pki.key_material()), "{}", out.stderr);
    }
    // Both or neither.
    let out = dispatcher(&["--tls-cert", &cert]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--tls-key"), "{}", out.stderr);

    // A worker's and a client's CA file.
    let cache = s(&dir.path().join("cache"));
    let out = diffuse_with(
        &[
            "worker",
            "--dispatcher",
            "https://127.0.0.1:9",
            "--cache-dir",
            &cache,
            "--cache-size",
            "10MB",
            "--tls-ca",
            &missing,
        ],
        None,
        &env,
        Duration::from_secs(30),
    );
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr
            .contains(&format!("--tls-ca: cannot read the TLS CA file {missing}")),
        "{}",
        out.stderr
    );
    for args in [
        vec![
            "status",
            "--dispatcher",
            "https://127.0.0.1:9",
            "--tls-ca",
            &missing,
        ],
        vec!["status", "--dispatcher", "https://127.0.0.1:9"],
    ] {
        let mut env = env.to_vec();
        env.push(("DIFFUSE_TLS_CA", &missing));
        let out = diffuse_with(&args, None, &env, Duration::from_secs(30));
        refused(
            &out,
            &[&format!(
                "--tls-ca/DIFFUSE_TLS_CA: cannot read the TLS CA file {missing}"
            )],
        );
    }
    // The CA file given as a key: refused as holding no key.
    let out = dispatcher(&["--tls-cert", &cert, "--tls-key", &ca]);
    assert!(
        out.stderr
            .contains(&format!("the TLS key {ca} holds no private key")),
        "{}",
        out.stderr
    );
}

#[test]
fn workers_of_an_elastic_pool_inherit_the_tls_settings() {
    let pool = [
        "--provisioner",
        "local",
        "--max-workers",
        "1",
        "--worker-cores",
        "2",
        "--worker-cache-size",
        "50MB",
        "--idle-release",
        "60s",
    ];
    let mut c = Cluster::start_tls(&[], &pool, Pki::new());
    c.submit(&[
        json!({"id": "make", "cmd": "echo made > {outputs[0]}", "outputs": ["tmp://made"]}),
        json!({"id": "show", "cmd": "cat {inputs[0]}", "inputs": ["tmp://made"]}),
    ]);
    // The pool's worker connected over wss:// trusting the inherited CA, and its peer server
    // serves TLS with the inherited certificate: the dispatcher fetches its logs over https.
    let (_, r) = c.wait_succeeded("show");
    assert_eq!(r["exit_code"], 0, "{r}");
    let t = c.task("show");
    assert!(
        t["node"].as_str().is_some_and(|n| n.starts_with("dfs-")),
        "{t}"
    );
    let logs = c
        .http
        .get(format!("{}/v1/tasks/show/logs", c.url))
        .bearer_auth(&c.client_token)
        .send()
        .expect("logs");
    let code = logs.status();
    assert_eq!(logs.text().expect("text"), "made\n", "{code}");
    assert!(report(&t)["stdout"].is_string());
    let log = c.dispatcher.as_ref().expect("dispatcher").log_text();
    assert!(
        log.contains("peer=https://127.0.0.1:"),
        "the pool's worker advertises an https:// peer server:\n{log}"
    );

    // SIGTERM: the dispatcher gives its worker back before it exits.
    let d = c.dispatcher.as_mut().expect("dispatcher");
    common::send_signal(d.child.id(), false, Signal::TERM);
    poll("the dispatcher to stop", || d.exited());
}
