//! The live subcommands: `dispatcher`, `worker`, `run`, `submit`, `status`, `wait`.

use crate::size::{format_size, parse_size};
use anyhow::{bail, Context, Result};
use clap::Args;
use diffuse_core::{CoreConfig, EvictionPolicy, PolicyKind};
use diffuse_runtime::dispatcher::{self, DispatcherConfig, Tokens};
use diffuse_runtime::run::{RunConfig, RunError};
use diffuse_runtime::worker::WorkerConfig;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const DEFAULT_DISPATCHER: &str = "http://127.0.0.1:8700";

/// Storage settings shared by `dispatcher`, `worker` and `run`.
#[derive(Args, Debug, Clone)]
pub struct StorageArgs {
    /// S3 endpoint for s3:// URIs (an S3-compatible server); the same as setting
    /// AWS_ENDPOINT_URL. Credentials and region come from AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY and AWS_DEFAULT_REGION.
    #[arg(long)]
    s3_endpoint: Option<String>,
}

impl StorageArgs {
    /// Apply to this process (and the workers it starts, which inherit the environment).
    fn apply(&self) {
        if let Some(e) = &self.s3_endpoint {
            std::env::set_var("AWS_ENDPOINT_URL", e);
            if e.starts_with("http://") {
                std::env::set_var("AWS_ALLOW_HTTP", "true");
            }
        }
    }
}

/// Scheduling settings shared by `dispatcher` and `run`.
#[derive(Args, Debug, Clone)]
pub struct SchedArgs {
    /// Dispatch policy: fa, mcu, mch or gcc.
    #[arg(long, value_parser = |s: &str| s.parse::<PolicyKind>(), default_value = "gcc")]
    policy: PolicyKind,
    /// Scheduling window: how many queued tasks a decision looks at.
    #[arg(long, default_value_t = 2500, value_parser = clap::value_parser!(u64).range(1..), allow_hyphen_values = true)]
    window: u64,
    /// GCC's utilisation threshold, in (0, 1].
    #[arg(long, default_value_t = 0.9, value_parser = crate::sim::threshold, allow_hyphen_values = true)]
    threshold: f64,
    /// A task whose worker is lost (crashed, killed, cut off) while running it this many times
    /// fails with that reason instead of running again.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    crash_limit: u32,
}

impl SchedArgs {
    fn core(&self) -> CoreConfig {
        CoreConfig {
            policy: self.policy,
            window: self.window as usize,
            threshold: self.threshold,
            crash_limit: self.crash_limit,
            ..CoreConfig::default()
        }
    }
}

/// Arguments of `diffuse dispatcher`.
#[derive(Args, Debug)]
pub struct DispatcherArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8700")]
    listen: std::net::SocketAddr,
    /// Journal file (embedded SQLite); created if missing, replayed if present.
    #[arg(long, default_value = "diffuse-journal.sqlite")]
    journal: PathBuf,
    /// File holding the client token [default: $DIFFUSE_CLIENT_TOKEN].
    #[arg(long)]
    client_token_file: Option<PathBuf>,
    /// File holding the worker token [default: $DIFFUSE_WORKER_TOKEN].
    #[arg(long)]
    worker_token_file: Option<PathBuf>,
    /// Seconds without a heartbeat after which a worker is given up.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..), allow_hyphen_values = true)]
    heartbeat_timeout: u64,
    #[command(flatten)]
    sched: SchedArgs,
    #[command(flatten)]
    storage: StorageArgs,
}

