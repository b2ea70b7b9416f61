//! The harness of the end-to-end tests: a real `diffuse dispatcher` and workers started as
//! processes in a temporary directory, spoken to over the dispatcher's HTTP API, and the small
//! helpers the tests share. Every process is killed when its guard drops, whether the test
//! passed or panicked; a failing test prints the tail of each process's log. Nothing waits a
//! fixed time: every wait polls with a deadline.

#![allow(dead_code)] // each test crate uses a different part

use super::{run_diffuse, Output, BIN};
use rustix::process::Signal;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long anything may take before the test fails (generous: a 2-core machine running the
/// tests of this file in parallel, debug builds).
pub const DEADLINE: Duration = Duration::from_secs(90);

// ----- small helpers -----

/// A random 64-bit number from the standard library's randomly keyed hasher.
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

pub fn random_token() -> String {
    format!("{:016x}{:016x}", random_u64(), random_u64())
}

/// `n` pseudo-random bytes (xorshift64*, randomly seeded).
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut x = random_u64() | 1;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(n);
    out
}

/// A port that was free a moment ago, for a process the test starts to `--listen` on.
///
/// Taken below Linux's ephemeral range (32768-60999), where nothing else on this machine is
/// handed ports: a port the kernel gave out for `:0` could be given again, between this call and
/// the process's bind, to another test's listener or to the source of any outbound connection
/// (CI saw a worker exit on its taken `--listen` port). Within this test binary each port is
/// handed out once (a counter); a binary's start is spread by its pid, and each port is checked
/// free on every address before it is returned.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        (std::process::id() * 97) % SPAN,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let port = (LOW + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN) as u16;
        if std::net::TcpListener::bind(("0.0.0.0", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {LOW}..{}", LOW + SPAN)
}

pub fn file_uri(p: &Path) -> String {
    assert!(p.is_absolute(), "{}", p.display());
    format!("file://{}", p.display())
}

pub fn tail(text: &str, n: usize) -> &str {
    let start = text.len().saturating_sub(n);
    let start = (start..text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    &text[start..]
}

/// Poll `f` until it returns `Some`, or panic with `what` after [`DEADLINE`].
#[track_caller]
pub fn poll<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "timed out after {DEADLINE:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("HTTP client")
}

// ----- processes -----

/// A child process, killed and reaped when dropped; its stdout and stderr go to a log file.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(name: &str, cmd: &mut Command, log: PathBuf) -> Proc {
        let file = std::fs::File::create(&log).expect("create log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("clone log file"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc {
            name: name.to_string(),
            child,
            log,
        }
    }

    /// For a `diffuse worker`: the pid of the worker proper, the child of the process started
    /// (its guard; see `diffuse_runtime::worker::guard`).
    pub fn worker_pid(&self) -> u32 {
        let guard = self.child.id();
        poll("the worker under its guard", || {
            let children =
                std::fs::read_to_string(format!("/proc/{guard}/task/{guard}/children")).ok()?;
            children.split_whitespace().next()?.parse().ok()
        })
    }

    /// SIGKILL the worker proper (as a crash would); its guard then kills what its tasks left
    /// and exits.
    pub fn kill_worker_proper(&mut self) {
        super::send_signal(self.worker_pid(), false, Signal::KILL);
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    pub fn log_text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }

    pub fn dump(&self) {
        eprintln!(
            "----- {} ({}) -----\n{}",
            self.name,
            self.log.display(),
            tail(&self.log_text(), 6000)
        );
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run `diffuse args…` to completion, killing it (and failing) if it outlives `deadline`.
pub fn diffuse(args: &[&str], deadline: Duration) -> Output {
    diffuse_with(args, None, &[], deadline)
}

/// [`diffuse`] in the directory `cwd` (default: the test's) with extra environment `env`.
pub fn diffuse_with(
    args: &[&str],
    cwd: Option<&Path>,
    env: &[(&str, &str)],
    deadline: Duration,
) -> Output {
    run_diffuse(args, cwd, env, deadline)
}

/// The lines of a run directory's `results.jsonl`, parsed.
pub fn results(run_dir: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(run_dir.join("results.jsonl")).expect("results.jsonl");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

pub fn result_of<'a>(results: &'a [Value], id: &str) -> &'a Value {
    results
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no result for {id} in {results:?}"))
}

// ----- a dispatcher and its workers -----

