//! Faults across hosts under a real multi-host Slurm (issue 28; `scripts/slurm-hosts.sh`):
//! slurmctld on the head, a slurmd per host namespace, the dispatcher on the head with
//! `--provisioner slurm`, workers in batch jobs on the hosts. Each test grows the pool through
//! Slurm, injects its fault with real processes and real TCP, and fails if a task is lost or
//! runs outside the dispatcher's knowledge:
//!
//! - the pool grows onto several hosts, whose workers advertise their own addresses and fetch
//!   from each other;
//! - fault 3: the dispatcher killed (SIGKILL) inside an `sbatch` of a growing pool while a
//!   released worker hands its cache off, then restarted on its journal;
//! - fault 4: half the worker jobs `scancel`ed at once during a storm of peer transfers;
//! - fault 7: a worker host rebooted (namespace torn down and made again, slurmd restarted, its
//!   disk kept): the worker started there rejoins with its verified cache.
//!
//! Every task logs each run (start and end, attempt, host) to a shared file, so a run the
//! dispatcher does not know of, or a task run twice, is seen. Each test prints one line of
//! figures (`FIGURES | ...`, with `--nocapture`; docs/provisioning.md, "Faults across
//! hosts"). The tests run one at a time (each starts its own Slurm and pool on a 2-core machine).
//! Root only; others print SKIPPED and pass.

mod common;

use common::cluster::{poll, report, traffic};
use common::slurm::logged_slurm_commands;
use common::slurm_hosts::*;
use common::task_runs::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

// ----- the tests -----

#[test]
fn the_pool_grows_through_slurm_onto_several_hosts_whose_workers_fetch_from_each_other() {
    let _turn = one_at_a_time();
    let Some(s) = slurm_or_skip("pool across hosts", 3, 1) else {
        return;
    };
    let t0 = Instant::now();
    let args = pool_args(&s, 3, 1, "diffuse-{request}", &["--idle-release", "20s"]);
    let mut c = head_dispatcher(&s, &strs(&args), &[]);
    let _dump = DumpWorkerLogs::of(&c);
    let runs = c.path("runs");
    let files = data_files(&c, "f", 6, 2 << 20);
    // Phase 1: one file each; the queue grows the pool to three workers, one per host.
    let first: Vec<Value> = files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            logged_task(
                &format!("a{i}"),
                "sleep 2; wc -c < {inputs[0]}",
                std::slice::from_ref(f),
                &runs,
            )
        })
        .collect();
    c.submit(&first);
    let mut all = ids(&first);
    for id in &all {
        c.wait_done(id);
    }
    // Phase 2: every task reads all six files: what its worker lacks comes from its peers.
    let every =
        "cat {inputs[0]} {inputs[1]} {inputs[2]} {inputs[3]} {inputs[4]} {inputs[5]} | sha256sum";
    let second: Vec<Value> = (0..9)
        .map(|i| {
            logged_task(
                &format!("b{i}"),
                &format!("sleep 0.5; {every}"),
                &files,
                &runs,
            )
        })
        .collect();
    c.submit(&second);
    all.extend(ids(&second));
    let o = outcomes(&c, &all, &runs);
    assert!(o.lost.is_empty(), "lost: {:?}", o.lost);
    assert!(
        o.again.is_empty(),
        "no fault, yet tasks ran again: {:?}",
        o.again
    );
    assert!(o.unknown_runs.is_empty(), "{:?}", o.unknown_runs);

    let want = {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        for f in &files {
            h.update(std::fs::read(f.trim_start_matches("file://")).unwrap());
        }
        hex::encode(h.finalize())
    };
    let mut peer_bytes = 0;
    for id in ids(&second) {
        let r = report(&c.task(&id));
        // Its stdout is on its worker's host: the dispatcher fetches it from there.
        let stdout = c
            .http
            .get(format!("{}/v1/tasks/{id}/logs", c.url))
            .bearer_auth(&c.client_token)
            .send()
            .and_then(|r| r.text())
            .unwrap_or_default();
        assert!(
            stdout.starts_with(&want),
            "{id} read every byte right: {stdout:?}"
        );
        peer_bytes += traffic(&r["traffic"])[4];
    }
    // Where each worker ran (Slurm's view) and what it advertised (the dispatcher's).
    let on = hosts_of_jobs(&s);
    let nodes: BTreeSet<&String> = on.values().collect();
    assert!(nodes.len() >= 2, "the pool stayed on one host: {on:?}");
    let peers = advertised_peers(&c);
    assert!(
        !peers.is_empty(),
        "no worker joined:\n{}",
        dispatcher_logs(&c)
    );
    for (worker, url) in &peers {
        let node = on
            .get(worker)
            .unwrap_or_else(|| panic!("{worker} in squeue: {on:?}"));
        let host = s.host_at(url_host(url));
        assert_eq!(
            host.map(|h| &h.node),
            Some(node),
            "{worker} runs on {node} and advertised {url}"
        );
    }
    // Transfers between workers on different hosts, as the dispatcher learned them.
    let links = c.status()["links"].clone();
    let across: Vec<(String, String)> = links
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| {
            Some((
                l["from"].as_str()?.to_string(),
                l["to"].as_str()?.to_string(),
            ))
        })
        .filter(|(f, t)| on.contains_key(f) && on.contains_key(t) && on[f] != on[t])
        .collect();
    assert!(peer_bytes > 0, "phase 2 read nothing from peers");
    assert!(!across.is_empty(), "no transfer between hosts: {links}");
    eprintln!(
        "pool across hosts: {} workers on {:?}, {} MB between peers over {} links, {:.1} s",
        peers.len(),
        nodes,
        peer_bytes >> 20,
        across.len(),
        t0.elapsed().as_secs_f64()
    );
    stop_pool(&mut c, &s);
}

