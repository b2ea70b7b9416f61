//! Tasks taken in, until they enter the core's queue. A submission is refused whole if a hint,
//! a job's policy or a dependency is wrong, else ordered (a task after what it depends on) and
//! journaled with the round; at start-up the journal's tasks are replayed. A task enters the
//! core at once: held while workers look up its inputs' sizes and versions (`tmp://` inputs are
//! not looked up: their producers report them), and blocked until what it depends on has
//! succeeded. When its last lookup is answered it enters the core's queue, or fails with its
//! first lookup error.
//!
//! Functions of the owners they touch: [`Shared`] (core, sessions, objects, comm), the task
//! [`Ledger`], the workers' [`NodeNames`] (for hints), the [`Lookups`] and the [`Batches`]
//! (which look up inputs too).

use super::batches::Batches;
use super::dataflow;
use super::ledger::Ledger;
use super::lookup::{Lookups, Waiter};
use super::objects::ObjectTable;
use super::placement::{self, NodeNames};
use super::shared::Shared;
use super::tasks::{Phase, TaskTable};
use super::views::{SubmitError, Submitted};
use super::workers;
use crate::journal::{Journal, JournalError, OutcomeState, StoredTask, SubmittedTask};
use crate::proto::LookupResult;
use crate::spec::TaskDef;
use diffuse_core::{NodeId, ObjectId, TaskId};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

/// How a task is kept in the journal's `spec_json`: `{"def": definition, "batch": batch}`.
/// Journals written before batches existed hold `[definition, inputs as looked up]`, read as
/// batch 0.
#[derive(Serialize)]
struct StoredSpec<'a> {
    def: &'a TaskDef,
    batch: u64,
}

/// [`StoredSpec`] read back.
#[derive(Deserialize)]
struct StoredSpecRead {
    def: TaskDef,
    batch: u64,
}

/// A task read back from the journal, ready to replay: its definition and batch, the attempts
/// dispatched before, and how it ended if it did.
pub struct Replayed {
    def: TaskDef,
    batch: u64,
    attempts: u32,
    ended: Option<OutcomeState>,
}

impl Replayed {
    /// Decode a journal record; `None` (logged) if its task no longer reads as one.
    fn decode(st: StoredTask) -> Option<Replayed> {
        let json = &st.task.spec_json;
        let read = if json.trim_start().starts_with('[') {
            serde_json::from_str::<(TaskDef, serde_json::Value)>(json).map(|(def, _)| (def, 0))
        } else {
            serde_json::from_str::<StoredSpecRead>(json).map(|s| (s.def, s.batch))
        };
        match read {
            Ok((def, batch)) => Some(Replayed {
                def,
                batch,
                attempts: st.attempts,
                ended: st.outcome.map(|o| o.state),
            }),
            Err(e) => {
                tracing::error!(task = %st.task.id, "unreadable task in journal ({e}); skipped");
                None
            }
        }
    }
}

/// Tasks handed from the journal's reader to the scheduler at a time.
const REPLAY_CHUNK: usize = 256;

/// Replay every task of `journal` in submission order, and give the journal back. Two threads
/// share the work: a reader (SQLite's scan, the record checksums, each task's JSON) hands
/// decoded tasks in chunks to this thread, which takes them in ([`restore`]); the tables are
/// sized for all of them first. A damaged record stops the replay with its error. Gives the
/// journal back with the number of tasks replayed and of those that had ended.
pub fn replay(
    journal: Journal,
    sh: &mut Shared,
    ledger: &mut Ledger,
    names: &mut NodeNames,
    lookups: &mut Lookups,
) -> Result<(Journal, u64, u64), JournalError> {
    let (submitted, ended) = journal.counts()?;
    ledger.tasks.reserve(submitted as usize);
    sh.core
        .reserve_tasks(submitted.saturating_sub(ended) as usize);
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Replayed>>(256);
        let reader = std::thread::Builder::new()
            .name("journal-replay".into())
            .spawn_scoped(scope, move || {
                let mut chunk = Vec::with_capacity(REPLAY_CHUNK);
                let read = journal.load_each(|st| {
                    chunk.extend(Replayed::decode(st));
                    if chunk.len() == REPLAY_CHUNK {
                        let full = std::mem::replace(&mut chunk, Vec::with_capacity(REPLAY_CHUNK));
                        let _ = tx.send(full);
                    }
                });
                if !chunk.is_empty() {
                    let _ = tx.send(chunk);
                }
                (journal, read)
            })
            .expect("start the journal's reader");
        for chunk in rx {
            for r in chunk {
                restore(r, sh, ledger, names, lookups);
            }
        }
        let (journal, read) = reader.join().expect("the journal's reader");
        read.map(|()| (journal, submitted, ended))
    })
}

