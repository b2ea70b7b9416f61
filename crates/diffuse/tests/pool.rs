//! The elastic pool, live: a dispatcher that acquires workers as its queue grows and gives them
//! back when idle, through local processes, a real Slurm (`scripts/slurm.sh`: munged, slurmctld
//! and slurmd on this host) or the user's commands. Limits are sampled throughout; a worker
//! killed under a running task (SIGKILL, `scancel`) loses no task; a hung `sbatch` stalls no
//! dispatch; a frozen controller leaves no second job for one request; one `sbatch` starts a
//! job array of workers, and the pool's calls stay under their cap; bad options are refused
//! before anything starts.

mod common;

use common::cluster::{poll, Cluster};
use common::host::{is_root, processes_with, skip};
use common::slurm::Slurm;
use rustix::process::Signal;
use serde_json::{json, Value};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn sleep_tasks(prefix: &str, n: usize, secs: f64) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"id": format!("{prefix}{i}"), "cmd": format!("sleep {secs}")}))
        .collect()
}

/// Samples `measure` every 100 ms on a thread until dropped; keeps the largest value.
struct Sampler {
    max: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(measure: impl Fn() -> u64 + Send + 'static) -> Sampler {
        let max = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (m, s) = (max.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                m.fetch_max(measure(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Sampler {
            max,
            stop,
            thread: Some(thread),
        }
    }

    fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Workers the dispatcher counts in any state (requested to releasing).
fn pool_size(status: &Value) -> u64 {
    status["workers_by_state"]
        .as_object()
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

/// `diffuse worker` processes a pool of this cluster started (their command line names the
/// request, `dfs-...`, and the cluster's directory).
fn worker_processes(c: &Cluster) -> Vec<u32> {
    let dir = c.dir.path().display().to_string();
    let ours: Vec<u32> = processes_with(" worker ")
        .into_iter()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains(&dir) && cmdline.contains("dfs-")
        })
        .collect();
    // One per worker: its guard, not the worker proper under it.
    let parent = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit(')')
            .next()?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    ours.iter()
        .copied()
        .filter(|p| parent(*p).is_none_or(|pp| !ours.contains(&pp)))
        .collect()
}

/// Status from a thread (a fresh client: the cluster's own is not shared).
fn status_of(url: &str, token: &str) -> Option<Value> {
    reqwest::blocking::Client::new()
        .get(format!("{url}/v1/status"))
        .bearer_auth(token)
        .timeout(Duration::from_secs(5))
        .send()
        .ok()?
        .json()
        .ok()
}

/// The ids of `tasks`, in order.
fn ids_of(tasks: &[Value]) -> Vec<String> {
    tasks
        .iter()
        .map(|t| t["id"].as_str().unwrap().into())
        .collect()
}

/// Every task succeeded, each once.
fn all_succeeded(c: &Cluster, ids: &[String]) {
    for id in ids {
        let (task, _) = c.wait_succeeded(id);
        assert_eq!(task["state"], "succeeded", "{task}");
    }
}

/// SIGTERM the dispatcher, as a user stopping it would, and wait for it to exit: it gives
/// its workers back first.
fn stop_dispatcher(c: &mut Cluster) {
    let d = c.dispatcher.as_mut().expect("dispatcher");
    common::send_signal(d.child.id(), false, Signal::TERM);
    let t = Instant::now();
    while d.exited().is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the dispatcher did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn pool_args<'a>(provisioner: &'a str, max: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "--provisioner",
        provisioner,
        "--max-workers",
        max,
        "--worker-cores",
        "1",
        "--worker-cache-size",
        "50MB",
        "--idle-release",
        "3s",
        "--release-grace",
        "5s",
    ];
    a.extend_from_slice(more);
    a
}

#[test]
fn a_local_pool_grows_with_the_queue_and_shrinks_when_idle() {
    let mut c = Cluster::start_with(&[], &pool_args("local", "3", &[]), &[]);
    let (url, token) = (c.url.clone(), c.client_token.clone());
    let sampled = Sampler::start(move || status_of(&url, &token).map_or(0, |s| pool_size(&s)));
    assert_eq!(
        pool_size(&c.status()),
        0,
        "nothing is acquired for an empty queue"
    );

    // A rising workload: 2 tasks, then 8, then 20.
    let mut ids = Vec::new();
    for (wave, n) in [2usize, 8, 20].into_iter().enumerate() {
        let tasks = sleep_tasks(&format!("w{wave}-"), n, 0.4);
        ids.extend(tasks.iter().map(|t| t["id"].as_str().unwrap().to_string()));
        c.submit(&tasks);
        std::thread::sleep(Duration::from_secs(1));
    }
    // A worker dies under its task (SIGKILL of its whole process group): nothing is lost.
    let victim = poll("a worker process of the pool", || {
        worker_processes(&c).first().copied()
    });
    common::send_signal(victim, true, Signal::KILL);
    all_succeeded(&c, &ids);
    assert_eq!(c.status()["succeeded"], ids.len() as u64);

    // Idle: every worker is released, and its process is gone.
    poll("the idle pool released", || {
        (pool_size(&c.status()) == 0 && worker_processes(&c).is_empty()).then_some(())
    });
    let max = sampled.max();
    drop(sampled);
    assert!(
        max <= 3,
        "--max-workers 3, yet {max} workers were counted at once"
    );
    assert!(max >= 2, "the pool never grew past {max} worker(s)");
    // Each worker's start-up, from asking for it to its joining, is measured (what `diffuse
    // calibrate` writes as a testbed's node_startup_s).
    let startup = &c.status()["pool"]["startup_seconds"];
    let (count, sum) = (
        startup["count"].as_u64().unwrap(),
        startup["sum"].as_f64().unwrap(),
    );
    assert!(count >= 2, "{startup}");
    assert!(sum > 0.0 && sum / (count as f64) < 30.0, "{startup}");
    let metrics = c.metrics();
    assert!(
        metrics.contains(&format!(
            "diffuse_pool_worker_startup_seconds_count {count}"
        )),
        "{metrics}"
    );
    stop_dispatcher(&mut c);
}

#[test]
fn a_stopped_dispatcher_gives_its_workers_back() {
    let mut c = Cluster::start_with(&[], &pool_args("local", "2", &["--min-workers", "2"]), &[]);
    poll("min-workers started and connected", || {
        (c.status()["workers_by_state"]["idle"] == 2).then_some(())
    });
    let list = c.status()["worker_list"].clone();
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .all(|w| w["job"].is_string()),
        "each worker shows its job id: {list}"
    );
    assert_eq!(worker_processes(&c).len(), 2);
    for pid in worker_processes(&c) {
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let env = String::from_utf8_lossy(&env);
        assert!(env.contains("DIFFUSE_POOL_REQUEST=dfs-"), "{env}");
        assert!(
            !env.contains(&c.client_token),
            "a worker has no use for the client token"
        );
    }
    let metrics = c.metrics();
    assert!(
        metrics.contains("diffuse_workers{state=\"idle\"} 2"),
        "{metrics}"
    );
    let out = common::run_diffuse(
        &["status", "--dispatcher", &c.url],
        None,
        &[("DIFFUSE_CLIENT_TOKEN", &c.client_token)],
        Duration::from_secs(30),
    );
    assert!(
        out.stdout.contains("pool: local, 2-2 workers; idle 2"),
        "{}",
        out.stdout
    );
    let rows = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("  dfs-") && l.contains(" idle "));
    assert_eq!(rows.count(), 2, "{}", out.stdout);
    assert!(out.stdout.contains("job "), "{}", out.stdout);
    stop_dispatcher(&mut c);
    poll("no worker process left", || {
        worker_processes(&c).is_empty().then_some(())
    });
}

