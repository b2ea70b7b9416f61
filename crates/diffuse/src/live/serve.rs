//! `diffuse dispatcher` and `diffuse worker`: the two long-running services of a cluster.
//!
//! Both serve HTTP, over TLS with `--tls-cert` and `--tls-key` ([`TlsArgs`]), and trust a site's
//! CA for their own connections with `--tls-ca`.

use super::{harden, logging, read_token, runtime, seconds, SchedArgs, StorageArgs};
use crate::size::parse_size;
use anyhow::{Context, Result};
use clap::Args;
use diffuse_core::EvictionPolicy;
use diffuse_runtime::dispatcher::scheduler::SchedulerConfig;
use diffuse_runtime::dispatcher::{self, DispatcherConfig, Tokens};
use diffuse_runtime::server::Limits;
use diffuse_runtime::worker::process::TaskUser;
use diffuse_runtime::worker::WorkerConfig;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Connection limits shared by `dispatcher` and `worker`.
#[derive(Args, Debug, Clone)]
pub struct LimitArgs {
    /// Most HTTP connections open at once; past it, the oldest idle one that showed no token
    /// is closed for a new one, else new ones are closed as they come [default: the open-files
    /// limit less 256, at most 16384].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), allow_hyphen_values = true)]
    max_connections: Option<u64>,
    /// Seconds a client has to send a request's headers; an idle connection is closed after
    /// this too.
    #[arg(long, default_value = "10", value_parser = seconds, allow_hyphen_values = true)]
    header_timeout: Duration,
}

impl LimitArgs {
    fn limits(&self) -> Limits {
        let mut l = Limits::standard();
        if let Some(n) = self.max_connections {
            l.max_connections = n as usize;
        }
        l.header_timeout = self.header_timeout;
        l
    }
}

/// TLS settings shared by `dispatcher` and `worker`. Off unless --tls-cert and --tls-key are
/// given.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "TLS")]
pub struct TlsArgs {
    /// Serve over TLS on the --listen address with this certificate chain (PEM, the server's
    /// certificate first): the dispatcher's API, worker WebSocket and /metrics, or a worker's
    /// peer data server. URLs are then https:// (wss:// for the WebSocket). Needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM); keep it readable by this user only.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// CA certificates (a PEM bundle) to trust besides the system's, for this process's own
    /// TLS connections: a worker's to the dispatcher and to its peers, the dispatcher's to
    /// workers (for `diffuse logs`). A dispatcher's elastic pool passes its --tls-cert,
    /// --tls-key and --tls-ca on to the workers it starts.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
}

impl TlsArgs {
    /// The server's TLS settings, if TLS is on; an error names the flag and the file.
    fn server(&self) -> Result<Option<diffuse_runtime::tls::ServerTls>> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        super::warn_if_exposed(key);
        diffuse_runtime::tls::server_config(cert, key)
            .context("--tls-cert/--tls-key")
            .map(Some)
    }

    /// What this process trusts for its own connections.
    fn trust(&self) -> Result<diffuse_runtime::tls::Trust> {
        diffuse_runtime::tls::Trust::from_option(self.tls_ca.as_deref()).context("--tls-ca")
    }

    /// The environment that gives a worker the same settings (absolute paths), for the workers
    /// an elastic pool starts.
    fn worker_env(&self) -> Result<Vec<(String, String)>> {
        let mut env = Vec::new();
        for (var, path) in [
            ("DIFFUSE_WORKER_TLS_CERT", &self.tls_cert),
            ("DIFFUSE_WORKER_TLS_KEY", &self.tls_key),
            ("DIFFUSE_WORKER_TLS_CA", &self.tls_ca),
        ] {
            if let Some(p) = path {
                let p = std::path::absolute(p).with_context(|| p.display().to_string())?;
                env.push((var.to_string(), p.display().to_string()));
            }
        }
        Ok(env)
    }
}

