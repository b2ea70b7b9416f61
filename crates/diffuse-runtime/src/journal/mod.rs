//! The dispatcher's durable journal, kept in an embedded SQLite database.
//!
//! # Schema (version 4)
//!
//! ```sql
//! meta(key TEXT PRIMARY KEY, value NOT NULL)
//!     -- ('magic', 'diffuse-journal'), ('schema_version', 4)
//! tasks(seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- submission order
//!       id TEXT NOT NULL UNIQUE, spec_json TEXT NOT NULL,
//!       submitted_at REAL NOT NULL,
//!       attempts INTEGER NOT NULL DEFAULT 0,    -- highest dispatched attempt
//!       sum INTEGER, crc INTEGER)               -- record checksums
//! attempts(task_seq REFERENCES tasks(seq), attempt, node,
//!          result_json,                         -- report of a retried failure
//!          PRIMARY KEY (task_seq, attempt))     -- dispatch history
//! outcomes(task_seq INTEGER PRIMARY KEY REFERENCES tasks(seq),
//!          state TEXT CHECK (state IN ('succeeded','failed','cancelled')),
//!          attempt, node, exit_code, error, result_json, finished_at,
//!          sum INTEGER, crc INTEGER)            -- record checksums
//! ```
//!
//! A record's checksum guards against damage to the bytes of a stored value (a flipped bit, a
//! torn or overwritten page that SQLite's structure check cannot see), not against anyone who
//! would forge a record: whoever can write the file can rewrite its checksums too. So it is a
//! CRC-32 (`crc`, over the record's fields, each length-prefixed; see `record_crc`), which
//! detects every burst of up to 32 flipped bits and all but one in 4 billion other damages, at
//! about a twentieth of the cost of the SHA-256 it replaced. It is checked whenever a task or an
//! outcome is read back. Rows written before version 4 keep their `sum` (the first 8 bytes of a
//! SHA-256 over the same fields) and are checked with it; a row has one or the other. A
//! version-1 journal's rows have neither and are not checked. Opening an older journal
//! upgrades it in place: version 2 gains the attempts' `result_json` column, version 3 the
//! `crc` columns.
//!
//! An outcome's `result_json` is the attempt's report in its compact form (fields at their
//! default left out, [`crate::proto::TaskReport`]); rows of older versions hold the whole form,
//! and both read back the same.
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

mod error;

pub use error::JournalError;
use error::{is_corruption, open_error};
use std::path::Path;
use std::time::Duration;

use rusqlite::types::Value;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

/// Value of the `magic` row of the `meta` table.
pub const MAGIC: &str = "diffuse-journal";
/// Value of the `schema_version` row of the `meta` table.
pub const SCHEMA_VERSION: i64 = 4;

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
    sum          INTEGER,
    crc          INTEGER
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
    sum         INTEGER,
    crc         INTEGER
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
    /// The attempt's report ([`crate::proto::TaskReport`]) as JSON, compact (its default
    /// fields left out); written out whole for the API's readers
    /// ([`crate::proto::full_report_json`]). `{}` for a task that never ran.
    #[serde(serialize_with = "whole_report")]
    pub result_json: String,
    /// Completion time, unix seconds.
    pub finished_at: f64,
}

/// A report written out whole (see [`TaskOutcome::result_json`]).
fn whole_report<S: serde::Serializer>(json: &str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::proto::full_report_json(json))
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

impl TaskOutcome {
    /// The report of the attempt that made this outcome, where it ran (none for a task
    /// cancelled or failed before it ran, whose `result_json` is `{}`).
    pub fn report(&self) -> Option<crate::proto::TaskReport> {
        serde_json::from_str(&self.result_json).ok()
    }
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
    /// A journal of schema version 3 (SHA-256 record sums only): upgraded at open.
    Version3,
    /// A journal of this schema.
    Current,
}

/// A record's checksum before version 4: the first 8 bytes of SHA-256 over its fields, each
/// length-prefixed.
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

/// A record's checksum from version 4 on: CRC-32 over its fields, each length-prefixed.
fn record_crc(fields: &[&[u8]]) -> i64 {
    let mut h = crc32fast::Hasher::new();
    for f in fields {
        h.update(&(f.len() as u64).to_le_bytes());
        h.update(f);
    }
    i64::from(h.finalize())
}

