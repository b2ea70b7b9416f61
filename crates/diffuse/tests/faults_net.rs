//! Faults across hosts (issue 28): the dispatcher on one network namespace, workers on others,
//! real TCP between them, and the network broken under a running workload: a worker cut off
//! from the dispatcher for 30 s, loss and delay on every link for a whole dataflow run, a peer
//! slowed to 1 Mbit/s in the middle of a multi-source read, a cache disk filled during a
//! prefetch, and one full with nothing to evict. Each test fails if a task is lost or gets a
//! second outcome, and prints one row of the figures table of docs/runtime.md, "Faults across
//! hosts":
//!
//! ```sh
//! cargo test -p diffuse --test faults_net -- --nocapture --test-threads 1
//! ```
//!
//! The faults are `iptables` rules and `tc` on the testbed's links ([`Testbed`]); this kernel
//! has no `netem`, so a delay is an NFQUEUE rule and a process that holds each packet.
//! Without root (or `ip`) the tests say SKIPPED and pass, as the other multi-host tests do.
//!
//! [`Testbed`]: common::testbed::Testbed

mod common;
#[path = "faults_net/record.rs"]
mod record;

use common::cluster::*;
use common::host::{skip, SmallDisk};
use common::hosts::Hosts;
use record::{
    ends, keep_logs, one_outcome_each, recorded, started_twice, starts, wait_all_ended, Figures,
    Outcomes,
};
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

const NO_NAMESPACES: &str = "network namespaces need root and iproute2";

