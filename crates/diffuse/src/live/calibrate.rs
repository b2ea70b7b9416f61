//! `diffuse calibrate`: measure a running pool and write a testbed file for `diffuse sim
//! --testbed`, so that the simulator predicts this pool rather than the paper's.
//!
//! It runs small batches of real tasks through the dispatcher, each pinned to a worker, and
//! reads the times the workers report (`started_at`, `staged_at`, `finished_at`; durations
//! only, so the hosts' clocks need not agree):
//! 1. every worker reads its own fresh probe file from storage at once: the storage rate each
//!    read got, and all of them together (the aggregate a shared file system gives); from the
//!    order and times in which they finished, how unequally storage shared itself among them
//!    (the weights of [`share_weights`]);
//! 2. each reads it again, now cached: the local read rate (a `cat` of the cached copy);
//! 3. each reads its neighbour's probe from the neighbour: the peer rate (the NIC, in the
//!    model); with one worker there is no peer, and the NIC is taken as the storage rate;
//! 4. a one-byte file from storage, then from a peer: the latencies;
//! 5. ten empty tasks a slot, all at once: what a task costs beyond its compute (submission,
//!    dispatch, start, report), the model's dispatch latency.
//!
//! The node start-up time is the mean time the dispatcher's elastic pool took from asking its
//! resource manager for a worker to the worker joining, over the workers it has started
//! (`pool.startup_seconds` in its status); a static pool, or one that has started none, takes
//! `--node-startup`. The probe files are written under `--scratch`, a directory every worker
//! reads at the same path (the shared file system the tasks read), or that a web server serves
//! at `--scratch-url` (the HTTP store the tasks read), and removed at the end.
//! `--dispatch-only` runs step 5 alone (for tasks that read nothing, and emulated pools).

use super::api::{Client, ClientArgs};
use super::runtime;
use anyhow::{bail, Context, Result};
use diffuse_runtime::dispatcher::answers::{
    BatchView, OutcomeState, Submitted, TaskView, WorkerPage,
};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// `diffuse calibrate`.
#[derive(clap::Args)]
pub struct CalibrateArgs {
    /// A directory every worker reads at this same path (on the shared file system the tasks
    /// read from), for the probe files; they are removed at the end.
    #[arg(long, value_name = "DIR", required_unless_present = "dispatch_only")]
    scratch: Option<PathBuf>,
    /// The URL at which --scratch is served, when the tasks read an HTTP store (a web server
    /// over that directory): the probes are read from there instead of as files.
    #[arg(long, value_name = "URL")]
    scratch_url: Option<String>,
    /// Measure only what tasks that read nothing meet: the workers and their slots, what an
    /// empty task costs a slot, the start-up of a node. No probe is read; the storage, disk and
    /// peer figures are the `local` preset's, marked in the file as not measured. For pools
    /// whose tasks only compute, and for an emulated pool (`diffuse emulate`), whose workers
    /// read nothing.
    #[arg(long, conflicts_with_all = ["scratch", "scratch_url"])]
    dispatch_only: bool,
    /// Size of each worker's probe file: large enough that a read takes well over its
    /// latency (e.g. 256MB).
    #[arg(long, default_value = "64MB", value_parser = crate::size::parse_size)]
    probe_size: u64,
    /// Seconds from asking the resource manager for a node to the node joining, when the pool
    /// has not measured it (a static pool, or an elastic one that has started no worker yet).
    #[arg(long, default_value_t = 30.0)]
    node_startup: f64,
    /// The testbed's name in the file.
    #[arg(long, default_value = "calibrated")]
    name: String,
    /// Write the testbed file here (default: standard output).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    #[command(flatten)]
    client: ClientArgs,
}

/// What one task's report says.
struct Ran {
    /// Seconds reading its inputs (`staged_at - started_at`).
    staging: f64,
    /// Seconds running its command (`finished_at - staged_at`).
    running: f64,
    /// (local, peer, storage) reads.
    traffic: (u64, u64, u64),
}

