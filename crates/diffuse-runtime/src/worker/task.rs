//! Running one assignment: the task's directory, its staged inputs, its process
//! ([`super::process`]), the uploads of its outputs, and the report.
//!
//! The task's directory (`<cache-dir>/work/<task>.<attempt>`, made only when the task has inputs
//! or outputs, or runs as another user) is removed once its outputs are uploaded; meanwhile the
//! outputs' bytes count against the cache quota. Its stdout and stderr are kept under
//! `<cache-dir>/logs/`.

use super::process::{execute, Exit, Job, Stop};
use super::stage::{read_uncached, stage, Staged};
use super::{unix_now, Ctx};
use crate::cache_dir::CacheDir;
use crate::proto::{Assignment, KeptOutput, TaskReport, Traffic};
use crate::uri::is_tmp;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

pub(super) fn noop_report(a: &Assignment) -> TaskReport {
    TaskReport {
        exit_code: Some(0),
        ..blank_report(a, unix_now())
    }
}

/// The report of an attempt that has not run yet, every time set to `at`.
fn blank_report(a: &Assignment, at: f64) -> TaskReport {
    TaskReport {
        task: a.task.clone(),
        attempt: a.attempt,
        exit_code: None,
        error: None,
        started_at: at,
        staged_at: at,
        finished_at: at,
        stdout: None,
        stderr: None,
        stderr_tail: None,
        output_error: None,
        timed_out: false,
        out_of_memory: false,
        gpus: Vec::new(),
        outputs: Vec::new(),
        uncached: Vec::new(),
        kept: Vec::new(),
        lost_input: None,
        hint_held: None,
        traffic: Traffic::default(),
    }
}

/// Where input `i` is staged in the task's `inputs/` directory: a directory of its own, named
/// by its number, holding it under its own base name ([`crate::uri::base_name`]): a program
/// that names its output after its input (`gzip`, `samtools index`), knows a format by its
/// extension or prints what it read sees `inputs/0/sample.fastq`, and two inputs with one base
/// name still differ.
fn staged_name(i: usize, uri: &str) -> PathBuf {
    Path::new(&i.to_string()).join(crate::uri::base_name(uri))
}

/// The task id with anything but `[A-Za-z0-9._-]` replaced by `_` (and not `.` or `..`): what
/// `{id}` becomes in file names.
pub fn safe_name(task: &str) -> String {
    let safe: String = task
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    match safe.as_str() {
        "." | ".." => safe.replace('.', "_"),
        _ => safe,
    }
}

/// A file name for a task directory and its logs: the safe id, a hash of the real one (two ids
/// may have the same safe form), and the attempt.
pub fn dir_name(task: &str, attempt: u32) -> String {
    format!(
        "{}.{}.{attempt}",
        safe_name(task),
        &CacheDir::key(task)[..8]
    )
}

/// The file name of an attempt's captured stream (`stdout` or `stderr`) in a worker's log
/// directory.
pub fn log_name(task: &str, attempt: u32, stream: &str) -> String {
    format!("{}.{stream}", dir_name(task, attempt))
}

/// An attempt in the worker's list of running attempts (so a `Cancel` finds it); removed from
/// the list when dropped.
pub(super) struct Registered {
    ctx: Arc<Ctx>,
    key: (String, u32),
    stop: watch::Receiver<Option<Stop>>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.ctx
            .running
            .lock()
            .expect("running lock")
            .remove(&self.key);
    }
}

/// Put an attempt in the list of running attempts, as soon as its `Run` arrives.
pub(super) fn register(ctx: &Arc<Ctx>, a: &Assignment) -> Registered {
    let (stop_tx, stop) = watch::channel(None);
    let key = (a.task.clone(), a.attempt);
    ctx.running
        .lock()
        .expect("running lock")
        .insert(key.clone(), stop_tx);
    Registered {
        ctx: ctx.clone(),
        key,
        stop,
    }
}

