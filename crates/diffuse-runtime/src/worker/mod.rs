//! `diffuse worker`: runs tasks as processes, keeps a cache directory, serves it to peers.
//!
//! One WebSocket to the dispatcher carries assignments in and reports out (see
//! [`crate::proto`]). For each assignment the worker stages every input concurrently:
//! - a local hit is hard-linked into the task's directory (no copy; eviction cannot pull it
//!   from under the running process);
//! - otherwise it is fetched once (single-flight: tasks needing an object already being fetched
//!   wait for that fetch) from the peer the dispatcher named, or from persistent storage if the
//!   peer fails or none was named, into a temp file, verified, and renamed into the cache;
//! - an object larger than the whole cache is read without caching, and the result says so.
//!
//! Then it runs the command (`argv` directly, a string by `sh -c`) in a process group of its own
//! ([`process`]) with `{inputs[i]}` and `{outputs[i]}` replaced by local paths and stdout/stderr
//! captured to files under `<cache-dir>/logs/`, uploads outputs, removes the task's directory,
//! and reports exit code, timings and traffic. It also looks up the sizes and versions of
//! submitted inputs for the dispatcher, which never reads storage itself. Peers fetch cached objects from
//! `GET /v1/cache/{key}` (worker token; key = hex SHA-256 of the URI; range requests honoured);
//! the response carries the object's checksum, which the receiver verifies.
//!
//! | module | what it holds |
//! |---|---|
//! | this one | settings, the connection to the dispatcher, the session loop |
//! | `task` | one assignment: task directory, staged inputs, outputs |
//! | [`process`] | the task's process group, its environment and user |
//! | [`guard`] | the worker's parent process, which kills what its tasks left if it dies |
//! | [`cgroup`] | memory limits: a memory cgroup per task where the worker may make one |
//! | `output` | captured stdout and stderr: files, the cap, the tail kept for a failure, pruning |
//! | `stage` | inputs: local hits, single-flight fetches from peers or storage |
//! | `multi` | multi-source fetch: a large object read in chunks from several peers at once |
//! | `relay` | chunk-level relay: the chunks of an object still being read, served onward |
//! | `peer` | the peer data server (`/v1/cache/{key}`) and captured output (`/v1/logs/{name}`) |

pub mod cgroup;
pub mod guard;
mod multi;
mod output;
mod peer;
pub mod process;
mod relay;
mod stage;
mod task;

pub use task::log_name;

use crate::cache_dir::CacheDir;
use crate::proto::{Held, LookupResult, ToDispatcher, ToWorker};
use crate::storage::file::FileAccess;
use crate::storage::Storage;
use axum::http::HeaderValue;
use diffuse_core::EvictionPolicy;
use futures_util::{SinkExt, StreamExt};
use process::{Launch, Stop, TaskUser};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// Settings of a worker.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Dispatcher base URL, `http://host:port` (`https://` over TLS).
    pub dispatcher: String,
    /// The elastic pool's request this worker answers, when a provisioner started it.
    pub request: Option<String>,
    /// When it leaves on its own, before its batch job's time limit: running tasks are stopped
    /// (they run again elsewhere) and the dispatcher told, as on SIGTERM.
    pub leave_at: Option<std::time::Instant>,
    /// Worker token.
    pub token: String,
    /// Cache directory (created if missing). Task directories go under `<cache-dir>/work`,
    /// captured output under `<cache-dir>/logs`.
    pub cache_dir: PathBuf,
    /// Cache quota, bytes (lowered to what the disk has free at start-up).
    pub cache_size: u64,
    /// Task slots: cores tasks may ask for.
    pub slots: u32,
    /// Memory tasks may ask for, bytes (None: not counted).
    pub memory: Option<u64>,
    /// The ids of the GPUs tasks may be given (as `CUDA_VISIBLE_DEVICES` understands them).
    pub gpus: Vec<String>,
    /// Scratch disk tasks may ask for, bytes (None: not counted).
    pub disk: Option<u64>,
    /// Where captured stdout/stderr go (default `<cache-dir>/logs`).
    pub log_dir: Option<PathBuf>,
    /// Most bytes kept of each stream of each attempt.
    pub max_output: u64,
    /// Most peers one large object is read from at once, in chunks (1: only the peer the
    /// dispatcher named).
    pub fetch_sources: usize,
    /// Captured output older than this is deleted.
    pub log_retention: Duration,
    /// Captured output beyond this many bytes in all is deleted, oldest first.
    pub log_max: u64,
    /// Name shown in the dispatcher's API.
    pub name: String,
    /// Address of the peer data server.
    pub listen: std::net::SocketAddr,
    /// Host name or address peers reach the peer data server at. Default: the listen address,
    /// or, when that is a wildcard (`0.0.0.0`, `::`), this host's address on the route to the
    /// dispatcher.
    pub advertise: Option<String>,
    /// Eviction policy.
    pub eviction: EvictionPolicy,
    /// Run nothing: report each task done at once (for dispatcher throughput benchmarks).
    pub noop: bool,
    /// Shared-storage emulation: read `file://` inputs through this dispatcher URL
    /// (`crate::gateway`).
    pub storage_gateway: Option<String>,
    /// How long to keep trying to reach the dispatcher (at start, or after losing it) before
    /// giving up.
    pub reconnect_timeout: Duration,
    /// `file://` inputs must be under one of these directories (empty: anywhere).
    pub input_roots: Vec<PathBuf>,
    /// Run tasks as this user (the worker must run as root).
    pub task_user: Option<TaskUser>,
    /// Environment variables not passed to tasks, besides every `DIFFUSE_*`.
    pub task_env_drop: Vec<String>,
    /// Limits of the peer data server.
    pub limits: crate::server::Limits,
    /// Its rack, told to the dispatcher (MixApart's rack-local tier).
    pub rack: Option<String>,
    /// Serve the peer data server over TLS with this certificate and key; the advertised peer
    /// URL is then `https://`.
    pub tls: Option<crate::tls::ServerTls>,
    /// What it trusts when it connects over TLS: to the dispatcher (`https://`), and to peers.
    pub trust: crate::tls::Trust,
}

