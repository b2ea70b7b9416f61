//! Running a resource manager's command (`sbatch`, `squeue`, `scancel`, a user's start or stop
//! command): every call has a time limit, and failures are retried a bounded number of times
//! with a doubling pause. A hung command is killed, never waited on forever. The pool's calls
//! share a [`Pacer`]: at most so many per minute (`--rm-calls-per-minute`), so that a pool of
//! thousands of workers cannot flood the resource manager's controller.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::process::Command;
use tokio::time::Instant;

/// How resource-manager commands are run.
#[derive(Clone, Debug)]
pub struct RmPolicy {
    /// Most time one call may take; it is killed past it.
    pub timeout: Duration,
    /// Calls after the first when one fails or times out.
    pub retries: u32,
    /// Pause before the first retry; doubled before each next one.
    pub backoff: Duration,
    /// The cap on calls per minute, shared by every clone of this policy.
    pub pacer: Pacer,
}

impl Default for RmPolicy {
    fn default() -> Self {
        RmPolicy {
            timeout: Duration::from_secs(30),
            retries: 2,
            backoff: Duration::from_secs(1),
            pacer: Pacer::unlimited(),
        }
    }
}

/// At most `per_minute` calls in any 60 seconds: a call past the cap waits until the oldest of
/// the last `per_minute` is a minute old. Clones share one count. A sliding window rather than
/// a token bucket, so that the cap is what a site's administrator reads in its log: never more
/// than that many `sbatch`, `squeue` and `scancel` in a minute.
#[derive(Clone, Debug)]
pub struct Pacer {
    per_minute: Option<u32>,
    recent: Arc<Mutex<VecDeque<Instant>>>,
}

/// The window of [`Pacer`].
const MINUTE: Duration = Duration::from_secs(60);

impl Pacer {
    /// No cap.
    pub fn unlimited() -> Pacer {
        Pacer {
            per_minute: None,
            recent: Arc::default(),
        }
    }

    /// At most `per_minute` calls in any minute (at least one).
    pub fn per_minute(per_minute: u32) -> Pacer {
        Pacer {
            per_minute: Some(per_minute.max(1)),
            recent: Arc::default(),
        }
    }

    /// The cap, if any.
    pub fn cap(&self) -> Option<u32> {
        self.per_minute
    }

    /// Wait for room under the cap, then count one call (now).
    pub async fn wait(&self) {
        let Some(cap) = self.per_minute else {
            return;
        };
        let mut warned = false;
        loop {
            let until = {
                let mut recent = self.recent.lock().expect("pacer lock");
                let now = Instant::now();
                while recent
                    .front()
                    .is_some_and(|t| now.duration_since(*t) >= MINUTE)
                {
                    recent.pop_front();
                }
                if recent.len() < cap as usize {
                    recent.push_back(now);
                    return;
                }
                recent[recent.len() - cap as usize] + MINUTE
            };
            if !warned {
                tracing::info!(
                    "{cap} resource-manager calls in the last minute (--rm-calls-per-minute): \
                     the next waits {:.0?}",
                    until.saturating_duration_since(Instant::now())
                );
                warned = true;
            }
            tokio::time::sleep_until(until).await;
        }
    }
}

/// One command line: a program, its arguments and extra environment. It never gets the
/// dispatcher's client or metrics token (a batch job's environment is kept by the resource
/// manager, and a worker needs neither).
#[derive(Clone, Debug, Default)]
pub struct Call {
    /// Program (looked up on `PATH`).
    pub program: String,
    /// Arguments.
    pub args: Vec<OsString>,
    /// Variables added to the environment.
    pub env: Vec<(String, String)>,
}

impl Call {
    /// `program` with no argument.
    pub fn new(program: &str) -> Call {
        Call {
            program: program.to_string(),
            ..Call::default()
        }
    }

    /// Add arguments.
    pub fn args<I, S>(mut self, args: I) -> Call
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Add a flag and the path it names.
    pub fn arg_path(self, flag: &str, path: &std::path::Path) -> Call {
        self.args([std::ffi::OsStr::new(flag), path.as_os_str()])
    }

