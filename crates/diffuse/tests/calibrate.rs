//! `diffuse calibrate` on a real pool: it measures the workers through real tasks and writes a
//! testbed file that `diffuse sim --testbed` takes.

mod common;

use common::cluster::*;
use common::run_diffuse;
use std::time::Duration;

#[test]
fn calibrate_measures_the_pool_and_writes_a_testbed_file_the_simulator_takes() {
    let mut c = Cluster::start(&[]);
    c.worker("a", 2, "200MB");
    c.worker("b", 2, "200MB");
    c.wait_workers(2);
    let scratch = c.path("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let out_file = c.path("pool.toml");
    let out = run_diffuse(
        &[
            "calibrate",
            "--dispatcher",
            &c.url,
            "--scratch",
            scratch.to_str().unwrap(),
            "--probe-size",
            "16MB",
            "--name",
            "this-pool",
            "--out",
            out_file.to_str().unwrap(),
        ],
        None,
        &[("DIFFUSE_CLIENT_TOKEN", &c.client_token)],
        Duration::from_secs(300),
    );
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    eprintln!("{}", out.stderr);
    for said in [
        "storage:",
        "local reads:",
        "peer reads:",
        "latency:",
        "an empty task costs",
    ] {
        assert!(out.stderr.contains(said), "{said}: {}", out.stderr);
    }
    assert_eq!(
        std::fs::read_dir(&scratch).unwrap().count(),
        0,
        "the probes are removed"
    );
    let text = std::fs::read_to_string(&out_file).unwrap();
    let t: toml::Table = toml::from_str(&text).unwrap();
    assert_eq!(t["name"].as_str(), Some("this-pool"), "{text}");
    assert_eq!(t["nodes"].as_integer(), Some(2), "{text}");
    assert_eq!(t["slots_per_node"].as_integer(), Some(2), "{text}");
    for k in ["storage_bytes_per_s", "nic_bytes_per_s", "disk_bytes_per_s"] {
        let rate = t[k].as_float().unwrap();
        // Loopback and the page cache: more than 10 MB/s, less than 100 GB/s.
        assert!((1e7..1e11).contains(&rate), "{k} = {rate}: {text}");
    }
    for k in ["storage_latency_s", "peer_latency_s", "dispatch_latency_s"] {
        let s = t[k].as_float().unwrap();
        assert!((0.0..2.0).contains(&s), "{k} = {s}: {text}");
    }
    // The simulator takes it as it is.
    let tasks = c.path("tasks.jsonl");
    let input = c.data("in", &random_bytes(1 << 20));
    std::fs::write(
        &tasks,
        format!(
            r#"{{"id":"t","cmd":"wc -c {{inputs[0]}}","inputs":["file://{}"],"compute_s":1}}"#,
            input.display()
        ),
    )
    .unwrap();
    let sim = run_diffuse(
        &[
            "sim",
            "run",
            tasks.to_str().unwrap(),
            "--testbed",
            out_file.to_str().unwrap(),
            "--json",
        ],
        None,
        &[],
        Duration::from_secs(60),
    );
    assert_eq!(sim.code, Some(0), "{}", sim.stderr);
    let s: serde_json::Value = serde_json::from_str(&sim.stdout).unwrap();
    assert_eq!(s["testbed"], "this-pool", "{s}");
}

#[test]
fn calibrate_refuses_a_scratch_that_is_not_a_directory_and_an_empty_pool() {
    let c = Cluster::start(&[]);
    let env = [("DIFFUSE_CLIENT_TOKEN", c.client_token.as_str())];
    let out = run_diffuse(
        &[
            "calibrate",
            "--dispatcher",
            &c.url,
            "--scratch",
            "/nonexistent/dir",
        ],
        None,
        &env,
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("not a directory"), "{}", out.stderr);
    let dir = c.path("s");
    std::fs::create_dir_all(&dir).unwrap();
    let out = run_diffuse(
        &[
            "calibrate",
            "--dispatcher",
            &c.url,
            "--scratch",
            dir.to_str().unwrap(),
        ],
        None,
        &env,
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("no worker is connected"),
        "{}",
        out.stderr
    );
}
