//! The staging API (`diffuse stage`): `POST /v1/stage` accepts a batch of objects to copy to
//! workers and answers its number; `GET /v1/stage/{id}` shows its progress
//! ([`super::scheduler::batches`]).

use super::handle::{ApiError, Handle};
use super::scheduler::batches::StageAsk;
use super::scheduler::{SchedulerMsg, SchedulerQuery};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

/// The staging routes.
pub fn routes() -> Router<Handle> {
    Router::new()
        .route("/v1/stage", post(stage))
        .route("/v1/stage/{id}", get(progress))
}

/// `POST /v1/stage` with `{"uris": [...], "to": [names] (empty: every worker), "schedule":
/// "naive"|"lds"|"gds"}`: `202 {"id": N}`.
async fn stage(
    State(h): State<Handle>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    h.client(&headers)?;
    let mut ask: StageAsk = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!(
            "body: {e} (expected {{\"uris\": [...], \"to\": [...], \"schedule\": \"gds\"}})"
        ))
    })?;
    ask.uris = ask
        .uris
        .iter()
        .map(|u| crate::uri::canonical(u).map_err(ApiError::BadRequest))
        .collect::<Result<_, _>>()?;
    match h.ask(|tx| SchedulerMsg::Stage(ask, tx)).await? {
        Ok(id) => Ok((
            StatusCode::ACCEPTED,
            Json(super::answers::StageStarted { id }),
        )
            .into_response()),
        Err(m) => Err(ApiError::BadRequest(m)),
    }
}

/// `GET /v1/stage/{id}`: the batch's progress.
async fn progress(
    State(h): State<Handle>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    q: Result<Query<super::handle::NoParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    h.client(&headers)?;
    q?;
    match h.ask(|tx| SchedulerQuery::StageView(id, tx)).await? {
        Some(v) => Ok(Json(v).into_response()),
        None => Err(ApiError::NotFound(format!("no staged batch {id}"))),
    }
}
