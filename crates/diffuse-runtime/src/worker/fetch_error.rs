//! Why fetching an object failed: a full disk, after which room can be made and the fetch tried
//! again, or anything else, which fails the task (or, from a peer, sends the reader to storage).

use crate::storage::StorageError;

/// Why a fetch failed.
pub(super) enum Failed {
    /// The cache's disk is full: room can be made and the fetch tried again.
    NoSpace,
    /// Anything else: the task fails with this.
    Other(String),
}

impl Failed {
    /// A file-system error: a full disk is [`Failed::NoSpace`].
    pub(super) fn io(e: std::io::Error) -> Failed {
        if e.kind() == std::io::ErrorKind::StorageFull {
            Failed::NoSpace
        } else {
            Failed::Other(e.to_string())
        }
    }
}

impl From<StorageError> for Failed {
    fn from(e: StorageError) -> Failed {
        match e {
            StorageError::NoSpace(_) => Failed::NoSpace,
            StorageError::NotFound(u) => Failed::Other(format!("not found: {u}")),
            e => Failed::Other(e.to_string()),
        }
    }
}