/// `diffuse calibrate`.
pub fn calibrate(a: CalibrateArgs) -> Result<ExitCode> {
    if let Some(scratch) = a.scratch.as_ref().filter(|d| !d.is_dir()) {
        bail!("--scratch {}: not a directory", scratch.display());
    }
    let c = Client::new(&a.client)?;
    let rt = runtime()?;
    let pool = Pool::ask(&c, &rt)?;
    let nonce = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let session = Session {
        c: &c,
        rt: &rt,
        prefix: format!("calibrate-{nonce}"),
    };
    let reads = match &a.scratch {
        Some(scratch) => Some(Reads::probe(&a, scratch, &nonce, &session, &pool)?),
        None => {
            eprintln!(
                "calibrating {} workers ({} slots): the cost of a task only (--dispatch-only)",
                pool.workers.len(),
                pool.slots
            );
            None
        }
    };
    let per_task = dispatch_cost(&session, pool.slots)?;
    // Not measured with --dispatch-only: the local preset's data path.
    let reads = reads.unwrap_or_else(|| Reads::of(&diffuse_sim::Testbed::local()));
    let n = pool.workers.len();
    let testbed = diffuse_sim::Testbed {
        name: a.name.clone(),
        nodes: n as u32,
        slots_per_node: (pool.slots / n as u64).max(1) as u32,
        cache_bytes: None,
        storage_bw: reads.aggregate,
        storage_latency_s: reads.storage_latency,
        nic_bw: reads.nic,
        disk_bw: reads.disk,
        peer_latency_s: reads.peer_latency,
        dispatch_latency_s: per_task,
        node_startup_s: pool.startup.map_or(a.node_startup, |m| m.0),
        rack_size: 0,
        rack_uplink_bw: 0.0,
        storage_share_spread: reads.spread,
    };
    testbed.check().map_err(anyhow::Error::msg)?;
    write_testbed(&a, &c.url, &pool, &testbed)
}

/// The pool as the dispatcher shows it when calibration starts.
struct Pool {
    /// Names of the connected workers.
    workers: Vec<String>,
    /// Slots they have together.
    slots: u64,
    /// The mean start-up time of the workers the pool started, and how many.
    startup: Option<(f64, u64)>,
}

impl Pool {
    fn ask(c: &Client, rt: &tokio::runtime::Runtime) -> Result<Pool> {
        let status = rt.block_on(c.status())?;
        // Every worker, page by page (the status lists only the first ones of a large pool).
        let mut workers: Vec<String> = Vec::new();
        let mut after = String::new();
        loop {
            let page: WorkerPage = rt.block_on(
                c.call(
                    c.http
                        .get(format!("{}/v1/workers", c.url))
                        .query(&[("after", after.as_str()), ("limit", "10000")]),
                ),
            )?;
            workers.extend(
                page.workers
                    .into_iter()
                    .filter(|w| w.state == "running" || w.state == "idle")
                    .map(|w| w.name),
            );
            match page.next {
                Some(n) => after = n,
                None => break,
            }
        }
        if workers.is_empty() {
            bail!("no worker is connected to {}: start the pool first", c.url);
        }
        let startup = status
            .pool
            .as_ref()
            .map(|p| &p.startup_seconds)
            .filter(|h| h.count > 0)
            .map(|h| (h.sum / h.count as f64, h.count));
        let slots = status.slots.max(1);
        Ok(Pool {
            workers,
            slots,
            startup,
        })
    }
}

/// The probe files, one large and one of a byte per worker, as URIs the workers read.
struct Probes {
    big: Vec<String>,
    tiny: Vec<String>,
}

impl Probes {
    fn write(a: &CalibrateArgs, dir: &Path, n: usize) -> Result<Probes> {
        let dir_name = dir
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        let probe = |name: &str, size: u64| -> Result<String> {
            let p = dir.join(name);
            write_probe(&p, size)?;
            Ok(match &a.scratch_url {
                Some(url) => format!("{}/{dir_name}/{name}", url.trim_end_matches('/')),
                None => format!("file://{}", p.display()),
            })
        };
        let mut probes = Probes {
            big: Vec::new(),
            tiny: Vec::new(),
        };
        for i in 0..n {
            probes.big.push(probe(&format!("big-{i}"), a.probe_size)?);
            probes.tiny.push(probe(&format!("tiny-{i}"), 1)?);
        }
        Ok(probes)
    }
}

/// Read rates and latencies of storage, peers and local disks.
struct Reads {
    /// Bytes per second of `n` fresh storage reads at once (over the slowest one's time).
    aggregate: f64,
    /// How unequally those reads shared the storage.
    spread: f64,
    /// The median peer read rate.
    nic: f64,
    /// The median cached read rate.
    disk: f64,
    storage_latency: f64,
    peer_latency: f64,
}

impl Reads {
    /// A testbed's own figures, as if measured (`--dispatch-only` takes a preset's).
    fn of(t: &diffuse_sim::Testbed) -> Reads {
        Reads {
            aggregate: t.storage_bw,
            spread: t.storage_share_spread,
            nic: t.nic_bw,
            disk: t.disk_bw,
            storage_latency: t.storage_latency_s,
            peer_latency: t.peer_latency_s,
        }
    }

