//! The scheduler's table of every task it knows (submitted since start-up, or replayed from the
//! journal): the definition, where the task stands, an index by listed state (so a listing reads
//! only the page it returns), and counters per submission batch (so `diffuse wait` can follow the
//! tasks one client submitted).

use crate::journal::OutcomeState;
use crate::spec::{Cmd, TaskDef};
use diffuse_core::{ObjectId, TaskId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Where a task stands in the dispatcher.
#[derive(Clone, Debug, PartialEq)]
pub enum Phase {
    /// Waiting for the size and version of `pending` inputs, asked of a worker; handed to the core
    /// when none is left, or failed with its first lookup error if a lookup failed (the error is
    /// kept beside the table, [`TaskTable::lookup_failed`]: few tasks have one).
    Lookup {
        /// Inputs not yet looked up.
        pending: u32,
        /// Attempts dispatched before a restart (the next attempt is numbered after them).
        attempts: u32,
    },
    /// In the scheduling core: queued or running.
    Live,
    /// Ended (its outcome recorded, perhaps not yet confirmed journaled).
    Done(OutcomeState),
}

/// The states a listing can ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Listed {
    /// Looking up inputs or waiting in the queue.
    Queued,
    /// Dispatched; or ended with its outcome not yet journaled.
    Running,
    /// Exited 0.
    Succeeded,
    /// Failed.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl Listed {
    /// All of them, in the order of the index.
    pub const ALL: [Listed; 5] = [
        Listed::Queued,
        Listed::Running,
        Listed::Succeeded,
        Listed::Failed,
        Listed::Cancelled,
    ];

    /// The name used in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Listed::Queued => "queued",
            Listed::Running => "running",
            Listed::Succeeded => "succeeded",
            Listed::Failed => "failed",
            Listed::Cancelled => "cancelled",
        }
    }

    /// Parse an API name.
    pub fn parse(s: &str) -> Option<Listed> {
        Listed::ALL.into_iter().find(|l| l.as_str() == s)
    }

    fn ended(state: OutcomeState) -> Listed {
        match state {
            OutcomeState::Succeeded => Listed::Succeeded,
            OutcomeState::Failed => Listed::Failed,
            OutcomeState::Cancelled => Listed::Cancelled,
        }
    }
}

/// One task. Its size is pinned by a test below: the table holds every task the dispatcher
/// knows, millions when the queue is long.
pub struct LiveTask {
    /// The definition as submitted (URIs canonical); its id is the task's id.
    pub def: TaskDef,
    /// The batch it was submitted in.
    pub batch: u64,
    /// Distinct inputs: object and size in bytes (0 until looked up).
    pub inputs: Box<[(ObjectId, u64)]>,
    /// Where it stands.
    pub phase: Phase,
    listed: Listed,
}

/// Counters of one submission batch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BatchCounts {
    /// Tasks in the batch.
    pub tasks: u64,
    /// Ended and journaled, by outcome.
    pub succeeded: u64,
    /// Failed.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
    /// The ids of the first failed tasks (at most [`FAILED_IDS`]).
    pub failed_ids: Vec<String>,
}

/// The hash of a task's user id in [`TaskTable`]'s index.
fn id_hash(id: &str) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(id)
}

/// How many failed ids a batch keeps.
pub const FAILED_IDS: usize = 10;

/// Every task, by internal id (its index), by user id, and by listed state. The indexes hold
/// internal ids as `u32` (half the bytes of a `TaskId`, for every task known): a table holds
/// fewer than 2^32 tasks.
#[derive(Default)]
pub struct TaskTable {
    tasks: Vec<LiveTask>,
    /// The tasks by user id, hashed from the id in `tasks` (the id is not stored twice: with a
    /// million queued tasks a map keyed by a copy of each id cost about 90 bytes a task).
    ids: hashbrown::HashTable<u32>,
    by_state: [BTreeSet<u32>; 5],
    batches: BTreeMap<u64, BatchCounts>,
    /// Tasks in the order their outcomes were journaled.
    ended_order: Vec<TaskId>,
    /// The first lookup error of tasks in [`Phase::Lookup`] whose lookup failed.
    lookup_errors: rustc_hash::FxHashMap<TaskId, String>,
    /// Commands of recent tasks, to share.
    commands: Commands,
}