/// What a task gets when it does not say (`dispatcher` and `run`).
#[derive(Args, Debug, Clone)]
pub struct TaskDefaultArgs {
    /// Retries of a task that does not set "retries": a non-zero exit or a time-out runs it
    /// again (on another worker when one has room), this many more times.
    #[arg(long, default_value_t = 0)]
    pub retries: u32,
    /// Time limit of a task that does not set "timeout_s" (e.g. 30m): its processes get
    /// SIGTERM, then SIGKILL 3 s later, and it fails "timed out" [default: none].
    #[arg(long, value_parser = seconds, allow_hyphen_values = true)]
    pub task_timeout: Option<Duration>,
    /// Reuse results: a task whose command, env, input contents, outputs and program files
    /// match one that already succeeded gets that task's kept outputs instead of running, and
    /// two identical tasks in flight run once. A task opts out with "reuse": false; one with
    /// neither inputs nor outputs is reused only with "reuse": true. See docs/runtime.md,
    /// "Results reused by content".
    #[arg(long, env = "DIFFUSE_REUSE", default_value = "on", value_parser = on_off, action = clap::ArgAction::Set, value_name = "on|off")]
    pub reuse: bool,
}

/// `on` or `off`.
fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" | "true" | "yes" => Ok(true),
        "off" | "false" | "no" => Ok(false),
        _ => Err(format!("'{s}': say on or off")),
    }
}

impl TaskDefaultArgs {
    /// As the dispatcher takes them.
    pub fn defaults(&self) -> diffuse_runtime::spec::TaskDefaults {
        diffuse_runtime::spec::TaskDefaults {
            retries: self.retries,
            task_timeout: self.task_timeout,
        }
    }
}

/// Arguments of `diffuse dispatcher`.
#[derive(Args, Debug)]
pub struct DispatcherArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8700")]
    listen: std::net::SocketAddr,
    /// Journal file (embedded SQLite); created (with its directory) if missing, replayed if
    /// present.
    #[arg(long, default_value = "diffuse-journal.sqlite")]
    journal: PathBuf,
    /// File holding the client token [default: $DIFFUSE_CLIENT_TOKEN].
    #[arg(long)]
    client_token_file: Option<PathBuf>,
    /// File holding the worker token [default: $DIFFUSE_WORKER_TOKEN].
    #[arg(long)]
    worker_token_file: Option<PathBuf>,
    /// File holding a read-only token for /metrics and /v1/status, for monitoring
    /// [default: $DIFFUSE_METRICS_TOKEN, or none: the client token only].
    #[arg(long)]
    metrics_token_file: Option<PathBuf>,
    /// Seconds without a heartbeat after which a worker is given up.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..), allow_hyphen_values = true)]
    heartbeat_timeout: u64,
    /// Seconds a worker may take to look up one input's size and version; past it the tasks
    /// reading that input fail.
    #[arg(long, default_value = "30", value_parser = seconds, allow_hyphen_values = true)]
    lookup_timeout: Duration,
    #[command(flatten)]
    task: TaskDefaultArgs,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    sched: SchedArgs,
    /// Decide what every worker's cache evicts, across workers (data diffusion's 2Mark): a
    /// worker asked for an object it has no room for gives up a copy another worker also holds,
    /// or one not asked for lately, and copies still in use elsewhere move to a worker with
    /// room. Workers' own --eviction stays as a guard. Needs a policy that caches (not fa).
    #[arg(long)]
    two_mark: bool,
    #[command(flatten)]
    storage: StorageArgs,
    #[command(flatten)]
    tls: TlsArgs,
    #[command(flatten)]
    pool: super::pool_args::PoolArgs,
}

