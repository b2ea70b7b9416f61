//! What `diffuse run` shows and writes: the progress line, `--print`'s output in task order,
//! the summary, and `results.jsonl` read back from the journal.

use super::config::{Failure, RunConfig, RunError, RunSummary};
use crate::dispatcher::Handle;
use crate::journal::Journal;
use crate::spec::TaskDef;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `  done/total done (n failed), tasks/s, hits, running`.
pub(super) fn progress_line(s: &crate::dispatcher::scheduler::Status, start: Instant) -> String {
    let done = s.succeeded + s.failed + s.cancelled;
    let t = &s.traffic;
    let acc = (t.local + t.peer + t.storage).max(1) as f64;
    format!(
        "  {done}/{} done ({} failed), {:.0} tasks/s, hits {:.0}% local {:.0}% peer {:.0}% miss, {} running",
        s.submitted,
        s.failed,
        done as f64 / start.elapsed().as_secs_f64().max(1e-9),
        t.local as f64 / acc * 100.0,
        t.peer as f64 / acc * 100.0,
        t.storage as f64 / acc * 100.0,
        s.running
    )
}

/// What `diffuse run` reports from the last counters.
pub(super) fn summary(
    status: &crate::dispatcher::scheduler::Status,
    interrupted: Option<String>,
    makespan: f64,
    failures: Vec<Failure>,
    results: PathBuf,
    logs: PathBuf,
    cfg: &RunConfig,
) -> RunSummary {
    let t = &status.traffic;
    let accesses = t.local + t.peer + t.storage;
    let acc = accesses.max(1) as f64;
    let ended = status.succeeded + status.failed + status.cancelled;
    RunSummary {
        tasks: status.submitted,
        tasks_ok: status.succeeded,
        tasks_reused: status.reused,
        tasks_failed: status.failed + status.cancelled,
        tasks_not_run: status.submitted - ended,
        interrupted,
        makespan_s: makespan,
        tasks_per_s: ended as f64 / makespan.max(1e-9),
        hit_local: t.local as f64 / acc,
        hit_peer: t.peer as f64 / acc,
        miss: t.storage as f64 / acc,
        bytes_local: t.bytes_local,
        bytes_peer: t.bytes_peer,
        bytes_storage: t.bytes_storage,
        accesses,
        failures,
        results,
        logs,
        run_dir: cfg.run_dir.clone(),
    }
}

/// `--print`: each task's stdout, whole, on this process's stdout as tasks end (or in the order
/// they were given).
pub(super) struct Printer {
    keep_order: bool,
    /// Journaled outcomes seen so far.
    cursor: usize,
    /// With `keep_order`: each task's place, and what waits for the tasks before it.
    order: std::collections::HashMap<String, usize>,
    pending: std::collections::BTreeMap<usize, Vec<u8>>,
    next: usize,
}

impl Printer {
    pub(super) fn new(keep_order: bool, defs: Option<&[TaskDef]>) -> Printer {
        let order = defs
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, d)| (d.id.clone(), i))
            .collect();
        Printer {
            keep_order,
            cursor: 0,
            order,
            pending: Default::default(),
            next: 0,
        }
    }

    /// Print what the tasks that ended since the last call wrote.
    pub(super) async fn poll(&mut self, handle: &Handle) -> Result<(), RunError> {
        let (ended, cursor) = handle.ended_since(self.cursor).await?;
        self.cursor = cursor;
        for (id, _) in ended {
            let out = handle
                .outcome(&id)
                .await?
                .and_then(|o| {
                    serde_json::from_str::<serde_json::Value>(&o.result_json)
                        .ok()?
                        .get("stdout")?
                        .as_str()
                        .map(PathBuf::from)
                })
                .and_then(|p| std::fs::read(p).ok())
                .unwrap_or_default();
            match (self.keep_order, self.order.get(&id)) {
                (true, Some(&i)) => {
                    self.pending.insert(i, out);
                    while let Some(o) = self.pending.remove(&self.next) {
                        emit(&o);
                        self.next += 1;
                    }
                }
                _ => emit(&out),
            }
        }
        Ok(())
    }

    /// At the end: what still waits (tasks before it never ended), in order.
    pub(super) fn finish(&mut self) {
        for (_, o) in std::mem::take(&mut self.pending) {
            emit(&o);
        }
    }
}

/// Write one task's output to stdout in one piece.
pub(super) fn emit(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(bytes);
    let _ = out.flush();
}

/// One line per task: id, state (null: not ended), exit code, node, attempt, error, the paths of
/// its captured stdout and stderr (null when it printed nothing), the end of its stderr if it
/// failed, and the worker's report. Returns the first 10 failures.
pub(super) fn write_results(journal: &Path, out: &Path) -> Result<Vec<Failure>, RunError> {
    let j = Journal::open(journal)?;
    let mut w = std::io::BufWriter::new(std::fs::File::create(out)?);
    let mut failures = Vec::new();
    for t in j.load()? {
        let o = t.outcome;
        let report = o.as_ref().and_then(|o| {
            serde_json::from_str::<serde_json::Value>(&crate::proto::full_report_json(
                &o.result_json,
            ))
            .ok()
        });
        let field = |k: &str| report.as_ref().map(|r| r[k].clone()).unwrap_or_default();
        let failed = o
            .as_ref()
            .is_some_and(|o| o.state != crate::journal::OutcomeState::Succeeded);
        if failed && failures.len() < 10 {
            let o = o.as_ref().expect("failed");
            failures.push(Failure {
                id: t.task.id.clone(),
                exit_code: o.exit_code,
                error: o.error.clone(),
                node: o.node.clone(),
                stderr_tail: field("stderr_tail").as_str().map(String::from),
            });
        }
        let line = serde_json::json!({
            "id": t.task.id,
            "state": o.as_ref().map(|o| o.state),
            "exit_code": o.as_ref().and_then(|o| o.exit_code),
            "node": o.as_ref().and_then(|o| o.node.clone()),
            "attempt": o.as_ref().map(|o| o.attempt),
            "error": o.as_ref().and_then(|o| o.error.clone()),
            "reused_from": field("reused_from"),
            "stdout": field("stdout"),
            "stderr": field("stderr"),
            "stderr_tail": field("stderr_tail"),
            "report": report,
        });
        writeln!(w, "{line}")?;
    }
    w.flush()?;
    Ok(failures)
}
