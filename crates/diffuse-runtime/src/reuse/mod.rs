//! Results reused by content: a task whose identity matches one that already succeeded gets
//! that task's outputs instead of running (docs/runtime.md, "Results reused by content").
//!
//! | module | what it holds |
//! |---|---|
//! | [`identity`] | a task's identity: command, env, input digests, outputs, program digests |
//! | [`programs`] | the client's side: program files named in a command, hashed |
//! | [`kept`] | a kept result: what it is made of, as the dispatcher indexes it and a worker serves it |
//! | [`store`] | the result index on disk (SQLite): results by identity, input digests by version |

pub mod identity;
pub mod kept;
pub mod programs;
pub mod store;

pub use identity::{identity, reusable, Content, Identity};
pub use kept::{KeptResult, ResultFile};