/// Arguments of `diffuse worker`.
#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// Dispatcher URL.
    #[arg(long, default_value = DEFAULT_DISPATCHER)]
    dispatcher: String,
    /// Cache directory (created if missing).
    #[arg(long)]
    cache_dir: PathBuf,
    /// Cache quota, e.g. 10GB.
    #[arg(long, value_parser = parse_size, allow_hyphen_values = true)]
    cache_size: u64,
    /// Task slots.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    slots: u32,
    /// Name shown by the dispatcher [default: host name and pid].
    #[arg(long)]
    name: Option<String>,
    /// Address of this worker's peer data server (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    /// Eviction policy: random, fifo, lru or lfu.
    #[arg(long, value_parser = |s: &str| s.parse::<EvictionPolicy>(), default_value = "lru")]
    eviction: EvictionPolicy,
    /// File holding the worker token [default: $DIFFUSE_WORKER_TOKEN].
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Run no process: report every task done at once (dispatcher benchmarks).
    #[arg(long)]
    noop: bool,
    /// EMULATION: read file:// inputs through this dispatcher's bandwidth-limited storage
    /// gateway (set up by `diffuse run --storage-bandwidth`).
    #[arg(long)]
    storage_gateway: Option<String>,
    /// Seconds to keep trying to reach the dispatcher, at start or after losing it, before
    /// exiting. A lost connection stops the running tasks (the dispatcher runs them again);
    /// the cache is kept.
    #[arg(long, default_value_t = 60)]
    reconnect_timeout: u64,
    #[command(flatten)]
    storage: StorageArgs,
}

/// Arguments of `diffuse run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Task file: one JSON object per line (or a JSON array).
    tasks: PathBuf,
    /// Local worker processes, each with its own cache directory.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    workers: u32,
    /// Slots per worker.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    slots_per_worker: u32,
    /// Cache quota per worker, e.g. 1GB.
    #[arg(long, default_value = "1GB", value_parser = parse_size, allow_hyphen_values = true)]
    cache_size: u64,
    /// Eviction policy: random, fifo, lru or lfu.
    #[arg(long, value_parser = |s: &str| s.parse::<EvictionPolicy>(), default_value = "lru")]
    eviction: EvictionPolicy,
    /// Directory for the journal, caches, logs and results [default: diffuse-runs/run-<time>].
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// Workers run no process (dispatcher throughput benchmark).
    #[arg(long)]
    noop: bool,
    /// EMULATION of slow shared storage: serve file:// inputs under --storage-root through one
    /// link of this total bandwidth, shared by all workers (e.g. 200MB/s).
    #[arg(long, value_parser = parse_rate, allow_hyphen_values = true, requires = "storage_root")]
    storage_bandwidth: Option<f64>,
    /// The directory whose files the emulated shared storage serves (with --storage-bandwidth).
    #[arg(long, requires = "storage_bandwidth")]
    storage_root: Option<PathBuf>,
    #[command(flatten)]
    sched: SchedArgs,
    #[command(flatten)]
    storage: StorageArgs,
}

/// A rate such as `200MB/s` (the `/s` is optional), in bytes per second.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    parse_size(s.strip_suffix("/s").unwrap_or(s)).map(|b| b as f64)
}

/// Arguments of the client commands.
#[derive(Args, Debug)]
pub struct ClientArgs {
    /// Dispatcher URL [default: $DIFFUSE_DISPATCHER or http://127.0.0.1:8700].
    #[arg(long)]
    dispatcher: Option<String>,
    /// File holding the client token [default: $DIFFUSE_CLIENT_TOKEN].
    #[arg(long)]
    token_file: Option<PathBuf>,
}

/// Arguments of `diffuse submit`.
#[derive(Args, Debug)]
pub struct SubmitArgs {
    /// Task file: one JSON object per line (or a JSON array).
    file: PathBuf,
    #[command(flatten)]
    client: ClientArgs,
}

/// Arguments of `diffuse status` and `diffuse wait`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    client: ClientArgs,
}

fn read_token(file: &Option<PathBuf>, env: &str, flag: &str) -> Result<String> {
    let token = match file {
        Some(f) => std::fs::read_to_string(f)
            .with_context(|| format!("{flag}: cannot read {}", f.display()))?,
        None => {
            std::env::var(env).with_context(|| format!("no token: pass {flag} or set {env}"))?
        }
    };
    let token = token.trim().to_string();
    if token.is_empty() {
        bail!("{flag}/{env}: the token is empty");
    }
    Ok(token)
}

