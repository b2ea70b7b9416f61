//! The Slurm backend: workers in batch jobs, submitted with `sbatch`, followed with `squeue`,
//! released with `scancel`.
//!
//! Each request is one worker. With `--slurm-workers-per-job 1` (the default) a request is a
//! job named after it (`<prefix>-<n>`). With K > 1, one `sbatch` submits up to K requests at
//! once as a *job array* (`--array=0-(K-1)`), named after its first request: element `k` of
//! the array named `<prefix>-<n>` is request `<prefix>-<n+k>`, its job id `<array id>_<k>`.
//! Slurm keeps a pending array as one record, and each element is still a job of its own that
//! runs, ends and is cancelled alone, so a released worker gives its node back at once (a
//! multi-node allocation would be held until its last worker left). The batch script turns
//! `SLURM_ARRAY_TASK_ID` into the element's request name ([`WORKER_LINE`]).
//!
//! A failed `sbatch` does not prove that no job was made: a timed-out `sbatch` may still have
//! submitted its job (measured on Slurm 22.05 with a frozen slurmctld: the controller queued it
//! and ran it once it answered again), and a lost connection or our own time limit tells
//! nothing either. So every failure is ambiguous until the name has been looked up with
//! `squeue`:
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
//! every job of this user under the pool's names ([`Listing::Named`]), each array element on a
//! line of its own (`--array`). Every call counts against `--rm-calls-per-minute`.

use super::backend::{Listing, ResourceManager, RmFuture};
use super::job::{is_request_name, Job, Launch, RmState};
use super::rm::{Call, RmPolicy};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `sbatch` options of every worker job.
#[derive(Clone, Debug)]
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
    /// Most workers one `sbatch` submits (as a job array when more than one).
    pub workers_per_job: u32,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        SlurmConfig {
            partition: None,
            account: None,
            qos: None,
            time: None,
            extra: Vec::new(),
            script: None,
            workers_per_job: 1,
        }
    }
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

/// What runs the worker inside a job: the arguments after the script name become its own. In
/// an element of a job array, the request is the array's first (`DIFFUSE_POOL_FIRST`) plus the
/// element's index; the worker puts it where its arguments say `{request}` (its name, its cache
/// directory).
const WORKER_LINE: &str = r#"if [ -n "${DIFFUSE_POOL_FIRST:-}" ] && [ -n "${SLURM_ARRAY_TASK_ID:-}" ]; then
  DIFFUSE_POOL_REQUEST="$DIFFUSE_POOL_PREFIX-$((DIFFUSE_POOL_FIRST + SLURM_ARRAY_TASK_ID))"
  export DIFFUSE_POOL_REQUEST
fi
exec "$DIFFUSE_EXE" worker ${SLURM_MEM_PER_NODE:+--memory ${SLURM_MEM_PER_NODE}MB} "$@""#;

