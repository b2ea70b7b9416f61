//! Serving HTTP with limits, for the dispatcher's API and the workers' peer data servers.
//!
//! `axum::serve` never closes an idle connection and accepts as many as the process has file
//! descriptors: a few thousand idle unauthenticated connections lock every client out. Here
//! every connection has
//!
//! * a **header timeout**: a request's head must arrive within it, and an idle keep-alive
//!   connection is closed after it (hyper starts the timer whenever it waits for a head);
//! * a **body timeout**: a request body must arrive within it;
//! * a place under a **connection limit**, so the process keeps file descriptors for its
//!   journal, its cache and the connections it has. When no place is free, the oldest connection
//!   that has not shown a valid token and is idle (or whose request showed none) gives way to the
//!   new one; only when every place is held by a proven or busy connection is the new one closed
//!   at once ([`places`]: a router marks a connection with [`Connection::prove`] and
//!   [`Connection::showed_no_token`]). A WebSocket session, once upgraded (after its token was
//!   checked), no longer counts.
//!
//! With TLS ([`crate::tls::server_config`]) each connection is wrapped in a rustls session; the
//! handshake, like the first byte, must be done within the header timeout, so a stalled
//! handshake cannot hold a place. A plain-HTTP request on a TLS port is answered `400` with a
//! JSON error saying to use `https://`, and closed: nothing is served in clear.
//!
//! [`raise_open_files_limit`] lifts the soft `RLIMIT_NOFILE` to the hard limit at start-up; the
//! default connection limit is derived from it ([`default_max_connections`]).

mod places;

pub use places::{Connection, ConnectionStats};

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
    /// Send every write at once (TCP_NODELAY): for a server of bulk responses read one after
    /// another (a worker's peer data), where Nagle's algorithm holds each response's last
    /// segment until what is in flight is acknowledged.
    pub nodelay: bool,
}

impl Limits {
    /// The defaults: 10 s for a head, 120 s for a body, [`default_max_connections`].
    pub fn standard() -> Limits {
        Limits {
            max_connections: default_max_connections(),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(120),
            nodelay: false,
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

/// The first byte of a TLS connection: a handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// Serve `router` on `listener` under `limits`, over TLS if `tls` is given, until `shutdown`
/// resolves; then stop accepting, let open requests finish for up to 5 s, and return.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: Limits,
    tls: Option<crate::tls::ServerTls>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let stats = Arc::new(ConnectionStats::default());
    serve_with(listener, router, limits, tls, stats, shutdown).await
}

/// [`serve`], counting evicted and refused connections in `stats`.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: Limits,
    tls: Option<crate::tls::ServerTls>,
    stats: Arc<ConnectionStats>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let service = tower::ServiceBuilder::new()
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            limits.body_timeout,
        ))
        .service(router);
    let places = Arc::new(Semaphore::new(limits.max_connections));
    let registry = places::Registry::default();
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut last_warning: Option<Instant> = None;
    let mut last_eviction_log: Option<Instant> = None;
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
        let place = match places.clone().try_acquire_owned() {
            Ok(place) => Some(place),
            Err(_) => match registry.evict_oldest() {
                Some(victim) => {
                    let n = stats.count_eviction();
                    if last_eviction_log.is_none_or(|t| t.elapsed() > Duration::from_secs(1)) {
                        tracing::warn!(
                            "{} connections open (the limit): closed the oldest idle or \
                             tokenless one (from {victim}) for a new one from {peer}; {n} so far",
                            limits.max_connections
                        );
                        last_eviction_log = Some(Instant::now());
                    }
                    // The evicted connection's task drops its place as soon as it wakes.
                    tokio::time::timeout(Duration::from_secs(1), places.clone().acquire_owned())
                        .await
                        .ok()
                        .and_then(Result::ok)
                }
                None => None,
            },
        };
        let Some(place) = place else {
            stats.count_refusal();
            if last_warning.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                tracing::warn!(
                    "{} connections open (the limit), all of them authorised or busy: closing \
                     new ones, such as from {peer}",
                    limits.max_connections
                );
                last_warning = Some(Instant::now());
            }
            drop(stream);
            continue;
        };
        let (connection, registered) = registry.register(peer);
        // Nagle's algorithm stays on for the dispatcher: a worker's session carries many small
        // messages, and sending each at once (TCP_NODELAY) cost 9% of `true` tasks per second
        // (bench/true_vs_xargs.sh).
        if limits.nodelay {
            let _ = stream.set_nodelay(true);
        }
        let service = service.clone();
        let watcher = graceful.watcher();
        let limits = limits.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            // Dropped last: the connection's socket is closed before its place is given back.
            let _place = place;
            let _registered = registered;
            let service = Tracked {
                inner: service,
                connection: connection.clone(),
            };
            tokio::select! {
                () = connection.evicted() => {}
                () = serve_connection(stream, peer, service, watcher, limits, tls) => {}
            }
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(Duration::from_secs(5), graceful.shutdown()).await;
    Ok(())
}

