//! `diffuse`: a data-aware many-task execution engine.
//!
//! The binary is thin: it parses arguments and calls the library crates. Subcommands:
//! `sim` (the discrete-event simulator over the scheduling core); `run`, `dispatcher`, `worker`,
//! `submit`, `status`, `wait` (the live runtime).

mod live;
mod sim;
mod size;

use clap::{Parser, Subcommand};
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
    Demo(live::DemoArgs),
    /// Run a task file on local workers: the embedded default (dispatcher, journal, workers).
    Run(live::RunArgs),
    /// Serve the dispatcher: HTTP API, worker sessions, journal.
    Dispatcher(live::DispatcherArgs),
    /// Run a worker: executes tasks, caches their inputs, serves its cache to peers.
    Worker(live::WorkerArgs),
    /// Submit a task file to a running dispatcher.
    Submit(live::SubmitArgs),
    /// Show a running dispatcher's counters.
    Status(live::StatusArgs),
    /// Wait until a running dispatcher has nothing queued or running (exit 1 if a task failed).
    Wait(live::StatusArgs),
    /// Simulate a workload on a model of the paper's testbeds (same scheduling code as live).
    Sim(sim::SimArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim::run(args),
        Command::Run(args) => live::run(args),
        Command::Demo(args) => live::demo(args),
        Command::Dispatcher(args) => live::dispatcher(args),
        Command::Worker(args) => live::worker(args),
        Command::Submit(args) => live::submit(args),
        Command::Status(args) => live::status(args),
        Command::Wait(args) => live::wait(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
