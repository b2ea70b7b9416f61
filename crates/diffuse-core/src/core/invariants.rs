//! The core's invariants, checked by tests and the simulator's `--check` mode.

use super::*;

impl Core {
    /// Check every invariant of the core's state; `Err` names the first one broken. Tests and the
    /// simulator's `--check` mode call it after every step.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut queued = 0u64;
        let mut running = 0u64;
        let mut blocked = 0u64;
        self.dataflow.check(&self.tasks, &self.index)?;
        self.check_hints()?;
        self.check_jobs()?;
        for h in self.hooks.iter().flatten() {
            h.check(self)?;
        }
        for (id, t) in &self.tasks {
            match &t.phase {
                Phase::Blocked => blocked += 1,
                Phase::Done => {}
                Phase::Queued { seq } => {
                    queued += 1;
                    if self.queue.get(*seq) != Some(*id) {
                        return Err(format!("{id} queued at {seq} but the queue disagrees"));
                    }
                }
                Phase::Running { node, .. } => {
                    running += 1;
                    let n = self
                        .nodes
                        .get(*node)
                        .ok_or(format!("{id} runs on unknown {node}"))?;
                    if !n.running.contains(id) {
                        return Err(format!("{id} runs on {node}, which does not list it"));
                    }
                }
            }
        }
        if queued != self.counts.queued || queued != self.queue.len() as u64 {
            return Err(format!(
                "queued: {queued} tasks, counter {}, queue {}",
                self.counts.queued,
                self.queue.len()
            ));
        }
        if blocked != self.counts.blocked {
            return Err(format!(
                "blocked: {blocked} tasks, counter {}",
                self.counts.blocked
            ));
        }
        if running != self.counts.running {
            return Err(format!(
                "running: {running} tasks, counter {}",
                self.counts.running
            ));
        }
        self.nodes.check(&self.tasks)?;
        for t in &self.demanding {
            match self.tasks.get(t) {
                Some(e)
                    if matches!(e.phase, Phase::Queued { .. }) && !e.resources.is_one_core() => {}
                _ => {
                    return Err(format!(
                        "{t} listed as demanding but not a queued demanding task"
                    ))
                }
            }
        }
        self.index.check()?;
        self.effective.check()?;
        for (node, object) in self.effective.pairs() {
            if !self.index.holds(node, object) && !self.incoming.contains_key(&(node, object)) {
                return Err(format!(
                    "{node} scored as holding {object}: neither held nor fetched"
                ));
            }
        }
        for (node, object) in self.index.pairs().chain(self.incoming.keys().copied()) {
            if !self.effective.holds(node, object) {
                return Err(format!("{object} on {node} missing from the scored index"));
            }
        }
        let mut fetches: FxHashMap<(NodeId, ObjectId), u32> = FxHashMap::default();
        for t in self.tasks.values() {
            if let Phase::Running { node, fetching, .. } = &t.phase {
                for o in fetching {
                    *fetches.entry((*node, *o)).or_default() += 1;
                }
            }
        }
        for key in self.hooks.iter().flatten().flat_map(|h| h.in_transfer()) {
            *fetches.entry(key).or_default() += 1;
        }
        if fetches != self.incoming {
            return Err("in-transfer counts disagree with running tasks and prefetches".into());
        }
        if self.policies.caching() {
            self.locality.check(&self.effective)?;
        }
        Ok(())
    }

    /// Each job's running cores add up to the busy slots; the job order's state agrees with the
    /// queue.
    fn check_jobs(&self) -> Result<(), String> {
        let held: u64 = self.jobs.values().map(|j| j.running_cores).sum();
        if held != self.nodes.busy() {
            return Err(format!(
                "jobs hold {held} cores, busy slots {}",
                self.nodes.busy()
            ));
        }
        self.policies.check(
            self.tasks
                .values()
                .filter(|t| matches!(t.phase, Phase::Queued { .. }))
                .map(|t| t.job),
        )?;
        let mut unfinished: FxHashMap<JobId, u64> = FxHashMap::default();
        // A producer running again to remake its objects counts as unfinished until it ends.
        for t in self.tasks.values() {
            if !matches!(t.phase, Phase::Done) {
                *unfinished.entry(t.job).or_default() += 1;
            }
        }
        for (job, e) in &self.jobs {
            let n = unfinished.get(job).copied().unwrap_or(0);
            if e.unfinished != n {
                return Err(format!(
                    "{job} counts {} unfinished tasks, has {n}",
                    e.unfinished
                ));
            }
        }
        self.job_order
            .check(&self.queue, &|t| self.tasks[&t].job, self.counts.queued)?;
        Ok(())
    }

    fn check_hints(&self) -> Result<(), String> {
        self.hints
            .check(&self.tasks, &|name| self.has_node_named(name))
    }
}
