//! The simulator checked against a live run: the same task file run for real on the multi-host
//! testbed (workers in their own network namespaces, an HTTP store on its own host behind a
//! shaped link) and simulated on the testbed file `diffuse calibrate` measured from that pool.
//!
//! `one_small_row_live_and_simulated_agree_within_25_percent` is the check: it fails if
//! the simulated makespan is more than 25% off the measured one. `bench/sim_vs_live.sh` runs
//! the rows of docs/simulation.md's "Simulated and measured" table (the ignored test below).

mod common;

use common::cluster::*;
use common::host::skip;
use common::hosts::Hosts;
use common::run_diffuse;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A row: the dispatch policy, the workers' cache, the task shape.
struct Row {
    policy: &'static str,
    cache: &'static str,
    shape: Shape,
    file_mb: usize,
    compute_s: f64,
}

impl Row {
    /// A name for its artefacts: `gcc-100MB-ap6`.
    fn tag(&self) -> String {
        let shape = match self.shape {
            Shape::Reads { files, reads } => format!("mi{files}x{reads}"),
            Shape::Pairs { n } => format!("ap{n}"),
        };
        format!("{}-{}-{shape}", self.policy, self.cache)
    }
}

/// What the tasks read.
#[derive(Clone, Copy)]
enum Shape {
    /// MI-like: `files` files, each read by `reads` tasks (one input each), interleaved.
    Reads { files: usize, reads: usize },
    /// AP-like: two sets of `n` files, a task for each pair (one of each set).
    Pairs { n: usize },
}

/// What a run gave: makespan, and the shares of reads served locally, by a peer, by storage;
/// for a simulation, the abstract model's workload time too.
#[derive(Debug)]
struct Outcome {
    makespan_s: f64,
    local: f64,
    peer: f64,
    storage: f64,
    model_s: f64,
}

/// A pool of `workers` one-slot workers on their own hosts, an HTTP store on host 1 sending at
/// `storage_rate`, and the dispatcher (with `policy`) on host 0.
struct Bed {
    h: Hosts,
    www: std::path::PathBuf,
    store: String,
    /// The row's name, for its artefacts.
    tag: String,
}

fn bed(workers: usize, policy: &str, cache: &str, storage_rate: &str) -> Option<Bed> {
    let mut h = Hosts::up(2 + workers, &["--policy", policy])?;
    let www = h.path("www");
    let store = h.http_store(1, &www);
    for w in 0..workers {
        h.worker_with(2 + w, &format!("w{w}"), &["--cache-size", cache]);
    }
    h.wait_workers(workers as u64);
    h.bed.shape(1, storage_rate, None);
    Some(Bed {
        h,
        www,
        store,
        tag: String::new(),
    })
}

/// The row's task file: its files of `file_mb` MB on the store, read as its shape says by
/// tasks that then compute (sleep) `compute_s`.
fn task_file(b: &Bed, row: &Row, tag: &str) -> String {
    let dir = b.www.join(tag);
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str| {
        let p = dir.join(name);
        if !p.exists() {
            std::fs::write(&p, random_bytes(row.file_mb * 1_000_000)).unwrap();
        }
        format!("{}/{tag}/{name}", b.store)
    };
    let task = |id: String, inputs: Vec<String>| {
        format!(
            "{}\n",
            json!({"id": id, "cmd": format!("sleep {}", row.compute_s), "inputs": inputs,
                   "compute_s": row.compute_s})
        )
    };
    let mut text = String::new();
    match row.shape {
        Shape::Reads { files, reads } => {
            for r in 0..reads {
                for f in 0..files {
                    text.push_str(&task(
                        format!("{tag}-{f}-{r}"),
                        vec![file(&format!("f{f}"))],
                    ));
                }
            }
        }
        Shape::Pairs { n } => {
            for i in 0..n {
                for j in 0..n {
                    let inputs = vec![file(&format!("a{i}")), file(&format!("b{j}"))];
                    text.push_str(&task(format!("{tag}-{i}-{j}"), inputs));
                }
            }
        }
    }
    text
}

