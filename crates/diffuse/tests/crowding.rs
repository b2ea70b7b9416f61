//! A crowd of idle connections from strangers cannot lock authorised clients or workers out of
//! the dispatcher (docs/security.md, "Connections from strangers"): at the connection limit, the
//! oldest connection that showed no valid token gives way to a new one. A real dispatcher under
//! `prlimit --nofile=1024:1024` (768 places), 1,100 real idle TCP connections, a real worker.

mod common;

use common::cluster::*;
use common::host::{is_root, read_or_closed, skip};
use serde_json::json;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// `n` TCP connections to `addr` that send nothing.
fn crowd(addr: &str, n: usize) -> Vec<TcpStream> {
    let idle: Vec<TcpStream> = (0..n)
        .filter_map(|_| TcpStream::connect(addr).ok())
        .collect();
    assert!(idle.len() >= n * 9 / 10, "opened {} of {n}", idle.len());
    idle
}

/// How long an authorised `GET /v1/status` on a new connection took to be answered; it must be.
fn status_on_a_new_connection(c: &Cluster) -> Duration {
    // No pool: every request opens its own connection, as a new client does.
    let http = reqwest::blocking::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let start = Instant::now();
    let r = http
        .get(format!("{}/v1/status", c.url))
        .bearer_auth(&c.client_token)
        .timeout(Duration::from_secs(5))
        .send()
        .expect("an authorised client is answered while strangers hold every place");
    assert!(r.status().is_success(), "{}", r.status());
    start.elapsed()
}

/// A metric's value in Prometheus text.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in the metrics"))
}

#[test]
fn idle_strangers_give_way_to_authorised_clients_and_workers_at_the_connection_limit() {
    if !is_root()
        && rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum < Some(2000)
    {
        return skip("needs an open-files limit of 2000 for the test's own connections");
    }
    // This process holds 1,100 connections.
    let mut limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    limit.current = limit.maximum;
    let _ = rustix::process::setrlimit(rustix::process::Resource::Nofile, limit);
    // The dispatcher may have 1,024 files (soft and hard), so 768 connections; an idle one is
    // not closed by the header timeout for 30 s.
    let mut c = Cluster::start_with(
        &[],
        &["--header-timeout", "30"],
        &["prlimit", "--nofile=1024:1024", "--"],
    );
    c.worker("A", 2, "10MB");
    c.wait_workers(1);
    c.submit(&[json!({"id": "before", "cmd": "true"})]);
    c.wait_succeeded("before");
    let addr = c.url.trim_start_matches("http://").to_string();

    for round in 0..2 {
        // Strangers open 1,100 connections and send nothing (the second round: reopened).
        let mut idle = crowd(&addr, 1100);
        std::thread::sleep(Duration::from_millis(500));
        for attempt in 0..3 {
            let t = status_on_a_new_connection(&c);
            eprintln!("round {round}, GET /v1/status {attempt}: {t:?}");
            assert!(
                t < Duration::from_secs(1),
                "round {round}, request {attempt}: answered after {t:?}"
            );
        }
        let start = Instant::now();
        let out = common::run_diffuse(
            &["status", "--dispatcher", &c.url],
            None,
            &[("DIFFUSE_CLIENT_TOKEN", &c.client_token)],
            Duration::from_secs(30),
        );
        let t = start.elapsed();
        eprintln!("round {round}, diffuse status: {t:?}");
        assert_eq!(out.code, Some(0), "diffuse status: {}", out.stderr);
        assert!(t < Duration::from_secs(1), "diffuse status took {t:?}");
        // The worker's session kept its place: it runs tasks submitted now.
        let ids: Vec<String> = (0..10).map(|i| format!("r{round}-{i}")).collect();
        let tasks: Vec<_> = ids
            .iter()
            .map(|id| json!({"id": id, "cmd": "true"}))
            .collect();
        c.submit(&tasks);
        for id in &ids {
            c.wait_succeeded(id);
        }
        // The oldest strangers were closed to make room; the newest hold their places.
        for s in &mut idle {
            s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        }
        assert!(read_or_closed(&mut idle[0]).is_none(), "the oldest is open");
        assert!(
            read_or_closed(idle.last_mut().unwrap()).is_some(),
            "the newest was closed"
        );
        drop(idle);
    }
    // Counted: at least 2 × (1,100 − 768) evictions.
    let evicted = metric(&c.metrics(), "diffuse_connections_evicted_total");
    assert!(evicted >= 664.0, "{evicted} evictions counted");
    let log = c.dispatcher.as_ref().unwrap().log_text();
    assert!(
        log.contains("closed the oldest idle or tokenless one"),
        "no eviction in the log: {}",
        tail(&log, 2000)
    );
}