/// Which checksum a stored record carries: a CRC-32 (version 4 on), a SHA-256 sum (versions 2
/// and 3), or none (version 1).
#[derive(Clone, Copy)]
enum Check {
    Crc(i64),
    Sha(i64),
    Unchecked,
}

impl Check {
    /// From a row's `crc` and `sum` columns.
    fn of(crc: Option<i64>, sum: Option<i64>) -> Check {
        match (crc, sum) {
            (Some(c), _) => Check::Crc(c),
            (None, Some(s)) => Check::Sha(s),
            (None, None) => Check::Unchecked,
        }
    }

    /// Whether `fields` match it.
    fn holds(self, fields: &[&[u8]]) -> bool {
        match self {
            Check::Crc(c) => c == record_crc(fields),
            Check::Sha(s) => s == record_sum(fields),
            Check::Unchecked => true,
        }
    }
}

/// Whether a task record matches its checksum.
fn task_holds(check: Check, t: &SubmittedTask) -> bool {
    check.holds(&[
        t.id.as_bytes(),
        t.spec_json.as_bytes(),
        &t.submitted_at.to_bits().to_le_bytes(),
    ])
}

fn task_crc(id: &str, spec_json: &str, submitted_at: f64) -> i64 {
    record_crc(&[
        id.as_bytes(),
        spec_json.as_bytes(),
        &submitted_at.to_bits().to_le_bytes(),
    ])
}

/// Whether an outcome record matches its checksum.
fn outcome_holds(check: Check, o: &TaskOutcome) -> bool {
    with_outcome_fields(o, |fields| check.holds(fields))
}

/// The checksum an outcome record is written with (public for the journal's benchmark): the
/// CRC-32 of the same bytes as `record_crc` of its fields, fed without copying them.
pub fn outcome_crc(o: &TaskOutcome) -> i64 {
    let mut h = crc32fast::Hasher::new();
    let mut field = |parts: &[&[u8]]| {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        h.update(&(len as u64).to_le_bytes());
        for p in parts {
            h.update(p);
        }
    };
    let exit_code = o.exit_code.map(i32::to_le_bytes);
    field(&[o.id.as_bytes()]);
    field(&[o.state.as_str().as_bytes()]);
    field(&[&o.attempt.to_le_bytes()]);
    for v in [
        o.node.as_deref().map(str::as_bytes),
        exit_code.as_ref().map(|b| &b[..]),
        o.error.as_deref().map(str::as_bytes),
    ] {
        match v {
            Some(b) => field(&[&[1u8], b]),
            None => field(&[&[0u8]]),
        }
    }
    field(&[o.result_json.as_bytes()]);
    field(&[&o.finished_at.to_bits().to_le_bytes()]);
    i64::from(h.finalize())
}

/// The SHA-256 sum an outcome record was written with before version 4 (public for the
/// journal's benchmark).
pub fn outcome_sum(o: &TaskOutcome) -> i64 {
    with_outcome_fields(o, record_sum)
}

