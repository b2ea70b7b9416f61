//! The scheduler's side of the elastic pool: it passes the core's `Provision` and `Release`
//! decisions to the pool task ([`crate::provisioner`]), tells it which requests' workers came
//! and went, and keeps the table of workers by state that `status` and `/metrics` show. A
//! released worker first hands its cache off: the core's plan is carried out by the targets
//! fetching from it as from any peer, and it leaves once they have their copies.

use super::comm::Comm;
use super::sessions::{Session, Sessions};
use super::shared::Shared;
use crate::dispatcher::metrics::Histogram;
use crate::proto::{AssignedInput, InputSource, ToWorker};
use crate::provisioner::{PoolCmd, PoolEvent, RequestState};
use diffuse_core::{Core, Handoff, NodeId, ObjectId, Time};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;

/// What the scheduler knows of the pool task and its requests (commands to the pool go through
/// the scheduler's [`Comm`]).
pub struct PoolLink {
    /// `--provisioner`.
    pub provisioner: String,
    /// `--min-workers` and `--max-workers`.
    pub min: u32,
    /// See `min`.
    pub max: u32,
    rows: BTreeMap<String, (Option<String>, RequestState)>,
    last_error: Option<String>,
    never_joined: u64,
    /// Extra jobs (not a request's own) adopted and cancelled, and the last one's message.
    extra: (u64, u64, Option<String>),
    /// Released workers still handing their cache off.
    handing: Vec<Handing>,
    /// Objects handed off and bytes, since the start.
    handed: (u64, u64),
    /// Seconds from asking for each worker to its joining.
    startup: Histogram,
}

/// A released worker whose objects are being pushed to the survivors: it is shut down once
/// every target has reported its copy cached, or at `until`.
struct Handing {
    node: NodeId,
    session: Session,
    /// (target, object, bytes) not yet reported cached.
    waiting: Vec<(NodeId, ObjectId, u64)>,
    until: Instant,
}