/// The SHA-256 line `sha256sum` prints for the output of the shell command `cmd`.
fn sha256sum_of(cmd: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("{cmd} | sha256sum"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn workers(h: &Hosts) -> u64 {
    h.get("/v1/status")
        .and_then(|s| s["workers"].as_u64())
        .unwrap_or(0)
}

// ----- 1. a worker cut off from the dispatcher -----

/// The workload of the cut: a task on C held until `gate` exists, four readers of `tmp://mid`
/// after it, two 12 s tasks that would rather run on A, and forty 2 s tasks.
fn cut_workload(gate: &std::path::Path, runs: &std::path::Path) -> Vec<Value> {
    // The readers wait for a task on C, opened once A is given up; forty 2 s tasks keep every
    // worker busy meanwhile.
    let mut hold = gated_task("hold", gate);
    hold["cmd"] = json!(recorded(hold["cmd"].as_str().unwrap(), runs));
    hold["hint"] = json!({"node": "C"});
    let mut batch = vec![hold];
    for i in 0..4 {
        batch.push(
            json!({"id": format!("use{i}"), "cmd": recorded("sha256sum < {inputs[0]}", runs),
                          "inputs": ["tmp://mid"], "after": ["hold"]}),
        );
    }
    for i in 0..2 {
        batch.push(
            json!({"id": format!("long{i}"), "cmd": recorded("sleep 12", runs),
                          "hint": {"node": "A"}}),
        );
    }
    for i in 0..40 {
        batch.push(json!({"id": format!("w{i:02}"), "cmd": recorded("sleep 2", runs)}));
    }
    batch
}

/// The tasks with an attempt on `node` that the dispatcher gave up (a later attempt ran
/// elsewhere; a producer's remakes aside), and those attempts whose process ran to its end on
/// `node` all the same, out of sight.
fn given_up_on<'a>(
    node: &str,
    tasks: &'a [Value],
    runs: &std::path::Path,
) -> (Vec<&'a Value>, Vec<String>) {
    let ended = ends(runs);
    let mut given_up = Vec::new();
    let mut ran_out_of_sight = Vec::new();
    for t in tasks {
        let id = t["id"].as_str().unwrap();
        let attempts = t["attempts"].as_array().unwrap();
        for a in &attempts[..attempts.len().saturating_sub(1)] {
            if a["node"] == node && id != "make" {
                let run = format!("{}@{node}", a["attempt"]);
                if ended.get(id).is_some_and(|e| e.contains(&run)) {
                    ran_out_of_sight.push(format!("{id} ({run})"));
                }
                given_up.push(t);
            }
        }
    }
    (given_up, ran_out_of_sight)
}

/// A runs two 12 s tasks and holds the only copy of `tmp://mid`, which four queued readers
/// need, when every packet between it and the dispatcher's host is dropped for 30 s. The
/// dispatcher gives A up after its heartbeat timeout (5 s here) and runs A's tasks again
/// elsewhere; the readers get `tmp://mid` made again (its only copy is out of reach). A, whose
/// heartbeats go unacknowledged as long, gives its connection up too and stops the two tasks
/// (none runs to its end out of sight); when the network heals it joins again within seconds,
/// with its cache, and takes tasks. Nothing A reported from the cut becomes an outcome.
#[test]
fn a_worker_cut_off_from_the_dispatcher_for_30_s_loses_nothing_and_is_taken_back() {
    let Some(mut h) = Hosts::up(4, &["--heartbeat-timeout", "5"]) else {
        return skip(NO_NAMESPACES);
    };
    for (host, name) in [(1, "A"), (2, "B"), (3, "C")] {
        h.worker_cores(host, name, 2, &["--cache-size", "100MB"]);
    }
    h.wait_workers(3);
    let runs = h.path("runs.log");
    let mut seen = Outcomes::default();
    let make = "seq 1 200000 > {outputs[0]}";
    h.submit(&[json!({"id": "make", "cmd": recorded(make, &runs),
                      "outputs": ["tmp://mid"], "hint": {"node": "A"}})]);
    let made = h.done("make");
    assert_eq!(
        (&made["state"], &made["node"]),
        (&json!("succeeded"), &json!("A"))
    );
    let gate = h.path("gate");
    h.submit(&cut_workload(&gate, &runs));
    // Their processes have started on A (the dispatcher counts a task running once sent).
    poll("A to run the two long tasks", || {
        let started = starts(&runs);
        let on_a = |id: &str| {
            started
                .get(id)
                .is_some_and(|s| s.contains(&"1@A".to_string()))
        };
        (on_a("long0") && on_a("long1")).then_some(())
    });

    let cut = Instant::now();
    h.bed.cut(0, 1);
    poll("A to be given up", || (workers(&h) == 2).then_some(()));
    let given_up = cut.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    std::fs::write(&gate, b"").unwrap();
    while cut.elapsed() < Duration::from_secs(30) {
        seen.observe(&h);
        std::thread::sleep(Duration::from_millis(500));
    }
    let dropped = h.bed.dropped(0) + h.bed.dropped(1);
    h.bed.heal(0, 1);
    let healed = Instant::now();
    poll("A to join again", || (workers(&h) == 3).then_some(()));
    let rejoined = healed.elapsed();
    // A takes tasks again: four that would rather run on it.
    let after: Vec<Value> = (0..4)
        .map(|i| {
            json!({"id": format!("back{i}"), "cmd": recorded("sleep 0.5", &runs),
                        "hint": {"node": "A"}})
        })
        .collect();
    h.submit(&after);
    let n = 1 + 1 + 4 + 2 + 40 + 4;
    let status = wait_all_ended(&h, n, &mut seen);
    let (tasks, lost) = one_outcome_each(&h, &["make"], &mut seen);

    let log = h.dispatcher_log();
    let refused = log.matches("stale result refused").count();
    let made = tasks.iter().find(|t| t["id"] == "make").unwrap();
    let remade = made["attempts"].as_array().map_or(0, |a| a.len()) > 1;
    let twice = started_twice(&runs);
    let (given_up_on_a, ran_out_of_sight) = given_up_on("A", &tasks, &runs);
    Figures {
        fault: "a worker cut off from the dispatcher for 30 s (heartbeat timeout 5 s)",
        tasks: tasks.len(),
        injected: format!("1 cut, {dropped} packets dropped"),
        lost,
        twice: format!(
            "{}: {} (A's attempts given up at the cut, run again elsewhere; {} of them ran to \
             their end on A{})",
            twice.len(),
            twice.join(", "),
            ran_out_of_sight.len(),
            if remade {
                "; make: tmp://mid remade"
            } else {
                ""
            }
        ),
        recovery: format!(
            "given up in {:.1} s; rejoined {:.1} s after the heal; {refused} late reports refused",
            given_up.as_secs_f64(),
            rejoined.as_secs_f64()
        ),
    }
    .print();
    keep_logs(&h, "cut");
    assert_eq!(lost, 0, "{status}");
    assert_eq!(status["failed"], 0, "{status}");
    // The readers read the right bytes, whichever copy they had.
    let want = sha256sum_of("seq 1 200000");
    for i in 0..4 {
        let t = tasks.iter().find(|t| t["id"] == format!("use{i}")).unwrap();
        assert_eq!(stdout_of(&report(t)), want, "use{i}: {t}");
    }
    // A's two long tasks were given up and ran again on B or C: their outcomes are those later
    // attempts' (checked above: an outcome is a task's last attempt's), so nothing A reported
    // from the cut became one.
    assert!(
        given_up_on_a.len() >= 2,
        "A's two running tasks were run again elsewhere: {given_up_on_a:?}"
    );
    for t in &given_up_on_a {
        assert_ne!(t["outcome"]["node"], "A", "{t}");
    }
    // A stopped them when its own connection gave up (12 s tasks, given up 5 s in).
    assert!(
        ran_out_of_sight.is_empty(),
        "A ran given-up attempts to their end while cut off: {ran_out_of_sight:?}"
    );
    // It tried the dispatcher again all along, and was back within seconds of the heal (it
    // took 23 s when it waited for TCP's own retries, backed off to 25 s).
    assert!(
        rejoined < Duration::from_secs(15),
        "A rejoined {:.1} s after the heal",
        rejoined.as_secs_f64()
    );
    let on_a_again = tasks
        .iter()
        .filter(|t| t["id"].as_str().unwrap().starts_with("back") && t["node"] == "A")
        .count();
    assert!(on_a_again >= 1, "A took tasks again after it rejoined");
    let started = starts(&runs);
    for t in &tasks {
        assert!(
            started.contains_key(t["id"].as_str().unwrap()),
            "{} never started: {t}",
            t["id"]
        );
    }
}

// ----- 2. loss and delay on every link for a whole dataflow run -----

/// `lines` lines of known text: a line number and 16 hex digits.
fn known_text(lines: usize) -> String {
    let bytes = random_bytes(lines * 8);
    (0..lines)
        .map(|i| {
            let word = u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
            format!("{i:06} {word:016x}\n")
        })
        .collect()
}

/// What the maps do to each character (`tr 0-9a-f A-P`).
fn mapped(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '0'..='9' => (b'A' + (c as u8 - b'0')) as char,
            'a'..='f' => (b'K' + (c as u8 - b'a')) as char,
            c => c,
        })
        .collect()
}