/// Replay task `r` from the journal: one with an outcome is shown as ended, the others are
/// taken in again.
pub fn restore(
    r: Replayed,
    sh: &mut Shared,
    ledger: &mut Ledger,
    names: &mut NodeNames,
    lookups: &mut Lookups,
) {
    let Replayed {
        def,
        batch,
        attempts,
        ended,
    } = r;
    match ended {
        Some(state) => {
            let inputs = inputs_of(&def, sh.objects);
            let produces: Vec<ObjectId> = def
                .outputs
                .iter()
                .filter(|u| crate::uri::is_tmp(u))
                .map(|u| sh.objects.intern(u))
                .collect();
            let t = ledger.insert(def, batch, inputs, Phase::Done(state), sh.core);
            for p in &produces {
                sh.objects.set_producer(*p, t);
            }
            if state == OutcomeState::Succeeded && !produces.is_empty() {
                // Kept as the producer of what it wrote: if no worker brings a copy back and
                // a task needs it, it runs again.
                let mut spec = ledger.spec_of(t).with_produces(produces);
                // A remake keeps to the task's hint.
                spec.hint = names.placement_of(&ledger.tasks.get(t).def);
                if let Err(e) = sh.core.handle_restore_done(spec, sh.now) {
                    tracing::error!("journal replay: {e}");
                }
            }
        }
        None => accept(def, batch, attempts, sh, ledger, names, lookups),
    }
}

/// Take a batch of new tasks: refused whole (a duplicate id, a hint no worker can keep, a
/// job's policy, a dependency), or ordered, journaled with the round, and taken in; `reply` is
/// answered once the round has committed them.
pub fn submit(
    mut defs: Vec<TaskDef>,
    reply: oneshot::Sender<Result<Submitted, SubmitError>>,
    sh: &mut Shared,
    ledger: &mut Ledger,
    names: &mut NodeNames,
    lookups: &mut Lookups,
) {
    for d in &defs {
        if ledger.tasks.id_of(&d.id).is_some() {
            let _ = reply.send(Err(SubmitError::Duplicate(d.id.clone())));
            return;
        }
    }
    let order = match placement::check_hints(&defs, sh.sessions, sh.core)
        .and_then(|()| ledger.jobs.resolve_policies(&mut defs, sh.core))
        .and_then(|()| dataflow::check(&defs, sh.objects, &ledger.tasks))
    {
        Ok(order) => order,
        Err(e) => {
            let _ = reply.send(Err(e));
            return;
        }
    };
    let mut defs: Vec<Option<TaskDef>> = defs.into_iter().map(Some).collect();
    let defs: Vec<TaskDef> = order
        .into_iter()
        .map(|i| defs[i].take().expect("each once"))
        .collect();
    let batch = ledger.tasks.next_batch();
    let n = defs.len();
    let at = sh.at.unix;
    for def in defs {
        let spec_json =
            serde_json::to_string(&StoredSpec { def: &def, batch }).expect("task serializes");
        ledger.progress.submitted(SubmittedTask {
            id: def.id.clone(),
            spec_json,
            submitted_at: at,
        });
        accept(def, batch, 0, sh, ledger, names, lookups);
    }
    ledger.progress.reply_when_committed(
        reply,
        Submitted {
            submitted: n,
            batch,
        },
    );
}

/// The distinct inputs of `def` as objects, sizes not yet known.
fn inputs_of(def: &TaskDef, objects: &mut ObjectTable) -> Vec<(ObjectId, u64)> {
    let mut inputs: Vec<(ObjectId, u64)> = Vec::with_capacity(def.inputs.len());
    for uri in &def.inputs {
        let o = objects.intern(uri);
        if !inputs.iter().any(|(x, _)| *x == o) {
            inputs.push((o, 0));
        }
    }
    inputs
}

