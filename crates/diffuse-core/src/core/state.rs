//! What the core keeps of each task and node ([`TaskEntry`], [`Phase`], [`NodeEntry`]): plain
//! records, read and changed by the core's own modules.

use crate::ids::{JobId, NodeId, NodeName, ObjectId, TaskId};
use crate::resources::Resources;
use crate::task::{Input, Placement, TaskSpec};
use crate::time::Time;
use std::time::Duration;

/// Where a task the core keeps is in its life.
#[derive(Clone, Debug)]
pub(super) enum Phase {
    /// Waiting for dependencies, its inputs' sizes, or a copy of an intermediate input.
    Blocked,
    /// Succeeded, and kept as the producer of intermediate objects that may be needed again.
    Done,
    /// In the wait queue, at order number `seq`.
    Queued { seq: u64 },
    /// Dispatched (boxed: only running tasks pay for it, and a queued task's entry stays small).
    Running(Box<Running>),
}

/// A running task's attempt: where and since when it runs, and what it reads from where.
#[derive(Clone, Debug)]
pub(super) struct Running {
    pub(super) node: NodeId,
    pub(super) since: Time,
    /// Peers it reads from.
    pub(super) peers: Vec<NodeId>,
    /// Inputs this attempt fetches to its node (counted in transfer by [`super::copies::Copies`]).
    pub(super) fetching: Vec<ObjectId>,
    pub(super) cancelled: bool,
    /// Asked back from its node ([`crate::Action::Withdraw`]), once.
    pub(super) withdrawing: bool,
    /// Held ready on its node, not started there yet (as far as the node has said).
    pub(super) held: bool,
}

/// The tasks the core keeps, by id. Each entry is boxed: a map's buckets hold a whole value
/// each, and with room to grow a map has up to twice as many buckets as entries, so unboxed
/// entries of ~300 bytes cost ~700 bytes a queued task (bench/queued_rss.sh).
pub(super) type TaskTable = rustc_hash::FxHashMap<TaskId, Box<TaskEntry>>;

/// A task the core keeps (blocked, queued, running, or kept as a producer). It holds what every
/// task uses; what few tasks use is in [`TaskRare`], boxed and absent for most: a dispatcher
/// keeps millions of queued tasks, and this entry is most of what the core keeps of each (its
/// size is pinned by a test below).
#[derive(Clone, Debug)]
pub(super) struct TaskEntry {
    /// Distinct inputs, in the order submitted.
    pub(super) inputs: Box<[Input]>,
    pub(super) phase: Phase,
    /// What it holds of a node while it runs.
    pub(super) resources: Resources,
    /// Attempts dispatched so far; the current attempt when running.
    pub(super) attempt: u32,
    /// Retryable failures it may still have.
    pub(super) retries_left: u32,
    pub(super) job: JobId,
    pub(super) priority: i16,
    /// Its inputs' sizes are not known yet.
    pub(super) held: bool,
    /// It is running again (queued, blocked or running) to remake its objects.
    pub(super) remaking: bool,
    /// Its hint binds it now (queued, and hard or within a soft hint's wait).
    pub(super) hint_live: bool,
    /// The rest, `None` while all of it has its default.
    rare: Option<Box<TaskRare>>,
}

/// What few tasks have: a hint, a walltime, its own DAD beta, dependencies, intermediate
/// outputs, or a history of lost nodes and remakes.
#[derive(Clone, Debug, Default)]
pub(super) struct TaskRare {
    /// Times its node was lost under it.
    pub(super) crashes: u32,
    /// Times it was run again to remake its objects.
    pub(super) remakes: u32,
    /// The node of its last failed attempt: another node is preferred for the next one.
    pub(super) avoid: Option<NodeId>,
    /// That node failed it for a fault of the node's own ([`crate::Outcome::NodeFault`]): the
    /// task waits for another node rather than go back there, unless that node is alone.
    pub(super) avoid_always: bool,
    /// The most time it runs, as stated: it goes only to a node that stays that long.
    pub(super) walltime: Option<Duration>,
    /// Dependencies it is waiting for (it is in each one's `dependents` list).
    pub(super) waiting_on: Vec<TaskId>,
    /// Intermediate objects it writes.
    pub(super) produces: Vec<ObjectId>,
    /// Where it asks to run.
    pub(super) hint: Option<Placement>,
    /// When its soft hint lapses (set at the first dispatch pass after it is queued).
    pub(super) hint_until: Option<Time>,
    /// Its own DAD beta.
    pub(super) dad_beta: Option<f64>,
}

/// What a task without a [`TaskRare`] reads.
static NO_RARE: TaskRare = TaskRare {
    crashes: 0,
    remakes: 0,
    avoid: None,
    avoid_always: false,
    walltime: None,
    waiting_on: Vec::new(),
    produces: Vec::new(),
    hint: None,
    hint_until: None,
    dad_beta: None,
};

