//! What reading a task file costs: `spec::parse_tasks` over 100,000 tasks as JSON Lines, the
//! way `POST /v1/tasks` reads a batch (the dispatcher ingests tens of thousands of tasks a
//! second). Two files: tasks of the common shape (id, cmd, one input), and tasks that set several
//! optional fields (boxed in `TaskMore`), and the journal's form written back (`TaskDef` to JSON).
//!
//! `cargo bench -p diffuse-runtime --bench spec_parse`

use criterion::{criterion_main, Criterion, Throughput};

const N: usize = 100_000;

fn plain() -> String {
    (0..N)
        .map(|i| format!(r#"{{"id":"t{i}","cmd":["wc","-c","{{inputs[0]}}"],"inputs":["file:///data/f{}"]}}"#, i % 1000))
        .collect::<Vec<_>>()
        .join("\n")
}

fn optional() -> String {
    (0..N)
        .map(|i| {
            format!(
                r#"{{"id":"t{i}","cmd":"cat {{inputs[0]}} > {{outputs[0]}}","inputs":["file:///data/f{}"],"outputs":["tmp://o{i}"],"job":"j{}","cores":2,"memory":"4GB","timeout_s":30.5,"retries":2,"env":{{"X":"1"}},"priority":-3}}"#,
                i % 1000,
                i % 7
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse 100k tasks");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    for (name, text) in [("plain", plain()), ("optional fields", optional())] {
        g.bench_function(name, |b| {
            b.iter(|| diffuse_runtime::spec::parse_tasks(&text).expect("parse"))
        });
    }
    let tasks = diffuse_runtime::spec::parse_tasks(&optional()).expect("parse");
    g.bench_function("write optional fields", |b| {
        b.iter(|| {
            tasks
                .iter()
                .map(|t| serde_json::to_string(t).expect("json").len())
                .sum::<usize>()
        })
    });
    g.finish();
}

#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::parse);
}
use group::benches;
criterion_main!(benches);