/// Split `input` (`lines` lines) into `parts` `tmp://` parts, map each (`tr`), reduce them
/// into `out`: the ids and intermediates start with `p`.
fn pipeline(
    p: &str,
    input: &str,
    lines: usize,
    parts: usize,
    out: &str,
    runs: &std::path::Path,
) -> Vec<Value> {
    let per = lines / parts;
    let split: Vec<String> = (0..parts)
        .map(|i| {
            let last = if i + 1 == parts { lines } else { (i + 1) * per };
            format!(
                "sed -n '{},{}p' {{inputs[0]}} > {{outputs[{i}]}}",
                i * per + 1,
                last
            )
        })
        .collect();
    let mut tasks = vec![json!({
        "id": format!("{p}split"), "cmd": recorded(&split.join(" && "), runs), "inputs": [input],
        "outputs": (0..parts).map(|i| format!("tmp://{p}part{i}")).collect::<Vec<_>>(),
    })];
    for i in 0..parts {
        tasks.push(json!({
            "id": format!("{p}map{i}"), "cmd": recorded("tr 0-9a-f A-P < {inputs[0]} > {outputs[0]}", runs),
            "inputs": [format!("tmp://{p}part{i}")], "outputs": [format!("tmp://{p}up{i}")],
        }));
    }
    let cat: Vec<String> = (0..parts).map(|i| format!("{{inputs[{i}]}}")).collect();
    tasks.push(json!({
        "id": format!("{p}reduce"), "cmd": recorded(&format!("cat {} > {{outputs[0]}}", cat.join(" ")), runs),
        "inputs": (0..parts).map(|i| format!("tmp://{p}up{i}")).collect::<Vec<_>>(),
        "outputs": [out],
    }));
    tasks
}