/// Take a task in (new or replayed; a batch in the order [`dataflow::check`] gives). It
/// enters the core at once: held while workers look up its inputs' sizes and versions
/// (`tmp://` inputs are not looked up: their producers report them), and blocked until what it
/// depends on has succeeded. A dependency that already failed fails it.
fn accept(
    def: TaskDef,
    batch: u64,
    attempts: u32,
    sh: &mut Shared,
    ledger: &mut Ledger,
    names: &mut NodeNames,
    lookups: &mut Lookups,
) {
    let deps = dataflow::deps_of(&def, sh.objects, &ledger.tasks, sh.core);
    let inputs = inputs_of(&def, sh.objects);
    let looked_up: Vec<ObjectId> = inputs
        .iter()
        .map(|(o, _)| *o)
        .filter(|o| !crate::uri::is_tmp(sh.objects.uri(*o)))
        .collect();
    let phase = if looked_up.is_empty() {
        Phase::Live
    } else {
        Phase::Lookup {
            pending: looked_up.len() as u32,
            attempts,
        }
    };
    let t = ledger.insert(def, batch, inputs, phase, sh.core);
    let (after, produces) = match deps {
        dataflow::Deps::Wait { after, produces } => (after, produces),
        dataflow::Deps::Failed(e) => {
            for uri in ledger.tasks.get(t).def.outputs.clone() {
                if crate::uri::is_tmp(&uri) {
                    let o = sh.objects.intern(&uri);
                    sh.objects.set_producer(o, t);
                }
            }
            // It ends before it looks anything up.
            ledger.finish_without_running(t, OutcomeState::Failed, Some(e), sh.at.unix);
            return;
        }
    };
    for p in &produces {
        sh.objects.set_producer(*p, t);
    }
    // Its inputs are looked up once the tasks it waits for have succeeded: they may be
    // what writes them.
    let unfinished: Vec<TaskId> = after
        .iter()
        .copied()
        .filter(|d| !matches!(ledger.tasks.get(*d).phase, Phase::Done(_)))
        .collect();
    let mut spec = ledger.spec_of(t).with_after(after).with_produces(produces);
    spec.hint = names.placement_of(&ledger.tasks.get(t).def);
    if !looked_up.is_empty() {
        spec = spec.held();
        if unfinished.is_empty() {
            want_lookups(t, &ledger.tasks, sh.objects, lookups);
        } else {
            ledger.defer_lookups(t, unfinished);
        }
    }
    if let Err(e) = sh.core.handle_restore(spec, attempts, sh.now) {
        // Checked at submission; a journal written by another version may still disagree.
        tracing::error!(task = %ledger.tasks.get(t).def.id, "refused by the core: {e}");
        ledger.finish_without_running(t, OutcomeState::Failed, Some(e.to_string()), sh.at.unix);
    }
}

/// Ask workers for the size and version of `t`'s inputs (not its `tmp://` ones).
fn want_lookups(t: TaskId, tasks: &TaskTable, objects: &ObjectTable, lookups: &mut Lookups) {
    for (o, _) in &tasks.get(t).inputs {
        let uri = objects.uri(*o);
        if !crate::uri::is_tmp(uri) {
            lookups.want(uri, t);
        }
    }
}

/// `t` succeeded: tasks whose lookups waited for it may now look up their inputs.
pub fn wake_lookups(t: TaskId, ledger: &mut Ledger, objects: &ObjectTable, lookups: &mut Lookups) {
    for w in ledger.lookups_woken(t) {
        want_lookups(w, &ledger.tasks, objects, lookups);
    }
}

/// A worker answered a lookup: record sizes and versions (a changed version invalidates every
/// cached copy), and let the tasks whose every input is now known move on, in submission
/// order: into the core's queue, or failed with their first lookup error.
pub fn looked_up(
    node: NodeId,
    id: u64,
    results: Vec<LookupResult>,
    sh: &mut Shared,
    ledger: &mut Ledger,
    lookups: &mut Lookups,
    batches: &mut Batches,
) {
    let mut ready = Vec::new();
    for (uri, result, waiters) in lookups.answered(node, id, results) {
        let o = sh.objects.intern(&uri);
        let mut waiting = Vec::with_capacity(waiters.len());
        for w in waiters {
            match w {
                Waiter::Task(t) => waiting.push(t),
                Waiter::Stage(s) => batches.looked_up(s, o, &uri, &result),
            }
        }
        let error = match result {
            Ok((size, version)) => {
                workers::note_version(o, &uri, version, sh);
                for &t in &waiting {
                    if let Some(i) = ledger.tasks.get_mut(t).inputs.iter_mut().find(|i| i.0 == o) {
                        i.1 = size;
                    }
                }
                None
            }
            Err(e) => Some(format!("input {}: {e}", crate::uri::redacted(&uri))),
        };
        for t in waiting {
            if let Phase::Lookup { pending, .. } = &mut ledger.tasks.get_mut(t).phase {
                *pending -= 1;
                if *pending == 0 {
                    ready.push(t);
                }
                if let Some(e) = &error {
                    ledger.tasks.lookup_failed(t, e);
                }
            }
        }
    }
    ready.sort();
    for t in ready {
        inputs_known(t, sh, ledger);
    }
    batches.pump(sh);
}

/// Every input of `t` (in [`Phase::Lookup`]) was looked up: it enters the core's queue, or
/// fails with its first lookup error.
fn inputs_known(t: TaskId, sh: &mut Shared, ledger: &mut Ledger) {
    if !matches!(ledger.tasks.get(t).phase, Phase::Lookup { .. }) {
        return;
    }
    match ledger.tasks.take_lookup_error(t) {
        Some(e) => {
            // The tasks that depend on it are abandoned (`Action::Abandon`).
            let _ = sh.core.handle_failed_unrun(t, sh.now);
            ledger.finish_without_running(t, OutcomeState::Failed, Some(e), sh.at.unix)
        }
        None => {
            let sizes = ledger.inputs_ready(t);
            if let Err(e) = sh.core.handle_inputs_known(t, &sizes, sh.now) {
                tracing::error!(task = %ledger.tasks.get(t).def.id, "{e}");
            }
        }
    }
}
