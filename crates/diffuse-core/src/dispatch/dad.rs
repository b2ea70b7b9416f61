//! DAD, data-aware dispatching (dad-data-aware-dispatch-gfarm-torque.txt, section IV): each
//! task goes to the free node with the lowest score
//!
//! ```text
//! fileLocality(t, h) = (bytes of t's inputs not on h) / (bytes of t's inputs)     in [0, 1]
//! Score(t, h)        = fileLocality(t, h) * beta + load(h) * (1 - beta)
//! ```
//!
//! (the paper's `(mismatch - match) / (2 * total) + 1/2`, simplified; 0 = every byte local).
//! A free node scoring under the local threshold takes it as a *local* run. Otherwise the task
//! is *delayed* (Delay Scheduling) if some busy node would be local, at most `delay` scheduling
//! rounds; when no node, free or busy, would be local, or the delay is used up, it runs on the
//! free node with the lowest score (*remote*). A round is one dispatch pass: a task is counted
//! once per `now`. `load(h)` is the node's busy slots over its slots. Tasks are taken in queue
//! order within the window; a task without inputs runs at once on the least loaded free node.
//!
//! The core asks per free node; DAD decides per task. A node takes the first task (in queue
//! order) whose chosen node it is, so every decision is the one the paper's task-by-task loop
//! would make. Finding a task's best free node looks only at the free nodes holding its inputs
//! and at the least loaded free node: a node holding none of its bytes scores
//! `beta + load * (1 - beta)`, so the least loaded one is the best of them. For the same reason
//! the local threshold must not exceed `beta` (a node holding nothing is never local).
//!
//! A task may state its own beta (`TaskSpec::dad_beta`, the paper's future work). A task whose
//! beta is under the local threshold waits only for busy nodes holding its data.

use super::policy::DispatchPolicy;
use super::view::SchedView;
use crate::ids::{NodeId, TaskId};
use crate::time::Time;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// DAD's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DadConfig {
    /// Weight of file locality against load, in [0, 1]. The paper's best case: 0.8.
    pub beta: f64,
    /// A node scoring under this is local (`lShold`), in [0, beta].
    pub local_threshold: f64,
    /// Most rounds a task waits for a local node (`wLimit`). The paper's best case: 2.
    pub delay: u32,
    /// Seconds between rounds while a task is delayed: with nothing else happening, the core
    /// asks for a pass this often, so a delay of `delay` rounds lasts at most about
    /// `delay * round_s` seconds (Torque's scheduler iterates on a period too).
    #[serde(default = "one_second")]
    pub round_s: f64,
}

fn one_second() -> f64 {
    1.0
}

impl Default for DadConfig {
    fn default() -> Self {
        DadConfig {
            beta: 0.8,
            local_threshold: 0.5,
            delay: 2,
            round_s: 1.0,
        }
    }
}

impl DadConfig {
    /// Check the ranges; the message names the parameter.
    pub fn check(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.beta) {
            return Err(format!("beta {} is outside [0, 1]", self.beta));
        }
        if !(self.round_s.is_finite() && self.round_s > 0.0) {
            return Err(format!("round {} s must be more than zero", self.round_s));
        }
        if !(0.0..=self.beta).contains(&self.local_threshold) {
            return Err(format!(
                "local threshold {} is outside [0, beta = {}]: a node holding none of a task's data is never local",
                self.local_threshold, self.beta
            ));
        }
        Ok(())
    }
}

/// The DAD policy, with the rounds each delayed task has waited.
#[derive(Clone, Debug)]
pub struct DataAwareDispatch {
    cfg: DadConfig,
    /// Delayed tasks: rounds waited, and the round (`now`) last counted.
    waited: FxHashMap<TaskId, (u32, Time)>,
    /// The last round that delayed a task.
    last_round: Option<Time>,
}

/// What DAD does with one task now.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Decision {
    Run(NodeId),
    Delay,
}

impl DataAwareDispatch {
    /// DAD with `cfg` (checked by the caller).
    pub fn new(cfg: DadConfig) -> Self {
        DataAwareDispatch {
            cfg,
            waited: FxHashMap::default(),
            last_round: None,
        }
    }

    fn score(&self, view: &SchedView<'_>, task: TaskId, total: u64, node: NodeId) -> f64 {
        let local = view.locality.local_bytes(task, node) as f64;
        let file_locality = if total == 0 {
            0.0
        } else {
            1.0 - local / total as f64
        };
        let beta = (view.beta)(task).unwrap_or(self.cfg.beta);
        file_locality * beta + (view.load)(node) * (1.0 - beta)
    }

