//! Cache hand-off on release, simulated: a released node's pushes are network flows from its
//! NIC to each target's, cut at the time bound; the node is billed until the last one ends.

use super::*;

impl Simulation {
    /// `node` is released: with hand-off, it stays allocated, serving only its pushes, until
    /// they end or the time bound is up; without, its billing ends now.
    pub(super) fn release(&mut self, node: NodeId, handoff: Vec<Handoff>) {
        let Some(n) = self.nodes.remove(&node) else {
            return;
        };
        self.pushed_unread.retain(|(holder, _)| *holder != node);
        if handoff.is_empty() {
            self.cpu_seconds +=
                (secs(self.now) - n.joined) * self.cfg.testbed.slots_per_node as f64;
            return;
        }
        // The node stays allocated, serving nothing but its pushes, until they end or
        // the time bound is up.
        self.handoff.releases += 1;
        self.handoff.planned += handoff.len() as u64;
        self.handoff.planned_bytes += handoff.iter().map(|h| h.size).sum::<u64>();
        self.leaving.insert(
            node,
            Leaving {
                node: n,
                pushes: handoff.len() as u32,
                released: secs(self.now),
            },
        );
        let bound = self
            .cfg
            .handoff
            .as_ref()
            .map_or(Duration::ZERO, |h| h.time_bound);
        let start = self.now + Duration::from_secs_f64(self.cfg.testbed.peer_latency_s);
        for h in handoff {
            let id = self.next_push;
            self.next_push += 1;
            self.pushes.insert(
                id,
                Push {
                    from: node,
                    handoff: h,
                },
            );
            self.push(start, Ev::PushStart(id));
        }
        self.push(self.now + bound, Ev::HandoffDeadline(node));
    }

    /// A push's start: a flow from the leaving node to its target, or lost if either is gone.
    pub(super) fn push_start(&mut self, id: u64, t: f64) {
        let Some(p) = self.pushes.get(&id) else {
            return;
        };
        let (from, to) = (p.from, p.handoff.to);
        let size = p.handoff.size;
        match (self.leaving.get(&from), self.nodes.get(&to)) {
            (Some(l), Some(target)) => {
                let resources = super::transfers::peer_path(&l.node, target);
                self.net.start(t, size, &resources, Tag::Push(id));
            }
            _ => self.push_ended(id, Ended::Lost),
        }
    }

    /// The time bound of `node`'s hand-off: what is still moving is cut, and pushes still
    /// waiting for their start go too.
    pub(super) fn handoff_deadline(&mut self, node: NodeId) {
        if !self.leaving.contains_key(&node) {
            return;
        }
        let pushes = &self.pushes;
        self.net.cancel(
            |tag| matches!(tag, Tag::Push(id) if pushes.get(id).is_some_and(|p| p.from == node)),
        );
        let mut ids: Vec<u64> = self
            .pushes
            .iter()
            .filter(|(_, p)| p.from == node)
            .map(|(id, _)| *id)
            .collect();
        ids.sort();
        for id in ids {
            self.push_ended(id, Ended::Cut);
        }
    }

    /// A push's transfer completed: the target caches the object if it still has room for it
    /// without evicting anything, and tells the core.
    pub(super) fn push_done(&mut self, id: u64) -> Result<(), SimError> {
        let Some(p) = self.pushes.get(&id) else {
            return Ok(());
        };
        let h = p.handoff;
        let mut ended = Ended::Lost;
        if let Some(target) = self.nodes.get_mut(&h.to) {
            let c = &mut target.cache;
            if !c.contains(h.object) && c.used() + h.size <= c.quota() {
                let admitted = c.insert(h.object, h.size);
                debug_assert_eq!(admitted, Admission::Stored(Vec::new()));
                self.core
                    .handle_object_cached(h.to, h.object, self.now)
                    .map_err(|e| self.core_err(e))?;
                self.pushed_unread.insert((h.to, h.object));
                ended = Ended::Cached;
            } else if c.contains(h.object) {
                // The target fetched it meanwhile: nothing lost.
                ended = Ended::Cached;
            }
        }
        self.push_ended(id, ended);
        Ok(())
    }

    /// A push ended (arrived and cached, or given up); the last one of a released node ends its
    /// billing.
    fn push_ended(&mut self, id: u64, how: Ended) {
        let Some(p) = self.pushes.remove(&id) else {
            return;
        };
        match how {
            Ended::Cached => {
                self.handoff.pushed += 1;
                self.handoff.pushed_bytes += p.handoff.size;
            }
            Ended::Cut => self.handoff.cut += 1,
            Ended::Lost => self.handoff.lost += 1,
        }
        let Some(l) = self.leaving.get_mut(&p.from) else {
            return;
        };
        l.pushes -= 1;
        if l.pushes == 0 {
            let l = self.leaving.remove(&p.from).expect("leaving node");
            let slots = self.cfg.testbed.slots_per_node as f64;
            let now = secs(self.now);
            self.cpu_seconds += (now - l.node.joined) * slots;
            self.handoff.cpu_hours += (now - l.released) * slots / 3600.0;
        }
    }
}
