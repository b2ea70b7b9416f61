//! `diffuse run`: the embedded default. Starts a dispatcher in this process and N local worker
//! processes (each with its own cache directory, standing in for separate nodes), submits a
//! task file, shows progress, waits, writes per-task results, and summarises.
//!
//! SIGINT (Ctrl-C) or SIGTERM stops the run: the workers stop their tasks (each task's whole
//! process group) and exit cleanly, the results of what ended are written, and
//! `diffuse run --resume RUN_DIR` later continues from the journal: tasks that ended keep their
//! outcome, the others run.

use crate::dispatcher::scheduler::SchedulerConfig;
use crate::dispatcher::{self, DispatcherConfig, Handle, Tokens};
use crate::journal::Journal;
use crate::spec::{parse_task_bytes, SpecError, TaskDef, TaskDefaults};
use diffuse_core::CoreConfig;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Settings of `diffuse run`.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The task file (JSON Lines or JSON array). With `resume`, the one the run was started
    /// with is used when this is empty.
    pub tasks: PathBuf,
    /// Local worker processes.
    pub workers: u32,
    /// Slots per worker.
    pub slots_per_worker: u32,
    /// Cache quota per worker, bytes.
    pub cache_size: u64,
    /// Scheduling core settings (policy, window, threshold).
    pub core: CoreConfig,
    /// Eviction policy of the workers.
    pub eviction: diffuse_core::EvictionPolicy,
    /// Directory for the journal, caches, logs and results. A new run needs it new or empty;
    /// see [`new_run_dir`].
    pub run_dir: PathBuf,
    /// Continue the run in `run_dir` from its journal instead of starting one.
    pub resume: bool,
    /// The `diffuse` executable to start workers with.
    pub exe: PathBuf,
    /// Workers run nothing (dispatcher throughput benchmark).
    pub noop: bool,
    /// Print a progress line to stderr.
    pub progress: bool,
    /// Shared-storage emulation: serve `file://` inputs under this root at this many bytes/s in
    /// total (see `crate::storage_emulator`).
    pub storage_bandwidth: Option<(PathBuf, f64)>,
    /// `file://` inputs must be under one of these (passed to the workers; empty: anywhere).
    pub input_roots: Vec<PathBuf>,
    /// Where the workers' caches live between runs ([`crate::run_caches`]).
    pub cache_root: PathBuf,
    /// What a task that does not say gets (`--retries`, `--task-timeout`).
    pub task_defaults: TaskDefaults,
    /// Tasks made on the command line (`--each`) instead of read from `tasks`; they are written
    /// to `<run-dir>/tasks.jsonl`.
    pub defs: Option<Vec<TaskDef>>,
    /// Print each task's stdout on this process's stdout as the task ends, whole (`Some(true)`:
    /// in the order the tasks were given).
    pub print: Option<bool>,
    /// An elastic pool instead of `workers` fixed ones: local workers started as the queue
    /// grows, at most this many, each released after `idle_release` without a task. Their
    /// caches live in the run directory (a repeated run starts cold).
    pub max_workers: Option<u32>,
    /// See `max_workers`.
    pub idle_release: Duration,
    /// Reuse the kept results of identical tasks (`--reuse`, on by default).
    pub reuse: bool,
}

/// The result index's file under the caches' root.
pub const RESULTS_STORE: &str = "results.sqlite";

/// A failed task, as the summary shows it.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    /// Task id.
    pub id: String,
    /// Its exit code, if its process exited.
    pub exit_code: Option<i32>,
    /// Why it failed, if not an exit code.
    pub error: Option<String>,
    /// The worker it ran on.
    pub node: Option<String>,
    /// The last lines of its stderr.
    pub stderr_tail: Option<String>,
}

