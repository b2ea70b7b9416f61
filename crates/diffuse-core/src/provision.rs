//! Resource provisioning: how many nodes to acquire as the wait queue grows, and when to give an
//! idle node back (the paper's dynamic resource provisioner, DRP).
//!
//! Static provisioning never acquires or releases. Dynamic provisioning checks the queue every
//! `check_interval`: when more tasks wait than the free and pending slots can take, it asks for
//! nodes by its step policy (never more than the queue needs, never beyond `max_nodes`); a node
//! with no task for `idle_timeout` is released (and its cache is gone), down to `min_nodes`.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// How many nodes one allocation round asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepPolicy {
    /// One node per round.
    OneAtATime,
    /// A fixed number of nodes per round.
    Additive(u32),
    /// 1, 2, 4, ... nodes in consecutive rounds; back to 1 after a round with nothing to do.
    Exponential,
    /// Enough nodes for the whole queue at once.
    AllAtOnce,
}

impl FromStr for StepPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "one" | "one-at-a-time" => Ok(Self::OneAtATime),
            "exponential" => Ok(Self::Exponential),
            "all" | "all-at-once" => Ok(Self::AllAtOnce),
            _ => match s.strip_prefix("additive:").map(str::parse::<u32>) {
                Some(Ok(k)) if k > 0 => Ok(Self::Additive(k)),
                _ => Err(format!(
                    "unknown step policy '{s}' (expected one, additive:K with K > 0, exponential or all)"
                )),
            },
        }
    }
}

impl fmt::Display for StepPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OneAtATime => f.write_str("one"),
            Self::Additive(k) => write!(f, "additive:{k}"),
            Self::Exponential => f.write_str("exponential"),
            Self::AllAtOnce => f.write_str("all"),
        }
    }
}

/// Dynamic provisioning settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DynamicConfig {
    /// How many nodes a round asks for.
    pub step: StepPolicy,
    /// Nodes kept even when idle.
    pub min_nodes: u32,
    /// Upper bound on allocated plus pending nodes.
    pub max_nodes: u32,
    /// Slots each acquired node brings (to turn queue length into nodes).
    pub slots_per_node: u32,
    /// A node with no running task for this long is released.
    pub idle_timeout: Duration,
    /// How often the queue is checked.
    pub check_interval: Duration,
}

/// Static or dynamic provisioning.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Provisioning {
    /// Nodes come and go only by the driver's decision.
    Static,
    /// Acquire by queue length, release after idle time.
    Dynamic(DynamicConfig),
}

/// What one allocation check sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Demand {
    /// Tasks in the wait queue.
    pub queued: u64,
    /// Free slots on allocated nodes.
    pub free_slots: u64,
    /// Nodes allocated (joined).
    pub nodes: u32,
    /// Nodes asked for and not yet joined.
    pub pending: u32,
}

/// The allocation state machine of dynamic provisioning.
#[derive(Clone, Debug)]
pub struct Allocator {
    cfg: DynamicConfig,
    /// Consecutive rounds that asked for nodes (drives the exponential step).
    rounds: u32,
}

impl Allocator {
    /// A fresh allocator.
    pub fn new(cfg: DynamicConfig) -> Self {
        Allocator { cfg, rounds: 0 }
    }

    /// Settings.
    pub fn config(&self) -> &DynamicConfig {
        &self.cfg
    }

    /// How many nodes to ask for now (0: none).
    pub fn nodes_to_acquire(&mut self, d: Demand) -> u32 {
        let spn = self.cfg.slots_per_node.max(1) as u64;
        let uncovered = d
            .queued
            .saturating_sub(d.free_slots + d.pending as u64 * spn);
        let room = self.cfg.max_nodes.saturating_sub(d.nodes + d.pending);
        let below_min = self.cfg.min_nodes.saturating_sub(d.nodes + d.pending);
        if uncovered == 0 || room == 0 {
            self.rounds = 0;
            return below_min.min(room);
        }
        let needed = uncovered.div_ceil(spn).min(u32::MAX as u64) as u32;
        let step = match self.cfg.step {
            StepPolicy::OneAtATime => 1,
            StepPolicy::Additive(k) => k,
            StepPolicy::Exponential => 1u32.checked_shl(self.rounds).unwrap_or(u32::MAX),
            StepPolicy::AllAtOnce => needed,
        };
        self.rounds = self.rounds.saturating_add(1);
        step.min(needed).min(room).max(below_min.min(room))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(step: StepPolicy) -> DynamicConfig {
        DynamicConfig {
            step,
            min_nodes: 0,
            max_nodes: 10,
            slots_per_node: 2,
            idle_timeout: Duration::from_secs(30),
            check_interval: Duration::from_secs(1),
        }
    }

    fn d(queued: u64, free_slots: u64, nodes: u32, pending: u32) -> Demand {
        Demand {
            queued,
            free_slots,
            nodes,
            pending,
        }
    }

    #[test]
    fn nothing_when_queue_is_covered() {
        let mut a = Allocator::new(cfg(StepPolicy::AllAtOnce));
        assert_eq!(a.nodes_to_acquire(d(0, 0, 0, 0)), 0);
        assert_eq!(a.nodes_to_acquire(d(4, 2, 1, 1)), 0);
    }

    #[test]
    fn step_policies() {
        let mut one = Allocator::new(cfg(StepPolicy::OneAtATime));
        assert_eq!(one.nodes_to_acquire(d(100, 0, 0, 0)), 1);
        let mut add = Allocator::new(cfg(StepPolicy::Additive(3)));
        assert_eq!(add.nodes_to_acquire(d(100, 0, 0, 0)), 3);
        let mut all = Allocator::new(cfg(StepPolicy::AllAtOnce));
        assert_eq!(all.nodes_to_acquire(d(7, 0, 0, 0)), 4);
        let mut exp = Allocator::new(cfg(StepPolicy::Exponential));
        let got: Vec<u32> = (0..4)
            .map(|_| exp.nodes_to_acquire(d(100, 0, 0, 0)))
            .collect();
        assert_eq!(got, vec![1, 2, 4, 8]);
        assert_eq!(exp.nodes_to_acquire(d(0, 0, 3, 0)), 0);
        assert_eq!(
            exp.nodes_to_acquire(d(100, 0, 0, 0)),
            1,
            "exponential restarts after a quiet round"
        );
    }

    #[test]
    fn bounded_by_max_nodes_and_queue() {
        let mut all = Allocator::new(cfg(StepPolicy::AllAtOnce));
        assert_eq!(all.nodes_to_acquire(d(1000, 0, 6, 2)), 2);
        assert_eq!(all.nodes_to_acquire(d(1000, 0, 8, 2)), 0);
        let mut add = Allocator::new(cfg(StepPolicy::Additive(5)));
        assert_eq!(
            add.nodes_to_acquire(d(3, 0, 0, 0)),
            2,
            "never more than the queue needs"
        );
    }

    #[test]
    fn keeps_min_nodes() {
        let mut c = cfg(StepPolicy::OneAtATime);
        c.min_nodes = 3;
        let mut a = Allocator::new(c);
        assert_eq!(a.nodes_to_acquire(d(0, 0, 0, 0)), 3);
        assert_eq!(a.nodes_to_acquire(d(0, 0, 2, 1)), 0);
    }

    #[test]
    fn parses_step_policies() {
        assert_eq!(
            "additive:4".parse::<StepPolicy>(),
            Ok(StepPolicy::Additive(4))
        );
        assert!("additive:0".parse::<StepPolicy>().is_err());
        assert!("sometimes".parse::<StepPolicy>().is_err());
    }
}
