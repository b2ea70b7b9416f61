//! One task: [`TaskDef`] holds what every task has (`id`, `cmd`, `inputs`, `outputs`) and boxes
//! the rest in [`TaskMore`], which most tasks leave empty (a dispatcher keeps millions of tasks).
//!
//! [`TaskMore`] is where a task's optional fields are declared, once: its serde form is the task
//! file's (a task file's object is `id`, `cmd`, `inputs`, `outputs` and `TaskMore`'s fields side
//! by side, read in one pass by [`super::one_pass`]), the journal's, and the part of a worker's
//! [`crate::proto::Assignment`] that comes from the task. [`TaskWire::check`] then checks what
//! the types alone do not (ranges, URIs, fields that depend on each other).

pub use super::call::Call;
use super::error::SpecError;
use super::values;
use crate::placeholder::Kind;
use crate::uri::Scheme;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::sync::Arc;

/// How a task's program is given: in JSON an argv list or a string (the task's `cmd`), or a
/// function call (its `call`, [`Call`]). Shared (`Arc`): tasks often run one program with the
/// same arguments (their inputs differ through `{inputs[i]}`), and the dispatcher's task table
/// keeps such a command once for all of them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Cmd {
    /// An argv list, run directly.
    Argv(Arc<[String]>),
    /// A string, run by `sh -c`.
    Shell(Arc<str>),
    /// A Python function called in a warm process (docs/warm.md).
    Call(Arc<Call>),
}

impl Cmd {
    /// The call, for a function task.
    pub fn call(&self) -> Option<&Call> {
        match self {
            Cmd::Call(c) => Some(c),
            _ => None,
        }
    }
}

