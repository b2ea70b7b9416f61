//! The client commands: `submit`, `status`, `wait`, `logs`, `cancel` (and the [`Client`] that
//! `tasks`, `locate` and `place` use too).
//!
//! A dispatcher served over TLS is named with `https://`; `--tls-ca FILE` (or `DIFFUSE_TLS_CA`)
//! adds a site's CA to the roots trusted (the system's and the built-in ones stay). A failed TLS
//! handshake (an untrusted certificate, a server that does not speak TLS) is an error at once,
//! never retried, and says what to do.
//!
//! `diffuse submit` checks the whole task file first (nothing is sent if any line is wrong),
//! then sends it in batches of at most [`BATCH_TASKS`] tasks and [`BATCH_BYTES`] bytes, each
//! acknowledged once journaled; it records each batch's number in
//! `$XDG_STATE_HOME/diffuse/batches.jsonl` (default `~/.local/state/...`), so that a later
//! `diffuse wait` on the same machine waits for exactly the tasks this user submitted.

use super::{read_token, runtime, DEFAULT_DISPATCHER};
use anyhow::{bail, Context, Result};
use clap::Args;
use diffuse_runtime::spec::{parse_numbered_bytes, TaskDef};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Most tasks in one request.
pub const BATCH_TASKS: usize = 50_000;
/// Most bytes in one request (well under the dispatcher's 64 MiB limit).
pub const BATCH_BYTES: usize = 8 << 20;

/// Arguments of the client commands.
#[derive(Args, Debug)]
pub struct ClientArgs {
    /// Dispatcher URL [default: $DIFFUSE_DISPATCHER or http://127.0.0.1:8700].
    #[arg(long)]
    dispatcher: Option<String>,
    /// File holding the client token [default: $DIFFUSE_CLIENT_TOKEN].
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// CA certificates (a PEM bundle) to trust, besides the system's, for an https://
    /// dispatcher: a site's own CA.
    #[arg(long, env = "DIFFUSE_TLS_CA", value_name = "FILE")]
    tls_ca: Option<PathBuf>,
}

/// Arguments of `diffuse submit`.
#[derive(Args, Debug)]
pub struct SubmitArgs {
    /// Task file: one JSON object per line (or a JSON array). With --each: the arguments, one
    /// task each (`-`: read them from standard input).
    #[arg(required = true, num_args = 1.., value_name = "FILE|ARGS")]
    items: Vec<String>,
    /// Make one task per argument from this template (the replacement strings of
    /// `diffuse run --each`).
    #[arg(long, value_name = "TEMPLATE", conflicts_with = "from_line")]
    each: Option<String>,
    /// With --each: ids are this prefix and the argument's number [default: each-<time>-].
    #[arg(long, requires = "each")]
    id_prefix: Option<String>,
    /// Submit only the tasks from this line on (to finish a submission that stopped half way).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..), allow_hyphen_values = true)]
    from_line: u64,
    #[command(flatten)]
    client: ClientArgs,
}

/// Arguments of `diffuse status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// List failed tasks: id, exit code or error, worker, and the end of their stderr.
    #[arg(long)]
    failed: bool,
    /// With --failed: at most this many.
    #[arg(long, default_value_t = 10, requires = "failed")]
    limit: u32,
    /// One job's counters (tasks queued, running, succeeded, failed, cancelled).
    #[arg(long, conflicts_with = "failed")]
    job: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
}

/// Arguments of `diffuse wait`.
#[derive(Args, Debug)]
pub struct WaitArgs {
    /// Batches to wait for (numbers printed by `diffuse submit`) [default: every batch
    /// `diffuse submit` sent to this dispatcher from this machine and user since the last
    /// `diffuse wait`].
    batches: Vec<u64>,
    /// Wait until the dispatcher has nothing queued or running at all, whoever submitted it.
    #[arg(long, conflicts_with = "batches")]
    all: bool,
    /// Seconds to keep trying while the dispatcher cannot be reached (it may be restarting).
    #[arg(long, default_value_t = 600)]
    reconnect_timeout: u64,
    /// Print JSON at the end, and no progress.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    client: ClientArgs,
}

