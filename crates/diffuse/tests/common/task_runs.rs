//! What a fault test records of its tasks: each task logs its own runs (start and end,
//! attempt, host, exit code) to a shared file, so that a run the dispatcher does not know of,
//! a task run twice or a side effect done twice is seen; [`outcomes`] sets that against what
//! the dispatcher recorded, and [`figures`] prints the line of figures the docs quote (tasks,
//! faults, lost, run more than once and why, time to recover).

#![allow(dead_code)] // each test crate uses a different part

use super::cluster::{file_uri, random_bytes, Cluster};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

/// A task that logs its run to `runs` (`start|end <id> <attempt> <host> [rc]`), then runs
/// `cmd` under `sh -c`.
pub fn logged_task(id: &str, cmd: &str, inputs: &[String], runs: &Path) -> Value {
    let runs = runs.display();
    json!({
        "id": id,
        "cmd": format!(
            "echo \"start $DIFFUSE_TASK_ID $DIFFUSE_ATTEMPT $(hostname)\" >> {runs}; {{ {cmd}; }}; \
             rc=$?; echo \"end $DIFFUSE_TASK_ID $DIFFUSE_ATTEMPT $(hostname) $rc\" >> {runs}; exit $rc"
        ),
        "inputs": inputs,
    })
}

/// One run of a task, from the runs log.
#[derive(Clone, Debug)]
pub struct Run {
    pub attempt: u32,
    pub host: String,
    /// Its exit code, if it ended (a run killed with its worker has none).
    pub rc: Option<i32>,
}

/// Each task's runs, in the order they started.
pub fn runs_of(path: &Path) -> BTreeMap<String, Vec<Run>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut runs: BTreeMap<String, Vec<Run>> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f[..] {
            ["start", id, attempt, host] => runs.entry(id.into()).or_default().push(Run {
                attempt: attempt.parse().unwrap_or(0),
                host: host.into(),
                rc: None,
            }),
            ["end", id, attempt, host, rc] => {
                let run = runs.get_mut(id).and_then(|r| {
                    r.iter_mut().rev().find(|r| {
                        r.attempt.to_string() == attempt && r.host == host && r.rc.is_none()
                    })
                });
                if let Some(run) = run {
                    run.rc = rc.parse().ok();
                }
            }
            _ => {}
        }
    }
    runs
}

/// What became of the tasks `ids`.
pub struct Outcomes {
    /// Tasks acknowledged.
    pub tasks: usize,
    /// Tasks that did not succeed (each must have: lost, or failed).
    pub lost: Vec<String>,
    /// Tasks started more than once, with their runs.
    pub again: Vec<(String, Vec<Run>)>,
    /// Tasks whose process ran to its end more than once (a side effect done twice).
    pub completed_twice: Vec<String>,
    /// Runs of a task the dispatcher has no attempt for (a run outside its knowledge).
    pub unknown_runs: Vec<String>,
}

/// Wait until every task of `ids` has ended, then set what the dispatcher recorded against
/// what ran: each task listed once, succeeded, every run one of its attempts.
pub fn outcomes(c: &Cluster, ids: &[String], runs: &Path) -> Outcomes {
    for id in ids {
        c.wait_done(id);
    }
    let listed = c.list_tasks(None);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for t in &listed {
        *seen
            .entry(t["id"].as_str().unwrap_or_default().into())
            .or_default() += 1;
    }
    for id in ids {
        assert_eq!(seen.get(id), Some(&1), "{id} listed once: {seen:?}");
    }
    let all = runs_of(runs);
    let mut o = Outcomes {
        tasks: ids.len(),
        lost: Vec::new(),
        again: Vec::new(),
        completed_twice: Vec::new(),
        unknown_runs: Vec::new(),
    };
    for id in ids {
        let t = c.task(id);
        if t["state"] != "succeeded" {
            o.lost.push(format!("{id}: {}", t["state"]));
        }
        let r = all.get(id).cloned().unwrap_or_default();
        let attempts: BTreeSet<u64> = t["attempts"]
            .as_array()
            .map(|a| a.iter().filter_map(|a| a["attempt"].as_u64()).collect())
            .unwrap_or_default();
        for run in &r {
            if !attempts.contains(&u64::from(run.attempt)) {
                o.unknown_runs
                    .push(format!("{id}: run {run:?}, attempts {attempts:?}"));
            }
        }
        if r.iter().filter(|r| r.rc == Some(0)).count() > 1 {
            o.completed_twice.push(id.clone());
        }
        if r.len() > 1 {
            o.again.push((id.clone(), r));
        }
    }
    o
}

/// Print the figures line of a fault test, and each task run again with its runs.
pub fn figures(fault: &str, o: &Outcomes, faults: usize, why_again: &str, recovered: Duration) {
    for (id, runs) in &o.again {
        let runs: Vec<String> = runs
            .iter()
            .map(|r| format!("{} on {} ({:?})", r.attempt, r.host, r.rc))
            .collect();
        eprintln!("  run again: {id}: {}", runs.join(", "));
    }
    eprintln!(
        "FIGURES | {fault} | tasks {} | faults {faults} | lost {} | run more than once {} ({}) | \
         completed twice {} | recovered in {:.1} s",
        o.tasks,
        o.lost.len(),
        o.again.len(),
        if o.again.is_empty() {
            "none"
        } else {
            why_again
        },
        o.completed_twice.len(),
        recovered.as_secs_f64()
    );
}

/// `n` files of `size` random bytes in the cluster's data directory (shared storage, which every
/// host sees); their URIs.
pub fn data_files(c: &Cluster, prefix: &str, n: usize, size: usize) -> Vec<String> {
    (0..n)
        .map(|i| file_uri(&c.data(&format!("{prefix}{i}"), &random_bytes(size))))
        .collect()
}

pub fn ids(tasks: &[Value]) -> Vec<String> {
    tasks
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect()
}