#[test]
fn a_command_pool_starts_and_stops_workers_with_the_users_commands() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("commands.log");
    let start = format!(
        "echo start {{request}} >> {l}; {{worker}} > {d}/{{request}}.out 2>&1 & echo $!",
        l = log.display(),
        d = dir.path().display()
    );
    let stop = format!(
        "echo stop {{request}} {{job}} >> {l}; kill {{job}}",
        l = log.display()
    );
    let cache = format!("{}/cache-{{request}}", dir.path().display());
    let mut c = Cluster::start_with(
        &[],
        &pool_args(
            "command",
            "2",
            &[
                "--start-command",
                &start,
                "--stop-command",
                &stop,
                "--worker-cache-dir",
                &cache,
            ],
        ),
        &[],
    );
    let tasks = sleep_tasks("c", 6, 0.2);
    c.submit(&tasks);
    let ids = ids_of(&tasks);
    all_succeeded(&c, &ids);
    poll("idle command workers released", || {
        (pool_size(&c.status()) == 0).then_some(())
    });
    let text = std::fs::read_to_string(&log).unwrap();
    let starts = text.lines().filter(|l| l.starts_with("start dfs-")).count();
    assert!((1..=2).contains(&starts), "{text}");
    stop_dispatcher(&mut c);
}

