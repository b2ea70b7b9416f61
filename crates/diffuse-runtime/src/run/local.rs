//! `diffuse run`'s local workers: processes on this machine, each with its own cache directory
//! (standing in for a node), started, restarted when one dies, waited for and stopped; or,
//! with `--max-workers`, the local provisioner of an elastic pool.

use super::config::{RunConfig, RunError};
use crate::dispatcher::Handle;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

pub(super) struct Workers(pub(super) Vec<std::process::Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One cache directory per local worker under `cache_root`, saying which were skipped because
/// another run holds them.
pub(super) fn claim_caches(
    cfg: &RunConfig,
    n: u32,
) -> Result<crate::run_caches::Claimed, RunError> {
    let caches = crate::run_caches::claim(&cfg.cache_root, n as usize).map_err(|e| {
        RunError::Setup(format!(
            "cannot use the cache directory {}: {e}",
            cfg.cache_root.display()
        ))
    })?;
    if !caches.busy.is_empty() && cfg.progress {
        eprintln!(
            "cache: worker-{} of {} in use by another run; this run uses {}",
            caches
                .busy
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", worker-"),
            cfg.cache_root.display(),
            caches
                .dirs
                .iter()
                .filter_map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(caches)
}

/// The local worker processes of a fixed pool, and what restarting one needs.
pub(super) struct Local {
    pub(super) workers: Workers,
    /// How many times each was started again.
    pub(super) restarts: Vec<u32>,
    pub(super) caches: crate::run_caches::Claimed,
    pub(super) url: String,
    pub(super) token: String,
    pub(super) logs: PathBuf,
}

/// A local worker that died (a task killed it, or it crashed) is started again on its cache
/// directory, which it verifies; the dispatcher runs its tasks again elsewhere. `connected`:
/// workers the dispatcher has now.
pub(super) fn restart_dead_workers(
    cfg: &RunConfig,
    local: &mut Local,
    connected: u32,
) -> Result<(), RunError> {
    for (i, c) in local.workers.0.iter_mut().enumerate() {
        if let Ok(Some(code)) = c.try_wait() {
            local.restarts[i] += 1;
            if local.restarts[i] > MAX_RESTARTS {
                if connected == 0 {
                    return Err(RunError::Workers(format!(
                        "worker-{i} exited ({code}) {MAX_RESTARTS} times and no worker is left; see {}",
                        local.logs.join(format!("worker-{i}.log")).display()
                    )));
                }
                continue;
            }
            tracing::warn!("worker-{i} exited ({code}); starting it again");
            *c = start_worker(
                cfg,
                i as u32,
                &local.caches.dirs[i],
                &local.url,
                &local.token,
            )?;
        }
    }
    Ok(())
}

/// Stop the local workers: told to finish, or on a signal sent SIGTERM (each stops its tasks'
/// process groups, tells the dispatcher, marks its cache clean and exits); killed if one has not
/// exited within 10 s.
pub(super) async fn stop_workers(workers: &mut Workers, stopped_by: Option<&str>, handle: &Handle) {
    if let Some(sig) = stopped_by {
        eprintln!("{sig}: stopping the workers and their tasks");
        for c in &workers.0 {
            if let Some(pid) = rustix::process::Pid::from_raw(c.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
    } else {
        handle.shutdown_workers();
    }
    let deadline = Instant::now() + crate::worker::process::STOP_GRACE + Duration::from_secs(7);
    for c in &mut workers.0 {
        while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if matches!(c.try_wait(), Ok(None)) {
            tracing::warn!("a worker did not exit within 10 s of being told to; killing it");
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// How many times `diffuse run` starts one local worker again after it died.
pub(super) const MAX_RESTARTS: u32 = 10;

/// Start local worker `i` on the cache directory `cache`; its tasks' output goes to
/// `<run-dir>/logs/`, its own log to `<run-dir>/logs/worker-<i>.log` (appended to across
/// restarts). The local workers share this machine: each gets an equal part of its memory and
/// every N-th of its GPUs, so no two hand out the same GPU.
/// The core settings and the local provisioner of `run --max-workers`: workers with the same
/// options as a fixed pool's, caches under `<run-dir>/pool/`.
pub(super) fn elastic_pool(
    cfg: &RunConfig,
    max: u32,
    url: &str,
    token: &str,
) -> (diffuse_core::CoreConfig, crate::provisioner::PoolConfig) {
    let logs = cfg.run_dir.join("logs");
    let mut args: Vec<String> = vec![
        "--log-dir".into(),
        logs.display().to_string(),
        "--keep-logs".into(),
        "--eviction".into(),
        cfg.eviction.to_string(),
        "--listen".into(),
        "127.0.0.1:0".into(),
    ];
    let machine = crate::worker::Machine::detect();
    if let Some(memory) = machine.memory {
        args.extend([
            "--memory".into(),
            (memory / u64::from(max.max(1))).to_string(),
        ]);
    }
    args.extend(["--gpus".into(), "0".into()]);
    for root in &cfg.input_roots {
        args.extend(["--input-root".into(), root.display().to_string()]);
    }
    if cfg.noop {
        args.push("--noop".into());
    }
    if cfg.storage_bandwidth.is_some() {
        args.extend(["--storage-emulator".into(), url.to_string()]);
    }
    let pool_dir = cfg.run_dir.join("pool");
    let core = diffuse_core::CoreConfig {
        provisioning: diffuse_core::Provisioning::Dynamic(diffuse_core::DynamicConfig {
            step: diffuse_core::StepPolicy::AllAtOnce,
            min_nodes: 0,
            max_nodes: max,
            slots_per_node: cfg.slots_per_worker,
            idle_timeout: cfg.idle_release,
            check_interval: crate::provisioner::CHECK_INTERVAL,
        }),
        handoff: Some(diffuse_core::HandoffConfig {
            budget: 4 << 30,
            time_bound: Duration::from_secs(30),
        }),
        ..cfg.core.clone()
    };
    let pool = crate::provisioner::PoolConfig {
        backend: crate::provisioner::Backend::Local,
        max_workers: max,
        max_pending: max,
        cores: cfg.slots_per_worker,
        cache_size: cfg.cache_size,
        cache_dir: format!("{}/{{request}}", pool_dir.display()),
        worker_args: args,
        dispatcher_url: url.to_string(),
        worker_token: token.to_string(),
        worker_env: Vec::new(),
        exe: cfg.exe.clone(),
        state_dir: pool_dir,
        prefix: "worker".into(),
        rm: crate::provisioner::rm::RmPolicy::default(),
        poll_interval: Duration::from_secs(1),
        start_timeout: Duration::from_secs(60),
        release_grace: Duration::from_secs(10),
        // A local worker that lost its connection to a dispatcher on the same machine is hung
        // or gone; no partition heals.
        lost_grace: Duration::from_secs(10),
    };
    (core, pool)
}

pub(super) fn start_worker(
    cfg: &RunConfig,
    i: u32,
    cache: &Path,
    url: &str,
    token: &str,
) -> Result<std::process::Child, RunError> {
    let logs = cfg.run_dir.join("logs");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(logs.join(format!("worker-{i}.log")))?;
    let mut cmd = std::process::Command::new(&cfg.exe);
    cmd.arg("worker")
        .args(["--dispatcher", url])
        .arg("--cache-dir")
        .arg(cache)
        .arg("--log-dir")
        .arg(&logs)
        .arg("--keep-logs")
        .args(["--cache-size", &cfg.cache_size.to_string()])
        .args(["--slots", &cfg.slots_per_worker.to_string()])
        .args(["--name", &format!("worker-{i}")])
        .args(["--eviction", &cfg.eviction.to_string()])
        .args(["--listen", "127.0.0.1:0"])
        .env("DIFFUSE_WORKER_TOKEN", token)
        // A worker needs neither, so it holds neither (docs/security.md).
        .env_remove("DIFFUSE_CLIENT_TOKEN")
        .env_remove("DIFFUSE_METRICS_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    let machine = crate::worker::Machine::detect();
    let n = cfg.workers.max(1);
    if let Some(memory) = machine.memory {
        cmd.args(["--memory", &(memory / u64::from(n)).to_string()]);
    }
    let share: Vec<&str> = machine
        .gpus
        .iter()
        .skip(i as usize)
        .step_by(n as usize)
        .map(String::as_str)
        .collect();
    if share.is_empty() {
        cmd.args(["--gpus", "0"]);
    } else {
        cmd.args(["--gpu-ids", &share.join(",")]);
    }
    for root in &cfg.input_roots {
        cmd.arg("--input-root").arg(root);
    }
    if cfg.noop {
        cmd.arg("--noop");
    }
    if cfg.storage_bandwidth.is_some() {
        cmd.args(["--storage-emulator", url]);
    }
    cmd.spawn()
        .map_err(|e| RunError::Workers(format!("cannot start worker {}: {e}", cfg.exe.display())))
}

pub(super) async fn wait_for_workers(
    handle: &Handle,
    n: u32,
    workers: &mut Workers,
) -> Result<(), RunError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = handle.status().await?;
        if s.workers >= n {
            return Ok(());
        }
        for (i, c) in workers.0.iter_mut().enumerate() {
            if let Ok(Some(code)) = c.try_wait() {
                return Err(RunError::Workers(format!(
                    "worker-{i} exited at start ({code}); see logs/worker-{i}.log in the run directory"
                )));
            }
        }
        if Instant::now() > deadline {
            return Err(RunError::Workers(format!(
                "only {} of {n} workers connected within 30 s",
                s.workers
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
