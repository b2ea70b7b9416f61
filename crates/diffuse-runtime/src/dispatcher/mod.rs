//! `diffuse dispatcher`: the HTTP API, worker sessions and metrics around the scheduler thread.
//!
//! | route | token | what |
//! |---|---|---|
//! | `POST /v1/tasks` | client | submit a batch (JSON array or JSON Lines); all or nothing |
//! | `GET /v1/tasks?state=S&limit=N` | client | list tasks |
//! | `GET /v1/tasks/{id}` | client | one task, with its outcome |
//! | `POST /v1/tasks/{id}/cancel` | client | cancel |
//! | `GET /v1/status` | client | counters |
//! | `GET /v1/locate?uri=U` | client | workers holding an object (Hercules' locate) |
//! | `GET /metrics` | client | Prometheus text format |
//! | `GET /v1/workers/connect` | worker | WebSocket session of a worker (see [`crate::proto`]) |

pub mod scheduler;

use crate::journal::Journal;
use crate::proto::{ToDispatcher, ToWorker};
use crate::spec::{parse_tasks, TaskDef};
use crate::storage::Storage;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use diffuse_core::{Core, CoreConfig};
use futures_util::{SinkExt, StreamExt};
use scheduler::{Cmd, InputStat, Prepared, Scheduler, SchedulerConfig, Status, SubmitError};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use tokio::sync::oneshot;

/// The two secrets: clients submit and query; workers connect and serve peers. They must differ.
#[derive(Clone, Debug)]
pub struct Tokens {
    /// Client token.
    pub client: String,
    /// Worker token.
    pub worker: String,
}

/// Settings of a dispatcher.
#[derive(Clone, Debug)]
pub struct DispatcherConfig {
    /// Journal file (SQLite).
    pub journal: PathBuf,
    /// Scheduling core settings.
    pub core: CoreConfig,
    /// Tokens.
    pub tokens: Tokens,
    /// Heartbeat interval told to workers.
    pub heartbeat: Duration,
    /// A worker silent this long is given up and its tasks run elsewhere.
    pub heartbeat_timeout: Duration,
    /// Shared-storage emulation: serve `file://` objects under this root at this many bytes/s
    /// (see [`crate::gateway`]).
    pub storage_gateway: Option<(PathBuf, f64)>,
}

/// A cheap, cloneable handle to a running dispatcher.
#[derive(Clone)]
pub struct Handle {
    tx: mpsc::Sender<Cmd>,
    storage: Arc<Storage>,
    tokens: Arc<Tokens>,
    conns: Arc<AtomicU64>,
    gateway: Option<Arc<crate::gateway::Gateway>>,
}

/// An API error, with its HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Malformed request (the message names the line and field).
    #[error("{0}")]
    BadRequest(String),
    /// Missing or wrong token.
    #[error("missing or wrong token")]
    Unauthorized,
    /// No such task.
    #[error("{0}")]
    NotFound(String),
    /// Conflicts with existing state (duplicate id).
    #[error("{0}")]
    Conflict(String),
    /// The dispatcher is shutting down or failed.
    #[error("{0}")]
    Internal(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = match &self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (code, Json(serde_json::json!({ "error": self.to_string() }))).into_response()
    }
}

/// Open the journal, replay it, and start the scheduler thread.
pub fn start(cfg: DispatcherConfig) -> anyhow::Result<(Handle, std::thread::JoinHandle<()>)> {
    anyhow::ensure!(
        !cfg.tokens.client.is_empty() && !cfg.tokens.worker.is_empty(),
        "the client and worker tokens must not be empty"
    );
    anyhow::ensure!(
        cfg.tokens.client != cfg.tokens.worker,
        "the client and worker tokens must differ"
    );
    let journal = Journal::open(&cfg.journal)?;
    let core = Core::new(cfg.core.clone());
    let scheduler = Scheduler::new(
        core,
        journal,
        SchedulerConfig {
            heartbeat: cfg.heartbeat,
            heartbeat_timeout: cfg.heartbeat_timeout,
            journal: cfg.journal.clone(),
        },
    )?;
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("scheduler".into())
        .spawn(move || scheduler.run(rx))?;
    let gateway = match &cfg.storage_gateway {
        Some((root, rate)) => Some(Arc::new(
            crate::gateway::Gateway::new(root.clone(), *rate, cfg.tokens.worker.clone())
                .map_err(|e| anyhow::anyhow!("storage root {}: {e}", root.display()))?,
        )),
        None => None,
    };
    let handle = Handle {
        tx,
        storage: Arc::new(Storage::default()),
        tokens: Arc::new(cfg.tokens),
        conns: Arc::new(AtomicU64::new(1)),
        gateway,
    };
    Ok((handle, thread))
}