/// `diffuse dispatcher`.
pub fn dispatcher(a: DispatcherArgs) -> Result<ExitCode> {
    if let Err(e) = a.sched.check() {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(2));
    }
    logging();
    harden();
    a.storage.apply();
    let metrics = match (
        &a.metrics_token_file,
        std::env::var("DIFFUSE_METRICS_TOKEN"),
    ) {
        (None, Err(_)) => None,
        _ => Some(read_token(
            &a.metrics_token_file,
            "DIFFUSE_METRICS_TOKEN",
            "--metrics-token-file",
        )?),
    };
    let tokens = Tokens {
        client: read_token(
            &a.client_token_file,
            "DIFFUSE_CLIENT_TOKEN",
            "--client-token-file",
        )?,
        worker: read_token(
            &a.worker_token_file,
            "DIFFUSE_WORKER_TOKEN",
            "--worker-token-file",
        )?,
        metrics,
    };
    let tls = a.tls.server()?;
    let trust = a.tls.trust()?;
    let worker_env = a.tls.worker_env()?;
    let (provisioning, handoff, pool) = match a.pool.resolve(
        a.listen,
        &a.journal,
        &tokens.worker,
        tls.is_some(),
        worker_env,
    ) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let (handle, thread) = dispatcher::start(DispatcherConfig {
        core: diffuse_core::CoreConfig {
            provisioning,
            handoff,
            two_mark: a.two_mark,
            ..a.sched.core()
        },
        pool,
        tokens,
        scheduler: SchedulerConfig {
            heartbeat: Duration::from_millis(500),
            heartbeat_timeout: Duration::from_secs(a.heartbeat_timeout),
            journal: a.journal.clone(),
            lookup_timeout: a.lookup_timeout,
            task_defaults: a.task.defaults(),
            fixed_pool: None,
            reuse: a.task.reuse,
            results_store: None,
        },
        storage_emulator: None,
        trust,
    })
    .with_context(|| format!("cannot start with journal {}", a.journal.display()))?;
    let limits = a.limits.limits();
    let rt = runtime()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(a.listen)
            .await
            .with_context(|| format!("--listen {}", a.listen))?;
        tracing::info!(
            "dispatcher listening on {}://{} (at most {} connections)",
            if tls.is_some() { "https" } else { "http" },
            listener.local_addr()?,
            limits.max_connections
        );
        dispatcher::serve(listener, handle, limits, tls, stop_signal()).await?;
        tracing::info!("stopping: the journal is closed after its last writes");
        Ok::<_, anyhow::Error>(())
    })?;
    // Dropping the runtime ends the worker sessions, the last holders of the scheduler's
    // channel: it then commits what it has and stops.
    drop(rt);
    let _ = thread.join();
    Ok(ExitCode::SUCCESS)
}

