//! A real Slurm across separate network hosts on this machine (`scripts/slurm-hosts.sh`):
//! munged and slurmctld on the head (the root namespace, at the bridge's address), one slurmd
//! per host, each in its own network, UTS and mount namespace, with its own address, host name
//! (`node1`, `node2`, ...) and node-local disk. A dispatcher on the head ([`head_dispatcher`])
//! with `--provisioner slurm` submits worker jobs that run on the hosts, reach it at the bridge
//! address and advertise their own host's address to their peers, as on a cluster.
//!
//! [`SlurmHosts::start`] returns once a job has run on every host (about 5 s); dropping it
//! stops the daemons and every job, kills what is left on the hosts, and removes the namespaces,
//! the bridge and its directory. Not root: no cluster, the test skips. A host can crash (its
//! link cut, every process on it killed, its namespace gone; its disk kept) and boot again.
//!
//! Below, what the tests of a pool on it share: its jobs by name and host, the workers
//! connected, `sbatch`/`squeue`/`scancel` wrapped to log every call, the live jobs sampled, and
//! the logs dumped when a test fails.

#![allow(dead_code)] // each test crate uses a different part

use super::cluster::{free_port, poll, Cluster, Proc, DEADLINE};
use super::host::{is_root, skip};
use super::netfault::NetHost;
use super::slurm::{script_down, script_up, slurm_cmd};
use super::task_runs::{data_files, ids, logged_task};
use super::BIN;
use rustix::process::Signal;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// One compute host.
#[derive(Clone, Debug)]
pub struct Host {
    /// Its Slurm node name and host name (`node1`, ...).
    pub node: String,
    /// Its address on the bridge.
    pub addr: String,
    /// Its network namespace (`/var/run/netns/<netns>`).
    pub netns: String,
}

/// A running Slurm whose nodes are separate hosts.
pub struct SlurmHosts {
    /// Where everything lives (`scripts/slurm-hosts.sh`'s DIR).
    pub dir: PathBuf,
    /// `dir/slurm.conf`: what `SLURM_CONF` must be for every client command.
    pub conf: PathBuf,
    /// The head's address (the bridge's, in the root namespace): slurmctld, and the dispatcher.
    pub head: String,
    /// The bridge every host is linked to, which the head's address is on.
    pub bridge: String,
    /// The head's network faults ([`SlurmHosts::head_net`]), once one is made: removed with
    /// the cluster.
    head_net: OnceLock<NetHost>,
    /// Host `i` is `hosts[i - 1]`, Slurm's `node<i>`.
    pub hosts: Vec<Host>,
    /// Holds `dir`; removed after the cluster is down.
    _root: tempfile::TempDir,
}

/// `scripts/slurm-hosts.sh`, from the repository root.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/slurm-hosts.sh")
}

