//! Messages between the dispatcher and its workers. They travel as JSON text frames over one
//! WebSocket per worker (`GET /v1/workers/connect`, worker token); framing is the WebSocket
//! protocol's, so there is no hand-written wire parser.
//!
//! Order on a connection: the worker sends `Hello` first; the dispatcher answers `Welcome`, then
//! any number of `Run`/`Drop`; the worker sends `Cached`/`Evicted` as its cache changes (a
//! `Cached` for an object a task fetched is sent before that task's `Finished`) and a `Heartbeat`
//! every `heartbeat_ms`. A worker silent for the dispatcher's heartbeat timeout is given up and
//! its tasks are run again elsewhere; a late `Finished` from it is refused by attempt number.
//! The welcome tells the worker that timeout, and the worker gives up a connection whose data
//! stays unacknowledged as long (a network cut that neither side hears).

//!
//! Both ends say which version of this protocol they speak (`protocol` in `Hello` and
//! `Welcome`); a dispatcher refuses a worker of another version with a close frame that says
//! so, and a worker refuses a dispatcher of another version, rather than either misreading
//! messages of a shape it does not know.

use crate::spec::{Cmd, TaskDef, TaskMore};
use serde::{Deserialize, Serialize};

/// The version of this protocol. 1 is every build before versions were sent (a `Hello` or
/// `Welcome` without `protocol`); 2 added `Started`, `Withdraw` and held assignments, and the
/// version itself. Raise it when a message changes in a way the other end cannot read.
pub const PROTOCOL: u32 = 2;

/// The version of a peer that sends none.
fn unversioned() -> u32 {
    1
}

/// Read a worker's message. `Finished`, most of what workers send, is read straight into its
/// report when its tag comes first (as serde writes it), instead of through the buffering serde
/// does for an internally tagged enum, which costs 2-4 times the report's own parse
/// (`cargo bench -p diffuse-runtime --bench messages`); anything else, or a report that does not
/// read so, is read the general way.
pub fn read_to_dispatcher(text: &str) -> serde_json::Result<ToDispatcher> {
    if let Some(r) = read_tagged_first::<TaskReport>(text, r#"{"type":"finished","#) {
        return Ok(ToDispatcher::Finished(Box::new(r)));
    }
    serde_json::from_str(text)
}

/// Read a dispatcher's message: `Run`, most of what a worker is sent, straight into its
/// assignment when its tag comes first, as [`read_to_dispatcher`] does for reports.
pub fn read_to_worker(text: &str) -> serde_json::Result<ToWorker> {
    if let Some(a) = read_tagged_first::<Assignment>(text, r#"{"type":"run","#) {
        return Ok(ToWorker::Run(Box::new(a)));
    }
    serde_json::from_str(text)
}

/// `text` read as a `T` if it begins with `head` (an object's tag member and its comma): the
/// rest is the variant's own members.
fn read_tagged_first<T: serde::de::DeserializeOwned>(text: &str, head: &str) -> Option<T> {
    let rest = text.strip_prefix(head)?;
    let mut body = String::with_capacity(rest.len() + 1);
    body.push('{');
    body.push_str(rest);
    serde_json::from_str(&body).ok()
}

/// Why a dispatcher refuses a worker that speaks protocol `theirs`: the close frame's reason
/// (at most 123 bytes, as WebSocket allows).
pub fn protocol_refusal(theirs: u32) -> String {
    format!(
        "worker protocol {theirs} refused: this dispatcher speaks {PROTOCOL} (diffuse {}); run one version",
        env!("CARGO_PKG_VERSION")
    )
}

/// Bytes each end of a worker's session buffers each way (the WebSocket library's default is
/// 128 KiB each way per connection, which a pool of thousands pays many times over). Messages
/// are small; a larger one is read in several chunks.
pub const SESSION_BUFFER: usize = 16 << 10;

/// The WebSocket settings of a worker's end of its session: [`SESSION_BUFFER`] each way, and
/// messages up to 64 MiB (a hello listing a large cache).
pub fn ws_config() -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .read_buffer_size(SESSION_BUFFER)
        .write_buffer_size(SESSION_BUFFER)
        .max_message_size(Some(64 << 20))
}

/// An object a worker holds, with the source version it was fetched at.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// Object URI.
    pub uri: String,
    /// Source version (size, mtime or ETag) when fetched.
    pub version: String,
}

