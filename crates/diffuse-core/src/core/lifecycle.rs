//! A task's life through the core by the dataflow rules: admitted, blocked on the tasks it
//! waits for, queued, ended (succeeded, failed, abandoned), remade. The records these rules
//! keep (intermediate objects, who waits for whom, remakes) are [`super::dataflow::Dataflow`]'s.
//!
//! Hercules keeps a workflow's intermediate data in the compute nodes' own stores and never on
//! shared storage. Here a task names the intermediate objects it writes ([`TaskSpec::produces`]);
//! a task that reads one depends on its producer, and may name more dependencies
//! ([`TaskSpec::after`]). The rules:
//!
//! * **Readiness.** A task is *blocked* until every task it depends on has succeeded, its
//!   inputs' sizes are known (`held`), and every intermediate input has a copy on some node. Only
//!   then does it enter the wait queue. A dependency that ends without success abandons the task
//!   ([`Action::Abandon`]), and so on down the graph: nothing waits forever.
//! * **Lineage.** A producer that succeeded is kept (phase `Done`) while its objects may be
//!   needed. When the last copy of an object is lost (its node left or dropped it) and a task
//!   still needs it, or a task arrives that needs an object already released, the producer runs
//!   again ("remade"), after its own lost inputs are remade in turn. Each producer is remade at
//!   most `crash_limit` times; past that its readers are abandoned with
//!   [`Abandoned::InputLost`]. A remake is not a new outcome: the producer's recorded success
//!   stands.
//! * **Release.** An object is dropped from its nodes ([`Action::DropObject`]) once it has been
//!   read and no unfinished task reads it, or, if nothing read it, once no task of its producer's
//!   job is unfinished. A task that reads it later makes its producer run again.
//!
//! Reads of an intermediate object never go to persistent storage: the dispatch names a holder.
//!
//! **Layering.** The owners (`nodes`, `copies`, `queued`, `dataflow`, `hints`, `policies`,
//! `hook_set`, ...) each keep their own state and check it, and none calls up into the rules.
//! A [`Step`] borrows the ones a task's life moves state between, for one event, and applies the
//! rules above through their methods. `pass`, `membership` and `placement` are functions over a
//! `Step` and the few owners only they use; `Core` (core.rs) builds the `Step` for each call of
//! its API. One loop is inherent and stays inside this file: the hooks hear events from the
//! rules ([`Step::notify`]), and what a hook asks for can lose a copy ([`Step::copy_gone`]),
//! which remakes a producer, which the hooks hear of in turn.

use super::config::{CoreConfig, CoreError, Counts};
use super::copies::Copies;
use super::dataflow::Dataflow;
use super::hints::Hints;
use super::hook_set::HookSet;
use super::nodes::Nodes;
use super::policies::Policies;
use super::queued::Queued;
use super::state::{JobEntry, Phase, TaskEntry, TaskTable};
use super::view::{self, View};
use crate::action::{Abandoned, Action};
use crate::hooks::hook::{CoreView, Effect, Effects, Gone, Hook};
use crate::ids::{JobId, NodeId, ObjectId, TaskId};
use crate::task::{Input, Outcome, TaskSpec, TaskState};
use crate::time::Time;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// The owners one event moves a task's state between, borrowed from the core for that event.
pub(super) struct Step<'a> {
    /// Settings (the crash limit, replicas of intermediate objects, the window).
    pub(super) cfg: &'a CoreConfig,
    /// The tasks the core keeps.
    pub(super) tasks: &'a mut TaskTable,
    /// Each job's unfinished tasks, held cores and intermediate objects.
    pub(super) jobs: &'a mut FxHashMap<JobId, JobEntry>,
    /// The task counters.
    pub(super) counts: &'a mut Counts,
    /// Intermediate objects, who waits for whom, remakes.
    pub(super) dataflow: &'a mut Dataflow,
    /// The wait queue and what is kept beside it.
    pub(super) queued: &'a mut Queued,
    /// What nodes hold and what is on its way to them.
    pub(super) copies: &'a mut Copies,
    /// The hints that bind queued tasks.
    pub(super) hints: &'a mut Hints,
    /// The dispatch policies in use (they count the queued tasks of each job).
    pub(super) policies: &'a mut Policies,
    /// The nodes in the pool.
    pub(super) nodes: &'a mut Nodes,
    /// The after-dispatch hooks.
    pub(super) hooks: &'a mut HookSet,
    /// Actions for the driver, in order.
    pub(super) actions: &'a mut VecDeque<Action>,
    /// Something changed that may allow a dispatch.
    pub(super) dirty: &'a mut bool,
}

