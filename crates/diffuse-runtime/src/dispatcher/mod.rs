//! `diffuse dispatcher`: the HTTP API, worker sessions and metrics around the scheduler thread.
//!
//! Every route it serves (`tests/docs.rs` holds this table to the routers):
//!
//! | route | token | what |
//! |---|---|---|
//! | `POST /v1/tasks` | client | submit a batch (JSON array or JSON Lines); all or nothing |
//! | `GET /v1/tasks?state=S&limit=N&after=C` | client | a page of tasks, and the cursor of the next |
//! | `POST /v1/states` | client | `{"ids": [...]}`: the tasks named, with state and outcome (at most 10,000 ids a request); with `"wait_s": S`, once one of them has ended (or S seconds, at most 60) |
//! | `GET /v1/tasks/{id}` | client | one task, with its outcome |
//! | `POST /v1/tasks/{id}/cancel` | client | cancel (a running task's processes are stopped) |
//! | `GET /v1/batches/{batch}` | client | a submission's counters (what `diffuse wait` follows) |
//! | `GET /v1/tasks/{id}/logs?attempt=N&stream=S` | client | an attempt's stdout or stderr, from its worker |
//! | `GET /v1/status` | client or metrics | counters |
//! | `GET /v1/results` | client or metrics | the results kept for reuse by content: how many, their bytes |
//! | `DELETE /v1/results` | client | forget every kept result; answers the counts before |
//! | `GET /v1/workers?after=NAME&limit=N` | client or metrics | the workers in name order, a page at a time |
//! | `GET /v1/locate?uri=U` | client | workers holding an object (Hercules' locate) |
//! | `GET /v1/jobs/{job}` | client | a job's counters |
//! | `POST /v1/jobs/{job}/cancel` | client | cancel a job's unfinished tasks (running ones' processes are stopped) |
//! | `GET /v1/objects/{uri}` | client | an object's state, holders, size, producer (`uri` percent-encoded) |
//! | `PUT /v1/objects/{uri}/placement` | client | `{"node": NAME}`: put a `tmp://` object on that worker (Hercules' place) |
//! | `POST /v1/stage` | client | `{"uris": [...], "to": [names], "schedule": "gds"}`: copy objects to workers (GDS); answers `{"id": N}` |
//! | `GET /v1/stage/{id}` | client | a staged batch's progress: requests done, bytes, seconds, bytes by source |
//! | `PUT /v1/blobs/{sha256}` | client or worker | keep the body as a blob named by its SHA-256 ([`blobs`]: a function task's function, large arguments or results) |
//! | `GET /v1/blobs/{sha256}` | client or worker | a blob's bytes (`HEAD`: whether it is kept); workers read `blob://<sha256>` inputs here |
//! | `GET /metrics` | client or metrics | Prometheus text format |
//! | `GET /v1/series?since=N` | client or metrics | one sample of the counters a second, the last hour |
//! | `GET /` | none | the web dashboard ([`dashboard`]); its script asks the routes above with a token |
//! | `GET /dashboard/{file}` | none | the dashboard's script, uPlot and its licence |
//! | `GET /v1/workers/connect` | worker | WebSocket session of a worker (see [`crate::proto`]) |
//! | `GET /v1/storage/{*path}` | worker | only under `diffuse run --storage-bandwidth` (emulation): a file of the emulated shared storage, at its rate; workers read it with `--storage-emulator` |
//!
//! The dispatcher never reads persistent storage: input sizes and versions are looked up by
//! workers ([`scheduler::lookup`]).
//!
//! | module | what it decides |
//! |---|---|
//! | this module | the settings, starting the scheduler thread, the routes, the handlers of status, workers, jobs, objects and metrics |
//! | [`answers`] | every answer of the API as one type, for the dispatcher and its clients |
//! | [`handle`] | the API's shared state ([`Handle`]): token checks, questions to the scheduler thread, [`ApiError`] |
//! | [`dashboard`] | the web dashboard's page, assets and `/v1/series` |
//! | `tasks_api` | the task routes: submit, list, states, a task, its cancel and logs, a batch |
//! | `sessions` | workers' WebSocket sessions: hello checked, messages both ways |
//! | `stage_api` | `POST /v1/stage` and `GET /v1/stage/{id}` |
//! | [`blobs`] | `PUT` and `GET /v1/blobs/{sha256}`: blobs kept by their digest |
//! | [`blob_store`] | where blobs are kept: files named by their SHA-256, written whole or not at all |
//! | [`metrics`] | `/metrics` in the Prometheus text format |
//! | [`scheduler`] | the scheduler thread: the core's decisions carried out on workers |

