//! `diffuse run` (the embedded default) and `diffuse demo`.

use super::{harden, parse_rate, SchedArgs, StorageArgs};
use crate::size::{format_size, parse_size};
use anyhow::Result;
use clap::Args;
use diffuse_core::PolicyKind;
use diffuse_runtime::run::{RunConfig, RunError, RunSummary};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `diffuse run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Task file: one JSON object per line (or a JSON array). With --each: the arguments, one
    /// task each (`-`: read them from standard input, one per line). With --resume: none.
    #[arg(required_unless_present = "resume", num_args = 0.., value_name = "TASKS|ARGS")]
    items: Vec<String>,
    /// Make one task per argument from this `sh -c` template, with GNU parallel's replacement
    /// strings: {} (the argument; a file becomes an input and {} its local path), {.} (without
    /// extension), {/} (base name), {//} (directory), {/.} (base name without extension), {#}
    /// (its number). Without any, " {}" is appended.
    #[arg(long, value_name = "TEMPLATE")]
    each: Option<String>,
    /// Print each task's stdout on stdout as the task ends, whole, never interleaved; the
    /// summary then goes to stderr.
    #[arg(long, conflicts_with = "json")]
    print: bool,
    /// With --print: in the order the tasks were given.
    #[arg(long, requires = "print")]
    keep_order: bool,
    /// Continue an interrupted run from its journal: tasks that ended keep their outcome, the
    /// others run. The task file is the one the run started with.
    #[arg(long, value_name = "RUN_DIR", conflicts_with_all = ["items", "run_dir", "each"])]
    resume: Option<PathBuf>,
    /// Local worker processes, each with its own cache directory (kept between runs).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    workers: u32,
    /// Instead of --workers fixed ones: start local workers as the queue grows, at most this
    /// many, and release each after --idle-release without a task (the dispatcher's elastic
    /// pool; caches in the run directory, so a repeated run starts cold).
    #[arg(long, conflicts_with = "workers", value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    max_workers: Option<u32>,
    /// With --max-workers: a worker with no task for this long is released.
    #[arg(long, default_value = "30s", requires = "max_workers", value_parser = super::seconds, allow_hyphen_values = true)]
    idle_release: std::time::Duration,
    /// Cores per worker: the sum of the "cores" of the tasks a worker runs at once.
    #[arg(long = "cores-per-worker", value_name = "CORES", visible_alias = "slots-per-worker", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    slots_per_worker: u32,
    /// Cache quota per worker, e.g. 1GB.
    #[arg(long, default_value = "1GB", value_parser = parse_size, allow_hyphen_values = true)]
    cache_size: u64,
    /// Where the workers' caches live between runs, so that a second run over the same data is
    /// warm (worker-0/, worker-1/, ...; `diffuse cache info` shows them) [default:
    /// $XDG_CACHE_HOME/diffuse, else ~/.cache/diffuse].
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Eviction policy: random, fifo, lru or lfu (each worker on its own), or 2mark (the
    /// dispatcher decides for all workers together; workers keep lru as a guard).
    #[arg(long, value_parser = crate::sim::eviction, default_value = "lru")]
    eviction: crate::sim::EvictionArg,
    /// Directory for the journal, the tasks' output (logs/) and results.jsonl [default: a new
    /// diffuse-runs/run-<UTC date>-<time>].
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// Allow file:// inputs only under this directory (repeatable; default: anywhere).
    #[arg(long = "input-root", value_name = "DIR")]
    input_roots: Vec<PathBuf>,
    /// Print the summary as JSON on stdout (progress stays on stderr).
    #[arg(long)]
    json: bool,
    /// Workers run no process (dispatcher throughput benchmark).
    #[arg(long)]
    noop: bool,
    /// EMULATION of slow shared storage: serve file:// inputs under --storage-root through one
    /// link of this total bandwidth, shared by all workers (e.g. 200MB/s).
    #[arg(long, value_parser = parse_rate, allow_hyphen_values = true, requires = "storage_root")]
    storage_bandwidth: Option<f64>,
    /// The directory whose files the emulated shared storage serves (with --storage-bandwidth).
    #[arg(long, requires = "storage_bandwidth")]
    storage_root: Option<PathBuf>,
    #[command(flatten)]
    task: super::serve::TaskDefaultArgs,
    #[command(flatten)]
    sched: SchedArgs,
    #[command(flatten)]
    storage: StorageArgs,
}

/// `diffuse run`.
pub fn run(a: RunArgs) -> Result<ExitCode> {
    if let Err(e) = a.sched.check() {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(2));
    }
    harden();
    a.storage.apply();
    let (tasks, defs) = match (&a.each, a.items.as_slice()) {
        (Some(template), args) => (
            PathBuf::new(),
            Some(super::each::tasks(
                template,
                &super::each::arguments(args)?,
                "",
            )?),
        ),
        (None, [file]) => (PathBuf::from(file), None),
        (None, []) => (PathBuf::new(), None),
        (None, _) => anyhow::bail!(
            "one task file, or --each TEMPLATE and its arguments (got {} arguments)",
            a.items.len()
        ),
    };
    let (run_dir, resume) = match (&a.resume, &a.run_dir) {
        (Some(d), _) => (d.clone(), true),
        (None, Some(d)) => (d.clone(), false),
        (None, None) => (
            diffuse_runtime::run::new_run_dir(std::path::Path::new("diffuse-runs")).map_err(
                |e| anyhow::anyhow!("cannot create a run directory under diffuse-runs/: {e}"),
            )?,
            false,
        ),
    };
    let cfg = RunConfig {
        tasks,
        defs,
        print: a.print.then_some(a.keep_order),
        workers: a.workers,
        slots_per_worker: a.slots_per_worker,
        cache_size: a.cache_size,
        core: diffuse_core::CoreConfig {
            two_mark: a.eviction.two_mark,
            ..a.sched.core()
        },
        eviction: a.eviction.policy,
        run_dir,
        resume,
        exe: std::env::current_exe()?,
        noop: a.noop,
        progress: true,
        storage_bandwidth: a.storage_root.clone().zip(a.storage_bandwidth),
        input_roots: a.input_roots.clone(),
        cache_root: a
            .cache_dir
            .clone()
            .unwrap_or_else(diffuse_runtime::run_caches::default_root),
        task_defaults: a.task.defaults(),
        max_workers: a.max_workers,
        idle_release: a.idle_release,
        reuse: a.task.reuse,
    };
    let summary = match super::runtime()?.block_on(diffuse_runtime::run::run(cfg)) {
        Ok(s) => s,
        Err(RunError::BadTaskFile { file, error }) => {
            eprintln!("error: {file}: {error}; nothing was submitted");
            return Ok(ExitCode::from(2));
        }
        Err(e) => return Err(e.into()),
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else if a.print {
        // stdout holds the tasks' output alone.
        let mut text = Vec::new();
        write_summary(&mut text, &summary)?;
        eprint!("{}", String::from_utf8_lossy(&text));
    } else {
        write_summary(&mut std::io::stdout().lock(), &summary)?;
    }
    Ok(match summary.interrupted.as_deref() {
        Some("SIGINT") => ExitCode::from(130),
        Some(_) => ExitCode::from(143),
        None if summary.tasks_failed > 0 => ExitCode::from(1),
        None => ExitCode::SUCCESS,
    })
}

fn write_summary(out: &mut impl std::io::Write, summary: &RunSummary) -> std::io::Result<()> {
    writeln!(
        out,
        "tasks         {} ok{}, {} failed{}",
        summary.tasks_ok,
        if summary.tasks_reused > 0 {
            format!(" ({} reused)", summary.tasks_reused)
        } else {
            String::new()
        },
        summary.tasks_failed,
        if summary.tasks_not_run > 0 {
            format!(", {} not run", summary.tasks_not_run)
        } else {
            String::new()
        }
    )?;
    writeln!(
        out,
        "makespan      {:.2} s ({:.0} tasks/s)",
        summary.makespan_s, summary.tasks_per_s
    )?;
    if summary.accesses == 0 {
        writeln!(out, "accesses      no inputs")?;
    } else {
        writeln!(
            out,
            "accesses      {:.1}% local, {:.1}% peer, {:.1}% from storage",
            summary.hit_local * 100.0,
            summary.hit_peer * 100.0,
            summary.miss * 100.0
        )?;
        writeln!(
            out,
            "bytes         {} local, {} peer, {} storage",
            format_size(summary.bytes_local),
            format_size(summary.bytes_peer),
            format_size(summary.bytes_storage)
        )?;
    }
    writeln!(out, "results       {}", summary.results.display())?;
    writeln!(out, "output        {}", summary.logs.display())?;
    if !summary.failures.is_empty() {
        writeln!(
            out,
            "\nfailed{}:",
            if summary.tasks_failed as usize > summary.failures.len() {
                format!(
                    " (the first {} of {})",
                    summary.failures.len(),
                    summary.tasks_failed
                )
            } else {
                String::new()
            }
        )?;
        for f in &summary.failures {
            let why = match (&f.error, f.exit_code) {
                (Some(e), _) => e.clone(),
                (None, Some(c)) => format!("exit code {c}"),
                (None, None) => "killed by a signal".into(),
            };
            writeln!(
                out,
                "  {}: {why}{}",
                f.id,
                f.node
                    .as_ref()
                    .map(|n| format!(" (on {n})"))
                    .unwrap_or_default()
            )?;
            if let Some(tail) = &f.stderr_tail {
                for line in tail_lines(tail, 5) {
                    writeln!(out, "    | {line}")?;
                }
            }
        }
    }
    if let Some(sig) = &summary.interrupted {
        writeln!(
            out,
            "interrupted   by {sig}; continue with: diffuse run --resume {}",
            summary.run_dir.display()
        )?;
    }
    Ok(())
}

/// The last `n` lines of `text`.
fn tail_lines(text: &str, n: usize) -> Vec<&str> {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

/// Arguments of `diffuse demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Files in the generated dataset.
    #[arg(long, default_value_t = 48, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    files: u32,
    /// Size of each file.
    #[arg(long, default_value = "8MB", value_parser = parse_size, allow_hyphen_values = true)]
    file_size: u64,
    /// Tasks; each checksums one file chosen at random.
    #[arg(long, default_value_t = 480, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    tasks: u32,
    /// Local worker processes.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    workers: u32,
    /// Cores per worker: the sum of the "cores" of the tasks a worker runs at once.
    #[arg(long = "cores-per-worker", value_name = "CORES", visible_alias = "slots-per-worker", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    slots_per_worker: u32,
    /// Cache quota per worker.
    #[arg(long, default_value = "200MB", value_parser = parse_size, allow_hyphen_values = true)]
    cache_size: u64,
    /// EMULATED shared-storage bandwidth, shared by all workers (the point of the demo: shared
    /// storage is slow under load).
    #[arg(long, default_value = "100MB/s", value_parser = parse_rate, allow_hyphen_values = true)]
    storage_bandwidth: f64,
    /// Keep everything in this directory [default: a temporary directory, removed at the end].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print both summaries as JSON.
    #[arg(long)]
    json: bool,
}

