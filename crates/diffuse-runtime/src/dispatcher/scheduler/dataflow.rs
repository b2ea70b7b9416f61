//! The scheduler's dataflow half: checking a batch's dependencies (`tmp://` inputs and `after`)
//! before anything of it is accepted, the order its tasks enter the core in, what each task
//! waits for, and the core's dataflow decisions carried out (abandoned tasks, released
//! intermediate objects), and the tasks whose input lookups wait for others ([`Deferred`]).
//! Readiness itself is the core's (`diffuse_core::core::dataflow`).

use super::objects::ObjectTable;
use super::placement::NodeNames;
use super::shared::Shared;
use super::tasks::{Phase, TaskTable};
use super::views::SubmitError;
use crate::journal::OutcomeState;
use crate::proto::ToWorker;
use crate::spec::TaskDef;
use crate::uri::is_tmp;
use diffuse_core::{Abandoned, Core, NodeId, ObjectId, TaskId};
use rustc_hash::FxHashMap;

/// What a task depends on, as the core takes it; or why it cannot run at all.
pub enum Deps {
    /// Tasks still tracked by the core that it must wait for (`after`), and the intermediate
    /// objects it writes.
    Wait {
        /// The tasks it waits for.
        after: Vec<TaskId>,
        /// The `tmp://` objects it writes.
        produces: Vec<ObjectId>,
    },
    /// A dependency already ended without success: the task fails with this.
    Failed(String),
}

/// Check a batch's dependencies against itself and every task known, and return the order
/// its tasks enter the core in (each after what it depends on). Refused, naming the task and
/// the field: a `tmp://` input nobody writes, a `tmp://` output another task writes, an
/// `after` naming no task, a cycle.
pub fn check(
    defs: &[TaskDef],
    objects: &ObjectTable,
    tasks: &TaskTable,
) -> Result<Vec<usize>, SubmitError> {
    let bad = |d: &TaskDef, field: String, msg: String| {
        SubmitError::Invalid(format!("task '{}': field '{field}': {msg}", d.id))
    };
    let by_id: FxHashMap<&str, usize> = defs
        .iter()
        .enumerate()
        .map(|(i, d)| (d.id.as_str(), i))
        .collect();
    let mut writer: FxHashMap<&str, usize> = FxHashMap::default();
    for (i, d) in defs.iter().enumerate() {
        for (k, uri) in d.outputs.iter().enumerate() {
            if !is_tmp(uri) {
                continue;
            }
            let earlier = objects
                .get(uri)
                .and_then(|o| objects.producer(o))
                .map(|t| tasks.get(t).def.id.clone());
            if let Some(other) =
                earlier.or_else(|| writer.get(uri.as_str()).map(|j| defs[*j].id.clone()))
            {
                return Err(bad(
                    d,
                    format!("outputs[{k}]"),
                    format!("{uri} is already written by task '{other}'"),
                ));
            }
            writer.insert(uri, i);
        }
    }
    // Edges inside the batch: (dependency, dependent).
    let mut needs: Vec<Vec<usize>> = vec![Vec::new(); defs.len()];
    for (i, d) in defs.iter().enumerate() {
        for (k, uri) in d.inputs.iter().enumerate() {
            if !is_tmp(uri) {
                continue;
            }
            if let Some(j) = writer.get(uri.as_str()) {
                needs[i].push(*j);
            } else if objects.get(uri).and_then(|o| objects.producer(o)).is_none() {
                return Err(bad(
                    d,
                    format!("inputs[{k}]"),
                    format!("no task writes {uri} (a tmp:// input must be an output of a task in this batch or an earlier one)"),
                ));
            }
        }
        for (k, a) in d.more().after.iter().enumerate() {
            if let Some(j) = by_id.get(a.as_str()) {
                needs[i].push(*j);
            } else if tasks.id_of(a).is_none() {
                return Err(bad(d, format!("after[{k}]"), format!("no task '{a}'")));
            }
        }
    }
    // Kahn's order, stable: submission order among the ready.
    let mut left: Vec<usize> = needs.iter().map(Vec::len).collect();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); defs.len()];
    for (i, n) in needs.iter().enumerate() {
        for j in n {
            users[*j].push(i);
        }
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..defs.len()).filter(|i| left[*i] == 0).collect();
    let mut order = Vec::with_capacity(defs.len());
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &u in &users[i] {
            left[u] -= 1;
            if left[u] == 0 {
                ready.insert(u);
            }
        }
    }
    if order.len() < defs.len() {
        // Walk back from a task left over until a task repeats: that is a cycle.
        let mut path = vec![(0..defs.len()).find(|i| left[*i] > 0).expect("one is left")];
        loop {
            let last = *path.last().expect("not empty");
            let next = needs[last]
                .iter()
                .copied()
                .find(|j| left[*j] > 0)
                .expect("a task in a cycle waits for another in it");
            if let Some(at) = path.iter().position(|p| *p == next) {
                let cycle: Vec<&str> = path[at..]
                    .iter()
                    .chain(std::iter::once(&next))
                    .map(|i| defs[*i].id.as_str())
                    .collect();
                return Err(SubmitError::Invalid(format!(
                    "task '{}': its dependencies form a cycle: {} (each waits for the next, by a tmp:// input or 'after')",
                    defs[next].id,
                    cycle.join(" -> ")
                )));
            }
            path.push(next);
        }
    }
    Ok(order)
}

