//! A task's processes, and what ties them to the worker.
//!
//! * Every task runs in a **process group** of its own (its first process leads it), so the
//!   worker can signal everything the task started: a shell's children too.
//! * When the task's first process exits, whatever it left running in its group is killed
//!   (SIGKILL): a task's processes do not outlive it.
//! * A task is **stopped** (cancelled, or its worker is stopping) with SIGTERM to the group, then
//!   SIGKILL after [`STOP_GRACE`].
//! * If the worker loses a task (its connection to the dispatcher dropped, and the future running
//!   the task is dropped), the group is killed at once.
//! * If the worker itself dies, even by SIGKILL, its **guard** (its parent, a child subreaper:
//!   [`super::guard`]) kills every process the tasks left, in their groups or not.
//! * A task's **environment** is the worker's without diffuse's own variables (every `DIFFUSE_*`,
//!   which is where tokens live) and without the names given with `--task-env-drop`.
//! * With `--task-user`, a worker running as root runs tasks as that user (its uid, its primary
//!   gid, no supplementary groups), with `HOME`, `USER` and `LOGNAME` set for it.

use super::output::{capture, Captured};
use crate::placeholder::{expand_plain, expand_shell};
use crate::spec::Cmd;
use rustix::process::{Pid, Signal};
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::watch;

/// Time between SIGTERM and SIGKILL when a task is stopped.
pub const STOP_GRACE: Duration = Duration::from_secs(3);

/// Why a running task is stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Its cancel was asked for.
    Cancelled,
    /// The worker is stopping (a signal): the task runs again elsewhere.
    Leaving,
    /// It reached its time limit.
    TimedOut,
}

/// How the task's first process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code (None: killed by a signal).
    Code(Option<i32>),
    /// It was stopped.
    Stopped(Stop),
}

/// The user tasks run as (`--task-user`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskUser {
    /// Name (from the password database, or the number given).
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Home directory.
    pub home: PathBuf,
}

impl TaskUser {
    /// `NAME`, `UID` or `UID:GID`, looked up in `/etc/passwd`.
    pub fn parse(spec: &str) -> Result<TaskUser, String> {
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let entries: Vec<Vec<&str>> = passwd
            .lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .filter(|f| f.len() >= 7)
            .collect();
        let (user, group) = match spec.split_once(':') {
            Some((u, g)) => (u, Some(g)),
            None => (spec, None),
        };
        let by_name = entries.iter().find(|f| f[0] == user);
        let by_uid = user
            .parse::<u32>()
            .ok()
            .map(|uid| (uid, entries.iter().find(|f| f[2].parse() == Ok(uid))));
        let (name, uid, gid, home) = match (by_name, by_uid) {
            (Some(f), _) | (None, Some((_, Some(f)))) => (
                f[0].to_string(),
                f[2].parse()
                    .map_err(|_| format!("bad uid in /etc/passwd for {}", f[0]))?,
                f[3].parse()
                    .map_err(|_| format!("bad gid in /etc/passwd for {}", f[0]))?,
                PathBuf::from(f[5]),
            ),
            (None, Some((uid, None))) => (uid.to_string(), uid, uid, PathBuf::from("/")),
            (None, None) => return Err(format!("no user '{user}' in /etc/passwd")),
        };
        let gid = match group {
            Some(g) => g
                .parse()
                .map_err(|_| format!("'{g}' is not a numeric group id"))?,
            None => gid,
        };
        if uid == 0 {
            return Err("--task-user must not be root".into());
        }
        Ok(TaskUser {
            name,
            uid,
            gid,
            home,
        })
    }
}

/// What every task's process gets: environment, user.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The environment (scrubbed).
    pub env: Vec<(OsString, OsString)>,
    /// Run as this user.
    pub user: Option<TaskUser>,
}

impl Launch {
    /// The worker's environment without `DIFFUSE_*` and `drop`, for tasks run as `user`.
    pub fn new(drop: &[String], user: Option<TaskUser>) -> Launch {
        let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(k, _)| {
                let k = k.to_string_lossy();
                !k.starts_with("DIFFUSE_") && !drop.iter().any(|d| *d == k)
            })
            .collect();
        if let Some(u) = &user {
            env.retain(|(k, _)| {
                !["HOME", "USER", "LOGNAME"].contains(&k.to_string_lossy().as_ref())
            });
            env.push(("HOME".into(), u.home.clone().into()));
            env.push(("USER".into(), u.name.clone().into()));
            env.push(("LOGNAME".into(), u.name.clone().into()));
        }
        Launch { env, user }
    }
}

