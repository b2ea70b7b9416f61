//! One warm process ([`Warm`]): started, greeted and set up, then sent calls; its messages are
//! read by a task of its own and handed to the call they are about. When it ends (or its
//! connection does), every call still waiting hears so, and the process is gone from its pool.

use super::frame::{self, FromWarm, ToWarm, PROTOCOL};
use super::key::Key;
use crate::worker::cgroup::{Cgroups, TaskCgroup};
use crate::worker::process::Launch;
use rustix::process::{Pid, Signal};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Longest wait for a new warm process's `hello`.
const HELLO_WAIT: Duration = Duration::from_secs(60);
/// Longest wait for its setup (imports can be slow: a large library, a cold file system).
const SETUP_WAIT: Duration = Duration::from_secs(600);

/// A message about one call, or the end of the process.
pub(super) type Reply = Option<(FromWarm, Vec<u8>)>;

/// The calls waiting for messages, by id.
type Waiters = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<Reply>>>>;

/// A warm process.
pub(super) struct Warm {
    /// What it was started for.
    pub(super) key: Key,
    /// Its pid, which is also its process group.
    pub(super) pid: u32,
    writer: tokio::sync::Mutex<tokio::net::unix::OwnedWriteHalf>,
    waiters: Waiters,
    alive: Arc<AtomicBool>,
    next_id: AtomicU64,
    /// Calls sent to it.
    pub(super) calls: AtomicU64,
    /// When it last ended a call (or was started).
    pub(super) last_used: Mutex<Instant>,
    /// Its memory cgroup (reuse mode, where the worker makes cgroups), limited per call.
    pub(super) cgroup: Option<TaskCgroup>,
    child: Mutex<Option<tokio::process::Child>>,
}