/// What this machine has, for a worker's defaults.
#[derive(Clone, Debug)]
pub struct Machine {
    /// Processors this process may use.
    pub cores: u32,
    /// Memory (`MemTotal` of `/proc/meminfo`), if known.
    pub memory: Option<u64>,
    /// The GPUs this process may use, by the ids `CUDA_VISIBLE_DEVICES` takes: the list in
    /// `CUDA_VISIBLE_DEVICES` when it is set (a resource manager's allocation), else the
    /// indices of `/dev/nvidia0`, `/dev/nvidia1`, ...
    pub gpus: Vec<String>,
}

impl Machine {
    /// Read what this machine has.
    pub fn detect() -> Machine {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        let memory = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb * 1024)
        });
        let gpus = match std::env::var("CUDA_VISIBLE_DEVICES") {
            Ok(list) => gpu_ids(&list),
            Err(_) => nvidia_devices(),
        };
        Machine {
            cores,
            memory,
            gpus,
        }
    }
}

/// The ids in a `CUDA_VISIBLE_DEVICES` value (`0,2`, or UUIDs); none for an empty value or
/// Slurm's `NoDevFiles`.
pub fn gpu_ids(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|id| !id.is_empty() && *id != "NoDevFiles")
        .map(String::from)
        .collect()
}

/// The indices of `/dev/nvidiaN`, in order.
fn nvidia_devices() -> Vec<String> {
    let mut found: Vec<u32> = std::fs::read_dir("/dev")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.strip_prefix("nvidia")?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    found.sort_unstable();
    found.iter().map(u32::to_string).collect()
}

pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

type Flight = watch::Receiver<bool>;

/// A task id and an attempt number.
type Attempt = (String, u32);

pub(crate) struct Ctx {
    cache: Mutex<CacheDir>,
    storage: Storage,
    http: reqwest::Client,
    token: String,
    inflight: Mutex<HashMap<String, Flight>>,
    out: mpsc::UnboundedSender<ToDispatcher>,
    work: PathBuf,
    /// Captured stdout and stderr of tasks.
    logs: PathBuf,
    /// Most bytes kept of each stream.
    max_output: u64,
    /// Most peers one object is read from at once (`multi`).
    fetch_sources: usize,
    /// Objects being read in chunks, whose landed chunks are served to peers.
    relays: relay::Relays,
    /// This worker's name (`DIFFUSE_NODE`).
    name: String,
    /// The GPUs' ids (`WorkerConfig::gpus`).
    gpu_ids: Vec<String>,
    /// Positions in `gpu_ids` of the GPUs not given to a running task.
    gpus_free: Mutex<std::collections::BTreeSet<usize>>,
    /// Set every task's `CUDA_VISIBLE_DEVICES` to exactly its GPUs (none: empty): true when this
    /// worker has GPUs or this machine shows some, so a task that asked for none uses none.
    gpu_env: bool,
    /// The cache's root and its quota as configured: after a full disk lowered the quota, it is
    /// raised back as space frees.
    cache_root: PathBuf,
    cache_size: u64,
    /// Where memory limits are enforced, if anywhere.
    cgroups: Option<cgroup::Cgroups>,
    launch: Launch,
    /// The running attempts, and how to stop each.
    running: Mutex<HashMap<Attempt, watch::Sender<Option<Stop>>>>,
    /// Input lookups under way at once, at most.
    lookups: tokio::sync::Semaphore,
    /// A signal is stopping the worker.
    leaving: std::sync::atomic::AtomicBool,
}