#[test]
fn bad_pool_options_are_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.sqlite");
    let journal = journal.to_str().unwrap();
    let env = [("DIFFUSE_CLIENT_TOKEN", "c"), ("DIFFUSE_WORKER_TOKEN", "w")];
    let no_slurm = tempfile::tempdir().unwrap();
    let path = format!("{}:/usr/bin/env-only-absent", no_slurm.path().display());
    /// Arguments, extra environment, what the error says.
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (vec!["--provisioner", "pbs"], vec![], "invalid value 'pbs'"),
        (
            vec![
                "--provisioner",
                "local",
                "--min-workers",
                "5",
                "--max-workers",
                "2",
            ],
            vec![],
            "--min-workers 5 is above --max-workers 2",
        ),
        (
            vec!["--provisioner", "slurm"],
            vec![("PATH", path.as_str())],
            "`sbatch` is not installed",
        ),
        (
            vec!["--provisioner", "command"],
            vec![],
            "--provisioner command needs --start-command",
        ),
        (
            vec!["--max-workers", "3"],
            vec![],
            "--max-workers needs --provisioner",
        ),
        (
            vec!["--provisioner", "local", "--slurm-workers-per-job", "8"],
            vec![],
            "--slurm-workers-per-job needs --provisioner slurm",
        ),
    ];
    for (args, extra_env, says) in cases {
        let mut all = vec![
            "dispatcher",
            "--listen",
            "127.0.0.1:0",
            "--journal",
            journal,
        ];
        all.extend(args.iter().copied());
        let mut e = env.to_vec();
        e.extend(extra_env);
        // Port 0 with a pool is refused too; give a port so each case fails for its own reason.
        if args.contains(&"local") || args.contains(&"slurm") || args.contains(&"command") {
            all.extend(["--url", "http://127.0.0.1:1"]);
        }
        let bin = common::BIN;
        let out = Command::new(bin).args(&all).envs(e).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(says),
            "{args:?}: expected {says:?} in {stderr}"
        );
        assert!(
            !std::path::Path::new(journal).exists(),
            "{args:?}: the journal was created"
        );
    }
}

// ----- a real Slurm -----

/// Jobs of this dispatcher Slurm shows as pending or running.
fn live_jobs(slurm: &Slurm) -> Vec<(String, String)> {
    slurm
        .jobs("dfs-")
        .into_iter()
        .filter(|(_, state)| {
            matches!(
                state.as_str(),
                "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING"
            )
        })
        .collect()
}