fn kill_group(pgid: u32, signal: Signal) {
    if let Some(pid) = Pid::from_raw(pgid as i32) {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

impl Warm {
    /// Start a warm process for `key` (as the task user, with the scrubbed environment), and
    /// wait for its hello and its setup. Its stdout and stderr go to `log`.
    pub(super) async fn start(
        key: Key,
        launch: &Launch,
        cgroups: Option<&Cgroups>,
        log: &Path,
    ) -> Result<Warm, String> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()
            .map_err(|e| format!("warm process: socket pair: {e}"))?;
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("warm process log {}: {e}", log.display()))?;
        let err_file = log_file
            .try_clone()
            .map_err(|e| format!("warm process log: {e}"))?;
        let mut cmd = tokio::process::Command::new(&key.python);
        cmd.args([
            "-m",
            "diffuse_client.warm",
            "--mode",
            key.isolation.as_str(),
        ])
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        // The control socket is its stdin: it takes it and puts /dev/null there.
        .env("DIFFUSE_WARM_FD", "0")
        .stdin(std::process::Stdio::from(OwnedFd::from(theirs)))
        .stdout(std::process::Stdio::from(log_file))
        .stderr(std::process::Stdio::from(err_file))
        .process_group(0)
        .kill_on_drop(true);
        if let Some(u) = &launch.user {
            cmd.uid(u.uid).gid(u.gid).env("HOME", &u.home);
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("warm process: exec {}: {e}", key.python))?;
        // The command holds the child's end of the socket: without it, a child that exits at
        // once (no diffuse_client for that interpreter) is seen at once, not after the wait.
        drop(cmd);
        let pid = child.id().unwrap_or(0);
        ours.set_nonblocking(true)
            .map_err(|e| format!("warm process: {e}"))?;
        let stream =
            tokio::net::UnixStream::from_std(ours).map_err(|e| format!("warm process: {e}"))?;
        let (mut reader, mut writer) = stream.into_split();
        let log_tail = || tail_of(log);
        let hello = tokio::time::timeout(HELLO_WAIT, frame::read(&mut reader)).await;
        let version = match hello {
            Ok(Ok(Some((
                FromWarm::Hello {
                    protocol, python, ..
                },
                _,
            )))) if protocol == PROTOCOL => python,
            Ok(Ok(Some((FromWarm::Hello { protocol, .. }, _)))) => {
                kill_group(pid, Signal::KILL);
                return Err(format!(
                    "the warm process of {} speaks protocol {protocol}, this worker {PROTOCOL}: install the diffuse_client of this diffuse's version in that environment",
                    key.python
                ));
            }
            Ok(Ok(other)) => {
                kill_group(pid, Signal::KILL);
                return Err(format!(
                    "{} -m diffuse_client.warm did not start (is diffuse_client installed for it?): {}{}",
                    key.python,
                    other.map_or("it exited".into(), |(m, _)| format!("{m:?}")),
                    log_tail()
                ));
            }
            Ok(Err(e)) => {
                kill_group(pid, Signal::KILL);
                return Err(format!("warm process: {e}{}", log_tail()));
            }
            Err(_) => {
                kill_group(pid, Signal::KILL);
                return Err(format!(
                    "the warm process of {} said nothing for {} s{}",
                    key.python,
                    HELLO_WAIT.as_secs(),
                    log_tail()
                ));
            }
        };
        let setup = ToWarm::Setup {
            preload: &key.preload,
            setup: key.setup.as_deref(),
        };
        frame::write(&mut writer, &setup, &[])
            .await
            .map_err(|e| format!("warm process: {e}{}", log_tail()))?;
        let rss = match tokio::time::timeout(SETUP_WAIT, frame::read(&mut reader)).await {
            Ok(Ok(Some((FromWarm::Ready { rss }, _)))) => rss,
            Ok(Ok(Some((FromWarm::Failed { error }, _)))) => {
                kill_group(pid, Signal::KILL);
                return Err(format!(
                    "the warm process's setup failed (preload {:?}): {}",
                    key.preload,
                    last_lines(&error, 20)
                ));
            }
            Ok(Ok(other)) => {
                kill_group(pid, Signal::KILL);
                return Err(format!(
                    "warm process setup: {}{}",
                    other.map_or("it exited".into(), |(m, _)| format!("{m:?}")),
                    log_tail()
                ));
            }
            Ok(Err(e)) => {
                kill_group(pid, Signal::KILL);
                return Err(format!("warm process setup: {e}{}", log_tail()));
            }
            Err(_) => {
                kill_group(pid, Signal::KILL);
                return Err(format!(
                    "the warm process's setup took over {} s",
                    SETUP_WAIT.as_secs()
                ));
            }
        };
        let cgroup = match (key.isolation, cgroups) {
            (crate::spec::Isolation::Reuse, Some(cg)) => match cg.holding(pid) {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::warn!("warm process {pid}: no memory cgroup ({e}); calls' memory limits not enforced");
                    None
                }
            },
            _ => None,
        };
        let waiters: Waiters = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        tokio::spawn(read_replies(reader, waiters.clone(), alive.clone(), pid));
        tracing::info!(pid, python = %key.python, version = %version, preload = ?key.preload, mode = key.isolation.as_str(), rss, "warm process started");
        Ok(Warm {
            key,
            pid,
            writer: tokio::sync::Mutex::new(writer),
            waiters,
            alive,
            next_id: AtomicU64::new(1),
            calls: AtomicU64::new(0),
            last_used: Mutex::new(Instant::now()),
            cgroup,
            child: Mutex::new(Some(child)),
        })
    }

    /// Whether its connection is still open.
    pub(super) fn alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// A new call's number, and where its messages will come.
    pub(super) fn open_call(&self) -> (u64, mpsc::UnboundedReceiver<Reply>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        if self.alive() {
            self.waiters.lock().expect("waiters").insert(id, tx);
        } else {
            let _ = tx.send(None);
        }
        self.calls.fetch_add(1, Ordering::Relaxed);
        (id, rx)
    }

    /// Forget a call (it ended).
    pub(super) fn close_call(&self, id: u64) {
        self.waiters.lock().expect("waiters").remove(&id);
        *self.last_used.lock().expect("last used") = Instant::now();
    }

    /// Send a message.
    pub(super) async fn send(&self, msg: &ToWarm<'_>, payload: &[u8]) -> std::io::Result<()> {
        let mut w = self.writer.lock().await;
        frame::write(&mut *w, msg, payload).await
    }

    /// Signal its whole process group (reuse mode: the call running in it).
    pub(super) fn signal(&self, signal: Signal) {
        kill_group(self.pid, signal);
    }

    /// Its resident memory now, bytes (0 once gone).
    pub(super) fn rss(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .map_or(0, |kib| kib * 1024)
    }

    /// Stop it: `exit`, then SIGKILL to its group if it is still there a moment later (it may
    /// be in a call that never returns). Its children in fork mode are in groups of their own:
    /// their calls kill them.
    pub(super) async fn stop(&self) {
        let _ =
            tokio::time::timeout(Duration::from_millis(200), self.send(&ToWarm::Exit, &[])).await;
        let child = self.child.lock().expect("child").take();
        if let Some(mut child) = child {
            if tokio::time::timeout(Duration::from_secs(2), child.wait())
                .await
                .is_err()
            {
                kill_group(self.pid, Signal::KILL);
                let _ = child.wait().await;
            }
        }
        // Whatever it left in its group.
        kill_group(self.pid, Signal::KILL);
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        kill_group(self.pid, Signal::KILL);
    }
}

/// Read the process's messages and hand each to its call, until it ends; then tell every call
/// still waiting.
async fn read_replies(
    mut reader: tokio::net::unix::OwnedReadHalf,
    waiters: Waiters,
    alive: Arc<AtomicBool>,
    pid: u32,
) {
    loop {
        match frame::read(&mut reader).await {
            Ok(Some((msg, payload))) => {
                let Some(id) = msg.call_id() else {
                    tracing::warn!(pid, "warm process sent {msg:?} outside a call");
                    continue;
                };
                let tx = waiters.lock().expect("waiters").get(&id).cloned();
                if let Some(tx) = tx {
                    let _ = tx.send(Some((msg, payload)));
                }
            }
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(pid, "warm process connection: {e}");
                kill_group(pid, Signal::KILL);
                break;
            }
        }
    }
    alive.store(false, Ordering::SeqCst);
    for (_, tx) in waiters.lock().expect("waiters").drain() {
        let _ = tx.send(None);
    }
}

/// The last `n` lines of `text`.
pub(super) fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The last lines of a warm process's log, to explain why it did not start.
pub(super) fn tail_of(log: &Path) -> String {
    let text = std::fs::read(log).unwrap_or_default();
    let start = text.len().saturating_sub(2048);
    let tail = String::from_utf8_lossy(&text[start..]);
    let tail = last_lines(&tail, 15);
    if tail.trim().is_empty() {
        String::new()
    } else {
        format!("; its output ({}):\n{tail}", log.display())
    }
}
