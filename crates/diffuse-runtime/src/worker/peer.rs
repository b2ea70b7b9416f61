//! The peer data server: `GET /v1/cache/{key}` serves a cached object to holders of the worker
//! token, with its checksum and source version in the response headers.

use super::Ctx;
use axum::extract::{Path as AxPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use tower::ServiceExt;

/// `GET /v1/cache/{key}`: a cached object, to holders of the worker token only.
pub(super) async fn serve_object(
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

/// `GET /v1/logs/{name}`: a captured stdout or stderr file, to holders of the worker token (the
/// dispatcher fetches it for `diffuse logs`). Names are the worker's own: `[A-Za-z0-9._-]` only.
pub(super) async fn serve_log(
    State(ctx): State<Arc<Ctx>>,
    AxPath(name): AxPath<String>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    if !crate::auth::authorized(&headers, &ctx.token) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        && (name.ends_with(".stdout") || name.ends_with(".stderr"));
    if !ok {
        return StatusCode::BAD_REQUEST.into_response();
    }
    let path = ctx.logs.join(&name);
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_file() => {}
        _ => return StatusCode::NOT_FOUND.into_response(),
    }
    match tower_http::services::ServeFile::new(path)
        .oneshot(req)
        .await
    {
        Ok(resp) => resp.into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}
