//! The core's provisioning round (`handle_timeout`): how many nodes to ask for, which idle ones
//! to release, and what each released node hands off first.

use super::*;

impl Core {
    /// A deadline returned by `poll_timeout` has passed: run provisioning.
    pub fn handle_timeout(&mut self, now: Time) {
        let Some(alloc) = self.allocator.as_ref() else {
            return;
        };
        if now < self.next_check {
            return;
        }
        let cfg = alloc.config().clone();
        self.next_check = now + cfg.check_interval;
        self.notify(None, |h, _, _| h.timeout(now));
        let alloc = self.allocator.as_mut().expect("checked above");
        let want = alloc.nodes_to_acquire(Demand {
            queued: self.counts.queued + self.waiting,
            free_slots: self.nodes.slots() - self.nodes.busy(),
            nodes: self.nodes.count(),
            pending: self.counts.pending_nodes,
        });
        if want > 0 {
            self.counts.pending_nodes += want;
            self.actions.push_back(Action::Provision { nodes: want });
        }
        // Release idle nodes, oldest idle first, down to min_nodes.
        let mut idle: Vec<(Time, NodeId)> = self
            .nodes
            .iter()
            .filter_map(|(id, n)| match n.idle_since {
                Some(t)
                    if n.running.is_empty()
                        && n.serving == 0
                        && now.since(t) >= cfg.idle_timeout
                        && !self.holds_needed_intermediate(id)
                        && !self.kept_by_hook(id) =>
                {
                    Some((t, id))
                }
                _ => None,
            })
            .collect();
        idle.sort();
        let nodes = self.nodes.count();
        let keep = cfg.min_nodes.min(nodes) as usize;
        idle.truncate(nodes as usize - keep);
        let releasing: BTreeSet<NodeId> = idle.iter().map(|(_, n)| *n).collect();
        for (_, node) in idle {
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