/// Worker to dispatcher.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToDispatcher {
    /// First message: who the worker is and what it already caches.
    Hello {
        /// The protocol version it speaks ([`PROTOCOL`]; 1 when absent).
        #[serde(default = "unversioned")]
        protocol: u32,
        /// Worker name (host name or given).
        name: String,
        /// Task slots: its cores.
        slots: u32,
        /// Memory tasks may ask for, bytes (None: not counted).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        memory: Option<u64>,
        /// GPUs.
        #[serde(default)]
        gpus: u32,
        /// Scratch disk tasks may ask for, bytes (None: not counted).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        disk: Option<u64>,
        /// Cache quota, bytes.
        cache_quota: u64,
        /// Base URL of its peer data server (`http://host:port`).
        peer_url: String,
        /// Objects already in its cache directory.
        held: Vec<Held>,
        /// The elastic pool's request this worker answers (`DIFFUSE_POOL_REQUEST`), when the
        /// dispatcher's provisioner started it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<String>,
        /// Seconds until it leaves on its own (its batch job's time limit less a margin).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        leaves_in_s: Option<f64>,
        /// Its cache's eviction policy (how cache hand-off ranks what it holds).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        eviction: Option<diffuse_core::EvictionPolicy>,
        /// Its rack (`--rack`): MixApart's rack-local tier, and peers in its rack read first.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rack: Option<String>,
    },
    /// The worker now caches these objects.
    Cached {
        /// Objects added.
        objects: Vec<Held>,
    },
    /// The worker dropped these objects (evicted, stale or corrupt).
    Evicted {
        /// URIs removed.
        uris: Vec<String>,
    },
    /// An attempt of a task ended.
    Finished(Box<TaskReport>),
    /// An attempt held ready (`Assignment::held`) got its cores and starts now.
    Started {
        /// Task id.
        task: String,
        /// Attempt.
        attempt: u32,
    },
    /// Still alive.
    Heartbeat,
    /// Its machine's 1-minute load average (`/proc/loadavg`), every few seconds (DAD's load),
    /// and how full its cache is (the dashboard's).
    Load {
        /// The load average.
        load1: f64,
        /// Bytes its cache holds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache_used: Option<u64>,
        /// Objects its cache holds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache_objects: Option<u64>,
        /// Its warm Python processes (docs/warm.md): how many, calls run, resident bytes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        warm: Option<WarmUse>,
    },
    /// The answer to a `Lookup`: one result per URI asked.
    LookedUp {
        /// The request's id.
        id: u64,
        /// Results.
        results: Vec<LookupResult>,
    },
    /// A `Fetch` of this object failed (the copy is not in the cache); the dispatcher's
    /// transfer scheduler gives its budget back.
    FetchFailed {
        /// The URI.
        uri: String,
        /// Why.
        error: String,
    },
    /// The worker is stopping (told to, or by a signal): its running tasks were stopped, not
    /// crashed, and should run elsewhere. The connection closes after this.
    Leaving,
    /// Bytes it received from one source and how long that took (for bandwidth prediction):
    /// one per source of each fetch.
    Transferred {
        /// The peer's base URL, or None for persistent storage.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<String>,
        /// Bytes received.
        bytes: u64,
        /// Seconds from the first request to the last byte.
        seconds: f64,
    },
    /// A peer's copy of this object did not match the digest the peer recorded for it: the
    /// dispatcher has the holder check it (`Verify`).
    BadCopy {
        /// The URI.
        uri: String,
        /// The peer's base URL.
        peer: String,
    },
}

/// Size and version of one looked-up input, or why it cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LookupResult {
    /// The URI asked.
    pub uri: String,
    /// Bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Source version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Why it cannot be read (`not found: <uri>`, refused, timed out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Objects this large (bytes) are read from several holders at once, in chunks; smaller ones
/// from one, where the extra requests would cost more than they save.
pub const MULTI_SOURCE_MIN: u64 = 16 << 20;

/// Where a worker reads one input from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum InputSource {
    /// Its own cache (or a fetch of it already under way on that worker).
    Local,
    /// A peer's cache: `GET {url}/v1/cache/{key}` with the worker token.
    Peer {
        /// Peer base URL.
        url: String,
        /// Other peers holding it: a large object is fetched in chunks from all of them at
        /// once (GDS's multi-source transfer; `worker::multi`); a small one from the next of
        /// them when a read from `url` fails, before shared storage.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        also: Vec<String>,
    },
    /// Persistent storage.
    Storage,
}