#[test]
fn fault3_a_dispatcher_killed_inside_an_sbatch_during_a_hand_off_adopts_its_jobs_and_loses_no_task()
{
    let _turn = one_at_a_time();
    let Some(s) = slurm_or_skip("fault 3", 4, 1) else {
        return;
    };
    let wrappers = tempfile::tempdir().unwrap();
    // Each sbatch takes 2 s longer than Slurm's: a kill inside one is certain, not lucky.
    let (path, calls) = logged_slurm_commands(wrappers.path(), 2.0);
    let args = pool_args(&s, 4, 1, "diffuse-{request}", &HANDOFF_POOL);
    let mut c = head_dispatcher(&s, &strs(&args), &[("PATH", &path)]);
    let _dump = DumpWorkerLogs::of(&c);
    let jobs_sampled = JobSampler::start(&s.conf);
    // Every host sends at 16 Mbit/s: a hand-off of 16 MB takes about 8 s.
    for i in 1..=4 {
        s.shape(i, "16mbit");
    }
    let runs = c.path("runs");
    let (files, mut all, handing) = two_workers_then_a_hand_off(&c, &runs);
    // Meanwhile the queue grows the pool again, and the dispatcher dies inside its sbatch.
    let second: Vec<Value> = (0..6)
        .map(|k| {
            logged_task(
                &format!("q{k}"),
                "sleep 3; wc -c < {inputs[0]}",
                &[files[k].clone()],
                &runs,
            )
        })
        .collect();
    c.submit(&second);
    all.extend(ids(&second));
    let in_flight = poll("an sbatch of the growing pool under way", || {
        let (started, ended) = (sbatch_names(&calls, "start"), sbatch_names(&calls, "end"));
        (started.len() > ended.len()).then(|| started.last().cloned().unwrap())
    });
    let handed_at_kill = c.status()["pool"]["handed_off"].as_u64().unwrap_or(0);
    let live_at_kill = s.live_jobs("dfs-");
    let connected_at_kill = connected(&c);
    let killed_log = dispatcher_logs(&c);
    let startup = crash_and_restart_dispatcher(&mut c);
    let restarted = Instant::now();
    let releasing = handing
        .split_whitespace()
        .find_map(|f| f.strip_prefix("worker="))
        .unwrap_or_else(|| panic!("no worker in {handing:?}"))
        .to_string();
    assert!(
        !killed_log
            .lines()
            .any(|l| l.contains("idle worker released") && l.contains(&releasing)),
        "the hand-off of {releasing} was over before the kill:\n{killed_log}"
    );
    eprintln!(
        "killed inside the sbatch of {in_flight}, {handed_at_kill} object(s) handed off of \
         ({handing}); live jobs {live_at_kill:?}; connected {connected_at_kill:?}"
    );
    // The restarted dispatcher adopts every job and its worker comes back to it.
    poll("the workers connected at the kill back", || {
        let now = connected(&c);
        connected_at_kill
            .iter()
            .all(|w| now.contains(w))
            .then_some(())
    });
    let rejoined = restarted.elapsed();
    // The job of the sbatch it died in is adopted under its own name, not submitted again.
    poll("the job of the interrupted sbatch adopted", || {
        let log = c.dispatcher.as_ref().unwrap().log_text();
        log.lines()
            .any(|l| l.contains("adopted worker job") && l.contains(&format!("({in_flight})")))
            .then_some(())
    });
    let in_doubt_settled = restarted.elapsed();
    let o = outcomes(&c, &all, &runs);
    let adopted_log = c.dispatcher.as_ref().unwrap().log_text();
    for j in &live_at_kill {
        assert!(
            adopted_log.contains(&format!("adopted worker job {} ", j.id)),
            "job {} ({}) of the first dispatcher adopted:\n{adopted_log}",
            j.id,
            j.name
        );
    }
    poll("the pool shrunk back to --min-workers", || {
        (s.live_jobs("dfs-").len() <= 1).then_some(())
    });
    let max_jobs = jobs_sampled.max();
    drop(jobs_sampled);
    let twice = names_with_two_jobs(&s);
    let mut submitted = sbatch_names(&calls, "start");
    let calls_made = submitted.len();
    submitted.sort();
    submitted.dedup();
    figures(
        "fault 3: dispatcher SIGKILL inside an sbatch during a hand-off",
        &o,
        1,
        "running on a worker when the dispatcher died",
        rejoined,
    );
    eprintln!(
        "fault 3: dispatcher back in {:.1} s, its workers in {:.1} s, the interrupted sbatch's \
         job adopted {:.1} s after the restart; sbatch calls {calls_made} for {} names; most live \
         jobs {max_jobs}; names with two jobs {twice:?}",
        startup.as_secs_f64(),
        rejoined.as_secs_f64(),
        in_doubt_settled.as_secs_f64(),
        submitted.len()
    );
    assert!(o.lost.is_empty(), "lost: {:?}", o.lost);
    assert!(o.unknown_runs.is_empty(), "{:?}", o.unknown_runs);
    assert!(
        max_jobs <= 4,
        "--max-workers 4, yet {max_jobs} jobs at once"
    );
    // Two workers for the first tasks, the one the kill interrupted, one more: the pool at
    // --max-workers until the queue is empty. More would be a worker asked for twice.
    assert!(
        calls_made <= 4,
        "{calls_made} sbatch calls:\n{}",
        std::fs::read_to_string(&calls).unwrap_or_default()
    );
    assert!(
        twice.is_empty() && submitted.len() == calls_made,
        "a request was submitted twice: {twice:?}\n{}",
        std::fs::read_to_string(&calls).unwrap_or_default()
    );
    stop_pool(&mut c, &s);
}

