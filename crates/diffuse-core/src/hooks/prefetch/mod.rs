//! MixApart's data transfer scheduler (Algorithm 2) as a hook (`CoreConfig::storage_cap`, and
//! `CoreConfig::prefetch` for the prefetches): prefetches of the inputs of the tasks expected to
//! run next, within a budget of storage bandwidth.
//!
//! * **Which objects.** The inputs of queued tasks in the window whose data is nowhere (not
//!   held, not on its way: the locality sets' *cold* tasks), at most `lookahead` tasks, jobs in
//!   the job order ([`crate::sharing`]; under Fair a job's unread prefetches count with the
//!   cores it holds), and within a job by demand (how many queued tasks read the
//!   object), then queue order.
//! * **Within what.** `CoreConfig::storage_cap`. Every read from storage under way, a task's
//!   own or a prefetch, is budgeted at its job's I/O rate (input bytes over run time of its
//!   finished tasks; before one has finished, the cap over the slots). A prefetch is planned while the budget has
//!   room for its job's rate, so transfers arrive about when the slots free: just in time.
//!   The drivers enforce the cap itself on the bytes.
//! * **Where.** The node with the most room for unread prefetches (`cache_share` of its cache
//!   quota, as `Core::handle_node_cache` reported it, less what it holds unread); a node that
//!   never reported a quota gets none.
//! * **Future locality.** A prefetch is an object in transfer to its node (MixApart's "in
//!   progress"), so scoring sends the tasks that read it there, and they join the transfer.

pub(crate) mod config;

use super::hook::{CoreView, Effects, Gone, Hook, HookReport};
use crate::action::{Action, Source};
use crate::cache::EvictionPolicy;
use crate::hooks::prefetch::config::{PrefetchConfig, PrefetchStats};
use crate::ids::{JobId, NodeId, ObjectId, TaskId};
use crate::time::Time;
use rustc_hash::{FxHashMap, FxHashSet};

/// The transfer scheduler: its settings, the storage reads under way and what they are
/// budgeted at, prefetched objects not read yet, each job's I/O rate.
#[derive(Clone, Debug)]
pub(crate) struct TransferScheduler {
    /// The storage cap, bytes/s: the budget.
    cap: f64,
    /// Prefetching (None: only the budget of tasks' own reads is kept).
    prefetch: Option<PrefetchConfig>,
    /// Prefetches under way: (node, object) -> (job, budgeted bytes/s).
    prefetches: FxHashMap<(NodeId, ObjectId), (JobId, u64)>,
    /// Running tasks' own storage reads not landed yet: task -> (node, object, bytes/s).
    task_reads: FxHashMap<TaskId, Vec<(NodeId, ObjectId, u64)>>,
    /// The tasks whose storage read of (node, object) is under way.
    landing: FxHashMap<(NodeId, ObjectId), Vec<TaskId>>,
    /// Sum of the budgeted rates, bytes/s.
    used: u64,
    /// Prefetched objects no task has read yet, per node: object -> (bytes, job).
    unread: FxHashMap<NodeId, FxHashMap<ObjectId, (u64, JobId)>>,
    unread_bytes: FxHashMap<NodeId, u64>,
    /// Cache quotas the drivers reported.
    quotas: FxHashMap<NodeId, u64>,
    /// Each job's I/O rate, bytes/s (a moving average over its finished tasks).
    io_rate: FxHashMap<JobId, f64>,
    stats: PrefetchStats,
}

impl TransferScheduler {
    /// A scheduler with budget `cap` bytes/s; it prefetches with `prefetch`.
    pub fn new(cap: f64, prefetch: Option<PrefetchConfig>) -> TransferScheduler {
        TransferScheduler {
            cap,
            prefetch,
            prefetches: FxHashMap::default(),
            task_reads: FxHashMap::default(),
            landing: FxHashMap::default(),
            used: 0,
            unread: FxHashMap::default(),
            unread_bytes: FxHashMap::default(),
            quotas: FxHashMap::default(),
            io_rate: FxHashMap::default(),
            stats: PrefetchStats::default(),
        }
    }