impl Serialize for Cmd {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Cmd::Argv(argv) => argv[..].serialize(s),
            Cmd::Shell(line) => s.serialize_str(line),
            Cmd::Call(call) => call.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Cmd {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Cmd;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an argv list, a command string or a call")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Cmd, A::Error> {
                Call::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(|c| Cmd::Call(Arc::new(c)))
            }
            fn visit_str<E: de::Error>(self, line: &str) -> Result<Cmd, E> {
                Ok(Cmd::Shell(line.into()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Cmd, A::Error> {
                let mut argv = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
                while let Some(arg) = seq.next_element::<String>()? {
                    argv.push(arg);
                }
                Ok(Cmd::Argv(argv.into()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A placement hint: run on the worker named `node` (or `slot`, `NAME/INDEX`). Hard (`strict`):
/// only there, failing if that worker leaves for good. Soft: there if it has a free slot within
/// `wait_s` (default 1 s) of the task being queued, else anywhere by the policy. See
/// docs/runtime.md, "Placement hints".
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hint {
    /// The worker's name (`diffuse worker --name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `NAME/INDEX`: the worker `NAME`; INDEX must be below its slot count. A worker's slots are
    /// interchangeable (a task is not pinned to a CPU), so this places the task as `node` does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    /// Hard (true) or soft (false, the default).
    #[serde(default)]
    pub strict: bool,
    /// Soft only: seconds it waits for that worker (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_s: Option<f64>,
}

/// How long a soft hint waits for its worker unless it says.
pub const DEFAULT_HINT_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl Hint {
    /// The worker's name.
    pub fn name(&self) -> &str {
        match (&self.node, &self.slot) {
            (Some(n), _) => n,
            (None, Some(s)) => s.rsplit_once('/').map_or(s.as_str(), |(n, _)| n),
            (None, None) => "",
        }
    }

    /// The slot index of a `slot` hint.
    pub fn slot_index(&self) -> Option<u32> {
        self.slot.as_ref()?.rsplit_once('/')?.1.parse().ok()
    }

    /// How long a soft hint waits.
    pub fn wait(&self) -> std::time::Duration {
        self.wait_s
            .map_or(DEFAULT_HINT_WAIT, std::time::Duration::from_secs_f64)
    }

    fn check(&self) -> Result<(), String> {
        match (&self.node, &self.slot) {
            (Some(_), Some(_)) | (None, None) => {
                return Err("name either a node or a slot".into());
            }
            (Some(n), None) if n.is_empty() || n.contains('/') => {
                return Err(format!("node '{n}' must be a worker name (without '/')"));
            }
            (None, Some(s)) if self.slot_index().is_none() || self.name().is_empty() => {
                return Err(format!("slot '{s}' must be NAME/INDEX, e.g. w3/1"));
            }
            _ => {}
        }
        match self.wait_s {
            Some(_) if self.strict => {
                Err("wait_s applies to a soft hint only (strict is true)".into())
            }
            Some(w) if !w.is_finite() || !(0.0..=86400.0).contains(&w) => {
                Err("wait_s must be 0 to 86400 seconds".into())
            }
            _ => Ok(()),
        }
    }
}

/// One task, checked, its URIs canonical. Written as one flat JSON object (the task file's form;
/// the journal keeps it so) and read back through [`TaskWire::check`].
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(try_from = "TaskWire")]
pub struct TaskDef {
    /// Unique id.
    pub id: String,
    /// Program: argv list or shell string. `{inputs[i]}` and `{outputs[i]}` expand to local paths.
    pub cmd: Cmd,
    /// Input URIs: `file://`, `s3://`, `http(s)://`, or `tmp://` (another task's intermediate
    /// output).
    pub inputs: Box<[String]>,
    /// Output URIs: `file://` (copied there after success) or `tmp://` (kept in the worker's
    /// cache for the tasks that read it).
    pub outputs: Box<[String]>,
    /// Every other field; `None` when all have their defaults.
    pub more: Option<Box<TaskMore>>,
}

/// The fields a task may leave out, with their meaning when set. Their serde form is the task
/// file's (names, and values such as `"4GB"`); a new field is declared here, checked in
/// [`TaskWire::check`] if its type does not say all, and reaches the worker in its assignment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskMore {
    /// Job name (default `default`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The dispatch policy of its job (default: the dispatcher's `--policy`).
    #[serde(skip_serializing_if = "Option::is_none", with = "values::policy")]
    pub job_policy: Option<diffuse_core::PolicyKind>,
    /// DAD's beta for this task, in [0, 1] (default: the dispatcher's `--dad-beta`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dad_beta: Option<f64>,
    /// Expected compute time, seconds (informational).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_s: Option<f64>,
    /// Placement hint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<Hint>,
    /// Where to copy the captured stdout (`file://` or `s3://`; `{id}` and `{attempt}` expanded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// Where to copy the captured stderr.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// Cores held while it runs (default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cores: Option<u32>,
    /// Memory asked for, bytes: what the scheduler packs by (default: none asked).
    #[serde(skip_serializing_if = "Option::is_none", with = "values::size")]
    pub memory: Option<u64>,
    /// Memory limit the kernel enforces, as written (default: `memory`); see
    /// [`TaskMore::enforced_memory`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<MemoryLimit>,
    /// GPUs (default 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// Scratch disk, bytes (default: none asked).
    #[serde(skip_serializing_if = "Option::is_none", with = "values::size")]
    pub disk: Option<u64>,
    /// Time limit, seconds (default: the worker's `--task-timeout`, or none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<f64>,
    /// The most time it runs, seconds, as its submitter expects (default: its time limit): it
    /// is sent only to a worker whose batch job still has that long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub walltime_s: Option<f64>,
    /// How many more attempts a non-zero exit or a time-out gets (default: the dispatcher's
    /// `--retries`, 0 unless set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// Extra environment variables.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The directory its program starts in: an absolute path on the worker, as on a shared
    /// file system (a workflow's directory, where `bin/tool` is found). Default: the task's
    /// scratch directory, removed when it ends. Its inputs are staged in the scratch directory
    /// either way (`{inputs[i]}` are absolute paths).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Queue order: higher first (default 0; -32768 to 32767).
    #[serde(skip_serializing_if = "values::is_zero", with = "values::small")]
    pub priority: i16,
    /// Cache order: the inputs it reads are evicted after those of lower priority on the
    /// worker (default 0; -32768 to 32767). Give a job's tasks one to give the job one.
    #[serde(skip_serializing_if = "values::is_zero", with = "values::small")]
    pub eviction_priority: i16,
    /// Ids of tasks that must succeed before it runs (besides the producers of its `tmp://`
    /// inputs, which it waits for anyway).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// Whether an earlier identical task's result may stand for it (docs/runtime.md, "Results
    /// reused by content"): `false` for a task that reads the clock, the network or a random
    /// seed not in its inputs; `true` for one without inputs or outputs whose printed output is
    /// its result. Unset: reused when it declares an input or an output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reuse: Option<bool>,
    /// The SHA-256 of each program file its command names (`/home/me/run.py`), filled in by the
    /// client that submits it: part of its identity, so editing the script runs it again.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub programs: BTreeMap<String, String>,
}

/// What a task gets for a field it leaves out when the default is a setting of the dispatcher
/// (`--retries`, `--task-timeout`), not a constant.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TaskDefaults {
    /// Retries of a task that does not say.
    pub retries: u32,
    /// Time limit of a task that does not say.
    pub task_timeout: Option<std::time::Duration>,
}

/// A task's `memory_limit`: the most memory its processes may use before the kernel kills them
/// (where the worker can make memory cgroups). Written as bytes, a size such as `"4GB"`, or
/// `"none"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryLimit {
    /// At most this many bytes (at least the task's `memory`).
    Bytes(u64),
    /// `"none"`: no limit of its own; `memory` is a request only.
    Unlimited,
}

impl Serialize for MemoryLimit {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            MemoryLimit::Bytes(b) => s.serialize_u64(*b),
            MemoryLimit::Unlimited => s.serialize_str("none"),
        }
    }
}

impl<'de> Deserialize<'de> for MemoryLimit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = MemoryLimit;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes, a size such as \"4GB\", or \"none\"")
            }
            fn visit_u64<E: de::Error>(self, b: u64) -> Result<MemoryLimit, E> {
                Ok(MemoryLimit::Bytes(b))
            }
            fn visit_str<E: de::Error>(self, t: &str) -> Result<MemoryLimit, E> {
                if t.trim().eq_ignore_ascii_case("none") {
                    return Ok(MemoryLimit::Unlimited);
                }
                crate::size::parse_size(t)
                    .map(MemoryLimit::Bytes)
                    .map_err(|e| E::custom(format!("{e}; or \"none\" for no limit")))
            }
        }
        d.deserialize_any(V)
    }
}

