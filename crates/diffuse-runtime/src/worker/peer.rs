//! The peer data server: `GET /v1/cache/{key}` serves a cached object to holders of the worker
//! token, with its checksum and source version in the response headers (a `Range` request gets
//! that part of it: chunks of a multi-source fetch; an object still being read here serves the
//! chunks that have landed, see `relay`). A copy a reader found bad is hashed again
//! and dropped if it is (`verify`).

use super::config::WorkerConfig;
use super::ctx::Ctx;
use super::error::WorkerError;
use axum::extract::{Path as AxPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use tower::ServiceExt;

/// The peer data server, running.
pub(super) struct PeerServer {
    /// The address it listens at.
    pub(super) bound: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl PeerServer {
    /// Listen at `--listen` and serve the cache and the captured output of `ctx`, with TCP_NODELAY
    /// (a reader asks for the next chunk only when the last one is in) and TLS if configured.
    pub(super) async fn start(
        cfg: &WorkerConfig,
        ctx: &Arc<Ctx>,
    ) -> Result<PeerServer, WorkerError> {
        let listen = |source| WorkerError::Listen {
            addr: cfg.listen,
            source,
        };
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .map_err(listen)?;
        let bound = listener.local_addr().map_err(listen)?;
        let router = axum::Router::new()
            .route("/v1/cache/{key}", axum::routing::get(serve_object))
            .route("/v1/logs/{name}", axum::routing::get(serve_log))
            .with_state(ctx.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let limits = crate::server::Limits {
            nodelay: true,
            ..cfg.limits.clone()
        };
        let task = tokio::spawn(crate::server::serve(
            listener,
            router,
            limits,
            cfg.tls.clone(),
            async {
                let _ = stopped.await;
            },
        ));
        Ok(PeerServer { bound, stop, task })
    }

    /// Stop serving, and wait until it has.
    pub(super) async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
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
        // Not cached here; perhaps being read, with some chunks landed.
        return super::relay::serve(&ctx.relays, &key, &headers).await;
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
async fn serve_log(
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

/// Hash each held object in `uris` again (off the worker's thread) and drop the ones that do
/// not match the digest recorded when they were cached: a reader found a bad copy here.
pub(super) async fn verify(ctx: Arc<Ctx>, uris: Vec<String>) {
    for uri in uris {
        let key = crate::cache_dir::CacheDir::key(&uri);
        let Some((path, meta)) = ctx.cache.lock().expect("cache lock").path_for_key(&key) else {
            continue;
        };
        let hashed =
            tokio::task::spawn_blocking(move || crate::cache_dir::sha256_file(&path)).await;
        let good = match hashed {
            Ok(Ok((size, sha))) => size == meta.size && sha == meta.sha256,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => false,
            _ => continue,
        };
        let redacted = crate::uri::redacted(&uri);
        if good {
            tracing::info!(uri = %redacted, "a reader reported a bad copy; it verifies: kept");
            continue;
        }
        {
            let mut cache = ctx.cache.lock().expect("cache lock");
            // Dropped only if it is still the copy that was hashed.
            if cache
                .path_for_key(&key)
                .is_some_and(|(_, now)| now.sha256 == meta.sha256)
            {
                cache.remove(&uri);
            }
        }
        tracing::warn!(uri = %redacted, "the cached copy does not match its digest: dropped");
        ctx.report_evictions();
    }
}
