//! Placement hints (Hercules' hard and soft hints, [`Placement`]): a node's name arriving, a
//! task's hint set before it runs, and what becomes of the hard-hinted tasks whose node left.
//!
//! A queued task's hint *binds* while it is hard, or soft and within its wait. A bound task is
//! listed under the name it asks for (in queue order, by [`super::hints::Hints`], which owns
//! the state); a free node of that name takes the first one that fits before its policy's
//! choice (`core/pass.rs`), and no other node takes it. A soft hint's wait starts at the first
//! dispatch pass after the task is queued (a pass runs at the driver's next `poll_action`, with
//! its `now`), and starts again if the task is queued again (a retry, a lost node).
//!
//! Functions over a [`Step`]; `Core`'s `handle_node_named` and `handle_hint` call them.

use super::config::CoreError;
use super::lifecycle::Step;
use super::state::Phase;
use crate::action::Abandoned;
use crate::ids::{NodeId, NodeName, TaskId};
use crate::task::Placement;

/// `node` carries `name`, the driver's name for it, which hints name (a later call renames it).
pub(super) fn named(s: &mut Step, node: NodeId, name: NodeName) -> Result<(), CoreError> {
    let old = s.nodes.name(node, name)?;
    s.hints.arrived(name);
    if let Some(old) = old.filter(|o| *o != name) {
        // Renamed: its old name may now have no node.
        name_left(s, old);
    }
    *s.dirty = true;
    Ok(())
}

/// Set `task`'s hint before it runs. Returns false, changing nothing, if it is running or done.
pub(super) fn hint(s: &mut Step, task: TaskId, hint: Placement) -> Result<bool, CoreError> {
    let t = s.tasks.get_mut(&task).ok_or(CoreError::UnknownTask(task))?;
    match t.phase {
        Phase::Blocked => {}
        Phase::Queued { seq } => s.hints.unbind(task, t, seq),
        Phase::Running(_) | Phase::Done => return Ok(false),
    }
    t.rare_mut().hint = Some(hint);
    if let Phase::Queued { seq } = t.phase {
        if hint.strict && s.hints.is_departed(hint.node) {
            // Its only place has left the pool: it can never run.
            s.abandon(task, Abandoned::HintedNodeLeft { node: hint.node });
            return Ok(true);
        }
        s.hints.bind(task, t, seq);
        *s.dirty = true;
    }
    Ok(true)
}

/// `name`'s node left: if it was the last of that name, the queued tasks hard-hinted at it are
/// abandoned (as are those queued later: see `Step::try_ready`).
pub(super) fn name_left(s: &mut Step, name: NodeName) {
    if s.nodes.has_name(name) {
        return;
    }
    s.hints.departed(name);
    for task in s.hints.bound_to(name) {
        if s.tasks
            .get(&task)
            .and_then(|t| t.hint())
            .is_some_and(|h| h.strict)
        {
            s.abandon(task, Abandoned::HintedNodeLeft { node: name });
        }
    }
}
