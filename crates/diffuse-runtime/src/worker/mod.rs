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
//!
//! | module | what it holds |
//! |---|---|
//! | this one | settings, the connection to the dispatcher, the session loop |
//! | `task` | one assignment: task directory, process, captured output, outputs |
//! | `stage` | inputs: local hits, single-flight fetches from peers or storage |
//! | `peer` | the peer data server |

mod peer;
mod stage;
mod task;

use crate::cache_dir::CacheDir;
use crate::proto::{Held, ToDispatcher, ToWorker};
use crate::storage::Storage;
use axum::http::HeaderValue;
use diffuse_core::EvictionPolicy;
use futures_util::{SinkExt, StreamExt};
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

pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

type Flight = watch::Receiver<bool>;

pub(crate) struct Ctx {
    cache: Mutex<CacheDir>,
    storage: Storage,
    http: reqwest::Client,
    token: String,
    inflight: Mutex<HashMap<String, Flight>>,
    out: mpsc::UnboundedSender<ToDispatcher>,
    work: PathBuf,
}

impl Ctx {
    pub(crate) fn report_evictions(&self) {
        let evicted = self.cache.lock().expect("cache lock").take_evicted();
        if !evicted.is_empty() {
            let _ = self.out.send(ToDispatcher::Evicted { uris: evicted });
        }
    }
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
            Some(url) => Storage::default().with_gateway(url.clone(), cfg.token.clone()),
            None => Storage::default(),
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
        .route("/v1/cache/{key}", axum::routing::get(peer::serve_object))
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
                            let report = if noop { task::noop_report(&a) } else { task::run_task(&ctx, a).await };
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