/// What `diffuse run --json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    /// Tasks in the run.
    pub tasks: u64,
    /// Tasks that exited 0.
    pub tasks_ok: u64,
    /// Of those, tasks that did not run: an identical task's kept result stood for them.
    pub tasks_reused: u64,
    /// Tasks that failed (non-zero exit, missing input, exec error) or were cancelled.
    pub tasks_failed: u64,
    /// Tasks that had not ended when the run was interrupted.
    pub tasks_not_run: u64,
    /// The signal that interrupted the run (`SIGINT`, `SIGTERM`), if one did.
    pub interrupted: Option<String>,
    /// From submission (or resumption) to the last outcome, seconds.
    pub makespan_s: f64,
    /// Tasks ended per second over the makespan.
    pub tasks_per_s: f64,
    /// Fraction of input accesses served by the worker's own cache.
    pub hit_local: f64,
    /// Fraction served by a peer's cache.
    pub hit_peer: f64,
    /// Fraction served by persistent storage.
    pub miss: f64,
    /// Bytes read from local caches.
    pub bytes_local: u64,
    /// Bytes read from peers.
    pub bytes_peer: u64,
    /// Bytes read from persistent storage.
    pub bytes_storage: u64,
    /// Input accesses in all (0: the tasks read no input).
    pub accesses: u64,
    /// The first failed tasks (at most 10), with why.
    pub failures: Vec<Failure>,
    /// Per-task results, one JSON object per line.
    pub results: PathBuf,
    /// Captured stdout and stderr of every attempt.
    pub logs: PathBuf,
    /// The run directory.
    pub run_dir: PathBuf,
}

