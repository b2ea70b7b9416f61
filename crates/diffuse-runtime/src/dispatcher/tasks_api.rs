//! The task API: `POST /v1/tasks` (a batch, acknowledged once journaled), `GET /v1/tasks`
//! (pages by state), `POST /v1/states` (many tasks' states, waiting for one to end),
//! `GET /v1/tasks/{id}` with its outcome and attempts, its cancel and its logs, and
//! `GET /v1/batches/{n}`.

use super::answers;
use super::handle::{ApiError, Handle};
use super::scheduler;
use super::scheduler::tasks::Listed;
use super::scheduler::{BatchView, ListQuery, SchedulerMsg, SchedulerQuery, Submitted};
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use std::time::Duration;

/// The task routes.
pub fn routes() -> Router<Handle> {
    Router::new()
        .route(
            "/v1/tasks",
            post(submit)
                .get(list)
                .layer(DefaultBodyLimit::max(MAX_BODY)),
        )
        .route(
            "/v1/states",
            post(states).layer(DefaultBodyLimit::max(MAX_BODY)),
        )
        .route("/v1/tasks/{id}", get(task))
        .route("/v1/tasks/{id}/cancel", post(cancel))
        .route("/v1/tasks/{id}/logs", get(logs))
        .route("/v1/batches/{batch}", get(batch))
}

/// Largest request body (a batch of tasks): 64 MiB. `diffuse submit` splits larger task files
/// into batches below it.
pub const MAX_BODY: usize = 64 << 20;

async fn submit(
    State(h): State<Handle>,
    headers: HeaderMap,
    body: Result<axum::body::Bytes, BytesRejection>,
) -> Result<Json<Submitted>, ApiError> {
    h.client(&headers)?;
    let body = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::TooLarge(format!(
            "the request body is over {} MiB: submit the tasks in several batches (`diffuse submit` does)",
            MAX_BODY >> 20
        )),
        _ => ApiError::BadRequest(e.body_text()),
    })?;
    let text = std::str::from_utf8(&body).map_err(|e| {
        let line = 1 + body[..e.valid_up_to()]
            .iter()
            .filter(|b| **b == b'\n')
            .count();
        ApiError::BadRequest(format!("line {line}: not valid UTF-8"))
    })?;
    Ok(Json(h.submit_text(text).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    state: Option<String>,
    limit: Option<usize>,
    after: Option<String>,
}

async fn list(
    State(h): State<Handle>,
    headers: HeaderMap,
    q: Result<Query<ListParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    h.client(&headers)?;
    let Query(q) = q?;
    let state = match &q.state {
        Some(s) => Some(Listed::parse(s).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "state '{s}' is not one of queued, running, succeeded, failed, cancelled"
            ))
        })?),
        None => None,
    };
    let after = match &q.after {
        Some(a) => Some(
            a.parse::<u64>()
                .map_err(|_| ApiError::BadRequest(format!("after '{a}' is not a cursor")))?,
        ),
        None => None,
    };
    let limit = q.limit.unwrap_or(1000);
    if limit == 0 || limit > 10_000 {
        return Err(ApiError::BadRequest(
            "limit must be between 1 and 10000".into(),
        ));
    }
    let (views, next) = h
        .ask(|tx| {
            SchedulerQuery::List(
                ListQuery {
                    state,
                    after,
                    limit,
                },
                tx,
            )
        })
        .await?;
    let views = h.with_outcomes(views).await?;
    Ok(Json(answers::TaskPage {
        tasks: views,
        next: next.map(|n| n.to_string()),
    })
    .into_response())
}

/// At most this many ids in one `POST /v1/states`, as in a page of the listing.
const MAX_STATES: usize = 10_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StatesBody {
    ids: Vec<String>,
    /// Wait up to this many seconds (at most [`MAX_STATES_WAIT`]) for one of them to end.
    #[serde(default)]
    wait_s: Option<f64>,
}

/// The longest `POST /v1/states` waits for a task to end.
const MAX_STATES_WAIT: f64 = 60.0;

/// `POST /v1/states` with `{"ids": [...]}`: the tasks named, as the listing shows them, in one
/// request, however many other tasks the dispatcher holds (a workflow engine's status poll).
/// With `"wait_s": S`, the answer waits until one of them has ended (or S seconds): a client
/// following its tasks hears of each end at once, without polling.
async fn states(
    State(h): State<Handle>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    h.client(&headers)?;
    let body: StatesBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!("body: {e} (expected {{\"ids\": [\"ID\", ...]}})"))
    })?;
    if body.ids.len() > MAX_STATES {
        return Err(ApiError::BadRequest(format!(
            "{} ids: at most {MAX_STATES} in one request",
            body.ids.len()
        )));
    }
    let deadline = body
        .wait_s
        .filter(|w| w.is_finite() && *w > 0.0)
        .map(|w| tokio::time::Instant::now() + Duration::from_secs_f64(w.min(MAX_STATES_WAIT)));
    let mut ended = h.ended.clone();
    let (views, unknown) = loop {
        ended.borrow_and_update();
        let ids = body.ids.clone();
        let (views, unknown) = h.ask(|tx| SchedulerQuery::Tasks(ids, tx)).await?;
        let Some(deadline) = deadline else {
            break (views, unknown);
        };
        let over = views
            .iter()
            .any(|v| matches!(v.state.as_str(), "succeeded" | "failed" | "cancelled"));
        if over || !unknown.is_empty() || tokio::time::Instant::now() >= deadline {
            break (views, unknown);
        }
        tokio::select! {
            changed = ended.changed() => if changed.is_err() { break (views, unknown) },
            () = tokio::time::sleep_until(deadline) => {}
        }
    };
    let tasks = h.with_outcomes(views).await?;
    Ok(Json(answers::TaskStates { tasks, unknown }).into_response())
}

