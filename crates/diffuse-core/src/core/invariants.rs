//! The invariants that span the core's owners (task phases against the queue, the nodes and
//! the counters; jobs; demanding tasks), as functions of what they read. Each owner checks its
//! own state ([`super::nodes::Nodes::check`], [`super::copies::Copies::check`], ...);
//! `Core::check_invariants` runs them all, as tests and the simulator's `--check` mode do after
//! every step.

use super::config::Counts;
use super::nodes::Nodes;
use super::state::{JobEntry, Phase, TaskTable};
use crate::ids::{JobId, TaskId};
use crate::queue::WaitQueue;
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;

/// Every task's phase agrees with the queue and its node; the task counters count them.
pub(super) fn tasks(
    tasks: &TaskTable,
    queue: &WaitQueue,
    nodes: &Nodes,
    counts: &Counts,
) -> Result<(), String> {
    let mut queued = 0u64;
    let mut running = 0u64;
    let mut blocked = 0u64;
    for (id, t) in tasks {
        match &t.phase {
            Phase::Blocked => blocked += 1,
            Phase::Done => {}
            Phase::Queued { seq } => {
                queued += 1;
                if queue.get(*seq) != Some(*id) {
                    return Err(format!("{id} queued at {seq} but the queue disagrees"));
                }
            }
            Phase::Running(r) => {
                let node = &r.node;
                running += 1;
                let n = nodes
                    .get(*node)
                    .ok_or(format!("{id} runs on unknown {node}"))?;
                if !n.running.contains(id) {
                    return Err(format!("{id} runs on {node}, which does not list it"));
                }
            }
        }
    }
    if queued != counts.queued || queued != queue.len() as u64 {
        return Err(format!(
            "queued: {queued} tasks, counter {}, queue {}",
            counts.queued,
            queue.len()
        ));
    }
    if blocked != counts.blocked {
        return Err(format!(
            "blocked: {blocked} tasks, counter {}",
            counts.blocked
        ));
    }
    if running != counts.running {
        return Err(format!(
            "running: {running} tasks, counter {}",
            counts.running
        ));
    }
    Ok(())
}

/// The tasks listed as demanding are queued tasks asking for more than one core.
pub(super) fn demanding(demanding: &BTreeSet<TaskId>, tasks: &TaskTable) -> Result<(), String> {
    for t in demanding {
        match tasks.get(t) {
            Some(e) if matches!(e.phase, Phase::Queued { .. }) && !e.resources.is_one_core() => {}
            _ => {
                return Err(format!(
                    "{t} listed as demanding but not a queued demanding task"
                ))
            }
        }
    }
    Ok(())
}

/// Each job's running cores add up to the cores the nodes' tasks hold (`held`, ready tasks
/// included); each job counts its unfinished tasks.
pub(super) fn jobs(
    jobs: &FxHashMap<JobId, JobEntry>,
    tasks: &TaskTable,
    held: u64,
) -> Result<(), String> {
    let by_jobs: u64 = jobs.values().map(|j| j.running_cores).sum();
    if by_jobs != held {
        return Err(format!(
            "jobs hold {by_jobs} cores, the nodes' tasks {held}"
        ));
    }
    let mut unfinished: FxHashMap<JobId, u64> = FxHashMap::default();
    // A producer running again to remake its objects counts as unfinished until it ends.
    for t in tasks.values() {
        if !matches!(t.phase, Phase::Done) {
            *unfinished.entry(t.job).or_default() += 1;
        }
    }
    for (job, e) in jobs {
        let n = unfinished.get(job).copied().unwrap_or(0);
        if e.unfinished != n {
            return Err(format!(
                "{job} counts {} unfinished tasks, has {n}",
                e.unfinished
            ));
        }
    }
    Ok(())
}