impl Step<'_> {
    /// Tell every hook but `skip` of an event, in the registry's order; each hook's effects are
    /// carried out before the next hears of it.
    pub(super) fn notify(
        &mut self,
        skip: Option<usize>,
        mut event: impl FnMut(&mut dyn Hook, &dyn CoreView, &mut Effects),
    ) {
        for i in 0..self.hooks.len() {
            if skip == Some(i) {
                continue;
            }
            let view = View {
                window: self.cfg.window,
                tasks: self.tasks,
                jobs: self.jobs,
                dataflow: self.dataflow,
                queued: self.queued,
                copies: self.copies,
                hints: self.hints,
                policies: self.policies,
                nodes: self.nodes,
            };
            let fx = self.hooks.call(i, &view, &mut event);
            self.apply(i, fx);
        }
    }

    /// Carry out what hook `origin` asked for, in order.
    fn apply(&mut self, origin: usize, fx: Effects) {
        for effect in fx.0 {
            match effect {
                Effect::Act(action) => self.actions.push_back(action),
                Effect::Forget { node, object } => {
                    self.copy_gone(node, object, Gone::Forgotten, Some(origin))
                }
                Effect::InTransfer { node, object } => {
                    self.copies.transfer_started(node, object);
                }
                Effect::TransferEnded { node, object } => {
                    self.copies.transfer_ended(node, object);
                }
                Effect::Wake => *self.dirty = true,
            }
        }
    }

    /// `node`'s copy of `object` no longer counts (`why`): out of the index, every hook but
    /// `origin` (the one that asked) told, and an intermediate object left without a copy
    /// that a task needs is made again.
    pub(super) fn copy_gone(
        &mut self,
        node: NodeId,
        object: ObjectId,
        why: Gone,
        origin: Option<usize>,
    ) {
        let held = self.copies.forget(node, object);
        self.notify(origin, |h, _, _| h.copy_gone(node, object, why, held));
        if held {
            self.copies_lost(&[object]);
        }
    }

    /// Whether `task`'s policy reads through caches.
    pub(super) fn caches_for(&self, task: TaskId) -> bool {
        view::caches_for(self.tasks, self.policies, task)
    }

    /// Put a blocked task in the wait queue: in the queue's sets, the candidate sets (while a
    /// policy reads cached data), its hint's list, its job's count.
    fn enqueue(&mut self, task: TaskId) {
        let entry = self.tasks.get_mut(&task).expect("task exists");
        let seq = self.queued.push(task, entry);
        entry.phase = Phase::Queued { seq };
        if self.policies.caching() {
            self.copies.enqueue(task, seq, &entry.inputs);
        }
        self.hints.bind(task, entry, seq);
        self.policies.count(entry.job, true);
        self.counts.queued += 1;
        *self.dirty = true;
    }

    /// Take a task queued at `seq` out of the queue and everything kept beside it.
    pub(super) fn dequeue(&mut self, task: TaskId, seq: u64) {
        let entry = self.tasks.get_mut(&task).expect("task exists");
        self.queued.remove(task, entry, seq);
        self.copies.dequeue(task, seq);
        self.hints.unbind(task, entry, seq);
        self.policies.count(entry.job, false);
        self.counts.queued -= 1;
    }
}

