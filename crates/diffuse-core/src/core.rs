//! The scheduling core: a deterministic state machine over tasks, nodes, slots and the location
//! index. Drivers feed it events with `handle_*(…, now)` and carry out what `poll_action` returns.
//!
//! Calling order, for any driver:
//! 1. feed every event that happened (`handle_submit`, `handle_node_joined`, `handle_object_cached`,
//!    `handle_task_finished`, …), each with the current time;
//! 2. if `poll_timeout()` is at or before now, call `handle_timeout(now)`;
//! 3. drain `poll_action(now)` until it returns `None`, carrying out each action;
//! 4. sleep until the next event or `poll_timeout()`.
//!
//! The core never reads a clock, does no I/O and uses no unseeded randomness, so the simulator
//! and the live dispatcher make the same decisions from the same events.

use crate::action::{Abandoned, Action, Dispatch, Source};
use crate::bandwidth::{Endpoint, PairView};
use crate::cache::EvictionPolicy;
use crate::dispatch::{DispatchPolicy, PolicyKind, SchedView};
use crate::handoff::{CacheModel, Handoff};
use crate::hooks::handoff::CacheHandoff;
use crate::hooks::hook::{CoreView, Effect, Effects, Gone, Hook};
use crate::hooks::prefetch::TransferScheduler;
use crate::hooks::registry::{registry, HookSettings};
use crate::hooks::two_mark::TwoMarkHook;
use crate::ids::{JobId, NodeId, NodeName, ObjectId, TaskId};
use crate::index::LocationIndex;
use crate::provision::{Demand, Provisioning};
use crate::queue::WaitQueue;
use crate::racks::Racks;
use crate::resources::Resources;
use crate::sharing::share::{JobSharing, ShareView};
use crate::task::{Input, Outcome, Placement, TaskSpec, TaskState};
use crate::time::Time;
use rustc_hash::FxHashMap;
use std::collections::{BTreeSet, VecDeque};

// What each child module decides. Owners (a type with its own state, no `impl Core`):
// nodes (Nodes), dataflow (Dataflow), hints (Hints), policies (Policies), provisioner
// (Provisioner), sources (Sources); plain types: config, state; the view the hooks read: view;
// the checks that span owners, as functions of what they read: invariants.
// The core's handlers that move state between owners (`impl Core`): lifecycle (a task's life by
// the dataflow rules), membership (nodes joining, leaving, released), placement (the hint API).
mod config;
mod copies;
mod dataflow;
mod hints;
mod invariants;
mod lifecycle;
mod membership;
mod nodes;
mod placement;
mod policies;
mod provisioner;
mod sources;
mod state;
mod view;

pub use crate::sharing::JobOrder;
pub use config::{CoreConfig, CoreError, Counts, LostTasks};
use copies::Copies;
use dataflow::Dataflow;
use hints::Hints;
use nodes::Nodes;
use policies::Policies;
use provisioner::Provisioner;
use sources::Sources;
use state::{JobEntry, Phase, TaskEntry};