fn logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("DIFFUSE_LOG")
        .unwrap_or_else(|_| "info".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// `diffuse dispatcher`.
pub fn dispatcher(a: DispatcherArgs) -> Result<ExitCode> {
    logging();
    a.storage.apply();
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
    };
    let (handle, _thread) = dispatcher::start(DispatcherConfig {
        journal: a.journal.clone(),
        core: a.sched.core(),
        tokens,
        heartbeat: Duration::from_millis(500),
        heartbeat_timeout: Duration::from_secs(a.heartbeat_timeout),
        storage_gateway: None,
    })
    .with_context(|| format!("cannot start with journal {}", a.journal.display()))?;
    runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(a.listen)
            .await
            .with_context(|| format!("--listen {}", a.listen))?;
        tracing::info!("dispatcher listening on http://{}", listener.local_addr()?);
        dispatcher::serve(listener, handle, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// `diffuse worker`.
pub fn worker(a: WorkerArgs) -> Result<ExitCode> {
    logging();
    a.storage.apply();
    let token = read_token(&a.token_file, "DIFFUSE_WORKER_TOKEN", "--token-file")?;
    let name = a.name.unwrap_or_else(|| {
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_else(|_| "worker".into());
        format!("{}-{}", host.trim(), std::process::id())
    });
    // One thread: a worker mostly waits on processes and sockets, and cross-thread wake-ups cost
    // more than they save on a busy node.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(diffuse_runtime::worker::run(WorkerConfig {
        dispatcher: a.dispatcher.trim_end_matches('/').to_string(),
        token,
        cache_dir: a.cache_dir,
        cache_size: a.cache_size,
        slots: a.slots,
        name,
        listen: a.listen,
        eviction: a.eviction,
        noop: a.noop,
        storage_gateway: a.storage_gateway,
        reconnect_timeout: Duration::from_secs(a.reconnect_timeout),
    }))?;
    Ok(ExitCode::SUCCESS)
}

