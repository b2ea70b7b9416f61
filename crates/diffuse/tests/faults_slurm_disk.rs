//! Fault 6 under the multi-host Slurm (issue 28; `scripts/slurm-hosts.sh`): a worker host's
//! cache disk fills, written by another program, while the worker's job runs there. The cache
//! is a small disk of the host's own (a 64 MiB tmpfs in the host's mount namespace,
//! [`SlurmHosts::small_disk`]); the pool's workers are Slurm jobs:
//!
//! - the disk fills during a prefetch: the worker evicts and fetches again;
//! - the disk fills during a hand-off to it from a released worker: it evicts to make room or
//!   declines what it cannot keep, the released worker leaves, and tasks reading the files
//!   succeed;
//! - the disk is full with nothing to evict: the tasks sent there are given back and run on
//!   another worker.
//!
//! None may fail a task. Each test prints one line of figures (`FIGURES | ...`, with
//! `--nocapture`; docs/runtime.md, "Faults across hosts"):
//!
//! ```sh
//! cargo test -p diffuse --test faults_slurm_disk -- --nocapture
//! ```
//!
//! Root only; others print SKIPPED and pass.
//!
//! [`SlurmHosts::small_disk`]: common::slurm_hosts::SlurmHosts::small_disk

mod common;

use common::cluster::{file_uri, gated_task, poll, random_bytes, Cluster};
use common::slurm_hosts::*;
use common::task_runs::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// `n` files of 6 MiB in a store on the head; the store (stopped when dropped) and its URL.
fn store_of(s: &SlurmHosts, c: &Cluster, n: usize) -> (common::cluster::Proc, String) {
    let dir = c.path("store");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..n {
        std::fs::write(dir.join(format!("o{i}")), random_bytes(6 << 20)).unwrap();
    }
    head_store(s, c, &dir)
}

/// A task that writes the size of `input` to `sizes/<id>` (shared storage).
fn size_of(id: &str, input: &str, c: &Cluster, runs: &Path) -> Value {
    let mut t = logged_task(
        id,
        "wc -c < {inputs[0]} > {outputs[0]}",
        &[input.into()],
        runs,
    );
    t["outputs"] = json!([file_uri(&c.path(&format!("sizes/{id}")))]);
    t
}

/// Every task of `ids` wrote the size of a 6 MiB file.
fn assert_sizes(c: &Cluster, ids: &[String]) {
    for id in ids.iter().filter(|id| id.starts_with('r')) {
        let got = std::fs::read_to_string(c.path(&format!("sizes/{id}"))).unwrap();
        assert_eq!(got.trim(), (6 << 20).to_string(), "{id}");
    }
}

/// A Slurm of `hosts` one-CPU hosts, each with a 64 MiB cache disk; a pool caching there.
fn small_disk_pool(test: &str, hosts: usize, more: &[&str]) -> Option<(SlurmHosts, Cluster)> {
    let s = slurm_or_skip(test, hosts, 1)?;
    for i in 1..=hosts {
        s.small_disk(i, 64);
    }
    let args = pool_args(&s, hosts as u32, 1, "small/cache", more);
    let c = head_dispatcher(&s, &strs(&args), &[]);
    std::fs::create_dir_all(c.path("sizes")).unwrap();
    Some((s, c))
}