pub mod answers;
pub mod blob_store;
pub mod blobs;
pub mod dashboard;
mod handle;
pub mod metrics;
pub mod scheduler;
mod sessions;
mod stage_api;
mod tasks_api;

pub use tasks_api::MAX_BODY;

use crate::journal::Journal;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use diffuse_core::{Core, CoreConfig};
use handle::NoParams;
pub use handle::{ApiError, Handle, Tokens};
pub use metrics::metrics_text;
use scheduler::{Scheduler, SchedulerConfig, SchedulerMsg, SchedulerQuery, Status};
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// Settings of a dispatcher.
#[derive(Clone, Debug)]
pub struct DispatcherConfig {
    /// Scheduling core settings.
    pub core: CoreConfig,
    /// Tokens.
    pub tokens: Tokens,
    /// The scheduler thread's settings, the journal file among them.
    pub scheduler: SchedulerConfig,
    /// The elastic pool: where workers come from when the core asks for more (the core's
    /// provisioning must then be dynamic). None: workers are the ones that connect.
    pub pool: Option<crate::provisioner::PoolConfig>,
    /// Shared-storage emulation: serve `file://` objects under this root at this many bytes/s
    /// (see [`crate::storage_emulator`]).
    pub storage_emulator: Option<(PathBuf, f64)>,
    /// What the dispatcher trusts when it fetches captured output from workers' peer servers
    /// over TLS (`--tls-ca`).
    pub trust: crate::tls::Trust,
}

