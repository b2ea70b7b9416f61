//! The result index on disk: kept results by identity, and the digests workers reported for
//! the inputs they read, by URI and source version. A dispatcher keeps these tables in its
//! journal's database (a second connection); `diffuse run` keeps them in one file beside its
//! persistent worker caches, so that a second run reuses what the first computed.
//!
//! Writes go to a thread of their own and are committed in batches: a task's end never waits
//! for them. One lost at a crash loses a chance to reuse, never a task: the task runs again.

use super::identity::Identity;
use super::kept::KeptResult;
use rusqlite::{params, Connection};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS results (
    identity BLOB PRIMARY KEY,
    task TEXT NOT NULL,
    files TEXT NOT NULL,
    kept_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS input_digests (
    uri TEXT NOT NULL,
    version TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    PRIMARY KEY (uri, version)
);";

enum Write {
    Result(Identity, KeptResult, f64),
    Forget(Vec<Identity>),
    Digest(String, String, String),
    Clear,
    Flush(mpsc::Sender<()>),
}

/// What a store held when opened.
#[derive(Default)]
pub struct Loaded {
    /// Kept results.
    pub results: Vec<(Identity, KeptResult)>,
    /// `(uri, version, sha256)` of inputs read.
    pub digests: Vec<(String, String, String)>,
}

/// The handle of an open store: writes are sent to its thread.
pub struct Store {
    tx: mpsc::Sender<Write>,
    path: PathBuf,
}

fn open_conn(path: &Path) -> rusqlite::Result<Connection> {
    // Two runs sharing one index may open it at the same moment: SQLite answers the switch of a
    // new file to WAL with "database is locked" at once, without waiting out the busy timeout
    // (seen in CI: two_runs_started_together_get_their_own_directories). Try again a while.
    let mut tries = 0;
    loop {
        match open_conn_once(path) {
            Err(e)
                if tries < 100
                    && e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) =>
            {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

fn open_conn_once(path: &Path) -> rusqlite::Result<Connection> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::create_dir_all(dir);
    }
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.execute_batch(SCHEMA)?;
    Ok(conn)
}

/// Read every kept result and digest of the store at `path` (made if absent).
pub fn load(path: &Path) -> rusqlite::Result<Loaded> {
    let conn = open_conn(path)?;
    let mut loaded = Loaded::default();
    let mut stmt = conn.prepare("SELECT identity, files, task FROM results")?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, Vec<u8>>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
        ))
    })?;
    for row in rows {
        let (id, files, task) = row?;
        let (Ok(id), Ok(files)) = (
            <Identity>::try_from(id.as_slice()),
            serde_json::from_str(&files),
        ) else {
            continue;
        };
        loaded.results.push((id, KeptResult { task, files }));
    }
    let mut stmt = conn.prepare("SELECT uri, version, sha256 FROM input_digests")?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    for row in rows {
        loaded.digests.push(row?);
    }
    Ok(loaded)
}

impl Store {
    /// Open the store at `path` and start its writer thread; also returns what it holds.
    pub fn open(path: &Path) -> rusqlite::Result<(Store, Loaded)> {
        let loaded = load(path)?;
        let mut conn = open_conn(path)?;
        let (tx, rx) = mpsc::channel::<Write>();
        std::thread::Builder::new()
            .name("diffuse-results".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    batch.extend(rx.try_iter().take(4095));
                    if let Err(e) = write_batch(&mut conn, batch) {
                        tracing::warn!("result index: {e}; some results will not be reused");
                    }
                }
            })
            .expect("spawn the result index's writer");
        Ok((
            Store {
                tx,
                path: path.to_path_buf(),
            },
            loaded,
        ))
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keep `result` under `identity` (replacing one kept before).
    pub fn record(&self, identity: Identity, result: KeptResult, at: f64) {
        let _ = self.tx.send(Write::Result(identity, result, at));
    }

    /// Forget these results (their copies are gone).
    pub fn forget(&self, identities: Vec<Identity>) {
        if !identities.is_empty() {
            let _ = self.tx.send(Write::Forget(identities));
        }
    }

    /// An input `uri` at `version` has these bytes.
    pub fn digest(&self, uri: String, version: String, sha256: String) {
        let _ = self.tx.send(Write::Digest(uri, version, sha256));
    }

    /// Forget every result and digest.
    pub fn clear(&self) {
        let _ = self.tx.send(Write::Clear);
    }

    /// Wait until everything sent so far is committed.
    pub fn flush(&self) {
        let (tx, rx) = mpsc::channel();
        if self.tx.send(Write::Flush(tx)).is_ok() {
            let _ = rx.recv();
        }
    }
}

fn write_batch(conn: &mut Connection, batch: Vec<Write>) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    let mut flushed = Vec::new();
    for w in batch {
        match w {
            Write::Result(id, r, at) => {
                let files = serde_json::to_string(&r.files).expect("files serialize");
                tx.execute(
                    "INSERT OR REPLACE INTO results (identity, task, files, kept_at) VALUES (?1, ?2, ?3, ?4)",
                    params![&id[..], r.task, files, at],
                )?;
            }
            Write::Forget(ids) => {
                for id in ids {
                    tx.execute("DELETE FROM results WHERE identity = ?1", params![&id[..]])?;
                }
            }
            Write::Digest(uri, version, sha) => {
                tx.execute(
                    "INSERT OR REPLACE INTO input_digests (uri, version, sha256) VALUES (?1, ?2, ?3)",
                    params![uri, version, sha],
                )?;
            }
            Write::Clear => {
                tx.execute_batch("DELETE FROM results; DELETE FROM input_digests;")?;
            }
            Write::Flush(done) => flushed.push(done),
        }
    }
    tx.commit()?;
    for f in flushed {
        let _ = f.send(());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reuse::ResultFile;

    #[test]
    fn results_and_digests_survive_a_reopen_and_clear_forgets_them() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("results.db");
        let r = KeptResult {
            task: "t1".into(),
            files: vec![ResultFile {
                name: "file:///o/x".into(),
                size: 3,
                sha256: "ab".repeat(32),
                written: Some("3:1".into()),
            }],
        };
        {
            let (s, loaded) = Store::open(&path).unwrap();
            assert!(loaded.results.is_empty());
            s.record([7; 32], r.clone(), 1.0);
            s.record([8; 32], r.clone(), 1.0);
            s.forget(vec![[8; 32]]);
            s.digest("file:///i".into(), "v1".into(), "cd".repeat(32));
            s.flush();
        }
        let loaded = load(&path).unwrap();
        assert_eq!(loaded.results, vec![([7; 32], r)]);
        assert_eq!(loaded.digests.len(), 1);
        let (s, _) = Store::open(&path).unwrap();
        s.clear();
        s.flush();
        let loaded = load(&path).unwrap();
        assert!(loaded.results.is_empty() && loaded.digests.is_empty());
    }
}
