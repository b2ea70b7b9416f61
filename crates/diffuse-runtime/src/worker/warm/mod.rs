//! Warm Python processes and the function tasks run in them (docs/warm.md).
//!
//! A worker keeps its warm processes in [`WarmPools`], by [`Key`]: the interpreter, the modules
//! preloaded, the setup code, the isolation, the task user, and (reuse mode) the function.
//! - **fork**: one warm process per key, started on first use; each call is a child it forks.
//!   The child waits for "go" until the worker has put it in its memory cgroup.
//! - **reuse**: idle processes per key; a call takes one (or starts one), runs in it, and gives
//!   it back if it is still there.
//!
//! A call runs within its task's limits, as a process task does ([`call::run`]): its stdout and
//! stderr are FIFOs read by the same capture, its time limit and cancel are signals to its
//! process group (fork: the child's; reuse: the warm process's), its memory limit a cgroup.
//! Idle processes are stopped after `--warm-idle`, and all of them when the worker leaves.
//!
//! | module | what it decides |
//! |---|---|
//! | this one | the pools: which process a call goes to, starting, idling, stopping, figures |
//! | [`call`] | one call: FIFOs, the order, go, waiting, stopping, the result |
//! | [`process`] | one warm process: start, hello, setup, messages routed to their calls |
//! | [`key`] | what a warm process is kept for: which calls may share it |
//! | [`functions`] | a call's function, staged once per worker and reused |
//! | [`frame`] | the protocol's frames and messages |

pub(super) mod call;
mod frame;
pub(super) mod functions;
mod key;
mod process;

use super::cgroup::Cgroups;
use super::process::Launch;
use crate::spec::Isolation;
pub use key::Key;
use process::Warm;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// A warm process to start with the worker (`diffuse worker --warm PYTHON:MODULE,...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WarmSpec {
    /// The interpreter.
    pub python: String,
    /// Modules to preload.
    pub preload: Vec<String>,
}

impl WarmSpec {
    /// `PYTHON[:MODULE,MODULE...]`.
    pub fn parse(s: &str) -> Result<WarmSpec, String> {
        let (python, modules) = s.split_once(':').unwrap_or((s, ""));
        if python.is_empty() {
            return Err(format!("'{s}': give the interpreter: PYTHON[:MODULE,...]"));
        }
        let preload: Vec<String> = modules
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(String::from)
            .collect();
        Ok(WarmSpec {
            python: python.to_string(),
            preload,
        })
    }
}

/// What the pools hold, for `diffuse status`, the dashboard and the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WarmFigures {
    /// Warm processes alive (fork mode's zygotes, reuse mode's processes idle or in a call).
    pub processes: u32,
    /// Calls run since the worker started.
    pub calls: u64,
    /// Their resident memory, bytes (shared pages counted in each).
    pub rss: u64,
}

/// One fork-mode warm process, started by one call at a time.
type ZygoteSlot = Arc<tokio::sync::Mutex<Option<Arc<Warm>>>>;

/// A worker's warm processes.
pub struct WarmPools {
    launch: Launch,
    logs: PathBuf,
    /// Idle processes are stopped after this long.
    idle: Duration,
    /// Most idle reuse-mode processes kept, in all.
    max_idle: usize,
    zygotes: Mutex<HashMap<Key, ZygoteSlot>>,
    reusable: Mutex<HashMap<Key, Vec<Arc<Warm>>>>,
    /// Every process started and not yet dropped.
    all: Mutex<Vec<Weak<Warm>>>,
    calls: AtomicU64,
    started: AtomicU64,
}

impl WarmPools {
    /// Pools for tasks launched as `launch` says, logging under `logs`; processes idle for
    /// `idle` are stopped, and at most `max_idle` reuse-mode processes are kept idle.
    pub fn new(launch: Launch, logs: PathBuf, idle: Duration, max_idle: usize) -> WarmPools {
        WarmPools {
            launch,
            logs,
            idle,
            max_idle,
            zygotes: Mutex::default(),
            reusable: Mutex::default(),
            all: Mutex::default(),
            calls: AtomicU64::new(0),
            started: AtomicU64::new(0),
        }
    }

    fn uid(&self) -> Option<u32> {
        self.launch.user.as_ref().map(|u| u.uid)
    }