/// The scheduling core. See the module documentation for the calling order.
pub struct Core {
    cfg: CoreConfig,
    /// The dispatch policies in use: the core's own and the jobs' ([`policies::Policies`]).
    policies: Policies,
    tasks: FxHashMap<TaskId, TaskEntry>,
    queue: WaitQueue,
    /// What nodes hold, what is on its way to them, and what scoring sees of both
    /// ([`copies::Copies`]).
    copies: Copies,
    /// The nodes in the pool and their slot counts ([`nodes::Nodes`]).
    nodes: Nodes,
    /// Queued tasks that ask for more than one core, or anything else (the ones that may fit no
    /// node).
    demanding: BTreeSet<TaskId>,
    /// Queued tasks that avoid a node (retries) or state a walltime (which some node may not
    /// have left). With none of these and no demanding task, every
    /// queued task fits any node with a free core, and decisions skip the check.
    avoiding: BTreeSet<TaskId>,
    actions: VecDeque<Action>,
    /// Something changed that may allow a dispatch.
    dirty: bool,
    /// Dynamic provisioning's rounds (None: static provisioning).
    provisioner: Option<Provisioner>,
    /// Tasks the driver holds back (e.g. while their inputs are looked up) that will soon be
    /// queued: counted as demand by provisioning.
    waiting: u64,
    /// The task counters and `pending_nodes`; its `nodes`, `slots` and `busy_slots` stay 0, as
    /// [`Nodes`] counts them ([`Core::counts`] puts them together).
    counts: Counts,
    /// Intermediate objects, who waits for whom, producers being remade
    /// ([`dataflow::Dataflow`]).
    dataflow: Dataflow,
    jobs: FxHashMap<JobId, JobEntry>,
    /// The placement hints that bind queued tasks now ([`hints::Hints`]).
    hints: Hints,
    /// When the last dispatch pass ran.
    last_pass: Option<Time>,
    /// How jobs share the slots ([`crate::sharing`]): whose tasks a free slot is offered first.
    job_order: Box<dyn JobSharing>,
    /// Which nodes share a rack ([`Core::handle_node_rack`]).
    racks: Racks,
    /// The policies that act after dispatch ([`crate::hooks`]), in the order they hear each
    /// event. A hook is taken out (None) only while it is being called.
    hooks: Vec<Option<Box<dyn Hook>>>,
    /// Where a fetch reads from: past transfers' rates ([`Core::handle_transfer`]) and the
    /// peer-read limit ([`sources::Sources`]).
    sources: Sources,
}

impl Core {
    /// A core with the built-in policy named in `cfg`.
    pub fn new(cfg: CoreConfig) -> Core {
        let policy = cfg.policy.build(&cfg.policy_params());
        Core::with_policy(cfg, policy)
    }

    /// A core with a custom dispatch policy (`cfg.policy` is then ignored).
    pub fn with_policy(cfg: CoreConfig, policy: Box<dyn DispatchPolicy>) -> Core {
        let provisioner = match &cfg.provisioning {
            Provisioning::Static => None,
            Provisioning::Dynamic(d) => Some(Provisioner::new(d.clone())),
        };
        let hooks = registry(&HookSettings {
            handoff: cfg.handoff.as_ref(),
            storage_cap: cfg.storage_cap,
            prefetch: cfg.prefetch,
            two_mark: cfg.two_mark,
            caching: policy.uses_locality(),
        });
        let bandwidth = cfg.bandwidth;
        let peer_read_limit = cfg.peer_read_limit;
        let job_order = cfg.job_order.build(());
        Core {
            cfg,
            policies: Policies::new(policy),
            tasks: FxHashMap::default(),
            queue: WaitQueue::new(),
            copies: Copies::default(),
            nodes: Nodes::default(),
            demanding: BTreeSet::new(),
            avoiding: BTreeSet::new(),
            actions: VecDeque::new(),
            dirty: false,
            provisioner,
            waiting: 0,
            counts: Counts::default(),
            dataflow: Dataflow::default(),
            jobs: FxHashMap::default(),
            hints: Hints::default(),
            last_pass: None,
            job_order,
            racks: Racks::new(),
            hooks: hooks.into_iter().map(Some).collect(),
            sources: Sources::new(crate::bandwidth::Predictor::new(bandwidth), peer_read_limit),
        }
    }

    /// Settings.
    pub fn config(&self) -> &CoreConfig {
        &self.cfg
    }

    /// Whether some policy in use caches what it reads (false while FA, which reads only from
    /// storage, is the only one). Per task: [`Core::caches_for`].
    pub fn caching_enabled(&self) -> bool {
        self.policies.caching()
    }

    /// Job `job` is dispatched by `kind` instead of the core's policy. Only before its first
    /// task ([`CoreError::JobStarted`] after).
    pub fn handle_job_policy(&mut self, job: JobId, kind: PolicyKind) -> Result<(), CoreError> {
        if self.jobs.contains_key(&job) {
            return Err(CoreError::JobStarted(job));
        }
        let params = self.cfg.policy_params();
        if self
            .policies
            .choose_for_job(job, kind, &params, self.counts.queued)
        {
            // A policy that reads cached data is now in use: the queued tasks enter the
            // locality candidate sets.
            for (seq, task) in self.queue.iter() {
                let inputs = &self.tasks[&task].inputs;
                self.copies.enqueue(task, seq, inputs);
            }
        }
        Ok(())
    }

