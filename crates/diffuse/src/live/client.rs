//! The client commands: `submit`, `status`, `wait`, `logs`, `cancel`, over the dispatcher's
//! API as [`super::api`] calls it (TLS included).
//!
//! `diffuse submit` checks the whole task file first (nothing is sent if any line is wrong),
//! then sends it in batches of at most [`BATCH_TASKS`] tasks and [`BATCH_BYTES`] bytes, each
//! acknowledged once journaled; it records each batch's number in
//! `$XDG_STATE_HOME/diffuse/batches.jsonl` (default `~/.local/state/...`), so that a later
//! `diffuse wait` on the same machine waits for exactly the tasks this user submitted.

use super::api::{CallError, Client, ClientArgs};
use super::runtime;
use anyhow::{bail, Context, Result};
use clap::Args;
use diffuse_runtime::dispatcher::answers::{BatchView, CancelAnswer, Status, Submitted, TaskPage};
use diffuse_runtime::spec::{parse_numbered_bytes, TaskDef};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Most tasks in one request.
pub const BATCH_TASKS: usize = 50_000;
/// Most bytes in one request (well under the dispatcher's 64 MiB limit).
pub const BATCH_BYTES: usize = 8 << 20;

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
    let mut tasks: Vec<(usize, TaskDef)> = tasks
        .into_iter()
        .filter(|(line, _)| *line as u64 >= a.from_line)
        .collect();
    // Program files named in commands are part of the tasks' identities (results reused by
    // content): relative names are looked up beside the task file.
    let base = match &a.each {
        Some(_) => std::env::current_dir().unwrap_or_default(),
        None => std::path::absolute(&file)
            .ok()
            .and_then(|p| p.parent().map(std::path::Path::to_path_buf))
            .unwrap_or_default(),
    };
    let mut hasher = diffuse_runtime::reuse::programs::ProgramHasher::new(&base);
    for (_, d) in &mut tasks {
        hasher.fill(d);
    }
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
        let answer: Result<Submitted, CallError> = rt.block_on(
            c.call(
                c.http
                    .post(format!("{}/v1/tasks", c.url))
                    .header("content-type", "application/x-ndjson")
                    .body(body),
            ),
        );
        match answer {
            Ok(v) => {
                let (batch, n) = (v.batch, v.submitted as u64);
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

fn print_status(s: &Status, json: bool) {
    if json {
        println!("{}", serde_json::to_string(s).expect("a status serializes"));
    } else {
        if let Some(e) = &s.journal_error {
            eprintln!(
                "error: the dispatcher cannot write its journal (submissions wait and outcomes are not confirmed until it can): {e}"
            );
        }
        if s.unschedulable > 0 {
            eprintln!(
                "warning: {} queued task(s) fit no connected worker: {}",
                s.unschedulable,
                s.unschedulable_examples.join("; ")
            );
        }
        println!(
            "queued {}  running {}  succeeded {}  failed {}  cancelled {}  workers {} ({} slots, {} busy)",
            s.queued,
            s.running + s.held_ready + s.ending,
            s.succeeded,
            s.failed,
            s.cancelled,
            s.workers,
            s.slots,
            s.busy_slots
        );
        if s.reused > 0 {
            println!(
                "reused {}: succeeded without running, from an identical task's kept result",
                s.reused
            );
        }
        if s.remaking > 0 {
            println!(
                "remaking {}: succeeded tasks running again to remake a lost tmp:// object",
                s.remaking
            );
        }
        if s.warm.processes > 0 || s.warm.calls > 0 {
            println!(
                "warm Python: {} process(es), {} calls run, {} resident",
                s.warm.processes,
                s.warm.calls,
                crate::size::format_size(s.warm.rss)
            );
        }
        print_workers(s);
    }
}

/// Workers by state, with an elastic pool's settings and its last resource-manager error, then
/// one line per worker (name, state, job id).
fn print_workers(s: &Status) {
    let by_state: Vec<String> = s
        .workers_by_state
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    if let Some(pool) = &s.pool {
        println!(
            "pool: {}, {}-{} workers; {}; {} request(s) failed",
            pool.provisioner,
            pool.min_workers,
            pool.max_workers,
            if by_state.is_empty() {
                "none now".to_string()
            } else {
                by_state.join(", ")
            },
            pool.failed_requests
        );
        if let Some(e) = &pool.last_error {
            println!("pool error: {e}");
        }
        let (adopted, cancelled) = (pool.extra_jobs_adopted, pool.extra_jobs_cancelled);
        if adopted + cancelled > 0 {
            println!(
                "pool: {adopted} job(s) no request owned adopted, {cancelled} cancelled; last: {}",
                pool.last_extra_job.as_deref().unwrap_or("")
            );
        }
    } else if !by_state.is_empty() {
        println!("workers: {}", by_state.join(", "));
    }
    for w in &s.worker_list {
        let warm = w
            .warm
            .map(|u| format!(" warm {} ({} calls)", u.processes, u.calls))
            .unwrap_or_default();
        println!(
            "  {:<24} {:<10} {}{warm}",
            w.name,
            w.state,
            w.job
                .as_ref()
                .map(|j| format!("job {j}"))
                .unwrap_or_default()
        );
    }
    if s.worker_list_more > 0 {
        println!(
            "  ... and {} more (GET /v1/workers lists them all, a page at a time)",
            s.worker_list_more
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
        let page: TaskPage = rt.block_on(c.call(c.http.get(format!(
            "{}/v1/tasks?state=failed&limit={}",
            c.url,
            a.limit.clamp(1, 10_000)
        ))))?;
        let tasks = page.tasks;
        if a.json {
            println!("{}", serde_json::to_string(&tasks)?);
            return Ok(ExitCode::SUCCESS);
        }
        if tasks.is_empty() {
            println!("no failed task");
        }
        for t in &tasks {
            let o = t.outcome.as_ref();
            let why = super::tasks::reason(o);
            let node = o
                .and_then(|o| o.node.as_ref().map(|n| (n, o.attempt)))
                .map(|(n, attempt)| format!(" (on {n}, attempt {attempt})"))
                .unwrap_or_default();
            println!("{}: {why}{node}", t.id);
            let report = o.and_then(|o| o.report());
            if let Some(tail) = report.and_then(|r| r.stderr_tail) {
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
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
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
            match c.call::<CancelAnswer>(c.http.post(url)).await {
                Ok(v) => println!("{id}: {}", v.result),
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
                    | CallError::Tls(message)
                    | CallError::Mismatch(message),
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
    let batches = awaited_batches(&a, &c)?;
    let rt = runtime()?;
    let mut watch = Watch::new(a.json);
    let progress = rt.block_on(async {
        loop {
            match progress(&c, a.all, &batches).await {
                Ok((status, p)) => {
                    if watch.answered(&c, &status, &p) {
                        return Ok(p);
                    }
                }
                Err(CallError::Unreachable(e)) => {
                    let since = *watch.unreachable_since.get_or_insert_with(|| {
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
    if watch.tty && !a.json {
        eprintln!();
    }
    if !a.all && a.batches.is_empty() {
        forget(&c.url, &batches);
    }
    print_progress(&progress, a.json)?;
    Ok(if progress.failed + progress.cancelled > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The batches `diffuse wait` waits for: those given, none with `--all`, else those recorded
/// as submitted to this dispatcher from here.
fn awaited_batches(a: &WaitArgs, c: &Client) -> Result<Vec<u64>> {
    if a.all {
        return Ok(Vec::new());
    }
    if !a.batches.is_empty() {
        return Ok(a.batches.clone());
    }
    let mut b: Vec<u64> = remembered(&c.url).iter().map(|r| r.batch).collect();
    b.sort_unstable();
    b.dedup();
    if b.is_empty() {
        bail!(
            "nothing to wait for: no batch submitted to {} from here since the last `diffuse wait` (give batch numbers, or --all)",
            c.url
        );
    }
    Ok(b)
}

/// The dispatcher's status and where the awaited tasks stand: all its tasks with `all`, else
/// those of `batches`.
async fn progress(c: &Client, all: bool, batches: &[u64]) -> Result<(Status, Progress), CallError> {
    let status = c.status().await?;
    if all {
        let p = Progress {
            tasks: status.submitted,
            pending: status.queued + status.held_ready + status.running + status.ending,
            succeeded: status.succeeded,
            failed: status.failed,
            cancelled: status.cancelled,
            failed_ids: Vec::new(),
        };
        return Ok((status, p));
    }
    let mut p = Progress::default();
    for b in batches {
        let v: BatchView = c
            .call(c.http.get(format!("{}/v1/batches/{b}", c.url)))
            .await?;
        p.tasks += v.counts.tasks;
        p.pending += v.pending;
        p.succeeded += v.counts.succeeded;
        p.failed += v.counts.failed;
        p.cancelled += v.counts.cancelled;
        let room = 10usize.saturating_sub(p.failed_ids.len());
        p.failed_ids
            .extend(v.counts.failed_ids.into_iter().take(room));
    }
    Ok((status, p))
}

/// What `diffuse wait` has told so far on stderr, and when: the progress line, and the
/// warnings (no worker, tasks no worker fits, the dispatcher unreachable).
struct Watch {
    json: bool,
    tty: bool,
    /// How often the progress line is printed.
    every: Duration,
    last_print: Option<Instant>,
    unreachable_since: Option<Instant>,
    no_worker_since: Option<Instant>,
    warned_no_worker: bool,
    warned_unfit: u64,
}

impl Watch {
    fn new(json: bool) -> Watch {
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        Watch {
            json,
            tty,
            every: if tty {
                Duration::from_secs(1)
            } else {
                Duration::from_secs(10)
            },
            last_print: None,
            unreachable_since: None,
            no_worker_since: None,
            warned_no_worker: false,
            warned_unfit: 0,
        }
    }

    /// The dispatcher answered with `status` and the awaited tasks stand at `p`: whether they
    /// have all ended; if not, what is worth telling (no worker, unfit tasks, progress).
    fn answered(&mut self, c: &Client, status: &Status, p: &Progress) -> bool {
        if self.unreachable_since.take().is_some() && !self.json {
            eprintln!("the dispatcher answers again");
        }
        if p.pending == 0 {
            return true;
        }
        let workers = u64::from(status.workers);
        self.warn_no_worker(c, workers, p.pending);
        self.warn_unfit(status);
        if !self.json && self.last_print.is_none_or(|t| t.elapsed() >= self.every) {
            self.last_print = Some(Instant::now());
            let done = p.succeeded + p.failed + p.cancelled;
            let line = format!(
                "waiting: {done}/{} done ({} failed); dispatcher: {} running, {} queued, {} workers",
                p.tasks,
                p.failed,
                status.running + status.held_ready + status.ending,
                status.queued,
                workers
            );
            if self.tty {
                eprint!("\r{line}   ");
            } else {
                eprintln!("{line}");
            }
        }
        false
    }

    /// No worker for over 5 s while `pending` tasks wait: said once until one connects.
    fn warn_no_worker(&mut self, c: &Client, workers: u64, pending: u64) {
        if workers == 0 {
            let since = *self.no_worker_since.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_secs(5) && !self.warned_no_worker {
                eprintln!(
                    "warning: no worker is connected to {}: the {} queued tasks wait for one",
                    c.url, pending
                );
                self.warned_no_worker = true;
            }
        } else {
            self.no_worker_since = None;
            self.warned_no_worker = false;
        }
    }

    /// More queued tasks than last time fit no connected worker: said with examples.
    fn warn_unfit(&mut self, status: &Status) {
        let unfit = status.unschedulable;
        if unfit > self.warned_unfit {
            eprintln!(
                "warning: {unfit} queued task(s) fit no connected worker and wait for a bigger one (cancel them with `diffuse cancel`): {}",
                status.unschedulable_examples.join("; ")
            );
        }
        self.warned_unfit = unfit;
    }
}

/// The outcome of `diffuse wait`: counts and the first failed ids, or one JSON object.
fn print_progress(progress: &Progress, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(progress)?);
        return Ok(());
    }
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
    Ok(())
}
