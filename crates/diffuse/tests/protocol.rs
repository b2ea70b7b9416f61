//! The worker protocol's version (issue 40, item 2): a dispatcher refuses a worker of another
//! version with a close frame that says why, and a worker refuses a dispatcher of another
//! version and exits with that reason, instead of either misreading the other's messages.
//!
//! - a hello without `protocol` (every build before versions were sent) to a real dispatcher;
//! - a real `diffuse worker` against a stand-in that welcomes it as a dispatcher of protocol 1.

mod common;

use common::cluster::{diffuse_with, Cluster};
use std::net::TcpListener;
use std::time::Duration;
use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::Message;

#[test]
fn a_worker_of_an_older_protocol_is_refused_and_told_why() {
    let c = Cluster::start(&[]);
    let url = format!("{}/v1/workers/connect", c.url.replacen("http", "ws", 1));
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {}", c.worker_token).parse().unwrap(),
    );
    let (mut ws, _) = tungstenite::connect(request).expect("the WebSocket opens");
    // The hello of a build before protocol versions: no `protocol`.
    let hello = r#"{"type":"hello","name":"old","slots":1,"cache_quota":0,
        "peer_url":"http://127.0.0.1:1","held":[]}"#;
    ws.send(Message::text(hello)).unwrap();
    let frame = match ws.read() {
        Ok(Message::Close(Some(frame))) => frame,
        other => panic!("expected a close frame with a reason, got {other:?}"),
    };
    assert_eq!(frame.code, CloseCode::Policy);
    assert!(
        frame.reason.contains("worker protocol 1 refused")
            && frame
                .reason
                .contains(&format!("speaks {}", diffuse_runtime::proto::PROTOCOL)),
        "{}",
        frame.reason
    );
    assert_eq!(c.status()["workers"], 0, "the old worker never joined");
    let log = c.dispatcher.as_ref().unwrap().log_text();
    assert!(
        log.contains("worker protocol 1 refused") && log.contains("old"),
        "{log}"
    );
    // A hello the dispatcher cannot read is refused the same way, with the parse error.
    let (mut ws, _) = {
        let url = format!("{}/v1/workers/connect", c.url.replacen("http", "ws", 1));
        let mut request = url.into_client_request().unwrap();
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {}", c.worker_token).parse().unwrap(),
        );
        tungstenite::connect(request).unwrap()
    };
    ws.send(Message::text(r#"{"type":"hello","name":"x"}"#))
        .unwrap();
    match ws.read() {
        Ok(Message::Close(Some(frame))) => {
            assert_eq!(frame.code, CloseCode::Policy);
            assert!(frame.reason.contains("cannot read"), "{}", frame.reason);
        }
        other => panic!("expected a close frame with a reason, got {other:?}"),
    }
}

#[test]
fn a_worker_refuses_a_dispatcher_of_another_protocol_and_exits() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stand_in = std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        let mut ws = tungstenite::accept(conn).unwrap();
        let hello = match ws.read().unwrap() {
            Message::Text(t) => t.to_string(),
            other => panic!("expected a hello, got {other:?}"),
        };
        // A dispatcher before versions welcomes without `protocol`.
        ws.send(Message::text(
            r#"{"type":"welcome","node":0,"heartbeat_ms":500}"#,
        ))
        .unwrap();
        let _ = ws.read();
        hello
    });
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let out = diffuse_with(
        &[
            "worker",
            "--dispatcher",
            &url,
            "--cache-dir",
            cache.to_str().unwrap(),
            "--cache-size",
            "10MB",
            "--listen",
            "127.0.0.1:0",
        ],
        None,
        &[("DIFFUSE_WORKER_TOKEN", "token")],
        Duration::from_secs(60),
    );
    let hello: serde_json::Value = serde_json::from_str(&stand_in.join().unwrap()).unwrap();
    assert_eq!(hello["protocol"], diffuse_runtime::proto::PROTOCOL);
    let stderr = &out.stderr;
    assert!(
        out.code.is_some_and(|c| c != 0),
        "the worker did not fail ({:?}): {}",
        out.code,
        out.stderr
    );
    assert!(
        stderr.contains("speaks protocol 1, this worker"),
        "no clear error: {stderr}"
    );
}