/// Why a run could not start, or stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The task file is malformed: nothing was submitted.
    #[error("{file}: {error}")]
    BadTaskFile {
        /// The file.
        file: String,
        /// Line, field and problem.
        error: SpecError,
    },
    /// The run directory, its record, the task file or the cache directory cannot be used (the
    /// message says which, and why).
    #[error("{0}")]
    Setup(String),
    /// A file operation failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The in-process dispatcher could not start.
    #[error(transparent)]
    Dispatcher(#[from] dispatcher::StartError),
    /// The in-process dispatcher refused a request or stopped.
    #[error("{0}")]
    Api(String),
    /// The local workers could not be started or kept running.
    #[error("{0}")]
    Workers(String),
    /// The journal could not be read for the results.
    #[error(transparent)]
    Journal(#[from] crate::journal::JournalError),
}

impl From<dispatcher::ApiError> for RunError {
    fn from(e: dispatcher::ApiError) -> RunError {
        RunError::Api(e.to_string())
    }
}

/// What a run directory records of its run, for `--resume`.
#[derive(Serialize, Deserialize)]
struct RunRecord {
    tasks: PathBuf,
}

const RECORD: &str = "run.json";

fn token() -> String {
    let mut b = [0u8; 24];
    rand::rng().fill_bytes(&mut b);
    hex::encode(b)
}

/// A new directory under `base` named after the time (UTC) it was made: `run-20261123-170405`,
/// or `run-20261123-170405-2` (and so on) when two runs start in the same second.
pub fn new_run_dir(base: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(base)?;
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let stamp = utc_stamp(secs);
    for n in 1.. {
        let name = if n == 1 {
            format!("run-{stamp}")
        } else {
            format!("run-{stamp}-{n}")
        };
        let dir = base.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    unreachable!("some suffix is free")
}

/// `YYYYMMDD-HHMMSS` in UTC for Unix time `secs` (the civil-from-days algorithm of H. Hinnant).
fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

struct Workers(Vec<std::process::Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// SIGINT or SIGTERM, whichever comes first: its name.
async fn interrupted() -> String {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM".into(),
        _ = int.recv() => "SIGINT".into(),
    }
}

/// Run a task file to completion (or continue one, with `resume`): the steps below, in order.
pub async fn run(cfg: RunConfig) -> Result<RunSummary, RunError> {
    let mut cfg = cfg;
    cfg.run_dir = std::path::absolute(&cfg.run_dir)?;
    let journal = cfg.run_dir.join("journal.sqlite");
    let defs = if cfg.resume {
        resume_record(&mut cfg, &journal)?;
        None
    } else {
        Some(new_run(&mut cfg, &journal)?)
    };
    let tokens = Tokens {
        client: token(),
        worker: token(),
        metrics: None,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let (handle, scheduler) = start_dispatcher(&cfg, &journal, &tokens, &url)?;
    // An elastic pool's workers come from the dispatcher's provisioner; a fixed pool's are
    // started here, on caches kept between runs.
    let fixed = if cfg.max_workers.is_some() {
        0
    } else {
        cfg.workers
    };
    let caches = claim_caches(&cfg, fixed)?;
    let logs = cfg.run_dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(dispatcher::serve(
        listener,
        handle.clone(),
        crate::server::Limits::standard(),
        None,
        async {
            let _ = stop_rx.await;
        },
    ));
    let mut local = Local {
        workers: Workers(Vec::new()),
        restarts: Vec::new(),
        caches,
        url,
        token: tokens.worker.clone(),
        logs,
    };
    for (i, cache) in local.caches.dirs.iter().enumerate() {
        let child = start_worker(&cfg, i as u32, cache, &local.url, &local.token)?;
        local.workers.0.push(child);
    }
    local.restarts = vec![0; local.workers.0.len()];
    let mut signal = std::pin::pin!(interrupted());
    let mut stopped_by: Option<String> = None;
    tokio::select! {
        r = wait_for_workers(&handle, fixed, &mut local.workers) => r?,
        s = &mut signal => stopped_by = Some(s),
    }

    let start = Instant::now();
    let mut printer = cfg
        .print
        .map(|keep_order| Printer::new(keep_order, defs.as_deref()));
    if let (Some(defs), None) = (defs, &stopped_by) {
        handle
            .submit(defs)
            .await
            .map_err(|e| RunError::Api(format!("submission refused: {e}")))?;
    }
    let status = follow(
        &cfg,
        &handle,
        &mut local,
        printer.as_mut(),
        &mut signal,
        &mut stopped_by,
        start,
    )
    .await?;
    let makespan = start.elapsed().as_secs_f64();
    if cfg.progress && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprintln!();
    }
    stop_workers(&mut local.workers, stopped_by.as_deref(), &handle).await;
    // Outcomes of the last moments, journaled: counted in the summary too.
    let status = handle.status().await.unwrap_or(status);
    if let Some(p) = printer.as_mut() {
        p.poll(&handle).await?;
        p.finish();
    }
    let _ = stop_tx.send(());
    let _ = server.await;
    drop(handle);
    let _ = tokio::task::spawn_blocking(move || scheduler.join()).await;

    let results = cfg.run_dir.join("results.jsonl");
    let failures = write_results(&journal, &results)?;
    let Local { caches, logs, .. } = local;
    drop(caches);
    Ok(summary(
        &status, stopped_by, makespan, failures, results, logs, &cfg,
    ))
}

/// `--resume`: the run directory holds a run; its task file is the one it was started with
/// unless given.
fn resume_record(cfg: &mut RunConfig, journal: &Path) -> Result<(), RunError> {
    if !journal.exists() {
        return Err(RunError::Setup(format!(
            "--resume {}: no run there (no journal.sqlite)",
            cfg.run_dir.display()
        )));
    }
    if cfg.tasks.as_os_str().is_empty() {
        let record_path = cfg.run_dir.join(RECORD);
        let record: RunRecord = std::fs::read(&record_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| {
                RunError::Setup(format!("--resume: cannot read {}", record_path.display()))
            })?;
        cfg.tasks = record.tasks;
    }
    Ok(())
}

/// A new run: its tasks read (or made on the command line, then written to the run directory),
/// the run directory made and its record written.
fn new_run(cfg: &mut RunConfig, journal: &Path) -> Result<Vec<TaskDef>, RunError> {
    let mut defs = match cfg.defs.take() {
        Some(defs) => defs,
        None => {
            let bytes = std::fs::read(&cfg.tasks).map_err(|e| {
                RunError::Setup(format!("cannot read {}: {e}", cfg.tasks.display()))
            })?;
            parse_task_bytes(&bytes).map_err(|error| RunError::BadTaskFile {
                file: cfg.tasks.display().to_string(),
                error,
            })?
        }
    };
    if cfg.reuse {
        // Program files named in commands are part of the tasks' identities.
        let base = std::path::absolute(&cfg.tasks)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .filter(|_| !cfg.tasks.as_os_str().is_empty())
            .unwrap_or_else(|| std::env::current_dir().unwrap_or_default());
        let mut hasher = crate::reuse::programs::ProgramHasher::new(&base);
        for d in &mut defs {
            hasher.fill(d);
        }
    }
    std::fs::create_dir_all(&cfg.run_dir)
        .map_err(|e| RunError::Setup(format!("cannot create {}: {e}", cfg.run_dir.display())))?;
    if journal.exists() {
        return Err(RunError::Setup(format!(
            "{} already holds a run (journal.sqlite): continue it with --resume {0}, or choose another --run-dir",
            cfg.run_dir.display()
        )));
    }
    if cfg.tasks.as_os_str().is_empty() {
        // Tasks made on the command line: kept with the run.
        cfg.tasks = cfg.run_dir.join("tasks.jsonl");
        let text: String = defs
            .iter()
            .map(|d| serde_json::to_string(d).expect("task serializes") + "\n")
            .collect();
        std::fs::write(&cfg.tasks, text)?;
    }
    let record = RunRecord {
        tasks: std::path::absolute(&cfg.tasks)?,
    };
    std::fs::write(
        cfg.run_dir.join(RECORD),
        serde_json::to_vec_pretty(&record).expect("record serializes"),
    )?;
    Ok(defs)
}

/// The dispatcher, in this process, on the run's journal: a fixed pool of `cfg.workers`, or an
/// elastic one of at most `cfg.max_workers`.
fn start_dispatcher(
    cfg: &RunConfig,
    journal: &Path,
    tokens: &Tokens,
    url: &str,
) -> Result<(Handle, std::thread::JoinHandle<()>), RunError> {
    let elastic = cfg
        .max_workers
        .map(|max| elastic_pool(cfg, max, url, &tokens.worker));
    Ok(dispatcher::start(DispatcherConfig {
        core: match &elastic {
            Some((core, _)) => core.clone(),
            None => cfg.core.clone(),
        },
        tokens: tokens.clone(),
        scheduler: SchedulerConfig {
            heartbeat: Duration::from_millis(500),
            heartbeat_timeout: Duration::from_secs(10),
            journal: journal.to_path_buf(),
            lookup_timeout: Duration::from_secs(30),
            task_defaults: cfg.task_defaults,
            fixed_pool: cfg.max_workers.is_none().then_some(cfg.workers),
            reuse: cfg.reuse,
            // Beside the workers' caches, which outlive the run: a second run reuses what the
            // first computed.
            results_store: Some(cfg.cache_root.join(RESULTS_STORE)),
        },
        storage_gateway: cfg.storage_bandwidth.clone(),
        pool: elastic.map(|(_, pool)| pool),
        // One machine, plain HTTP on the loopback: no TLS.
        trust: crate::tls::Trust::system(),
    })?)
}

/// One cache directory per local worker under `cache_root`, saying which were skipped because
/// another run holds them.
fn claim_caches(cfg: &RunConfig, n: u32) -> Result<crate::run_caches::Claimed, RunError> {
    let caches = crate::run_caches::claim(&cfg.cache_root, n as usize).map_err(|e| {
        RunError::Setup(format!(
            "cannot use the cache directory {}: {e}",
            cfg.cache_root.display()
        ))
    })?;
    if !caches.busy.is_empty() && cfg.progress {
        eprintln!(
            "cache: worker-{} of {} in use by another run; this run uses {}",
            caches
                .busy
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", worker-"),
            cfg.cache_root.display(),
            caches
                .dirs
                .iter()
                .filter_map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(caches)
}

/// The local worker processes of a fixed pool, and what restarting one needs.
struct Local {
    workers: Workers,
    /// How many times each was started again.
    restarts: Vec<u32>,
    caches: crate::run_caches::Claimed,
    url: String,
    token: String,
    logs: PathBuf,
}

/// Until every task has ended or a signal came: the progress line, `--print`'s output, and
/// local workers that died started again. The last status seen.
async fn follow(
    cfg: &RunConfig,
    handle: &Handle,
    local: &mut Local,
    mut printer: Option<&mut Printer>,
    signal: &mut std::pin::Pin<&mut impl std::future::Future<Output = String>>,
    stopped_by: &mut Option<String>,
    start: Instant,
) -> Result<crate::dispatcher::scheduler::Status, RunError> {
    let mut last_print = Instant::now();
    loop {
        let s = handle.status().await?;
        let done = s.succeeded + s.failed + s.cancelled;
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let every = if tty {
            Duration::from_millis(500)
        } else {
            Duration::from_secs(5)
        };
        if cfg.progress && (last_print.elapsed() > every || done == s.submitted) {
            last_print = Instant::now();
            let line = progress_line(&s, start);
            if tty {
                eprint!("\r{line}   ");
            } else {
                eprintln!("{line}");
            }
            let _ = std::io::stderr().flush();
        }
        if let Some(p) = printer.as_deref_mut() {
            p.poll(handle).await?;
        }
        if done >= s.submitted || stopped_by.is_some() {
            return Ok(s);
        }
        restart_dead_workers(cfg, local, s.workers)?;
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
            sig = signal.as_mut() => *stopped_by = Some(sig),
        }
    }
}

/// `  done/total done (n failed), tasks/s, hits, running`.
fn progress_line(s: &crate::dispatcher::scheduler::Status, start: Instant) -> String {
    let done = s.succeeded + s.failed + s.cancelled;
    let t = &s.traffic;
    let acc = (t.local + t.peer + t.storage).max(1) as f64;
    format!(
        "  {done}/{} done ({} failed), {:.0} tasks/s, hits {:.0}% local {:.0}% peer {:.0}% miss, {} running",
        s.submitted,
        s.failed,
        done as f64 / start.elapsed().as_secs_f64().max(1e-9),
        t.local as f64 / acc * 100.0,
        t.peer as f64 / acc * 100.0,
        t.storage as f64 / acc * 100.0,
        s.running
    )
}

/// A local worker that died (a task killed it, or it crashed) is started again on its cache
/// directory, which it verifies; the dispatcher runs its tasks again elsewhere. `connected`:
/// workers the dispatcher has now.
fn restart_dead_workers(
    cfg: &RunConfig,
    local: &mut Local,
    connected: u32,
) -> Result<(), RunError> {
    for (i, c) in local.workers.0.iter_mut().enumerate() {
        if let Ok(Some(code)) = c.try_wait() {
            local.restarts[i] += 1;
            if local.restarts[i] > MAX_RESTARTS {
                if connected == 0 {
                    return Err(RunError::Workers(format!(
                        "worker-{i} exited ({code}) {MAX_RESTARTS} times and no worker is left; see {}",
                        local.logs.join(format!("worker-{i}.log")).display()
                    )));
                }
                continue;
            }
            tracing::warn!("worker-{i} exited ({code}); starting it again");
            *c = start_worker(
                cfg,
                i as u32,
                &local.caches.dirs[i],
                &local.url,
                &local.token,
            )?;
        }
    }
    Ok(())
}

/// Stop the local workers: told to finish, or on a signal sent SIGTERM (each stops its tasks'
/// process groups, tells the dispatcher, marks its cache clean and exits); killed if one has not
/// exited within 10 s.
async fn stop_workers(workers: &mut Workers, stopped_by: Option<&str>, handle: &Handle) {
    if let Some(sig) = stopped_by {
        eprintln!("{sig}: stopping the workers and their tasks");
        for c in &workers.0 {
            if let Some(pid) = rustix::process::Pid::from_raw(c.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
    } else {
        handle.shutdown_workers();
    }
    let deadline = Instant::now() + crate::worker::process::STOP_GRACE + Duration::from_secs(7);
    for c in &mut workers.0 {
        while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if matches!(c.try_wait(), Ok(None)) {
            tracing::warn!("a worker did not exit within 10 s of being told to; killing it");
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What `diffuse run` reports from the last counters.
fn summary(
    status: &crate::dispatcher::scheduler::Status,
    interrupted: Option<String>,
    makespan: f64,
    failures: Vec<Failure>,
    results: PathBuf,
    logs: PathBuf,
    cfg: &RunConfig,
) -> RunSummary {
    let t = &status.traffic;
    let accesses = t.local + t.peer + t.storage;
    let acc = accesses.max(1) as f64;
    let ended = status.succeeded + status.failed + status.cancelled;
    RunSummary {
        tasks: status.submitted,
        tasks_ok: status.succeeded,
        tasks_reused: status.reused,
        tasks_failed: status.failed + status.cancelled,
        tasks_not_run: status.submitted - ended,
        interrupted,
        makespan_s: makespan,
        tasks_per_s: ended as f64 / makespan.max(1e-9),
        hit_local: t.local as f64 / acc,
        hit_peer: t.peer as f64 / acc,
        miss: t.storage as f64 / acc,
        bytes_local: t.bytes_local,
        bytes_peer: t.bytes_peer,
        bytes_storage: t.bytes_storage,
        accesses,
        failures,
        results,
        logs,
        run_dir: cfg.run_dir.clone(),
    }
}

/// `--print`: each task's stdout, whole, on this process's stdout as tasks end (or in the order
/// they were given).
struct Printer {
    keep_order: bool,
    /// Journaled outcomes seen so far.
    cursor: usize,
    /// With `keep_order`: each task's place, and what waits for the tasks before it.
    order: std::collections::HashMap<String, usize>,
    pending: std::collections::BTreeMap<usize, Vec<u8>>,
    next: usize,
}

impl Printer {
    fn new(keep_order: bool, defs: Option<&[TaskDef]>) -> Printer {
        let order = defs
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, d)| (d.id.clone(), i))
            .collect();
        Printer {
            keep_order,
            cursor: 0,
            order,
            pending: Default::default(),
            next: 0,
        }
    }

    /// Print what the tasks that ended since the last call wrote.
    async fn poll(&mut self, handle: &Handle) -> Result<(), RunError> {
        let (ended, cursor) = handle.ended_since(self.cursor).await?;
        self.cursor = cursor;
        for (id, _) in ended {
            let out = handle
                .outcome(&id)
                .await?
                .and_then(|o| {
                    serde_json::from_str::<serde_json::Value>(&o.result_json)
                        .ok()?
                        .get("stdout")?
                        .as_str()
                        .map(PathBuf::from)
                })
                .and_then(|p| std::fs::read(p).ok())
                .unwrap_or_default();
            match (self.keep_order, self.order.get(&id)) {
                (true, Some(&i)) => {
                    self.pending.insert(i, out);
                    while let Some(o) = self.pending.remove(&self.next) {
                        emit(&o);
                        self.next += 1;
                    }
                }
                _ => emit(&out),
            }
        }
        Ok(())
    }

    /// At the end: what still waits (tasks before it never ended), in order.
    fn finish(&mut self) {
        for (_, o) in std::mem::take(&mut self.pending) {
            emit(&o);
        }
    }
}

/// Write one task's output to stdout in one piece.
fn emit(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(bytes);
    let _ = out.flush();
}

/// How many times `diffuse run` starts one local worker again after it died.
const MAX_RESTARTS: u32 = 10;

/// Start local worker `i` on the cache directory `cache`; its tasks' output goes to
/// `<run-dir>/logs/`, its own log to `<run-dir>/logs/worker-<i>.log` (appended to across
/// restarts). The local workers share this machine: each gets an equal part of its memory and
/// every N-th of its GPUs, so no two hand out the same GPU.
/// The core settings and the local provisioner of `run --max-workers`: workers with the same
/// options as a fixed pool's, caches under `<run-dir>/pool/`.
fn elastic_pool(
    cfg: &RunConfig,
    max: u32,
    url: &str,
    token: &str,
) -> (diffuse_core::CoreConfig, crate::provisioner::PoolConfig) {
    let logs = cfg.run_dir.join("logs");
    let mut args: Vec<String> = vec![
        "--log-dir".into(),
        logs.display().to_string(),
        "--keep-logs".into(),
        "--eviction".into(),
        cfg.eviction.to_string(),
        "--listen".into(),
        "127.0.0.1:0".into(),
    ];
    let machine = crate::worker::Machine::detect();
    if let Some(memory) = machine.memory {
        args.extend([
            "--memory".into(),
            (memory / u64::from(max.max(1))).to_string(),
        ]);
    }
    args.extend(["--gpus".into(), "0".into()]);
    for root in &cfg.input_roots {
        args.extend(["--input-root".into(), root.display().to_string()]);
    }
    if cfg.noop {
        args.push("--noop".into());
    }
    if cfg.storage_bandwidth.is_some() {
        args.extend(["--storage-gateway".into(), url.to_string()]);
    }
    let pool_dir = cfg.run_dir.join("pool");
    let core = diffuse_core::CoreConfig {
        provisioning: diffuse_core::Provisioning::Dynamic(diffuse_core::DynamicConfig {
            step: diffuse_core::StepPolicy::AllAtOnce,
            min_nodes: 0,
            max_nodes: max,
            slots_per_node: cfg.slots_per_worker,
            idle_timeout: cfg.idle_release,
            check_interval: crate::provisioner::CHECK_INTERVAL,
        }),
        handoff: Some(diffuse_core::HandoffConfig {
            budget: 4 << 30,
            time_bound: Duration::from_secs(30),
        }),
        ..cfg.core.clone()
    };
    let pool = crate::provisioner::PoolConfig {
        backend: crate::provisioner::Backend::Local,
        max_workers: max,
        max_pending: max,
        cores: cfg.slots_per_worker,
        cache_size: cfg.cache_size,
        cache_dir: format!("{}/{{request}}", pool_dir.display()),
        worker_args: args,
        dispatcher_url: url.to_string(),
        worker_token: token.to_string(),
        worker_env: Vec::new(),
        exe: cfg.exe.clone(),
        state_dir: pool_dir,
        prefix: "worker".into(),
        rm: crate::provisioner::rm::RmPolicy::default(),
        poll_interval: Duration::from_secs(1),
        start_timeout: Duration::from_secs(60),
        release_grace: Duration::from_secs(10),
        // A local worker that lost its connection to a dispatcher on the same machine is hung
        // or gone; no partition heals.
        lost_grace: Duration::from_secs(10),
    };
    (core, pool)
}

fn start_worker(
    cfg: &RunConfig,
    i: u32,
    cache: &Path,
    url: &str,
    token: &str,
) -> Result<std::process::Child, RunError> {
    let logs = cfg.run_dir.join("logs");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(logs.join(format!("worker-{i}.log")))?;
    let mut cmd = std::process::Command::new(&cfg.exe);
    cmd.arg("worker")
        .args(["--dispatcher", url])
        .arg("--cache-dir")
        .arg(cache)
        .arg("--log-dir")
        .arg(&logs)
        .arg("--keep-logs")
        .args(["--cache-size", &cfg.cache_size.to_string()])
        .args(["--slots", &cfg.slots_per_worker.to_string()])
        .args(["--name", &format!("worker-{i}")])
        .args(["--eviction", &cfg.eviction.to_string()])
        .args(["--listen", "127.0.0.1:0"])
        .env("DIFFUSE_WORKER_TOKEN", token)
        // A worker needs neither, so it holds neither (docs/security.md).
        .env_remove("DIFFUSE_CLIENT_TOKEN")
        .env_remove("DIFFUSE_METRICS_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    let machine = crate::worker::Machine::detect();
    let n = cfg.workers.max(1);
    if let Some(memory) = machine.memory {
        cmd.args(["--memory", &(memory / u64::from(n)).to_string()]);
    }
    let share: Vec<&str> = machine
        .gpus
        .iter()
        .skip(i as usize)
        .step_by(n as usize)
        .map(String::as_str)
        .collect();
    if share.is_empty() {
        cmd.args(["--gpus", "0"]);
    } else {
        cmd.args(["--gpu-ids", &share.join(",")]);
    }
    for root in &cfg.input_roots {
        cmd.arg("--input-root").arg(root);
    }
    if cfg.noop {
        cmd.arg("--noop");
    }
    if cfg.storage_bandwidth.is_some() {
        cmd.args(["--storage-gateway", url]);
    }
    cmd.spawn()
        .map_err(|e| RunError::Workers(format!("cannot start worker {}: {e}", cfg.exe.display())))
}

async fn wait_for_workers(handle: &Handle, n: u32, workers: &mut Workers) -> Result<(), RunError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = handle.status().await?;
        if s.workers >= n {
            return Ok(());
        }
        for (i, c) in workers.0.iter_mut().enumerate() {
            if let Ok(Some(code)) = c.try_wait() {
                return Err(RunError::Workers(format!(
                    "worker-{i} exited at start ({code}); see logs/worker-{i}.log in the run directory"
                )));
            }
        }
        if Instant::now() > deadline {
            return Err(RunError::Workers(format!(
                "only {} of {n} workers connected within 30 s",
                s.workers
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One line per task: id, state (null: not ended), exit code, node, attempt, error, the paths of
/// its captured stdout and stderr (null when it printed nothing), the end of its stderr if it
/// failed, and the worker's report. Returns the first 10 failures.
fn write_results(journal: &Path, out: &Path) -> Result<Vec<Failure>, RunError> {
    let j = Journal::open(journal)?;
    let mut w = std::io::BufWriter::new(std::fs::File::create(out)?);
    let mut failures = Vec::new();
    for t in j.load()? {
        let o = t.outcome;
        let report = o.as_ref().and_then(|o| {
            serde_json::from_str::<serde_json::Value>(&crate::proto::full_report_json(
                &o.result_json,
            ))
            .ok()
        });
        let field = |k: &str| report.as_ref().map(|r| r[k].clone()).unwrap_or_default();
        let failed = o
            .as_ref()
            .is_some_and(|o| o.state != crate::journal::OutcomeState::Succeeded);
        if failed && failures.len() < 10 {
            let o = o.as_ref().expect("failed");
            failures.push(Failure {
                id: t.task.id.clone(),
                exit_code: o.exit_code,
                error: o.error.clone(),
                node: o.node.clone(),
                stderr_tail: field("stderr_tail").as_str().map(String::from),
            });
        }
        let line = serde_json::json!({
            "id": t.task.id,
            "state": o.as_ref().map(|o| o.state),
            "exit_code": o.as_ref().and_then(|o| o.exit_code),
            "node": o.as_ref().and_then(|o| o.node.clone()),
            "attempt": o.as_ref().map(|o| o.attempt),
            "error": o.as_ref().and_then(|o| o.error.clone()),
            "reused_from": field("reused_from"),
            "stdout": field("stdout"),
            "stderr": field("stderr"),
            "stderr_tail": field("stderr_tail"),
            "report": report,
        });
        writeln!(w, "{line}")?;
    }
    w.flush()?;
    Ok(failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_directories_are_named_by_utc_time_and_never_shared() {
        assert_eq!(utc_stamp(0), "19700101-000000");
        assert_eq!(utc_stamp(1_795_454_645), "20261123-172405");
        assert_eq!(utc_stamp(951_782_400), "20000229-000000");
        let d = tempfile::tempdir().unwrap();
        let a = new_run_dir(d.path()).unwrap();
        let b = new_run_dir(d.path()).unwrap();
        assert_ne!(a, b);
        assert!(a.is_dir() && b.is_dir());
    }
}