/// One input of an assignment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssignedInput {
    /// Object URI.
    pub uri: String,
    /// Size in bytes, as stat'ed at submission.
    pub size: u64,
    /// Source version at submission; a cached copy with another version is stale.
    pub version: String,
    /// Where to read it from.
    pub source: InputSource,
}

/// Run one attempt of a task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    /// Task id.
    pub task: String,
    /// Attempt number; reported back with the result.
    pub attempt: u32,
    /// Program.
    pub cmd: Cmd,
    /// Inputs in the task's order (distinct).
    pub inputs: Vec<AssignedInput>,
    /// Output URIs.
    pub outputs: Vec<String>,
    /// Whether inputs go through the worker's cache. False under FA, whose tasks read every
    /// input from persistent storage and leave nothing behind (no data diffusion).
    #[serde(default = "yes")]
    pub caching: bool,
    /// For each input as written in the task (repeats included), its index in `inputs`;
    /// empty when the task lists no input twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub positions: Vec<u32>,
    /// The task's optional fields, whole, under their task-file names (`cores`, `gpus`,
    /// `timeout_s`, `env`, `eviction_priority`, ...), as the worker is to run it: see
    /// [`Assignment::new`]. A field added to [`TaskMore`] reaches the worker here without a
    /// change to this message.
    #[serde(flatten)]
    pub more: TaskMore,
    /// Where to copy the captured stdout and stderr (`{id}` and `{attempt}` expanded): the
    /// task's `stdout` and `stderr`, under the names workers have always read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_uri: Option<String>,
    /// See `stdout_uri`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_uri: Option<String>,
    /// Keep this attempt's result for reuse if it succeeds: its outputs and captured output as
    /// `result://<sha256>` cache objects, listed in the report with the digests of the inputs
    /// it read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_result: bool,
    /// Do not run: an identical task's kept result stands for this one. Its files are read
    /// from their sources (verified), written to this task's outputs, and reported; if one
    /// cannot be read, the task runs instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse: Option<Box<ReuseOrder>>,
    /// Sent ahead of a free core (`--ready-tasks`): the worker says `Started` when it starts
    /// it, before its process runs, so that a crash of the worker is counted against it only
    /// then.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
}

/// A kept result to stand for an assignment's task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReuseOrder {
    /// The task that made it.
    pub from: String,
    /// Its files, each with where to read its object from.
    pub files: Vec<ReuseFile>,
}

/// One file of a [`ReuseOrder`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReuseFile {
    /// The file.
    #[serde(flatten)]
    pub file: crate::reuse::ResultFile,
    /// Where its object is.
    pub source: InputSource,
}

/// An input an attempt read, with its content's digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadInput {
    /// URI.
    pub uri: String,
    /// Source version it was read at.
    pub version: String,
    /// Lowercase hex SHA-256.
    pub sha256: String,
}

impl Assignment {
    /// Attempt `attempt` of `task`, reading `inputs` (from where the dispatcher chose), with
    /// `task_timeout` as its time limit unless it has one. Its fields go whole, but as the
    /// worker runs them, on the names workers of either version read: `memory` is the limit the
    /// kernel enforces (the task's `memory_limit`, else its `memory`; the name it had when the
    /// request was the limit), `stdout`/`stderr` travel as `stdout_uri`/`stderr_uri`, and what
    /// only the dispatcher reads stays behind: `after` (long), and `job_policy` and `hint`,
    /// whose values a worker checks strictly, so that a later dispatcher with a new policy name
    /// or hint field cannot send a worker a message it refuses.
    pub fn new(
        task: &TaskDef,
        attempt: u32,
        inputs: Vec<AssignedInput>,
        caching: bool,
        positions: Vec<u32>,
        task_timeout: Option<std::time::Duration>,
    ) -> Assignment {
        let mut more = task.more.as_deref().cloned().unwrap_or_default();
        more.memory = more.enforced_memory();
        more.memory_limit = None;
        more.timeout_s = more.timeout_s.or(task_timeout.map(|t| t.as_secs_f64()));
        more.after = Vec::new();
        more.job_policy = None;
        more.hint = None;
        more.reuse = None;
        more.programs = Default::default();
        Assignment {
            task: task.id.clone(),
            attempt,
            cmd: task.cmd.clone(),
            inputs,
            outputs: task.outputs.to_vec(),
            caching,
            positions,
            stdout_uri: more.stdout.take(),
            stderr_uri: more.stderr.take(),
            more,
            keep_result: false,
            held: false,
            reuse: None,
        }
    }