impl TaskMore {
    /// The limit the worker enforces, bytes: `memory_limit`, else `memory` (a task that asks
    /// for 4 GB cannot take 40, as with Slurm's `--mem`); `None` for no limit.
    pub fn enforced_memory(&self) -> Option<u64> {
        match self.memory_limit {
            Some(MemoryLimit::Bytes(b)) => Some(b),
            Some(MemoryLimit::Unlimited) => None,
            None => self.memory,
        }
    }
}

impl TaskDef {
    /// The job name.
    pub fn job(&self) -> &str {
        self.more
            .as_ref()
            .and_then(|m| m.job.as_deref())
            .unwrap_or("default")
    }

    /// The optional fields (all defaults if none was set).
    pub fn more(&self) -> std::borrow::Cow<'_, TaskMore> {
        match &self.more {
            Some(m) => std::borrow::Cow::Borrowed(m),
            None => std::borrow::Cow::Owned(TaskMore::default()),
        }
    }
}

/// The keys of a task's object that are not [`TaskMore`]'s.
const OWN_KEYS: &[&str] = &["id", "cmd", "call", "inputs", "outputs"];

/// A task as read, not yet checked ([`TaskWire::check`] makes it a [`TaskDef`]).
#[derive(Clone, Debug, PartialEq)]
pub struct TaskWire {
    id: String,
    cmd: Cmd,
    inputs: Vec<String>,
    outputs: Vec<String>,
    more: TaskMore,
}

