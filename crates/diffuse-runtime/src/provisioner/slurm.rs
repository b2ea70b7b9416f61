//! The Slurm backend: one worker per batch job, submitted with `sbatch`, followed with
//! `squeue`, released with `scancel`.
//!
//! Each request is a job named after it (`<prefix>-<n>`). A failed `sbatch` does not prove that
//! no job was made: a timed-out `sbatch` may still have submitted its job (measured on Slurm
//! 22.05 with a frozen slurmctld: the controller queued it and ran it once it answered again),
//! and a lost connection or our own time limit tells nothing either. So every failure is
//! ambiguous until the name has been looked up with `squeue`:
//!
//! * a lookup that itself fails (squeue also times out while the controller is frozen) is not an
//!   answer: it is asked again, with a growing pause, up to [`LOOKUP_DEADLINE`] (past it the
//!   request is given up, and a job that appears for it later is an extra, below);
//! * a job found is adopted instead of submitting a second one;
//! * a lookup that finds none is asked once more after [`SETTLE`], so that a submission still
//!   being handled when the controller came back shows up, and only then is `sbatch` retried.
//!
//! What slips past this (a submission that Slurm handles after both lookups) is caught by the
//! pool's reconciliation ([`super::reconcile`]): every job under this dispatcher's names that is
//! not a request's own is cancelled or adopted as soon as `squeue` shows it. `squeue` lists
//! every job of this user under the pool's names ([`Listing::Named`]).

use super::backend::{Listing, ResourceManager, RmFuture};
use super::job::{is_request_name, Job, Launch, RmState};
use super::rm::{Call, RmPolicy};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `sbatch` options of every worker job.
#[derive(Clone, Debug, Default)]
pub struct SlurmConfig {
    /// `--partition`.
    pub partition: Option<String>,
    /// `--account`.
    pub account: Option<String>,
    /// `--qos`.
    pub qos: Option<String>,
    /// `--time`, in Slurm's format (e.g. `1:00:00`).
    pub time: Option<String>,
    /// More `sbatch` arguments, as given.
    pub extra: Vec<String>,
    /// A batch script of the user's, in which `{worker}` stands for the worker's command.
    pub script: Option<PathBuf>,
}

/// The programs the Slurm backend runs (checked on `PATH` before anything starts).
pub const PROGRAMS: [&str; 3] = ["sbatch", "squeue", "scancel"];

/// Submits, follows and cancels worker jobs.
pub struct Slurm {
    cfg: SlurmConfig,
    /// The batch script every job runs.
    script: PathBuf,
    /// Where jobs write their output (`<request>.out`).
    log_dir: PathBuf,
    /// Job names this dispatcher owns start with this.
    prefix: String,
    policy: RmPolicy,
}

/// What runs the worker inside a job: the arguments after the script name become its own.
const WORKER_LINE: &str =
    r#"exec "$DIFFUSE_EXE" worker ${SLURM_MEM_PER_NODE:+--memory ${SLURM_MEM_PER_NODE}MB} "$@""#;

