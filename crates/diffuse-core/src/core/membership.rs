//! The core's handlers of the pool changing: nodes joining (with capacity, rack, load, deadline
//! and cache size), leaving or lost (their running tasks queued again or ended, their copies
//! forgotten), the demand the driver reports, and provisioning's round (`handle_timeout`:
//! nodes asked for, idle ones released). The node records are [`super::nodes::Nodes`]'s, the
//! provisioning decisions [`super::provisioner::Provisioner`]'s.

use super::*;
use crate::ids::RackId;

impl Core {
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
        self.nodes.join(node, capacity, now)?;
        self.notify(None, |h, _, _| h.node_joined(node));
        self.counts.pending_nodes = self.counts.pending_nodes.saturating_sub(1);
        self.dirty = true;
        Ok(())
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
        self.notify(None, |h, _, _| h.node_cache(node, quota, eviction));
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
        self.remove_node(node, true)
    }

    /// A node left cleanly (its worker was stopped and said so): as [`Core::handle_node_lost`],
    /// but its running tasks were stopped, not crashed, so they do not count toward the crash
    /// limit.
    pub fn handle_node_left(&mut self, node: NodeId, _now: Time) -> Result<LostTasks, CoreError> {
        self.remove_node(node, false)
    }

    /// The tasks running on `node` (empty for an unknown node).
    pub fn running_on(&self, node: NodeId) -> &[TaskId] {
        self.nodes.get(node).map_or(&[], |n| n.running.as_slice())
    }

    pub(super) fn remove_node(
        &mut self,
        node: NodeId,
        crashed: bool,
    ) -> Result<LostTasks, CoreError> {
        let entry = self.nodes.get(node).ok_or(CoreError::UnknownNode(node))?;
        let running = entry.running.clone();
        let mut failed = Vec::new();
        let mut cancelled = Vec::new();
        let mut again = Vec::new();
        for task in running {
            self.release_slot(task, node);
            let t = self.tasks.get_mut(&task).expect("running task exists");
            let was_cancelled = matches!(
                t.phase,
                Phase::Running {
                    cancelled: true,
                    ..
                }
            );
            if crashed {
                t.crashes += 1;
            }
            self.counts.running -= 1;
            t.phase = Phase::Blocked;
            self.counts.blocked += 1;
            if was_cancelled {
                if !self.task_ended_unsuccessfully(task) {
                    self.counts.cancelled += 1;
                    cancelled.push(task);
                }
            } else if t.crashes >= self.cfg.crash_limit {
                if !self.task_ended_unsuccessfully(task) {
                    self.counts.failed += 1;
                    failed.push(task);
                }
            } else {
                again.push(task);
            }
        }
        let held = self.forget_node(node);
        // Queue them once the node's copies are forgotten: an intermediate input it held is
        // waited for (and remade) instead.
        for task in again {
            self.counts.blocked -= 1;
            self.requeue(task);
        }
        self.copies_lost(&held);
        Ok(LostTasks { failed, cancelled })
    }

    /// Forget a node and its copies; returns the objects it held.
    pub(super) fn forget_node(&mut self, node: NodeId) -> Vec<ObjectId> {
        // Running tasks told to read from this node must not later decrement the count of a
        // node that joins under the same id.
        let running: Vec<TaskId> = self
            .nodes
            .iter()
            .flat_map(|(_, n)| n.running.iter().copied())
            .collect();
        for t in running {
            if let Some(TaskEntry {
                phase: Phase::Running { peers, .. },
                ..
            }) = self.tasks.get_mut(&t)
            {
                peers.retain(|p| *p != node);
            }
        }
        let entry = self.nodes.remove(node).expect("node exists");
        let held = self.copies.remove_node(node);
        self.racks.remove(node);
        self.notify(None, |h, _, _| h.node_left(node));
        if let Some(name) = entry.name {
            self.name_left(name);
        }
        self.dirty = true;
        held
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
        self.notify(None, |h, _, _| h.timeout(now));
        let demand = Demand {
            queued: self.counts.queued + self.waiting,
            free_slots: self.nodes.slots() - self.nodes.busy(),
            nodes: self.nodes.count(),
            pending: self.counts.pending_nodes,
        };
        let prov = self.provisioner.as_mut().expect("checked above");
        let want = prov.acquire(demand);
        if want > 0 {
            self.counts.pending_nodes += want;
            self.actions.push_back(Action::Provision { nodes: want });
        }
        let kept = |n: NodeId| self.holds_needed_intermediate(n) || self.kept_by_hook(n);
        let prov = self.provisioner.as_ref().expect("checked above");
        let idle = prov.idle_to_release(&self.nodes, now, &kept);
        let releasing: BTreeSet<NodeId> = idle.iter().copied().collect();
        for node in idle {
            let handoff = self.plan_handoff(node, &releasing, now);
            let held = self.forget_node(node);
            self.actions.push_back(Action::Release { node, handoff });
            self.copies_lost(&held);
        }
    }

    /// What `node` pushes before it goes (cache hand-off, [`crate::hooks::handoff`]); the
    /// nodes in `releasing` go in the same round and receive nothing.
    fn plan_handoff(
        &mut self,
        node: NodeId,
        releasing: &BTreeSet<NodeId>,
        now: Time,
    ) -> Vec<Handoff> {
        let mut plan = Vec::new();
        self.notify(None, |h, v, _| {
            plan.extend(h.node_released(v, node, releasing, now))
        });
        plan
    }
}
