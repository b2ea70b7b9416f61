//! What the scheduler tells workers and takes from their reports, as functions of the owners
//! they touch: a dispatched attempt's [`Assignment`], a changed source version dropped
//! everywhere, a finished attempt's outcome read. The handlers of workers' messages route these
//! among the owners ([`super::outcomes`], [`super::intake`], [`super::worker_msgs`]).

use super::ledger::Ledger;
use super::results::{Plan, Results};
use super::shared::Shared;
use super::tasks::{Listed, Phase};
use crate::proto::{Assignment, InputSource, TaskReport, ToWorker};
use diffuse_core::{Dispatch, ObjectId, Outcome, Source};

/// For each input as written, its index among the distinct inputs (empty if none repeats).
fn positions(inputs: &[String]) -> Vec<u32> {
    let mut distinct: Vec<&String> = Vec::new();
    let mut pos = Vec::with_capacity(inputs.len());
    for uri in inputs {
        match distinct.iter().position(|d| *d == uri) {
            Some(i) => pos.push(i as u32),
            None => {
                distinct.push(uri);
                pos.push(distinct.len() as u32 - 1);
            }
        }
    }
    if distinct.len() == inputs.len() {
        Vec::new()
    } else {
        pos
    }
}

/// Send the core's dispatch `d` to its worker, and hand the attempt to the journal (the
/// ledger's `progress`): to run, or to stand a kept result in for it; or hold it back while
/// an identical task is in flight ([`Results::plan`]).
pub fn dispatch(d: Dispatch, sh: &mut Shared, ledger: &mut Ledger, results: &mut Results) {
    let task_timeout = ledger.default_timeout();
    let (tasks, progress) = (&mut ledger.tasks, &mut ledger.progress);
    let plan = results.plan(&d, &tasks.get(d.task).def, sh);
    if let Plan::Wait(key) = plan {
        results.park(d.clone(), key);
        if !matches!(tasks.get(d.task).phase, Phase::Done(_)) {
            tasks.list_as(d.task, Listed::Running);
        }
        return;
    }
    let Dispatch {
        task: t,
        attempt,
        node,
        inputs,
        held,
    } = d;
    let task = tasks.get(t);
    let assigned = inputs
        .iter()
        .map(|(o, src)| {
            let size = match sh.objects.tmp_size(*o) {
                Some(s) => s,
                None => task
                    .inputs
                    .iter()
                    .find(|(x, _)| x == o)
                    .map_or(0, |(_, s)| *s),
            };
            let source = match src {
                Source::Local => InputSource::Local,
                Source::Peer(p) => match sh.sessions.get(p) {
                    Some(s) => InputSource::Peer {
                        url: s.peer_url.clone(),
                        also: sh.other_holders(*o, size, *p, node),
                    },
                    None => InputSource::Storage,
                },
                Source::Storage => InputSource::Storage,
            };
            sh.objects.input(*o, size, source)
        })
        .collect();
    let mut a = Assignment::new(
        &task.def,
        attempt,
        assigned,
        sh.core.caches_for(t),
        positions(&task.def.inputs),
        task_timeout,
    );
    a.held = held;
    match plan {
        Plan::Run { keep } => a.keep_result = keep,
        Plan::Reuse(order) => a.reuse = Some(Box::new(order)),
        Plan::Wait(_) => unreachable!("held back above"),
    }
    let Some(s) = sh.sessions.get(&node) else {
        return;
    };
    progress.attempt(task.def.id.clone(), attempt, s.name.clone());
    if !sh.comm.send(node, ToWorker::Run(Box::new(a))) {
        // The session is gone; its loss is being reported and will requeue the task.
        tracing::warn!(worker = %s.name, "dispatch to a closed session");
    }
    if !matches!(tasks.get(t).phase, Phase::Done(_)) {
        tasks.list_as(t, Listed::Running);
    }
}

/// The source of `o` is at `version` now; a copy cached at another version is dropped
/// everywhere.
pub fn note_version(o: ObjectId, uri: &str, version: String, sh: &mut Shared) {
    let known = sh.objects.version_mut(o);
    if *known == version {
        return;
    }
    let changed = !known.is_empty();
    *known = version;
    if changed {
        for node in sh.core.handle_object_invalidated(o, sh.now) {
            sh.send_connected(
                node,
                ToWorker::Drop {
                    uris: vec![uri.to_string()],
                },
            );
        }
    }
}

/// What a finished attempt's report says happened, for the core (`lost`: the object of its
/// lost input, if it names one the dispatcher knows).
pub fn outcome_of(report: &TaskReport, lost: Option<ObjectId>) -> Outcome {
    if report.withdrawn {
        Outcome::Withdrawn
    } else if report.succeeded() {
        Outcome::Succeeded
    } else if let Some(o) = lost {
        Outcome::InputLost(o)
    } else if report.no_room {
        Outcome::NodeFault(report.failure())
    } else if report.retryable() {
        Outcome::Retryable(report.failure())
    } else {
        Outcome::Failed(report.failure())
    }
}
