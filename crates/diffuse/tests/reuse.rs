//! Results reused by content, live (docs/runtime.md, "Results reused by content"): a task
//! whose command, env, input contents, outputs and program files match one that already
//! succeeded gets its kept outputs instead of running. Real processes: every command appends
//! its name to a side file, so the tests count what ran.

mod common;

use common::cluster::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// A pipeline in `dir`: split (one file into three `tmp://` parts) -> three maps (a part and the
/// map's own parameter file into a `tmp://` count) -> reduce (the counts into a `file://`
/// total, by a script file).
struct Pipeline {
    dir: PathBuf,
    runs: u32,
}

impl Pipeline {
    fn new(dir: &Path) -> Pipeline {
        for sub in ["data", "out", "cache"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let lines: String = (1..=3000).map(|i| format!("{i}\n")).collect();
        std::fs::write(dir.join("data/numbers.txt"), lines).unwrap();
        for i in 1..=3 {
            std::fs::write(dir.join(format!("data/p{i}.txt")), format!("{i}\n")).unwrap();
        }
        std::fs::write(
            dir.join("map.sh"),
            "#!/bin/sh\n# map: the part's sum times the parameter\necho $(( $(awk '{s+=$1} END {print s}' \"$1\") * $(cat \"$2\") ))\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("reduce.sh"),
            "#!/bin/sh\n# reduce: the sum of the counts\ncat \"$@\" | awk '{s+=$1} END {print s}'\n",
        )
        .unwrap();
        for s in ["map.sh", "reduce.sh"] {
            let p = dir.join(s);
            let mut perm = std::fs::metadata(&p).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
            std::fs::set_permissions(&p, perm).unwrap();
        }
        Pipeline {
            dir: dir.to_path_buf(),
            runs: 0,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    fn uri(&self, rel: &str) -> String {
        file_uri(&self.path(rel))
    }

    fn tasks(&self) -> Vec<Value> {
        let ran = self.path("ran.log");
        let ran = ran.display();
        let d = self.dir.display();
        let mut tasks = vec![json!({
            "id": "split",
            "cmd": format!("echo split >> {ran}; sed -n 1,1000p {{inputs[0]}} > {{outputs[0]}}; sed -n 1001,2000p {{inputs[0]}} > {{outputs[1]}}; sed -n 2001,3000p {{inputs[0]}} > {{outputs[2]}}"),
            "inputs": [self.uri("data/numbers.txt")],
            "outputs": ["tmp://part-1", "tmp://part-2", "tmp://part-3"],
        })];
        for i in 1..=3 {
            tasks.push(json!({
                "id": format!("map{i}"),
                "cmd": format!("echo map{i} >> {ran}; {d}/map.sh {{inputs[0]}} {{inputs[1]}} > {{outputs[0]}}"),
                "inputs": [format!("tmp://part-{i}"), self.uri(&format!("data/p{i}.txt"))],
                "outputs": [format!("tmp://count-{i}")],
            }));
        }
        tasks.push(json!({
            "id": "reduce",
            "cmd": format!("echo reduce >> {ran}; {d}/reduce.sh {{inputs[0]}} {{inputs[1]}} {{inputs[2]}} > {{outputs[0]}}"),
            "inputs": ["tmp://count-1", "tmp://count-2", "tmp://count-3"],
            "outputs": [self.uri("out/total.txt")],
        }));
        tasks
    }

    /// Run the pipeline with `diffuse run` (reuse on, the caches kept between runs): which
    /// tasks ran (from the side file, sorted), and the results.
    fn run(&mut self) -> (Vec<String>, Vec<Value>) {
        self.runs += 1;
        let _ = std::fs::remove_file(self.path("ran.log"));
        let (ran, results) = run_tasks(&self.dir, &self.tasks(), self.runs);
        for r in &results {
            assert_eq!(r["state"], "succeeded", "{r}");
        }
        (ran, results)
    }

    fn total(&self) -> String {
        std::fs::read_to_string(self.path("out/total.txt")).unwrap()
    }
}

/// `diffuse run` of `tasks` in `dir` (run directory `run-<n>`, caches in `dir/cache`, reuse
/// on): the lines of `dir/ran.log`, sorted, and the results.
fn run_tasks(dir: &Path, tasks: &[Value], n: u32) -> (Vec<String>, Vec<Value>) {
    let flags = ["--workers", "2", "--reuse", "on"];
    let (out, results) = run_named(dir, &format!("-{n}"), tasks, &flags);
    assert_eq!(
        out.code,
        Some(0),
        "diffuse run: {}\n{}",
        out.stdout,
        out.stderr
    );
    let ran = std::fs::read_to_string(dir.join("ran.log")).unwrap_or_default();
    let mut ran: Vec<String> = ran.lines().map(str::to_string).collect();
    ran.sort();
    (ran, results)
}

fn reused_from(result: &Value) -> Option<String> {
    result["report"]["reused_from"].as_str().map(str::to_string)
}

fn storage_bytes(results: &[Value]) -> u64 {
    results
        .iter()
        .map(|r| traffic(&r["report"]["traffic"])[5])
        .sum()
}

#[test]
fn a_pipeline_run_again_runs_only_what_changed_and_restores_what_was_lost() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Pipeline::new(dir.path());
    // Sum of 1..1000, 1001..2000, 2001..3000, times 1, 2 and 3.
    let expected = |p2: u64| 500_500 + 1_500_500 * p2 + 2_500_500 * 3;

    let (ran, first) = p.run();
    assert_eq!(ran, ["map1", "map2", "map3", "reduce", "split"]);
    assert_eq!(p.total().trim(), expected(2).to_string());
    assert!(first.iter().all(|r| reused_from(r).is_none()));
    let total = std::fs::read(p.path("out/total.txt")).unwrap();

    // The same pipeline again: nothing runs, nothing is read from storage, the same bytes.
    let (ran, second) = p.run();
    assert!(ran.is_empty(), "ran again: {ran:?}");
    assert_eq!(storage_bytes(&second), 0, "{second:?}");
    for r in &second {
        assert_eq!(reused_from(r).as_deref(), r["id"].as_str(), "{r}");
    }
    assert_eq!(std::fs::read(p.path("out/total.txt")).unwrap(), total);

    // One map's own input changes: exactly that map and the reduce run.
    std::fs::write(p.path("data/p2.txt"), "20\n").unwrap();
    let (ran, _) = p.run();
    assert_eq!(ran, ["map2", "reduce"]);
    assert_eq!(p.total().trim(), expected(20).to_string());

    // The reduce's script is edited: only the reduce runs.
    let script = std::fs::read_to_string(p.path("reduce.sh")).unwrap();
    std::fs::write(p.path("reduce.sh"), script + "# edited\n").unwrap();
    let (ran, _) = p.run();
    assert_eq!(ran, ["reduce"]);
    let total = std::fs::read(p.path("out/total.txt")).unwrap();

    // The result file is deleted at its destination: restored from the kept copy, unrun.
    std::fs::remove_file(p.path("out/total.txt")).unwrap();
    let (ran, results) = p.run();
    assert!(ran.is_empty(), "ran again: {ran:?}");
    assert_eq!(std::fs::read(p.path("out/total.txt")).unwrap(), total);
    assert_eq!(storage_bytes(&results), 0);

    // The kept copy of the reduce's output is evicted from every cache: the reduce runs.
    let sha = hex::encode(Sha256::digest(&total));
    let key = hex::encode(Sha256::digest(format!("result://{sha}").as_bytes()));
    let mut removed = 0;
    for w in std::fs::read_dir(p.path("cache")).unwrap().flatten() {
        let obj = w.path().join("objects").join(&key);
        if obj.exists() {
            std::fs::remove_file(&obj).unwrap();
            let _ = std::fs::remove_file(obj.with_extension("meta"));
            removed += 1;
        }
    }
    assert!(removed > 0, "no kept copy of the reduce's output found");
    let (ran, _) = p.run();
    assert_eq!(ran, ["reduce"]);
    assert_eq!(std::fs::read(p.path("out/total.txt")).unwrap(), total);
}

#[test]
fn a_task_marked_not_reusable_always_runs() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran.log");
    let out = file_uri(&dir.path().join("stamp.txt"));
    let tasks = [json!({
        "id": "stamp",
        "cmd": format!("echo stamp >> {}; date +%s%N > {{outputs[0]}}", ran.display()),
        "outputs": [out],
        "reuse": false,
    })];
    for n in 1..=2 {
        let (lines, results) = run_tasks(dir.path(), &tasks, n);
        assert_eq!(lines.len(), n as usize, "run {n}: {lines:?}");
        assert!(reused_from(&results[0]).is_none());
    }
}

/// An input both tasks read, so that the identity waits on its digest.
fn shared_task(c: &Cluster, id: &str, input: &str) -> Value {
    let side = c.path("side.log");
    json!({
        "id": id,
        "cmd": format!("sleep 1; echo ran >> {}; wc -l < {{inputs[0]}} > {{outputs[0]}}; echo counted", side.display()),
        "inputs": [input],
        "outputs": [file_uri(&c.path("count.txt"))],
    })
}

#[test]
fn identical_tasks_from_two_clients_at_once_run_once_and_a_restart_keeps_the_index() {
    let mut c = Cluster::start(&[("DIFFUSE_REUSE", "on")]);
    c.worker("w1", 2, "100MB");
    c.worker("w2", 2, "100MB");
    c.wait_workers(2);
    let input = file_uri(&c.data("lines.txt", b"a\nb\nc\n"));
    let (a, b) = (shared_task(&c, "a", &input), shared_task(&c, "b", &input));
    std::thread::scope(|s| {
        s.spawn(|| c.submit(&[a]));
        s.spawn(|| c.submit(&[b]));
    });
    let (_, ra) = c.wait_succeeded("a");
    let (_, rb) = c.wait_succeeded("b");
    let side = std::fs::read_to_string(c.path("side.log")).unwrap();
    assert_eq!(side.lines().count(), 1, "ran more than once: {side}");
    let reused: Vec<_> = [&ra, &rb]
        .iter()
        .filter_map(|r| r["reused_from"].as_str())
        .collect();
    assert_eq!(reused.len(), 1, "{ra}\n{rb}");
    assert_eq!(
        std::fs::read_to_string(c.path("count.txt")).unwrap().trim(),
        "3"
    );
    assert_eq!(c.status()["reused"], 1);
    // The reused one's captured output is the kept one, as `diffuse logs` shows it.
    for id in ["a", "b"] {
        let logs = c
            .http
            .get(format!("{}/v1/tasks/{id}/logs", c.url))
            .bearer_auth(&c.client_token)
            .send()
            .unwrap()
            .text()
            .unwrap();
        assert_eq!(logs, "counted\n", "task {id}");
    }

    // The index is in the journal: after a restart (its workers come back with their caches)
    // an identical task is reused, not run.
    c.restart_dispatcher();
    c.worker("w1", 2, "100MB");
    c.worker("w2", 2, "100MB");
    c.wait_workers(2);
    c.submit(&[shared_task(&c, "after-restart", &input)]);
    let (_, r) = c.wait_succeeded("after-restart");
    assert!(r["reused_from"].is_string(), "{r}");
    let side = std::fs::read_to_string(c.path("side.log")).unwrap();
    assert_eq!(side.lines().count(), 1, "ran after the restart: {side}");
    let kept = c.get("/v1/results");
    assert!(kept["results"].as_u64().unwrap() >= 1, "{kept}");
}

/// A producer and its reader, its intermediate named after `run`.
fn two_stage(c: &Cluster, run: &str, input: &str) -> Vec<Value> {
    let side = c.path("stages.log");
    let side = side.display();
    vec![
        json!({"id": format!("{run}-make"), "cmd": format!("echo make >> {side}; tr a-z A-Z < {{inputs[0]}} > {{outputs[0]}}"),
               "inputs": [input], "outputs": [format!("tmp://{run}-upper")]}),
        json!({"id": format!("{run}-use"), "cmd": format!("echo use >> {side}; rev < {{inputs[0]}} > {{outputs[0]}}"),
               "inputs": [format!("tmp://{run}-upper")], "outputs": [file_uri(&c.path("final.txt"))]}),
    ]
}

#[test]
fn a_pipeline_submitted_again_with_new_intermediate_names_is_reused_on_a_shared_dispatcher() {
    let mut c = Cluster::start(&[("DIFFUSE_REUSE", "on")]);
    c.worker("w1", 2, "100MB");
    c.wait_workers(1);
    let input = file_uri(&c.data("words.txt", b"abc\ndef\n"));
    c.submit(&two_stage(&c, "r1", &input));
    c.wait_succeeded("r1-use");
    let first = std::fs::read(c.path("final.txt")).unwrap();
    assert_eq!(first, b"CBA\nFED\n");
    c.submit(&two_stage(&c, "r2", &input));
    let (_, make) = c.wait_succeeded("r2-make");
    let (_, used) = c.wait_succeeded("r2-use");
    assert_eq!(make["reused_from"], "r1-make", "{make}");
    assert_eq!(used["reused_from"], "r1-use", "{used}");
    let side = std::fs::read_to_string(c.path("stages.log")).unwrap();
    assert_eq!(side, "make\nuse\n", "the second pipeline ran nothing");
    assert_eq!(std::fs::read(c.path("final.txt")).unwrap(), first);
    // The reused intermediate existed under its new name, for its reader, and was released
    // after it, as a made one is.
    let o = c.object("tmp://r2-upper");
    assert_eq!(
        (&o["producer"], &o["size"], &o["state"]),
        (&json!("r2-make"), &json!(8), &json!("released")),
        "{o}"
    );
}
