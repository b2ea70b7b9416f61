//! The client commands read the dispatcher's answers as the types the dispatcher serializes
//! them from (`diffuse_runtime::dispatcher::answers`), so that an answer of another shape is an
//! error that names the route and the field, never a counter shown as 0 (issue 38, item 3).
//!
//! - against a stand-in that answers `/v1/status` and the task listing with a field renamed,
//!   as a dispatcher of another version would: `status`, `wait --all` and `tasks` fail and say
//!   which field is missing;
//! - against a real dispatcher: every command that reads an answer (`submit`, `status`,
//!   `status --failed`, `status --job`, `tasks`, `wait`, `locate`, `cancel`, `cancel --job`,
//!   `cache results`) succeeds and prints the real figures.

mod common;

use common::cluster::{diffuse_with, Cluster};
use diffuse_runtime::dispatcher::answers::{Status, TaskPage};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(60);

/// A stand-in dispatcher on a real socket: every request gets `200` and the body `route`
/// gives for its path. Serves until the test ends.
fn stand_in(route: fn(&str) -> String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut first = String::new();
                if reader.read_line(&mut first).is_err() {
                    return;
                }
                // The headers, up to the blank line (the requests here have no body).
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let path = first.split_whitespace().nth(1).unwrap_or("/").to_string();
                let body = route(&path);
                let mut conn = conn;
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    url
}

/// A real status with `queued` renamed to `waiting`, and a page of tasks whose `state` is
/// called `phase`: what a dispatcher of another version could send.
fn renamed(path: &str) -> String {
    if path.starts_with("/v1/status") {
        let status = Status {
            queued: 5,
            ..Status::default()
        };
        let mut v = serde_json::to_value(&status).unwrap();
        let queued = v.as_object_mut().unwrap().remove("queued").unwrap();
        v["waiting"] = queued;
        v.to_string()
    } else if path.starts_with("/v1/tasks") {
        json!({"tasks": [{"id": "t1", "phase": "queued", "batch": 1, "node": null,
                          "attempt": 0, "outcome": null}], "next": null})
        .to_string()
    } else {
        "{}".into()
    }
}

#[test]
fn an_answer_with_a_field_renamed_is_an_error_naming_it() {
    let url = stand_in(renamed);
    let env = [("DIFFUSE_CLIENT_TOKEN", "a-client-token")];
    for (args, route, field) in [
        (vec!["status"], "GET /v1/status", "queued"),
        (vec!["status", "--json"], "GET /v1/status", "queued"),
        (vec!["wait", "--all"], "GET /v1/status", "queued"),
        (vec!["tasks"], "GET /v1/tasks", "state"),
    ] {
        let mut all = args.clone();
        all.extend(["--dispatcher", url.as_str()]);
        let out = diffuse_with(&all, None, &env, DEADLINE);
        assert_eq!(
            out.code,
            Some(1),
            "diffuse {args:?} must fail, not print zeros:\n{}{}",
            out.stdout,
            out.stderr
        );
        assert!(
            out.stderr.contains(route) && out.stderr.contains(&format!("missing field `{field}`")),
            "diffuse {args:?} names the route and the field: {}",
            out.stderr
        );
        assert!(
            !out.stdout.contains("queued 0"),
            "nothing shown as 0: {}",
            out.stdout
        );
    }
}

#[test]
fn every_answer_of_a_real_dispatcher_is_read() {
    let mut c = Cluster::start(&[]);
    c.worker("w", 2, "10MB");
    c.wait_workers(1);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "three\nlines\nhere\n").unwrap();
    let tasks = dir.path().join("tasks.jsonl");
    let uri = common::cluster::file_uri(&input);
    let lines = [
        json!({"id": "ok", "cmd": "wc -l < {inputs[0]}", "inputs": [uri], "job": "j"}),
        json!({"id": "bad", "cmd": "echo oops >&2; exit 7", "job": "j"}),
        json!({"id": "slow", "cmd": "sleep 600", "job": "k"}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&tasks, text).unwrap();
    let state = tempfile::tempdir().unwrap();
    let env = [
        ("DIFFUSE_CLIENT_TOKEN", c.client_token.as_str()),
        ("XDG_STATE_HOME", state.path().to_str().unwrap()),
    ];
    let run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--dispatcher", c.url.as_str()]);
        let out = diffuse_with(&all, None, &env, DEADLINE);
        assert!(
            out.stderr
                .lines()
                .all(|l| !l.contains("is not what this diffuse")),
            "diffuse {args:?}: {}",
            out.stderr
        );
        out
    };
    let out = run(&["submit", tasks.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.starts_with("submitted 3 tasks in batch "),
        "{}",
        out.stdout
    );
    c.wait_done("ok");
    c.wait_done("bad");
    common::cluster::poll("the slow task to run", || {
        let out = run(&["status", "--json"]);
        let s: Status = serde_json::from_str(&out.stdout).ok()?;
        (s.running == 1 && s.busy_slots == 1).then_some(())
    });
    let out = run(&["status"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.starts_with(
            "queued 0  running 1  succeeded 1  failed 1  cancelled 0  workers 1 (2 slots, 1 busy)"
        ),
        "{}",
        out.stdout
    );
    let out = run(&["status", "--json"]);
    let status: Status = serde_json::from_str(&out.stdout).expect("status --json is a Status");
    assert_eq!((status.succeeded, status.failed, status.running), (1, 1, 1));
    let out = run(&["status", "--failed"]);
    assert!(
        out.stdout.starts_with("bad: exit code 7 (on w, attempt 1)")
            && out.stdout.contains("| oops"),
        "{}",
        out.stdout
    );
    let out = run(&["tasks", "--json"]);
    let page: Vec<Value> = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(page.len(), 3, "{}", out.stdout);
    let _: TaskPage = serde_json::from_value(json!({"tasks": page, "next": null}))
        .expect("tasks --json prints task views");
    let out = run(&["status", "--job", "j"]);
    assert_eq!(
        out.stdout.trim(),
        "job j: 2 tasks; queued 0, running 0, succeeded 1, failed 1, cancelled 0"
    );
    let out = run(&["locate", &uri]);
    assert_eq!(out.stdout.trim(), format!("{uri}: cached on w"));
    let out = run(&["cancel", "--job", "k"]);
    assert_eq!(
        out.stdout.trim(),
        "job k: 0 cancelled, 1 running being stopped, 0 had already ended"
    );
    let out = run(&["wait", "--json"]);
    let p: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (&p["tasks"], &p["succeeded"], &p["failed"], &p["cancelled"]),
        (&json!(3), &json!(1), &json!(1), &json!(1)),
        "{p}"
    );
    assert_eq!(p["failed_ids"], json!(["bad"]), "{p}");
    let out = run(&["cancel", "ok"]);
    assert_eq!(out.code, Some(1), "an ended task: {}", out.stderr);
    let out = run(&["cache", "results"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("0 results kept") && out.stdout.contains("tasks reused since"),
        "{}",
        out.stdout
    );
}