/// Most job ids one `scancel` is given.
const CANCEL_BATCH: usize = 200;

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

    /// Submit one job named `request`, an array of `elements` jobs when more than one; its job
    /// id (the array's). An error means that Slurm has no job of that name: it said so when
    /// asked after the last failure, and again [`SETTLE`] later.
    async fn sbatch(
        &self,
        request: &str,
        elements: u32,
        launch: &Launch,
    ) -> Result<String, String> {
        let mut call = Call::new("sbatch")
            .args(["--parsable", "--job-name", request])
            .args(["--cpus-per-task", &launch.cores.to_string()]);
        call = if elements > 1 {
            call.args([format!("--array=0-{}", elements - 1)])
                .arg_path("--output", &self.log_dir.join(format!("{request}_%a.out")))
        } else {
            call.arg_path("--output", &self.log_dir.join(format!("{request}.out")))
        };
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
            .args(&launch.args);
        // The job's limit counts from its start, where the worker starts: told here, the
        // worker need not ask squeue (a thousand workers would be a thousand calls).
        let told = launch.args.iter().any(|a| a.starts_with("--ends-in"));
        if let (false, Some(limit)) = (told, self.cfg.time.as_deref().and_then(parse_time_limit)) {
            call = call.args([format!("--ends-in={}s", limit.as_secs())]);
        }
        call = call.env("DIFFUSE_EXE", &launch.exe.to_string_lossy());
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
            match call.paced(&self.policy).await {
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
    /// reconciliation cancels the others). For an array, the array's id (`%F`).
    async fn find(&self, request: &str) -> Result<Option<String>, String> {
        let out = Call::new("squeue")
            .args([
                "--noheader",
                "--user",
                &user(),
                "--name",
                request,
                "--format",
                "%F",
            ])
            .paced(&self.policy)
            .await?;
        Ok(out
            .split_whitespace()
            .min_by_key(|id| id.parse::<u64>().unwrap_or(u64::MAX))
            .map(str::to_string))
    }

    /// Every job of this dispatcher Slurm still shows (several may share a name).
    async fn squeue(&self) -> Result<Vec<Job>, String> {
        let out = Call::new("squeue")
            .args([
                "--noheader",
                "--array",
                "--user",
                &user(),
                "--states",
                "all",
            ])
            .args(["--format", "%i|%j|%T"])
            .run(&self.policy)
            .await?;
        Ok(parse_jobs(&out, &self.prefix))
    }

    /// Cancel jobs (array elements too: `<array id>_<k>`).
    async fn scancel(&self, jobs: &[&str]) -> Result<(), String> {
        Call::new("scancel")
            .args(jobs)
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
            self.sbatch(request, 1, launch)
                .await
                .map(|job| (job, RmState::Pending))
        })
    }

    fn group_size(&self) -> u32 {
        self.cfg.workers_per_job.max(1)
    }

    /// One `sbatch` of a job array named after the first request: element `k` is request
    /// `k`, its job `<array id>_<k>`.
    fn submit_group<'a>(
        &'a mut self,
        requests: &'a [String],
        launch: &'a Launch,
    ) -> RmFuture<'a, Result<Vec<(String, RmState)>, String>> {
        Box::pin(async move {
            let first = requests.first().ok_or("an empty group")?;
            let array = self.sbatch(first, requests.len() as u32, launch).await?;
            Ok((0..requests.len())
                .map(|k| (format!("{array}_{k}"), RmState::Pending))
                .collect())
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
        Box::pin(async move { self.scancel(&[job]).await })
    }

    /// `scancel` with up to [`CANCEL_BATCH`] jobs per call.
    fn cancel_all<'a>(
        &'a mut self,
        jobs: &'a [(String, String, Launch)],
    ) -> RmFuture<'a, Vec<(String, String)>> {
        Box::pin(async move {
            let mut failed = Vec::new();
            let (known, unknown): (Vec<_>, Vec<_>) = jobs
                .iter()
                .cloned()
                .partition(|(_, job, _)| !job.is_empty());
            for (request, _, _) in unknown {
                failed.push((request, "its sbatch has not answered yet".to_string()));
            }
            for chunk in known.chunks(CANCEL_BATCH) {
                let ids: Vec<&str> = chunk.iter().map(|(_, job, _)| job.as_str()).collect();
                if let Err(e) = self.scancel(&ids).await {
                    failed.extend(
                        chunk
                            .iter()
                            .map(|(request, _, _)| (request.clone(), e.clone())),
                    );
                }
            }
            failed
        })
    }
}

/// This process's user id, as `squeue --user` takes it: only this user's jobs are the pool's
/// (another user's job whose name happens to share the prefix is never touched).
fn user() -> String {
    rustix::process::getuid().as_raw().to_string()
}

