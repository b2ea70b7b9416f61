//! The dispatcher's durable journal, kept in an embedded SQLite database.
//!
//! # Schema (version 3)
//!
//! ```sql
//! meta(key TEXT PRIMARY KEY, value NOT NULL)
//!     -- ('magic', 'diffuse-journal'), ('schema_version', 3)
//! tasks(seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- submission order
//!       id TEXT NOT NULL UNIQUE, spec_json TEXT NOT NULL,
//!       submitted_at REAL NOT NULL,
//!       attempts INTEGER NOT NULL DEFAULT 0,    -- highest dispatched attempt
//!       sum INTEGER)                            -- record checksum
//! attempts(task_seq REFERENCES tasks(seq), attempt, node,
//!          result_json,                         -- report of a retried failure
//!          PRIMARY KEY (task_seq, attempt))     -- dispatch history
//! outcomes(task_seq INTEGER PRIMARY KEY REFERENCES tasks(seq),
//!          state TEXT CHECK (state IN ('succeeded','failed','cancelled')),
//!          attempt, node, exit_code, error, result_json, finished_at,
//!          sum INTEGER)                         -- record checksum
//! ```
//!
//! `sum` is the first 8 bytes of a SHA-256 over the record's fields (see `record_sum`); it is
//! checked whenever a task or an outcome is read back. A version-1 journal is upgraded in place
//! at open: its rows keep a NULL `sum` and are not checked. A version-2 journal gains the
//! attempts' `result_json` column at open.
//!
//! # Durability
//!
//! The database runs in WAL mode with `synchronous=FULL`, so every committed
//! transaction has been fsynced to the write-ahead log before the commit call
//! returns. Each public write method ([`Journal::submit`],
//! [`Journal::record_attempts`], [`Journal::record_outcomes`]) is exactly one
//! transaction, however many items it carries: callers batch many
//! submissions/outcomes into one call so that one fsync covers the whole
//! batch. A submission may be acknowledged once `submit` has returned `Ok`.
//!
//! A crash may leave a torn tail on the `-wal` file (a partially written
//! frame, or garbage after the last frame). SQLite's WAL recovery checks the
//! salt and the cumulative checksum of every frame and ignores everything
//! from the first bad frame on, so a reopen succeeds and sees exactly the
//! transactions whose commit frame was intact. [`Journal::open`] then runs
//! `PRAGMA quick_check`; a damaged main database file is reported as
//! [`JournalError::Corrupt`]. `quick_check` verifies b-tree structure, not
//! content, and SQLite keeps no page checksums: a flipped bit inside a stored
//! value is caught by the record checksums instead, when [`Journal::load`]
//! (at every start) or [`Journal::outcome`] reads it, as
//! [`JournalError::Corrupt`] naming the record. Damage in the middle of the
//! `-wal` file is not detectable: SQLite's recovery stops at the first bad
//! frame, and later transactions are dropped as if they were a torn tail.
//!
//! # Invariants
//!
//! * Task ids are unique; a batch containing an id already journaled (or
//!   twice in itself) is refused as a whole ([`JournalError::DuplicateTask`]).
//! * A task has at most one outcome; a second one is refused
//!   ([`JournalError::DuplicateOutcome`]) and the first is kept.
//! * Attempts and outcomes can only be recorded for submitted tasks
//!   ([`JournalError::UnknownTask`]).
//! * Every write call is all-or-nothing: on any error nothing of the batch
//!   is written.
//!
//! The journal expects to be the only writer of its file (one [`Journal`]
//! per path, owned by the dispatcher).

use std::path::Path;
use std::time::Duration;

use rusqlite::types::Value;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};

/// Value of the `magic` row of the `meta` table.
pub const MAGIC: &str = "diffuse-journal";
/// Value of the `schema_version` row of the `meta` table.
pub const SCHEMA_VERSION: i64 = 3;

/// Maximum number of problems `quick_check` reports at open.
const QUICK_CHECK_LIMIT: u32 = 20;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value NOT NULL
);
CREATE TABLE IF NOT EXISTS tasks (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT NOT NULL UNIQUE,
    spec_json    TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    sum          INTEGER
);
CREATE TABLE IF NOT EXISTS attempts (
    task_seq    INTEGER NOT NULL REFERENCES tasks(seq),
    attempt     INTEGER NOT NULL,
    node        TEXT NOT NULL,
    result_json TEXT,
    PRIMARY KEY (task_seq, attempt)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS outcomes (
    task_seq    INTEGER PRIMARY KEY REFERENCES tasks(seq),
    state       TEXT NOT NULL CHECK (state IN ('succeeded', 'failed', 'cancelled')),
    attempt     INTEGER NOT NULL,
    node        TEXT,
    exit_code   INTEGER,
    error       TEXT,
    result_json TEXT NOT NULL,
    finished_at REAL NOT NULL,
    sum         INTEGER
);
";

/// The dispatcher's durable journal (one SQLite connection).
///
/// See the [module documentation](self) for the schema and guarantees.
pub struct Journal {
    conn: Connection,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("path", &self.conn.path())
            .finish()
    }
}

/// Errors of the journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The database file could not be opened or configured.
    #[error("journal {path}: {source}")]
    Open {
        /// Path of the journal file.
        path: String,
        /// Underlying SQLite error.
        source: rusqlite::Error,
    },
    /// The database file is damaged (integrity check failed, or SQLite
    /// reported corruption / not-a-database at open).
    #[error("journal is corrupt: {0}")]
    Corrupt(String),
    /// The file is an SQLite database but not a journal of this schema.
    #[error(
        "journal {path} was written by an incompatible version ({found}); expected {expected}"
    )]
    Version {
        /// Path of the journal file.
        path: String,
        /// What the file's `meta` table says.
        found: String,
        /// What this build expects.
        expected: String,
    },
    /// A submitted task id is already journaled (or repeated in the batch).
    #[error("task {0} already exists")]
    DuplicateTask(String),
    /// The task already has its one outcome.
    #[error("task {0} already has an outcome")]
    DuplicateOutcome(String),
    /// No task with this id was ever submitted.
    #[error("unknown task {0}")]
    UnknownTask(String),
    /// Any other SQLite error.
    #[error("journal: {0}")]
    Sql(#[from] rusqlite::Error),
}

