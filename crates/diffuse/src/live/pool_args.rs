//! `diffuse dispatcher`'s elastic pool options: where workers come from (`--provisioner`), how
//! many, what each brings, and the resource manager's own settings. Bad combinations are
//! refused before anything starts, naming the flag.

use super::seconds;
use crate::size::parse_size;
use clap::{Args, ValueEnum};
use diffuse_core::{DynamicConfig, HandoffConfig, Provisioning, StepPolicy};
use diffuse_runtime::provisioner::command::CommandConfig;
use diffuse_runtime::provisioner::rm::{Pacer, RmPolicy};
use diffuse_runtime::provisioner::slurm::SlurmConfig;
use diffuse_runtime::provisioner::{Backend, PoolConfig};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where workers come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Provisioner {
    /// Only the workers started by hand (`diffuse worker`); nothing is acquired or released.
    Static,
    /// `diffuse worker` processes on this machine, each with its own cache.
    Local,
    /// Slurm batch jobs: one per worker, or job arrays (sbatch, squeue, scancel).
    Slurm,
    /// Your own start and stop commands (--start-command, --stop-command).
    Command,
}

/// The elastic pool.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Elastic pool")]
pub struct PoolArgs {
    /// Where workers come from: static (started by hand), local, slurm or command.
    #[arg(long, value_enum, default_value_t = Provisioner::Static)]
    pub provisioner: Provisioner,
    /// Workers kept even when idle.
    #[arg(long, default_value_t = 0)]
    pub min_workers: u32,
    /// Most workers at once, counting those requested, pending at the resource manager and
    /// ending [default: 4].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    pub max_workers: Option<u32>,
    /// Most requests queued at the resource manager and not yet running.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    pub max_pending: u32,
    /// How many workers one round asks for: one, additive:K, exponential (1, 2, 4, ...) or
    /// all (as many as the queue needs).
    #[arg(long, default_value = "all", value_parser = |s: &str| s.parse::<StepPolicy>())]
    pub step: StepPolicy,
    /// A worker with no task for this long is released (its cache goes with it).
    #[arg(long, default_value = "30s", value_parser = seconds, allow_hyphen_values = true)]
    pub idle_release: Duration,
    /// Cores of each worker (Slurm: --cpus-per-task).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    pub worker_cores: u32,
    /// Cache quota of each worker.
    #[arg(long, default_value = "10GB", value_parser = parse_size, allow_hyphen_values = true)]
    pub worker_cache_size: u64,
    /// Each worker's cache directory; {request} stands for the worker's name [default: local:
    /// <pool dir>/{request}; slurm, command: /tmp/diffuse-{request}, on the node's own disk].
    #[arg(long)]
    pub worker_cache_dir: Option<String>,
    /// An argument for every worker it starts, e.g. --worker-arg=--eviction=lfu (repeatable).
    #[arg(long = "worker-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub worker_args: Vec<String>,
    /// The URL workers reach this dispatcher at [default: from --listen; an unspecified
    /// address becomes this host's name; https:// with --tls-cert].
    #[arg(long)]
    pub url: Option<String>,
    /// Where the pool keeps worker logs and its batch script [default: <journal>.pool/]. On a
    /// cluster, a directory the compute nodes see (Slurm writes each job's output there).
    #[arg(long)]
    pub pool_dir: Option<PathBuf>,
    /// Time limit of each resource-manager command (sbatch, squeue, scancel, yours); a hung
    /// one is killed.
    #[arg(long, default_value = "30s", value_parser = seconds, allow_hyphen_values = true)]
    pub rm_timeout: Duration,
    /// Retries of a failed resource-manager command (1 s, then doubling, between tries).
    #[arg(long, default_value_t = 2)]
    pub rm_retries: u32,
    /// A worker whose job runs this long without it connecting is cancelled and counted failed.
    #[arg(long, default_value = "2m", value_parser = seconds, allow_hyphen_values = true)]
    pub start_timeout: Duration,
    /// How long a released worker has to leave before its job is cancelled.
    #[arg(long, default_value = "10s", value_parser = seconds, allow_hyphen_values = true)]
    pub release_grace: Duration,
    /// How long a disconnected worker's job is kept for it to connect again (a network that
    /// heals) before it is cancelled; it counts as one of the pool's workers meanwhile.
    #[arg(long, default_value = "2m", value_parser = seconds, allow_hyphen_values = true)]
    pub lost_grace: Duration,
    /// How often squeue is asked how the worker jobs stand.
    #[arg(long, default_value = "5s", value_parser = seconds, allow_hyphen_values = true)]
    pub rm_poll: Duration,
    /// Most resource-manager commands (sbatch, squeue, scancel, yours) in any minute; past it
    /// the next waits (never fails). 0: no cap.
    #[arg(long, default_value_t = 120)]
    pub rm_calls_per_minute: u32,
    /// Slurm partition of the worker jobs (--partition).
    #[arg(long)]
    pub slurm_partition: Option<String>,
    /// Slurm account (--account).
    #[arg(long)]
    pub slurm_account: Option<String>,
    /// Slurm quality of service (--qos).
    #[arg(long)]
    pub slurm_qos: Option<String>,
    /// Time limit of each worker job, in Slurm's format (--time, e.g. 4:00:00).
    #[arg(long)]
    pub slurm_time: Option<String>,
    /// Another sbatch argument, e.g. --slurm-arg=--constraint=ssd (repeatable).
    #[arg(long = "slurm-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub slurm_args: Vec<String>,
    /// Workers one sbatch submits, as a job array (each element one worker, released on its
    /// own); 1: one job per worker. At most the cluster's MaxArraySize - 1 (1000 by default).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    pub slurm_workers_per_job: u32,
    /// Your own batch script for worker jobs (#SBATCH lines, module loads...); the line
    /// `{worker}` in it starts the worker.
    #[arg(long)]
    pub slurm_script: Option<PathBuf>,
    /// Command that starts one worker (`sh -c`), with {worker} (the worker's command line),
    /// {request} and {dispatcher}; its last line of output is the job id.
    #[arg(long)]
    pub start_command: Option<String>,
    /// Command that stops one worker, with {job} and {request}.
    #[arg(long)]
    pub stop_command: Option<String>,
    /// Before an idle worker is released, push the objects only it holds that queued tasks will
    /// read (then the hottest) to surviving workers with room, up to this many bytes; `none`
    /// releases it at once.
    #[arg(long, default_value = "4GB", value_parser = handoff_budget)]
    pub handoff: Budget,
    /// Most time a release's hand-off may take; the worker leaves then, pushed or not.
    #[arg(long, default_value = "30s", value_parser = seconds, allow_hyphen_values = true)]
    pub handoff_time: Duration,
}