    /// Cores granted (`DIFFUSE_CORES`).
    pub fn cores(&self) -> u32 {
        self.more.cores.unwrap_or(1)
    }

    /// GPUs granted; the worker picks which.
    pub fn gpus(&self) -> u32 {
        self.more.gpus.unwrap_or(0)
    }

    /// Memory limit, bytes, enforced where the worker can make memory cgroups; `None` for none.
    pub fn memory_limit(&self) -> Option<u64> {
        self.more.enforced_memory()
    }
}

fn yes() -> bool {
    true
}

/// Dispatcher to worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToWorker {
    /// Accepted: the worker's node id and heartbeat interval.
    Welcome {
        /// The protocol version it speaks ([`PROTOCOL`]; 1 when absent).
        #[serde(default = "unversioned")]
        protocol: u32,
        /// Node id in the dispatcher.
        node: u32,
        /// Send a heartbeat this often.
        heartbeat_ms: u64,
        /// The dispatcher gives up a worker silent this long: the worker gives up the
        /// connection when what it sends goes unacknowledged this long (a network cut), so both
        /// sides drop it at about the same time. Absent from older dispatchers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        heartbeat_timeout_ms: Option<u64>,
    },
    /// Run an attempt.
    Run(Box<Assignment>),
    /// Drop these objects from the cache (their source changed).
    Drop {
        /// URIs.
        uris: Vec<String>,
    },
    /// Finish running tasks' reports, then exit.
    Shutdown,
    /// Copy these objects into the cache (a worker about to be released hands off what only
    /// it holds): each is fetched as a task's input would be, and reported `Cached`.
    Fetch {
        /// The objects, each with its source (a peer).
        inputs: Vec<AssignedInput>,
    },
    /// Look up the size and version of each URI, each within `timeout_ms`; answer `LookedUp`.
    Lookup {
        /// Request id, returned in the answer.
        id: u64,
        /// Canonical URIs.
        uris: Vec<String>,
        /// Most time one lookup may take.
        timeout_ms: u64,
    },
    /// Read persistent storage at most this fast from now on (this worker's share of
    /// `--storage-bandwidth-cap`; None: no limit).
    StorageRate {
        /// Bytes per second.
        bytes_per_s: Option<f64>,
    },
    /// Hash these held objects again and drop any that no longer match their recorded digest
    /// (reported `Evicted`): a reader found a bad copy.
    Verify {
        /// URIs.
        uris: Vec<String>,
    },
    /// Stop an attempt (its task was cancelled): its whole process group is killed, and it is
    /// reported as ended.
    Cancel {
        /// Task id.
        task: String,
        /// Attempt.
        attempt: u32,
    },
    /// Give back an attempt held ready if it has not started (reported `withdrawn`); one that
    /// has started runs on as if nothing was asked.
    Withdraw {
        /// Task id.
        task: String,
        /// Attempt.
        attempt: u32,
    },
}

/// Bytes and accesses by source for one task.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Traffic {
    /// Accesses served by the local cache.
    pub local: u64,
    /// Accesses served by a peer.
    pub peer: u64,
    /// Accesses served by persistent storage.
    pub storage: u64,
    /// Bytes read from the local cache.
    pub bytes_local: u64,
    /// Bytes read from peers.
    pub bytes_peer: u64,
    /// Bytes read from persistent storage.
    pub bytes_storage: u64,
}

impl Traffic {
    /// Nothing read.
    pub fn is_zero(&self) -> bool {
        *self == Traffic::default()
    }
}

/// What a worker's warm Python processes hold (docs/warm.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmUse {
    /// Warm processes alive.
    pub processes: u32,
    /// Calls run since the worker started.
    pub calls: u64,
    /// Their resident memory, bytes (pages shared by a fork counted in each).
    pub rss: u64,
}

/// An intermediate output a worker keeps for the tasks that read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptOutput {
    /// `tmp://NAME`.
    pub uri: String,
    /// Bytes.
    pub size: u64,
    /// Lowercase hex SHA-256: also its version.
    pub sha256: String,
}

