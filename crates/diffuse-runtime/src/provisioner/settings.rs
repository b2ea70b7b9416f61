//! The pool's settings ([`PoolConfig`]) and its backend ([`Backend`]): which resource manager,
//! its programs, how a worker's job is launched, and [`Backend::build`], the one place a
//! backend is made.

use super::backend::ResourceManager;
use super::job::Launch;
use super::rm::RmPolicy;
use super::{command, local, slurm};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Which resource manager workers come from.
#[derive(Clone, Debug)]
pub enum Backend {
    /// `diffuse worker` processes on this machine.
    Local,
    /// Slurm batch jobs: one per worker, or job arrays of `workers_per_job`.
    Slurm(slurm::SlurmConfig),
    /// The user's start and stop commands.
    Command(command::CommandConfig),
}

impl Backend {
    /// Its name as given to `--provisioner`, and the programs it runs itself (a user's
    /// commands are theirs to check).
    fn about(&self) -> (&'static str, &'static [&'static str]) {
        match self {
            Backend::Local => ("local", &[]),
            Backend::Slurm(_) => ("slurm", &slurm::PROGRAMS),
            Backend::Command(_) => ("command", &[]),
        }
    }

    /// The backend itself: its files written in `dir` (the pool's directory), its job names
    /// under `prefix`, its commands run with `policy`. Every backend is built here.
    pub(super) fn build(
        &self,
        dir: &Path,
        prefix: &str,
        policy: &RmPolicy,
    ) -> Result<Box<dyn ResourceManager>, String> {
        Ok(match self {
            Backend::Local => Box::new(local::Local::new(dir.to_path_buf())),
            Backend::Slurm(c) => Box::new(slurm::Slurm::new(
                c.clone(),
                dir,
                prefix.to_string(),
                policy.clone(),
            )?),
            Backend::Command(c) => {
                Box::new(command::CommandBackend::new(c.clone(), policy.clone()))
            }
        })
    }

    /// Whether the programs it runs are installed: an error names the first missing one.
    pub fn check(&self) -> Result<(), String> {
        let (name, programs) = self.about();
        match programs.iter().find(|prog| !on_path(prog)) {
            Some(prog) => Err(format!(
                "--provisioner {name}: `{prog}` is not installed (not on PATH)"
            )),
            None => Ok(()),
        }
    }

    /// Its name as given to `--provisioner`.
    pub fn name(&self) -> &'static str {
        self.about().0
    }
}

/// How workers are started and what they bring.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// The resource manager.
    pub backend: Backend,
    /// Most workers alive at once (requested, pending, running or ending).
    pub max_workers: u32,
    /// Most requests not yet running at the resource manager.
    pub max_pending: u32,
    /// Cores of each worker (`--cores`; Slurm's `--cpus-per-task`).
    pub cores: u32,
    /// Cache quota of each worker, bytes.
    pub cache_size: u64,
    /// Each worker's cache directory; `{request}` stands for the request's name.
    pub cache_dir: String,
    /// More `diffuse worker` arguments, as given.
    pub worker_args: Vec<String>,
    /// The URL workers reach the dispatcher at.
    pub dispatcher_url: String,
    /// The worker token (passed in the environment).
    pub worker_token: String,
    /// More environment for every worker: the dispatcher's TLS settings as
    /// `DIFFUSE_WORKER_TLS_CERT`, `..._KEY` and `..._CA` (file paths; a `--worker-arg` flag
    /// wins over them, as flags win over the environment).
    pub worker_env: Vec<(String, String)>,
    /// The `diffuse` executable workers run.
    pub exe: PathBuf,
    /// Logs and scripts of the pool.
    pub state_dir: PathBuf,
    /// Request names start with this; unique to this dispatcher.
    pub prefix: String,
    /// Time limit and retries of resource-manager commands.
    pub rm: RmPolicy,
    /// How often the resource manager is asked for its jobs' states.
    pub poll_interval: Duration,
    /// A job running this long without its worker connecting is cancelled.
    pub start_timeout: Duration,
    /// A released worker's job is cancelled if still there after this.
    pub release_grace: Duration,
    /// A disconnected worker's job is kept this long for it to connect again (a network that
    /// heals, a dispatcher back from a restart), then cancelled. It counts as one of the pool's
    /// workers meanwhile, and its cache is not lost to a brief partition.
    pub lost_grace: Duration,
}

impl PoolConfig {
    /// What starts the workers of a group of requests submitted at once, the first numbered
    /// `first`: `{request}` in its arguments, and the prefix and the first number in the
    /// environment, from which each member learns its own request (see `slurm.rs`).
    pub fn launch_group(&self, first: u64) -> Launch {
        let mut launch = self.launch("{request}");
        launch.env.retain(|(k, _)| k != "DIFFUSE_POOL_REQUEST");
        launch
            .env
            .push(("DIFFUSE_POOL_PREFIX".into(), self.prefix.clone()));
        launch
            .env
            .push(("DIFFUSE_POOL_FIRST".into(), first.to_string()));
        launch
    }

    /// What starts the worker of `request`: the arguments of `diffuse worker`.
    pub fn launch(&self, request: &str) -> Launch {
        let mut args = vec![
            "--cache-dir".to_string(),
            self.cache_dir.replace("{request}", request),
            "--cache-size".into(),
            self.cache_size.to_string(),
            "--cores".into(),
            self.cores.to_string(),
            "--name".into(),
            request.to_string(),
        ];
        args.extend(self.worker_args.iter().cloned());
        let mut env = vec![
            ("DIFFUSE_DISPATCHER".into(), self.dispatcher_url.clone()),
            ("DIFFUSE_WORKER_TOKEN".into(), self.worker_token.clone()),
            ("DIFFUSE_POOL_REQUEST".into(), request.to_string()),
        ];
        env.extend(self.worker_env.iter().cloned());
        Launch {
            exe: self.exe.clone(),
            args,
            env,
            cores: self.cores,
            dispatcher: self.dispatcher_url.clone(),
        }
    }
}

fn on_path(prog: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(d.join(prog))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}
