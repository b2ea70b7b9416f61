//! A small test environment around [`Core`], in the style of HyperQueue's `TestEnv`: builder
//! helpers for nodes, tasks and cached objects, a clock, and draining of `poll_action`. Every step
//! checks the core's invariants.

#![allow(dead_code)]

use diffuse_core::{
    Action, Core, CoreConfig, CoreError, Counts, Dispatch, DynamicConfig, Input, NodeId, ObjectId,
    Outcome, PolicyKind, Provisioning, Resources, Source, StepPolicy, TaskId, TaskSpec, TaskState,
    Time,
};
use std::time::Duration;

/// Task id shorthand.
pub fn t(id: u64) -> TaskId {
    TaskId(id)
}

/// Node id shorthand.
pub fn n(id: u32) -> NodeId {
    NodeId(id)
}

/// Object id shorthand.
pub fn o(id: u64) -> ObjectId {
    ObjectId(id)
}

/// A task spec from `(object, size)` pairs.
pub fn spec(id: u64, inputs: &[(u64, u64)]) -> TaskSpec {
    TaskSpec::new(
        TaskId(id),
        inputs
            .iter()
            .map(|&(object, size)| Input {
                object: ObjectId(object),
                size,
            })
            .collect(),
    )
}

/// A configuration with `policy` and otherwise the defaults (static provisioning).
pub fn config(policy: PolicyKind) -> CoreConfig {
    CoreConfig {
        policy,
        ..CoreConfig::default()
    }
}

/// Dynamic provisioning settings used by the tests.
pub fn dynamic(
    step: StepPolicy,
    min_nodes: u32,
    max_nodes: u32,
    slots_per_node: u32,
    idle_timeout_secs: u64,
) -> Provisioning {
    Provisioning::Dynamic(DynamicConfig {
        step,
        min_nodes,
        max_nodes,
        slots_per_node,
        idle_timeout: Duration::from_secs(idle_timeout_secs),
        check_interval: Duration::from_secs(1),
    })
}

/// The source named for `object` in `d`.
pub fn source(d: &Dispatch, object: u64) -> Source {
    d.inputs
        .iter()
        .find(|(obj, _)| *obj == ObjectId(object))
        .map(|(_, s)| *s)
        .unwrap_or_else(|| panic!("{d:?} has no input o{object}"))
}

/// A core, a clock and the non-dispatch actions set aside by [`TestEnv::take_dispatches`].
pub struct TestEnv {
    /// The core under test.
    pub core: Core,
    /// The current time, passed to every call.
    pub now: Time,
    stashed: Vec<Action>,
}

impl TestEnv {
    /// A core with `policy` and default settings.
    pub fn new(policy: PolicyKind) -> Self {
        Self::with_config(config(policy))
    }

    /// A core with `cfg`.
    pub fn with_config(cfg: CoreConfig) -> Self {
        let env = TestEnv {
            core: Core::new(cfg),
            now: Time::ZERO,
            stashed: Vec::new(),
        };
        env.check();
        env
    }

    /// Check the core's invariants; panics with the broken one.
    pub fn check(&self) {
        if let Err(e) = self.core.check_invariants() {
            panic!("invariant broken: {e}");
        }
    }

    /// Move the clock forward.
    pub fn advance(&mut self, secs: u64) -> &mut Self {
        self.now = self.now + Duration::from_secs(secs);
        self
    }

    /// Move the clock forward by `ms` milliseconds.
    pub fn advance_ms(&mut self, ms: u64) -> &mut Self {
        self.now = self.now + Duration::from_millis(ms);
        self
    }

    /// A node with `slots` slots joins.
    pub fn node(&mut self, id: u32, slots: u32) -> &mut Self {
        self.core
            .handle_node_joined(NodeId(id), slots, self.now)
            .unwrap();
        self.check();
        self
    }

    /// A node with `capacity` joins.
    pub fn node_with(&mut self, id: u32, capacity: Resources) -> &mut Self {
        self.core
            .handle_node_joined_with(NodeId(id), capacity, self.now)
            .unwrap();
        self.check();
        self
    }

    /// `spec` is submitted.
    pub fn submit(&mut self, spec: TaskSpec) -> &mut Self {
        self.core.handle_submit(spec, self.now).unwrap();
        self.check();
        self
    }

