//! FIFO between jobs: the oldest task first, whatever its job (one queue order). While jobs
//! choose dispatch policies of their own, each policy in use chooses among its own jobs'
//! tasks, and a free slot asks the policies in the order of their oldest task in the window,
//! so a job's choice never starves another's older tasks.

use super::share::{JobSharing, Share, ShareView};
use crate::dispatch::PolicyKind;
use crate::ids::{JobId, TaskId};
use crate::queue::WaitQueue;

/// FIFO: no state of its own; the wait queue's order is the order.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Fifo;

impl JobSharing for Fifo {
    fn shares(&self, view: &ShareView<'_>) -> Option<Vec<Share>> {
        if !view.job_policies {
            return None;
        }
        Some(groups_by_age(
            view.queue,
            view.window_bound,
            view.kind_of,
            view.groups,
        ))
    }

    fn rank(&self, jobs: Vec<(JobId, u64)>, _held: &dyn Fn(JobId) -> u64) -> Vec<JobId> {
        let mut order: Vec<(u64, JobId)> = jobs.into_iter().map(|(j, first)| (first, j)).collect();
        order.sort_unstable();
        order.into_iter().map(|(_, j)| j).collect()
    }
}

/// The policy groups (None: the core's own policy) with a task in the window, in the order of
/// their oldest task there; at most `groups` of them (all there are).
fn groups_by_age(
    queue: &WaitQueue,
    window_bound: u64,
    kind_of: &dyn Fn(TaskId) -> Option<PolicyKind>,
    groups: usize,
) -> Vec<Share> {
    let mut out = Vec::with_capacity(groups);
    for (seq, task) in queue.iter() {
        if seq >= window_bound || out.len() == groups {
            break;
        }
        let g = Share::Policy(kind_of(task));
        if !out.contains(&g) {
            out.push(g);
        }
    }
    out
}
