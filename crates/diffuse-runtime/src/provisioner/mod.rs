//! The elastic pool, live: workers acquired from a resource manager as the queue grows and
//! given back when idle (the data-diffusion paper's dynamic resource provisioner).
//!
//! The scheduling core decides *how many* workers to ask for and *which* idle one to release
//! (`Action::Provision`, `Action::Release`); this module carries the decisions out on a
//! resource manager: [`local`] processes, [`slurm`] batch jobs, or a user's [`command`]s. Each
//! is a [`ResourceManager`] (submit, list, cancel) built in one place, [`Backend::build`]; what
//! to make of what it answers is the pool's, the same for every backend that lists its jobs the
//! same way ([`Listing`]).
//!
//! It runs as one task on the dispatcher's async runtime, apart from the scheduler thread: a
//! slow or hung `sbatch` or `squeue` delays other resource-manager calls, never a dispatch.
//! The scheduler sends it [`PoolCmd`]s; it answers with [`PoolEvent`]s through an [`EventSink`]
//! (the dispatcher wraps them into the scheduler's messages), so the pool knows nothing of the
//! scheduler. Every request has a name (`<prefix>-<n>`); the worker it starts carries that name
//! in its hello (`DIFFUSE_POOL_REQUEST`), which is how a joining worker is matched to its job.
//!
//! Limits hold whatever the order of events: a request counts against `--max-workers` from
//! the moment it is made until the resource manager shows its job gone (a released worker's
//! job still counts while it ends), and against `--max-pending` until its job runs.
//! Acquisitions beyond either wait in `wanted` and go out as room appears. A job under the
//! pool's names that is not a request's own (a failed `sbatch` that submitted after all) is
//! adopted or cancelled as soon as the resource manager shows it ([`reconcile`]).
//!
//! | module | what it decides |
//! |---|---|
//! | this module | [`Pool`]: the requests, the limits, what to ask of the backend and when |
//! | [`backend`] | what the pool asks of a backend ([`ResourceManager`]) and how it can follow its jobs ([`Listing`]) |
//! | [`settings`] | the pool's settings ([`PoolConfig`]) and which backend ([`Backend`]), built where |
//! | [`messages`] | what the pool and the scheduler say to each other ([`PoolCmd`], [`PoolEvent`]), where a request stands ([`RequestState`]) |
//! | [`job`] | what a worker's job runs ([`Launch`]), where it stands ([`RmState`]), a job as listed ([`Job`]) |
//! | [`rm`] | running a resource-manager command: time limit, retries |
//! | [`reconcile`] | what to do with a job under the pool's names that no request owns |
//! | [`ledger`] | requests written ahead of their submission: never a name twice, nothing new while an earlier run's submission is in doubt |
//! | [`local`], [`slurm`], [`command`] | the backends: processes here, Slurm batch jobs, a user's commands |
//! | `tests` | the pool's decisions per kind of [`Listing`], on a scripted backend |
//!
//! A new backend (PBS, say) is a file beside `slurm.rs` with its settings and an `impl
//! ResourceManager`, a [`Backend`] variant with its name, programs and one line in
//! [`Backend::build`], and its `--provisioner` value and options in the CLI
//! (docs/provisioning.md, "Adding a backend").

pub mod backend;
pub mod command;
pub mod job;
pub mod ledger;
pub mod local;
pub mod messages;
pub mod reconcile;
pub mod rm;
pub mod settings;
pub mod slurm;
#[cfg(test)]
mod tests;

pub use backend::{Listing, ResourceManager};
pub use job::{Job, Launch, RmState};
pub use messages::{EventSink, PoolCmd, PoolEvent, RequestState};
pub use settings::{Backend, PoolConfig};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How often the live dispatcher's core reviews the pool (asks for workers, releases idle
/// ones): `DynamicConfig::check_interval` of every elastic pool, and of the simulation of a
/// task file (`diffuse sim run`), which follows the live dispatcher.
pub const CHECK_INTERVAL: Duration = Duration::from_millis(500);

