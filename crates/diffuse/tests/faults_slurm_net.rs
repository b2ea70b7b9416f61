//! Network faults under the multi-host Slurm (issue 28; `scripts/slurm-hosts.sh`): the
//! dispatcher on the head with `--provisioner slurm`, its workers batch jobs on the hosts, and
//! the network between them broken under a running workload ([`NetHost`]: netfilter rules,
//! as this kernel has no `netem`):
//!
//! - fault 1: a worker cut off from the dispatcher for 30 s while it runs tasks and holds the
//!   only copy of an intermediate, then healed;
//! - fault 2: 5% loss and 50 ms delay on every link (the head's too) for a whole dataflow run;
//! - fault 5: a peer that slows to 1 Mbit/s in the middle of a multi-source read.
//!
//! Every task logs each run (start and end, attempt, host) to a shared file, so a run the
//! dispatcher does not know of, or a task run twice, is seen. Each test prints one line of
//! figures (`FIGURES | ...`, with `--nocapture`; docs/runtime.md, "Faults across hosts"):
//!
//! ```sh
//! cargo test -p diffuse --test faults_slurm_net -- --nocapture
//! ```
//!
//! Root only; others print SKIPPED and pass.
//!
//! [`NetHost`]: common::netfault::NetHost

mod common;

use common::cluster::{file_uri, gated_task, poll, random_bytes, report, traffic, Cluster, Proc};
use common::slurm_hosts::*;
use common::task_runs::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The SHA-256 line `sha256sum` prints for the output of the shell command `cmd`.
fn sha256sum_of(cmd: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("{cmd} | sha256sum"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The port of the dispatcher's URL (`http://10.1.2.3:4000` -> `4000`).
fn port_of(url: &str) -> String {
    url.rsplit(':').next().unwrap().trim_end_matches('/').into()
}

// ----- fault 1: a worker cut off from the dispatcher -----

/// The cut's workload: a task on C held until `gate` exists, four readers of `tmp://mid` after
/// it (each writes the digest of what it read to `sums/<id>`), two 12 s tasks that would rather
/// run on A, and forty 2 s tasks.
fn cut_workload(a: &str, c: &str, gate: &Path, runs: &Path, sums: &Path) -> Vec<Value> {
    let mut hold = logged_task(
        "hold",
        gated_task("hold", gate)["cmd"].as_str().unwrap(),
        &[],
        runs,
    );
    hold["hint"] = json!({"node": c});
    let mut batch = vec![hold];
    for i in 0..4 {
        let mut t = logged_task(
            &format!("use{i}"),
            "sha256sum < {inputs[0]} > {outputs[0]}",
            &["tmp://mid".into()],
            runs,
        );
        t["outputs"] = json!([file_uri(&sums.join(format!("use{i}")))]);
        t["after"] = json!(["hold"]);
        batch.push(t);
    }
    for i in 0..2 {
        let mut t = logged_task(&format!("long{i}"), "sleep 12", &[], runs);
        t["hint"] = json!({"node": a});
        batch.push(t);
    }
    for i in 0..40 {
        batch.push(logged_task(&format!("w{i:02}"), "sleep 2", &[], runs));
    }
    batch
}

/// Drop every packet between host 1 (worker `a`) and the dispatcher's port, both ways, on
/// receipt, for 30 s; open `gate` 2 s after `a` is given up. How long until it was given up,
/// how long after the heal it was back, and the packets dropped.
fn cut_for_30_s(s: &SlurmHosts, c: &Cluster, a: &str, gate: &Path) -> (Duration, Duration, u64) {
    let port = port_of(&c.url);
    let a_addr = s.host(1).addr.clone();
    let rules = |undo: bool| {
        s.head_net()
            .drop_from(&a_addr, &["-p", "tcp", "--dport", &port], undo);
        s.net(1)
            .drop_from(&s.head, &["-p", "tcp", "--sport", &port], undo);
    };
    let cut = Instant::now();
    rules(false);
    poll("A to be given up", || {
        (!connected(c).iter().any(|w| w == a)).then_some(())
    });
    let given_up = cut.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    std::fs::write(gate, b"").unwrap();
    while cut.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(500));
    }
    let dropped = s.head_net().dropped() + s.net(1).dropped();
    rules(true);
    let healed = Instant::now();
    poll("A to join again", || {
        connected(c).iter().any(|w| w == a).then_some(())
    });
    (given_up, healed.elapsed(), dropped)
}

