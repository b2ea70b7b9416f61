//! `serve` over TLS: served to a client that trusts the CA, refused (with the reason) to one
//! that does not and to plain HTTP, and a stalled or silent connection is closed within the
//! header timeout. At the connection limit, connections that showed no token give way to new
//! ones (`places.rs`).

use super::{host_header, serve, serve_with, Connection, ConnectionStats, Limits};
use crate::tls::tests::Pki;
use crate::tls::{server_config, tls_failure, TlsFailure, Trust};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HEADER_TIMEOUT: Duration = Duration::from_millis(400);

/// A server answering `GET /` with "hello", over TLS if `tls`; its address and a stopper.
async fn start(tls: Option<&Pki>) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
    let limits = Limits {
        max_connections: 16,
        header_timeout: HEADER_TIMEOUT,
        body_timeout: Duration::from_secs(5),
        nodelay: false,
    };
    let tls = tls.map(|p| server_config(&p.cert, &p.key).expect("server config"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, router, limits, tls, async {
        let _ = stopped.await;
    }));
    (addr, stop)
}

fn client(trust: &Trust) -> reqwest::Client {
    trust
        .reqwest(
            reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(10)),
        )
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_client_that_trusts_the_ca_is_served_and_one_that_does_not_is_refused() {
    let pki = Pki::new();
    let (addr, _stop) = start(Some(&pki)).await;
    let trusted = client(&Trust::with_ca(&pki.ca).unwrap());
    for host in ["127.0.0.1".to_string(), "localhost".to_string()] {
        let url = format!("https://{host}:{}/", addr.port());
        let r = trusted.get(&url).send().await.expect("served over TLS");
        assert_eq!(r.text().await.unwrap(), "hello");
    }

    let e = client(&Trust::system())
        .get(format!("https://127.0.0.1:{}/", addr.port()))
        .send()
        .await
        .expect_err("an unknown CA is refused");
    assert_eq!(tls_failure(&e), Some(TlsFailure::Untrusted), "{e:?}");
    let text = crate::tls::describe(&e);
    assert!(
        text.contains("not trusted") && text.contains("--tls-ca"),
        "{text}"
    );

    let e = client(&Trust::with_ca(&pki.other_ca).unwrap())
        .get(format!("https://127.0.0.1:{}/", addr.port()))
        .send()
        .await
        .expect_err("another CA is refused");
    assert_eq!(tls_failure(&e), Some(TlsFailure::Untrusted), "{e:?}");
}

#[tokio::test]
async fn plain_http_on_a_tls_port_is_refused_saying_to_use_https() {
    let pki = Pki::new();
    let (addr, _stop) = start(Some(&pki)).await;
    let r = client(&Trust::system())
        .get(format!("http://127.0.0.1:{}/", addr.port()))
        .send()
        .await
        .expect("an answer");
    assert_eq!(r.status().as_u16(), 400);
    let body: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).expect("JSON");
    assert_eq!(
        body["error"],
        format!(
            "this server takes TLS only (HTTPS): use https://127.0.0.1:{}",
            addr.port()
        )
    );
}

#[tokio::test]
async fn https_to_a_plain_server_says_it_does_not_speak_tls() {
    let (addr, _stop) = start(None).await;
    let e = client(&Trust::system())
        .get(format!("https://127.0.0.1:{}/", addr.port()))
        .send()
        .await
        .expect_err("no TLS there");
    assert_eq!(tls_failure(&e), Some(TlsFailure::NotTls), "{e:?}");
    assert!(crate::tls::describe(&e).contains("use http://"));
}

/// Read until the server closes the connection; how long that took.
async fn closed_after(stream: &mut (impl AsyncReadExt + Unpin)) -> Duration {
    let start = Instant::now();
    let mut buf = [0u8; 256];
    let r = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(r.is_ok(), "the connection is still open after 5 s");
    start.elapsed()
}