/// Run the pipeline with prefix `p` and wait for its reduce; its seconds.
fn run_pipeline(
    h: &Hosts,
    p: &str,
    input: &str,
    lines: usize,
    parts: usize,
    seen: &mut Outcomes,
) -> f64 {
    let out = file_uri(&h.path(&format!("{p}result.txt")));
    let started = Instant::now();
    h.submit(&pipeline(p, input, lines, parts, &out, &h.path("runs.log")));
    poll(&format!("{p}reduce to end"), || {
        seen.observe(h);
        let t = h.get(&format!("/v1/tasks/{p}reduce"))?;
        (!t["outcome"].is_null()).then_some(())
    });
    started.elapsed().as_secs_f64()
}

/// A split, eight maps and a reduce over 1 MB read from an HTTP store on another host, with
/// `tmp://` intermediates read from peers: once on a clean network, then with every host
/// losing 5% of the packets it receives and holding each 50 ms (100 ms round trips). Both
/// complete with the right bytes, each task once.
#[test]
fn loss_and_delay_on_every_link_slow_a_dataflow_run_and_change_no_byte() {
    let Some(mut h) = Hosts::up(5, &[]) else {
        return skip(NO_NAMESPACES);
    };
    for (host, name) in [(1, "A"), (2, "B"), (3, "C")] {
        h.worker_cores(host, name, 2, &["--cache-size", "100MB"]);
    }
    h.wait_workers(3);
    let lines = 160_000;
    let text = known_text(lines);
    let data = h.path("store");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("input.txt"), &text).unwrap();
    let store = h.http_store(4, &data);
    let input = format!("{store}/input.txt");
    let parts = 12;
    let mut seen = Outcomes::default();
    let clean = run_pipeline(&h, "c-", &input, lines, parts, &mut seen);

    for host in 0..5 {
        h.bed.lose(host, 5.0);
        h.delay(host, 50);
    }
    let faulty = run_pipeline(&h, "f-", &input, lines, parts, &mut seen);
    let dropped: u64 = (0..5).map(|i| h.bed.dropped(i)).sum();
    let n = 2 * (parts as u64 + 2);
    let status = wait_all_ended(&h, n, &mut seen);
    let (tasks, lost) = one_outcome_each(&h, &[], &mut seen);
    let twice = started_twice(&h.path("runs.log"));
    Figures {
        fault: "5% loss and 50 ms delay on every link, split -> 12 maps -> reduce, 3.8 MB",
        tasks: tasks.len(),
        injected: format!("{dropped} packets dropped, every packet delayed"),
        lost,
        twice: format!(
            "{}{}",
            twice.len(),
            if twice.is_empty() {
                String::new()
            } else {
                format!(": {}", twice.join(", "))
            }
        ),
        recovery: format!("run {faulty:.1} s, against {clean:.1} s on a clean network"),
    }
    .print();
    keep_logs(&h, "lossy");
    assert_eq!(lost, 0, "{status}");
    let want = mapped(&text);
    for p in ["c-", "f-"] {
        let got = std::fs::read_to_string(h.path(&format!("{p}result.txt"))).unwrap();
        assert!(
            got == want,
            "{p}result.txt is not the input mapped ({} bytes against {})",
            got.len(),
            want.len()
        );
        let reduce = tasks
            .iter()
            .find(|t| t["id"] == format!("{p}reduce"))
            .unwrap();
        let r = report(reduce);
        let t = traffic(&r["traffic"]);
        assert_eq!(t[2], 0, "the reduce read no intermediate from storage: {r}");
        assert!(t[1] >= 1, "the reduce read from peers: {r}");
    }
    assert!(dropped > 0, "the loss rules dropped packets");
    let log = h.dispatcher_log();
    assert!(
        !log.contains("worker lost"),
        "no worker missed its heartbeat timeout:\n{log}"
    );
    assert!(twice.is_empty(), "no task ran twice: {twice:?}");
}

// ----- 3. a peer slowed to 1 Mbit/s mid-transfer -----

