//! The [`Hook`] trait: the events an after-dispatch policy hears, what it sees of the core
//! ([`CoreView`]) and what it asks the core to do ([`Effects`]).

use crate::action::{Action, Source};
use crate::cache::EvictionPolicy;
use crate::hooks::handoff::planner::Handoff;
use crate::ids::{JobId, NodeId, ObjectId, TaskId};
use crate::index::LocationIndex;
use crate::locality::Locality;
use crate::sharing::share::JobSharing;
use crate::task::Input;
use crate::time::Time;
use std::any::Any;
use std::collections::BTreeSet;

/// Why the core no longer counts a node's copy of an object ([`Hook::copy_gone`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gone {
    /// The node reported it evicted (`held`: the index had it).
    Reported,
    /// A hook asked for its deletion or its move away ([`Effects::forget`]).
    Forgotten,
    /// An intermediate object released, or remade, by the dataflow: the core asked its nodes
    /// to drop it.
    Released,
    /// Its source changed: no copy may be used again ([`Hook::object_invalidated`] follows).
    Invalidated,
    /// A fetch to the node for a task ended without the copy landing.
    NeverLanded,
}

/// What the core shows a hook: its state, read-only.
pub(crate) trait CoreView {
    /// What nodes reported they hold (the only valid peer sources).
    fn index(&self) -> &LocationIndex;
    /// `index` plus the objects in transfer to a node: what scoring sees.
    fn effective(&self) -> &LocationIndex;
    /// Whether `object` is on its way to `node` (a task's fetch or a prefetch).
    fn in_transfer(&self, node: NodeId, object: ObjectId) -> bool;
    /// Whether `object` is an intermediate object (written by a task, not on storage).
    fn is_intermediate(&self, object: ObjectId) -> bool;
    /// Whether `node` is in the pool.
    fn has_node(&self, node: NodeId) -> bool;
    /// Every node, in id order, and whether it is busy (running a task or serving a peer read).
    fn nodes_busy(&self) -> Vec<(NodeId, bool)>;
    /// A task's distinct inputs (empty for a task the core does not know).
    fn task_inputs(&self, task: TaskId) -> &[Input];
    /// A task's job (None for a task the core does not know).
    fn task_job(&self, task: TaskId) -> Option<JobId>;
    /// Whether a task is running.
    fn is_running(&self, task: TaskId) -> bool;
    /// Whether `task`'s policy reads through caches.
    fn caches_for(&self, task: TaskId) -> bool;
    /// Whether some policy in use reads through caches (queued tasks are in the candidate sets).
    fn caching_enabled(&self) -> bool;
    /// The per-node candidate sets of the queued tasks.
    fn locality(&self) -> &Locality;
    /// The scheduling window's bound (order numbers below it are in the window).
    fn window_bound(&self) -> u64;
    /// Cores the running tasks of `job` hold.
    fn job_cores(&self, job: JobId) -> u64;
    /// Slots on allocated nodes.
    fn slots(&self) -> u64;
    /// How jobs share the slots: the order the transfer scheduler ranks jobs in.
    fn job_order(&self) -> &dyn JobSharing;
}

/// One thing a hook asks the core to do.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Effect {
    /// Hand an action to the driver.
    Act(Action),
    /// Forget `node`'s copy of `object` (the hook asked for its deletion or its move): out of
    /// the index, and the other hooks hear [`Gone::Forgotten`].
    Forget {
        /// The node.
        node: NodeId,
        /// The object.
        object: ObjectId,
    },
    /// `object` is now on its way to `node` (MixApart's in-transfer tier): scoring sees it there.
    InTransfer {
        /// The node.
        node: NodeId,
        /// The object.
        object: ObjectId,
    },
    /// A transfer the hook started ended (landed or failed): out of the in-transfer tier.
    TransferEnded {
        /// The node.
        node: NodeId,
        /// The object.
        object: ObjectId,
    },
    /// Something changed that may allow a dispatch: run a dispatch pass at the next poll.
    Wake,
}

/// What a hook asks of the core in answer to one event, carried out in order.
#[derive(Debug, Default)]
pub(crate) struct Effects(pub Vec<Effect>);

impl Effects {
    /// Hand `action` to the driver.
    pub fn act(&mut self, action: Action) {
        self.0.push(Effect::Act(action));
    }

    /// Forget `node`'s copy of `object`.
    pub fn forget(&mut self, node: NodeId, object: ObjectId) {
        self.0.push(Effect::Forget { node, object });
    }

    /// `object` is now on its way to `node`.
    pub fn in_transfer(&mut self, node: NodeId, object: ObjectId) {
        self.0.push(Effect::InTransfer { node, object });
    }

    /// The transfer of `object` to `node` that this hook started ended.
    pub fn transfer_ended(&mut self, node: NodeId, object: ObjectId) {
        self.0.push(Effect::TransferEnded { node, object });
    }

    /// Ask for a dispatch pass.
    pub fn wake(&mut self) {
        self.0.push(Effect::Wake);
    }
}

