//! The answers to [`SchedulerQuery`]s, questions that change nothing: counters, task, batch, job and
//! object views, worker pages, the dashboard's samples. A [`Reader`] borrows the scheduler's
//! owners as they stand and answers from them; the scheduler builds one for each query.

use super::batches::Batches;
use super::clock::Now;
use super::ledger::Ledger;
use super::msg::SchedulerQuery;
use super::objects::ObjectTable;
use super::pool::{self, PoolLink};
use super::prefetch;
use super::results::Results;
use super::sessions::Sessions;
use super::tasks::Phase;
use super::views::{self, BatchView, Status, TaskView};
use diffuse_core::{Core, TaskId, TaskState};
use std::time::Instant;

/// The scheduler's owners, borrowed to answer a question.
pub struct Reader<'a> {
    /// The scheduling core.
    pub core: &'a Core,
    /// Every task and what changes with its state.
    pub ledger: &'a Ledger,
    /// Connected workers.
    pub sessions: &'a Sessions,
    /// Every object named so far.
    pub objects: &'a ObjectTable,
    /// The elastic pool, unless static.
    pub pool: Option<&'a PoolLink>,
    /// Batches staged to workers.
    pub batches: &'a Batches,
    /// Kept results.
    pub results: &'a Results,
    /// When the scheduler started.
    pub start: Instant,
    /// The clock's reading for this step.
    pub clock: Now,
    /// The journal writer's error, while its commit is refused.
    pub writer_error: Option<String>,
}