/// Why a dispatcher could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The tokens are empty, or two are the same.
    #[error("{0}")]
    Tokens(&'static str),
    /// The journal's directory cannot be made.
    #[error("cannot create the journal's directory {}: {error}", dir.display())]
    JournalDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The journal cannot be opened or replayed.
    #[error(transparent)]
    Journal(#[from] crate::journal::JournalError),
    /// The elastic pool cannot start (the message says why).
    #[error("{0}")]
    Pool(String),
    /// The storage emulation's root cannot be used.
    #[error("storage root {}: {error}", root.display())]
    StorageRoot {
        /// The root.
        root: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The scheduler thread cannot be started.
    #[error(transparent)]
    Thread(#[from] std::io::Error),
    /// The HTTP client (for workers' captured output) cannot be made.
    #[error(transparent)]
    Http(#[from] reqwest::Error),
}

/// Open the journal, replay it, and start the scheduler thread.
pub fn start(cfg: DispatcherConfig) -> Result<(Handle, std::thread::JoinHandle<()>), StartError> {
    let t = &cfg.tokens;
    if t.client.is_empty()
        || t.worker.is_empty()
        || t.metrics.as_ref().is_some_and(String::is_empty)
    {
        return Err(StartError::Tokens("the tokens must not be empty"));
    }
    if t.client == t.worker
        || t.metrics
            .as_ref()
            .is_some_and(|m| *m == t.client || *m == t.worker)
    {
        return Err(StartError::Tokens(
            "the client, worker and metrics tokens must differ",
        ));
    }
    if let Some(dir) = cfg
        .scheduler
        .journal
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir).map_err(|error| StartError::JournalDir {
            dir: dir.to_path_buf(),
            error,
        })?;
    }
    let opened = std::time::Instant::now();
    let journal = Journal::open(&cfg.scheduler.journal)?;
    tracing::debug!(
        "journal opened and checked in {:.2} s",
        opened.elapsed().as_secs_f64()
    );
    let reader = Journal::reopen(&cfg.scheduler.journal, true)?;
    let core = Core::new(cfg.core.clone());
    let (tx, rx) = mpsc::channel();
    let mut pool_task = None;
    let mut pool_link = None;
    if let Some(p) = &cfg.pool {
        let (max, min) = match &cfg.core.provisioning {
            diffuse_core::Provisioning::Dynamic(d) => (d.max_nodes, d.min_nodes),
            diffuse_core::Provisioning::Static => {
                return Err(StartError::Pool(
                    "an elastic pool needs dynamic provisioning in the core".into(),
                ))
            }
        };
        let (ptx, prx) = tokio::sync::mpsc::unbounded_channel();
        let name = p.backend.name();
        let events = tx.clone();
        let events: crate::provisioner::EventSink = Box::new(move |ev| {
            let _ = events.send(SchedulerMsg::Pool(ev));
        });
        let pool = crate::provisioner::Pool::new(p.clone(), events).map_err(StartError::Pool)?;
        pool_task = Some((pool, prx));
        pool_link = Some((scheduler::pool::PoolLink::new(name, min, max), ptx));
    }
    let pool_tx = pool_link.as_ref().map(|(_, ptx)| ptx.clone());
    let comm = scheduler::LiveComm::start(&cfg.scheduler.journal, pool_tx.clone())?;
    let (ended_tx, ended) = tokio::sync::watch::channel(0u64);
    let replay = std::time::Instant::now();
    let sched_cfg = cfg.scheduler.clone();
    let scheduler = Scheduler::new(
        core,
        journal,
        sched_cfg,
        Box::new(comm),
        scheduler::Now::read(),
    )?
    .with_ended(ended_tx);
    if let (submitted @ 1.., ended) = scheduler.replayed() {
        tracing::info!(
            "journal replayed: {submitted} tasks ({ended} ended) in {:.2} s",
            replay.elapsed().as_secs_f64()
        );
    }
    let scheduler = match pool_link {
        Some((link, _)) => scheduler.with_pool(link),
        None => scheduler,
    };
    let thread = std::thread::Builder::new()
        .name("scheduler".into())
        .spawn(move || scheduler.run(rx))?;
    let storage_emulator = match &cfg.storage_emulator {
        Some((root, rate)) => Some(Arc::new(
            crate::storage_emulator::StorageEmulator::new(
                root.clone(),
                *rate,
                cfg.tokens.worker.clone(),
            )
            .map_err(|error| StartError::StorageRoot {
                root: root.clone(),
                error,
            })?,
        )),
        None => None,
    };
    let blob_dir = cfg
        .scheduler
        .journal
        .parent()
        .map_or_else(|| PathBuf::from("blobs"), |d| d.join("blobs"));
    let blobs =
        blob_store::Blobs::open(blob_dir.clone()).map_err(|error| StartError::JournalDir {
            dir: blob_dir,
            error,
        })?;
    let handle = Handle {
        blobs,
        ended,
        tx,
        reader: Arc::new(Mutex::new(reader)),
        tokens: Arc::new(cfg.tokens),
        conns: Arc::new(AtomicU64::new(1)),
        storage_emulator,
        http: cfg
            .trust
            .reqwest(reqwest::Client::builder().connect_timeout(Duration::from_secs(10)))
            .build()?,
        pool: Arc::new(Mutex::new(pool_task)),
        pool_tx,
        connections: Arc::default(),
    };
    Ok((handle, thread))
}

/// The dispatcher's routes.
pub fn router(handle: Handle) -> Router {
    let tokens = handle.tokens.clone();
    let emulated_storage = match handle.storage_emulator.clone() {
        Some(g) => Router::new()
            .route("/v1/storage/{*path}", get(crate::storage_emulator::serve))
            .with_state(g),
        None => Router::new(),
    };
    Router::new()
        .route("/v1/status", get(status))
        .route("/v1/results", get(results).delete(clear_results))
        .route("/v1/workers", get(workers))
        .route("/v1/locate", get(locate))
        .route("/v1/jobs/{job}", get(job))
        .route("/v1/jobs/{job}/cancel", post(cancel_job))
        .route("/v1/objects/{uri}", get(object))
        .route("/v1/objects/{uri}/placement", put(place))
        .route("/metrics", get(metrics))
        .merge(tasks_api::routes())
        .merge(sessions::routes())
        .merge(dashboard::routes())
        .merge(stage_api::routes())
        .merge(blobs::routes())
        .with_state(handle)
        .merge(emulated_storage)
        .layer(axum::middleware::from_fn_with_state(tokens, prove))
}

/// Tell the server whether a request's connection showed one of the dispatcher's tokens: a
/// proven connection keeps its place under the connection limit, another one gives way to new
/// connections when places run out (docs/security.md, "Connections from strangers"). Each route
/// still checks the token its role needs.
async fn prove(
    State(tokens): State<Arc<Tokens>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(connection) = request.extensions().get::<crate::server::Connection>() {
        let h = request.headers();
        let valid = crate::auth::authorized(h, &tokens.client)
            || crate::auth::authorized(h, &tokens.worker)
            || (tokens.metrics.as_ref()).is_some_and(|m| crate::auth::authorized(h, m));
        if valid {
            connection.prove();
        } else {
            connection.showed_no_token();
        }
    }
    next.run(request).await
}

/// Serve the API on `listener` under `limits`, over TLS if `tls` is given, until `shutdown`
/// resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    handle: Handle,
    limits: crate::server::Limits,
    tls: Option<crate::tls::ServerTls>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let pool = handle.pool.lock().expect("pool").take();
    if let Some((pool, rx)) = pool {
        tokio::spawn(pool.run(rx));
    }
    let pool_tx = handle.pool_tx.clone();
    let stats = handle.connections.clone();
    let blobs = handle.blobs.clone();
    let pruning = tokio::spawn(async move {
        loop {
            let b = blobs.clone();
            let n = tokio::task::spawn_blocking(move || b.prune(blob_store::RETENTION))
                .await
                .unwrap_or(0);
            if n > 0 {
                tracing::info!(
                    "{n} blob(s) unused for {} days deleted",
                    blob_store::RETENTION.as_secs() / 86400
                );
            }
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    });
    let served =
        crate::server::serve_with(listener, router(handle), limits, tls, stats, shutdown).await;
    pruning.abort();
    if let Some(tx) = pool_tx {
        // Give every worker of the pool back before exiting.
        let (done, wait) = oneshot::channel();
        if tx.send(crate::provisioner::PoolCmd::Shutdown(done)).is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(120), wait).await;
        }
    }
    served
}