/// How an attempt ended.
///
/// It travels and is journaled compact: a field at its default (none, empty, zero, false) is
/// left out, and read back as that default. [`full_report_json`] writes the fields every
/// report had before (`exit_code`, `error`, `stdout`, `stderr`, `outputs`, `uncached`,
/// `traffic`) back in, for the API's readers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskReport {
    /// Task id.
    pub task: String,
    /// Attempt number from the assignment.
    pub attempt: u32,
    /// Process exit code (None: not run, or killed by a signal).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why it failed before or instead of running (`not found: <uri>`, exec error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Unix time when staging began.
    pub started_at: f64,
    /// Unix time when staging ended and the process started.
    pub staged_at: f64,
    /// Unix time when it ended.
    pub finished_at: f64,
    /// Path of the captured standard output on the worker; None if it printed nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// Path of the captured standard error on the worker; None if it printed nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// The last 4 KiB of a failed attempt's stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
    /// Why its captured output could not be kept whole (a full disk); the task's result stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_error: Option<String>,
    /// The attempt was stopped at its time limit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    /// Its memory cgroup killed it (it used more than its memory limit).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub out_of_memory: bool,
    /// The ids of the GPUs it was given (its `CUDA_VISIBLE_DEVICES`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<String>,
    /// Where each output was written.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
    /// Inputs read without caching because they are larger than the cache quota.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub uncached: Vec<String>,
    /// Its `tmp://` outputs, kept in this worker's cache (only when it succeeded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<KeptOutput>,
    /// With `keep_result`, on success: the inputs it read and their digests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<ReadInput>,
    /// With `keep_result`, on success: its result's files, kept in this worker's cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Vec<crate::reuse::ResultFile>>,
    /// It did not run: the kept result of this task stands for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused_from: Option<String>,
    /// It was to reuse a kept result but ran, because of this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse_failed: Option<String>,
    /// A `tmp://` input no copy of which could be read: it waits for the object to be made
    /// again, and runs again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_input: Option<String>,
    /// It was held ready and given back unstarted, as the dispatcher asked (`Withdraw`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub withdrawn: bool,
    /// An input could not be staged because the worker's cache disk is full with nothing left
    /// to evict: the worker's fault, not the task's, so the task runs again elsewhere.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_room: bool,
    /// A function task's result (docs/warm.md): the bytes its entry returned, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// A function task's result over 1 MiB: the blob the worker stored it as
    /// (`blob://<sha256>`, read with `GET /v1/blobs/{sha256}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_blob: Option<String>,
    /// Set by the dispatcher, not the worker: whether the task's placement hint held (it ran
    /// on the worker it named). Absent for a task without a hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint_held: Option<bool>,
    /// Traffic by source.
    #[serde(skip_serializing_if = "Traffic::is_zero")]
    pub traffic: Traffic,
}

impl Default for TaskReport {
    fn default() -> TaskReport {
        TaskReport::empty()
    }
}

/// A report as its JSON reader expects it, from its compact form ([`TaskReport`]): the fields
/// every report carried before reports were compact, each at its default where absent
/// (`exit_code`, `error`, `stdout` and `stderr` null, `outputs` and `uncached` empty, `traffic`
/// all zero). Anything that is not a report (`{}` for a task that never ran) is returned as is.
pub fn full_report_json(stored: &str) -> String {
    let Ok(serde_json::Value::Object(mut m)) = serde_json::from_str(stored) else {
        return stored.to_string();
    };
    if !(m.contains_key("task") && m.contains_key("attempt")) {
        return stored.to_string();
    }
    for key in ["exit_code", "error", "stdout", "stderr"] {
        m.entry(key).or_insert(serde_json::Value::Null);
    }
    for key in ["outputs", "uncached"] {
        m.entry(key).or_insert_with(|| serde_json::json!([]));
    }
    // Traffic's fields from the type itself, each at its default (0).
    let zero = serde_json::to_value(Traffic::default()).expect("traffic serializes");
    let traffic = m.entry("traffic").or_insert_with(|| serde_json::json!({}));
    if let (serde_json::Value::Object(t), serde_json::Value::Object(zero)) = (traffic, zero) {
        for (key, value) in zero {
            t.entry(key).or_insert(value);
        }
    }
    serde_json::Value::Object(m).to_string()
}