/// `diffuse demo`.
pub fn demo(a: DemoArgs) -> Result<ExitCode> {
    use diffuse_runtime::demo::{generate, run_policy, DemoConfig};
    harden();
    let temp;
    let dir = match &a.dir {
        Some(d) => d.clone(),
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_path_buf()
        }
    };
    let cfg = DemoConfig {
        dir,
        files: a.files,
        file_size: a.file_size,
        tasks: a.tasks,
        workers: a.workers,
        slots_per_worker: a.slots_per_worker,
        cache_size: a.cache_size,
        storage_bandwidth: a.storage_bandwidth,
        exe: std::env::current_exe()?,
        seed: 7,
        progress: !a.json,
    };
    let rate = format_size(a.storage_bandwidth as u64);
    if !a.json {
        println!(
            "diffuse demo: {} files of {}, {} tasks (md5sum of a random file), {} workers x {} slots, {} cache each",
            a.files,
            format_size(a.file_size),
            a.tasks,
            a.workers,
            a.slots_per_worker,
            format_size(a.cache_size)
        );
        println!(
            "shared storage EMULATED at {rate}/s in total (--storage-bandwidth), in {}",
            cfg.dir.display()
        );
    }
    let tasks = generate(&cfg)?;
    let rt = super::runtime()?;
    let mut results = Vec::new();
    for policy in [PolicyKind::Fa, PolicyKind::Gcc] {
        if !a.json {
            println!("\n== {} ==", policy.to_string().to_uppercase());
        }
        results.push((policy, rt.block_on(run_policy(&cfg, &tasks, policy))?));
    }
    let (fa, gcc) = (&results[0].1, &results[1].1);
    if a.json {
        println!("{}", serde_json::json!({ "fa": fa, "gcc": gcc }));
    } else {
        println!("\n{:<28} {:>14} {:>14}", "", "FA", "GCC");
        let row = |name: &str, f: String, g: String| println!("{name:<28} {f:>14} {g:>14}");
        row(
            "makespan",
            format!("{:.1} s", fa.makespan_s),
            format!("{:.1} s", gcc.makespan_s),
        );
        row(
            "tasks/s",
            format!("{:.1}", fa.tasks_per_s),
            format!("{:.1}", gcc.tasks_per_s),
        );
        row(
            "read from shared storage",
            format_size(fa.bytes_storage),
            format_size(gcc.bytes_storage),
        );
        row(
            "read from peer caches",
            format_size(fa.bytes_peer),
            format_size(gcc.bytes_peer),
        );
        row(
            "read from local cache",
            format_size(fa.bytes_local),
            format_size(gcc.bytes_local),
        );
        row("local / peer / miss", pct(fa), pct(gcc));
        row(
            "tasks ok / failed",
            format!("{} / {}", fa.tasks_ok, fa.tasks_failed),
            format!("{} / {}", gcc.tasks_ok, gcc.tasks_failed),
        );
        println!(
            "\nWith FA every task reads its file from shared storage, so the run moves at the storage's {rate}/s. \
             With GCC each file crosses shared storage about once; later reads hit a worker's local cache or a \
             peer's, and the dispatcher sends each task to the worker that holds its file: {:.1}x faster, with \
             {:.0}x less traffic on shared storage.",
            fa.makespan_s / gcc.makespan_s.max(1e-9),
            fa.bytes_storage as f64 / (gcc.bytes_storage.max(1)) as f64
        );
    }
    Ok(if fa.tasks_failed + gcc.tasks_failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn pct(s: &RunSummary) -> String {
    format!(
        "{:.0}/{:.0}/{:.0}%",
        s.hit_local * 100.0,
        s.hit_peer * 100.0,
        s.miss * 100.0
    )
}
