//! MixApart's data transfer scheduler (Algorithm 2) in the core: prefetches of the inputs of
//! the tasks expected to run next, within a budget of storage bandwidth.
//!
//! * **Which objects.** The inputs of queued tasks in the window whose data is nowhere (not
//!   held, not on its way: the locality sets' *cold* tasks), at most `lookahead` tasks, jobs in
//!   the job order (FIFO: the oldest task first; Fair: the job holding the fewest cores and
//!   unread prefetches first), and within a job by demand (how many queued tasks read the
//!   object), then queue order.
//! * **Within what.** `CoreConfig::storage_cap`. Every read from storage under way, a task's own or a prefetch, is
//!   budgeted at its job's I/O rate (input bytes over run time of its finished tasks; before
//!   one has finished, the cap over the slots). A prefetch is planned while the budget has
//!   room for its job's rate, so transfers arrive about when the slots free: just in time.
//!   The drivers enforce the cap itself on the bytes.
//! * **Where.** The node with the most room for unread prefetches (`cache_share` of its cache
//!   quota, as [`Core::handle_node_cache`] reported it, less what it holds unread); a node that
//!   never reported a quota gets none.
//! * **Future locality.** A prefetch is an object in transfer to its node (MixApart's "in
//!   progress"), so scoring sends the tasks that read it there, and they join the transfer.

use super::*;
use crate::mixapart::PrefetchStats;

/// The transfer scheduler's state: storage reads under way and what they are budgeted at,
/// prefetched objects not read yet, each job's I/O rate.
#[derive(Clone, Debug, Default)]
pub(super) struct Transfers {
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

impl Transfers {
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
}

impl Core {
    /// What the transfer scheduler did so far.
    pub fn prefetch_stats(&self) -> PrefetchStats {
        self.transfers.stats
    }

    /// Reads from persistent storage under way to each node (prefetches and tasks' own), for
    /// a driver that divides the storage cap among its nodes by demand.
    pub fn storage_reads(&self) -> FxHashMap<NodeId, u32> {
        self.transfers.reads_by_node()
    }

    /// The budgeted rate of the storage reads under way, bytes/s.
    pub fn storage_budget_used(&self) -> u64 {
        self.transfers.used
    }

    /// The prefetch of `object` to `node` failed (or was not carried out): it is no longer on
    /// its way there. Anything else about the object is unchanged; a task already sent to that
    /// node to read it reads it from storage.
    pub fn handle_prefetch_failed(&mut self, node: NodeId, object: ObjectId, _now: Time) {
        if self.end_prefetch(node, object) {
            self.transfers.stats.failed += 1;
            self.transfers.take_unread(node, object);
        }
    }

    /// The transfer of a prefetch ended (landed or failed): budget and in-transfer tier.
    fn end_prefetch(&mut self, node: NodeId, object: ObjectId) -> bool {
        let Some((_, rate)) = self.transfers.prefetches.remove(&(node, object)) else {
            return false;
        };
        self.transfers.used -= rate;
        let key = (node, object);
        if let Some(c) = self.incoming.get_mut(&key) {
            *c -= 1;
            if *c == 0 {
                self.incoming.remove(&key);
                self.effective_remove_if_unused(node, object);
            }
        }
        // The budget has room again.
        self.dirty = true;
        true
    }

    /// `node` reported `object` cached: a prefetch or a task's storage read of it has landed.
    pub(super) fn transfer_landed(&mut self, node: NodeId, object: ObjectId) {
        if self.cfg.storage_cap.is_none() {
            return;
        }
        if self.end_prefetch(node, object) {
            self.transfers.stats.landed += 1;
        }
        for task in self
            .transfers
            .landing
            .remove(&(node, object))
            .unwrap_or_default()
        {
            self.transfers.end_task_read(task, node, object);
            self.dirty = true;
        }
    }

    /// `node` dropped `object`: a prefetched copy nobody read was wasted.
    pub(super) fn transfer_evicted(&mut self, node: NodeId, object: ObjectId) {
        if self.transfers.take_unread(node, object) {
            self.transfers.stats.evicted_unread += 1;
        }
    }