/// Commands of recent tasks, kept to share with the next tasks that run the same one: the tasks
/// of a submission usually run one program with the same arguments (the inputs differ, through
/// `{inputs[i]}`), and a shared command is kept once instead of once a task (for `["true"]`, 64
/// bytes a task). A few slots, each holding the last command that hashed to it: a command no
/// other task runs costs one hash and one comparison.
#[derive(Default)]
struct Commands {
    slots: [Option<Cmd>; 32],
}

impl Commands {
    /// `cmd`, or an equal command already kept (shared).
    fn share(&mut self, cmd: Cmd) -> Cmd {
        use std::hash::BuildHasher;
        let hash = rustc_hash::FxBuildHasher.hash_one(&cmd);
        let slot = &mut self.slots[(hash % 32) as usize];
        match slot {
            Some(kept) if *kept == cmd => kept.clone(),
            _ => {
                *slot = Some(cmd.clone());
                cmd
            }
        }
    }
}

impl TaskTable {
    /// Add a task in `phase` (an ended one for a replayed outcome). Its id must be new.
    pub fn insert(
        &mut self,
        def: TaskDef,
        batch: u64,
        inputs: Vec<(ObjectId, u64)>,
        phase: Phase,
    ) -> TaskId {
        let n = u32::try_from(self.tasks.len()).expect("fewer than 2^32 tasks");
        let t = TaskId(n as u64);
        let listed = match &phase {
            Phase::Done(s) => Listed::ended(*s),
            _ => Listed::Queued,
        };
        let counts = self.batches.entry(batch).or_default();
        counts.tasks += 1;
        if let Phase::Done(s) = &phase {
            count(counts, *s, &def.id);
        }
        self.by_state[listed as usize].insert(n);
        let hash = id_hash(&def.id);
        let mut def = def;
        def.cmd = self.commands.share(def.cmd);
        self.tasks.push(LiveTask {
            def,
            batch,
            inputs: inputs.into_boxed_slice(),
            phase,
            listed,
        });
        let tasks = &self.tasks;
        self.ids
            .insert_unique(hash, n, |t| id_hash(&tasks[*t as usize].def.id));
        t
    }

    /// Room for `n` more tasks (before a replay: the table and its index grow once).
    pub fn reserve(&mut self, n: usize) {
        self.tasks.reserve_exact(n);
        let tasks = &self.tasks;
        self.ids.reserve(n, |t| id_hash(&tasks[*t as usize].def.id));
    }

    /// A lookup of `t`'s inputs failed with `error`: kept if it is the first.
    pub fn lookup_failed(&mut self, t: TaskId, error: &str) {
        self.lookup_errors
            .entry(t)
            .or_insert_with(|| error.to_string());
    }

    /// The first lookup error of `t`, taken (once its lookups are all answered).
    pub fn take_lookup_error(&mut self, t: TaskId) -> Option<String> {
        self.lookup_errors.remove(&t)
    }

    /// The task.
    pub fn get(&self, t: TaskId) -> &LiveTask {
        &self.tasks[t.0 as usize]
    }

    /// The task, to change.
    pub fn get_mut(&mut self, t: TaskId) -> &mut LiveTask {
        &mut self.tasks[t.0 as usize]
    }

    /// The internal id of the task with user id `id`.
    pub fn id_of(&self, id: &str) -> Option<TaskId> {
        self.ids
            .find(id_hash(id), |t| self.tasks[*t as usize].def.id == id)
            .map(|t| TaskId(*t as u64))
    }

    /// Tasks known.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether no task is known.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Move `t` in the index: queued or running.
    pub fn list_as(&mut self, t: TaskId, listed: Listed) {
        let task = &mut self.tasks[t.0 as usize];
        if task.listed != listed {
            self.by_state[task.listed as usize].remove(&(t.0 as u32));
            self.by_state[listed as usize].insert(t.0 as u32);
            task.listed = listed;
        }
    }

    /// `t`'s outcome is journaled: it is listed as ended and counted in its batch.
    pub fn ended(&mut self, t: TaskId, state: OutcomeState) {
        self.ended_order.push(t);
        self.lookup_errors.remove(&t);
        self.list_as(t, Listed::ended(state));
        let task = &self.tasks[t.0 as usize];
        let counts = self.batches.entry(task.batch).or_default();
        count(counts, state, &task.def.id);
    }

