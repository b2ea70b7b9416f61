//! The web dashboard: a page at `/` that draws the paper's live figures (demand and
//! throughput by source, tasks waiting and running, workers and busy slots, hits and misses
//! over time), the workers with their cache fill, the last failures, and a task search.
//!
//! The page and its script are compiled into the binary, with uPlot 1.6.32 (MIT,
//! `dashboard/LICENSE-uplot`) for the charts: no CDN, so it works on a cluster without internet.
//! The page itself holds no data and needs no token; its script asks `GET /v1/series` and
//! `GET /v1/status` with the token in an `Authorization` header, taken from the page's
//! `#token=` fragment (which never leaves the browser) or typed in, and kept in the tab's
//! session storage. A token never appears in a URL the server sees, so never in a log.

use super::handle::{ApiError, Handle};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;

const INDEX: &str = include_str!("dashboard/index.html");
const APP: &str = include_str!("dashboard/app.js");
const UPLOT_JS: &str = include_str!("dashboard/uplot.iife.min.js");
const UPLOT_CSS: &str = include_str!("dashboard/uplot.min.css");
const UPLOT_LICENSE: &str = include_str!("dashboard/LICENSE-uplot");

/// Only this origin's scripts and styles (uPlot sets styles on its elements); no framing.
const CSP: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
                   frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// The dashboard's routes.
pub fn routes() -> Router<Handle> {
    Router::new()
        .route("/", get(index))
        .route("/dashboard/{file}", get(asset))
        .route("/v1/series", get(series))
}

async fn index() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        INDEX,
    )
        .into_response()
}

async fn asset(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "app.js" => (APP, "text/javascript; charset=utf-8"),
        "uplot.iife.min.js" => (UPLOT_JS, "text/javascript; charset=utf-8"),
        "uplot.min.css" => (UPLOT_CSS, "text/css; charset=utf-8"),
        "LICENSE-uplot" => (UPLOT_LICENSE, "text/plain; charset=utf-8"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SeriesParams {
    #[serde(default)]
    since: u64,
}

/// `GET /v1/series?since=N`: the samples after number N (the last hour at most).
async fn series(
    State(h): State<Handle>,
    headers: HeaderMap,
    q: Result<Query<SeriesParams>, QueryRejection>,
) -> Result<Json<Vec<super::scheduler::series::Point>>, ApiError> {
    h.reader_token(&headers)?;
    let Query(q) = q?;
    Ok(Json(
        h.ask(|tx| super::scheduler::SchedulerQuery::Series(q.since, tx))
            .await?,
    ))
}
