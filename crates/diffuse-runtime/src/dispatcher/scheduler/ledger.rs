//! The task ledger: every task the scheduler knows, and what changes with it when its state
//! changes. It owns the task table (phases, the index by state, batches), the jobs, the tasks
//! whose lookups wait for other tasks, the round's journal traffic and the outcomes not yet
//! confirmed, the dashboard's samples and failures, and the counters of `/v1/status` that are
//! the scheduler's own (submitted, ended, traffic, demand, looking up).
//!
//! Invariants kept here: every task taken in is counted `submitted` once ([`Ledger::insert`]);
//! `looking_up` counts the tasks in [`Phase::Lookup`], which a task enters and leaves only
//! through the ledger ([`Ledger::insert`], [`Ledger::inputs_ready`],
//! [`Ledger::finish_without_running`]); an outcome is counted ended once the journal writer has
//! confirmed it ([`Ledger::confirm_outcomes`]), or when it is replayed.

use super::comm::Comm;
use super::dataflow::Deferred;
use super::jobs::Jobs;
use super::progress::Progress;
use super::series::Series;
use super::tasks::{Listed, Phase, TaskTable};
use super::views::Status;
use crate::journal::{OutcomeState, TaskOutcome};
use crate::proto::TaskReport;
use crate::spec::{TaskDef, TaskDefaults};
use diffuse_core::{Core, Input, ObjectId, Resources, TaskId, TaskSpec};
use std::time::Duration;

/// Every task and what changes with its state (see the module doc).
pub struct Ledger {
    /// Every task: definition, phase, the index by state, batches.
    pub tasks: TaskTable,
    /// Every job's tasks.
    pub jobs: Jobs,
    /// This round's journal traffic; outcomes not yet confirmed.
    pub progress: Progress,
    /// The dashboard's samples and last failures.
    pub series: Series,
    /// Tasks whose input lookups wait for other tasks to succeed.
    deferred: Deferred,
    /// The counters of [`Status`] the scheduler keeps itself (the rest is read from the core,
    /// the pool and the sessions when asked).
    counters: Status,
    /// Tasks in [`Phase::Lookup`].
    looking_up: u64,
    /// What a task that does not say gets (`--retries`, `--task-timeout`).
    defaults: TaskDefaults,
    /// Counts the outcomes confirmed on disk, for the API's waiters (`POST /v1/states` with
    /// `wait_s`).
    pub ended: Option<tokio::sync::watch::Sender<u64>>,
}

impl Ledger {
    /// An empty ledger; tasks that leave out a retry count or a time limit get `defaults`.
    pub fn new(defaults: TaskDefaults) -> Ledger {
        Ledger {
            tasks: TaskTable::default(),
            jobs: Jobs::default(),
            progress: Progress::default(),
            series: Series::default(),
            deferred: Deferred::default(),
            counters: Status::default(),
            looking_up: 0,
            defaults,
            ended: None,
        }
    }

    /// Take task `def` in, in `phase`: looking up its inputs or live (new or replayed without
    /// an outcome), or ended (a replayed outcome, counted ended at once). It is counted
    /// submitted and recorded in its job (see [`Jobs::join`]).
    pub fn insert(
        &mut self,
        def: TaskDef,
        batch: u64,
        inputs: Vec<(ObjectId, u64)>,
        phase: Phase,
        core: &mut Core,
    ) -> TaskId {
        self.counters.submitted += 1;
        match &phase {
            Phase::Done(state) => self.count_outcome(*state),
            Phase::Lookup { .. } => self.looking_up += 1,
            Phase::Live => {}
        }
        let t = self.tasks.insert(def, batch, inputs, phase);
        self.jobs.join(t, &self.tasks.get(t).def, core);
        t
    }

    /// The core's view of task `id`: inputs, resources, priority, job, retries, time limit.
    pub fn spec_of(&self, id: TaskId) -> TaskSpec {
        let task = self.tasks.get(id);
        let more = task.def.more();
        TaskSpec::new(
            id,
            task.inputs
                .iter()
                .map(|(o, size)| Input {
                    object: *o,
                    size: *size,
                })
                .collect(),
        )
        .with_resources(Resources {
            cores: more.cores.unwrap_or(1),
            memory: more.memory.unwrap_or(0),
            gpus: more.gpus.unwrap_or(0),
            disk: more.disk.unwrap_or(0),
        })
        .with_priority(more.priority)
        .with_job(self.jobs.id(task.def.job()))
        .with_dad_beta(more.dad_beta)
        .with_retries(more.retries.unwrap_or(self.defaults.retries))
        .with_walltime(
            more.walltime_s
                .or(more.timeout_s)
                .map(Duration::from_secs_f64)
                .or(self.defaults.task_timeout),
        )
    }

    /// The time limit of a task that does not say (`--task-timeout`).
    pub fn default_timeout(&self) -> Option<Duration> {
        self.defaults.task_timeout
    }

    /// Tasks looking up their inputs.
    pub fn looking_up(&self) -> u64 {
        self.looking_up
    }

    /// The counters the scheduler keeps itself: submitted, ended, traffic, demand; the rest
    /// of this [`Status`] is left at its default.
    pub fn counters(&self) -> &Status {
        &self.counters
    }