    /// `task` was dispatched to `node` with these sources: book its storage reads, and note
    /// the prefetched objects it reads there.
    pub(super) fn transfers_dispatched(
        &mut self,
        task: TaskId,
        node: NodeId,
        inputs: &[(ObjectId, Source)],
    ) {
        if self.cfg.storage_cap.is_none() {
            return;
        }
        let job = self.tasks[&task].job;
        let rate = self.io_rate(job);
        for (object, source) in inputs {
            match source {
                Source::Local => {
                    if self.transfers.take_unread(node, *object) {
                        self.transfers.stats.read += 1;
                    }
                }
                Source::Storage => {
                    self.transfers
                        .task_reads
                        .entry(task)
                        .or_default()
                        .push((node, *object, rate));
                    self.transfers
                        .landing
                        .entry((node, *object))
                        .or_default()
                        .push(task);
                    self.transfers.used += rate;
                }
                Source::Peer(_) => {}
            }
        }
    }

    /// `task`'s attempt ended: its storage reads are over.
    pub(super) fn transfers_task_ended(&mut self, task: TaskId) {
        for (n, object, rate) in self.transfers.task_reads.remove(&task).unwrap_or_default() {
            self.transfers.used -= rate;
            if let Some(l) = self.transfers.landing.get_mut(&(n, object)) {
                l.retain(|t| *t != task);
                if l.is_empty() {
                    self.transfers.landing.remove(&(n, object));
                }
            }
            self.dirty = true;
        }
    }

    /// `task` succeeded after running since `since`: its job's I/O rate learns from it.
    pub(super) fn learn_io_rate(&mut self, task: TaskId, since: Time, now: Time) {
        if self.cfg.storage_cap.is_none() {
            return;
        }
        let secs = now.since(since).as_secs_f64();
        let t = &self.tasks[&task];
        let bytes: u64 = t.inputs.iter().map(|i| i.size).sum();
        if secs > 0.0 && bytes > 0 {
            let sample = bytes as f64 / secs;
            let r = self.transfers.io_rate.entry(t.job).or_insert(sample);
            *r = 0.75 * *r + 0.25 * sample;
        }
    }

    /// A node left: its prefetches and unread copies are gone.
    pub(super) fn transfers_node_left(&mut self, node: NodeId) {
        let gone: Vec<ObjectId> = self
            .transfers
            .prefetches
            .keys()
            .filter(|(n, _)| *n == node)
            .map(|(_, o)| *o)
            .collect();
        for object in gone {
            let (_, rate) = self
                .transfers
                .prefetches
                .remove(&(node, object))
                .expect("listed");
            self.transfers.used -= rate;
            self.transfers.stats.failed += 1;
        }
        self.transfers.unread.remove(&node);
        self.transfers.unread_bytes.remove(&node);
        self.transfers.quotas.remove(&node);
    }

    /// Whether `node` has prefetches under way or prefetched copies no task has read (an idle
    /// node is not released while it does).
    pub(super) fn holds_prefetches(&self, node: NodeId) -> bool {
        self.transfers.unread.contains_key(&node)
    }

    pub(super) fn transfers_quota(&mut self, node: NodeId, quota: u64) {
        self.transfers.quotas.insert(node, quota);
    }

    /// `job`'s budgeted rate per storage read, bytes/s.
    fn io_rate(&self, job: JobId) -> u64 {
        let cap = self.cfg.storage_cap.unwrap_or(0.0);
        let guess = cap / self.counts.slots.max(1) as f64;
        let r = self.transfers.io_rate.get(&job).copied().unwrap_or(guess);
        (r.min(cap).max(1.0)) as u64
    }

