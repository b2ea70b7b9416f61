//! What a worker's tasks, fetches and servers share ([`Ctx`]): the cache, storage, the channel
//! to the dispatcher, and the parts each of them owns (running attempts, GPUs, fetches under
//! way, objects being relayed).

use super::cgroup::Cgroups;
use super::config::{Machine, WorkerConfig};
use super::error::WorkerError;
use super::flights::Flights;
use super::gpus::GpuPool;
use super::local_cache::disk_room;
use super::process::Launch;
use super::relay::Relays;
use super::running::Running;
use crate::cache_dir::CacheDir;
use crate::proto::ToDispatcher;
use crate::storage::Storage;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Concurrent input lookups per worker.
const LOOKUPS_AT_ONCE: usize = 64;

/// What a worker's tasks share.
pub(super) struct Ctx {
    pub(super) cache: Mutex<CacheDir>,
    pub(super) storage: Storage,
    pub(super) http: reqwest::Client,
    pub(super) token: String,
    /// Fetches under way (single-flight).
    pub(super) flights: Flights,
    /// Messages for the dispatcher.
    pub(super) out: mpsc::UnboundedSender<ToDispatcher>,
    /// Where task directories go.
    pub(super) work: PathBuf,
    /// Captured stdout and stderr of tasks.
    pub(super) logs: PathBuf,
    /// Most bytes kept of each stream.
    pub(super) max_output: u64,
    /// Most peers one object is read from at once (`multi`).
    pub(super) fetch_sources: usize,
    /// Objects being read in chunks, whose landed chunks are served to peers.
    pub(super) relays: Relays,
    /// This worker's name (`DIFFUSE_NODE`).
    pub(super) name: String,
    /// The GPUs tasks may be given.
    pub(super) gpus: GpuPool,
    /// The cache's root and its quota as configured: after a full disk lowered the quota, it is
    /// raised back as space frees.
    cache_root: PathBuf,
    cache_size: u64,
    /// Where memory limits are enforced, if anywhere.
    pub(super) cgroups: Option<Cgroups>,
    pub(super) launch: Launch,
    /// The running attempts, and how to stop each.
    pub(super) running: Arc<Running>,
    /// Input lookups under way at once, at most.
    pub(super) lookups: tokio::sync::Semaphore,
    /// The worker's cores (`--cores`): an attempt takes its cores before it starts, so a task
    /// the dispatcher sent ahead (`--ready-tasks`) waits here for one to free.
    pub(super) cores: Arc<tokio::sync::Semaphore>,
    /// How many cores the worker has.
    pub(super) core_count: u32,
    /// Warm Python processes, for function tasks.
    pub(super) warm: super::warm::WarmPools,
    /// Attempts held ready that started, waiting for their `Started` to be written to the
    /// dispatcher's connection before their process runs.
    started: Mutex<std::collections::HashMap<(String, u32), tokio::sync::oneshot::Sender<()>>>,
}