impl SlurmHosts {
    /// `n` hosts declaring `cpus` CPUs each (that many one-CPU jobs run on a host at once), or
    /// None when not root (the script says why; tests then print SKIPPED).
    pub fn start(n: usize, cpus: u32) -> Option<SlurmHosts> {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("slurm");
        let t = Instant::now();
        script_up(&script(), &dir, &[n.to_string(), cpus.to_string()])?;
        let net = std::fs::read_to_string(dir.join("net")).expect("DIR/net");
        let mut head = String::new();
        let mut bridge = String::new();
        let mut hosts = Vec::new();
        for line in net.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f[..] {
                ["head", addr, br] => (head, bridge) = (addr.into(), br.into()),
                ["host", node, addr, netns] => hosts.push(Host {
                    node: node.into(),
                    addr: addr.into(),
                    netns: netns.into(),
                }),
                _ => panic!("DIR/net: {line:?}"),
            }
        }
        eprintln!(
            "slurm on {n} hosts up in {:.1} s (head {head})",
            t.elapsed().as_secs_f64()
        );
        Some(SlurmHosts {
            conf: dir.join("slurm.conf"),
            dir,
            head,
            bridge,
            head_net: OnceLock::new(),
            hosts,
            _root: root,
        })
    }

    /// Host `i` (1-based, as its node name).
    pub fn host(&self, i: usize) -> &Host {
        &self.hosts[i - 1]
    }

    /// The host whose address is `addr`, if any.
    pub fn host_at(&self, addr: &str) -> Option<&Host> {
        self.hosts.iter().find(|h| h.addr == addr)
    }

    /// What every host sees as its own disk (each sees its own [`SlurmHosts::disk`] there):
    /// where worker caches go, as `/local` on a cluster.
    pub fn local(&self) -> PathBuf {
        self.dir.join("local")
    }

    /// Host `i`'s disk, as the head sees it.
    pub fn disk(&self, i: usize) -> PathBuf {
        self.dir.join("disk").join(format!("node{i}"))
    }

    /// Run a client command (`squeue`, `scancel`, ...) with `SLURM_CONF`; its stdout. Panics,
    /// with its stderr, if it fails.
    pub fn cmd(&self, prog: &str, args: &[&str]) -> String {
        slurm_cmd(&self.conf, prog, args)
    }

    /// Every job `squeue -t all` shows (pending, running, and those ended in the last 5
    /// minutes) whose name starts with `prefix`.
    pub fn jobs(&self, prefix: &str) -> Vec<Job> {
        self.cmd("squeue", &["-h", "-t", "all", "-o", "%i|%T|%j|%N"])
            .lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.splitn(4, '|').collect();
                let [id, state, name, nodes] = f[..] else {
                    return None;
                };
                name.starts_with(prefix).then(|| Job {
                    id: id.into(),
                    state: state.into(),
                    name: name.into(),
                    node: nodes.trim().into(),
                })
            })
            .collect()
    }

    /// The jobs under `prefix` that are pending or running.
    pub fn live_jobs(&self, prefix: &str) -> Vec<Job> {
        let mut jobs = self.jobs(prefix);
        jobs.retain(Job::is_live);
        jobs
    }

    /// Node `i`'s state in `sinfo` (`idle`, `alloc`, `down*`, ...).
    pub fn node_state(&self, i: usize) -> String {
        self.cmd("sinfo", &["-h", "-n", &format!("node{i}"), "-o", "%t"])
            .trim()
            .to_string()
    }

    /// Host `i` loses power: its link is cut, every process on it killed (slurmd, its jobs'
    /// workers and tasks), its namespace removed. Its disk stays.
    pub fn crash(&self, i: usize) {
        self.script(&["crash", &i.to_string()]);
    }

    /// Host `i` comes back: its namespace and link made again, slurmd started; returns once the
    /// controller hears from it.
    pub fn boot(&self, i: usize) {
        self.script(&["boot", &i.to_string()]);
    }

    fn script(&self, args: &[&str]) {
        let out = Command::new(script())
            .arg(args[0])
            .arg(&self.dir)
            .args(&args[1..])
            .output()
            .expect("run scripts/slurm-hosts.sh");
        assert!(
            out.status.success(),
            "scripts/slurm-hosts.sh {args:?} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Shape what host `i` sends to `rate` (tc's units: `40mbit`): its NIC, the bottleneck of
    /// every transfer it serves.
    pub fn shape(&self, i: usize, rate: &str) {
        let ok = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.host(i).netns,
                "tc",
                "qdisc",
                "replace",
            ])
            .args(["dev", "eth0", "root", "tbf", "rate", rate])
            .args(["burst", "256kb", "latency", "200ms"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "tc on node{i}");
    }

    /// A command that runs `program` in host `i`'s mount namespace (its slurmd's), where
    /// [`SlurmHosts::local`] is its own disk.
    pub fn on_disk_of(&self, i: usize, program: &str) -> Command {
        let pids = std::fs::read_to_string(self.dir.join("pids")).expect("DIR/pids");
        let pid = pids
            .lines()
            .find_map(|l| l.strip_prefix(&format!("slurmd-node{i} ")))
            .unwrap_or_else(|| panic!("no slurmd of node{i} in DIR/pids"))
            .trim()
            .to_string();
        let mut c = Command::new("nsenter");
        c.arg(format!("--mount=/proc/{pid}/ns/mnt")).arg(program);
        c
    }

    /// Give host `i` a small disk: a tmpfs of `mb` MiB at `small` under its
    /// [`SlurmHosts::local`] (seen by that host only; it goes with the host's namespaces).
    /// Returns the path, as the host sees it.
    pub fn small_disk(&self, i: usize, mb: u64) -> PathBuf {
        let dir = self.local().join("small");
        let ok = self
            .on_disk_of(i, "sh")
            .arg("-c")
            .arg(format!(
                "mkdir -p '{0}' && mount -t tmpfs -o size={mb}m tmpfs '{0}'",
                dir.display()
            ))
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "a {mb} MiB tmpfs on node{i}");
        dir
    }

    /// Another program fills host `i`'s small disk ([`SlurmHosts::small_disk`]) to `leave`
    /// bytes free; the bytes it wrote.
    pub fn fill_small_disk(&self, i: usize, leave: u64) -> u64 {
        let dir = self.local().join("small");
        let out = self
            .on_disk_of(i, "stat")
            .args(["-f", "-c", "%a %S"])
            .arg(&dir)
            .output()
            .expect("stat -f");
        let text = String::from_utf8_lossy(&out.stdout);
        let free: Vec<u64> = text
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        let fill = (free[0] * free[1]).saturating_sub(leave);
        let ok = self
            .on_disk_of(i, "fallocate")
            .args(["-l", &fill.to_string()])
            .arg(dir.join("filler"))
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "fill node{i}'s small disk");
        fill
    }

    /// Shape what the head sends to the hosts to `rate` (its end of the bridge): a store on
    /// the head serves at that rate.
    pub fn shape_head(&self, rate: &str) {
        let ok = Command::new("tc")
            .args([
                "qdisc",
                "replace",
                "dev",
                &self.bridge,
                "root",
                "tbf",
                "rate",
                rate,
            ])
            .args(["burst", "256kb", "latency", "200ms"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "tc on the bridge");
    }

    /// Host `i`'s network, to break ([`NetHost`]): what it receives on its link.
    pub fn net(&self, i: usize) -> NetHost {
        NetHost::namespace(&self.host(i).netns)
    }

    /// The head's network, to break: what the machine receives from the bridge, in a chain of
    /// the cluster's own that goes when it does.
    pub fn head_net(&self) -> &NetHost {
        self.head_net
            .get_or_init(|| NetHost::machine(&self.bridge, &format!("dfs-{}", self.bridge)))
    }

    /// Wait until node `i` is in a state starting with `state` (`down`, `idle`, ...).
    pub fn wait_node(&self, i: usize, state: &str) -> Duration {
        let t = Instant::now();
        poll(&format!("node{i} {state}"), || {
            self.node_state(i).starts_with(state).then_some(())
        });
        t.elapsed()
    }
}

