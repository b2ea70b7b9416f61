//! The wait queue: tasks in submission order, with removal from anywhere and a fast answer to
//! "is this task within the first W queued?" (the scheduling window of section 2.2).
//!
//! Each queued task holds a sequence number. Slots are grouped in blocks with live counts, so the
//! window boundary (the sequence number of the W-th queued task) costs O(W / BLOCK) block reads
//! plus one block scan, and removal costs O(1). Fully drained blocks at the front are dropped.

use crate::ids::TaskId;
use std::collections::VecDeque;

const BLOCK: usize = 256;

/// Submission-ordered queue of tasks keyed by sequence number.
#[derive(Clone, Debug, Default)]
pub struct WaitQueue {
    /// `slots[i]` holds sequence number `base + i`, or `None` once removed.
    slots: VecDeque<Option<TaskId>>,
    /// Live entries per block of `BLOCK` slots, aligned with `slots`.
    counts: VecDeque<u32>,
    /// Sequence number of `slots[0]`; always a multiple of `BLOCK`.
    base: u64,
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

    /// Append `task`; returns its sequence number.
    pub fn push(&mut self, task: TaskId) -> u64 {
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
    pub fn get(&self, seq: u64) -> Option<TaskId> {
        let i = seq.checked_sub(self.base)? as usize;
        self.slots.get(i).copied().flatten()
    }

    /// Remove the task at `seq`; returns it if it was queued.
    pub fn remove(&mut self, seq: u64) -> Option<TaskId> {
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

    /// The oldest queued task and its sequence number.
    pub fn first(&self) -> Option<(u64, TaskId)> {
        self.iter().next()
    }

    /// Sequence numbers strictly below the returned bound are within the first `w` queued tasks.
    /// If fewer than `w` tasks are queued, every queued task is within the window.
    pub fn window_bound(&self, w: usize) -> u64 {
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
    pub fn iter(&self) -> impl Iterator<Item = (u64, TaskId)> + '_ {
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
        for s in &seqs[0..600] {
            if s % 2 == 0 {
                q.remove(*s);
            }
        }
        // live: odd numbers below 600, then 600..1000
        assert_eq!(q.len(), 700);
        assert_eq!(q.window_bound(0), 1);
        assert_eq!(q.window_bound(10), 21);
        assert_eq!(q.window_bound(300), 600);
        assert_eq!(q.window_bound(700), u64::MAX);
        assert_eq!(q.first(), Some((1, TaskId(1))));
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
