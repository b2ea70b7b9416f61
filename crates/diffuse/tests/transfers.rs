//! MixApart and 2Mark live: prefetches land on the worker before the task that reads them
//! starts, as the storage server sees; the storage cap holds across the pool, as the kernel
//! counts the workers' reads; a worker's `--rack` makes a rack neighbour the task's place;
//! 2Mark moves a copy to another worker instead of dropping it.
//!
//! Storage is an HTTP server of this test's that counts the bytes it sends, or plain files.

mod common;

use common::cluster::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A storage server of objects `/o/<name>` of `size` bytes each, content derived from the name.
struct Storage {
    port: u16,
    /// (seconds since start, object name, bytes) of every chunk sent.
    sent: Arc<Mutex<Vec<(f64, String, u64)>>>,
    /// Seconds to wait before answering a GET of each name.
    delays: Arc<Mutex<Vec<(String, f64)>>>,
}

const CHUNK: usize = 16 << 10;

impl Storage {
    fn start(size: usize) -> Storage {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().unwrap().port();
        let start = Instant::now();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let delays: Arc<Mutex<Vec<(String, f64)>>> = Arc::new(Mutex::new(Vec::new()));
        let (s, d) = (sent.clone(), delays.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (s, d) = (s.clone(), d.clone());
                std::thread::spawn(move || serve(stream, size, start, &s, &d));
            }
        });
        Storage { port, sent, delays }
    }

    fn uri(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/o/{name}", self.port)
    }

    fn delay(&self, name: &str, secs: f64) {
        self.delays.lock().unwrap().push((name.to_string(), secs));
    }

    fn bytes(&self) -> u64 {
        self.sent.lock().unwrap().iter().map(|(_, _, b)| b).sum()
    }

    fn bytes_of(&self, name: &str) -> u64 {
        self.sent
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, n, _)| n == name)
            .map(|(_, _, b)| b)
            .sum()
    }
}

fn body(name: &str, size: usize) -> Vec<u8> {
    let seed = name
        .bytes()
        .fold(7u8, |a, b| a.wrapping_mul(31).wrapping_add(b));
    (0..size)
        .map(|i| seed.wrapping_add((i % 251) as u8))
        .collect()
}

fn serve(
    stream: TcpStream,
    size: usize,
    start: Instant,
    sent: &Mutex<Vec<(f64, String, u64)>>,
    delays: &Mutex<Vec<(String, f64)>>,
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
            return;
        };
        let (method, target) = (method.to_string(), target.to_string());
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h.trim_end().is_empty() {
                break;
            }
        }
        let name = target.trim_start_matches("/o/").to_string();
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nETag: \"{name}\"\r\nConnection: keep-alive\r\n\r\n"
        );
        if method == "HEAD" {
            if out.write_all(head.as_bytes()).is_err() {
                return;
            }
            continue;
        }
        let wait = delays
            .lock()
            .unwrap()
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| *s);
        if let Some(s) = wait {
            std::thread::sleep(Duration::from_secs_f64(s));
        }
        if out.write_all(head.as_bytes()).is_err() {
            return;
        }
        for chunk in body(&name, size).chunks(CHUNK) {
            if out.write_all(chunk).is_err() {
                return;
            }
            sent.lock().unwrap().push((
                start.elapsed().as_secs_f64(),
                name.clone(),
                chunk.len() as u64,
            ));
        }
    }
}

fn read_task(id: &str, uri: &str) -> Value {
    json!({"id": id, "cmd": "wc -c < {inputs[0]}", "inputs": [uri]})
}