/// SIGINT or SIGTERM.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Arguments of `diffuse worker`.
#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// Dispatcher URL (https:// for one served over TLS).
    #[arg(long, env = "DIFFUSE_DISPATCHER", default_value = super::DEFAULT_DISPATCHER)]
    dispatcher: String,
    /// The elastic pool's request this worker answers; set by the dispatcher's provisioner in
    /// the environment of the workers it starts (in a Slurm job, the job's name).
    #[arg(long, env = "DIFFUSE_POOL_REQUEST", hide_env_values = true)]
    request: Option<String>,
    /// This worker's allocation ends in this long (e.g. 4h) [default: inside a Slurm job, the
    /// job's time left (squeue %L); else never]. Tasks stating a walltime_s that would not end
    /// in time are not sent to it.
    #[arg(long, value_parser = seconds, allow_hyphen_values = true)]
    ends_in: Option<Duration>,
    /// Leave this long before the allocation ends: running tasks are stopped (they run again
    /// on another worker) and the worker exits, so the resource manager never kills it mid-task.
    #[arg(long, default_value = "60s", value_parser = seconds, allow_hyphen_values = true)]
    leave_before: Duration,
    /// Cache directory (created if missing; {request} stands for the pool's request, as for
    /// --name). Task directories go under <cache-dir>/work,
    /// captured stdout/stderr under <cache-dir>/logs.
    #[arg(long)]
    cache_dir: PathBuf,
    /// Cache quota, e.g. 10GB (lowered at start to what the disk has free, with a warning).
    #[arg(long, value_parser = parse_size, allow_hyphen_values = true)]
    cache_size: u64,
    /// Cores tasks may use: the sum of their "cores" on this worker [default: this machine's
    /// processors].
    #[arg(long, visible_alias = "slots", value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    cores: Option<u32>,
    /// Memory tasks may ask for in all, e.g. 64GB [default: this machine's memory].
    #[arg(long, value_parser = parse_size, allow_hyphen_values = true)]
    memory: Option<u64>,
    /// GPUs tasks may ask for: the first N of this machine's (--gpu-ids), each given to one task
    /// at a time through its CUDA_VISIBLE_DEVICES [default: all of them]. A task that asks for
    /// none gets an empty CUDA_VISIBLE_DEVICES on a machine with GPUs.
    #[arg(long)]
    gpus: Option<u32>,
    /// The GPUs' ids, e.g. 0,2 or GPU UUIDs [default: CUDA_VISIBLE_DEVICES when set, as a
    /// resource manager sets it for its allocation; else the indices of /dev/nvidiaN].
    #[arg(long, value_delimiter = ',')]
    gpu_ids: Option<Vec<String>>,
    /// Scratch disk tasks may ask for in all ("disk"), e.g. 500GB [default: not counted].
    #[arg(long, value_parser = parse_size, allow_hyphen_values = true)]
    disk: Option<u64>,
    /// Where tasks' captured stdout and stderr go [default: <cache-dir>/logs].
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// Most of each of a task's stdout and stderr kept per attempt; the rest is counted, and the
    /// cut marked at the end of the file.
    #[arg(long, default_value = "16MiB", value_parser = parse_size, allow_hyphen_values = true)]
    max_output: u64,
    /// Captured output older than this is deleted (e.g. 7d).
    #[arg(long, default_value = "7d", value_parser = seconds, allow_hyphen_values = true)]
    log_retention: Duration,
    /// Captured output beyond this much in all is deleted, oldest first.
    #[arg(long, default_value = "1GB", value_parser = parse_size, allow_hyphen_values = true)]
    log_max: u64,
    /// Never delete captured output (what `diffuse run` does: it belongs to the run directory).
    #[arg(long, conflicts_with_all = ["log_retention", "log_max"])]
    keep_logs: bool,
    /// Most peers one large object (16 MiB or more) is read from at once, in chunks, when
    /// several hold it: a fetch is then bounded by the sum of their links. 1 reads only from
    /// the peer the dispatcher named.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u8).range(1..=16))]
    fetch_sources: u8,
    /// Name shown by the dispatcher; {request} stands for the pool's request (--request), as
    /// in a Slurm job array's workers [default: host name and pid].
    #[arg(long)]
    name: Option<String>,
    /// Address of this worker's peer data server (port 0: any free port).
    #[arg(long, default_value = "0.0.0.0:0")]
    listen: std::net::SocketAddr,
    /// Host name or address other workers reach this one at [default: the --listen address,
    /// or, when that is 0.0.0.0 or ::, this host's address on the route to the dispatcher].
    #[arg(long)]
    advertise: Option<String>,
    /// Eviction policy: random, fifo, lru or lfu.
    #[arg(long, value_parser = |s: &str| s.parse::<EvictionPolicy>(), default_value = "lru")]
    eviction: EvictionPolicy,
    /// This worker's rack (any name; workers naming the same one share a switch): MixApart's
    /// rack-local tier (`--policy mixapart`), and peers in its rack are read from first.
    #[arg(long)]
    rack: Option<String>,
    /// File holding the worker token [default: $DIFFUSE_WORKER_TOKEN].
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Allow file:// inputs only under this directory (repeatable; default: anywhere the
    /// worker may read). Paths are resolved beneath the root: neither `..` nor a symbolic link
    /// leads out of it.
    #[arg(long = "input-root", value_name = "DIR")]
    input_roots: Vec<PathBuf>,
    /// Run tasks as this user (NAME, UID or UID:GID); the worker must run as root. Tasks then
    /// cannot read the worker's token file, its memory or its cache, and file:// inputs and
    /// outputs must be readable/writable by that user.
    #[arg(long)]
    task_user: Option<String>,
    /// An environment variable not to pass to tasks (repeatable), besides every DIFFUSE_*
    /// variable, which tasks never see.
    #[arg(long = "task-env-drop", value_name = "NAME")]
    task_env_drop: Vec<String>,
    /// Start a warm Python process at start, for function tasks (docs/warm.md): the
    /// interpreter and the modules it preloads, PYTHON[:MODULE,...] (repeatable). Calls whose
    /// task names that interpreter and exactly those preloads (fork isolation) use it; any
    /// other warm process is started at its first call.
    #[arg(long, value_name = "PYTHON[:MODULES]", value_parser = |s: &str| diffuse_runtime::worker::warm::WarmSpec::parse(s))]
    warm: Vec<diffuse_runtime::worker::warm::WarmSpec>,
    /// A warm Python process with no call for this long is stopped (its memory freed); the
    /// next call of its kind starts another.
    #[arg(long, default_value = "10m", value_parser = seconds, allow_hyphen_values = true)]
    warm_idle: Duration,
    /// Run no process: report every task done at once (dispatcher benchmarks).
    #[arg(long)]
    noop: bool,
    /// EMULATION: read file:// inputs through this dispatcher's emulated shared storage, at
    /// its bandwidth (set up by `diffuse run --storage-bandwidth`).
    #[arg(long, alias = "storage-gateway")]
    storage_emulator: Option<String>,
    /// Seconds to keep trying to reach the dispatcher, at start or after losing it, before
    /// exiting. A lost connection stops the running tasks (the dispatcher runs them again);
    /// the cache is kept.
    #[arg(long, default_value_t = 60)]
    reconnect_timeout: u64,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    storage: StorageArgs,
    #[command(flatten)]
    tls: TlsArgs,
}