/// W has read o0..o3 (6 MiB each) from the head's store, which then sends at 16 Mbit/s. While
/// W's one core is held, the dispatcher prefetches the next task's input to W (MixApart's
/// transfer scheduler); in the middle of that prefetch another program fills W's disk to 2 MiB
/// free. The prefetch finds the disk full, W evicts what it has cached and fetches again;
/// every task then runs and succeeds, each once.
#[test]
fn fault6_a_cache_disk_filled_during_a_prefetch_evicts_and_fails_no_task() {
    let _turn = one_at_a_time();
    let more = [
        "--min-workers",
        "1",
        "--idle-release",
        "60s",
        "--worker-cache-size",
        "40MB",
        "--policy",
        "mixapart",
        "--storage-bandwidth-cap",
        "100MB/s",
        "--prefetch",
        // The next task waits in the queue, to be prefetched for, not held ready on W.
        "--ready-tasks",
        "0",
    ];
    let Some((s, mut c)) = small_disk_pool("fault 6 (prefetch)", 1, &more) else {
        return;
    };
    let _dump = DumpWorkerLogs::of(&c);
    let w = workers_by_host(&c, &s, 1)["node1"].clone();
    let (_store, store) = store_of(&s, &c, 8);
    let runs = c.path("runs");
    let read = |i: usize| size_of(&format!("r{i}"), &format!("{store}/o{i}"), &c, &runs);
    let first: Vec<Value> = (0..4).map(read).collect();
    c.submit(&first);
    let mut all = ids(&first);
    for id in &all {
        c.wait_done(id);
    }
    s.shape_head("16mbit");
    let gate = c.path("gate");
    let mut hold = logged_task(
        "hold",
        gated_task("hold", &gate)["cmd"].as_str().unwrap(),
        &[],
        &runs,
    );
    hold["priority"] = json!(10);
    c.submit(&[hold]);
    all.push("hold".into());
    c.wait_state("hold", "running");
    let settled = |s: &Value| {
        let p = &s["prefetch"];
        p["landed"].as_u64().unwrap_or(0) + p["failed"].as_u64().unwrap_or(0)
    };
    let issued = |s: &Value| s["prefetch"]["issued"].as_u64().unwrap_or(0);
    let before = c.status();
    let second: Vec<Value> = (4..8).map(read).collect();
    c.submit(&second);
    all.extend(ids(&second));
    poll("a prefetch to W", || {
        Some(c.status()).filter(|s| issued(s) > issued(&before))
    });
    std::thread::sleep(Duration::from_millis(500));
    let during = c.status();
    assert_eq!(
        settled(&during),
        settled(&before),
        "the prefetch is under way when the disk fills: {during}"
    );
    let filled = Instant::now();
    let fill = s.fill_small_disk(1, 2 << 20);
    poll("the prefetch to land or be declined", || {
        Some(c.status()).filter(|s| settled(s) > settled(&before))
    });
    let settled_in = filled.elapsed();
    std::fs::write(&gate, b"").unwrap();
    let o = outcomes(&c, &all, &runs);
    let status = c.status();
    let log = worker_log(&c, &w);
    let full = log.matches("the disk of the cache is full").count();
    figures(
        "fault 6: a cache disk filled to 2 MiB free during a prefetch",
        &o,
        1,
        "",
        settled_in,
    );
    eprintln!(
        "fault 6 (prefetch): {} MiB written; prefetch settled {:.1} s after the fill: {} landed, \
         {} declined in all; the disk found full {full} times",
        fill >> 20,
        settled_in.as_secs_f64(),
        status["prefetch"]["landed"],
        status["prefetch"]["failed"]
    );
    assert!(o.lost.is_empty(), "lost: {:?}", o.lost);
    assert!(o.unknown_runs.is_empty(), "{:?}", o.unknown_runs);
    assert!(o.again.is_empty(), "no task ran twice: {:?}", o.again);
    assert_sizes(&c, &all);
    assert!(full >= 1, "W found its disk full and evicted:\n{log}");
    stop_pool(&mut c, &s);
}

