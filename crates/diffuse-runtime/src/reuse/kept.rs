//! A kept result: the files a succeeded task made (its outputs and its captured output), each
//! kept in a worker's cache as an object named by its content, `result://<sha256>`.

use serde::{Deserialize, Serialize};

/// The cache object that holds bytes with this SHA-256 for reuse.
pub fn object_uri(sha256: &str) -> String {
    format!("result://{sha256}")
}

/// Whether a URI names a kept result's object.
pub fn is_result_object(uri: &str) -> bool {
    uri.starts_with("result://")
}

/// What one kept file stands for.
pub const STDOUT: &str = "stdout";
/// See [`STDOUT`].
pub const STDERR: &str = "stderr";
/// The name of a function task's result (its report's `value`) among a kept result's files.
pub const VALUE: &str = "value";

/// One file of a kept result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultFile {
    /// What it is: an output URI as the task names it (`file://...` or `tmp://...`), or
    /// [`STDOUT`] / [`STDERR`].
    pub name: String,
    /// Bytes.
    pub size: u64,
    /// Lowercase hex SHA-256; its object is [`object_uri`] of this.
    pub sha256: String,
    /// For a `file://` output: its destination's version just after it was written. A
    /// destination still at this version holds these bytes and is not written again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written: Option<String>,
}

impl ResultFile {
    /// The cache object holding its bytes.
    pub fn object(&self) -> String {
        object_uri(&self.sha256)
    }
}

/// A result kept for reuse, indexed by its task's identity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptResult {
    /// The task that made it.
    pub task: String,
    /// Its files: every output, then its captured stdout and stderr (absent when empty).
    pub files: Vec<ResultFile>,
}

impl KeptResult {
    /// Bytes it keeps (a file shared by two names counted twice).
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}