/// Run one attempt. None: it was stopped because the worker is stopping (the dispatcher is told
/// that the worker left, and runs it elsewhere).
pub(super) async fn run_task(
    ctx: &Arc<Ctx>,
    a: Assignment,
    registered: Registered,
) -> Option<TaskReport> {
    let stop_rx = registered.stop.clone();

    let started_at = unix_now();
    let name = dir_name(&a.task, a.attempt);
    let dir = ctx.work.join(&name);
    let mut report = blank_report(&a, started_at);
    let fail = |mut r: TaskReport, e: String| {
        r.error = Some(e);
        r.finished_at = unix_now();
        Some(r)
    };
    let inputs_dir = dir.join("inputs");
    let outputs_dir = dir.join("outputs");
    let user = ctx.launch.user.as_ref();
    // Only the directories the task needs: a short task's cost is mostly file-system calls (a
    // directory and two files cost more than spawning the process on a busy disk). A task with
    // neither inputs nor outputs runs in the work directory, unless it runs as another user.
    let needs_dir = !a.inputs.is_empty() || !a.outputs.is_empty() || user.is_some();
    // However the attempt ends, its directory goes (a link in it keeps an evicted object's
    // bytes on disk, outside the quota's count).
    let _dir = needs_dir.then(|| RemoveOnDrop(dir.clone()));
    let paths: Vec<PathBuf> = a
        .inputs
        .iter()
        .enumerate()
        .map(|(i, input)| inputs_dir.join(staged_name(i, &input.uri)))
        .collect();
    let made = make_dirs(
        &dir,
        needs_dir,
        (!a.inputs.is_empty()).then_some(&inputs_dir),
        (!a.outputs.is_empty()).then_some(&outputs_dir),
        &paths,
        user.map(|u| (u.uid, u.gid)),
    );
    if let Err(e) = made {
        return fail(report, format!("cannot create {}: {e}", dir.display()));
    }
    let caching = a.caching;
    let staged =
        futures_util::future::join_all(a.inputs.iter().zip(&paths).map(|(input, dest)| {
            let (ctx, input, dest) = (ctx.clone(), input.clone(), dest.clone());
            async move {
                // An intermediate object is only on workers: it is staged from a peer even
                // under a policy that reads everything else straight from storage.
                if caching || is_tmp(&input.uri) {
                    stage(ctx, input, dest).await
                } else {
                    read_uncached(&ctx, &input, &dest).await
                }
            }
        }))
        .await;
    let mut uncached = Vec::new();
    for (input, s) in a.inputs.iter().zip(staged) {
        match s {
            Ok((how, cached)) => {
                let t = &mut report.traffic;
                match how {
                    Staged::Local(b) => (t.local, t.bytes_local) = (t.local + 1, t.bytes_local + b),
                    Staged::Peer(b) => (t.peer, t.bytes_peer) = (t.peer + 1, t.bytes_peer + b),
                    Staged::Storage(b) => {
                        (t.storage, t.bytes_storage) = (t.storage + 1, t.bytes_storage + b)
                    }
                }
                if !cached {
                    uncached.push(input.uri.clone());
                }
            }
            Err(e) => {
                if is_tmp(&input.uri) {
                    report.lost_input = Some(input.uri.clone());
                }
                return fail(report, e);
            }
        }
    }
    report.uncached = uncached;
    report.staged_at = unix_now();
    // What it read is kept with its eviction priority (the last reader's).
    {
        let mut cache = ctx.cache.lock().expect("cache lock");
        for input in &a.inputs {
            cache.set_priority(&input.uri, a.more.eviction_priority);
        }
    }
    let outputs: Vec<PathBuf> = (0..a.outputs.len())
        .map(|i| outputs_dir.join(format!("{i}")))
        .collect();
    // `{inputs[i]}` counts the task's inputs as written, repeats included.
    let by_position: Vec<PathBuf> = if a.positions.is_empty() {
        paths.clone()
    } else {
        a.positions
            .iter()
            .map(|&p| paths[p as usize].clone())
            .collect()
    };
    match *stop_rx.borrow() {
        Some(Stop::Leaving) => return None,
        // Cancelled while its inputs were staged: its program is never started.
        Some(Stop::Cancelled) => return fail(report, "cancelled".into()),
        _ => {}
    }
    let gpus = Gpus::take(ctx, a.gpus());
    report.gpus = gpus.ids();
    let mut env = vec![
        ("DIFFUSE_TASK_ID".to_string(), a.task.clone()),
        ("DIFFUSE_ATTEMPT".to_string(), a.attempt.to_string()),
        ("DIFFUSE_NODE".to_string(), ctx.name.clone()),
        ("DIFFUSE_CORES".to_string(), a.cores().to_string()),
    ];
    if ctx.gpu_env {
        env.push(("CUDA_VISIBLE_DEVICES".to_string(), gpus.ids().join(",")));
    }
    env.extend(a.more.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let job = Job {
        cmd: &a.cmd,
        inputs: &by_position,
        outputs: &outputs,
        dir: &dir,
        logs: (
            ctx.logs.join(log_name(&a.task, a.attempt, "stdout")),
            ctx.logs.join(log_name(&a.task, a.attempt, "stderr")),
        ),
        max_output: ctx.max_output,
        env,
        timeout: a.more.timeout_s.map(Duration::from_secs_f64),
        memory: a.memory_limit().zip(ctx.cgroups.as_ref()),
        make_room: {
            let ctx = ctx.clone();
            std::sync::Arc::new(move || {
                let freed = ctx.cache.lock().expect("cache lock").make_room(1 << 20);
                ctx.report_evictions();
                freed
            })
        },
    };
    let ended = execute(job, &ctx.launch, stop_rx).await;
    drop(gpus);
    if needs_dir {
        let _ = std::fs::remove_dir_all(&inputs_dir);
    }
    let ended = match ended {
        Ok(e) => e,
        Err(e) => return fail(report, e),
    };
    report.stdout = ended.stdout.path.as_ref().map(|p| p.display().to_string());
    report.stderr = ended.stderr.path.as_ref().map(|p| p.display().to_string());
    report.output_error = ended
        .stdout
        .error
        .clone()
        .or_else(|| ended.stderr.error.clone());
    if let Err(e) = upload_logs(ctx, &a, &ended).await {
        return fail(report, e);
    }
    match ended.exit {
        Exit::Code(code) => report.exit_code = code,
        Exit::Stopped(Stop::Cancelled) => return fail(report, "cancelled".into()),
        Exit::Stopped(Stop::Leaving) => return None,
        Exit::Stopped(Stop::TimedOut) => {
            report.timed_out = true;
            report.stderr_tail = ended.stderr.tail_text();
            let limit = a.more.timeout_s.unwrap_or_default();
            return fail(report, format!("timed out after {limit} s"));
        }
    }
    if ended.out_of_memory {
        report.out_of_memory = true;
        report.stderr_tail = ended.stderr.tail_text();
        let limit = crate::size::format_size(a.memory_limit().unwrap_or_default());
        return fail(
            report,
            format!(
                "killed by the kernel: it used more than its memory limit of {limit} \
                 (memory_limit, which defaults to memory)"
            ),
        );
    }
    if report.exit_code != Some(0) {
        report.stderr_tail = ended.stderr.tail_text();
    }
    if report.exit_code == Some(0) && !outputs.is_empty() {
        // The outputs wait on this disk until uploaded: they count against the cache quota.
        let bytes: u64 = outputs
            .iter()
            .filter_map(|p| std::fs::symlink_metadata(p).ok())
            .map(|m| m.len())
            .sum();
        ctx.cache.lock().expect("cache lock").reserve(bytes);
        ctx.report_evictions();
        let kept = keep(ctx, &a.outputs, &outputs);
        let uploaded = match &kept {
            Ok(_) => upload(ctx, &a.outputs, &outputs).await,
            Err(e) => Err(e.clone()),
        };
        ctx.cache.lock().expect("cache lock").release(bytes);
        ctx.report_evictions();
        match (kept, uploaded) {
            (Ok(kept), Ok(())) => {
                report.outputs = a.outputs.clone();
                report.kept = kept;
            }
            (Ok(kept), Err(e)) => {
                let mut cache = ctx.cache.lock().expect("cache lock");
                for k in kept {
                    cache.remove(&k.uri);
                }
                cache.take_evicted();
                drop(cache);
                return fail(report, e);
            }
            (Err(e), _) => return fail(report, e),
        }
    }
    report.finished_at = unix_now();
    Some(report)
}

/// GPUs given to a running attempt (positions in the worker's list); given back when dropped.
struct Gpus<'a> {
    ctx: &'a Ctx,
    indices: Vec<usize>,
}

