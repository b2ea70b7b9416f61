//! What users and their tools see: `/metrics` checked by Prometheus' own `promtool`, and
//! `diffuse tasks` listing tasks by state.

mod common;

use common::cluster::*;
use common::host::{is_root, skip};
use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};

fn promtool() -> Option<&'static str> {
    let found = Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    found.then_some("promtool")
}

#[test]
fn metrics_pass_promtool_and_histograms_count_every_attempt() {
    let Some(promtool) = promtool() else {
        // scripts/test.sh installs Debian's prometheus package (promtool) when it runs as root.
        assert!(
            !is_root(),
            "promtool is missing: scripts/test.sh installs it"
        );
        return skip("promtool is not installed");
    };
    let mut c = Cluster::start_with(
        &[],
        &[
            "--storage-bandwidth-cap",
            "1GB/s",
            "--prefetch",
            "--two-mark",
        ],
        &[],
    );
    c.worker("a", 2, "10MB");
    c.wait_workers(1);
    let f = file_uri(&c.data("f", b"some bytes\n"));
    c.submit(&[
        wc_task("a", &f),
        wc_task("b", &f),
        json!({"id": "c", "cmd": "exit 3"}),
    ]);
    c.wait_succeeded("a");
    c.wait_succeeded("b");
    c.wait_done("c");
    let text = c.metrics();
    for line in [
        "diffuse_task_run_seconds_count 3",
        "diffuse_task_staging_seconds_count 3",
        "diffuse_task_run_seconds_bucket{le=\"+Inf\"} 3",
        "# TYPE diffuse_task_run_seconds histogram",
        "diffuse_prefetches_total{event=\"issued\"}",
        "diffuse_two_mark_total{event=\"moved\"}",
        "diffuse_storage_cap_bytes_per_second 1000000000",
        // The worker's read of f from storage taught the predictor that link.
        "diffuse_link_predicted_bytes_per_second{from=\"storage\",to=\"a\"}",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    let mut check = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn diffuse_tasks_lists_by_state_as_a_table_and_as_json() {
    let mut c = Cluster::start(&[]);
    c.worker("w", 2, "10MB");
    c.wait_workers(1);
    c.submit(&[
        json!({"id": "ok1", "cmd": "true"}),
        json!({"id": "bad", "cmd": "echo oops >&2; exit 7"}),
        json!({"id": "ok2", "cmd": "true"}),
    ]);
    for id in ["ok1", "bad", "ok2"] {
        c.wait_done(id);
    }
    let run = |args: &[&str]| {
        let mut all = vec!["tasks", "--dispatcher", c.url.as_str()];
        all.extend_from_slice(args);
        diffuse_with(
            &all,
            None,
            &[("DIFFUSE_CLIENT_TOKEN", c.client_token.as_str())],
            DEADLINE,
        )
    };
    let out = run(&["--state", "failed", "--json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).expect("JSON");
    let ids: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["bad"]);
    assert_eq!(v[0]["outcome"]["exit_code"], 7, "{v}");
    let out = run(&[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "a header and three tasks:\n{}", out.stdout);
    assert!(
        lines[2].starts_with("bad")
            && lines[2].contains("failed")
            && lines[2].contains("exit code 7"),
        "{}",
        out.stdout
    );
    let out = run(&["--state", "nonsense"]);
    assert_eq!(out.code, Some(2), "a bad state is refused: {}", out.stderr);
}

/// `diffuse config`: a file's values, an environment variable over the file, the defaults; a
/// worker started from a file alone; a flag over the file; an unknown key refused.
#[test]
fn settings_come_from_flags_then_the_environment_then_the_file() {
    let mut c = Cluster::start(&[]);
    let dir = c.path("cfg");
    std::fs::create_dir_all(&dir).unwrap();
    let cache = c.path("cfg/cache");
    std::fs::write(
        dir.join("diffuse.toml"),
        format!(
            "[worker]\ndispatcher = \"{}\"\ncache-dir = \"{}\"\ncache_size = \"20MB\"\nname = \"from-file\"\ncores = 2\ninput-root = [\"/tmp\", \"{}\"]\n\n[dispatcher]\nwindow = 123\ntwo-mark = true\n",
            c.url,
            cache.display(),
            c.path("data").display()
        ),
    )
    .unwrap();
    let config = |section: &str, env: &[(&str, &str)]| -> Value {
        let out = common::run_diffuse(&["config", section, "--json"], Some(&dir), env, DEADLINE);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        serde_json::from_str(&out.stdout).expect("JSON")
    };
    let origin = |v: &Value, option: &str| -> (Value, Value) {
        let s = v["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["option"] == option)
            .unwrap_or_else(|| panic!("no {option} in {v}"))
            .clone();
        (s["values"].clone(), s["origin"].clone())
    };
    let w = config("worker", &[("DIFFUSE_WORKER_CORES", "3")]);
    assert_eq!(w["file"], "diffuse.toml");
    assert_eq!(
        origin(&w, "--cache-size"),
        (json!(["20MB"]), json!({"file": "diffuse.toml"}))
    );
    assert_eq!(
        origin(&w, "--cores"),
        (json!(["3"]), json!({"env": "DIFFUSE_WORKER_CORES"})),
        "the environment wins over the file"
    );
    assert_eq!(origin(&w, "--input-root").0.as_array().unwrap().len(), 2);
    assert_eq!(origin(&w, "--eviction"), (json!(["lru"]), json!("default")));
    let d = config("dispatcher", &[]);
    assert_eq!(origin(&d, "--window").0, json!(["123"]));
    assert_eq!(origin(&d, "--two-mark").0, json!(["true"]));

    // A worker from the file alone (its token from the environment), then a flag over it.
    for (args, name) in [
        (vec![], "from-file"),
        (vec!["--name", "from-flag"], "from-flag"),
    ] {
        let mut cmd = std::process::Command::new(common::BIN);
        cmd.arg("worker").args(&args).current_dir(&dir);
        c.envs(&mut cmd);
        let log = c.path(&format!("worker-{name}.log"));
        c.workers.push(Proc::spawn(name, &mut cmd, log));
        poll(&format!("worker {name} to connect"), || {
            let s = c.status();
            s["worker_list"]
                .as_array()
                .is_some_and(|l| l.iter().any(|w| w["name"] == name))
                .then_some(())
        });
        let w = c.workers.pop().unwrap();
        drop(w);
        c.wait_workers(0);
    }

    std::fs::write(dir.join("bad.toml"), "[worker]\ncache-sise = \"1GB\"\n").unwrap();
    let out = common::run_diffuse(
        &["worker", "--config", "bad.toml"],
        Some(&dir),
        &[],
        DEADLINE,
    );
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("bad.toml: [worker] unknown setting `cache-sise`"),
        "{}",
        out.stderr
    );
}