impl Handle {
    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Cmd) -> Result<T, ApiError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(make(tx))
            .map_err(|_| ApiError::Internal("dispatcher is stopping".into()))?;
        rx.await
            .map_err(|_| ApiError::Internal("dispatcher is stopping".into()))
    }

    fn client(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if crate::auth::authorized(headers, &self.tokens.client) {
            Ok(())
        } else {
            Err(ApiError::Unauthorized)
        }
    }

    fn worker(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if crate::auth::authorized(headers, &self.tokens.worker) {
            Ok(())
        } else {
            Err(ApiError::Unauthorized)
        }
    }

    /// Parse and submit a task file's text. All or nothing.
    pub async fn submit_text(&self, text: &str) -> Result<usize, ApiError> {
        let defs = parse_tasks(text).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        self.submit(defs).await
    }

    /// Stat every input, then submit. A task whose input is missing is accepted and fails with
    /// `not found: <uri>`; the others run.
    pub async fn submit(&self, defs: Vec<TaskDef>) -> Result<usize, ApiError> {
        let mut uris: Vec<String> = defs.iter().flat_map(|d| d.inputs.iter().cloned()).collect();
        uris.sort();
        uris.dedup();
        let storage = self.storage.clone();
        let infos: HashMap<String, InputStat> = futures_util::stream::iter(uris)
            .map(|uri| {
                let storage = storage.clone();
                async move {
                    let r = storage
                        .head(&uri)
                        .await
                        .map(|i| (i.size, i.version))
                        .map_err(|e| e.to_string());
                    (uri, r)
                }
            })
            .buffer_unordered(64)
            .collect()
            .await;
        let batch = defs
            .into_iter()
            .map(|def| {
                let mut inputs: Vec<(String, InputStat)> = Vec::new();
                for uri in &def.inputs {
                    if !inputs.iter().any(|(u, _)| u == uri) {
                        inputs.push((uri.clone(), infos[uri].clone()));
                    }
                }
                Prepared { def, inputs }
            })
            .collect();
        match self.ask(|tx| Cmd::Submit(batch, tx)).await? {
            Ok(n) => Ok(n),
            Err(e @ SubmitError::Duplicate(_)) => Err(ApiError::Conflict(e.to_string())),
            Err(e) => Err(ApiError::Internal(e.to_string())),
        }
    }

    /// Counters.
    pub async fn status(&self) -> Result<Status, ApiError> {
        self.ask(Cmd::Status).await
    }

    /// Ask every connected worker to finish and exit.
    pub fn shutdown_workers(&self) {
        let _ = self.tx.send(Cmd::ShutdownWorkers);
    }
}

/// The dispatcher's routes.
pub fn router(handle: Handle) -> Router {
    let gateway = match handle.gateway.clone() {
        Some(g) => Router::new()
            .route("/v1/storage/{*path}", get(crate::gateway::serve))
            .with_state(g),
        None => Router::new(),
    };
    Router::new()
        .route("/v1/tasks", post(submit).get(list))
        .route("/v1/tasks/{id}", get(task))
        .route("/v1/tasks/{id}/cancel", post(cancel))
        .route("/v1/status", get(status))
        .route("/v1/locate", get(locate))
        .route("/metrics", get(metrics))
        .route("/v1/workers/connect", get(connect))
        .with_state(handle)
        .merge(gateway)
}

/// Serve the API on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    handle: Handle,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(handle))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn submit(
    State(h): State<Handle>,
    headers: HeaderMap,
    body: String,
) -> Result<Json<serde_json::Value>, ApiError> {
    h.client(&headers)?;
    let n = h.submit_text(&body).await?;
    Ok(Json(serde_json::json!({ "submitted": n })))
}

#[derive(Deserialize)]
struct ListQuery {
    state: Option<String>,
    limit: Option<usize>,
}

async fn list(
    State(h): State<Handle>,
    headers: HeaderMap,
    Query(q): Query<ListQuery>,
) -> Result<Response, ApiError> {
    h.client(&headers)?;
    if let Some(s) = &q.state {
        if !["queued", "running", "succeeded", "failed", "cancelled"].contains(&s.as_str()) {
            return Err(ApiError::BadRequest(format!(
                "state '{s}' is not one of queued, running, succeeded, failed, cancelled"
            )));
        }
    }
    let views = h
        .ask(|tx| Cmd::List(q.state, q.limit.unwrap_or(1000), tx))
        .await?;
    Ok(Json(views).into_response())
}

async fn task(
    State(h): State<Handle>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    h.client(&headers)?;
    match h.ask(|tx| Cmd::Task(id.clone(), tx)).await? {
        Some(v) => Ok(Json(v).into_response()),
        None => Err(ApiError::NotFound(format!("unknown task '{id}'"))),
    }
}