impl TaskReport {
    /// The report of attempt `a` before it has run: every time set to `at` (Unix seconds),
    /// nothing else known.
    pub fn blank(a: &Assignment, at: f64) -> TaskReport {
        TaskReport {
            task: a.task.clone(),
            attempt: a.attempt,
            started_at: at,
            staged_at: at,
            finished_at: at,
            ..TaskReport::empty()
        }
    }

    /// A report with nothing in it (task "", attempt 0, times 0).
    pub fn empty() -> TaskReport {
        TaskReport {
            task: String::new(),
            attempt: 0,
            exit_code: None,
            error: None,
            started_at: 0.0,
            staged_at: 0.0,
            finished_at: 0.0,
            stdout: None,
            stderr: None,
            stderr_tail: None,
            output_error: None,
            timed_out: false,
            out_of_memory: false,
            gpus: Vec::new(),
            outputs: Vec::new(),
            uncached: Vec::new(),
            kept: Vec::new(),
            read: Vec::new(),
            result: None,
            reused_from: None,
            reuse_failed: None,
            lost_input: None,
            no_room: false,
            withdrawn: false,
            value: None,
            value_blob: None,
            hint_held: None,
            traffic: Traffic::default(),
        }
    }

    /// Whether the attempt succeeded.
    pub fn succeeded(&self) -> bool {
        self.error.is_none() && self.exit_code == Some(0) && !self.timed_out
    }

    /// Whether another attempt might succeed where this one failed: its program ran and exited
    /// non-zero or was killed, or it reached its time limit. Failures that would repeat (an input
    /// not found, a program that cannot be started, an output that cannot be written) are not.
    pub fn retryable(&self) -> bool {
        !self.succeeded() && (self.timed_out || self.error.is_none())
    }