    /// The ledger's own invariants: every task counted submitted once, and `looking_up` is the
    /// number of tasks in [`Phase::Lookup`]. Checked by the scheduler's tests after every step.
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.counters.submitted != self.tasks.len() as u64 {
            return Err(format!(
                "{} submitted, {} tasks",
                self.counters.submitted,
                self.tasks.len()
            ));
        }
        let looking_up = (0..self.tasks.len() as u64)
            .filter(|i| matches!(self.tasks.get(TaskId(*i)).phase, Phase::Lookup { .. }))
            .count() as u64;
        if looking_up != self.looking_up {
            return Err(format!(
                "{looking_up} tasks look up their inputs, {} counted",
                self.looking_up
            ));
        }
        Ok(())
    }

    /// `t` looks up its inputs once every task of `unfinished` (not empty) has succeeded.
    pub fn defer_lookups(&mut self, t: TaskId, unfinished: Vec<TaskId>) {
        self.deferred.wait(t, unfinished);
    }

    /// `t` succeeded: the tasks whose lookups waited for it (it was the last) and that still
    /// look up their inputs, in the order they began waiting.
    pub fn lookups_woken(&mut self, t: TaskId) -> Vec<TaskId> {
        self.deferred
            .succeeded(t)
            .into_iter()
            .filter(|w| matches!(self.tasks.get(*w).phase, Phase::Lookup { .. }))
            .collect()
    }

    /// Every input of `t` (in [`Phase::Lookup`]) was looked up and none failed: it is live, its
    /// input bytes count as demand. Its inputs with their sizes.
    pub fn inputs_ready(&mut self, t: TaskId) -> Vec<(ObjectId, u64)> {
        self.looking_up -= 1;
        let task = self.tasks.get_mut(t);
        task.phase = Phase::Live;
        let sizes = task.inputs.to_vec();
        self.counters.demand_bytes += sizes.iter().map(|(_, s)| s).sum::<u64>();
        sizes
    }

    /// A task ends without (another) run at Unix time `at`: failed lookup, cancelled, lost
    /// too often.
    pub fn finish_without_running(
        &mut self,
        t: TaskId,
        state: OutcomeState,
        error: Option<String>,
        at: f64,
    ) {
        let task = self.tasks.get_mut(t);
        if matches!(task.phase, Phase::Lookup { .. }) {
            self.looking_up -= 1;
        }
        task.phase = Phase::Done(state);
        let id = task.def.id.clone();
        self.record_outcome(
            t,
            TaskOutcome {
                id,
                state,
                attempt: 0,
                node: None,
                exit_code: None,
                error,
                result_json: "{}".into(),
                finished_at: at,
            },
        );
    }

    /// An attempt of `t` ended and gave the task its outcome `state`, as `report` says, on the
    /// worker named `node`: its traffic is counted and the outcome recorded.
    pub fn attempt_ended(
        &mut self,
        t: TaskId,
        state: OutcomeState,
        report: &TaskReport,
        node: Option<String>,
    ) {
        add_traffic(&mut self.counters, report);
        self.tasks.get_mut(t).phase = Phase::Done(state);
        let o = TaskOutcome {
            id: report.task.clone(),
            state,
            attempt: report.attempt,
            node,
            exit_code: report.exit_code,
            error: report.error.clone(),
            result_json: serde_json::to_string(report).expect("report serializes"),
            finished_at: report.finished_at,
        };
        self.record_outcome(t, o);
    }

    /// An attempt ended and its task goes on (a retry, a remake): its traffic is counted and
    /// its report kept with the attempt.
    pub fn attempt_without_outcome(&mut self, report: &TaskReport) {
        add_traffic(&mut self.counters, report);
        self.progress.attempt_result(
            report.task.clone(),
            report.attempt,
            serde_json::to_string(report).expect("report serializes"),
        );
    }

    /// Take the journal writer's confirmations (those tasks are listed and counted as ended)
    /// and hand it this round's attempts and outcomes.
    pub fn confirm_outcomes(&mut self, comm: &mut dyn Comm) {
        let mut confirmed = 0;
        for o in self.progress.flush(comm) {
            self.count_outcome(o.state);
            if let Some(t) = self.tasks.id_of(&o.id) {
                self.tasks.ended(t, o.state);
            }
            confirmed += 1;
        }
        if let Some(ended) = self.ended.as_ref().filter(|_| confirmed > 0) {
            ended.send_modify(|n| *n += confirmed);
        }
    }

    /// Record an outcome. The writer journals it this round; until it confirms the commit the
    /// task still shows as running and is not counted as ended, so nothing a client has seen
    /// ended can run again after a crash of the dispatcher.
    fn record_outcome(&mut self, t: TaskId, o: TaskOutcome) {
        self.series.note_failure(&o);
        self.tasks.list_as(t, Listed::Running);
        self.progress.outcome(o);
    }

    fn count_outcome(&mut self, state: OutcomeState) {
        match state {
            OutcomeState::Succeeded => self.counters.succeeded += 1,
            OutcomeState::Failed => self.counters.failed += 1,
            OutcomeState::Cancelled => self.counters.cancelled += 1,
        }
    }
}

/// Count a finished attempt's input traffic and its staging and run times.
fn add_traffic(status: &mut Status, report: &TaskReport) {
    let tr = report.traffic;
    let s = &mut status.traffic;
    s.local += tr.local;
    s.peer += tr.peer;
    s.storage += tr.storage;
    s.bytes_local += tr.bytes_local;
    s.bytes_peer += tr.bytes_peer;
    s.bytes_storage += tr.bytes_storage;
    if report.staged_at > 0.0 {
        status
            .task_staging_seconds
            .observe(report.staged_at - report.started_at);
        status
            .task_run_seconds
            .observe(report.finished_at - report.staged_at);
    }
}