/// `diffuse run`.
pub fn run(a: RunArgs) -> Result<ExitCode> {
    a.storage.apply();
    let run_dir = a.run_dir.clone().unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        PathBuf::from(format!("diffuse-runs/run-{t}"))
    });
    let cfg = RunConfig {
        tasks: a.tasks.clone(),
        workers: a.workers,
        slots_per_worker: a.slots_per_worker,
        cache_size: a.cache_size,
        core: a.sched.core(),
        eviction: a.eviction,
        run_dir,
        exe: std::env::current_exe()?,
        noop: a.noop,
        progress: !a.json,
        storage_bandwidth: a.storage_root.clone().zip(a.storage_bandwidth),
    };
    let summary = match runtime()?.block_on(diffuse_runtime::run::run(cfg)) {
        Ok(s) => s,
        Err(RunError::BadTaskFile { file, error }) => {
            eprintln!("error: {file}: {error}; nothing was submitted");
            return Ok(ExitCode::from(2));
        }
        Err(RunError::Other(e)) => return Err(e),
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "tasks         {} ok, {} failed",
            summary.tasks_ok, summary.tasks_failed
        );
        println!(
            "makespan      {:.2} s ({:.0} tasks/s)",
            summary.makespan_s, summary.tasks_per_s
        );
        println!(
            "accesses      {:.1}% local, {:.1}% peer, {:.1}% from storage",
            summary.hit_local * 100.0,
            summary.hit_peer * 100.0,
            summary.miss * 100.0
        );
        println!(
            "bytes         {} local, {} peer, {} storage",
            format_size(summary.bytes_local),
            format_size(summary.bytes_peer),
            format_size(summary.bytes_storage)
        );
        println!("results       {}", summary.results.display());
    }
    Ok(if summary.tasks_failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

struct Client {
    url: String,
    token: String,
    http: reqwest::Client,
}

impl Client {
    fn new(a: &ClientArgs) -> Result<Client> {
        let url = a
            .dispatcher
            .clone()
            .or_else(|| std::env::var("DIFFUSE_DISPATCHER").ok())
            .unwrap_or_else(|| DEFAULT_DISPATCHER.into());
        Ok(Client {
            url: url.trim_end_matches('/').to_string(),
            token: read_token(&a.token_file, "DIFFUSE_CLIENT_TOKEN", "--token-file")?,
            http: reqwest::Client::new(),
        })
    }

    async fn call(&self, req: reqwest::RequestBuilder) -> Result<serde_json::Value> {
        let resp = req
            .bearer_auth(&self.token)
            .send()
            .await
            .with_context(|| format!("cannot reach {}", self.url))?;
        let code = resp.status();
        let body: serde_json::Value = resp.json().await.unwrap_or(serde_json::Value::Null);
        if !code.is_success() {
            let msg = body
                .get("error")
                .and_then(|e| e.as_str())
                .unwrap_or("no details");
            bail!("{} ({code}): {msg}", self.url);
        }
        Ok(body)
    }

    async fn status(&self) -> Result<serde_json::Value> {
        self.call(self.http.get(format!("{}/v1/status", self.url)))
            .await
    }
}

/// `diffuse submit`.
pub fn submit(a: SubmitArgs) -> Result<ExitCode> {
    let text = std::fs::read_to_string(&a.file)
        .with_context(|| format!("cannot read {}", a.file.display()))?;
    if let Err(e) = diffuse_runtime::spec::parse_tasks(&text) {
        eprintln!("error: {}: {e}; nothing was submitted", a.file.display());
        return Ok(ExitCode::from(2));
    }
    let c = Client::new(&a.client)?;
    let body =
        runtime()?.block_on(c.call(c.http.post(format!("{}/v1/tasks", c.url)).body(text)))?;
    println!("submitted {}", body["submitted"]);
    Ok(ExitCode::SUCCESS)
}

fn print_status(s: &serde_json::Value, json: bool) {
    if json {
        println!("{s}");
    } else {
        println!(
            "queued {}  running {}  succeeded {}  failed {}  cancelled {}  workers {} ({} slots, {} busy)",
            s["queued"], s["running"], s["succeeded"], s["failed"], s["cancelled"], s["workers"], s["slots"], s["busy_slots"]
        );
    }
}

/// `diffuse status`.
pub fn status(a: StatusArgs) -> Result<ExitCode> {
    let c = Client::new(&a.client)?;
    let s = runtime()?.block_on(c.status())?;
    print_status(&s, a.json);
    Ok(ExitCode::SUCCESS)
}

/// `diffuse wait`: until nothing is queued or running; exit 1 if any task failed.
pub fn wait(a: StatusArgs) -> Result<ExitCode> {
    let c = Client::new(&a.client)?;
    let s = runtime()?.block_on(async {
        loop {
            let s = c.status().await?;
            if s["queued"].as_u64() == Some(0) && s["running"].as_u64() == Some(0) {
                return Ok::<_, anyhow::Error>(s);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })?;
    print_status(&s, a.json);
    Ok(if s["failed"].as_u64().unwrap_or(0) > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Arguments of `diffuse demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Files in the generated dataset.
    #[arg(long, default_value_t = 48, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    files: u32,
    /// Size of each file.
    #[arg(long, default_value = "8MB", value_parser = parse_size, allow_hyphen_values = true)]
    file_size: u64,
    /// Tasks; each checksums one file chosen at random.
    #[arg(long, default_value_t = 480, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    tasks: u32,
    /// Local worker processes.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    workers: u32,
    /// Slots per worker.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    slots_per_worker: u32,
    /// Cache quota per worker.
    #[arg(long, default_value = "200MB", value_parser = parse_size, allow_hyphen_values = true)]
    cache_size: u64,
    /// EMULATED shared-storage bandwidth, shared by all workers (the point of the demo: shared
    /// storage is slow under load).
    #[arg(long, default_value = "100MB/s", value_parser = parse_rate, allow_hyphen_values = true)]
    storage_bandwidth: f64,
    /// Keep everything in this directory [default: a temporary directory, removed at the end].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print both summaries as JSON.
    #[arg(long)]
    json: bool,
}

/// `diffuse demo`.
pub fn demo(a: DemoArgs) -> Result<ExitCode> {
    use diffuse_runtime::demo::{generate, run_policy, DemoConfig};
    let temp;
    let dir = match &a.dir {
        Some(d) => d.clone(),
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_path_buf()
        }
    };
    let cfg = DemoConfig {
        dir,
        files: a.files,
        file_size: a.file_size,
        tasks: a.tasks,
        workers: a.workers,
        slots_per_worker: a.slots_per_worker,
        cache_size: a.cache_size,
        storage_bandwidth: a.storage_bandwidth,
        exe: std::env::current_exe()?,
        seed: 7,
        progress: !a.json,
    };
    let rate = format_size(a.storage_bandwidth as u64);
    if !a.json {
        println!(
            "diffuse demo: {} files of {}, {} tasks (md5sum of a random file), {} workers x {} slots, {} cache each",
            a.files,
            format_size(a.file_size),
            a.tasks,
            a.workers,
            a.slots_per_worker,
            format_size(a.cache_size)
        );
        println!(
            "shared storage EMULATED at {rate}/s in total (--storage-bandwidth), in {}",
            cfg.dir.display()
        );
    }
    let tasks = generate(&cfg)?;
    let rt = runtime()?;
    let mut results = Vec::new();
    for policy in [PolicyKind::Fa, PolicyKind::Gcc] {
        if !a.json {
            println!("\n== {} ==", policy.to_string().to_uppercase());
        }
        results.push((policy, rt.block_on(run_policy(&cfg, &tasks, policy))?));
    }
    let (fa, gcc) = (&results[0].1, &results[1].1);
    if a.json {
        println!("{}", serde_json::json!({ "fa": fa, "gcc": gcc }));
    } else {
        println!("\n{:<28} {:>14} {:>14}", "", "FA", "GCC");
        let row = |name: &str, f: String, g: String| println!("{name:<28} {f:>14} {g:>14}");
        row(
            "makespan",
            format!("{:.1} s", fa.makespan_s),
            format!("{:.1} s", gcc.makespan_s),
        );
        row(
            "tasks/s",
            format!("{:.1}", fa.tasks_per_s),
            format!("{:.1}", gcc.tasks_per_s),
        );
        row(
            "read from shared storage",
            format_size(fa.bytes_storage),
            format_size(gcc.bytes_storage),
        );
        row(
            "read from peer caches",
            format_size(fa.bytes_peer),
            format_size(gcc.bytes_peer),
        );
        row(
            "read from local cache",
            format_size(fa.bytes_local),
            format_size(gcc.bytes_local),
        );
        row("local / peer / miss", pct(fa), pct(gcc));
        row(
            "tasks ok / failed",
            format!("{} / {}", fa.tasks_ok, fa.tasks_failed),
            format!("{} / {}", gcc.tasks_ok, gcc.tasks_failed),
        );
        println!(
            "\nWith FA every task reads its file from shared storage, so the run moves at the storage's {rate}/s. \
             With GCC each file crosses shared storage about once; later reads hit a worker's local cache or a \
             peer's, and the dispatcher sends each task to the worker that holds its file: {:.1}x faster, with \
             {:.0}x less traffic on shared storage.",
            fa.makespan_s / gcc.makespan_s.max(1e-9),
            fa.bytes_storage as f64 / (gcc.bytes_storage.max(1)) as f64
        );
    }
    Ok(if fa.tasks_failed + gcc.tasks_failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn pct(s: &diffuse_runtime::run::RunSummary) -> String {
    format!(
        "{:.0}/{:.0}/{:.0}%",
        s.hit_local * 100.0,
        s.hit_peer * 100.0,
        s.miss * 100.0
    )
}
