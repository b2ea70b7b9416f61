//! The failure tests of `../shared/design/reliability.md`, against real processes: workers and
//! dispatchers killed with SIGKILL at random moments, a worker frozen past its heartbeat
//! timeout, a task that kills its own worker, cached bytes corrupted, a serving peer killed
//! mid-transfer, hostile paths. Each test names the check it shows.
//!
//! Random moments come from a randomly seeded generator; the seed is printed, so a failure can be
//! told apart from flakiness by reading the log. No assertion is about timing.

mod common;

use common::cluster::*;
use common::run_diffuse;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// A small xorshift generator, seeded from the standard library's random keys.
struct Rng(u64);

impl Rng {
    fn new(what: &str) -> Rng {
        let seed = random_u64() | 1;
        eprintln!("{what}: seed {seed:#x}");
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..hi` milliseconds.
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo))
    }
}

/// Every task in `state`, by id.
fn tasks_in(c: &Cluster, state: &str) -> HashMap<String, Value> {
    c.list_tasks(Some(state))
        .into_iter()
        .map(|t| (t["id"].as_str().expect("id").to_string(), t))
        .collect()
}

/// Wait until nothing is queued or running and `n` tasks have ended.
#[track_caller]
fn wait_all_ended(c: &Cluster, n: u64) -> Value {
    poll(&format!("{n} tasks to end"), || {
        let s = c.status();
        let ended = ["succeeded", "failed", "cancelled"]
            .iter()
            .map(|k| s[k].as_u64().unwrap_or(0))
            .sum::<u64>();
        (ended == n && s["queued"] == 0 && s["running"] == 0).then_some(s)
    })
}

// ----- check 1: workers killed at random moments -----

#[test]
fn workers_killed_at_random_moments_lose_no_task_and_run_none_twice_to_the_record() {
    let mut rng = Rng::new("worker kills");
    let mut c = Cluster::start(&[]);
    // Bad luck must not fail a task here: this test is about losing none.
    c.dispatcher_args = vec!["--crash-limit".into(), "1000".into()];
    c.restart_dispatcher();
    let names = ["A", "B", "C"];
    for name in names {
        c.worker(name, 2, "10MB");
    }
    c.wait_workers(3);
    let files: Vec<(String, usize)> = (0..20)
        .map(|i| {
            let size = 10_000 + i * 1_000;
            let p = c.data(&format!("f{i}.bin"), &random_bytes(size));
            (file_uri(&p), size)
        })
        .collect();
    let n = 2000;
    let tasks: Vec<Value> = (0..n)
        .map(|i| {
            let (uri, _) = &files[i % files.len()];
            json!({"id": format!("t{i}"), "cmd": "sleep 0.01; wc -c < {inputs[0]}", "inputs": [uri]})
        })
        .collect();
    c.submit(&tasks);

    // Kill a random worker every 0.3-1.2 s while tasks run, and start it again on its cache.
    let mut kills_while_running = 0;
    let start = Instant::now();
    loop {
        std::thread::sleep(rng.millis(300, 1200));
        let s = c.status();
        if s["succeeded"].as_u64() == Some(n as u64) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "no end in sight: {s}"
        );
        if s["running"].as_u64().unwrap_or(0) > 0 {
            kills_while_running += 1;
        }
        let i = (rng.next() % c.workers.len() as u64) as usize;
        let name = c.workers[i].name.trim_start_matches("worker ").to_string();
        c.kill_worker(i);
        c.worker(&name, 2, "10MB");
    }
    assert!(
        kills_while_running >= 3,
        "only {kills_while_running} kills hit running tasks"
    );
    c.wait_workers(3);
    let s = wait_all_ended(&c, n as u64);
    assert_eq!(s["succeeded"], n as u64, "{s}");
    assert_eq!(s["failed"], 0, "{s}");
    assert_eq!(s["busy_slots"], 0, "no slot stays busy: {s}");
    let done = tasks_in(&c, "succeeded");
    assert_eq!(done.len(), n, "every task id has a successful result");
    for i in 0..n {
        let t = &done[&format!("t{i}")];
        let r = report(t);
        assert_eq!(
            stdout_of(&r).trim(),
            files[i % files.len()].1.to_string(),
            "t{i}: {t}"
        );
    }
}

// ----- check 2: the dispatcher killed at random moments -----

#[test]
fn dispatcher_killed_at_random_moments_keeps_every_acknowledged_task_and_each_outcome() {
    let mut rng = Rng::new("dispatcher kills");
    let mut c = Cluster::start(&[]);
    c.worker("A", 2, "10MB");
    c.worker("B", 2, "10MB");
    c.wait_workers(2);
    let mut acknowledged: HashSet<String> = HashSet::new();
    let mut seen_ended: HashMap<String, Value> = HashMap::new();
    let mut next = 0;
    for trial in 0..10 {
        // Submit batches until the kill; a batch is acknowledged only by a 200.
        let kill_at = Instant::now() + rng.millis(200, 900);
        while Instant::now() < kill_at {
            std::thread::sleep(rng.millis(10, 50));
            let batch: Vec<Value> = (next..next + 20)
                .map(|i| json!({"id": format!("t{i}"), "cmd": ["sleep", "0.005"]}))
                .collect();
            next += 20;
            let body: String = batch.iter().map(|t| format!("{t}\n")).collect();
            let (code, v) = c.post_tasks(&body, Some(&c.client_token));
            assert_eq!(code, 200, "trial {trial}: {v}");
            acknowledged.extend(batch.iter().map(|t| t["id"].as_str().unwrap().to_string()));
        }
        for state in ["succeeded", "failed"] {
            seen_ended.extend(tasks_in(&c, state));
        }
        c.crash_dispatcher_keep_workers();
        // Every acknowledged task is there; whatever was seen ended has the same outcome.
        let all: HashMap<String, Value> = ["queued", "running", "succeeded", "failed"]
            .iter()
            .flat_map(|s| tasks_in(&c, s))
            .collect();
        for id in &acknowledged {
            assert!(
                all.contains_key(id),
                "trial {trial}: acknowledged {id} lost"
            );
        }
        for (id, before) in &seen_ended {
            assert_eq!(
                all[id]["outcome"], before["outcome"],
                "trial {trial}: {id} was reported ended and changed after the restart"
            );
        }
    }
    // The workers come back by themselves and everything finishes, once.
    c.wait_workers(2);
    let s = wait_all_ended(&c, acknowledged.len() as u64);
    assert_eq!(s["submitted"], acknowledged.len() as u64, "{s}");
    assert_eq!(s["succeeded"], acknowledged.len() as u64, "{s}");
    assert_eq!(s["busy_slots"], 0, "{s}");
}

// ----- check 4: a task that kills its worker -----

#[test]
fn a_task_that_kills_its_worker_fails_after_exactly_the_crash_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runs = dir.path().join("poison-runs");
    let mut tasks: Vec<Value> = (0..30)
        .map(|i| json!({"id": format!("ok{i}"), "cmd": "sleep 0.05"}))
        .collect();
    // `$PPID` of `sh -c` is the worker itself.
    tasks.insert(
        3,
        json!({"id": "poison", "cmd": format!("echo run >> {}; kill -9 $PPID", runs.display())}),
    );
    let file = dir.path().join("tasks.jsonl");
    let text: String = tasks.iter().map(|t| format!("{t}\n")).collect();
    std::fs::write(&file, text).expect("task file");
    let run_dir = dir.path().join("run");
    let out = run_diffuse(
        &[
            "run",
            file.to_str().unwrap(),
            "--workers",
            "2",
            // One slot each: a task sharing a worker with the poison would lose that worker
            // too, and count a crash of its own (the dispatcher cannot tell which task killed
            // it); three such coincidences would fail it.
            "--slots-per-worker",
            "1",
            "--crash-limit",
            "3",
            "--run-dir",
            run_dir.to_str().unwrap(),
            "--json",
        ],
        None,
        &[],
        DEADLINE * 2,
    );
    assert_eq!(
        out.code,
        Some(1),
        "a failed task: exit 1; stderr:\n{}",
        out.stderr
    );
    let summary: Value = serde_json::from_str(&out.stdout).expect("summary JSON");
    assert_eq!(summary["tasks_ok"], 30, "{summary}");
    assert_eq!(summary["tasks_failed"], 1, "{summary}");
    let rows = results(&run_dir);
    let poison = result_of(&rows, "poison");
    assert_eq!(poison["state"], "failed", "{poison}");
    assert_eq!(poison["error"], "its worker was lost 3 times", "{poison}");
    let started = std::fs::read_to_string(&runs).expect("poison runs");
    assert_eq!(started.lines().count(), 3, "it ran exactly 3 times");
}

// ----- check 8: a worker cut off longer than the heartbeat timeout -----

#[test]
fn a_worker_frozen_past_its_heartbeat_timeout_loses_its_task_and_its_late_result_is_refused() {
    let mut c = Cluster::start(&[]);
    c.dispatcher_args = vec!["--heartbeat-timeout".into(), "2".into()];
    c.restart_dispatcher();
    c.worker("A", 1, "10MB");
    c.wait_workers(1);
    let gate = c.path("gate");
    c.submit(&[gated_task("t1", &gate)]);
    let t = c.wait_state("t1", "running");
    assert_eq!(t["node"], "A", "{t}");
    assert_eq!(t["attempt"], 1, "{t}");

    // Freeze A (its task's process keeps running): the dispatcher gives it up.
    c.signal_worker(0, rustix::process::Signal::STOP);
    poll("A to be given up", || {
        (c.status()["workers"] == 0).then_some(())
    });
    assert_eq!(c.task("t1")["state"], "queued");
    c.worker("B", 1, "10MB");
    let t = c.wait_state("t1", "running");
    assert_eq!(
        (t["node"].as_str(), t["attempt"].as_u64()),
        (Some("B"), Some(2))
    );

    // Both copies finish; A wakes up with a result for attempt 1.
    std::fs::write(&gate, b"").expect("open the gate");
    let (t, _) = c.wait_succeeded("t1");
    assert_eq!(
        (t["node"].as_str(), t["attempt"].as_u64()),
        (Some("B"), Some(2)),
        "{t}"
    );
    c.signal_worker(0, rustix::process::Signal::CONT);
    poll("A to connect again", || {
        (c.status()["workers"] == 2).then_some(())
    });
    let log = || c.dispatcher.as_ref().expect("dispatcher").log_text();
    poll("A's late result to be refused", || {
        log()
            .lines()
            .any(|l| {
                l.contains("stale result refused")
                    && l.contains("task=t1")
                    && l.contains("attempt=1")
            })
            .then_some(())
    });
    let (t, _) = c.wait_succeeded("t1");
    assert_eq!(
        (t["node"].as_str(), t["attempt"].as_u64()),
        (Some("B"), Some(2)),
        "{t}"
    );
    let s = c.status();
    assert_eq!(
        (s["succeeded"].as_u64(), s["submitted"].as_u64()),
        (Some(1), Some(1)),
        "{s}"
    );
    assert_eq!(s["busy_slots"], 0, "{s}");
}

// ----- check 5: corrupted cached bytes, a serving peer killed mid-transfer -----

/// The path of `uri`'s data file in worker `name`'s cache (the harness's `<tmp>/w<name>`).
fn cached_file(c: &Cluster, name: &str, uri: &str) -> std::path::PathBuf {
    let key = diffuse_runtime::cache_dir::CacheDir::key(uri);
    c.path(&format!("w{name}/objects/{key}"))
}

/// Flip the byte at `offset` of a (read-only) cached file. With `silently`, the modification
/// time is put back, as with corruption the file system did not see.
fn flip(path: &std::path::Path, offset: usize, silently: bool) {
    use std::os::unix::fs::PermissionsExt;
    let md = std::fs::metadata(path).expect("cached file");
    let mtime = md.modified().expect("mtime");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let mut b = std::fs::read(path).expect("read");
    b[offset] ^= 0x5a;
    std::fs::write(path, &b).expect("write");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open");
    let when = if silently {
        mtime
    } else {
        // A real write: a new modification time (set explicitly, the clock's tick is coarse).
        mtime + Duration::from_secs(1)
    };
    f.set_modified(when).expect("set mtime");
}

fn md5_task(id: &str, uri: &str) -> Value {
    json!({"id": id, "cmd": ["md5sum", "{inputs[0]}"], "inputs": [uri]})
}

/// The md5 digest at the start of a task's stdout.
#[track_caller]
fn md5_of(report: &Value) -> String {
    stdout_of(report)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

fn md5_file(path: &std::path::Path) -> String {
    let out = std::process::Command::new("md5sum")
        .arg(path)
        .output()
        .expect("md5sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_corrupted_cached_object_is_caught_at_local_use_and_at_a_peer_fetch_and_its_holder_drops_it() {
    let mut c = Cluster::start(&[]);
    c.worker("A", 1, "100MB");
    c.wait_workers(1);
    let size = 1 << 20;
    let x = c.data("x.bin", &random_bytes(size));
    let (uri, reference) = (file_uri(&x), md5_file(&x));
    let size = size as u64;
    c.submit(&[md5_task("t1", &uri)]);
    c.wait_succeeded("t1");

    // Local use: A's copy was written to. A checks it against its checksum, drops it, and
    // reads storage again.
    flip(&cached_file(&c, "A", &uri), 1000, false);
    c.submit(&[md5_task("t2", &uri)]);
    let (_, r2) = c.wait_succeeded("t2");
    assert_eq!(md5_of(&r2), reference, "{r2}");
    assert_eq!(traffic(&r2["traffic"]), [0, 0, 1, 0, 0, size], "{r2}");

    // A peer fetch: A's copy rots silently (same size and time; A cannot tell without reading
    // it all). A is kept busy; B fetches from A, finds the checksum wrong, and reads storage.
    flip(&cached_file(&c, "A", &uri), 2000, true);
    let gate = c.path("gate");
    c.submit(&[gated_task("busy", &gate)]);
    c.wait_state("busy", "running");
    c.worker("B", 1, "100MB");
    c.wait_workers(2);
    c.submit(&[md5_task("t3", &uri)]);
    let (t3, r3) = c.wait_succeeded("t3");
    assert_eq!(t3["node"], "B", "{t3}");
    assert_eq!(md5_of(&r3), reference, "{r3}");
    assert_eq!(
        traffic(&r3["traffic"]),
        [0, 0, 1, 0, 0, size],
        "the corrupt peer copy was refused: {r3}"
    );
    assert_eq!(md5_file(&cached_file(&c, "B", &uri)), reference);
    // B reported the bad copy; the dispatcher had A hash it again, and A dropped it: only B's
    // copy is left to read.
    let rotten = cached_file(&c, "A", &uri);
    poll("A to drop its bad copy", || {
        (!rotten.exists()).then_some(())
    });
    poll("the dispatcher to forget A's copy", || {
        (c.object(&uri)["nodes"] == serde_json::json!(["B"])).then_some(())
    });
    std::fs::write(&gate, b"").expect("open the gate");
    c.wait_succeeded("busy");
}

/// Two 1 MiB objects, each cached on A and on B, and one copy of each rotten (x on A, y on B,
/// size and time kept). C reads both: whichever holder it is sent to first, one of its two
/// reads meets a rotten copy, refuses it, and reads that object from the other holder, not
/// from storage. (Before, an object under the multi-source size fell back to storage at the
/// first failed peer read.)
#[test]
fn a_small_object_whose_peer_copy_fails_is_read_from_another_holder_not_from_storage() {
    let mut c = Cluster::start(&[]);
    for w in ["A", "B"] {
        c.worker(w, 1, "100MB");
    }
    c.wait_workers(2);
    let size = 1 << 20;
    let (x, y) = (
        c.data("x.bin", &random_bytes(size)),
        c.data("y.bin", &random_bytes(size)),
    );
    let (ux, uy) = (file_uri(&x), file_uri(&y));
    for w in ["A", "B"] {
        let id = format!("cache-{w}");
        c.submit(&[
            json!({"id": id, "cmd": "cat {inputs[0]} {inputs[1]} > /dev/null",
                          "inputs": [ux, uy], "hint": {"node": w, "strict": true}}),
        ]);
        c.wait_succeeded(&id);
    }
    flip(&cached_file(&c, "A", &ux), 1000, true);
    flip(&cached_file(&c, "B", &uy), 1000, true);
    c.worker("C", 1, "100MB");
    c.wait_workers(3);
    c.submit(&[
        json!({"id": "read", "cmd": "cat {inputs[0]} {inputs[1]} > /dev/null",
                      "inputs": [ux, uy], "hint": {"node": "C", "strict": true}}),
    ]);
    let (_, r) = c.wait_succeeded("read");
    let [local, peer, storage, ..] = traffic(&r["traffic"]);
    assert_eq!(
        (local, peer, storage),
        (0, 2, 0),
        "both read from peers, a rotten copy refused: {r}"
    );
    assert_eq!(md5_file(&cached_file(&c, "C", &ux)), md5_file(&x));
    assert_eq!(md5_file(&cached_file(&c, "C", &uy)), md5_file(&y));
    let log = c.workers[2].log_text();
    assert!(
        log.contains("peer fetch from"),
        "C met a rotten copy first:\n{log}"
    );
}

#[test]
fn a_serving_peer_killed_mid_transfer_leaves_no_partial_object() {
    let mut c = Cluster::start(&[]);
    c.worker("A", 1, "1GB");
    c.wait_workers(1);
    let size = 200 << 20;
    let x = c.data("x.bin", &random_bytes(size));
    let (uri, reference) = (file_uri(&x), md5_file(&x));
    c.submit(&[md5_task("t1", &uri)]);
    c.wait_succeeded("t1");
    let gate = c.path("gate");
    c.submit(&[gated_task("busy", &gate)]);
    c.wait_state("busy", "running");
    c.worker("B", 1, "1GB");
    c.wait_workers(2);
    c.submit(&[md5_task("t2", &uri)]);

    // Kill A as soon as B's download from it has begun.
    let tmp = c.path("wB/tmp");
    poll("B's download from A to start", || {
        std::fs::read_dir(&tmp)
            .ok()?
            .filter_map(Result::ok)
            .any(|e| e.metadata().is_ok_and(|m| m.len() > 0))
            .then_some(())
    });
    c.kill_worker(0);
    let (t2, r2) = c.wait_succeeded("t2");
    assert_eq!(t2["node"], "B", "{t2}");
    assert_eq!(md5_of(&r2), reference, "{r2}");
    let tr = traffic(&r2["traffic"]);
    assert_eq!(
        (tr[1], tr[2]),
        (0, 1),
        "the broken peer transfer fell back to storage: {r2}"
    );
    // Only whole, verified objects are in B's cache; nothing partial is left in its tmp.
    assert_eq!(md5_file(&cached_file(&c, "B", &uri)), reference);
    let objects: Vec<String> = std::fs::read_dir(c.path("wB/objects"))
        .expect("objects")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    assert_eq!(objects.len(), 2, "one object and its meta: {objects:?}");
    let left: Vec<_> = std::fs::read_dir(&tmp).expect("tmp").collect();
    assert!(left.is_empty(), "partial files left: {left:?}");
}

// ----- check 9: hostile paths -----

#[test]
fn hostile_paths_are_refused_and_nothing_outside_the_cache_is_served() {
    let mut c = Cluster::start(&[]);
    let peer = c.worker("A", 1, "10MB");
    c.wait_workers(1);
    let x = c.data("x.bin", b"cached bytes");
    c.submit(&[md5_task("t1", &file_uri(&x))]);
    c.wait_succeeded("t1");
    // A secret outside the cache, and a symlink to it planted in A's objects under a valid key.
    let secret = c.data("secret.txt", b"do not serve me");
    let planted = "b".repeat(64);
    std::os::unix::fs::symlink(&secret, c.path(&format!("wA/objects/{planted}")))
        .expect("plant symlink");
    let hostile = [
        "..%2f..%2f..%2fetc%2fpasswd",
        "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "%252e%252e%252fetc%252fpasswd",
        "%2fetc%2fpasswd",
        "..%5c..%5cetc%5cpasswd",
        "abc%00def",
        &format!("{}%00", "a".repeat(64)),
        &planted,
        "..",
        ".",
    ];
    for key in hostile {
        let r = c
            .http
            .get(format!("{peer}/v1/cache/{key}"))
            .bearer_auth(&c.worker_token)
            .send()
            .expect("GET");
        let code = r.status().as_u16();
        let body = r.text().unwrap_or_default();
        assert!((400..500).contains(&code), "{key}: {code} {body}");
        assert!(
            !body.contains("do not serve") && !body.contains("root:"),
            "{key}: {body}"
        );
    }
    for id in ["..%2f..%2fetc%2fpasswd", "%2e%2e", "a%00b"] {
        let r = c
            .http
            .get(format!("{}/v1/tasks/{id}", c.url))
            .bearer_auth(&c.client_token)
            .send()
            .expect("GET");
        assert_eq!(r.status().as_u16(), 404, "task {id}");
    }
    // A task id made of path syntax names a directory under the worker's work directory, and
    // log files under its logs directory, only.
    let id = "../../../escape/..";
    c.submit(&[json!({"id": id, "cmd": "echo hi", "inputs": [file_uri(&x)]})]);
    let t = poll("the task with a path for an id to succeed", || {
        tasks_in(&c, "succeeded").remove(id)
    });
    let r = report(&t);
    let out = std::path::PathBuf::from(r["stdout"].as_str().expect("stdout path"));
    let logs = std::fs::canonicalize(c.path("wA/logs")).expect("logs dir");
    let dir = std::fs::canonicalize(out.parent().expect("log dir")).expect("log dir exists");
    assert_eq!(dir, logs, "{} is not in {}", out.display(), logs.display());
    assert_eq!(std::fs::read_to_string(&out).expect("stdout kept"), "hi\n");
    let work = c.path("wA/work");
    assert!(
        std::fs::read_dir(&work)
            .expect("work dir")
            .all(|e| e.expect("entry").file_name() == ".functions"),
        "the task's directory under {} is removed once it ended",
        work.display()
    );
    assert!(!c.path("escape").exists());
}

// ----- check 3: a torn or damaged journal -----

#[test]
fn a_torn_journal_tail_is_dropped_and_a_damaged_record_stops_start_up() {
    let mut c = Cluster::start(&[]);
    let batch = |from: usize| -> Vec<Value> {
        (from..from + 50)
            .map(|i| json!({"id": format!("t{i}"), "cmd": ["echo", format!("marker-{i}")]}))
            .collect()
    };
    c.submit(&batch(0));
    c.submit(&batch(50));
    let journal = c.path("journal.sqlite");
    let wal = c.path("journal.sqlite-wal");
    let kill = |c: &mut Cluster| {
        let d = c.dispatcher.as_mut().expect("dispatcher");
        let _ = d.child.kill();
        let _ = d.child.wait();
    };
    kill(&mut c);

    // The second batch's commit frame is torn and garbage follows: it is dropped, the first
    // batch is whole.
    let mut bytes = std::fs::read(&wal).expect("WAL after kill -9");
    assert!(bytes.len() > 4096, "the batches are in the WAL");
    bytes.truncate(bytes.len() - 100);
    bytes.extend(random_bytes(3000));
    std::fs::write(&wal, &bytes).expect("tear the WAL");
    c.spawn_dispatcher();
    let s = c.status();
    assert_eq!(s["submitted"], 50, "only the torn batch is gone: {s}");
    let queued = tasks_in(&c, "queued");
    assert!((0..50).all(|i| queued.contains_key(&format!("t{i}"))));
    kill(&mut c);

    // A flipped bit inside a committed record (checkpointed into the main file): start-up stops
    // and says which record.
    let py = format!(
        "import sqlite3; c = sqlite3.connect({:?}); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()",
        journal.display().to_string()
    );
    let st = std::process::Command::new("python3")
        .args(["-c", &py])
        .status()
        .expect("python3");
    assert!(st.success(), "checkpoint");
    let mut db = std::fs::read(&journal).expect("journal");
    // Every copy: a page split leaves stale cell bytes in free space too.
    let at: Vec<usize> = db
        .windows(9)
        .enumerate()
        .filter(|(_, w)| *w == b"marker-17")
        .map(|(i, _)| i)
        .collect();
    assert!(!at.is_empty(), "the record is in the main file");
    for i in at {
        db[i + 8] ^= 0x01; // "marker-17" -> "marker-16"
    }
    std::fs::write(&journal, &db).expect("flip");
    let out = run_diffuse(
        &[
            "dispatcher",
            "--listen",
            "127.0.0.1:0",
            "--journal",
            journal.to_str().unwrap(),
        ],
        None,
        &[
            ("DIFFUSE_CLIENT_TOKEN", c.client_token.as_str()),
            ("DIFFUSE_WORKER_TOKEN", c.worker_token.as_str()),
        ],
        DEADLINE,
    );
    assert_ne!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("t17") && out.stderr.contains("does not match its checksum"),
        "{}",
        out.stderr
    );
}

// ----- check 7: inputs totalling 10x the cache quota -----

/// Bytes of the data files in a cache directory: `objects/` (not the metas) and `tmp/`.
fn cache_bytes(cache: &std::path::Path) -> u64 {
    ["objects", "tmp"]
        .iter()
        .filter_map(|d| std::fs::read_dir(cache.join(d)).ok())
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().ends_with(".meta"))
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

#[test]
fn inputs_ten_times_the_quota_fail_no_task_and_stay_within_quota_plus_one_object() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("data dir");
    let (quota, object) = (1_000_000u64, 250_000usize);
    let files: Vec<(String, String)> = (0..40)
        .map(|i| {
            let p = data.join(format!("f{i}.bin"));
            std::fs::write(&p, random_bytes(object)).expect("data");
            (file_uri(&p), md5_file(&p))
        })
        .collect();
    // Each file read twice, in two passes: 20 MB of reads through a 1 MB cache.
    let tasks: String = (0..80)
        .map(|i| format!("{}\n", md5_task(&format!("t{i}"), &files[i % 40].0)))
        .collect();
    let file = dir.path().join("tasks.jsonl");
    std::fs::write(&file, tasks).expect("task file");
    let run_dir = dir.path().join("run");
    let caches = dir.path().join("caches");
    let cache = caches.join("worker-0");

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (stop, cache) = (stop.clone(), cache.clone());
        std::thread::spawn(move || {
            let (mut peak, mut samples) = (0, 0);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(cache_bytes(&cache));
                samples += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            (peak, samples)
        })
    };
    let out = run_diffuse(
        &[
            "run",
            file.to_str().unwrap(),
            "--workers",
            "1",
            "--slots-per-worker",
            "1",
            "--cache-size",
            &quota.to_string(),
            "--run-dir",
            run_dir.to_str().unwrap(),
            "--cache-dir",
            caches.to_str().unwrap(),
            "--json",
        ],
        None,
        &[],
        DEADLINE * 2,
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (peak, samples) = sampler.join().expect("sampler");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let summary: Value = serde_json::from_str(&out.stdout).expect("summary");
    assert_eq!(
        (
            summary["tasks_ok"].as_u64(),
            summary["tasks_failed"].as_u64()
        ),
        (Some(80), Some(0))
    );
    for r in results(&run_dir) {
        let i: usize = r["id"].as_str().unwrap()[1..].parse().unwrap();
        assert_eq!(md5_of(&r["report"]), files[i % 40].1, "{r}");
    }
    assert!(samples > 20, "{samples} samples");
    assert!(
        peak <= quota + object as u64,
        "peak {peak} bytes > quota {quota} + one object {object}"
    );
    assert!(cache_bytes(&cache) <= quota);
}

/// Fill the file system of `path` with one file there, until it takes no more.
fn fill_disk(path: &std::path::Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).expect("filler");
    for chunk in [1 << 20, 4096, 512] {
        let block = vec![7u8; chunk];
        while f.write_all(&block).and_then(|()| f.flush()).is_ok() {}
    }
}

/// Promise 1 when the journal's disk is full: a submission the journal cannot take is not
/// acknowledged and none of its tasks runs; `diffuse status` says why; once space is freed it
/// goes through (one retry a second), every task of it runs, and a restart keeps them all.
#[test]
fn a_submission_the_full_journal_disk_cannot_take_waits_runs_nothing_and_goes_through_once_space_is_freed(
) {
    if !common::host::is_root() {
        common::host::skip("a small disk for the journal is a tmpfs mount, which needs root");
        return;
    }
    let disk_dir = tempfile::tempdir().expect("tempdir");
    let disk = common::host::SmallDisk::mount(&disk_dir.path().join("disk"), 16);
    let mut c = Cluster::start_with_journal(&disk.dir.join("journal.sqlite"));
    c.worker("A", 2, "10MB");
    c.wait_workers(1);
    c.submit(&[json!({"id": "before", "cmd": "true"})]);
    assert_eq!(c.wait_done("before")["state"], "succeeded");

    let filler = disk.dir.join("filler");
    fill_disk(&filler);
    // More than the journal's write-ahead log holds already, so the commit needs new space.
    let n = 2000;
    let body: String = (0..n)
        .map(|i| {
            format!(
                "{}\n",
                json!({"id": format!("held-{i:04}"), "cmd": format!("true {}", "x".repeat(200))})
            )
        })
        .collect();
    std::thread::scope(|s| {
        let submit = s.spawn(|| c.post_tasks(&body, Some(&c.client_token)));
        let error = poll("the journal's error in /v1/status", || {
            c.status()["journal_error"].as_str().map(str::to_string)
        });
        assert!(error.contains("full"), "{error}");
        let env = [
            ("DIFFUSE_DISPATCHER", c.url.as_str()),
            ("DIFFUSE_CLIENT_TOKEN", c.client_token.as_str()),
        ];
        let out = diffuse_with(&["status"], None, &env, DEADLINE);
        assert!(
            out.stderr.contains("cannot write its journal") && out.stderr.contains("full"),
            "{}",
            out.stderr
        );
        // Two retries later: still not acknowledged, nothing of it dispatched.
        std::thread::sleep(Duration::from_millis(2500));
        assert!(
            !submit.is_finished(),
            "acknowledged while the journal could not take it"
        );
        let st = c.status();
        assert_eq!(
            (st["running"].as_u64(), st["succeeded"].as_u64()),
            (Some(0), Some(1)),
            "{st}"
        );
        std::fs::remove_file(&filler).expect("free the space");
        let (code, v) = submit.join().expect("submitter");
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["submitted"].as_u64(), Some(n), "{v}");
    });
    assert_eq!(c.status()["journal_error"], Value::Null);
    poll("every held task to succeed", || {
        (c.status()["succeeded"].as_u64() == Some(n + 1)).then_some(())
    });
    c.restart_dispatcher();
    let st = c.status();
    assert_eq!(
        (st["submitted"].as_u64(), st["succeeded"].as_u64()),
        (Some(n + 1), Some(n + 1)),
        "{st}"
    );
    drop(c);
    drop(disk);
}
