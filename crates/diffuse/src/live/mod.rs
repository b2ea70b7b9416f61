//! The live subcommands, a module per group: `dispatcher`, `worker` ([`serve`]); `run`, `demo`
//! ([`run`], with [`each`]); `submit`, `status`, `logs`, `cancel`, `wait` ([`client`], with
//! [`jobs`]); `tasks` ([`tasks`]); `locate`, `place` ([`objects`]); `stage`, `cache`,
//! `calibrate`, `emulate` (a module each); and what they share: tokens, logging, the runtime,
//! and the hardening every long-running process applies at start.

pub mod api;
pub mod cache;
pub mod calibrate;
pub mod client;
pub mod each;
pub mod emulate;
pub mod jobs;
pub mod objects;
pub mod pool_args;
pub mod run;
pub mod serve;
pub mod stage;
pub mod tasks;

use crate::size::parse_size;
use anyhow::{bail, Context, Result};
use clap::Args;
use diffuse_core::CoreConfig;
use std::path::{Path, PathBuf};

/// Where clients look for a dispatcher when neither `--dispatcher` nor `DIFFUSE_DISPATCHER` says.
pub const DEFAULT_DISPATCHER: &str = "http://127.0.0.1:8700";

/// Storage settings shared by `dispatcher`, `worker` and `run`.
#[derive(Args, Debug, Clone)]
pub struct StorageArgs {
    /// S3 endpoint for s3:// URIs (an S3-compatible server); the same as setting
    /// AWS_ENDPOINT_URL. Credentials and region come from AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY and AWS_DEFAULT_REGION.
    #[arg(long)]
    s3_endpoint: Option<String>,
}

impl StorageArgs {
    /// Apply to this process (and the workers it starts, which inherit the environment).
    fn apply(&self) {
        if let Some(e) = &self.s3_endpoint {
            std::env::set_var("AWS_ENDPOINT_URL", e);
            if e.starts_with("http://") {
                std::env::set_var("AWS_ALLOW_HTTP", "true");
            }
        }
    }
}

/// Scheduling settings shared by `dispatcher` and `run`.
#[derive(Args, Debug, Clone)]
pub struct SchedArgs {
    #[command(flatten)]
    policy: crate::policy_args::PolicyArgs,
    /// A task whose worker is lost (crashed, killed, cut off) while running it this many times
    /// fails with that reason instead of running again.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    crash_limit: u32,
    /// Copies of each tmp:// object kept ahead of time: when its producer succeeds, K - 1 other
    /// workers (the least busy) fetch it, so losing a worker makes no producer run again.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16), allow_hyphen_values = true)]
    tmp_replicas: u32,
    /// Tasks each worker holds ready beyond its cores (one core each): the next task waits on
    /// the worker while one runs and starts the moment a core frees, instead of after a round
    /// trip to the dispatcher (with `true` tasks at slots = cores, 0 ran at 0.73-0.79 of
    /// `xargs -P`). Only behind short tasks (--ready-below): a ready task's worker is chosen
    /// when it is sent, and behind a long task it would wait while another worker idles at
    /// the end of a run. Free cores anywhere are offered before a ready slot. 0: none.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=64), allow_hyphen_values = true)]
    ready_tasks: u32,
    /// Seconds: a worker holds a task ready only while it runs a task that has run for less
    /// than this, of a job whose attempts have taken less than this on average (dispatch to
    /// end), so a ready task waits about that long at most. A job's tasks count as long until one of them has ended. `inf`: behind
    /// any task.
    #[arg(long, default_value_t = 1.0, value_parser = ready_below, allow_hyphen_values = true)]
    ready_below: f64,
}

/// `--ready-below`: a positive number of seconds, or `inf`.
fn ready_below(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && !v.is_nan() => Ok(v),
        _ => Err(format!(
            "'{s}' is not a positive number of seconds (or inf)"
        )),
    }
}

impl SchedArgs {
    /// The settings checked together (DAD's threshold against its beta); the message names
    /// the flags.
    pub(crate) fn check(&self) -> Result<(), String> {
        self.policy.check()
    }

    pub(crate) fn core(&self) -> CoreConfig {
        let mut cfg = CoreConfig {
            crash_limit: self.crash_limit,
            tmp_replicas: self.tmp_replicas,
            ready_tasks: self.ready_tasks,
            ready_below_s: self.ready_below,
            ..CoreConfig::default()
        };
        self.policy.apply(&mut cfg);
        cfg
    }
}

/// A rate such as `200MB/s` (the `/s` is optional), in bytes per second.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    parse_size(s.strip_suffix("/s").unwrap_or(s)).map(|b| b as f64)
}

/// Read a token from `file`, or else from the environment variable `env`. A token file that
/// other users may read is warned about.
fn read_token(file: &Option<PathBuf>, env: &str, flag: &str) -> Result<String> {
    let token = match file {
        Some(f) => {
            warn_if_exposed(f);
            std::fs::read_to_string(f)
                .with_context(|| format!("{flag}: cannot read {}", f.display()))?
        }
        None => {
            std::env::var(env).with_context(|| format!("no token: pass {flag} or set {env}"))?
        }
    };
    let token = token.trim().to_string();
    if token.is_empty() {
        bail!("{flag}/{env}: the token is empty");
    }
    Ok(token)
}

/// Warn if `file` (a token or a TLS key) is readable by group or others.
fn warn_if_exposed(file: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::metadata(file) {
        if m.permissions().mode() & 0o077 != 0 {
            eprintln!(
                "warning: {} is readable by other users (mode {:o}); `chmod 600` it",
                file.display(),
                m.permissions().mode() & 0o777
            );
        }
    }
}

fn logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("DIFFUSE_LOG")
        .unwrap_or_else(|_| "info".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// What every process holding a token does first: it becomes non-dumpable, so that processes of
/// the same user (its tasks) cannot read its memory or its environment through `/proc`, or
/// attach a debugger (no core dumps either); and it raises its open-files limit.
fn harden() {
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        tracing::warn!("cannot make this process non-dumpable: {e}");
    }
    diffuse_runtime::server::raise_open_files_limit();
}

/// A duration: a number of seconds, or with a unit: `30s`, `5m`, `2h`, `7d`; more than zero.
pub fn seconds(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let (num, unit) = t.split_at(t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len()));
    let mult = match unit {
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => return Err(format!("'{s}': the unit must be s, m, h or d")),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a duration (e.g. 30, 30s, 5m, 2h, 7d)"))?;
    if !n.is_finite() || n <= 0.0 || n * mult > 1e10 {
        return Err(format!(
            "'{s}' must be more than zero (and less than 300 years)"
        ));
    }
    Ok(std::time::Duration::from_secs_f64(n * mult))
}