    /// Plan prefetches while the storage budget has room (see the module documentation).
    pub(super) fn plan_prefetches(&mut self) {
        let (Some(cfg), Some(cap)) = (self.cfg.prefetch, self.cfg.storage_cap) else {
            return;
        };
        let cap = cap as u64;
        if !self.tracking || (self.transfers.used > 0 && self.transfers.used >= cap) {
            return;
        }
        let bound = self.window_bound();
        // The objects wanted by the first cold tasks, by job, in queue order.
        let mut by_job: FxHashMap<JobId, Vec<(u64, ObjectId, u64)>> = FxHashMap::default();
        let mut seen: rustc_hash::FxHashSet<ObjectId> = Default::default();
        for (seq, task) in self
            .locality
            .cold()
            .take_while(|(seq, _)| *seq < bound)
            .take(cfg.lookahead)
        {
            if !self.caches_for(task) {
                continue;
            }
            let t = &self.tasks[&task];
            for input in &t.inputs {
                if !self.intermediates.contains_key(&input.object) && seen.insert(input.object) {
                    by_job
                        .entry(t.job)
                        .or_default()
                        .push((seq, input.object, input.size));
                }
            }
        }
        if by_job.is_empty() {
            return;
        }
        // Jobs in the job order.
        let mut order: Vec<(u64, u64, JobId)> = by_job
            .iter()
            .map(|(job, objects)| {
                let first = objects.first().map_or(u64::MAX, |o| o.0);
                let share = match self.cfg.job_order {
                    JobOrder::Fifo => 0,
                    JobOrder::Fair => {
                        let cores = self.jobs.get(job).map_or(0, |j| j.running_cores);
                        let unread = self
                            .transfers
                            .unread
                            .values()
                            .flat_map(|m| m.values())
                            .filter(|(_, j)| j == job)
                            .count() as u64;
                        cores + unread
                    }
                };
                (share, first, *job)
            })
            .collect();
        order.sort_unstable();
        for (_, _, job) in order {
            let mut objects = by_job.remove(&job).expect("listed");
            let demand = |o: ObjectId| self.locality.wanted(o).map_or(0, |w| w.0);
            objects.sort_by_key(|&(seq, o, _)| (std::cmp::Reverse(demand(o)), seq));
            let rate = self.io_rate(job);
            for (_, object, size) in objects {
                if self.transfers.used > 0 && self.transfers.used + rate > cap {
                    return;
                }
                let Some(node) = self.prefetch_target(size, cfg.cache_share) else {
                    return;
                };
                self.start_prefetch(node, object, size, job, rate);
            }
        }
    }

    /// The node with the most room for `size` more unread prefetched bytes.
    fn prefetch_target(&self, size: u64, share: f64) -> Option<NodeId> {
        self.transfers
            .quotas
            .iter()
            .filter(|(n, _)| self.nodes.contains_key(n))
            .filter_map(|(n, quota)| {
                let room = (*quota as f64 * share) as u64;
                let unread = self.transfers.unread_bytes.get(n).copied().unwrap_or(0);
                let left = room.checked_sub(unread)?;
                (left >= size).then_some((left, std::cmp::Reverse(*n)))
            })
            .max()
            .map(|(_, std::cmp::Reverse(n))| n)
    }

    fn start_prefetch(&mut self, node: NodeId, object: ObjectId, size: u64, job: JobId, rate: u64) {
        self.transfers
            .prefetches
            .insert((node, object), (job, rate));
        self.transfers.used += rate;
        self.transfers
            .unread
            .entry(node)
            .or_default()
            .insert(object, (size, job));
        *self.transfers.unread_bytes.entry(node).or_default() += size;
        self.transfers.stats.issued += 1;
        self.transfers.stats.issued_bytes += size;
        *self.incoming.entry((node, object)).or_default() += 1;
        self.effective_add(node, object);
        self.actions
            .push_back(Action::Prefetch { object, size, node });
    }

    /// The (node, object) pairs of the prefetches under way.
    pub(super) fn prefetches_under_way(&self) -> impl Iterator<Item = (NodeId, ObjectId)> + '_ {
        self.transfers.prefetches.keys().copied()
    }

    /// Check the transfer scheduler's bookkeeping.
    pub(super) fn check_transfers(&self) -> Result<(), String> {
        let mut used = 0u64;
        for ((node, object), (_, rate)) in &self.transfers.prefetches {
            used += rate;
            if !self.nodes.contains_key(node) {
                return Err(format!("prefetch of {object} to unknown {node}"));
            }
            if !self.incoming.contains_key(&(*node, *object)) {
                return Err(format!("prefetch of {object} to {node} is not in transfer"));
            }
        }
        for (task, reads) in &self.transfers.task_reads {
            if !matches!(
                self.tasks.get(task).map(|t| &t.phase),
                Some(Phase::Running { .. })
            ) {
                return Err(format!("{task} has storage reads but is not running"));
            }
            used += reads.iter().map(|r| r.2).sum::<u64>();
        }
        if used != self.transfers.used {
            return Err(format!(
                "storage budget used {} != {used} summed",
                self.transfers.used
            ));
        }
        for (node, m) in &self.transfers.unread {
            let sum: u64 = m.values().map(|(b, _)| b).sum();
            if self.transfers.unread_bytes.get(node).copied().unwrap_or(0) != sum {
                return Err(format!("{node}: unread prefetched bytes disagree"));
            }
        }
        Ok(())
    }
}