/// A hand-off budget: bytes, or none.
#[derive(Clone, Copy, Debug)]
pub struct Budget(pub Option<u64>);

/// `none` or a size.
fn handoff_budget(s: &str) -> Result<Budget, String> {
    match s {
        "none" | "0" => Ok(Budget(None)),
        _ => parse_size(s)
            .map(|b| Budget(Some(b)))
            .map_err(|e| format!("{e} (or none)")),
    }
}

impl PoolArgs {
    /// The core's provisioning and the pool's settings, or the reason they cannot be (the
    /// message names the flag). With `https` (the dispatcher serves TLS) the default URL is
    /// `https://`; `worker_env` (its TLS settings) goes to every worker it starts.
    pub fn resolve(
        &self,
        listen: std::net::SocketAddr,
        journal: &Path,
        worker_token: &str,
        https: bool,
        worker_env: Vec<(String, String)>,
    ) -> Result<(Provisioning, Option<HandoffConfig>, Option<PoolConfig>), String> {
        let max = self.max_workers.unwrap_or(4);
        if self.provisioner == Provisioner::Static {
            let set: Vec<&str> = [
                (self.max_workers.is_some(), "--max-workers"),
                (self.min_workers > 0, "--min-workers"),
                (self.start_command.is_some(), "--start-command"),
                (self.slurm_partition.is_some(), "--slurm-partition"),
                (self.slurm_workers_per_job > 1, "--slurm-workers-per-job"),
            ]
            .into_iter()
            .filter_map(|(on, f)| on.then_some(f))
            .collect();
            if !set.is_empty() {
                return Err(format!(
                    "{} needs --provisioner local, slurm or command (the pool is static)",
                    set.join(", ")
                ));
            }
            return Ok((Provisioning::Static, None, None));
        }
        if self.min_workers > max {
            return Err(format!(
                "--min-workers {} is above --max-workers {max}",
                self.min_workers
            ));
        }
        let backend = match self.provisioner {
            Provisioner::Static => unreachable!(),
            Provisioner::Local => Backend::Local,
            Provisioner::Slurm => Backend::Slurm(SlurmConfig {
                partition: self.slurm_partition.clone(),
                account: self.slurm_account.clone(),
                qos: self.slurm_qos.clone(),
                time: self.slurm_time.clone(),
                extra: self.slurm_args.clone(),
                script: self.slurm_script.clone(),
                workers_per_job: self.slurm_workers_per_job,
            }),
            Provisioner::Command => Backend::Command(CommandConfig {
                start: self.start_command.clone().ok_or(
                    "--provisioner command needs --start-command (and usually --stop-command)",
                )?,
                stop: self.stop_command.clone(),
            }),
        };
        backend.check()?;
        if self.provisioner != Provisioner::Slurm && self.slurm_workers_per_job > 1 {
            return Err("--slurm-workers-per-job needs --provisioner slurm".into());
        }
        if self.provisioner != Provisioner::Command
            && (self.start_command.is_some() || self.stop_command.is_some())
        {
            return Err("--start-command and --stop-command need --provisioner command".into());
        }
        let journal = std::path::absolute(journal).map_err(|e| format!("--journal: {e}"))?;
        let pool_dir = match &self.pool_dir {
            Some(d) => std::path::absolute(d).map_err(|e| format!("--pool-dir: {e}"))?,
            None => PathBuf::from(format!("{}.pool", journal.display())),
        };
        let cache_dir = match (&self.worker_cache_dir, self.provisioner) {
            (Some(d), _) => d.clone(),
            (None, Provisioner::Local) => format!("{}/{{request}}", pool_dir.display()),
            (None, _) => "/tmp/diffuse-{request}".into(),
        };
        let scheme = if https { "https" } else { "http" };
        let url = match &self.url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None if listen.ip().is_unspecified() => {
                let host = if self.provisioner == Provisioner::Local {
                    "127.0.0.1".to_string()
                } else {
                    hostname()
                };
                format!("{scheme}://{host}:{}", listen.port())
            }
            None => format!("{scheme}://{listen}"),
        };
        if https && url.starts_with("http://") {
            return Err(format!(
                "--url {url}: this dispatcher serves TLS (--tls-cert): give an https:// URL"
            ));
        }
        if listen.port() == 0 && self.url.is_none() {
            return Err(
                "--listen with port 0: workers could not find the dispatcher; give a port or --url"
                    .into(),
            );
        }
        let cfg = PoolConfig {
            backend,
            max_workers: max,
            max_pending: self.max_pending,
            cores: self.worker_cores,
            cache_size: self.worker_cache_size,
            cache_dir,
            worker_args: self.worker_args.clone(),
            dispatcher_url: url,
            worker_token: worker_token.to_string(),
            worker_env,
            exe: std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?,
            state_dir: pool_dir,
            prefix: prefix(&journal),
            rm: RmPolicy {
                timeout: self.rm_timeout,
                retries: self.rm_retries,
                backoff: Duration::from_secs(1),
                pacer: match self.rm_calls_per_minute {
                    0 => Pacer::unlimited(),
                    n => Pacer::per_minute(n),
                },
            },
            poll_interval: self.rm_poll,
            start_timeout: self.start_timeout,
            release_grace: self.release_grace,
            lost_grace: self.lost_grace,
        };
        let dynamic = DynamicConfig {
            step: self.step,
            min_nodes: self.min_workers,
            max_nodes: max,
            slots_per_node: self.worker_cores,
            idle_timeout: self.idle_release,
            check_interval: diffuse_runtime::provisioner::CHECK_INTERVAL,
        };
        let handoff = self.handoff.0.map(|budget| HandoffConfig {
            budget,
            time_bound: self.handoff_time,
        });
        Ok((Provisioning::Dynamic(dynamic), handoff, Some(cfg)))
    }
}

/// Request names of this dispatcher: `dfs-` and 6 hex digits of its host and journal, the same
/// after a restart (so the jobs of the earlier run are recognised) and different for another
/// dispatcher sharing the cluster.
fn prefix(journal: &Path) -> String {
    use std::hash::{Hash, Hasher};
    // FNV-1a: stable across builds and platforms, unlike std's SipHash keys.
    struct Fnv(u64);
    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 = (self.0 ^ *b as u64).wrapping_mul(0x100000001b3);
            }
        }
    }
    let mut h = Fnv(0xcbf29ce484222325);
    hostname().hash(&mut h);
    journal.hash(&mut h);
    format!("dfs-{:06x}", h.finish() & 0xffffff)
}

fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}