impl Ctx {
    /// The context of a worker set up as `cfg` says, with its opened `cache`, its `storage`
    /// (read through `cfg.storage_emulator` if set), the channel `out` to the dispatcher, and the
    /// directories for tasks (`work`) and their captured output (`logs`).
    pub(super) fn new(
        cfg: &WorkerConfig,
        cache: CacheDir,
        storage: Storage,
        out: mpsc::UnboundedSender<ToDispatcher>,
        (work, logs): (PathBuf, PathBuf),
        cgroups: Option<Cgroups>,
    ) -> Result<Ctx, WorkerError> {
        let logs_dir = logs.clone();
        Ok(Ctx {
            cache: Mutex::new(cache),
            storage: match &cfg.storage_emulator {
                Some(url) => storage.with_emulator(url.clone(), cfg.token.clone()),
                None => storage,
            }
            .with_blobs(crate::storage::blob::BlobSource {
                url: cfg.dispatcher.clone(),
                token: cfg.token.clone(),
                http: cfg
                    .trust
                    .reqwest(reqwest::Client::builder())
                    .build()
                    .map_err(WorkerError::Http)?,
            }),
            http: cfg
                .trust
                .reqwest(reqwest::Client::builder())
                .build()
                .map_err(WorkerError::Http)?,
            token: cfg.token.clone(),
            flights: Flights::default(),
            out,
            work,
            logs,
            max_output: cfg.max_output,
            fetch_sources: cfg.fetch_sources,
            relays: Relays::default(),
            name: cfg.name.clone(),
            gpus: GpuPool::new(
                cfg.gpus.clone(),
                !cfg.gpus.is_empty() || !Machine::detect().gpus.is_empty(),
            ),
            cache_root: cfg.cache_dir.clone(),
            cache_size: cfg.cache_size,
            cgroups,
            launch: Launch::new(&cfg.task_env_drop, cfg.task_user.clone()),
            running: Arc::new(Running::default()),
            lookups: tokio::sync::Semaphore::new(LOOKUPS_AT_ONCE),
            cores: Arc::new(tokio::sync::Semaphore::new(cfg.slots as usize)),
            core_count: cfg.slots,
            warm: super::warm::WarmPools::new(
                Launch::new(&cfg.task_env_drop, cfg.task_user.clone()),
                logs_dir,
                cfg.warm_idle,
                2 * cfg.slots as usize + 2,
            ),
            started: Mutex::default(),
        })
    }

    /// Tell the dispatcher `bytes` came from `from` (a peer's URL, or None: storage) since
    /// `started`, for its bandwidth prediction.
    pub(super) fn transferred(&self, from: Option<&str>, bytes: u64, started: std::time::Instant) {
        if bytes > 0 {
            let _ = self.out.send(ToDispatcher::Transferred {
                from: from.map(String::from),
                bytes,
                seconds: started.elapsed().as_secs_f64(),
            });
        }
    }

    /// Tell the dispatcher that an attempt held ready starts, and wait (at most 5 s) until that
    /// is written to its connection: if the attempt then kills the worker, the dispatcher
    /// knows it ran and counts the crash against it, not against a task still held.
    pub(super) async fn say_started(&self, task: &str, attempt: u32) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.started
            .lock()
            .expect("started lock")
            .insert((task.to_string(), attempt), tx);
        let _ = self.out.send(ToDispatcher::Started {
            task: task.to_string(),
            attempt,
        });
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), rx).await;
        self.started
            .lock()
            .expect("started lock")
            .remove(&(task.to_string(), attempt));
    }

    /// A message was written to the dispatcher's connection: if it said an attempt started,
    /// that attempt may run.
    pub(super) fn written(&self, m: &ToDispatcher) {
        if let ToDispatcher::Started { task, attempt } = m {
            if let Some(tx) = self
                .started
                .lock()
                .expect("started lock")
                .remove(&(task.clone(), *attempt))
            {
                let _ = tx.send(());
            }
        }
    }

    /// Tell the dispatcher the copy of `uri` read from `peer` did not match its digest.
    pub(super) fn bad_copy(&self, uri: &str, peer: &str) {
        tracing::warn!(uri = %crate::uri::redacted(uri), "the copy read from {peer} does not match its digest");
        let _ = self.out.send(ToDispatcher::BadCopy {
            uri: uri.into(),
            peer: peer.into(),
        });
    }

    /// Tell the dispatcher what the cache evicted since the last report.
    pub(super) fn report_evictions(&self) {
        let evicted = self.cache.lock().expect("cache lock").take_evicted();
        if !evicted.is_empty() {
            let _ = self.out.send(ToDispatcher::Evicted { uris: evicted });
        }
    }

    /// After a full disk lowered the quota: raise it back, up to the configured quota, as far as
    /// the disk's free space now allows.
    pub(super) fn refit_quota(&self) {
        let mut cache = self.cache.lock().expect("cache lock");
        if cache.quota() >= self.cache_size {
            return;
        }
        if let Some(room) = disk_room(&self.cache_root, cache.used()) {
            cache.set_quota(room.min(self.cache_size));
        }
    }
}
