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
//! Then it runs the command (`argv` directly, a string by `sh -c`) with `{inputs[i]}` and
//! `{outputs[i]}` replaced by local paths and stdout/stderr captured to files, uploads outputs,
//! and reports exit code, timings and traffic. Peers fetch cached objects from
//! `GET /v1/cache/{key}` (worker token; key = hex SHA-256 of the URI; range requests honoured);
//! the response carries the object's checksum, which the receiver verifies.

use crate::cache_dir::{CacheDir, Lookup};
use crate::proto::{
    AssignedInput, Assignment, Held, InputSource, TaskReport, ToDispatcher, ToWorker, Traffic,
};
use crate::spec::Cmd;
use crate::storage::{Storage, StorageError};
use axum::extract::{Path as AxPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use diffuse_core::EvictionPolicy;
use futures_util::{SinkExt, StreamExt};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tower::ServiceExt;

/// Settings of a worker.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Dispatcher base URL, `http://host:port`.
    pub dispatcher: String,
    /// Worker token.
    pub token: String,
    /// Cache directory (created if missing). Task directories go under `<cache-dir>/work`.
    pub cache_dir: PathBuf,
    /// Cache quota, bytes.
    pub cache_size: u64,
    /// Task slots.
    pub slots: u32,
    /// Name shown in the dispatcher's API.
    pub name: String,
    /// Address of the peer data server.
    pub listen: std::net::SocketAddr,
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
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

type Flight = watch::Receiver<bool>;

struct Ctx {
    cache: Mutex<CacheDir>,
    storage: Storage,
    http: reqwest::Client,
    token: String,
    inflight: Mutex<HashMap<String, Flight>>,
    out: mpsc::UnboundedSender<ToDispatcher>,
    work: PathBuf,
}

impl Ctx {
    fn report_evictions(&self) {
        let evicted = self.cache.lock().expect("cache lock").take_evicted();
        if !evicted.is_empty() {
            let _ = self.out.send(ToDispatcher::Evicted { uris: evicted });
        }
    }
}

/// Which source an input was finally read from, and how many bytes.
enum Staged {
    Local(u64),
    Peer(u64),
    Storage(u64),
}

/// Run a worker until the dispatcher tells it to shut down, or cannot be reached for
/// `reconnect_timeout`, or refuses it.
pub async fn run(mut cfg: WorkerConfig) -> anyhow::Result<()> {
    // Tasks run in their own directories: every path handed to them must be absolute.
    cfg.cache_dir = std::path::absolute(&cfg.cache_dir)?;
    let cache_dir = cfg.cache_dir.clone();
    let (quota, eviction) = (cfg.cache_size, cfg.eviction);
    // A cache left without the clean-shutdown marker may hold objects whose data never reached
    // the disk before a crash: verify every checksum before using any of them.
    let marker = cfg.cache_dir.join(CLEAN_MARKER);
    let clean = marker.exists();
    let _ = std::fs::remove_file(&marker);
    if !clean {
        tracing::info!(
            "no clean-shutdown marker in {}: verifying every cached object",
            cfg.cache_dir.display()
        );
    }
    let cache =
        tokio::task::spawn_blocking(move || CacheDir::open(&cache_dir, quota, eviction, !clean))
            .await??;
    let work = cfg.cache_dir.join("work");
    std::fs::create_dir_all(&work)?;
    let (out_tx, out_rx) = mpsc::unbounded_channel();
    let ctx = Arc::new(Ctx {
        cache: Mutex::new(cache),
        storage: match &cfg.storage_gateway {
            Some(url) => Storage::with_gateway(url.clone(), cfg.token.clone()),
            None => Storage::new(),
        },
        http: reqwest::Client::new(),
        token: cfg.token.clone(),
        inflight: Mutex::new(HashMap::new()),
        out: out_tx,
        work,
    });

    let listener = tokio::net::TcpListener::bind(cfg.listen).await?;
    let peer_url = format!("http://{}", listener.local_addr()?);
    let peer_router = axum::Router::new()
        .route("/v1/cache/{key}", axum::routing::get(serve_object))
        .with_state(ctx.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, peer_router).await;
    });

    // One session per connection. When a connection is lost the running tasks are stopped (the
    // dispatcher has given their attempts up and runs them again, so their results would be
    // refused), and the worker connects again, keeping its cache.
    let mut outbox = Outbox {
        rx: out_rx,
        unsent: Vec::new(),
    };
    let mut unreachable_since: Option<std::time::Instant> = None;
    let mut delay = RECONNECT_FIRST;
    loop {
        match connect(&cfg, &ctx, &peer_url).await {
            Ok(ws) => {
                unreachable_since = None;
                delay = RECONNECT_FIRST;
                let mut tasks = tokio::task::JoinSet::new();
                match session(&cfg, &ctx, ws, &mut outbox, &mut tasks).await {
                    Ok(()) => break,
                    Err(e) => {
                        // A task whose process already ended keeps its report (sent after
                        // reconnecting; the dispatcher refuses it by attempt number if it gave
                        // that attempt up). The others are stopped.
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
            Err(Connect::Refused(e)) => return Err(e),
            Err(Connect::Unreachable(e)) => {
                let since = *unreachable_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= cfg.reconnect_timeout {
                    anyhow::bail!(
                        "cannot connect to the dispatcher at {} (tried for {:.0?}): {e}",
                        cfg.dispatcher,
                        cfg.reconnect_timeout
                    );
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(RECONNECT_MAX);
            }
        }
    }
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
    Ok(())
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

/// Connect, say hello with everything the cache holds now, and wait for the welcome.
async fn connect(cfg: &WorkerConfig, ctx: &Ctx, peer_url: &str) -> Result<(Ws, Duration), Connect> {
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
    let (mut ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .map_err(|e| {
            let text = anyhow::anyhow!(
                "cannot connect to the dispatcher at {}: {e}",
                cfg.dispatcher
            );
            match e {
                WsError::Http(_) | WsError::Url(_) | WsError::HttpFormat(_) => refused(text),
                _ => Connect::Unreachable(text),
            }
        })?;
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
        cache_quota: cfg.cache_size,
        peer_url: peer_url.to_string(),
        held,
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

/// Serve one connection: run what the dispatcher assigns, report what happens. Ok when told to
/// shut down (after the running tasks ended and their reports went out); Err when the
/// connection is lost.
async fn session(
    cfg: &WorkerConfig,
    ctx: &Arc<Ctx>,
    (ws, heartbeat): (Ws, Duration),
    outbox: &mut Outbox,
    tasks: &mut tokio::task::JoinSet<()>,
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
                        tasks.spawn(async move {
                            let report = if noop { noop_report(&a) } else { run_task(&ctx, a).await };
                            let _ = ctx.out.send(ToDispatcher::Finished(report));
                        });
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
                    ToWorker::Shutdown => draining = true,
                    ToWorker::Welcome { .. } => {}
                }
            }
            Some(m) = outbox.rx.recv() => deliver(&mut sink, m, &mut outbox.unsent).await?,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            _ = beat.tick() => {
                sink.send(Message::Text(serde_json::to_string(&ToDispatcher::Heartbeat)?.into())).await?;
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

fn noop_report(a: &Assignment) -> TaskReport {
    let now = unix_now();
    TaskReport {
        task: a.task.clone(),
        attempt: a.attempt,
        exit_code: Some(0),
        error: None,
        started_at: now,
        staged_at: now,
        finished_at: now,
        stdout: String::new(),
        stderr: String::new(),
        outputs: Vec::new(),
        uncached: Vec::new(),
        traffic: Traffic::default(),
    }
}

/// A file name for a task directory: the id with anything but `[A-Za-z0-9._-]` replaced.
fn dir_name(task: &str, attempt: u32) -> String {
    let safe: String = task
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}.{}.{attempt}", &CacheDir::key(task)[..8])
}

async fn run_task(ctx: &Arc<Ctx>, a: Assignment) -> TaskReport {
    let started_at = unix_now();
    let dir = ctx.work.join(dir_name(&a.task, a.attempt));
    let mut report = TaskReport {
        task: a.task.clone(),
        attempt: a.attempt,
        exit_code: None,
        error: None,
        started_at,
        staged_at: started_at,
        finished_at: started_at,
        stdout: dir.join("stdout").display().to_string(),
        stderr: dir.join("stderr").display().to_string(),
        outputs: Vec::new(),
        uncached: Vec::new(),
        traffic: Traffic::default(),
    };
    let fail = |mut r: TaskReport, e: String| {
        r.error = Some(e);
        r.finished_at = unix_now();
        r
    };
    let inputs_dir = dir.join("inputs");
    let outputs_dir = dir.join("outputs");
    // Only the directories the task needs: a short task's cost is mostly file-system calls (a
    // directory and two files cost more than spawning the process on a busy disk). A task with
    // neither inputs nor outputs gets no directory of its own unless it writes output.
    let needs_dir = !a.inputs.is_empty() || !a.outputs.is_empty();
    let made = (if needs_dir {
        std::fs::create_dir_all(&dir)
    } else {
        Ok(())
    })
    .and_then(|_| {
        if a.inputs.is_empty() {
            Ok(())
        } else {
            std::fs::create_dir(&inputs_dir)
        }
    })
    .and_then(|_| {
        if a.outputs.is_empty() {
            Ok(())
        } else {
            std::fs::create_dir(&outputs_dir)
        }
    });
    if let Err(e) = made {
        return fail(report, format!("cannot create {}: {e}", dir.display()));
    }
    // The inputs' links go when the task ends, however it ends: a link keeps an evicted
    // object's bytes on disk, outside the quota's count.
    let links = (!a.inputs.is_empty()).then(|| RemoveOnDrop(inputs_dir.clone()));
    let paths: Vec<PathBuf> = (0..a.inputs.len())
        .map(|i| inputs_dir.join(format!("{i}")))
        .collect();
    let caching = a.caching;
    let staged =
        futures_util::future::join_all(a.inputs.iter().zip(&paths).map(|(input, dest)| {
            let (ctx, input, dest) = (ctx.clone(), input.clone(), dest.clone());
            async move {
                if caching {
                    stage(ctx, input, dest).await
                } else {
                    read_uncached(&ctx, &input, &dest).await
                }
            }
        }))
        .await;
    let mut uncached = Vec::new();
    for (input, s) in a.inputs.iter().zip(staged) {
        match s {
            Ok((how, cached)) => {
                let t = &mut report.traffic;
                match how {
                    Staged::Local(b) => (t.local, t.bytes_local) = (t.local + 1, t.bytes_local + b),
                    Staged::Peer(b) => (t.peer, t.bytes_peer) = (t.peer + 1, t.bytes_peer + b),
                    Staged::Storage(b) => {
                        (t.storage, t.bytes_storage) = (t.storage + 1, t.bytes_storage + b)
                    }
                }
                if !cached {
                    uncached.push(input.uri.clone());
                }
            }
            Err(e) => return fail(report, e),
        }
    }
    report.uncached = uncached;
    report.staged_at = unix_now();
    let outputs: Vec<PathBuf> = (0..a.outputs.len())
        .map(|i| outputs_dir.join(format!("{i}")))
        .collect();
    // `{inputs[i]}` counts the task's inputs as written, repeats included.
    let by_position: Vec<PathBuf> = if a.positions.is_empty() {
        paths.clone()
    } else {
        a.positions
            .iter()
            .map(|&p| paths[p as usize].clone())
            .collect()
    };
    let result = execute(&a.cmd, &by_position, &outputs, &dir).await;
    drop(links);
    match result {
        Ok(code) => report.exit_code = code,
        Err(e) => return fail(report, e),
    }
    if report.exit_code == Some(0) {
        for (uri, path) in a.outputs.iter().zip(&outputs) {
            if let Err(e) = ctx.storage.put_file(uri, path).await {
                return fail(report, format!("output {uri}: {e}"));
            }
            report.outputs.push(uri.clone());
        }
    }
    report.finished_at = unix_now();
    report
}

/// Removes a file or directory tree when dropped (if it still exists).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        match std::fs::symlink_metadata(&self.0) {
            Ok(m) if m.is_dir() => {
                let _ = std::fs::remove_dir_all(&self.0);
            }
            Ok(_) => {
                let _ = std::fs::remove_file(&self.0);
            }
            Err(_) => {}
        }
    }
}

fn expand(text: &str, inputs: &[PathBuf], outputs: &[PathBuf]) -> String {
    let mut s = text.to_string();
    for (i, p) in inputs.iter().enumerate() {
        s = s.replace(&format!("{{inputs[{i}]}}"), &p.display().to_string());
    }
    for (i, p) in outputs.iter().enumerate() {
        s = s.replace(&format!("{{outputs[{i}]}}"), &p.display().to_string());
    }
    s
}

/// The program's path: names without a `/` are looked up in `PATH` once and remembered, so a
/// spawn does not try every `PATH` directory in turn.
fn resolve(program: &str) -> PathBuf {
    static FOUND: std::sync::OnceLock<Mutex<HashMap<String, PathBuf>>> = std::sync::OnceLock::new();
    if program.contains('/') {
        return PathBuf::from(program);
    }
    let found = FOUND.get_or_init(Default::default);
    if let Some(p) = found.lock().expect("path cache").get(program) {
        return p.clone();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let hit = std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        });
    match hit {
        Some(p) => {
            found
                .lock()
                .expect("path cache")
                .insert(program.to_string(), p.clone());
            p
        }
        // Not found: let the spawn fail with the OS's own error for the bare name.
        None => PathBuf::from(program),
    }
}

/// Run the command; Ok(exit code, None if killed by a signal), Err(exec error). Its stdout and
/// stderr are written to `dir/stdout` and `dir/stderr`, each created at its first byte (a task
/// that prints nothing leaves no file). The process runs in `dir` if it exists, else in the
/// worker's work directory.
async fn execute(
    cmd: &Cmd,
    inputs: &[PathBuf],
    outputs: &[PathBuf],
    dir: &Path,
) -> Result<Option<i32>, String> {
    let mut command = match cmd {
        Cmd::Argv(argv) => {
            let mut c = tokio::process::Command::new(resolve(&expand(&argv[0], inputs, outputs)));
            c.args(argv[1..].iter().map(|a| expand(a, inputs, outputs)));
            c
        }
        Cmd::Shell(s) => {
            let mut c = tokio::process::Command::new("sh");
            c.arg("-c").arg(expand(s, inputs, outputs));
            c
        }
    };
    let cwd = if dir.is_dir() {
        dir
    } else {
        dir.parent().unwrap_or(dir)
    };
    command
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|e| {
        let program = match cmd {
            Cmd::Argv(a) => a[0].clone(),
            Cmd::Shell(_) => "sh".into(),
        };
        format!("exec {program}: {e}")
    })?;
    let out = tokio::spawn(capture(child.stdout.take(), dir.join("stdout")));
    let err = tokio::spawn(capture(child.stderr.take(), dir.join("stderr")));
    let status = child.wait().await.map_err(|e| format!("wait: {e}"))?;
    // A background process started by the task may hold the pipes open: give the copies a
    // moment to drain, then let the task end without it.
    for copy in [out, err] {
        match tokio::time::timeout(Duration::from_secs(1), copy).await {
            Ok(Ok(Err(e))) => return Err(format!("capturing output: {e}")),
            Ok(_) => {}
            Err(_) => {
                tracing::warn!("output still open 1 s after the task exited; not waiting for it")
            }
        }
    }
    Ok(status.code())
}

