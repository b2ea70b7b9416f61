//! Per-node candidate sets: for every node, the queued tasks that have data cached there, ordered
//! by local-hit fraction and then by queue position.
//!
//! This is what makes a data-aware decision cost O(|Ti| + log) instead of a scan of the window:
//! the sets are updated when a task is queued or leaves the queue (O(inputs x replicas)) and when
//! a node reports an object cached or evicted (O(queued tasks waiting on that object)). A free
//! node then reads its best candidate off the front of its set.
//!
//! A queued task without inputs has no data anywhere and never will: it is kept in the cold set
//! only, without a record of its own (a dispatcher may hold millions of such tasks).
//!
//! Invariant (checked by `Core::check_invariants`): for every queued task t and node n,
//! `local_bytes(t, n)` = the bytes of t's distinct inputs that the index says n holds, and t is
//! in `cold` exactly when no node holds any of its inputs.

use crate::ids::{NodeId, ObjectId, TaskId};
use crate::index::LocationIndex;
use crate::task::Input;
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::BTreeSet;

/// Local-hit fraction in parts per million.
pub type Score = u32;

/// Full score: every input byte is local.
pub const FULL: Score = 1_000_000;

#[derive(Clone, Debug)]
struct QueuedTask {
    seq: u64,
    total: u64,
    /// Number of nodes that hold at least one of its inputs.
    nodes_with_data: u32,
    /// Its distinct inputs (at least one).
    inputs: Box<[Input]>,
}

/// Local bytes of a task on a node, and how many of its inputs the node holds (an input may be
/// zero bytes, so membership is decided by the count, not the bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Held {
    bytes: u64,
    inputs: u32,
}

#[derive(Clone, Debug, Default)]
struct NodeCandidates {
    local: FxHashMap<TaskId, Held>,
    order: BTreeSet<(Reverse<Score>, u64, TaskId)>,
}

/// Candidate sets for all nodes.
#[derive(Clone, Debug, Default)]
pub struct Locality {
    waiting: FxHashMap<ObjectId, Vec<TaskId>>,
    /// Queued tasks with inputs.
    queued: FxHashMap<TaskId, QueuedTask>,
    /// Queued tasks without inputs (in `cold` only).
    inputless: usize,
    nodes: FxHashMap<NodeId, NodeCandidates>,
    /// Sequence numbers of queued tasks with no input cached anywhere.
    cold: BTreeSet<(u64, TaskId)>,
    /// The others: queued tasks with an input cached somewhere (MixApart's cache-local tier).
    warm: BTreeSet<(u64, TaskId)>,
}

fn score(local: u64, total: u64) -> Score {
    if total == 0 {
        0
    } else {
        ((local as u128 * FULL as u128) / total as u128) as Score
    }
}

impl Locality {
    /// Empty sets.
    pub fn new() -> Self {
        Self::default()
    }

    /// A task entered the queue at `seq`. `inputs` must be distinct.
    pub fn enqueue(&mut self, task: TaskId, seq: u64, inputs: &[Input], index: &LocationIndex) {
        if inputs.is_empty() {
            self.cold.insert((seq, task));
            self.inputless += 1;
            return;
        }
        let total = inputs.iter().map(|i| i.size).sum();
        self.queued.insert(
            task,
            QueuedTask {
                seq,
                total,
                nodes_with_data: 0,
                inputs: inputs.into(),
            },
        );
        let mut any = false;
        for input in inputs {
            self.waiting.entry(input.object).or_default().push(task);
            for &node in index.holders(input.object) {
                self.add_local(task, node, input.size);
                any = true;
            }
        }
        if !any {
            self.cold.insert((seq, task));
        }
    }

    /// A task queued at `seq` left the queue (dispatched or cancelled).
    pub fn dequeue(&mut self, task: TaskId, seq: u64, index: &LocationIndex) {
        let Some(q) = self.queued.remove(&task) else {
            if self.cold.remove(&(seq, task)) {
                self.inputless -= 1;
            }
            return;
        };
        self.cold.remove(&(q.seq, task));
        self.warm.remove(&(q.seq, task));
        for input in &q.inputs {
            if let Some(w) = self.waiting.get_mut(&input.object) {
                if let Some(p) = w.iter().position(|t| *t == task) {
                    w.swap_remove(p);
                }
                if w.is_empty() {
                    self.waiting.remove(&input.object);
                }
            }
            for node in index.holders(input.object) {
                if let Some(nc) = self.nodes.get_mut(node) {
                    if let Some(old) = nc.local.remove(&task) {
                        nc.order
                            .remove(&(Reverse(score(old.bytes, q.total)), q.seq, task));
                    }
                }
            }
        }
    }