impl Reader<'_> {
    /// Answer `q` on its channel (a caller gone is no error).
    pub fn answer(&self, q: SchedulerQuery) {
        match q {
            SchedulerQuery::Status(reply) => {
                let _ = reply.send(self.status());
            }
            SchedulerQuery::Workers {
                after,
                limit,
                reply,
            } => {
                let (workers, next) = pool::workers_page(
                    self.pool,
                    self.core,
                    self.sessions,
                    after.as_deref(),
                    limit,
                );
                let _ = reply.send(views::WorkerPage { workers, next });
            }
            SchedulerQuery::Series(since, reply) => {
                let _ = reply.send(self.ledger.series.points_since(since));
            }
            SchedulerQuery::Task(id, reply) => {
                let view = self.ledger.tasks.id_of(&id).map(|t| self.view(t));
                let _ = reply.send(view);
            }
            SchedulerQuery::Tasks(ids, reply) => {
                let (mut views, mut unknown) = (Vec::new(), Vec::new());
                for id in ids {
                    match self.ledger.tasks.id_of(&id) {
                        Some(t) => views.push(self.view(t)),
                        None => unknown.push(id),
                    }
                }
                let _ = reply.send((views, unknown));
            }
            SchedulerQuery::List(q, reply) => {
                let (page, next) = self.ledger.tasks.page(q.state, q.after, q.limit);
                let views = page.into_iter().map(|t| self.view(t)).collect();
                let _ = reply.send((views, next));
            }
            SchedulerQuery::Batch(b, reply) => {
                let view = self.ledger.tasks.batch(b).map(|counts| BatchView {
                    batch: b,
                    pending: counts.tasks - counts.succeeded - counts.failed - counts.cancelled,
                    counts: counts.clone(),
                });
                let _ = reply.send(view);
            }
            SchedulerQuery::Locate(uri, reply) => {
                let names = match self.objects.get(&uri) {
                    Some(o) => self
                        .core
                        .locate(o)
                        .iter()
                        .filter_map(|n| self.sessions.name(n).map(str::to_string))
                        .collect(),
                    None => Vec::new(),
                };
                let _ = reply.send(names);
            }
            SchedulerQuery::Job(name, reply) => {
                let _ = reply.send(self.ledger.jobs.view(&name, &self.ledger.tasks));
            }
            SchedulerQuery::Object(uri, reply) => {
                let view = self
                    .objects
                    .view(&uri, self.core, self.sessions, &self.ledger.tasks);
                let _ = reply.send(view);
            }
            SchedulerQuery::PeerOf(name, reply) => {
                let url = self
                    .sessions
                    .values()
                    .find(|s| s.name == name)
                    .map(|s| s.peer_url.clone());
                let _ = reply.send(url);
            }
            SchedulerQuery::Ended(after, reply) => {
                let tasks = &self.ledger.tasks;
                let (ended, n) = tasks.ended_since(after);
                let views = ended
                    .into_iter()
                    .map(|t| {
                        let listed = tasks.listed(t).as_str().to_string();
                        (tasks.get(t).def.id.clone(), listed)
                    })
                    .collect();
                let _ = reply.send((views, n));
            }
            SchedulerQuery::StageView(id, reply) => {
                let _ = reply.send(self.batches.view(id, self.clock.instant));
            }
        }
    }

    /// The counters of `/v1/status`.
    pub fn status(&self) -> Status {
        let c = self.core.counts();
        let (remakes_waiting, remakes_running) = self.core.remakes();
        let unfit = self.core.unschedulable();
        let examples = unfit
            .iter()
            .take(5)
            .map(|t| {
                let task = self.ledger.tasks.get(*t);
                format!("{}: {}", task.def.id, self.ledger.spec_of(*t).resources)
            })
            .collect();
        let (mut worker_list, pool) = pool::workers_view(self.pool, self.core, self.sessions);
        let mut workers_by_state: std::collections::BTreeMap<String, u32> = pool::WORKER_STATES
            .iter()
            .map(|s| (s.to_string(), 0))
            .collect();
        for w in &worker_list {
            *workers_by_state.entry(w.state.clone()).or_default() += 1;
        }
        let worker_list_more = worker_list.len().saturating_sub(views::STATUS_WORKER_ROWS) as u64;
        worker_list.truncate(views::STATUS_WORKER_ROWS);
        Status {
            workers_by_state,
            worker_list,
            worker_list_more,
            pool,
            journal_error: self
                .ledger
                .progress
                .held()
                .map(|h| {
                    let secs = self.clock.since(h.since).as_secs_f64();
                    format!("{} (for {secs:.0} s)", h.error)
                })
                .or_else(|| self.writer_error.clone()),
            unschedulable: unfit.len() as u64,
            unschedulable_examples: examples,
            queued: c.queued + c.blocked - remakes_waiting,
            looking_up: self.ledger.looking_up(),
            running: c.running - remakes_running - c.held_ready,
            held_ready: c.held_ready,
            remaking: remakes_waiting + remakes_running,
            ending: self.ledger.progress.ending() as u64,
            workers: c.nodes,
            slots: c.slots,
            busy_slots: c.busy_slots,
            uptime_s: self.clock.since(self.start).as_secs_f64(),
            prefetch: self.core.prefetch_stats(),
            storage_cap: self.core.config().storage_cap,
            storage_budget_used: self.core.storage_budget_used(),
            two_mark: self.core.two_mark_stats(),
            recent_failures: self.ledger.series.recent_failures(),
            links: prefetch::links(self.core, self.sessions),
            reused: self.results.reused,
            warm: self
                .sessions
                .iter()
                .fold(Default::default(), |sum, (_, s)| crate::proto::WarmUse {
                    processes: sum.processes + s.warm.processes,
                    calls: sum.calls + s.warm.calls,
                    rss: sum.rss + s.warm.rss,
                }),
            ..self.ledger.counters().clone()
        }
    }

    /// A task's view without its journaled outcome (the API reads that from the journal, off
    /// this thread).
    pub fn view(&self, t: TaskId) -> TaskView {
        let task = self.ledger.tasks.get(t);
        let (node, attempt) = match (&task.phase, self.core.task_state(t)) {
            (Phase::Live, Some(TaskState::Running { node, attempt, .. })) => {
                (self.sessions.name(&node).map(str::to_string), attempt)
            }
            (Phase::Done(_), _) => match self.ledger.progress.unconfirmed(&task.def.id) {
                Some(o) => (o.node.clone(), o.attempt),
                None => (None, 0),
            },
            _ => (None, 0),
        };
        TaskView {
            id: task.def.id.clone(),
            state: self.ledger.tasks.listed(t).as_str().to_string(),
            batch: task.batch,
            node,
            attempt,
            outcome: None,
            attempts: None,
        }
    }
}