impl Ctx {
    /// Tell the dispatcher `bytes` came from `from` (a peer's URL, or None: storage) since
    /// `started`, for its bandwidth prediction.
    pub(crate) fn transferred(&self, from: Option<&str>, bytes: u64, started: std::time::Instant) {
        if bytes > 0 {
            let _ = self.out.send(ToDispatcher::Transferred {
                from: from.map(String::from),
                bytes,
                seconds: started.elapsed().as_secs_f64(),
            });
        }
    }

    /// Tell the dispatcher the copy of `uri` read from `peer` did not match its digest.
    pub(crate) fn bad_copy(&self, uri: &str, peer: &str) {
        tracing::warn!(uri = %crate::uri::redacted(uri), "the copy read from {peer} does not match its digest");
        let _ = self.out.send(ToDispatcher::BadCopy {
            uri: uri.into(),
            peer: peer.into(),
        });
    }

    pub(crate) fn report_evictions(&self) {
        let evicted = self.cache.lock().expect("cache lock").take_evicted();
        if !evicted.is_empty() {
            let _ = self.out.send(ToDispatcher::Evicted { uris: evicted });
        }
    }

    /// After a full disk lowered the quota: raise it back, up to the configured quota, as far as
    /// the disk's free space now allows.
    pub(crate) fn refit_quota(&self) {
        let mut cache = self.cache.lock().expect("cache lock");
        if cache.quota() >= self.cache_size {
            return;
        }
        if let Some(room) = disk_room(&self.cache_root, cache.used()) {
            cache.set_quota(room.min(self.cache_size));
        }
    }

