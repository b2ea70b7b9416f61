//! The dataflow's state ([`Dataflow`]): the intermediate objects and who writes and reads
//! each, which tasks wait for which, and which producers are running again to remake their
//! objects. The rules that change it (readiness, lineage, release) are applied by the core as
//! tasks move through their life (`core/lifecycle.rs`); this type keeps the records and
//! checks them against the tasks.

use super::state::{Phase, TaskTable};
use crate::ids::{NodeId, ObjectId, TaskId};
use crate::index::LocationIndex;
use crate::task::Input;
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;

/// One intermediate object and what depends on it.
#[derive(Clone, Debug)]
pub(super) struct Intermediate {
    /// The task that writes it.
    pub(super) producer: TaskId,
    /// Unfinished tasks that read it (blocked, queued or running; a remade producer too).
    pub(super) readers: Vec<TaskId>,
    /// Some task has read it since it was last made.
    pub(super) read: bool,
    /// Its producer succeeded and it has not been released or remade since.
    pub(super) made: bool,
    /// Bytes, as last reported ([`crate::Core::handle_intermediate_size`]).
    pub(super) size: u64,
}

/// Intermediate objects, the tasks waiting for others, and the producers being remade.
#[derive(Clone, Debug, Default)]
pub(super) struct Dataflow {
    /// Intermediate objects, by object.
    intermediates: FxHashMap<ObjectId, Intermediate>,
    /// For each task, the blocked tasks waiting for it to succeed.
    dependents: FxHashMap<TaskId, Vec<TaskId>>,
    /// Producers running again to remake their objects (their success already counted).
    remaking: BTreeSet<TaskId>,
}

impl Dataflow {
    /// The intermediate object `object`, if it is one.
    pub(super) fn get(&self, object: &ObjectId) -> Option<&Intermediate> {
        self.intermediates.get(object)
    }

    /// The intermediate object `object`, to change, if it is one.
    pub(super) fn get_mut(&mut self, object: &ObjectId) -> Option<&mut Intermediate> {
        self.intermediates.get_mut(object)
    }

    /// Whether `object` is an intermediate object.
    pub(super) fn contains(&self, object: &ObjectId) -> bool {
        self.intermediates.contains_key(object)
    }

    /// `producer` writes `objects` (`made`: it has already, before a restart).
    pub(super) fn register(&mut self, producer: TaskId, objects: &[ObjectId], made: bool) {
        for o in objects {
            self.intermediates.insert(
                *o,
                Intermediate {
                    producer,
                    readers: Vec::new(),
                    read: false,
                    made,
                    size: 0,
                },
            );
        }
    }

    /// Forget `object`: its producer will not write it.
    pub(super) fn forget(&mut self, object: &ObjectId) {
        self.intermediates.remove(object);
    }

    /// `task` reads these inputs: it is a reader of the intermediate ones.
    pub(super) fn add_reader(&mut self, task: TaskId, inputs: &[Input]) {
        for i in inputs {
            if let Some(im) = self.intermediates.get_mut(&i.object) {
                im.readers.push(task);
            }
        }
    }

    /// `task` waits for `dep` to succeed. False if it already did.
    pub(super) fn add_dependent(&mut self, dep: TaskId, task: TaskId) -> bool {
        let list = self.dependents.entry(dep).or_default();
        if list.contains(&task) {
            return false;
        }
        list.push(task);
        true
    }

    /// The tasks that waited for `task`, which no longer wait for it here.
    pub(super) fn take_dependents(&mut self, task: TaskId) -> Vec<TaskId> {
        self.dependents.remove(&task).unwrap_or_default()
    }

    /// `task` no longer waits for `dep`.
    pub(super) fn drop_dependent(&mut self, dep: TaskId, task: TaskId) {
        if let Some(list) = self.dependents.get_mut(&dep) {
            list.retain(|c| *c != task);
            if list.is_empty() {
                self.dependents.remove(&dep);
            }
        }
    }

    /// `producer` is running again to remake its objects.
    pub(super) fn remake_started(&mut self, producer: TaskId) {
        self.remaking.insert(producer);
    }

    /// `producer`'s remake ended (succeeded, or not).
    pub(super) fn remake_ended(&mut self, producer: TaskId) {
        self.remaking.remove(&producer);
    }

