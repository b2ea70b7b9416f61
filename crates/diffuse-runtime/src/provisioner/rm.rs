//! Running a resource manager's command (`sbatch`, `squeue`, `scancel`, a user's start or stop
//! command): every call has a time limit, and failures are retried a bounded number of times
//! with a doubling pause. A hung command is killed, never waited on forever.

use std::ffi::OsString;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;

/// How resource-manager commands are run.
#[derive(Clone, Debug)]
pub struct RmPolicy {
    /// Most time one call may take; it is killed past it.
    pub timeout: Duration,
    /// Calls after the first when one fails or times out.
    pub retries: u32,
    /// Pause before the first retry; doubled before each next one.
    pub backoff: Duration,
}

impl Default for RmPolicy {
    fn default() -> Self {
        RmPolicy {
            timeout: Duration::from_secs(30),
            retries: 2,
            backoff: Duration::from_secs(1),
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

    /// Run with `policy`'s time limit and retries.
    pub async fn run(&self, policy: &RmPolicy) -> Result<String, String> {
        let mut pause = policy.backoff;
        let mut last = String::new();
        for attempt in 0..=policy.retries {
            if attempt > 0 {
                tokio::time::sleep(pause).await;
                pause = pause.saturating_mul(2);
            }
            match self.once(policy.timeout).await {
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
    use std::time::Instant;

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
}