/// A dispatcher whose pool is this Slurm's (`SLURM_CONF` and `extra_env` in its environment),
/// with at most `max` workers, caches under `dir`, squeue asked every second (unless `more`
/// says `--rm-poll`).
fn slurm_dispatcher(
    slurm: &Slurm,
    dir: &tempfile::TempDir,
    max: &str,
    more: &[&str],
    extra_env: &[(&str, &str)],
) -> Cluster {
    let conf = slurm.conf.to_str().unwrap().to_string();
    let cache = format!("{}/cache-{{request}}", dir.path().display());
    let mut args = vec!["--worker-cache-dir", cache.as_str()];
    if !more.contains(&"--rm-poll") {
        args.extend(["--rm-poll", "1s"]);
    }
    args.extend_from_slice(more);
    let mut env = vec![("SLURM_CONF", conf.as_str())];
    env.extend_from_slice(extra_env);
    Cluster::start_with(&env, &pool_args("slurm", max, &args), &[])
}

/// A Slurm under a fresh directory, bound as `(dir, slurm)` so that `slurm` drops first: its
/// `down` finds the pids file only while the directory exists.
fn slurm_or_skip(name: &str, cpus: u32) -> Option<(tempfile::TempDir, Slurm)> {
    if !is_root() {
        skip(&format!("{name}: needs root to run Slurm's daemons"));
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let slurm = Slurm::start(&dir.path().join("slurm"), cpus)?;
    Some((dir, slurm))
}

#[test]
fn a_slurm_pool_acquires_workers_with_sbatch_and_gives_them_back() {
    let Some((dir, slurm)) = slurm_or_skip("slurm pool", 8) else {
        return;
    };
    let conf = slurm.conf.to_str().unwrap().to_string();
    let mut c = slurm_dispatcher(&slurm, &dir, "3", &["--slurm-time", "10"], &[]);
    let conf2 = conf.clone();
    let jobs_sampled = Sampler::start(move || {
        let out = Command::new("squeue")
            .args(["--noheader", "--format", "%j %T"])
            .env("SLURM_CONF", &conf2)
            .output();
        out.map_or(0, |o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.starts_with("dfs-"))
                .count() as u64
        })
    });
    let mut ids = Vec::new();
    for (wave, n) in [2usize, 8, 16].into_iter().enumerate() {
        let tasks = sleep_tasks(&format!("s{wave}-"), n, 0.5);
        ids.extend(tasks.iter().map(|t| t["id"].as_str().unwrap().to_string()));
        c.submit(&tasks);
        std::thread::sleep(Duration::from_secs(1));
    }
    // scancel a worker job while it runs a task: the task runs again elsewhere.
    let running = poll("a worker job running a task", || {
        let s = c.status();
        let list = s["worker_list"].as_array()?.clone();
        list.into_iter()
            .find(|w| w["state"] == "running")
            .and_then(|w| w["job"].as_str().map(str::to_string))
    });
    slurm.cmd("scancel", &[&running]);
    all_succeeded(&c, &ids);

    // Idle: after the release timeout, squeue shows no job of the pool left.
    poll("the pool's jobs gone from squeue", || {
        (live_jobs(&slurm).is_empty() && pool_size(&c.status()) == 0).then_some(())
    });
    let max = jobs_sampled.max();
    drop(jobs_sampled);
    assert!(
        max <= 3,
        "--max-workers 3, yet squeue showed {max} jobs at once"
    );
    assert!(max >= 2, "the pool never grew past {max} job(s)");
    let all = slurm.jobs("dfs-");
    assert!(
        all.iter().any(|(j, st)| *j == running && st == "CANCELLED"),
        "the cancelled job: {all:?}"
    );
    stop_dispatcher(&mut c);
}