    /// Storage reads under way to each node (prefetches and tasks' own).
    fn reads_by_node(&self) -> FxHashMap<NodeId, u32> {
        let mut out: FxHashMap<NodeId, u32> = FxHashMap::default();
        for (n, _) in self.prefetches.keys() {
            *out.entry(*n).or_default() += 1;
        }
        for reads in self.task_reads.values() {
            for (n, _, _) in reads {
                *out.entry(*n).or_default() += 1;
            }
        }
        out
    }

    fn take_unread(&mut self, node: NodeId, object: ObjectId) -> bool {
        let Some(m) = self.unread.get_mut(&node) else {
            return false;
        };
        let Some((bytes, _)) = m.remove(&object) else {
            return false;
        };
        if m.is_empty() {
            self.unread.remove(&node);
        }
        let b = self.unread_bytes.entry(node).or_default();
        *b -= bytes;
        if *b == 0 {
            self.unread_bytes.remove(&node);
        }
        true
    }

    fn end_task_read(&mut self, task: TaskId, node: NodeId, object: ObjectId) {
        let Some(reads) = self.task_reads.get_mut(&task) else {
            return;
        };
        if let Some(p) = reads.iter().position(|r| (r.0, r.1) == (node, object)) {
            let (_, _, rate) = reads.swap_remove(p);
            self.used -= rate;
        }
        if reads.is_empty() {
            self.task_reads.remove(&task);
        }
    }

    /// The transfer of a prefetch ended (landed or failed): budget and in-transfer tier.
    fn end_prefetch(&mut self, node: NodeId, object: ObjectId, fx: &mut Effects) -> bool {
        let Some((_, rate)) = self.prefetches.remove(&(node, object)) else {
            return false;
        };
        self.used -= rate;
        fx.transfer_ended(node, object);
        // The budget has room again.
        fx.wake();
        true
    }

    /// `job`'s budgeted rate per storage read, bytes/s.
    fn job_rate(&self, job: JobId, slots: u64) -> u64 {
        let cap = self.cap;
        let guess = cap / slots.max(1) as f64;
        let r = self.io_rate.get(&job).copied().unwrap_or(guess);
        (r.min(cap).max(1.0)) as u64
    }

    /// The objects wanted by the first cold tasks whose policy caches, by job, in queue order:
    /// (order number, object, size).
    fn cold_objects(
        view: &dyn CoreView,
        lookahead: usize,
    ) -> FxHashMap<JobId, Vec<(u64, ObjectId, u64)>> {
        let bound = view.window_bound();
        let mut by_job: FxHashMap<JobId, Vec<(u64, ObjectId, u64)>> = FxHashMap::default();
        let mut seen: FxHashSet<ObjectId> = Default::default();
        for (seq, task) in view
            .locality()
            .cold()
            .take_while(|(seq, _)| *seq < bound)
            .take(lookahead)
        {
            if !view.caches_for(task) {
                continue;
            }
            let job = view.task_job(task).expect("queued task exists");
            for input in view.task_inputs(task) {
                if !view.is_intermediate(input.object) && seen.insert(input.object) {
                    by_job
                        .entry(job)
                        .or_default()
                        .push((seq, input.object, input.size));
                }
            }
        }
        by_job
    }