pub(crate) struct Client {
    pub(crate) url: String,
    token: String,
    pub(crate) http: reqwest::Client,
}

impl Client {
    pub(crate) fn new(a: &ClientArgs) -> Result<Client> {
        let url = a
            .dispatcher
            .clone()
            .or_else(|| std::env::var("DIFFUSE_DISPATCHER").ok())
            .unwrap_or_else(|| DEFAULT_DISPATCHER.into());
        let trust = diffuse_runtime::tls::Trust::from_option(a.tls_ca.as_deref())
            .context("--tls-ca/DIFFUSE_TLS_CA")?;
        Ok(Client {
            url: url.trim_end_matches('/').to_string(),
            token: read_token(&a.token_file, "DIFFUSE_CLIENT_TOKEN", "--token-file")?,
            http: trust
                .reqwest(
                    reqwest::Client::builder()
                        .connect_timeout(Duration::from_secs(10))
                        .timeout(Duration::from_secs(300)),
                )
                .build()?,
        })
    }

    /// The error of a request that got no answer: a failed TLS handshake (not worth retrying),
    /// or an unreachable dispatcher; with the causes and, for TLS, what to do.
    pub(crate) fn unanswered(&self, e: &reqwest::Error) -> CallError {
        let why = diffuse_runtime::tls::describe(e);
        if diffuse_runtime::tls::tls_failure(e).is_some() {
            CallError::Tls(format!("cannot connect to {}: {why}", self.url))
        } else {
            CallError::Unreachable(format!("cannot reach {}: {why}", self.url))
        }
    }

    /// Send `req`; the JSON answer, or an error with the dispatcher's message (or the HTTP
    /// status and body when it is not JSON). `Unreachable` errors are told apart so callers
    /// can retry.
    pub(crate) async fn call(&self, req: reqwest::RequestBuilder) -> Result<Value, CallError> {
        let resp = req
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| self.unanswered(&e))?;
        let code = resp.status();
        let text = resp.text().await.unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if !code.is_success() {
            let msg = body
                .get("error")
                .and_then(|e| e.as_str())
                .map(String::from)
                .unwrap_or_else(|| text.trim().chars().take(300).collect());
            return Err(CallError::Refused {
                code: code.as_u16(),
                message: format!("{} ({code}): {msg}", self.url),
            });
        }
        Ok(body)
    }

    async fn status(&self) -> Result<Value, CallError> {
        self.call(self.http.get(format!("{}/v1/status", self.url)))
            .await
    }
}

#[derive(Debug)]
pub(crate) enum CallError {
    /// No answer (the dispatcher may be restarting): worth retrying.
    Unreachable(String),
    /// The TLS handshake failed: retrying would not help.
    Tls(String),
    /// An answer other than success.
    Refused { code: u16, message: String },
}

impl CallError {
    /// A refusal with one of `codes` (an unknown object, a bad request): its reason on stderr
    /// and exit code 1. Anything else is an error.
    pub(crate) fn exit_if(self, codes: &[u16]) -> Result<ExitCode> {
        match self {
            CallError::Refused { code, message } if codes.contains(&code) => {
                let why = message.split_once("): ").map_or(&*message, |(_, m)| m);
                eprintln!("error: {why}");
                Ok(ExitCode::from(1))
            }
            CallError::Refused { message, .. }
            | CallError::Unreachable(message)
            | CallError::Tls(message) => {
                bail!("{message}")
            }
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Unreachable(m)
            | CallError::Tls(m)
            | CallError::Refused { message: m, .. } => f.write_str(m),
        }
    }
}

impl std::error::Error for CallError {}

