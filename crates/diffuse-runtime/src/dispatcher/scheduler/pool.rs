//! The scheduler's side of the elastic pool: it passes the core's `Provision` and `Release`
//! decisions to the pool task ([`crate::provisioner`]), tells it which requests' workers came
//! and went, and keeps the table of workers by state that `status` and `/metrics` show.

use super::{Scheduler, Session};
use crate::proto::ToWorker;
use crate::provisioner::{PoolCmd, PoolEvent, RequestState};
use diffuse_core::NodeId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tokio::sync::mpsc::UnboundedSender;

/// The link to the pool task, and what the scheduler knows of its requests.
pub struct PoolLink {
    /// Commands to the pool task.
    pub tx: UnboundedSender<PoolCmd>,
    /// `--provisioner`.
    pub provisioner: String,
    /// `--min-workers` and `--max-workers`.
    pub min: u32,
    /// See `min`.
    pub max: u32,
    rows: BTreeMap<String, (Option<String>, RequestState)>,
    last_error: Option<String>,
    never_joined: u64,
    /// A worker was asked for so that inputs can be looked up (`worker_for_lookups`); not
    /// again until a worker connects or that request fails.
    lookup_asked: bool,
}

impl PoolLink {
    /// A link with no request yet.
    pub fn new(tx: UnboundedSender<PoolCmd>, provisioner: &str, min: u32, max: u32) -> PoolLink {
        PoolLink {
            tx,
            provisioner: provisioner.to_string(),
            min,
            max,
            rows: BTreeMap::new(),
            last_error: None,
            never_joined: 0,
            lookup_asked: false,
        }
    }
}

/// One worker as `status` shows it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerView {
    /// Worker name (for a pool request: the request's name).
    pub name: String,
    /// requested, pending, starting, running, idle, lost or releasing.
    pub state: String,
    /// Its resource-manager job id (Slurm job, pid, or the start command's answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

/// The pool as `status` shows it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PoolView {
    /// `static`, `local`, `slurm` or `command`.
    pub provisioner: String,
    /// `--min-workers`.
    pub min_workers: u32,
    /// `--max-workers`.
    pub max_workers: u32,
    /// Requests whose worker never connected (failed submissions, jobs that ended first).
    pub failed_requests: u64,
    /// The last resource-manager error, until a call succeeds again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// The states a worker is counted in, in the order `status` lists them.
pub const WORKER_STATES: [&str; 7] = [
    "requested",
    "pending",
    "starting",
    "running",
    "idle",
    "lost",
    "releasing",
];

impl Scheduler {
    /// The core asks for `nodes` more workers.
    pub(super) fn provision(&mut self, nodes: u32) {
        match &self.pool {
            Some(p) => {
                let _ = p.tx.send(PoolCmd::Acquire(nodes));
            }
            // Static: workers are the ones that connect.
            None => self.core.handle_provision_failed(nodes, self.now()),
        }
    }

    /// The core released an idle worker: it is told to shut down, and its job given back.
    pub(super) fn release(&mut self, node: NodeId) {
        let Some(s) = self.sessions.remove(&node) else {
            return;
        };
        self.conns.remove(&s.conn);
        let _ = s.tx.send(ToWorker::Shutdown);
        tracing::info!(worker = %s.name, "idle worker released");
        if let (Some(p), Some(r)) = (&self.pool, &s.request) {
            let _ = p.tx.send(PoolCmd::Release(r.clone()));
        }
    }

    /// Tasks wait for their inputs to be looked up, and no worker is connected to do it. The
    /// core counts a task as queued only once its inputs are known, so it sees no demand and
    /// asks for nothing: a pool with no worker (at the start, or after every worker was
    /// released in a lull) would wait for ever. Ask the pool for one worker, unless one is on
    /// its way; once its lookups are answered the core sees the queue and asks for the rest.
    pub(super) fn worker_for_lookups(&mut self) {
        let Some(p) = self.pool.as_mut() else { return };
        let coming = p.rows.values().any(|(_, s)| {
            matches!(
                s,
                RequestState::Requested | RequestState::Pending | RequestState::Starting
            )
        });
        if p.lookup_asked || coming {
            return;
        }
        p.lookup_asked = true;
        tracing::info!("tasks wait for input lookups and no worker is connected: asking for one");
        let _ = p.tx.send(PoolCmd::Acquire(1));
    }

