//! The simulator checked against a live run: the same task file run for real on the multi-host
//! testbed (workers in their own network namespaces, an HTTP store on its own host behind a
//! shaped link) and simulated on the testbed file `diffuse calibrate` measured from that pool.
//!
//! `one_small_row_live_and_simulated_agree_within_25_percent` is the check: it fails if
//! the simulated makespan is more than 25% off the measured one. `bench/sim_vs_live.sh` runs
//! the rows of docs/simulation.md's "Simulated and measured" table (the ignored test below).
//!
//! A row's pool is static (four workers started by hand) or dynamic: the dispatcher's
//! elastic pool starts workers with `--provisioner command`, whose start command waits a
//! resource manager's queue time and then runs `diffuse worker` on a free host of the testbed
//! (`ip netns exec`); released workers take their caches with them.

mod common;

use common::cluster::*;
use common::host::skip;
use common::hosts::Hosts;
use common::run_diffuse;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Workers in every row, each on its own host.
const WORKERS: usize = 4;
/// The store's link.
const STORAGE_RATE: &str = "80mbit";
/// The queue wait the dynamic pool's start command adds, seconds.
const QUEUE_WAIT_S: f64 = 4.0;
/// A dynamic pool's workers are released after this long idle, seconds.
const IDLE_RELEASE_S: u64 = 10;

/// A row: the dispatch policy, the workers' cache, the task shape, the pool.
struct Row {
    policy: &'static str,
    cache: &'static str,
    shape: Shape,
    file_mb: usize,
    compute_s: f64,
    dynamic: bool,
}