struct Request {
    job: Option<String>,
    state: RequestState,
    since: Instant,
    joined_ever: bool,
    /// When this pool asked for it (None: adopted from an earlier run).
    asked: Option<Instant>,
    /// When it was last told to stop (released or lost), and whether it was killed since.
    stopping: Option<(Instant, bool)>,
    /// Listings in a row that did not show its job (gone at the second; [`Listing::Named`]).
    missed: u8,
    /// Whether it stands for one of the workers the scheduler asked for (`wanted`): one the
    /// pool submitted does; an adopted one does once it is taken off `wanted`, at adoption or,
    /// for an earlier run's (adopted before anything was asked), when its worker joins, as the
    /// core counts every joining worker as one it asked for.
    counted: bool,
}

/// The pool's state, owned by its task.
pub struct Pool {
    cfg: PoolConfig,
    rm: Box<dyn ResourceManager>,
    requests: BTreeMap<String, Request>,
    wanted: u32,
    next: u64,
    events: EventSink,
    /// No submission before this (after one failed).
    quiet_until: Instant,
    failures_in_a_row: u32,
    last_poll: Option<Instant>,
    /// Whether the jobs of an earlier run were looked for ([`Listing::Named`]): until a look
    /// succeeds, every job under the pool's names is taken as one of them.
    adopted: bool,
    /// Extra jobs already cancelled (cleared of those the listing no longer shows), so that
    /// each is cancelled and counted once.
    cancelled: std::collections::BTreeSet<String>,
    /// Every request written down before it is submitted.
    ledger: ledger::Ledger,
    /// Requests an earlier run was submitting when it stopped, not yet seen as jobs: nothing new
    /// is submitted until each shows up or the time (`until`) has passed.
    in_doubt: Vec<String>,
    /// See `in_doubt`.
    doubt_until: Option<Instant>,
}

impl Pool {
    /// Set up the backend: write its files, check its commands exist. An error names the flag
    /// or the command at fault.
    pub fn new(cfg: PoolConfig, events: EventSink) -> Result<Pool, String> {
        std::fs::create_dir_all(&cfg.state_dir)
            .map_err(|e| format!("cannot create {}: {e}", cfg.state_dir.display()))?;
        cfg.backend.check()?;
        let rm = cfg.backend.build(&cfg.state_dir, &cfg.prefix, &cfg.rm)?;
        Ok(Pool::with_backend(cfg, rm, events))
    }

    /// A pool on a backend already built (`cfg.backend` only names it).
    fn with_backend(cfg: PoolConfig, rm: Box<dyn ResourceManager>, events: EventSink) -> Pool {
        Pool {
            rm,
            requests: BTreeMap::new(),
            wanted: 0,
            next: 1,
            events,
            quiet_until: Instant::now(),
            failures_in_a_row: 0,
            last_poll: None,
            adopted: false,
            cancelled: Default::default(),
            ledger: ledger::Ledger::new(&cfg.state_dir),
            in_doubt: Vec::new(),
            doubt_until: None,
            cfg,
        }
    }