async fn task(
    State(h): State<Handle>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    h.client(&headers)?;
    match h.ask(|tx| SchedulerQuery::Task(id.clone(), tx)).await? {
        Some(v) => {
            let mut v = h.with_outcomes(vec![v]).await?.remove(0);
            let attempts = h.attempt_results(&id).await?;
            v.attempts = Some(
                attempts
                    .into_iter()
                    .map(|(attempt, node, report)| scheduler::AttemptView {
                        attempt,
                        node,
                        report: report.and_then(|r| {
                            serde_json::from_str(&crate::proto::full_report_json(&r)).ok()
                        }),
                    })
                    .collect(),
            );
            Ok(Json(v).into_response())
        }
        None => Err(ApiError::NotFound(format!("unknown task '{id}'"))),
    }
}

async fn cancel(
    State(h): State<Handle>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    h.client(&headers)?;
    match h.ask(|tx| SchedulerMsg::Cancel(id, tx)).await? {
        Ok(result) => Ok(Json(answers::CancelAnswer { result }).into_response()),
        Err(e) if e.starts_with("unknown") => Err(ApiError::NotFound(e)),
        Err(e) => Err(ApiError::Conflict(e)),
    }
}

async fn batch(
    State(h): State<Handle>,
    headers: HeaderMap,
    Path(b): Path<String>,
) -> Result<Json<BatchView>, ApiError> {
    h.client(&headers)?;
    let n = b
        .parse::<u64>()
        .map_err(|_| ApiError::BadRequest(format!("'{b}' is not a batch number")))?;
    h.ask(|tx| SchedulerQuery::Batch(n, tx))
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("unknown batch {n}")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LogParams {
    attempt: Option<u32>,
    stream: Option<String>,
}

/// An attempt's captured stdout or stderr, fetched from the worker that ran it.
async fn logs(
    State(h): State<Handle>,
    headers: HeaderMap,
    Path(id): Path<String>,
    q: Result<Query<LogParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    h.client(&headers)?;
    let Query(q) = q?;
    let stream = q.stream.unwrap_or_else(|| "stdout".into());
    if stream != "stdout" && stream != "stderr" {
        return Err(ApiError::BadRequest(format!(
            "stream '{stream}' is not stdout or stderr"
        )));
    }
    let attempts = h.attempt_results(&id).await?;
    if attempts.is_empty() {
        return Err(ApiError::NotFound(format!(
            "task '{id}' is unknown or has not run yet"
        )));
    }
    let (attempt, node) = match q.attempt {
        Some(n) => attempts
            .iter()
            .find(|(a, _, _)| *a == n)
            .map(|(a, n, _)| (*a, n.clone()))
            .ok_or_else(|| {
                ApiError::NotFound(format!(
                    "task '{id}' has no attempt {n} (it has {})",
                    attempts.len()
                ))
            })?,
        None => {
            let (a, n, _) = attempts.last().expect("not empty");
            (*a, n.clone())
        }
    };
    let peer = h
        .ask(|tx| SchedulerQuery::PeerOf(node.clone(), tx))
        .await?
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "the output of attempt {attempt} of '{id}' is on worker {node}, which is not connected"
            ))
        })?;
    let url = format!(
        "{peer}/v1/logs/{}",
        crate::worker::log_name(&id, attempt, &stream)
    );
    let resp = h
        .http
        .get(url)
        .bearer_auth(&h.tokens.worker)
        .send()
        .await
        .map_err(|e| {
            ApiError::Internal(format!(
                "worker {node} at {peer}: {}",
                crate::tls::describe(&e)
            ))
        })?;
    if resp.status() == reqwest::StatusCode::NOT_FOUND {
        return Err(ApiError::NotFound(format!(
            "attempt {attempt} of '{id}' printed nothing on {stream} (or worker {node} no longer keeps it)"
        )));
    }
    if !resp.status().is_success() {
        return Err(ApiError::Internal(format!(
            "worker {node}: status {}",
            resp.status()
        )));
    }
    Ok((
        [("content-type", "text/plain; charset=utf-8")],
        axum::body::Body::from_stream(resp.bytes_stream()),
    )
        .into_response())
}
