//! Connecting to the dispatcher: the WebSocket (over TLS for `https://`), the hello with
//! everything the cache holds, and the welcome; and the URL peers reach this worker at.

use super::config::WorkerConfig;
use super::ctx::Ctx;
use crate::cache_dir::CacheDir;
use crate::proto::{Held, ToDispatcher, ToWorker};
use axum::http::HeaderValue;
use futures_util::{SinkExt, StreamExt};
use std::sync::Arc;
use std::time::Duration;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

/// The connection to the dispatcher.
pub(super) type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Why a connection could not be made.
pub(super) enum Connect {
    /// The dispatcher answered and refused (bad token, not a dispatcher): do not retry.
    Refused(String),
    /// It could not be reached, or went away during the handshake: retry.
    Unreachable(String),
}

/// Connect (over TLS with `tls` when the URL is `https://`), say hello with everything the
/// cache holds now, and wait for the welcome. A TLS failure (an untrusted certificate, a
/// dispatcher that does not speak TLS) and a refusal are not retried.
pub(super) async fn connect(
    cfg: &WorkerConfig,
    ctx: &Ctx,
    bound: std::net::SocketAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> Result<(Ws, Duration), Connect> {
    use tokio_tungstenite::tungstenite::Error as WsError;
    let refused = |e: String| Connect::Refused(e);
    let ws_url = format!(
        "{}/v1/workers/connect",
        cfg.dispatcher.replacen("http", "ws", 1)
    );
    let mut request = ws_url
        .as_str()
        .into_client_request()
        .map_err(|e| refused(e.to_string()))?;
    let auth = HeaderValue::from_str(&format!("Bearer {}", cfg.token))
        .map_err(|e| refused(e.to_string()))?;
    request.headers_mut().insert("authorization", auth);
    let connector = tls.map(tokio_tungstenite::Connector::Rustls);
    let unreachable = |why: String| {
        Connect::Unreachable(format!(
            "cannot connect to the dispatcher at {}: {why}",
            cfg.dispatcher
        ))
    };
    let (host, port) = host_and_port(request.uri()).map_err(refused)?;
    // A host cut off answers no SYN: without a bound, one try would last the kernel's SYN
    // retries (about 2 minutes) and miss the network coming back.
    let tcp = tokio::time::timeout(CUT_OFF_AFTER, tokio::net::TcpStream::connect((host, port)))
        .await
        .map_err(|_| unreachable(format!("no answer in {CUT_OFF_AFTER:?}")))?
        .map_err(|e| unreachable(e.to_string()))?;
    give_up_unacknowledged(&tcp, CUT_OFF_AFTER);
    // Each message goes at once (no Nagle): a task held ready says `Started`, to which the
    // dispatcher answers nothing, so with Nagle the next report (the task's end, a few ms
    // later) waited for the dispatcher's delayed ACK: 40 ms per short task.
    let _ = tcp.set_nodelay(true);
    let (mut ws, _) = tokio_tungstenite::client_async_tls_with_config(
        request,
        tcp,
        Some(crate::proto::ws_config()),
        connector,
    )
    .await
    .map_err(|e| {
        let why = match &e {
            // The dispatcher's answer says why (a TLS port asked in plain HTTP says so).
            WsError::Http(resp) => {
                let body = resp
                    .body()
                    .as_deref()
                    .map(String::from_utf8_lossy)
                    .unwrap_or_default();
                let body: String = body.trim().chars().take(300).collect();
                format!("{e} {body}")
            }
            _ => crate::tls::describe(&e),
        };
        let text = format!(
            "cannot connect to the dispatcher at {}: {why}",
            cfg.dispatcher
        );
        let tls_failed = crate::tls::tls_failure(&e).is_some();
        match e {
            WsError::Http(_) | WsError::Url(_) | WsError::HttpFormat(_) | WsError::Tls(_) => {
                refused(text)
            }
            _ if tls_failed => refused(text),
            _ => Connect::Unreachable(text),
        }
    })?;
    let local_ip = tcp_of(&ws).and_then(|tcp| tcp.local_addr().ok().map(|a| a.ip()));
    let peer_url = peer_url(cfg.advertise.as_deref(), bound, local_ip, cfg.tls.is_some());
    let held = {
        let cache = ctx.cache.lock().expect("cache lock");
        cache
            .uris()
            .into_iter()
            .filter_map(|uri| {
                cache.path_for_key(&CacheDir::key(&uri)).map(|(_, m)| Held {
                    uri,
                    version: m.version,
                })
            })
            .collect()
    };
    let hello = ToDispatcher::Hello {
        protocol: crate::proto::PROTOCOL,
        name: cfg.name.clone(),
        slots: cfg.slots,
        memory: cfg.memory,
        gpus: cfg.gpus.len() as u32,
        disk: cfg.disk,
        cache_quota: cfg.cache_size,
        peer_url,
        held,
        request: cfg.request.clone(),
        eviction: Some(cfg.eviction),
        rack: cfg.rack.clone(),
        leaves_in_s: cfg.leave_at.map(|t| {
            t.saturating_duration_since(std::time::Instant::now())
                .as_secs_f64()
        }),
    };
    let lost = |e: String| Connect::Unreachable(e);
    let text = serde_json::to_string(&hello).expect("hello serializes");
    ws.send(Message::Text(text.into()))
        .await
        .map_err(|e| lost(e.to_string()))?;
    let heartbeat = welcome(&mut ws, &cfg.dispatcher).await?;
    tracing::info!(worker = %cfg.name, "connected to {}", cfg.dispatcher);
    Ok((ws, heartbeat))
}

/// The dispatcher's answer to the hello: the heartbeat period it asks for, once it has
/// welcomed this worker in the same protocol version (and told the timeout, which bounds how
/// long what the worker sends may stay unacknowledged). A refusal, a welcome of another
/// version or anything else is [`Connect::Refused`]; a closed connection is worth retrying.
async fn welcome(ws: &mut Ws, dispatcher: &str) -> Result<Duration, Connect> {
    let refused = |e: String| Connect::Refused(e);
    let lost = |e: String| Connect::Unreachable(e);
    match ws.next().await {
        Some(Ok(Message::Text(t))) => match serde_json::from_str::<ToWorker>(&t) {
            Ok(ToWorker::Welcome { protocol, .. }) if protocol != crate::proto::PROTOCOL => {
                Err(refused(format!(
                    "the dispatcher at {} speaks protocol {protocol}, this worker {} (diffuse {}): \
                     run the same version of diffuse on the dispatcher and its workers",
                    dispatcher,
                    crate::proto::PROTOCOL,
                    env!("CARGO_PKG_VERSION")
                )))
            }
            Ok(ToWorker::Welcome {
                heartbeat_ms,
                heartbeat_timeout_ms,
                ..
            }) => {
                if let (Some(ms), Some(tcp)) = (heartbeat_timeout_ms, tcp_of(ws)) {
                    give_up_unacknowledged(tcp, Duration::from_millis(ms.max(1000)));
                }
                Ok(Duration::from_millis(heartbeat_ms.max(50)))
            }
            other => Err(refused(format!(
                "expected welcome from the dispatcher, got {other:?}"
            ))),
        },
        // The dispatcher refused this worker and said why (another protocol version).
        Some(Ok(Message::Close(Some(frame)))) if frame.code == CloseCode::Policy => {
            Err(refused(format!(
                "the dispatcher at {} refused this worker: {}",
                dispatcher, frame.reason
            )))
        }
        other => Err(lost(format!(
            "the dispatcher closed the connection: {other:?}"
        ))),
    }
}

/// How long connecting to the dispatcher's host may take; and how long what a worker sends may
/// stay unacknowledged before it gives the connection up, until the dispatcher's welcome tells
/// its heartbeat timeout (10 s is the dispatcher's default).
const CUT_OFF_AFTER: Duration = Duration::from_secs(10);

/// The host and port a `ws://` or `wss://` URL names.
fn host_and_port(uri: &axum::http::Uri) -> Result<(&str, u16), String> {
    let host = uri
        .host()
        .ok_or_else(|| format!("no host in the dispatcher URL {uri}"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("wss") {
            443
        } else {
            80
        });
    Ok((host, port))
}

/// The TCP connection under the WebSocket.
fn tcp_of(ws: &Ws) -> Option<&tokio::net::TcpStream> {
    match ws.get_ref() {
        tokio_tungstenite::MaybeTlsStream::Plain(tcp) => Some(tcp),
        tokio_tungstenite::MaybeTlsStream::Rustls(tls) => Some(tls.get_ref().0),
        _ => None,
    }
}

/// End the connection when what was sent on it stays unacknowledged for `after`
/// (`TCP_USER_TIMEOUT`). A worker sends a heartbeat every half second, so on a silent network
/// cut (packets dropped, nothing refused) its connection ends about when the dispatcher gives
/// it up: it stops its tasks, whose attempts are being run again elsewhere, and connects again.
/// Without it the connection would wait out TCP's retries, backed off to minutes: the worker
/// ran its given-up tasks to their end, and rejoined only when a retry happened to cross the
/// healed network (2.6 to 23.6 s after a 30 s cut healed, tests/faults_slurm_net.rs).
fn give_up_unacknowledged(tcp: &tokio::net::TcpStream, after: Duration) {
    if let Err(e) = socket2::SockRef::from(tcp).set_tcp_user_timeout(Some(after)) {
        tracing::debug!("TCP_USER_TIMEOUT on the dispatcher's connection: {e}");
    }
}

/// The URL peers fetch this worker's cache at: `advertise` if given; else the address the peer
/// server is bound to, or, if that is a wildcard, the local address of the connection to the
/// dispatcher (the address on the route other hosts use to reach this one). `https://` when
/// the peer server serves TLS.
fn peer_url(
    advertise: Option<&str>,
    bound: std::net::SocketAddr,
    local_ip: Option<std::net::IpAddr>,
    tls: bool,
) -> String {
    let host = match (advertise, bound.ip().is_unspecified(), local_ip) {
        (Some(h), _, _) => h.to_string(),
        (None, true, Some(ip)) => ip.to_string(),
        (None, _, _) => bound.ip().to_string(),
    };
    let host = match host.parse::<std::net::Ipv6Addr>() {
        Ok(v6) => format!("[{v6}]"),
        Err(_) => host,
    };
    let scheme = if tls { "https" } else { "http" };
    format!("{scheme}://{host}:{}", bound.port())
}
