//! A worker's settings ([`WorkerConfig`]) and what this machine has, for their defaults
//! ([`Machine`]).

use super::process::TaskUser;
use diffuse_core::EvictionPolicy;
use std::path::PathBuf;
use std::time::Duration;

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
    /// (`crate::storage_emulator`).
    pub storage_emulator: Option<String>,
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
    /// Warm Python processes to start with the worker (fork mode; docs/warm.md).
    pub warm: Vec<super::warm::WarmSpec>,
    /// Warm processes idle this long are stopped.
    pub warm_idle: Duration,
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
