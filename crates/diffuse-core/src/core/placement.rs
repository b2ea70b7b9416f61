//! Placement hints (Hercules' hard and soft hints, [`Placement`]): the tasks a node takes
//! before the policy chooses, the nodes a bound task may not go to, when a soft hint lapses,
//! and what becomes of a hard-hinted task whose node left.
//!
//! A queued task's hint *binds* while it is hard, or soft and within its wait. A bound task is
//! listed under the name it asks for (in queue order, by [`super::hints::Hints`], which owns
//! the state); a free node of that
//! name takes the first one that fits before its policy's choice, and no other node takes it.
//! A soft hint's wait starts at the first dispatch pass after the task is queued (a pass runs
//! at the driver's next `poll_action`, with its `now`), and starts again if the task is queued
//! again (a retry, a lost node).

use super::*;

impl Core {
    /// `node` carries `name`, the driver's name for it (a worker's name), which hints name. A
    /// name may be shared; a node's later call replaces its name.
    pub fn handle_node_named(&mut self, node: NodeId, name: NodeName) -> Result<(), CoreError> {
        let old = self.nodes.name(node, name)?;
        self.hints.arrived(name);
        if let Some(old) = old.filter(|o| *o != name) {
            // Renamed: its old name may now have no node.
            self.name_left(old);
        }
        self.dirty = true;
        Ok(())
    }

    /// Set `task`'s hint before it runs (Hercules' `set_rank`, as `diffuse place` uses it on
    /// the producer of an object). Returns false, changing nothing, if it is running or done.
    pub fn handle_hint(
        &mut self,
        task: TaskId,
        hint: Placement,
        _now: Time,
    ) -> Result<bool, CoreError> {
        let t = self.tasks.get(&task).ok_or(CoreError::UnknownTask(task))?;
        match t.phase {
            Phase::Blocked => {}
            Phase::Queued { seq } => self.unbind_hint(task, seq),
            Phase::Running { .. } | Phase::Done => return Ok(false),
        }
        self.tasks.get_mut(&task).expect("task exists").hint = Some(hint);
        if let Phase::Queued { seq } = self.tasks[&task].phase {
            if hint.strict && self.hints.is_departed(hint.node) {
                // Its only place has left the pool: it can never run.
                self.abandon(task, Abandoned::HintedNodeLeft { node: hint.node });
                return Ok(true);
            }
            self.bind_hint(task, seq);
            self.dirty = true;
        }
        Ok(true)
    }

    /// Whether a node named `name` is in the pool.
    pub fn has_node_named(&self, name: NodeName) -> bool {
        self.nodes.has_name(name)
    }

    /// Whether a hint bound `task`'s placement when it was dispatched: true if it ran (or runs)
    /// on a node of the name it asked for. None if it has no hint or is not running.
    pub fn hint_held(&self, task: TaskId, node: NodeId) -> Option<bool> {
        let h = self.tasks.get(&task)?.hint?;
        Some(self.nodes.get(node)?.name == Some(h.node))
    }

    /// A task just queued at order `seq`: its hint binds it.
    pub(super) fn bind_hint(&mut self, task: TaskId, seq: u64) {
        let t = self.tasks.get_mut(&task).expect("task exists");
        self.hints.bind(task, t, seq);
    }

    /// A task leaves the queue (dispatched, cancelled, abandoned): its hint no longer binds.
    pub(super) fn unbind_hint(&mut self, task: TaskId, seq: u64) {
        if let Some(t) = self.tasks.get_mut(&task) {
            self.hints.unbind(task, t, seq);
        }
    }

    /// The scheduling window's bound: W tasks deep, not counting the tasks a hint binds to a
    /// node (they are offered to that node only, so they must not crowd the others out).
    pub(super) fn window_bound(&self) -> u64 {
        self.queue
            .window_bound(self.cfg.window + self.hints.bound())
    }

    /// The first task bound to `node`'s name that fits what `node` has free now.
    pub(super) fn next_hinted(&self, node: NodeId, now: Time) -> Option<TaskId> {
        self.hints.next_for(self.nodes.get(node)?, &self.tasks, now)
    }

    /// The name a hard-hinted task asks for, if its last node has left.
    pub(super) fn hinted_at_departed(&self, task: TaskId) -> Option<NodeName> {
        let h = self.tasks.get(&task)?.hint?;
        (h.strict && self.hints.is_departed(h.node)).then_some(h.node)
    }

    /// `name`'s node left: if it was the last of that name, the queued tasks hard-hinted at
    /// it are abandoned (as are those queued later: see `try_ready`).
    pub(super) fn name_left(&mut self, name: NodeName) {
        if self.has_node_named(name) {
            return;
        }
        self.hints.departed(name);
        for task in self.hints.bound_to(name) {
            if self
                .tasks
                .get(&task)
                .and_then(|t| t.hint)
                .is_some_and(|h| h.strict)
            {
                self.abandon(task, Abandoned::HintedNodeLeft { node: name });
            }
        }
    }
}