/// `f` of the fields of an outcome record, as its checksums cover them.
fn with_outcome_fields<T>(o: &TaskOutcome, f: impl FnOnce(&[&[u8]]) -> T) -> T {
    let opt = |v: Option<&[u8]>| v.map_or(vec![0u8], |b| [&[1u8][..], b].concat());
    f(&[
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
    /// table holding magic "diffuse-journal" and the schema version
    /// ([`SCHEMA_VERSION`]; creates it when new, upgrades a journal of an
    /// older version in place, Version error for anything else), and runs a
    /// quick integrity check.
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

        if let MetaState::Version1 | MetaState::Version2 | MetaState::Version3 = state {
            let tx = conn.unchecked_transaction()?;
            if let MetaState::Version1 = state {
                tx.execute_batch(
                    "ALTER TABLE tasks ADD COLUMN sum INTEGER;
                     ALTER TABLE outcomes ADD COLUMN sum INTEGER;",
                )?;
            }
            if let MetaState::Version1 | MetaState::Version2 = state {
                tx.execute_batch("ALTER TABLE attempts ADD COLUMN result_json TEXT;")?;
            }
            tx.execute_batch(
                "ALTER TABLE tasks ADD COLUMN crc INTEGER;
                 ALTER TABLE outcomes ADD COLUMN crc INTEGER;",
            )?;
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
        } else if magic_ok && version_number == Some(3) {
            Ok(MetaState::Version3)
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
                "INSERT INTO tasks (id, spec_json, submitted_at, crc) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (id) DO NOTHING",
            )?;
            for t in tasks {
                let crc = task_crc(&t.id, &t.spec_json, t.submitted_at);
                if insert.execute(params![t.id, t.spec_json, t.submitted_at, crc])? == 0 {
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
                      crc)
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
                    outcome_crc(o)
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
        let mut tasks = Vec::new();
        self.load_each(|t| tasks.push(t))?;
        Ok(tasks)
    }

    /// [`Journal::load`] one task at a time: `each` is handed every task in submission order as
    /// it is read and checked, so a replay need not hold them all at once, and may work on
    /// each while the next is read. Stops at the first damaged record (the tasks before it
    /// have been handed on).
    pub fn load_each(&self, mut each: impl FnMut(StoredTask)) -> Result<(), JournalError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT t.id, t.spec_json, t.submitted_at, max(t.attempts, coalesce(o.attempt, 0)),
                    o.state, o.attempt, o.node, o.exit_code, o.error, o.result_json, o.finished_at,
                    t.seq, t.crc, t.sum, o.crc, o.sum
             FROM tasks t LEFT JOIN outcomes o ON o.task_seq = t.seq
             ORDER BY t.seq",
        )?;
        let rows = stmt.query_map([], |row| {
            let id: String = row.get(0)?;
            let outcome = outcome_from_row(&id, row, 4)?;
            let sums: (i64, Check, Check) = (
                row.get(11)?,
                Check::of(row.get(12)?, row.get(13)?),
                Check::of(row.get(14)?, row.get(15)?),
            );
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
        for (n, row) in rows.enumerate() {
            let (t, (seq, task_check, outcome_check)) = row.map_err(|e| match e {
                // Bytes that no longer decode (text that is not UTF-8, a number that is not).
                rusqlite::Error::FromSqlConversionFailure(..) => JournalError::Corrupt(format!(
                    "task record number {} in submission order is unreadable ({e}): the journal \
                     file was damaged",
                    n + 1
                )),
                e => e.into(),
            })?;
            let task = &t.task;
            if !task_holds(task_check, task) {
                return Err(damaged(&format!("task record {seq} (id {:?})", task.id)));
            }
            if let Some(o) = &t.outcome {
                if !outcome_holds(outcome_check, o) {
                    return Err(damaged(&format!("the outcome of task {:?}", task.id)));
                }
            }
            each(t);
        }
        Ok(())
    }

    /// Outcome of one task, if recorded.
    pub fn outcome(&self, id: &str) -> Result<Option<TaskOutcome>, JournalError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT o.state, o.attempt, o.node, o.exit_code, o.error, o.result_json, o.finished_at,
                    o.crc, o.sum
             FROM tasks t JOIN outcomes o ON o.task_seq = t.seq
             WHERE t.id = ?1",
        )?;
        let found = stmt
            .query_row([id], |row| {
                Ok((
                    outcome_from_row(id, row, 0)?,
                    Check::of(row.get(7)?, row.get(8)?),
                ))
            })
            .optional()?;
        match found {
            Some((Some(o), check)) if !outcome_holds(check, &o) => {
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
    /// The attempt that ended the task may have no attempt row (the dispatcher's writer leaves
    /// it out when the outcome is committed with it): it is read from the outcome.
    pub fn attempt_results(
        &self,
        id: &str,
    ) -> Result<Vec<(u32, String, Option<String>)>, JournalError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT a.attempt, a.node, a.result_json FROM tasks t JOIN attempts a ON a.task_seq = t.seq
             WHERE t.id = ?1
             UNION ALL
             SELECT o.attempt, o.node, NULL FROM tasks t JOIN outcomes o ON o.task_seq = t.seq
             WHERE t.id = ?1 AND o.node IS NOT NULL AND o.attempt > 0 AND NOT EXISTS
                 (SELECT 1 FROM attempts a WHERE a.task_seq = t.seq AND a.attempt = o.attempt)
             ORDER BY 1",
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
mod tests;
