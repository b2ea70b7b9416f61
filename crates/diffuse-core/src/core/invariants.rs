//! The core's invariants, checked by tests and the simulator's `--check` mode.

use super::*;

impl Core {
    /// Check every invariant of the core's state; `Err` names the first one broken. Tests and the
    /// simulator's `--check` mode call it after every step.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut queued = 0u64;
        let mut running = 0u64;
        for (id, t) in &self.tasks {
            match &t.phase {
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
                        .get(node)
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
        if running != self.counts.running {
            return Err(format!(
                "running: {running} tasks, counter {}",
                self.counts.running
            ));
        }
        let mut busy = 0u64;
        let mut slots = 0u64;
        for (id, n) in &self.nodes {
            let mut held = Resources {
                cores: 0,
                memory: 0,
                gpus: 0,
                disk: 0,
            };
            for t in &n.running {
                held = held.plus(&self.tasks[t].resources);
            }
            if held != n.used {
                return Err(format!("{id}: holds {held:?}, counted {:?}", n.used));
            }
            if !n.used.fits_in(&n.capacity) {
                return Err(format!("{id}: tasks hold {:?} of {:?}", n.used, n.capacity));
            }
            if (n.used.cores < n.capacity.cores) != self.free.contains(id) {
                return Err(format!("{id}: free set disagrees with its cores"));
            }
            busy += n.used.cores as u64;
            slots += n.capacity.cores as u64;
        }
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
        if busy != self.counts.busy_slots || slots != self.counts.slots {
            return Err("slot counters disagree with nodes".into());
        }
        for n in self.free.iter() {
            if !self.nodes.contains_key(n) {
                return Err(format!("free set lists unknown {n}"));
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
        if fetches != self.incoming {
            return Err("in-transfer counts disagree with running tasks".into());
        }
        if self.policy.uses_locality() {
            self.locality.check(&self.effective)?;
        }
        if let Some(c) = &self.caches {
            c.check(&self.index)?;
        }
        Ok(())
    }
}
