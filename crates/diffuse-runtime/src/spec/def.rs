//! One task: its fields as written in JSON ([`TaskWire`], flat, every field optional but `id`
//! and `cmd`), and as kept in memory ([`TaskDef`]: what every task has, and the rest boxed in
//! [`TaskMore`], which most tasks leave empty; a dispatcher keeps millions of tasks).

use super::error::SpecError;
use crate::placeholder::Kind;
use crate::uri::Scheme;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How a task's program is given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Cmd {
    /// An argv list, run directly.
    Argv(Vec<String>),
    /// A string, run by `sh -c`.
    Shell(String),
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

/// One task, checked, its URIs canonical.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "TaskWire", into = "TaskWire")]
pub struct TaskDef {
    /// Unique id.
    pub id: String,
    /// Program: argv list or shell string. `{inputs[i]}` and `{outputs[i]}` expand to local paths.
    pub cmd: Cmd,
    /// Input URIs: `file://`, `s3://`, `http(s)://`, or `tmp://` (another task's intermediate
    /// output).
    pub inputs: Vec<String>,
    /// Output URIs: `file://` (copied there after success) or `tmp://` (kept in the worker's
    /// cache for the tasks that read it).
    pub outputs: Vec<String>,
    /// Every other field; `None` when all have their defaults.
    pub more: Option<Box<TaskMore>>,
}

/// The fields a task may leave out, with their meaning when set.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskMore {
    /// Job name (default `default`).
    pub job: Option<String>,
    /// The dispatch policy of its job (default: the dispatcher's `--policy`).
    pub job_policy: Option<diffuse_core::PolicyKind>,
    /// DAD's beta for this task, in [0, 1] (default: the dispatcher's `--dad-beta`).
    pub dad_beta: Option<f64>,
    /// Expected compute time, seconds (informational).
    pub compute_s: Option<f64>,
    /// Placement hint.
    pub hint: Option<Hint>,
    /// Where to copy the captured stdout (`file://` or `s3://`; `{id}` and `{attempt}` expanded).
    pub stdout: Option<String>,
    /// Where to copy the captured stderr.
    pub stderr: Option<String>,
    /// Cores held while it runs (default 1).
    pub cores: Option<u32>,
    /// Memory asked for, bytes: what the scheduler packs by (default: none asked).
    pub memory: Option<u64>,
    /// Memory limit the kernel enforces, as written (default: `memory`); see
    /// [`TaskMore::enforced_memory`].
    pub memory_limit: Option<MemoryLimit>,
    /// GPUs (default 0).
    pub gpus: Option<u32>,
    /// Scratch disk, bytes (default: none asked).
    pub disk: Option<u64>,
    /// Time limit, seconds (default: the worker's `--task-timeout`, or none).
    pub timeout_s: Option<f64>,
    /// The most time it runs, seconds, as its submitter expects (default: its time limit): it
    /// is sent only to a worker whose batch job still has that long.
    pub walltime_s: Option<f64>,
    /// How many more attempts a non-zero exit or a time-out gets (default: the dispatcher's
    /// `--retries`, 0 unless set).
    pub retries: Option<u32>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// Queue order: higher first (default 0; -32768 to 32767).
    pub priority: i16,
    /// Cache order: the inputs it reads are evicted after those of lower priority on the
    /// worker (default 0; -32768 to 32767). Give a job's tasks one to give the job one.
    pub eviction_priority: i16,
    /// Ids of tasks that must succeed before it runs (besides the producers of its `tmp://`
    /// inputs, which it waits for anyway).
    pub after: Vec<String>,
}

/// A task's `memory_limit`: the most memory its processes may use before the kernel kills them
/// (where the worker can make memory cgroups).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryLimit {
    /// At most this many bytes (at least the task's `memory`).
    Bytes(u64),
    /// `"none"`: no limit of its own; `memory` is a request only.
    Unlimited,
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

/// A size: bytes, or a string such as `"4GB"` or `"512MiB"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SizeValue {
    /// Bytes.
    Bytes(u64),
    /// With a unit.
    Text(String),
}

/// A task as written in JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskWire {
    id: String,
    cmd: Cmd,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    inputs: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    outputs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    job: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    job_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dad_beta: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    compute_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hint: Option<Hint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stdout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stderr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cores: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    memory: Option<SizeValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    memory_limit: Option<SizeValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gpus: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    disk: Option<SizeValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    timeout_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    walltime_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retries: Option<u32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    priority: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    eviction_priority: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    after: Vec<String>,
}