#[test]
fn fault4_half_the_worker_jobs_cancelled_during_a_peer_transfer_storm_fail_no_task() {
    let _turn = one_at_a_time();
    let Some(s) = slurm_or_skip("fault 4", 4, 1) else {
        return;
    };
    let args = pool_args(
        &s,
        4,
        1,
        "diffuse-{request}",
        &["--min-workers", "4", "--idle-release", "60s"],
    );
    let mut c = head_dispatcher(&s, &strs(&args), &[]);
    let _dump = DumpWorkerLogs::of(&c);
    let w = workers_by_host(&c, &s, 4);
    let (w1, w2, w3) = (&w["node1"], &w["node2"], &w["node3"]);
    // On node1 and node2: four objects of 16 MiB (read in chunks from every holder at once) and
    // four of 4 MiB (read whole from one holder).
    let mut files = data_files(&c, "s", 4, 16 << 20);
    files.extend(data_files(&c, "m", 4, 4 << 20));
    let list = c.path("list");
    std::fs::write(&list, files.join("\n")).unwrap();
    let out = common::run_diffuse(
        &[
            "stage",
            list.to_str().unwrap(),
            "--to",
            &format!("{w1},{w2}"),
        ]
        .into_iter()
        .chain(["--json", "--dispatcher", &c.url])
        .collect::<Vec<_>>(),
        None,
        &[("DIFFUSE_CLIENT_TOKEN", &c.client_token)],
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(0), "stage: {}\n{}", out.stdout, out.stderr);
    // Each host sends at 80 Mbit/s; the storm: 32 readers of the eight, four at a time.
    for i in 1..=4 {
        s.shape(i, "80mbit");
    }
    let runs = c.path("runs");
    let storm: Vec<Value> = (0..32)
        .map(|k| {
            logged_task(
                &format!("r{k}"),
                "sleep 0.3; sha256sum < {inputs[0]}",
                &[files[k % 8].clone()],
                &runs,
            )
        })
        .collect();
    let storage_before = c.status()["traffic"]["bytes_storage"].as_u64().unwrap();
    c.submit(&storm);
    let all = ids(&storm);
    // While node4 reads from its peers (a task of its own staging, not yet started), half the
    // jobs go at once: a source (node1) and another reader (node3).
    let w4 = &w["node4"];
    poll("a reader on node4 fetching from its peers", || {
        let started = runs_of(&runs);
        c.list_tasks(Some("running"))
            .iter()
            .any(|t| {
                t["node"] == w4.as_str()
                    && t["id"].as_str().is_some_and(|id| !started.contains_key(id))
            })
            .then_some(())
    });
    let on = hosts_of_jobs(&s);
    let job_of = |worker: &str| {
        s.jobs(worker)
            .into_iter()
            .find(|j| j.name == worker && j.is_live())
            .unwrap_or_else(|| panic!("{worker}'s job: {on:?}"))
            .id
    };
    let cancelled = [job_of(w1), job_of(w3)];
    let at = Instant::now();
    s.cmd("scancel", &[&cancelled[0], &cancelled[1]]);
    let o = outcomes(&c, &all, &runs);
    let recovered = at.elapsed();
    let storage = c.status()["traffic"]["bytes_storage"].as_u64().unwrap() - storage_before;
    // What the readers said of their sources: a source that went was dropped, the rest read on.
    let url_of = |worker: &str| {
        advertised_peers(&c)
            .into_iter()
            .find(|(w, _)| w == worker)
            .map(|(_, u)| u)
            .unwrap()
    };
    let (gone_source, survivor) = (url_of(w1), url_of(w2));
    let readers_logs: String = w.values().map(|worker| worker_log(&c, worker)).collect();
    let moved: Vec<&str> = readers_logs
        .lines()
        .filter(|l| l.contains(&format!("{gone_source} ")) && l.contains("dropped"))
        .collect();
    let to_storage: Vec<&str> = readers_logs
        .lines()
        .filter(|l| l.contains("reading from storage"))
        .collect();
    let why = format!(
        "running on {w1} or {w3} when their jobs were cancelled ({} of them)",
        o.again
            .iter()
            .filter(|(_, r)| r
                .first()
                .is_some_and(|r| r.host == "node1" || r.host == "node3"))
            .count()
    );
    figures(
        "fault 4: half the worker jobs scancelled in a peer storm",
        &o,
        2,
        &why,
        recovered,
    );
    eprintln!(
        "fault 4: {} MB read from storage after the cancel; {} transfer(s) dropped {gone_source} \
         and read on from the others (e.g. {:?}); survivor {survivor}; {} peer read(s) fell back \
         to storage: {to_storage:?}",
        storage >> 20,
        moved.len(),
        moved.first(),
        to_storage.len()
    );
    assert!(o.lost.is_empty(), "tasks failed or lost: {:?}", o.lost);
    assert!(o.unknown_runs.is_empty(), "{:?}", o.unknown_runs);
    for (id, r) in &o.again {
        assert!(
            r[..r.len() - 1]
                .iter()
                .all(|r| r.host == "node1" || r.host == "node3"),
            "{id} ran again though its host was not cancelled: {r:?}"
        );
    }
    assert_eq!(
        storage, 0,
        "every object was still on a worker, yet storage was read: the transfers did not move to \
         the remaining sources"
    );
    stop_pool(&mut c, &s);
}

