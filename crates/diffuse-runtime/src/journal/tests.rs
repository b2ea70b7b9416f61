//! Tests of the journal: round trips, replay, checksums, torn and damaged files, upgrades.

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
            "v5.db",
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value NOT NULL);
             INSERT INTO meta VALUES ('magic', 'diffuse-journal'), ('schema_version', 5);",
            "schema version 5",
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
                assert_eq!(expected, "magic \"diffuse-journal\", schema version 4");
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

#[test]
fn a_version_3_journal_keeps_its_sha_sums_checked_and_new_rows_get_a_crc() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v3.db");
    let old = SubmittedTask {
        id: "old".into(),
        spec_json: r#"{"id":"old","cmd":"zq-old-spec"}"#.into(),
        submitted_at: 1.5,
    };
    let mut done = outcome("old", OutcomeState::Succeeded);
    done.result_json = r#"{"task":"old","attempt":1,"stdout":null,"outputs":[]}"#.into();
    let sha = record_sum(&[
        old.id.as_bytes(),
        old.spec_json.as_bytes(),
        &old.submitted_at.to_bits().to_le_bytes(),
    ]);
    make_db(
        &path,
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value NOT NULL);
         INSERT INTO meta VALUES ('magic', 'diffuse-journal'), ('schema_version', 3);
         CREATE TABLE tasks (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
             spec_json TEXT NOT NULL, submitted_at REAL NOT NULL,
             attempts INTEGER NOT NULL DEFAULT 0, sum INTEGER);
         CREATE TABLE attempts (task_seq INTEGER NOT NULL REFERENCES tasks(seq),
             attempt INTEGER NOT NULL, node TEXT NOT NULL, result_json TEXT,
             PRIMARY KEY (task_seq, attempt)) WITHOUT ROWID;
         CREATE TABLE outcomes (task_seq INTEGER PRIMARY KEY REFERENCES tasks(seq),
             state TEXT NOT NULL, attempt INTEGER NOT NULL, node TEXT, exit_code INTEGER,
             error TEXT, result_json TEXT NOT NULL, finished_at REAL NOT NULL, sum INTEGER);",
    );
    {
        let c = Connection::open(&path).unwrap();
        c.execute(
            "INSERT INTO tasks (id, spec_json, submitted_at, sum) VALUES (?1, ?2, ?3, ?4)",
            params![old.id, old.spec_json, old.submitted_at, sha],
        )
        .unwrap();
        c.execute(
            "INSERT INTO outcomes (task_seq, state, attempt, node, exit_code, error, result_json,
                 finished_at, sum) VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                done.state.as_str(),
                done.attempt,
                done.node,
                done.exit_code,
                done.error,
                done.result_json,
                done.finished_at,
                outcome_sum(&done)
            ],
        )
        .unwrap();
    }
    let mut j = Journal::open(&path).unwrap();
    j.submit(&tasks(&["new"])).unwrap();
    let loaded = j.load().unwrap();
    assert_eq!(loaded[0].task, old);
    assert_eq!(loaded[0].outcome.as_ref(), Some(&done));
    assert_eq!(loaded[1].task.id, "new");
    assert_eq!(j.outcome("old").unwrap().as_ref(), Some(&done));
    drop(j);
    let c = Connection::open(&path).unwrap();
    let sums: Vec<(Option<i64>, Option<i64>)> = c
        .prepare("SELECT sum, crc FROM tasks ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(sums[0].0.is_some() && sums[0].1.is_none(), "{sums:?}");
    assert!(sums[1].0.is_none() && sums[1].1.is_some(), "{sums:?}");
    // Damage to the old row is still caught, by its SHA-256 sum.
    c.execute(
        "UPDATE tasks SET spec_json = replace(spec_json, 'zq-old', 'zq-odd') WHERE id = 'old'",
        [],
    )
    .unwrap();
    drop(c);
    let j = Journal::open(&path).unwrap();
    assert!(
        matches!(j.load(), Err(JournalError::Corrupt(m)) if m.contains("(id \"old\")")),
        "damage to a version-3 row is caught"
    );
}

#[test]
fn a_compact_report_reads_back_whole_through_the_api_form() {
    let report = crate::proto::TaskReport {
        task: "t".into(),
        attempt: 2,
        exit_code: Some(0),
        started_at: 1.0,
        staged_at: 1.5,
        finished_at: 2.0,
        ..crate::proto::TaskReport::empty()
    };
    let compact = serde_json::to_string(&report).unwrap();
    assert!(
        !compact.contains("stdout") && !compact.contains("traffic"),
        "{compact}"
    );
    let back: crate::proto::TaskReport = serde_json::from_str(&compact).unwrap();
    assert_eq!(back, report);
    let mut o = outcome("t", OutcomeState::Succeeded);
    o.result_json = compact;
    let whole: serde_json::Value = serde_json::from_str(
        serde_json::to_value(&o).unwrap()["result_json"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        whole,
        serde_json::json!({"task": "t", "attempt": 2, "exit_code": 0, "error": null,
            "started_at": 1.0, "staged_at": 1.5, "finished_at": 2.0, "stdout": null,
            "stderr": null, "outputs": [], "uncached": [],
            "traffic": {"local": 0, "peer": 0, "storage": 0, "bytes_local": 0,
                "bytes_peer": 0, "bytes_storage": 0}})
    );
    // A task that never ran keeps `{}`.
    o.result_json = "{}".into();
    assert_eq!(serde_json::to_value(&o).unwrap()["result_json"], "{}");
}

#[test]
fn an_outcomes_crc_is_the_crc_of_its_length_prefixed_fields() {
    for (node, exit_code, error) in [
        (Some("w1"), Some(0), None),
        (None, None, Some("not found: file:///x")),
        (Some(""), Some(-9), Some("")),
    ] {
        let mut o = outcome("t", OutcomeState::Failed);
        o.node = node.map(String::from);
        o.exit_code = exit_code;
        o.error = error.map(String::from);
        assert_eq!(
            outcome_crc(&o),
            with_outcome_fields(&o, record_crc),
            "{o:?}"
        );
    }
}
