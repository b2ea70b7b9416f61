//! The workload's tasks as the simulator holds them: arrivals not yet due, tasks queued or
//! running (with their arrival records), finished producers kept because the core may run them
//! again, abandoned tasks, and each running attempt's inputs and where they are read from.

use crate::flows::Route;
use crate::workload::Arrival;
use diffuse_core::{
    Dispatch, Input, JobId, NodeId, ObjectId, Resources, Source, TaskId, TaskSpec, Time,
};
use rustc_hash::{FxHashMap, FxHashSet};
use std::iter::Peekable;

/// Source actually used for an access (the planned one may have vanished in between).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Used {
    Local,
    Peer,
    Storage,
}

/// A task's attempt on its node.
pub(super) struct Running {
    pub(super) node: NodeId,
    pub(super) attempt: u32,
    /// Per input: object, size, source planned by the core.
    pub(super) inputs: Vec<(ObjectId, u64, Source)>,
    /// Per input: resources and source used, decided at delivery.
    pub(super) plan: Vec<(Route, Used)>,
    /// Per input: when its read was requested (latency included in the access time).
    pub(super) requested: Vec<f64>,
    /// Inputs not yet read.
    pub(super) pending: u32,
    /// When its dispatch reached the node.
    pub(super) delivered: f64,
    /// When its last input was in (its program starts).
    pub(super) staged: f64,
    /// Its program's run time, seconds (from its arrival record).
    pub(super) compute_s: f64,
    /// Whether it writes objects (its arrival record lists some).
    pub(super) produces: bool,
    /// Whether its policy reads through caches (asked of the core at delivery).
    pub(super) caching: bool,
}

impl Running {
    /// How many of its inputs were read from `used`.
    pub(super) fn count(&self, used: Used) -> u32 {
        self.plan.iter().filter(|p| p.1 == used).count() as u32
    }
}

/// The workload's tasks, from arrival to completion.
pub(super) struct Tasks {
    arrivals: Peekable<Box<dyn Iterator<Item = Arrival> + Send>>,
    next_id: u64,
    /// Queued and running tasks: arrival record.
    waiting: FxHashMap<TaskId, Arrival>,
    /// Finished tasks that wrote intermediate objects: kept, the core may run them again.
    kept: FxHashMap<TaskId, Arrival>,
    /// Tasks the core abandoned (a dependency failed or an input was lost for good).
    abandoned: FxHashSet<TaskId>,
    running: FxHashMap<TaskId, Running>,
}

impl Tasks {
    /// Tasks arriving as `arrivals` says, in its order.
    pub(super) fn new(arrivals: Box<dyn Iterator<Item = Arrival> + Send>) -> Tasks {
        Tasks {
            arrivals: arrivals.peekable(),
            next_id: 0,
            waiting: FxHashMap::default(),
            kept: FxHashMap::default(),
            abandoned: FxHashSet::default(),
            running: FxHashMap::default(),
        }
    }

    /// When the next arrival is due, if any is left.
    pub(super) fn next_arrival(&mut self) -> Option<Time> {
        self.arrivals.peek().map(|a| Time::from_secs_f64(a.time))
    }

    /// Whether every arrival has come.
    pub(super) fn all_arrived(&mut self) -> bool {
        self.arrivals.peek().is_none()
    }

    /// The next arrival due by `now`, with the id it gets.
    pub(super) fn take_due(&mut self, now: Time) -> Option<(TaskId, Arrival)> {
        if self.next_arrival().is_none_or(|t| t > now) {
            return None;
        }
        let a = self.arrivals.next().expect("peeked");
        let id = TaskId(self.next_id);
        self.next_id += 1;
        Some((id, a))
    }

    /// What the core is told of arrival `a` as task `id`: None, and `id` abandoned, when a task
    /// it comes after was abandoned. An earlier task that is neither waiting nor kept has ended:
    /// it succeeded, unless the core abandoned it, which abandons this one too.
    pub(super) fn spec(&mut self, id: TaskId, a: &Arrival) -> Option<TaskSpec> {
        if a.after.iter().any(|x| self.abandoned.contains(&TaskId(*x))) {
            self.abandoned.insert(id);
            return None;
        }
        let inputs = a
            .inputs
            .iter()
            .map(|(o, s)| Input {
                object: *o,
                size: *s,
            })
            .collect();
        let after = a
            .after
            .iter()
            .map(|x| TaskId(*x))
            .filter(|x| self.waiting.contains_key(x) || self.kept.contains_key(x))
            .collect();
        Some(
            TaskSpec::new(id, inputs)
                .with_job(JobId(a.job))
                .with_priority(a.priority)
                .with_resources(Resources {
                    cores: a.cores,
                    ..Resources::ONE_CORE
                })
                .with_after(after)
                .with_produces(a.produces.iter().map(|(o, _)| *o).collect()),
        )
    }

    /// Task `id` is submitted: it waits.
    pub(super) fn submitted(&mut self, id: TaskId, a: Arrival) {
        self.waiting.insert(id, a);
    }

    /// The arrival record of a queued, running or kept task.
    pub(super) fn arrival(&self, task: TaskId) -> &Arrival {
        self.waiting
            .get(&task)
            .or_else(|| self.kept.get(&task))
            .expect("arrival record")
    }

    /// The core dispatched `d`: its attempt runs, each input with its size and planned source.
    pub(super) fn dispatched(&mut self, d: &Dispatch) {
        let a = self.arrival(d.task);
        let inputs = d
            .inputs
            .iter()
            .map(|(o, src)| {
                let size = a.inputs.iter().find(|(x, _)| x == o).map_or(0, |(_, s)| *s);
                (*o, size, *src)
            })
            .collect();
        self.running.insert(
            d.task,
            Running {
                node: d.node,
                attempt: d.attempt,
                inputs,
                plan: Vec::new(),
                requested: Vec::new(),
                pending: 0,
                delivered: 0.0,
                staged: 0.0,
                compute_s: a.compute_s,
                produces: !a.produces.is_empty(),
                caching: false,
            },
        );
    }

    /// A running attempt.
    pub(super) fn running(&self, task: TaskId) -> &Running {
        &self.running[&task]
    }

    /// A running attempt, to change.
    pub(super) fn running_mut(&mut self, task: TaskId) -> &mut Running {
        self.running.get_mut(&task).expect("running task")
    }

    /// A running attempt taken out (put it back with [`Tasks::resume`]), or ended.
    pub(super) fn take_running(&mut self, task: TaskId) -> Running {
        self.running.remove(&task).expect("running task")
    }

    /// An attempt taken out with [`Tasks::take_running`] runs on.
    pub(super) fn resume(&mut self, task: TaskId, r: Running) {
        self.running.insert(task, r);
    }

    /// `task` succeeded: its arrival record, None if it was a kept producer run again to remake
    /// what it wrote (not a new completion). A producer is kept: the core may run it again.
    pub(super) fn succeeded(&mut self, task: TaskId) -> Option<Arrival> {
        let a = self.waiting.remove(&task)?;
        if !a.produces.is_empty() {
            self.kept.insert(task, a.clone());
        }
        Some(a)
    }

    /// The core abandoned `task`.
    pub(super) fn abandon(&mut self, task: TaskId) {
        self.waiting.remove(&task);
        self.abandoned.insert(task);
    }
}