/// Copy a pipe to `path`, creating the file (and its directory) at the first byte.
async fn capture(
    pipe: Option<impl tokio::io::AsyncRead + Unpin>,
    path: PathBuf,
) -> std::io::Result<()> {
    use tokio::io::AsyncReadExt;
    let Some(mut pipe) = pipe else { return Ok(()) };
    let mut buf = vec![0u8; 64 * 1024];
    let mut file: Option<tokio::fs::File> = None;
    loop {
        let n = pipe.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        if file.is_none() {
            if let Some(parent) = path.parent() {
                tokio::fs::create_dir_all(parent).await?;
            }
            file = Some(tokio::fs::File::create(&path).await?);
        }
        file.as_mut().expect("created").write_all(&buf[..n]).await?;
    }
    if let Some(mut f) = file {
        f.flush().await?;
    }
    Ok(())
}

/// Put one input at `dest`; returns where it came from and whether it is cached.
async fn stage(
    ctx: Arc<Ctx>,
    input: AssignedInput,
    dest: PathBuf,
) -> Result<(Staged, bool), String> {
    let mut joined = false;
    loop {
        // 1. A local hit (or the result of a fetch we waited for).
        let hit = {
            let mut cache = ctx.cache.lock().expect("cache lock");
            match cache.lookup(&input.uri, Some(&input.version)) {
                Lookup::Hit(_) => Some(
                    cache
                        .link_into(&input.uri, &dest)
                        .map_err(|e| format!("{}: {e}", input.uri)),
                ),
                Lookup::Stale | Lookup::Miss => None,
            }
        };
        ctx.report_evictions();
        if let Some(r) = hit {
            r?;
            return Ok((Staged::Local(input.size), true));
        }
        // 2. Single-flight: wait for a fetch already under way, then look again; or lead one.
        let role = {
            let mut inflight = ctx.inflight.lock().expect("inflight lock");
            match inflight.get(&input.uri) {
                Some(rx) if !joined => Err(rx.clone()),
                _ => {
                    let (tx, rx) = watch::channel(false);
                    inflight.insert(input.uri.clone(), rx);
                    Ok(tx)
                }
            }
        };
        match role {
            Err(mut rx) => {
                let _ = rx.wait_for(|done| *done).await;
                joined = true;
            }
            Ok(tx) => {
                let r = fetch(&ctx, &input, &dest).await;
                ctx.inflight
                    .lock()
                    .expect("inflight lock")
                    .remove(&input.uri);
                let _ = tx.send(true);
                return r;
            }
        }
    }
}