    /// The policy of job `job`, if it chose one.
    pub fn job_policy(&self, job: JobId) -> Option<PolicyKind> {
        self.policies.of_job(job)
    }

    /// Whether `task`'s policy reads through caches: its inputs are cached on its node, read
    /// from a peer or locally when held (all but FA). Its intermediate inputs are read from
    /// their holders whatever the policy.
    pub fn caches_for(&self, task: TaskId) -> bool {
        match self.tasks.get(&task) {
            Some(t) => self.policies.caches_for_job(t.job),
            None => self.policies.own_caches(),
        }
    }

    /// Producers running again to remake a lost object, whose success is already counted in
    /// `succeeded`: (waiting: blocked or queued, running). [`Counts`] counts them in its
    /// `blocked`, `queued` and `running` too; a driver showing each task once subtracts them.
    pub fn remakes(&self) -> (u64, u64) {
        let running = self
            .dataflow
            .remaking()
            .iter()
            .filter(|t| matches!(self.tasks[t].phase, Phase::Running { .. }))
            .count() as u64;
        (self.dataflow.remaking().len() as u64 - running, running)
    }

    /// Counters.
    pub fn counts(&self) -> Counts {
        Counts {
            nodes: self.nodes.count(),
            slots: self.nodes.slots(),
            busy_slots: self.nodes.busy(),
            ..self.counts
        }
    }

    /// Check every invariant of the core's state; `Err` names the first one broken. Tests and the
    /// simulator's `--check` mode call it after every step.
    pub fn check_invariants(&self) -> Result<(), String> {
        let tasks = &self.tasks;
        self.dataflow.check(tasks, self.copies.index())?;
        self.hints.check(tasks, &|name| self.nodes.has_name(name))?;
        invariants::jobs(&self.jobs, tasks, self.nodes.busy())?;
        let queued = tasks
            .values()
            .filter(|t| matches!(t.phase, Phase::Queued { .. }));
        self.policies.check(queued.map(|t| t.job))?;
        let job_of = |t: TaskId| tasks[&t].job;
        self.job_order
            .check(&self.queue, &job_of, self.counts.queued)?;
        for h in self.hooks.iter().flatten() {
            h.check(self)?;
        }
        invariants::tasks(tasks, &self.queue, &self.nodes, &self.counts)?;
        self.nodes.check(tasks)?;
        invariants::demanding(&self.demanding, tasks)?;
        let hook_transfers = self.hooks.iter().flatten().flat_map(|h| h.in_transfer());
        self.copies
            .check(tasks, hook_transfers, self.policies.caching())
    }

    /// The location index.
    pub fn index(&self) -> &LocationIndex {
        self.copies.index()
    }

    /// The nodes' caches as cache hand-off sees them (None: hand-off is off).
    pub fn cache_model(&self) -> Option<&CacheModel> {
        self.hook::<CacheHandoff>().map(CacheHandoff::model)
    }

    /// Nodes that hold `object` (Hercules' `locate`).
    pub fn locate(&self, object: ObjectId) -> &[NodeId] {
        self.copies.index().holders(object)
    }

    /// The holders of `object` other than `skip`, fastest predicted to `to` first: the sources
    /// a reader may take chunks from besides the one it was given.
    pub fn holders_by_rate(&self, object: ObjectId, to: NodeId, skip: &[NodeId]) -> Vec<NodeId> {
        self.sources
            .holders_by_rate(self.copies.index(), object, to, skip)
    }

    /// `to` received `bytes` from `from` in `secs`: the predictor learns the pair's rate.
    pub fn handle_transfer(&mut self, from: Endpoint, to: NodeId, bytes: u64, secs: f64) {
        self.sources.observe(from, to, bytes, secs);
    }

    /// The rate predicted from `from` to `to`, bytes per second.
    pub fn predicted_rate(&self, from: Endpoint, to: NodeId) -> f64 {
        self.sources.predictor().predict(from, Endpoint::Node(to))
    }

