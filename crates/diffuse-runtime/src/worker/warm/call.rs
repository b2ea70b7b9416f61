//! One call in a warm process: the order sent, the child let go once it is in its cgroup (fork
//! mode), its output captured from FIFOs, its end waited for within its time limit and against
//! a cancel, whatever it left killed, and its result read.

use super::frame::{CallOrder, FromWarm, ToWarm};
use super::process::Warm;
use super::{Key, WarmPools};
use crate::spec::{Call, Isolation};
use crate::worker::cgroup::{Cgroups, TaskCgroup};
use crate::worker::output::{capture, Captured};
use crate::worker::process::{Ended, Exit, Stop, STOP_GRACE};
use rustix::process::{Pid, Signal};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// What to call, and where.
pub struct CallJob<'a> {
    /// The call.
    pub call: &'a Call,
    /// The function's input URI (what a reuse-mode process is kept for).
    pub function: &'a str,
    /// The staged function file.
    pub fn_path: &'a Path,
    /// The argument bytes.
    pub args: Vec<u8>,
    /// The staged inputs, as written in the task.
    pub inputs: &'a [PathBuf],
    /// The task's scratch directory (its directory, or the work directory when it has none):
    /// the FIFOs and the result file go there, under names made from `name`.
    pub dir: &'a Path,
    /// The attempt's name (unique on the worker).
    pub name: String,
    /// Its working directory, if it gave one (else the scratch directory).
    pub cwd: Option<&'a Path>,
    /// Files to capture stdout and stderr to.
    pub logs: (PathBuf, PathBuf),
    /// Most bytes kept of each stream.
    pub max_output: u64,
    /// The call's environment: the scrubbed worker's, then diffuse's and the task's variables.
    pub env: Vec<(String, String)>,
    /// Its time limit.
    pub timeout: Option<Duration>,
    /// Its memory limit, bytes.
    pub memory: Option<u64>,
    /// Frees disk space when a log file finds the disk full.
    pub make_room: Arc<dyn Fn() -> bool + Send + Sync>,
}

/// A file of the call in its scratch directory: `.<attempt's name>.<what>`.
fn scratch_file(job: &CallJob<'_>, what: &str) -> PathBuf {
    job.dir.join(format!(".{}.{what}", job.name))
}

fn kill_group(pgid: u32, signal: Signal) {
    if let Some(pid) = Pid::from_raw(pgid as i32) {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

/// A FIFO the call writes a stream to: read by a capture task; the worker holds a write end
/// too until the call has ended, so that the capture sees end of file only after the call
/// (and whatever it started) closed theirs.
struct Stream {
    path: PathBuf,
    holder: Option<tokio::net::unix::pipe::Sender>,
    capture: tokio::task::JoinHandle<std::io::Result<Captured>>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        // The FIFO may be in the work directory, which outlives the attempt.
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Stream {
    fn open(
        path: &Path,
        log: PathBuf,
        cap: u64,
        owner: Option<(u32, u32)>,
        make_room: Arc<dyn Fn() -> bool + Send + Sync>,
    ) -> std::io::Result<Stream> {
        let _ = std::fs::remove_file(path);
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            path,
            rustix::fs::Mode::from_raw_mode(0o600),
        )?;
        if let Some((uid, gid)) = owner {
            rustix::fs::chown(
                path,
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(gid)),
            )?;
        }
        let reader = tokio::net::unix::pipe::OpenOptions::new().open_receiver(path)?;
        let holder = tokio::net::unix::pipe::OpenOptions::new().open_sender(path)?;
        let capture = tokio::spawn(capture(Some(reader), log, cap, move || make_room()));
        Ok(Stream {
            path: path.to_path_buf(),
            holder: Some(holder),
            capture,
        })
    }

    /// The call has ended: let go of the write end, and take what was captured (not waiting
    /// over a second for a process that left the call's group with the FIFO open).
    async fn finish(mut self) -> Result<Captured, String> {
        self.holder.take();
        match tokio::time::timeout(Duration::from_secs(1), &mut self.capture).await {
            Ok(Ok(Ok(c))) => Ok(c),
            Ok(Ok(Err(e))) => Err(format!("capturing output: {e}")),
            Ok(Err(e)) => Err(format!("capturing output: {e}")),
            Err(_) => {
                self.capture.abort();
                tracing::warn!(
                    "output still open 1 s after the call ended (a process that left its group holds it); not waiting for it"
                );
                Ok(Captured::default())
            }
        }
    }
}

/// How the call's wait ended.
enum Waited {
    /// The warm process said it ended.
    Ended(FromWarm, Vec<u8>),
    /// The warm process is gone (its connection closed).
    Gone,
    /// Stopped for this reason.
    Stopped(Stop),
}

/// Wait for the call's next message, or a stop, or its deadline.
async fn next(
    rx: &mut mpsc::UnboundedReceiver<super::process::Reply>,
    stop: &mut watch::Receiver<Option<Stop>>,
    deadline: Option<tokio::time::Instant>,
) -> Waited {
    let until = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        m = rx.recv() => match m {
            Some(Some((msg, payload))) => Waited::Ended(msg, payload),
            _ => Waited::Gone,
        },
        r = stop.wait_for(Option::is_some) => Waited::Stopped(r.ok().and_then(|v| *v).unwrap_or(Stop::Leaving)),
        () = until => Waited::Stopped(Stop::TimedOut),
    }
}

