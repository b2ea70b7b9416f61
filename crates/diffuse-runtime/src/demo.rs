//! `diffuse demo`: data diffusion on this machine, in about a minute.
//!
//! Generates a dataset of random files and a read-heavy workload (each task checksums one file
//! chosen at random, so every file is read many times), then runs the same workload twice on
//! local workers against shared storage slowed to a stated bandwidth (emulated by
//! [`crate::storage_emulator`]): once with FA (every read from shared storage, as without data
//! diffusion) and once with GCC (caches, peers, data-aware dispatch).

use crate::run::{run, RunConfig, RunSummary};
use diffuse_core::{CoreConfig, EvictionPolicy, PolicyKind};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Settings of the demo.
#[derive(Clone, Debug)]
pub struct DemoConfig {
    /// Where the dataset, task file and both runs go.
    pub dir: PathBuf,
    /// Files in the dataset.
    pub files: u32,
    /// Bytes per file.
    pub file_size: u64,
    /// Tasks in the workload.
    pub tasks: u32,
    /// Local worker processes.
    pub workers: u32,
    /// Slots per worker.
    pub slots_per_worker: u32,
    /// Cache quota per worker.
    pub cache_size: u64,
    /// Emulated shared-storage bandwidth, bytes/s.
    pub storage_bandwidth: f64,
    /// The `diffuse` executable.
    pub exe: PathBuf,
    /// Seed for the data and the file choices.
    pub seed: u64,
    /// Show progress lines.
    pub progress: bool,
}

/// Write the dataset and the task file; returns the task file's path.
pub fn generate(cfg: &DemoConfig) -> std::io::Result<PathBuf> {
    let data = cfg.dir.join("data");
    std::fs::create_dir_all(&data)?;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut buf = vec![0u8; 1 << 20];
    for f in 0..cfg.files {
        let mut out =
            std::io::BufWriter::new(std::fs::File::create(data.join(format!("f{f:04}.dat")))?);
        let mut left = cfg.file_size;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            rng.fill_bytes(&mut buf[..n]);
            out.write_all(&buf[..n])?;
            left -= n as u64;
        }
        out.flush()?;
    }
    let data = data.canonicalize()?;
    let tasks = cfg.dir.join("tasks.jsonl");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&tasks)?);
    for t in 0..cfg.tasks {
        let f = rng.random_range(0..cfg.files);
        let line = serde_json::json!({
            "id": format!("t{t:05}"),
            "cmd": ["md5sum", "{inputs[0]}"],
            "inputs": [format!("file://{}/f{f:04}.dat", data.display())],
        });
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok(tasks)
}

/// Run the workload under `policy` in `dir/<policy>`.
pub async fn run_policy(
    cfg: &DemoConfig,
    tasks: &Path,
    policy: PolicyKind,
) -> Result<RunSummary, crate::run::RunError> {
    let run_dir = cfg.dir.join(policy.to_string());
    let _ = std::fs::remove_dir_all(&run_dir);
    run(RunConfig {
        tasks: tasks.to_path_buf(),
        workers: cfg.workers,
        slots_per_worker: cfg.slots_per_worker,
        cache_size: cfg.cache_size,
        core: CoreConfig {
            policy,
            ..CoreConfig::default()
        },
        eviction: EvictionPolicy::Lru,
        run_dir,
        resume: false,
        exe: cfg.exe.clone(),
        noop: false,
        progress: cfg.progress,
        storage_bandwidth: Some((cfg.dir.join("data"), cfg.storage_bandwidth)),
        input_roots: Vec::new(),
        // Each policy starts cold: its own caches, deleted with the run.
        cache_root: cfg.dir.join(policy.to_string()).join("cache"),
        task_defaults: Default::default(),
        defs: None,
        print: None,
        max_workers: None,
        idle_release: std::time::Duration::from_secs(30),
        // The two policies are compared running the same tasks: none may stand for another.
        reuse: false,
    })
    .await
}
