//! The scheduler's worker-facing half: sessions coming and going, what workers report (cached
//! and evicted objects, lookups, finished attempts), and what they are told (dispatches, drops,
//! cancels, lookups).

use super::comm::WorkerLink;
use super::lookup::Waiter;
use super::sessions::Session;
use super::tasks::{Listed, Phase};
use super::Scheduler;
use crate::journal::{OutcomeState, TaskOutcome};
use crate::proto::{
    AssignedInput, Assignment, Held, InputSource, LookupResult, TaskReport, ToDispatcher, ToWorker,
};
use diffuse_core::{
    Action, CoreError, NodeId, ObjectId, Outcome, Resources, Source, TaskId, TaskState, Time,
};
use std::time::Instant;

/// For each input as written, its index among the distinct inputs (empty if none repeats).
fn positions(inputs: &[String]) -> Vec<u32> {
    let mut distinct: Vec<&String> = Vec::new();
    let mut pos = Vec::with_capacity(inputs.len());
    for uri in inputs {
        match distinct.iter().position(|d| *d == uri) {
            Some(i) => pos.push(i as u32),
            None => {
                distinct.push(uri);
                pos.push(distinct.len() as u32 - 1);
            }
        }
    }
    if distinct.len() == inputs.len() {
        Vec::new()
    } else {
        pos
    }
}

impl Scheduler {
    pub(super) fn worker_up(&mut self, conn: u64, hello: ToDispatcher, link: WorkerLink) {
        let ToDispatcher::Hello {
            name,
            slots,
            memory,
            gpus,
            disk,
            peer_url,
            held,
            request,
            leaves_in_s,
            eviction,
            cache_quota,
            rack,
            ..
        } = hello
        else {
            return;
        };
        let node = self.sessions.next_node();
        let now = self.now();
        let capacity = Resources {
            cores: slots.max(1),
            memory: memory.unwrap_or(u64::MAX),
            gpus,
            disk: disk.unwrap_or(u64::MAX),
        };
        if let Err(e) = self.core.handle_node_joined_with(node, capacity, now) {
            tracing::error!("worker {name}: {e}");
            return;
        }
        let label = self.node_name(&name);
        let _ = self.core.handle_node_named(node, label);
        let _ = self
            .core
            .handle_node_cache(node, cache_quota, eviction.unwrap_or_default(), now);
        if let Some(r) = rack.as_deref().filter(|r| !r.is_empty()) {
            let rack = self.rack_id(r);
            let _ = self.core.handle_node_rack(node, rack);
        }
        if let Some(s) = leaves_in_s.filter(|s| s.is_finite() && *s >= 0.0) {
            let ends = now + std::time::Duration::from_secs_f64(s.min(1e9));
            self.core.handle_node_deadline(node, Some(ends));
        }
        self.comm.attach(node, link);
        self.comm.send(
            node,
            ToWorker::Welcome {
                node: node.0,
                heartbeat_ms: self.cfg.heartbeat.as_millis() as u64,
            },
        );
        if self.shutting_down {
            self.comm.send(node, ToWorker::Shutdown);
        }
        tracing::info!(worker = %name, slots, peer = %peer_url, "worker joined");
        self.pool_joined(&request);
        self.sessions.insert(
            node,
            Session {
                conn,
                name,
                request,
                peer_url,
                slots,
                last_seen: Instant::now(),
                cache: (cache_quota, 0, 0),
            },
        );
        // Its share of the storage cap reaches it before any task or fetch does.
        self.share_storage_cap();
        self.cached(node, held);
    }

    /// `node` holds these objects. A version not yet known is taken as the current one until a
    /// lookup says otherwise; a copy of another version than the current one is dropped.
    fn cached(&mut self, node: NodeId, held: Vec<Held>) {
        let now = self.now();
        let mut stale = Vec::new();
        for h in held {
            let o = self.object(&h.uri);
            let known = &mut self.versions[o.0 as usize];
            if known.is_empty() {
                *known = h.version.clone();
            }
            if *known == h.version {
                let _ = self.core.handle_object_cached(node, o, now);
                self.handed_off(node, o);
                self.move_ended(node, o);
                self.stage_cached(node, o);
            } else {
                stale.push(h.uri);
            }
        }
        if !stale.is_empty() && self.sessions.contains(&node) {
            self.comm.send(node, ToWorker::Drop { uris: stale });
        }
    }