/// `diffuse worker`: the guard, which runs the worker proper as its child (see
/// `diffuse_runtime::worker::guard`), or, in that child, the worker.
pub fn worker(a: WorkerArgs) -> Result<ExitCode> {
    use diffuse_runtime::worker::guard;
    harden();
    if !guard::under_guard()? {
        let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
        let code = guard::guard(&std::env::current_exe()?, &args)?;
        return Ok(ExitCode::from(code));
    }
    logging();
    for var in ["DIFFUSE_CLIENT_TOKEN", "DIFFUSE_METRICS_TOKEN"] {
        if std::env::var_os(var).is_some() {
            tracing::warn!(
                "{var} is set in this worker's environment: a worker needs only its worker \
                 token; unset {var} where the worker is started, so that it holds no secret it \
                 does not need (docs/security.md)"
            );
        }
    }
    a.storage.apply();
    let token = read_token(&a.token_file, "DIFFUSE_WORKER_TOKEN", "--token-file")?;
    let tls = a.tls.server()?;
    let trust = a.tls.trust()?;
    let task_user = match &a.task_user {
        Some(u) => Some(TaskUser::parse(u).map_err(|e| anyhow::anyhow!("--task-user: {e}"))?),
        None => None,
    };
    let name = a.name.unwrap_or_else(|| {
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_else(|_| "worker".into());
        format!("{}-{}", host.trim(), std::process::id())
    });
    // A worker of a Slurm job array learns its request in the job (see the pool's batch
    // script): `{request}` in its name and cache directory stands for it.
    let (name, cache_dir) = match &a.request {
        Some(r) => (
            name.replace("{request}", r),
            PathBuf::from(a.cache_dir.to_string_lossy().replace("{request}", r)),
        ),
        None => (name, a.cache_dir),
    };
    // One thread: a worker mostly waits on processes and sockets, and cross-thread wake-ups cost
    // more than they save on a busy node.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let machine = diffuse_runtime::worker::Machine::detect();
    let started = std::time::Instant::now();
    let ends_in = match a.ends_in {
        Some(d) => Some(d),
        None => rt.block_on(diffuse_runtime::provisioner::slurm::time_left_of_this_job()),
    };
    let leave_at = ends_in.map(|d| started + d.saturating_sub(a.leave_before));
    if let Some(d) = ends_in {
        tracing::info!(
            "the allocation ends in {d:?}: leaving {:?} before",
            a.leave_before
        );
    }
    rt.block_on(diffuse_runtime::worker::run(WorkerConfig {
        dispatcher: a.dispatcher.trim_end_matches('/').to_string(),
        request: a.request,
        leave_at,
        token,
        cache_dir,
        cache_size: a.cache_size,
        slots: a.cores.unwrap_or(machine.cores),
        memory: a.memory.or(machine.memory),
        gpus: gpus(a.gpus, a.gpu_ids.unwrap_or(machine.gpus))?,
        disk: a.disk,
        log_dir: a.log_dir,
        max_output: a.max_output,
        fetch_sources: a.fetch_sources.into(),
        log_retention: if a.keep_logs {
            Duration::MAX
        } else {
            a.log_retention
        },
        log_max: if a.keep_logs { u64::MAX } else { a.log_max },
        name,
        listen: a.listen,
        advertise: a.advertise,
        eviction: a.eviction,
        rack: a.rack,
        noop: a.noop,
        storage_emulator: a.storage_emulator,
        reconnect_timeout: Duration::from_secs(a.reconnect_timeout),
        input_roots: a.input_roots,
        task_user,
        task_env_drop: a.task_env_drop,
        limits: a.limits.limits(),
        tls,
        trust,
        warm: a.warm,
        warm_idle: a.warm_idle,
    }))?;
    Ok(ExitCode::SUCCESS)
}