/// A `diffuse dispatcher` and the workers started against it, in one temporary directory.
pub struct Cluster {
    pub url: String,
    pub client_token: String,
    pub worker_token: String,
    pub env: Vec<(String, String)>,
    pub http: reqwest::blocking::Client,
    pub dispatcher: Option<Proc>,
    pub workers: Vec<Proc>,
    pub extra: Vec<Proc>,
    /// Extra arguments of every `diffuse dispatcher` this cluster starts.
    pub dispatcher_args: Vec<String>,
    /// A command the dispatcher is started under (e.g. `prlimit --nofile=1024:1024 --`).
    pub dispatcher_prefix: Vec<String>,
    /// With TLS: the dispatcher and the workers serve with this certificate and trust its CA,
    /// URLs are `https://`, and `http` trusts the CA.
    pub tls: Option<super::pki::Pki>,
    /// The dispatcher's journal: `<tmp>/journal.sqlite` unless a test puts it elsewhere.
    pub journal: PathBuf,
    pub dir: tempfile::TempDir,
}

impl Cluster {
    /// Start a dispatcher (extra environment for it and its workers: `env`) and wait until its
    /// API answers.
    pub fn start(env: &[(&str, &str)]) -> Cluster {
        Cluster::start_with(env, &[], &[])
    }

    /// [`Cluster::start`] with extra dispatcher arguments, under `prefix` (may be empty).
    pub fn start_with(env: &[(&str, &str)], args: &[&str], prefix: &[&str]) -> Cluster {
        Cluster::start_full(env, args, prefix, None, None)
    }

    /// [`Cluster::start`] with the dispatcher's journal at `journal` (on a small disk, say).
    pub fn start_with_journal(journal: &Path) -> Cluster {
        Cluster::start_full(&[], &[], &[], None, Some(journal.to_path_buf()))
    }

    /// [`Cluster::start_with`] over TLS with `pki`'s certificate ([`super::pki::Pki`]): the
    /// dispatcher and every worker get `--tls-cert`, `--tls-key` and `--tls-ca`.
    pub fn start_tls(env: &[(&str, &str)], args: &[&str], pki: super::pki::Pki) -> Cluster {
        Cluster::start_full(env, args, &[], Some(pki), None)
    }

    fn start_full(
        env: &[(&str, &str)],
        args: &[&str],
        prefix: &[&str],
        tls: Option<super::pki::Pki>,
        journal: Option<PathBuf>,
    ) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let journal = journal.unwrap_or_else(|| dir.path().join("journal.sqlite"));
        std::fs::create_dir_all(dir.path().join("data")).expect("data dir");
        let mut c = Cluster {
            url: String::new(),
            client_token: random_token(),
            worker_token: random_token(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            http: tls.as_ref().map_or_else(http, |p| p.http()),
            dispatcher: None,
            workers: Vec::new(),
            extra: Vec::new(),
            dispatcher_args: args.iter().map(|a| a.to_string()).collect(),
            dispatcher_prefix: prefix.iter().map(|a| a.to_string()).collect(),
            tls,
            journal,
            dir,
        };
        c.spawn_dispatcher();
        c
    }

    /// Start the dispatcher on a free port over its journal; wait until it answers.
    pub fn spawn_dispatcher(&mut self) {
        self.spawn_dispatcher_on(None);
    }