    /// The producers being remade.
    pub(super) fn remaking(&self) -> &BTreeSet<TaskId> {
        &self.remaking
    }

    /// Whether a task reading `object` may be queued: it is not an intermediate object, or it
    /// is made and some node in `index` holds it.
    pub(super) fn available(&self, object: ObjectId, index: &LocationIndex) -> bool {
        self.intermediates
            .get(&object)
            .is_none_or(|im| im.made && !index.holders(object).is_empty())
    }

    /// Whether `node` holds (by `index`) the only copy of an intermediate object some task
    /// may still read.
    pub(super) fn only_copy_on(&self, node: NodeId, index: &LocationIndex) -> bool {
        index.contents(node).any(|o| {
            self.intermediates
                .get(&o)
                .is_some_and(|im| im.made && index.holders(o).len() == 1)
        })
    }

    /// Readiness, lineage and pinning against the tasks: who waits for whom, who reads what,
    /// what is made (`index`: what nodes hold), which producers are being remade.
    pub(super) fn check(&self, tasks: &TaskTable, index: &LocationIndex) -> Result<(), String> {
        let mut waits: FxHashMap<TaskId, Vec<TaskId>> = FxHashMap::default();
        for (dep, list) in &self.dependents {
            let d = tasks.get(dep).ok_or(format!(
                "tasks wait for {dep}, which the core does not know"
            ))?;
            if matches!(d.phase, Phase::Done) {
                return Err(format!("tasks wait for {dep}, which has succeeded"));
            }
            for c in list {
                waits.entry(*c).or_default().push(*dep);
            }
        }
        for c in waits.keys() {
            if !tasks.contains_key(c) {
                return Err(format!("{c} is gone but still listed as waiting"));
            }
        }
        let mut readers: FxHashMap<ObjectId, Vec<TaskId>> = FxHashMap::default();
        for (id, t) in tasks {
            let mut w = waits.remove(id).unwrap_or_default();
            w.sort();
            let mut own = t.waiting_on().to_vec();
            own.sort();
            if w != own {
                return Err(format!("{id} waits for {own:?}, listed under {w:?}"));
            }
            match t.phase {
                Phase::Blocked => {
                    if t.waiting_on().is_empty() && !t.held {
                        return Err(format!("{id} is blocked with nothing to wait for"));
                    }
                }
                Phase::Done => {
                    if t.remaking || t.produces().is_empty() || !t.waiting_on().is_empty() {
                        return Err(format!("{id} kept as a producer, but it is not one"));
                    }
                    continue;
                }
                Phase::Queued { .. } | Phase::Running(_) => {
                    if !t.waiting_on().is_empty() || t.held {
                        return Err(format!("{id} left the blocked set early"));
                    }
                }
            }
            if matches!(t.phase, Phase::Queued { .. }) {
                for i in &t.inputs {
                    if !self.available(i.object, index) {
                        return Err(format!(
                            "{id} queued, but its input {} has no copy",
                            i.object
                        ));
                    }
                }
            }
            for i in &t.inputs {
                if self.intermediates.contains_key(&i.object) {
                    readers.entry(i.object).or_default().push(*id);
                }
            }
        }
        for (o, im) in &self.intermediates {
            let p = tasks
                .get(&im.producer)
                .ok_or(format!("{o}: its producer {} is gone", im.producer))?;
            if !p.produces().contains(o) {
                return Err(format!("{o}: {} does not write it", im.producer));
            }
            if im.made && !matches!(p.phase, Phase::Done) {
                return Err(format!("{o} made, but its producer has not succeeded"));
            }
            let mut have = im.readers.clone();
            have.sort();
            let mut want = readers.remove(o).unwrap_or_default();
            want.sort();
            if have != want {
                return Err(format!(
                    "{o}: readers {have:?}, unfinished tasks reading it {want:?}"
                ));
            }
        }
        let flagged: BTreeSet<TaskId> = tasks
            .iter()
            .filter(|(_, t)| t.remaking)
            .map(|(id, _)| *id)
            .collect();
        if flagged != self.remaking {
            return Err(format!(
                "remaking {flagged:?}, but the set says {:?}",
                self.remaking
            ));
        }
        Ok(())
    }
}
