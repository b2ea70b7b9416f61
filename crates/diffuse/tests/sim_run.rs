//! `diffuse sim run TASKS --testbed FILE`: a task file as `diffuse run` takes it, simulated on a
//! cluster described in a file; the presets are such files; bad files are refused, named.

mod common;

use common::run_diffuse;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn sim(args: &[&str]) -> common::Output {
    let mut all = vec!["sim"];
    all.extend_from_slice(args);
    run_diffuse(&all, None, &[], Duration::from_secs(120))
}

fn summary(args: &[&str]) -> Value {
    let out = sim(args);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

/// 40 tasks over 8 files of 20 MB, each read by 5 tasks, 0.1 s of compute each.
fn task_file(dir: &Path) -> PathBuf {
    let mut text = String::new();
    for f in 0..8 {
        let p = dir.join(format!("f{f}.dat"));
        std::fs::write(&p, vec![7u8; 20_000_000]).unwrap();
    }
    for t in 0..40 {
        let p = dir.join(format!("f{}.dat", t % 8));
        text.push_str(&format!(
            r#"{{"id":"t{t}","cmd":"wc -c {{inputs[0]}}","inputs":["file://{}"],"compute_s":0.1}}"#,
            p.display()
        ));
        text.push('\n');
    }
    let path = dir.join("tasks.jsonl");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_task_file_runs_on_a_testbed_file_and_a_preset_file_is_the_preset() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = task_file(dir.path());
    let tasks = tasks.to_str().unwrap();
    let preset = summary(&["run", tasks, "--testbed", "local", "--json"]);
    assert_eq!(preset["tasks"], 40, "{preset}");
    let local = repo().join("testbeds/local.toml");
    let from_file = summary(&["run", tasks, "--testbed", local.to_str().unwrap(), "--json"]);
    let outcome = |mut v: Value| {
        v.as_object_mut().unwrap().remove("sim_wall_s"); // the simulator's own run time
        v
    };
    assert_eq!(
        outcome(preset.clone()),
        outcome(from_file),
        "testbeds/local.toml is the preset"
    );

    // A cluster of its own: 2 nodes, storage at 10 MB/s, 30 MB of cache a node. Each file
    // is read from storage about once (2 s), later reads hit a cache.
    let slow = dir.path().join("slow.toml");
    std::fs::write(
        &slow,
        r#"
name = "slow-filer"
nodes = 2
slots_per_node = 2
cache_bytes = 30e6
storage_bytes_per_s = 10e6
storage_latency_s = 0.005
nic_bytes_per_s = 125e6
disk_bytes_per_s = 500e6
peer_latency_s = 0.001
dispatch_latency_s = 0.002
node_startup_s = 0
rack_size = 0
rack_uplink_bytes_per_s = 0
"#,
    )
    .unwrap();
    let s = summary(&["run", tasks, "--testbed", slow.to_str().unwrap(), "--json"]);
    assert_eq!(s["testbed"], "slow-filer", "{s}");
    assert_eq!(s["cache_size"], 30_000_000, "the file's cache: {s}");
    let makespan = s["makespan_s"].as_f64().unwrap();
    // 160 MB through a 10 MB/s filer takes 16 s at least; reading it once, not five times.
    assert!(
        (16.0..40.0).contains(&makespan),
        "makespan {makespan} s: {s}"
    );
    assert!(
        makespan > 5.0 * preset["makespan_s"].as_f64().unwrap(),
        "a slower filer is slower: {s} against {preset}"
    );
    assert!(
        s["miss"].as_f64().unwrap() < 0.5,
        "caches served most reads: {s}"
    );
}

#[test]
fn a_trace_tells_each_task_as_it_ran() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = task_file(dir.path());
    let trace = dir.path().join("trace.jsonl");
    let s = summary(&[
        "run",
        tasks.to_str().unwrap(),
        "--provisioning",
        "static",
        "--json",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    let lines: Vec<Value> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 40, "one line a task");
    let mut ids: Vec<&str> = lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 40, "each task once, by its id");
    let mut reads = [0u64; 3];
    let mut last_end = 0.0f64;
    for l in &lines {
        let at = |k: &str| l[k].as_f64().unwrap();
        // Each read one input, then computed its 0.1 s.
        assert!(at("started_s") <= at("staged_s"), "{l}");
        assert!(
            (at("finished_s") - at("staged_s") - 0.1).abs() < 1e-6,
            "{l}"
        );
        assert!(
            at("finished_s") >= last_end - 1e-9,
            "in order of completion: {l}"
        );
        last_end = at("finished_s");
        for (k, key) in ["local", "peer", "storage"].iter().enumerate() {
            reads[k] += l[key].as_u64().unwrap();
        }
        let id = l["id"].as_str().unwrap();
        assert_eq!(l["task"], id[1..].parse::<u64>().unwrap(), "{l}");
    }
    assert_eq!(reads.iter().sum::<u64>(), 40, "one input each");
    // The trace agrees with the summary.
    assert!(
        (last_end - s["makespan_s"].as_f64().unwrap()).abs() < 1e-6,
        "{s}"
    );
    assert!(
        (reads[2] as f64 / 40.0 - s["miss"].as_f64().unwrap()).abs() < 1e-9,
        "{s}"
    );
}

#[test]
fn bad_testbed_files_and_task_files_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = task_file(dir.path());
    let tasks = tasks.to_str().unwrap();
    let good = std::fs::read_to_string(repo().join("testbeds/local.toml")).unwrap();
    for (name, text, says) in [
        ("typo", good.replace("nodes = 6", "nodez = 6"), "nodez"),
        (
            "zero",
            good.replace("nodes = 6", "nodes = 0"),
            "`nodes` must be at least 1",
        ),
        (
            "negative",
            good.replace("disk_bytes_per_s = 5e9", "disk_bytes_per_s = -1"),
            "disk_bytes_per_s",
        ),
        (
            "missing",
            good.replace("slots_per_node = 1\n", ""),
            "slots_per_node",
        ),
        (
            "spread",
            format!("{good}storage_share_spread = 0.9\n"),
            "`storage_share_spread` must be from 0 to 0.577",
        ),
    ] {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = sim(&["run", tasks, "--testbed", path.to_str().unwrap()]);
        assert_eq!(out.code, Some(2), "{name}: {}", out.stderr);
        assert!(
            out.stderr.contains(says) && out.stderr.contains(&format!("{name}.toml")),
            "{name}: {}",
            out.stderr
        );
    }
    let out = sim(&["run", tasks, "--testbed", "nowhere.toml"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("neither a preset") && out.stderr.contains("teragrid-2007"),
        "{}",
        out.stderr
    );
    // The task file: none given, a task without compute_s, a file given to another workload.
    let out = sim(&["run"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("needs a task file"), "{}", out.stderr);
    let bare = dir.path().join("bare.jsonl");
    std::fs::write(&bare, r#"{"id":"a","cmd":"true"}"#).unwrap();
    let out = sim(&["run", bare.to_str().unwrap()]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("line 1 (task a)") && out.stderr.contains("--compute-s"),
        "{}",
        out.stderr
    );
    let out = sim(&["mi", tasks]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("sim run TASKS"), "{}", out.stderr);
}