/// With `--prefetch`, the input of a task queued behind a running one is copied to the worker
/// while the slot is busy: the storage server has sent it and the dispatcher counts it landed
/// before the task starts, and the task then reads it from the worker's own cache.
#[test]
fn a_prefetch_lands_before_its_task_starts_and_the_task_reads_it_locally() {
    let storage = Storage::start(1 << 20);
    let mut c = Cluster::start_with(
        &[],
        &[
            "--policy",
            "mixapart",
            "--storage-bandwidth-cap",
            "100MB/s",
            "--prefetch",
        ],
        &[],
    );
    c.worker("w", 1, "50MB");
    c.wait_workers(1);
    let gate = c.path("gate");
    c.submit(&[json!({"id": "hold", "cmd": format!("while [ ! -e {} ]; do sleep 0.05; done", gate.display()), "priority": 10})]);
    c.wait_state("hold", "running");
    c.submit(&[read_task("t1", &storage.uri("a"))]);
    let landed = poll("the prefetch of t1's input to land", || {
        let s = c.status();
        (s["prefetch"]["landed"].as_u64() == Some(1)).then_some(s)
    });
    assert_eq!(landed["prefetch"]["issued_bytes"], 1 << 20, "{landed}");
    assert_eq!(storage.bytes(), 1 << 20, "the whole object left storage");
    assert_eq!(c.task("t1")["state"], "queued", "t1 has not started");
    let holders = c.get(&format!("/v1/locate?uri={}", storage.uri("a")));
    assert_eq!(holders["nodes"], json!(["w"]), "w holds it before t1 runs");
    assert!(c
        .metrics()
        .contains("diffuse_prefetches_total{event=\"landed\"} 1"));
    std::fs::write(&gate, b"").unwrap();
    let (_, r) = c.wait_succeeded("t1");
    assert_eq!(stdout_of(&r).trim(), (1 << 20).to_string());
    assert_eq!(r["traffic"]["local"], 1, "{r}");
    assert_eq!(r["traffic"]["bytes_storage"], 0, "{r}");
    assert_eq!(storage.bytes(), 1 << 20, "storage read once");
    assert_eq!(c.status()["prefetch"]["read"], 1);
}

/// Bytes the process `pid` has read (`rchar` of `/proc/<pid>/io`: every read call, files and
/// sockets).
fn rchar(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Eight tasks on two workers of two slots read 8 MiB files (64 MiB) under an 8 MB/s cap. What
/// the two worker processes read, sampled every 50 ms from the kernel's counters, over every
/// window of at least 1 s, stays under the cap, give or take the one chunk each of four
/// concurrent reads may take ahead (50 ms at its share: at most 1 MiB in all); and the cap
/// binds: the reads take about 8 s.
#[test]
fn the_storage_cap_holds_across_the_pool() {
    const CAP: f64 = 8e6;
    const SIZE: usize = 8 << 20;
    let mut c = Cluster::start_with(
        &[],
        &[
            "--storage-bandwidth-cap",
            "8MB/s",
            "--prefetch",
            "--policy",
            "mixapart",
        ],
        &[],
    );
    c.worker("a", 2, "200MB");
    c.worker("b", 2, "200MB");
    c.wait_workers(2);
    let pids: Vec<u32> = c.workers.iter().map(|w| w.worker_pid()).collect();
    let tasks: Vec<Value> = (0..8)
        .map(|i| {
            let f = c.data(&format!("f{i}"), &body(&format!("f{i}"), SIZE));
            read_task(&format!("t{i}"), &file_uri(&f))
        })
        .collect();
    let base: u64 = pids.iter().map(|p| rchar(*p)).sum();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (done, pids) = (done.clone(), pids.clone());
        std::thread::spawn(move || {
            let start = Instant::now();
            let mut samples = Vec::new();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let read: u64 = pids.iter().map(|p| rchar(*p)).sum();
                samples.push((start.elapsed().as_secs_f64(), read - base));
                std::thread::sleep(Duration::from_millis(50));
            }
            samples
        })
    };
    c.submit(&tasks);
    for i in 0..8 {
        let (_, r) = c.wait_succeeded(&format!("t{i}"));
        assert_eq!(stdout_of(&r).trim(), SIZE.to_string());
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let samples = sampler.join().unwrap();
    let total = samples.last().unwrap().1;
    assert!(total >= 8 * SIZE as u64, "the files were read: {total} B");
    let first = samples.iter().find(|(_, b)| *b > 0).unwrap().0;
    let last = samples
        .iter()
        .find(|(_, b)| *b >= 8 * SIZE as u64)
        .unwrap()
        .0;
    assert!(
        last - first > 0.85 * (8 * SIZE) as f64 / CAP,
        "the cap binds: {total} B in {:.2} s",
        last - first
    );
    let slack = (1 << 20) as f64;
    let mut worst: f64 = 0.0;
    let mut j = 0;
    for i in 0..samples.len() {
        while j < samples.len() && samples[j].0 - samples[i].0 < 1.0 {
            j += 1;
        }
        if j == samples.len() {
            break;
        }
        let dt = samples[j].0 - samples[i].0;
        let bytes = (samples[j].1 - samples[i].1) as f64;
        worst = worst.max(bytes / dt);
        assert!(
            bytes <= CAP * dt + slack,
            "the workers read {bytes} B in {dt:.2} s from {:.2} s: over 8 MB/s",
            samples[i].0
        );
    }
    eprintln!(
        "storage cap 8 MB/s: {} B read in {:.2} s, busiest 1 s window {:.2} MB/s",
        8 * SIZE,
        last - first,
        worst / 1e6
    );
}

