//! How tasks end, or run again: a worker's report of an attempt (an outcome, a retry, a
//! producer's remake, a stale result refused), the tasks of a worker gone (run again elsewhere,
//! or ended when lost too often), a cancel (of one task or of a job's), and the tasks no worker
//! of a fixed pool can ever hold.
//!
//! Functions of the owners they touch: [`Shared`] (core, sessions, objects, comm), the task
//! [`Ledger`], and the [`Lookups`] (a success lets tasks waiting for it look up their inputs).

use super::intake;
use super::jobs::JobCancelled;
use super::ledger::Ledger;
use super::lookup::Lookups;
use super::placement;
use super::results::Results;
use super::shared::Shared;
use super::tasks::{Listed, Phase};
use super::workers;
use crate::journal::OutcomeState;
use crate::proto::{TaskReport, ToWorker};
use diffuse_core::{CoreError, Dispatch, NodeId, Outcome, TaskState};

/// Worker `node` reports an attempt ended.
pub fn finished(
    node: NodeId,
    mut report: TaskReport,
    sh: &mut Shared,
    ledger: &mut Ledger,
    lookups: &mut Lookups,
    results: &mut Results,
) {
    let Some(t) = ledger.tasks.id_of(&report.task) else {
        return;
    };
    report.hint_held = placement::hint_held(&ledger.tasks.get(t).def, sh.sessions, node);
    let lost = report
        .lost_input
        .as_ref()
        .and_then(|uri| sh.objects.get(uri));
    let outcome = workers::outcome_of(&report, lost);
    let now = sh.now;
    let current = matches!(sh.core.task_state(t), Some(TaskState::Running { node: n, attempt, .. }) if n == node && attempt == report.attempt);
    if current && outcome == Outcome::Succeeded {
        // What it wrote to tmp:// is on its worker: readers may now be sent there.
        for k in &report.kept {
            let o = sh.objects.intern(&k.uri);
            *sh.objects.version_mut(o) = k.sha256.clone();
            sh.objects.set_tmp_size(o, k.size);
            sh.core.handle_intermediate_size(o, k.size);
            let _ = sh.core.handle_object_cached(node, o, now);
            placement::copy_placed(o, sh);
        }
    }
    let remake = matches!(ledger.tasks.get(t).phase, Phase::Done(_));
    let result = sh
        .core
        .handle_task_finished(t, report.attempt, outcome, now);
    if !report.kept.is_empty() && !matches!(result, Ok(TaskState::Finished(Outcome::Succeeded))) {
        // Not a success the core took: what it kept is no one's input.
        let uris = report.kept.iter().map(|k| k.uri.clone()).collect();
        sh.send_connected(node, ToWorker::Drop { uris });
    }
    if current {
        let success = matches!(result, Ok(TaskState::Finished(Outcome::Succeeded)));
        let def = &ledger.tasks.get(t).def;
        let waiting = results.finished(t, def, node, &report, success, sh);
        dispatch_waiting(waiting, sh, ledger, results);
    }
    if remake && result.is_ok() {
        // A producer run again to remake a lost object: its recorded outcome stands.
        tracing::info!(task = %report.task, attempt = report.attempt, "ran again to remake its intermediate objects: {}", if report.succeeded() { "done".to_string() } else { report.failure() });
        ledger.attempt_without_outcome(&report);
        return;
    }
    match result {
        Ok(TaskState::Queued) => {
            // A retryable failure with retries left, or an attempt given back unstarted: the
            // task runs again; this attempt's report is kept with the attempt.
            if report.withdrawn {
                tracing::debug!(task = %report.task, attempt = report.attempt, "given back unstarted; queued again");
            } else {
                tracing::info!(task = %report.task, attempt = report.attempt, "failed ({}); retrying", report.failure());
            }
            ledger.tasks.list_as(t, Listed::Queued);
            ledger.attempt_without_outcome(&report);
        }
        Ok(state) => {
            let st = match state {
                TaskState::Cancelled => OutcomeState::Cancelled,
                TaskState::Finished(Outcome::Succeeded) => OutcomeState::Succeeded,
                _ => OutcomeState::Failed,
            };
            let worker = sh.sessions.name(&node).map(str::to_string);
            ledger.attempt_ended(t, st, &report, worker);
            if st == OutcomeState::Succeeded {
                intake::wake_lookups(t, ledger, sh.objects, lookups);
            }
        }
        Err(CoreError::StaleAttempt { .. })
        | Err(CoreError::UnknownTask(_))
        | Err(CoreError::NotRunning(_)) => {
            tracing::warn!(task = %report.task, attempt = report.attempt, "stale result refused");
        }
        Err(e) => tracing::error!(task = %report.task, "result refused: {e}"),
    }
}

/// Dispatch again the attempts that waited for an identical task, those still current.
pub fn dispatch_waiting(
    waiting: Vec<Dispatch>,
    sh: &mut Shared,
    ledger: &mut Ledger,
    results: &mut Results,
) {
    for d in waiting {
        let current = matches!(sh.core.task_state(d.task), Some(TaskState::Running { node, attempt, .. }) if node == d.node && attempt == d.attempt);
        if current && sh.sessions.contains(&d.node) {
            workers::dispatch(d, sh, ledger, results);
        }
    }
}

