//! A worker's part in reusing results (docs/runtime.md, "Results reused by content"): after a
//! run the dispatcher asked it to keep, its outputs and captured output are kept in the cache as
//! `result://<sha256>` objects; and an assignment that names a kept result is carried out
//! without running anything: its files are read (from this cache or a peer's, verified like any
//! object), written to the task's outputs, and reported.
//!
//! A kept file is hard-linked into the cache where it can be (one copy on disk). It is an
//! ordinary object: counted against the quota and evicted in the cache's order, after which its
//! result cannot be reused and its task runs.

use super::ctx::Ctx;
use super::inputs::stage;
use super::taskdir::{log_name, safe_name};
use crate::proto::{AssignedInput, Assignment, KeptOutput, ReadInput, ReuseOrder, TaskReport};
use crate::reuse::kept::{object_uri, STDERR, STDOUT, VALUE};
use crate::reuse::ResultFile;
use crate::uri::is_tmp;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The inputs `a` read, with the digests its cache holds them under.
pub(super) fn read_digests(ctx: &Ctx, a: &Assignment) -> Vec<ReadInput> {
    let cache = ctx.cache.lock().expect("cache lock");
    a.inputs
        .iter()
        .filter_map(|i| {
            let (version, sha) = cache.digest(&i.uri)?;
            (version == i.version).then(|| ReadInput {
                uri: i.uri.clone(),
                version: version.to_string(),
                sha256: sha.to_string(),
            })
        })
        .collect()
}

/// Keep the file at `src` in the cache as the object of its content; its size and SHA-256.
fn keep_file(ctx: &Ctx, src: &Path) -> Result<(u64, String), String> {
    let mut cache = ctx.cache.lock().expect("cache lock");
    let temp = cache.temp_path();
    if std::fs::hard_link(src, &temp).is_err() {
        std::fs::copy(src, &temp).map_err(|e| format!("{}: {e}", src.display()))?;
    }
    let (size, sha) = crate::cache_dir::sha256_file(&temp).map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        format!("{}: {e}", src.display())
    })?;
    let uri = object_uri(&sha);
    if cache.digest(&uri).is_some() {
        let _ = std::fs::remove_file(&temp);
        return Ok((size, sha));
    }
    let stored = cache
        .commit_hashed(&temp, &uri, &sha, size, &sha, None)
        .map_err(|e| format!("{uri}: {e}"))?;
    if !stored.cached {
        cache.release_uncached(&stored.path);
        return Err(format!("{size} bytes do not fit in this worker's cache"));
    }
    Ok((size, sha))
}

/// Before its outputs are delivered: keep each output of a succeeded attempt (written at
/// `paths`) as a result file. A file that cannot be kept leaves the result unkept (the task
/// stands; it will not be reused).
pub(super) fn keep_outputs(
    ctx: &Ctx,
    a: &Assignment,
    paths: &[PathBuf],
) -> Option<Vec<ResultFile>> {
    let mut files = Vec::with_capacity(paths.len() + 2);
    for (uri, path) in a.outputs.iter().zip(paths) {
        match keep_file(ctx, path) {
            Ok((size, sha256)) => files.push(ResultFile {
                name: uri.clone(),
                size,
                sha256,
                written: None,
            }),
            Err(e) => {
                tracing::info!(task = %a.task, "result not kept: output {uri}: {e}");
                return None;
            }
        }
    }
    ctx.report_evictions();
    Some(files)
}

/// After delivery: the captured output joins the result, and each `file://` output's
/// destination version is recorded; the report says what was kept and read.
pub(super) async fn finish_result(
    ctx: &Ctx,
    a: &Assignment,
    mut files: Vec<ResultFile>,
    report: &mut TaskReport,
) {
    for f in files.iter_mut().filter(|f| !is_tmp(&f.name)) {
        f.written = ctx.storage.head(&f.name).await.ok().map(|i| i.version);
    }
    for (stream, path) in [(STDOUT, &report.stdout), (STDERR, &report.stderr)] {
        let Some(path) = path else { continue };
        match keep_file(ctx, Path::new(path)) {
            Ok((size, sha256)) => files.push(ResultFile {
                name: stream.to_string(),
                size,
                sha256,
                written: None,
            }),
            Err(e) => {
                tracing::info!(task = %a.task, "result not kept: {stream}: {e}");
                return;
            }
        }
    }
    if let Some(value) = &report.value {
        // A function task's result is kept with its files: a reuse returns it.
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(value)
            .unwrap_or_default();
        let path = ctx.work.join(format!(
            ".value-{}",
            super::taskdir::dir_name(&a.task, a.attempt)
        ));
        let kept = std::fs::write(&path, &bytes)
            .map_err(|e| e.to_string())
            .and_then(|()| keep_file(ctx, &path));
        let _ = std::fs::remove_file(&path);
        match kept {
            Ok((size, sha256)) => files.push(ResultFile {
                name: VALUE.to_string(),
                size,
                sha256,
                written: None,
            }),
            Err(e) => {
                tracing::info!(task = %a.task, "result not kept: its value: {e}");
                return;
            }
        }
    }
    ctx.report_evictions();
    report.read = read_digests(ctx, a);
    report.result = Some(files);
}