    /// Serve the scheduler's commands until it goes away or says shut down; then give every
    /// worker back.
    pub async fn run(mut self, mut rx: mpsc::UnboundedReceiver<PoolCmd>) {
        self.adopt().await;
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                c = rx.recv() => match c {
                    None => { self.shutdown().await; return; }
                    Some(PoolCmd::Shutdown(done)) => {
                        self.shutdown().await;
                        let _ = done.send(());
                        return;
                    }
                    Some(c) => self.on_cmd(c).await,
                },
                _ = tick.tick() => self.tick().await,
            }
        }
    }

    /// Jobs of this dispatcher left by an earlier run of it (a [`Listing::Named`] backend
    /// shows them): counted and followed, their workers welcome (one job per name: a second is
    /// cancelled). Requests are numbered after the highest the earlier runs wrote down; one
    /// they were submitting when they stopped and that has no job yet is waited for
    /// ([`ledger`]).
    async fn adopt(&mut self) {
        let window = self.cfg.rm.timeout + slurm::SETTLE;
        let earlier = self.ledger.earlier(&self.cfg.prefix, window);
        self.next = self.next.max(earlier.next);
        if !matches!(self.rm.listing(), Listing::Named { .. }) {
            return;
        }
        let listed: Option<Vec<String>> = match self.rm.list().await {
            Ok(jobs) => {
                self.adopted = true;
                let names = jobs.iter().map(|j| j.name.clone()).collect();
                let extras = reconcile::reconcile(&BTreeMap::new(), &jobs, u32::MAX);
                self.carry_out(extras, "of an earlier run").await;
                Some(names)
            }
            Err(e) => {
                tracing::warn!("cannot look for the worker jobs of an earlier run yet: {e}");
                self.error(Some(format!("cannot follow worker jobs: {e}")));
                None
            }
        };
        let mut wait = Duration::ZERO;
        for (request, ago) in earlier.recent {
            if listed.as_ref().is_some_and(|l| l.contains(&request)) {
                continue;
            }
            wait = wait.max(window.saturating_sub(ago));
            self.in_doubt.push(request);
        }
        if !self.in_doubt.is_empty() {
            tracing::warn!(
                requests = ?self.in_doubt,
                "the earlier run was submitting these when it stopped and no job shows them yet: \
                 nothing new is submitted until they show up or {wait:?} have passed"
            );
            self.doubt_until = Some(Instant::now() + wait);
        }
    }

    /// Whether a submission of an earlier run is still in doubt (see [`ledger`]): those that
    /// showed up as requests are no longer; past the time, none is.
    fn in_doubt(&mut self) -> bool {
        let Some(until) = self.doubt_until else {
            return false;
        };
        let requests = &self.requests;
        self.in_doubt.retain(|r| !requests.contains_key(r));
        if self.in_doubt.is_empty() || Instant::now() >= until {
            if !self.in_doubt.is_empty() {
                tracing::info!(
                    requests = ?self.in_doubt,
                    "no job showed up for the earlier run's last submissions: given up"
                );
            }
            self.in_doubt.clear();
            self.doubt_until = None;
            return false;
        }
        true
    }

    /// Adopt or cancel extra jobs, saying so in the log and to the scheduler (`diffuse status`).
    async fn carry_out(&mut self, extras: Vec<reconcile::Extra>, whose: &str) {
        for extra in extras {
            // An earlier run's submission in doubt has shown up.
            let (reconcile::Extra::Adopt { name, .. } | reconcile::Extra::Cancel { name, .. }) =
                &extra;
            self.in_doubt.retain(|r| r != name);
            match extra {
                reconcile::Extra::Adopt { job, name, state } => {
                    let state = RequestState::of_live_job(&state);
                    if let Some(n) = name
                        .strip_prefix(&self.cfg.prefix)
                        .and_then(|r| r.strip_prefix('-'))
                        .and_then(|n| n.parse::<u64>().ok())
                    {
                        self.next = self.next.max(n + 1);
                    }
                    let counted = self.wanted > 0;
                    self.wanted = self.wanted.saturating_sub(1);
                    let message = format!("adopted worker job {job} ({name}) {whose}");
                    tracing::warn!(request = name, job, "{message}");
                    self.set(&name, Some(job.clone()), state);
                    if let Some(r) = self.requests.get_mut(&name) {
                        r.counted = counted;
                    }
                    self.extra(job, name, true, message);
                }
                reconcile::Extra::Cancel { job, name, why } => {
                    if self.cancelled.contains(&job) {
                        continue; // cancelled already, still ending
                    }
                    let launch = self.cfg.launch(&name);
                    match self.rm.cancel(&name, &job, &launch, false).await {
                        Ok(()) => {
                            let message = format!("cancelled worker job {job}: {why}");
                            tracing::warn!(request = name, job, "{message}");
                            self.cancelled.insert(job.clone());
                            self.extra(job, name, false, message);
                        }
                        Err(e) => {
                            // Asked again at the next look.
                            let message = format!("cannot cancel worker job {job} ({why}): {e}");
                            tracing::warn!(request = name, job, "{message}");
                            self.error(Some(message));
                        }
                    }
                }
            }
        }
    }

    fn extra(&self, job: String, name: String, adopted: bool, message: String) {
        (self.events)(PoolEvent::Extra {
            job,
            name,
            adopted,
            message,
        });
    }

    async fn on_cmd(&mut self, c: PoolCmd) {
        match c {
            PoolCmd::Acquire(n) => {
                self.wanted += n;
                self.submit_what_fits().await;
            }
            PoolCmd::Joined(r) => {
                if let Some(req) = self.requests.get_mut(&r) {
                    if let (false, Some(asked)) = (req.joined_ever, req.asked) {
                        (self.events)(PoolEvent::Started {
                            request: r.clone(),
                            seconds: asked.elapsed().as_secs_f64(),
                        });
                    }
                    req.joined_ever = true;
                    req.stopping = None;
                    if !req.counted {
                        req.counted = true;
                        self.wanted = self.wanted.saturating_sub(1);
                    }
                    if req.state != RequestState::Releasing {
                        self.set_state(&r, RequestState::Joined);
                    }
                }
            }
            PoolCmd::Disconnected(r) => {
                if let Some(req) = self.requests.get_mut(&r) {
                    if req.state == RequestState::Joined {
                        req.stopping = Some((Instant::now(), false));
                        self.set_state(&r, RequestState::Lost);
                    }
                }
            }
            PoolCmd::Release(r) => {
                if let Some(req) = self.requests.get_mut(&r) {
                    if req.state != RequestState::Gone {
                        req.stopping = Some((Instant::now(), false));
                        self.set_state(&r, RequestState::Releasing);
                    }
                }
            }
            PoolCmd::Shutdown(_) => unreachable!("handled by run"),
        }
    }

    fn alive(&self) -> u32 {
        self.requests
            .values()
            .filter(|r| r.state != RequestState::Gone)
            .count() as u32
    }

    fn pending(&self) -> u32 {
        self.requests
            .values()
            .filter(|r| matches!(r.state, RequestState::Requested | RequestState::Pending))
            .count() as u32
    }

    /// Submit what is wanted while the limits allow and no failure asks for quiet: one request
    /// per call, or up to the backend's group size in one (a Slurm job array).
    async fn submit_what_fits(&mut self) {
        if self.in_doubt() {
            return;
        }
        while self.wanted > 0
            && self.alive() < self.cfg.max_workers
            && self.pending() < self.cfg.max_pending
            && Instant::now() >= self.quiet_until
        {
            let n = self
                .wanted
                .min(self.cfg.max_workers - self.alive())
                .min(self.cfg.max_pending - self.pending())
                .min(self.rm.group_size().max(1));
            self.wanted -= n;
            let first = self.next;
            self.next += u64::from(n);
            let requests: Vec<String> = (first..self.next)
                .map(|k| format!("{}-{k}", self.cfg.prefix))
                .collect();
            for request in &requests {
                self.set(request, None, RequestState::Requested);
                if let Some(r) = self.requests.get_mut(request) {
                    r.asked = Some(Instant::now());
                    r.counted = true;
                }
            }
            if let Err(e) = self.ledger.submitting(&requests) {
                tracing::warn!("cannot write the requests down before submitting them: {e}");
            }
            let answer = if let [request] = &requests[..] {
                let launch = self.cfg.launch(request);
                self.rm.submit(request, &launch).await.map(|job| vec![job])
            } else {
                let launch = self.cfg.launch_group(first);
                self.rm.submit_group(&requests, &launch).await
            };
            match answer {
                Ok(jobs) => {
                    self.failures_in_a_row = 0;
                    self.error(None);
                    for (request, (job, state)) in requests.iter().zip(jobs) {
                        tracing::info!(
                            request,
                            job,
                            backend = self.cfg.backend.name(),
                            "worker requested"
                        );
                        self.set(request, Some(job), RequestState::of_live_job(&state));
                    }
                }
                Err(e) => {
                    self.failures_in_a_row += 1;
                    let pause = Duration::from_secs(1 << self.failures_in_a_row.min(6));
                    self.quiet_until = Instant::now() + pause;
                    let what = match requests.len() {
                        1 => "a worker".to_string(),
                        n => format!("{n} workers"),
                    };
                    tracing::warn!(
                        first = requests[0],
                        "cannot acquire {what}: {e}; next try in {pause:?}"
                    );
                    self.error(Some(format!("cannot acquire {what}: {e}")));
                    for request in &requests {
                        self.gone(request, Some(e.clone()));
                    }
                }
            }
        }
    }

    async fn tick(&mut self) {
        self.submit_what_fits().await;
        self.follow_jobs().await;
        let now = Instant::now();
        let mut to_stop = Vec::new();
        for (name, r) in &self.requests {
            let overdue = match (r.state, r.stopping) {
                (RequestState::Starting, _) => {
                    now.duration_since(r.since) >= self.cfg.start_timeout
                }
                (RequestState::Lost, Some((t, false))) => {
                    now.duration_since(t) >= self.cfg.lost_grace
                }
                (RequestState::Releasing | RequestState::Lost, Some((t, killed))) => {
                    now.duration_since(t) >= self.cfg.release_grace * (1 + killed as u32)
                }
                _ => false,
            };
            if overdue {
                to_stop.push(name.clone());
            }
        }
        for name in to_stop {
            self.stop(&name).await;
        }
    }

    /// Cancel a job that overstayed: a worker that never connected, or did not leave when told
    /// (or stayed away). Killed harder the second time.
    async fn stop(&mut self, name: &str) {
        let Some(r) = self.requests.get_mut(name) else {
            return;
        };
        let force = matches!(r.stopping, Some((_, true)));
        let never = r.state == RequestState::Starting;
        r.stopping = Some((Instant::now(), true));
        if never {
            r.state = RequestState::Releasing;
        }
        if let Err(e) = self.cancel(name, force).await {
            tracing::warn!(request = name, "cannot stop its job: {e}");
            self.error(Some(format!("cannot stop {name}: {e}")));
        }
        if never {
            tracing::warn!(
                request = name,
                "its worker did not connect within {:?}; job cancelled",
                self.cfg.start_timeout
            );
            (self.events)(PoolEvent::NeverJoined {
                request: name.to_string(),
                reason: format!(
                    "its worker did not connect within {:?}",
                    self.cfg.start_timeout
                ),
            });
            if let Some(r) = self.requests.get_mut(name) {
                r.joined_ever = true; // counted once
            }
        }
        // Nothing follows an unlisted backend's jobs (a user's commands): once stopped they are
        // gone.
        if self.rm.listing() == Listing::Unlisted {
            self.gone(name, None);
        }
    }

    /// Ask the resource manager where the jobs stand: every tick for a backend that lists its
    /// own jobs, each `poll_interval` for one that lists by name (and reconciled), never for an
    /// unlisted one.
    async fn follow_jobs(&mut self) {
        let listing = self.rm.listing();
        let states: BTreeMap<String, RmState> = match listing {
            Listing::Unlisted => return,
            Listing::Own => match self.rm.list().await {
                Ok(jobs) => jobs.into_iter().map(|j| (j.name, j.state)).collect(),
                Err(e) => {
                    self.error(Some(format!("cannot follow worker jobs: {e}")));
                    return;
                }
            },
            Listing::Named { .. } => match self.reconciled_states().await {
                Some(states) => states,
                None => return,
            },
        };
        let names: Vec<String> = self
            .requests
            .iter()
            .filter(|(_, r)| !matches!(r.state, RequestState::Requested | RequestState::Gone))
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            let missed = match states.get(&name) {
                None => self.requests.get_mut(&name).map_or(0, |r| {
                    r.missed = r.missed.saturating_add(1);
                    r.missed
                }),
                Some(_) => {
                    if let Some(r) = self.requests.get_mut(&name) {
                        r.missed = 0;
                    }
                    0
                }
            };
            match (states.get(&name), listing) {
                (Some(RmState::Pending), _) => {}
                (Some(RmState::Running), _)
                    if self.requests[&name].state == RequestState::Pending =>
                {
                    self.set_state(&name, RequestState::Starting);
                }
                (Some(RmState::Running), _) => {}
                (Some(RmState::Ended(why)), _) => self.gone(&name, Some(why.clone())),
                // A listing by name forgets ended jobs after a while (Slurm's MinJobAge, 300 s by
                // default); local ended ones were reported once. Two looks in a row, so that a
                // job missing from one answer is not given up (and then cancelled as an extra
                // when it shows up).
                (None, Listing::Named { command }) if missed >= 2 => {
                    self.gone(&name, Some(format!("its job is no longer in {command}")))
                }
                (None, _) => {}
            }
        }
    }

    /// A [`Listing::Named`] backend's jobs, listed each `poll_interval` (None before then, or
    /// when the listing fails): the extras among them adopted or cancelled, then where each
    /// request's own job stands.
    async fn reconciled_states(&mut self) -> Option<BTreeMap<String, RmState>> {
        if self
            .last_poll
            .is_some_and(|t| t.elapsed() < self.cfg.poll_interval)
        {
            return None;
        }
        self.last_poll = Some(Instant::now());
        let jobs = match self.rm.list().await {
            Ok(jobs) => jobs,
            Err(e) => {
                self.error(Some(format!("cannot follow worker jobs: {e}")));
                return None;
            }
        };
        let own = |requests: &BTreeMap<String, Request>| -> BTreeMap<String, Option<String>> {
            requests
                .iter()
                .filter(|(_, r)| r.state != RequestState::Gone)
                .map(|(n, r)| (n.clone(), r.job.clone()))
                .collect()
        };
        let (room, whose) = if self.adopted {
            let room = self
                .wanted
                .min(self.cfg.max_workers.saturating_sub(self.alive()));
            (room, "that the pool did not know")
        } else {
            // The look at start-up failed: these are the earlier run's jobs.
            self.adopted = true;
            (u32::MAX, "of an earlier run")
        };
        let extras = reconcile::reconcile(&own(&self.requests), &jobs, room);
        self.carry_out(extras, whose).await;
        self.cancelled.retain(|id| {
            jobs.iter()
                .any(|j| j.id == *id && !matches!(j.state, RmState::Ended(_)))
        });
        // Built again: a job adopted just now is a request's own from here on.
        Some(
            reconcile::own_states(&own(&self.requests), &jobs)
                .into_iter()
                .map(|(request, (_job, state))| (request, state))
                .collect(),
        )
    }

    fn gone(&mut self, name: &str, why: Option<String>) {
        let Some(r) = self.requests.get(name) else {
            return;
        };
        if r.state == RequestState::Gone {
            return;
        }
        let never = !r.joined_ever;
        if never {
            let reason = why.unwrap_or_else(|| "its job ended".into());
            tracing::warn!(request = name, "its worker will not come: {reason}");
            (self.events)(PoolEvent::NeverJoined {
                request: name.to_string(),
                reason,
            });
        } else {
            tracing::info!(
                request = name,
                "worker job gone{}",
                why.map(|w| format!(": {w}")).unwrap_or_default()
            );
        }
        self.set_state(name, RequestState::Gone);
        self.requests.remove(name);
    }

    fn set(&mut self, name: &str, job: Option<String>, state: RequestState) {
        let r = self.requests.entry(name.to_string()).or_insert(Request {
            job: None,
            state,
            since: Instant::now(),
            joined_ever: false,
            asked: None,
            stopping: None,
            missed: 0,
            counted: false,
        });
        if job.is_some() {
            r.job = job;
        }
        self.set_state(name, state);
    }

    fn set_state(&mut self, name: &str, state: RequestState) {
        let Some(r) = self.requests.get_mut(name) else {
            return;
        };
        if r.state != state {
            r.since = Instant::now();
        }
        r.state = state;
        (self.events)(PoolEvent::State {
            request: name.to_string(),
            job: r.job.clone(),
            state,
        });
    }

    fn error(&self, e: Option<String>) {
        (self.events)(PoolEvent::Error(e));
    }

    /// Cancel the job of request `name` (`force`: a local worker is killed, not asked).
    async fn cancel(&mut self, name: &str, force: bool) -> Result<(), String> {
        let job = self
            .requests
            .get(name)
            .and_then(|r| r.job.clone())
            .unwrap_or_default();
        let launch = self.cfg.launch(name);
        self.rm.cancel(name, &job, &launch, force).await
    }

    /// Give every worker back: cancel each job (in as few calls as the backend can), and let
    /// the backend wind down (a bounded time: local processes are waited for, then killed).
    async fn shutdown(&mut self) {
        self.wanted = 0;
        let jobs: Vec<(String, String, Launch)> = self
            .requests
            .iter()
            .map(|(name, r)| {
                let job = r.job.clone().unwrap_or_default();
                (name.clone(), job, self.cfg.launch(name))
            })
            .collect();
        for (request, e) in self.rm.cancel_all(&jobs).await {
            tracing::warn!(request, "cannot give its worker back: {e}");
        }
        self.rm.wind_down(self.cfg.release_grace).await;
        if !jobs.is_empty() {
            tracing::info!("gave back {} worker(s)", jobs.len());
        }
    }
}