/// The share of a multi-source read that the source at `addr` sent, in MB, from the reader's
/// log line `read N MB from K peers in S s (URL M MB; ...)`.
fn share_from(log: &str, addr: &str) -> Option<u64> {
    let line = log.lines().rev().find(|l| l.contains(" peers in "))?;
    let shares = line.split('(').nth(1)?;
    let mine = shares
        .split(';')
        .find(|s| s.contains(&format!("//{addr}:")))?;
    mine.split_whitespace().nth(1)?.parse().ok()
}

/// A, B and C hold a 128 MiB object and each send at 100 Mbit/s. E reads it from all three
/// (the measured time of three fast sources); then D reads it, and a second into D's read C's
/// link drops to 1 Mbit/s. D's other sources take C's chunks, the last one read again, so D
/// ends near the time of two fast sources, not C's (its share at 1 Mbit/s would take
/// minutes).
#[test]
fn a_peer_slowed_to_1_mbit_mid_transfer_is_outrun_by_the_other_sources() {
    let Some(mut h) = Hosts::up(6, &[]) else {
        return skip(NO_NAMESPACES);
    };
    let big = ["--cache-size", "1GB"];
    for (host, name) in [(1, "A"), (2, "B"), (3, "C")] {
        h.worker_with(host, name, &big);
    }
    h.wait_workers(3);
    let size = 128usize << 20;
    let x = h.path("x.bin");
    std::fs::write(&x, random_bytes(size)).unwrap();
    let want = sha256sum_of(&format!("cat '{}'", x.display()));
    let uri = file_uri(&x);
    let read = |id: &str, node: &str| {
        json!({"id": id, "cmd": "sha256sum < {inputs[0]}", "inputs": [uri],
               "hint": {"node": node, "strict": true}})
    };
    let staging = |t: &Value| {
        assert_eq!(t["state"], "succeeded", "{t}");
        let r = report(t);
        assert_eq!(stdout_of(&r), want, "{} read every byte right", t["id"]);
        r["staged_at"].as_f64().unwrap() - r["started_at"].as_f64().unwrap()
    };
    for (id, node) in [("a", "A"), ("b", "B"), ("c", "C")] {
        h.submit(&[read(id, node)]);
        staging(&h.done(id));
    }
    for host in 1..=5 {
        h.bed.shape(host, "100mbit", None);
    }
    // E: three fast sources. Then E leaves, so that D has the same three.
    h.worker_with(5, "E", &big);
    h.wait_workers(4);
    h.submit(&[read("e", "E")]);
    let three = staging(&h.done("e"));
    h.procs[4].kill_worker_proper();
    h.wait_workers(3);
    h.worker_with(4, "D", &big);
    h.wait_workers(4);
    h.submit(&[read("d", "D")]);
    poll("d to run", || {
        h.get("/v1/tasks/d").filter(|t| t["state"] == "running")
    });
    std::thread::sleep(Duration::from_secs(1));
    h.bed.shape(3, "1mbit", None);
    let slowed = Instant::now();
    let t = h.done("d");
    let secs = staging(&t);
    let d_log = std::fs::read_to_string(h.path("worker-D.log")).unwrap();
    let c_mb = share_from(&d_log, &h.bed.addr(3));
    // What the two fast links alone carry the object in, from E's measured three; and what C's
    // third would have taken at 1 Mbit/s.
    let two_fast = three * 1.5;
    let c_third = (size as f64 / 3.0) / (1e6 / 8.0);
    Figures {
        fault: "a peer slowed from 100 to 1 Mbit/s a second into a 128 MiB read from 3 holders",
        tasks: 5,
        injected: "1 link slowed".into(),
        lost: 0,
        twice: "0 (the slow source's last chunk is read again from a fast one)".into(),
        recovery: format!(
            "read in {secs:.1} s; three fast sources {three:.1} s, two {two_fast:.1} s; \
             C sent {} MB, its third at 1 Mbit/s would take {c_third:.0} s",
            c_mb.map_or("?".into(), |m| m.to_string())
        ),
    }
    .print();
    keep_logs(&h, "slow");
    eprintln!(
        "D's read ended {:.1} s after C slowed",
        slowed.elapsed().as_secs_f64()
    );
    assert!(
        d_log.contains("from 3 peers"),
        "D read from A, B and C:\n{d_log}"
    );
    assert!(
        secs < 1.25 * two_fast,
        "D's read took {secs:.1} s: near two fast sources' {two_fast:.1} s, not C's {c_third:.0} s"
    );
    assert!(
        c_mb.is_some_and(|mb| (mb as usize) < (size >> 20) / 3),
        "C sent less than its third: {c_mb:?}\n{d_log}"
    );
}

