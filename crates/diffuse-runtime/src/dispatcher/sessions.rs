//! Workers' sessions: `GET /v1/workers/connect` upgrades to a WebSocket, the worker's hello is
//! checked (its token, its protocol version) and handed to the scheduler thread, and the
//! session carries messages both ways until either side closes it.

use super::handle::{ApiError, Handle};
use super::scheduler::SchedulerMsg;
use crate::proto::{ToDispatcher, ToWorker};
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use futures_util::{SinkExt, StreamExt};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The worker session route.
pub fn routes() -> Router<Handle> {
    Router::new().route("/v1/workers/connect", get(connect))
}

async fn connect(
    State(h): State<Handle>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    h.worker(&headers)?;
    Ok(ws
        .max_message_size(64 << 20)
        .read_buffer_size(crate::proto::SESSION_BUFFER)
        .write_buffer_size(crate::proto::SESSION_BUFFER)
        .on_upgrade(move |socket| session(socket, h)))
}

/// End a worker's session before it began, with a close frame whose reason says why (a
/// policy violation, 1008): the worker shows it and does not connect again.
async fn refuse(mut sink: futures_util::stream::SplitSink<WebSocket, Message>, why: String) {
    use axum::extract::ws::CloseFrame;
    let mut reason = why;
    // WebSocket allows 123 bytes of reason.
    while reason.len() > 123 {
        reason.pop();
    }
    let frame = CloseFrame {
        code: axum::extract::ws::close_code::POLICY,
        reason: reason.into(),
    };
    let _ = sink.send(Message::Close(Some(frame))).await;
}

/// One worker's WebSocket: hello first, then messages both ways until either side closes.
async fn session(socket: WebSocket, h: Handle) {
    let conn = h.conns.fetch_add(1, Ordering::Relaxed);
    let (mut sink, mut stream) = socket.split();
    let hello = match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
        Ok(Some(Ok(Message::Text(t)))) => match serde_json::from_str::<ToDispatcher>(&t) {
            Ok(m @ ToDispatcher::Hello { .. }) => m,
            Ok(other) => return refuse(sink, format!("expected a hello, got {other:?}")).await,
            Err(e) => {
                return refuse(sink, format!("a hello this dispatcher cannot read: {e}")).await
            }
        },
        _ => return,
    };
    if let ToDispatcher::Hello { protocol, name, .. } = &hello {
        if *protocol != crate::proto::PROTOCOL {
            let why = crate::proto::protocol_refusal(*protocol);
            tracing::warn!(worker = %name, "{why}");
            return refuse(sink, why).await;
        }
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<ToWorker>();
    if h.tx
        .send(SchedulerMsg::WorkerUp {
            conn,
            hello,
            link: tx,
        })
        .is_err()
    {
        return;
    }
    let writer = tokio::spawn(async move {
        // Everything already queued goes out in one write: a round of the scheduler often
        // sends one worker several messages.
        'session: while let Some(m) = rx.recv().await {
            let mut next = Some(m);
            while let Some(m) = next.take() {
                let text = serde_json::to_string(&m).expect("message serializes");
                if sink.feed(Message::Text(text.into())).await.is_err() {
                    break 'session;
                }
                next = rx.try_recv().ok();
            }
            if sink.flush().await.is_err() {
                break;
            }
        }
        let _ = sink.close().await;
    });
    while let Some(Ok(msg)) = stream.next().await {
        let Message::Text(t) = msg else { continue };
        match crate::proto::read_to_dispatcher(&t) {
            Ok(m) => {
                if h.tx.send(SchedulerMsg::FromWorker(conn, m)).is_err() {
                    break;
                }
            }
            Err(e) => tracing::warn!("malformed message from worker: {e}"),
        }
    }
    let _ = h.tx.send(SchedulerMsg::WorkerDown(conn));
    writer.abort();
}