/// Run `job` in a warm process of `pools` until it ends, reaches its time limit, or `stop`
/// asks it to stop. Its result is the entry's bytes, when it ended well. Err: it could not be
/// started (no such interpreter, a setup that failed, FIFOs that cannot be made).
pub async fn run(
    pools: &WarmPools,
    cgroups: Option<&Cgroups>,
    job: CallJob<'_>,
    mut stop: watch::Receiver<Option<Stop>>,
) -> Result<(Ended, Option<Vec<u8>>), String> {
    let key = Key::of(job.call, job.function, pools.uid());
    let warm = match key.isolation {
        Isolation::Fork => pools.zygote(key, cgroups).await?,
        Isolation::Reuse => pools.take(key, cgroups).await?,
    };
    pools.counted();
    let owner = pools.launch.user.as_ref().map(|u| (u.uid, u.gid));
    let out = Stream::open(
        &scratch_file(&job, "stdout"),
        job.logs.0.clone(),
        job.max_output,
        owner,
        job.make_room.clone(),
    )
    .map_err(|e| format!("stdout FIFO in {}: {e}", job.dir.display()))?;
    let err = Stream::open(
        &scratch_file(&job, "stderr"),
        job.logs.1.clone(),
        job.max_output,
        owner,
        job.make_room.clone(),
    )
    .map_err(|e| format!("stderr FIFO in {}: {e}", job.dir.display()))?;
    let result_path = scratch_file(&job, "result");
    let env = pools
        .launch
        .env
        .iter()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .chain(job.env.iter().cloned())
        .collect();
    let order = CallOrder {
        id: 0,
        entry: &job.call.entry,
        function: job.fn_path.display().to_string(),
        inputs: job.inputs.iter().map(|p| p.display().to_string()).collect(),
        cwd: job.cwd.unwrap_or(job.dir).display().to_string(),
        env,
        stdout: scratch_file(&job, "stdout").display().to_string(),
        stderr: scratch_file(&job, "stderr").display().to_string(),
        result: result_path.display().to_string(),
    };
    let deadline = job.timeout.map(|t| tokio::time::Instant::now() + t);
    let (exit, oom, value) = match warm.key.isolation {
        Isolation::Fork => {
            let (exit, oom) = forked(&warm, order, &job, cgroups, &mut stop, deadline).await?;
            let value = match exit {
                Exit::Code(Some(0)) => Some(std::fs::read(&result_path).map_err(|e| {
                    format!(
                        "the call ended (exit code 0) without a result ({e}): did the function end its process (os._exit)?"
                    )
                })?),
                _ => None,
            };
            (exit, oom, value)
        }
        Isolation::Reuse => reused(pools, warm, order, &job, &mut stop, deadline).await?,
    };
    let _ = std::fs::remove_file(&result_path);
    let stdout = out.finish().await?;
    let stderr = err.finish().await?;
    Ok((
        Ended {
            exit,
            stdout,
            stderr,
            out_of_memory: oom,
        },
        value,
    ))
}