/// The service of every connection: the router under the request body timeout.
type Inner = tower_http::timeout::RequestBodyTimeout<Router>;

/// The service of one connection: each request carries the [`Connection`] in its extensions
/// and is in flight, for the connection limit, until its response body is sent.
#[derive(Clone)]
struct Tracked {
    inner: Inner,
    connection: Connection,
}

impl<B> tower::Service<axum::http::Request<B>> for Tracked
where
    Inner: tower::Service<
        axum::http::Request<B>,
        Response = axum::http::Response<axum::body::Body>,
        Error = std::convert::Infallible,
    >,
    <Inner as tower::Service<axum::http::Request<B>>>::Future: Send + 'static,
{
    type Response = axum::http::Response<axum::body::Body>;
    type Error = std::convert::Infallible;
    type Future = futures_util::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        tower::Service::<axum::http::Request<B>>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, mut request: axum::http::Request<B>) -> Self::Future {
        let in_flight = self.connection.start_request();
        request.extensions_mut().insert(self.connection.clone());
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| {
                axum::body::Body::new(places::Guarded {
                    body,
                    _in_flight: in_flight,
                })
            }))
        })
    }
}

/// Serve one accepted connection until it ends.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    service: Tracked,
    watcher: hyper_util::server::graceful::Watcher,
    limits: Limits,
    tls: Option<crate::tls::ServerTls>,
) {
    // The first byte, and with TLS the whole handshake and the first byte of the request, must
    // come within the header timeout (hyper's version detection reads the first bytes with no
    // timeout). hyper's own header timeout then bounds each request head.
    let deadline = tokio::time::Instant::now() + limits.header_timeout;
    let mut first = [0u8; 1];
    match tokio::time::timeout_at(deadline, stream.peek(&mut first)).await {
        Ok(Ok(n)) if n > 0 => {}
        _ => return,
    }
    // HTTP/1.1 only: the automatic HTTP/2 detection reads the connection's first bytes with no
    // timeout of its own.
    let mut builder = Builder::new(TokioExecutor::new()).http1_only();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let service = TowerToHyperService::new(service);
    match tls {
        None => {
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            let _ = watcher.watch(conn.into_owned()).await;
        }
        Some(_) if first[0] != TLS_HANDSHAKE => refuse_plain(stream).await,
        Some(tls) => {
            let Some(stream) = accept_tls(stream, tls, deadline, peer).await else {
                return;
            };
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            let _ = watcher.watch(conn.into_owned()).await;
        }
    }
}

/// A TLS connection whose handshake and first byte of request arrived by `deadline`: hyper's
/// version detection reads the first bytes with no timeout of its own, so they are waited for
/// here (as `peek` does for plain connections), then handed back in front of the stream.
async fn accept_tls(
    stream: tokio::net::TcpStream,
    tls: crate::tls::ServerTls,
    deadline: tokio::time::Instant,
    peer: std::net::SocketAddr,
) -> Option<Rewound<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>> {
    use tokio::io::AsyncReadExt;
    let accept = tokio_rustls::TlsAcceptor::from(tls).accept(stream);
    let mut stream = match tokio::time::timeout_at(deadline, accept).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            // An untrusting client's alert, a scanner: not worth more than a debug line.
            tracing::debug!("TLS handshake with {peer} failed: {e}");
            return None;
        }
        Err(_) => return None,
    };
    let mut first = [0u8; 1];
    match tokio::time::timeout_at(deadline, stream.read(&mut first)).await {
        Ok(Ok(1)) => Some(Rewound {
            first: Some(first[0]),
            inner: stream,
        }),
        _ => None,
    }
}

/// A stream with the byte already read from it put back in front.
struct Rewound<S> {
    first: Option<u8>,
    inner: S,
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Rewound<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if buf.remaining() > 0 {
            if let Some(b) = self.first.take() {
                buf.put_slice(&[b]);
                return std::task::Poll::Ready(Ok(()));
            }
        }
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Rewound<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A plain-HTTP request on a TLS port: read its head (so the answer is not lost to a reset, and
/// to learn the host it asked for), answer `400` with a JSON error saying to use `https://`,
/// and close. Each step is bounded; nothing of the request is logged.
async fn refuse_plain(mut stream: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let step = Duration::from_secs(2);
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    let _ = tokio::time::timeout(step, async {
        while head.len() < 8192 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let url = match host_header(&head) {
        Some(host) => format!("https://{host}"),
        None => "https://".to_string(),
    };
    let body = serde_json::json!({
        "error": format!("this server takes TLS only (HTTPS): use {url}")
    })
    .to_string();
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(step, async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await?;
        // Drain what the client still sends until it closes, so the answer is not reset.
        while stream.read(&mut buf).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// The `Host` header of a request head, if it has a plausible one.
fn host_header(head: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(head).ok()?;
    text.lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("host")
                .then(|| value.trim())
        })
        .filter(|h| {
            !h.is_empty()
                && h.len() <= 255
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        })
        .map(String::from)
}

#[cfg(test)]
mod tests;
