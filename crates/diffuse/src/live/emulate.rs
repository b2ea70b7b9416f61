//! `diffuse emulate`: many emulated workers in one process, for measuring a dispatcher at the
//! size of a cluster (see `diffuse_runtime::emulator`).

use super::{harden, logging, read_token};
use anyhow::Result;
use clap::Args;
use diffuse_runtime::emulator::{run, EmulatorConfig};
use std::path::PathBuf;
use std::process::ExitCode;

/// `diffuse emulate` arguments.
#[derive(Args, Debug)]
pub struct EmulateArgs {
    /// Dispatcher URL (http:// only: the emulator is for benchmarks on a test network).
    #[arg(long, env = "DIFFUSE_DISPATCHER", default_value = super::DEFAULT_DISPATCHER)]
    dispatcher: String,
    /// File holding the worker token [default: $DIFFUSE_WORKER_TOKEN].
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Workers to emulate, each one WebSocket session.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    workers: u32,
    /// Slots (cores) of each worker.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    slots: u32,
    /// Worker names are PREFIX0, PREFIX1, ...
    #[arg(long, default_value = "emu-")]
    prefix: String,
    /// Sessions opened per second while the pool connects.
    #[arg(long, default_value_t = 2000.0)]
    connect_rate: f64,
    /// End every task at once, ignoring its `compute_s` (by default a task "runs" for its
    /// `compute_s`, 0 when it gives none).
    #[arg(long)]
    no_compute: bool,
    /// Threads of the emulator's runtime (keep it below the machine's cores, so that the
    /// dispatcher being measured has its own).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    threads: u32,
}

/// Run the emulated pool until SIGINT or SIGTERM (each worker then says it is leaving, so its
/// tasks run elsewhere) or until the dispatcher shuts every session down; print a summary as
/// JSON on stdout.
pub fn emulate(a: EmulateArgs) -> Result<ExitCode> {
    harden();
    logging();
    if !a.dispatcher.starts_with("http://") {
        anyhow::bail!(
            "--dispatcher: the emulator speaks plain http:// only, got {}",
            a.dispatcher
        );
    }
    let token = read_token(&a.token_file, "DIFFUSE_WORKER_TOKEN", "--token-file")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.threads as usize)
        .enable_all()
        .build()?;
    let cfg = EmulatorConfig {
        dispatcher: a.dispatcher.trim_end_matches('/').to_string(),
        token,
        workers: a.workers,
        slots: a.slots,
        prefix: a.prefix,
        connect_rate: a.connect_rate,
        honour_compute: !a.no_compute,
    };
    let summary = rt.block_on(async move {
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) else {
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            let _ = stop_tx.send(true);
        });
        run(cfg, stop).await
    });
    println!("{}", serde_json::to_string(&summary)?);
    Ok(if summary.errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
