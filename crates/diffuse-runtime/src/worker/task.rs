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
use crate::proto::{Assignment, TaskReport, Traffic};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::watch;

pub(super) fn noop_report(a: &Assignment) -> TaskReport {
    let now = unix_now();
    TaskReport {
        task: a.task.clone(),
        attempt: a.attempt,
        exit_code: Some(0),
        error: None,
        started_at: now,
        staged_at: now,
        finished_at: now,
        stdout: String::new(),
        stderr: String::new(),
        outputs: Vec::new(),
        uncached: Vec::new(),
        traffic: Traffic::default(),
    }
}

/// A file name for a task directory: the id with anything but `[A-Za-z0-9._-]` replaced.
fn dir_name(task: &str, attempt: u32) -> String {
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
    format!("{safe}.{}.{attempt}", &CacheDir::key(task)[..8])
}

/// Removes the attempt from the worker's list of running attempts when dropped.
struct Registered<'a> {
    ctx: &'a Ctx,
    key: (String, u32),
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.ctx
            .running
            .lock()
            .expect("running lock")
            .remove(&self.key);
    }
}

/// Run one attempt. None: it was stopped because the worker is stopping (the dispatcher is told
/// that the worker left, and runs it elsewhere).
pub(super) async fn run_task(ctx: &Arc<Ctx>, a: Assignment) -> Option<TaskReport> {
    let (stop_tx, stop_rx) = watch::channel(None);
    let key = (a.task.clone(), a.attempt);
    ctx.running
        .lock()
        .expect("running lock")
        .insert(key.clone(), stop_tx);
    let _registered = Registered { ctx, key };

    let started_at = unix_now();
    let name = dir_name(&a.task, a.attempt);
    let dir = ctx.work.join(&name);
    let mut report = TaskReport {
        task: a.task.clone(),
        attempt: a.attempt,
        exit_code: None,
        error: None,
        started_at,
        staged_at: started_at,
        finished_at: started_at,
        stdout: ctx
            .logs
            .join(format!("{name}.stdout"))
            .display()
            .to_string(),
        stderr: ctx
            .logs
            .join(format!("{name}.stderr"))
            .display()
            .to_string(),
        outputs: Vec::new(),
        uncached: Vec::new(),
        traffic: Traffic::default(),
    };
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
    let made = make_dirs(
        &dir,
        needs_dir,
        (!a.inputs.is_empty()).then_some(&inputs_dir),
        (!a.outputs.is_empty()).then_some(&outputs_dir),
        user.map(|u| (u.uid, u.gid)),
    );
    if let Err(e) = made {
        return fail(report, format!("cannot create {}: {e}", dir.display()));
    }
    let paths: Vec<PathBuf> = (0..a.inputs.len())
        .map(|i| inputs_dir.join(format!("{i}")))
        .collect();
    let caching = a.caching;
    let staged =
        futures_util::future::join_all(a.inputs.iter().zip(&paths).map(|(input, dest)| {
            let (ctx, input, dest) = (ctx.clone(), input.clone(), dest.clone());
            async move {
                if caching {
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
            Err(e) => return fail(report, e),
        }
    }
    report.uncached = uncached;
    report.staged_at = unix_now();
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
    if *stop_rx.borrow() == Some(Stop::Leaving) {
        return None;
    }
    let job = Job {
        cmd: &a.cmd,
        inputs: &by_position,
        outputs: &outputs,
        dir: &dir,
        logs: (PathBuf::from(&report.stdout), PathBuf::from(&report.stderr)),
        env: Vec::new(),
    };
    let exit = execute(job, &ctx.launch, stop_rx).await;
    if needs_dir {
        let _ = std::fs::remove_dir_all(&inputs_dir);
    }
    match exit {
        Ok(Exit::Code(code)) => report.exit_code = code,
        Ok(Exit::Stopped(Stop::Cancelled)) => return fail(report, "cancelled".into()),
        Ok(Exit::Stopped(Stop::Leaving)) => return None,
        Err(e) => return fail(report, e),
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
        let uploaded = upload(ctx, &a.outputs, &outputs).await;
        ctx.cache.lock().expect("cache lock").release(bytes);
        match uploaded {
            Ok(()) => report.outputs = a.outputs.clone(),
            Err(e) => return fail(report, e),
        }
    }
    report.finished_at = unix_now();
    Some(report)
}

/// Create the task's directory and its `inputs/` and `outputs/` as needed, owned by the task
/// user if there is one.
fn make_dirs(
    dir: &Path,
    needs_dir: bool,
    inputs: Option<&PathBuf>,
    outputs: Option<&PathBuf>,
    owner: Option<(u32, u32)>,
) -> std::io::Result<()> {
    if !needs_dir {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    for d in [inputs, outputs].into_iter().flatten() {
        std::fs::create_dir(d)?;
    }
    if let Some((uid, gid)) = owner {
        for d in [Some(&dir.to_path_buf()), inputs, outputs]
            .into_iter()
            .flatten()
        {
            std::os::unix::fs::chown(d, Some(uid), Some(gid))?;
        }
    }
    Ok(())
}

/// Copy each output to its URI. With a task user, an output must be a regular file (not a link
/// to something only the worker may read) and its destination writable by that user.
async fn upload(ctx: &Ctx, uris: &[String], paths: &[PathBuf]) -> Result<(), String> {
    for (uri, path) in uris.iter().zip(paths) {
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
