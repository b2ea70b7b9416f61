//! `diffuse`: a data-aware many-task execution engine.
//!
//! The binary is thin: it parses arguments and calls the library crates. Its subcommands
//! (`tests/docs.rs` holds this list to clap's):
//! - on one machine: `run` (a task file on local workers) and `demo`;
//! - on a cluster: `dispatcher`, `worker`, and `config` (the settings they would start with,
//!   and where each comes from);
//! - against a running dispatcher: `submit`, `status`, `tasks`, `logs`, `cancel`, `wait`,
//!   `locate`, `place`, `stage`, `calibrate` (a testbed file measured on its pool);
//! - `cache`: the caches `diffuse run` keeps between runs;
//! - measuring the scheduler: `sim` (the discrete-event simulator over the scheduling core),
//!   `emulate` (many emulated workers in one process, for a dispatcher at a cluster's size).

/// mimalloc, not glibc's malloc: the dispatcher allocates and frees small objects for every
/// task on three threads, and glibc's malloc was 40% of the scheduler thread's time in a
/// full-rate drain (`PERF=1 bench/drain.sh`; docs/scale.md has the figures).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod config;
mod dad_args;
mod live;
mod numbers;
mod policy_args;
mod sim;
mod sim_tasks;
mod size;
mod transfer_args;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

/// diffuse: run many short tasks where their data already is.
///
/// Workers cache what tasks read and serve it to their peers; the dispatcher sends each task to
/// the node that holds its data; nodes are acquired as the queue grows and released when idle.
#[derive(Parser)]
#[command(name = "diffuse", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Demonstrate data diffusion: the same workload with FA and GCC against slow shared storage.
    Demo(live::run::DemoArgs),
    /// Run a task file on local workers: the embedded default (dispatcher, journal, workers).
    /// Ctrl-C stops it; --resume continues it.
    ///
    /// Everything stays on this machine and speaks plain HTTP on the loopback (127.0.0.1): no
    /// TLS. TLS (--tls-cert, --tls-key, --tls-ca) is for `diffuse dispatcher` and `diffuse
    /// worker` on a cluster.
    Run(live::run::RunArgs),
    /// Serve the dispatcher: HTTP API, worker sessions, journal.
    Dispatcher(Box<live::serve::DispatcherArgs>),
    /// Run a worker: executes tasks, caches their inputs, serves its cache to peers.
    Worker(live::serve::WorkerArgs),
    /// Submit a task file to a running dispatcher (in acknowledged batches).
    Submit(live::client::SubmitArgs),
    /// Show a running dispatcher's counters (--failed: its failed tasks and why).
    Status(live::client::StatusArgs),
    /// List tasks (all, or in one --state) with their worker and why they ended; --json for
    /// scripts.
    Tasks(live::tasks::TasksArgs),
    /// Print a task's captured stdout (or --stderr), from the worker that ran it.
    Logs(live::client::LogsArgs),
    /// Cancel tasks: queued ones end at once, running ones' processes are stopped.
    Cancel(live::client::CancelArgs),
    /// Where an object is: its state, the workers holding it, its size and producer.
    Locate(live::objects::LocateArgs),
    /// Put a tmp:// object on a worker: its producer runs there, or it is copied there.
    Place(live::objects::PlaceArgs),
    /// Copy a batch of objects to workers before the tasks that read them (a reference
    /// dataset, a model), scheduled as GDS does: several sources per object, the transfer that
    /// ends first starts first.
    Stage(live::stage::StageArgs),
    /// Show or clear the caches `diffuse run` keeps between runs.
    Cache(live::cache::CacheArgs),
    /// Wait until the tasks you submitted have ended (exit 1 if one of them failed).
    Wait(live::client::WaitArgs),

    /// Show the settings `diffuse dispatcher` or `diffuse worker` would start with here, and
    /// where each comes from (a flag, an environment variable, the settings file, the default).
    Config(config::ConfigArgs),
    /// Simulate a workload on a model of the paper's testbeds (same scheduling code as live).
    Sim(sim::SimArgs),
    /// Measure the running pool (storage, peer and local read rates, latencies, per-task
    /// cost) and write a testbed file for `diffuse sim --testbed`.
    Calibrate(live::calibrate::CalibrateArgs),
    /// Emulate many workers in one process, speaking the real protocol without running tasks
    /// (each "runs" for its compute_s): for measuring a dispatcher at the size of a cluster.
    Emulate(live::emulate::EmulateArgs),
}

fn main() -> ExitCode {
    let base = Cli::command();
    let (matches, file, _) = match config::matches(&base, std::env::args_os().collect(), true) {
        Ok(m) => m,
        Err(config::Error::Clap(e)) => e.exit(),
        Err(config::Error::Config(e)) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    if let Some(f) = file {
        eprintln!("diffuse: settings from {}", f.display());
    }
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Command::Config(args) => config::show(&base, args),
        Command::Sim(args) => sim::run(args),
        Command::Run(args) => live::run::run(args),
        Command::Demo(args) => live::run::demo(args),
        Command::Dispatcher(args) => live::serve::dispatcher(*args),
        Command::Worker(args) => live::serve::worker(args),
        Command::Submit(args) => live::client::submit(args),
        Command::Status(args) => live::client::status(args),
        Command::Logs(args) => live::client::logs(args),
        Command::Tasks(args) => live::tasks::tasks(args),
        Command::Cancel(args) => live::client::cancel(args),
        Command::Cache(args) => live::cache::cache(args),
        Command::Locate(args) => live::objects::locate(args),
        Command::Place(args) => live::objects::place(args),
        Command::Stage(args) => live::stage::stage(args),
        Command::Wait(args) => live::client::wait(args),
        Command::Calibrate(args) => live::calibrate::calibrate(args),
        Command::Emulate(args) => live::emulate::emulate(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
