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

use crate::action::Action;
use crate::bandwidth::{Endpoint, PairView};
use crate::cache::EvictionPolicy;
use crate::dispatch::{DispatchPolicy, PolicyKind};
use crate::hooks::handoff::planner::CacheModel;
use crate::hooks::handoff::CacheHandoff;
use crate::hooks::hook::Gone;
use crate::hooks::registry::{registry, HookSettings};
use crate::ids::{JobId, NodeId, NodeName, ObjectId, RackId, TaskId};
use crate::index::LocationIndex;
use crate::provision::Provisioning;
use crate::racks::Racks;
use crate::resources::Resources;
use crate::task::{Outcome, Placement, TaskSpec, TaskState};
use crate::time::Time;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

// What each child module decides, bottom up (see `core/lifecycle.rs` for the layering).
// Owners, each a type with its own state and its own check, knowing nothing of the others:
// nodes (Nodes), copies (Copies: what nodes hold, what is on its way, the candidate sets),
// queued (Queued: the wait queue, its sets, the job order), dataflow (Dataflow), hints (Hints),
// policies (Policies), hook_set (HookSet: the after-dispatch hooks), provisioner (Provisioner),
// sources (Sources); plain types: config, state. Over the owners: view (what the hooks read),
// invariants (the checks that span owners, as functions of what they read). The rules:
// lifecycle (Step, the owners borrowed for one event: a task's life by the dataflow rules, and
// calling the hooks), and the handlers over a Step: pass (the dispatch pass, assigning a task),
// membership (nodes joining, leaving, released), placement (the hint API). Core (this file)
// composes the owners and is the public API; no child module refers to it.
mod config;
mod copies;
mod dataflow;
mod hints;
mod hook_set;
mod invariants;
mod lifecycle;
mod membership;
mod nodes;
mod pass;
mod placement;
mod policies;
mod provisioner;
mod queued;
mod sources;
mod state;
mod view;

pub use crate::sharing::JobOrder;
pub use config::{CoreConfig, CoreError, Counts, LostTasks};
use copies::Copies;
use dataflow::Dataflow;
use hints::Hints;
use hook_set::HookSet;
use lifecycle::Step;
use nodes::Nodes;
use policies::Policies;
use provisioner::Provisioner;
use queued::Queued;
use sources::Sources;
use state::{JobEntry, Phase, TaskTable};
use view::View;

/// The owners a task's life moves state between ([`Step`]), borrowed from `$core` for one
/// event. A macro, not a method, so that the core's other owners (the racks, the sources, the
/// provisioner) can be borrowed beside it.
macro_rules! step {
    ($core:expr) => {
        Step {
            cfg: &$core.cfg,
            tasks: &mut $core.tasks,
            jobs: &mut $core.jobs,
            counts: &mut $core.counts,
            dataflow: &mut $core.dataflow,
            queued: &mut $core.queued,
            copies: &mut $core.copies,
            hints: &mut $core.hints,
            policies: &mut $core.policies,
            nodes: &mut $core.nodes,
            hooks: &mut $core.hooks,
            actions: &mut $core.actions,
            dirty: &mut $core.dirty,
        }
    };
}