impl<'de> Deserialize<'de> for TaskWire {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TaskWire;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a task (a JSON object)")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TaskWire, A::Error> {
                let (mut id, mut cmd, mut inputs, mut outputs) = (None, None, None, None);
                let mut call: Option<Call> = None;
                fn once<'de, A: MapAccess<'de>, T: Deserialize<'de>>(
                    slot: &mut Option<T>,
                    key: &'static str,
                    map: &mut A,
                ) -> Result<bool, A::Error> {
                    if slot.is_some() {
                        return Err(de::Error::duplicate_field(key));
                    }
                    *slot = Some(map.next_value()?);
                    Ok(true)
                }
                let more =
                    super::one_pass::read_rest(map, OWN_KEYS, |key, map: &mut A| match key {
                        "id" => once(&mut id, "id", map),
                        "cmd" => once(&mut cmd, "cmd", map),
                        "call" => once(&mut call, "call", map),
                        "inputs" => once(&mut inputs, "inputs", map),
                        "outputs" => once(&mut outputs, "outputs", map),
                        _ => Ok(false),
                    })?;
                let cmd = match (cmd, call) {
                    (Some(Cmd::Call(_)), _) => {
                        return Err(de::Error::custom(
                            "cmd must be an argv list or a string (a function call is `call`)",
                        ))
                    }
                    (Some(cmd), None) => cmd,
                    (None, Some(call)) => Cmd::Call(Arc::new(call)),
                    (Some(_), Some(_)) => {
                        return Err(de::Error::custom("a task has cmd or call, not both"))
                    }
                    (None, None) => return Err(de::Error::missing_field("cmd")),
                };
                Ok(TaskWire {
                    id: id.ok_or_else(|| de::Error::missing_field("id"))?,
                    cmd,
                    inputs: inputs.unwrap_or_default(),
                    outputs: outputs.unwrap_or_default(),
                    more,
                })
            }
        }
        d.deserialize_map(V)
    }
}

impl Serialize for TaskDef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Flat<'a> {
            id: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            cmd: Option<&'a Cmd>,
            #[serde(skip_serializing_if = "Option::is_none")]
            call: Option<&'a Call>,
            #[serde(skip_serializing_if = "<[String]>::is_empty")]
            inputs: &'a [String],
            #[serde(skip_serializing_if = "<[String]>::is_empty")]
            outputs: &'a [String],
            #[serde(flatten)]
            more: Option<&'a TaskMore>,
        }
        Flat {
            id: &self.id,
            cmd: self.cmd.call().is_none().then_some(&self.cmd),
            call: self.cmd.call(),
            inputs: &self.inputs,
            outputs: &self.outputs,
            more: self.more.as_deref(),
        }
        .serialize(s)
    }
}

impl TryFrom<TaskWire> for TaskDef {
    type Error = SpecError;

    fn try_from(w: TaskWire) -> Result<TaskDef, SpecError> {
        w.check(0)
    }
}

/// Most bytes an environment variable's name and value may have together.
const ENV_MAX: usize = 32 << 10;

/// A field that failed a check: its path and what is wrong.
type Invalid = (String, String);

fn invalid(field: impl Into<String>, message: impl Into<String>) -> Invalid {
    (field.into(), message.into())
}

impl TaskWire {
    /// Check every field, put URIs in canonical form ([`crate::uri`]), and keep the task.
    pub fn check(self, line: usize) -> Result<TaskDef, SpecError> {
        self.checked().map_err(|(field, message)| SpecError {
            line,
            field,
            message,
        })
    }

    fn checked(self) -> Result<TaskDef, Invalid> {
        let TaskWire {
            id,
            cmd,
            inputs,
            outputs,
            mut more,
        } = self;
        check_program(&id, &cmd, inputs.len())?;
        let (inputs, outputs) = canonical_uris(inputs, outputs)?;
        check_placeholders(&cmd, inputs.len(), outputs.len())?;
        check_more(&id, &mut more)?;
        Ok(TaskDef {
            id,
            cmd,
            inputs: inputs.into(),
            outputs: outputs.into(),
            more: (more != TaskMore::default()).then(|| Box::new(more)),
        })
    }
}