#[tokio::test]
async fn a_stalled_handshake_and_a_silent_session_are_closed_within_the_header_timeout() {
    let pki = Pki::new();
    let (addr, _stop) = start(Some(&pki)).await;
    // A handshake record's first bytes, then nothing.
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
    let t = closed_after(&mut tcp).await;
    assert!(
        t < HEADER_TIMEOUT * 3,
        "stalled handshake closed after {t:?}"
    );

    // A complete handshake, then no request.
    let config = Trust::with_ca(&pki.ca).unwrap().client_config();
    let connector = tokio_rustls::TlsConnector::from(config);
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = connector.connect(name, tcp).await.expect("handshake");
    let t = closed_after(&mut tls).await;
    assert!(
        t < HEADER_TIMEOUT * 3,
        "silent TLS session closed after {t:?}"
    );
}

// ----- the connection limit -----

/// A server of at most `max` connections with a long header timeout: `GET /` answers "hello",
/// `POST /slow` and `POST /peer/slow` answer the length of their body. A middleware proves a
/// connection whose request carries `Bearer good`, and doubts one whose request carries no token,
/// except under `/peer/` (like a worker's peer server, which does neither).
async fn start_limited(
    max: usize,
) -> (
    std::net::SocketAddr,
    Arc<ConnectionStats>,
    tokio::sync::oneshot::Sender<()>,
) {
    async fn mark(
        request: axum::extract::Request,
        next: axum::middleware::Next,
    ) -> axum::response::Response {
        let c = request
            .extensions()
            .get::<Connection>()
            .expect("connection");
        if crate::auth::authorized(request.headers(), "good") {
            c.prove();
        } else if !request.uri().path().starts_with("/peer/") {
            c.showed_no_token();
        }
        next.run(request).await
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let length = |body: String| async move { body.len().to_string() };
    let router = axum::Router::new()
        .route("/", axum::routing::get(|| async { "hello" }))
        .route("/slow", axum::routing::post(length))
        .route("/peer/slow", axum::routing::post(length))
        .layer(axum::middleware::from_fn(mark));
    let limits = Limits {
        max_connections: max,
        header_timeout: Duration::from_secs(30),
        body_timeout: Duration::from_secs(30),
        nodelay: false,
    };
    let stats = Arc::new(ConnectionStats::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve_with(
        listener,
        router,
        limits,
        None,
        stats.clone(),
        async {
            let _ = stopped.await;
        },
    ));
    (addr, stats, stop)
}

/// A new TCP connection, given time to be accepted (so connections are accepted in order).
async fn open(addr: std::net::SocketAddr) -> tokio::net::TcpStream {
    let s = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    s
}

/// Whether the server closed `s` (it reads an end or an error within 1 s) rather than leaving
/// it open and silent.
async fn is_closed(s: &mut tokio::net::TcpStream) -> bool {
    let mut buf = [0u8; 256];
    match tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => true,
        Ok(Ok(n)) => panic!("unexpected bytes: {:?}", String::from_utf8_lossy(&buf[..n])),
        Err(_) => false,
    }
}