fn kill_group(pgid: i32, signal: Signal) {
    if let Some(pid) = Pid::from_raw(pgid) {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

/// A running task's process group: killed (SIGKILL) when dropped, whatever happened.
struct Group {
    pgid: i32,
}

impl Drop for Group {
    fn drop(&mut self) {
        kill_group(self.pgid, Signal::KILL);
    }
}

/// The program's path: names without a `/` are looked up in `PATH` once and remembered, so a
/// spawn does not try every `PATH` directory in turn.
fn resolve(program: &str) -> PathBuf {
    static FOUND: std::sync::OnceLock<Mutex<HashMap<String, PathBuf>>> = std::sync::OnceLock::new();
    if program.contains('/') {
        return PathBuf::from(program);
    }
    let found = FOUND.get_or_init(Default::default);
    if let Some(p) = found.lock().expect("path cache").get(program) {
        return p.clone();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let hit = std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        });
    match hit {
        Some(p) => {
            found
                .lock()
                .expect("path cache")
                .insert(program.to_string(), p.clone());
            p
        }
        // Not found: let the spawn fail with the OS's own error for the bare name.
        None => PathBuf::from(program),
    }
}

/// What to run, and where.
pub struct Job<'a> {
    /// The command.
    pub cmd: &'a Cmd,
    /// Input paths, by position.
    pub inputs: &'a [PathBuf],
    /// Output paths.
    pub outputs: &'a [PathBuf],
    /// The task's directory: its working directory if it exists and `cwd` is not given, else
    /// the worker's work directory (its parent).
    pub dir: &'a Path,
    /// The working directory the task asked for (its `cwd`), instead of `dir`.
    pub cwd: Option<&'a Path>,
    /// Files to capture stdout and stderr to.
    pub logs: (PathBuf, PathBuf),
    /// Most bytes kept of each of stdout and stderr.
    pub max_output: u64,
    /// Extra environment for this task.
    pub env: Vec<(String, String)>,
    /// Its time limit.
    pub timeout: Option<Duration>,
    /// Its memory limit, and where to enforce it.
    pub memory: Option<(u64, &'a super::cgroup::Cgroups)>,
    /// Frees disk space when a log file finds the disk full (evicts from the cache).
    pub make_room: std::sync::Arc<dyn Fn() -> bool + Send + Sync>,
}

/// How the task's processes ended, and what they printed.
#[derive(Debug)]
pub struct Ended {
    /// How its first process ended.
    pub exit: Exit,
    /// What was captured of its stdout.
    pub stdout: Captured,
    /// What was captured of its stderr.
    pub stderr: Captured,
    /// Its memory cgroup killed it.
    pub out_of_memory: bool,
}

/// Run the command in a process group of its own until it exits, reaches its time limit, or
/// `stop` asks it to stop. Its stdout and stderr are written to the files of `job.logs`, each
/// created at its first byte (a task that prints nothing leaves no file) and cut at
/// `job.max_output` bytes. Err: it could not be started.
pub async fn execute(
    job: Job<'_>,
    launch: &Launch,
    mut stop: watch::Receiver<Option<Stop>>,
) -> Result<Ended, String> {
    let mut command = match job.cmd {
        Cmd::Argv(argv) => {
            let mut c = tokio::process::Command::new(resolve(&expand_plain(
                &argv[0],
                job.inputs,
                job.outputs,
            )));
            c.args(
                argv[1..]
                    .iter()
                    .map(|a| expand_plain(a, job.inputs, job.outputs)),
            );
            c
        }
        Cmd::Shell(s) => {
            let mut c = tokio::process::Command::new("sh");
            c.arg("-c").arg(expand_shell(s, job.inputs, job.outputs));
            c
        }
        Cmd::Call(_) => return Err("a call runs in a warm process, not as a command".into()),
    };
    let dir = job.dir;
    let cwd = match job.cwd {
        Some(asked) => asked,
        None if dir.is_dir() => dir,
        None => dir.parent().unwrap_or(dir),
    };
    command
        .current_dir(cwd)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .envs(job.env)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(u) = &launch.user {
        command.uid(u.uid).gid(u.gid);
    }
    let mut child = command.spawn().map_err(|e| {
        let program = match job.cmd {
            Cmd::Argv(a) => a[0].clone(),
            Cmd::Shell(_) | Cmd::Call(_) => "sh".into(),
        };
        // The child's chdir fails with the same error as a missing program: say which.
        match job.cwd {
            Some(asked) if !asked.is_dir() => {
                format!("working directory (cwd) {}: {e}", asked.display())
            }
            _ => format!("exec {program}: {e}"),
        }
    })?;
    let pgid = child.id().map_or(0, |p| p as i32);
    let group = Group { pgid };
    let cgroup = match job.memory {
        Some((bytes, cgroups)) => match cgroups.limit(pgid as u32, bytes) {
            Ok(cg) => Some(cg),
            Err(e) => {
                tracing::warn!("memory limit of {bytes} bytes not enforced: {e}");
                None
            }
        },
        None => None,
    };
    let (out_path, err_path) = job.logs;
    let (room_out, room_err) = (job.make_room.clone(), job.make_room.clone());
    let out = tokio::spawn(capture(
        child.stdout.take(),
        out_path,
        job.max_output,
        move || room_out(),
    ));
    let err = tokio::spawn(capture(
        child.stderr.take(),
        err_path,
        job.max_output,
        move || room_err(),
    ));
    let deadline = async {
        match job.timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let exit = tokio::select! {
        status = child.wait() => Exit::Code(status.map_err(|e| format!("wait: {e}"))?.code()),
        reason = async {
            tokio::select! {
                r = stop.wait_for(Option::is_some) => r.ok().and_then(|v| *v).unwrap_or(Stop::Leaving),
                () = deadline => Stop::TimedOut,
            }
        } => {
            kill_group(pgid, Signal::TERM);
            if tokio::time::timeout(STOP_GRACE, child.wait()).await.is_err() {
                kill_group(pgid, Signal::KILL);
                let _ = child.wait().await;
            }
            Exit::Stopped(reason)
        }
    };
    // Whatever the task left running in its group goes now, which also closes its pipes.
    drop(group);
    let mut captured = Vec::with_capacity(2);
    for copy in [out, err] {
        captured.push(
            match tokio::time::timeout(Duration::from_secs(1), copy).await {
                Ok(Ok(Ok(c))) => c,
                Ok(Ok(Err(e))) => return Err(format!("capturing output: {e}")),
                Ok(Err(e)) => return Err(format!("capturing output: {e}")),
                Err(_) => {
                    tracing::warn!(
                        "output still open 1 s after the task ended (a process that left its group holds it); not waiting for it"
                    );
                    Captured::default()
                }
            },
        );
    }
    let out_of_memory = cgroup.as_ref().is_some_and(|cg| cg.oom_killed());
    drop(cgroup);
    let stderr = captured.pop().unwrap_or_default();
    let stdout = captured.pop().unwrap_or_default();
    Ok(Ended {
        exit,
        stdout,
        stderr,
        out_of_memory,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_users_are_looked_up() {
        let u = TaskUser::parse("nobody").unwrap();
        assert_eq!((u.uid, u.name.as_str()), (65534, "nobody"));
        let u = TaskUser::parse("65534:100").unwrap();
        assert_eq!((u.uid, u.gid), (65534, 100));
        let u = TaskUser::parse("4242").unwrap();
        assert_eq!((u.uid, u.gid), (4242, 4242));
        assert!(TaskUser::parse("root").is_err());
        assert!(TaskUser::parse("no-such-user-here").is_err());
    }

    #[test]
    fn the_environment_has_no_diffuse_variables() {
        let l = Launch::new(&["PATH".to_string()], None);
        assert!(l
            .env
            .iter()
            .all(|(k, _)| !k.to_string_lossy().starts_with("DIFFUSE_") && k != "PATH"));
    }
}
