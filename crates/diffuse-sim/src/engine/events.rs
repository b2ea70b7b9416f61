//! The simulator's clock: what is due when ([`Ev`]), in a time-ordered queue ([`Events`]) that
//! breaks ties by the order events were scheduled.

use diffuse_core::{NodeId, TaskId, Time};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Something due at a virtual time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Ev {
    /// The workload's next arrivals are due.
    Arrival,
    /// A dispatch reaches its node.
    Deliver(TaskId),
    /// Input `i` of a task starts moving (after its latency).
    FlowStart(TaskId, u32),
    /// A task's program ends.
    ComputeDone(TaskId),
    /// A provisioned node is up.
    NodeUp(NodeId),
    /// A second of the time series ends.
    Sample,
    /// A hand-off push starts moving (after the peer latency).
    PushStart(u64),
    /// A released node's time bound for its pushes is up.
    HandoffDeadline(NodeId),
    /// A prefetch starts moving (after the storage latency).
    PrefetchStart(u64),
    /// A 2Mark move starts (after the peer latency).
    MoveStart(u64),
}

/// Events by time, then by the order they were scheduled.
#[derive(Default)]
pub(super) struct Events {
    heap: BinaryHeap<Reverse<(Time, u64, Ev)>>,
    seq: u64,
}

impl Events {
    /// Schedule `ev` at `t`.
    pub(super) fn push(&mut self, t: Time, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, ev)));
    }

    /// When the earliest event is due.
    pub(super) fn next_time(&self) -> Option<Time> {
        self.heap.peek().map(|Reverse((t, _, _))| *t)
    }

    /// The earliest event if it is due by `now`, taken off the queue.
    pub(super) fn pop_due(&mut self, now: Time) -> Option<Ev> {
        let Reverse((when, _, ev)) = *self.heap.peek()?;
        if when > now {
            return None;
        }
        self.heap.pop();
        Some(ev)
    }
}