/// Run the task file live: makespan from submission to the last task's end.
fn live(b: &Bed, tasks: &str) -> Outcome {
    let t0 = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let r =
        b.h.http
            .post(format!("{}/v1/tasks", b.h.url))
            .bearer_auth(&b.h.client)
            .body(tasks.to_string())
            .send()
            .unwrap();
    assert!(r.status().is_success(), "{}", r.text().unwrap_or_default());
    let (mut end, mut reads) = (0.0f64, [0u64; 3]);
    let mut trace = String::new();
    for line in tasks.lines() {
        let t: Value = serde_json::from_str(line).unwrap();
        let done = b.h.done(t["id"].as_str().unwrap());
        assert_eq!(done["state"], "succeeded", "{done}");
        let rep = report(&done);
        trace.push_str(&format!(
            "{}\n",
            json!({"id": t["id"], "node": done["node"],
                   "started_s": rep["started_at"].as_f64().unwrap() - t0,
                   "staged_s": rep["staged_at"].as_f64().unwrap() - t0,
                   "finished_s": rep["finished_at"].as_f64().unwrap() - t0,
                   "traffic": rep["traffic"]})
        ));
        end = end.max(rep["finished_at"].as_f64().unwrap());
        let tr = traffic(&rep["traffic"]);
        for k in 0..3 {
            reads[k] += tr[k];
        }
    }
    keep(b, "live.jsonl", &trace);
    let n = reads.iter().sum::<u64>().max(1) as f64;
    Outcome {
        makespan_s: end - t0,
        local: reads[0] as f64 / n,
        peer: reads[1] as f64 / n,
        storage: reads[2] as f64 / n,
        model_s: f64::NAN,
    }
}

/// Keep a row's artefact in `$SIM_VS_LIVE_OUT/<row>/` when that is set (the bench's traces).
fn keep(b: &Bed, name: &str, text: &str) {
    if let Some(dir) = std::env::var_os("SIM_VS_LIVE_OUT") {
        let dir = std::path::Path::new(&dir).join(&b.tag);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), text).unwrap();
    }
}

/// Measure the pool with `diffuse calibrate` (probes on the same store): the testbed file.
fn calibrate(b: &Bed) -> std::path::PathBuf {
    let out = b.h.path("pool.toml");
    let o = run_diffuse(
        &[
            "calibrate",
            "--dispatcher",
            &b.h.url,
            "--scratch",
            b.www.to_str().unwrap(),
            "--scratch-url",
            &b.store,
            "--probe-size",
            "8MB",
            "--out",
            out.to_str().unwrap(),
        ],
        None,
        &[("DIFFUSE_CLIENT_TOKEN", &b.h.client)],
        Duration::from_secs(600),
    );
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    eprintln!("{}", o.stderr);
    out
}