async fn status(
    State(h): State<Handle>,
    headers: HeaderMap,
    q: Result<Query<NoParams>, QueryRejection>,
) -> Result<Json<Status>, ApiError> {
    h.reader_token(&headers)?;
    q?;
    Ok(Json(h.status().await?))
}

/// `GET /v1/results`: the kept results' counts (reader token).
async fn results(
    State(h): State<Handle>,
    headers: HeaderMap,
) -> Result<Json<scheduler::results::ResultsView>, ApiError> {
    h.reader_token(&headers)?;
    Ok(Json(h.results(false).await?))
}

/// `DELETE /v1/results`: forget every kept result (client token); the counts before.
async fn clear_results(
    State(h): State<Handle>,
    headers: HeaderMap,
) -> Result<Json<scheduler::results::ResultsView>, ApiError> {
    h.client(&headers)?;
    Ok(Json(h.results(true).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkerParams {
    after: Option<String>,
    limit: Option<usize>,
}

/// `GET /v1/workers?after=NAME&limit=N`: the workers in name order, a page at a time (1,000 by
/// default, at most 10,000), with `next` to pass as `after` while there are more.
async fn workers(
    State(h): State<Handle>,
    headers: HeaderMap,
    q: Result<Query<WorkerParams>, QueryRejection>,
) -> Result<Json<scheduler::views::WorkerPage>, ApiError> {
    h.reader_token(&headers)?;
    let Query(q) = q?;
    let limit = q.limit.unwrap_or(1000).clamp(1, 10_000);
    Ok(Json(h.workers(q.after, limit).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LocateParams {
    uri: String,
}

async fn locate(
    State(h): State<Handle>,
    headers: HeaderMap,
    q: Result<Query<LocateParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    h.client(&headers)?;
    let Query(q) = q?;
    let uri = crate::uri::canonical(&q.uri).map_err(ApiError::BadRequest)?;
    let nodes = h.ask(|tx| SchedulerQuery::Locate(uri.clone(), tx)).await?;
    Ok(Json(answers::Located { uri, nodes }).into_response())
}

/// `GET /v1/jobs/{job}`: a job's counters.
async fn job(
    State(h): State<Handle>,
    headers: HeaderMap,
    Path(name): Path<String>,
    q: Result<Query<NoParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    h.client(&headers)?;
    q?;
    match h.ask(|tx| SchedulerQuery::Job(name.clone(), tx)).await? {
        Some(v) => Ok(Json(v).into_response()),
        None => Err(ApiError::NotFound(format!("no task is in job '{name}'"))),
    }
}

/// `POST /v1/jobs/{job}/cancel`: cancel its unfinished tasks.
async fn cancel_job(
    State(h): State<Handle>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    h.client(&headers)?;
    match h
        .ask(|tx| SchedulerMsg::CancelJob(name.clone(), tx))
        .await?
    {
        Some(v) => Ok(Json(v).into_response()),
        None => Err(ApiError::NotFound(format!("no task is in job '{name}'"))),
    }
}

/// `GET /v1/objects/{uri}` (the URI percent-encoded as one path segment).
async fn object(
    State(h): State<Handle>,
    headers: HeaderMap,
    Path(uri): Path<String>,
    q: Result<Query<NoParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    h.client(&headers)?;
    q?;
    let uri = crate::uri::canonical(&uri).map_err(ApiError::BadRequest)?;
    match h.ask(|tx| SchedulerQuery::Object(uri.clone(), tx)).await? {
        Some(view) => Ok(Json(view).into_response()),
        None => Err(ApiError::NotFound(format!("no task reads or writes {uri}"))),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlaceBody {
    node: String,
}

/// `PUT /v1/objects/{uri}/placement` with `{"node": NAME}`.
async fn place(
    State(h): State<Handle>,
    headers: HeaderMap,
    Path(uri): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    h.client(&headers)?;
    let uri = crate::uri::canonical(&uri).map_err(ApiError::BadRequest)?;
    let body: PlaceBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!("body: {e} (expected {{\"node\": \"NAME\"}})"))
    })?;
    match h
        .ask(|tx| SchedulerMsg::Place(uri.clone(), body.node.clone(), tx))
        .await?
    {
        Ok(done) => Ok((
            StatusCode::ACCEPTED,
            Json(answers::Placed {
                uri,
                node: body.node,
                result: done,
            }),
        )
            .into_response()),
        Err(scheduler::objects::PlaceError::Unknown(m)) => Err(ApiError::NotFound(m)),
        Err(scheduler::objects::PlaceError::Invalid(m)) => Err(ApiError::BadRequest(m)),
    }
}

async fn metrics(
    State(h): State<Handle>,
    headers: HeaderMap,
    q: Result<Query<NoParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    h.reader_token(&headers)?;
    q?;
    let text = metrics_text(scrape(h.status().await?, &h.connections));
    Ok(([("content-type", metrics::CONTENT_TYPE)], text).into_response())
}

/// What `/metrics` shows: the scheduler's status and the API server's connection counters.
fn scrape(s: Status, c: &crate::server::ConnectionStats) -> metrics::Scrape {
    metrics::Scrape {
        queued: s.queued,
        running: s.running,
        held_ready: s.held_ready,
        succeeded: s.succeeded,
        failed: s.failed,
        cancelled: s.cancelled,
        unschedulable: s.unschedulable,
        slots: s.slots,
        busy_slots: s.busy_slots,
        nodes: s.workers,
        workers_by_state: s.workers_by_state,
        pool: s.pool.map(|p| metrics::PoolScrape {
            failed_requests: p.failed_requests,
            extra_jobs_adopted: p.extra_jobs_adopted,
            extra_jobs_cancelled: p.extra_jobs_cancelled,
            startup_seconds: p.startup_seconds,
        }),
        traffic: s.traffic,
        prefetch: s.prefetch,
        two_mark: s.two_mark,
        links: (s.links.into_iter())
            .map(|l| metrics::LinkRate {
                from: l.from,
                to: l.to,
                bytes_per_s: l.predicted_bytes_per_s,
            })
            .collect(),
        storage_cap: s.storage_cap.map(|cap| metrics::StorageCap {
            bytes_per_s: cap,
            used_bytes_per_s: s.storage_budget_used,
        }),
        task_run_seconds: s.task_run_seconds,
        task_staging_seconds: s.task_staging_seconds,
        warm: s.warm,
        connections_evicted: c.evicted(),
        connections_refused: c.refused(),
    }
}