    /// Why it failed, in a few words.
    pub fn failure(&self) -> String {
        if let Some(e) = &self.error {
            e.clone()
        } else if let Some(c) = self.exit_code {
            format!("exit code {c}")
        } else {
            "killed by a signal".into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_assignment_carries_the_task_fields_on_the_names_workers_read() {
        let def = crate::spec::parse_tasks(
            r#"{"id":"t","cmd":"x","cores":2,"memory":"1MB","memory_limit":"2MB","gpus":1,"env":{"A":"1"},"stdout":"file:///l/{id}.out","eviction_priority":3,"after":["s"],"job":"j","job_policy":"mcu","hint":{"node":"w1"}}"#,
        )
        .unwrap()
        .remove(0);
        let a = Assignment::new(&def, 1, vec![], true, vec![], Some(Duration::from_secs(7)));
        let v = serde_json::to_value(ToWorker::Run(Box::new(a.clone()))).unwrap();
        // The names and meanings an Assignment had when it listed these fields one by one:
        // `memory` is the enforced limit, the dispatcher's default time limit is filled in.
        for (key, value) in [
            ("cores", serde_json::json!(2)),
            ("memory", serde_json::json!(2_000_000)),
            ("gpus", serde_json::json!(1)),
            ("timeout_s", serde_json::json!(7.0)),
            ("env", serde_json::json!({"A": "1"})),
            ("stdout_uri", serde_json::json!("file:///l/{id}.out")),
            ("eviction_priority", serde_json::json!(3)),
            ("job", serde_json::json!("j")),
        ] {
            assert_eq!(v[key], value, "{key} in {v}");
        }
        // What only the dispatcher reads stays behind (a worker checks a policy name and a
        // hint strictly: a later dispatcher's new name would make it refuse the message).
        for gone in [
            "memory_limit",
            "stdout",
            "stderr_uri",
            "after",
            "job_policy",
            "hint",
        ] {
            assert!(v.get(gone).is_none(), "{gone} in {v}");
        }
        let back: ToWorker = serde_json::from_value(v).unwrap();
        assert_eq!(back, ToWorker::Run(Box::new(a)));
        // What a dispatcher sent before the fields went whole reads the same.
        let old = r#"{"type":"run","task":"t","attempt":1,"cmd":"x","inputs":[],"outputs":[],"cores":2,"memory":2000000,"gpus":1,"timeout_s":7.0,"env":{"A":"1"},"stdout_uri":"file:///l/{id}.out","eviction_priority":3,"some_later_field":1}"#;
        let ToWorker::Run(a) = serde_json::from_str::<ToWorker>(old).unwrap() else {
            panic!("not a run")
        };
        assert_eq!(
            (a.cores(), a.memory_limit(), a.gpus(), a.more.timeout_s),
            (2, Some(2_000_000), 1, Some(7.0))
        );
        assert_eq!(
            (
                a.more.env["A"].as_str(),
                a.stdout_uri.as_deref(),
                a.more.eviction_priority
            ),
            ("1", Some("file:///l/{id}.out"), 3)
        );
        assert!(a.caching);
    }

    #[test]
    fn the_fast_reads_of_run_and_finished_agree_with_the_general_one() {
        let report = TaskReport {
            task: "t".into(),
            attempt: 3,
            exit_code: Some(1),
            error: Some("exec x: not found".into()),
            stdout: Some("/l/t.out".into()),
            traffic: Traffic {
                peer: 1,
                bytes_peer: 9,
                ..Traffic::default()
            },
            ..TaskReport::empty()
        };
        let finished = ToDispatcher::Finished(Box::new(report));
        let text = serde_json::to_string(&finished).unwrap();
        assert!(text.starts_with(r#"{"type":"finished","#), "{text}");
        assert_eq!(read_to_dispatcher(&text).unwrap(), finished);
        // The tag elsewhere, other messages, and bad input take the general way.
        let rest = text.replacen(r#""type":"finished","#, "", 1);
        let moved = format!(r#"{},"type":"finished"}}"#, &rest[..rest.len() - 1]);
        assert_eq!(read_to_dispatcher(&moved).unwrap(), finished);
        let started = ToDispatcher::Started {
            task: "t".into(),
            attempt: 1,
        };
        assert_eq!(
            read_to_dispatcher(&serde_json::to_string(&started).unwrap()).unwrap(),
            started
        );
        assert!(read_to_dispatcher(r#"{"type":"finished","attempt":"x"}"#).is_err());
        assert!(read_to_dispatcher(r#"{"type":"finished","#).is_err());
        let run = serde_json::from_str::<ToWorker>(
            r#"{"type":"run","task":"t","attempt":1,"cmd":"x","inputs":[],"outputs":[],"cores":2}"#,
        )
        .unwrap();
        let text = serde_json::to_string(&run).unwrap();
        assert!(text.starts_with(r#"{"type":"run","#), "{text}");
        assert_eq!(read_to_worker(&text).unwrap(), run);
        let drop = ToWorker::Drop {
            uris: vec!["file:///x".into()],
        };
        assert_eq!(
            read_to_worker(&serde_json::to_string(&drop).unwrap()).unwrap(),
            drop
        );
    }

    #[test]
    fn round_trips_as_tagged_json() {
        let m = ToWorker::Run(Box::new(Assignment {
            task: "t1".into(),
            attempt: 2,
            cmd: Cmd::Shell("true".into()),
            inputs: vec![AssignedInput {
                uri: "file:///d/a".into(),
                size: 3,
                version: "3:1".into(),
                source: InputSource::Peer {
                    url: "http://127.0.0.1:9".into(),
                    also: Vec::new(),
                },
            }],
            outputs: vec![],
            caching: true,
            positions: vec![],
            more: TaskMore {
                memory: Some(5_000_000),
                ..TaskMore::default()
            },
            keep_result: true,
            reuse: None,
            held: false,
            stdout_uri: None,
            stderr_uri: None,
        }));
        let text = serde_json::to_string(&m).unwrap();
        assert!(
            text.contains("\"type\":\"run\"") && text.contains("\"from\":\"peer\""),
            "{text}"
        );
        // The limit keeps the wire name it had when the request was the limit, so workers and
        // dispatchers of either version agree on it.
        assert!(
            text.contains("\"memory\":5000000") && !text.contains("memory_limit"),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<ToWorker>(&text).unwrap(), m);
        let h: ToDispatcher = serde_json::from_str(r#"{"type":"heartbeat"}"#).unwrap();
        assert_eq!(h, ToDispatcher::Heartbeat);
        let l: ToDispatcher = serde_json::from_str(r#"{"type":"load","load1":1.5}"#).unwrap();
        assert_eq!(
            l,
            ToDispatcher::Load {
                load1: 1.5,
                cache_used: None,
                cache_objects: None,
                warm: None
            }
        );
    }
}
