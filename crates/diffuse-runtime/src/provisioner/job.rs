//! A worker's job at a resource manager, as the pool and every backend see it: what it runs
//! ([`Launch`]) and where the resource manager says it stands ([`RmState`]).

use std::path::PathBuf;

/// One worker's command line and environment.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The `diffuse` executable.
    pub exe: PathBuf,
    /// Arguments after `worker`... and `worker` itself for the local backend (see
    /// [`super::PoolConfig::launch`]).
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
