//! `diffuse worker`: runs tasks as processes, keeps a cache directory, serves it to peers.
//!
//! One WebSocket to the dispatcher carries assignments in and reports out (see
//! [`crate::proto`]). For each assignment the worker stages every input concurrently:
//! - a local hit is hard-linked into the task's directory (no copy; eviction cannot pull it
//!   from under the running process);
//! - otherwise it is fetched once (single-flight: tasks needing an object already being fetched
//!   wait for that fetch) from the peer the dispatcher named, or from persistent storage if the
//!   peer fails or none was named, into a temp file, verified, and renamed into the cache;
//! - an object larger than the whole cache is read without caching, and the result says so.
//!
//! Then it runs the command (`argv` directly, a string by `sh -c`) in a process group of its own
//! ([`process`]) with `{inputs[i]}` and `{outputs[i]}` replaced by local paths and stdout/stderr
//! captured to files under `<cache-dir>/logs/`, uploads outputs, removes the task's directory,
//! and reports exit code, timings and traffic. It also looks up the sizes and versions of
//! submitted inputs for the dispatcher, which never reads storage itself. Peers fetch cached objects from
//! `GET /v1/cache/{key}` (worker token; key = hex SHA-256 of the URI; range requests honoured);
//! the response carries the object's checksum, which the receiver verifies.
//!
//! | module | what it decides |
//! |---|---|
//! | this one | the worker's life: set up, serve the dispatcher, shut down |
//! | [`config`] | the worker's settings, and what this machine has for their defaults |
//! | `error` | why a worker stops with an error ([`WorkerError`]) |
//! | `local_cache` | the cache directory on disk: locked, opened (verified, quota fitted), marked clean |
//! | `ctx` | what the tasks, fetches and servers share (the cache, storage, the channel out) |
//! | `session` | the sessions with the dispatcher: reconnecting, orders in, reports out |
//! | `connect` | one connection: the WebSocket, hello and welcome, the advertised peer URL |
//! | `signals` | what stops a worker on its own: SIGTERM, SIGINT, its batch job's end |
//! | `lookup` | input lookups (size, version) for the dispatcher |
//! | `running` | the running attempts and how to stop each |
//! | `task` | one assignment: staged inputs, its process, its outputs, its report |
//! | `taskdir` | a task's directory: its names, made for the task user, removed at the end |
//! | `gpus` | which GPUs are free, and those lent to a running attempt |
//! | [`process`] | the task's process group, its environment and user |
//! | [`guard`] | the worker's parent process, which kills what its tasks left if it dies |
//! | [`cgroup`] | memory limits: a memory cgroup per task where the worker may make one |
//! | `output` | captured stdout and stderr: files, the cap, the tail kept for a failure, pruning |
//! | `inputs` | a task's inputs: local hits, fetches from peers or storage into the cache |
//! | `reuse` | results reused by content: a run's result kept as `result://` objects; a kept result stood in for a task |
//! | `flights` | single-flight: a fetch under way is waited for, not repeated |
//! | `fetch_error` | why a fetch failed: a full disk (room can be made) or anything else |
//! | `multi` | multi-source fetch: a large object read in chunks from several peers at once |
//! | `partial` | an object being read in chunks: its file, which chunks landed, its digest |
//! | `relay` | chunk-level relay: the chunks of an object still being read, served onward |
//! | `peer` | the peer data server (`/v1/cache/{key}`) and captured output (`/v1/logs/{name}`) |
//! | [`warm`] | warm Python processes and the function tasks run in them (docs/warm.md) |

pub mod cgroup;
pub mod config;
mod connect;
mod ctx;
mod error;
mod fetch_error;
mod flights;
mod gpus;
pub mod guard;
mod inputs;
mod local_cache;
mod lookup;
mod multi;
mod output;
mod partial;
mod peer;
pub mod process;
mod relay;
mod reuse;
mod running;
mod session;
mod signals;
mod task;
mod taskdir;
pub mod warm;

pub use config::{gpu_ids, Machine, WorkerConfig};
pub use error::WorkerError;
pub use local_cache::CLEAN_MARKER;
pub use taskdir::log_name;

use crate::storage::file::FileAccess;
use crate::storage::Storage;
use ctx::Ctx;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Run a worker until the dispatcher tells it to shut down, or cannot be reached for
/// `reconnect_timeout`, or refuses it, or SIGTERM or SIGINT stops it.
pub async fn run(mut cfg: WorkerConfig) -> Result<(), WorkerError> {
    // Tasks run in their own directories: every path handed to them must be absolute.
    cfg.cache_dir = std::path::absolute(&cfg.cache_dir).map_err(|source| WorkerError::Dir {
        what: "--cache-dir",
        path: cfg.cache_dir.clone(),
        source,
    })?;
    if cfg.task_user.is_some() && !rustix::process::geteuid().is_root() {
        return Err(WorkerError::TaskUserNeedsRoot);
    }
    let _lock = local_cache::lock(&cfg.cache_dir).await?;
    let files = FileAccess::confined(
        &cfg.input_roots,
        cfg.task_user
            .as_ref()
            .map(|u| (u.uid, u.gid, u.name.clone())),
    )
    .map_err(WorkerError::InputRoots)?;
    let cache = local_cache::open(&cfg).await?;
    let (work, logs) = local_cache::task_dirs(&cfg)?;
    warm::functions::reset(&work).map_err(|source| WorkerError::Dir {
        what: "the kept functions' directory",
        path: warm::functions::dir(&work),
        source,
    })?;
    let (out_tx, out_rx) = mpsc::unbounded_channel();
    let ctx = Arc::new(Ctx::new(
        &cfg,
        cache,
        Storage::new(files),
        out_tx,
        (work, logs.clone()),
        memory_cgroups(),
    )?);
    let peer = peer::PeerServer::start(&cfg, &ctx).await?;
    tokio::spawn(output::prune_logs(logs, cfg.log_retention, cfg.log_max));
    let warm_keeper = tokio::spawn(keep_warm(ctx.clone(), cfg.warm.clone()));
    let outcome = session::serve(&cfg, &ctx, peer.bound, out_rx).await;
    warm_keeper.abort();
    ctx.warm.stop_all().await;
    peer.stop().await;
    local_cache::mark_clean(&cfg.cache_dir).await?;
    outcome
}

/// Start the warm processes `--warm` names, then stop idle ones every few seconds.
async fn keep_warm(ctx: Arc<Ctx>, specs: Vec<warm::WarmSpec>) {
    ctx.warm.prestart(&specs, ctx.cgroups.as_ref()).await;
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        ctx.warm.stop_idle().await;
    }
}

/// Where memory limits can be enforced (a memory cgroup per task), if anywhere.
fn memory_cgroups() -> Option<cgroup::Cgroups> {
    match cgroup::Cgroups::detect() {
        Ok(c) => {
            tracing::info!("memory requests are enforced ({})", c.describe());
            Some(c)
        }
        Err(why) => {
            tracing::info!("memory requests are scheduled, not enforced: {why}");
            None
        }
    }
}