/// One line of the record of submitted batches.
#[derive(Serialize, Deserialize, Clone, Debug)]
struct Record {
    dispatcher: String,
    batch: u64,
    tasks: u64,
}

fn state_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))?;
    Some(base.join("diffuse").join("batches.jsonl"))
}

/// Append a submitted batch to the record (a failure to write it is only a warning: the
/// submission itself succeeded).
fn remember(rec: &Record) {
    let Some(path) = state_file() else { return };
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|_| {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)?;
            writeln!(
                f,
                "{}",
                serde_json::to_string(rec).expect("record serializes")
            )
        });
    if let Err(e) = written {
        eprintln!(
            "warning: cannot record batch {} in {}: {e} (wait for it with `diffuse wait {}`)",
            rec.batch,
            path.display(),
            rec.batch
        );
    }
}

/// The recorded batches for `dispatcher`.
fn remembered(dispatcher: &str) -> Vec<Record> {
    let Some(path) = state_file() else {
        return Vec::new();
    };
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Record>(l).ok())
        .filter(|r| r.dispatcher == dispatcher)
        .collect()
}

/// Remove `batches` of `dispatcher` from the record.
fn forget(dispatcher: &str, batches: &[u64]) {
    let Some(path) = state_file() else { return };
    let Ok(text) = std::fs::read_to_string(&path) else {
        return;
    };
    let kept: String = text
        .lines()
        .filter(|l| {
            serde_json::from_str::<Record>(l).map_or(true, |r| {
                r.dispatcher != dispatcher || !batches.contains(&r.batch)
            })
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let tmp = path.with_extension("tmp");
    if std::fs::write(&tmp, kept).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
}

/// `diffuse submit`.
pub fn submit(a: SubmitArgs) -> Result<ExitCode> {
    let (file, tasks) = match &a.each {
        Some(template) => {
            let prefix = a.id_prefix.clone().unwrap_or_else(|| {
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis());
                format!("each-{t}-")
            });
            let defs = super::each::tasks(template, &super::each::arguments(&a.items)?, &prefix)?;
            (
                "--each".to_string(),
                defs.into_iter()
                    .enumerate()
                    .map(|(i, d)| (i + 1, d))
                    .collect(),
            )
        }
        None => {
            let [path] = a.items.as_slice() else {
                bail!("one task file, or --each TEMPLATE and its arguments");
            };
            let bytes = std::fs::read(path).with_context(|| format!("cannot read {path}"))?;
            match parse_numbered_bytes(&bytes) {
                Ok(t) => (path.clone(), t),
                Err(e) => {
                    eprintln!("error: {path}: {e}; nothing was submitted");
                    return Ok(ExitCode::from(2));
                }
            }
        }
    };
    let tasks: Vec<(usize, TaskDef)> = tasks
        .into_iter()
        .filter(|(line, _)| *line as u64 >= a.from_line)
        .collect();
    if tasks.is_empty() {
        eprintln!(
            "error: {file}: no task on line {} or after; nothing was submitted",
            a.from_line
        );
        return Ok(ExitCode::from(2));
    }
    let c = Client::new(&a.client)?;
    let rt = runtime()?;
    let mut sent: Vec<(usize, usize, u64, u64)> = Vec::new(); // first line, last line, batch, tasks
    let lines: Vec<(usize, String)> = tasks
        .iter()
        .map(|(n, d)| {
            (
                *n,
                serde_json::to_string(d).expect("task serializes") + "\n",
            )
        })
        .collect();
    for chunk in chunks(&lines) {
        let (first, last) = (chunk[0].0, chunk[chunk.len() - 1].0);
        let body: String = chunk.iter().map(|(_, l)| l.as_str()).collect();
        let answer = rt.block_on(
            c.call(
                c.http
                    .post(format!("{}/v1/tasks", c.url))
                    .header("content-type", "application/x-ndjson")
                    .body(body),
            ),
        );
        match answer {
            Ok(v) => {
                let batch = v["batch"].as_u64().unwrap_or(0);
                let n = v["submitted"].as_u64().unwrap_or(0);
                remember(&Record {
                    dispatcher: c.url.clone(),
                    batch,
                    tasks: n,
                });
                sent.push((first, last, batch, n));
            }
            Err(e) => {
                let done: u64 = sent.iter().map(|s| s.3).sum();
                eprintln!(
                    "error: the tasks of lines {first}-{last} were refused, and nothing after them was sent: {e}"
                );
                if sent.is_empty() {
                    eprintln!("nothing was submitted");
                } else {
                    eprintln!(
                        "submitted before: {done} tasks of lines {}-{} (batches {}); to submit the rest once the cause is fixed: diffuse submit {file} --from-line {first}",
                        sent[0].0,
                        sent[sent.len() - 1].1,
                        batch_list(&sent),
                    );
                }
                return Ok(ExitCode::from(1));
            }
        }
    }
    let total: u64 = sent.iter().map(|s| s.3).sum();
    println!(
        "submitted {total} tasks in batch{} {}; `diffuse wait` waits for them",
        if sent.len() == 1 { "" } else { "es" },
        batch_list(&sent)
    );
    Ok(ExitCode::SUCCESS)
}

fn batch_list(sent: &[(usize, usize, u64, u64)]) -> String {
    match sent {
        [] => String::new(),
        [one] => one.2.to_string(),
        [first, .., last] => format!("{}-{}", first.2, last.2),
    }
}

/// Consecutive runs of lines of at most [`BATCH_TASKS`] tasks and [`BATCH_BYTES`] bytes.
fn chunks(lines: &[(usize, String)]) -> Vec<&[(usize, String)]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, (_, line)) in lines.iter().enumerate() {
        if i > start && (i - start >= BATCH_TASKS || bytes + line.len() > BATCH_BYTES) {
            out.push(&lines[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += line.len();
    }
    out.push(&lines[start..]);
    out
}

fn print_status(s: &Value, json: bool) {
    if json {
        println!("{s}");
    } else {
        if let Some(n) = s["unschedulable"].as_u64().filter(|n| *n > 0) {
            let examples: Vec<&str> = s["unschedulable_examples"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            eprintln!(
                "warning: {n} queued task(s) fit no connected worker: {}",
                examples.join("; ")
            );
        }
        println!(
            "queued {}  running {}  succeeded {}  failed {}  cancelled {}  workers {} ({} slots, {} busy)",
            s["queued"].as_u64().unwrap_or(0) ,
            s["running"].as_u64().unwrap_or(0) + s["ending"].as_u64().unwrap_or(0),
            s["succeeded"], s["failed"], s["cancelled"], s["workers"], s["slots"], s["busy_slots"]
        );
        if let Some(n) = s["remaking"].as_u64().filter(|n| *n > 0) {
            println!("remaking {n}: succeeded tasks running again to remake a lost tmp:// object");
        }
        print_workers(s);
    }
}

/// Workers by state, with an elastic pool's settings and its last resource-manager error, then
/// one line per worker (name, state, job id).
fn print_workers(s: &Value) {
    let by_state: Vec<String> = s["workers_by_state"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, n)| n.as_u64().unwrap_or(0) > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let pool = &s["pool"];
    if let Some(p) = pool["provisioner"].as_str() {
        println!(
            "pool: {p}, {}-{} workers; {}; {} request(s) failed",
            pool["min_workers"],
            pool["max_workers"],
            if by_state.is_empty() {
                "none now".to_string()
            } else {
                by_state.join(", ")
            },
            pool["failed_requests"]
        );
        if let Some(e) = pool["last_error"].as_str() {
            println!("pool error: {e}");
        }
        let (adopted, cancelled) = (
            pool["extra_jobs_adopted"].as_u64().unwrap_or(0),
            pool["extra_jobs_cancelled"].as_u64().unwrap_or(0),
        );
        if adopted + cancelled > 0 {
            println!(
                "pool: {adopted} job(s) no request owned adopted, {cancelled} cancelled; last: {}",
                pool["last_extra_job"].as_str().unwrap_or("")
            );
        }
    } else if !by_state.is_empty() {
        println!("workers: {}", by_state.join(", "));
    }
    for w in s["worker_list"].as_array().into_iter().flatten() {
        println!(
            "  {:<24} {:<10} {}",
            w["name"].as_str().unwrap_or(""),
            w["state"].as_str().unwrap_or(""),
            w["job"]
                .as_str()
                .map(|j| format!("job {j}"))
                .unwrap_or_default()
        );
    }
}

/// `diffuse status`.
pub fn status(a: StatusArgs) -> Result<ExitCode> {
    let c = Client::new(&a.client)?;
    let rt = runtime()?;
    if let Some(job) = &a.job {
        return super::jobs::status(&rt, &c, job, a.json);
    }
    if a.failed {
        let page = rt.block_on(c.call(c.http.get(format!(
            "{}/v1/tasks?state=failed&limit={}",
            c.url,
            a.limit.clamp(1, 10_000)
        ))))?;
        let tasks = page["tasks"].as_array().cloned().unwrap_or_default();
        if a.json {
            println!("{}", Value::Array(tasks));
            return Ok(ExitCode::SUCCESS);
        }
        if tasks.is_empty() {
            println!("no failed task");
        }
        for t in &tasks {
            let o = &t["outcome"];
            let report: Value = o["result_json"]
                .as_str()
                .and_then(|r| serde_json::from_str(r).ok())
                .unwrap_or_default();
            let why = super::tasks::reason(o);
            let node = o["node"]
                .as_str()
                .map(|n| format!(" (on {n}, attempt {})", o["attempt"]))
                .unwrap_or_default();
            println!("{}: {why}{node}", t["id"].as_str().unwrap_or_default());
            if let Some(tail) = report["stderr_tail"].as_str() {
                let lines: Vec<&str> = tail.trim_end().lines().collect();
                for l in &lines[lines.len().saturating_sub(5)..] {
                    println!("    | {l}");
                }
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let s = rt.block_on(c.status())?;
    print_status(&s, a.json);
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `diffuse logs`.
#[derive(Args, Debug)]
pub struct LogsArgs {
    /// Task id.
    id: String,
    /// Which attempt [default: the last].
    #[arg(long)]
    attempt: Option<u32>,
    /// Its stderr instead of its stdout.
    #[arg(long)]
    stderr: bool,
    #[command(flatten)]
    client: ClientArgs,
}

/// `diffuse logs`: a task's captured stdout (or stderr), fetched through the dispatcher from the
/// worker that ran it.
pub fn logs(a: LogsArgs) -> Result<ExitCode> {
    use std::io::Write;
    let c = Client::new(&a.client)?;
    let mut url = reqwest::Url::parse(&format!("{}/v1/tasks/", c.url))?;
    url.path_segments_mut()
        .map_err(|()| anyhow::anyhow!("{} cannot take a path", c.url))?
        .pop_if_empty()
        .push(&a.id)
        .push("logs");
    url.query_pairs_mut()
        .append_pair("stream", if a.stderr { "stderr" } else { "stdout" });
    if let Some(n) = a.attempt {
        url.query_pairs_mut().append_pair("attempt", &n.to_string());
    }
    let bytes = runtime()?.block_on(async {
        let resp = c
            .http
            .get(url)
            .bearer_auth(&c.token)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("{}", c.unanswered(&e)))?;
        let code = resp.status();
        let body = resp.bytes().await?;
        if !code.is_success() {
            let v: Value = serde_json::from_slice(&body).unwrap_or_default();
            bail!(
                "{}",
                v["error"]
                    .as_str()
                    .unwrap_or(&format!("{} ({code})", c.url))
            );
        }
        Ok(body)
    })?;
    std::io::stdout().lock().write_all(&bytes)?;
    Ok(ExitCode::SUCCESS)
}

/// `diffuse cancel`.
#[derive(clap::Args)]
pub struct CancelArgs {
    /// Ids of the tasks to cancel.
    #[arg(required_unless_present = "job")]
    ids: Vec<String>,
    /// Cancel every unfinished task of this job instead.
    #[arg(long, conflicts_with = "ids")]
    job: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
}

/// `diffuse cancel`: a queued task ends at once; a running one's processes get SIGTERM, then
/// SIGKILL 3 s later. Exit 1 if a task is unknown or had already ended.
pub fn cancel(a: CancelArgs) -> Result<ExitCode> {
    let c = Client::new(&a.client)?;
    if let Some(job) = &a.job {
        return super::jobs::cancel(&runtime()?, &c, job);
    }
    let mut refused = 0;
    runtime()?.block_on(async {
        for id in &a.ids {
            let mut url = reqwest::Url::parse(&format!("{}/v1/tasks/", c.url))?;
            url.path_segments_mut()
                .map_err(|()| anyhow::anyhow!("{} cannot take a path", c.url))?
                .pop_if_empty()
                .push(id)
                .push("cancel");
            match c.call(c.http.post(url)).await {
                Ok(v) => println!("{id}: {}", v["result"].as_str().unwrap_or("cancelled")),
                Err(CallError::Refused {
                    code: 404 | 409,
                    message,
                }) => {
                    refused += 1;
                    let why = message.split_once("): ").map_or(&*message, |(_, m)| m);
                    eprintln!("{id}: {why}");
                }
                Err(
                    CallError::Refused { message, .. }
                    | CallError::Unreachable(message)
                    | CallError::Tls(message),
                ) => {
                    bail!("{message}")
                }
            }
        }
        Ok(())
    })?;
    Ok(if refused > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Where the awaited tasks stand.
#[derive(Default, Serialize)]
struct Progress {
    tasks: u64,
    pending: u64,
    succeeded: u64,
    failed: u64,
    cancelled: u64,
    failed_ids: Vec<String>,
}

/// `diffuse wait`: until the awaited tasks have ended; exit 1 if any of them failed.
pub fn wait(a: WaitArgs) -> Result<ExitCode> {
    let c = Client::new(&a.client)?;
    let batches: Vec<u64> = if a.all {
        Vec::new()
    } else if !a.batches.is_empty() {
        a.batches.clone()
    } else {
        let mut b: Vec<u64> = remembered(&c.url).iter().map(|r| r.batch).collect();
        b.sort_unstable();
        b.dedup();
        if b.is_empty() {
            bail!(
                "nothing to wait for: no batch submitted to {} from here since the last `diffuse wait` (give batch numbers, or --all)",
                c.url
            );
        }
        b
    };
    let rt = runtime()?;
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let every = if tty {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(10)
    };
    let mut last_print: Option<Instant> = None;
    let mut unreachable_since: Option<Instant> = None;
    let mut no_worker_since: Option<Instant> = None;
    let mut warned_no_worker = false;
    let mut warned_unfit = 0;
    let progress = rt.block_on(async {
        loop {
            let round = async {
                let status = c.status().await?;
                let p = if a.all {
                    Progress {
                        tasks: status["submitted"].as_u64().unwrap_or(0),
                        pending: ["queued", "running", "ending"]
                            .iter()
                            .map(|k| status[k].as_u64().unwrap_or(0))
                            .sum(),
                        succeeded: status["succeeded"].as_u64().unwrap_or(0),
                        failed: status["failed"].as_u64().unwrap_or(0),
                        cancelled: status["cancelled"].as_u64().unwrap_or(0),
                        failed_ids: Vec::new(),
                    }
                } else {
                    let mut p = Progress::default();
                    for b in &batches {
                        let v = c
                            .call(c.http.get(format!("{}/v1/batches/{b}", c.url)))
                            .await?;
                        p.tasks += v["tasks"].as_u64().unwrap_or(0);
                        p.pending += v["pending"].as_u64().unwrap_or(0);
                        p.succeeded += v["succeeded"].as_u64().unwrap_or(0);
                        p.failed += v["failed"].as_u64().unwrap_or(0);
                        p.cancelled += v["cancelled"].as_u64().unwrap_or(0);
                        for id in v["failed_ids"].as_array().into_iter().flatten() {
                            if p.failed_ids.len() < 10 {
                                p.failed_ids.push(id.as_str().unwrap_or_default().to_string());
                            }
                        }
                    }
                    p
                };
                Ok::<_, CallError>((status, p))
            };
            match round.await {
                Ok((status, p)) => {
                    if unreachable_since.take().is_some() && !a.json {
                        eprintln!("the dispatcher answers again");
                    }
                    if p.pending == 0 {
                        return Ok(p);
                    }
                    let workers = status["workers"].as_u64().unwrap_or(0);
                    if workers == 0 {
                        let since = *no_worker_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > Duration::from_secs(5) && !warned_no_worker {
                            eprintln!(
                                "warning: no worker is connected to {}: the {} queued tasks wait for one",
                                c.url, p.pending
                            );
                            warned_no_worker = true;
                        }
                    } else {
                        no_worker_since = None;
                        warned_no_worker = false;
                    }
                    let unfit = status["unschedulable"].as_u64().unwrap_or(0);
                    if unfit > warned_unfit {
                        let examples: Vec<&str> = status["unschedulable_examples"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|e| e.as_str())
                            .collect();
                        eprintln!(
                            "warning: {unfit} queued task(s) fit no connected worker and wait for a bigger one (cancel them with `diffuse cancel`): {}",
                            examples.join("; ")
                        );
                    }
                    warned_unfit = unfit;
                    if !a.json && last_print.is_none_or(|t| t.elapsed() >= every) {
                        last_print = Some(Instant::now());
                        let done = p.succeeded + p.failed + p.cancelled;
                        let line = format!(
                            "waiting: {done}/{} done ({} failed); dispatcher: {} running, {} queued, {} workers",
                            p.tasks,
                            p.failed,
                            status["running"].as_u64().unwrap_or(0) + status["ending"].as_u64().unwrap_or(0),
                            status["queued"].as_u64().unwrap_or(0),
                            workers
                        );
                        if tty {
                            eprint!("\r{line}   ");
                        } else {
                            eprintln!("{line}");
                        }
                    }
                }
                Err(CallError::Unreachable(e)) => {
                    let since = *unreachable_since.get_or_insert_with(|| {
                        if !a.json {
                            eprintln!("\n{e}; retrying (it may be restarting)");
                        }
                        Instant::now()
                    });
                    if since.elapsed() > Duration::from_secs(a.reconnect_timeout) {
                        bail!("{e} (for {} s)", a.reconnect_timeout);
                    }
                }
                Err(e @ CallError::Refused { code: 404, .. }) => {
                    forget(&c.url, &batches);
                    bail!("{e}: the dispatcher does not know this batch (another journal?)");
                }
                Err(e) => bail!("{e}"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })?;
    if tty && !a.json {
        eprintln!();
    }
    if !a.all && a.batches.is_empty() {
        forget(&c.url, &batches);
    }
    if a.json {
        println!("{}", serde_json::to_string(&progress)?);
    } else {
        println!(
            "{} tasks: {} succeeded, {} failed, {} cancelled",
            progress.tasks, progress.succeeded, progress.failed, progress.cancelled
        );
        if !progress.failed_ids.is_empty() {
            println!(
                "failed: {}{}",
                progress.failed_ids.join(", "),
                if progress.failed as usize > progress.failed_ids.len() {
                    ", ..."
                } else {
                    ""
                }
            );
        }
    }
    Ok(if progress.failed + progress.cancelled > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