#[test]
fn a_hung_sbatch_times_out_and_stalls_no_dispatch() {
    let Some((dir, slurm)) = slurm_or_skip("hung sbatch", 4) else {
        return;
    };
    // An sbatch that never answers, first on PATH; squeue and scancel are Slurm's.
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let calls = dir.path().join("sbatch-calls");
    let wrapper = bin.join("sbatch");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho called >> {}\nexec sleep 600\n",
            calls.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut c = slurm_dispatcher(
        &slurm,
        &dir,
        "2",
        &["--rm-timeout", "2s", "--rm-retries", "1"],
        &[("PATH", &path)],
    );
    // A worker started by hand keeps the queue moving while sbatch hangs.
    c.worker("by-hand", 2, "10MB");
    let tasks = sleep_tasks("h", 10, 0.1);
    let t = Instant::now();
    c.submit(&tasks);
    let ids = ids_of(&tasks);
    all_succeeded(&c, &ids);
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "dispatch waited for sbatch: {:?}",
        t.elapsed()
    );
    let s = poll("the time-out reported in status", || {
        let s = c.status();
        s["pool"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("did not answer within"))
            .then_some(s)
    });
    assert!(live_jobs(&slurm).is_empty(), "no job was submitted: {s}");
    assert!(std::fs::read_to_string(&calls).unwrap().lines().count() >= 2);
    stop_dispatcher(&mut c);
}

#[test]
fn a_frozen_controller_leaves_no_second_job_for_one_request() {
    let Some((dir, slurm)) = slurm_or_skip("frozen controller", 8) else {
        return;
    };
    // squeue asked every 10 s: a look at the jobs that the freeze catches would hold the pool
    // (its own retries) until the controller is back, and the submissions would come after.
    let mut c = slurm_dispatcher(&slurm, &dir, "2", &["--rm-poll", "10s"], &[]);
    std::thread::sleep(Duration::from_secs(1)); // its first look at the jobs is over
    let conf = slurm.conf.to_str().unwrap().to_string();
    // Jobs of the pool squeue shows, every 0.5 s (while the controller is frozen squeue fails
    // after about 10 s and counts nothing; the jobs it would show are counted once it answers).
    let jobs_sampled = Sampler::start(move || {
        let out = Command::new("squeue")
            .args(["--noheader", "--format", "%j %T"])
            .env("SLURM_CONF", &conf)
            .output();
        std::thread::sleep(Duration::from_millis(400));
        out.map_or(0, |o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.starts_with("dfs-"))
                .count() as u64
        })
    });
    // Frozen for longer than sbatch's own time-out (about 10 s), and than a lookup's.
    let ctld = slurm.daemon_pid("slurmctld");
    common::send_signal(ctld, false, Signal::STOP);
    let tasks = sleep_tasks("f", 30, 1.0);
    c.submit(&tasks);
    std::thread::sleep(Duration::from_secs(25));
    common::send_signal(ctld, false, Signal::CONT);
    let ids = ids_of(&tasks);
    all_succeeded(&c, &ids);
    poll(
        "the pool's jobs gone from squeue after the idle release",
        || (live_jobs(&slurm).is_empty() && pool_size(&c.status()) == 0).then_some(()),
    );
    let max = jobs_sampled.max();
    drop(jobs_sampled);
    let all = slurm.jobs_named("dfs-");
    let log = c.dispatcher.as_ref().expect("dispatcher").log_text();
    assert!(
        max <= 2,
        "--max-workers 2, yet squeue showed {max} jobs of the pool at once: {all:?}\n{log}"
    );
    assert!(
        log.contains("looking the request up"),
        "the failed sbatch was not looked up: {log}"
    );
    // No request's name was given to two jobs that ran.
    let ran: Vec<String> = slurm
        .cmd("squeue", &["-h", "-t", "all", "-o", "%j %T"])
        .lines()
        .filter(|l| l.starts_with("dfs-") && l.ends_with(" COMPLETED"))
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect();
    let mut unique = ran.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        ran.len(),
        unique.len(),
        "two jobs ran for one request: {all:?}"
    );

    // A job under the pool's names that no request owns, made by hand while nothing is queued:
    // cancelled at once, and said so in status.
    let name = &all[0].2;
    let prefix = name.rsplit_once('-').unwrap().0;
    let stray = slurm
        .cmd(
            "sbatch",
            &[
                "--parsable",
                "--output",
                "/dev/null",
                "--job-name",
                &format!("{prefix}-99"),
                "--wrap",
                "sleep 300",
            ],
        )
        .trim()
        .to_string();
    let s = poll("the stray job cancelled and shown in status", || {
        let s = c.status();
        (s["pool"]["extra_jobs_cancelled"].as_u64() == Some(1)).then_some(s)
    });
    assert!(
        s["pool"]["last_extra_job"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("cancelled worker job {stray}"))),
        "{s}"
    );
    poll("the stray job gone", || {
        slurm
            .jobs(prefix)
            .iter()
            .any(|(j, st)| *j == stray && st == "CANCELLED")
            .then_some(())
    });
    assert!(live_jobs(&slurm).is_empty());
    stop_dispatcher(&mut c);
}