impl Step<'_> {
    pub(super) fn available(&self, object: ObjectId) -> bool {
        self.dataflow.available(object, self.copies.index())
    }

    /// Take a task in: check it, register what it writes and reads, and make it wait for what it
    /// depends on (or queue it). The state is unchanged on error.
    pub(super) fn admit(&mut self, spec: TaskSpec, attempts: u32) -> Result<(), CoreError> {
        if self.tasks.contains_key(&spec.id) {
            return Err(CoreError::DuplicateTask(spec.id));
        }
        for a in &spec.after {
            if *a == spec.id || !self.tasks.contains_key(a) {
                return Err(CoreError::UnknownTask(*a));
            }
        }
        for (i, o) in spec.produces.iter().enumerate() {
            if self.dataflow.contains(o) || spec.produces[..i].contains(o) {
                return Err(CoreError::DuplicateProducer(*o));
            }
        }
        let mut inputs: Vec<Input> = Vec::with_capacity(spec.inputs.len());
        for i in spec.inputs.iter().copied() {
            if spec.produces.contains(&i.object) {
                return Err(CoreError::ReadsOwnOutput(spec.id, i.object));
            }
            if !inputs.iter().any(|j| j.object == i.object) {
                inputs.push(i);
            }
        }
        self.notify(None, |h, _, _| h.task_admitted(&inputs));
        let id = spec.id;
        self.dataflow.register(id, &spec.produces, false);
        let job = self.jobs.entry(spec.job).or_default();
        job.unfinished += 1;
        job.objects.extend(spec.produces.iter().copied());
        self.dataflow.add_reader(id, &inputs);
        let entry = TaskEntry::new(&spec, inputs, Phase::Blocked, attempts);
        self.tasks.insert(id, Box::new(entry));
        self.counts.blocked += 1;
        let mut deps: Vec<TaskId> = spec.after;
        for i in &self.tasks[&id].inputs {
            if let Some(im) = self.dataflow.get(&i.object) {
                deps.push(im.producer);
            }
        }
        deps.sort();
        deps.dedup();
        for d in deps {
            if !matches!(self.tasks[&d].phase, Phase::Done) {
                self.wait_on(id, d);
            }
        }
        self.try_ready(id);
        Ok(())
    }

    /// A task that succeeded before the driver restarted, kept as the producer of its
    /// intermediate objects: if a task needs one of them and no node reports holding it, it
    /// runs again.
    pub(super) fn restore_done(&mut self, spec: TaskSpec) -> Result<(), CoreError> {
        if spec.produces.is_empty() {
            return Ok(());
        }
        if self.tasks.contains_key(&spec.id) {
            return Err(CoreError::DuplicateTask(spec.id));
        }
        for o in &spec.produces {
            if self.dataflow.contains(o) {
                return Err(CoreError::DuplicateProducer(*o));
            }
        }
        self.dataflow.register(spec.id, &spec.produces, true);
        self.jobs
            .entry(spec.job)
            .or_default()
            .objects
            .extend(spec.produces.iter().copied());
        let mut inputs: Vec<Input> = Vec::new();
        for i in spec.inputs.iter().copied() {
            if !inputs.iter().any(|j| j.object == i.object) {
                inputs.push(i);
            }
        }
        let mut entry = TaskEntry::new(&spec, inputs, Phase::Done, 0);
        entry.held = false;
        self.tasks.insert(spec.id, Box::new(entry));
        Ok(())
    }

    /// The sizes of a held task's inputs are known: it may run once its dependencies have
    /// succeeded. Sizes of objects it does not read are ignored.
    pub(super) fn inputs_known(
        &mut self,
        task: TaskId,
        sizes: &[(ObjectId, u64)],
    ) -> Result<(), CoreError> {
        let t = self
            .tasks
            .get_mut(&task)
            .ok_or(CoreError::UnknownTask(task))?;
        if !t.held {
            return Ok(());
        }
        for (o, size) in sizes {
            if let Some(i) = t.inputs.iter_mut().find(|i| i.object == *o) {
                i.size = *size;
            }
        }
        t.held = false;
        for &(o, size) in sizes {
            self.notify(None, |h, _, _| h.input_size(o, size));
        }
        self.try_ready(task);
        Ok(())
    }

    /// The driver ends a task that has not run (its inputs could not be looked up): it fails, and
    /// the tasks that depend on it are abandoned.
    pub(super) fn failed_unrun(&mut self, task: TaskId) -> Result<(), CoreError> {
        let t = self.tasks.get(&task).ok_or(CoreError::UnknownTask(task))?;
        match t.phase {
            Phase::Blocked => {}
            Phase::Queued { seq } => self.dequeue(task, seq),
            Phase::Running(_) | Phase::Done => return Err(CoreError::NotRunning(task)),
        }
        self.counts.failed += 1;
        self.task_ended_unsuccessfully(task);
        Ok(())
    }

    /// An intermediate object is `size` bytes (its producer's node reports it).
    pub(super) fn intermediate_size(&mut self, object: ObjectId, size: u64) {
        if let Some(im) = self.dataflow.get_mut(&object) {
            im.size = size;
        }
        self.notify(None, |h, _, _| h.input_size(object, size));
    }

    /// `task` no longer reads its inputs (it ended): objects nobody needs are released.
    fn remove_reader(&mut self, task: TaskId) {
        let objects: Vec<ObjectId> = self.tasks[&task].inputs.iter().map(|i| i.object).collect();
        for o in objects {
            if let Some(im) = self.dataflow.get_mut(&o) {
                im.readers.retain(|r| *r != task);
                self.release_if_unneeded(o);
            }
        }
    }

    /// `task` waits for `dep` to succeed (once).
    fn wait_on(&mut self, task: TaskId, dep: TaskId) {
        if self.dataflow.add_dependent(dep, task) {
            self.tasks
                .get_mut(&task)
                .expect("task exists")
                .rare_mut()
                .waiting_on
                .push(dep);
        }
    }

    /// A blocked task with nothing left to wait for enters the queue, unless an intermediate
    /// input has no copy: then it waits for that object's producer, which runs again if it had
    /// finished.
    pub(super) fn try_ready(&mut self, task: TaskId) {
        let Some(t) = self.tasks.get(&task) else {
            return;
        };
        if !matches!(t.phase, Phase::Blocked) || !t.waiting_on().is_empty() || t.held {
            return;
        }
        let missing: Vec<(ObjectId, TaskId)> = t
            .inputs
            .iter()
            .filter(|i| !self.available(i.object))
            .map(|i| {
                let producer = self.dataflow.get(&i.object).expect("intermediate").producer;
                (i.object, producer)
            })
            .collect();
        // Whether `task` still waits to be queued: remaking a producer can end it (a producer
        // upstream of both could not run), which for a remake puts it back to `Done`.
        let blocked = |c: &Step| {
            c.tasks
                .get(&task)
                .is_some_and(|t| matches!(t.phase, Phase::Blocked))
        };
        for (object, producer) in missing {
            if producer == task {
                continue;
            }
            let waiting = match self.tasks[&producer].phase {
                Phase::Done => self.remake(producer),
                _ => true,
            };
            if !blocked(self) {
                return;
            }
            if !waiting {
                self.abandon(task, Abandoned::InputLost { object, producer });
                return;
            }
            self.wait_on(task, producer);
        }
        let Some(t) = self.tasks.get_mut(&task) else {
            return;
        };
        if !t.waiting_on().is_empty() {
            return;
        }
        for i in t.inputs.iter_mut() {
            if let Some(im) = self.dataflow.get(&i.object) {
                i.size = im.size;
            }
        }
        if let Some(name) = self.hints.departed_hint(&self.tasks[&task]) {
            self.abandon(task, Abandoned::HintedNodeLeft { node: name });
            return;
        }
        self.counts.blocked -= 1;
        self.enqueue(task);
    }

    /// Put a task that ran (or was queued) back to blocked and let it queue again when it may:
    /// after a retryable failure, a lost node, or a lost input.
    pub(super) fn requeue(&mut self, task: TaskId) {
        let t = self.tasks.get_mut(&task).expect("task exists");
        if let Phase::Queued { seq } = t.phase {
            self.dequeue(task, seq);
        }
        let t = self.tasks.get_mut(&task).expect("task exists");
        t.phase = Phase::Blocked;
        self.counts.blocked += 1;
        self.try_ready(task);
    }

    /// Run a finished producer again because an object it wrote is needed and has no copy.
    /// False if it has been remade `crash_limit` times already, or cannot run again because
    /// an input of its own is lost beyond remaking.
    fn remake(&mut self, producer: TaskId) -> bool {
        let limit = self.cfg.crash_limit;
        let t = self.tasks.get_mut(&producer).expect("producer kept");
        debug_assert!(matches!(t.phase, Phase::Done));
        if t.rare().remakes >= limit {
            return false;
        }
        t.rare_mut().remakes += 1;
        t.remaking = true;
        self.dataflow.remake_started(producer);
        t.phase = Phase::Blocked;
        debug_assert!(t.waiting_on().is_empty());
        let job = t.job;
        let produces = t.produces().to_vec();
        let inputs = t.inputs.clone();
        self.counts.blocked += 1;
        self.jobs.entry(job).or_default().unfinished += 1;
        self.dataflow.add_reader(producer, &inputs);
        // Its objects will be written anew: copies of the old ones go, and whoever reads them
        // waits for the new ones.
        for o in &produces {
            self.drop_copies(*o);
            let im = self.dataflow.get_mut(o).expect("registered");
            im.made = false;
            im.read = false;
            for r in im.readers.clone() {
                if r == producer {
                    continue;
                }
                match self.tasks[&r].phase {
                    Phase::Queued { seq } => {
                        self.dequeue(r, seq);
                        self.tasks.get_mut(&r).expect("reader").phase = Phase::Blocked;
                        self.counts.blocked += 1;
                        self.wait_on(r, producer);
                    }
                    Phase::Blocked => self.wait_on(r, producer),
                    // A running reader has staged it, or will report it lost.
                    Phase::Running(_) | Phase::Done => {}
                }
            }
        }
        self.try_ready(producer);
        // Its own lost input may have been beyond remaking: then it is `Done` again, and so
        // is the object.
        !matches!(self.tasks[&producer].phase, Phase::Done)
    }

    /// Forget every copy of `object` and tell their nodes to delete them.
    fn drop_copies(&mut self, object: ObjectId) {
        let holders = self.copies.index().holders(object).to_vec();
        for n in &holders {
            self.copies.forget(*n, object);
            self.notify(None, |h, _, _| {
                h.copy_gone(*n, object, Gone::Released, true)
            });
        }
        if !holders.is_empty() {
            self.actions.push_back(Action::DropObject {
                object,
                nodes: holders,
            });
        }
    }

    fn release_if_unneeded(&mut self, object: ObjectId) {
        let Some(im) = self.dataflow.get(&object) else {
            return;
        };
        if !im.made || !im.readers.is_empty() {
            return;
        }
        let job = self.tasks.get(&im.producer).map(|t| t.job);
        let job_done = job.is_none_or(|j| self.jobs.get(&j).is_none_or(|e| e.unfinished == 0));
        if !(im.read || job_done) {
            return;
        }
        self.dataflow.get_mut(&object).expect("known").made = false;
        self.drop_copies(object);
    }

    /// A task ended; its job may have no unfinished task left.
    fn job_task_ended(&mut self, job: JobId) {
        let Some(e) = self.jobs.get_mut(&job) else {
            return;
        };
        e.unfinished -= 1;
        if e.unfinished == 0 {
            for o in e.objects.clone() {
                self.release_if_unneeded(o);
            }
        }
    }

    /// Bookkeeping of a task that ended successfully: it is kept as a producer if it wrote
    /// intermediate objects (they are now made), or forgotten; its dependents may run.
    pub(super) fn task_succeeded(&mut self, task: TaskId) {
        let t = self.tasks.get_mut(&task).expect("task exists");
        let (job, remade) = (t.job, t.remaking);
        t.remaking = false;
        self.dataflow.remake_ended(task);
        t.phase = Phase::Done;
        let produces = t.produces().to_vec();
        if !remade {
            self.counts.succeeded += 1;
        }
        for o in &produces {
            self.dataflow.get_mut(o).expect("registered").made = true;
        }
        self.remove_reader(task);
        for c in self.dataflow.take_dependents(task) {
            if let Some(e) = self.tasks.get_mut(&c) {
                if let Some(r) = e.rare_if_any() {
                    r.waiting_on.retain(|d| *d != task);
                }
                self.try_ready(c);
            }
        }
        if produces.is_empty() {
            self.tasks.remove(&task);
        }
        self.job_task_ended(job);
        for o in produces {
            self.release_if_unneeded(o);
        }
    }

    /// With `tmp_replicas` K > 1: ask for copies of the objects `from` just wrote on the K - 1
    /// nodes (of those not holding one) running the fewest tasks, lowest id first; fewer if
    /// the pool is smaller.
    pub(super) fn replicate(&mut self, objects: &[ObjectId], from: NodeId) {
        let k = self.cfg.tmp_replicas as usize;
        if k <= 1 {
            return;
        }
        for &object in objects {
            if !self.dataflow.contains(&object) {
                continue;
            }
            let holders = self.copies.index().holders(object);
            let mut targets: Vec<(usize, NodeId)> = self
                .nodes
                .iter()
                .filter(|(n, _)| *n != from && !holders.contains(n))
                .map(|(n, e)| (e.running.len(), n))
                .collect();
            targets.sort_unstable();
            let have = holders.len().max(1);
            for (_, to) in targets.into_iter().take(k.saturating_sub(have)) {
                self.actions
                    .push_back(Action::Replicate { object, from, to });
            }
        }
    }

    /// Bookkeeping of a task that ended without success (failed, cancelled, lost too often);
    /// it has left the queue and its node. Returns true if it was a remake of a producer, which
    /// stays kept (its recorded success stands): its waiting readers are then abandoned.
    pub(super) fn task_ended_unsuccessfully(&mut self, task: TaskId) -> bool {
        let remade = self.tasks[&task].remaking;
        let unmade = self.end_unrun(task);
        self.dependency_failed(task, remade);
        for o in unmade {
            self.dataflow.forget(&o);
        }
        remade
    }

    /// Drop a task that will not run again: out of readers and its job, out of the table (a
    /// failed remake goes back to `Done`). Returns the objects it was to write, which the caller
    /// forgets once it has told their readers.
    fn end_unrun(&mut self, task: TaskId) -> Vec<ObjectId> {
        let t = &self.tasks[&task];
        if matches!(t.phase, Phase::Blocked) {
            self.counts.blocked -= 1;
        }
        let job = t.job;
        self.remove_reader(task);
        let t = self.tasks.get_mut(&task).expect("task exists");
        let waited = t.rare_if_any().map(|r| std::mem::take(&mut r.waiting_on));
        for d in waited.unwrap_or_default() {
            self.dataflow.drop_dependent(d, task);
        }
        let t = self.tasks.get_mut(&task).expect("task exists");
        let mut unmade = Vec::new();
        if t.remaking {
            t.remaking = false;
            self.dataflow.remake_ended(task);
            t.phase = Phase::Done;
        } else {
            unmade = t
                .rare_if_any()
                .map(|r| std::mem::take(&mut r.produces))
                .unwrap_or_default();
            self.tasks.remove(&task);
            if let Some(j) = self.jobs.get_mut(&job) {
                j.objects.retain(|x| !unmade.contains(x));
            }
        }
        self.job_task_ended(job);
        unmade
    }

    /// Abandon a blocked or queued task, and everything downstream of it.
    pub(super) fn abandon(&mut self, task: TaskId, why: Abandoned) {
        if let Phase::Queued { seq } = self.tasks[&task].phase {
            self.dequeue(task, seq);
        }
        if !self.tasks[&task].remaking {
            self.counts.failed += 1;
            self.actions.push_back(Action::Abandon { task, why });
        }
        self.task_ended_unsuccessfully(task);
    }

    /// `failed` ended without success (`remake`: it was remaking its objects): abandon what
    /// waits for it, down the graph.
    fn dependency_failed(&mut self, failed: TaskId, remake: bool) {
        for c in self.dataflow.take_dependents(failed) {
            let Some(e) = self.tasks.get_mut(&c) else {
                continue;
            };
            if let Some(r) = e.rare_if_any() {
                r.waiting_on.retain(|d| *d != failed);
            }
            if !matches!(e.phase, Phase::Blocked) {
                continue;
            }
            let object = e
                .inputs
                .iter()
                .map(|i| i.object)
                .find(|o| self.dataflow.get(o).is_some_and(|im| im.producer == failed));
            let why = match (remake, object) {
                (true, Some(object)) => Abandoned::InputLost {
                    object,
                    producer: failed,
                },
                _ => Abandoned::DependencyFailed {
                    task: failed,
                    object,
                },
            };
            self.abandon(c, why);
        }
    }

    /// These objects lost a copy: those now without any, that a task still needs, are made
    /// again.
    pub(super) fn copies_lost(&mut self, objects: &[ObjectId]) {
        for o in objects {
            let Some(im) = self.dataflow.get(o) else {
                continue;
            };
            if !im.made || !self.copies.index().holders(*o).is_empty() {
                continue;
            }
            let producer = im.producer;
            let waiting: Vec<TaskId> = im
                .readers
                .iter()
                .copied()
                .filter(|r| matches!(self.tasks[r].phase, Phase::Queued { .. } | Phase::Blocked))
                .collect();
            if waiting.is_empty() {
                // Nobody waits now: a later reader (or one that reports it lost) remakes it.
                continue;
            }
            if matches!(self.tasks[&producer].phase, Phase::Done) && !self.remake(producer) {
                for r in waiting {
                    // Abandoning the producer may have ended a reader already, or put one
                    // that is itself a producer back to `Done` (its success stands).
                    let still_waiting = self
                        .tasks
                        .get(&r)
                        .is_some_and(|t| matches!(t.phase, Phase::Queued { .. } | Phase::Blocked));
                    if still_waiting {
                        self.abandon(
                            r,
                            Abandoned::InputLost {
                                object: *o,
                                producer,
                            },
                        );
                    }
                }
            }
        }
    }

    /// Whether `node` holds the only copy of an intermediate object some task may still read.
    pub(super) fn holds_needed_intermediate(&self, node: NodeId) -> bool {
        self.dataflow.only_copy_on(node, self.copies.index())
    }

    pub(super) fn release_slot(&mut self, task: TaskId, node: NodeId) {
        self.notify(None, |h, _, fx| h.task_ended(task, fx));
        let (peers, fetching) = match &self.tasks[&task].phase {
            Phase::Running(r) => (r.peers.clone(), r.fetching.clone()),
            _ => (Vec::new(), Vec::new()),
        };
        for object in fetching {
            if self.copies.transfer_ended(node, object) && !self.copies.index().holds(node, object)
            {
                // Never landed (2Mark forgets the copy it made room for).
                self.notify(None, |h, _, _| {
                    h.copy_gone(node, object, Gone::NeverLanded, false)
                });
            }
        }
        for p in peers {
            self.nodes.served(p);
        }
        let held = self.tasks[&task].resources;
        if self.nodes.vacate(node, task, held) {
            let job = self.tasks[&task].job;
            if let Some(j) = self.jobs.get_mut(&job) {
                j.running_cores -= held.cores as u64;
            }
        }
    }

    /// Cancel a task. A blocked or queued task ends at once (and the tasks that depend on it are
    /// abandoned); a running one ends when its node reports the (killed) run finished. Returns
    /// the final state if it ended now.
    pub(super) fn cancel(&mut self, task: TaskId) -> Result<Option<TaskState>, CoreError> {
        let entry = self
            .tasks
            .get_mut(&task)
            .ok_or(CoreError::UnknownTask(task))?;
        match &mut entry.phase {
            Phase::Done => Err(CoreError::UnknownTask(task)),
            Phase::Blocked | Phase::Queued { .. } => {
                if let Phase::Queued { seq } = entry.phase {
                    self.dequeue(task, seq);
                }
                self.task_ended_unsuccessfully(task);
                self.counts.cancelled += 1;
                // The window now reaches one task deeper.
                *self.dirty = true;
                Ok(Some(TaskState::Cancelled))
            }
            Phase::Running(r) => {
                r.cancelled = true;
                Ok(None)
            }
        }
    }

    /// The current attempt of `task` ended on its node. Returns the task's final state.
    pub(super) fn finished(
        &mut self,
        task: TaskId,
        attempt: u32,
        outcome: Outcome,
        now: Time,
    ) -> Result<TaskState, CoreError> {
        let t = self.tasks.get(&task).ok_or(CoreError::UnknownTask(task))?;
        let (node, cancelled, since) = match &t.phase {
            Phase::Running(r) => (r.node, r.cancelled, r.since),
            _ => return Err(CoreError::NotRunning(task)),
        };
        if attempt != t.attempt {
            return Err(CoreError::StaleAttempt {
                task,
                got: attempt,
                current: t.attempt,
            });
        }
        if let Some(job) = self
            .jobs
            .get_mut(&t.job)
            .filter(|_| outcome != Outcome::Withdrawn)
        {
            job.ran(now.since(since).as_secs_f64());
        }
        if outcome == Outcome::Succeeded && !cancelled {
            self.notify(None, |h, v, _| h.task_succeeded(v, task, since, now));
        }
        self.release_slot(task, node);
        self.nodes.idle_if_empty(node, now);
        self.counts.running -= 1;
        *self.dirty = true;
        let t = self.tasks.get_mut(&task).expect("running task exists");
        t.phase = Phase::Blocked;
        self.counts.blocked += 1;
        let state = match outcome {
            Outcome::Succeeded if !cancelled => {
                self.counts.blocked -= 1;
                let produced = t.produces().to_vec();
                self.task_succeeded(task);
                self.replicate(&produced, node);
                return Ok(TaskState::Finished(Outcome::Succeeded));
            }
            Outcome::Retryable(_) if !cancelled && t.retries_left > 0 => {
                t.retries_left -= 1;
                t.rare_mut().avoid = Some(node);
                t.rare_mut().avoid_always = false;
                self.counts.blocked -= 1;
                self.requeue(task);
                return Ok(TaskState::Queued);
            }
            Outcome::InputLost(object) if !cancelled => {
                t.rare_mut().crashes += 1;
                if t.rare().crashes < self.cfg.crash_limit {
                    // Its copy is gone from the index if the node said so; if the index still
                    // names a node that has not, that node is avoided next time.
                    t.rare_mut().avoid = Some(node);
                    t.rare_mut().avoid_always = false;
                    self.counts.blocked -= 1;
                    self.requeue(task);
                    return Ok(TaskState::Queued);
                }
                let name = format!(
                    "input {object} could not be read {} times",
                    t.rare().crashes
                );
                TaskState::Finished(Outcome::Failed(name))
            }
            Outcome::NodeFault(reason) if !cancelled => {
                t.rare_mut().crashes += 1;
                if t.rare().crashes < self.cfg.crash_limit {
                    t.rare_mut().avoid = Some(node);
                    t.rare_mut().avoid_always = true;
                    self.counts.blocked -= 1;
                    self.requeue(task);
                    return Ok(TaskState::Queued);
                }
                let name = format!("{reason} ({} times)", t.rare().crashes);
                TaskState::Finished(Outcome::Failed(name))
            }
            Outcome::Withdrawn if !cancelled => {
                self.counts.blocked -= 1;
                self.requeue(task);
                return Ok(TaskState::Queued);
            }
            _ if cancelled => TaskState::Cancelled,
            Outcome::Retryable(reason) | Outcome::Failed(reason) => {
                TaskState::Finished(Outcome::Failed(reason))
            }
            Outcome::Succeeded
            | Outcome::InputLost(_)
            | Outcome::NodeFault(_)
            | Outcome::Withdrawn => {
                unreachable!("handled above")
            }
        };
        if !self.task_ended_unsuccessfully(task) {
            match state {
                TaskState::Cancelled => self.counts.cancelled += 1,
                _ => self.counts.failed += 1,
            }
        }
        Ok(state)
    }
}