/// The GPU ids a worker hands out: the first `count` of `known` (all when no count). With no GPU
/// known (no /dev/nvidiaN, no CUDA_VISIBLE_DEVICES), `--gpus N` means indices 0 to N-1.
fn gpus(count: Option<u32>, known: Vec<String>) -> Result<Vec<String>> {
    let Some(n) = count.map(|n| n as usize) else {
        return Ok(known);
    };
    if known.is_empty() {
        return Ok((0..n).map(|i| i.to_string()).collect());
    }
    if n > known.len() {
        anyhow::bail!(
            "--gpus {n}: this machine shows {} GPU(s) ({}); name them with --gpu-ids",
            known.len(),
            known.join(",")
        );
    }
    Ok(known.into_iter().take(n).collect())
}

#[cfg(test)]
mod tests {
    use super::gpus;
    use diffuse_runtime::worker::gpu_ids;

    #[test]
    fn a_workers_gpus_are_those_of_its_allocation() {
        assert_eq!(gpu_ids("2,3"), ["2", "3"]);
        assert_eq!(gpu_ids(" GPU-8a1f , GPU-77c0"), ["GPU-8a1f", "GPU-77c0"]);
        assert!(gpu_ids("").is_empty());
        assert!(gpu_ids("NoDevFiles").is_empty());
        let known = || vec!["2".to_string(), "3".to_string()];
        assert_eq!(gpus(None, known()).unwrap(), ["2", "3"]);
        assert_eq!(gpus(Some(1), known()).unwrap(), ["2"]);
        assert!(gpus(Some(0), known()).unwrap().is_empty());
        let err = gpus(Some(4), known()).unwrap_err().to_string();
        assert!(err.contains("shows 2 GPU(s) (2,3)"), "{err}");
        // None found: the count is trusted, indices from 0.
        assert_eq!(gpus(Some(2), Vec::new()).unwrap(), ["0", "1"]);
    }
}
