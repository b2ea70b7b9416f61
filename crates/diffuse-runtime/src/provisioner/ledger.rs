//! The pool's submissions, written ahead in its directory (`<pool dir>/requests`, one line
//! `<request> <unix ms>` each, before its `sbatch` or start command runs), so that a dispatcher
//! restarted on the same journal knows what the one before it was submitting.
//!
//! A dispatcher killed (SIGKILL, a crash of its host) inside an `sbatch` leaves that `sbatch`
//! running: it is a process of its own, and it may submit its job after the new dispatcher has
//! looked at the queue (measured on Slurm 22.05: the job showed 2 s after the restart, and the
//! new dispatcher, which numbered its requests from the jobs it saw, had submitted a job under
//! the same name meanwhile: two workers under one name, one job over `--max-workers`;
//! `tests/faults_slurm.rs`, fault 3). With the ledger:
//! - a request's number is never used twice: the next one follows the highest ever written;
//! - a request written less than a window ago (the time a resource-manager call may take) and
//!   not in the resource manager's listing at start is *in doubt*: its submission may still be
//!   under way. Nothing new is submitted until each such one shows up (its job is then adopted
//!   as the earlier run's, like any job under the pool's names that no request has) or the
//!   window has passed since it was written.
//!
//! At start the file is rewritten with only what those two rules need (the highest request and
//! the recent ones), so it does not grow without bound.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The file of submissions.
pub struct Ledger {
    path: PathBuf,
}

/// What an earlier run of this pool left in its ledger.
#[derive(Debug, Default, PartialEq)]
pub struct Earlier {
    /// The number after the highest request written (1 if none).
    pub next: u64,
    /// Requests written within the window before now, and how long ago.
    pub recent: Vec<(String, Duration)>,
}

impl Ledger {
    /// The ledger in the pool directory `dir`.
    pub fn new(dir: &Path) -> Ledger {
        Ledger {
            path: dir.join("requests"),
        }
    }

    /// Write `requests` down before they are submitted (synced: a dispatcher that restarts after
    /// its host lost power must find them).
    pub fn submitting(&self, requests: &[String]) -> std::io::Result<()> {
        let now = unix_ms(SystemTime::now());
        let text: String = requests.iter().map(|r| format!("{r} {now}\n")).collect();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        f.write_all(text.as_bytes())?;
        f.sync_data()
    }

    /// What the earlier runs wrote under `prefix` (`<prefix>-<n>`), with "recent" meaning
    /// within `window` of now; the file is then rewritten with that alone. A missing or unreadable
    /// file is an empty ledger.
    pub fn earlier(&self, prefix: &str, window: Duration) -> Earlier {
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        let now = unix_ms(SystemTime::now());
        let mut e = read(&text, prefix, window, now);
        e.recent.sort();
        let mut kept: String = e
            .recent
            .iter()
            .map(|(r, ago)| format!("{r} {}\n", now.saturating_sub(ago.as_millis() as u64)))
            .collect();
        if e.next > 1 {
            kept.push_str(&format!("{prefix}-{} {now}\n", e.next - 1));
        }
        if let Err(err) = std::fs::write(&self.path, kept) {
            tracing::warn!("cannot rewrite {}: {err}", self.path.display());
        }
        e
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// [`Ledger::earlier`] of the text `text` at `now` (unix ms). Lines of other prefixes, and
/// malformed ones (a line torn by a crash), are skipped.
fn read(text: &str, prefix: &str, window: Duration, now: u64) -> Earlier {
    let mut e = Earlier {
        next: 1,
        recent: Vec::new(),
    };
    for line in text.lines() {
        let Some((request, at)) = line.split_once(' ') else {
            continue;
        };
        let (Some(n), Ok(at)) = (
            request
                .strip_prefix(prefix)
                .and_then(|r| r.strip_prefix('-'))
                .and_then(|n| n.parse::<u64>().ok()),
            at.trim().parse::<u64>(),
        ) else {
            continue;
        };
        e.next = e.next.max(n + 1);
        let ago = Duration::from_millis(now.saturating_sub(at));
        if ago < window && !e.recent.iter().any(|(r, _)| r == request) {
            e.recent.push((request.to_string(), ago));
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_number_follows_the_highest_and_recent_requests_are_in_doubt() {
        // A line torn by a crash was written before its submission began: skipped.
        let text = "dfs-ab-1 1000\ndfs-ab-7 2000\nother-9 9000\ndfs-ab-3 9000\ntorn\ndfs-ab-9";
        let e = read(text, "dfs-ab", Duration::from_secs(5), 10_000);
        assert_eq!(e.next, 8);
        assert_eq!(
            e.recent,
            vec![("dfs-ab-3".to_string(), Duration::from_millis(1000))]
        );
        assert_eq!(
            read("", "dfs-ab", Duration::from_secs(5), 0),
            Earlier {
                next: 1,
                recent: vec![]
            }
        );
    }

    #[test]
    fn a_ledger_is_written_ahead_and_compacted_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let l = Ledger::new(dir.path());
        l.submitting(&["p-1".into(), "p-2".into()]).unwrap();
        l.submitting(&["p-3".into()]).unwrap();
        let e = l.earlier("p", Duration::from_secs(60));
        assert_eq!(e.next, 4);
        let names: Vec<&str> = e.recent.iter().map(|(r, _)| r.as_str()).collect();
        assert_eq!(names, ["p-1", "p-2", "p-3"]);
        // Long after, nothing is in doubt and the highest number is still known.
        let e = l.earlier("p", Duration::ZERO);
        assert_eq!((e.next, e.recent.len()), (4, 0));
        let text = std::fs::read_to_string(dir.path().join("requests")).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert_eq!(l.earlier("p", Duration::ZERO).next, 4);
    }
}