/// A policy that acts after dispatch. Every event has a no-op default; the core calls them in
/// the order listed in its module documentation (`core.rs`), each with what it needs.
#[allow(unused_variables)]
pub(crate) trait Hook: Any + Send {
    /// A task was submitted with these inputs (before it is checked; duplicates included).
    fn task_submitted(&mut self, inputs: &[Input]) {}

    /// A task was accepted with these distinct inputs.
    fn task_admitted(&mut self, inputs: &[Input]) {}

    /// A task input's size became known: a held task's inputs were looked up, or an
    /// intermediate object's producer reported its size.
    fn input_size(&mut self, object: ObjectId, size: u64) {}

    /// The driver told the size of a copy no task may have read yet
    /// (`Core::handle_object_size`).
    fn object_size(&mut self, object: ObjectId, size: u64) {}

    /// A node joined, with an empty cache.
    fn node_joined(&mut self, node: NodeId) {}

    /// A node's cache holds at most `quota` bytes and evicts by `eviction`.
    fn node_cache(&mut self, node: NodeId, quota: u64, eviction: EvictionPolicy) {}

    /// A node left or was released, with everything it held (the core has forgotten its
    /// copies and its transfers).
    fn node_left(&mut self, node: NodeId) {}

    /// A node is released by provisioning; `releasing` go in the same round. Returns what it
    /// pushes to the survivors before it goes.
    fn node_released(
        &mut self,
        view: &dyn CoreView,
        node: NodeId,
        releasing: &BTreeSet<NodeId>,
        now: Time,
    ) -> Vec<Handoff> {
        Vec::new()
    }

    /// Whether an idle `node` must not be released yet.
    fn keeps_node(&self, node: NodeId) -> bool {
        false
    }

    /// `node` reports it holds `object` (the index has it now).
    fn object_cached(
        &mut self,
        view: &dyn CoreView,
        node: NodeId,
        object: ObjectId,
        fx: &mut Effects,
    ) {
    }

    /// The core no longer counts `node`'s copy of `object`, for reason `why`; `held`: the
    /// index had it until now.
    fn copy_gone(&mut self, node: NodeId, object: ObjectId, why: Gone, held: bool) {}

    /// `object` changed at its source; `holders` had copies (each already heard
    /// [`Gone::Invalidated`]).
    fn object_invalidated(&mut self, object: ObjectId, holders: &[NodeId]) {}

    /// `task` was dispatched to `node`, reading each input from its source; `caches`: its
    /// policy reads through caches.
    fn dispatched(
        &mut self,
        view: &dyn CoreView,
        task: TaskId,
        node: NodeId,
        inputs: &[(ObjectId, Source)],
        caches: bool,
        fx: &mut Effects,
    ) {
    }

    /// `task`, running since `since`, succeeded at `now` (before its slot is released).
    fn task_succeeded(&mut self, view: &dyn CoreView, task: TaskId, since: Time, now: Time) {}

    /// `task`'s attempt ended (finished, or its node left): its slot is being released.
    fn task_ended(&mut self, task: TaskId, fx: &mut Effects) {}

    /// A transfer of `object` to `node` this hook asked for failed (`Core::handle_prefetch_failed`).
    fn transfer_failed(&mut self, node: NodeId, object: ObjectId, fx: &mut Effects) {}

    /// A dispatch pass has just run (at `poll_action`).
    fn poll(&mut self, view: &dyn CoreView, fx: &mut Effects) {}

    /// Provisioning's round (`handle_timeout`) at `now`.
    fn timeout(&mut self, now: Time) {}

    /// The transfers this hook has under way (each counted in the in-transfer tier).
    fn in_transfer(&self) -> Vec<(NodeId, ObjectId)> {
        Vec::new()
    }

    /// Check the hook's state against the core's.
    fn check(&self, view: &dyn CoreView) -> Result<(), String> {
        Ok(())
    }

    /// Tell what this hook did so far: its part of `out` (the others' stay as they are).
    fn report(&self, out: &mut HookReport) {}
}

/// What the hooks in use tell of themselves ([`Hook::report`]): each fills its own part; a
/// part whose hook is not in use stays empty. The core's statistics accessors read it, so
/// nothing asks a hook its type.
#[derive(Clone, Debug, Default)]
pub struct HookReport {
    /// MixApart's transfer scheduler: what it prefetched (None: not in use).
    pub prefetch: Option<crate::hooks::prefetch::config::PrefetchStats>,
    /// The budgeted rate of the storage reads under way, bytes/s (the transfer scheduler's).
    pub storage_budget_used: u64,
    /// Reads from persistent storage under way to each node (the transfer scheduler's).
    pub storage_reads: rustc_hash::FxHashMap<NodeId, u32>,
    /// 2Mark: its evictions and moves (None: not in use).
    pub two_mark: Option<crate::hooks::two_mark::marks::TwoMarkStats>,
}