    /// The bandwidth predictor (for the batch stager, [`crate::staging`]).
    pub fn predictor(&self) -> &crate::bandwidth::Predictor {
        self.sources.predictor()
    }

    /// Every pair measured, with its prediction (for metrics).
    pub fn bandwidth_pairs(&self) -> Vec<PairView> {
        self.sources.predictor().pairs()
    }

    /// State of a task the core still tracks (blocked, queued or running, or kept as a
    /// producer); finished tasks are forgotten once their outcome has been returned to the
    /// driver.
    pub fn task_state(&self, task: TaskId) -> Option<TaskState> {
        let t = self.tasks.get(&task)?;
        Some(match &t.phase {
            Phase::Blocked => TaskState::Blocked,
            Phase::Done => TaskState::Finished(Outcome::Succeeded),
            Phase::Queued { .. } => TaskState::Queued,
            Phase::Running { node, since, .. } => TaskState::Running {
                node: *node,
                attempt: t.attempt,
                since: *since,
            },
        })
    }

    // ----- inputs -----

    /// A task was submitted. It joins the back of the wait queue, or, if it depends on tasks
    /// that have not succeeded yet (its `after`, and the producers of its intermediate inputs)
    /// or is `held`, waits outside it until they have (see `core/lifecycle.rs`).
    pub fn handle_submit(&mut self, spec: TaskSpec, now: Time) -> Result<(), CoreError> {
        self.handle_restore(spec, 0, now)
    }

    /// A task replayed from the driver's journal after a restart, `attempts` of which were
    /// dispatched before: its next attempt is numbered `attempts + 1`, so a result from an attempt
    /// made before the restart is refused as stale.
    pub fn handle_restore(
        &mut self,
        spec: TaskSpec,
        attempts: u32,
        _now: Time,
    ) -> Result<(), CoreError> {
        self.notify(None, |h, _, _| h.task_submitted(&spec.inputs));
        self.admit(spec, attempts)
    }

    fn enqueue(&mut self, task: TaskId) {
        let entry = self.tasks.get_mut(&task).expect("task exists");
        let seq = self.queue.push_at(task, entry.priority);
        entry.phase = Phase::Queued { seq };
        if !entry.resources.is_one_core() {
            self.demanding.insert(task);
        }
        if entry.avoid.is_some() || entry.walltime.is_some() {
            self.avoiding.insert(task);
        }
        if self.policies.caching() {
            self.copies.enqueue(task, seq, &entry.inputs);
        }
        self.bind_hint(task, seq);
        let job = self.tasks[&task].job;
        self.job_order.queued(job, seq);
        self.policies.count(job, true);
        self.counts.queued += 1;
        self.dirty = true;
    }

    fn dequeue(&mut self, task: TaskId, seq: u64) {
        self.queue.remove(seq);
        self.demanding.remove(&task);
        self.avoiding.remove(&task);
        self.copies.dequeue(task);
        self.unbind_hint(task, seq);
        let job = self.tasks[&task].job;
        self.policies.count(job, false);
        self.job_order.dequeued(job, seq);
        self.counts.queued -= 1;
    }

