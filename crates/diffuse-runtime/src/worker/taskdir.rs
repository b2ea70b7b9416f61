//! A task's directory on this worker: its name (also the name of its captured output), where
//! its inputs are staged and its outputs written, made with the task user as owner, and removed
//! however the attempt ends.
//!
//! The directory is `<cache-dir>/work/<task>.<attempt>`, made only when the task has inputs or
//! outputs, or runs as another user: a short task's cost is mostly file-system calls (a
//! directory and two files cost more than spawning the process on a busy disk). A task with
//! neither runs in the work directory.

use crate::cache_dir::CacheDir;
use std::path::{Path, PathBuf};

/// The directory of one attempt, and the paths in it.
pub(super) struct TaskDir {
    /// `<cache-dir>/work/<task>.<attempt>` (the work directory itself when not made).
    pub(super) path: PathBuf,
    /// Whether it is made (and removed) at all.
    pub(super) made: bool,
    /// `inputs/`.
    pub(super) inputs: PathBuf,
    /// `outputs/`.
    pub(super) outputs_dir: PathBuf,
    /// Where each input is staged, in the assignment's order.
    pub(super) staged: Vec<PathBuf>,
    /// Where each output is written: `outputs/<i>`.
    pub(super) outputs: Vec<PathBuf>,
    /// The owner of what is made: the task user's (uid, gid), if there is one.
    owner: Option<(u32, u32)>,
    /// However the attempt ends, its directory goes (a link in it keeps an evicted object's
    /// bytes on disk, outside the quota's count).
    _remove: Option<RemoveOnDrop>,
}

impl TaskDir {
    /// The directory of attempt `attempt` of `task` under `work`, for its inputs (by URI) and
    /// `outputs` outputs, owned by `owner` (uid, gid) if the task runs as another user. Nothing
    /// is made yet ([`TaskDir::make`]).
    pub(super) fn new<'a>(
        work: &Path,
        (task, attempt): (&str, u32),
        inputs: impl ExactSizeIterator<Item = &'a str>,
        outputs: usize,
        owner: Option<(u32, u32)>,
    ) -> TaskDir {
        let path = work.join(dir_name(task, attempt));
        let made = inputs.len() > 0 || outputs > 0 || owner.is_some();
        let inputs_dir = path.join("inputs");
        let outputs_dir = path.join("outputs");
        TaskDir {
            staged: inputs
                .enumerate()
                .map(|(i, uri)| inputs_dir.join(staged_name(i, uri)))
                .collect(),
            outputs: (0..outputs)
                .map(|i| outputs_dir.join(format!("{i}")))
                .collect(),
            _remove: made.then(|| RemoveOnDrop(path.clone())),
            path,
            made,
            inputs: inputs_dir,
            outputs_dir,
            owner,
        }
    }

    /// Stage input `i` at `path`, outside this directory (a function task's function, kept
    /// for its later calls: [`super::warm::functions`]); the directory is then made only if
    /// something else needs it.
    pub(super) fn stage_elsewhere(&mut self, i: usize, path: PathBuf) {
        self.staged[i] = path;
        let inside = self.staged.iter().any(|p| p.starts_with(&self.inputs));
        self.made = inside || !self.outputs.is_empty() || self.owner.is_some();
        if !self.made {
            self._remove = None;
        }
    }

    /// Where the task runs when it gives no `cwd`, and what `DIFFUSE_TASK_DIR` names: its
    /// directory if made, else the work directory.
    pub(super) fn scratch(&self) -> &Path {
        if self.made {
            &self.path
        } else {
            self.path.parent().unwrap_or(&self.path)
        }
    }

    /// Make the directory, as far as the task needs it.
    pub(super) fn make(&self) -> std::io::Result<()> {
        make_dirs(
            &self.path,
            self.made,
            (!self.staged.is_empty()).then_some(&self.inputs),
            (!self.outputs.is_empty()).then_some(&self.outputs_dir),
            &self.staged,
            self.owner,
        )
    }

    /// Remove `inputs/` once the task has ended (its links hold evicted objects' bytes).
    pub(super) fn remove_inputs(&self) {
        if self.made {
            let _ = std::fs::remove_dir_all(&self.inputs);
        }
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
    // Inputs staged elsewhere (a kept function) have their own directory.
    let each = staged
        .iter()
        .filter(|p| p.starts_with(dir))
        .filter_map(|p| p.parent());
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
