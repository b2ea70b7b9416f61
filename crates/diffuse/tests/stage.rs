//! `diffuse stage`, live: a batch of objects copied to every worker before any task reads
//! them, each object read from storage about once and then from the workers that have it;
//! unknown workers and missing objects are told clearly. Real worker processes, real sockets
//! (the multi-host figures are in multihost.rs).

mod common;

use common::cluster::*;
use common::run_diffuse;
use std::sync::Mutex;
use std::time::Duration;

/// The two tests take turns: the first measures what storage served, which a second cluster
/// starting beside it on 2 cores would disturb.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn stage(c: &Cluster, args: &[&str]) -> common::Output {
    let mut all = vec!["stage", "--dispatcher", &c.url];
    all.extend_from_slice(args);
    run_diffuse(
        &all,
        None,
        &[("DIFFUSE_CLIENT_TOKEN", &c.client_token)],
        Duration::from_secs(120),
    )
}

fn holders(c: &Cluster, uri: &str) -> Vec<String> {
    let mut n: Vec<String> = c.object(uri)["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    n.sort();
    n
}

/// Stage three objects (40, 1 and 3 MiB) to three workers, on a dispatcher with `args`, and
/// check what always holds: every copy made, every worker holds every object, storage gave
/// each object first, and staging again moves nothing. Returns what storage and the workers
/// sent, in copies' worth of each object, and the copies the dispatcher planned.
fn stage_three_objects_to_three_workers(args: &[&str]) -> (f64, f64, Vec<String>) {
    let log = [(
        "DIFFUSE_LOG",
        "info,diffuse_runtime::dispatcher::scheduler::batches=debug",
    )];
    let mut c = Cluster::start_with(&log, args, &[]);
    for w in ["a", "b", "c"] {
        c.worker(w, 1, "200MB");
    }
    c.wait_workers(3);
    // A large object (read in chunks from several holders), two small ones.
    let sizes = [("big", 40 << 20), ("small1", 1 << 20), ("small2", 3 << 20)];
    let mut list = String::from("# a reference dataset\n");
    let mut uris = Vec::new();
    for (name, size) in sizes {
        let p = c.data(name, &random_bytes(size));
        list.push_str(&format!("{}\n", p.display()));
        uris.push(file_uri(&p));
    }
    let list_file = c.path("list");
    std::fs::write(&list_file, list).unwrap();

    let out = stage(&c, &[list_file.to_str().unwrap(), "--to", "all"]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .starts_with("staged 9 of 9 copies (3 objects to 3 workers, gds)"),
        "{}",
        out.stdout
    );
    for uri in &uris {
        assert_eq!(holders(&c, uri), ["a", "b", "c"], "{uri}");
    }
    let v = c.get("/v1/stage/1");
    assert_eq!(v["state"], "done", "{v}");
    let total: u64 = sizes.iter().map(|(_, s)| *s as u64).sum();
    assert_eq!(v["bytes"].as_u64(), Some(3 * total), "{v}");
    let from_storage = v["by_source"]["storage"].as_u64().unwrap_or(0);
    assert!(
        from_storage >= total,
        "every object came from storage first: {v}"
    );
    let from_peers: u64 = ["a", "b", "c"]
        .iter()
        .map(|w| v["by_source"][w].as_u64().unwrap_or(0))
        .sum();
    let planned: Vec<String> = c
        .dispatcher
        .as_ref()
        .expect("the dispatcher")
        .log_text()
        .lines()
        .filter(|l| l.contains("copy planned"))
        .map(|l| {
            l.split_once("copy planned")
                .map_or(l, |(_, r)| r)
                .to_string()
        })
        .collect();
    // Staged again: nothing to move.
    let out = stage(&c, &[list_file.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.starts_with("staged 0 of 0 copies"),
        "{}",
        out.stdout
    );
    let share = |b: u64| b as f64 / total as f64;
    (share(from_storage), share(from_peers), planned)
}

/// Without a storage cap, how much storage gives beyond the first copy of each object is
/// GDS's choice by the rates it has measured, so it is printed, not asserted: on this machine
/// storage (a local disk) was measured faster than a worker's HTTP, and it gave 2.0 copies'
/// worth in most runs, up to 2.9 with a core loaded (docs/runtime.md, "Staging a batch").
#[test]
fn a_batch_reaches_every_worker_and_storage_gives_each_object_first() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (storage, peers, planned) = stage_three_objects_to_three_workers(&[]);
    eprintln!(
        "stage shares, no cap: storage {storage:.2} copies' worth of each object, peers {peers:.2}"
    );
    eprintln!("planned:\n{}", planned.join("\n"));
}

/// With `--storage-bandwidth-cap` below the workers' links, storage is planned at the cap (which
/// the workers hold their reads to, the reading worker taking most of it), one copy at a time,
/// and the workers that hold a copy send the rest: storage gives each object about once.
#[test]
fn with_a_storage_cap_storage_is_read_about_once_per_object() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (storage, peers, planned) =
        stage_three_objects_to_three_workers(&["--storage-bandwidth-cap", "20MB/s"]);
    eprintln!(
        "stage shares, cap: storage {storage:.2} copies' worth of each object, peers {peers:.2}"
    );
    // 1.00 in 6 runs of 6 with a core loaded; 2.98 before the stager planned storage at the cap.
    assert!(
        storage < 1.5,
        "storage gave {storage:.2} copies' worth; planned:\n{}",
        planned.join("\n")
    );
}

#[test]
fn unknown_workers_and_missing_objects_are_told() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = Cluster::start(&[]);
    c.worker("a", 1, "50MB");
    c.wait_workers(1);
    let there = c.data("there", b"hello");
    let empty = c.data("empty", b"");
    let list = c.path("list");
    std::fs::write(
        &list,
        format!(
            "{}\n{}\n{}/missing\n",
            there.display(),
            empty.display(),
            c.path("data").display()
        ),
    )
    .unwrap();
    let out = stage(&c, &[list.to_str().unwrap(), "--to", "a,zz"]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("no connected worker is named zz"),
        "{}",
        out.stderr
    );

    let out = stage(
        &c,
        &[list.to_str().unwrap(), "--to", "a", "--schedule", "naive"],
    );
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.starts_with("staged 2 of 2 copies"),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr.contains("not staged") && out.stderr.contains("missing"),
        "{}",
        out.stderr
    );
    assert_eq!(holders(&c, &file_uri(&there)), ["a"]);
    assert_eq!(
        holders(&c, &file_uri(&empty)),
        ["a"],
        "an empty object is a copy too"
    );

    let tmp = c.path("tmplist");
    std::fs::write(&tmp, "tmp://x\n").unwrap();
    let out = stage(&c, &[tmp.to_str().unwrap(), "--drop"]);
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("intermediate objects are not dropped"),
        "{}",
        out.stderr
    );

    let out = stage(&c, &["/nonexistent-list"]);
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("cannot read /nonexistent-list"),
        "{}",
        out.stderr
    );
}