/// A submitted task as the journal stores it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SubmittedTask {
    /// Unique task id.
    pub id: String,
    /// The task specification, as JSON.
    pub spec_json: String,
    /// Submission time, unix seconds.
    pub submitted_at: f64,
}

/// The one outcome of a task.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TaskOutcome {
    /// Task id.
    pub id: String,
    /// How the task ended.
    pub state: OutcomeState,
    /// The attempt that produced this outcome.
    pub attempt: u32,
    /// Node that ran the final attempt, if any.
    pub node: Option<String>,
    /// Process exit code, if the task ran.
    pub exit_code: Option<i32>,
    /// Error message, if the task failed.
    pub error: Option<String>,
    /// Free-form JSON (timings, output paths, bytes by source).
    pub result_json: String,
    /// Completion time, unix seconds.
    pub finished_at: f64,
}

/// Final state of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutcomeState {
    /// The task completed successfully.
    Succeeded,
    /// The task failed (after its last attempt).
    Failed,
    /// The task was cancelled.
    Cancelled,
}

impl OutcomeState {
    /// The lowercase name stored in the journal (same as the serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeState::Succeeded => "succeeded",
            OutcomeState::Failed => "failed",
            OutcomeState::Cancelled => "cancelled",
        }
    }

    fn parse(s: &str) -> Option<OutcomeState> {
        match s {
            "succeeded" => Some(OutcomeState::Succeeded),
            "failed" => Some(OutcomeState::Failed),
            "cancelled" => Some(OutcomeState::Cancelled),
            _ => None,
        }
    }
}

/// A task as found at restart.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredTask {
    /// The task as submitted.
    pub task: SubmittedTask,
    /// Its outcome, if one was recorded.
    pub outcome: Option<TaskOutcome>,
    /// Highest attempt number recorded for the task (by
    /// [`Journal::record_attempts`] or by its outcome); 0 if never dispatched.
    pub attempts: u32,
}

/// Whether an SQLite error means the file is damaged or not a database.
fn is_corruption(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase)
    )
}

/// Error for a failure while opening/configuring the file at `path`.
fn open_error(path: &str, e: rusqlite::Error) -> JournalError {
    if is_corruption(&e) {
        JournalError::Corrupt(format!("{path}: {e}"))
    } else {
        JournalError::Open {
            path: path.to_string(),
            source: e,
        }
    }
}

/// Render a `meta` value for an error message.
fn show_value(v: Option<Value>) -> String {
    match v {
        None => "missing".to_string(),
        Some(Value::Null) => "NULL".to_string(),
        Some(Value::Integer(i)) => i.to_string(),
        Some(Value::Real(r)) => r.to_string(),
        Some(Value::Text(s)) => format!("{s:?}"),
        Some(Value::Blob(b)) => format!("<{} byte blob>", b.len()),
    }
}

/// Map a row of `outcomes` columns starting at `base` (state first) to an
/// outcome; `None` when the state column is NULL (no outcome, LEFT JOIN).
fn outcome_from_row(
    id: &str,
    row: &rusqlite::Row<'_>,
    base: usize,
) -> rusqlite::Result<Option<TaskOutcome>> {
    let Some(state) = row.get::<_, Option<String>>(base)? else {
        return Ok(None);
    };
    let state = OutcomeState::parse(&state).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            base,
            rusqlite::types::Type::Text,
            format!("unknown outcome state {state:?}").into(),
        )
    })?;
    Ok(Some(TaskOutcome {
        id: id.to_string(),
        state,
        attempt: row.get(base + 1)?,
        node: row.get(base + 2)?,
        exit_code: row.get(base + 3)?,
        error: row.get(base + 4)?,
        result_json: row.get(base + 5)?,
        finished_at: row.get(base + 6)?,
    }))
}

/// What the `meta` table of a database says.
enum MetaState {
    /// Empty database: no schema at all.
    Fresh,
    /// A journal of schema version 1 (no record checksums): upgraded at open.
    Version1,
    /// A journal of schema version 2 (no attempt results): upgraded at open.
    Version2,
    /// A journal of this schema.
    Current,
}

/// A record's checksum: the first 8 bytes of SHA-256 over its fields, each length-prefixed.
fn record_sum(fields: &[&[u8]]) -> i64 {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for f in fields {
        h.update((f.len() as u64).to_le_bytes());
        h.update(f);
    }
    let d = h.finalize();
    i64::from_le_bytes(d[..8].try_into().expect("8 bytes"))
}

fn task_sum(id: &str, spec_json: &str, submitted_at: f64) -> i64 {
    record_sum(&[
        id.as_bytes(),
        spec_json.as_bytes(),
        &submitted_at.to_bits().to_le_bytes(),
    ])
}

fn outcome_sum(o: &TaskOutcome) -> i64 {
    let opt = |v: Option<&[u8]>| v.map_or(vec![0u8], |b| [&[1u8][..], b].concat());
    record_sum(&[
        o.id.as_bytes(),
        o.state.as_str().as_bytes(),
        &o.attempt.to_le_bytes(),
        &opt(o.node.as_deref().map(str::as_bytes)),
        &opt(o.exit_code.map(i32::to_le_bytes).as_ref().map(|b| &b[..])),
        &opt(o.error.as_deref().map(str::as_bytes)),
        o.result_json.as_bytes(),
        &o.finished_at.to_bits().to_le_bytes(),
    ])
}

/// The error for a record whose checksum does not match its fields.
fn damaged(what: &str) -> JournalError {
    JournalError::Corrupt(format!(
        "{what} does not match its checksum: the journal file was damaged. Restore it from a \
         copy, or move it aside to start with an empty journal"
    ))
}

