//! Dispatch policies (section 2.2 of the data diffusion paper): which queued task a free slot on
//! a node takes.
//!
//! The scheduler is window-based: for a node with a free slot, the policy looks at most `window`
//! tasks deep into the wait queue. A task whose inputs are all cached on the node (a 100% local
//! hit) is taken at once; otherwise the task with the highest local-hit fraction is taken. Every
//! free node gets this first pass before any falls back, so a task goes to a free node that holds
//! its data in preference to one that does not. What happens when no task has any local data for
//! a node is what tells the policies apart:
//!
//! | policy | no local data for this node |
//! |---|---|
//! | FA  | ignores locality: always the oldest task, every input from persistent storage |
//! | MCU | the oldest task in the window (keeps every slot busy) |
//! | MCH | only a task whose data is cached nowhere; otherwise the slot stays idle, and a task whose data is elsewhere waits for that node |
//! | GCC | MCU while utilisation (busy slots / allocated slots) is below the threshold, MCH above it |
//!
//! Policies see the queue through [`SchedView`], whose answers come from the per-node candidate
//! sets of [`crate::locality`], so a decision costs O(|Ti| + log |Q|), not a scan of the window.

use crate::ids::{NodeId, TaskId};
use crate::index::LocationIndex;
use crate::locality::{Locality, Score, FULL};
use crate::queue::WaitQueue;
use crate::racks::Racks;
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What a policy can see when it decides.
pub struct SchedView<'a> {
    pub(crate) queue: &'a WaitQueue,
    pub(crate) locality: &'a Locality,
    /// What nodes hold or are fetching (`Core::effective`): what scoring sees.
    pub(crate) index: &'a LocationIndex,
    /// What nodes hold, as they reported it (no transfers under way).
    pub(crate) held: &'a LocationIndex,
    /// Which nodes share a rack.
    pub(crate) racks: &'a Racks,
    /// Sequence numbers below this are inside the scheduling window.
    pub(crate) window_bound: u64,
    pub(crate) busy_slots: u64,
    pub(crate) total_slots: u64,
    /// Whether a task can run on the node deciding now (its resources fit what is free there,
    /// and it is not avoiding that node).
    pub(crate) fits: &'a dyn Fn(TaskId) -> bool,
    /// Whether a task could run on another node with a free core (its resources fit there,
    /// it does not avoid it, its hint allows it): for policies that choose the node per task.
    pub(crate) fits_on: &'a dyn Fn(TaskId, NodeId) -> bool,
    /// Nodes with a free slot.
    pub(crate) free: &'a std::collections::BTreeSet<NodeId>,
    /// A node's load: busy slots over its slots, in [0, 1] (1 for an unknown node).
    pub(crate) load: &'a dyn Fn(NodeId) -> f64,
    /// A task's own DAD beta, if it states one.
    pub(crate) beta: &'a dyn Fn(TaskId) -> Option<f64>,
}

impl SchedView<'_> {
    /// The same view with another fit filter (one policy's share of the queue).
    pub(crate) fn with_fits<'b>(&'b self, fits: &'b dyn Fn(TaskId) -> bool) -> SchedView<'b> {
        SchedView {
            queue: self.queue,
            locality: self.locality,
            index: self.index,
            held: self.held,
            racks: self.racks,
            window_bound: self.window_bound,
            busy_slots: self.busy_slots,
            total_slots: self.total_slots,
            fits,
            fits_on: self.fits_on,
            free: self.free,
            load: self.load,
            beta: self.beta,
        }
    }

    /// Busy slots / allocated slots (1.0 when no slot is allocated).
    pub fn utilization(&self) -> f64 {
        if self.total_slots == 0 {
            1.0
        } else {
            self.busy_slots as f64 / self.total_slots as f64
        }
    }

    /// The first queued task that can run on this node: the oldest of the highest priority,
    /// unless it does not fit here, then the next one within the window.
    pub fn oldest(&self) -> Option<TaskId> {
        let (_, first) = self.queue.first()?;
        if (self.fits)(first) {
            return Some(first);
        }
        self.queue
            .iter()
            .take_while(|(o, _)| *o < self.window_bound)
            .map(|(_, t)| t)
            .find(|t| (self.fits)(*t))
    }

    /// The task in the window with the highest local-hit fraction on `node` (ties: oldest), and
    /// that fraction. With `only_where_most`, a task is skipped if another node holds more of its
    /// data (MCH: it waits for that node).
    pub fn best_local(&self, node: NodeId, only_where_most: bool) -> Option<(TaskId, Score)> {
        for (task, score) in self.locality.candidates_within(node, self.window_bound) {
            if !(self.fits)(task) {
                continue;
            }
            if only_where_most && score < FULL {
                let here = self.locality.local_bytes(task, node);
                if self.locality.max_local_bytes(task, self.index) > here {
                    continue;
                }
            }
            return Some((task, score));
        }
        None
    }

    /// The oldest task in the window whose inputs are cached nowhere.
    pub fn oldest_cold(&self) -> Option<TaskId> {
        self.locality
            .cold()
            .take_while(|(seq, _)| *seq < self.window_bound)
            .map(|(_, t)| t)
            .find(|t| (self.fits)(*t))
    }
}

