//! What can go wrong with the journal ([`JournalError`]), and which of it a retry may mend.

use rusqlite::ErrorCode;

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

impl JournalError {
    /// Whether the same write may succeed if tried again: the disk full, an I/O error, the
    /// database busy or locked, memory short. Not a damaged file, a constraint, or a task
    /// unknown or already ended.
    pub fn may_pass(&self) -> bool {
        use rusqlite::ErrorCode::*;
        match self {
            JournalError::Sql(rusqlite::Error::SqliteFailure(e, _)) => matches!(
                e.code,
                DiskFull | SystemIoFailure | DatabaseBusy | DatabaseLocked | OutOfMemory
            ),
            _ => false,
        }
    }
}

/// Whether an SQLite error means the file is damaged or not a database.
pub(super) fn is_corruption(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase)
    )
}

/// Error for a failure while opening/configuring the file at `path`.
pub(super) fn open_error(path: &str, e: rusqlite::Error) -> JournalError {
    if is_corruption(&e) {
        JournalError::Corrupt(format!("{path}: {e}"))
    } else {
        JournalError::Open {
            path: path.to_string(),
            source: e,
        }
    }
}

#[cfg(test)]
impl JournalError {
    /// What a write gets from SQLite when the disk is full: for tests that put a journal that
    /// can fail in front of a real one.
    pub(crate) fn disk_full() -> JournalError {
        JournalError::Sql(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            Some("database or disk is full".into()),
        ))
    }
}