    /// Plan prefetches while the storage budget has room (see the module documentation).
    fn plan(&mut self, view: &dyn CoreView, fx: &mut Effects) {
        let Some(cfg) = self.prefetch else {
            return;
        };
        let cap = self.cap as u64;
        if !view.caching_enabled() || (self.used > 0 && self.used >= cap) {
            return;
        }
        let mut by_job = Self::cold_objects(view, cfg.lookahead);
        if by_job.is_empty() {
            return;
        }
        // Jobs in the job order, a job's unread prefetches counted with the cores it holds.
        let jobs: Vec<(JobId, u64)> = by_job
            .iter()
            .map(|(job, objects)| (*job, objects.first().map_or(u64::MAX, |o| o.0)))
            .collect();
        let held = |job: JobId| {
            let unread = self
                .unread
                .values()
                .flat_map(|m| m.values())
                .filter(|(_, j)| *j == job)
                .count() as u64;
            view.job_cores(job) + unread
        };
        let order = view.job_order().rank(jobs, &held);
        let locality = view.locality();
        for job in order {
            let mut objects = by_job.remove(&job).expect("listed");
            let demand = |o: ObjectId| locality.wanted(o).map_or(0, |w| w.0);
            objects.sort_by_key(|&(seq, o, _)| (std::cmp::Reverse(demand(o)), seq));
            let rate = self.job_rate(job, view.slots());
            for (_, object, size) in objects {
                if self.used > 0 && self.used + rate > cap {
                    return;
                }
                let Some(node) = self.target(view, size, cfg.cache_share) else {
                    return;
                };
                self.start(node, object, size, job, rate, fx);
            }
        }
    }

    /// The node with the most room for `size` more unread prefetched bytes.
    fn target(&self, view: &dyn CoreView, size: u64, share: f64) -> Option<NodeId> {
        self.quotas
            .iter()
            .filter(|(n, _)| view.has_node(**n))
            .filter_map(|(n, quota)| {
                let room = (*quota as f64 * share) as u64;
                let unread = self.unread_bytes.get(n).copied().unwrap_or(0);
                let left = room.checked_sub(unread)?;
                (left >= size).then_some((left, std::cmp::Reverse(*n)))
            })
            .max()
            .map(|(_, std::cmp::Reverse(n))| n)
    }

    fn start(
        &mut self,
        node: NodeId,
        object: ObjectId,
        size: u64,
        job: JobId,
        rate: u64,
        fx: &mut Effects,
    ) {
        self.prefetches.insert((node, object), (job, rate));
        self.used += rate;
        self.unread
            .entry(node)
            .or_default()
            .insert(object, (size, job));
        *self.unread_bytes.entry(node).or_default() += size;
        self.stats.issued += 1;
        self.stats.issued_bytes += size;
        fx.in_transfer(node, object);
        fx.act(Action::Prefetch { object, size, node });
    }
}

impl Hook for TransferScheduler {
    fn node_cache(&mut self, node: NodeId, quota: u64, _eviction: EvictionPolicy) {
        self.quotas.insert(node, quota);
    }

    /// A node left: its prefetches and unread copies are gone.
    fn node_left(&mut self, node: NodeId) {
        let gone: Vec<ObjectId> = self
            .prefetches
            .keys()
            .filter(|(n, _)| *n == node)
            .map(|(_, o)| *o)
            .collect();
        for object in gone {
            let (_, rate) = self.prefetches.remove(&(node, object)).expect("listed");
            self.used -= rate;
            self.stats.failed += 1;
        }
        self.unread.remove(&node);
        self.unread_bytes.remove(&node);
        self.quotas.remove(&node);
    }

    /// Whether `node` has prefetched copies no task has read (an idle node is not released
    /// while it does).
    fn keeps_node(&self, node: NodeId) -> bool {
        self.unread.contains_key(&node)
    }

    /// `node` reported `object` cached: a prefetch or a task's storage read of it has landed.
    fn object_cached(
        &mut self,
        _view: &dyn CoreView,
        node: NodeId,
        object: ObjectId,
        fx: &mut Effects,
    ) {
        if self.end_prefetch(node, object, fx) {
            self.stats.landed += 1;
        }
        for task in self.landing.remove(&(node, object)).unwrap_or_default() {
            self.end_task_read(task, node, object);
            fx.wake();
        }
    }

    /// `node` dropped `object`: a prefetched copy nobody read was wasted.
    fn copy_gone(&mut self, node: NodeId, object: ObjectId, why: Gone, _held: bool) {
        let dropped = match why {
            Gone::Reported | Gone::Forgotten | Gone::Invalidated => true,
            // Intermediate objects are never prefetched; a fetch that never landed was a task's.
            Gone::Released | Gone::NeverLanded => false,
        };
        if dropped && self.take_unread(node, object) {
            self.stats.evicted_unread += 1;
        }
    }