/// Worker b shares rack r1 with a, which holds o; c is in rack r2. a is busy, so under
/// MixApart's tiers the task reading o goes to b (rack-local) and reads from a, though c (which
/// connected before b) is the first free worker asked.
#[test]
fn a_rack_neighbour_takes_a_task_whose_data_is_on_a_busy_worker() {
    let storage = Storage::start(1 << 20);
    let mut c = Cluster::start_with(&[], &["--policy", "mixapart"], &[]);
    for (name, rack) in [("a", "r1"), ("c", "r2"), ("b", "r1")] {
        let (mut cmd, _) = c.worker_cmd(name, 1, "10MB");
        cmd.args(["--rack", rack]);
        let log = c.path(&format!("worker-{name}.log"));
        c.workers.push(common::cluster::Proc::spawn(
            &format!("worker {name}"),
            &mut cmd,
            log,
        ));
        c.wait_workers(c.workers.len() as u64);
    }
    let o = storage.uri("o");
    c.submit(&[
        json!({"id": "warm", "cmd": "wc -c < {inputs[0]}", "inputs": [&o],
                      "hint": {"node": "a", "strict": true}}),
    ]);
    c.wait_succeeded("warm");
    let gate = c.path("gate");
    c.submit(&[json!({"id": "hold", "cmd": format!("while [ ! -e {} ]; do sleep 0.05; done", gate.display()),
                      "hint": {"node": "a", "strict": true}})]);
    c.wait_state("hold", "running");
    c.submit(&[read_task("t", &o)]);
    let (t, r) = c.wait_succeeded("t");
    std::fs::write(&gate, b"").unwrap();
    assert_eq!(t["outcome"]["node"], "b", "{t}");
    assert_eq!(r["traffic"]["peer"], 1, "read from a: {r}");
}

/// 2Mark live (`--two-mark`): worker a, with room for two 1 MiB objects, reads o1, o2, o1, o2,
/// then o3. Worker b holds o9, which no task has asked for (it was in b's cache when b
/// connected), so not every object is global-marked, and no new global phase begins: 2Mark
/// keeps a's least recently asked object, o1, in the system by moving it to b, which has room,
/// instead of dropping it. b copies it from a (not from storage) and a deletes its copy.
#[test]
fn two_mark_moves_a_last_copy_to_a_worker_with_room() {
    let storage = Storage::start(1 << 20);
    storage.delay("o3", 1.5);
    let mut c = Cluster::start_with(&[], &["--two-mark"], &[]);
    // b caches o9, then the dispatcher starts afresh: o9 comes back in b's hello, unasked.
    c.worker("b", 1, "2500KB");
    c.wait_workers(1);
    c.submit(&[read_task("w9", &storage.uri("o9"))]);
    c.wait_succeeded("w9");
    c.restart_dispatcher();
    c.worker("b", 1, "2500KB");
    c.wait_workers(1);
    c.worker("a", 1, "2500KB");
    c.wait_workers(2);
    let holders = |o: &str| c.get(&format!("/v1/locate?uri={}", storage.uri(o)))["nodes"].clone();
    poll("b to report o9", || {
        (holders("o9") == json!(["b"])).then_some(())
    });
    let gate = c.path("gate");
    c.submit(&[json!({"id": "hold", "cmd": format!("while [ ! -e {} ]; do sleep 0.05; done", gate.display()),
                      "hint": {"node": "b", "strict": true}})]);
    c.wait_state("hold", "running");
    for (i, o) in ["o1", "o2", "o1", "o2", "o3"].iter().enumerate() {
        let id = format!("t{i}");
        c.submit(&[read_task(&id, &storage.uri(o))]);
        let (t, _) = c.wait_succeeded(&id);
        assert_eq!(t["outcome"]["node"], "a", "{t}");
    }
    poll("o1 to move from a to b", || {
        (holders("o1") == json!(["b"])).then_some(())
    });
    let s = c.status();
    assert_eq!(s["two_mark"]["moved"], 1, "{s}");
    // o1 left storage once: b copied it from a.
    let sent_o1 = storage.bytes_of("o1");
    assert_eq!(sent_o1, 1 << 20, "o1 read from storage once");
    std::fs::write(&gate, b"").unwrap();
    c.wait_succeeded("hold");
}
