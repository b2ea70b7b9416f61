//! The worker's cache directory on disk: locked for one worker at a time, opened (every object
//! verified after an unclean end, the quota fitted to the disk), its `work/` and `logs/`
//! directories made (and confined under `--task-user`), and marked clean at shutdown.

use super::config::WorkerConfig;
use super::error::WorkerError;
use crate::cache_dir::CacheDir;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Written at a graceful shutdown, removed at start: its absence means the last run ended
/// uncleanly, and every cached object is verified before use.
pub const CLEAN_MARKER: &str = "CLEAN";

/// How long a worker waits for another one to leave its cache directory (a restart that
/// overlaps the old worker's exit) before giving up.
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// Create the cache directory and lock it for this worker alone, waiting up to [`LOCK_WAIT`]
/// for another worker to release it.
pub(super) async fn lock(dir: &Path) -> Result<std::fs::File, WorkerError> {
    let failed = |what| {
        move |source| WorkerError::Dir {
            what,
            path: dir.to_path_buf(),
            source,
        }
    };
    std::fs::create_dir_all(dir).map_err(failed("cannot create the cache directory"))?;
    let path = dir.join("lock");
    let start = std::time::Instant::now();
    let mut said = false;
    loop {
        if let Some(lock) =
            crate::run_caches::try_lock(&path).map_err(failed("cannot lock the cache directory"))?
        {
            return Ok(lock);
        }
        if start.elapsed() > LOCK_WAIT {
            return Err(WorkerError::CacheDirInUse {
                dir: dir.to_path_buf(),
                waited: LOCK_WAIT,
            });
        }
        if !said {
            tracing::warn!(
                "the cache directory {} is in use by another worker; waiting up to {:.0?}",
                dir.display(),
                LOCK_WAIT
            );
            said = true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Open the cache directory: verify every object if the last run did not end cleanly, and
/// lower the quota to what the disk can hold (with 10% of the free space to spare for task
/// directories and logs).
pub(super) async fn open(cfg: &WorkerConfig) -> Result<CacheDir, WorkerError> {
    let dir = cfg.cache_dir.clone();
    // A cache left without the clean-shutdown marker may hold objects whose data never reached
    // the disk before a crash: verify every checksum before using any of them.
    let marker = dir.join(CLEAN_MARKER);
    let clean = marker.exists();
    let _ = std::fs::remove_file(&marker);
    let holds_objects =
        std::fs::read_dir(dir.join("objects")).is_ok_and(|mut d| d.next().is_some());
    if !clean && holds_objects {
        tracing::info!(
            "no clean-shutdown marker in {}: verifying every cached object",
            dir.display()
        );
    }
    let (quota, eviction) = (cfg.cache_size, cfg.eviction);
    let open_dir = dir.clone();
    let mut cache =
        tokio::task::spawn_blocking(move || CacheDir::open(&open_dir, quota, eviction, !clean))
            .await?
            .map_err(|source| WorkerError::Cache {
                dir: dir.clone(),
                source,
            })?;
    if let Some(room) = disk_room(&dir, cache.used()) {
        if room < quota {
            tracing::warn!(
                "--cache-size {quota} bytes is more than the disk of {} can hold ({} cached): the quota is {room} bytes",
                dir.display(),
                cache.used()
            );
            cache.set_quota(room);
        }
    }
    Ok(cache)
}

/// What the cache at `dir` can hold on its disk: what it holds (`used`) plus 90% of the free
/// space (the rest is left for task directories and logs).
pub(super) fn disk_room(dir: &Path, used: u64) -> Option<u64> {
    let fs = rustix::fs::statvfs(dir).ok()?;
    let free = fs.f_bavail.saturating_mul(fs.f_frsize);
    Some(used + free / 10 * 9)
}

/// Make the directory of task directories (`<cache-dir>/work`) and of captured output
/// (`--log-dir`, default `<cache-dir>/logs`); with `--task-user`, confine the cache directory
/// ([`confine`]). Returns both, absolute.
pub(super) fn task_dirs(cfg: &WorkerConfig) -> Result<(PathBuf, PathBuf), WorkerError> {
    let failed = |what, path: &Path| {
        let path = path.to_path_buf();
        move |source| WorkerError::Dir { what, path, source }
    };
    let work = cfg.cache_dir.join("work");
    let logs = match &cfg.log_dir {
        Some(dir) => std::path::absolute(dir).map_err(failed("--log-dir", dir))?,
        None => cfg.cache_dir.join("logs"),
    };
    std::fs::create_dir_all(&work).map_err(failed("cannot create", &work))?;
    std::fs::create_dir_all(&logs).map_err(failed("cannot create", &logs))?;
    if cfg.task_user.is_some() {
        confine(&cfg.cache_dir).map_err(failed(
            "cannot set the permissions (--task-user) under",
            &cfg.cache_dir,
        ))?;
    }
    Ok((work, logs))
}

/// With `--task-user`: the cache's objects, temp files and logs are the worker's alone
/// (`0700`); tasks reach only their own directory under `work/` (`0711`, not listable) and the
/// objects linked into it.
fn confine(root: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: PathBuf, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    mode(root.to_path_buf(), 0o711)?;
    mode(root.join("work"), 0o711)?;
    for private in ["objects", "tmp", "uncached", "logs"] {
        mode(root.join(private), 0o700)?;
    }
    Ok(())
}

/// At a graceful shutdown: everything cached so far reaches the disk (`sync -f`), then the
/// cache is marked clean ([`CLEAN_MARKER`]).
pub(super) async fn mark_clean(dir: &Path) -> Result<(), WorkerError> {
    let dir = dir.to_path_buf();
    let at = dir.clone();
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let status = std::process::Command::new("sync")
            .arg("-f")
            .arg(&dir)
            .status()?;
        if status.success() {
            std::fs::write(dir.join(CLEAN_MARKER), b"clean shutdown\n")?;
        }
        Ok(())
    })
    .await?
    .map_err(|source| WorkerError::MarkClean { dir: at, source })
}
