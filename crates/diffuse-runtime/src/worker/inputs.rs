//! A task's inputs, put in its directory: a local hit is hard-linked there; a miss is fetched
//! once (single-flight, [`super::flights`]) from the peer the dispatcher named (from several at
//! once for a large object, [`super::multi`]), or from persistent storage, verified, and
//! committed to the cache. Also fetches for no task (hand-offs, replicas, prefetches).

use super::ctx::Ctx;
use super::fetch_error::Failed;
use super::taskdir::RemoveOnDrop;
use crate::cache_dir::{CacheDir, Lookup};
use crate::proto::{AssignedInput, Held, InputSource, ToDispatcher};
use crate::storage::StorageError;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Which source an input was finally read from, and how many bytes.
pub(super) enum Staged {
    Local(u64),
    Peer(u64),
    Storage(u64),
}

impl Staged {
    /// Count this read in a task's `traffic`.
    pub(super) fn count(&self, t: &mut crate::proto::Traffic) {
        match *self {
            Staged::Local(b) => (t.local, t.bytes_local) = (t.local + 1, t.bytes_local + b),
            Staged::Peer(b) => (t.peer, t.bytes_peer) = (t.peer + 1, t.bytes_peer + b),
            Staged::Storage(b) => {
                (t.storage, t.bytes_storage) = (t.storage + 1, t.bytes_storage + b)
            }
        }
    }
}

/// Fetch one object into the cache for no task (a hand-off from a worker being released, a
/// replica, or a prefetch from storage): staged as an input into a scratch name that is removed
/// at once. A failure is reported (`FetchFailed`): the object stays where it was, or is read
/// from storage later.
pub(super) async fn prefetch(ctx: Arc<Ctx>, input: AssignedInput) {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dest = ctx.work.join(format!(".fetch-{n}"));
    let uri = input.uri.clone();
    let version = input.version.clone();
    match stage(ctx.clone(), input, dest.clone()).await {
        // Already here: said again, so whoever asked (a staged batch) hears it.
        Ok((Staged::Local(_), true)) => {
            let _ = ctx.out.send(ToDispatcher::Cached {
                objects: vec![Held { uri, version }],
            });
        }
        Ok((_, true)) => tracing::debug!(uri, "fetched into the cache"),
        Ok((_, false)) => {
            let error = "read, but not kept: larger than this worker's cache".to_string();
            tracing::info!(uri, "fetch not taken: {error}");
            let _ = ctx.out.send(ToDispatcher::FetchFailed { uri, error });
        }
        Err(error) => {
            tracing::info!(uri, "fetch not taken: {error}");
            let _ = ctx.out.send(ToDispatcher::FetchFailed { uri, error });
        }
    }
    let _ = std::fs::remove_file(&dest);
}

/// Put one input at `dest`; returns where it came from and whether it is cached.
pub(super) async fn stage(
    ctx: Arc<Ctx>,
    input: AssignedInput,
    dest: PathBuf,
) -> Result<(Staged, bool), String> {
    let mut joined = false;
    loop {
        // 1. A local hit (or the result of a fetch we waited for).
        let hit = {
            let mut cache = ctx.cache.lock().expect("cache lock");
            match cache.lookup(&input.uri, Some(&input.version)) {
                Lookup::Hit(_) => Some(
                    cache
                        .link_into(&input.uri, &dest)
                        .map_err(|e| format!("{}: {e}", input.uri)),
                ),
                Lookup::Stale | Lookup::Miss => None,
            }
        };
        ctx.report_evictions();
        if let Some(r) = hit {
            r?;
            return Ok((Staged::Local(input.size), true));
        }
        // 2. Single-flight: wait for a fetch already under way, then look again; or lead one.
        match ctx.flights.lead_or_join(&input.uri, joined) {
            Err(mut rx) => {
                let _ = rx.wait_for(|done| *done).await;
                joined = true;
            }
            Ok(tx) => {
                let r = fetch(&ctx, &input, &dest).await;
                ctx.flights.landed(&input.uri, tx);
                return r;
            }
        }
    }
}