/// The jobs in `squeue --array --format %i|%j|%T` output named `<prefix>-<n>`, each under the
/// request it runs: element `<id>_<k>` of an array named `<prefix>-<n>` is `<prefix>-<n+k>`.
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
        let name = match id.split_once('_') {
            None => name.to_string(),
            Some((_, k)) => {
                let (Ok(k), Some(Ok(n))) = (
                    k.parse::<u64>(),
                    name.rsplit_once('-').map(|(_, n)| n.parse::<u64>()),
                ) else {
                    continue; // a range of pending elements: never printed with --array
                };
                format!("{prefix}-{}", n + k)
            }
        };
        let state = match state {
            "PENDING" | "CONFIGURING" | "REQUEUED" | "REQUEUE_HOLD" | "RESIZING" | "SUSPENDED" => {
                RmState::Pending
            }
            "RUNNING" | "COMPLETING" | "STAGE_OUT" | "SIGNALING" => RmState::Running,
            other => RmState::Ended(format!("Slurm job {id} {other}")),
        };
        jobs.push(Job {
            id: id.to_string(),
            name,
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

/// A time limit in `sbatch --time`'s formats: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`;
/// None for `UNLIMITED`, `INFINITE` or anything else.
pub fn parse_time_limit(s: &str) -> Option<Duration> {
    let s = s.trim();
    let number = |p: &str| p.parse::<u64>().ok();
    let secs = match s.split_once('-') {
        Some((days, clock)) => {
            let d = number(days)?;
            let parts: Vec<u64> = clock.split(':').map(number).collect::<Option<_>>()?;
            let (h, m, sec) = match parts[..] {
                [h] => (h, 0, 0),
                [h, m] => (h, m, 0),
                [h, m, sec] => (h, m, sec),
                _ => return None,
            };
            d * 86400 + h * 3600 + m * 60 + sec
        }
        None => {
            let parts: Vec<u64> = s.split(':').map(number).collect::<Option<_>>()?;
            match parts[..] {
                [m] => m * 60,
                [m, sec] => m * 60 + sec,
                [h, m, sec] => h * 3600 + m * 60 + sec,
                _ => return None,
            }
        }
    };
    Some(Duration::from_secs(secs))
}

/// Inside a Slurm job (`SLURM_JOB_ID` set): the time its limit leaves, from
/// `SLURM_JOB_END_TIME` where Slurm sets it (23.02 and later), else asked of `squeue` (one call
/// per worker: the pool tells its workers `--ends-in` when it knows `--slurm-time`).
pub async fn time_left_of_this_job() -> Option<Duration> {
    let job = std::env::var("SLURM_JOB_ID").ok()?;
    if let Some(end) = std::env::var("SLURM_JOB_END_TIME")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?;
        return Some(Duration::from_secs(end).saturating_sub(now));
    }
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
    use super::{parse_jobs, parse_time_left, parse_time_limit, RmState};
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
    fn each_element_of_an_array_is_the_request_it_runs() {
        let out = "21_0|dfs-ab12cd-8|RUNNING\n21_3|dfs-ab12cd-8|PENDING\n\
                   21_[4-5]|dfs-ab12cd-8|PENDING\n22|dfs-ab12cd-12|RUNNING\n";
        let jobs = parse_jobs(out, "dfs-ab12cd");
        let got: Vec<(&str, &str)> = jobs
            .iter()
            .map(|j| (j.id.as_str(), j.name.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("21_0", "dfs-ab12cd-8"),
                ("21_3", "dfs-ab12cd-11"),
                ("22", "dfs-ab12cd-12")
            ]
        );
        assert_eq!(jobs[1].state, RmState::Pending);
    }

    #[test]
    fn reads_sbatchs_time_limit_formats() {
        let h = |h: u64, m: u64, s: u64| Some(Duration::from_secs(h * 3600 + m * 60 + s));
        assert_eq!(parse_time_limit("10"), h(0, 10, 0), "minutes");
        assert_eq!(parse_time_limit("10:30"), h(0, 10, 30));
        assert_eq!(parse_time_limit("4:00:00"), h(4, 0, 0));
        assert_eq!(parse_time_limit("1-2"), h(26, 0, 0));
        assert_eq!(parse_time_limit("1-2:30"), h(26, 30, 0));
        assert_eq!(parse_time_limit("1-0:0:5"), h(24, 0, 5));
        assert_eq!(parse_time_limit("UNLIMITED"), None);
        assert_eq!(parse_time_limit("1:2:3:4"), None);
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