/// Read an input straight from persistent storage to `dest`, bypassing the cache (FA).
async fn read_uncached(
    ctx: &Ctx,
    input: &AssignedInput,
    dest: &Path,
) -> Result<(Staged, bool), String> {
    let d = ctx
        .storage
        .get_to_file(&input.uri, dest)
        .await
        .map_err(|e| match e {
            StorageError::NotFound(u) => format!("not found: {u}"),
            e => e.to_string(),
        })?;
    Ok((Staged::Storage(d.info.size), true))
}

/// Fetch an input from the named peer (falling back to storage) or from storage, and cache it.
async fn fetch(
    ctx: &Arc<Ctx>,
    input: &AssignedInput,
    dest: &Path,
) -> Result<(Staged, bool), String> {
    let temp = ctx.cache.lock().expect("cache lock").temp_path();
    // A fetch stopped half way (its task aborted when the dispatcher was lost) leaves no
    // partial file behind; after a commit the temp name no longer exists.
    let _partial = RemoveOnDrop(temp.clone());
    if let InputSource::Peer { url } = &input.source {
        match fetch_peer(ctx, url, input, &temp).await {
            Ok(stored) => return place(ctx, input, dest, (Staged::Peer(input.size), stored)),
            Err(e) => {
                tracing::warn!(uri = %input.uri, "peer fetch from {url} failed ({e}); reading from storage")
            }
        }
    }
    let d = ctx
        .storage
        .get_to_file(&input.uri, &temp)
        .await
        .map_err(|e| {
            let _ = std::fs::remove_file(&temp);
            match e {
                StorageError::NotFound(u) => format!("not found: {u}"),
                e => e.to_string(),
            }
        })?;
    let stored = commit(
        ctx,
        &temp,
        &input.uri,
        &d.info.version,
        d.written,
        &d.sha256,
        None,
    )
    .await?;
    place(ctx, input, dest, (Staged::Storage(d.info.size), stored))
}