    /// For a task that a signal not sent by this worker killed: whether the worker itself is
    /// being stopped too (within a second), as when a resource manager signals every process
    /// of a job at once and the task happened to die first.
    async fn stopped_with_us(&self) -> bool {
        for _ in 0..20 {
            if self.leaving.load(std::sync::atomic::Ordering::SeqCst) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Ask every running attempt to stop.
    fn stop_all(&self, why: Stop) {
        if why == Stop::Leaving {
            self.leaving
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        for stop in self.running.lock().expect("running lock").values() {
            let _ = stop.send(Some(why));
        }
    }
}

/// Concurrent input lookups per worker.
const LOOKUPS_AT_ONCE: usize = 64;

/// Run a worker until the dispatcher tells it to shut down, or cannot be reached for
/// `reconnect_timeout`, or refuses it, or SIGTERM or SIGINT stops it.
pub async fn run(mut cfg: WorkerConfig) -> anyhow::Result<()> {
    // Tasks run in their own directories: every path handed to them must be absolute.
    cfg.cache_dir = std::path::absolute(&cfg.cache_dir)?;
    if cfg.task_user.is_some() && !rustix::process::geteuid().is_root() {
        anyhow::bail!(
            "--task-user needs the worker to run as root (it switches to that user for each task)"
        );
    }
    std::fs::create_dir_all(&cfg.cache_dir)?;
    let _lock = lock_cache_dir(&cfg.cache_dir).await?;
    let files = FileAccess::confined(
        &cfg.input_roots,
        cfg.task_user
            .as_ref()
            .map(|u| (u.uid, u.gid, u.name.clone())),
    )?;
    let cache = open_cache(&cfg).await?;
    let work = cfg.cache_dir.join("work");
    let logs = cfg
        .log_dir
        .clone()
        .map(std::path::absolute)
        .transpose()?
        .unwrap_or_else(|| cfg.cache_dir.join("logs"));
    std::fs::create_dir_all(&work)?;
    std::fs::create_dir_all(&logs)?;
    if cfg.task_user.is_some() {
        confine_cache_dir(&cfg.cache_dir)?;
    }
    let storage = Storage::new(files);
    let cgroups = match cgroup::Cgroups::detect() {
        Ok(c) => {
            tracing::info!("memory requests are enforced ({})", c.describe());
            Some(c)
        }
        Err(why) => {
            tracing::info!("memory requests are scheduled, not enforced: {why}");
            None
        }
    };
    let (out_tx, out_rx) = mpsc::unbounded_channel();
    let ctx = Arc::new(Ctx {
        cache: Mutex::new(cache),
        storage: match &cfg.storage_gateway {
            Some(url) => storage.with_gateway(url.clone(), cfg.token.clone()),
            None => storage,
        },
        http: cfg.trust.reqwest(reqwest::Client::builder()).build()?,
        token: cfg.token.clone(),
        inflight: Mutex::new(HashMap::new()),
        out: out_tx,
        work,
        logs: logs.clone(),
        max_output: cfg.max_output,
        fetch_sources: cfg.fetch_sources,
        relays: relay::Relays::default(),
        name: cfg.name.clone(),
        gpus_free: Mutex::new((0..cfg.gpus.len()).collect()),
        gpu_env: !cfg.gpus.is_empty() || !Machine::detect().gpus.is_empty(),
        gpu_ids: cfg.gpus.clone(),
        cache_root: cfg.cache_dir.clone(),
        cache_size: cfg.cache_size,
        cgroups,
        launch: Launch::new(&cfg.task_env_drop, cfg.task_user.clone()),
        running: Mutex::new(HashMap::new()),
        lookups: tokio::sync::Semaphore::new(LOOKUPS_AT_ONCE),
        leaving: std::sync::atomic::AtomicBool::new(false),
    });

    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| anyhow::anyhow!("--listen {}: {e}", cfg.listen))?;
    let bound = listener.local_addr()?;
    let peer_router = axum::Router::new()
        .route("/v1/cache/{key}", axum::routing::get(peer::serve_object))
        .route("/v1/logs/{name}", axum::routing::get(peer::serve_log))
        .with_state(ctx.clone());
    tokio::spawn(output::prune_logs(logs, cfg.log_retention, cfg.log_max));
    let (stop_peer, peer_stopped) = tokio::sync::oneshot::channel::<()>();
    let peer_limits = crate::server::Limits {
        nodelay: true,
        ..cfg.limits.clone()
    };
    let peer_server = tokio::spawn(crate::server::serve(
        listener,
        peer_router,
        peer_limits,
        cfg.tls.clone(),
        async {
            let _ = peer_stopped.await;
        },
    ));
    let mut signals = Signals::new(cfg.leave_at)?;
    // The WebSocket's TLS settings, built once (they read the system's roots).
    let ws_tls = cfg
        .dispatcher
        .starts_with("https://")
        .then(|| cfg.trust.client_config());

    // One session per connection. When a connection is lost the running tasks are stopped (the
    // dispatcher has given their attempts up and runs them again, so their results would be
    // refused), and the worker connects again, keeping its cache.
    let mut outbox = Outbox {
        rx: out_rx,
        unsent: Vec::new(),
    };
    let mut unreachable_since: Option<std::time::Instant> = None;
    let mut delay = RECONNECT_FIRST;
    let outcome = loop {
        let connected = tokio::select! {
            c = connect(&cfg, &ctx, bound, ws_tls.clone()) => c,
            () = signals.next() => break Ok(()),
        };
        match connected {
            Ok(ws) => {
                unreachable_since = None;
                delay = RECONNECT_FIRST;
                let mut tasks = tokio::task::JoinSet::new();
                match session(&cfg, &ctx, ws, &mut outbox, &mut tasks, &mut signals).await {
                    Ok(()) => break Ok(()),
                    Err(e) => {
                        // A task whose process already ended keeps its report (sent after
                        // reconnecting; the dispatcher refuses it by attempt number if it gave
                        // that attempt up). The others are stopped: dropping them kills their
                        // process groups.
                        let _ = tokio::time::timeout(REPORT_GRACE, async {
                            while tasks.join_next().await.is_some() {}
                        })
                        .await;
                        tracing::warn!(
                            worker = %cfg.name,
                            "{e}; stopping {} running task(s) and connecting again",
                            tasks.len()
                        );
                        tasks.shutdown().await;
                    }
                }
            }
            Err(Connect::Refused(e)) => break Err(e),
            Err(Connect::Unreachable(e)) => {
                let since = *unreachable_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= cfg.reconnect_timeout {
                    break Err(anyhow::anyhow!(
                        "cannot connect to the dispatcher at {} (tried for {:.0?}): {e}",
                        cfg.dispatcher,
                        cfg.reconnect_timeout
                    ));
                }
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = signals.next() => break Ok(()),
                }
                delay = (delay * 2).min(RECONNECT_MAX);
            }
        }
    };
    let _ = stop_peer.send(());
    let _ = peer_server.await;
    // Everything cached so far reaches the disk before the cache is marked clean.
    let dir = cfg.cache_dir.clone();
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let status = std::process::Command::new("sync")
            .arg("-f")
            .arg(&dir)
            .status()?;
        if status.success() {
            std::fs::write(dir.join(CLEAN_MARKER), b"clean shutdown\n")?;
        }
        Ok(())
    })
    .await??;
    outcome
}