impl Drop for SlurmHosts {
    /// `scripts/slurm-hosts.sh down`: the daemons, jobs, namespaces and bridge are gone when
    /// this returns (then the directory).
    fn drop(&mut self) {
        if let Some(net) = self.head_net.get() {
            net.remove_chain();
        }
        script_down(&script(), &self.dir);
        if std::thread::panicking() {
            let log = self.dir.join("log/slurmctld.log");
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            eprintln!(
                "----- slurmctld ({}) -----\n{}",
                log.display(),
                super::cluster::tail(&text, 3000)
            );
        }
    }
}

/// A job as `squeue` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    pub id: String,
    pub state: String,
    pub name: String,
    /// The node it runs on (empty while pending).
    pub node: String,
}

impl Job {
    /// Pending or running (not ended).
    pub fn is_live(&self) -> bool {
        matches!(
            self.state.as_str(),
            "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING" | "REQUEUED"
        )
    }
}

/// A dispatcher on the head (the root namespace), listening on the bridge address: extra
/// arguments `args`, extra environment `env` (for it and the workers it starts; `SLURM_CONF` is
/// added). Its journal and pool directory are in the returned cluster's directory, which every
/// host sees.
pub fn head_dispatcher(slurm: &SlurmHosts, args: &[&str], env: &[(&str, &str)]) -> Cluster {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("data")).expect("data dir");
    let mut env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    env.push(("SLURM_CONF".into(), slurm.conf.display().to_string()));
    let mut c = Cluster {
        url: String::new(),
        client_token: super::cluster::random_token(),
        worker_token: super::cluster::random_token(),
        env,
        http: super::cluster::http(),
        dispatcher: None,
        workers: Vec::new(),
        extra: Vec::new(),
        dispatcher_args: args.iter().map(|a| a.to_string()).collect(),
        dispatcher_prefix: Vec::new(),
        tls: None,
        journal: dir.path().join("journal.sqlite"),
        dir,
    };
    // A port free on the head's address a moment ago; taken in between, try another.
    for _ in 0..5 {
        let port = free_port();
        c.url = format!("http://{}:{port}", slurm.head);
        if spawn(&mut c) {
            return c;
        }
    }
    panic!("the dispatcher could not start on the head (see its logs above)");
}

