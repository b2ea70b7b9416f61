//! What encoding `GET /metrics` costs (prometheus-client's text encoder over a
//! [`Scrape`]), for a small cluster and for 100 workers with 500 measured links.
//!
//! `cargo bench -p diffuse-runtime --bench metrics`; `DUMP=1` prints the 2-worker text instead.

use criterion::{criterion_main, BatchSize, Criterion};
use diffuse_runtime::dispatcher::metrics::{
    metrics_text, Histogram, LinkRate, PoolScrape, Scrape, StorageCap,
};

fn scrape(workers: usize) -> Scrape {
    let mut h = Histogram::default();
    for i in 0..10_000 {
        h.observe((i % 500) as f64 * 0.37);
    }
    let mut s = Scrape {
        queued: 1234,
        running: 400,
        succeeded: 100_000,
        failed: 12,
        slots: 800,
        busy_slots: 400,
        nodes: workers as u32,
        storage_cap: Some(StorageCap {
            bytes_per_s: 1e9,
            used_bytes_per_s: 123_456_789,
        }),
        two_mark: Some(Default::default()),
        task_run_seconds: h.clone(),
        task_staging_seconds: h.clone(),
        pool: Some(PoolScrape {
            startup_seconds: h.clone(),
            ..Default::default()
        }),
        ..Default::default()
    };
    for st in [
        "requested",
        "pending",
        "starting",
        "running",
        "idle",
        "lost",
        "releasing",
    ] {
        s.workers_by_state.insert(st.into(), 7);
    }
    for w in 0..workers {
        s.links.push(LinkRate {
            from: "storage".into(),
            to: format!("w{w}"),
            bytes_per_s: 1.25e8,
        });
        for k in 1..5 {
            s.links.push(LinkRate {
                from: format!("w{}", (w + k) % workers),
                to: format!("w{w}"),
                bytes_per_s: 9.5e8 + k as f64,
            });
        }
    }
    s
}

fn metrics(c: &mut Criterion) {
    if std::env::var_os("DUMP").is_some() {
        print!("{}", metrics_text(scrape(2)));
        std::process::exit(0);
    }
    for workers in [4usize, 100] {
        let s = scrape(workers);
        c.bench_function(&format!("metrics_text {workers} workers"), |b| {
            b.iter_batched(|| s.clone(), metrics_text, BatchSize::SmallInput)
        });
    }
}

fn benches() {
    let mut c = Criterion::default().configure_from_args();
    metrics(&mut c);
}
criterion_main!(benches);