/// Commit a downloaded temp file with the digest computed while it was written; returns the
/// path and whether it was cached.
async fn commit(
    ctx: &Ctx,
    temp: &Path,
    uri: &str,
    version: &str,
    size: u64,
    sha256: &str,
    expected: Option<&str>,
) -> Result<(PathBuf, bool), String> {
    // No fsync per object: after an unclean shutdown the whole cache is verified at start-up
    // (see `CLEAN_MARKER`), so a torn object is never used.
    let stored = ctx
        .cache
        .lock()
        .expect("cache lock")
        .commit_hashed(temp, uri, version, size, sha256, expected);
    let stored = stored.map_err(|e| {
        let _ = std::fs::remove_file(temp);
        format!("{uri}: {e}")
    })?;
    ctx.report_evictions();
    if stored.cached {
        let _ = ctx.out.send(ToDispatcher::Cached {
            objects: vec![Held {
                uri: uri.into(),
                version: version.into(),
            }],
        });
    }
    Ok((stored.path, stored.cached))
}

/// Link a just-committed object into the task directory (or move an uncached one there).
fn place(
    ctx: &Ctx,
    input: &AssignedInput,
    dest: &Path,
    r: (Staged, (PathBuf, bool)),
) -> Result<(Staged, bool), String> {
    let (how, (path, cached)) = r;
    if cached {
        ctx.cache
            .lock()
            .expect("cache lock")
            .link_into(&input.uri, dest)
            .map_err(|e| format!("{}: {e}", input.uri))?;
    } else {
        std::fs::rename(&path, dest).map_err(|e| format!("{}: {e}", input.uri))?;
    }
    Ok((how, cached))
}