/// SIGKILL the head's dispatcher (no chance to clean up: its workers' jobs stay) and start
/// another on the same journal and address, as a head node that rebooted would. Returns how
/// long the new one took to answer.
pub fn crash_and_restart_dispatcher(c: &mut Cluster) -> Duration {
    if let Some(mut d) = c.dispatcher.take() {
        let _ = d.child.kill();
        let _ = d.child.wait();
        c.extra.push(d);
    }
    let t = Instant::now();
    assert!(
        spawn(c),
        "the dispatcher did not start again on its journal"
    );
    t.elapsed()
}

/// Start `diffuse dispatcher` listening at `c.url`'s address; true once it answers, false if it
/// exited first (its log dumped).
fn spawn(c: &mut Cluster) -> bool {
    let listen = c.url.trim_start_matches("http://").to_string();
    let mut cmd = Command::new(BIN);
    cmd.arg("dispatcher")
        .args(["--listen", &listen])
        .arg("--journal")
        .arg(c.path("journal.sqlite"))
        .args(&c.dispatcher_args);
    c.envs(&mut cmd);
    let n = c.extra.len() + usize::from(c.dispatcher.is_some());
    let mut p = Proc::spawn(
        "dispatcher (head)",
        &mut cmd,
        c.path(&format!("dispatcher-{n}.log")),
    );
    let start = Instant::now();
    loop {
        if p.exited().is_some() {
            p.dump();
            c.extra.push(p);
            return false;
        }
        let up = c
            .http
            .get(format!("{}/v1/status", c.url))
            .bearer_auth(&c.client_token)
            .send()
            .is_ok_and(|r| r.status().is_success());
        if up {
            if let Some(old) = c.dispatcher.replace(p) {
                c.extra.push(old);
            }
            return true;
        }
        if start.elapsed() > DEADLINE {
            p.dump();
            panic!("the dispatcher on the head did not answer within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The log of the head's current dispatcher and of those before it, oldest first.
pub fn dispatcher_logs(c: &Cluster) -> String {
    c.extra
        .iter()
        .chain(c.dispatcher.as_ref())
        .filter(|p| p.name.starts_with("dispatcher"))
        .map(Proc::log_text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Each worker's advertised peer URL, from the dispatchers' `worker joined` lines: (worker,
/// URL), in the order they joined.
pub fn advertised_peers(c: &Cluster) -> Vec<(String, String)> {
    dispatcher_logs(c)
        .lines()
        .filter(|l| l.contains("worker joined") && l.contains("peer="))
        .filter_map(|l| {
            let field = |key: &str| {
                let rest = &l[l.find(key)? + key.len()..];
                Some(
                    rest.split_whitespace()
                        .next()?
                        .trim_matches('"')
                        .to_string(),
                )
            };
            Some((field("worker=")?, field("peer=")?))
        })
        .collect()
}

/// The host part of a URL (`http://10.92.3.11:4000` -> `10.92.3.11`).
pub fn url_host(url: &str) -> &str {
    let rest = url.split("://").nth(1).unwrap_or(url);
    rest.rsplit_once(':').map_or(rest, |(h, _)| h)
}

// ----- the pool on it: its jobs and workers -----

/// The `--job-name`s of the `sbatch` calls logged so far that `started` (or ended).
pub fn sbatch_names(log: &Path, what: &str) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with(&format!("sbatch {what} ")))
        .filter_map(|l| {
            let rest = &l[l.find("--job-name ")? + "--job-name ".len()..];
            Some(rest.split_whitespace().next()?.to_string())
        })
        .collect()
}

/// Connected workers by name, from status.
pub fn connected(c: &Cluster) -> Vec<String> {
    c.status()["worker_list"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter(|w| w["state"] == "idle" || w["state"] == "running")
                .filter_map(|w| w["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The host (node name) each pool job ran on, by job (request) name.
pub fn hosts_of_jobs(s: &SlurmHosts) -> BTreeMap<String, String> {
    s.jobs("dfs-")
        .into_iter()
        .filter(|j| !j.node.is_empty())
        .map(|j| (j.name, j.node))
        .collect()
}

/// SIGTERM the dispatcher, as a user stopping it would: it gives every worker job back. Then
/// no job of the pool may be left.
pub fn stop_pool(c: &mut Cluster, s: &SlurmHosts) {
    let d = c.dispatcher.as_mut().expect("dispatcher");
    super::send_signal(d.child.id(), false, Signal::TERM);
    poll("the dispatcher to stop", || d.exited());
    poll("the pool's jobs gone", || {
        s.live_jobs("dfs-").is_empty().then_some(())
    });
}

/// A pool job's worker log (its job output in the pool directory).
pub fn worker_log(c: &Cluster, request: &str) -> String {
    std::fs::read_to_string(c.path(&format!("journal.sqlite.pool/{request}.out")))
        .unwrap_or_default()
}

/// On failure (or with `FAULTS_SLURM_LOGS=1`), the dispatchers' logs and the tails of the pool's
/// worker logs (the job outputs in its pool directory).
pub struct DumpWorkerLogs(PathBuf);

impl DumpWorkerLogs {
    pub fn of(c: &Cluster) -> DumpWorkerLogs {
        DumpWorkerLogs(c.dir.path().to_path_buf())
    }
}

impl Drop for DumpWorkerLogs {
    fn drop(&mut self) {
        if !std::thread::panicking() && std::env::var_os("FAULTS_SLURM_LOGS").is_none() {
            return;
        }
        let mut logs: Vec<PathBuf> = std::fs::read_dir(&self.0)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("dispatcher-"))
            })
            .collect();
        logs.sort();
        let pool = std::fs::read_dir(self.0.join("journal.sqlite.pool"));
        let mut outs: Vec<PathBuf> = pool
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        outs.retain(|p| p.extension().is_some_and(|x| x == "out"));
        outs.sort();
        for (path, keep) in logs
            .iter()
            .map(|p| (p, 20_000))
            .chain(outs.iter().map(|p| (p, 2500)))
        {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            eprintln!(
                "----- {} -----\n{}",
                path.display(),
                super::cluster::tail(&text, keep)
            );
        }
    }
}

/// Samples the number of the pool's live jobs every 200 ms on a thread until dropped; keeps
/// the largest.
pub struct JobSampler {
    max: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl JobSampler {
    pub fn start(conf: &Path) -> JobSampler {
        use std::sync::atomic::Ordering;
        let (max, stop) = (
            std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        );
        let (m, st, conf) = (max.clone(), stop.clone(), conf.to_path_buf());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let out = std::process::Command::new("squeue")
                    .args(["-h", "-o", "%j %T"])
                    .env("SLURM_CONF", &conf)
                    .output();
                let n = out.map_or(0, |o| {
                    String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .filter(|l| l.starts_with("dfs-"))
                        .count()
                });
                m.fetch_max(n, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        JobSampler {
            max,
            stop,
            thread: Some(thread),
        }
    }

    pub fn max(&self) -> usize {
        self.max.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for JobSampler {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Names given to more than one job (each a request started twice), from `squeue -t all`.
pub fn names_with_two_jobs(s: &SlurmHosts) -> BTreeMap<String, Vec<String>> {
    let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for j in s.jobs("dfs-") {
        by_name
            .entry(j.name)
            .or_default()
            .push(format!("{} {} {}", j.id, j.state, j.node));
    }
    by_name.retain(|_, jobs| jobs.len() > 1);
    by_name
}

/// The connected workers by the host their job runs on (node name -> worker), waiting for `n`.
pub fn workers_by_host(c: &Cluster, s: &SlurmHosts, n: usize) -> BTreeMap<String, String> {
    poll(&format!("{n} workers connected"), || {
        (connected(c).len() == n).then_some(())
    });
    let on = hosts_of_jobs(s);
    connected(c)
        .into_iter()
        .map(|w| (on.get(&w).cloned().unwrap_or_default(), w))
        .collect()
}

// ----- what the pool tests share -----

/// The tests take turns: each runs a Slurm of its own and a pool of workers on a 2-core machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// A Slurm of `hosts` hosts of `cpus` CPUs, or None (SKIPPED) when not root.
pub fn slurm_or_skip(test: &str, hosts: usize, cpus: u32) -> Option<SlurmHosts> {
    if !is_root() {
        skip(&format!(
            "{test}: needs root (Slurm's daemons, network namespaces)"
        ));
        return None;
    }
    SlurmHosts::start(hosts, cpus)
}

/// A Slurm pool of at most `max` workers of `cores` cores, each caching in `cache` on its own host's
/// disk (a path under [`SlurmHosts::local`]), squeue asked every second, workers given up after
/// 5 s of silence; a flag in `more` stands instead of its default here.
pub fn pool_args(s: &SlurmHosts, max: u32, cores: u32, cache: &str, more: &[&str]) -> Vec<String> {
    let cache = s.local().join(cache).display().to_string();
    let defaults = [
        ("--provisioner", "slurm"),
        ("--max-workers", &max.to_string()),
        ("--worker-cores", &cores.to_string()),
        ("--worker-cache-size", "400MB"),
        ("--worker-cache-dir", &cache),
        ("--slurm-time", "30"),
        ("--rm-poll", "1s"),
        ("--release-grace", "5s"),
        ("--heartbeat-timeout", "5"),
    ];
    let mut a: Vec<String> = Vec::new();
    for (flag, value) in defaults {
        if !more.contains(&flag) {
            a.extend([flag.to_string(), value.to_string()]);
        }
    }
    a.extend(more.iter().map(|m| m.to_string()));
    a
}

pub fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The pool flags of [`two_workers_then_a_hand_off`]: one worker kept, an idle one released
/// after 3 s, a hand-off given a minute.
pub const HANDOFF_POOL: [&str; 6] = [
    "--min-workers",
    "1",
    "--idle-release",
    "3s",
    "--handoff-time",
    "60s",
];

/// Two tasks of four 4 MB files each grow the pool to two workers; once
/// both are idle, one is released down to `--min-workers 1` and starts pushing its files to the
/// other. The files, the tasks, and the dispatcher's line that says the hand-off began.
pub fn two_workers_then_a_hand_off(c: &Cluster, runs: &Path) -> (Vec<String>, Vec<String>, String) {
    let files = data_files(c, "h", 8, 4 << 20);
    let first: Vec<Value> = (0..2)
        .map(|k| {
            logged_task(
                &format!("p{k}"),
                "sleep 3; cat {inputs[0]} {inputs[1]} {inputs[2]} {inputs[3]} | wc -c",
                &files[k * 4..k * 4 + 4],
                runs,
            )
        })
        .collect();
    c.submit(&first);
    let all = ids(&first);
    for id in &all {
        c.wait_done(id);
    }
    let handing = poll("a released worker handing its cache off", || {
        dispatcher_logs(c)
            .lines()
            .find(|l| l.contains("handing its cache off before release"))
            .map(String::from)
    });
    (files, all, handing)
}

/// An HTTP store on the head serving `dir` (`python3 -m http.server`): every read of it
/// crosses a link. The server (stopped when dropped) and its URL.
pub fn head_store(s: &SlurmHosts, c: &Cluster, dir: &Path) -> (Proc, String) {
    let port = free_port().to_string();
    let mut serve = Command::new("python3");
    serve
        .args(["-m", "http.server", "--bind", &s.head, &port, "--directory"])
        .arg(dir);
    let p = Proc::spawn("http store", &mut serve, c.path("store.log"));
    poll("the HTTP store to answer", || {
        std::net::TcpStream::connect(format!("{}:{port}", s.head)).ok()
    });
    (p, format!("http://{}:{port}", s.head))
}
