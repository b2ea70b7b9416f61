//! `diffuse`: a data-aware many-task execution engine.
//!
//! The binary is thin: it parses arguments and calls the library crates. Subcommands:
//! `sim` (the discrete-event simulator over the scheduling core).

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
    /// Simulate a workload on a model of the paper's testbeds (same scheduling code as live).
    Sim(sim::SimArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
