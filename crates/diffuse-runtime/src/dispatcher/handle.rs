//! The API's shared state: [`Handle`], the cheap, cloneable handle every HTTP handler (this
//! module's parent, [`super::dashboard`], the staging routes) is given as axum's state; how
//! it checks a request's token ([`Tokens`]) and asks the scheduler thread; and [`ApiError`],
//! what a handler answers when it fails.

use super::scheduler::{SchedulerMsg, SchedulerQuery, Status, SubmitError, Submitted, TaskView};
use crate::journal::Journal;
use crate::spec::{parse_tasks, TaskDef};
use axum::extract::rejection::QueryRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Arc, Mutex};
use tokio::sync::oneshot;

/// The secrets: clients submit and query; workers connect and serve peers; an optional third
/// one only reads counters and metrics. They must differ.
#[derive(Clone, Debug)]
pub struct Tokens {
    /// Client token.
    pub client: String,
    /// Worker token.
    pub worker: String,
    /// Read-only token for `/metrics` and `/v1/status`.
    pub metrics: Option<String>,
}

/// A cheap, cloneable handle to a running dispatcher.
#[derive(Clone)]
pub struct Handle {
    pub(super) tx: mpsc::Sender<SchedulerMsg>,
    /// A read-only connection to the journal: outcomes are read here, not on the scheduler
    /// thread.
    pub(super) reader: Arc<Mutex<Journal>>,
    pub(super) tokens: Arc<Tokens>,
    pub(super) conns: Arc<AtomicU64>,
    pub(super) storage_emulator: Option<Arc<crate::storage_emulator::StorageEmulator>>,
    /// For fetching captured output from workers.
    pub(super) http: reqwest::Client,
    /// The elastic pool, until `serve` starts it; and its command channel.
    pub(super) pool: Arc<Mutex<Option<PoolTask>>>,
    pub(super) pool_tx: Option<tokio::sync::mpsc::UnboundedSender<crate::provisioner::PoolCmd>>,
    /// The API server's evicted and refused connections (in `/metrics`).
    pub(super) connections: Arc<crate::server::ConnectionStats>,
    /// Blobs clients and workers store (`/v1/blobs`).
    pub(super) blobs: super::blob_store::Blobs,
    /// Outcomes confirmed on disk so far (a long poll waits for it to change).
    pub(super) ended: tokio::sync::watch::Receiver<u64>,
}

pub(super) type PoolTask = (
    crate::provisioner::Pool,
    tokio::sync::mpsc::UnboundedReceiver<crate::provisioner::PoolCmd>,
);

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
    /// The request body is over [`super::MAX_BODY`] (the task routes' limit).
    #[error("{0}")]
    TooLarge(String),
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
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (code, Json(serde_json::json!({ "error": self.to_string() }))).into_response()
    }
}

impl From<QueryRejection> for ApiError {
    fn from(e: QueryRejection) -> Self {
        ApiError::BadRequest(e.body_text())
    }
}

