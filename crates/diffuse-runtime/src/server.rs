//! Serving HTTP with limits, for the dispatcher's API and the workers' peer data servers.
//!
//! `axum::serve` never closes an idle connection and accepts as many as the process has file
//! descriptors: a few thousand idle unauthenticated connections lock every client out. Here
//! every connection has
//!
//! * a **header timeout**: a request's head must arrive within it, and an idle keep-alive
//!   connection is closed after it (hyper starts the timer whenever it waits for a head);
//! * a **body timeout**: a request body must arrive within it;
//! * a place under a **connection limit**: past it, a new connection is closed at once, so the
//!   process keeps file descriptors for its journal, its cache and the connections it has. A
//!   WebSocket session, once upgraded (after its token was checked), no longer counts.
//!
//! [`raise_open_files_limit`] lifts the soft `RLIMIT_NOFILE` to the hard limit at start-up; the
//! default connection limit is derived from it ([`default_max_connections`]).

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// Limits of one server.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Most connections open at once.
    pub max_connections: usize,
    /// A request's head (and, between requests, the next one) must arrive within this.
    pub header_timeout: Duration,
    /// A request's body must arrive within this.
    pub body_timeout: Duration,
}

impl Limits {
    /// The defaults: 10 s for a head, 120 s for a body, [`default_max_connections`].
    pub fn standard() -> Limits {
        Limits {
            max_connections: default_max_connections(),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(120),
        }
    }
}

/// Raise the soft limit on open files to the hard limit; returns the soft limit now in force.
pub fn raise_open_files_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::warn!("cannot raise the open-files limit: {e}");
        }
    }
    getrlimit(Resource::Nofile).current.unwrap_or(1 << 20)
}

/// The soft open-files limit less 256 for everything else (journal, cache, processes), at least
/// 32 and at most 16,384.
pub fn default_max_connections() -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(1 << 20);
    (soft.saturating_sub(256) as usize).clamp(32, 16_384)
}

/// Serve `router` on `listener` under `limits` until `shutdown` resolves; then stop accepting,
/// let open requests finish for up to 5 s, and return.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let service = tower::ServiceBuilder::new()
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            limits.body_timeout,
        ))
        .service(router);
    let places = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut last_warning: Option<Instant> = None;
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors (or a connection reset before it was taken):
                    // wait a moment instead of spinning.
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(place) = places.clone().try_acquire_owned() else {
            if last_warning.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                tracing::warn!(
                    "{} connections open (the limit): closing new ones, such as from {peer}",
                    limits.max_connections
                );
                last_warning = Some(Instant::now());
            }
            drop(stream);
            continue;
        };
        // Nagle's algorithm stays on: a worker's session carries many small messages, and
        // sending each at once (TCP_NODELAY) cost 9% of `true` tasks per second
        // (bench/true_vs_xargs.sh).
        let service = service.clone();
        let watcher = graceful.watcher();
        let limits = limits.clone();
        tokio::spawn(async move {
            // hyper's header timeout starts at the first byte: a connection that never sends
            // one is closed here.
            let mut first = [0u8; 1];
            match tokio::time::timeout(limits.header_timeout, stream.peek(&mut first)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
            // HTTP/1.1 only: the automatic HTTP/2 detection reads the connection's first bytes
            // with no timeout of its own.
            let mut builder = Builder::new(TokioExecutor::new()).http1_only();
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout);
            let conn = builder.serve_connection_with_upgrades(
                TokioIo::new(stream),
                TowerToHyperService::new(service),
            );
            let _ = watcher.watch(conn.into_owned()).await;
            drop(place);
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(Duration::from_secs(5), graceful.shutdown()).await;
    Ok(())
}