#[test]
fn one_sbatch_starts_a_job_array_of_workers_and_calls_stay_under_the_cap() {
    let Some((dir, slurm)) = slurm_or_skip("job array", 8) else {
        return;
    };
    let (path, calls) = common::slurm::logged_slurm_commands(dir.path(), 0.0);
    // squeue every second would be 60 calls a minute: the cap of 12 paces it. With a time limit
    // given, the workers do not ask squeue for it (their calls would be logged too).
    let mut c = slurm_dispatcher(
        &slurm,
        &dir,
        "6",
        &[
            "--slurm-workers-per-job",
            "6",
            "--max-pending",
            "6",
            "--rm-calls-per-minute",
            "12",
            "--slurm-time",
            "10",
        ],
        &[("PATH", &path)],
    );
    let tasks = sleep_tasks("a", 36, 1.0);
    c.submit(&tasks);
    let ids = ids_of(&tasks);
    all_succeeded(&c, &ids);
    // Six workers, one per element, each under its own request's name and cache directory.
    let names: std::collections::BTreeSet<String> = ids
        .iter()
        .map(|id| c.task(id)["node"].as_str().unwrap().to_string())
        .collect();
    let prefix = names.iter().next().unwrap().rsplit_once('-').unwrap().0;
    let expected: std::collections::BTreeSet<String> =
        (1..=6).map(|k| format!("{prefix}-{k}")).collect();
    assert!(
        names.is_subset(&expected) && names.len() >= 4,
        "tasks ran on {names:?}, not on the array's requests {expected:?}"
    );
    for name in &names {
        let cache = dir.path().join(format!("cache-{name}"));
        assert!(cache.is_dir(), "{} missing", cache.display());
    }
    let elements = slurm.cmd("squeue", &["-h", "--array", "-t", "all", "-o", "%i %j"]);
    let arrays: std::collections::BTreeSet<&str> = elements
        .lines()
        .filter(|l| l.contains(prefix))
        .map(|l| l.split('_').next().unwrap())
        .collect();
    assert_eq!(arrays.len(), 1, "one array job: {elements}");
    stop_dispatcher(&mut c);
    poll("the array's elements ended", || {
        live_jobs(&slurm).is_empty().then_some(())
    });

    let log = std::fs::read_to_string(&calls).unwrap();
    let count = |prog: &str| {
        log.lines()
            .filter(|l| l.starts_with(&format!("{prog} start ")))
            .count()
    };
    assert_eq!(count("sbatch"), 1, "one sbatch for six workers:\n{log}");
    assert!(
        count("scancel") <= 1,
        "the shutdown cancelled the jobs left in one call:\n{log}"
    );
    let times: Vec<f64> = log
        .lines()
        .filter(|l| l.split(' ').nth(1) == Some("start"))
        .filter_map(|l| l.split(' ').nth(2)?.parse().ok())
        .collect();
    for (i, t) in times.iter().enumerate() {
        let in_minute = times[i..].iter().filter(|u| **u - t < 59.9).count();
        assert!(
            in_minute <= 12,
            "{in_minute} resource-manager calls within a minute of call {i}:\n{log}"
        );
    }
    assert!(count("squeue") >= 2, "the jobs were followed:\n{log}");
}

