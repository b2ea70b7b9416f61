//! The local backend: each worker is a `diffuse worker` process on this machine, with its own
//! cache directory. Its job id is its process id.

use super::job::{Launch, RmState};
use rustc_hash::FxHashMap;
use std::path::PathBuf;
use std::process::Stdio;
use tokio::process::{Child, Command};

/// Worker processes started here, by request.
pub struct Local {
    /// Where each worker's log goes (`<request>.log`).
    log_dir: PathBuf,
    children: FxHashMap<String, Child>,
}

impl Local {
    /// No worker yet.
    pub fn new(log_dir: PathBuf) -> Local {
        Local {
            log_dir,
            children: FxHashMap::default(),
        }
    }

    /// Start a worker; its pid is the job id.
    pub fn submit(&mut self, request: &str, launch: &Launch) -> Result<String, String> {
        let log = self.log_dir.join(format!("{request}.log"));
        let out = std::fs::File::create(&log)
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let err = out
            .try_clone()
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let child = Command::new(&launch.exe)
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
        self.children.insert(request.to_string(), child);
        Ok(pid)
    }

    /// Each worker still running, and each that ended (with its exit status).
    pub fn poll(&mut self) -> FxHashMap<String, RmState> {
        let mut states = FxHashMap::default();
        let mut ended = Vec::new();
        for (request, child) in self.children.iter_mut() {
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
            states.insert(request.clone(), state);
        }
        for r in ended {
            self.children.remove(&r);
        }
        states
    }

    /// Ask a worker to stop (SIGTERM: its guard stops its tasks and exits), or, when `force`,
    /// kill it.
    pub fn cancel(&mut self, request: &str, force: bool) -> Result<(), String> {
        let Some(child) = self.children.get_mut(request) else {
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