impl PoolLink {
    /// A link with no request yet.
    pub fn new(provisioner: &str, min: u32, max: u32) -> PoolLink {
        PoolLink {
            provisioner: provisioner.to_string(),
            min,
            max,
            rows: BTreeMap::new(),
            last_error: None,
            never_joined: 0,
            extra: (0, 0, None),
            handing: Vec::new(),
            handed: (0, 0),
            startup: Histogram::default(),
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
    /// A connected worker's slots, and how many run a task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<(u32, u32)>,
    /// A connected worker's cache: quota, bytes held, objects held (as it last said, every
    /// few seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<(u64, u64, u64)>,
    /// Its warm Python processes: how many, calls run, resident bytes (as it last said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<crate::proto::WarmUse>,
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
    /// Objects released workers handed off to survivors before leaving, and their bytes.
    pub handed_off: u64,
    /// See `handed_off`.
    pub handed_off_bytes: u64,
    /// The last resource-manager error, until a call succeeds again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Jobs under the pool's names that no request owned (a failed `sbatch` that submitted
    /// after all), adopted as workers since the start.
    pub extra_jobs_adopted: u64,
    /// Such jobs cancelled since the start.
    pub extra_jobs_cancelled: u64,
    /// What was done with the last such job, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_extra_job: Option<String>,
    /// Seconds from asking the resource manager for a worker to its joining, over the workers
    /// this dispatcher started (queue wait and start-up; what `diffuse calibrate` writes as
    /// the testbed's `node_startup_s`).
    pub startup_seconds: Histogram,
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

impl PoolLink {
    /// The core released idle worker `node` (its session `s` already closed for the core).
    /// First the objects of its plan are pushed to the survivors (each target fetches from it
    /// as from any peer); then, once every copy is reported cached or the time bound passes, it
    /// is told to shut down and its job given back.
    pub fn release(&mut self, node: NodeId, s: Session, handoff: Vec<Handoff>, sh: &mut Shared) {
        let bound = sh
            .core
            .config()
            .handoff
            .as_ref()
            .map(|h| h.time_bound)
            .unwrap_or_default();
        let mut by_target: BTreeMap<NodeId, Vec<AssignedInput>> = BTreeMap::new();
        let mut waiting = Vec::new();
        for h in handoff {
            if !sh.sessions.contains(&h.to) {
                continue;
            }
            let source = InputSource::Peer {
                url: s.peer_url.clone(),
                also: sh.other_holders(h.object, h.size, node, h.to),
            };
            by_target
                .entry(h.to)
                .or_default()
                .push(sh.objects.input(h.object, h.size, source));
            waiting.push((h.to, h.object, h.size));
        }
        if waiting.is_empty() {
            return finish_release(sh.comm, true, node, s);
        }
        tracing::info!(
            worker = %s.name,
            objects = waiting.len(),
            bytes = waiting.iter().map(|w| w.2).sum::<u64>(),
            "handing its cache off before release"
        );
        for (target, inputs) in by_target {
            sh.comm.send(target, ToWorker::Fetch { inputs });
        }
        self.handing.push(Handing {
            node,
            session: s,
            waiting,
            until: sh.at.instant + bound,
        });
    }

    /// `node` now holds `object`: a hand-off waiting for it is one copy closer to done.
    pub fn handed_off(&mut self, node: NodeId, object: ObjectId, comm: &mut dyn Comm) {
        for h in &mut self.handing {
            if let Some(i) = h
                .waiting
                .iter()
                .position(|(n, o, _)| *n == node && *o == object)
            {
                let (_, _, bytes) = h.waiting.swap_remove(i);
                self.handed.0 += 1;
                self.handed.1 += bytes;
            }
        }
        self.finish(comm, None);
    }

    /// Worker `node` left (released, or lost): copies it was to receive will not be reported,
    /// so no hand-off waits for them (it would hold its worker's job until `--handoff-time`).
    pub fn target_left(&mut self, node: NodeId, comm: &mut dyn Comm) {
        for h in &mut self.handing {
            h.waiting.retain(|(to, _, _)| *to != node);
        }
        self.finish(comm, None);
    }

    /// Release the workers whose hand-off is complete or out of time at `now`.
    pub fn finish_handoffs(&mut self, comm: &mut dyn Comm, now: Instant) {
        self.finish(comm, Some(now));
    }

    /// Release the workers whose hand-off is complete, or (given `now`) out of time.
    fn finish(&mut self, comm: &mut dyn Comm, now: Option<Instant>) {
        let (done, going): (Vec<Handing>, Vec<Handing>) = std::mem::take(&mut self.handing)
            .into_iter()
            .partition(|h| h.waiting.is_empty() || now.is_some_and(|now| now >= h.until));
        self.handing = going;
        for h in done {
            if !h.waiting.is_empty() {
                tracing::info!(worker = %h.session.name, left = h.waiting.len(), "hand-off cut at its time bound");
            }
            finish_release(comm, true, h.node, h.session);
        }
    }

    /// A worker of pool request `request` (if it answers one) connected.
    pub fn joined(&self, request: &Option<String>, comm: &mut dyn Comm) {
        if let Some(r) = request {
            comm.pool(PoolCmd::Joined(r.clone()));
        }
    }

    /// A worker of a pool request is gone without being released.
    pub fn disconnected(&self, session: &Session, comm: &mut dyn Comm) {
        if let Some(r) = &session.request {
            comm.pool(PoolCmd::Disconnected(r.clone()));
        }
    }

    /// News from the pool task.
    pub fn on_event(&mut self, ev: PoolEvent, core: &mut Core, now: Time) {
        match ev {
            PoolEvent::State {
                request,
                job,
                state,
            } => {
                if state == RequestState::Gone {
                    self.rows.remove(&request);
                } else {
                    self.rows.insert(request, (job, state));
                }
            }
            PoolEvent::NeverJoined { request, reason } => {
                self.never_joined += 1;
                self.last_error = Some(format!("{request}: {reason}"));
                core.handle_provision_failed(1, now);
            }
            PoolEvent::Error(e) => self.last_error = e,
            PoolEvent::Extra {
                adopted, message, ..
            } => {
                if adopted {
                    self.extra.0 += 1;
                } else {
                    self.extra.1 += 1;
                }
                self.extra.2 = Some(message);
            }
            PoolEvent::Started { request, seconds } => {
                tracing::info!(request, seconds, "worker joined");
                self.startup.observe(seconds);
            }
        }
    }

    /// The pool's settings and counters.
    fn view(&self) -> PoolView {
        PoolView {
            provisioner: self.provisioner.clone(),
            min_workers: self.min,
            max_workers: self.max,
            failed_requests: self.never_joined,
            handed_off: self.handed.0,
            handed_off_bytes: self.handed.1,
            last_error: self.last_error.clone(),
            extra_jobs_adopted: self.extra.0,
            extra_jobs_cancelled: self.extra.1,
            last_extra_job: self.extra.2.clone(),
            startup_seconds: self.startup.clone(),
        }
    }
}

/// A connected worker's slots and how many its running tasks hold.
fn slot_use(core: &Core, node: NodeId, s: &Session) -> (u32, u32) {
    let held = core.node_used_cores(node);
    (s.slots, held)
}

/// A page of every worker in name order: at most `limit` after the name `after`, and the name
/// to pass as `after` for the next page (None: this is the last). The cursor is a name: of two
/// workers with the same name that fall on a page's edge, the second is not listed.
pub fn workers_page(
    pool: Option<&PoolLink>,
    core: &Core,
    sessions: &Sessions,
    after: Option<&str>,
    limit: usize,
) -> (Vec<WorkerView>, Option<String>) {
    let (mut all, _) = workers_view(pool, core, sessions);
    all.sort_by(|a, b| a.name.cmp(&b.name));
    let start = after.map_or(0, |a| all.partition_point(|w| w.name.as_str() <= a));
    let mut page: Vec<WorkerView> = all.into_iter().skip(start).take(limit + 1).collect();
    let next = (page.len() > limit).then(|| {
        page.truncate(limit);
        page.last().map(|w| w.name.clone()).unwrap_or_default()
    });
    (page, next)
}

/// Every worker by name: connected ones as running or idle, the pool's other requests (if it
/// is elastic) in their own states; and the pool's view.
pub fn workers_view(
    pool: Option<&PoolLink>,
    core: &Core,
    sessions: &Sessions,
) -> (Vec<WorkerView>, Option<PoolView>) {
    let mut by_request: BTreeMap<&str, &Session> = BTreeMap::new();
    let mut views = Vec::new();
    for (node, s) in sessions.iter() {
        let busy = !core.running_on(*node).is_empty();
        let state = if busy { "running" } else { "idle" };
        match &s.request {
            Some(r) => {
                by_request.insert(r, s);
            }
            None => views.push(WorkerView {
                name: s.name.clone(),
                state: state.into(),
                job: None,
                slots: Some(slot_use(core, *node, s)),
                cache: Some(s.cache),
                warm: (s.warm.processes > 0 || s.warm.calls > 0).then_some(s.warm),
            }),
        }
    }
    let Some(p) = pool else {
        views.sort_by(|a, b| a.name.cmp(&b.name));
        return (views, None);
    };
    for (request, (job, state)) in &p.rows {
        let handing = p
            .handing
            .iter()
            .any(|h| h.session.request.as_deref() == Some(request.as_str()));
        let state = match (state, by_request.get(request.as_str())) {
            _ if handing => "releasing",
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
                slots: None,
                cache: None,
                warm: None,
            });
        }
    }
    for (node, s) in sessions.iter() {
        let Some(r) = &s.request else { continue };
        if p.rows
            .get(r)
            .is_some_and(|(_, st)| *st == RequestState::Releasing)
        {
            continue;
        }
        let busy = !core.running_on(*node).is_empty();
        views.push(WorkerView {
            name: s.name.clone(),
            state: if busy { "running" } else { "idle" }.into(),
            job: p.rows.get(r).and_then(|(j, _)| j.clone()),
            slots: Some(slot_use(core, *node, s)),
            cache: Some(s.cache),
            warm: (s.warm.processes > 0 || s.warm.calls > 0).then_some(s.warm),
        });
    }
    views.sort_by(|a, b| a.name.cmp(&b.name));
    (views, Some(p.view()))
}

/// Tell a released worker (`node`) to shut down and close its session, and give its job back
/// to the pool (if the pool is elastic).
pub fn finish_release(comm: &mut dyn Comm, elastic: bool, node: NodeId, s: Session) {
    comm.send(node, ToWorker::Shutdown);
    comm.detach(node);
    tracing::info!(worker = %s.name, "idle worker released");
    if let (true, Some(r)) = (elastic, &s.request) {
        comm.pool(PoolCmd::Release(r.clone()));
    }
}