/// Carry out `order` for `a` in `dir` (made): every file read and verified, outputs written
/// (a `file://` destination still at the version the result recorded is left as it is),
/// `tmp://` outputs kept under this task's names, captured output put where this attempt's
/// would be. Any failure: the caller runs the task instead.
pub(super) async fn carry_out(
    ctx: &Arc<Ctx>,
    a: &Assignment,
    order: &ReuseOrder,
    dir: &Path,
    report: &mut TaskReport,
) -> Result<(), String> {
    let named = |n: &str| {
        a.outputs.iter().any(|o| o == n)
            || n == STDOUT
            || n == STDERR
            || (n == VALUE && a.cmd.call().is_some())
    };
    if let Some(f) = order.files.iter().find(|f| !named(&f.file.name)) {
        return Err(format!(
            "the kept result names {}, not an output of this task",
            f.file.name
        ));
    }
    let mut staged = Vec::with_capacity(order.files.len());
    for (i, rf) in order.files.iter().enumerate() {
        let dest = dir.join(format!("reuse-{i}"));
        let input = AssignedInput {
            uri: rf.file.object(),
            size: rf.file.size,
            version: rf.file.sha256.clone(),
            source: rf.source.clone(),
        };
        let (how, cached) = stage(ctx.clone(), input, dest.clone()).await?;
        how.count(&mut report.traffic);
        if !cached {
            return Err(format!("{}: larger than this worker's cache", rf.file.name));
        }
        staged.push(dest);
    }
    let mut files = Vec::with_capacity(order.files.len());
    for (rf, path) in order.files.iter().zip(&staged) {
        let mut f = rf.file.clone();
        if f.name == STDOUT || f.name == STDERR {
            let log = ctx.logs.join(log_name(&a.task, a.attempt, &f.name));
            std::fs::copy(path, &log).map_err(|e| format!("{}: {e}", log.display()))?;
            let shown = Some(log.display().to_string());
            if f.name == STDOUT {
                report.stdout = shown;
            } else {
                report.stderr = shown;
            }
        } else if f.name == VALUE {
            use base64::Engine;
            let bytes = std::fs::read(path).map_err(|e| format!("its value: {e}"))?;
            report.value = Some(base64::engine::general_purpose::STANDARD.encode(bytes));
        } else if is_tmp(&f.name) {
            report.kept.push(keep_as(ctx, &f, path)?);
        } else {
            let now = ctx.storage.head(&f.name).await.ok().map(|i| i.version);
            if now.is_none() || now != f.written {
                ctx.storage
                    .put_file(&f.name, path)
                    .await
                    .map_err(|e| format!("output {}: {e}", crate::uri::redacted(&f.name)))?;
                f.written = ctx.storage.head(&f.name).await.ok().map(|i| i.version);
            }
        }
        files.push(f);
    }
    upload_reused_logs(ctx, a, report).await?;
    report.exit_code = Some(0);
    report.outputs = a.outputs.clone();
    report.result = Some(files);
    report.reused_from = Some(order.from.clone());
    Ok(())
}

/// A reused `tmp://` output, kept under this task's name (pinned, as a run's would be).
fn keep_as(ctx: &Ctx, f: &ResultFile, path: &Path) -> Result<KeptOutput, String> {
    let mut cache = ctx.cache.lock().expect("cache lock");
    if cache
        .digest(&f.name)
        .is_some_and(|(_, sha)| sha == f.sha256)
    {
        cache.pin(&f.name);
    } else {
        let temp = cache.temp_path();
        if std::fs::hard_link(path, &temp).is_err() {
            std::fs::copy(path, &temp).map_err(|e| format!("output {}: {e}", f.name))?;
        }
        let stored = cache
            .commit_hashed(&temp, &f.name, &f.sha256, f.size, &f.sha256, None)
            .map_err(|e| format!("output {}: {e}", f.name))?;
        if !stored.cached {
            cache.release_uncached(&stored.path);
            return Err(format!(
                "output {}: does not fit in this worker's cache",
                f.name
            ));
        }
        cache.pin(&f.name);
    }
    Ok(KeptOutput {
        uri: f.name.clone(),
        size: f.size,
        sha256: f.sha256.clone(),
    })
}

/// The task's `stdout`/`stderr` URIs, written from the reused captured output (empty when the
/// result had none).
async fn upload_reused_logs(ctx: &Ctx, a: &Assignment, report: &TaskReport) -> Result<(), String> {
    for (uri, path, stream) in [
        (&a.stdout_uri, &report.stdout, STDOUT),
        (&a.stderr_uri, &report.stderr, STDERR),
    ] {
        let Some(uri) = uri else { continue };
        let uri = crate::uri::canonical(
            &uri.replace("{id}", &safe_name(&a.task))
                .replace("{attempt}", &a.attempt.to_string()),
        )
        .map_err(|e| format!("{stream}: {e}"))?;
        let empty = ctx.logs.join(format!("empty-{}", std::process::id()));
        let src = match path {
            Some(p) => PathBuf::from(p),
            None => {
                std::fs::write(&empty, b"").map_err(|e| format!("{stream}: {e}"))?;
                empty
            }
        };
        ctx.storage
            .put_file(&uri, &src)
            .await
            .map_err(|e| format!("{stream} {}: {e}", crate::uri::redacted(&uri)))?;
    }
    Ok(())
}