    pub(super) fn on_worker_message(&mut self, conn: u64, msg: ToDispatcher) {
        let Some(node) = self.sessions.node_of(conn) else {
            // A connection already given up: its results belong to attempts run again elsewhere.
            if let ToDispatcher::Finished(r) = msg {
                tracing::warn!(task = %r.task, attempt = r.attempt, "stale result refused (its worker was given up)");
            }
            return;
        };
        if let Some(s) = self.sessions.get_mut(&node) {
            s.last_seen = Instant::now();
        }
        let now = self.now();
        match msg {
            ToDispatcher::Heartbeat | ToDispatcher::Hello { .. } => {}
            ToDispatcher::Load {
                load1,
                cache_used,
                cache_objects,
            } => {
                let slots = self.sessions.get(&node).map_or(1, |s| s.slots.max(1));
                self.core.handle_node_load(node, load1 / slots as f64);
                if let (Some(s), Some(used)) = (self.sessions.get_mut(&node), cache_used) {
                    s.cache.1 = used;
                    s.cache.2 = cache_objects.unwrap_or(0);
                }
            }
            ToDispatcher::Cached { objects } => self.cached(node, objects),
            ToDispatcher::Evicted { uris } => {
                for uri in uris {
                    if let Some(o) = self.objects.get(&uri) {
                        let _ = self.core.handle_object_evicted(node, *o, now);
                    }
                }
            }
            ToDispatcher::Finished(report) => self.finished(node, report),
            ToDispatcher::LookedUp { id, results } => self.looked_up(node, id, results),
            ToDispatcher::Leaving => self.node_lost(node, "it is stopping", false),
            ToDispatcher::FetchFailed { uri, error } => self.fetch_failed(node, &uri, &error),
            ToDispatcher::Transferred {
                from,
                bytes,
                seconds,
            } => self.transferred(node, from.as_deref(), bytes, seconds),
            ToDispatcher::BadCopy { uri, peer } => self.bad_copy(node, &uri, &peer),
        }
    }

    fn finished(&mut self, node: NodeId, mut report: TaskReport) {
        let Some(t) = self.tasks.id_of(&report.task) else {
            return;
        };
        report.hint_held = self.hint_held(t, node);
        let lost = report
            .lost_input
            .as_ref()
            .and_then(|uri| self.objects.get(uri).copied());
        let outcome = if report.succeeded() {
            Outcome::Succeeded
        } else if let Some(o) = lost {
            Outcome::InputLost(o)
        } else if report.retryable() {
            Outcome::Retryable(report.failure())
        } else {
            Outcome::Failed(report.failure())
        };
        let now = self.now();
        let current = matches!(self.core.task_state(t), Some(TaskState::Running { node: n, attempt, .. }) if n == node && attempt == report.attempt);
        if current && outcome == Outcome::Succeeded {
            // What it wrote to tmp:// is on its worker: readers may now be sent there.
            for k in &report.kept {
                let o = self.object(&k.uri);
                self.versions[o.0 as usize] = k.sha256.clone();
                self.tmp_sizes.insert(o, k.size);
                self.core.handle_intermediate_size(o, k.size);
                let _ = self.core.handle_object_cached(node, o, now);
                self.copy_placed(o);
            }
        }
        let remake = matches!(self.tasks.get(t).phase, Phase::Done(_));
        let result = self
            .core
            .handle_task_finished(t, report.attempt, outcome, now);
        if !report.kept.is_empty() && !matches!(result, Ok(TaskState::Finished(Outcome::Succeeded)))
        {
            // Not a success the core took: what it kept is no one's input.
            if self.sessions.contains(&node) {
                let uris = report.kept.iter().map(|k| k.uri.clone()).collect();
                self.comm.send(node, ToWorker::Drop { uris });
            }
        }
        if remake && result.is_ok() {
            // A producer run again to remake a lost object: its recorded outcome stands.
            tracing::info!(task = %report.task, attempt = report.attempt, "ran again to remake its intermediate objects: {}", if report.succeeded() { "done".to_string() } else { report.failure() });
            self.add_traffic(&report);
            self.progress.attempt_result(
                report.task.clone(),
                report.attempt,
                serde_json::to_string(&report).expect("report serializes"),
            );
            return;
        }
        match result {
            Ok(TaskState::Queued) => {
                // A retryable failure with retries left: the task runs again; this attempt's
                // report is kept with the attempt.
                tracing::info!(task = %report.task, attempt = report.attempt, "failed ({}); retrying", report.failure());
                self.add_traffic(&report);
                self.tasks.list_as(t, Listed::Queued);
                self.progress.attempt_result(
                    report.task.clone(),
                    report.attempt,
                    serde_json::to_string(&report).expect("report serializes"),
                );
            }
            Ok(state) => {
                let st = match state {
                    TaskState::Cancelled => OutcomeState::Cancelled,
                    TaskState::Finished(Outcome::Succeeded) => OutcomeState::Succeeded,
                    _ => OutcomeState::Failed,
                };
                self.add_traffic(&report);
                self.tasks.get_mut(t).phase = Phase::Done(st);
                let o = TaskOutcome {
                    id: report.task.clone(),
                    state: st,
                    attempt: report.attempt,
                    node: self.sessions.name(&node).map(str::to_string),
                    exit_code: report.exit_code,
                    error: report.error.clone(),
                    result_json: serde_json::to_string(&report).expect("report serializes"),
                    finished_at: report.finished_at,
                };
                self.record_outcome(t, o);
                if st == OutcomeState::Succeeded {
                    self.wake_deferred(t);
                }
            }
            Err(CoreError::StaleAttempt { .. })
            | Err(CoreError::UnknownTask(_))
            | Err(CoreError::NotRunning(_)) => {
                tracing::warn!(task = %report.task, attempt = report.attempt, "stale result refused");
            }
            Err(e) => tracing::error!(task = %report.task, "result refused: {e}"),
        }
    }