/// How long a worker waits for another one to leave its cache directory (a restart that
/// overlaps the old worker's exit) before giving up.
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// Lock the cache directory for this worker alone, waiting up to [`LOCK_WAIT`] for another
/// worker to release it.
async fn lock_cache_dir(dir: &std::path::Path) -> anyhow::Result<std::fs::File> {
    let path = dir.join("lock");
    let start = std::time::Instant::now();
    let mut said = false;
    loop {
        if let Some(lock) = crate::run_caches::try_lock(&path)? {
            return Ok(lock);
        }
        if start.elapsed() > LOCK_WAIT {
            anyhow::bail!(
                "the cache directory {} is in use by another worker (waited {:.0?})",
                dir.display(),
                LOCK_WAIT
            );
        }
        if !said {
            tracing::warn!(
                "the cache directory {} is in use by another worker; waiting up to {:.0?}",
                dir.display(),
                LOCK_WAIT
            );
            said = true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Open the cache directory: verify every object if the last run did not end cleanly, and
/// lower the quota to what the disk can hold (with 10% of the free space to spare for task
/// directories and logs).
async fn open_cache(cfg: &WorkerConfig) -> anyhow::Result<CacheDir> {
    let dir = cfg.cache_dir.clone();
    // A cache left without the clean-shutdown marker may hold objects whose data never reached
    // the disk before a crash: verify every checksum before using any of them.
    let marker = dir.join(CLEAN_MARKER);
    let clean = marker.exists();
    let _ = std::fs::remove_file(&marker);
    let holds_objects =
        std::fs::read_dir(dir.join("objects")).is_ok_and(|mut d| d.next().is_some());
    if !clean && holds_objects {
        tracing::info!(
            "no clean-shutdown marker in {}: verifying every cached object",
            dir.display()
        );
    }
    let (quota, eviction) = (cfg.cache_size, cfg.eviction);
    let open_dir = dir.clone();
    let mut cache =
        tokio::task::spawn_blocking(move || CacheDir::open(&open_dir, quota, eviction, !clean))
            .await??;
    if let Some(room) = disk_room(&dir, cache.used()) {
        if room < quota {
            tracing::warn!(
                "--cache-size {quota} bytes is more than the disk of {} can hold ({} cached): the quota is {room} bytes",
                dir.display(),
                cache.used()
            );
            cache.set_quota(room);
        }
    }
    Ok(cache)
}

/// What the cache at `dir` can hold on its disk: what it holds (`used`) plus 90% of the free
/// space (the rest is left for task directories and logs).
pub(crate) fn disk_room(dir: &std::path::Path, used: u64) -> Option<u64> {
    let fs = rustix::fs::statvfs(dir).ok()?;
    let free = fs.f_bavail.saturating_mul(fs.f_frsize);
    Some(used + free / 10 * 9)
}

/// With `--task-user`: the cache's objects, temp files and logs are the worker's alone
/// (`0700`); tasks reach only their own directory under `work/` (`0711`, not listable) and the
/// objects linked into it.
fn confine_cache_dir(root: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: PathBuf, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    mode(root.to_path_buf(), 0o711)?;
    mode(root.join("work"), 0o711)?;
    for private in ["objects", "tmp", "uncached", "logs"] {
        mode(root.join(private), 0o700)?;
    }
    Ok(())
}

/// Whether a task's end looks like SIGTERM, SIGKILL, SIGINT or SIGHUP: killed by it (no exit
/// code), or a shell that ran it and reports 128 + the signal (143, 137, 130, 129).
fn killed_by_a_stop_signal(exit_code: Option<i32>) -> bool {
    matches!(exit_code, None | Some(129 | 130 | 137 | 143))
}

/// What stops a worker on its own: SIGTERM, SIGINT, or the time to leave before its batch
/// job's limit.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    leave_at: Option<tokio::time::Instant>,
}

impl Signals {
    fn new(leave_at: Option<std::time::Instant>) -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            leave_at: leave_at.map(tokio::time::Instant::from_std),
        })
    }

    /// The next SIGTERM or SIGINT, or the time to leave.
    async fn next(&mut self) {
        let leave = async {
            match self.leave_at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.term.recv() => tracing::info!("SIGTERM: stopping"),
            _ = self.int.recv() => tracing::info!("SIGINT: stopping"),
            () = leave => tracing::info!("the batch job's time limit is near: leaving"),
        }
    }
}