/// A dispatch policy: picks a queued task for a free slot on `node`, or `None` to leave it idle.
///
/// The core asks in two passes. First every node with a free slot is offered `choose_local`:
/// tasks with data on that node, so a task goes to a free node holding its data before any node
/// without it is considered. Slots still free then get `choose_any`, the policy's fallback.
pub trait DispatchPolicy: Send {
    /// Short name, as on the command line.
    fn name(&self) -> &'static str;
    /// Whether the policy uses cached data at all. FA does not: its tasks read only from
    /// persistent storage, and nodes need not cache.
    fn uses_locality(&self) -> bool {
        true
    }
    /// First pass: a task with data cached on `node`, or `None`.
    fn choose_local(&mut self, view: &SchedView<'_>, node: NodeId, now: Time) -> Option<TaskId>;
    /// Second pass: any task this policy allows on `node`, or `None` to leave the slot idle.
    fn choose_any(&mut self, view: &SchedView<'_>, node: NodeId, now: Time) -> Option<TaskId>;
    /// When the policy wants a dispatch pass even if nothing else happens (DAD while it delays
    /// a task: its next round). None: only when something changes.
    fn wake_at(&self) -> Option<Time> {
        None
    }
}

/// First-available: the oldest task, wherever its data is.
#[derive(Clone, Debug, Default)]
pub struct FirstAvailable;

impl DispatchPolicy for FirstAvailable {
    fn name(&self) -> &'static str {
        "fa"
    }
    fn uses_locality(&self) -> bool {
        false
    }
    fn choose_local(&mut self, _: &SchedView<'_>, _: NodeId, _: Time) -> Option<TaskId> {
        None
    }
    fn choose_any(&mut self, view: &SchedView<'_>, _node: NodeId, _now: Time) -> Option<TaskId> {
        view.oldest()
    }
}

/// Max-compute-util: every free slot gets a task, preferring local data.
#[derive(Clone, Debug, Default)]
pub struct MaxComputeUtil;

impl DispatchPolicy for MaxComputeUtil {
    fn name(&self) -> &'static str {
        "mcu"
    }
    fn choose_local(&mut self, view: &SchedView<'_>, node: NodeId, _now: Time) -> Option<TaskId> {
        view.best_local(node, false).map(|(t, _)| t)
    }
    fn choose_any(&mut self, view: &SchedView<'_>, _node: NodeId, _now: Time) -> Option<TaskId> {
        view.oldest()
    }
}

/// Max-cache-hit: a task runs only where most of its data is (or anywhere if it is nowhere).
#[derive(Clone, Debug, Default)]
pub struct MaxCacheHit;

impl DispatchPolicy for MaxCacheHit {
    fn name(&self) -> &'static str {
        "mch"
    }
    fn choose_local(&mut self, view: &SchedView<'_>, node: NodeId, _now: Time) -> Option<TaskId> {
        view.best_local(node, true).map(|(t, _)| t)
    }
    fn choose_any(&mut self, view: &SchedView<'_>, _node: NodeId, _now: Time) -> Option<TaskId> {
        view.oldest_cold()
    }
}

/// Good-cache-compute: MCU below the utilisation threshold, MCH at or above it.
#[derive(Clone, Debug)]
pub struct GoodCacheCompute {
    /// Utilisation (busy / allocated slots) at which the policy switches from MCU to MCH.
    pub threshold: f64,
}

impl DispatchPolicy for GoodCacheCompute {
    fn name(&self) -> &'static str {
        "gcc"
    }
    fn choose_local(&mut self, view: &SchedView<'_>, node: NodeId, now: Time) -> Option<TaskId> {
        if view.utilization() < self.threshold {
            MaxComputeUtil.choose_local(view, node, now)
        } else {
            MaxCacheHit.choose_local(view, node, now)
        }
    }
    fn choose_any(&mut self, view: &SchedView<'_>, node: NodeId, now: Time) -> Option<TaskId> {
        if view.utilization() < self.threshold {
            MaxComputeUtil.choose_any(view, node, now)
        } else {
            MaxCacheHit.choose_any(view, node, now)
        }
    }
}

/// The built-in policies by name, for configuration.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum PolicyKind {
    /// First-available.
    Fa,
    /// Max-compute-util.
    Mcu,
    /// Max-cache-hit.
    Mch,
    /// Good-cache-compute.
    #[default]
    Gcc,
    /// DAD's score (file locality and load) with a bounded delay ([`crate::dad`]).
    Dad,
    /// MixApart's locality tiers: node-local, rack-local, in transfer, cached anywhere,
    /// storage ([`crate::mixapart`]).
    #[serde(rename = "mixapart")]
    MixApart,
}

impl PolicyKind {
    /// Whether the policy uses cached data (all but FA).
    pub fn uses_locality(self) -> bool {
        self != PolicyKind::Fa
    }

    /// Build the policy with `cfg`'s parameters (GCC's threshold, DAD's).
    pub fn build(self, cfg: &crate::CoreConfig) -> Box<dyn DispatchPolicy> {
        match self {
            PolicyKind::Fa => Box::new(FirstAvailable),
            PolicyKind::Mcu => Box::new(MaxComputeUtil),
            PolicyKind::Mch => Box::new(MaxCacheHit),
            PolicyKind::Gcc => Box::new(GoodCacheCompute {
                threshold: cfg.threshold,
            }),
            PolicyKind::Dad => Box::new(crate::dad::DataAwareDispatch::new(cfg.dad)),
            PolicyKind::MixApart => Box::new(crate::mixapart::LocalityTiers),
        }
    }
}

impl FromStr for PolicyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "fa" => Ok(Self::Fa),
            "mcu" => Ok(Self::Mcu),
            "mch" => Ok(Self::Mch),
            "gcc" => Ok(Self::Gcc),
            "dad" => Ok(Self::Dad),
            "mixapart" => Ok(Self::MixApart),
            _ => Err(format!(
                "unknown policy '{s}' (expected fa, mcu, mch, gcc, dad or mixapart)"
            )),
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Self::Fa => "fa",
            Self::Mcu => "mcu",
            Self::Mch => "mch",
            Self::Gcc => "gcc",
            Self::Dad => "dad",
            Self::MixApart => "mixapart",
        };
        f.write_str(s)
    }
}
