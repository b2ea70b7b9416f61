//! What the fault tests keep account of, besides what the dispatcher says: every start of a
//! task's process (appended by the process itself to a file on the machine's one file system,
//! which no network fault reaches), every outcome as first seen (a second outcome of a task
//! would change it), and one row of the figures table per test.

use crate::common::cluster::poll;
use crate::common::hosts::Hosts;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// `cmd` for `sh -c`, run in a subshell between two lines appended to `runs`: the task's id,
/// attempt and worker, then `start`, or `end` and the exit status, written by its own process.
pub fn recorded(cmd: &str, runs: &Path) -> String {
    let line = |what: &str| {
        format!(
            "echo \"$DIFFUSE_TASK_ID $DIFFUSE_ATTEMPT $DIFFUSE_NODE {what}\" >> '{}'",
            runs.display()
        )
    };
    format!(
        "{}; ( {cmd}\n); rc=$?; {}; exit $rc",
        line("start"),
        line("end $rc")
    )
}

/// The lines of `runs` marked `what` (`start` or `end`), by task: `attempt@worker`.
fn marked(runs: &Path, what: &str) -> BTreeMap<String, Vec<String>> {
    let mut by_task: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in std::fs::read_to_string(runs).unwrap_or_default().lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 4 && f[3] == what {
            by_task
                .entry(f[0].to_string())
                .or_default()
                .push(format!("{}@{}", f[1], f[2]));
        }
    }
    by_task
}

/// Each task's process starts, as `attempt@worker`, from `runs`.
pub fn starts(runs: &Path) -> BTreeMap<String, Vec<String>> {
    marked(runs, "start")
}

/// The tasks whose process started more than once, each with its starts.
pub fn started_twice(runs: &Path) -> Vec<String> {
    starts(runs)
        .into_iter()
        .filter(|(_, s)| s.len() > 1)
        .map(|(id, s)| format!("{id} ({})", s.join(", ")))
        .collect()
}

/// Outcomes as first seen, by task id: (attempt, worker, finished_at). A task that got a
/// second outcome would show another one later.
#[derive(Default)]
pub struct Outcomes {
    first: BTreeMap<String, (u64, String, f64)>,
}

impl Outcomes {
    /// Note the outcome of every task that has one now; panic if one differs from the one
    /// first seen.
    pub fn observe(&mut self, h: &Hosts) {
        let mut after: Option<String> = None;
        loop {
            let mut q = String::from("/v1/tasks?limit=10000");
            if let Some(a) = &after {
                q.push_str(&format!("&after={a}"));
            }
            let Some(page) = h.get(&q) else { return };
            for t in page["tasks"].as_array().into_iter().flatten() {
                self.note(t);
            }
            match page["next"].as_str() {
                Some(n) => after = Some(n.to_string()),
                None => return,
            }
        }
    }

    fn note(&mut self, t: &Value) {
        let o = &t["outcome"];
        if o.is_null() {
            return;
        }
        let seen = (
            o["attempt"].as_u64().unwrap_or(0),
            o["node"].as_str().unwrap_or_default().to_string(),
            o["finished_at"].as_f64().unwrap_or(0.0),
        );
        let id = t["id"].as_str().expect("id").to_string();
        let first = self.first.entry(id.clone()).or_insert_with(|| seen.clone());
        assert_eq!(
            *first, seen,
            "task {id} has a second outcome (attempt, worker, finished at): {t}"
        );
    }

    /// How many tasks have an outcome.
    pub fn len(&self) -> usize {
        self.first.len()
    }
}

/// Wait until `n` tasks have ended and nothing is queued, running or ending, noting outcomes
/// meanwhile; the status then.
pub fn wait_all_ended(h: &Hosts, n: u64, seen: &mut Outcomes) -> Value {
    poll(&format!("{n} tasks to end"), || {
        seen.observe(h);
        let s = h.get("/v1/status")?;
        let ended: u64 = ["succeeded", "failed", "cancelled"]
            .iter()
            .map(|k| s[k].as_u64().unwrap_or(0))
            .sum();
        let busy: u64 = ["queued", "running", "ending"]
            .iter()
            .map(|k| s[k].as_u64().unwrap_or(0))
            .sum();
        (ended == n && busy == 0).then_some(s)
    })
}

/// Every task ended succeeded, each counted once and with one outcome: that of its last
/// attempt, or for a producer in `producers` that of an earlier one (a producer run again to
/// remake a lost intermediate is an attempt, not a second outcome). Returns every task, and
/// the number lost (not succeeded), which the caller asserts is 0 after printing its figures.
pub fn one_outcome_each(h: &Hosts, producers: &[&str], seen: &mut Outcomes) -> (Vec<Value>, usize) {
    seen.observe(h);
    let tasks = h.every_task();
    let s = h.get("/v1/status").expect("status");
    assert_eq!(
        s["submitted"].as_u64(),
        Some(tasks.len() as u64),
        "the status counts every task once: {s}"
    );
    let mut lost = 0;
    for t in &tasks {
        let id = t["id"].as_str().expect("id");
        if t["state"] != "succeeded" {
            eprintln!("LOST: {t}");
            lost += 1;
            continue;
        }
        let last = t["attempts"]
            .as_array()
            .and_then(|a| a.iter().filter_map(|a| a["attempt"].as_u64()).max())
            .unwrap_or(0);
        let outcome = t["outcome"]["attempt"].as_u64().unwrap_or(0);
        if producers.contains(&id) {
            assert!(outcome >= 1 && outcome <= last, "{id}: {t}");
        } else {
            assert_eq!(outcome, last, "{id}'s outcome is its last attempt's: {t}");
        }
    }
    assert_eq!(
        s["succeeded"].as_u64(),
        Some((tasks.len() - lost) as u64),
        "{s}"
    );
    assert_eq!(seen.len(), tasks.len(), "every task has an outcome");
    (tasks, lost)
}

/// One row of the figures table (docs/runtime.md, "Faults across hosts").
pub struct Figures {
    pub fault: &'static str,
    pub tasks: usize,
    pub injected: String,
    pub lost: usize,
    pub twice: String,
    pub recovery: String,
}

impl Figures {
    /// Print the row (`cargo test --test faults_net -- --nocapture` shows it).
    pub fn print(&self) {
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            self.fault, self.tasks, self.injected, self.lost, self.twice, self.recovery
        );
    }
}

/// With `FAULTS_NET_LOGS=DIR` set, copy every process's log of `h` to `DIR/test`, to read
/// after a passing run (a failing one prints their ends).
pub fn keep_logs(h: &Hosts, test: &str) {
    let Some(to) = std::env::var_os("FAULTS_NET_LOGS") else {
        return;
    };
    let to = Path::new(&to).join(test);
    std::fs::create_dir_all(&to).expect("FAULTS_NET_LOGS");
    for e in std::fs::read_dir(h.dir.path())
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name();
        if name.to_string_lossy().ends_with(".log") {
            let _ = std::fs::copy(e.path(), to.join(&name));
        }
    }
}