/// Look up each URI's size and version, concurrently, each within `timeout`.
async fn lookup(ctx: Arc<Ctx>, id: u64, uris: Vec<String>, timeout: Duration) {
    let results = futures_util::future::join_all(uris.into_iter().map(|uri| {
        let ctx = ctx.clone();
        async move {
            let _place = ctx.lookups.acquire().await;
            let r = tokio::time::timeout(timeout, ctx.storage.head(&uri)).await;
            let (size, version, error) = match r {
                Ok(Ok(info)) => (Some(info.size), Some(info.version), None),
                Ok(Err(crate::storage::StorageError::NotFound(u))) => {
                    (None, None, Some(format!("not found: {u}")))
                }
                Ok(Err(e)) => (None, None, Some(e.to_string())),
                Err(_) => (
                    None,
                    None,
                    Some(format!(
                        "{}: no answer from storage within {:.0?} (the lookup timeout)",
                        crate::uri::redacted(&uri),
                        timeout
                    )),
                ),
            };
            LookupResult {
                uri,
                size,
                version,
                error,
            }
        }
    }))
    .await;
    let _ = ctx.out.send(ToDispatcher::LookedUp { id, results });
}

/// How long a lost connection waits for tasks that are just ending before stopping the rest.
const REPORT_GRACE: Duration = Duration::from_millis(250);
/// First wait before connecting again; it doubles up to [`RECONNECT_MAX`].
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
/// Longest wait between two connection attempts.
const RECONNECT_MAX: Duration = Duration::from_secs(5);

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Why a connection could not be made.
enum Connect {
    /// The dispatcher answered and refused (bad token, not a dispatcher): do not retry.
    Refused(anyhow::Error),
    /// It could not be reached, or went away during the handshake: retry.
    Unreachable(anyhow::Error),
}

