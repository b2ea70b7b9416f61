//! What reading a worker's report costs the dispatcher's sessions: a `Finished` message (the
//! report compact, as workers send it) read as `ToDispatcher` by serde (an internally tagged
//! enum: serde buffers its fields before it knows the variant), by
//! `proto::read_to_dispatcher` (the session's read: the report read straight when the tag
//! comes first), and the report read on its own.
//!
//! `cargo bench -p diffuse-runtime --bench messages`

use criterion::{criterion_main, Criterion};
use diffuse_runtime::proto::{TaskReport, ToDispatcher, Traffic};

fn messages(c: &mut Criterion) {
    let report = TaskReport {
        task: "t123456".into(),
        attempt: 1,
        exit_code: Some(0),
        started_at: 1.8e9 + 0.000_07,
        staged_at: 1.8e9 + 0.000_283,
        finished_at: 1.8e9 + 0.001_187,
        ..TaskReport::empty()
    };
    let with_traffic = TaskReport {
        traffic: Traffic {
            local: 1,
            bytes_local: 8 << 20,
            ..Traffic::default()
        },
        stdout: Some("/var/cache/diffuse/logs/t123456.1.out".into()),
        ..report.clone()
    };
    let mut g = c.benchmark_group("parse a Finished message");
    for (name, r) in [("true", report), ("an input, stdout", with_traffic)] {
        let msg = serde_json::to_string(&ToDispatcher::Finished(Box::new(r.clone()))).unwrap();
        let body = serde_json::to_string(&r).unwrap();
        g.bench_function(format!("{name}: as ToDispatcher ({} B)", msg.len()), |b| {
            b.iter(|| serde_json::from_str::<ToDispatcher>(std::hint::black_box(&msg)).unwrap())
        });
        g.bench_function(format!("{name}: read_to_dispatcher"), |b| {
            b.iter(|| {
                diffuse_runtime::proto::read_to_dispatcher(std::hint::black_box(&msg)).unwrap()
            })
        });
        g.bench_function(
            format!("{name}: the report alone ({} B)", body.len()),
            |b| b.iter(|| serde_json::from_str::<TaskReport>(std::hint::black_box(&body)).unwrap()),
        );
    }
    g.finish();
}

#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::messages);
}
use group::benches;
criterion_main!(benches);