    /// Write the probes in a directory of their own under `scratch` (removed at the end) and
    /// measure every read with them.
    fn probe(
        a: &CalibrateArgs,
        scratch: &Path,
        nonce: &str,
        session: &Session,
        pool: &Pool,
    ) -> Result<Reads> {
        let dir = scratch.join(format!("diffuse-calibrate-{nonce}"));
        std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let _cleanup = Cleanup(dir.clone());
        eprintln!(
            "calibrating {} workers ({} slots) with {} MB probes in {}",
            pool.workers.len(),
            pool.slots,
            a.probe_size / 1_000_000,
            dir.display()
        );
        let probes = Probes::write(a, &dir, pool.workers.len())?;
        Reads::measure(session, &pool.workers, &probes, a.probe_size as f64)
    }

    fn measure(session: &Session, workers: &[String], probes: &Probes, size: f64) -> Result<Reads> {
        let n = workers.len();
        let read = |step: &str, on: &dyn Fn(usize) -> usize, uris: &[String]| {
            let tasks: Vec<Value> = (0..n)
                .map(|i| {
                    json!({"id": format!("{step}-{i}"), "cmd": "cat {inputs[0]} > /dev/null",
                           "inputs": [uris[i]], "hint": {"node": workers[on(i)], "strict": true}})
                })
                .collect();
            session.run(tasks)
        };
        let own = |i: usize| i;
        let next = |i: usize| (i + 1) % n;

        let from_storage = read("storage", &own, &probes.big)?;
        check_traffic(&from_storage, 2, "storage")?;
        let single: Vec<f64> = from_storage.iter().map(|r| size / r.staging).collect();
        let slowest = from_storage.iter().map(|r| r.staging).fold(0.0, f64::max);
        let aggregate = size * n as f64 / slowest;
        let weights = share_weights(&from_storage.iter().map(|r| r.staging).collect::<Vec<_>>());
        let spread = coefficient_of_variation(&weights).min(diffuse_sim::testbed::MAX_SHARE_SPREAD);
        eprintln!(
            "storage: {} each, {} together; shares {} (spread {spread:.2})",
            rates(&single),
            mb(aggregate),
            weights
                .iter()
                .map(|w| format!("{w:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let local = read("local", &own, &probes.big)?;
        check_traffic(&local, 0, "local")?;
        let disk: Vec<f64> = local.iter().map(|r| size / r.running).collect();
        eprintln!("local reads: {}", rates(&disk));
        let storage_tiny = read("storage-latency", &own, &probes.tiny)?;
        let storage_latency = median(storage_tiny.iter().map(|r| r.staging).collect());
        let (nic, peer_latency) = if n > 1 {
            let peer = read("peer", &next, &probes.big)?;
            check_traffic(&peer, 1, "peer")?;
            let rates_peer: Vec<f64> = peer.iter().map(|r| size / r.staging).collect();
            eprintln!("peer reads: {}", rates(&rates_peer));
            let peer_tiny = read("peer-latency", &next, &probes.tiny)?;
            (
                median(rates_peer),
                median(peer_tiny.iter().map(|r| r.staging).collect()),
            )
        } else {
            eprintln!("one worker: no peer to read from; the NIC is taken as the storage rate");
            (median(single.clone()), storage_latency)
        };
        eprintln!(
            "latency: storage {:.1} ms, peer {:.1} ms",
            storage_latency * 1e3,
            peer_latency * 1e3
        );
        Ok(Reads {
            aggregate,
            spread,
            nic,
            disk: median(disk),
            storage_latency,
            peer_latency,
        })
    }
}

/// What an empty task costs a slot: ten `true` tasks a slot at once, wall time (from the
/// submission to the batch's last outcome) times slots over tasks. The batch is waited on
/// whole, not task by task: with thousands of slots, asking after each task would measure the
/// asking.
fn dispatch_cost(session: &Session, slots: u64) -> Result<f64> {
    let empties = (10 * slots).max(20);
    let started = Instant::now();
    let batch = session.submit(
        (0..empties)
            .map(|k| json!({"id": format!("empty-{k}"), "cmd": "true"}))
            .collect(),
    )?;
    session.wait_batch(batch.batch, empties)?;
    let per_task = started.elapsed().as_secs_f64() * slots as f64 / empties as f64;
    eprintln!(
        "an empty task costs {:.1} ms of a slot ({empties} on {slots} slots)",
        per_task * 1e3
    );
    Ok(per_task)
}

/// The testbed file, with how each figure was measured, to `--out` or stdout.
fn write_testbed(
    a: &CalibrateArgs,
    url: &str,
    pool: &Pool,
    testbed: &diffuse_sim::Testbed,
) -> Result<ExitCode> {
    let startup_note = match pool.startup {
        Some((mean, count)) => {
            eprintln!("worker start-up: {mean:.2} s (mean of {count} the pool started)");
            format!("the mean of the {count} workers the pool started")
        }
        None => "given (--node-startup), not measured".into(),
    };
    let data_path = if a.dispatch_only {
        "# storage, NIC, disk and latencies: NOT measured (--dispatch-only), the `local` preset's;\n"
            .to_string()
    } else {
        format!(
            "# storage_bytes_per_s: {n} fresh reads at once, bytes over the slowest read's time \
             ({} MB probes);\n\
             # storage_share_spread: how unequally those reads shared it (0: equally);\n\
             # nic_bytes_per_s: the median peer read; disk_bytes_per_s: the median cached read;\n\
             # latencies: the median one-byte read;\n",
            a.probe_size / 1_000_000,
            n = pool.workers.len(),
        )
    };
    let text = format!(
        "# Measured by `diffuse calibrate` on {} ({} workers, {} slots).\n{data_path}\
         # dispatch_latency_s: an empty task's cost to a slot; node_startup_s: {startup_note}.\n{}",
        url,
        pool.workers.len(),
        pool.slots,
        toml::to_string(testbed)?,
    );
    match &a.out {
        Some(path) => {
            std::fs::write(path, &text)
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Submitting batches and waiting for them.
struct Session<'a> {
    c: &'a Client,
    rt: &'a tokio::runtime::Runtime,
    prefix: String,
}

impl Session<'_> {
    /// The id a calibration task is submitted under: unique to this calibration.
    fn id_of(&self, t: &Value) -> String {
        format!("{}-{}", self.prefix, t["id"].as_str().unwrap_or("?"))
    }

    /// Submit `tasks` as one batch, ids made unique, each in this calibration's own job.
    fn submit(&self, tasks: Vec<Value>) -> Result<Submitted> {
        let body: String = tasks
            .into_iter()
            .map(|mut t| {
                t["id"] = json!(self.id_of(&t));
                // Its own job, under GCC whatever the dispatcher's policy (FA would read every
                // probe from storage): what is measured is the pool, not a policy.
                t["job"] = json!(self.prefix);
                t["job_policy"] = json!("gcc");
                format!("{t}\n")
            })
            .collect();
        let c = self.c;
        Ok(self
            .rt
            .block_on(c.call(c.http.post(format!("{}/v1/tasks", c.url)).body(body)))?)
    }

    /// Wait until all `tasks` of `batch` have ended (asked every 10 ms); an error if one did
    /// not succeed.
    fn wait_batch(&self, batch: u64, tasks: u64) -> Result<()> {
        let c = self.c;
        let deadline = Instant::now() + Duration::from_secs(3600);
        loop {
            let b: BatchView = self
                .rt
                .block_on(c.call(c.http.get(format!("{}/v1/batches/{batch}", c.url))))?;
            let ended = b.counts.succeeded + b.counts.failed + b.counts.cancelled;
            if b.counts.succeeded == tasks {
                return Ok(());
            }
            if ended == tasks {
                bail!(
                    "calibration tasks did not succeed: {} failed, {} cancelled (first: {})",
                    b.counts.failed,
                    b.counts.cancelled,
                    b.counts.failed_ids.join(", ")
                );
            }
            if Instant::now() > deadline {
                bail!("calibration batch {batch} took over an hour");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Submit `tasks` (ids made unique), wait for every one, and return their reports in order;
    /// an error if one fails.
    fn run(&self, tasks: Vec<Value>) -> Result<Vec<Ran>> {
        let ids: Vec<String> = tasks.iter().map(|t| self.id_of(t)).collect();
        self.submit(tasks)?;
        let c = self.c;
        let deadline = Instant::now() + Duration::from_secs(3600);
        let mut out = Vec::with_capacity(ids.len());
        for id in &ids {
            let outcome = loop {
                let t: TaskView = self
                    .rt
                    .block_on(c.call(c.http.get(format!("{}/v1/tasks/{id}", c.url))))?;
                match t.outcome {
                    Some(o) if o.state == OutcomeState::Succeeded => break o,
                    Some(o) => {
                        bail!(
                            "calibration task {id} did not succeed: {}",
                            super::tasks::reason(Some(&o))
                        )
                    }
                    _ if Instant::now() > deadline => {
                        bail!("calibration task {id} took over an hour")
                    }
                    _ => std::thread::sleep(Duration::from_millis(100)),
                }
            };
            let r = outcome
                .report()
                .with_context(|| format!("task {id} has no report: {}", outcome.result_json))?;
            out.push(Ran {
                staging: (r.staged_at - r.started_at).max(1e-6),
                running: (r.finished_at - r.staged_at).max(1e-6),
                traffic: (r.traffic.local, r.traffic.peer, r.traffic.storage),
            });
        }
        Ok(out)
    }
}

/// Every read of a step came from where it should (0 local, 1 peer, 2 storage): a probe read
/// from elsewhere would measure the wrong thing.
fn check_traffic(runs: &[Ran], from: usize, what: &str) -> Result<()> {
    for r in runs {
        let t = [r.traffic.0, r.traffic.1, r.traffic.2];
        if t[from] != 1 {
            bail!(
                "a {what} read was served otherwise (local, peer, storage: {t:?}); is a worker's cache too small for --probe-size?"
            );
        }
    }
    Ok(())
}

fn write_probe(path: &Path, size: u64) -> Result<()> {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?,
    );
    // Not all zeros, so no layer compresses it away; different in every file.
    let mut block = vec![0u8; 1 << 20];
    let mut x = path
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
        })
        | 1;
    for b in block.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let mut left = size;
    while left > 0 {
        let k = left.min(block.len() as u64) as usize;
        f.write_all(&block[..k])?;
        left -= k as u64;
    }
    f.flush()?;
    Ok(())
}

/// The shares storage gave `times.len()` readers of equal files that started together and took
/// `times` seconds each, as weights summing to 1, in the order given. Storage is taken as
/// busy until the last ends and each reader's rate as its weight's share of it, as the
/// simulator models it: between two completions the readers left split the rate in
/// proportion to their weights, so the k-th to finish, having moved its file by `T_k`, had
/// `w_k = T_n / (n * sum_{j<=k} (T_j - T_{j-1}) / W_j)`, where `W_j` is the weight of the
/// readers still reading in the j-th interval.
pub fn share_weights(times: &[f64]) -> Vec<f64> {
    let n = times.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|a, b| times[*a].total_cmp(&times[*b]));
    let last = order.last().map_or(0.0, |i| times[*i]);
    let mut w = vec![0.0; n];
    let (mut left, mut prev, mut integral) = (1.0f64, 0.0, 0.0);
    for &i in &order {
        integral += (times[i] - prev) / left.max(1e-9);
        prev = times[i];
        w[i] = (last / (n as f64 * integral)).min(left);
        left -= w[i];
    }
    w
}

/// Standard deviation over mean (0 for fewer than two values).
fn coefficient_of_variation(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
    var.sqrt() / mean
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn mb(rate: f64) -> String {
    format!("{:.0} MB/s", rate / 1e6)
}

fn rates(v: &[f64]) -> String {
    v.iter().map(|r| mb(*r)).collect::<Vec<_>>().join(", ")
}

/// Removes the probe directory however calibration ends.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Readers of 1-unit files sharing a unit rate in proportion to `w` (summing to 1): when
    /// each ends.
    fn finish_times(w: &[f64]) -> Vec<f64> {
        let mut left = vec![1.0; w.len()];
        let mut done = vec![f64::NAN; w.len()];
        let mut now = 0.0;
        while done.iter().any(|d| d.is_nan()) {
            let active: Vec<usize> = (0..w.len()).filter(|i| done[*i].is_nan()).collect();
            let total: f64 = active.iter().map(|i| w[*i]).sum();
            let (next, dt) = active
                .iter()
                .map(|i| (*i, left[*i] * total / w[*i]))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .unwrap();
            for i in &active {
                left[*i] -= dt * w[*i] / total;
            }
            now += dt;
            done[next] = now;
        }
        done
    }

    #[test]
    fn shares_are_recovered_from_when_equal_reads_ended() {
        for w in [
            vec![0.25, 0.25, 0.25, 0.25],
            vec![0.4, 0.2, 0.3, 0.1],
            vec![0.5, 0.5],
            vec![0.1, 0.6, 0.3],
        ] {
            let got = share_weights(&finish_times(&w));
            for (g, e) in got.iter().zip(&w) {
                assert!((g - e).abs() < 1e-9, "{got:?} against {w:?}");
            }
        }
        assert_eq!(share_weights(&[3.0]), [1.0]);
        let equal = share_weights(&[2.0, 2.0, 2.0]);
        assert!(coefficient_of_variation(&equal) < 1e-9, "{equal:?}");
        let cv = coefficient_of_variation(&[0.4, 0.2, 0.3, 0.1]);
        assert!((cv - 0.447).abs() < 1e-3, "{cv}");
    }
}
