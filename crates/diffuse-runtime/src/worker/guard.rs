//! The guard: what keeps a worker's task processes from outliving it.
//!
//! `diffuse worker`, as a user or a resource manager starts it, is a small *guard* process; the
//! worker proper runs as its child, with the same arguments. The guard
//!
//! * is a **child subreaper** (`PR_SET_CHILD_SUBREAPER`): a process whose parent dies is
//!   re-parented to it instead of to init. When the worker dies, even by SIGKILL, its tasks (and
//!   whatever they started, in their process group or not, `setsid` or not) become the guard's
//!   children, and the guard kills them all before it exits;
//! * forwards SIGTERM, SIGINT and SIGHUP to the worker, which then stops its tasks cleanly;
//! * exits with the worker's status (128 + the signal if it was killed by one), so a supervisor
//!   (`diffuse run`, systemd, Slurm) sees the worker's end.
//!
//! The worker sets `PR_SET_PDEATHSIG` to SIGTERM on itself, so if the guard is killed (SIGKILL
//! cannot be caught) the worker stops its tasks and leaves cleanly. Nothing passes between the two
//! while tasks run: the guard costs nothing per task.

use rustix::process::{Pid, Signal, WaitOptions, WaitStatus};
use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

/// Set in the worker's environment by its guard: the guard's pid.
pub const GUARD_ENV: &str = "DIFFUSE_WORKER_GUARD";

/// Why the guard, or the worker under it, cannot start.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// The worker cannot ask to be stopped when its guard dies (`PR_SET_PDEATHSIG`).
    #[error("cannot ask for SIGTERM when the guard dies (PR_SET_PDEATHSIG)")]
    DeathSignal(#[source] rustix::io::Errno),
    /// [`GUARD_ENV`] holds something else than a process id: it was not set by a guard.
    #[error(
        "{GUARD_ENV} is not a process id ({0:?}): it is set by the guard for the worker it \
         starts; unset it"
    )]
    NotAPid(std::ffi::OsString),
    /// The guard died before the worker it started got going.
    #[error("the guard process ({0}) is already gone")]
    GuardGone(i32),
    /// The guard cannot adopt the processes its worker's tasks leave
    /// (`PR_SET_CHILD_SUBREAPER`).
    #[error("cannot become a child subreaper (PR_SET_CHILD_SUBREAPER)")]
    Subreaper(#[source] rustix::io::Errno),
    /// The worker proper could not be started.
    #[error("cannot start the worker ({})", exe.display())]
    Start {
        /// The program run as the worker (this one).
        exe: std::path::PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The thread that forwards signals to the worker could not be started.
    #[error("cannot start the thread that forwards signals to the worker")]
    Thread(#[source] std::io::Error),
    /// Waiting for the worker failed.
    #[error("cannot wait for the worker")]
    Wait(#[source] rustix::io::Errno),
}

/// In the worker proper: whether it runs under a guard. If so, it gets SIGTERM when the guard
/// dies; and it refuses to run if the guard is already gone.
pub fn under_guard() -> Result<bool, GuardError> {
    let Some(value) = std::env::var_os(GUARD_ENV) else {
        return Ok(false);
    };
    rustix::process::set_parent_process_death_signal(Some(Signal::TERM))
        .map_err(GuardError::DeathSignal)?;
    let guard: i32 = value
        .to_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| GuardError::NotAPid(value.clone()))?;
    if rustix::process::getppid()
        .map(Pid::as_raw_nonzero)
        .map(|p| p.get())
        != Some(guard)
    {
        return Err(GuardError::GuardGone(guard));
    }
    Ok(true)
}

/// The guard: run `exe args` (the worker proper) as a child and watch over it; returns the exit
/// code to exit with.
pub fn guard(exe: &Path, args: &[OsString]) -> Result<u8, GuardError> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(GuardError::Subreaper)?;
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let child = std::process::Command::new(exe)
        .args(args)
        .env(GUARD_ENV, me.to_string())
        .spawn()
        .map_err(|source| GuardError::Start {
            exe: exe.to_path_buf(),
            source,
        })?;
    let worker = Pid::from_child(&child);
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || forward_signals(worker))
        .map_err(GuardError::Thread)?;
    // Reap every child until the worker itself ends: tasks orphaned by a process of theirs are
    // re-parented here while the worker runs, and must not linger as zombies.
    let status = loop {
        match rustix::process::wait(WaitOptions::empty()) {
            Ok(Some((pid, status))) if pid == worker => break status,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(GuardError::Wait(e)),
        }
    };
    kill_descendants(me);
    Ok(code_of(status))
}

fn code_of(status: WaitStatus) -> u8 {
    if let Some(code) = status.exit_status() {
        code as u8
    } else if let Some(sig) = status.terminating_signal() {
        (128 + sig) as u8
    } else {
        1
    }
}

/// Forward SIGTERM, SIGINT and SIGHUP to `worker`, forever (the process ends with the worker).
fn forward_signals(worker: Pid) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    rt.block_on(async move {
        let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
        ) else {
            return;
        };
        loop {
            let sig = tokio::select! {
                _ = term.recv() => Signal::TERM,
                _ = int.recv() => Signal::INT,
                _ = hup.recv() => Signal::HUP,
            };
            let _ = rustix::process::kill_process(worker, sig);
        }
    });
}

/// Kill (SIGKILL) every process whose parent is `me`, and their process groups, and reap them,
/// until none is left (what they started is re-parented here as they die) or 10 s have passed.
fn kill_descendants(me: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children = children_of(me);
        if children.is_empty() || Instant::now() > deadline {
            return;
        }
        for (pid, pgid) in children {
            if let Some(p) = Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(p, Signal::KILL);
            }
            if pgid == pid {
                if let Some(g) = Pid::from_raw(pgid) {
                    let _ = rustix::process::kill_process_group(g, Signal::KILL);
                }
            }
        }
        while let Ok(Some(_)) = rustix::process::wait(WaitOptions::NOHANG) {}
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// (pid, process group) of every process whose parent is `parent`, from `/proc`.
fn children_of(parent: i32) -> Vec<(i32, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
        let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let (Some(ppid), Some(pgrp)) = (
            fields.get(1).and_then(|f| f.parse::<i32>().ok()),
            fields.get(2).and_then(|f| f.parse::<i32>().ok()),
        ) else {
            continue;
        };
        if ppid == parent {
            found.push((pid, pgrp));
        }
    }
    found
}
