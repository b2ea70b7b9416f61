//! The caches of `diffuse run`'s local workers, kept between runs so that a second run over the
//! same data reads nothing from storage: `worker-0/`, `worker-1/`, ... under one root (by default
//! `$XDG_CACHE_HOME/diffuse`, else `~/.cache/diffuse`).
//!
//! A run claims one directory per worker by holding `worker-N.lock` (an exclusive `flock`) for
//! its whole life, taking the lowest numbers free: a second run at the same time gets other
//! directories, and says so. A worker also locks its own cache directory (`lock` inside it), so
//! two workers never share one, however they were started.

use serde::Serialize;
use std::fs::File;
use std::path::{Path, PathBuf};

/// The default root: `$XDG_CACHE_HOME/diffuse`, else `$HOME/.cache/diffuse`, else
/// `./diffuse-cache`.
pub fn default_root() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("diffuse");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h).join(".cache").join("diffuse");
    }
    PathBuf::from("diffuse-cache")
}

/// Try to lock `path` (created if missing) exclusively without waiting; the open file holds the
/// lock until dropped.
pub fn try_lock(path: &Path) -> std::io::Result<Option<File>> {
    use rustix::fs::{flock, FlockOperation};
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    match flock(&f, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(f)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Cache directories claimed by a run; released when dropped.
pub struct Claimed {
    /// The directories, one per worker.
    pub dirs: Vec<PathBuf>,
    /// Numbers skipped because another run holds them.
    pub busy: Vec<usize>,
    _locks: Vec<File>,
}

/// Claim `n` worker cache directories under `root`, the lowest numbers free.
pub fn claim(root: &Path, n: usize) -> std::io::Result<Claimed> {
    std::fs::create_dir_all(root)?;
    let mut dirs = Vec::new();
    let mut busy = Vec::new();
    let mut locks = Vec::new();
    let mut i = 0;
    while dirs.len() < n {
        match try_lock(&root.join(format!("worker-{i}.lock")))? {
            Some(lock) => {
                dirs.push(root.join(format!("worker-{i}")));
                locks.push(lock);
            }
            None => busy.push(i),
        }
        i += 1;
    }
    Ok(Claimed {
        dirs,
        busy,
        _locks: locks,
    })
}

/// What `diffuse cache info` shows of one worker directory.
#[derive(Clone, Debug, Serialize)]
pub struct DirInfo {
    /// The directory.
    pub dir: PathBuf,
    /// Objects cached.
    pub objects: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Whether a run or a worker holds it now.
    pub in_use: bool,
}

/// Every `worker-N` directory under `root`.
pub fn info(root: &Path) -> std::io::Result<Vec<DirInfo>> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else {
        return Ok(out);
    };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("worker-"))
        })
        .collect();
    dirs.sort();
    for dir in dirs {
        let (mut objects, mut bytes) = (0, 0);
        for e in std::fs::read_dir(dir.join("objects"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.len() == 64 && !name.contains('.') {
                objects += 1;
                bytes += e.metadata().map_or(0, |m| m.len());
            }
        }
        let in_use = in_use(root, &dir)?;
        out.push(DirInfo {
            dir,
            objects,
            bytes,
            in_use,
        });
    }
    Ok(out)
}

/// Whether a run (its `worker-N.lock`) or a worker (the `lock` inside) holds `dir`.
fn in_use(root: &Path, dir: &Path) -> std::io::Result<bool> {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let run_lock = root.join(format!("{name}.lock"));
    let worker_lock = dir.join("lock");
    for lock in [run_lock, worker_lock] {
        if lock.exists() && try_lock(&lock)?.is_none() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Delete every `worker-N` directory under `root` that nothing uses; returns (deleted, in use).
pub fn clear(root: &Path) -> std::io::Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let (mut deleted, mut kept) = (Vec::new(), Vec::new());
    for d in info(root)? {
        let name = d
            .dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        // Hold the run lock while deleting, so no run claims it meanwhile.
        let Some(_held) = try_lock(&root.join(format!("{name}.lock")))? else {
            kept.push(d.dir);
            continue;
        };
        if d.in_use {
            kept.push(d.dir);
            continue;
        }
        std::fs::remove_dir_all(&d.dir)?;
        deleted.push(d.dir);
    }
    Ok((deleted, kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_at_the_same_time_claim_different_directories() {
        let root = tempfile::tempdir().unwrap();
        let a = claim(root.path(), 2).unwrap();
        assert_eq!(
            a.dirs,
            [root.path().join("worker-0"), root.path().join("worker-1")]
        );
        assert!(a.busy.is_empty());
        let b = claim(root.path(), 2).unwrap();
        assert_eq!(
            b.dirs,
            [root.path().join("worker-2"), root.path().join("worker-3")]
        );
        assert_eq!(b.busy, [0, 1]);
        drop(a);
        let c = claim(root.path(), 1).unwrap();
        assert_eq!(c.dirs, [root.path().join("worker-0")]);
        std::fs::create_dir_all(root.path().join("worker-0/objects")).unwrap();
        std::fs::create_dir_all(root.path().join("worker-1/objects")).unwrap();
        std::fs::write(
            root.path().join("worker-1/objects").join("a".repeat(64)),
            b"12345",
        )
        .unwrap();
        let i = info(root.path()).unwrap();
        assert_eq!(i.len(), 2);
        assert!(i[0].in_use, "worker-0 is held by c");
        assert_eq!((i[1].objects, i[1].bytes, i[1].in_use), (1, 5, false));
        let (deleted, kept) = clear(root.path()).unwrap();
        assert_eq!(deleted, [root.path().join("worker-1")]);
        assert_eq!(kept, [root.path().join("worker-0")]);
    }
}
