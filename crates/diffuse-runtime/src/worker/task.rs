//! Running one assignment: its directory ([`super::taskdir`]), its staged inputs
//! ([`super::inputs`]), its process ([`super::process`]), the uploads of its outputs, and the
//! report.
//!
//! The task's directory is removed once its outputs are uploaded; meanwhile the outputs' bytes
//! count against the cache quota. Its stdout and stderr are kept under `<cache-dir>/logs/`.

use super::ctx::Ctx;
use super::gpus::Gpus;
use super::inputs::{read_uncached, stage};
use super::process::{execute, Ended, Exit, Job, Stop};
use super::running::Registered;
use super::taskdir::{log_name, safe_name, TaskDir};
use crate::proto::{Assignment, KeptOutput, TaskReport, ToDispatcher};
use crate::uri::is_tmp;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Run one assignment (or, with `noop`, report it done at once) and send its report, unless
/// it was stopped because the worker is leaving, or killed by a signal meant for the whole
/// worker: then it runs again elsewhere.
pub(super) async fn run_and_report(
    ctx: Arc<Ctx>,
    a: Box<Assignment>,
    registered: Registered,
    noop: bool,
) {
    let report = if noop {
        Some(noop_report(&a))
    } else {
        run_task(&ctx, *a, registered).await
    };
    let Some(report) = report else { return };
    if report.error.is_none()
        && killed_by_a_stop_signal(report.exit_code)
        && ctx.running.stopped_with_us().await
    {
        // Killed by a signal meant for the whole job (a resource manager's scancel, a node
        // shutdown): it runs again elsewhere.
        return;
    }
    let _ = ctx.out.send(ToDispatcher::Finished(Box::new(report)));
}

/// Whether a task's end looks like SIGTERM, SIGKILL, SIGINT or SIGHUP: killed by it (no exit
/// code), or a shell that ran it and reports 128 + the signal (143, 137, 130, 129).
fn killed_by_a_stop_signal(exit_code: Option<i32>) -> bool {
    matches!(exit_code, None | Some(129 | 130 | 137 | 143))
}

fn noop_report(a: &Assignment) -> TaskReport {
    TaskReport {
        exit_code: Some(0),
        ..TaskReport::blank(a, unix_now())
    }
}

/// How an attempt ended short of a report of its own.
enum Ending {
    /// It failed with this error.
    Failed(String),
    /// It was stopped because the worker is stopping: no report (the dispatcher is told that
    /// the worker left, and runs it elsewhere).
    Left,
    /// Held ready, it was asked back before it started.
    Withdrawn,
}

impl From<String> for Ending {
    fn from(e: String) -> Ending {
        Ending::Failed(e)
    }
}

/// Run one attempt. None: it was stopped because the worker is stopping (the dispatcher is told
/// that the worker left, and runs it elsewhere).
pub(super) async fn run_task(
    ctx: &Arc<Ctx>,
    a: Assignment,
    registered: Registered,
) -> Option<TaskReport> {
    let stop = registered.stop.clone();
    let withdraw = registered.withdraw.clone();
    let mut report = TaskReport::blank(&a, unix_now());
    let mut dir = TaskDir::new(
        &ctx.work,
        (&a.task, a.attempt),
        a.inputs.iter().map(|i| i.uri.as_str()),
        a.outputs.len(),
        ctx.launch.user.as_ref().map(|u| (u.uid, u.gid)),
    );
    if let Some(i) = function_input(&a) {
        dir.stage_elsewhere(i, super::warm::functions::path(&ctx.work, &a.inputs[i]));
    }
    if let Some(order) = &a.reuse {
        match reuse_result(ctx, &a, order).await {
            Ok(done) => return Some(done),
            Err(e) => {
                tracing::info!(task = %a.task, "kept result of '{}' not reused ({e}); running it", order.from);
                report.reuse_failed = Some(e);
            }
        }
    }
    let ended = match dir.make() {
        Err(e) => Err(Ending::Failed(format!(
            "cannot create {}: {e}",
            dir.path.display()
        ))),
        Ok(()) => run_attempt(ctx, &a, &dir, (stop, withdraw), &mut report).await,
    };
    match ended {
        Ok(()) => {
            report.finished_at = unix_now();
            Some(report)
        }
        Err(Ending::Failed(e)) => {
            report.error = Some(e);
            report.finished_at = unix_now();
            Some(report)
        }
        Err(Ending::Left) => None,
        Err(Ending::Withdrawn) => {
            report.withdrawn = true;
            report.error = Some("given back before it started".into());
            report.finished_at = unix_now();
            Some(report)
        }
    }
}

/// A function task's function: its index among the assignment's (distinct) inputs.
fn function_input(a: &Assignment) -> Option<usize> {
    let call = a.cmd.call()?;
    let i = call.fn_input as usize;
    let distinct = a.positions.get(i).map_or(i, |&p| p as usize);
    (distinct < a.inputs.len()).then_some(distinct)
}

