//! Memory limits for tasks, where the worker may create memory cgroups.
//!
//! A task's `"memory"` is first a scheduling request: it runs only on a worker with that much
//! free. Where the worker can create memory cgroups below its own, the request is also a limit:
//! the task's first process is moved into a cgroup of its own whose limit is the request, and a
//! task that uses more is killed by the kernel and reported as such.
//!
//! * **cgroup v2**: the worker's cgroup must be delegated to it (writable) with the `memory`
//!   controller enabled for its children (`cgroup.subtree_control`, e.g. systemd's
//!   `Delegate=memory`); each task gets `diffuse-task-N/` with `memory.max`, and an OOM kill is
//!   read from `memory.events`.
//! * **cgroup v1**: the worker must be able to create directories in its memory hierarchy (root
//!   usually can); each task gets `diffuse-task-N/` with `memory.limit_in_bytes`, and an OOM kill
//!   is read from `memory.oom_control`.
//!
//! Otherwise memory is not enforced, and the worker says so once at start. The first process is
//! moved right after it starts: a process it forks in the first microseconds stays outside.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Where task cgroups are made.
#[derive(Debug)]
pub struct Cgroups {
    base: PathBuf,
    v2: bool,
    next: AtomicU64,
}

/// One task's cgroup; removed when dropped (its processes are gone by then).
pub struct TaskCgroup {
    dir: PathBuf,
    v2: bool,
}

impl Cgroups {
    /// Find where this worker may create memory cgroups, if anywhere.
    pub fn detect() -> Result<Cgroups, String> {
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let v2_unified = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        for line in own.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(_), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let path = path.trim_start_matches('/');
            if controllers.is_empty() && v2_unified {
                let base = Path::new("/sys/fs/cgroup").join(path);
                let enabled = std::fs::read_to_string(base.join("cgroup.subtree_control"))
                    .unwrap_or_default();
                if enabled.split_whitespace().any(|c| c == "memory") {
                    return Cgroups::usable(base, true);
                }
                return Err(format!(
                    "cgroup v2 without the memory controller delegated to {} (cgroup.subtree_control)",
                    base.display()
                ));
            }
            if controllers.split(',').any(|c| c == "memory") {
                let base = Path::new("/sys/fs/cgroup/memory").join(path);
                return Cgroups::usable(base, false);
            }
        }
        Err("no memory cgroup controller".into())
    }

    fn usable(base: PathBuf, v2: bool) -> Result<Cgroups, String> {
        let probe = base.join(format!("diffuse-probe-{}", std::process::id()));
        std::fs::create_dir(&probe)
            .map_err(|e| format!("cannot create cgroups in {}: {e}", base.display()))?;
        let _ = std::fs::remove_dir(&probe);
        Ok(Cgroups {
            base,
            v2,
            next: AtomicU64::new(0),
        })
    }

    /// Which kind, for the start-up message.
    pub fn describe(&self) -> String {
        format!(
            "cgroup {} under {}",
            if self.v2 { "v2" } else { "v1" },
            self.base.display()
        )
    }

    /// A cgroup limited to `bytes`, holding `pid`.
    pub fn limit(&self, pid: u32, bytes: u64) -> std::io::Result<TaskCgroup> {
        let cg = self.make()?;
        cg.set_limit(Some(bytes))?;
        std::fs::write(cg.dir.join("cgroup.procs"), pid.to_string())?;
        Ok(cg)
    }

    /// A cgroup without a limit yet, holding `pid`: a warm process kept for many calls, whose
    /// limit is set to each call's ([`TaskCgroup::set_limit`]).
    pub fn holding(&self, pid: u32) -> std::io::Result<TaskCgroup> {
        let cg = self.make()?;
        std::fs::write(cg.dir.join("cgroup.procs"), pid.to_string())?;
        Ok(cg)
    }

    fn make(&self) -> std::io::Result<TaskCgroup> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let dir = self
            .base
            .join(format!("diffuse-task-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir)?;
        Ok(TaskCgroup { dir, v2: self.v2 })
    }
}

impl TaskCgroup {
    /// Limit the cgroup's memory to `bytes` (None: no limit).
    pub fn set_limit(&self, bytes: Option<u64>) -> std::io::Result<()> {
        let value = match (bytes, self.v2) {
            (Some(b), _) => b.to_string(),
            (None, true) => "max".into(),
            (None, false) => "-1".into(),
        };
        if self.v2 {
            return std::fs::write(self.dir.join("memory.max"), &value);
        }
        // Without swap accounting the limit could be escaped into swap; set it where possible
        // (the swap limit first when raising it, last when lowering it: it must stay above).
        let swap = self.dir.join("memory.memsw.limit_in_bytes");
        let _ = std::fs::write(&swap, &value);
        std::fs::write(self.dir.join("memory.limit_in_bytes"), &value)?;
        let _ = std::fs::write(&swap, &value);
        Ok(())
    }

    /// How many times the kernel killed a process of this cgroup for its memory limit.
    pub fn oom_kills(&self) -> u64 {
        let (file, key) = if self.v2 {
            ("memory.events", "oom_kill")
        } else {
            ("memory.oom_control", "oom_kill")
        };
        std::fs::read_to_string(self.dir.join(file))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v.trim().parse::<u64>().unwrap_or(0))
            .sum()
    }

    /// Whether the kernel killed a process of this cgroup for its memory limit.
    pub fn oom_killed(&self) -> bool {
        self.oom_kills() > 0
    }
}

impl Drop for TaskCgroup {
    fn drop(&mut self) {
        // The task's processes are gone (its group was killed); a zombie not yet reaped may
        // still count, so try a few times.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        tracing::warn!("cannot remove the cgroup {}", self.dir.display());
    }
}