    /// Add a variable to the environment.
    pub fn env(mut self, key: &str, value: &str) -> Call {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// The command as a user would type it (for messages).
    pub fn shown(&self) -> String {
        let mut s = self.program.clone();
        for a in &self.args {
            s.push(' ');
            s.push_str(&a.to_string_lossy());
        }
        s
    }

    /// Run once: its standard output if it exits 0 within `timeout`, else why not (with the end
    /// of its standard error).
    pub async fn once(&self, timeout: Duration) -> Result<String, String> {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env_remove("DIFFUSE_CLIENT_TOKEN")
            .env_remove("DIFFUSE_METRICS_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        let child = cmd.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                format!("`{}` is not installed (not on PATH)", self.program)
            }
            _ => format!("cannot run `{}`: {e}", self.program),
        })?;
        let pid = child.id();
        match tokio::time::timeout(timeout, child.wait_with_output()).await {
            Err(_) => {
                // kill_on_drop kills the command itself; its own children go with its group.
                if let Some(pid) = pid {
                    let _ = rustix::process::kill_process_group(
                        rustix::process::Pid::from_raw(pid as i32).expect("a child's pid"),
                        rustix::process::Signal::KILL,
                    );
                }
                Err(format!(
                    "`{}` did not answer within {:.0?}",
                    self.shown(),
                    timeout
                ))
            }
            Ok(Err(e)) => Err(format!("`{}`: {e}", self.shown())),
            Ok(Ok(out)) if out.status.success() => {
                Ok(String::from_utf8_lossy(&out.stdout).into_owned())
            }
            Ok(Ok(out)) => {
                let err = String::from_utf8_lossy(&out.stderr);
                let tail: String = err
                    .trim()
                    .chars()
                    .rev()
                    .take(400)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                Err(format!(
                    "`{}` failed ({}): {}",
                    self.shown(),
                    out.status,
                    tail
                ))
            }
        }
    }

    /// Run once under `policy`'s cap on calls per minute and its time limit.
    pub async fn paced(&self, policy: &RmPolicy) -> Result<String, String> {
        policy.pacer.wait().await;
        self.once(policy.timeout).await
    }

    /// Run with `policy`'s cap, time limit and retries (each try counts against the cap).
    pub async fn run(&self, policy: &RmPolicy) -> Result<String, String> {
        let mut pause = policy.backoff;
        let mut last = String::new();
        for attempt in 0..=policy.retries {
            if attempt > 0 {
                tokio::time::sleep(pause).await;
                pause = pause.saturating_mul(2);
            }
            match self.paced(policy).await {
                Ok(out) => return Ok(out),
                Err(e) if e.contains("is not installed") => return Err(e),
                Err(e) => {
                    tracing::warn!("{e} (try {} of {})", attempt + 1, policy.retries + 1);
                    last = e;
                }
            }
        }
        Err(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hung_command_is_killed_at_its_time_limit() {
        let t = Instant::now();
        let err = Call::new("sh")
            .args(["-c", "sleep 30"])
            .once(Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(err.contains("did not answer"), "{err}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn failures_are_retried_then_reported_with_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let count = dir.path().join("count");
        let script = format!("echo x >> {}; echo refused >&2; exit 3", count.display());
        let policy = RmPolicy {
            timeout: Duration::from_secs(5),
            retries: 2,
            backoff: Duration::from_millis(10),
            pacer: Pacer::unlimited(),
        };
        let err = Call::new("sh")
            .args(["-c", &script])
            .run(&policy)
            .await
            .unwrap_err();
        assert!(err.contains("refused"), "{err}");
        assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 3);
        let missing = Call::new("no-such-sbatch").run(&policy).await.unwrap_err();
        assert!(
            missing.contains("`no-such-sbatch` is not installed"),
            "{missing}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_cap_holds_in_every_minute_and_calls_wait_rather_than_fail() {
        let pacer = Pacer::per_minute(3);
        let shared = pacer.clone();
        let start = Instant::now();
        let mut at = Vec::new();
        for _ in 0..7 {
            // Clones count together.
            if at.len() % 2 == 0 {
                pacer.wait().await
            } else {
                shared.wait().await
            }
            at.push(start.elapsed());
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        // Three at 0, 5, 10 s; the fourth waits for the first to be a minute old, and so on.
        let secs: Vec<u64> = at.iter().map(|d| d.as_secs()).collect();
        assert_eq!(secs, [0, 5, 10, 60, 65, 70, 120]);
        for (i, t) in at.iter().enumerate() {
            let in_window = at[i..].iter().filter(|u| **u - *t < MINUTE).count();
            assert!(
                in_window <= 3,
                "{in_window} calls within a minute of {t:?}: {at:?}"
            );
        }
        let free = Pacer::unlimited();
        let t = Instant::now();
        for _ in 0..1000 {
            free.wait().await;
        }
        assert_eq!(t.elapsed(), Duration::ZERO);
    }
}