/// The id, and that the command names something to run.
fn check_program(id: &str, cmd: &Cmd, inputs: usize) -> Result<(), Invalid> {
    if id.is_empty() || id.len() > 256 || id.chars().any(char::is_control) {
        return Err(invalid(
            "id",
            "must be 1-256 characters without control characters",
        ));
    }
    match cmd {
        Cmd::Argv(v) if v.is_empty() || v[0].is_empty() => {
            Err(invalid("cmd", "argv list must name a program"))
        }
        Cmd::Shell(s) if s.trim().is_empty() => Err(invalid("cmd", "command string is empty")),
        Cmd::Call(c) => c.check(inputs),
        _ => Ok(()),
    }
}

/// Inputs and outputs in canonical form; outputs are `file://` or `tmp://`, and a `tmp://`
/// object is written once and not read by its writer.
fn canonical_uris(
    mut inputs: Vec<String>,
    mut outputs: Vec<String>,
) -> Result<(Vec<String>, Vec<String>), Invalid> {
    for (i, uri) in inputs.iter_mut().enumerate() {
        *uri = crate::uri::canonical(uri).map_err(|e| invalid(format!("inputs[{i}]"), e))?;
    }
    for (i, uri) in outputs.iter_mut().enumerate() {
        let c = crate::uri::canonical(uri).map_err(|e| invalid(format!("outputs[{i}]"), e))?;
        if crate::uri::scheme(&c) != Some(Scheme::File) && !crate::uri::is_tmp(&c) {
            return Err(invalid(
                format!("outputs[{i}]"),
                format!(
                    "'{uri}': outputs must be file:// URIs with an absolute path, or tmp://NAME"
                ),
            ));
        }
        *uri = c;
    }
    for (i, uri) in outputs.iter().enumerate() {
        if crate::uri::is_tmp(uri) && outputs[..i].contains(uri) {
            return Err(invalid(
                format!("outputs[{i}]"),
                format!("'{uri}' is written twice by this task"),
            ));
        }
        if crate::uri::is_tmp(uri) && inputs.contains(uri) {
            return Err(invalid(
                format!("outputs[{i}]"),
                format!("'{uri}' is also an input of this task: a task cannot read what it writes"),
            ));
        }
    }
    Ok((inputs, outputs))
}

/// Every `{inputs[i]}` and `{outputs[i]}` in the command names one the task has.
fn check_placeholders(cmd: &Cmd, inputs: usize, outputs: usize) -> Result<(), Invalid> {
    let texts: Vec<&str> = match cmd {
        Cmd::Argv(v) => v.iter().map(String::as_str).collect(),
        Cmd::Shell(s) => vec![&s[..]],
        // A call gets its inputs' paths as a list, not through placeholders.
        Cmd::Call(_) => Vec::new(),
    };
    for text in texts {
        for (kind, index, _) in crate::placeholder::find(text) {
            let (name, len) = match kind {
                Kind::Input => ("inputs", inputs),
                Kind::Output => ("outputs", outputs),
            };
            if index >= len {
                return Err(invalid(
                    "cmd",
                    format!("{{{name}[{index}]}} is out of range: the task has {len} {name}"),
                ));
            }
        }
    }
    Ok(())
}

/// The optional fields: what their types do not check, then defaults written out made unset
/// (so that a task of defaults keeps nothing).
fn check_more(id: &str, m: &mut TaskMore) -> Result<(), Invalid> {
    for (i, a) in m.after.iter().enumerate() {
        if a == id {
            return Err(invalid(
                format!("after[{i}]"),
                "a task cannot wait for itself",
            ));
        }
    }
    if let Some(h) = &m.hint {
        h.check().map_err(|e| invalid("hint", e))?;
    }
    if m.compute_s.is_some_and(|c| !c.is_finite() || c < 0.0) {
        return Err(invalid("compute_s", "must be a non-negative number"));
    }
    check_log_uri("stdout", m.stdout.as_deref())?;
    check_log_uri("stderr", m.stderr.as_deref())?;
    check_resources(m)?;
    check_env(&m.env)?;
    if let Some(cwd) = &m.cwd {
        if !cwd.starts_with('/') || cwd.contains('\0') || cwd.len() > 4096 {
            return Err(invalid(
                "cwd",
                format!("'{cwd}' must be an absolute path (at most 4096 bytes, no NUL)"),
            ));
        }
    }
    if m.dad_beta.is_some_and(|b| !(0.0..=1.0).contains(&b)) {
        return Err(invalid("dad_beta", "must be in [0, 1]"));
    }
    if m.job.as_deref() == Some("default") {
        m.job = None;
    }
    if m.gpus == Some(0) {
        m.gpus = None;
    }
    for (path, sha) in &m.programs {
        if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid(
                format!("programs.{path}"),
                "must be the file's SHA-256 in 64 hex digits",
            ));
        }
    }
    Ok(())
}