impl From<TaskDef> for TaskWire {
    fn from(d: TaskDef) -> TaskWire {
        let m = d.more.map(|m| *m).unwrap_or_default();
        TaskWire {
            id: d.id,
            cmd: d.cmd,
            inputs: d.inputs,
            outputs: d.outputs,
            job: m.job,
            job_policy: m.job_policy.map(|k| k.to_string()),
            dad_beta: m.dad_beta,
            compute_s: m.compute_s,
            hint: m.hint,
            stdout: m.stdout,
            stderr: m.stderr,
            cores: m.cores,
            memory: m.memory.map(SizeValue::Bytes),
            memory_limit: m.memory_limit.map(|l| match l {
                MemoryLimit::Bytes(b) => SizeValue::Bytes(b),
                MemoryLimit::Unlimited => SizeValue::Text("none".into()),
            }),
            gpus: m.gpus,
            disk: m.disk.map(SizeValue::Bytes),
            timeout_s: m.timeout_s,
            walltime_s: m.walltime_s,
            retries: m.retries,
            env: m.env,
            priority: (m.priority != 0).then_some(m.priority as i64),
            eviction_priority: (m.eviction_priority != 0).then_some(m.eviction_priority as i64),
            after: m.after,
        }
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

impl TaskWire {
    /// Check every field, put URIs in canonical form ([`crate::uri`]), and keep the task.
    pub fn check(self, line: usize) -> Result<TaskDef, SpecError> {
        let err = |field: &str, message: String| SpecError {
            line,
            field: field.to_string(),
            message,
        };
        let w = self;
        if w.id.is_empty() || w.id.len() > 256 || w.id.chars().any(char::is_control) {
            return Err(err(
                "id",
                "must be 1-256 characters without control characters".into(),
            ));
        }
        match &w.cmd {
            Cmd::Argv(v) if v.is_empty() || v[0].is_empty() => {
                return Err(err("cmd", "argv list must name a program".into()))
            }
            Cmd::Shell(s) if s.trim().is_empty() => {
                return Err(err("cmd", "command string is empty".into()))
            }
            _ => {}
        }
        let mut inputs = w.inputs;
        for (i, uri) in inputs.iter_mut().enumerate() {
            *uri = crate::uri::canonical(uri).map_err(|e| err(&format!("inputs[{i}]"), e))?;
        }
        let mut outputs = w.outputs;
        for (i, uri) in outputs.iter_mut().enumerate() {
            let c = crate::uri::canonical(uri).map_err(|e| err(&format!("outputs[{i}]"), e))?;
            if crate::uri::scheme(&c) != Some(Scheme::File) && !crate::uri::is_tmp(&c) {
                return Err(err(
                    &format!("outputs[{i}]"),
                    format!("'{uri}': outputs must be file:// URIs with an absolute path, or tmp://NAME"),
                ));
            }
            *uri = c;
        }
        for (i, uri) in outputs.iter().enumerate() {
            if crate::uri::is_tmp(uri) && outputs[..i].contains(uri) {
                return Err(err(
                    &format!("outputs[{i}]"),
                    format!("'{uri}' is written twice by this task"),
                ));
            }
            if crate::uri::is_tmp(uri) && inputs.contains(uri) {
                return Err(err(
                    &format!("outputs[{i}]"),
                    format!(
                        "'{uri}' is also an input of this task: a task cannot read what it writes"
                    ),
                ));
            }
        }
        for (i, a) in w.after.iter().enumerate() {
            if *a == w.id {
                return Err(err(
                    &format!("after[{i}]"),
                    "a task cannot wait for itself".into(),
                ));
            }
        }
        let texts: Vec<&str> = match &w.cmd {
            Cmd::Argv(v) => v.iter().map(String::as_str).collect(),
            Cmd::Shell(s) => vec![s.as_str()],
        };
        for text in texts {
            for (kind, index, _) in crate::placeholder::find(text) {
                let (name, len) = match kind {
                    Kind::Input => ("inputs", inputs.len()),
                    Kind::Output => ("outputs", outputs.len()),
                };
                if index >= len {
                    return Err(err(
                        "cmd",
                        format!("{{{name}[{index}]}} is out of range: the task has {len} {name}"),
                    ));
                }
            }
        }
        if let Some(h) = &w.hint {
            h.check().map_err(|e| err("hint", e))?;
        }
        if let Some(c) = w.compute_s {
            if !c.is_finite() || c < 0.0 {
                return Err(err("compute_s", "must be a non-negative number".into()));
            }
        }
        let log_uri = |field: &str, uri: Option<String>| -> Result<Option<String>, SpecError> {
            let Some(uri) = uri else { return Ok(None) };
            // Placeholders are checked as written; the expanded URI is checked again per attempt.
            let sample = uri.replace("{id}", "id").replace("{attempt}", "1");
            let c = crate::uri::canonical(&sample).map_err(|e| err(field, e))?;
            if !matches!(crate::uri::scheme(&c), Some(Scheme::File | Scheme::S3)) {
                return Err(err(
                    field,
                    format!("'{uri}' must be a file:// or s3:// URI"),
                ));
            }
            Ok(Some(uri))
        };
        let stdout = log_uri("stdout", w.stdout)?;
        let stderr = log_uri("stderr", w.stderr)?;
        if w.cores == Some(0) {
            return Err(err("cores", "must be at least 1".into()));
        }
        let size = |field: &str, v: Option<SizeValue>| -> Result<Option<u64>, SpecError> {
            match v {
                None => Ok(None),
                Some(SizeValue::Bytes(b)) => Ok(Some(b)),
                Some(SizeValue::Text(t)) => crate::size::parse_size(&t)
                    .map(Some)
                    .map_err(|e| err(field, e)),
            }
        };
        let memory = size("memory", w.memory)?;
        let memory_limit =
            memory_limit(w.memory_limit, memory).map_err(|e| err("memory_limit", e))?;
        let disk = size("disk", w.disk)?;
        for (field, value) in [("timeout_s", w.timeout_s), ("walltime_s", w.walltime_s)] {
            if value.is_some_and(|t| !t.is_finite() || t <= 0.0 || t > 1e9) {
                return Err(err(field, "must be a positive number of seconds".into()));
            }
        }
        for (k, v) in &w.env {
            let field = format!("env.{k}");
            if k.is_empty()
                || k.contains('=')
                || k.contains('\0')
                || v.contains('\0')
                || k.len() + v.len() > ENV_MAX
            {
                return Err(err(
                    &field,
                    "a name must be non-empty without '=' or NUL, a value without NUL, 32 KiB in all"
                        .into(),
                ));
            }
            if k.starts_with("DIFFUSE_") {
                return Err(err(
                    &field,
                    "DIFFUSE_* names are set by the worker (DIFFUSE_TASK_ID, DIFFUSE_ATTEMPT, DIFFUSE_NODE, DIFFUSE_CORES)".into(),
                ));
            }
        }
        let small = |field: &str, v: Option<i64>| -> Result<i16, SpecError> {
            v.map_or(Ok(0), |p| {
                i16::try_from(p).map_err(|_| err(field, format!("{p} is outside -32768..32767")))
            })
        };
        let priority = small("priority", w.priority)?;
        let eviction_priority = small("eviction_priority", w.eviction_priority)?;
        let job_policy = match &w.job_policy {
            None => None,
            Some(p) => Some(
                p.parse::<diffuse_core::PolicyKind>()
                    .map_err(|e| err("job_policy", e))?,
            ),
        };
        if w.dad_beta.is_some_and(|b| !(0.0..=1.0).contains(&b)) {
            return Err(err("dad_beta", "must be in [0, 1]".into()));
        }
        let more = TaskMore {
            job: w.job.filter(|j| j != "default"),
            job_policy,
            dad_beta: w.dad_beta,
            compute_s: w.compute_s,
            hint: w.hint,
            stdout,
            stderr,
            cores: w.cores,
            memory,
            memory_limit,
            gpus: w.gpus.filter(|g| *g > 0),
            disk,
            timeout_s: w.timeout_s,
            walltime_s: w.walltime_s,
            retries: w.retries,
            env: w.env,
            priority,
            eviction_priority,
            after: w.after,
        };
        Ok(TaskDef {
            id: w.id,
            cmd: w.cmd,
            inputs,
            outputs,
            more: (more != TaskMore::default()).then(|| Box::new(more)),
        })
    }
}

/// Check a task's `memory_limit` against its `memory` (the request). `"none"` without a request
/// is the default (no limit), kept as unset.
fn memory_limit(
    limit: Option<SizeValue>,
    memory: Option<u64>,
) -> Result<Option<MemoryLimit>, String> {
    let bytes = match limit {
        None => return Ok(None),
        Some(SizeValue::Text(t)) if t.trim().eq_ignore_ascii_case("none") => {
            return Ok(memory.map(|_| MemoryLimit::Unlimited));
        }
        Some(SizeValue::Text(t)) => {
            crate::size::parse_size(&t).map_err(|e| format!("{e}; or \"none\" for no limit"))?
        }
        Some(SizeValue::Bytes(b)) => b,
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
