//! The local backend: each worker is a `diffuse worker` process on this machine, with its own
//! cache directory. Its job id is its process id. It lists the processes it started
//! ([`Listing::Own`]), and at shutdown waits for them, then kills those still there.

use super::backend::{Listing, ResourceManager, RmFuture};
use super::job::{Job, Launch, RmState};
use rustc_hash::FxHashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// Worker processes started here, by request.
pub struct Local {
    /// Where each worker's log goes (`<request>.log`).
    log_dir: PathBuf,
    /// Each process not yet seen to end, by request, with its id.
    children: FxHashMap<String, (String, Child)>,
}

impl Local {
    /// No worker yet.
    pub fn new(log_dir: PathBuf) -> Local {
        Local {
            log_dir,
            children: FxHashMap::default(),
        }
    }

    /// Start a worker (`diffuse worker` and `launch`'s arguments); its pid is the job id.
    fn start(&mut self, request: &str, launch: &Launch) -> Result<String, String> {
        let log = self.log_dir.join(format!("{request}.log"));
        let out = std::fs::File::create(&log)
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let err = out
            .try_clone()
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let child = Command::new(&launch.exe)
            .arg("worker")
            .args(&launch.args)
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .env_remove("DIFFUSE_CLIENT_TOKEN")
            .env_remove("DIFFUSE_METRICS_TOKEN")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Its own group: a Ctrl-C meant for the dispatcher does not reach it; the
            // dispatcher releases it.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", launch.exe.display()))?;
        let pid = child.id().map(|p| p.to_string()).unwrap_or_default();
        self.children
            .insert(request.to_string(), (pid.clone(), child));
        Ok(pid)
    }

    /// Each worker still running, and each that ended (with its exit status), which is then
    /// forgotten.
    fn poll(&mut self) -> Vec<Job> {
        let mut jobs = Vec::new();
        let mut ended = Vec::new();
        for (request, (pid, child)) in self.children.iter_mut() {
            let state = match child.try_wait() {
                Ok(None) => RmState::Running,
                Ok(Some(status)) => {
                    ended.push(request.clone());
                    RmState::Ended(format!("the worker process exited ({status})"))
                }
                Err(e) => {
                    ended.push(request.clone());
                    RmState::Ended(format!("the worker process cannot be waited on: {e}"))
                }
            };
            jobs.push(Job {
                id: pid.clone(),
                name: request.clone(),
                state,
            });
        }
        for r in ended {
            self.children.remove(&r);
        }
        jobs
    }

    /// Ask a worker to stop (SIGTERM: its guard stops its tasks and exits), or, when `force`,
    /// kill it.
    fn stop(&mut self, request: &str, force: bool) -> Result<(), String> {
        let Some((_, child)) = self.children.get_mut(request) else {
            return Ok(());
        };
        if force {
            return child.start_kill().map_err(|e| e.to_string());
        }
        let Some(pid) = child
            .id()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        else {
            return Ok(());
        };
        rustix::process::kill_process(pid, rustix::process::Signal::TERM)
            .map_err(|e| format!("kill {pid:?}: {e}"))
    }
}

impl ResourceManager for Local {
    fn listing(&self) -> Listing {
        Listing::Own
    }

    fn submit<'a>(
        &'a mut self,
        request: &'a str,
        launch: &'a Launch,
    ) -> RmFuture<'a, Result<(String, RmState), String>> {
        let started = self.start(request, launch);
        Box::pin(async move { started.map(|pid| (pid, RmState::Running)) })
    }

    fn list(&mut self) -> RmFuture<'_, Result<Vec<Job>, String>> {
        let jobs = self.poll();
        Box::pin(async move { Ok(jobs) })
    }

    fn cancel<'a>(
        &'a mut self,
        request: &'a str,
        _job: &'a str,
        _launch: &'a Launch,
        force: bool,
    ) -> RmFuture<'a, Result<(), String>> {
        let stopped = self.stop(request, force);
        Box::pin(async move { stopped })
    }

    /// Wait (up to `grace`) while any worker process runs, then kill those still there.
    fn wind_down(&mut self, grace: Duration) -> RmFuture<'_, ()> {
        Box::pin(async move {
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline
                && self.poll().iter().any(|j| j.state == RmState::Running)
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let left: Vec<String> = self.children.keys().cloned().collect();
            for request in left {
                let _ = self.stop(&request, true);
            }
        })
    }
}