#[test]
fn a_worker_near_its_jobs_time_limit_takes_no_task_that_would_not_fit_leaves_and_is_replaced() {
    let Some((dir, slurm)) = slurm_or_skip("time limit", 4) else {
        return;
    };
    // Jobs of one minute; each worker leaves 48 s before its limit, so it serves ~11 s.
    let mut c = slurm_dispatcher(
        &slurm,
        &dir,
        "1",
        &["--slurm-time", "1", "--worker-arg=--leave-before=48s"],
        &[],
    );
    let tasks: Vec<Value> = (0..30)
        .map(|i| json!({"id": format!("l{i}"), "cmd": "sleep 0.5", "walltime_s": 4}))
        .collect();
    c.submit(&tasks);
    let ids = ids_of(&tasks);
    all_succeeded(&c, &ids);
    let mut nodes = std::collections::BTreeSet::new();
    for id in &ids {
        let t = c.task(id);
        assert_eq!(
            t["outcome"]["attempt"], 1,
            "no task was stopped by its worker leaving: {t}"
        );
        nodes.insert(t["node"].as_str().unwrap().to_string());
    }
    assert!(
        nodes.len() >= 2,
        "the worker that left was replaced while work remained: {nodes:?}"
    );
    let jobs = slurm.jobs("dfs-");
    assert!(
        jobs.iter().all(|(_, st)| st != "TIMEOUT"),
        "no worker job reached its time limit: {jobs:?}"
    );
    assert!(
        jobs.iter().any(|(_, st)| st == "COMPLETED"),
        "a worker left by itself: {jobs:?}"
    );
    stop_dispatcher(&mut c);
}

/// Phase 1 spreads 8 files over two workers; one is released when idle; phase 2 reads them all
/// again. Returns the bytes phase 2 read from storage, and the status after it.
fn reread_after_release(handoff: &str) -> (u64, Value) {
    let mut c = Cluster::start_with(
        &[],
        &pool_args(
            "local",
            "2",
            &["--min-workers", "1", "--handoff", handoff, "--step", "all"],
        ),
        &[],
    );
    let files: Vec<String> = (0..8)
        .map(|i| {
            let p = c.data(&format!("f{i}"), &common::cluster::random_bytes(1 << 20));
            common::cluster::file_uri(&p)
        })
        .collect();
    let phase = |c: &Cluster, name: &str| {
        let tasks: Vec<Value> = files
            .iter()
            .enumerate()
            .map(|(i, uri)| {
                json!({"id": format!("{name}{i}"), "cmd": "sleep 0.4; wc -c {inputs[0]}", "inputs": [uri]})
            })
            .collect();
        c.submit(&tasks);
        let ids = ids_of(&tasks);
        all_succeeded(c, &ids);
    };
    phase(&c, "a");
    let nodes: std::collections::BTreeSet<String> = (0..8)
        .map(|i| {
            c.task(&format!("a{i}"))["node"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(nodes.len(), 2, "phase 1 ran on two workers: {nodes:?}");
    poll("one idle worker released", || {
        let s = c.status();
        (s["worker_list"].as_array()?.len() == 1 && s["workers"] == 1).then_some(())
    });
    let before = c.status()["traffic"]["bytes_storage"].as_u64().unwrap();
    phase(&c, "b");
    let s = c.status();
    let after = s["traffic"]["bytes_storage"].as_u64().unwrap();
    stop_dispatcher(&mut c);
    (after - before, s)
}

#[test]
fn a_released_worker_hands_its_cache_off_and_nothing_is_read_again_from_storage() {
    let (storage, s) = reread_after_release("4GB");
    assert_eq!(storage, 0, "every file was still on a worker: {s}");
    assert!(
        s["pool"]["handed_off"].as_u64().unwrap() >= 1,
        "the released worker's files were pushed: {s}"
    );
    let (storage, s) = reread_after_release("none");
    assert!(
        storage >= 1 << 20,
        "without hand-off, the released worker's files are read from storage again: {s}"
    );
    assert_eq!(s["pool"]["handed_off"], 0);
}