/// Three two-core workers, one per host (a fourth host free for a replacement job). A runs two
/// 12 s tasks and holds the only copy of `tmp://mid`, which four queued readers need, when every
/// packet between it and the dispatcher is dropped for 30 s (Slurm's own traffic, which has a
/// 10 s `SlurmdTimeout` here, passes: see docs/runtime.md). The dispatcher gives A up after
/// its heartbeat timeout (5 s) and runs A's tasks again elsewhere, but keeps A's job for
/// `--lost-grace` (60 s) for it to come back; the readers get `tmp://mid` made again (its only
/// copy is out of reach). A gives its connection up too and stops the two tasks (none runs to
/// its end out of sight); when the network heals it joins again within seconds, with its
/// cache, and takes tasks.
#[test]
fn fault1_a_worker_cut_off_from_the_dispatcher_for_30_s_loses_nothing_and_is_taken_back() {
    let _turn = one_at_a_time();
    let Some(s) = slurm_or_skip("fault 1", 4, 2) else {
        return;
    };
    let args = pool_args(
        &s,
        3,
        2,
        "diffuse-{request}",
        &[
            "--min-workers",
            "3",
            "--idle-release",
            "60s",
            "--lost-grace",
            "60s",
        ],
    );
    let mut c = head_dispatcher(&s, &strs(&args), &[]);
    let _dump = DumpWorkerLogs::of(&c);
    let w = workers_by_host(&c, &s, 3);
    let (a, cw) = (w["node1"].clone(), w["node3"].clone());
    let runs = c.path("runs");
    let sums = c.path("sums");
    std::fs::create_dir_all(&sums).unwrap();
    let mut make = logged_task("make", "seq 1 200000 > {outputs[0]}", &[], &runs);
    make["outputs"] = json!(["tmp://mid"]);
    make["hint"] = json!({"node": a});
    c.submit(&[make]);
    assert_eq!(c.wait_done("make")["node"], json!(a));
    let gate = c.path("gate");
    let workload = cut_workload(&a, &cw, &gate, &runs, &sums);
    c.submit(&workload);
    let mut all = vec!["make".to_string()];
    all.extend(ids(&workload));
    poll("A to run the two long tasks", || {
        let r = runs_of(&runs);
        let on_a = |id: &str| {
            r.get(id)
                .is_some_and(|r| r.iter().any(|r| r.host == "node1"))
        };
        (on_a("long0") && on_a("long1")).then_some(())
    });

    let (given_up, rejoined, dropped) = cut_for_30_s(&s, &c, &a, &gate);
    // A takes tasks again: four that would rather run on it.
    let back: Vec<Value> = (0..4)
        .map(|i| {
            let mut t = logged_task(&format!("back{i}"), "sleep 0.5", &[], &runs);
            t["hint"] = json!({"node": a});
            t
        })
        .collect();
    c.submit(&back);
    all.extend(ids(&back));
    let o = outcomes(&c, &all, &runs);

    let remade = c.task("make")["attempts"].as_array().map_or(0, |a| a.len()) > 1;
    let refused = dispatcher_logs(&c).matches("stale result refused").count();
    figures(
        "fault 1: a worker cut off from the dispatcher for 30 s (heartbeat timeout 5 s)",
        &o,
        1,
        &format!(
            "A's attempts given up at the cut, run again elsewhere{}",
            if remade {
                "; make: tmp://mid remade"
            } else {
                ""
            }
        ),
        rejoined,
    );
    eprintln!(
        "fault 1: {dropped} packets dropped; A given up {:.1} s into the cut, rejoined {:.1} s \
         after the heal; {refused} late reports refused; workers after: {:?}",
        given_up.as_secs_f64(),
        rejoined.as_secs_f64(),
        connected(&c)
    );
    for lost in &o.lost {
        let id = lost.split(':').next().unwrap();
        eprintln!("{id}: {}", c.task(id));
    }
    assert!(o.lost.is_empty(), "lost: {:?}", o.lost);
    assert!(o.unknown_runs.is_empty(), "{:?}", o.unknown_runs);
    // Only the producer of the intermediate may have run to its end twice (remade).
    assert!(
        o.completed_twice.iter().all(|id| id == "make"),
        "ran to its end twice: {:?}",
        o.completed_twice
    );
    assert!(dropped > 0, "the cut dropped packets");
    // The readers read the right bytes, whichever copy they had.
    let want = sha256sum_of("seq 1 200000");
    for i in 0..4 {
        let got = std::fs::read_to_string(sums.join(format!("use{i}"))).unwrap();
        assert_eq!(got, want, "use{i}");
    }
    // A's two long tasks were given up and ran again on another host; A stopped them when its
    // own connection gave up (12 s tasks, given up 5 s in), so neither ended on A.
    let r = runs_of(&runs);
    for id in ["long0", "long1"] {
        let runs = &r[id];
        assert!(
            runs.iter().any(|r| r.host == "node1") && runs.last().unwrap().host != "node1",
            "{id} ran again off A: {runs:?}"
        );
        assert!(
            runs.iter().all(|r| r.host != "node1" || r.rc.is_none()),
            "{id} ran to its end on A while cut off: {runs:?}"
        );
        assert_ne!(c.task(id)["node"], json!(a), "{id}'s outcome is not A's");
    }
    assert!(
        rejoined < Duration::from_secs(15),
        "A rejoined {:.1} s after the heal",
        rejoined.as_secs_f64()
    );
    let on_a_again = back
        .iter()
        .filter(|t| c.task(t["id"].as_str().unwrap())["node"] == json!(a))
        .count();
    assert!(on_a_again >= 1, "A took tasks again after it rejoined");
    assert!(
        names_with_two_jobs(&s).is_empty(),
        "{:?}",
        names_with_two_jobs(&s)
    );
    stop_pool(&mut c, &s);
}