/// Flip one byte of the cached copy of `uri` under `cache` (its data file; the modification time
/// kept, as a write lost in a crash would leave it): only a checksum can tell.
fn tear_cached_copy(cache: &Path, uri: &str) {
    let objects = cache.join("objects");
    for e in std::fs::read_dir(&objects).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "meta") {
            let meta: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            if meta["uri"] == uri {
                let data = p.with_extension("");
                let mtime = std::fs::metadata(&data).unwrap().modified().unwrap();
                let mut bytes = std::fs::read(&data).unwrap();
                bytes[1000] ^= 0xff;
                std::fs::write(&data, bytes).unwrap();
                let f = std::fs::File::options().write(true).open(&data).unwrap();
                f.set_modified(mtime).unwrap();
                return;
            }
        }
    }
    panic!("no cached copy of {uri} in {}", objects.display());
}

#[test]
fn fault7_a_rebooted_worker_host_rejoins_with_its_verified_cache() {
    let _turn = one_at_a_time();
    let Some(s) = slurm_or_skip("fault 7", 2, 1) else {
        return;
    };
    // One cache directory per host (not per job), as on a cluster's local disk.
    let args = pool_args(
        &s,
        2,
        1,
        "cache",
        &[
            "--min-workers",
            "2",
            "--idle-release",
            "60s",
            "--lost-grace",
            "5s",
        ],
    );
    let mut c = head_dispatcher(&s, &strs(&args), &[]);
    let _dump = DumpWorkerLogs::of(&c);
    let w = workers_by_host(&c, &s, 2);
    let (w1, w2) = (w["node1"].clone(), w["node2"].clone());
    let runs = c.path("runs");
    let files = data_files(&c, "k", 8, 2 << 20);
    let on = |worker: &str| json!({"node": worker, "strict": true});
    // node1 caches k0-k3, node2 k4-k7.
    let mut first: Vec<Value> = Vec::new();
    for (k, f) in files.iter().enumerate() {
        let mut t = logged_task(
            &format!("c{k}"),
            "wc -c < {inputs[0]}",
            std::slice::from_ref(f),
            &runs,
        );
        t["hint"] = on(if k < 4 { &w1 } else { &w2 });
        first.push(t);
    }
    c.submit(&first);
    let mut all = ids(&first);
    for id in &all {
        c.wait_done(id);
    }
    // A task runs on each host when node1 loses power.
    let long: Vec<Value> = (0..2)
        .map(|k| logged_task(&format!("l{k}"), "sleep 6", &[], &runs))
        .collect();
    c.submit(&long);
    all.extend(ids(&long));
    poll("both long tasks running", || {
        let r = runs_of(&runs);
        (r.contains_key("l0") && r.contains_key("l1")).then_some(())
    });
    let crashed = Instant::now();
    s.crash(1);
    // A write the crash lost: k0's bytes on node1's disk, its size and time unchanged.
    tear_cached_copy(&s.disk(1).join("cache"), &files[0]);
    let noticed = s.wait_node(1, "down");
    s.boot(1);
    let booted = Instant::now();
    // The pool's replacement job runs on node1 (node2 is busy with its worker).
    let w3 = poll("a new worker on node1", || {
        let on = hosts_of_jobs(&s);
        connected(&c)
            .into_iter()
            .find(|n| *n != w1 && *n != w2 && on.get(n).is_some_and(|h| h == "node1"))
    });
    let rejoined = booted.elapsed();
    let back = crashed.elapsed();
    let log = worker_log(&c, &w3);
    assert!(
        log.contains("verifying every cached object"),
        "{w3} verified its cache after the unclean end:\n{log}"
    );
    // Its Hello listed what node1's disk still holds, and not the torn copy.
    for (k, f) in files.iter().enumerate().take(4) {
        let holders = c.object(f)["nodes"].clone();
        let held = holders
            .as_array()
            .is_some_and(|h| h.iter().any(|n| n == w3.as_str()));
        assert_eq!(held, k != 0, "k{k} on {w3}: {holders}");
    }
    // Tasks reading node1's files there: three hits, the torn one read again from storage.
    let mut again: Vec<Value> = Vec::new();
    for (k, f) in files.iter().enumerate().take(4) {
        let mut t = logged_task(
            &format!("d{k}"),
            "sha256sum < {inputs[0]}",
            std::slice::from_ref(f),
            &runs,
        );
        t["hint"] = on(&w3);
        again.push(t);
    }
    c.submit(&again);
    all.extend(ids(&again));
    let o = outcomes(&c, &all, &runs);
    for k in 0..4 {
        let r = report(&c.task(&format!("d{k}")));
        let [local, _, storage, ..] = traffic(&r["traffic"]);
        assert_eq!(
            (local, storage),
            if k == 0 { (0, 1) } else { (1, 0) },
            "d{k} on {w3}: {r}"
        );
    }
    let why = format!("running on {w1} when node1 lost power");
    figures(
        "fault 7: a worker host rebooted, its disk kept",
        &o,
        1,
        &why,
        back,
    );
    eprintln!(
        "fault 7: node1 seen down by Slurm {:.1} s after the crash; the new worker joined {:.1} s \
         after the boot, with 3 of its 4 objects (the torn one dropped)",
        noticed.as_secs_f64(),
        rejoined.as_secs_f64()
    );
    assert!(o.lost.is_empty(), "lost: {:?}", o.lost);
    assert!(o.unknown_runs.is_empty(), "{:?}", o.unknown_runs);
    assert!(o.completed_twice.is_empty(), "{:?}", o.completed_twice);
    for (id, r) in &o.again {
        assert!(
            r[..r.len() - 1].iter().all(|r| r.host == "node1"),
            "{id} ran again though it did not run on node1 at the crash: {r:?}"
        );
    }
    assert!(
        names_with_two_jobs(&s).is_empty(),
        "{:?}",
        names_with_two_jobs(&s)
    );
    stop_pool(&mut c, &s);
}