async fn fetch_peer(
    ctx: &Ctx,
    url: &str,
    input: &AssignedInput,
    temp: &Path,
) -> Result<(PathBuf, bool), String> {
    let resp = ctx
        .http
        .get(format!("{url}/v1/cache/{}", CacheDir::key(&input.uri)))
        .bearer_auth(&ctx.token)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !resp.status().is_success() {
        return Err(format!("status {}", resp.status()));
    }
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    let (sha, version) = (header("x-diffuse-sha256"), header("x-diffuse-version"));
    if version.as_deref() != Some(input.version.as_str()) {
        return Err(format!(
            "peer holds version {version:?}, wanted {}",
            input.version
        ));
    }
    let (written, got) = crate::storage::write_hashed(&input.uri, temp, resp.bytes_stream())
        .await
        .map_err(|e| e.to_string())?;
    // The checksum the peer recorded is checked against the bytes received before the object
    // becomes visible: a corrupt or partial transfer is dropped, and the caller reads storage.
    commit(
        ctx,
        temp,
        &input.uri,
        &input.version,
        written,
        &got,
        sha.as_deref(),
    )
    .await
}

/// `GET /v1/cache/{key}`: a cached object, to holders of the worker token only.
async fn serve_object(
    State(ctx): State<Arc<Ctx>>,
    AxPath(key): AxPath<String>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let authorized = crate::auth::authorized(&headers, &ctx.token);
    if !authorized {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let Some((path, meta)) = ctx.cache.lock().expect("cache lock").path_for_key(&key) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    match tower_http::services::ServeFile::new(path)
        .with_buf_chunk_size(1 << 20)
        .oneshot(req)
        .await
    {
        Ok(resp) => {
            let mut resp = resp.into_response();
            if resp.status().is_success() {
                let h = resp.headers_mut();
                if let (Ok(sha), Ok(version)) = (
                    HeaderValue::from_str(&meta.sha256),
                    HeaderValue::from_str(&meta.version),
                ) {
                    h.insert("x-diffuse-sha256", sha);
                    h.insert("x-diffuse-version", version);
                }
            }
            resp
        }
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}