/// Send `request` on `s` and read its answer until it contains `expect`.
async fn ask(s: &mut tokio::net::TcpStream, request: &str, expect: &str) {
    s.write_all(request.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let r = tokio::time::timeout(Duration::from_secs(2), async {
        while !String::from_utf8_lossy(&got).contains(expect) {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let got = String::from_utf8_lossy(&got);
    assert!(r.is_ok() && got.contains(expect), "answer: {got:?}");
}

const AUTHORISED_GET: &str = "GET / HTTP/1.1\r\nhost: x\r\nauthorization: Bearer good\r\n\r\n";

#[tokio::test]
async fn at_the_limit_the_oldest_idle_unproven_connection_gives_way_to_an_authorised_client() {
    let (addr, stats, _stop) = start_limited(4).await;
    // One authorised keep-alive connection, then three that send nothing: the limit is reached.
    let mut proven = open(addr).await;
    ask(&mut proven, AUTHORISED_GET, "hello").await;
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(open(addr).await);
    }
    // A new authorised client is answered at once...
    let authorised = client(&Trust::system());
    let start = Instant::now();
    let r = authorised
        .get(format!("http://{addr}/"))
        .bearer_auth("good")
        .timeout(Duration::from_secs(1))
        .send()
        .await
        .expect("an authorised client is answered at the limit");
    assert_eq!(r.text().await.unwrap(), "hello");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    // ...in the place of the oldest idle connection; the others and the proven one stay open.
    assert!(is_closed(&mut idle[0]).await, "the oldest idle one is open");
    for (i, s) in idle.iter_mut().enumerate().skip(1) {
        assert!(!is_closed(s).await, "idle connection {i} was closed");
    }
    assert!(
        !is_closed(&mut proven).await,
        "the proven connection was closed"
    );
    ask(&mut proven, AUTHORISED_GET, "hello").await;
    // A stranger's new connection takes the place of the next oldest idle one, not of the
    // proven ones (the client above keeps its connection open).
    let mut stranger = open(addr).await;
    assert!(
        is_closed(&mut idle[1]).await,
        "the next oldest idle one is open"
    );
    assert!(!is_closed(&mut idle[2]).await);
    assert!(!is_closed(&mut stranger).await);
    ask(&mut proven, AUTHORISED_GET, "hello").await;
    assert_eq!((stats.evicted(), stats.refused()), (2, 0));
    drop(authorised);
}

#[tokio::test]
async fn a_request_in_flight_keeps_its_place_unless_it_showed_no_token() {
    let (addr, stats, _stop) = start_limited(3).await;
    let slow =
        |path: &str| format!("POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n12345");
    // A transfer on a server that proves nothing (a peer server), and a stranger's slow body.
    let mut transfer = open(addr).await;
    transfer
        .write_all(slow("/peer/slow").as_bytes())
        .await
        .unwrap();
    let mut stranger = open(addr).await;
    stranger.write_all(slow("/slow").as_bytes()).await.unwrap();
    let mut proven = open(addr).await;
    ask(&mut proven, AUTHORISED_GET, "hello").await;
    // A new connection takes the stranger's place, mid-request.
    let mut newcomer = open(addr).await;
    assert!(
        is_closed(&mut stranger).await,
        "the stranger's slow body held its place"
    );
    assert!(!is_closed(&mut transfer).await, "a transfer was cut short");
    // The newcomer, idle, gives way to the next one.
    let mut next = open(addr).await;
    assert!(is_closed(&mut newcomer).await, "the idle newcomer is open");
    ask(&mut next, AUTHORISED_GET, "hello").await;
    // Every place is now proven or busy: a new connection is closed at once.
    let mut refused = open(addr).await;
    assert!(
        is_closed(&mut refused).await,
        "a connection past the limit is open"
    );
    assert_eq!((stats.evicted(), stats.refused()), (2, 1));
    // The transfer was not disturbed.
    ask(&mut transfer, "67890", "\r\n\r\n10").await;
    ask(&mut proven, AUTHORISED_GET, "hello").await;
}

#[test]
fn the_host_header_is_read_only_when_plausible() {
    let head = b"GET / HTTP/1.1\r\nhost: head:8700\r\nuser-agent: x\r\n\r\n";
    assert_eq!(host_header(head).as_deref(), Some("head:8700"));
    assert_eq!(
        host_header(b"GET / HTTP/1.1\r\nHost: [::1]:1\r\n\r\n").as_deref(),
        Some("[::1]:1")
    );
    assert_eq!(host_header(b"GET / HTTP/1.1\r\nHost: a\"b\r\n\r\n"), None);
    assert_eq!(host_header(b"GET / HTTP/1.1\r\n\r\nHost: late\r\n"), None);
}