/// Task `t`, being cancelled, waits for an identical one: it ends at once (it never reached a
/// worker). False if it was not waiting.
fn cancel_waiting(
    t: diffuse_core::TaskId,
    sh: &mut Shared,
    ledger: &mut Ledger,
    lookups: &mut Lookups,
    results: &mut Results,
) -> bool {
    let Some(d) = results.unpark(t) else {
        return false;
    };
    let now = sh.at.unix;
    let report = TaskReport {
        task: ledger.tasks.get(t).def.id.clone(),
        attempt: d.attempt,
        error: Some("cancelled".into()),
        started_at: now,
        staged_at: now,
        finished_at: now,
        ..TaskReport::empty()
    };
    finished(d.node, report, sh, ledger, lookups, results);
    true
}

/// Worker `node` (named `worker`) is gone, its session already closed: lost (`crashed`: its
/// running tasks count a crash) or left cleanly. Its tasks run again elsewhere, or end when
/// lost too often (or cancelled while they ran).
pub fn worker_gone(
    node: NodeId,
    worker: &str,
    why: &str,
    crashed: bool,
    sh: &mut Shared,
    ledger: &mut Ledger,
    results: &mut Results,
) {
    let running = sh.core.running_on(node).to_vec();
    if crashed {
        tracing::warn!(worker = %worker, "worker lost ({why}); its tasks run again elsewhere");
    } else {
        tracing::info!(worker = %worker, "worker left ({why}); its tasks run again elsewhere");
    }
    let lost = if crashed {
        sh.core.handle_node_lost(node, sh.now)
    } else {
        sh.core.handle_node_left(node, sh.now)
    };
    let Ok(lost) = lost else { return };
    let limit = sh.core.config().crash_limit;
    for t in running {
        if lost.failed.contains(&t) {
            ledger.finish_without_running(
                t,
                OutcomeState::Failed,
                Some(format!("its worker was lost {limit} times")),
                sh.at.unix,
            );
        } else if lost.cancelled.contains(&t) {
            ledger.finish_without_running(
                t,
                OutcomeState::Cancelled,
                Some("cancelled; its worker was lost while it ran".into()),
                sh.at.unix,
            );
        } else if !matches!(ledger.tasks.get(t).phase, Phase::Done(_)) {
            ledger.tasks.list_as(t, Listed::Queued);
        }
        if lost.failed.contains(&t) || lost.cancelled.contains(&t) {
            let waiting = results.ended(t);
            dispatch_waiting(waiting, sh, ledger, results);
        }
    }
}

/// Cancel task `id`: a task not yet dispatched ends at once; a running one's processes are
/// stopped (it ends cancelled when its worker reports). What happened, or why not.
pub fn cancel(
    id: &str,
    sh: &mut Shared,
    ledger: &mut Ledger,
    lookups: &mut Lookups,
    results: &mut Results,
) -> Result<String, String> {
    let t = ledger
        .tasks
        .id_of(id)
        .ok_or_else(|| format!("unknown task '{id}'"))?;
    match &ledger.tasks.get(t).phase {
        Phase::Done(s) => Err(format!("task '{id}' already ended ({s:?})")),
        Phase::Lookup { .. } => {
            let _ = sh.core.handle_cancel(t, sh.now);
            ledger.finish_without_running(t, OutcomeState::Cancelled, None, sh.at.unix);
            Ok("cancelled".into())
        }
        Phase::Live => match sh
            .core
            .handle_cancel(t, sh.now)
            .map_err(|e| e.to_string())?
        {
            Some(_) => {
                ledger.finish_without_running(t, OutcomeState::Cancelled, None, sh.at.unix);
                Ok("cancelled".into())
            }
            None if cancel_waiting(t, sh, ledger, lookups, results) => Ok("cancelled".into()),
            None => {
                if let Some(TaskState::Running { node, attempt, .. }) = sh.core.task_state(t) {
                    sh.send_connected(
                        node,
                        ToWorker::Cancel {
                            task: id.to_string(),
                            attempt,
                        },
                    );
                }
                Ok("cancelling: its processes are being stopped".into())
            }
        },
    }
}

/// Cancel every unfinished task of job `name`, the last taken in first (so a task ends
/// cancelled before the task it depends on does). None if no task names it.
pub fn cancel_job(
    name: &str,
    sh: &mut Shared,
    ledger: &mut Ledger,
    lookups: &mut Lookups,
    results: &mut Results,
) -> Option<JobCancelled> {
    let tasks = ledger.jobs.tasks(name)?.to_vec();
    let mut done = JobCancelled {
        job: name.to_string(),
        ..JobCancelled::default()
    };
    for t in tasks.into_iter().rev() {
        let id = ledger.tasks.get(t).def.id.clone();
        done.count(cancel(&id, sh, ledger, lookups, results));
    }
    Some(done)
}

/// With a fixed pool of `pool` workers, all of them connected: fail the queued tasks no worker
/// could ever hold.
pub fn fail_unfit(pool: u32, sh: &mut Shared, ledger: &mut Ledger) {
    if (sh.sessions.len() as u32) < pool {
        return;
    }
    for t in sh.core.unschedulable() {
        let want = ledger.spec_of(t).resources;
        if let Ok(Some(_)) = sh.core.handle_cancel(t, sh.now) {
            let error = format!(
                "asks for {want}: more than any of the {pool} workers has, and no other will join"
            );
            ledger.finish_without_running(t, OutcomeState::Failed, Some(error), sh.at.unix);
        }
    }
}