/// Connect (over TLS with `tls` when the URL is `https://`), say hello with everything the
/// cache holds now, and wait for the welcome. A TLS failure (an untrusted certificate, a
/// dispatcher that does not speak TLS) and a refusal are not retried.
async fn connect(
    cfg: &WorkerConfig,
    ctx: &Ctx,
    bound: std::net::SocketAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> Result<(Ws, Duration), Connect> {
    use tokio_tungstenite::tungstenite::Error as WsError;
    let refused = |e: anyhow::Error| Connect::Refused(e);
    let ws_url = format!(
        "{}/v1/workers/connect",
        cfg.dispatcher.replacen("http", "ws", 1)
    );
    let mut request = ws_url
        .as_str()
        .into_client_request()
        .map_err(|e| refused(e.into()))?;
    let auth =
        HeaderValue::from_str(&format!("Bearer {}", cfg.token)).map_err(|e| refused(e.into()))?;
    request.headers_mut().insert("authorization", auth);
    let connector = tls.map(tokio_tungstenite::Connector::Rustls);
    let (mut ws, _) =
        tokio_tungstenite::connect_async_tls_with_config(request, None, false, connector)
            .await
            .map_err(|e| {
                let why = match &e {
                    // The dispatcher's answer says why (a TLS port asked in plain HTTP says so).
                    WsError::Http(resp) => {
                        let body = resp
                            .body()
                            .as_deref()
                            .map(String::from_utf8_lossy)
                            .unwrap_or_default();
                        let body: String = body.trim().chars().take(300).collect();
                        format!("{e} {body}")
                    }
                    _ => crate::tls::describe(&e),
                };
                let text = anyhow::anyhow!(
                    "cannot connect to the dispatcher at {}: {why}",
                    cfg.dispatcher
                );
                let tls_failed = crate::tls::tls_failure(&e).is_some();
                match e {
                    WsError::Http(_)
                    | WsError::Url(_)
                    | WsError::HttpFormat(_)
                    | WsError::Tls(_) => refused(text),
                    _ if tls_failed => refused(text),
                    _ => Connect::Unreachable(text),
                }
            })?;
    let local_ip = match ws.get_ref() {
        tokio_tungstenite::MaybeTlsStream::Plain(tcp) => tcp.local_addr().ok().map(|a| a.ip()),
        tokio_tungstenite::MaybeTlsStream::Rustls(tls) => {
            tls.get_ref().0.local_addr().ok().map(|a| a.ip())
        }
        _ => None,
    };
    let peer_url = peer_url(cfg.advertise.as_deref(), bound, local_ip, cfg.tls.is_some());
    let held = {
        let cache = ctx.cache.lock().expect("cache lock");
        cache
            .uris()
            .into_iter()
            .filter_map(|uri| {
                cache.path_for_key(&CacheDir::key(&uri)).map(|(_, m)| Held {
                    uri,
                    version: m.version,
                })
            })
            .collect()
    };
    let hello = ToDispatcher::Hello {
        name: cfg.name.clone(),
        slots: cfg.slots,
        memory: cfg.memory,
        gpus: cfg.gpus.len() as u32,
        disk: cfg.disk,
        cache_quota: cfg.cache_size,
        peer_url,
        held,
        request: cfg.request.clone(),
        eviction: Some(cfg.eviction),
        rack: cfg.rack.clone(),
        leaves_in_s: cfg.leave_at.map(|t| {
            t.saturating_duration_since(std::time::Instant::now())
                .as_secs_f64()
        }),
    };
    let lost = |e: anyhow::Error| Connect::Unreachable(e);
    let text = serde_json::to_string(&hello).expect("hello serializes");
    ws.send(Message::Text(text.into()))
        .await
        .map_err(|e| lost(e.into()))?;
    let heartbeat = match ws.next().await {
        Some(Ok(Message::Text(t))) => match serde_json::from_str::<ToWorker>(&t) {
            Ok(ToWorker::Welcome { heartbeat_ms, .. }) => {
                Duration::from_millis(heartbeat_ms.max(50))
            }
            other => {
                return Err(refused(anyhow::anyhow!(
                    "expected welcome from the dispatcher, got {other:?}"
                )))
            }
        },
        other => {
            return Err(lost(anyhow::anyhow!(
                "the dispatcher closed the connection: {other:?}"
            )))
        }
    };
    tracing::info!(worker = %cfg.name, "connected to {}", cfg.dispatcher);
    Ok((ws, heartbeat))
}

/// The URL peers fetch this worker's cache at: `advertise` if given; else the address the peer
/// server is bound to, or, if that is a wildcard, the local address of the connection to the
/// dispatcher (the address on the route other hosts use to reach this one). `https://` when
/// the peer server serves TLS.
fn peer_url(
    advertise: Option<&str>,
    bound: std::net::SocketAddr,
    local_ip: Option<std::net::IpAddr>,
    tls: bool,
) -> String {
    let host = match (advertise, bound.ip().is_unspecified(), local_ip) {
        (Some(h), _, _) => h.to_string(),
        (None, true, Some(ip)) => ip.to_string(),
        (None, _, _) => bound.ip().to_string(),
    };
    let host = match host.parse::<std::net::Ipv6Addr>() {
        Ok(v6) => format!("[{v6}]"),
        Err(_) => host,
    };
    let scheme = if tls { "https" } else { "http" };
    format!("{scheme}://{host}:{}", bound.port())
}

/// Serve one connection: run what the dispatcher assigns, report what happens. Ok when told to
/// shut down (after the running tasks ended and their reports went out), or stopped by a signal
/// (running tasks stopped, the dispatcher told); Err when the connection is lost.
async fn session(
    cfg: &WorkerConfig,
    ctx: &Arc<Ctx>,
    (ws, heartbeat): (Ws, Duration),
    outbox: &mut Outbox,
    tasks: &mut tokio::task::JoinSet<()>,
    signals: &mut Signals,
) -> anyhow::Result<()> {
    let (mut sink, mut stream) = ws.split();
    // Cache changes queued while disconnected are in the hello's snapshot; reports of tasks
    // that finished meanwhile still go out (the dispatcher refuses them by attempt number if
    // it has given those attempts up).
    let mut backlog = std::mem::take(&mut outbox.unsent);
    while let Ok(m) = outbox.rx.try_recv() {
        if matches!(m, ToDispatcher::Finished(_)) {
            backlog.push(m);
        }
    }
    let mut backlog = backlog.into_iter();
    while let Some(m) = backlog.next() {
        if let Err(e) = deliver(&mut sink, m, &mut outbox.unsent).await {
            outbox.unsent.extend(backlog);
            return Err(e);
        }
    }
    let mut beat = tokio::time::interval(heartbeat);
    let mut load_tick = tokio::time::interval(LOAD_EVERY);
    let mut draining = false;
    loop {
        if draining && tasks.is_empty() {
            break;
        }
        tokio::select! {
            msg = stream.next() => {
                let Some(Ok(msg)) = msg else {
                    anyhow::bail!("lost the connection to the dispatcher");
                };
                let Message::Text(t) = msg else { continue };
                match serde_json::from_str::<ToWorker>(&t)? {
                    ToWorker::Run(a) => {
                        let (ctx, noop) = (ctx.clone(), cfg.noop);
                        // Registered before the next message is read: a `Cancel` right behind
                        // this `Run` finds it (it used to be lost until the task ended).
                        let stop = task::register(&ctx, &a);
                        tasks.spawn(async move {
                            let report = if noop { Some(task::noop_report(&a)) } else { task::run_task(&ctx, *a, stop).await };
                            let Some(report) = report else { return };
                            if report.error.is_none() && killed_by_a_stop_signal(report.exit_code) && ctx.stopped_with_us().await {
                                // Killed by a signal meant for the whole job (a resource
                                // manager's scancel, a node shutdown): it runs again elsewhere.
                                return;
                            }
                            let _ = ctx.out.send(ToDispatcher::Finished(report));
                        });
                    }
                    ToWorker::Lookup { id, uris, timeout_ms } => {
                        tokio::spawn(lookup(ctx.clone(), id, uris, Duration::from_millis(timeout_ms)));
                    }
                    ToWorker::Cancel { task, attempt } => {
                        if let Some(stop) = ctx.running.lock().expect("running lock").get(&(task, attempt)) {
                            let _ = stop.send(Some(Stop::Cancelled));
                        }
                    }
                    ToWorker::Drop { uris } => {
                        {
                            let mut cache = ctx.cache.lock().expect("cache lock");
                            for u in &uris {
                                cache.remove(u);
                            }
                            cache.take_evicted();
                        }
                        let _ = ctx.out.send(ToDispatcher::Evicted { uris });
                    }
                    ToWorker::Verify { uris } => {
                        tokio::spawn(peer::verify(ctx.clone(), uris));
                    }
                    ToWorker::Shutdown => draining = true,
                    ToWorker::Fetch { inputs } => {
                        for input in inputs {
                            tokio::spawn(stage::prefetch(ctx.clone(), input));
                        }
                    }
                    ToWorker::StorageRate { bytes_per_s } => {
                        if ctx.storage.read_rate() != bytes_per_s {
                            tracing::debug!(?bytes_per_s, "storage read rate");
                        }
                        ctx.storage.set_read_rate(bytes_per_s);
                    }
                    ToWorker::Welcome { .. } => {}
                }
            }
            Some(m) = outbox.rx.recv() => deliver(&mut sink, m, &mut outbox.unsent).await?,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            _ = beat.tick() => {
                sink.send(Message::Text(serde_json::to_string(&ToDispatcher::Heartbeat)?.into())).await?;
            }
            _ = load_tick.tick() => {
                if let Some(load1) = load_average() {
                    let (used, objects) = {
                        let c = ctx.cache.lock().expect("cache lock");
                        (c.used(), c.len() as u64)
                    };
                    let load = ToDispatcher::Load { load1, cache_used: Some(used), cache_objects: Some(objects) };
                    sink.send(Message::Text(serde_json::to_string(&load)?.into())).await?;
                }
            }
            () = signals.next() => {
                // Stop every task (their groups get SIGTERM, then SIGKILL), keep the reports of
                // those that ended by themselves meanwhile, then tell the dispatcher the rest
                // were stopped, not crashed, so they run elsewhere.
                ctx.stop_all(Stop::Leaving);
                let _ = tokio::time::timeout(process::STOP_GRACE + Duration::from_secs(2), async {
                    while tasks.join_next().await.is_some() {}
                })
                .await;
                tasks.shutdown().await;
                while let Ok(m) = outbox.rx.try_recv() {
                    deliver(&mut sink, m, &mut outbox.unsent).await?;
                }
                deliver(&mut sink, ToDispatcher::Leaving, &mut outbox.unsent).await?;
                let _ = sink.close().await;
                return Ok(());
            }
        }
    }
    // Flush the last reports before closing.
    while let Ok(m) = outbox.rx.try_recv() {
        deliver(&mut sink, m, &mut outbox.unsent).await?;
    }
    let _ = sink.close().await;
    Ok(())
}

/// Messages for the dispatcher: those the worker's tasks queue, and task reports whose send
/// failed when a connection was lost (they go out first on the next one).
struct Outbox {
    rx: mpsc::UnboundedReceiver<ToDispatcher>,
    unsent: Vec<ToDispatcher>,
}

/// Send one message; a task report that could not be sent is kept in `unsent`.
async fn deliver(
    sink: &mut futures_util::stream::SplitSink<Ws, Message>,
    m: ToDispatcher,
    unsent: &mut Vec<ToDispatcher>,
) -> anyhow::Result<()> {
    let text = serde_json::to_string(&m)?;
    if let Err(e) = sink.send(Message::Text(text.into())).await {
        if matches!(m, ToDispatcher::Finished(_)) {
            unsent.push(m);
        }
        return Err(e.into());
    }
    Ok(())
}

/// Written at a graceful shutdown, removed at start: its absence means the last run ended
/// uncleanly, and every cached object is verified before use.
pub const CLEAN_MARKER: &str = "CLEAN";

/// How often a worker tells its load average.
const LOAD_EVERY: Duration = Duration::from_secs(5);

/// The machine's 1-minute load average, from `/proc/loadavg` (None where there is none).
fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod load_tests {
    #[test]
    fn the_load_average_is_read_from_proc() {
        let l = super::load_average().expect("/proc/loadavg on Linux");
        assert!(l.is_finite() && l >= 0.0, "{l}");
    }
}