async fn cancel(
    State(h): State<Handle>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    h.client(&headers)?;
    match h.ask(|tx| Cmd::Cancel(id, tx)).await? {
        Ok(msg) => Ok(Json(serde_json::json!({ "result": msg })).into_response()),
        Err(e) if e.starts_with("unknown") => Err(ApiError::NotFound(e)),
        Err(e) => Err(ApiError::Conflict(e)),
    }
}

async fn status(State(h): State<Handle>, headers: HeaderMap) -> Result<Json<Status>, ApiError> {
    h.client(&headers)?;
    Ok(Json(h.status().await?))
}

#[derive(Deserialize)]
struct LocateQuery {
    uri: String,
}

async fn locate(
    State(h): State<Handle>,
    headers: HeaderMap,
    Query(q): Query<LocateQuery>,
) -> Result<Response, ApiError> {
    h.client(&headers)?;
    let nodes = h.ask(|tx| Cmd::Locate(q.uri.clone(), tx)).await?;
    Ok(Json(serde_json::json!({ "uri": q.uri, "nodes": nodes })).into_response())
}

/// Prometheus text exposition format.
pub fn metrics_text(s: &Status) -> String {
    let mut out = String::new();
    let mut metric = |name: &str, help: &str, kind: &str, samples: &[(&str, f64)]| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (labels, v) in samples {
            out.push_str(&format!("{name}{labels} {v}\n"));
        }
    };
    metric(
        "diffuse_queue_length",
        "Tasks waiting in the queue.",
        "gauge",
        &[("", s.queued as f64)],
    );
    metric(
        "diffuse_slots",
        "Slots on connected workers.",
        "gauge",
        &[("", s.slots as f64)],
    );
    metric(
        "diffuse_slots_busy",
        "Slots running a task.",
        "gauge",
        &[("", s.busy_slots as f64)],
    );
    metric(
        "diffuse_nodes",
        "Connected workers.",
        "gauge",
        &[("", s.workers as f64)],
    );
    metric(
        "diffuse_tasks",
        "Tasks by state.",
        "gauge",
        &[
            ("{state=\"queued\"}", s.queued as f64),
            ("{state=\"running\"}", s.running as f64),
            ("{state=\"succeeded\"}", s.succeeded as f64),
            ("{state=\"failed\"}", s.failed as f64),
            ("{state=\"cancelled\"}", s.cancelled as f64),
        ],
    );
    let t = &s.traffic;
    metric(
        "diffuse_accesses_total",
        "Input accesses by source.",
        "counter",
        &[
            ("{source=\"local\"}", t.local as f64),
            ("{source=\"peer\"}", t.peer as f64),
            ("{source=\"storage\"}", t.storage as f64),
        ],
    );
    metric(
        "diffuse_bytes_total",
        "Input bytes by source.",
        "counter",
        &[
            ("{source=\"local\"}", t.bytes_local as f64),
            ("{source=\"peer\"}", t.bytes_peer as f64),
            ("{source=\"storage\"}", t.bytes_storage as f64),
        ],
    );
    out
}

async fn metrics(State(h): State<Handle>, headers: HeaderMap) -> Result<Response, ApiError> {
    h.client(&headers)?;
    let s = h.status().await?;
    Ok((
        [("content-type", "text/plain; version=0.0.4")],
        metrics_text(&s),
    )
        .into_response())
}

async fn connect(
    State(h): State<Handle>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    h.worker(&headers)?;
    Ok(ws
        .max_message_size(64 << 20)
        .on_upgrade(move |socket| session(socket, h)))
}

/// One worker's WebSocket: hello first, then messages both ways until either side closes.
async fn session(socket: WebSocket, h: Handle) {
    let conn = h.conns.fetch_add(1, Ordering::Relaxed);
    let (mut sink, mut stream) = socket.split();
    let hello = match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
        Ok(Some(Ok(Message::Text(t)))) => match serde_json::from_str::<ToDispatcher>(&t) {
            Ok(m @ ToDispatcher::Hello { .. }) => m,
            _ => return,
        },
        _ => return,
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<ToWorker>();
    if h.tx.send(Cmd::WorkerUp { conn, hello, tx }).is_err() {
        return;
    }
    let writer = tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            let text = serde_json::to_string(&m).expect("message serializes");
            if sink.send(Message::Text(text.into())).await.is_err() {
                break;
            }
        }
        let _ = sink.close().await;
    });
    while let Some(Ok(msg)) = stream.next().await {
        let Message::Text(t) = msg else { continue };
        match serde_json::from_str::<ToDispatcher>(&t) {
            Ok(m) => {
                if h.tx.send(Cmd::FromWorker(conn, m)).is_err() {
                    break;
                }
            }
            Err(e) => tracing::warn!("malformed message from worker: {e}"),
        }
    }
    let _ = h.tx.send(Cmd::WorkerDown(conn));
    writer.abort();
}