/// Fork mode: the child is forked, put in its cgroup, let go, waited for; its group is killed
/// when it ends. The exit, and whether its cgroup saw an OOM kill.
async fn forked(
    warm: &Warm,
    mut order: CallOrder<'_>,
    job: &CallJob<'_>,
    cgroups: Option<&Cgroups>,
    stop: &mut watch::Receiver<Option<Stop>>,
    deadline: Option<tokio::time::Instant>,
) -> Result<(Exit, bool), String> {
    let (id, mut rx) = warm.open_call();
    order.id = id;
    let sent = warm.send(&ToWarm::Call(order), &job.args).await;
    let _close = CloseCall(warm, id);
    if let Err(e) = sent {
        return Err(format!("the warm process (pid {}) is gone: {e}", warm.pid));
    }
    let mut child: Option<u32> = None;
    let mut cgroup: Option<TaskCgroup> = None;
    let mut stopped: Option<Stop> = None;
    let exit = loop {
        // Once stopped, only the child's end is waited for.
        let waited = match stopped {
            None => next(&mut rx, stop, deadline).await,
            Some(_) => match tokio::time::timeout(STOP_GRACE, rx.recv()).await {
                Ok(Some(Some((msg, payload)))) => Waited::Ended(msg, payload),
                Ok(_) => Waited::Gone,
                Err(_) => {
                    if let Some(c) = child {
                        kill_group(c, Signal::KILL);
                    }
                    match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
                        Ok(Some(Some((msg, payload)))) => Waited::Ended(msg, payload),
                        _ => Waited::Gone,
                    }
                }
            },
        };
        match waited {
            Waited::Ended(FromWarm::Forked { pid, .. }, _) => {
                child = Some(pid);
                if stopped.is_some() {
                    // Stopped before it began: it never runs.
                    kill_group(pid, Signal::KILL);
                    continue;
                }
                if let (Some(bytes), Some(cg)) = (job.memory, cgroups) {
                    match cg.limit(pid, bytes) {
                        Ok(c) => cgroup = Some(c),
                        Err(e) => {
                            tracing::warn!("memory limit of {bytes} bytes not enforced: {e}")
                        }
                    }
                }
                if warm.send(&ToWarm::Go { id }, &[]).await.is_err() {
                    kill_group(pid, Signal::KILL);
                    break Exit::Code(None);
                }
            }
            Waited::Ended(FromWarm::Exited { code, .. }, _) => {
                break match stopped {
                    Some(why) => Exit::Stopped(why),
                    None if code >= 0 => Exit::Code(Some(code)),
                    None => Exit::Code(None),
                };
            }
            Waited::Ended(other, _) => {
                tracing::warn!(
                    pid = warm.pid,
                    "unexpected message during a call: {other:?}"
                );
            }
            Waited::Gone => {
                // The warm process died: its child cannot be waited for; it goes too.
                if let Some(c) = child {
                    kill_group(c, Signal::KILL);
                }
                tracing::warn!(pid = warm.pid, "the warm process ended during a call");
                break match stopped {
                    Some(why) => Exit::Stopped(why),
                    None => Exit::Code(None),
                };
            }
            Waited::Stopped(why) => {
                stopped = Some(why);
                if let Some(c) = child {
                    kill_group(c, Signal::TERM);
                }
            }
        }
    };
    // Whatever the call left in its group goes now.
    if let Some(c) = child {
        kill_group(c, Signal::KILL);
    }
    let oom = cgroup.as_ref().is_some_and(TaskCgroup::oom_killed);
    drop(cgroup);
    Ok((exit, oom))
}

/// Forget a call's waiter when the call is done with, however it ended.
struct CloseCall<'a>(&'a Warm, u64);

impl Drop for CloseCall<'_> {
    fn drop(&mut self) {
        self.0.close_call(self.1);
    }
}

/// Reuse mode: the call runs in the process itself; a stop kills the process (and the pool
/// starts another when needed). The exit, an OOM kill seen, and the result.
async fn reused(
    pools: &WarmPools,
    warm: Arc<Warm>,
    mut order: CallOrder<'_>,
    job: &CallJob<'_>,
    stop: &mut watch::Receiver<Option<Stop>>,
    deadline: Option<tokio::time::Instant>,
) -> Result<(Exit, bool, Option<Vec<u8>>), String> {
    let oom_before = warm.cgroup.as_ref().map_or(0, TaskCgroup::oom_kills);
    if let Some(cg) = &warm.cgroup {
        if let Err(e) = cg.set_limit(job.memory) {
            tracing::warn!("memory limit not enforced: {e}");
        }
    }
    let (id, mut rx) = warm.open_call();
    order.id = id;
    let sent = warm.send(&ToWarm::Call(order), &job.args).await;
    let outcome = match sent {
        Err(e) => Err(format!("the warm process (pid {}) is gone: {e}", warm.pid)),
        Ok(()) => Ok(match next(&mut rx, stop, deadline).await {
            Waited::Ended(FromWarm::Done { ok, killed, .. }, payload) => {
                if killed > 0 {
                    tracing::info!(pid = warm.pid, "a call left {killed} process(es): killed");
                }
                (
                    Exit::Code(Some(if ok { 0 } else { 1 })),
                    ok.then_some(payload),
                )
            }
            Waited::Ended(other, _) => {
                tracing::warn!(
                    pid = warm.pid,
                    "unexpected message during a call: {other:?}"
                );
                warm.signal(Signal::KILL);
                (Exit::Code(None), None)
            }
            Waited::Gone => (Exit::Code(None), None),
            Waited::Stopped(why) => {
                warm.signal(Signal::TERM);
                if tokio::time::timeout(STOP_GRACE, rx.recv()).await.is_err() {
                    warm.signal(Signal::KILL);
                }
                (Exit::Stopped(why), None)
            }
        }),
    };
    warm.close_call(id);
    let oom = warm.cgroup.as_ref().map_or(0, TaskCgroup::oom_kills) > oom_before;
    let clean = matches!(&outcome, Ok((Exit::Code(Some(_)), _))) && !oom;
    if clean && warm.alive() {
        pools.give_back(warm);
    } else {
        warm.signal(Signal::KILL);
    }
    let (exit, value) = outcome?;
    Ok((exit, oom, value))
}