    /// `node` now holds `object` (call after the index was updated).
    pub fn object_added(&mut self, node: NodeId, object: ObjectId) {
        let Some(waiting) = self.waiting.get(&object) else {
            return;
        };
        for task in waiting.clone() {
            let size = self.input_size(task, object);
            self.add_local(task, node, size);
        }
    }

    /// `node` no longer holds `object` (call after the index was updated).
    pub fn object_removed(&mut self, node: NodeId, object: ObjectId) {
        let Some(waiting) = self.waiting.get(&object) else {
            return;
        };
        for task in waiting.clone() {
            let size = self.input_size(task, object);
            self.sub_local(task, node, size);
        }
    }

    fn input_size(&self, task: TaskId, object: ObjectId) -> u64 {
        self.queued[&task]
            .inputs
            .iter()
            .find(|i| i.object == object)
            .map_or(0, |i| i.size)
    }

    fn add_local(&mut self, task: TaskId, node: NodeId, bytes: u64) {
        let q = self.queued.get_mut(&task).expect("queued task");
        let nc = self.nodes.entry(node).or_default();
        let old = match nc.local.get(&task) {
            Some(old) => {
                nc.order
                    .remove(&(Reverse(score(old.bytes, q.total)), q.seq, task));
                *old
            }
            None => {
                q.nodes_with_data += 1;
                if q.nodes_with_data == 1 {
                    self.cold.remove(&(q.seq, task));
                    self.warm.insert((q.seq, task));
                }
                Held::default()
            }
        };
        let new = Held {
            bytes: old.bytes + bytes,
            inputs: old.inputs + 1,
        };
        nc.local.insert(task, new);
        nc.order
            .insert((Reverse(score(new.bytes, q.total)), q.seq, task));
    }

    fn sub_local(&mut self, task: TaskId, node: NodeId, bytes: u64) {
        let q = self.queued.get_mut(&task).expect("queued task");
        let Some(nc) = self.nodes.get_mut(&node) else {
            return;
        };
        let Some(old) = nc.local.get(&task).copied() else {
            return;
        };
        nc.order
            .remove(&(Reverse(score(old.bytes, q.total)), q.seq, task));
        if old.inputs <= 1 {
            nc.local.remove(&task);
            q.nodes_with_data -= 1;
            if q.nodes_with_data == 0 {
                self.cold.insert((q.seq, task));
                self.warm.remove(&(q.seq, task));
            }
        } else {
            let new = Held {
                bytes: old.bytes.saturating_sub(bytes),
                inputs: old.inputs - 1,
            };
            nc.local.insert(task, new);
            nc.order
                .insert((Reverse(score(new.bytes, q.total)), q.seq, task));
        }
    }

    /// Drop a node's candidate set (the node left; call after its objects were removed).
    pub fn remove_node(&mut self, node: NodeId) {
        self.nodes.remove(&node);
    }

    /// Bytes of `task`'s inputs that `node` holds (queued tasks only).
    pub fn local_bytes(&self, task: TaskId, node: NodeId) -> u64 {
        self.nodes
            .get(&node)
            .and_then(|nc| nc.local.get(&task))
            .map_or(0, |h| h.bytes)
    }

    /// A queued task's place in the queue (None if it is not queued, or has no inputs).
    pub fn seq(&self, task: TaskId) -> Option<u64> {
        self.queued.get(&task).map(|q| q.seq)
    }

    /// A queued task's distinct inputs and their total bytes (None if it is not queued, or has
    /// no inputs).
    pub fn inputs(&self, task: TaskId) -> Option<(&[Input], u64)> {
        self.queued.get(&task).map(|q| (&q.inputs[..], q.total))
    }