// ----- fault 2: loss and delay on every link for a whole dataflow run -----

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
    runs: &Path,
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
    let mut first = logged_task(
        &format!("{p}split"),
        &split.join(" && "),
        &[input.into()],
        runs,
    );
    first["outputs"] = json!((0..parts)
        .map(|i| format!("tmp://{p}part{i}"))
        .collect::<Vec<_>>());
    let mut tasks = vec![first];
    for i in 0..parts {
        let mut map = logged_task(
            &format!("{p}map{i}"),
            "tr 0-9a-f A-P < {inputs[0]} > {outputs[0]}",
            &[format!("tmp://{p}part{i}")],
            runs,
        );
        map["outputs"] = json!([format!("tmp://{p}up{i}")]);
        tasks.push(map);
    }
    let cat: Vec<String> = (0..parts).map(|i| format!("{{inputs[{i}]}}")).collect();
    let ups: Vec<String> = (0..parts).map(|i| format!("tmp://{p}up{i}")).collect();
    let mut reduce = logged_task(
        &format!("{p}reduce"),
        &format!("cat {} > {{outputs[0]}}", cat.join(" ")),
        &ups,
        runs,
    );
    reduce["outputs"] = json!([out]);
    tasks.push(reduce);
    tasks
}

/// Three two-core workers, one per host, run a split, twelve maps and a reduce over 3.8 MB read
/// over HTTP from the head, with `tmp://` intermediates read from peers: once on a clean
/// network, then with every host and the head losing 5% of the packets they receive and
/// holding each 50 ms (100 ms round trips; Slurm's traffic too). Both complete with the right
/// bytes, each task once, and no worker is given up.
#[test]
fn fault2_loss_and_delay_on_every_link_slow_a_dataflow_run_and_change_no_byte() {
    let _turn = one_at_a_time();
    let Some(s) = slurm_or_skip("fault 2", 3, 2) else {
        return;
    };
    let args = pool_args(
        &s,
        3,
        2,
        "diffuse-{request}",
        &["--min-workers", "3", "--idle-release", "60s"],
    );
    let mut c = head_dispatcher(&s, &strs(&args), &[]);
    let _dump = DumpWorkerLogs::of(&c);
    workers_by_host(&c, &s, 3);
    let runs = c.path("runs");
    let lines = 160_000;
    let text = known_text(lines);
    let store = c.path("store");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(store.join("input.txt"), &text).unwrap();
    // An HTTP store on the head: every read of the input crosses a link.
    let (_store, url) = head_store(&s, &c, &store);
    let input = format!("{url}/input.txt");
    let parts = 12;
    let run = |p: &str| {
        let out = file_uri(&c.path(&format!("{p}result.txt")));
        let t = Instant::now();
        c.submit(&pipeline(p, &input, lines, parts, &out, &runs));
        c.wait_done(&format!("{p}reduce"));
        t.elapsed()
    };
    let clean = run("c-");

    let mut delays = Vec::new();
    let nets: Vec<_> = std::iter::once(s.head_net().clone())
        .chain((1..=3).map(|i| s.net(i)))
        .collect();
    for (i, net) in nets.iter().enumerate() {
        net.lose(5.0);
        let log = c.path(&format!("delay-{i}.log"));
        delays.push(Proc::spawn(
            &format!("delay {i}"),
            &mut net.delay(50),
            log.clone(),
        ));
        poll("the delay to start", || {
            std::fs::read_to_string(&log)
                .ok()
                .filter(|l| l.contains("delaying"))
        });
    }
    let faulty = run("f-");
    let dropped: u64 = nets.iter().map(|n| n.dropped()).sum();
    drop(delays);
    let mut all = ids(&pipeline("c-", &input, lines, parts, "", &runs));
    all.extend(ids(&pipeline("f-", &input, lines, parts, "", &runs)));
    let o = outcomes(&c, &all, &runs);
    figures(
        "fault 2: 5% loss and 50 ms delay on every link, split -> 12 maps -> reduce, 3.8 MB",
        &o,
        1,
        "",
        faulty,
    );
    eprintln!(
        "fault 2: {dropped} packets dropped, every packet delayed; run {:.1} s, against {:.1} s \
         on a clean network",
        faulty.as_secs_f64(),
        clean.as_secs_f64()
    );
    assert!(o.lost.is_empty(), "lost: {:?}", o.lost);
    assert!(o.unknown_runs.is_empty(), "{:?}", o.unknown_runs);
    assert!(o.again.is_empty(), "no task ran twice: {:?}", o.again);
    let want = mapped(&text);
    for p in ["c-", "f-"] {
        let got = std::fs::read_to_string(c.path(&format!("{p}result.txt"))).unwrap();
        assert!(
            got == want,
            "{p}result.txt is not the input mapped ({} bytes against {})",
            got.len(),
            want.len()
        );
        let r = report(&c.task(&format!("{p}reduce")));
        let t = traffic(&r["traffic"]);
        assert_eq!(t[2], 0, "the reduce read no intermediate from storage: {r}");
        assert!(t[1] >= 1, "the reduce read from peers: {r}");
    }
    assert!(dropped > 0, "the loss rules dropped packets");
    let log = dispatcher_logs(&c);
    assert!(
        !log.contains("worker lost"),
        "no worker missed its heartbeat timeout:\n{log}"
    );
    stop_pool(&mut c, &s);
}

