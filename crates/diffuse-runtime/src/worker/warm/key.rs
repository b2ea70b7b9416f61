//! What a warm process is kept for ([`Key`]): the calls with the same key may share it.

use crate::spec::{Call, Isolation};

/// What a warm process is started for: calls with the same key may share it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// The interpreter.
    pub python: String,
    /// Modules imported before the first call.
    pub preload: Vec<String>,
    /// Code run once.
    pub setup: Option<String>,
    /// Fork per call, or reuse.
    pub isolation: Isolation,
    /// Reuse mode: the function (its input's URI, a `blob://` digest for the clients'): a
    /// process is kept for calls of one function.
    pub function: Option<String>,
    /// The user it runs as (`--task-user`): one user's process never runs another's call.
    pub uid: Option<u32>,
}

impl Key {
    /// The key of `call`, whose function is the input `function`, run as `uid`.
    pub fn of(call: &Call, function: &str, uid: Option<u32>) -> Key {
        Key {
            python: call.python.clone(),
            preload: call.preload.clone(),
            setup: call.setup.clone(),
            isolation: call.isolation,
            function: (call.isolation == Isolation::Reuse).then(|| function.to_string()),
            uid,
        }
    }
}