    /// A worker is connected: the next time none is, lookups may ask for one again.
    pub(super) fn lookups_have_a_worker(&mut self) {
        if let Some(p) = self.pool.as_mut() {
            p.lookup_asked = false;
        }
    }

    /// A worker of a pool request connected.
    pub(super) fn pool_joined(&mut self, request: &Option<String>) {
        if let (Some(p), Some(r)) = (&self.pool, request) {
            let _ = p.tx.send(PoolCmd::Joined(r.clone()));
        }
    }

    /// A worker of a pool request is gone without being released.
    pub(super) fn pool_disconnected(&mut self, session: &Session) {
        if let (Some(p), Some(r)) = (&self.pool, &session.request) {
            let _ = p.tx.send(PoolCmd::Disconnected(r.clone()));
        }
    }

    pub(super) fn on_pool_event(&mut self, ev: PoolEvent) {
        let now = self.now();
        let Some(p) = self.pool.as_mut() else { return };
        match ev {
            PoolEvent::State {
                request,
                job,
                state,
            } => {
                if state == RequestState::Gone {
                    p.rows.remove(&request);
                } else {
                    p.rows.insert(request, (job, state));
                }
            }
            PoolEvent::NeverJoined { request, reason } => {
                p.never_joined += 1;
                p.lookup_asked = false;
                p.last_error = Some(format!("{request}: {reason}"));
                self.core.handle_provision_failed(1, now);
            }
            PoolEvent::Error(e) => p.last_error = e,
        }
    }

    /// Every worker by name: connected ones as running or idle, the pool's other requests in
    /// their own states.
    pub(super) fn workers_view(&self) -> (Vec<WorkerView>, Option<PoolView>) {
        let mut by_request: BTreeMap<&str, &Session> = BTreeMap::new();
        let mut views = Vec::new();
        for (node, s) in &self.sessions {
            let busy = !self.core.running_on(*node).is_empty();
            let state = if busy { "running" } else { "idle" };
            match &s.request {
                Some(r) => {
                    by_request.insert(r, s);
                }
                None => views.push(WorkerView {
                    name: s.name.clone(),
                    state: state.into(),
                    job: None,
                }),
            }
        }
        let Some(p) = &self.pool else {
            views.sort_by(|a, b| a.name.cmp(&b.name));
            return (views, None);
        };
        for (request, (job, state)) in &p.rows {
            let state = match (state, by_request.get(request.as_str())) {
                (RequestState::Releasing, _) => "releasing",
                (_, Some(_)) => "", // shown below, from its session
                (RequestState::Requested, _) => "requested",
                (RequestState::Pending, _) => "pending",
                (RequestState::Starting, _) => "starting",
                (RequestState::Joined | RequestState::Lost, _) => "lost",
                (RequestState::Gone, _) => continue,
            };
            if !state.is_empty() {
                views.push(WorkerView {
                    name: request.clone(),
                    state: state.into(),
                    job: job.clone(),
                });
            }
        }
        for (node, s) in &self.sessions {
            let Some(r) = &s.request else { continue };
            if p.rows
                .get(r)
                .is_some_and(|(_, st)| *st == RequestState::Releasing)
            {
                continue;
            }
            let busy = !self.core.running_on(*node).is_empty();
            views.push(WorkerView {
                name: s.name.clone(),
                state: if busy { "running" } else { "idle" }.into(),
                job: p.rows.get(r).and_then(|(j, _)| j.clone()),
            });
        }
        views.sort_by(|a, b| a.name.cmp(&b.name));
        let view = PoolView {
            provisioner: p.provisioner.clone(),
            min_workers: p.min,
            max_workers: p.max,
            failed_requests: p.never_joined,
            last_error: p.last_error.clone(),
        };
        (views, Some(view))
    }
}
