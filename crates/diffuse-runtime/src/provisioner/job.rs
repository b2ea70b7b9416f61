//! A worker's job at a resource manager, as the pool and every backend see it: what it runs
//! ([`Launch`]), where the resource manager says it stands ([`RmState`]), how a listing shows
//! it ([`Job`]) and whether a name is one of the pool's ([`is_request_name`]).

use std::path::PathBuf;

/// One worker's command line and environment.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The `diffuse` executable.
    pub exe: PathBuf,
    /// The arguments of `diffuse worker` (after `worker`: each backend puts the command line
    /// together; see [`super::PoolConfig::launch`]).
    pub args: Vec<String>,
    /// Environment added for it.
    pub env: Vec<(String, String)>,
    /// Its cores.
    pub cores: u32,
    /// The dispatcher's URL.
    pub dispatcher: String,
}

/// A resource manager's view of one job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RmState {
    /// Waiting for resources.
    Pending,
    /// Running.
    Running,
    /// Ended, and why.
    Ended(String),
}

/// One job as a resource manager lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// Its id.
    pub id: String,
    /// Its name: the request it was submitted for.
    pub name: String,
    /// Where it stands.
    pub state: RmState,
}

/// Whether `name` is a request name of the pool whose names start with `prefix`:
/// `<prefix>-<n>`. A backend that lists by name keeps only those jobs.
pub fn is_request_name(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}
