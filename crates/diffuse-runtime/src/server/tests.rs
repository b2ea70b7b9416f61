//! `serve` over TLS: served to a client that trusts the CA, refused (with the reason) to one
//! that does not and to plain HTTP, and a stalled or silent connection is closed within the
//! header timeout.

use super::{host_header, serve, Limits};
use crate::tls::tests::Pki;
use crate::tls::{server_config, tls_failure, TlsFailure, Trust};
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
