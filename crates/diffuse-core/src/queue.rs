//! The wait queue: tasks by priority (higher first) and in submission order within a priority,
//! with removal from anywhere and a fast answer to "is this task within the first W queued?"
//! (the scheduling window of section 2.2).
//!
//! Each queued task holds an *order number*: its priority level in the top 16 bits (the highest
//! priority lowest), its sequence number within the level in the low 48. Order numbers compare as
//! the queue orders tasks, so the rest of the core (the candidate sets of `crate::locality`)
//! orders by them without knowing about priorities. Within a level, slots are grouped in blocks
//! with live counts, so the window boundary (the order number of the W-th queued task) costs
//! O(levels + W / BLOCK) block reads plus one block scan, and removal costs O(1). Fully drained
//! blocks at the front of a level are dropped.

use crate::ids::TaskId;
use std::collections::{BTreeMap, VecDeque};

const BLOCK: usize = 256;

/// Bits of an order number that hold the sequence number within a priority level.
const SEQ_BITS: u32 = 48;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

/// The level of a priority: 0 for the highest (`i16::MAX`).
fn level_of(priority: i16) -> u64 {
    (i16::MAX as i64 - priority as i64) as u64
}

/// Tasks by priority, then in submission order, keyed by order number.
#[derive(Clone, Debug, Default)]
pub struct WaitQueue {
    levels: BTreeMap<u64, Level>,
    len: usize,
}

impl WaitQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of queued tasks.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append `task` at priority 0; returns its order number.
    pub fn push(&mut self, task: TaskId) -> u64 {
        self.push_at(task, 0)
    }

    /// Append `task` behind the tasks of its `priority`; returns its order number.
    pub fn push_at(&mut self, task: TaskId, priority: i16) -> u64 {
        let level = level_of(priority);
        let seq = self.levels.entry(level).or_default().push(task);
        assert!(seq <= SEQ_MASK, "2^48 tasks queued at one priority");
        self.len += 1;
        (level << SEQ_BITS) | seq
    }

    /// The task at order number `ord`, if still queued.
    pub fn get(&self, ord: u64) -> Option<TaskId> {
        self.levels.get(&(ord >> SEQ_BITS))?.get(ord & SEQ_MASK)
    }

    /// Remove the task at `ord`; returns it if it was queued.
    pub fn remove(&mut self, ord: u64) -> Option<TaskId> {
        let task = self
            .levels
            .get_mut(&(ord >> SEQ_BITS))?
            .remove(ord & SEQ_MASK)?;
        self.len -= 1;
        Some(task)
    }

    /// The first queued task and its order number.
    pub fn first(&self) -> Option<(u64, TaskId)> {
        self.iter().next()
    }

    /// Order numbers strictly below the returned bound are within the first `w` queued tasks.
    /// If fewer than `w` tasks are queued, every queued task is within the window.
    pub fn window_bound(&self, w: usize) -> u64 {
        if w >= self.len {
            return u64::MAX;
        }
        let mut remaining = w;
        for (&level, l) in &self.levels {
            if remaining < l.len {
                return (level << SEQ_BITS) | l.window_bound(remaining);
            }
            remaining -= l.len;
        }
        u64::MAX
    }

    /// Queued tasks in order, with their order numbers.
    pub fn iter(&self) -> impl Iterator<Item = (u64, TaskId)> + '_ {
        self.levels
            .iter()
            .flat_map(|(&level, l)| l.iter().map(move |(seq, t)| ((level << SEQ_BITS) | seq, t)))
    }
}

/// The tasks of one priority in submission order, keyed by sequence number. A level is kept
/// when it empties, so its sequence numbers only grow.
#[derive(Clone, Debug, Default)]
struct Level {
    /// `slots[i]` holds sequence number `base + i`, or `None` once removed.
    slots: VecDeque<Option<TaskId>>,
    /// Live entries per block of `BLOCK` slots, aligned with `slots`.
    counts: VecDeque<u32>,
    /// Sequence number of `slots[0]`; always a multiple of `BLOCK`.
    base: u64,
    len: usize,
}

impl Level {
    /// Append `task`; returns its sequence number.
    fn push(&mut self, task: TaskId) -> u64 {
        let seq = self.base + self.slots.len() as u64;
        if self.slots.len().is_multiple_of(BLOCK) {
            self.counts.push_back(0);
        }
        self.slots.push_back(Some(task));
        *self.counts.back_mut().expect("block exists") += 1;
        self.len += 1;
        seq
    }

    /// The task at `seq`, if still queued.
    fn get(&self, seq: u64) -> Option<TaskId> {
        let i = seq.checked_sub(self.base)? as usize;
        self.slots.get(i).copied().flatten()
    }