impl TaskEntry {
    /// A task as the core first keeps it: blocked (or `Done` for a producer restored after a
    /// restart), `attempts` dispatched before, its distinct inputs in order.
    pub(super) fn new(
        spec: &TaskSpec,
        inputs: Vec<Input>,
        phase: Phase,
        attempts: u32,
    ) -> TaskEntry {
        let rare = TaskRare {
            walltime: spec.walltime,
            produces: spec.produces.clone(),
            hint: spec.hint,
            dad_beta: spec.dad_beta,
            ..TaskRare::default()
        };
        TaskEntry {
            inputs: inputs.into_boxed_slice(),
            phase,
            resources: spec.resources,
            attempt: attempts,
            retries_left: spec.retries,
            job: spec.job,
            priority: spec.priority,
            held: spec.held,
            remaking: false,
            hint_live: false,
            rare: (!rare.is_default()).then(|| Box::new(rare)),
        }
    }

    /// Its rare fields (their defaults when it has none).
    pub(super) fn rare(&self) -> &TaskRare {
        self.rare.as_deref().unwrap_or(&NO_RARE)
    }

    /// Its rare fields, to change (made when it has none).
    pub(super) fn rare_mut(&mut self) -> &mut TaskRare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Its rare fields, to change, if it has them (to clear one without making them).
    pub(super) fn rare_if_any(&mut self) -> Option<&mut TaskRare> {
        self.rare.as_deref_mut()
    }

    /// Dependencies it is waiting for.
    pub(super) fn waiting_on(&self) -> &[TaskId] {
        &self.rare().waiting_on
    }

    /// Intermediate objects it writes.
    pub(super) fn produces(&self) -> &[ObjectId] {
        &self.rare().produces
    }

    /// Where it asks to run.
    pub(super) fn hint(&self) -> Option<Placement> {
        self.rare().hint
    }
}

impl TaskRare {
    fn is_default(&self) -> bool {
        self.crashes == 0
            && self.remakes == 0
            && self.avoid.is_none()
            && !self.avoid_always
            && self.walltime.is_none()
            && self.waiting_on.is_empty()
            && self.produces.is_empty()
            && self.hint.is_none()
            && self.hint_until.is_none()
            && self.dad_beta.is_none()
    }
}

/// A node in the pool.
#[derive(Clone, Debug)]
pub(super) struct NodeEntry {
    /// What it has.
    pub(super) capacity: Resources,
    /// What its running tasks hold.
    pub(super) used: Resources,
    pub(super) running: Vec<TaskId>,
    /// Peer reads from this node that running tasks were told to make.
    pub(super) serving: u32,
    pub(super) idle_since: Option<Time>,
    /// When it will leave (a batch job's time limit), if it knows.
    pub(super) ends_at: Option<Time>,
    /// The driver's name for it ([`Core::handle_node_named`](crate::Core::handle_node_named)), which hints name.
    pub(super) name: Option<NodeName>,
    /// Its load as the driver last measured it ([`Core::handle_node_load`](crate::Core::handle_node_load)), in [0, 1].
    pub(super) reported_load: Option<f64>,
}

/// Tasks of one job not yet ended, and the intermediate objects its tasks write.
#[derive(Clone, Debug, Default)]
pub(super) struct JobEntry {
    pub(super) unfinished: u64,
    /// Cores its running tasks hold (what Fair sharing evens out).
    pub(super) running_cores: u64,
    pub(super) objects: Vec<ObjectId>,
    /// Seconds its attempts held a node, dispatch to end, as a moving average (weight 1/8 to
    /// the newest); None until one has ended. What decides whether a node running one of its
    /// tasks may hold another ready ([`crate::CoreConfig::ready_below_s`]).
    pub(super) run_s: Option<f64>,
}

impl JobEntry {
    /// One of its attempts held a node for `secs`.
    pub(super) fn ran(&mut self, secs: f64) {
        self.run_s = Some(match self.run_s {
            Some(mean) => mean + (secs - mean) / 8.0,
            None => secs,
        });
    }

    /// Whether its attempts end within `bound` seconds, as far as seen (an infinite bound: any
    /// job, seen or not).
    pub(super) fn short(&self, bound: f64) -> bool {
        bound == f64::INFINITY || self.run_s.is_some_and(|s| s < bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guard on what a queued task costs (docs/scale.md, "What one task costs"): the entry is
    /// boxed, so with the allocator's 8-byte header it takes a 96-byte chunk. A field added here
    /// that every task needs grows every queued task; one that few tasks need goes in
    /// [`TaskRare`].
    #[test]
    fn a_task_entry_stays_small() {
        assert_eq!(std::mem::size_of::<Phase>(), 16);
        assert_eq!(std::mem::size_of::<TaskEntry>(), 88);
    }
}