// ----- 4. a cache disk filled during a prefetch -----

/// Free bytes of the file system holding `dir`.
fn free_bytes(dir: &std::path::Path) -> u64 {
    let st = rustix::fs::statvfs(dir).expect("statvfs");
    st.f_bavail * st.f_frsize
}

/// W caches on a 64 MiB file system and has read o0..o3 (6 MiB each) from an HTTP store on
/// another host, sending at 16 Mbit/s. While W's one core is held, the dispatcher prefetches
/// the input of the next task to W (MixApart's transfer scheduler); in the middle of that
/// prefetch another program fills W's disk to 2 MiB of free space. The prefetch finds the
/// disk full, W evicts what it has cached and fetches again; every task then runs and
/// succeeds, each once.
#[test]
fn a_cache_disk_filled_during_a_prefetch_evicts_and_fails_no_task() {
    let Some(mut h) = Hosts::up(
        3,
        &[
            "--policy",
            "mixapart",
            "--storage-bandwidth-cap",
            "100MB/s",
            "--prefetch",
        ],
    ) else {
        return skip(NO_NAMESPACES);
    };
    let disk = SmallDisk::mount(&h.path("disk"), 64);
    let data = h.path("store");
    std::fs::create_dir_all(&data).unwrap();
    let size = 6usize << 20;
    for i in 0..8 {
        std::fs::write(data.join(format!("o{i}")), random_bytes(size)).unwrap();
    }
    let store = h.http_store(2, &data);
    let cache = disk.dir.join("cache");
    h.worker_in(1, "W", 1, &cache, &["--cache-size", "40MB"]);
    h.wait_workers(1);
    let runs = h.path("runs.log");
    let read = |i: usize| {
        json!({"id": format!("r{i}"), "cmd": recorded("wc -c < {inputs[0]}", &runs),
               "inputs": [format!("{store}/o{i}")]})
    };
    let mut seen = Outcomes::default();
    h.submit(&(0..4).map(read).collect::<Vec<_>>());
    wait_all_ended(&h, 4, &mut seen);
    h.bed.shape(2, "16mbit", None);
    let gate = h.path("gate");
    let mut hold = gated_task("hold", &gate);
    hold["cmd"] = json!(recorded(hold["cmd"].as_str().unwrap(), &runs));
    hold["priority"] = json!(10);
    h.submit(&[hold]);
    poll("hold to run", || {
        h.get("/v1/tasks/hold").filter(|t| t["state"] == "running")
    });
    let settled = |s: &Value| {
        let p = &s["prefetch"];
        p["landed"].as_u64().unwrap_or(0) + p["failed"].as_u64().unwrap_or(0)
    };
    let issued = |s: &Value| s["prefetch"]["issued"].as_u64().unwrap_or(0);
    let before = h.get("/v1/status").unwrap();
    h.submit(&(4..8).map(read).collect::<Vec<_>>());
    poll("a prefetch to W", || {
        h.get("/v1/status").filter(|s| issued(s) > issued(&before))
    });
    std::thread::sleep(Duration::from_millis(500));
    let during = h.get("/v1/status").unwrap();
    assert_eq!(
        settled(&during),
        settled(&before),
        "the prefetch is under way when the disk fills: {during}"
    );
    // Another program fills the disk, leaving 2 MiB.
    let filled = Instant::now();
    let filler = disk.dir.join("filler");
    let fill = free_bytes(&disk.dir).saturating_sub(2 << 20);
    std::fs::write(&filler, vec![0u8; fill as usize]).expect("fill the disk");
    poll("the prefetch to land or be declined", || {
        h.get("/v1/status")
            .filter(|s| settled(s) > settled(&before))
    });
    let settled_in = filled.elapsed();
    std::fs::write(&gate, b"").unwrap();
    let status = wait_all_ended(&h, 9, &mut seen);
    let (tasks, lost) = one_outcome_each(&h, &[], &mut seen);
    let w_log = std::fs::read_to_string(h.path("worker-W.log")).unwrap();
    let full = w_log.matches("the disk of the cache is full").count();
    let p = &status["prefetch"];
    let twice = started_twice(&runs);
    Figures {
        fault: "a cache disk filled to 2 MiB free during a prefetch",
        tasks: tasks.len(),
        injected: format!("1 disk filled ({} MiB written)", fill >> 20),
        lost,
        twice: format!("{}", twice.len()),
        recovery: format!(
            "prefetch settled {:.1} s after the fill: {} landed, {} declined in all; the disk found full {full} times",
            settled_in.as_secs_f64(),
            p["landed"],
            p["failed"]
        ),
    }
    .print();
    keep_logs(&h, "disk");
    assert_eq!(lost, 0, "{status}");
    assert_eq!(status["failed"], 0, "no task failed: {status}");
    for t in tasks.iter().filter(|t| t["id"] != "hold") {
        assert_eq!(stdout_of(&report(t)).trim(), size.to_string(), "{t}");
    }
    assert!(full >= 1, "W found its disk full and evicted:\n{w_log}");
    assert!(twice.is_empty(), "no task ran twice: {twice:?}");
    drop(h);
    drop(disk);
}

