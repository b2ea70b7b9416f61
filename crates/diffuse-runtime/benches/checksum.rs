//! What verifying a cached object costs: SHA-256 (the `sha2` crate, with SHA-NI where the CPU
//! has it) over a 64 MiB file in the page cache, the way the cache directory verifies an
//! object, against reading the same file without hashing.
//!
//! `cargo bench -p diffuse-runtime --bench checksum`

use criterion::{criterion_main, Criterion, Throughput};
use std::io::Read;

fn checksum(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("object");
    let size = 64usize << 20;
    let data: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(&path, &data).expect("write");
    let mut g = c.benchmark_group("verify 64 MiB");
    g.throughput(Throughput::Bytes(size as u64));
    g.sample_size(10);
    g.bench_function("sha256_file", |b| {
        b.iter(|| diffuse_runtime::cache_dir::sha256_file(&path).expect("hash"))
    });
    g.bench_function("read only", |b| {
        let mut buf = vec![0u8; 64 << 10];
        b.iter(|| {
            let mut f = std::fs::File::open(&path).expect("open");
            let mut n = 0;
            loop {
                let k = f.read(&mut buf).expect("read");
                if k == 0 {
                    break n;
                }
                n += k;
            }
        })
    });
    g.finish();
}

#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::checksum);
}
use group::benches;
criterion_main!(benches);
