//! Benchmark (not a timed test; `bench/stage.sh` runs it): `diffuse stage` under GDS, LDS and
//! naive on the shaped multi-host testbed, the paper's experiments scaled down
//! (coordinated-transfers-gridftp-gds.txt, section 5): files of 4, 20 and 100 MB in
//! proportions 0.5/0.35/0.15; a fast and a slow source group; replication increasing; one
//! destination and three. Prints a table of throughputs with the cut lower bound of each
//! batch.
//!
//! Hosts: 0 the dispatcher; 1 storage (an HTTP file server) sending at 100 Mbit/s; 2 and 3
//! the fast sources F1, F2 at 400 Mbit/s; 4 and 5 the slow ones S1, S2 at 80 Mbit/s; 6, 7
//! and 8 the destinations D1..D3, each taking in and sending 400 Mbit/s.

mod common;

use common::cluster::*;
use common::host::skip;
use common::hosts::Hosts;
use serde_json::Value;

const MB: u64 = 1_000_000;
/// Bytes per second each host sends (index: host), and each destination takes in.
const STORAGE: f64 = 100e6 / 8.0;
const FAST: f64 = 400e6 / 8.0;
const SLOW: f64 = 80e6 / 8.0;
const DEST: f64 = 400e6 / 8.0;

/// The file set `tag`: 10 files of 4 MB, 7 of 20 MB, 3 of 100 MB, under the storage
/// server's directory. Returns (uri, size).
fn file_set(h: &Hosts, storage: &str, tag: &str) -> Vec<(String, u64)> {
    let dir = h.path("www").join(tag);
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for (n, size) in [(10, 4 * MB), (7, 20 * MB), (3, 100 * MB)] {
        for i in 0..n {
            let name = format!("{}-{i}.bin", size / MB);
            std::fs::write(dir.join(&name), random_bytes(size as usize)).unwrap();
            files.push((format!("{storage}/{tag}/{name}"), size));
        }
    }
    files
}

fn stage(h: &Hosts, list: &[(String, u64)], args: &[&str]) -> Value {
    let uris: Vec<String> = list.iter().map(|(u, _)| u.clone()).collect();
    h.stage(&uris, args)
}

/// Drop `list` from `dests` and wait until the dispatcher knows.
fn unstage(h: &Hosts, list: &[(String, u64)], dests: &[&str]) {
    stage(h, list, &["--to", &dests.join(","), "--drop"]);
    for (uri, _) in list {
        poll("copies dropped", || {
            let v = h.get(&format!("/v1/objects/{}", encode(uri)))?;
            let nodes = v["nodes"].as_array()?.clone();
            (!nodes
                .iter()
                .any(|n| dests.contains(&n.as_str().unwrap_or(""))))
            .then_some(())
        });
    }
}