/// W's disk is full with nothing cached to evict (another program filled it before W cached
/// anything) while V has room. Each task sent to W is given back ("no space left on the cache's
/// disk, and nothing left to evict": the worker's fault, not the task's) and waits for V
/// rather than go back to W, free as W is: every task succeeds, on V. (Before, W failed them:
/// 6 of 8, each failure freeing W for the next task.)
#[test]
fn a_cache_disk_full_with_nothing_to_evict_sends_its_tasks_elsewhere() {
    let Some(mut h) = Hosts::up(4, &[]) else {
        return skip(NO_NAMESPACES);
    };
    let disk = SmallDisk::mount(&h.path("disk"), 64);
    let data = h.path("store");
    std::fs::create_dir_all(&data).unwrap();
    let size = 6usize << 20;
    for i in 0..8 {
        std::fs::write(data.join(format!("o{i}")), random_bytes(size)).unwrap();
    }
    let store = h.http_store(3, &data);
    h.worker_in(
        1,
        "W",
        1,
        &disk.dir.join("cache"),
        &["--cache-size", "40MB"],
    );
    h.worker_cores(2, "V", 1, &["--cache-size", "100MB"]);
    h.wait_workers(2);
    let fill = free_bytes(&disk.dir).saturating_sub(1 << 20);
    std::fs::write(disk.dir.join("filler"), vec![0u8; fill as usize]).expect("fill the disk");
    let runs = h.path("runs.log");
    let mut seen = Outcomes::default();
    let tasks: Vec<Value> = (0..8)
        .map(|i| {
            json!({"id": format!("r{i}"), "cmd": recorded("wc -c < {inputs[0]}", &runs),
                   "inputs": [format!("{store}/o{i}")]})
        })
        .collect();
    h.submit(&tasks);
    let status = wait_all_ended(&h, 8, &mut seen);
    let (tasks, lost) = one_outcome_each(&h, &[], &mut seen);
    let given_back = tasks
        .iter()
        .flat_map(|t| t["attempts"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["node"] == "W")
        .count();
    let failed: Vec<String> = tasks
        .iter()
        .filter(|t| t["state"] != "succeeded")
        .map(|t| format!("{} on {}: {}", t["id"], t["node"], t["outcome"]["error"]))
        .collect();
    Figures {
        fault: "a cache disk full with nothing to evict, another worker with room",
        tasks: tasks.len(),
        injected: format!("1 disk filled ({} MiB written)", fill >> 20),
        lost,
        twice: format!("{}", started_twice(&runs).len()),
        recovery: format!(
            "{} attempts given back by W; {} failed{}",
            given_back,
            failed.len(),
            if failed.is_empty() {
                String::new()
            } else {
                format!(": {}", failed.join("; "))
            }
        ),
    }
    .print();
    keep_logs(&h, "full");
    assert_eq!(lost, 0, "{status}");
    for t in &tasks {
        assert_eq!(t["node"], "V", "{t}");
        assert_eq!(stdout_of(&report(t)).trim(), size.to_string(), "{t}");
    }
}