impl Journal {
    /// Open or create. Sets WAL mode, synchronous=FULL, checks a `meta`
    /// table holding magic "diffuse-journal" and schema version 1 (creates it
    /// when new; Version error if it differs), and runs a quick integrity
    /// check.
    ///
    /// Errors: [`JournalError::Open`] if the file cannot be opened,
    /// [`JournalError::Corrupt`] if it is damaged or not a database,
    /// [`JournalError::Version`] if it is a database of another kind or
    /// schema version.
    pub fn open(path: &Path) -> Result<Journal, JournalError> {
        let shown = path.display().to_string();
        let conn = Connection::open(path).map_err(|e| open_error(&shown, e))?;
        let journal = Journal { conn };
        journal.init(&shown).map_err(|e| match e {
            JournalError::Sql(e) => open_error(&shown, e),
            other => other,
        })?;
        Ok(journal)
    }

    /// Another connection to a journal that [`Journal::open`] has already opened (and so
    /// checked, created or upgraded): nothing is checked again. `read_only` connections serve
    /// queries from other threads than the writer's.
    pub fn reopen(path: &Path, read_only: bool) -> Result<Journal, JournalError> {
        use rusqlite::OpenFlags;
        let shown = path.display().to_string();
        let flags = if read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX
        };
        let conn = Connection::open_with_flags(path, flags).map_err(|e| open_error(&shown, e))?;
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(|e| open_error(&shown, e))?;
        if !read_only {
            conn.pragma_update(None, "synchronous", "FULL")
                .and_then(|_| conn.pragma_update(None, "foreign_keys", true))
                .map_err(|e| open_error(&shown, e))?;
        }
        Ok(Journal { conn })
    }

    fn init(&self, path: &str) -> Result<(), JournalError> {
        let conn = &self.conn;
        conn.busy_timeout(Duration::from_secs(5))?;

        // Structural integrity first (this also runs WAL recovery, if any).
        let problems: Vec<String> = {
            let mut stmt = conn.prepare(&format!("PRAGMA quick_check({QUICK_CHECK_LIMIT})"))?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
            rows.collect::<Result<_, _>>()?
        };
        if problems.len() != 1 || problems[0] != "ok" {
            return Err(JournalError::Corrupt(format!(
                "{path}: integrity check failed: {}",
                problems.join("; ")
            )));
        }

        // Identify the file before changing anything in it.
        let state = self.check_meta(path)?;

        let mode: String =
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(JournalError::Open {
                path: path.to_string(),
                source: rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
                    Some(format!(
                        "could not switch to WAL journal mode (got {mode:?})"
                    )),
                ),
            });
        }
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", true)?;
        // Keep an idle WAL from staying at its high-water size forever.
        conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)?;

        if let MetaState::Version1 | MetaState::Version2 = state {
            let tx = conn.unchecked_transaction()?;
            if let MetaState::Version1 = state {
                tx.execute_batch(
                    "ALTER TABLE tasks ADD COLUMN sum INTEGER;
                     ALTER TABLE outcomes ADD COLUMN sum INTEGER;",
                )?;
            }
            tx.execute_batch("ALTER TABLE attempts ADD COLUMN result_json TEXT;")?;
            tx.execute(
                "UPDATE meta SET value = ?1 WHERE key = 'schema_version'",
                [SCHEMA_VERSION],
            )?;
            tx.commit()?;
        }
        if let MetaState::Fresh = state {
            let tx = conn.unchecked_transaction()?;
            tx.execute_batch(SCHEMA)?;
            tx.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('magic', ?1), ('schema_version', ?2)",
                params![MAGIC, SCHEMA_VERSION],
            )?;
            tx.commit()?;
            // Re-verify: a concurrent creator could have won the race.
            self.check_meta(path)?;
        }
        Ok(())
    }

    fn check_meta(&self, path: &str) -> Result<MetaState, JournalError> {
        let conn = &self.conn;
        let expected = format!("magic {MAGIC:?}, schema version {SCHEMA_VERSION}");
        let version_error = |found: String| JournalError::Version {
            path: path.to_string(),
            found,
            expected: expected.clone(),
        };
        let has_meta: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta')",
            [],
            |r| r.get(0),
        )?;
        if !has_meta {
            let objects: i64 =
                conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
            return if objects == 0 {
                Ok(MetaState::Fresh)
            } else {
                Err(version_error(
                    "not a diffuse journal: no meta table".to_string(),
                ))
            };
        }
        let read = |key: &str| -> Result<Option<Value>, JournalError> {
            conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
                .optional()
                .map_err(|e| {
                    if is_corruption(&e) {
                        JournalError::Sql(e)
                    } else {
                        version_error(format!("unreadable meta table: {e}"))
                    }
                })
        };
        let magic = read("magic")?;
        let version = read("schema_version")?;
        let magic_ok = matches!(&magic, Some(Value::Text(m)) if m == MAGIC);
        let version_number = match &version {
            Some(Value::Integer(v)) => Some(*v),
            Some(Value::Text(v)) => v.trim().parse().ok(),
            _ => None,
        };
        if magic_ok && version_number == Some(SCHEMA_VERSION) {
            Ok(MetaState::Current)
        } else if magic_ok && version_number == Some(1) {
            Ok(MetaState::Version1)
        } else if magic_ok && version_number == Some(2) {
            Ok(MetaState::Version2)
        } else {
            Err(version_error(format!(
                "magic {}, schema version {}",
                show_value(magic),
                show_value(version)
            )))
        }
    }

    /// Insert all tasks in ONE transaction. If any id already exists (in the
    /// journal or twice in the batch), nothing is inserted and
    /// DuplicateTask(id) is returned.
    ///
    /// When this returns `Ok`, the batch is durable and may be acknowledged.
    pub fn submit(&mut self, tasks: &[SubmittedTask]) -> Result<(), JournalError> {
        if tasks.is_empty() {
            return Ok(());
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO tasks (id, spec_json, submitted_at, sum) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (id) DO NOTHING",
            )?;
            for t in tasks {
                let sum = task_sum(&t.id, &t.spec_json, t.submitted_at);
                if insert.execute(params![t.id, t.spec_json, t.submitted_at, sum])? == 0 {
                    // Dropping `tx` rolls the whole batch back.
                    return Err(JournalError::DuplicateTask(t.id.clone()));
                }
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Record that an attempt was dispatched (attempt number, node) — many
    /// in one transaction. Unknown ids -> UnknownTask, nothing written.
    ///
    /// Each entry is `(task id, attempt number, node)`. Recording the same
    /// `(id, attempt)` again replaces its node. The task's attempt count is
    /// the highest attempt number recorded.
    pub fn record_attempts(
        &mut self,
        attempts: &[(String, u32, String)],
    ) -> Result<(), JournalError> {
        if attempts.is_empty() {
            return Ok(());
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut bump = tx.prepare_cached(
                "UPDATE tasks SET attempts = max(attempts, ?2) WHERE id = ?1 RETURNING seq",
            )?;
            let mut log = tx.prepare_cached(
                "INSERT INTO attempts (task_seq, attempt, node) VALUES (?1, ?2, ?3)
                 ON CONFLICT (task_seq, attempt) DO UPDATE SET node = excluded.node",
            )?;
            for (id, attempt, node) in attempts {
                let seq: Option<i64> = bump
                    .query_row(params![id, attempt], |r| r.get(0))
                    .optional()?;
                let Some(seq) = seq else {
                    return Err(JournalError::UnknownTask(id.clone()));
                };
                log.execute(params![seq, attempt, node])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Record outcomes in ONE transaction. A task that already has an
    /// outcome -> DuplicateOutcome(id); unknown -> UnknownTask; on error
    /// nothing is written.
    pub fn record_outcomes(&mut self, outcomes: &[TaskOutcome]) -> Result<(), JournalError> {
        if outcomes.is_empty() {
            return Ok(());
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO outcomes
                     (task_seq, state, attempt, node, exit_code, error, result_json, finished_at,
                      sum)
                 SELECT seq, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9 FROM tasks WHERE id = ?1
                 ON CONFLICT (task_seq) DO NOTHING",
            )?;
            let mut exists = tx.prepare_cached("SELECT 1 FROM tasks WHERE id = ?1")?;
            for o in outcomes {
                let written = insert.execute(params![
                    o.id,
                    o.state.as_str(),
                    o.attempt,
                    o.node,
                    o.exit_code,
                    o.error,
                    o.result_json,
                    o.finished_at,
                    outcome_sum(o)
                ])?;
                if written == 0 {
                    return Err(if exists.exists([&o.id])? {
                        JournalError::DuplicateOutcome(o.id.clone())
                    } else {
                        JournalError::UnknownTask(o.id.clone())
                    });
                }
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Every task in submission order with its outcome (if any) and highest
    /// recorded attempt, for replay at restart.
    pub fn load(&self) -> Result<Vec<StoredTask>, JournalError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT t.id, t.spec_json, t.submitted_at, max(t.attempts, coalesce(o.attempt, 0)),
                    o.state, o.attempt, o.node, o.exit_code, o.error, o.result_json, o.finished_at,
                    t.seq, t.sum, o.sum
             FROM tasks t LEFT JOIN outcomes o ON o.task_seq = t.seq
             ORDER BY t.seq",
        )?;
        let rows = stmt.query_map([], |row| {
            let id: String = row.get(0)?;
            let outcome = outcome_from_row(&id, row, 4)?;
            let sums: (i64, Option<i64>, Option<i64>) = (row.get(11)?, row.get(12)?, row.get(13)?);
            Ok((
                StoredTask {
                    task: SubmittedTask {
                        id,
                        spec_json: row.get(1)?,
                        submitted_at: row.get(2)?,
                    },
                    outcome,
                    attempts: row.get(3)?,
                },
                sums,
            ))
        })?;
        let mut tasks = Vec::new();
        for (n, row) in rows.enumerate() {
            let (t, (seq, task_sum_stored, outcome_sum_stored)) = row.map_err(|e| match e {
                // Bytes that no longer decode (text that is not UTF-8, a number that is not).
                rusqlite::Error::FromSqlConversionFailure(..) => JournalError::Corrupt(format!(
                    "task record number {} in submission order is unreadable ({e}): the journal \
                     file was damaged",
                    n + 1
                )),
                e => e.into(),
            })?;
            let task = &t.task;
            if task_sum_stored
                .is_some_and(|s| s != task_sum(&task.id, &task.spec_json, task.submitted_at))
            {
                return Err(damaged(&format!("task record {seq} (id {:?})", task.id)));
            }
            if let (Some(o), Some(s)) = (&t.outcome, outcome_sum_stored) {
                if s != outcome_sum(o) {
                    return Err(damaged(&format!("the outcome of task {:?}", task.id)));
                }
            }
            tasks.push(t);
        }
        Ok(tasks)
    }

    /// Outcome of one task, if recorded.
    pub fn outcome(&self, id: &str) -> Result<Option<TaskOutcome>, JournalError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT o.state, o.attempt, o.node, o.exit_code, o.error, o.result_json, o.finished_at,
                    o.sum
             FROM tasks t JOIN outcomes o ON o.task_seq = t.seq
             WHERE t.id = ?1",
        )?;
        let found = stmt
            .query_row([id], |row| {
                Ok((outcome_from_row(id, row, 0)?, row.get::<_, Option<i64>>(7)?))
            })
            .optional()?;
        match found {
            Some((Some(o), Some(sum))) if sum != outcome_sum(&o) => {
                Err(damaged(&format!("the outcome of task {id:?}")))
            }
            Some((o, _)) => Ok(o),
            None => Ok(None),
        }
    }

    /// Dispatch history of one task: `(attempt, node)` in attempt order
    /// (empty for an unknown or never dispatched task).
    pub fn attempts(&self, id: &str) -> Result<Vec<(u32, String)>, JournalError> {
        Ok(self
            .attempt_results(id)?
            .into_iter()
            .map(|(a, n, _)| (a, n))
            .collect())
    }

    /// Dispatch history of one task with each attempt's report, for attempts that ended without
    /// ending the task (a retried failure): `(attempt, node, report JSON)` in attempt order.
    pub fn attempt_results(
        &self,
        id: &str,
    ) -> Result<Vec<(u32, String, Option<String>)>, JournalError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT a.attempt, a.node, a.result_json FROM tasks t JOIN attempts a ON a.task_seq = t.seq
             WHERE t.id = ?1 ORDER BY a.attempt",
        )?;
        let rows = stmt.query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Record the reports of attempts that ended without ending their task (retried failures),
    /// in ONE transaction: `(task id, attempt, report JSON)`. An attempt not recorded by
    /// [`Journal::record_attempts`] is ignored.
    pub fn record_attempt_results(
        &mut self,
        results: &[(String, u32, String)],
    ) -> Result<(), JournalError> {
        if results.is_empty() {
            return Ok(());
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut set = tx.prepare_cached(
                "UPDATE attempts SET result_json = ?3
                 WHERE task_seq = (SELECT seq FROM tasks WHERE id = ?1) AND attempt = ?2",
            )?;
            for (id, attempt, json) in results {
                set.execute(params![id, attempt, json])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Commit this connection's transactions without waiting for fsync (`synchronous=NORMAL`
    /// under WAL): a commit survives a crash of the process (kill -9) but not of the machine.
    /// The dispatcher uses it for outcomes, whose loss only makes a task run again; the next
    /// fully synchronous commit (a submission) makes everything before it durable too.
    pub fn relax_durability(&self) -> Result<(), JournalError> {
        self.conn.pragma_update(None, "synchronous", "NORMAL")?;
        Ok(())
    }

    /// (submitted, with outcome) counts.
    pub fn counts(&self) -> Result<(u64, u64), JournalError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT (SELECT count(*) FROM tasks), (SELECT count(*) FROM outcomes)",
        )?;
        let (submitted, finished): (i64, i64) =
            stmt.query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok((submitted as u64, finished as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::PathBuf;

    fn task(id: &str) -> SubmittedTask {
        SubmittedTask {
            id: id.to_string(),
            spec_json: format!(r#"{{"cmd":"run {id}","inputs":["s3://b/{id}"]}}"#),
            submitted_at: 1_700_000_000.25 + id.len() as f64,
        }
    }

    fn tasks(ids: &[&str]) -> Vec<SubmittedTask> {
        ids.iter().map(|id| task(id)).collect()
    }

    fn outcome(id: &str, state: OutcomeState) -> TaskOutcome {
        TaskOutcome {
            id: id.to_string(),
            state,
            attempt: 2,
            node: Some("node-7".to_string()),
            exit_code: if state == OutcomeState::Cancelled {
                None
            } else {
                Some(3)
            },
            error: (state == OutcomeState::Failed).then(|| "boom".to_string()),
            result_json: r#"{"secs":1.5,"bytes":{"cache":10,"s3":20}}"#.to_string(),
            finished_at: 1_700_000_100.125,
        }
    }

    fn ids(j: &Journal) -> Vec<String> {
        j.load().unwrap().into_iter().map(|s| s.task.id).collect()
    }

    fn wal_path(db: &Path) -> PathBuf {
        let mut s = db.as_os_str().to_owned();
        s.push("-wal");
        PathBuf::from(s)
    }

    fn checkpoint(j: &Journal) {
        let busy: i64 = j
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .unwrap();
        assert_eq!(busy, 0, "checkpoint was blocked");
    }

    #[test]
    fn round_trip_submit_attempts_outcomes_load() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.db")).unwrap();
        assert!(j.load().unwrap().is_empty());
        assert_eq!(j.counts().unwrap(), (0, 0));

        // Submission order must survive regardless of id sort order.
        let submitted = tasks(&["zeta", "alpha", "mid", "b"]);
        j.submit(&submitted).unwrap();
        j.submit(&[]).unwrap();
        j.record_attempts(&[
            ("zeta".into(), 1, "n1".into()),
            ("alpha".into(), 1, "n2".into()),
            ("zeta".into(), 2, "n3".into()),
        ])
        .unwrap();
        let o_zeta = outcome("zeta", OutcomeState::Succeeded);
        let o_mid = TaskOutcome {
            attempt: 1,
            node: None,
            exit_code: None,
            error: None,
            ..outcome("mid", OutcomeState::Cancelled)
        };
        let o_alpha = outcome("alpha", OutcomeState::Failed);
        j.record_outcomes(&[o_zeta.clone(), o_mid.clone(), o_alpha.clone()])
            .unwrap();

        let loaded = j.load().unwrap();
        let expected = vec![
            StoredTask {
                task: submitted[0].clone(),
                outcome: Some(o_zeta.clone()),
                attempts: 2,
            },
            StoredTask {
                task: submitted[1].clone(),
                outcome: Some(o_alpha.clone()),
                attempts: 2, // outcome attempt 2 > dispatched attempt 1
            },
            StoredTask {
                task: submitted[2].clone(),
                outcome: Some(o_mid.clone()),
                attempts: 1, // never dispatched, outcome says attempt 1
            },
            StoredTask {
                task: submitted[3].clone(),
                outcome: None,
                attempts: 0,
            },
        ];
        assert_eq!(loaded, expected);
        assert_eq!(j.outcome("zeta").unwrap(), Some(o_zeta));
        assert_eq!(j.outcome("mid").unwrap(), Some(o_mid));
        assert_eq!(j.outcome("b").unwrap(), None);
        assert_eq!(j.outcome("nope").unwrap(), None);
        assert_eq!(
            j.attempts("zeta").unwrap(),
            vec![(1, "n1".to_string()), (2, "n3".to_string())]
        );
        assert!(j.attempts("b").unwrap().is_empty());
        assert_eq!(j.counts().unwrap(), (4, 3));
    }

    #[test]
    fn outcome_state_serde_names_match_stored_names() {
        for s in [
            OutcomeState::Succeeded,
            OutcomeState::Failed,
            OutcomeState::Cancelled,
        ] {
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
            assert_eq!(OutcomeState::parse(s.as_str()), Some(s));
        }
    }

    #[test]
    fn duplicate_task_in_batch_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.db")).unwrap();
        let err = j.submit(&tasks(&["a", "b", "a", "c"])).unwrap_err();
        assert!(
            matches!(&err, JournalError::DuplicateTask(id) if id == "a"),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "task a already exists");
        assert_eq!(j.counts().unwrap(), (0, 0));
        // The journal is still usable and the ids are free.
        j.submit(&tasks(&["a", "b", "c"])).unwrap();
        assert_eq!(ids(&j), ["a", "b", "c"]);
    }

    #[test]
    fn duplicate_task_against_journal_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.db")).unwrap();
        j.submit(&tasks(&["a", "b"])).unwrap();
        let err = j.submit(&tasks(&["c", "d", "b", "e"])).unwrap_err();
        assert!(
            matches!(&err, JournalError::DuplicateTask(id) if id == "b"),
            "{err:?}"
        );
        assert_eq!(ids(&j), ["a", "b"]);
        // The original "b" is untouched.
        assert_eq!(j.load().unwrap()[1].task, task("b"));
    }

    #[test]
    fn duplicate_outcome_refused_and_batch_rolled_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.db")).unwrap();
        j.submit(&tasks(&["a", "b", "c"])).unwrap();
        let first = outcome("a", OutcomeState::Succeeded);
        j.record_outcomes(std::slice::from_ref(&first)).unwrap();

        // Against the journal: "b" must not be written either.
        let err = j
            .record_outcomes(&[
                outcome("b", OutcomeState::Succeeded),
                outcome("a", OutcomeState::Failed),
            ])
            .unwrap_err();
        assert!(
            matches!(&err, JournalError::DuplicateOutcome(id) if id == "a"),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "task a already has an outcome");
        assert_eq!(j.outcome("a").unwrap(), Some(first));
        assert_eq!(j.outcome("b").unwrap(), None);

        // Twice within one batch.
        let err = j
            .record_outcomes(&[
                outcome("c", OutcomeState::Succeeded),
                outcome("c", OutcomeState::Cancelled),
            ])
            .unwrap_err();
        assert!(
            matches!(&err, JournalError::DuplicateOutcome(id) if id == "c"),
            "{err:?}"
        );
        assert_eq!(j.outcome("c").unwrap(), None);
        assert_eq!(j.counts().unwrap(), (3, 1));
    }

    #[test]
    fn unknown_task_refused_and_batch_rolled_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.db")).unwrap();
        j.submit(&tasks(&["a", "b"])).unwrap();

        let err = j
            .record_outcomes(&[
                outcome("a", OutcomeState::Succeeded),
                outcome("ghost", OutcomeState::Succeeded),
            ])
            .unwrap_err();
        assert!(
            matches!(&err, JournalError::UnknownTask(id) if id == "ghost"),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "unknown task ghost");
        assert_eq!(j.outcome("a").unwrap(), None);

        let err = j
            .record_attempts(&[
                ("b".into(), 1, "n1".into()),
                ("ghost".into(), 1, "n1".into()),
            ])
            .unwrap_err();
        assert!(
            matches!(&err, JournalError::UnknownTask(id) if id == "ghost"),
            "{err:?}"
        );
        assert!(j.attempts("b").unwrap().is_empty());
        assert!(j.load().unwrap().iter().all(|t| t.attempts == 0));
        assert_eq!(j.counts().unwrap(), (2, 0));
    }

    #[test]
    fn reopen_after_drop_keeps_everything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let before = {
            let mut j = Journal::open(&path).unwrap();
            j.submit(&tasks(&["t1", "t2", "t3"])).unwrap();
            j.record_attempts(&[("t2".into(), 4, "n9".into())]).unwrap();
            j.record_outcomes(&[outcome("t1", OutcomeState::Failed)])
                .unwrap();
            j.load().unwrap()
        };
        let mut j = Journal::open(&path).unwrap();
        assert_eq!(j.load().unwrap(), before);
        assert_eq!(j.load().unwrap()[1].attempts, 4);
        assert_eq!(j.counts().unwrap(), (3, 1));
        // Invariants still enforced after reopen.
        assert!(matches!(
            j.submit(&tasks(&["t2"])),
            Err(JournalError::DuplicateTask(_))
        ));
        assert!(matches!(
            j.record_outcomes(&[outcome("t1", OutcomeState::Succeeded)]),
            Err(JournalError::DuplicateOutcome(_))
        ));
        // New submissions continue the order.
        j.submit(&tasks(&["t0"])).unwrap();
        assert_eq!(ids(&j), ["t1", "t2", "t3", "t0"]);
    }

    #[test]
    fn acknowledged_submissions_survive_crash_without_close() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let mut j = Journal::open(&path).unwrap();
        j.submit(&tasks(&["a", "b"])).unwrap();
        j.record_attempts(&[("a".into(), 1, "n1".into())]).unwrap();
        j.record_outcomes(&[outcome("a", OutcomeState::Succeeded)])
            .unwrap();
        j.submit(&tasks(&["c"])).unwrap();
        let live = j.load().unwrap();

        // Crash image: the files as they are on disk while the journal is
        // still open (nothing checkpointed, no clean close, no -shm).
        let crash = tempfile::tempdir().unwrap();
        let copy = crash.path().join("j.db");
        fs::copy(&path, &copy).unwrap();
        fs::copy(wal_path(&path), wal_path(&copy)).unwrap();
        drop(j);

        let j = Journal::open(&copy).unwrap();
        assert_eq!(j.load().unwrap(), live);
    }

    fn make_db(path: &Path, sql: &str) {
        let c = Connection::open(path).unwrap();
        c.execute_batch(sql).unwrap();
    }

    #[test]
    fn version_or_magic_mismatch_is_version_error() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                "other-magic.db",
                "CREATE TABLE meta (key TEXT PRIMARY KEY, value NOT NULL);
                 INSERT INTO meta VALUES ('magic', 'someone-else'), ('schema_version', 1);",
                "someone-else",
            ),
            (
                "v4.db",
                "CREATE TABLE meta (key TEXT PRIMARY KEY, value NOT NULL);
                 INSERT INTO meta VALUES ('magic', 'diffuse-journal'), ('schema_version', 4);",
                "schema version 4",
            ),
            (
                "no-version.db",
                "CREATE TABLE meta (key TEXT PRIMARY KEY, value NOT NULL);
                 INSERT INTO meta VALUES ('magic', 'diffuse-journal');",
                "schema version missing",
            ),
            (
                "foreign.db",
                "CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('x');",
                "no meta table",
            ),
            (
                "odd-meta.db",
                "CREATE TABLE meta (k TEXT, v TEXT);",
                "unreadable meta table",
            ),
        ];
        for (file, sql, needle) in cases {
            let path = dir.path().join(file);
            make_db(&path, sql);
            let err = Journal::open(&path).unwrap_err();
            match &err {
                JournalError::Version {
                    path: p,
                    found,
                    expected,
                } => {
                    assert_eq!(p, &path.display().to_string());
                    assert!(found.contains(needle), "{file}: found = {found}");
                    assert_eq!(expected, "magic \"diffuse-journal\", schema version 3");
                }
                other => panic!("{file}: expected Version error, got {other:?}"),
            }
            let msg = err.to_string();
            assert!(msg.contains("incompatible version"), "{msg}");
            // The foreign file was identified before being changed.
            let c = Connection::open(&path).unwrap();
            let mode: String = c
                .query_row("PRAGMA journal_mode", [], |r| r.get(0))
                .unwrap();
            assert_eq!(mode, "delete", "{file}");
            let tables: i64 = c
                .query_row(
                    "SELECT count(*) FROM sqlite_master WHERE name = 'tasks'",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(tables, 0, "{file}");
        }
    }

    #[test]
    fn open_in_missing_directory_is_open_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no/such/dir/j.db");
        let err = Journal::open(&path).unwrap_err();
        assert!(matches!(err, JournalError::Open { .. }), "{err:?}");
        assert!(err.to_string().contains("no/such/dir"), "{err}");
    }

    /// Deterministic junk bytes.
    fn garbage(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn torn_wal_tail_reopens_with_exactly_the_intact_transactions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let mut j = Journal::open(&path).unwrap();
        let base: Vec<String> = (0..5).map(|i| format!("base-{i}")).collect();
        j.submit(&base.iter().map(|id| task(id)).collect::<Vec<_>>())
            .unwrap();
        j.conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        checkpoint(&j);
        let wal = wal_path(&path);
        assert_eq!(fs::metadata(&wal).unwrap().len(), 0);

        // Batches after the checkpoint live only in the WAL; remember where
        // each one's commit frame ends.
        let mut batches: Vec<Vec<String>> = Vec::new();
        let mut ends: Vec<u64> = Vec::new();
        for b in 0..6 {
            let batch: Vec<String> = (0..3).map(|k| format!("wal-{b}-{k}")).collect();
            j.submit(&batch.iter().map(|id| task(id)).collect::<Vec<_>>())
                .unwrap();
            ends.push(fs::metadata(&wal).unwrap().len());
            batches.push(batch);
        }
        assert!(ends.windows(2).all(|w| w[0] < w[1]), "{ends:?}");

        // Crash image, taken while the journal is still open.
        let db_bytes = fs::read(&path).unwrap();
        let wal_bytes = fs::read(&wal).unwrap();
        assert_eq!(wal_bytes.len() as u64, ends[5]);
        drop(j);

        let mut cuts: Vec<u64> = vec![0, 10, 32, 33, ends[0] - 1, ends[0], ends[0] + 100];
        cuts.extend([
            ends[2] - 1,
            ends[2],
            (ends[2] + ends[3]) / 2,
            ends[5] - 1,
            ends[5],
        ]);
        for (ci, &cut) in cuts.iter().enumerate() {
            for junk in [0usize, 37, 5000] {
                let case = format!("cut {cut} of {}, {junk} junk bytes", ends[5]);
                let d = tempfile::tempdir().unwrap();
                let p = d.path().join("j.db");
                fs::write(&p, &db_bytes).unwrap();
                let mut torn = wal_bytes[..cut as usize].to_vec();
                torn.extend(garbage(junk, ci as u64 * 31 + junk as u64));
                fs::write(wal_path(&p), &torn).unwrap();

                let mut j = Journal::open(&p).unwrap_or_else(|e| panic!("{case}: {e}"));
                let mut expected = base.clone();
                for (b, batch) in batches.iter().enumerate() {
                    if ends[b] <= cut {
                        expected.extend(batch.iter().cloned());
                    }
                }
                assert_eq!(ids(&j), expected, "{case}");

                // The restarted journal keeps working and stays durable.
                j.submit(&tasks(&["after-restart"]))
                    .unwrap_or_else(|e| panic!("{case}: {e}"));
                drop(j);
                let j = Journal::open(&p).unwrap_or_else(|e| panic!("{case}: {e}"));
                expected.push("after-restart".to_string());
                assert_eq!(ids(&j), expected, "{case}");
            }
        }
    }

    /// A checkpointed, cleanly closed journal; returns (page size, root page
    /// of `tasks`).
    fn checkpointed_journal(path: &Path) -> (u64, u64) {
        let mut j = Journal::open(path).unwrap();
        let batch: Vec<SubmittedTask> = (0..50).map(|i| task(&format!("t{i}"))).collect();
        j.submit(&batch).unwrap();
        checkpoint(&j);
        let page_size: i64 = j
            .conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap();
        let root: i64 = j
            .conn
            .query_row(
                "SELECT rootpage FROM sqlite_master WHERE name = 'tasks'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        drop(j);
        assert!(!wal_path(path).exists() || fs::metadata(wal_path(path)).unwrap().len() == 0);
        (page_size as u64, root as u64)
    }

    fn flip_byte(path: &Path, offset: u64) {
        let mut bytes = fs::read(path).unwrap();
        bytes[offset as usize] ^= 0xFF;
        fs::write(path, bytes).unwrap();
    }

    fn expect_corrupt(path: &Path) -> String {
        match Journal::open(path) {
            Err(JournalError::Corrupt(msg)) => {
                assert!(msg.contains(&path.display().to_string()), "{msg}");
                msg
            }
            Err(other) => panic!("expected Corrupt error, got {other:?}"),
            Ok(_) => panic!("opened a corrupt journal"),
        }
    }

    #[test]
    fn flipped_btree_page_byte_is_corrupt_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let (page_size, root) = checkpointed_journal(&path);
        // First byte of a b-tree page header is the page type (page 1 has
        // the 100-byte file header in front of it).
        let header = if root == 1 { 100 } else { 0 };
        flip_byte(&path, (root - 1) * page_size + header);
        let msg = expect_corrupt(&path);
        let err = JournalError::Corrupt(msg);
        assert!(err.to_string().starts_with("journal is corrupt: "), "{err}");
    }

    #[test]
    fn flipped_header_byte_is_corrupt_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        checkpointed_journal(&path);
        // Byte 0 is part of the "SQLite format 3\0" magic string.
        flip_byte(&path, 0);
        let msg = expect_corrupt(&path);
        assert!(msg.contains("not a database"), "{msg}");
    }

    #[test]
    fn non_sqlite_file_is_corrupt_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        fs::write(&path, garbage(8192, 7)).unwrap();
        expect_corrupt(&path);
    }

    /// Flip the lowest bit of one byte: a character becomes its neighbour.
    fn flip_bit(path: &Path, offset: u64) {
        let mut bytes = fs::read(path).unwrap();
        bytes[offset as usize] ^= 0x01;
        fs::write(path, bytes).unwrap();
    }

    #[test]
    fn undecodable_bytes_inside_a_record_are_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        checkpointed_journal(&path);
        flip_byte(&path, offset_of(&path, "run t23\"") + 5);
        let j = Journal::open(&path).unwrap();
        assert!(
            matches!(j.load(), Err(JournalError::Corrupt(m)) if m.contains("unreadable")),
            "a byte that breaks UTF-8 is reported as damage"
        );
    }

    /// The offset of the only occurrence of `needle` in the file at `path`.
    fn offset_of(path: &Path, needle: &str) -> u64 {
        let bytes = fs::read(path).unwrap();
        let hits: Vec<usize> = bytes
            .windows(needle.len())
            .enumerate()
            .filter(|(_, w)| *w == needle.as_bytes())
            .map(|(i, _)| i)
            .collect();
        assert_eq!(hits.len(), 1, "{needle:?} in {}", path.display());
        hits[0] as u64
    }

    #[test]
    fn flipped_byte_inside_a_task_record_stops_the_load_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        checkpointed_journal(&path);
        // A digit of one task's spec: still valid JSON, still a valid b-tree.
        flip_bit(&path, offset_of(&path, "run t17\"") + 5);
        let j = Journal::open(&path).expect("the structure is intact");
        match j.load() {
            Err(JournalError::Corrupt(msg)) => {
                assert!(msg.contains("(id \"t17\")"), "{msg}");
                assert!(msg.contains("does not match its checksum"), "{msg}");
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn flipped_byte_inside_an_outcome_is_caught_by_load_and_by_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        {
            let mut j = Journal::open(&path).unwrap();
            j.submit(&tasks(&["a", "b"])).unwrap();
            let mut o = outcome("b", OutcomeState::Succeeded);
            o.result_json = r#"{"marker":"zq-outcome-b"}"#.into();
            j.record_outcomes(&[outcome("a", OutcomeState::Failed), o])
                .unwrap();
            checkpoint(&j);
        }
        flip_bit(&path, offset_of(&path, "zq-outcome-b") + 3);
        let j = Journal::open(&path).unwrap();
        assert!(
            matches!(j.load(), Err(JournalError::Corrupt(m)) if m.contains("outcome of task \"b\""))
        );
        assert!(matches!(j.outcome("b"), Err(JournalError::Corrupt(_))));
        assert_eq!(j.outcome("a").unwrap().unwrap().state, OutcomeState::Failed);
    }

    #[test]
    fn a_version_1_journal_is_upgraded_and_its_rows_load_unchecked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.db");
        make_db(
            &path,
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value NOT NULL);
             INSERT INTO meta VALUES ('magic', 'diffuse-journal'), ('schema_version', 1);
             CREATE TABLE tasks (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
                 spec_json TEXT NOT NULL, submitted_at REAL NOT NULL,
                 attempts INTEGER NOT NULL DEFAULT 0);
             CREATE TABLE attempts (task_seq INTEGER NOT NULL REFERENCES tasks(seq),
                 attempt INTEGER NOT NULL, node TEXT NOT NULL,
                 PRIMARY KEY (task_seq, attempt)) WITHOUT ROWID;
             CREATE TABLE outcomes (task_seq INTEGER PRIMARY KEY REFERENCES tasks(seq),
                 state TEXT NOT NULL, attempt INTEGER NOT NULL, node TEXT, exit_code INTEGER,
                 error TEXT, result_json TEXT NOT NULL, finished_at REAL NOT NULL);
             INSERT INTO tasks (id, spec_json, submitted_at) VALUES ('old', '{}', 1.0);",
        );
        let mut j = Journal::open(&path).unwrap();
        j.submit(&tasks(&["new"])).unwrap();
        let loaded: Vec<String> = j.load().unwrap().into_iter().map(|t| t.task.id).collect();
        assert_eq!(loaded, ["old", "new"]);
        // The attempts' result column was added too.
        j.record_attempts(&[("new".into(), 1, "w1".into())])
            .unwrap();
        j.record_attempt_results(&[("new".into(), 1, "{\"exit_code\":3}".into())])
            .unwrap();
        assert_eq!(
            j.attempt_results("new").unwrap(),
            vec![(1, "w1".to_string(), Some("{\"exit_code\":3}".to_string()))]
        );
        drop(j);
        let c = Connection::open(&path).unwrap();
        let v: i64 = c
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
    }
}