/// Where captured output is copied: a `file://` or `s3://` URI, placeholders and all.
fn check_log_uri(field: &str, uri: Option<&str>) -> Result<(), Invalid> {
    let Some(uri) = uri else { return Ok(()) };
    // Placeholders are checked as written; the expanded URI is checked again per attempt.
    let sample = uri.replace("{id}", "id").replace("{attempt}", "1");
    let c = crate::uri::canonical(&sample).map_err(|e| invalid(field, e))?;
    if !matches!(crate::uri::scheme(&c), Some(Scheme::File | Scheme::S3)) {
        return Err(invalid(
            field,
            format!("'{uri}' must be a file:// or s3:// URI"),
        ));
    }
    Ok(())
}

/// Cores, the memory limit against the request, and the time limits.
fn check_resources(m: &mut TaskMore) -> Result<(), Invalid> {
    if m.cores == Some(0) {
        return Err(invalid("cores", "must be at least 1"));
    }
    m.memory_limit =
        memory_limit(m.memory_limit, m.memory).map_err(|e| invalid("memory_limit", e))?;
    for (field, value) in [("timeout_s", m.timeout_s), ("walltime_s", m.walltime_s)] {
        if value.is_some_and(|t| !t.is_finite() || t <= 0.0 || t > 1e9) {
            return Err(invalid(field, "must be a positive number of seconds"));
        }
    }
    Ok(())
}

/// Variable names and values the worker can set, none of them the worker's own.
fn check_env(env: &BTreeMap<String, String>) -> Result<(), Invalid> {
    for (k, v) in env {
        let field = format!("env.{k}");
        if k.is_empty()
            || k.contains('=')
            || k.contains('\0')
            || v.contains('\0')
            || k.len() + v.len() > ENV_MAX
        {
            return Err(invalid(
                field,
                "a name must be non-empty without '=' or NUL, a value without NUL, 32 KiB in all",
            ));
        }
        if k.starts_with("DIFFUSE_") {
            return Err(invalid(
                field,
                "DIFFUSE_* names are set by the worker (DIFFUSE_TASK_ID, DIFFUSE_ATTEMPT, DIFFUSE_NODE, DIFFUSE_CORES)",
            ));
        }
    }
    Ok(())
}

/// Check a task's `memory_limit` against its `memory` (the request). `"none"` without a request
/// is the default (no limit), kept as unset.
fn memory_limit(
    limit: Option<MemoryLimit>,
    memory: Option<u64>,
) -> Result<Option<MemoryLimit>, String> {
    let bytes = match limit {
        None => return Ok(None),
        Some(MemoryLimit::Unlimited) => return Ok(memory.map(|_| MemoryLimit::Unlimited)),
        Some(MemoryLimit::Bytes(b)) => b,
    };
    if bytes == 0 {
        return Err("must be more than 0 bytes (\"none\" for no limit)".into());
    }
    if let Some(asked) = memory.filter(|m| bytes < *m) {
        return Err(format!(
            "{} is below its memory ({}): the kernel would kill the task before it used what it \
             asks for; raise memory_limit, lower memory, or leave memory_limit out (the limit is \
             then memory)",
            crate::size::format_size(bytes),
            crate::size::format_size(asked),
        ));
    }
    Ok(Some(MemoryLimit::Bytes(bytes)))
}