impl Row {
    /// A name for its artefacts: `gcc-100MB-ap6`, `gcc-100MB-mi12x4-dyn`.
    fn tag(&self) -> String {
        let shape = match self.shape {
            Shape::Reads { files, reads } => format!("mi{files}x{reads}"),
            Shape::Pairs { n } => format!("ap{n}"),
        };
        let pool = if self.dynamic { "-dyn" } else { "" };
        format!("{}-{}-{shape}{pool}", self.policy, self.cache)
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
    /// Bytes read from storage.
    storage_bytes: u64,
    local: f64,
    peer: f64,
    storage: f64,
    model_s: f64,
}

/// The pool of a row: `WORKERS` one-slot workers on their own hosts (2, 3, ...), an HTTP store
/// on host 1 behind `STORAGE_RATE` shared equally by the workers reading
/// ([`Testbed::shape_fair`]), and the dispatcher on host 0.
struct Bed {
    h: Hosts,
    www: PathBuf,
    store: String,
    /// The row's name, for its artefacts.
    tag: String,
    /// The dynamic pool's scripts and the workers' caches and logs.
    pool_dir: Option<tempfile::TempDir>,
}

fn bed(row: &Row) -> Option<Bed> {
    let pool_dir = row.dynamic.then(|| tempfile::tempdir().unwrap());
    let args: Vec<String> = match &pool_dir {
        None => vec!["--policy".into(), row.policy.into()],
        Some(d) => dynamic_pool_args(d.path(), row),
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut h = Hosts::up(2 + WORKERS, &args)?;
    if let Some(d) = &pool_dir {
        write_pool_scripts(d.path(), &h);
    }
    let www = h.path("www");
    let store = h.http_store(1, &www);
    if !row.dynamic {
        for w in 0..WORKERS {
            h.worker_with(2 + w, &format!("w{w}"), &["--cache-size", row.cache]);
        }
        h.wait_workers(WORKERS as u64);
    }
    let readers: Vec<usize> = (2..2 + WORKERS).collect();
    h.bed.shape_fair(1, STORAGE_RATE, &readers);
    Some(Bed {
        h,
        www,
        store,
        tag: row.tag(),
        pool_dir,
    })
}

/// The dispatcher's flags for an elastic pool started by `start.sh` in `dir`.
fn dynamic_pool_args(dir: &Path, row: &Row) -> Vec<String> {
    let d = dir.display();
    [
        "--policy",
        row.policy,
        "--provisioner",
        "command",
        "--start-command",
        &format!("{d}/start.sh {{request}} {{worker}}"),
        "--stop-command",
        &format!("{d}/stop.sh {{request}}"),
        "--max-workers",
        &WORKERS.to_string(),
        "--worker-cores",
        "1",
        "--worker-cache-size",
        row.cache,
        "--worker-cache-dir",
        &format!("{d}/cache-{{request}}"),
        "--step",
        "exponential",
        "--idle-release",
        &format!("{IDLE_RELEASE_S}s"),
    ]
    .map(String::from)
    .to_vec()
}

/// The start command takes a free worker host (a lock directory each), and in the background
/// waits the queue time and runs the worker there; the lock goes when the worker ends. The
/// stop command ends a worker that has not ended on being told to.
fn write_pool_scripts(dir: &Path, h: &Hosts) {
    let hosts: Vec<String> = (2..2 + WORKERS).map(|i| h.bed.ns(i)).collect();
    let d = dir.display();
    let scripts = [
        (
            "start.sh",
            format!(
                "#!/bin/sh\n# start.sh REQUEST WORKER-COMMAND...\nreq=$1; shift\n\
                 for ns in {hosts}; do\n\
                 \x20 if mkdir {d}/lock-$ns 2>/dev/null; then\n\
                 \x20   setsid {d}/run.sh $ns $req \"$@\" </dev/null >/dev/null 2>&1 &\n\
                 \x20   echo $ns; exit 0\n\
                 \x20 fi\ndone\necho \"no free host for $req\" >&2; exit 1\n",
                hosts = hosts.join(" ")
            ),
        ),
        (
            "run.sh",
            format!(
                "#!/bin/sh\n# run.sh HOST REQUEST WORKER-COMMAND...\nns=$1; req=$2; shift 2\n\
                 sleep {QUEUE_WAIT_S}\n\
                 ip netns exec $ns \"$@\" >{d}/worker-$req.log 2>&1 &\n\
                 echo $! >{d}/pid-$req\nwait\nrmdir {d}/lock-$ns\n"
            ),
        ),
        (
            "stop.sh",
            format!("#!/bin/sh\nkill $(cat {d}/pid-$1 2>/dev/null) 2>/dev/null; exit 0\n"),
        ),
    ];
    for (name, text) in scripts {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::process::Command::new("chmod")
            .arg("+x")
            .arg(&p)
            .status()
            .unwrap();
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        // The pool's workers outlive their dispatcher (setsid): end them.
        if let Some(d) = &self.pool_dir {
            let _ = std::process::Command::new("pkill")
                .args(["-f", &d.path().display().to_string()])
                .status();
        }
    }
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

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Task `id` once it has ended (at most `deadline` from now).
fn ended(b: &Bed, id: &str, deadline: Duration) -> Value {
    let start = Instant::now();
    loop {
        if let Some(t) = b.h.get(&format!("/v1/tasks/{id}")) {
            if ["succeeded", "failed", "cancelled"].contains(&t["state"].as_str().unwrap_or("")) {
                return t;
            }
        }
        assert!(start.elapsed() < deadline, "{id} still not ended");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Run the task file live: makespan from submission to the last task's end.
fn live(b: &Bed, tasks: &str) -> Outcome {
    let t0 = unix_now();
    let r =
        b.h.http
            .post(format!("{}/v1/tasks", b.h.url))
            .bearer_auth(&b.h.client)
            .body(tasks.to_string())
            .send()
            .unwrap();
    assert!(r.status().is_success(), "{}", r.text().unwrap_or_default());
    let (mut end, mut reads, mut storage_bytes) = (0.0f64, [0u64; 3], 0);
    let mut trace = String::new();
    for line in tasks.lines() {
        let t: Value = serde_json::from_str(line).unwrap();
        let done = ended(b, t["id"].as_str().unwrap(), Duration::from_secs(1200));
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
        storage_bytes += tr[5];
    }
    keep(b, "live.jsonl", &trace);
    let n = reads.iter().sum::<u64>().max(1) as f64;
    Outcome {
        makespan_s: end - t0,
        storage_bytes,
        local: reads[0] as f64 / n,
        peer: reads[1] as f64 / n,
        storage: reads[2] as f64 / n,
        model_s: f64::NAN,
    }
}

/// Keep a row's artefact in `$SIM_VS_LIVE_OUT/<row>/` when that is set (the bench's traces).
fn keep(b: &Bed, name: &str, text: &str) {
    if let Some(dir) = std::env::var_os("SIM_VS_LIVE_OUT") {
        let dir = Path::new(&dir).join(&b.tag);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), text).unwrap();
    }
}

fn status(b: &Bed) -> Value {
    b.h.get("/v1/status").expect("the dispatcher's status")
}

/// A dynamic pool grown to all its workers (by tasks that wait until it has), so it can be
/// calibrated, and how long that took.
fn grow(b: &Bed) {
    let gate = b.h.path("grown");
    let tasks: Vec<Value> = (0..2 * WORKERS)
        .map(|k| gated_task(&format!("grow-{k}"), &gate))
        .collect();
    b.h.submit(&tasks);
    poll_long("the pool to grow", Duration::from_secs(300), || {
        (status(b)["workers"] == WORKERS as u64).then_some(())
    });
    std::fs::write(&gate, "").unwrap();
    for k in 0..2 * WORKERS {
        ended(b, &format!("grow-{k}"), Duration::from_secs(300));
    }
}

/// Every worker of a dynamic pool released (idle) and gone, so the row starts from none.
fn drain(b: &Bed) {
    poll_long("the pool to empty", Duration::from_secs(300), || {
        let s = status(b);
        let alive = s["worker_list"].as_array().map_or(0, Vec::len);
        (s["workers"] == 0 && alive == 0).then_some(())
    });
}

fn poll_long<T>(what: &str, deadline: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Measure the pool with `diffuse calibrate` (probes on the same store): the testbed file.
fn calibrate(b: &Bed) -> PathBuf {
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

/// Simulate the task file on the calibrated testbed, the pool as live (static, or dynamic
/// as the dispatcher's: exponential steps, the same idle release), with the row's policy
/// and cache.
fn simulated(b: &Bed, row: &Row, tasks: &str, testbed: &Path) -> Outcome {
    let file = b.h.path("tasks.jsonl");
    std::fs::write(&file, tasks).unwrap();
    let trace = b.h.path("sim.jsonl");
    keep(b, "tasks.jsonl", tasks);
    keep(b, "pool.toml", &std::fs::read_to_string(testbed).unwrap());
    let idle = IDLE_RELEASE_S.to_string();
    let mut args = vec![
        "sim",
        "run",
        file.to_str().unwrap(),
        "--testbed",
        testbed.to_str().unwrap(),
        "--policy",
        row.policy,
        "--cache-size",
        row.cache,
        "--json",
        "--trace",
        trace.to_str().unwrap(),
    ];
    if row.dynamic {
        args.extend([
            "--provisioning",
            "dynamic",
            "--step",
            "exponential",
            "--idle-timeout",
            &idle,
        ]);
    } else {
        args.extend(["--provisioning", "static"]);
    }
    let o = run_diffuse(&args, None, &[], Duration::from_secs(300));
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    keep(b, "sim.jsonl", &std::fs::read_to_string(&trace).unwrap());
    keep(b, "sim.json", &o.stdout);
    let s: Value = serde_json::from_str(&o.stdout).unwrap();
    Outcome {
        makespan_s: s["makespan_s"].as_f64().unwrap(),
        storage_bytes: s["bytes_storage"].as_u64().unwrap(),
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
        "| {} | {} | {} | {shape}, {} MB, {} s | {:.1} s | {:.1} s ({:+.0}%) | {:.1} s ({:+.0}%) | {} | {} | {} / {} |",
        row.policy,
        row.cache,
        if row.dynamic { "dynamic" } else { "static" },
        row.file_mb,
        row.compute_s,
        live.makespan_s,
        sim.makespan_s,
        100.0 * (sim.makespan_s / live.makespan_s - 1.0),
        sim.model_s,
        100.0 * (sim.model_s / live.makespan_s - 1.0),
        pct(live),
        pct(sim),
        live.storage_bytes / 1_000_000,
        sim.storage_bytes / 1_000_000
    )
}

/// Run `row` live on a fresh pool, calibrate it, and simulate the same tasks. A dynamic pool
/// is grown for calibration (which then also measures its workers' start-up), emptied, and
/// grows again under the row's tasks.
fn measure(row: &Row) -> Option<(Outcome, Outcome)> {
    let b = bed(row)?;
    if row.dynamic {
        grow(&b);
    }
    let testbed = calibrate(&b);
    if row.dynamic {
        drain(&b);
    }
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
        dynamic: false,
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
    let row = |policy, cache, shape, dynamic| Row {
        policy,
        cache,
        shape,
        file_mb: 4,
        compute_s: 0.5,
        dynamic,
    };
    let mi = Shape::Reads {
        files: 40,
        reads: 6,
    };
    let ap = Shape::Pairs { n: 12 };
    let rows = [
        row("fa", "100MB", mi, false),
        row("gcc", "100MB", mi, false),
        row("gcc", "10MB", mi, false),
        row("gcc", "100MB", mi, true),
        row("fa", "100MB", ap, false),
        row("gcc", "100MB", ap, false),
        row("gcc", "10MB", ap, false),
        row("gcc", "100MB", ap, true),
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
    println!("| policy | cache a worker | pool | tasks | measured | simulated | abstract model | measured local / peer / storage % | simulated | MB from storage, measured / simulated |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for l in lines {
        println!("{l}");
    }
}