/// Simulate the task file on the calibrated testbed, the pool as it is (static, its caches).
fn simulated(b: &Bed, row: &Row, tasks: &str, testbed: &std::path::Path) -> Outcome {
    let file = b.h.path("tasks.jsonl");
    std::fs::write(&file, tasks).unwrap();
    let trace = b.h.path("sim.jsonl");
    keep(b, "tasks.jsonl", tasks);
    keep(b, "pool.toml", &std::fs::read_to_string(testbed).unwrap());
    let o = run_diffuse(
        &[
            "sim",
            "run",
            file.to_str().unwrap(),
            "--testbed",
            testbed.to_str().unwrap(),
            "--provisioning",
            "static",
            "--policy",
            row.policy,
            "--cache-size",
            row.cache,
            "--json",
            "--trace",
            trace.to_str().unwrap(),
        ],
        None,
        &[],
        Duration::from_secs(300),
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    keep(b, "sim.jsonl", &std::fs::read_to_string(&trace).unwrap());
    keep(b, "sim.json", &o.stdout);
    let s: Value = serde_json::from_str(&o.stdout).unwrap();
    Outcome {
        makespan_s: s["makespan_s"].as_f64().unwrap(),
        local: s["hit_local"].as_f64().unwrap(),
        peer: s["hit_peer"].as_f64().unwrap(),
        storage: s["miss"].as_f64().unwrap(),
        model_s: s["model"]["predicted"]["workload_time_s"]
            .as_f64()
            .unwrap_or(f64::NAN),
    }
}

fn line(row: &Row, live: &Outcome, sim: &Outcome) -> String {
    let pct = |o: &Outcome| {
        format!(
            "{:.0} / {:.0} / {:.0}",
            100.0 * o.local,
            100.0 * o.peer,
            100.0 * o.storage
        )
    };
    let shape = match row.shape {
        Shape::Reads { files, reads } => format!("MI-like: {files} files x {reads} reads"),
        Shape::Pairs { n } => format!("AP-like: {n} x {n} pairs"),
    };
    format!(
        "| {} | {} | {shape}, {} MB, {} s | {:.1} s | {:.1} s ({:+.0}%) | {:.1} s ({:+.0}%) | {} | {} |",
        row.policy,
        row.cache,
        row.file_mb,
        row.compute_s,
        live.makespan_s,
        sim.makespan_s,
        100.0 * (sim.makespan_s / live.makespan_s - 1.0),
        sim.model_s,
        100.0 * (sim.model_s / live.makespan_s - 1.0),
        pct(live),
        pct(sim)
    )
}

/// Run `row` live on a fresh pool of 4 workers with storage at 80 Mbit/s, calibrate it, and
/// simulate the same tasks.
fn measure(row: &Row) -> Option<(Outcome, Outcome)> {
    let mut b = bed(4, row.policy, row.cache, "80mbit")?;
    b.tag = row.tag();
    let testbed = calibrate(&b);
    let tasks = task_file(&b, row, row.policy);
    let live = live(&b, &tasks);
    let sim = simulated(&b, row, &tasks, &testbed);
    eprintln!("{}", line(row, &live, &sim));
    Some((live, sim))
}

#[test]
fn one_small_row_live_and_simulated_agree_within_25_percent() {
    let row = Row {
        policy: "gcc",
        cache: "100MB",
        shape: Shape::Reads {
            files: 12,
            reads: 4,
        },
        file_mb: 4,
        compute_s: 0.5,
    };
    let Some((live, sim)) = measure(&row) else {
        return skip("network namespaces need root and iproute2");
    };
    let off = sim.makespan_s / live.makespan_s - 1.0;
    assert!(
        off.abs() <= 0.25,
        "simulated {:.2} s against {:.2} s measured ({:+.0}%): {live:?} {sim:?}",
        sim.makespan_s,
        live.makespan_s,
        100.0 * off
    );
}

#[test]
#[ignore = "a benchmark: bench/sim_vs_live.sh"]
fn bench_simulated_against_measured() {
    let mi = |policy, cache| Row {
        policy,
        cache,
        shape: Shape::Reads {
            files: 12,
            reads: 4,
        },
        file_mb: 4,
        compute_s: 0.5,
    };
    let ap = |policy, cache| Row {
        policy,
        cache,
        shape: Shape::Pairs { n: 6 },
        file_mb: 4,
        compute_s: 0.5,
    };
    let rows = [
        mi("fa", "100MB"),
        mi("gcc", "100MB"),
        mi("gcc", "10MB"),
        ap("fa", "100MB"),
        ap("gcc", "100MB"),
        ap("gcc", "10MB"),
    ];
    // SIM_VS_LIVE_ROWS=a,b runs only the rows whose tag contains one of them.
    let only = std::env::var("SIM_VS_LIVE_ROWS").unwrap_or_default();
    let wanted = |r: &Row| only.is_empty() || only.split(',').any(|w| r.tag().contains(w));
    let mut lines = Vec::new();
    for row in rows.iter().filter(|r| wanted(r)) {
        let Some((live, sim)) = measure(row) else {
            return skip("network namespaces need root and iproute2");
        };
        lines.push(line(row, &live, &sim));
    }
    println!("| policy | cache a worker | tasks | measured | simulated | abstract model | measured local / peer / storage % | simulated |");
    println!("|---|---|---|---|---|---|---|---|");
    for l in lines {
        println!("{l}");
    }
}