    /// The tasks that ended after the first `n` to end, and how many have ended.
    pub fn ended_since(&self, n: usize) -> (Vec<TaskId>, usize) {
        let from = n.min(self.ended_order.len());
        (self.ended_order[from..].to_vec(), self.ended_order.len())
    }

    /// How `t` is listed.
    pub fn listed(&self, t: TaskId) -> Listed {
        self.tasks[t.0 as usize].listed
    }

    /// At most `limit` tasks after the cursor `after` (in submission order), in state `state`
    /// or any; and the cursor of the next page, if there is one.
    pub fn page(
        &self,
        state: Option<Listed>,
        after: Option<u64>,
        limit: usize,
    ) -> (Vec<TaskId>, Option<u64>) {
        let from = after.map_or(0, |a| a.saturating_add(1));
        let mut ids: Vec<u64> = match state {
            Some(s) => match u32::try_from(from) {
                Ok(from) => self.by_state[s as usize]
                    .range(from..)
                    .take(limit + 1)
                    .map(|t| *t as u64)
                    .collect(),
                Err(_) => Vec::new(),
            },
            None => (from..self.tasks.len() as u64).take(limit + 1).collect(),
        };
        let next = (ids.len() > limit).then(|| {
            ids.truncate(limit);
            ids[limit - 1]
        });
        (ids.into_iter().map(TaskId).collect(), next)
    }

    /// A batch's counters.
    pub fn batch(&self, b: u64) -> Option<&BatchCounts> {
        self.batches.get(&b)
    }

    /// The number for the next batch.
    pub fn next_batch(&self) -> u64 {
        self.batches.last_key_value().map_or(1, |(b, _)| b + 1)
    }
}

fn count(c: &mut BatchCounts, state: OutcomeState, id: &str) {
    match state {
        OutcomeState::Succeeded => c.succeeded += 1,
        OutcomeState::Failed => {
            c.failed += 1;
            if c.failed_ids.len() < FAILED_IDS {
                c.failed_ids.push(id.to_string());
            }
        }
        OutcomeState::Cancelled => c.cancelled += 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guard on what a queued task costs (docs/scale.md, "What one task costs"): every task
    /// the dispatcher knows has one in the table. A field every task needs grows them all.
    #[test]
    fn a_live_task_stays_small() {
        assert_eq!(std::mem::size_of::<Phase>(), 12);
        assert_eq!(std::mem::size_of::<TaskDef>(), 88);
        assert_eq!(std::mem::size_of::<LiveTask>(), 128);
    }

    fn def(id: &str) -> TaskDef {
        crate::spec::parse_tasks(&format!(r#"{{"id":"{id}","cmd":"true"}}"#))
            .unwrap()
            .remove(0)
    }

    #[test]
    fn pages_by_state_follow_moves_and_cursors() {
        let mut table = TaskTable::default();
        for i in 0..10 {
            table.insert(def(&format!("t{i}")), 1 + i / 5, vec![], Phase::Live);
        }
        assert_eq!(table.next_batch(), 3);
        for i in [1, 3, 5, 7] {
            table.list_as(TaskId(i), Listed::Running);
        }
        table.ended(TaskId(3), OutcomeState::Failed);
        let (page, next) = table.page(Some(Listed::Running), None, 2);
        assert_eq!(page, vec![TaskId(1), TaskId(5)]);
        assert_eq!(next, Some(5));
        let (page, next) = table.page(Some(Listed::Running), next, 2);
        assert_eq!((page, next), (vec![TaskId(7)], None));
        let (page, _) = table.page(None, Some(7), 10);
        assert_eq!(page, vec![TaskId(8), TaskId(9)]);
        assert_eq!(table.page(Some(Listed::Queued), None, 100).0.len(), 6);
        let b = table.batch(1).unwrap();
        assert_eq!(
            (b.tasks, b.failed, b.failed_ids.clone()),
            (5, 1, vec!["t3".to_string()])
        );
        assert_eq!(table.batch(2).unwrap().failed, 0);
    }
}