    /// The least loaded free node `task` may run on: `least_loaded` when it may run there (the
    /// common case), else a scan of the free nodes.
    fn least_loaded_for(
        view: &SchedView<'_>,
        task: TaskId,
        least_loaded: NodeId,
    ) -> Option<NodeId> {
        if (view.fits_on)(task, least_loaded) {
            return Some(least_loaded);
        }
        view.free
            .iter()
            .filter(|n| (view.fits_on)(task, **n))
            .map(|n| ((view.load)(*n), *n))
            .min_by(|a, b| a.partial_cmp(b).expect("loads are numbers"))
            .map(|(_, n)| n)
    }

    /// DAD's decision for `task`, given the free nodes now (None: it fits none of them).
    fn decide(
        &self,
        view: &SchedView<'_>,
        task: TaskId,
        least_loaded: NodeId,
        now: Time,
    ) -> Option<Decision> {
        let least_loaded = Self::least_loaded_for(view, task, least_loaded)?;
        let Some((inputs, total)) = view.locality.inputs(task) else {
            return Some(Decision::Run(least_loaded));
        };
        let mut best = (self.score(view, task, total, least_loaded), least_loaded);
        let mut wait = false;
        for input in inputs {
            for &h in view.index.holders(input.object) {
                let s = self.score(view, task, total, h);
                if view.free.contains(&h) {
                    if !(view.fits_on)(task, h) {
                        continue;
                    }
                    if (s, h) < best {
                        best = (s, h);
                    }
                } else if s < self.cfg.local_threshold {
                    wait = true;
                }
            }
        }
        let (score, node) = best;
        if score < self.cfg.local_threshold {
            return Some(Decision::Run(node));
        }
        // Rounds waited before this one (this round may be counted already).
        let waited = match self.waited.get(&task) {
            Some(&(n, at)) if at == now => n - 1,
            Some(&(n, _)) => n,
            None => 0,
        };
        Some(if wait && waited < self.cfg.delay {
            Decision::Delay
        } else {
            Decision::Run(node)
        })
    }

    /// The first task in the window whose decision is to run on `node`; delayed tasks passed
    /// over count a round.
    fn choose(&mut self, view: &SchedView<'_>, node: NodeId, now: Time) -> Option<TaskId> {
        let least_loaded = view
            .free
            .iter()
            .map(|n| ((view.load)(*n), *n))
            .min_by(|a, b| a.partial_cmp(b).expect("loads are numbers"))?
            .1;
        let mut delayed = Vec::new();
        let mut chosen = None;
        for (seq, task) in view.queue.iter() {
            if seq >= view.window_bound {
                break;
            }
            if !(view.fits)(task) {
                continue;
            }
            match self.decide(view, task, least_loaded, now) {
                Some(Decision::Run(n)) if n == node => {
                    chosen = Some(task);
                    break;
                }
                Some(Decision::Run(_)) | None => {}
                Some(Decision::Delay) => delayed.push(task),
            }
        }
        if self.last_round != Some(now) {
            // A new round: forget the tasks that left the queue without DAD choosing them.
            self.waited.retain(|t, _| view.locality.seq(*t).is_some());
        }
        if !delayed.is_empty() {
            self.last_round = Some(now);
        }
        for task in delayed {
            let w = self.waited.entry(task).or_insert((0, now));
            if w.1 != now || w.0 == 0 {
                *w = (w.0 + 1, now);
            }
        }
        if let Some(t) = chosen {
            self.waited.remove(&t);
        }
        chosen
    }
}

impl DispatchPolicy for DataAwareDispatch {
    // One decision per node: DAD has no separate local pass (its score already prefers local
    // nodes), so the first pass passes.
    fn choose_local(&mut self, _: &SchedView<'_>, _: NodeId, _: Time) -> Option<TaskId> {
        None
    }
    fn choose_any(&mut self, view: &SchedView<'_>, node: NodeId, now: Time) -> Option<TaskId> {
        self.choose(view, node, now)
    }
    fn wake_at(&self) -> Option<Time> {
        if self.waited.is_empty() {
            return None;
        }
        let last = self.last_round?;
        Some(last + std::time::Duration::from_secs_f64(self.cfg.round_s))
    }
}