    /// The greatest local bytes of `task` over all nodes.
    pub fn max_local_bytes(&self, task: TaskId, index: &LocationIndex) -> u64 {
        let Some(q) = self.queued.get(&task) else {
            return 0;
        };
        let mut best = 0;
        for input in &q.inputs {
            for node in index.holders(input.object) {
                best = best.max(self.local_bytes(task, *node));
            }
        }
        best
    }

    /// Candidates on `node` with sequence number below `bound`, in decreasing score and then
    /// queue order: (task, score). Score classes whose oldest candidate lies beyond the bound are
    /// skipped with one range lookup each, so the cost does not grow with the queue behind the
    /// window.
    pub fn candidates_within(
        &self,
        node: NodeId,
        bound: u64,
    ) -> impl Iterator<Item = (TaskId, Score)> + '_ {
        let order = self.nodes.get(&node).map(|nc| &nc.order);
        // One walk of the set in its order, sought again only to skip the rest of a class: a
        // class that runs out leads straight into the next lower one.
        let mut walk = order.map(|o| o.range((Reverse(FULL), 0, TaskId(0))..));
        std::iter::from_fn(move || -> Option<(TaskId, Score)> {
            loop {
                let &(Reverse(s), seq, t) = walk.as_mut()?.next()?;
                if seq < bound {
                    return Some((t, s));
                }
                // The rest of this class is beyond the window: go to the next lower score.
                let lower = s.checked_sub(1)?;
                walk = order.map(|o| o.range((Reverse(lower), 0, TaskId(0))..));
            }
        })
    }

    /// How many queued tasks read `object`, and the earliest queue position among them.
    pub fn wanted(&self, object: ObjectId) -> Option<(u32, u64)> {
        let tasks = self.waiting.get(&object)?;
        let first = tasks
            .iter()
            .filter_map(|t| self.queued.get(t))
            .map(|q| q.seq)
            .min()?;
        Some((tasks.len() as u32, first))
    }

    /// Queued tasks with no input cached anywhere, in queue order: (seq, task).
    pub fn cold(&self) -> impl Iterator<Item = (u64, TaskId)> + '_ {
        self.cold.iter().copied()
    }

    /// Queued tasks with an input cached somewhere, in queue order: (seq, task).
    pub fn warm(&self) -> impl Iterator<Item = (u64, TaskId)> + '_ {
        self.warm.iter().copied()
    }

    /// Check the invariant in the module doc against `index`.
    pub fn check(&self, index: &LocationIndex) -> Result<(), String> {
        for (task, q) in &self.queued {
            let mut expected: FxHashMap<NodeId, Held> = FxHashMap::default();
            for i in &q.inputs {
                for n in index.holders(i.object) {
                    let h = expected.entry(*n).or_default();
                    h.bytes += i.size;
                    h.inputs += 1;
                }
            }
            for (n, held) in &expected {
                let got = self
                    .nodes
                    .get(n)
                    .and_then(|nc| nc.local.get(task))
                    .copied()
                    .unwrap_or_default();
                if got != *held {
                    return Err(format!("{task} on {n}: {got:?} held, index says {held:?}"));
                }
            }
            let nodes_with_data = expected.len() as u32;
            if nodes_with_data != q.nodes_with_data {
                return Err(format!(
                    "{task}: nodes_with_data {} != {nodes_with_data}",
                    q.nodes_with_data
                ));
            }
            if (nodes_with_data == 0) != self.cold.contains(&(q.seq, *task)) {
                return Err(format!("{task}: cold set disagrees with holders"));
            }
            if (nodes_with_data > 0) != self.warm.contains(&(q.seq, *task)) {
                return Err(format!("{task}: warm set disagrees with holders"));
            }
        }
        for (n, nc) in &self.nodes {
            if nc.local.len() != nc.order.len() {
                return Err(format!("{n}: candidate map and order differ in size"));
            }
            for t in nc.local.keys() {
                if !self.queued.contains_key(t) {
                    return Err(format!("{n}: candidate {t} is not queued"));
                }
            }
        }
        if self.cold.len() + self.warm.len() != self.queued.len() + self.inputless {
            return Err("cold and warm sets do not cover the queue".into());
        }
        Ok(())
    }
}