    /// Cancel a task. A blocked or queued task ends at once (and the tasks that depend on it are
    /// abandoned); a running one ends when its node reports the (killed) run finished. Returns
    /// the final state if it ended now.
    pub fn handle_cancel(
        &mut self,
        task: TaskId,
        _now: Time,
    ) -> Result<Option<TaskState>, CoreError> {
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
                self.dirty = true;
                Ok(Some(TaskState::Cancelled))
            }
            Phase::Running { cancelled, .. } => {
                *cancelled = true;
                Ok(None)
            }
        }
    }

    /// The current attempt of `task` ended on its node. Returns the task's final state.
    pub fn handle_task_finished(
        &mut self,
        task: TaskId,
        attempt: u32,
        outcome: Outcome,
        now: Time,
    ) -> Result<TaskState, CoreError> {
        let t = self.tasks.get(&task).ok_or(CoreError::UnknownTask(task))?;
        let Phase::Running {
            node,
            cancelled,
            since,
            ..
        } = t.phase.clone()
        else {
            return Err(CoreError::NotRunning(task));
        };
        if attempt != t.attempt {
            return Err(CoreError::StaleAttempt {
                task,
                got: attempt,
                current: t.attempt,
            });
        }
        if outcome == Outcome::Succeeded && !cancelled {
            self.notify(None, |h, v, _| h.task_succeeded(v, task, since, now));
        }
        self.release_slot(task, node);
        self.nodes.idle_if_empty(node, now);
        self.counts.running -= 1;
        self.dirty = true;
        let t = self.tasks.get_mut(&task).expect("running task exists");
        t.phase = Phase::Blocked;
        self.counts.blocked += 1;
        let state = match outcome {
            Outcome::Succeeded if !cancelled => {
                self.counts.blocked -= 1;
                let produced = t.produces.clone();
                self.task_succeeded(task);
                self.replicate(&produced, node);
                return Ok(TaskState::Finished(Outcome::Succeeded));
            }
            Outcome::Retryable(_) if !cancelled && t.retries_left > 0 => {
                t.retries_left -= 1;
                t.avoid = Some(node);
                self.counts.blocked -= 1;
                self.requeue(task);
                return Ok(TaskState::Queued);
            }
            Outcome::InputLost(object) if !cancelled => {
                t.crashes += 1;
                if t.crashes < self.cfg.crash_limit {
                    // Its copy is gone from the index if the node said so; if the index still
                    // names a node that has not, that node is avoided next time.
                    t.avoid = Some(node);
                    self.counts.blocked -= 1;
                    self.requeue(task);
                    return Ok(TaskState::Queued);
                }
                let name = format!("input {object} could not be read {} times", t.crashes);
                TaskState::Finished(Outcome::Failed(name))
            }
            _ if cancelled => TaskState::Cancelled,
            Outcome::Retryable(reason) | Outcome::Failed(reason) => {
                TaskState::Finished(Outcome::Failed(reason))
            }
            Outcome::Succeeded | Outcome::InputLost(_) => unreachable!("handled above"),
        };
        if !self.task_ended_unsuccessfully(task) {
            match state {
                TaskState::Cancelled => self.counts.cancelled += 1,
                _ => self.counts.failed += 1,
            }
        }
        Ok(state)
    }

    fn release_slot(&mut self, task: TaskId, node: NodeId) {
        self.notify(None, |h, _, fx| h.task_ended(task, fx));
        let (peers, fetching) = match &self.tasks[&task].phase {
            Phase::Running {
                peers, fetching, ..
            } => (peers.clone(), fetching.clone()),
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

    /// `node` reports it now holds `object`.
    pub fn handle_object_cached(
        &mut self,
        node: NodeId,
        object: ObjectId,
        _now: Time,
    ) -> Result<(), CoreError> {
        if !self.nodes.contains(node) {
            return Err(CoreError::UnknownNode(node));
        }
        self.copies.cached(node, object);
        self.notify(None, |h, v, fx| h.object_cached(v, node, object, fx));
        Ok(())
    }

    /// `node` reports it no longer holds `object`.
    pub fn handle_object_evicted(
        &mut self,
        node: NodeId,
        object: ObjectId,
        _now: Time,
    ) -> Result<(), CoreError> {
        if !self.nodes.contains(node) {
            return Err(CoreError::UnknownNode(node));
        }
        self.copy_gone(node, object, Gone::Reported, None);
        Ok(())
    }

    /// The source of `object` changed: no node's copy may be used again. Returns the nodes that
    /// held it (the driver tells them to drop it).
    pub fn handle_object_invalidated(&mut self, object: ObjectId, _now: Time) -> Vec<NodeId> {
        let holders = self.copies.index().holders(object).to_vec();
        for n in &holders {
            self.copies.forget(*n, object);
            self.notify(None, |h, _, _| {
                h.copy_gone(*n, object, Gone::Invalidated, true)
            });
        }
        self.notify(None, |h, _, _| h.object_invalidated(object, &holders));
        if !holders.is_empty() {
            // A task held back for a holder (MCH) may now run anywhere.
            self.dirty = true;
        }
        holders
    }

    // ----- after-dispatch policies ([`crate::hooks`]) -----

    /// Tell every hook but `skip` of an event, in the registry's order; each hook's effects are
    /// carried out before the next hears of it.
    fn notify(
        &mut self,
        skip: Option<usize>,
        mut event: impl FnMut(&mut dyn Hook, &dyn CoreView, &mut Effects),
    ) {
        for i in 0..self.hooks.len() {
            if skip == Some(i) {
                continue;
            }
            let Some(mut hook) = self.hooks[i].take() else {
                continue;
            };
            let mut fx = Effects::default();
            event(hook.as_mut(), &*self, &mut fx);
            self.hooks[i] = Some(hook);
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
                Effect::Wake => self.dirty = true,
            }
        }
    }

    /// `node`'s copy of `object` no longer counts (`why`): out of the index, every hook but
    /// `origin` (the one that asked) told, and an intermediate object left without a copy
    /// that a task needs is made again.
    fn copy_gone(&mut self, node: NodeId, object: ObjectId, why: Gone, origin: Option<usize>) {
        let held = self.copies.forget(node, object);
        self.notify(origin, |h, _, _| h.copy_gone(node, object, why, held));
        if held {
            self.copies_lost(&[object]);
        }
    }

    /// The hook of type `T`, if it is in use.
    fn hook<T: Hook>(&self) -> Option<&T> {
        self.hooks
            .iter()
            .flatten()
            .find_map(|h| (&**h as &dyn std::any::Any).downcast_ref::<T>())
    }

    /// What 2Mark did so far (None: 2Mark is off).
    pub fn two_mark_stats(&self) -> Option<crate::twomark::TwoMarkStats> {
        self.hook::<TwoMarkHook>().map(TwoMarkHook::stats)
    }

    /// `object` is `size` bytes: for a driver that knows the size of a copy the core has not
    /// seen a task read (objects placed on nodes before any task). Tasks' inputs and
    /// intermediate objects need no call.
    pub fn handle_object_size(&mut self, object: ObjectId, size: u64) {
        self.notify(None, |h, _, _| h.object_size(object, size));
    }

    /// What the transfer scheduler did so far.
    pub fn prefetch_stats(&self) -> crate::mixapart::PrefetchStats {
        self.hook::<TransferScheduler>()
            .map(TransferScheduler::stats)
            .unwrap_or_default()
    }

    /// Reads from persistent storage under way to each node (prefetches and tasks' own), for
    /// a driver that divides the storage cap among its nodes by demand.
    pub fn storage_reads(&self) -> FxHashMap<NodeId, u32> {
        self.hook::<TransferScheduler>()
            .map(TransferScheduler::reads_by_node)
            .unwrap_or_default()
    }

    /// The budgeted rate of the storage reads under way, bytes/s.
    pub fn storage_budget_used(&self) -> u64 {
        self.hook::<TransferScheduler>()
            .map_or(0, TransferScheduler::budget_used)
    }

    /// The prefetch of `object` to `node` failed (or was not carried out): it is no longer on
    /// its way there. Anything else about the object is unchanged; a task already sent to that
    /// node to read it reads it from storage.
    pub fn handle_prefetch_failed(&mut self, node: NodeId, object: ObjectId, _now: Time) {
        self.notify(None, |h, _, fx| h.transfer_failed(node, object, fx));
    }

    /// Whether a hook keeps an idle `node` from being released.
    fn kept_by_hook(&self, node: NodeId) -> bool {
        self.hooks.iter().flatten().any(|h| h.keeps_node(node))
    }

    // ----- outputs -----

    /// When the core next wants `handle_timeout` to be called.
    pub fn poll_timeout(&self) -> Option<Time> {
        let provisioning = self.provisioner.as_ref().map(Provisioner::next_check);
        [provisioning, self.hints.next_lapse(), self.next_round()]
            .into_iter()
            .flatten()
            .min()
    }

    /// When a policy in use wants its next round (see [`DispatchPolicy::wake_at`]), if that is
    /// after the last pass (a round that found no free node is not asked for again).
    fn next_round(&self) -> Option<Time> {
        self.policies.next_round(self.last_pass)
    }

    /// The next action for the driver, if any.
    pub fn poll_action(&mut self, now: Time) -> Option<Action> {
        if self.hints.next_lapse().is_some_and(|t| t <= now)
            || self.next_round().is_some_and(|t| t <= now)
        {
            self.dirty = true;
        }
        if self.copies.take_changed() {
            self.dirty = true;
        }
        if self.actions.is_empty() && self.dirty {
            self.dirty = false;
            self.dispatch_pass(now);
            self.notify(None, |h, v, fx| h.poll(v, fx));
        }
        self.actions.pop_front()
    }

    fn dispatch_pass(&mut self, now: Time) {
        self.last_pass = Some(now);
        if self.queue.is_empty() {
            return;
        }
        self.hints.time(&mut self.tasks, now);
        // A dispatch moves the window, which can bring in a task for a node that already
        // declined in this pass: repeat until a pass changes nothing of that kind.
        loop {
            let mut declined = false;
            let mut dispatched_after_decline = false;
            for local_pass in [true, false] {
                let free: Vec<NodeId> = self.nodes.free().iter().copied().collect();
                for node in free {
                    // A node takes the tasks hinted at it first.
                    while self.nodes.has_free_slot(node) {
                        let Some(task) = self.next_hinted(node, now) else {
                            break;
                        };
                        self.assign(task, node, now);
                    }
                    while self.nodes.has_free_slot(node) && !self.queue.is_empty() {
                        // A retried task avoids the node it failed on while another has room.
                        let elsewhere = self.nodes.free().len() > 1;
                        let tasks = &self.tasks;
                        let nodes = &self.nodes;
                        let uniform = self.demanding.is_empty()
                            && self.avoiding.is_empty()
                            && !self.hints.any_bound();
                        // Whether a task may run on a node with a free core now.
                        let fits_on = |t: TaskId, on: NodeId| {
                            uniform || {
                                let Some(n) = nodes.get(on) else {
                                    return false;
                                };
                                let e = &tasks[&t];
                                (e.resources.is_one_core()
                                    || e.resources.fits_in(&n.capacity.minus(&n.used)))
                                    && !(elsewhere && e.avoid == Some(on))
                                    && e.walltime
                                        .is_none_or(|w| n.ends_at.is_none_or(|end| now + w <= end))
                                    && !(e.hint_live && e.hint.map(|h| h.node) != n.name)
                            }
                        };
                        let fits = |t: TaskId| fits_on(t, node);
                        let nodes = &self.nodes;
                        let load = |n: NodeId| {
                            nodes.get(n).map_or(1.0, |e| {
                                e.reported_load
                                    .unwrap_or(e.used.cores as f64 / e.capacity.cores.max(1) as f64)
                            })
                        };
                        let beta = |t: TaskId| tasks.get(&t).and_then(|e| e.dad_beta);
                        let view = SchedView {
                            beta: &beta,
                            queue: &self.queue,
                            locality: self.copies.locality(),
                            index: self.copies.effective(),
                            held: self.copies.index(),
                            racks: &self.racks,
                            window_bound: self.window_bound(),
                            busy_slots: self.nodes.busy(),
                            total_slots: self.nodes.slots(),
                            fits: &fits,
                            fits_on: &fits_on,
                            free: self.nodes.free(),
                            load: &load,
                        };
                        // Shares of the queue, each chosen from by its policy, in the job order's
                        // turn (see crate::sharing).
                        let policies = &self.policies;
                        let kind_of = |t: TaskId| policies.of_job(tasks[&t].job);
                        let jobs = &self.jobs;
                        let held = |j: JobId| jobs.get(&j).map_or(0, |e| e.running_cores);
                        let shares = self.job_order.shares(&ShareView {
                            queue: &self.queue,
                            window_bound: view.window_bound,
                            job_policies: policies.any_by_job(),
                            kind_of: &kind_of,
                            groups: policies.groups(),
                            held: &held,
                        });
                        let job_of = |t: TaskId| tasks[&t].job;
                        let choice = self
                            .policies
                            .choose(shares, &view, &job_of, node, now, local_pass);
                        let Some(task) = choice else {
                            declined = true;
                            break;
                        };
                        dispatched_after_decline |= declined;
                        self.assign(task, node, now);
                    }
                }
            }
            if !dispatched_after_decline || self.queue.is_empty() || self.nodes.free().is_empty() {
                break;
            }
        }
    }

    /// Queued tasks whose request no node of the pool could ever hold (no node has that much of
    /// a resource; for a task with a hard hint, no node of that name), in queue order. Empty
    /// while no node has joined; a hard hint at a name no node has now is waited for, not
    /// reported.
    pub fn unschedulable(&self) -> Vec<TaskId> {
        if self.nodes.count() == 0 {
            return Vec::new();
        }
        self.demanding
            .iter()
            .copied()
            .filter(|t| {
                let e = &self.tasks[t];
                self.nodes.never_holds(e.resources, e.hint)
            })
            .collect()
    }

    /// Cores `node`'s running tasks hold (0 for an unknown node).
    pub fn node_used_cores(&self, node: NodeId) -> u32 {
        self.nodes.get(node).map_or(0, |n| n.used.cores)
    }

    /// What `node` has in all (None: unknown node).
    pub fn node_capacity(&self, node: NodeId) -> Option<Resources> {
        self.nodes.get(node).map(|n| n.capacity)
    }

    fn assign(&mut self, task: TaskId, node: NodeId, now: Time) {
        let Phase::Queued { seq } = self.tasks[&task].phase else {
            panic!("policy chose {task}, which is not queued");
        };
        self.dequeue(task, seq);
        let use_locality = self.caches_for(task);
        let t = self.tasks.get_mut(&task).expect("task exists");
        t.attempt += 1;
        // Taken out while sources are picked (which reads the rest of the core), put back below.
        let task_inputs = std::mem::take(&mut t.inputs);
        let mut inputs = Vec::with_capacity(task_inputs.len());
        let mut peers: Vec<NodeId> = Vec::new();
        for input in &task_inputs {
            // An intermediate object is read from a node that holds it, under any policy: it
            // is not on persistent storage.
            let kept = match self.dataflow.get_mut(&input.object) {
                Some(im) => {
                    im.read = true;
                    true
                }
                None => false,
            };
            let source = if !use_locality && !kept {
                Source::Storage
            } else if self.copies.index().holds(node, input.object)
                || (use_locality && self.copies.in_transfer(node, input.object))
            {
                // Held, or being fetched to this node for another task: join that fetch.
                Source::Local
            } else {
                let holder = self.sources.pick_holder(
                    self.copies.index(),
                    &self.nodes,
                    &self.racks,
                    node,
                    input.object,
                    kept,
                );
                match holder {
                    Some(h) => {
                        peers.push(h);
                        Source::Peer(h)
                    }
                    None => Source::Storage,
                }
            };
            inputs.push((input.object, source));
        }
        let fetching: Vec<ObjectId> = inputs
            .iter()
            .filter(|(_, src)| use_locality && *src != Source::Local)
            .map(|(o, _)| *o)
            .collect();
        for p in &peers {
            self.nodes.serve(*p);
        }
        let t = self.tasks.get_mut(&task).expect("task exists");
        t.inputs = task_inputs;
        t.phase = Phase::Running {
            node,
            since: now,
            peers,
            fetching: fetching.clone(),
            cancelled: false,
        };
        let attempt = t.attempt;
        let held = t.resources;
        let job = t.job;
        self.jobs.entry(job).or_default().running_cores += held.cores as u64;
        self.nodes.occupy(node, task, held);
        self.counts.running += 1;
        self.notify(None, |h, v, fx| {
            h.dispatched(v, task, node, &inputs, use_locality, fx)
        });
        self.actions.push_back(Action::Dispatch(Dispatch {
            task,
            attempt,
            node,
            inputs,
        }));
        for object in fetching {
            self.copies.transfer_started(node, object);
        }
    }
}