    /// Start the dispatcher on `port` (None: a free one); wait until it answers.
    pub fn spawn_dispatcher_on(&mut self, port: Option<u16>) {
        let journal = self.journal.clone();
        // The port may be taken between picking and binding: try a few.
        for attempt in 0..5 {
            let port = port.unwrap_or_else(free_port);
            let mut cmd = match self.dispatcher_prefix.split_first() {
                Some((program, args)) => {
                    let mut c = Command::new(program);
                    c.args(args).arg(BIN);
                    c
                }
                None => Command::new(BIN),
            };
            cmd.arg("dispatcher")
                .args(["--listen", &format!("127.0.0.1:{port}")])
                .arg("--journal")
                .arg(&journal)
                .args(&self.dispatcher_args)
                .args(self.tls_flags());
            self.envs(&mut cmd);
            let n = self.extra.len();
            let mut p = Proc::spawn(
                "dispatcher",
                &mut cmd,
                self.path(&format!("dispatcher-{n}-{attempt}.log")),
            );
            self.url = format!("{}://127.0.0.1:{port}", self.scheme());
            let start = Instant::now();
            let up = loop {
                if p.exited().is_some() {
                    break false;
                }
                if let Ok(r) = self
                    .http
                    .get(format!("{}/v1/status", self.url))
                    .bearer_auth(&self.client_token)
                    .send()
                {
                    assert!(r.status().is_success(), "status: {}", r.status());
                    break true;
                }
                if start.elapsed() > DEADLINE {
                    p.dump();
                    panic!("the dispatcher did not answer within {DEADLINE:?}");
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            if up {
                if let Some(old) = self.dispatcher.replace(p) {
                    self.extra.push(old);
                }
                return;
            }
            p.dump();
        }
        panic!("the dispatcher could not start (see its logs above)");
    }

    /// Kill the dispatcher (SIGKILL: no chance to clean up) and start a new one on the same
    /// journal, on a new port. Workers of the old one are killed too.
    pub fn restart_dispatcher(&mut self) {
        if let Some(d) = self.dispatcher.as_mut() {
            let _ = d.child.kill();
            let _ = d.child.wait();
        }
        for mut w in self.workers.drain(..) {
            w.kill_worker_proper();
            let _ = w.child.wait();
            self.extra.push(w);
        }
        self.spawn_dispatcher();
    }

    /// Kill the dispatcher (SIGKILL) and start a new one on the same journal and the same
    /// port, leaving the workers running: they connect again by themselves.
    pub fn crash_dispatcher_keep_workers(&mut self) {
        let port: u16 = self
            .url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port in the dispatcher URL");
        if let Some(mut d) = self.dispatcher.take() {
            let _ = d.child.kill();
            let _ = d.child.wait();
            self.extra.push(d);
        }
        self.spawn_dispatcher_on(Some(port));
    }

    /// Kill live worker number `i` (in start order) with SIGKILL. Its cache directory stays,
    /// for a restart.
    pub fn kill_worker(&mut self, i: usize) {
        let mut w = self.workers.remove(i);
        w.kill_worker_proper();
        let _ = w.child.wait();
        self.extra.push(w);
    }

    /// Send `signal` (e.g. STOP, CONT) to live worker number `i` (the worker proper, not its
    /// guard).
    pub fn signal_worker(&self, i: usize, signal: Signal) {
        super::send_signal(self.workers[i].worker_pid(), false, signal);
    }

    pub fn envs(&self, cmd: &mut Command) {
        cmd.env("DIFFUSE_CLIENT_TOKEN", &self.client_token)
            .env("DIFFUSE_WORKER_TOKEN", &self.worker_token)
            .env("DIFFUSE_LOG", "info")
            // Off unless the test turns it on (see `run_diffuse`).
            .env("DIFFUSE_REUSE", "off");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
    }

    /// `https` with TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The TLS flags of a server of this cluster (none without TLS).
    pub fn tls_flags(&self) -> Vec<String> {
        self.tls
            .as_ref()
            .map(|p| p.server_flags())
            .unwrap_or_default()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Write a data file under `<tmp>/data/` and return its path.
    pub fn data(&self, name: &str, content: &[u8]) -> PathBuf {
        let p = self.path("data").join(name);
        std::fs::write(&p, content).expect("write data file");
        p
    }

    /// A `diffuse worker` command against this dispatcher, with its peer server on a known port.
    pub fn worker_cmd(&self, name: &str, slots: u32, cache_size: &str) -> (Command, String) {
        self.worker_cmd_in(name, slots, cache_size, &self.path(&format!("w{name}")))
    }

    /// [`Cluster::worker_cmd`] with its cache in `cache_dir`.
    pub fn worker_cmd_in(
        &self,
        name: &str,
        slots: u32,
        cache_size: &str,
        cache_dir: &Path,
    ) -> (Command, String) {
        let port = free_port();
        let mut cmd = Command::new(BIN);
        cmd.arg("worker")
            .args(["--dispatcher", &self.url])
            .arg("--cache-dir")
            .arg(cache_dir)
            .args(["--cache-size", cache_size])
            .args(["--slots", &slots.to_string()])
            .args(["--name", name])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(self.tls_flags());
        self.envs(&mut cmd);
        (cmd, format!("{}://127.0.0.1:{port}", self.scheme()))
    }

    /// Start a worker; returns the URL of its peer data server.
    pub fn worker(&mut self, name: &str, slots: u32, cache_size: &str) -> String {
        let (mut cmd, peer) = self.worker_cmd(name, slots, cache_size);
        let n = self.workers.len() + self.extra.len();
        let log = self.path(&format!("worker-{name}-{n}.log"));
        self.workers
            .push(Proc::spawn(&format!("worker {name}"), &mut cmd, log));
        peer
    }

    /// Wait until exactly `n` workers are connected.
    #[track_caller]
    pub fn wait_workers(&mut self, n: u64) {
        let start = Instant::now();
        loop {
            for w in &mut self.workers {
                if let Some(st) = w.exited() {
                    // Its log says why (a --listen port taken between `free_port` and
                    // the bind, say).
                    let log = std::fs::read_to_string(&w.log).unwrap_or_default();
                    panic!(
                        "{} exited ({st}) before connecting; its log:\n{}",
                        w.name,
                        tail(&log, 2000)
                    );
                }
            }
            if self.status()["workers"].as_u64() == Some(n) {
                return;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{n} workers not connected within {DEADLINE:?}: {}",
                self.status()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// An authenticated GET of `path`; the response must be a success.
    #[track_caller]
    pub fn get(&self, path: &str) -> Value {
        let r = self
            .http
            .get(format!("{}{path}", self.url))
            .bearer_auth(&self.client_token)
            .send()
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let code = r.status();
        let text = r.text().expect("body");
        assert!(code.is_success(), "GET {path}: {code}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {path}: {e}: {text}"))
    }

    /// Every task (in `state`, if given), page after page.
    #[track_caller]
    pub fn list_tasks(&self, state: Option<&str>) -> Vec<Value> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut q = String::from("/v1/tasks?limit=5000");
            if let Some(s) = state {
                q.push_str(&format!("&state={s}"));
            }
            if let Some(a) = &after {
                q.push_str(&format!("&after={a}"));
            }
            let page = self.get(&q);
            all.extend(
                page["tasks"]
                    .as_array()
                    .expect("a page of tasks")
                    .iter()
                    .cloned(),
            );
            match page["next"].as_str() {
                Some(n) => after = Some(n.to_string()),
                None => return all,
            }
        }
    }

    #[track_caller]
    /// `GET /metrics` with the client token, as text.
    pub fn metrics(&self) -> String {
        self.http
            .get(format!("{}/metrics", self.url))
            .bearer_auth(&self.client_token)
            .send()
            .expect("GET /metrics")
            .text()
            .expect("metrics text")
    }

    /// `GET /v1/objects/{uri}`: where the dispatcher knows `uri` is held.
    pub fn object(&self, uri: &str) -> Value {
        let enc: String = uri
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'_' | b'-' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        self.get(&format!("/v1/objects/{enc}"))
    }

    pub fn status(&self) -> Value {
        self.get("/v1/status")
    }

    /// POST /v1/tasks with `body` and `token` (None: no Authorization header).
    pub fn post_tasks(&self, body: &str, token: Option<&str>) -> (u16, Value) {
        let mut req = self
            .http
            .post(format!("{}/v1/tasks", self.url))
            .body(body.to_string());
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().expect("POST /v1/tasks");
        let code = r.status().as_u16();
        let text = r.text().expect("body");
        (code, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Submit tasks (JSON values, one per line); they must be accepted.
    #[track_caller]
    pub fn submit(&self, tasks: &[Value]) {
        let body: String = tasks.iter().map(|t| format!("{t}\n")).collect();
        let (code, v) = self.post_tasks(&body, Some(&self.client_token));
        assert_eq!(code, 200, "submit: {v}");
        assert_eq!(v["submitted"].as_u64(), Some(tasks.len() as u64), "{v}");
    }

    #[track_caller]
    pub fn task(&self, id: &str) -> Value {
        self.get(&format!("/v1/tasks/{id}"))
    }

    /// Wait until task `id` is in `state`.
    #[track_caller]
    pub fn wait_state(&self, id: &str, state: &str) -> Value {
        poll(&format!("task {id} to be {state}"), || {
            let t = self.task(id);
            (t["state"] == state).then_some(t)
        })
    }

    /// Wait until task `id` has ended (succeeded, failed or cancelled) and shows its outcome.
    ///
    /// The outcome is waited for too: for a moment after a task ends the dispatcher can show
    /// the final state without the outcome (a bug, see
    /// `a_finished_task_always_shows_its_outcome`), which is not what the other tests are about.
    #[track_caller]
    pub fn wait_done(&self, id: &str) -> Value {
        poll(&format!("task {id} to end"), || {
            let t = self.task(id);
            let s = t["state"].as_str().unwrap_or_default();
            (["succeeded", "failed", "cancelled"].contains(&s) && !t["outcome"].is_null())
                .then_some(t)
        })
    }

    /// Wait until task `id` succeeded; returns its worker's report.
    #[track_caller]
    pub fn wait_succeeded(&self, id: &str) -> (Value, Value) {
        let t = self.wait_done(id);
        assert_eq!(t["state"], "succeeded", "task {id}: {t}");
        let r = report(&t);
        (t, r)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        for p in self
            .workers
            .iter_mut()
            .chain(self.extra.iter_mut())
            .chain(self.dispatcher.as_mut())
        {
            let _ = p.child.kill();
            let _ = p.child.wait();
            if panicking {
                p.dump();
            }
        }
    }
}

/// The worker's report of a finished task (its `outcome.result_json`, parsed).
#[track_caller]
pub fn report(task: &Value) -> Value {
    let text = task["outcome"]["result_json"]
        .as_str()
        .unwrap_or_else(|| panic!("no outcome.result_json in {task}"));
    serde_json::from_str(text).unwrap_or_else(|e| panic!("result_json: {e}: {text}"))
}

/// The captured standard output of a task, from the path in its report.
#[track_caller]
pub fn stdout_of(report: &Value) -> String {
    let path = report["stdout"]
        .as_str()
        .unwrap_or_else(|| panic!("no stdout in {report}"));
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// A report's traffic as (local, peer, storage, bytes_local, bytes_peer, bytes_storage).
#[track_caller]
pub fn traffic(t: &Value) -> [u64; 6] {
    [
        "local",
        "peer",
        "storage",
        "bytes_local",
        "bytes_peer",
        "bytes_storage",
    ]
    .map(|k| {
        t[k].as_u64()
            .unwrap_or_else(|| panic!("traffic field {k} missing in {t}"))
    })
}

pub fn wc_task(id: &str, uri: &str) -> Value {
    json!({"id": id, "cmd": ["wc", "-c", "{inputs[0]}"], "inputs": [uri]})
}

pub fn cat_task(id: &str, uri: &str) -> Value {
    json!({"id": id, "cmd": "cat {inputs[0]}", "inputs": [uri]})
}

/// A task that runs until the file `gate` exists (at most 120 s).
pub fn gated_task(id: &str, gate: &Path) -> Value {
    let cmd = format!(
        "i=0; while [ $i -lt 1200 ]; do [ -e '{}' ] && exit 0; sleep 0.1; i=$((i+1)); done; exit 1",
        gate.display()
    );
    json!({"id": id, "cmd": cmd})
}

/// Start `python3 -m moto.server` (an S3-compatible server) on a free port and wait until it
/// answers; without moto the test fails saying how to install it.
pub fn moto_server(dir: &Path) -> (Proc, u16) {
    let check = Command::new("python3")
        .args(["-c", "import moto, moto.server"])
        .output();
    match check {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "moto is not installed ({}); run `python3 -m pip install 'moto[server]'`",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => panic!(
            "cannot run python3 ({e}); install Python 3 and run `python3 -m pip install 'moto[server]'`"
        ),
    }
    let client = http();
    for attempt in 0..5 {
        let port = free_port();
        let mut cmd = Command::new("python3");
        cmd.args([
            "-m",
            "moto.server",
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ]);
        let mut p = Proc::spawn("moto", &mut cmd, dir.join(format!("moto{attempt}.log")));
        let start = Instant::now();
        loop {
            if p.exited().is_some() {
                p.dump();
                break;
            }
            if client
                .get(format!("http://127.0.0.1:{port}/"))
                .send()
                .is_ok()
            {
                return (p, port);
            }
            if start.elapsed() > DEADLINE {
                p.dump();
                panic!("moto did not answer within {DEADLINE:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    panic!("moto could not start (see its logs above)");
}

/// `diffuse run` of `tasks` (a task file written in `dir`) with `flags`, its run directory and
/// caches under `dir`: its output, and its results (none if it wrote no results file).
pub fn run_in(dir: &Path, tasks: &[Value], flags: &[&str]) -> (Output, Vec<Value>) {
    run_named(dir, "", tasks, flags)
}

/// [`run_in`], the task file `tasks<suffix>.jsonl` and the run directory `run<suffix>`: one of
/// several runs on the same caches.
pub fn run_named(
    dir: &Path,
    suffix: &str,
    tasks: &[Value],
    flags: &[&str],
) -> (Output, Vec<Value>) {
    let file = dir.join(format!("tasks{suffix}.jsonl"));
    let text: String = tasks.iter().map(|t| format!("{t}\n")).collect();
    std::fs::write(&file, text).unwrap();
    let run_dir = dir.join(format!("run{suffix}"));
    let cache = dir.join("cache");
    let mut args = vec![
        "run",
        file.to_str().unwrap(),
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ];
    args.extend_from_slice(flags);
    let out = diffuse(&args, DEADLINE);
    let results = if run_dir.join("results.jsonl").exists() {
        results(&run_dir)
    } else {
        Vec::new()
    };
    (out, results)
}