impl<'a> Gpus<'a> {
    /// Take `n` free GPUs (the dispatcher only sends a task where that many are free).
    fn take(ctx: &'a Ctx, n: u32) -> Gpus<'a> {
        let mut free = ctx.gpus_free.lock().expect("gpu lock");
        let indices: Vec<usize> = free.iter().copied().take(n as usize).collect();
        for i in &indices {
            free.remove(i);
        }
        if indices.len() < n as usize {
            tracing::warn!("asked for {n} GPUs, {} free", indices.len());
        }
        Gpus { ctx, indices }
    }
}

impl Gpus<'_> {
    /// Their ids, as `CUDA_VISIBLE_DEVICES` takes them.
    fn ids(&self) -> Vec<String> {
        self.indices
            .iter()
            .map(|&i| self.ctx.gpu_ids[i].clone())
            .collect()
    }
}

impl Drop for Gpus<'_> {
    fn drop(&mut self) {
        self.ctx
            .gpus_free
            .lock()
            .expect("gpu lock")
            .extend(self.indices.iter().copied());
    }
}

/// Copy the captured stdout and stderr to the task's `stdout`/`stderr` URIs, if it named any (an
/// empty file when the stream had nothing).
async fn upload_logs(
    ctx: &Ctx,
    a: &Assignment,
    ended: &super::process::Ended,
) -> Result<(), String> {
    for (uri, captured, stream) in [
        (&a.stdout_uri, &ended.stdout, "stdout"),
        (&a.stderr_uri, &ended.stderr, "stderr"),
    ] {
        let Some(uri) = uri else { continue };
        let uri = crate::uri::canonical(
            &uri.replace("{id}", &safe_name(&a.task))
                .replace("{attempt}", &a.attempt.to_string()),
        )
        .map_err(|e| format!("{stream}: {e}"))?;
        let empty;
        let src: &Path = match &captured.path {
            Some(p) => p,
            None => {
                empty = ctx.logs.join(format!("empty-{}", std::process::id()));
                std::fs::write(&empty, b"").map_err(|e| format!("{stream}: {e}"))?;
                &empty
            }
        };
        if ctx.launch.user.is_some() {
            ctx.storage
                .check_output(&uri, src)
                .map_err(|e| format!("{stream} {}: {e}", crate::uri::redacted(&uri)))?;
        }
        ctx.storage
            .put_file(&uri, src)
            .await
            .map_err(|e| format!("{stream} {}: {e}", crate::uri::redacted(&uri)))?;
    }
    Ok(())
}