    fn add_traffic(&mut self, report: &TaskReport) {
        let tr = report.traffic;
        let s = &mut self.status.traffic;
        s.local += tr.local;
        s.peer += tr.peer;
        s.storage += tr.storage;
        s.bytes_local += tr.bytes_local;
        s.bytes_peer += tr.bytes_peer;
        s.bytes_storage += tr.bytes_storage;
        if report.staged_at > 0.0 {
            self.status
                .task_staging_seconds
                .observe(report.staged_at - report.started_at);
            self.status
                .task_run_seconds
                .observe(report.finished_at - report.staged_at);
        }
    }

    /// `node` is gone: lost (`crashed`: its running tasks count a crash) or left cleanly.
    pub(super) fn node_lost(&mut self, node: NodeId, why: &str, crashed: bool) {
        let Some(session) = self.sessions.remove(node) else {
            return;
        };
        self.comm.detach(node);
        self.lookups.node_lost(node);
        self.pool_disconnected(&session);
        self.stage_node_left(node);
        let running = self.core.running_on(node).to_vec();
        if crashed {
            tracing::warn!(worker = %session.name, "worker lost ({why}); its tasks run again elsewhere");
        } else {
            tracing::info!(worker = %session.name, "worker left ({why}); its tasks run again elsewhere");
        }
        let now = self.now();
        let lost = if crashed {
            self.core.handle_node_lost(node, now)
        } else {
            self.core.handle_node_left(node, now)
        };
        let Ok(lost) = lost else { return };
        let limit = self.core.config().crash_limit;
        for t in running {
            if lost.failed.contains(&t) {
                self.finish_without_running(
                    t,
                    OutcomeState::Failed,
                    Some(format!("its worker was lost {limit} times")),
                );
            } else if lost.cancelled.contains(&t) {
                self.finish_without_running(
                    t,
                    OutcomeState::Cancelled,
                    Some("cancelled; its worker was lost while it ran".into()),
                );
            } else if !matches!(self.tasks.get(t).phase, Phase::Done(_)) {
                self.tasks.list_as(t, Listed::Queued);
            }
        }
    }

    pub(super) fn check_heartbeats(&mut self) {
        for node in self.sessions.silent(self.cfg.heartbeat_timeout) {
            self.node_lost(node, "heartbeat timeout", true);
        }
    }

    /// Send waiting lookups to the connected workers.
    pub(super) fn send_lookups(&mut self) {
        // With no worker, an elastic pool grows for these tasks: the core counts them as
        // demand (`handle_waiting_demand`).
        if !self.lookups.has_queued() || self.sessions.is_empty() {
            return;
        }
        let mut workers: Vec<NodeId> = self.sessions.nodes().collect();
        workers.sort();
        self.lookups
            .send(&workers, &mut *self.comm, self.cfg.lookup_timeout);
    }