impl Slurm {
    /// Write the batch script into `dir` and check that `sbatch` exists.
    pub fn new(
        cfg: SlurmConfig,
        dir: &Path,
        prefix: String,
        policy: RmPolicy,
    ) -> Result<Slurm, String> {
        let body = match &cfg.script {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| format!("--slurm-script {}: {e}", p.display()))?;
                if !text.contains("{worker}") {
                    return Err(format!(
                        "--slurm-script {}: it has no {{worker}} line (where the worker starts)",
                        p.display()
                    ));
                }
                text.replace("{worker}", WORKER_LINE)
            }
            None => format!(
                "#!/bin/sh\n# Written by `diffuse dispatcher --provisioner slurm`: one diffuse worker per job.\n{WORKER_LINE}\n"
            ),
        };
        let script = dir.join("worker.sbatch");
        std::fs::write(&script, body).map_err(|e| format!("{}: {e}", script.display()))?;
        Ok(Slurm {
            cfg,
            script,
            log_dir: dir.to_path_buf(),
            prefix,
            policy,
        })
    }

    /// Submit one job for `request`; its job id. An error means that Slurm has no job of that
    /// name: it said so when asked after the last failure, and again [`SETTLE`] later.
    async fn sbatch(&self, request: &str, launch: &Launch) -> Result<String, String> {
        let mut call = Call::new("sbatch")
            .args(["--parsable", "--job-name", request])
            .args(["--cpus-per-task", &launch.cores.to_string()])
            .arg_path("--output", &self.log_dir.join(format!("{request}.out")));
        for (flag, value) in [
            ("--partition", &self.cfg.partition),
            ("--account", &self.cfg.account),
            ("--qos", &self.cfg.qos),
            ("--time", &self.cfg.time),
        ] {
            if let Some(v) = value {
                call = call.args([flag, v.as_str()]);
            }
        }
        call = call
            .args(&self.cfg.extra)
            .args([self.script.as_os_str()])
            .args(&launch.args)
            .env("DIFFUSE_EXE", &launch.exe.to_string_lossy());
        for (k, v) in &launch.env {
            call = call.env(k, v);
        }
        let mut pause = self.policy.backoff;
        let mut last = String::new();
        for attempt in 0..=self.policy.retries {
            if attempt > 0 {
                tokio::time::sleep(pause).await;
                pause = pause.saturating_mul(2);
            }
            match call.once(self.policy.timeout).await {
                Ok(out) => {
                    let job = out.trim().split(';').next().unwrap_or("").to_string();
                    if !job.is_empty() {
                        return Ok(job);
                    }
                    // It answered without an id: whether a job exists, the lookup settles.
                    last = format!("`sbatch --parsable` printed no job id: {out:?}");
                }
                Err(e) if e.contains("is not installed") => return Err(e),
                Err(e) => {
                    tracing::warn!(
                        request,
                        "{e} (try {} of {}); looking the request up before anything else",
                        attempt + 1,
                        self.policy.retries + 1
                    );
                    last = e;
                }
            }
            // Ambiguous: did Slurm take it? Ask until it answers, then once more after a pause.
            if let Some(job) = self.settle(request).await {
                tracing::warn!(request, job, "sbatch failed but its job exists: adopted");
                return Ok(job);
            }
        }
        Err(last)
    }

    /// After a failed `sbatch`: the job named `request` if Slurm has one, asked until `squeue`
    /// answers, and asked again [`SETTLE`] after an answer of none.
    async fn settle(&self, request: &str) -> Option<String> {
        if let Some(job) = self.find_answered(request).await {
            return Some(job);
        }
        tokio::time::sleep(SETTLE).await;
        self.find_answered(request).await
    }

    /// The job named `request`: `squeue` asked until it answers (a failed lookup is not "no
    /// job"), with a pause that doubles up to [`LOOKUP_PAUSE_MAX`], for at most
    /// [`LOOKUP_DEADLINE`].
    async fn find_answered(&self, request: &str) -> Option<String> {
        let mut pause = self.policy.backoff.max(Duration::from_millis(100));
        let deadline = std::time::Instant::now() + LOOKUP_DEADLINE;
        loop {
            match self.find(request).await {
                Ok(job) => return job,
                Err(e) if e.contains("is not installed") => return None,
                Err(e) if std::time::Instant::now() >= deadline => {
                    tracing::error!(
                        request,
                        "squeue has not answered for {LOOKUP_DEADLINE:?} ({e}): the request is \
                         given up; a job Slurm made for it will be adopted or cancelled when \
                         squeue shows it"
                    );
                    return None;
                }
                Err(e) => {
                    tracing::warn!(
                        request,
                        "cannot tell whether its sbatch made a job ({e}); asking again in {pause:?}"
                    );
                    tokio::time::sleep(pause).await;
                    pause = pause.saturating_mul(2).min(LOOKUP_PAUSE_MAX);
                }
            }
        }
    }

    /// The job named `request`, if Slurm has one (the lowest id when it has several: the
    /// reconciliation cancels the others).
    async fn find(&self, request: &str) -> Result<Option<String>, String> {
        let out = Call::new("squeue")
            .args([
                "--noheader",
                "--user",
                &user(),
                "--name",
                request,
                "--format",
                "%i",
            ])
            .once(self.policy.timeout)
            .await?;
        Ok(out
            .split_whitespace()
            .min_by_key(|id| id.parse::<u64>().unwrap_or(u64::MAX))
            .map(str::to_string))
    }

    /// Every job of this dispatcher Slurm still shows (several may share a name).
    async fn squeue(&self) -> Result<Vec<Job>, String> {
        let out = Call::new("squeue")
            .args(["--noheader", "--user", &user(), "--states", "all"])
            .args(["--format", "%i|%j|%T"])
            .run(&self.policy)
            .await?;
        Ok(parse_jobs(&out, &self.prefix))
    }

    /// Cancel a job.
    async fn scancel(&self, job: &str) -> Result<(), String> {
        Call::new("scancel")
            .args([job])
            .run(&self.policy)
            .await
            .map(drop)
    }
}

impl ResourceManager for Slurm {
    fn listing(&self) -> Listing {
        Listing::Named { command: "squeue" }
    }

    /// `sbatch`: the job queues.
    fn submit<'a>(
        &'a mut self,
        request: &'a str,
        launch: &'a Launch,
    ) -> RmFuture<'a, Result<(String, RmState), String>> {
        Box::pin(async move {
            self.sbatch(request, launch)
                .await
                .map(|job| (job, RmState::Pending))
        })
    }

    fn list(&mut self) -> RmFuture<'_, Result<Vec<Job>, String>> {
        Box::pin(self.squeue())
    }

    /// `scancel` (the same asked or forced: Slurm signals the job and then kills it).
    fn cancel<'a>(
        &'a mut self,
        _request: &'a str,
        job: &'a str,
        _launch: &'a Launch,
        _force: bool,
    ) -> RmFuture<'a, Result<(), String>> {
        Box::pin(self.scancel(job))
    }
}