    /// `task` was dispatched to `node` with these sources: book its storage reads, and note
    /// the prefetched objects it reads there.
    fn dispatched(
        &mut self,
        view: &dyn CoreView,
        task: TaskId,
        node: NodeId,
        inputs: &[(ObjectId, Source)],
        _caches: bool,
        _fx: &mut Effects,
    ) {
        let job = view.task_job(task).expect("dispatched task exists");
        let rate = self.job_rate(job, view.slots());
        for (object, source) in inputs {
            match source {
                Source::Local => {
                    if self.take_unread(node, *object) {
                        self.stats.read += 1;
                    }
                }
                Source::Storage => {
                    self.task_reads
                        .entry(task)
                        .or_default()
                        .push((node, *object, rate));
                    self.landing.entry((node, *object)).or_default().push(task);
                    self.used += rate;
                }
                Source::Peer(_) => {}
            }
        }
    }

    /// `task` succeeded after running since `since`: its job's I/O rate learns from it.
    fn task_succeeded(&mut self, view: &dyn CoreView, task: TaskId, since: Time, now: Time) {
        let secs = now.since(since).as_secs_f64();
        let bytes: u64 = view.task_inputs(task).iter().map(|i| i.size).sum();
        if secs > 0.0 && bytes > 0 {
            let job = view.task_job(task).expect("finished task exists");
            let sample = bytes as f64 / secs;
            let r = self.io_rate.entry(job).or_insert(sample);
            *r = 0.75 * *r + 0.25 * sample;
        }
    }

    /// `task`'s attempt ended: its storage reads are over.
    fn task_ended(&mut self, task: TaskId, fx: &mut Effects) {
        for (n, object, rate) in self.task_reads.remove(&task).unwrap_or_default() {
            self.used -= rate;
            if let Some(l) = self.landing.get_mut(&(n, object)) {
                l.retain(|t| *t != task);
                if l.is_empty() {
                    self.landing.remove(&(n, object));
                }
            }
            fx.wake();
        }
    }

    /// The prefetch of `object` to `node` failed (or was not carried out): it is no longer on
    /// its way there.
    fn transfer_failed(&mut self, node: NodeId, object: ObjectId, fx: &mut Effects) {
        if self.end_prefetch(node, object, fx) {
            self.stats.failed += 1;
            self.take_unread(node, object);
        }
    }

    fn poll(&mut self, view: &dyn CoreView, fx: &mut Effects) {
        self.plan(view, fx);
    }

    fn in_transfer(&self) -> Vec<(NodeId, ObjectId)> {
        self.prefetches.keys().copied().collect()
    }

    /// The budget is the sum of the reads under way; every prefetch is in transfer to a node
    /// in the pool; every task with reads runs; unread bytes add up.
    fn check(&self, view: &dyn CoreView) -> Result<(), String> {
        let mut used = 0u64;
        for ((node, object), (_, rate)) in &self.prefetches {
            used += rate;
            if !view.has_node(*node) {
                return Err(format!("prefetch of {object} to unknown {node}"));
            }
            if !view.in_transfer(*node, *object) {
                return Err(format!("prefetch of {object} to {node} is not in transfer"));
            }
        }
        for (task, reads) in &self.task_reads {
            if !view.is_running(*task) {
                return Err(format!("{task} has storage reads but is not running"));
            }
            used += reads.iter().map(|r| r.2).sum::<u64>();
        }
        if used != self.used {
            return Err(format!(
                "storage budget used {} != {used} summed",
                self.used
            ));
        }
        for (node, m) in &self.unread {
            let sum: u64 = m.values().map(|(b, _)| b).sum();
            if self.unread_bytes.get(node).copied().unwrap_or(0) != sum {
                return Err(format!("{node}: unread prefetched bytes disagree"));
            }
        }
        Ok(())
    }

    fn report(&self, out: &mut HookReport) {
        out.prefetch = Some(self.stats);
        out.storage_budget_used = self.used;
        out.storage_reads = self.reads_by_node();
    }
}