/// Stage `input` at `dest` to be kept beyond the attempt (a function task's function,
/// [`super::warm::functions`]): under a temporary name, then renamed into place, so that
/// concurrent calls of one function never see it half made.
pub(super) async fn stage_kept(
    ctx: Arc<Ctx>,
    input: AssignedInput,
    dest: PathBuf,
) -> Result<(Staged, bool), String> {
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    let tmp = dest.with_file_name(format!(
        ".staging-{}-{}",
        std::process::id(),
        rand::random::<u64>()
    ));
    let uri = input.uri.clone();
    match stage(ctx, input, tmp.clone()).await {
        Ok(staged) => {
            std::fs::rename(&tmp, &dest).map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                format!("{uri}: {e}")
            })?;
            Ok(staged)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Read an input straight from persistent storage to `dest`, bypassing the cache (FA).
pub(super) async fn read_uncached(
    ctx: &Ctx,
    input: &AssignedInput,
    dest: &Path,
) -> Result<(Staged, bool), String> {
    let d = ctx
        .storage
        .get_to_file(&input.uri, dest)
        .await
        .map_err(|e| match e {
            StorageError::NotFound(u) => format!("not found: {u}"),
            e => e.to_string(),
        })?;
    Ok((Staged::Storage(d.info.size), true))
}

/// The end of the error of a fetch that found the disk full with nothing left to evict.
const NO_ROOM: &str = "no space left on the cache's disk, and nothing left to evict";

/// Whether a staging error is [`NO_ROOM`]: this worker, not the task, is at fault, and the task
/// is given back to run elsewhere (`TaskReport::no_room`).
pub(super) fn no_room(error: &str) -> bool {
    error.ends_with(NO_ROOM)
}

/// How many times a fetch that found the disk full evicts and tries again. Between tries it
/// waits (0.1 s, doubling): an evicted object still linked into a running task's directory
/// frees its bytes only when that task ends.
const NO_SPACE_RETRIES: u32 = 6;

/// Fetch an input from the named peer (falling back to storage) or from storage, and cache it.
/// A full disk evicts (the cache's quota shrinks by the object's size) and tries again.
async fn fetch(
    ctx: &Arc<Ctx>,
    input: &AssignedInput,
    dest: &Path,
) -> Result<(Staged, bool), String> {
    let mut tries = 0;
    loop {
        match fetch_once(ctx, input, dest).await {
            Ok(r) => {
                if tries > 0 {
                    ctx.refit_quota();
                }
                return Ok(r);
            }
            Err(Failed::Other(e)) => return Err(e),
            Err(Failed::NoSpace) => {
                let room = tries < NO_SPACE_RETRIES
                    && ctx
                        .cache
                        .lock()
                        .expect("cache lock")
                        .make_room(input.size.max(1 << 20));
                ctx.report_evictions();
                if !room {
                    return Err(format!("{}: {NO_ROOM}", crate::uri::redacted(&input.uri)));
                }
                tokio::time::sleep(std::time::Duration::from_millis(100 << tries)).await;
                tries += 1;
            }
        }
    }
}

async fn fetch_once(
    ctx: &Arc<Ctx>,
    input: &AssignedInput,
    dest: &Path,
) -> Result<(Staged, bool), Failed> {
    let temp = ctx.cache.lock().expect("cache lock").temp_path();
    // A fetch stopped half way (its task aborted when the dispatcher was lost) leaves no
    // partial file behind; after a commit the temp name no longer exists.
    let _partial = RemoveOnDrop(temp.clone());
    if let InputSource::Peer { url, also } = &input.source {
        match fetch_peers(ctx, url, also, input, &temp).await {
            Ok(stored) => {
                return place(ctx, input, dest, (Staged::Peer(input.size), stored))
                    .map_err(Failed::Other)
            }
            Err(Failed::NoSpace) => return Err(Failed::NoSpace),
            // An intermediate object exists only on workers: no storage to fall back on.
            Err(Failed::Other(e)) if crate::uri::on_workers_only(&input.uri) => {
                return Err(Failed::Other(format!(
                    "{}: no copy could be read from {url} ({e})",
                    input.uri
                )))
            }
            Err(Failed::Other(e)) => {
                tracing::warn!(uri = %crate::uri::redacted(&input.uri), "peer fetch from {url} failed ({e}); reading from storage")
            }
        }
    } else if crate::uri::on_workers_only(&input.uri) {
        return Err(Failed::Other(format!(
            "{}: no copy on this worker",
            input.uri
        )));
    }
    let started = std::time::Instant::now();
    let d = ctx.storage.get_to_file(&input.uri, &temp).await?;
    ctx.transferred(None, d.written, started);
    let stored = commit(
        ctx,
        &temp,
        &input.uri,
        &d.info.version,
        d.written,
        &d.sha256,
        None,
    )
    .await?;
    place(ctx, input, dest, (Staged::Storage(d.info.size), stored)).map_err(Failed::Other)
}

/// Commit a downloaded temp file with the digest computed while it was written; returns the
/// path and whether it was cached.
async fn commit(
    ctx: &Ctx,
    temp: &Path,
    uri: &str,
    version: &str,
    size: u64,
    sha256: &str,
    expected: Option<&str>,
) -> Result<(PathBuf, bool), Failed> {
    // No fsync per object: after an unclean shutdown the whole cache is verified at start-up
    // (see `CLEAN_MARKER`), so a torn object is never used.
    let stored = ctx
        .cache
        .lock()
        .expect("cache lock")
        .commit_hashed(temp, uri, version, size, sha256, expected);
    let stored = stored.map_err(|e| {
        let _ = std::fs::remove_file(temp);
        if e.kind() == std::io::ErrorKind::StorageFull {
            Failed::NoSpace
        } else {
            Failed::Other(format!("{}: {e}", crate::uri::redacted(uri)))
        }
    })?;
    ctx.report_evictions();
    if stored.cached {
        let _ = ctx.out.send(ToDispatcher::Cached {
            objects: vec![Held {
                uri: uri.into(),
                version: version.into(),
            }],
        });
    }
    Ok((stored.path, stored.cached))
}

/// Link a just-committed object into the task directory (or move an uncached one there).
fn place(
    ctx: &Ctx,
    input: &AssignedInput,
    dest: &Path,
    r: (Staged, (PathBuf, bool)),
) -> Result<(Staged, bool), String> {
    let (how, (path, cached)) = r;
    if cached {
        ctx.cache
            .lock()
            .expect("cache lock")
            .link_into(&input.uri, dest)
            .map_err(|e| format!("{}: {e}", input.uri))?;
    } else {
        std::fs::rename(&path, dest).map_err(|e| format!("{}: {e}", input.uri))?;
    }
    Ok((how, cached))
}

/// Read an object from the peer the dispatcher named, or, when it is large and others hold it
/// too, from several at once (`multi`).
async fn fetch_peers(
    ctx: &Ctx,
    url: &str,
    also: &[String],
    input: &AssignedInput,
    temp: &Path,
) -> Result<(PathBuf, bool), Failed> {
    // A large object goes through `multi` even from one peer: its chunks are then relayed to
    // other readers as they land.
    if ctx.fetch_sources < 2 || input.size < super::multi::MIN_SIZE {
        // One holder at a time: a read that fails (its holder gone mid-read) goes on to the
        // next before the caller falls back to storage.
        let mut tried = Vec::new();
        for source in std::iter::once(url).chain(also.iter().map(String::as_str)) {
            match fetch_peer(ctx, source, input, temp).await {
                Err(Failed::Other(e)) if !also.is_empty() => {
                    tracing::warn!(uri = %crate::uri::redacted(&input.uri), "peer fetch from {source} failed ({e})");
                    tried.push(format!("{source}: {e}"));
                }
                done => return done,
            }
        }
        return Err(Failed::Other(tried.join("; ")));
    }
    let sources: Vec<&str> = std::iter::once(url)
        .chain(also.iter().map(String::as_str))
        .take(ctx.fetch_sources)
        .collect();
    let read = super::multi::fetch(ctx, &sources, input, temp).await?;
    commit(
        ctx,
        temp,
        &input.uri,
        &input.version,
        input.size,
        &read.sha256,
        read.expected.as_deref(),
    )
    .await
}

async fn fetch_peer(
    ctx: &Ctx,
    url: &str,
    input: &AssignedInput,
    temp: &Path,
) -> Result<(PathBuf, bool), Failed> {
    let started = std::time::Instant::now();
    let resp = ctx
        .http
        .get(format!("{url}/v1/cache/{}", CacheDir::key(&input.uri)))
        .bearer_auth(&ctx.token)
        .send()
        .await
        .map_err(|e| Failed::Other(crate::tls::describe(&e)))?;
    if !resp.status().is_success() {
        return Err(Failed::Other(format!("status {}", resp.status())));
    }
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    let (sha, version) = (header("x-diffuse-sha256"), header("x-diffuse-version"));
    if version.as_deref() != Some(input.version.as_str()) {
        return Err(Failed::Other(format!(
            "peer holds version {version:?}, wanted {}",
            input.version
        )));
    }
    let (written, got) =
        crate::storage::write_hashed(&input.uri, temp, resp.bytes_stream()).await?;
    ctx.transferred(Some(url), written, started);
    if sha
        .as_deref()
        .is_some_and(|s| !s.eq_ignore_ascii_case(&got))
    {
        ctx.bad_copy(&input.uri, url);
    }
    // The checksum the peer recorded is checked against the bytes received before the object
    // becomes visible: a corrupt or partial transfer is dropped, and the caller reads storage.
    commit(
        ctx,
        temp,
        &input.uri,
        &input.version,
        written,
        &got,
        sha.as_deref(),
    )
    .await
}