    /// A task reading `(object, size)` inputs is submitted.
    pub fn task(&mut self, id: u64, inputs: &[(u64, u64)]) -> &mut Self {
        self.core.handle_submit(spec(id, inputs), self.now).unwrap();
        self.check();
        self
    }

    /// `node` reports it holds `object`.
    pub fn cached(&mut self, node: u32, object: u64) -> &mut Self {
        self.core
            .handle_object_cached(NodeId(node), ObjectId(object), self.now)
            .unwrap();
        self.check();
        self
    }

    /// `node` reports it dropped `object`.
    pub fn evicted(&mut self, node: u32, object: u64) -> &mut Self {
        self.core
            .handle_object_evicted(NodeId(node), ObjectId(object), self.now)
            .unwrap();
        self.check();
        self
    }

    /// Drain `poll_action`; return the dispatches and set every other action aside for
    /// [`TestEnv::take_actions`].
    pub fn take_dispatches(&mut self) -> Vec<Dispatch> {
        let mut out = Vec::new();
        while let Some(a) = self.core.poll_action(self.now) {
            self.check();
            match a {
                Action::Dispatch(d) => out.push(d),
                other => self.stashed.push(other),
            }
        }
        self.check();
        out
    }

    /// The single dispatch the core makes now; panics if there is not exactly one.
    pub fn take_one(&mut self) -> Dispatch {
        let mut d = self.take_dispatches();
        assert_eq!(d.len(), 1, "expected exactly one dispatch, got {d:?}");
        d.pop().unwrap()
    }

    /// Drain `poll_action` and return every action, including those set aside earlier.
    pub fn take_actions(&mut self) -> Vec<Action> {
        let mut out = std::mem::take(&mut self.stashed);
        while let Some(a) = self.core.poll_action(self.now) {
            self.check();
            out.push(a);
        }
        self.check();
        out
    }

    /// Assert the core has nothing to do.
    pub fn assert_idle(&mut self) {
        let a = self.take_actions();
        assert!(a.is_empty(), "expected no action, got {a:?}");
    }

    /// The current attempt of a running task.
    pub fn attempt(&self, task: u64) -> u32 {
        match self.core.task_state(TaskId(task)) {
            Some(TaskState::Running { attempt, .. }) => attempt,
            other => panic!("t{task} is not running: {other:?}"),
        }
    }

    /// Report the current attempt of `task` succeeded; returns the task's final state.
    pub fn finish(&mut self, task: u64) -> TaskState {
        self.finish_with(task, Outcome::Succeeded)
    }

    /// Report the current attempt of `task` ended with `outcome`.
    pub fn finish_with(&mut self, task: u64, outcome: Outcome) -> TaskState {
        let attempt = self.attempt(task);
        let s = self
            .core
            .handle_task_finished(TaskId(task), attempt, outcome, self.now)
            .unwrap();
        self.check();
        s
    }

    /// Report attempt `attempt` of `task` ended with success, returning the core's answer as is.
    pub fn report(&mut self, task: u64, attempt: u32) -> Result<TaskState, CoreError> {
        let r = self
            .core
            .handle_task_finished(TaskId(task), attempt, Outcome::Succeeded, self.now);
        self.check();
        r
    }

    /// Cancel `task`.
    pub fn cancel(&mut self, task: u64) -> Option<TaskState> {
        let r = self.core.handle_cancel(TaskId(task), self.now).unwrap();
        self.check();
        r
    }

    /// `node` is lost; returns the tasks that failed because of it.
    pub fn lose(&mut self, node: u32) -> Vec<TaskId> {
        let r = self
            .core
            .handle_node_lost(NodeId(node), self.now)
            .unwrap()
            .failed;
        self.check();
        r
    }

    /// Run provisioning at the current time.
    pub fn timeout(&mut self) -> &mut Self {
        self.core.handle_timeout(self.now);
        self.check();
        self
    }

    /// The core's state of `task`.
    pub fn state(&self, task: u64) -> Option<TaskState> {
        self.core.task_state(TaskId(task))
    }

    /// The core's counters.
    pub fn counts(&self) -> Counts {
        self.core.counts()
    }
}
