//! The pool changing: nodes joining, leaving or lost (their running tasks queued again or
//! ended, their copies forgotten), and provisioning's round (nodes asked for, idle ones
//! released after what they hand off). Functions over a [`Step`] and the owners only these
//! events touch (the racks, the provisioner). The node records are [`super::nodes::Nodes`]'s,
//! the provisioning decisions [`Provisioner`]'s; `Core`'s `handle_node_*` and `handle_timeout`
//! call these.

use super::config::{CoreError, LostTasks};
use super::lifecycle::Step;
use super::placement;
use super::provisioner::Provisioner;
use super::state::Phase;
use crate::action::Action;
use crate::hooks::handoff::planner::Handoff;
use crate::ids::{NodeId, ObjectId, TaskId};
use crate::provision::Demand;
use crate::racks::Racks;
use crate::resources::Resources;
use crate::time::Time;
use std::collections::BTreeSet;

/// Provisioning's round, due at `now` (`prov`; `waiting`: tasks the driver holds back, counted
/// as queued): nodes asked for, idle nodes released, each after what it hands off.
pub(super) fn round(
    s: &mut Step,
    racks: &mut Racks,
    prov: &mut Provisioner,
    waiting: u64,
    now: Time,
) {
    s.notify(None, |h, _, _| h.timeout(now));
    let demand = Demand {
        queued: s.counts.queued + waiting,
        free_slots: s.nodes.slots() - s.nodes.busy(),
        nodes: s.nodes.count(),
        pending: s.counts.pending_nodes,
    };
    let want = prov.acquire(demand);
    if want > 0 {
        s.counts.pending_nodes += want;
        s.actions.push_back(Action::Provision { nodes: want });
    }
    let kept = |n: NodeId| s.holds_needed_intermediate(n) || s.hooks.keeps_node(n);
    let idle = prov.idle_to_release(s.nodes, now, &kept);
    let releasing: BTreeSet<NodeId> = idle.iter().copied().collect();
    for node in idle {
        let handoff = plan_handoff(s, node, &releasing, now);
        let held = forget_node(s, racks, node);
        s.actions.push_back(Action::Release { node, handoff });
        s.copies_lost(&held);
    }
}

/// `node` joined with `capacity`, idle since `now`: the hooks hear of it, and it was one of the
/// nodes asked for, if any were.
pub(super) fn joined(
    s: &mut Step,
    node: NodeId,
    capacity: Resources,
    now: Time,
) -> Result<(), CoreError> {
    s.nodes.join(node, capacity, now)?;
    s.notify(None, |h, _, _| h.node_joined(node));
    s.counts.pending_nodes = s.counts.pending_nodes.saturating_sub(1);
    *s.dirty = true;
    Ok(())
}

/// A node is gone (`crashed`: not stopped cleanly, so its running tasks count it toward the
/// crash limit): its running tasks are queued again or ended, its copies forgotten. Tasks it
/// held ready ([`crate::CoreConfig::ready_tasks`]) and had not said it started: the crash is
/// not theirs, and is not counted against them.
pub(super) fn remove_node(
    s: &mut Step,
    racks: &mut Racks,
    node: NodeId,
    crashed: bool,
) -> Result<LostTasks, CoreError> {
    let entry = s.nodes.get(node).ok_or(CoreError::UnknownNode(node))?;
    let running = entry.running.clone();
    let mut failed = Vec::new();
    let mut cancelled = Vec::new();
    let mut again = Vec::new();
    for task in running {
        s.release_slot(task, node);
        let t = s.tasks.get_mut(&task).expect("running task exists");
        let was_cancelled = matches!(&t.phase, Phase::Running(r) if r.cancelled);
        // A task held ready that the node had not said it started: the crash is not its own.
        let held = matches!(&t.phase, Phase::Running(r) if r.held);
        if crashed && !held {
            t.rare_mut().crashes += 1;
        }
        s.counts.running -= 1;
        t.phase = Phase::Blocked;
        s.counts.blocked += 1;
        if was_cancelled {
            if !s.task_ended_unsuccessfully(task) {
                s.counts.cancelled += 1;
                cancelled.push(task);
            }
        } else if t.rare().crashes >= s.cfg.crash_limit {
            if !s.task_ended_unsuccessfully(task) {
                s.counts.failed += 1;
                failed.push(task);
            }
        } else {
            again.push(task);
        }
    }
    let held = forget_node(s, racks, node);
    // Queue them once the node's copies are forgotten: an intermediate input it held is
    // waited for (and remade) instead.
    for task in again {
        s.counts.blocked -= 1;
        s.requeue(task);
    }
    s.copies_lost(&held);
    Ok(LostTasks { failed, cancelled })
}

/// Forget a node and its copies; returns the objects it held.
pub(super) fn forget_node(s: &mut Step, racks: &mut Racks, node: NodeId) -> Vec<ObjectId> {
    // Running tasks told to read from this node must not later decrement the count of a
    // node that joins under the same id.
    let running: Vec<TaskId> = s
        .nodes
        .iter()
        .flat_map(|(_, n)| n.running.iter().copied())
        .collect();
    for t in running {
        if let Some(Phase::Running(r)) = s.tasks.get_mut(&t).map(|e| &mut e.phase) {
            r.peers.retain(|p| *p != node);
        }
    }
    let entry = s.nodes.remove(node).expect("node exists");
    let held = s.copies.remove_node(node);
    racks.remove(node);
    s.notify(None, |h, _, _| h.node_left(node));
    if let Some(name) = entry.name {
        placement::name_left(s, name);
    }
    *s.dirty = true;
    held
}

/// What `node` pushes before it goes (cache hand-off, [`crate::hooks::handoff`]); the
/// nodes in `releasing` go in the same round and receive nothing.
fn plan_handoff(
    s: &mut Step,
    node: NodeId,
    releasing: &BTreeSet<NodeId>,
    now: Time,
) -> Vec<Handoff> {
    let mut plan = Vec::new();
    s.notify(None, |h, v, _| {
        plan.extend(h.node_released(v, node, releasing, now))
    });
    plan
}
