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
    let (mut ws, _) = tokio_tungstenite::connect_async_tls_with_config(
        request,
        Some(crate::proto::ws_config()),
        false,
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
    let local_ip = match ws.get_ref() {
        tokio_tungstenite::MaybeTlsStream::Plain(tcp) => tcp.local_addr().ok().map(|a| a.ip()),
        tokio_tungstenite::MaybeTlsStream::Rustls(tls) => {
            tls.get_ref().0.local_addr().ok().map(|a| a.ip())
        }
        _ => None,
    };
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
    let heartbeat = match ws.next().await {
        Some(Ok(Message::Text(t))) => match serde_json::from_str::<ToWorker>(&t) {
            Ok(ToWorker::Welcome { heartbeat_ms, .. }) => {
                Duration::from_millis(heartbeat_ms.max(50))
            }
            other => {
                return Err(refused(format!(
                    "expected welcome from the dispatcher, got {other:?}"
                )))
            }
        },
        other => {
            return Err(lost(format!(
                "the dispatcher closed the connection: {other:?}"
            )))
        }
    };
    tracing::info!(worker = %cfg.name, "connected to {}", cfg.dispatcher);
    Ok((ws, heartbeat))
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