// ----- fault 5: a peer slowed to 1 Mbit/s mid-transfer -----

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

/// Five one-core workers, one per host. A, B and C (nodes 1-3) hold a 128 MiB object and each
/// host sends at 100 Mbit/s. E (node 5) reads it from all three (the measured time of three
/// fast sources), then its job is cancelled, so that D (node 4) has the same three. A second
/// into D's read C's link drops to 1 Mbit/s. D's other sources take C's chunks, the last one
/// read again, so D ends near the time of two fast sources, not C's (its third at 1 Mbit/s
/// would take minutes).
#[test]
fn fault5_a_peer_slowed_to_1_mbit_mid_transfer_is_outrun_by_the_other_sources() {
    let _turn = one_at_a_time();
    let Some(s) = slurm_or_skip("fault 5", 5, 1) else {
        return;
    };
    let args = pool_args(
        &s,
        5,
        1,
        "diffuse-{request}",
        &[
            "--min-workers",
            "5",
            "--idle-release",
            "60s",
            "--worker-cache-size",
            "1GB",
        ],
    );
    let mut c = head_dispatcher(&s, &strs(&args), &[]);
    let _dump = DumpWorkerLogs::of(&c);
    let w = workers_by_host(&c, &s, 5);
    let runs = c.path("runs");
    let sums = c.path("sums");
    std::fs::create_dir_all(&sums).unwrap();
    let size = 128usize << 20;
    let x = c.data("x.bin", &random_bytes(size));
    let want = sha256sum_of(&format!("cat '{}'", x.display()));
    let uri = file_uri(&x);
    let read = |id: &str, node: &str| {
        let mut t = logged_task(
            id,
            "sha256sum < {inputs[0]} > {outputs[0]}",
            std::slice::from_ref(&uri),
            &runs,
        );
        t["outputs"] = json!([file_uri(&sums.join(id))]);
        t["hint"] = json!({"node": w[node], "strict": true});
        t
    };
    let staging = |id: &str| {
        let t = c.wait_done(id);
        assert_eq!(t["state"], "succeeded", "{t}");
        let got = std::fs::read_to_string(sums.join(id)).unwrap();
        assert_eq!(got, want, "{id} read every byte right");
        let r = report(&t);
        r["staged_at"].as_f64().unwrap() - r["started_at"].as_f64().unwrap()
    };
    let mut all = Vec::new();
    for (id, node) in [("a", "node1"), ("b", "node2"), ("c", "node3")] {
        c.submit(&[read(id, node)]);
        staging(id);
        all.push(id.to_string());
    }
    for host in 1..=5 {
        s.shape(host, "100mbit");
    }
    c.submit(&[read("e", "node5")]);
    let three = staging("e");
    all.push("e".into());
    // E's job ends (cancelled), so that D reads from A, B and C only. The pool asks for a
    // worker in its place, which holds nothing.
    let e_job = s
        .jobs("dfs-")
        .into_iter()
        .find(|j| j.name == w["node5"])
        .expect("E's job");
    s.cmd("scancel", &[&e_job.id]);
    poll("E to leave", || {
        (!connected(&c).contains(&w["node5"])).then_some(())
    });
    c.submit(&[read("d", "node4")]);
    all.push("d".into());
    c.wait_state("d", "running");
    std::thread::sleep(Duration::from_secs(1));
    s.shape(3, "1mbit");
    let slowed = Instant::now();
    let secs = staging("d");
    let ended_after = slowed.elapsed();
    let d_log = worker_log(&c, &w["node4"]);
    let c_mb = share_from(&d_log, &s.host(3).addr);
    let o = outcomes(&c, &all, &runs);
    // What the two fast links alone carry the object in, from E's measured three; and what C's
    // third would have taken at 1 Mbit/s.
    let two_fast = three * 1.5;
    let c_third = (size as f64 / 3.0) / (1e6 / 8.0);
    figures(
        "fault 5: a peer slowed from 100 to 1 Mbit/s a second into a 128 MiB read from 3 holders",
        &o,
        1,
        "",
        ended_after,
    );
    eprintln!(
        "fault 5: D read in {secs:.1} s; three fast sources {three:.1} s, two {two_fast:.1} s; \
         C sent {} MB, its third at 1 Mbit/s would take {c_third:.0} s",
        c_mb.map_or("?".into(), |m| m.to_string())
    );
    assert!(o.lost.is_empty(), "lost: {:?}", o.lost);
    assert!(o.again.is_empty(), "no task ran twice: {:?}", o.again);
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
    stop_pool(&mut c, &s);
}
