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

use super::*;

impl Core {
    /// Nodes that hold `object`, if it is an intermediate object that is made.
    pub fn intermediate_holders(&self, object: ObjectId) -> Option<&[NodeId]> {
        let im = self.dataflow.get(&object)?;
        im.made.then(|| self.copies.index().holders(object))
    }

    /// The producer of an intermediate object the core knows.
    pub fn producer_of(&self, object: ObjectId) -> Option<TaskId> {
        self.dataflow.get(&object).map(|im| im.producer)
    }

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
        self.tasks.insert(id, entry);
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
    pub fn handle_restore_done(&mut self, spec: TaskSpec, _now: Time) -> Result<(), CoreError> {
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
        let entry = TaskEntry::new(&spec, inputs, Phase::Done, 0);
        self.tasks.insert(
            spec.id,
            TaskEntry {
                held: false,
                ..entry
            },
        );
        Ok(())
    }

    /// The sizes of a held task's inputs are known: it may run once its dependencies have
    /// succeeded. Sizes of objects it does not read are ignored.
    pub fn handle_inputs_known(
        &mut self,
        task: TaskId,
        sizes: &[(ObjectId, u64)],
        _now: Time,
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
    pub fn handle_failed_unrun(&mut self, task: TaskId, _now: Time) -> Result<(), CoreError> {
        let t = self.tasks.get(&task).ok_or(CoreError::UnknownTask(task))?;
        match t.phase {
            Phase::Blocked => {}
            Phase::Queued { seq } => self.dequeue(task, seq),
            Phase::Running { .. } | Phase::Done => return Err(CoreError::NotRunning(task)),
        }
        self.counts.failed += 1;
        self.task_ended_unsuccessfully(task);
        Ok(())
    }

    /// An intermediate object is `size` bytes (its producer's node reports it).
    pub fn handle_intermediate_size(&mut self, object: ObjectId, size: u64) {
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
        if !matches!(t.phase, Phase::Blocked) || !t.waiting_on.is_empty() || t.held {
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
        let blocked = |c: &Core| {
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
        if !t.waiting_on.is_empty() {
            return;
        }
        for i in t.inputs.iter_mut() {
            if let Some(im) = self.dataflow.get(&i.object) {
                i.size = im.size;
            }
        }
        if let Some(name) = self.hinted_at_departed(task) {
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
        if t.remakes >= limit {
            return false;
        }
        t.remakes += 1;
        t.remaking = true;
        self.dataflow.remake_started(producer);
        t.phase = Phase::Blocked;
        debug_assert!(t.waiting_on.is_empty());
        let job = t.job;
        let produces = t.produces.clone();
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
                    Phase::Running { .. } | Phase::Done => {}
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
        let produces = t.produces.clone();
        if !remade {
            self.counts.succeeded += 1;
        }
        for o in &produces {
            self.dataflow.get_mut(o).expect("registered").made = true;
        }
        self.remove_reader(task);
        for c in self.dataflow.take_dependents(task) {
            if let Some(e) = self.tasks.get_mut(&c) {
                e.waiting_on.retain(|d| *d != task);
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
        for d in std::mem::take(&mut t.waiting_on) {
            self.dataflow.drop_dependent(d, task);
        }
        let t = self.tasks.get_mut(&task).expect("task exists");
        let mut unmade = Vec::new();
        if t.remaking {
            t.remaking = false;
            self.dataflow.remake_ended(task);
            t.phase = Phase::Done;
        } else {
            unmade = std::mem::take(&mut t.produces);
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
            e.waiting_on.retain(|d| *d != failed);
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
}
