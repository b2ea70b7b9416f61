//! The placement hints that bind queued tasks now ([`Hints`]): which tasks each node name
//! takes first, when soft hints lapse, and which names have left the pool. The rules are in
//! `core/placement.rs`; this type owns their state, and is told of each change by the core's
//! step (`core/lifecycle.rs`: a task queued or leaving the queue).

use super::state::{NodeEntry, Phase, TaskEntry, TaskTable};
use crate::ids::{NodeName, TaskId};
use crate::time::Time;
use std::collections::{BTreeMap, BTreeSet};

/// The bound hints of the queued tasks, and the names that left.
#[derive(Clone, Debug, Default)]
pub(super) struct Hints {
    /// Queued tasks whose hint binds them now, by the name they ask for, in queue order.
    hinted: BTreeMap<NodeName, BTreeSet<(u64, TaskId)>>,
    /// How many tasks `hinted` lists.
    bound: usize,
    /// Queued tasks with a soft hint whose wait has not started (it starts at the next pass).
    soft_unstarted: Vec<TaskId>,
    /// When each bound soft hint lapses.
    soft_deadlines: BTreeSet<(Time, TaskId)>,
    /// Names whose last node left: a task hard-hinted at one can never run.
    departed: BTreeSet<NodeName>,
}

impl Hints {
    /// Whether some queued task is bound by its hint (decisions then check every task's fit).
    pub(super) fn any_bound(&self) -> bool {
        !self.hinted.is_empty()
    }

    /// How many queued tasks are bound by their hint.
    pub(super) fn bound(&self) -> usize {
        self.bound
    }

    /// When the next soft hint lapses.
    pub(super) fn next_lapse(&self) -> Option<Time> {
        self.soft_deadlines.first().map(|(t, _)| *t)
    }

    /// `task` (entry `t`) was just queued at order `seq`: its hint binds it.
    pub(super) fn bind(&mut self, task: TaskId, t: &mut TaskEntry, seq: u64) {
        let Some(h) = t.hint() else {
            return;
        };
        t.hint_live = true;
        t.rare_mut().hint_until = None;
        if self.hinted.entry(h.node).or_default().insert((seq, task)) {
            self.bound += 1;
        }
        if !h.strict {
            self.soft_unstarted.push(task);
        }
    }

    /// `task` (entry `t`, queued at `seq`) leaves the queue: its hint no longer binds.
    pub(super) fn unbind(&mut self, task: TaskId, t: &mut TaskEntry, seq: u64) {
        let (Some(h), true) = (t.hint(), t.hint_live) else {
            return;
        };
        t.hint_live = false;
        if let Some(until) = t.rare_mut().hint_until.take() {
            self.soft_deadlines.remove(&(until, task));
        }
        if let Some(set) = self.hinted.get_mut(&h.node) {
            if set.remove(&(seq, task)) {
                self.bound -= 1;
            }
            if set.is_empty() {
                self.hinted.remove(&h.node);
            }
        }
        // Rare (a soft-hinted task leaving within the pass that queued it): a linear scan.
        if !h.strict {
            self.soft_unstarted.retain(|t| *t != task);
        }
    }

    /// Start the waits of soft hints queued since the last pass; unbind those that lapsed.
    pub(super) fn time(&mut self, tasks: &mut TaskTable, now: Time) {
        for task in std::mem::take(&mut self.soft_unstarted) {
            let Some(t) = tasks.get_mut(&task) else {
                continue;
            };
            if let (Some(h), true) = (t.hint(), t.hint_live) {
                let until = now + h.wait;
                t.rare_mut().hint_until = Some(until);
                self.soft_deadlines.insert((until, task));
            }
        }
        while let Some(&(until, task)) = self.soft_deadlines.first() {
            if until > now {
                break;
            }
            let t = tasks.get_mut(&task).expect("a bound hint's task exists");
            let Phase::Queued { seq } = t.phase else {
                unreachable!("a bound hint belongs to a queued task");
            };
            self.unbind(task, t, seq);
        }
    }

    /// The first task bound to node `n`'s name that fits what it has free now (a hint
    /// outranks the avoidance of the node a task last failed on).
    pub(super) fn next_for(&self, n: &NodeEntry, tasks: &TaskTable, now: Time) -> Option<TaskId> {
        let set = self.hinted.get(&n.name?)?;
        let room = n.capacity.minus(&n.used);
        set.iter().map(|(_, t)| *t).find(|t| {
            let e = &tasks[t];
            e.resources.fits_in(&room)
                && e.rare()
                    .walltime
                    .is_none_or(|w| n.ends_at.is_none_or(|end| now + w <= end))
        })
    }

    /// The tasks bound to `name`, in queue order.
    pub(super) fn bound_to(&self, name: NodeName) -> Vec<TaskId> {
        self.hinted
            .get(&name)
            .map(|set| set.iter().map(|(_, t)| *t).collect())
            .unwrap_or_default()
    }

    /// Whether the last node of `name` left (and none has carried it since).
    pub(super) fn is_departed(&self, name: NodeName) -> bool {
        self.departed.contains(&name)
    }

    /// The name a hard-hinted task (entry `t`) asks for, if its last node has left.
    pub(super) fn departed_hint(&self, t: &TaskEntry) -> Option<NodeName> {
        let h = t.hint()?;
        (h.strict && self.is_departed(h.node)).then_some(h.node)
    }

    /// A node now carries `name`.
    pub(super) fn arrived(&mut self, name: NodeName) {
        self.departed.remove(&name);
    }

    /// The last node of `name` left.
    pub(super) fn departed(&mut self, name: NodeName) {
        self.departed.insert(name);
    }

    /// Exactly the queued tasks whose hint binds are listed under their name at their order
    /// number; each soft deadline is its task's; no node carries a departed name
    /// (`has_name`: whether some node carries a name).
    pub(super) fn check(
        &self,
        tasks: &TaskTable,
        has_name: &dyn Fn(NodeName) -> bool,
    ) -> Result<(), String> {
        let mut listed = 0usize;
        if self.hinted.values().map(BTreeSet::len).sum::<usize>() != self.bound {
            return Err("hint-bound count disagrees with the hinted sets".into());
        }
        for (name, set) in &self.hinted {
            if set.is_empty() {
                return Err(format!("an empty hint list is kept for {name}"));
            }
            for (seq, task) in set {
                listed += 1;
                let t = tasks
                    .get(task)
                    .ok_or(format!("{task} bound to {name} is unknown"))?;
                if !matches!(t.phase, Phase::Queued { seq: s } if s == *seq) || !t.hint_live {
                    return Err(format!(
                        "{task} bound to {name} is not queued at {seq}, bound"
                    ));
                }
                if t.hint().map(|h| h.node) != Some(*name) {
                    return Err(format!(
                        "{task} is listed under {name}, not its hint's name"
                    ));
                }
            }
        }
        let live = tasks.values().filter(|t| t.hint_live).count();
        if live != listed {
            return Err(format!("{live} bound hints, {listed} listed"));
        }
        for (until, task) in &self.soft_deadlines {
            let t = &tasks[task];
            if t.rare().hint_until != Some(*until)
                || !t.hint_live
                || t.hint().is_none_or(|h| h.strict)
            {
                return Err(format!(
                    "soft deadline {until:?} of {task} does not match it"
                ));
            }
        }
        for name in &self.departed {
            if has_name(*name) {
                return Err(format!("{name} is departed yet a node carries it"));
            }
        }
        Ok(())
    }
}