/// What `def` waits for, given what has ended so far.
pub fn deps_of(def: &TaskDef, objects: &mut ObjectTable, tasks: &TaskTable, core: &Core) -> Deps {
    let mut after = Vec::new();
    let mut dep = |t: TaskId, what: String| -> Option<String> {
        match &tasks.get(t).phase {
            Phase::Done(OutcomeState::Succeeded) => {
                // Still tracked only as a producer the core keeps; otherwise it is done.
                if core.task_state(t).is_some() {
                    after.push(t);
                }
                None
            }
            Phase::Done(OutcomeState::Failed) => Some(format!("{what} failed")),
            Phase::Done(OutcomeState::Cancelled) => Some(format!("{what} was cancelled")),
            Phase::Lookup { .. } | Phase::Live => {
                after.push(t);
                None
            }
        }
    };
    for a in &def.more().after {
        let Some(t) = tasks.id_of(a) else {
            continue;
        };
        if let Some(e) = dep(t, format!("after: task '{a}'")) {
            return Deps::Failed(e);
        }
    }
    for uri in def.inputs.iter().filter(|u| is_tmp(u)) {
        let o = objects.intern(uri);
        let Some(p) = objects.producer(o) else {
            continue;
        };
        let name = tasks.get(p).def.id.clone();
        if let Some(e) = dep(p, format!("input {uri}: producer '{name}'")) {
            return Deps::Failed(e);
        }
    }
    after.sort();
    after.dedup();
    let produces = def
        .outputs
        .iter()
        .filter(|u| is_tmp(u))
        .map(|u| objects.intern(u))
        .collect();
    Deps::Wait { after, produces }
}

/// Why the core ended a task without running it (`Action::Abandon`), as its error.
pub fn abandoned_why(
    why: Abandoned,
    tasks: &TaskTable,
    objects: &ObjectTable,
    names: &NodeNames,
    crash_limit: u32,
) -> String {
    let name = |t: TaskId| tasks.get(t).def.id.clone();
    match why {
        Abandoned::DependencyFailed { task, object } => {
            let ended = match tasks.get(task).phase {
                Phase::Done(OutcomeState::Cancelled) => "was cancelled",
                _ => "failed",
            };
            match object {
                Some(o) => format!(
                    "input {}: producer '{}' {ended}",
                    objects.uri(o),
                    name(task)
                ),
                None => format!("after: task '{}' {ended}", name(task)),
            }
        }
        Abandoned::InputLost { object, producer } => format!(
            "input {}: every copy was lost, and its producer '{}' could not make it again \
             (it was made --crash-limit + 1 = {} times already, its own input is lost, or its \
             strict hint names a worker that left)",
            objects.uri(object),
            name(producer),
            crash_limit + 1
        ),
        Abandoned::HintedNodeLeft { node } => names.hinted_worker_left(node),
    }
}

/// No task needs an intermediate object any more: its workers delete their copies.
pub fn drop_object(sh: &mut Shared, object: ObjectId, nodes: Vec<NodeId>) {
    let uri = sh.objects.uri(object).to_string();
    tracing::debug!(uri, "intermediate object released");
    for n in nodes {
        sh.send_connected(
            n,
            ToWorker::Drop {
                uris: vec![uri.clone()],
            },
        );
    }
}

/// Tasks whose input lookups wait for other tasks to succeed (they may write the inputs).
#[derive(Default)]
pub struct Deferred {
    /// The tasks waiting for each task.
    waiting: FxHashMap<TaskId, Vec<TaskId>>,
    /// For each waiting task, how many of its dependencies have not succeeded yet.
    left: FxHashMap<TaskId, u32>,
}

impl Deferred {
    /// `t` looks up its inputs once every task of `unfinished` (not empty) has succeeded.
    pub fn wait(&mut self, t: TaskId, unfinished: Vec<TaskId>) {
        self.left.insert(t, unfinished.len() as u32);
        for d in unfinished {
            self.waiting.entry(d).or_default().push(t);
        }
    }

    /// `t` succeeded: the tasks it was the last dependency of, in the order they began waiting.
    pub fn succeeded(&mut self, t: TaskId) -> Vec<TaskId> {
        let mut ready = Vec::new();
        for w in self.waiting.remove(&t).unwrap_or_default() {
            let Some(left) = self.left.get_mut(&w) else {
                continue;
            };
            *left -= 1;
            if *left == 0 {
                self.left.remove(&w);
                ready.push(w);
            }
        }
        ready
    }
}
