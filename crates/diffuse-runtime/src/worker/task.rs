//! Running one assignment: the task's directory, its staged inputs, the process, its captured
//! output, and the uploads of its outputs.

use super::stage::{read_uncached, stage, Staged};
use super::{unix_now, Ctx};
use crate::cache_dir::CacheDir;
use crate::proto::{Assignment, TaskReport, Traffic};
use crate::spec::Cmd;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

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

pub(super) async fn run_task(ctx: &Arc<Ctx>, a: Assignment) -> TaskReport {
    let started_at = unix_now();
    let dir = ctx.work.join(dir_name(&a.task, a.attempt));
    let mut report = TaskReport {
        task: a.task.clone(),
        attempt: a.attempt,
        exit_code: None,
        error: None,
        started_at,
        staged_at: started_at,
        finished_at: started_at,
        stdout: dir.join("stdout").display().to_string(),
        stderr: dir.join("stderr").display().to_string(),
        outputs: Vec::new(),
        uncached: Vec::new(),
        traffic: Traffic::default(),
    };
    let fail = |mut r: TaskReport, e: String| {
        r.error = Some(e);
        r.finished_at = unix_now();
        r
    };
    let inputs_dir = dir.join("inputs");
    let outputs_dir = dir.join("outputs");
    // Only the directories the task needs: a short task's cost is mostly file-system calls (a
    // directory and two files cost more than spawning the process on a busy disk). A task with
    // neither inputs nor outputs gets no directory of its own unless it writes output.
    let needs_dir = !a.inputs.is_empty() || !a.outputs.is_empty();
    let made = (if needs_dir {
        std::fs::create_dir_all(&dir)
    } else {
        Ok(())
    })
    .and_then(|_| {
        if a.inputs.is_empty() {
            Ok(())
        } else {
            std::fs::create_dir(&inputs_dir)
        }
    })
    .and_then(|_| {
        if a.outputs.is_empty() {
            Ok(())
        } else {
            std::fs::create_dir(&outputs_dir)
        }
    });
    if let Err(e) = made {
        return fail(report, format!("cannot create {}: {e}", dir.display()));
    }
    // The inputs' links go when the task ends, however it ends: a link keeps an evicted
    // object's bytes on disk, outside the quota's count.
    let links = (!a.inputs.is_empty()).then(|| RemoveOnDrop(inputs_dir.clone()));
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
    let result = execute(&a.cmd, &by_position, &outputs, &dir).await;
    drop(links);
    match result {
        Ok(code) => report.exit_code = code,
        Err(e) => return fail(report, e),
    }
    if report.exit_code == Some(0) {
        for (uri, path) in a.outputs.iter().zip(&outputs) {
            if let Err(e) = ctx.storage.put_file(uri, path).await {
                return fail(report, format!("output {uri}: {e}"));
            }
            report.outputs.push(uri.clone());
        }
    }
    report.finished_at = unix_now();
    report
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

fn expand(text: &str, inputs: &[PathBuf], outputs: &[PathBuf]) -> String {
    let mut s = text.to_string();
    for (i, p) in inputs.iter().enumerate() {
        s = s.replace(&format!("{{inputs[{i}]}}"), &p.display().to_string());
    }
    for (i, p) in outputs.iter().enumerate() {
        s = s.replace(&format!("{{outputs[{i}]}}"), &p.display().to_string());
    }
    s
}

/// The program's path: names without a `/` are looked up in `PATH` once and remembered, so a
/// spawn does not try every `PATH` directory in turn.
fn resolve(program: &str) -> PathBuf {
    static FOUND: std::sync::OnceLock<Mutex<HashMap<String, PathBuf>>> = std::sync::OnceLock::new();
    if program.contains('/') {
        return PathBuf::from(program);
    }
    let found = FOUND.get_or_init(Default::default);
    if let Some(p) = found.lock().expect("path cache").get(program) {
        return p.clone();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let hit = std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        });
    match hit {
        Some(p) => {
            found
                .lock()
                .expect("path cache")
                .insert(program.to_string(), p.clone());
            p
        }
        // Not found: let the spawn fail with the OS's own error for the bare name.
        None => PathBuf::from(program),
    }
}

/// Run the command; Ok(exit code, None if killed by a signal), Err(exec error). Its stdout and
/// stderr are written to `dir/stdout` and `dir/stderr`, each created at its first byte (a task
/// that prints nothing leaves no file). The process runs in `dir` if it exists, else in the
/// worker's work directory.
async fn execute(
    cmd: &Cmd,
    inputs: &[PathBuf],
    outputs: &[PathBuf],
    dir: &Path,
) -> Result<Option<i32>, String> {
    let mut command = match cmd {
        Cmd::Argv(argv) => {
            let mut c = tokio::process::Command::new(resolve(&expand(&argv[0], inputs, outputs)));
            c.args(argv[1..].iter().map(|a| expand(a, inputs, outputs)));
            c
        }
        Cmd::Shell(s) => {
            let mut c = tokio::process::Command::new("sh");
            c.arg("-c").arg(expand(s, inputs, outputs));
            c
        }
    };
    let cwd = if dir.is_dir() {
        dir
    } else {
        dir.parent().unwrap_or(dir)
    };
    command
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|e| {
        let program = match cmd {
            Cmd::Argv(a) => a[0].clone(),
            Cmd::Shell(_) => "sh".into(),
        };
        format!("exec {program}: {e}")
    })?;
    let out = tokio::spawn(capture(child.stdout.take(), dir.join("stdout")));
    let err = tokio::spawn(capture(child.stderr.take(), dir.join("stderr")));
    let status = child.wait().await.map_err(|e| format!("wait: {e}"))?;
    // A background process started by the task may hold the pipes open: give the copies a
    // moment to drain, then let the task end without it.
    for copy in [out, err] {
        match tokio::time::timeout(Duration::from_secs(1), copy).await {
            Ok(Ok(Err(e))) => return Err(format!("capturing output: {e}")),
            Ok(_) => {}
            Err(_) => {
                tracing::warn!("output still open 1 s after the task exited; not waiting for it")
            }
        }
    }
    Ok(status.code())
}

/// Copy a pipe to `path`, creating the file (and its directory) at the first byte.
async fn capture(
    pipe: Option<impl tokio::io::AsyncRead + Unpin>,
    path: PathBuf,
) -> std::io::Result<()> {
    use tokio::io::AsyncReadExt;
    let Some(mut pipe) = pipe else { return Ok(()) };
    let mut buf = vec![0u8; 64 * 1024];
    let mut file: Option<tokio::fs::File> = None;
    loop {
        let n = pipe.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        if file.is_none() {
            if let Some(parent) = path.parent() {
                tokio::fs::create_dir_all(parent).await?;
            }
            file = Some(tokio::fs::File::create(&path).await?);
        }
        file.as_mut().expect("created").write_all(&buf[..n]).await?;
    }
    if let Some(mut f) = file {
        f.flush().await?;
    }
    Ok(())
}