    /// A worker answered a lookup: record sizes and versions (a changed version invalidates every
    /// cached copy), and let the tasks whose every input is now known move on, in submission
    /// order: into the core's queue, or failed with their first lookup error.
    fn looked_up(&mut self, node: NodeId, id: u64, results: Vec<LookupResult>) {
        let now = self.now();
        let mut ready = Vec::new();
        for (uri, result, waiters) in self.lookups.answered(node, id, results) {
            let o = self.object(&uri);
            let mut waiting = Vec::with_capacity(waiters.len());
            for w in waiters {
                match w {
                    Waiter::Task(t) => waiting.push(t),
                    Waiter::Stage(s) => self.stage_looked_up(s, o, &uri, &result),
                }
            }
            let error = match result {
                Ok((size, version)) => {
                    self.note_version(o, &uri, version, now);
                    for &t in &waiting {
                        if let Some(i) = self.tasks.get_mut(t).inputs.iter_mut().find(|i| i.0 == o)
                        {
                            i.1 = size;
                        }
                    }
                    None
                }
                Err(e) => Some(format!("input {}: {e}", crate::uri::redacted(&uri))),
            };
            for t in waiting {
                if let Phase::Lookup {
                    pending,
                    error: first,
                    ..
                } = &mut self.tasks.get_mut(t).phase
                {
                    *pending -= 1;
                    if first.is_none() {
                        first.clone_from(&error);
                    }
                    if *pending == 0 {
                        ready.push(t);
                    }
                }
            }
        }
        ready.sort();
        for t in ready {
            let Phase::Lookup {
                attempts, error, ..
            } = self.tasks.get(t).phase.clone()
            else {
                continue;
            };
            let _ = attempts;
            match error {
                Some(e) => {
                    // The tasks that depend on it are abandoned (`Action::Abandon`).
                    let _ = self.core.handle_failed_unrun(t, now);
                    self.finish_without_running(t, OutcomeState::Failed, Some(e))
                }
                None => {
                    self.looking_up -= 1;
                    self.tasks.get_mut(t).phase = Phase::Live;
                    let sizes: Vec<(ObjectId, u64)> = self.tasks.get(t).inputs.clone();
                    self.status.demand_bytes += sizes.iter().map(|(_, s)| s).sum::<u64>();
                    if let Err(e) = self.core.handle_inputs_known(t, &sizes, now) {
                        tracing::error!(task = %self.tasks.get(t).def.id, "{e}");
                    }
                }
            }
        }
        self.pump_stages();
    }

    /// The source of `o` is at `version` now; a copy cached at another version is dropped
    /// everywhere.
    fn note_version(&mut self, o: ObjectId, uri: &str, version: String, now: Time) {
        let known = &mut self.versions[o.0 as usize];
        if *known == version {
            return;
        }
        let changed = !known.is_empty();
        *known = version;
        if changed {
            for node in self.core.handle_object_invalidated(o, now) {
                if self.sessions.contains(&node) {
                    self.comm.send(
                        node,
                        ToWorker::Drop {
                            uris: vec![uri.to_string()],
                        },
                    );
                }
            }
        }
    }

    pub(super) fn drain_actions(&mut self) {
        let now = self.now();
        while let Some(action) = self.core.poll_action(now) {
            match action {
                Action::Dispatch(d) => self.dispatch(d.task, d.attempt, d.node, d.inputs),
                Action::Provision { nodes } => self.provision(nodes),
                Action::Release { node, handoff } => self.release(node, handoff),
                Action::Abandon { task, why } => self.abandoned(task, why),
                Action::DropObject { object, nodes } => self.drop_object(object, nodes),
                Action::Replicate { object, from, to } => self.copy_object(object, from, to),
                Action::Prefetch { object, size, node } => self.prefetch_object(object, size, node),
                Action::Evict { node, object } => self.evict_copy(node, object),
                Action::Move {
                    object,
                    size,
                    from,
                    to,
                } => self.move_copy(object, size, from, to),
            }
        }
    }

    fn dispatch(&mut self, t: TaskId, attempt: u32, node: NodeId, inputs: Vec<(ObjectId, Source)>) {
        let task = self.tasks.get(t);
        let assigned = inputs
            .iter()
            .map(|(o, src)| {
                let size = match self.tmp_sizes.get(o) {
                    Some(s) => *s,
                    None => task
                        .inputs
                        .iter()
                        .find(|(x, _)| x == o)
                        .map_or(0, |(_, s)| *s),
                };
                let source = match src {
                    Source::Local => InputSource::Local,
                    Source::Peer(p) => match self.sessions.get(p) {
                        Some(s) => InputSource::Peer {
                            url: s.peer_url.clone(),
                            also: self.other_holders(*o, size, *p, node),
                        },
                        None => InputSource::Storage,
                    },
                    Source::Storage => InputSource::Storage,
                };
                AssignedInput {
                    uri: self.uris[o.0 as usize].clone(),
                    size,
                    version: self.versions[o.0 as usize].clone(),
                    source,
                }
            })
            .collect();
        let a = Assignment::new(
            &task.def,
            attempt,
            assigned,
            self.core.caches_for(t),
            positions(&task.def.inputs),
            self.cfg.task_defaults.task_timeout,
        );
        let Some(s) = self.sessions.get(&node) else {
            return;
        };
        self.progress
            .attempt(task.def.id.clone(), attempt, s.name.clone());
        if !self.comm.send(node, ToWorker::Run(Box::new(a))) {
            // The session is gone; its loss is being reported and will requeue the task.
            tracing::warn!(worker = %s.name, "dispatch to a closed session");
        }
        if !matches!(self.tasks.get(t).phase, Phase::Done(_)) {
            self.tasks.list_as(t, Listed::Running);
        }
    }
}