fn encode(uri: &str) -> String {
    uri.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'_' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The flow lower bound (`diffuse_sim::flow_bound`, the paper's section 3) of staging `files`
/// to `dests` destinations from storage and holders sending at `holders` bytes/s: the star of
/// this testbed, every host behind its own shaped NIC.
fn flow_bound(files: &[(String, u64)], holders: &[f64], dests: usize) -> f64 {
    use diffuse_core::bandwidth::Endpoint;
    use diffuse_core::staging::Request;
    use diffuse_core::{NodeId, ObjectId};
    let dest = |k: usize| NodeId(100 + k as u32);
    let mut requests = Vec::new();
    let mut copies = Vec::new();
    for (i, (_, size)) in files.iter().enumerate() {
        let o = ObjectId(i as u64);
        copies.push((o, Endpoint::Storage));
        for j in 0..holders.len() {
            copies.push((o, Endpoint::Node(NodeId(j as u32))));
        }
        for k in 0..dests {
            requests.push(Request {
                object: o,
                size: *size,
                dest: dest(k),
            });
        }
    }
    let mut net = diffuse_sim::flow_bound::Star {
        default: f64::INFINITY,
        ..Default::default()
    };
    net.out.insert(Endpoint::Storage, STORAGE);
    for (j, rate) in holders.iter().enumerate() {
        net.out.insert(Endpoint::Node(NodeId(j as u32)), *rate);
    }
    for k in 0..dests {
        net.out.insert(Endpoint::Node(dest(k)), DEST);
        net.into.insert(Endpoint::Node(dest(k)), DEST);
    }
    diffuse_sim::flow_bound::flow_bound(&requests, &copies, &net).expect("a bound")
}

#[test]
#[ignore = "a benchmark: bench/stage.sh"]
fn bench_stage_schedules_on_the_shaped_testbed() {
    let Some(mut h) = Hosts::up(9, &[]) else {
        return skip("network namespaces need root and iproute2");
    };
    // Storage: Python's HTTP file server on host 1.
    let www = h.path("www");
    let storage = h.http_store(1, &www);
    let big = ["--cache-size", "8GB"];
    let names = ["F1", "F2", "S1", "S2", "D1", "D2", "D3"];
    for (i, name) in names.iter().enumerate() {
        h.worker_with(i + 2, name, &big);
    }
    h.wait_workers(names.len() as u64);
    h.bed.shape(1, "100mbit", None);
    for host in [2, 3] {
        h.bed.shape(host, "400mbit", None);
    }
    for host in [4, 5] {
        h.bed.shape(host, "80mbit", None);
    }
    for host in 6..=8 {
        h.bed.shape(host, "400mbit", None);
        h.bed.shape_in(host, "400mbit");
    }

    // Replication 1, 2, 4: the sources seeded with each set (storage holds every file).
    let layouts: [(&str, &[&str], Vec<f64>); 3] = [
        ("F1", &["F1"], vec![FAST]),
        ("F1,S1", &["F1", "S1"], vec![FAST, SLOW]),
        (
            "F1,F2,S1,S2",
            &["F1", "F2", "S1", "S2"],
            vec![FAST, FAST, SLOW, SLOW],
        ),
    ];
    let mut rows = Vec::new();
    for (n, (label, seeds, rates)) in layouts.iter().enumerate() {
        let files = file_set(&h, &storage, &format!("set{n}"));
        // Seed the sources from storage unshaped, so the benchmark spends its time measuring.
        h.bed.unshape(1);
        stage(&h, &files, &["--to", &seeds.join(",")]);
        h.bed.shape(1, "100mbit", None);
        for dests in [&["D1"][..], &["D1", "D2", "D3"][..]] {
            // Once unmeasured, so the predictor has a history of every link, as the paper's
            // scheduler had.
            stage(&h, &files, &["--to", &dests.join(","), "--schedule", "lds"]);
            unstage(&h, &files, dests);
            let bound = flow_bound(&files, rates, dests.len());
            let mut row = format!("| {label} | {} | {bound:.1} s |", dests.len());
            let mut gds = 0.0;
            for schedule in ["naive", "lds", "gds"] {
                let v = stage(
                    &h,
                    &files,
                    &["--to", &dests.join(","), "--schedule", schedule],
                );
                let secs = v["seconds"].as_f64().unwrap();
                let mbps = v["bytes"].as_f64().unwrap() * 8.0 / 1e6 / secs;
                eprintln!(
                    "{label} x{}: {schedule} {secs:.1} s, {mbps:.0} Mb/s, by source {}",
                    dests.len(),
                    v["by_source"]
                );
                row.push_str(&format!(" {mbps:.0} ({secs:.1}) |"));
                if schedule == "gds" {
                    gds = secs;
                }
                unstage(&h, &files, dests);
            }
            row.push_str(&format!(" {:.0}% |", 100.0 * (gds / bound - 1.0)));
            rows.push(row);
        }
    }
    println!("| replicas | destinations | bound | naive Mb/s (s) | LDS | GDS | GDS above bound |");
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
}