    async fn start(&self, key: Key, cgroups: Option<&Cgroups>) -> Result<Arc<Warm>, String> {
        let n = self.started.fetch_add(1, Ordering::Relaxed);
        let log = self
            .logs
            .join(format!("warm-{}-{n}.log", std::process::id()));
        let warm = Arc::new(Warm::start(key, &self.launch, cgroups, &log).await?);
        let mut all = self.all.lock().expect("warm list");
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&warm));
        Ok(warm)
    }

    /// Start the warm processes `specs` name (fork mode), now.
    pub async fn prestart(&self, specs: &[WarmSpec], cgroups: Option<&Cgroups>) {
        for s in specs {
            let key = Key {
                python: s.python.clone(),
                preload: s.preload.clone(),
                setup: None,
                isolation: Isolation::Fork,
                function: None,
                uid: self.uid(),
            };
            if let Err(e) = self.zygote(key, cgroups).await {
                tracing::warn!("--warm {}: {e}", s.python);
            }
        }
    }

    /// The fork-mode process of `key`, started if there is none (one start at a time).
    async fn zygote(&self, key: Key, cgroups: Option<&Cgroups>) -> Result<Arc<Warm>, String> {
        let slot = self
            .zygotes
            .lock()
            .expect("zygotes")
            .entry(key.clone())
            .or_default()
            .clone();
        let mut slot = slot.lock().await;
        if let Some(w) = slot.as_ref().filter(|w| w.alive()) {
            return Ok(w.clone());
        }
        let w = self.start(key, cgroups).await?;
        *slot = Some(w.clone());
        Ok(w)
    }

    /// An idle reuse-mode process of `key`, or a new one.
    async fn take(&self, key: Key, cgroups: Option<&Cgroups>) -> Result<Arc<Warm>, String> {
        loop {
            let idle = self
                .reusable
                .lock()
                .expect("reusable")
                .get_mut(&key)
                .and_then(Vec::pop);
            match idle {
                Some(w) if w.alive() => return Ok(w),
                Some(_) => continue,
                None => return self.start(key, cgroups).await,
            }
        }
    }

    /// Give back a reuse-mode process after a call that left it as it was. Beyond the most
    /// kept idle, the one idle longest is stopped.
    fn give_back(&self, w: Arc<Warm>) {
        let mut pools = self.reusable.lock().expect("reusable");
        pools.entry(w.key.clone()).or_default().push(w);
        let idle: usize = pools.values().map(Vec::len).sum();
        if idle > self.max_idle {
            let oldest = pools
                .iter()
                .flat_map(|(k, v)| v.iter().enumerate().map(move |(i, w)| (k.clone(), i, w)))
                .min_by_key(|(_, _, w)| *w.last_used.lock().expect("last used"))
                .map(|(k, i, _)| (k, i));
            if let Some((k, i)) = oldest {
                let w = pools.get_mut(&k).expect("pool").remove(i);
                tokio::spawn(async move { w.stop().await });
            }
        }
    }

    /// Count a call.
    fn counted(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Stop the processes idle for longer than `--warm-idle`.
    pub async fn stop_idle(&self) {
        let now = Instant::now();
        let idle_for = |w: &Warm| now.duration_since(*w.last_used.lock().expect("last used"));
        let mut stopping: Vec<Arc<Warm>> = Vec::new();
        {
            let mut pools = self.reusable.lock().expect("reusable");
            for v in pools.values_mut() {
                let (old, keep): (Vec<_>, Vec<_>) = v
                    .drain(..)
                    .partition(|w| idle_for(w) > self.idle || !w.alive());
                *v = keep;
                stopping.extend(old);
            }
            pools.retain(|_, v| !v.is_empty());
        }
        let slots: Vec<ZygoteSlot> = self
            .zygotes
            .lock()
            .expect("zygotes")
            .values()
            .cloned()
            .collect();
        for slot in slots {
            // A slot being started is in use: not idle.
            let Ok(mut slot) = slot.try_lock() else {
                continue;
            };
            // A zygote with a call under way is referenced by that call.
            if slot
                .as_ref()
                .is_some_and(|w| Arc::strong_count(w) == 1 && idle_for(w) > self.idle)
            {
                stopping.extend(slot.take());
            }
        }
        for w in stopping {
            tracing::info!(
                pid = w.pid,
                "warm process idle for over {} s: stopped",
                self.idle.as_secs()
            );
            w.stop().await;
        }
    }

    /// Stop every warm process (the worker is leaving).
    pub async fn stop_all(&self) {
        let all: Vec<Arc<Warm>> = self
            .all
            .lock()
            .expect("warm list")
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for w in all {
            w.stop().await;
        }
        self.reusable.lock().expect("reusable").clear();
        self.zygotes.lock().expect("zygotes").clear();
    }

    /// What the pools hold now.
    pub fn figures(&self) -> WarmFigures {
        let all: Vec<Arc<Warm>> = self
            .all
            .lock()
            .expect("warm list")
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|w| w.alive())
            .collect();
        WarmFigures {
            processes: all.len() as u32,
            calls: self.calls.load(Ordering::Relaxed),
            rss: all.iter().map(|w| w.rss()).sum(),
        }
    }
}

/// Most bytes of a result carried inline in a report (and journaled with the outcome).
pub const MAX_INLINE_RESULT: usize = 1 << 20;

/// Put a call's result in its report: inline (base64) up to [`MAX_INLINE_RESULT`], else
/// stored as a blob at the dispatcher (at most [`crate::dispatcher::blob_store::MAX_BLOB`]).
pub(super) async fn keep_value(
    storage: &crate::storage::Storage,
    v: Vec<u8>,
    report: &mut crate::proto::TaskReport,
) -> Result<(), String> {
    use base64::Engine;
    if v.len() <= MAX_INLINE_RESULT {
        report.value = Some(base64::engine::general_purpose::STANDARD.encode(v));
        return Ok(());
    }
    if v.len() > crate::dispatcher::blob_store::MAX_BLOB {
        return Err(format!(
            "the call's result is {} bytes: at most {} come back; return a file (an output) instead",
            v.len(),
            crate::dispatcher::blob_store::MAX_BLOB
        ));
    }
    let uri = storage
        .put_blob(v)
        .await
        .map_err(|e| format!("the call's result: {e}"))?;
    report.value_blob = Some(uri);
    Ok(())
}