/// Stand a kept result in for `a` ([`super::reuse::carry_out`]) in a directory of its own.
async fn reuse_result(
    ctx: &Arc<Ctx>,
    a: &Assignment,
    order: &crate::proto::ReuseOrder,
) -> Result<TaskReport, String> {
    let mut report = TaskReport::blank(a, unix_now());
    let dir = ctx.work.join(format!(
        "{}.reuse",
        super::taskdir::dir_name(&a.task, a.attempt)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let _remove = super::taskdir::RemoveOnDrop(dir.clone());
    super::reuse::carry_out(ctx, a, order, &dir, &mut report).await?;
    // No process ran: staging (reading the kept files) was all of it.
    report.staged_at = unix_now();
    report.finished_at = report.staged_at;
    Ok(report)
}

/// Take the cores `a` asks for (at most the worker's), waiting while other attempts hold
/// them; a stop while waiting ends the attempt as it would a running one, and a withdrawal
/// gives it back unstarted.
async fn take_cores(
    ctx: &Ctx,
    a: &Assignment,
    mut stop: watch::Receiver<Option<Stop>>,
    mut withdraw: watch::Receiver<bool>,
) -> Result<tokio::sync::OwnedSemaphorePermit, Ending> {
    let want = a.cores().clamp(1, ctx.core_count.max(1));
    tokio::select! {
        biased;
        permit = ctx.cores.clone().acquire_many_owned(want) => {
            Ok(permit.expect("the cores' semaphore is never closed"))
        }
        _ = withdraw.wait_for(|w| *w) => Err(Ending::Withdrawn),
        why = stop.wait_for(Option::is_some) => match why.ok().and_then(|w| *w) {
            Some(Stop::Leaving) => Err(Ending::Left),
            Some(Stop::Cancelled) => Err(Ending::Failed("cancelled".into())),
            _ => Err(Ending::Failed("stopped before it started".into())),
        },
    }
}

/// An attempt in its made directory: stage its inputs, run its process, judge how it ended,
/// and keep or upload its outputs; what happens goes in `report`.
async fn run_attempt(
    ctx: &Arc<Ctx>,
    a: &Assignment,
    dir: &TaskDir,
    (stop, withdraw): (watch::Receiver<Option<Stop>>, watch::Receiver<bool>),
    report: &mut TaskReport,
) -> Result<(), Ending> {
    // A task sent ahead of a free core waits for its cores here; its attempt starts when it
    // has them (or is given back, if asked before).
    let cores = take_cores(ctx, a, stop.clone(), withdraw).await?;
    if a.held {
        ctx.say_started(&a.task, a.attempt).await;
    }
    report.started_at = unix_now();
    stage_inputs(ctx, a, &dir.staged, report).await?;
    // `{inputs[i]}` counts the task's inputs as written, repeats included.
    let by_position: Vec<PathBuf> = if a.positions.is_empty() {
        dir.staged.clone()
    } else {
        a.positions
            .iter()
            .map(|&p| dir.staged[p as usize].clone())
            .collect()
    };
    match *stop.borrow() {
        Some(Stop::Leaving) => return Err(Ending::Left),
        // Cancelled while its inputs were staged: its program is never started.
        Some(Stop::Cancelled) => return Err(Ending::Failed("cancelled".into())),
        _ => {}
    }
    let ended = match a.cmd.call() {
        Some(call) => {
            let (ended, value) = run_call(ctx, a, call, dir, &by_position, stop, report).await?;
            if let Some(v) = value {
                super::warm::keep_value(&ctx.storage, v, report).await?;
            }
            ended
        }
        None => run_process(ctx, a, dir, &by_position, stop, report).await?,
    };
    // The process has ended: its cores go to the next task while its outputs are uploaded.
    drop(cores);
    report.stdout = ended.stdout.path.as_ref().map(|p| p.display().to_string());
    report.stderr = ended.stderr.path.as_ref().map(|p| p.display().to_string());
    report.output_error = ended
        .stdout
        .error
        .clone()
        .or_else(|| ended.stderr.error.clone());
    upload_logs(ctx, a, &ended).await?;
    judge(a, &ended, report)?;
    let kept = (report.exit_code == Some(0) && a.keep_result)
        .then(|| super::reuse::keep_outputs(ctx, a, &dir.outputs))
        .flatten();
    if report.exit_code == Some(0) && !dir.outputs.is_empty() {
        deliver_outputs(ctx, a, &dir.outputs, report).await?;
    }
    if let Some(files) = kept {
        super::reuse::finish_result(ctx, a, files, report).await;
    }
    Ok(())
}

/// Stage every input concurrently into its place in `paths`, and count in `report` where each
/// came from. An intermediate object that cannot be staged is named in `lost_input`; an input
/// that finds the disk full with nothing to evict sets `no_room`.
async fn stage_inputs(
    ctx: &Arc<Ctx>,
    a: &Assignment,
    paths: &[PathBuf],
    report: &mut TaskReport,
) -> Result<(), String> {
    let caching = a.caching;
    let function = function_input(a);
    let staged = futures_util::future::join_all(a.inputs.iter().zip(paths).enumerate().map(
        |(i, (input, dest))| {
            let (ctx, input, dest) = (ctx.clone(), input.clone(), dest.clone());
            async move {
                // A function kept from an earlier call: nothing to stage.
                if function == Some(i) && dest.exists() {
                    return Ok((super::inputs::Staged::Local(input.size), true));
                }
                if function == Some(i) {
                    return super::inputs::stage_kept(ctx, input, dest).await;
                }
                // An intermediate object is only on workers: it is staged from a peer even
                // under a policy that reads everything else straight from storage.
                if caching || is_tmp(&input.uri) {
                    stage(ctx, input, dest).await
                } else {
                    read_uncached(&ctx, &input, &dest).await
                }
            }
        },
    ))
    .await;
    let mut uncached = Vec::new();
    for (input, s) in a.inputs.iter().zip(staged) {
        match s {
            Ok((how, cached)) => {
                how.count(&mut report.traffic);
                if !cached {
                    uncached.push(input.uri.clone());
                }
            }
            Err(e) => {
                if super::inputs::no_room(&e) {
                    report.no_room = true;
                } else if is_tmp(&input.uri) {
                    report.lost_input = Some(input.uri.clone());
                }
                return Err(e);
            }
        }
    }
    report.uncached = uncached;
    report.staged_at = unix_now();
    // What it read is kept with its eviction priority (the last reader's).
    let mut cache = ctx.cache.lock().expect("cache lock");
    for input in &a.inputs {
        cache.set_priority(&input.uri, a.more.eviction_priority);
    }
    Ok(())
}

/// Run the task's process with its GPUs, environment and limits, until it ends or is stopped;
/// then remove its staged inputs.
async fn run_process(
    ctx: &Arc<Ctx>,
    a: &Assignment,
    dir: &TaskDir,
    inputs: &[PathBuf],
    stop: watch::Receiver<Option<Stop>>,
    report: &mut TaskReport,
) -> Result<Ended, String> {
    let gpus = ctx.gpus.take(a.gpus());
    report.gpus = gpus.ids();
    let job = Job {
        cmd: &a.cmd,
        inputs,
        outputs: &dir.outputs,
        dir: &dir.path,
        cwd: a.more.cwd.as_deref().map(Path::new),
        logs: (
            ctx.logs.join(log_name(&a.task, a.attempt, "stdout")),
            ctx.logs.join(log_name(&a.task, a.attempt, "stderr")),
        ),
        max_output: ctx.max_output,
        env: task_env(ctx, a, &gpus, dir.scratch()),
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
    let ended = execute(job, &ctx.launch, stop).await;
    drop(gpus);
    dir.remove_inputs();
    ended
}

/// Run the task's call in a warm process with its GPUs, environment and limits, until it ends
/// or is stopped; then remove its staged inputs. The entry's bytes come back with it.
async fn run_call(
    ctx: &Arc<Ctx>,
    a: &Assignment,
    call: &crate::spec::Call,
    dir: &TaskDir,
    inputs: &[PathBuf],
    stop: watch::Receiver<Option<Stop>>,
    report: &mut TaskReport,
) -> Result<(Ended, Option<Vec<u8>>), String> {
    let gpus = ctx.gpus.take(a.gpus());
    report.gpus = gpus.ids();
    let position = |i: u32| {
        let i = i as usize;
        let uri = a.positions.get(i).map_or(i, |&p| p as usize);
        (
            inputs.get(i).cloned(),
            a.inputs.get(uri).map(|x| x.uri.clone()),
        )
    };
    let (Some(fn_path), Some(function)) = position(call.fn_input) else {
        return Err(format!("call.fn: input {} is not staged", call.fn_input));
    };
    let args = match call.args_input {
        Some(i) => {
            let path = position(i)
                .0
                .ok_or_else(|| format!("call.args_input: input {i} is not staged"))?;
            tokio::fs::read(&path)
                .await
                .map_err(|e| format!("call.args_input {}: {e}", path.display()))?
        }
        None => call.inline_args(),
    };
    let job = super::warm::call::CallJob {
        call,
        function: &function,
        fn_path: &fn_path,
        args,
        inputs,
        dir: dir.scratch(),
        name: super::taskdir::dir_name(&a.task, a.attempt),
        cwd: a.more.cwd.as_deref().map(Path::new),
        logs: (
            ctx.logs.join(log_name(&a.task, a.attempt, "stdout")),
            ctx.logs.join(log_name(&a.task, a.attempt, "stderr")),
        ),
        max_output: ctx.max_output,
        env: task_env(ctx, a, &gpus, dir.scratch()),
        timeout: a.more.timeout_s.map(Duration::from_secs_f64),
        memory: a.memory_limit().filter(|_| ctx.cgroups.is_some()),
        make_room: {
            let ctx = ctx.clone();
            std::sync::Arc::new(move || {
                let freed = ctx.cache.lock().expect("cache lock").make_room(1 << 20);
                ctx.report_evictions();
                freed
            })
        },
    };
    let ended = super::warm::call::run(&ctx.warm, ctx.cgroups.as_ref(), job, stop).await;
    drop(gpus);
    dir.remove_inputs();
    ended
}

/// The variables diffuse sets for a task, then the task's own. `DIFFUSE_TASK_DIR` is its
/// scratch directory, which is not its working directory when it gives a `cwd`.
fn task_env(ctx: &Ctx, a: &Assignment, gpus: &Gpus, dir: &Path) -> Vec<(String, String)> {
    let mut env = vec![
        ("DIFFUSE_TASK_ID".to_string(), a.task.clone()),
        ("DIFFUSE_TASK_DIR".to_string(), dir.display().to_string()),
        ("DIFFUSE_ATTEMPT".to_string(), a.attempt.to_string()),
        ("DIFFUSE_NODE".to_string(), ctx.name.clone()),
        ("DIFFUSE_CORES".to_string(), a.cores().to_string()),
    ];
    if ctx.gpus.env {
        env.push(("CUDA_VISIBLE_DEVICES".to_string(), gpus.ids().join(",")));
    }
    env.extend(a.more.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// How the process ended, in `report`: its exit code, or why it was stopped (with the tail of
/// its stderr to explain a failure).
fn judge(a: &Assignment, ended: &Ended, report: &mut TaskReport) -> Result<(), Ending> {
    match ended.exit {
        Exit::Code(code) => report.exit_code = code,
        Exit::Stopped(Stop::Cancelled) => return Err(Ending::Failed("cancelled".into())),
        Exit::Stopped(Stop::Leaving) => return Err(Ending::Left),
        Exit::Stopped(Stop::TimedOut) => {
            report.timed_out = true;
            report.stderr_tail = ended.stderr.tail_text();
            let limit = a.more.timeout_s.unwrap_or_default();
            return Err(Ending::Failed(format!("timed out after {limit} s")));
        }
    }
    if ended.out_of_memory {
        report.out_of_memory = true;
        report.stderr_tail = ended.stderr.tail_text();
        let limit = crate::size::format_size(a.memory_limit().unwrap_or_default());
        return Err(Ending::Failed(format!(
            "killed by the kernel: it used more than its memory limit of {limit} \
             (memory_limit, which defaults to memory)"
        )));
    }
    if report.exit_code != Some(0) {
        report.stderr_tail = ended.stderr.tail_text();
    }
    Ok(())
}

/// After exit code 0: keep the `tmp://` outputs in the cache and upload the others. Until they
/// are uploaded, their bytes count against the cache quota.
async fn deliver_outputs(
    ctx: &Ctx,
    a: &Assignment,
    outputs: &[PathBuf],
    report: &mut TaskReport,
) -> Result<(), String> {
    // The outputs wait on this disk until uploaded: they count against the cache quota.
    let bytes: u64 = outputs
        .iter()
        .filter_map(|p| std::fs::symlink_metadata(p).ok())
        .map(|m| m.len())
        .sum();
    ctx.cache.lock().expect("cache lock").reserve(bytes);
    ctx.report_evictions();
    let kept = keep(ctx, &a.outputs, outputs);
    let uploaded = match &kept {
        Ok(_) => upload(ctx, &a.outputs, outputs).await,
        Err(e) => Err(e.clone()),
    };
    ctx.cache.lock().expect("cache lock").release(bytes);
    ctx.report_evictions();
    match (kept, uploaded) {
        (Ok(kept), Ok(())) => {
            report.outputs = a.outputs.clone();
            report.kept = kept;
            Ok(())
        }
        (Ok(kept), Err(e)) => {
            let mut cache = ctx.cache.lock().expect("cache lock");
            for k in kept {
                cache.remove(&k.uri);
            }
            cache.take_evicted();
            Err(e)
        }
        (Err(e), _) => Err(e),
    }
}

/// Copy the captured stdout and stderr to the task's `stdout`/`stderr` URIs, if it named any (an
/// empty file when the stream had nothing).
async fn upload_logs(ctx: &Ctx, a: &Assignment, ended: &Ended) -> Result<(), String> {
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
