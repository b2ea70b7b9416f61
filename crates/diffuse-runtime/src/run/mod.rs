//! `diffuse run`: the embedded default. Starts a dispatcher in this process and N local worker
//! processes (each with its own cache directory, standing in for separate nodes), submits a
//! task file, shows progress, waits, writes per-task results, and summarises.
//!
//! SIGINT (Ctrl-C) or SIGTERM stops the run: the workers stop their tasks (each task's whole
//! process group) and exit cleanly, the results of what ended are written, and
//! `diffuse run --resume RUN_DIR` later continues from the journal: tasks that ended keep their
//! outcome, the others run.

mod config;
mod local;
mod output;

pub use config::{Failure, RunConfig, RunError, RunSummary, RESULTS_STORE};
use local::{
    claim_caches, elastic_pool, restart_dead_workers, start_worker, stop_workers, wait_for_workers,
    Local, Workers,
};
use output::{progress_line, summary, write_results, Printer};

use crate::dispatcher::scheduler::SchedulerConfig;
use crate::dispatcher::{self, DispatcherConfig, Handle, Tokens};
use crate::spec::{parse_task_bytes, TaskDef};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a run directory records of its run, for `--resume`.
#[derive(Serialize, Deserialize)]
struct RunRecord {
    tasks: PathBuf,
}

const RECORD: &str = "run.json";

fn token() -> String {
    let mut b = [0u8; 24];
    rand::rng().fill_bytes(&mut b);
    hex::encode(b)
}

/// A new directory under `base` named after the time (UTC) it was made: `run-20261123-170405`,
/// or `run-20261123-170405-2` (and so on) when two runs start in the same second.
pub fn new_run_dir(base: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(base)?;
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let stamp = utc_stamp(secs);
    for n in 1.. {
        let name = if n == 1 {
            format!("run-{stamp}")
        } else {
            format!("run-{stamp}-{n}")
        };
        let dir = base.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    unreachable!("some suffix is free")
}

/// `YYYYMMDD-HHMMSS` in UTC for Unix time `secs` (the civil-from-days algorithm of H. Hinnant).
fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// SIGINT or SIGTERM, whichever comes first: its name.
async fn interrupted() -> String {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM".into(),
        _ = int.recv() => "SIGINT".into(),
    }
}

/// Run a task file to completion (or continue one, with `resume`): the steps below, in order.
pub async fn run(cfg: RunConfig) -> Result<RunSummary, RunError> {
    let mut cfg = cfg;
    cfg.run_dir = std::path::absolute(&cfg.run_dir)?;
    let journal = cfg.run_dir.join("journal.sqlite");
    let defs = if cfg.resume {
        resume_record(&mut cfg, &journal)?;
        None
    } else {
        Some(new_run(&mut cfg, &journal)?)
    };
    let tokens = Tokens {
        client: token(),
        worker: token(),
        metrics: None,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let (handle, scheduler) = start_dispatcher(&cfg, &journal, &tokens, &url)?;
    // An elastic pool's workers come from the dispatcher's provisioner; a fixed pool's are
    // started here, on caches kept between runs.
    let fixed = if cfg.max_workers.is_some() {
        0
    } else {
        cfg.workers
    };
    let caches = claim_caches(&cfg, fixed)?;
    let logs = cfg.run_dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(dispatcher::serve(
        listener,
        handle.clone(),
        crate::server::Limits::standard(),
        None,
        async {
            let _ = stop_rx.await;
        },
    ));
    let mut local = Local {
        workers: Workers(Vec::new()),
        restarts: Vec::new(),
        caches,
        url,
        token: tokens.worker.clone(),
        logs,
    };
    for (i, cache) in local.caches.dirs.iter().enumerate() {
        let child = start_worker(&cfg, i as u32, cache, &local.url, &local.token)?;
        local.workers.0.push(child);
    }
    local.restarts = vec![0; local.workers.0.len()];
    let mut signal = std::pin::pin!(interrupted());
    let mut stopped_by: Option<String> = None;
    tokio::select! {
        r = wait_for_workers(&handle, fixed, &mut local.workers) => r?,
        s = &mut signal => stopped_by = Some(s),
    }

    let start = Instant::now();
    let mut printer = cfg
        .print
        .map(|keep_order| Printer::new(keep_order, defs.as_deref()));
    if let (Some(defs), None) = (defs, &stopped_by) {
        handle
            .submit(defs)
            .await
            .map_err(|e| RunError::Api(format!("submission refused: {e}")))?;
    }
    let status = follow(
        &cfg,
        &handle,
        &mut local,
        printer.as_mut(),
        &mut signal,
        &mut stopped_by,
        start,
    )
    .await?;
    let makespan = start.elapsed().as_secs_f64();
    if cfg.progress && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprintln!();
    }
    stop_workers(&mut local.workers, stopped_by.as_deref(), &handle).await;
    // Outcomes of the last moments, journaled: counted in the summary too.
    let status = handle.status().await.unwrap_or(status);
    if let Some(p) = printer.as_mut() {
        p.poll(&handle).await?;
        p.finish();
    }
    let _ = stop_tx.send(());
    let _ = server.await;
    drop(handle);
    let _ = tokio::task::spawn_blocking(move || scheduler.join()).await;

    let results = cfg.run_dir.join("results.jsonl");
    let failures = write_results(&journal, &results)?;
    let Local { caches, logs, .. } = local;
    drop(caches);
    Ok(summary(
        &status, stopped_by, makespan, failures, results, logs, &cfg,
    ))
}

