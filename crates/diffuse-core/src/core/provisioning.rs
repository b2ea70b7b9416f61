//! The core's provisioning round (`handle_timeout`): how many nodes to ask for, which idle ones
//! to release, and what each released node hands off first.

use super::*;

impl Core {
    /// A deadline returned by `poll_timeout` has passed: run provisioning.
    pub fn handle_timeout(&mut self, now: Time) {
        let Some(alloc) = self.allocator.as_mut() else {
            return;
        };
        if now < self.next_check {
            return;
        }
        let cfg = alloc.config().clone();
        self.next_check = now + cfg.check_interval;
        if let (Some(c), Some(h)) = (self.caches.as_mut(), &self.cfg.handoff) {
            c.expire(now, h.time_bound);
        }
        let want = alloc.nodes_to_acquire(Demand {
            queued: self.counts.queued + self.waiting,
            free_slots: self.counts.slots - self.counts.busy_slots,
            nodes: self.counts.nodes,
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
                        && !self.holds_needed_intermediate(*id)
                        && !self.holds_prefetches(*id) =>
                {
                    Some((t, *id))
                }
                _ => None,
            })
            .collect();
        idle.sort();
        let keep = cfg.min_nodes.min(self.counts.nodes) as usize;
        idle.truncate(self.counts.nodes as usize - keep);
        let releasing: BTreeSet<NodeId> = idle.iter().map(|(_, n)| *n).collect();
        for (_, node) in idle {
            let handoff = self.plan_handoff(node, &releasing, now);
            let held = self.forget_node(node);
            self.actions.push_back(Action::Release { node, handoff });
            self.copies_lost(&held);
        }
    }

    /// What `node` pushes before it goes (see [`handoff`]); the nodes in `releasing` go in the
    /// same round and receive nothing. The pushes reserve room on their targets.
    fn plan_handoff(
        &mut self,
        node: NodeId,
        releasing: &BTreeSet<NodeId>,
        now: Time,
    ) -> Vec<Handoff> {
        let (Some(cfg), Some(caches)) = (&self.cfg.handoff, &self.caches) else {
            return Vec::new();
        };
        let targets: Vec<Target> = self
            .nodes
            .iter()
            .filter(|(id, _)| !releasing.contains(id))
            .map(|(id, n)| Target {
                node: *id,
                busy: !n.running.is_empty() || n.serving > 0,
            })
            .collect();
        let locality = &self.locality;
        let wanted = |o: ObjectId| {
            locality
                .wanted(o)
                .map(|(readers, first)| Want { readers, first })
        };
        let plan = handoff::plan(&PlanInput {
            node,
            index: &self.effective,
            caches,
            targets: &targets,
            wanted: &wanted,
            budget: cfg.budget,
        });
        if let Some(c) = self.caches.as_mut() {
            c.reserve(&plan, now);
        }
        plan
    }
}
