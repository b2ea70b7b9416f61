//! What the journal writer costs per commit: `submit` of 1,000 tasks and `record_outcomes` of
//! 1,000 no-op outcomes (the report a `true` task sends) in one transaction each, on a journal
//! that already holds 100,000 finished tasks (the B-trees are not tiny); and the record
//! checksum of one such outcome on its own, CRC-32 (written since schema 4) against SHA-256
//! (before). A submission's commit includes its fsync (WAL, `synchronous=FULL`: it is
//! acknowledged); outcomes are committed as the dispatcher's writer does, without
//! (`synchronous=NORMAL`, `Journal::relax_durability`).
//!
//! `cargo bench -p diffuse-runtime --bench journal`

use criterion::{criterion_main, BatchSize, Criterion, Throughput};
use diffuse_runtime::journal::{Journal, OutcomeState, SubmittedTask, TaskOutcome};
use diffuse_runtime::proto::TaskReport;

const BATCH: usize = 1_000;
const BEFORE: usize = 100_000;

fn task(i: usize) -> SubmittedTask {
    SubmittedTask {
        id: format!("t{i}"),
        spec_json: format!(r#"{{"id":"t{i}","cmd":["true"]}}"#),
        submitted_at: 1.8e9 + i as f64 * 1e-5,
    }
}

/// The outcome of a `true` task, as the scheduler records it.
fn outcome(i: usize) -> TaskOutcome {
    let at = 1.8e9 + i as f64 * 1e-5;
    let report = TaskReport {
        task: format!("t{i}"),
        attempt: 1,
        exit_code: Some(0),
        started_at: at,
        staged_at: at + 0.000_213,
        finished_at: at + 0.001_117,
        ..TaskReport::empty()
    };
    TaskOutcome {
        id: format!("t{i}"),
        state: OutcomeState::Succeeded,
        attempt: 1,
        node: Some("worker-17".into()),
        exit_code: Some(0),
        error: None,
        result_json: serde_json::to_string(&report).expect("report"),
        finished_at: at + 0.001_117,
    }
}

fn journal(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut j = Journal::open(&dir.path().join("journal")).expect("open");
    for chunk in (0..BEFORE).collect::<Vec<_>>().chunks(10_000) {
        let tasks: Vec<_> = chunk.iter().map(|&i| task(i)).collect();
        j.submit(&tasks).expect("submit");
        let outcomes: Vec<_> = chunk.iter().map(|&i| outcome(i)).collect();
        j.record_outcomes(&outcomes).expect("outcomes");
    }
    let j = std::cell::RefCell::new(j);
    let mut next = BEFORE;
    let mut g = c.benchmark_group("journal commit of 1,000");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.sample_size(20);
    g.bench_function("submit", |b| {
        b.iter_batched(
            || {
                next += BATCH;
                (next - BATCH..next).map(task).collect::<Vec<_>>()
            },
            |tasks| j.borrow_mut().submit(&tasks).expect("submit"),
            BatchSize::LargeInput,
        )
    });
    j.borrow().relax_durability().expect("relax");
    g.bench_function("record_outcomes", |b| {
        b.iter_batched(
            || {
                next += BATCH;
                let tasks: Vec<_> = (next - BATCH..next).map(task).collect();
                j.borrow_mut().submit(&tasks).expect("submit");
                (next - BATCH..next).map(outcome).collect::<Vec<_>>()
            },
            |outcomes| j.borrow_mut().record_outcomes(&outcomes).expect("outcomes"),
            BatchSize::LargeInput,
        )
    });
    g.finish();
    let o = outcome(7);
    println!("a no-op outcome's report: {} bytes", o.result_json.len());
    let mut g = c.benchmark_group("outcome record checksum");
    g.bench_function("crc32", |b| {
        b.iter(|| diffuse_runtime::journal::outcome_crc(std::hint::black_box(&o)))
    });
    g.bench_function("sha256", |b| {
        b.iter(|| diffuse_runtime::journal::outcome_sum(std::hint::black_box(&o)))
    });
    g.finish();
}

#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::journal);
}
use group::benches;
criterion_main!(benches);
