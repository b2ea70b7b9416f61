//! Dynamic provisioning's rounds in the core ([`Provisioner`]): when the next round is due,
//! how many nodes to ask for ([`crate::provision::Allocator`]), and which idle nodes to
//! release. The core runs a round at `handle_timeout` and carries out what it decides.

use super::nodes::Nodes;
use crate::ids::NodeId;
use crate::provision::{Allocator, Demand, DynamicConfig};
use crate::time::Time;

/// Dynamic provisioning: the allocator and when its next round is due.
#[derive(Clone, Debug)]
pub(super) struct Provisioner {
    alloc: Allocator,
    /// When the next round is due.
    next_check: Time,
}

impl Provisioner {
    /// Rounds from time zero, with `cfg`.
    pub(super) fn new(cfg: DynamicConfig) -> Provisioner {
        Provisioner {
            alloc: Allocator::new(cfg),
            next_check: Time::ZERO,
        }
    }

    /// When the next round is due.
    pub(super) fn next_check(&self) -> Time {
        self.next_check
    }

    /// Whether a round is due at `now`; if so, the one after is scheduled.
    pub(super) fn due(&mut self, now: Time) -> bool {
        if now < self.next_check {
            return false;
        }
        self.next_check = now + self.alloc.config().check_interval;
        true
    }

    /// How many nodes to ask for now.
    pub(super) fn acquire(&mut self, demand: Demand) -> u32 {
        self.alloc.nodes_to_acquire(demand)
    }

    /// The idle nodes to release at `now`, oldest idle first, down to `min_nodes`: those
    /// running and serving nothing for `idle_timeout`, unless `kept` (something they hold or
    /// do is still needed).
    pub(super) fn idle_to_release(
        &self,
        nodes: &Nodes,
        now: Time,
        kept: &dyn Fn(NodeId) -> bool,
    ) -> Vec<NodeId> {
        let cfg = self.alloc.config();
        let mut idle: Vec<(Time, NodeId)> = nodes
            .iter()
            .filter_map(|(id, n)| match n.idle_since {
                Some(t)
                    if n.running.is_empty()
                        && n.serving == 0
                        && now.since(t) >= cfg.idle_timeout
                        && !kept(id) =>
                {
                    Some((t, id))
                }
                _ => None,
            })
            .collect();
        idle.sort();
        let count = nodes.count();
        let keep = cfg.min_nodes.min(count) as usize;
        idle.truncate(count as usize - keep);
        idle.into_iter().map(|(_, n)| n).collect()
    }
}