/// This process's user id, as `squeue --user` takes it: only this user's jobs are the pool's
/// (another user's job whose name happens to share the prefix is never touched).
fn user() -> String {
    rustix::process::getuid().as_raw().to_string()
}

/// The jobs in `squeue --format %i|%j|%T` output named `<prefix>-<n>`.
fn parse_jobs(out: &str, prefix: &str) -> Vec<Job> {
    let mut jobs = Vec::new();
    for line in out.lines() {
        let mut f = line.trim().splitn(3, '|');
        let (Some(id), Some(name), Some(state)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if !is_request_name(name, prefix) {
            continue;
        }
        let state = match state {
            "PENDING" | "CONFIGURING" | "REQUEUED" | "REQUEUE_HOLD" | "RESIZING" | "SUSPENDED" => {
                RmState::Pending
            }
            "RUNNING" | "COMPLETING" | "STAGE_OUT" | "SIGNALING" => RmState::Running,
            other => RmState::Ended(format!("Slurm job {id} {other}")),
        };
        jobs.push(Job {
            id: id.to_string(),
            name: name.to_string(),
            state,
        });
    }
    jobs
}

/// After a failed `sbatch` and a lookup that found no job: how long to wait before asking
/// again, and only then submitting again. A controller that has just come back may still be
/// handling the submission that timed out.
pub const SETTLE: Duration = Duration::from_secs(2);

/// The longest pause between two lookups of a request whose `sbatch` failed, while `squeue`
/// itself fails.
pub const LOOKUP_PAUSE_MAX: Duration = Duration::from_secs(10);

/// How long a request whose `sbatch` failed is looked up while `squeue` fails too, before it is
/// given up. The pool submits nothing else meanwhile (its requests go one at a time).
pub const LOOKUP_DEADLINE: Duration = Duration::from_secs(600);

/// Slurm's time left (`squeue -o %L`): `MM:SS`, `HH:MM:SS` or `D-HH:MM:SS`; None for
/// `UNLIMITED`, `NOT_SET` or anything else.
pub fn parse_time_left(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (days, clock) = match s.split_once('-') {
        Some((d, rest)) => (d.parse::<u64>().ok()?, rest),
        None => (0, s),
    };
    let parts: Vec<u64> = clock
        .split(':')
        .map(|p| p.parse::<u64>().ok())
        .collect::<Option<_>>()?;
    let secs = match parts[..] {
        [m, s] => m * 60 + s,
        [h, m, s] => h * 3600 + m * 60 + s,
        _ => return None,
    };
    Some(Duration::from_secs(days * 86400 + secs))
}

/// Inside a Slurm job (`SLURM_JOB_ID` set): the time its limit leaves, asked of `squeue`.
pub async fn time_left_of_this_job() -> Option<Duration> {
    let job = std::env::var("SLURM_JOB_ID").ok()?;
    let out = Call::new("squeue")
        .args(["--noheader", "--jobs", job.as_str(), "--format", "%L"])
        .once(Duration::from_secs(15))
        .await;
    match out {
        Ok(text) => parse_time_left(&text),
        Err(e) => {
            tracing::warn!("cannot learn this job's time limit: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_jobs, parse_time_left, RmState};
    use std::time::Duration;

    #[test]
    fn only_jobs_named_prefix_dash_number_are_the_pools() {
        let out = "7|dfs-ab12cd-3|RUNNING\n8|dfs-ab12cd-30x|PENDING\n9|dfs-ab12cdef-1|RUNNING\n\
                   10|dfs-ab12cd-|RUNNING\n11|other|RUNNING\n12|dfs-ab12cd-4|CANCELLED\n";
        let jobs = parse_jobs(out, "dfs-ab12cd");
        let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(ids, ["7", "12"]);
        assert_eq!(jobs[0].state, RmState::Running);
        assert_eq!(
            jobs[1].state,
            RmState::Ended("Slurm job 12 CANCELLED".into())
        );
    }

    #[test]
    fn reads_slurms_time_left() {
        assert_eq!(parse_time_left("0:59"), Some(Duration::from_secs(59)));
        assert_eq!(parse_time_left("12:30"), Some(Duration::from_secs(750)));
        assert_eq!(
            parse_time_left("1:00:05\n"),
            Some(Duration::from_secs(3605))
        );
        assert_eq!(
            parse_time_left("2-03:00:00"),
            Some(Duration::from_secs(2 * 86400 + 3 * 3600))
        );
        assert_eq!(parse_time_left("UNLIMITED"), None);
        assert_eq!(parse_time_left("NOT_SET"), None);
    }
}