/// `--resume`: the run directory holds a run; its task file is the one it was started with
/// unless given.
fn resume_record(cfg: &mut RunConfig, journal: &Path) -> Result<(), RunError> {
    if !journal.exists() {
        return Err(RunError::Setup(format!(
            "--resume {}: no run there (no journal.sqlite)",
            cfg.run_dir.display()
        )));
    }
    if cfg.tasks.as_os_str().is_empty() {
        let record_path = cfg.run_dir.join(RECORD);
        let record: RunRecord = std::fs::read(&record_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| {
                RunError::Setup(format!("--resume: cannot read {}", record_path.display()))
            })?;
        cfg.tasks = record.tasks;
    }
    Ok(())
}

/// A new run: its tasks read (or made on the command line, then written to the run directory),
/// the run directory made and its record written.
fn new_run(cfg: &mut RunConfig, journal: &Path) -> Result<Vec<TaskDef>, RunError> {
    let mut defs = match cfg.defs.take() {
        Some(defs) => defs,
        None => {
            let bytes = std::fs::read(&cfg.tasks).map_err(|e| {
                RunError::Setup(format!("cannot read {}: {e}", cfg.tasks.display()))
            })?;
            parse_task_bytes(&bytes).map_err(|error| RunError::BadTaskFile {
                file: cfg.tasks.display().to_string(),
                error,
            })?
        }
    };
    if cfg.reuse {
        // Program files named in commands are part of the tasks' identities.
        let base = std::path::absolute(&cfg.tasks)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .filter(|_| !cfg.tasks.as_os_str().is_empty())
            .unwrap_or_else(|| std::env::current_dir().unwrap_or_default());
        let mut hasher = crate::reuse::programs::ProgramHasher::new(&base);
        for d in &mut defs {
            hasher.fill(d);
        }
    }
    std::fs::create_dir_all(&cfg.run_dir)
        .map_err(|e| RunError::Setup(format!("cannot create {}: {e}", cfg.run_dir.display())))?;
    if journal.exists() {
        return Err(RunError::Setup(format!(
            "{} already holds a run (journal.sqlite): continue it with --resume {0}, or choose another --run-dir",
            cfg.run_dir.display()
        )));
    }
    if cfg.tasks.as_os_str().is_empty() {
        // Tasks made on the command line: kept with the run.
        cfg.tasks = cfg.run_dir.join("tasks.jsonl");
        let text: String = defs
            .iter()
            .map(|d| serde_json::to_string(d).expect("task serializes") + "\n")
            .collect();
        std::fs::write(&cfg.tasks, text)?;
    }
    let record = RunRecord {
        tasks: std::path::absolute(&cfg.tasks)?,
    };
    std::fs::write(
        cfg.run_dir.join(RECORD),
        serde_json::to_vec_pretty(&record).expect("record serializes"),
    )?;
    Ok(defs)
}