impl Handle {
    pub(super) async fn ask<T, M: Into<SchedulerMsg>>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> M,
    ) -> Result<T, ApiError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(make(tx).into())
            .map_err(|_| ApiError::Internal("dispatcher is stopping".into()))?;
        rx.await
            .map_err(|_| ApiError::Internal("dispatcher is stopping".into()))
    }

    pub(super) fn client(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if crate::auth::authorized(headers, &self.tokens.client) {
            Ok(())
        } else {
            Err(ApiError::Unauthorized)
        }
    }

    /// The client token, or the read-only metrics token.
    pub(super) fn reader_token(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let metrics = self
            .tokens
            .metrics
            .as_ref()
            .is_some_and(|m| crate::auth::authorized(headers, m));
        if metrics {
            Ok(())
        } else {
            self.client(headers)
        }
    }

    pub(super) fn worker(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if crate::auth::authorized(headers, &self.tokens.worker) {
            Ok(())
        } else {
            Err(ApiError::Unauthorized)
        }
    }

    /// Parse and submit a task file's text. All or nothing.
    pub async fn submit_text(&self, text: &str) -> Result<Submitted, ApiError> {
        let defs = parse_tasks(text).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        self.submit(defs).await
    }

    /// Submit parsed tasks: acknowledged once journaled. Their inputs are then looked up by a
    /// worker; a task whose input cannot be read fails with the reason (`not found: <uri>`).
    pub async fn submit(&self, defs: Vec<TaskDef>) -> Result<Submitted, ApiError> {
        match self.ask(|tx| SchedulerMsg::Submit(defs, tx)).await? {
            Ok(s) => Ok(s),
            Err(e @ SubmitError::Duplicate(_)) => Err(ApiError::Conflict(e.to_string())),
            Err(e @ SubmitError::Invalid(_)) => Err(ApiError::BadRequest(e.to_string())),
            Err(e) => Err(ApiError::Internal(e.to_string())),
        }
    }

    /// Counters.
    pub async fn status(&self) -> Result<Status, ApiError> {
        self.ask(SchedulerQuery::Status).await
    }

    /// The kept results' counts; with `clear`, after forgetting them all.
    pub async fn results(
        &self,
        clear: bool,
    ) -> Result<super::scheduler::results::ResultsView, ApiError> {
        self.ask(|reply| SchedulerMsg::Results { clear, reply })
            .await
    }

    /// A page of workers in name order: at most `limit` after the name `after`.
    pub async fn workers(
        &self,
        after: Option<String>,
        limit: usize,
    ) -> Result<super::scheduler::views::WorkerPage, ApiError> {
        self.ask(|reply| SchedulerQuery::Workers {
            after,
            limit,
            reply,
        })
        .await
    }

    /// Tasks whose outcome was journaled after the first `after`, in that order, as (id, state);
    /// and how many have ended now.
    pub async fn ended_since(
        &self,
        after: usize,
    ) -> Result<(Vec<(String, String)>, usize), ApiError> {
        self.ask(|tx| SchedulerQuery::Ended(after, tx)).await
    }

    /// The journaled outcome of task `id`, if it has one.
    pub async fn outcome(&self, id: &str) -> Result<Option<crate::journal::TaskOutcome>, ApiError> {
        let id = id.to_string();
        self.read_journal(move |j| j.outcome(&id)).await
    }

    /// Every dispatched attempt of task `id`: number, worker, and the report of a retried one.
    pub(super) async fn attempt_results(
        &self,
        id: &str,
    ) -> Result<Vec<(u32, String, Option<String>)>, ApiError> {
        let id = id.to_string();
        self.read_journal(move |j| j.attempt_results(&id)).await
    }

    /// Run `read` on the journal's read-only connection, off the async threads.
    pub(super) async fn read_journal<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Journal) -> Result<T, crate::journal::JournalError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let reader = self.reader.clone();
        tokio::task::spawn_blocking(move || read(&reader.lock().expect("journal reader")))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?
            .map_err(|e| ApiError::Internal(e.to_string()))
    }

    /// Ask every connected worker to finish and exit.
    pub fn shutdown_workers(&self) {
        let _ = self.tx.send(SchedulerMsg::ShutdownWorkers);
    }

    /// Fill in the journaled outcome of every ended task among `views`.
    pub(super) async fn with_outcomes(
        &self,
        mut views: Vec<TaskView>,
    ) -> Result<Vec<TaskView>, ApiError> {
        let ended = |v: &TaskView| ["succeeded", "failed", "cancelled"].contains(&v.state.as_str());
        if !views.iter().any(ended) {
            return Ok(views);
        }
        self.read_journal(move |journal| {
            for v in views.iter_mut().filter(|v| ended(v)) {
                let o = journal.outcome(&v.id)?;
                if let Some(o) = &o {
                    v.node.clone_from(&o.node);
                    v.attempt = o.attempt;
                }
                v.outcome = o;
            }
            Ok(views)
        })
        .await
    }
}

/// A query string that must be empty (a route that takes no parameters).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoParams {}