/// The scheduling core. See the module documentation for the calling order.
pub struct Core {
    cfg: CoreConfig,
    /// The dispatch policies in use: the core's own and the jobs' ([`policies::Policies`]).
    policies: Policies,
    tasks: TaskTable,
    /// The wait queue, the sets kept beside it and the job order ([`queued::Queued`]).
    queued: Queued,
    /// What nodes hold, what is on its way to them, and what scoring sees of both
    /// ([`copies::Copies`]).
    copies: Copies,
    /// The nodes in the pool and their slot counts ([`nodes::Nodes`]).
    nodes: Nodes,
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
    /// Which nodes share a rack ([`Core::handle_node_rack`]).
    racks: Racks,
    /// The policies that act after dispatch ([`crate::hooks`]), in the order they hear each
    /// event ([`hook_set::HookSet`]).
    hooks: HookSet,
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
        let ready = cfg.ready_tasks;
        Core {
            cfg,
            policies: Policies::new(policy),
            tasks: FxHashMap::default(),
            queued: Queued::new(job_order),
            copies: Copies::default(),
            nodes: Nodes::new(ready),
            actions: VecDeque::new(),
            dirty: false,
            provisioner,
            waiting: 0,
            counts: Counts::default(),
            dataflow: Dataflow::default(),
            jobs: FxHashMap::default(),
            hints: Hints::default(),
            last_pass: None,
            racks: Racks::new(),
            hooks: HookSet::new(hooks),
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
            for (seq, task) in self.queued.queue().iter() {
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
        view::caches_for(&self.tasks, &self.policies, task)
    }

    /// Producers running again to remake a lost object, whose success is already counted in
    /// `succeeded`: (waiting: blocked or queued, running). [`Counts`] counts them in its
    /// `blocked`, `queued` and `running` too; a driver showing each task once subtracts them.
    pub fn remakes(&self) -> (u64, u64) {
        let running = self
            .dataflow
            .remaking()
            .iter()
            .filter(|t| matches!(self.tasks[t].phase, Phase::Running(_)))
            .count() as u64;
        (self.dataflow.remaking().len() as u64 - running, running)
    }

    /// Counters.
    pub fn counts(&self) -> Counts {
        Counts {
            nodes: self.nodes.count(),
            slots: self.nodes.slots(),
            busy_slots: self.nodes.busy(),
            held_ready: self.nodes.held_ready(),
            ..self.counts
        }
    }

    /// Check every invariant of the core's state; `Err` names the first one broken. Tests and the
    /// simulator's `--check` mode call it after every step.
    pub fn check_invariants(&self) -> Result<(), String> {
        let tasks = &self.tasks;
        self.dataflow.check(tasks, self.copies.index())?;
        self.hints.check(tasks, &|name| self.nodes.has_name(name))?;
        invariants::jobs(&self.jobs, tasks, self.nodes.held_cores())?;
        let queued = tasks
            .values()
            .filter(|t| matches!(t.phase, Phase::Queued { .. }));
        self.policies.check(queued.map(|t| t.job))?;
        let job_of = |t: TaskId| tasks[&t].job;
        let queue = self.queued.queue();
        let job_order = self.queued.job_order();
        job_order.check(queue, &job_of, self.counts.queued)?;
        self.hooks.check(&self.view())?;
        invariants::tasks(tasks, queue, &self.nodes, &self.counts)?;
        self.nodes.check(tasks)?;
        invariants::demanding(self.queued.demanding(), tasks)?;
        let hook_transfers = self.hooks.in_transfer();
        self.copies
            .check(tasks, hook_transfers, self.policies.caching())
    }

    /// The location index.
    pub fn index(&self) -> &LocationIndex {
        self.copies.index()
    }

    /// The nodes' caches as cache hand-off sees them (None: hand-off is off).
    pub fn cache_model(&self) -> Option<&CacheModel> {
        self.hooks.find::<CacheHandoff>().map(CacheHandoff::model)
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
            Phase::Running(r) => TaskState::Running {
                node: r.node,
                attempt: t.attempt,
                since: r.since,
            },
        })
    }

    // ----- inputs: tasks (core/lifecycle.rs) -----

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
        let mut step = self.step();
        step.notify(None, |h, _, _| h.task_submitted(&spec.inputs));
        step.admit(spec, attempts)
    }

    /// Nodes that hold `object`, if it is an intermediate object that is made.
    pub fn intermediate_holders(&self, object: ObjectId) -> Option<&[NodeId]> {
        let im = self.dataflow.get(&object)?;
        im.made.then(|| self.copies.index().holders(object))
    }

    /// The producer of an intermediate object the core knows.
    pub fn producer_of(&self, object: ObjectId) -> Option<TaskId> {
        self.dataflow.get(&object).map(|im| im.producer)
    }

    /// Make room for `n` more tasks at once: a driver replaying its journal knows how many
    /// it will restore, and the table then grows once instead of step by step.
    pub fn reserve_tasks(&mut self, n: usize) {
        self.tasks.reserve(n);
    }

    /// A task that succeeded before the driver restarted, kept as the producer of its
    /// intermediate objects: if a task needs one of them and no node reports holding it, it
    /// runs again.
    pub fn handle_restore_done(&mut self, spec: TaskSpec, _now: Time) -> Result<(), CoreError> {
        self.step().restore_done(spec)
    }

    /// The sizes of a held task's inputs are known: it may run once its dependencies have
    /// succeeded. Sizes of objects it does not read are ignored.
    pub fn handle_inputs_known(
        &mut self,
        task: TaskId,
        sizes: &[(ObjectId, u64)],
        _now: Time,
    ) -> Result<(), CoreError> {
        self.step().inputs_known(task, sizes)
    }

    /// The driver ends a task that has not run (its inputs could not be looked up): it fails, and
    /// the tasks that depend on it are abandoned.
    pub fn handle_failed_unrun(&mut self, task: TaskId, _now: Time) -> Result<(), CoreError> {
        self.step().failed_unrun(task)
    }

    /// An intermediate object is `size` bytes (its producer's node reports it).
    pub fn handle_intermediate_size(&mut self, object: ObjectId, size: u64) {
        self.step().intermediate_size(object, size);
    }

    /// Cancel a task. A blocked or queued task ends at once (and the tasks that depend on it are
    /// abandoned); a running one ends when its node reports the (killed) run finished. Returns
    /// the final state if it ended now.
    pub fn handle_cancel(
        &mut self,
        task: TaskId,
        _now: Time,
    ) -> Result<Option<TaskState>, CoreError> {
        self.step().cancel(task)
    }

    /// A task sent into a ready slot (`Dispatch::held`) started on its node: from now on a
    /// crash of the node counts against it, and it is no longer asked back. Stale attempts and
    /// tasks not held are ignored.
    pub fn handle_task_started(&mut self, task: TaskId, attempt: u32) {
        if let Some(t) = self.tasks.get_mut(&task).filter(|t| t.attempt == attempt) {
            if let Phase::Running(r) = &mut t.phase {
                r.held = false;
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
        self.step().finished(task, attempt, outcome, now)
    }

    // ----- inputs: nodes (core/membership.rs) -----

    /// A node joined with `slots` cores (memory and disk not counted, no GPU) and an empty
    /// cache.
    pub fn handle_node_joined(
        &mut self,
        node: NodeId,
        slots: u32,
        now: Time,
    ) -> Result<(), CoreError> {
        self.handle_node_joined_with(node, Resources::cores_only(slots), now)
    }

    /// A node joined with `capacity` and an empty cache.
    pub fn handle_node_joined_with(
        &mut self,
        node: NodeId,
        capacity: Resources,
        now: Time,
    ) -> Result<(), CoreError> {
        membership::joined(&mut self.step(), node, capacity, now)
    }

    /// `node` is in `rack` (MixApart's rack-local tier, and peer sources in the reader's rack
    /// first). A node never placed in a rack shares one with no other node.
    pub fn handle_node_rack(&mut self, node: NodeId, rack: RackId) -> Result<(), CoreError> {
        if !self.nodes.contains(node) {
            return Err(CoreError::UnknownNode(node));
        }
        self.racks.set(node, rack);
        self.dirty = true;
        Ok(())
    }

    /// `tasks` more tasks wait outside the core and will be submitted soon (the live driver
    /// looks up their inputs first): dynamic provisioning counts them as queued, so an empty
    /// pool grows for them. Replaces the previous count.
    pub fn handle_waiting_demand(&mut self, tasks: u64) {
        self.waiting = tasks;
    }

    /// `node`'s load as the driver measures it (a machine's load average over its slots), in
    /// place of its busy slots over its slots; clamped to [0, 1]. DAD's score uses it.
    pub fn handle_node_load(&mut self, node: NodeId, load: f64) {
        if self.nodes.set_load(node, load) {
            self.dirty = true;
        }
    }

    /// `node` will leave at `ends_at` (a batch job's time limit; None: not known): a task that
    /// states a walltime is sent to it only if it would end by then.
    pub fn handle_node_deadline(&mut self, node: NodeId, ends_at: Option<Time>) {
        if self.nodes.set_deadline(node, ends_at) {
            self.dirty = true;
        }
    }

    /// `node`'s cache holds at most `quota` bytes and evicts by `eviction`. Optional: it only
    /// tells cache hand-off how much room the node has (a node that never reports it receives no
    /// pushes) and how its policy ranks what it holds.
    pub fn handle_node_cache(
        &mut self,
        node: NodeId,
        quota: u64,
        eviction: EvictionPolicy,
        _now: Time,
    ) -> Result<(), CoreError> {
        if !self.nodes.contains(node) {
            return Err(CoreError::UnknownNode(node));
        }
        self.step()
            .notify(None, |h, _, _| h.node_cache(node, quota, eviction));
        Ok(())
    }

    /// Nodes asked for with `Action::Provision` that will not come (the resource manager refused).
    pub fn handle_provision_failed(&mut self, nodes: u32, _now: Time) {
        self.counts.pending_nodes = self.counts.pending_nodes.saturating_sub(nodes);
    }

    /// A node is gone (crashed, cut off, or given up): its cache is forgotten and its running
    /// tasks are queued again, or failed once they have lost `crash_limit` nodes, or, if their
    /// cancel was asked for while they ran, ended as cancelled. Returns the tasks that ended
    /// (each leaves the core; the driver records its outcome).
    pub fn handle_node_lost(&mut self, node: NodeId, _now: Time) -> Result<LostTasks, CoreError> {
        membership::remove_node(&mut step!(self), &mut self.racks, node, true)
    }

    /// A node left cleanly (its worker was stopped and said so): as [`Core::handle_node_lost`],
    /// but its running tasks were stopped, not crashed, so they do not count toward the crash
    /// limit.
    pub fn handle_node_left(&mut self, node: NodeId, _now: Time) -> Result<LostTasks, CoreError> {
        membership::remove_node(&mut step!(self), &mut self.racks, node, false)
    }

    /// The tasks running on `node` (empty for an unknown node).
    pub fn running_on(&self, node: NodeId) -> &[TaskId] {
        self.nodes.get(node).map_or(&[], |n| n.running.as_slice())
    }

    /// A deadline returned by `poll_timeout` has passed: run provisioning's round (nodes asked
    /// for, idle nodes released, each after what it hands off).
    pub fn handle_timeout(&mut self, now: Time) {
        let Some(prov) = self.provisioner.as_mut() else {
            return;
        };
        if !prov.due(now) {
            return;
        }
        let mut step = step!(self);
        membership::round(&mut step, &mut self.racks, prov, self.waiting, now);
    }

    // ----- placement hints (core/placement.rs) -----

    /// `node` carries `name`, the driver's name for it (a worker's name), which hints name. A
    /// name may be shared; a node's later call replaces its name.
    pub fn handle_node_named(&mut self, node: NodeId, name: NodeName) -> Result<(), CoreError> {
        placement::named(&mut self.step(), node, name)
    }

    /// Set `task`'s hint before it runs (Hercules' `set_rank`, as `diffuse place` uses it on
    /// the producer of an object). Returns false, changing nothing, if it is running or done.
    pub fn handle_hint(
        &mut self,
        task: TaskId,
        hint: Placement,
        _now: Time,
    ) -> Result<bool, CoreError> {
        placement::hint(&mut self.step(), task, hint)
    }

    /// Whether a node named `name` is in the pool.
    pub fn has_node_named(&self, name: NodeName) -> bool {
        self.nodes.has_name(name)
    }

    /// Whether a hint bound `task`'s placement when it was dispatched: true if it ran (or runs)
    /// on a node of the name it asked for. None if it has no hint or is not running.
    pub fn hint_held(&self, task: TaskId, node: NodeId) -> Option<bool> {
        let h = self.tasks.get(&task)?.hint()?;
        Some(self.nodes.get(node)?.name == Some(h.node))
    }

    // ----- the owners, borrowed -----

    /// The owners a task's life moves state between, for one event.
    fn step(&mut self) -> Step<'_> {
        step!(self)
    }

    /// What the hooks see of the core.
    fn view(&self) -> View<'_> {
        View {
            window: self.cfg.window,
            tasks: &self.tasks,
            jobs: &self.jobs,
            dataflow: &self.dataflow,
            queued: &self.queued,
            copies: &self.copies,
            hints: &self.hints,
            policies: &self.policies,
            nodes: &self.nodes,
        }
    }

    // ----- inputs: copies -----

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
        let mut step = self.step();
        step.notify(None, |h, v, fx| h.object_cached(v, node, object, fx));
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
        self.step().copy_gone(node, object, Gone::Reported, None);
        Ok(())
    }

    /// The source of `object` changed: no node's copy may be used again. Returns the nodes that
    /// held it (the driver tells them to drop it).
    pub fn handle_object_invalidated(&mut self, object: ObjectId, _now: Time) -> Vec<NodeId> {
        let holders = self.copies.index().holders(object).to_vec();
        let mut step = self.step();
        for n in &holders {
            step.copies.forget(*n, object);
            step.notify(None, |h, _, _| {
                h.copy_gone(*n, object, Gone::Invalidated, true)
            });
        }
        step.notify(None, |h, _, _| h.object_invalidated(object, &holders));
        if !holders.is_empty() {
            // A task held back for a holder (MCH) may now run anywhere.
            self.dirty = true;
        }
        holders
    }

    /// What 2Mark did so far (None: 2Mark is off).
    pub fn two_mark_stats(&self) -> Option<crate::hooks::two_mark::marks::TwoMarkStats> {
        self.hooks.report().two_mark
    }

    /// `object` is `size` bytes: for a driver that knows the size of a copy the core has not
    /// seen a task read (objects placed on nodes before any task). Tasks' inputs and
    /// intermediate objects need no call.
    pub fn handle_object_size(&mut self, object: ObjectId, size: u64) {
        self.step()
            .notify(None, |h, _, _| h.object_size(object, size));
    }

    /// What the transfer scheduler did so far.
    pub fn prefetch_stats(&self) -> crate::hooks::prefetch::config::PrefetchStats {
        self.hooks.report().prefetch.unwrap_or_default()
    }

    /// Reads from persistent storage under way to each node (prefetches and tasks' own), for
    /// a driver that divides the storage cap among its nodes by demand.
    pub fn storage_reads(&self) -> FxHashMap<NodeId, u32> {
        self.hooks.report().storage_reads
    }

    /// The budgeted rate of the storage reads under way, bytes/s.
    pub fn storage_budget_used(&self) -> u64 {
        self.hooks.report().storage_budget_used
    }

    /// The prefetch of `object` to `node` failed (or was not carried out): it is no longer on
    /// its way there. Anything else about the object is unchanged; a task already sent to that
    /// node to read it reads it from storage.
    pub fn handle_prefetch_failed(&mut self, node: NodeId, object: ObjectId, _now: Time) {
        self.step()
            .notify(None, |h, _, fx| h.transfer_failed(node, object, fx));
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
            self.last_pass = Some(now);
            pass::run(&mut step!(self), &self.sources, &self.racks, now);
            self.step().notify(None, |h, v, fx| h.poll(v, fx));
        }
        self.actions.pop_front()
    }

    /// Queued tasks whose request no node of the pool could ever hold (no node has that much of
    /// a resource; for a task with a hard hint, no node of that name), in queue order. Empty
    /// while no node has joined; a hard hint at a name no node has now is waited for, not
    /// reported.
    pub fn unschedulable(&self) -> Vec<TaskId> {
        if self.nodes.count() == 0 {
            return Vec::new();
        }
        self.queued
            .demanding()
            .iter()
            .copied()
            .filter(|t| {
                let e = &self.tasks[t];
                self.nodes.never_holds(e.resources, e.hint())
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
}