/// The dispatcher, in this process, on the run's journal: a fixed pool of `cfg.workers`, or an
/// elastic one of at most `cfg.max_workers`.
fn start_dispatcher(
    cfg: &RunConfig,
    journal: &Path,
    tokens: &Tokens,
    url: &str,
) -> Result<(Handle, std::thread::JoinHandle<()>), RunError> {
    let elastic = cfg
        .max_workers
        .map(|max| elastic_pool(cfg, max, url, &tokens.worker));
    Ok(dispatcher::start(DispatcherConfig {
        core: match &elastic {
            Some((core, _)) => core.clone(),
            None => cfg.core.clone(),
        },
        tokens: tokens.clone(),
        scheduler: SchedulerConfig {
            heartbeat: Duration::from_millis(500),
            heartbeat_timeout: Duration::from_secs(10),
            journal: journal.to_path_buf(),
            lookup_timeout: Duration::from_secs(30),
            task_defaults: cfg.task_defaults,
            fixed_pool: cfg.max_workers.is_none().then_some(cfg.workers),
            reuse: cfg.reuse,
            // Beside the workers' caches, which outlive the run: a second run reuses what the
            // first computed.
            results_store: Some(cfg.cache_root.join(RESULTS_STORE)),
        },
        storage_emulator: cfg.storage_bandwidth.clone(),
        pool: elastic.map(|(_, pool)| pool),
        // One machine, plain HTTP on the loopback: no TLS.
        trust: crate::tls::Trust::system(),
    })?)
}

/// Until every task has ended or a signal came: the progress line, `--print`'s output, and
/// local workers that died started again. The last status seen.
async fn follow(
    cfg: &RunConfig,
    handle: &Handle,
    local: &mut Local,
    mut printer: Option<&mut Printer>,
    signal: &mut std::pin::Pin<&mut impl std::future::Future<Output = String>>,
    stopped_by: &mut Option<String>,
    start: Instant,
) -> Result<crate::dispatcher::scheduler::Status, RunError> {
    let mut last_print = Instant::now();
    loop {
        let s = handle.status().await?;
        let done = s.succeeded + s.failed + s.cancelled;
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let every = if tty {
            Duration::from_millis(500)
        } else {
            Duration::from_secs(5)
        };
        if cfg.progress && (last_print.elapsed() > every || done == s.submitted) {
            last_print = Instant::now();
            let line = progress_line(&s, start);
            if tty {
                eprint!("\r{line}   ");
            } else {
                eprintln!("{line}");
            }
            let _ = std::io::stderr().flush();
        }
        if let Some(p) = printer.as_deref_mut() {
            p.poll(handle).await?;
        }
        if done >= s.submitted || stopped_by.is_some() {
            return Ok(s);
        }
        restart_dead_workers(cfg, local, s.workers)?;
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
            sig = signal.as_mut() => *stopped_by = Some(sig),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_directories_are_named_by_utc_time_and_never_shared() {
        assert_eq!(utc_stamp(0), "19700101-000000");
        assert_eq!(utc_stamp(1_795_454_645), "20261123-172405");
        assert_eq!(utc_stamp(951_782_400), "20000229-000000");
        let d = tempfile::tempdir().unwrap();
        let a = new_run_dir(d.path()).unwrap();
        let b = new_run_dir(d.path()).unwrap();
        assert_ne!(a, b);
        assert!(a.is_dir() && b.is_dir());
    }
}
