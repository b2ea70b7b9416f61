//! A function task's function on this worker: staged once per (URI, version) as a link under
//! `<work>/.functions/`, and reused by every later call of that function, instead of a task
//! directory with `inputs/<i>/` made and removed for each call. A call of a function and
//! nothing else then makes no directory at all: on a disk where creating and deleting inodes
//! is what a short call costs most, this is most of the worker's work per call
//! (docs/performance.md, "Function tasks").
//!
//! The link keeps the function's bytes on disk even if the cache evicts its object (as a
//! running task's staged input does); functions are small, and the directory is emptied when
//! the worker starts.

use crate::proto::AssignedInput;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The directory of kept functions under the work directory `work`.
pub fn dir(work: &Path) -> PathBuf {
    work.join(".functions")
}

/// Where the function `input` is kept: under its base name (as a staged input is), in a
/// directory named by a digest of its URI and version (a new version is a new file).
pub fn path(work: &Path, input: &AssignedInput) -> PathBuf {
    let mut h = Sha256::new();
    h.update(input.uri.as_bytes());
    h.update([0]);
    h.update(input.version.as_bytes());
    let digest = hex::encode(h.finalize());
    dir(work)
        .join(&digest[..32])
        .join(crate::uri::base_name(&input.uri))
}

/// Empty the directory of kept functions (at the worker's start), and make it.
pub fn reset(work: &Path) -> std::io::Result<()> {
    let d = dir(work);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d)
}