    /// Remove the task at `seq`; returns it if it was queued.
    fn remove(&mut self, seq: u64) -> Option<TaskId> {
        let i = seq.checked_sub(self.base)? as usize;
        let task = self.slots.get_mut(i)?.take()?;
        self.counts[i / BLOCK] -= 1;
        self.len -= 1;
        self.trim_front();
        Some(task)
    }

    fn trim_front(&mut self) {
        // Drop whole empty blocks from the front, but keep the (possibly partial) last block.
        while self.counts.len() > 1 && self.counts[0] == 0 {
            self.counts.pop_front();
            self.slots.drain(..BLOCK);
            self.base += BLOCK as u64;
        }
        if self.len == 0 && self.counts.len() == 1 && self.slots.len() == BLOCK {
            self.counts.clear();
            self.slots.clear();
            self.base += BLOCK as u64;
        }
    }

    /// Sequence numbers strictly below the returned bound are within the first `w` queued tasks
    /// of the level (`w` < its length).
    fn window_bound(&self, w: usize) -> u64 {
        if w >= self.len {
            return u64::MAX;
        }
        // Find the (w+1)-th live entry: everything before it is in the window.
        let mut remaining = w;
        for (b, &c) in self.counts.iter().enumerate() {
            let c = c as usize;
            if remaining < c {
                let start = b * BLOCK;
                let end = (start + BLOCK).min(self.slots.len());
                for i in start..end {
                    if self.slots[i].is_some() {
                        if remaining == 0 {
                            return self.base + i as u64;
                        }
                        remaining -= 1;
                    }
                }
                unreachable!("block count matches its live slots");
            }
            remaining -= c;
        }
        u64::MAX
    }

    /// Queued tasks in order, with their sequence numbers.
    fn iter(&self) -> impl Iterator<Item = (u64, TaskId)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.map(|t| (self.base + i as u64, t)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_bound_counts_only_live_tasks() {
        let mut q = WaitQueue::new();
        let seqs: Vec<u64> = (0..1000).map(|i| q.push(TaskId(i))).collect();
        assert_eq!(q.window_bound(10), seqs[10]);
        for s in seqs[0..600].iter().step_by(2) {
            q.remove(*s);
        }
        // live: the odd ones below 600, then 600..1000
        assert_eq!(q.len(), 700);
        assert_eq!(q.window_bound(0), seqs[1]);
        assert_eq!(q.window_bound(10), seqs[21]);
        assert_eq!(q.window_bound(300), seqs[600]);
        assert_eq!(q.window_bound(700), u64::MAX);
        assert_eq!(q.first(), Some((seqs[1], TaskId(1))));
    }

    #[test]
    fn higher_priorities_come_first_and_share_the_window() {
        let mut q = WaitQueue::new();
        let low: Vec<u64> = (0..3).map(|i| q.push_at(TaskId(i), -5)).collect();
        let mid: Vec<u64> = (10..13).map(|i| q.push(TaskId(i))).collect();
        let high = q.push_at(TaskId(20), 7);
        let order: Vec<TaskId> = q.iter().map(|(_, t)| t).collect();
        assert_eq!(
            order,
            [20, 10, 11, 12, 0, 1, 2].map(TaskId).to_vec(),
            "priority first, then submission order"
        );
        assert!(
            high < mid[0] && mid[2] < low[0],
            "order numbers compare as the queue"
        );
        assert_eq!(q.first(), Some((high, TaskId(20))));
        assert_eq!(q.window_bound(1), mid[0]);
        assert_eq!(q.window_bound(4), low[0]);
        assert_eq!(q.window_bound(5), low[1]);
        assert_eq!(q.window_bound(7), u64::MAX);
        assert_eq!(q.remove(mid[1]), Some(TaskId(11)));
        assert_eq!(q.window_bound(3), low[0]);
        assert_eq!(q.get(high), Some(TaskId(20)));
        assert_eq!(q.get(mid[1]), None);
        assert_eq!(q.len(), 6);
        // i16's whole range keeps its order.
        let top = q.push_at(TaskId(30), i16::MAX);
        let bottom = q.push_at(TaskId(31), i16::MIN);
        assert_eq!(q.first(), Some((top, TaskId(30))));
        assert_eq!(q.iter().last(), Some((bottom, TaskId(31))));
    }

    #[test]
    fn drained_queue_keeps_sequence_increasing() {
        let mut q = WaitQueue::new();
        let mut last = None;
        for round in 0..5 {
            let seqs: Vec<u64> = (0..300).map(|i| q.push(TaskId(round * 1000 + i))).collect();
            if let Some(l) = last {
                assert!(seqs[0] > l);
            }
            last = seqs.last().copied();
            for s in seqs {
                assert!(q.remove(s).is_some());
            }
            assert!(q.is_empty());
            assert_eq!(q.first(), None);
        }
    }
}