/// Two workers have each read four 4 MB files; once both are idle one is released (down to
/// `--min-workers 1`) and hands its files off to the other, every host sending at 16 Mbit/s
/// (about 8 s). Two seconds in, another program fills the receiving worker's disk to 2 MiB
/// free. It evicts to make room, or declines what it cannot keep; the released worker leaves
/// once the receiver is done with each copy, well before
/// `--handoff-time` (60 s), and tasks reading all eight files succeed on the one left, each
/// once, what was not handed off read from storage.
#[test]
fn fault6_a_cache_disk_filled_during_a_hand_off_evicts_or_declines_and_fails_no_task() {
    let _turn = one_at_a_time();
    let Some((s, mut c)) = small_disk_pool("fault 6 (hand-off)", 2, &HANDOFF_POOL) else {
        return;
    };
    let _dump = DumpWorkerLogs::of(&c);
    for i in 1..=2 {
        s.shape(i, "16mbit");
    }
    let runs = c.path("runs");
    let (files, mut all, handing) = two_workers_then_a_hand_off(&c, &runs);
    let releasing = handing
        .split_whitespace()
        .find_map(|f| f.strip_prefix("worker="))
        .unwrap_or_else(|| panic!("no worker in {handing:?}"))
        .to_string();
    let on = hosts_of_jobs(&s);
    let target = connected(&c)
        .into_iter()
        .find(|w| *w != releasing)
        .expect("the worker that stays");
    let target_host: usize = on[&target].trim_start_matches("node").parse().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let filled = Instant::now();
    let fill = s.fill_small_disk(target_host, 2 << 20);
    // (A worker handing off is no longer `connected`: it shows as releasing.)
    poll("the released worker to leave", || {
        dispatcher_logs(&c)
            .lines()
            .any(|l| l.contains("idle worker released") && l.contains(&releasing))
            .then_some(())
    });
    let left = filled.elapsed();
    let handed_off = c.status()["pool"]["handed_off"].as_u64().unwrap_or(0);
    // Every file read again where the worker that stays is.
    let again: Vec<Value> = files
        .iter()
        .enumerate()
        .map(|(k, f)| {
            let mut t = logged_task(
                &format!("a{k}"),
                "wc -c < {inputs[0]}",
                std::slice::from_ref(f),
                &runs,
            );
            t["hint"] = json!({"node": target});
            t
        })
        .collect();
    c.submit(&again);
    all.extend(ids(&again));
    let o = outcomes(&c, &all, &runs);
    let log = worker_log(&c, &target);
    let full = log.matches("the disk of the cache is full").count();
    figures(
        "fault 6: a cache disk filled to 2 MiB free during a hand-off to it",
        &o,
        1,
        "",
        left,
    );
    eprintln!(
        "fault 6 (hand-off): {} MiB written; the released worker left {:.1} s after the fill, \
         {handed_off} of its 4 objects handed off; the disk found full {full} times",
        fill >> 20,
        left.as_secs_f64(),
    );
    assert!(o.lost.is_empty(), "lost: {:?}", o.lost);
    assert!(o.unknown_runs.is_empty(), "{:?}", o.unknown_runs);
    assert!(o.again.is_empty(), "no task ran twice: {:?}", o.again);
    assert!(
        left < Duration::from_secs(30),
        "the released worker left {:.1} s after the fill, not at --handoff-time",
        left.as_secs_f64()
    );
    stop_pool(&mut c, &s);
}

/// W's disk is full with nothing cached to evict (another program filled it before W cached
/// anything) while V has room. Each task sent to W is given back ("no space left on the cache's
/// disk, and nothing left to evict": the worker's fault, not the task's) and waits for V
/// rather than go back to W, free as W is: every task succeeds, on V.
#[test]
fn fault6_a_cache_disk_full_with_nothing_to_evict_sends_its_tasks_elsewhere() {
    let _turn = one_at_a_time();
    let more = ["--min-workers", "2", "--idle-release", "60s"];
    let Some((s, mut c)) = small_disk_pool("fault 6 (full)", 2, &more) else {
        return;
    };
    let _dump = DumpWorkerLogs::of(&c);
    let workers = workers_by_host(&c, &s, 2);
    let (w, v) = (workers["node1"].clone(), workers["node2"].clone());
    let fill = s.fill_small_disk(1, 1 << 20);
    let (_store, store) = store_of(&s, &c, 8);
    let runs = c.path("runs");
    let tasks: Vec<Value> = (0..8)
        .map(|i| size_of(&format!("r{i}"), &format!("{store}/o{i}"), &c, &runs))
        .collect();
    let t = Instant::now();
    c.submit(&tasks);
    let all = ids(&tasks);
    let o = outcomes(&c, &all, &runs);
    let given_back = all
        .iter()
        .flat_map(|id| {
            c.task(id)["attempts"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|a| a["node"] == json!(w))
        .count();
    figures(
        "fault 6: a cache disk full with nothing to evict, another worker with room",
        &o,
        1,
        "",
        t.elapsed(),
    );
    eprintln!(
        "fault 6 (full): {} MiB written; {given_back} attempts given back by W",
        fill >> 20
    );
    assert!(o.lost.is_empty(), "lost: {:?}", o.lost);
    assert!(o.unknown_runs.is_empty(), "{:?}", o.unknown_runs);
    assert!(o.completed_twice.is_empty(), "{:?}", o.completed_twice);
    assert_sizes(&c, &all);
    for id in &all {
        assert_eq!(c.task(id)["node"], json!(v), "{id} ran on V");
    }
    stop_pool(&mut c, &s);
}