/// Create the task's directory, its `inputs/` (with the directory of each staged input in
/// `staged`) and `outputs/` as needed, owned by the task user if there is one (so that a program
/// may write next to its input, as `gzip -k` does).
fn make_dirs(
    dir: &Path,
    needs_dir: bool,
    inputs: Option<&PathBuf>,
    outputs: Option<&PathBuf>,
    staged: &[PathBuf],
    owner: Option<(u32, u32)>,
) -> std::io::Result<()> {
    if !needs_dir {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    let each = staged.iter().filter_map(|p| p.parent());
    let made: Vec<&Path> = std::iter::once(dir)
        .chain(
            [inputs, outputs]
                .into_iter()
                .flatten()
                .map(PathBuf::as_path),
        )
        .chain(each)
        .collect();
    for d in &made[1..] {
        std::fs::create_dir(d)?;
    }
    if let Some((uid, gid)) = owner {
        for d in made {
            std::os::unix::fs::chown(d, Some(uid), Some(gid))?;
        }
    }
    Ok(())
}

/// Move each `tmp://` output into the cache, pinned: it stays on this worker, out of eviction,
/// until the dispatcher says no task needs it. It must be a regular file (not a link).
fn keep(ctx: &Ctx, uris: &[String], paths: &[PathBuf]) -> Result<Vec<KeptOutput>, String> {
    let mut kept: Vec<KeptOutput> = Vec::new();
    let mut cache = ctx.cache.lock().expect("cache lock");
    let mut result = Ok(());
    for (uri, path) in uris.iter().zip(paths).filter(|(u, _)| is_tmp(u)) {
        let one = (|| -> Result<KeptOutput, String> {
            let md = std::fs::symlink_metadata(path)
                .map_err(|e| format!("output {uri}: the task did not write it ({e})"))?;
            if !md.is_file() {
                return Err(format!("output {uri}: not a regular file"));
            }
            let temp = cache.temp_path();
            if std::fs::rename(path, &temp).is_err() {
                std::fs::copy(path, &temp).map_err(|e| format!("output {uri}: {e}"))?;
            }
            let (size, sha) = crate::cache_dir::sha256_file(&temp).map_err(|e| {
                let _ = std::fs::remove_file(&temp);
                format!("output {uri}: {e}")
            })?;
            let stored = cache
                .commit_hashed(&temp, uri, &sha, size, &sha, None)
                .map_err(|e| format!("output {uri}: {e}"))?;
            if !stored.cached {
                cache.release_uncached(&stored.path);
                return Err(format!(
                    "output {uri}: {size} bytes do not fit in this worker's cache ({} bytes free of pinned objects); give it a larger --cache-size",
                    cache.quota()
                ));
            }
            cache.pin(uri);
            Ok(KeptOutput {
                uri: uri.clone(),
                size,
                sha256: sha,
            })
        })();
        match one {
            Ok(k) => kept.push(k),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    if let Err(e) = result {
        for k in &kept {
            cache.remove(&k.uri);
        }
        cache.take_evicted();
        return Err(e);
    }
    Ok(kept)
}

/// Copy each persistent output to its URI (`tmp://` ones are kept by [`keep`]). With a task
/// user, an output must be a regular file (not a link to something only the worker may read)
/// and its destination writable by that user.
async fn upload(ctx: &Ctx, uris: &[String], paths: &[PathBuf]) -> Result<(), String> {
    for (uri, path) in uris.iter().zip(paths).filter(|(u, _)| !is_tmp(u)) {
        let shown = crate::uri::redacted(uri);
        if ctx.launch.user.is_some() {
            ctx.storage
                .check_output(uri, path)
                .map_err(|e| format!("output {shown}: {e}"))?;
        }
        ctx.storage
            .put_file(uri, path)
            .await
            .map_err(|e| format!("output {shown}: {e}"))?;
    }
    Ok(())
}

/// Removes a file or directory tree when dropped (if it still exists).
pub(super) struct RemoveOnDrop(pub(super) PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        match std::fs::symlink_metadata(&self.0) {
            Ok(m) if m.is_dir() => {
                let _ = std::fs::remove_dir_all(&self.0);
            }
            Ok(_) => {
                let _ = std::fs::remove_file(&self.0);
            }
            Err(_) => {}
        }
    }
}
