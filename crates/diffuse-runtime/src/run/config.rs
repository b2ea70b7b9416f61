//! What `diffuse run` is asked ([`RunConfig`]) and what it gives back: the [`RunSummary`] with
//! its [`Failure`]s, or a [`RunError`].

use crate::dispatcher;
use crate::spec::{SpecError, TaskDef, TaskDefaults};
use diffuse_core::CoreConfig;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// Settings of `diffuse run`.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The task file (JSON Lines or JSON array). With `resume`, the one the run was started
    /// with is used when this is empty.
    pub tasks: PathBuf,
    /// Local worker processes.
    pub workers: u32,
    /// Slots per worker.
    pub slots_per_worker: u32,
    /// Cache quota per worker, bytes.
    pub cache_size: u64,
    /// Scheduling core settings (policy, window, threshold).
    pub core: CoreConfig,
    /// Eviction policy of the workers.
    pub eviction: diffuse_core::EvictionPolicy,
    /// Directory for the journal, caches, logs and results. A new run needs it new or empty;
    /// see [`new_run_dir`].
    pub run_dir: PathBuf,
    /// Continue the run in `run_dir` from its journal instead of starting one.
    pub resume: bool,
    /// The `diffuse` executable to start workers with.
    pub exe: PathBuf,
    /// Workers run nothing (dispatcher throughput benchmark).
    pub noop: bool,
    /// Print a progress line to stderr.
    pub progress: bool,
    /// Shared-storage emulation: serve `file://` inputs under this root at this many bytes/s in
    /// total (see `crate::storage_emulator`).
    pub storage_bandwidth: Option<(PathBuf, f64)>,
    /// `file://` inputs must be under one of these (passed to the workers; empty: anywhere).
    pub input_roots: Vec<PathBuf>,
    /// Where the workers' caches live between runs ([`crate::run_caches`]).
    pub cache_root: PathBuf,
    /// What a task that does not say gets (`--retries`, `--task-timeout`).
    pub task_defaults: TaskDefaults,
    /// Tasks made on the command line (`--each`) instead of read from `tasks`; they are written
    /// to `<run-dir>/tasks.jsonl`.
    pub defs: Option<Vec<TaskDef>>,
    /// Print each task's stdout on this process's stdout as the task ends, whole (`Some(true)`:
    /// in the order the tasks were given).
    pub print: Option<bool>,
    /// An elastic pool instead of `workers` fixed ones: local workers started as the queue
    /// grows, at most this many, each released after `idle_release` without a task. Their
    /// caches live in the run directory (a repeated run starts cold).
    pub max_workers: Option<u32>,
    /// See `max_workers`.
    pub idle_release: Duration,
    /// Reuse the kept results of identical tasks (`--reuse`, on by default).
    pub reuse: bool,
}

/// The result index's file under the caches' root.
pub const RESULTS_STORE: &str = "results.sqlite";

/// A failed task, as the summary shows it.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    /// Task id.
    pub id: String,
    /// Its exit code, if its process exited.
    pub exit_code: Option<i32>,
    /// Why it failed, if not an exit code.
    pub error: Option<String>,
    /// The worker it ran on.
    pub node: Option<String>,
    /// The last lines of its stderr.
    pub stderr_tail: Option<String>,
}

/// What `diffuse run --json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    /// Tasks in the run.
    pub tasks: u64,
    /// Tasks that exited 0.
    pub tasks_ok: u64,
    /// Of those, tasks that did not run: an identical task's kept result stood for them.
    pub tasks_reused: u64,
    /// Tasks that failed (non-zero exit, missing input, exec error) or were cancelled.
    pub tasks_failed: u64,
    /// Tasks that had not ended when the run was interrupted.
    pub tasks_not_run: u64,
    /// The signal that interrupted the run (`SIGINT`, `SIGTERM`), if one did.
    pub interrupted: Option<String>,
    /// From submission (or resumption) to the last outcome, seconds.
    pub makespan_s: f64,
    /// Tasks ended per second over the makespan.
    pub tasks_per_s: f64,
    /// Fraction of input accesses served by the worker's own cache.
    pub hit_local: f64,
    /// Fraction served by a peer's cache.
    pub hit_peer: f64,
    /// Fraction served by persistent storage.
    pub miss: f64,
    /// Bytes read from local caches.
    pub bytes_local: u64,
    /// Bytes read from peers.
    pub bytes_peer: u64,
    /// Bytes read from persistent storage.
    pub bytes_storage: u64,
    /// Input accesses in all (0: the tasks read no input).
    pub accesses: u64,
    /// The first failed tasks (at most 10), with why.
    pub failures: Vec<Failure>,
    /// Per-task results, one JSON object per line.
    pub results: PathBuf,
    /// Captured stdout and stderr of every attempt.
    pub logs: PathBuf,
    /// The run directory.
    pub run_dir: PathBuf,
}

/// Why a run could not start, or stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The task file is malformed: nothing was submitted.
    #[error("{file}: {error}")]
    BadTaskFile {
        /// The file.
        file: String,
        /// Line, field and problem.
        error: SpecError,
    },
    /// The run directory, its record, the task file or the cache directory cannot be used (the
    /// message says which, and why).
    #[error("{0}")]
    Setup(String),
    /// A file operation failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The in-process dispatcher could not start.
    #[error(transparent)]
    Dispatcher(#[from] dispatcher::StartError),
    /// The in-process dispatcher refused a request or stopped.
    #[error("{0}")]
    Api(String),
    /// The local workers could not be started or kept running.
    #[error("{0}")]
    Workers(String),
    /// The journal could not be read for the results.
    #[error(transparent)]
    Journal(#[from] crate::journal::JournalError),
}

impl From<dispatcher::ApiError> for RunError {
    fn from(e: dispatcher::ApiError) -> RunError {
        RunError::Api(e.to_string())
    }
}
