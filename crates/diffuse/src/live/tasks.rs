//! `diffuse tasks`: a dispatcher's tasks, all or in one state, as a table or as JSON, page after
//! page of `GET /v1/tasks`.

use super::api::{Client, ClientArgs};
use super::runtime;
use anyhow::Result;
use clap::Args;
use diffuse_runtime::dispatcher::answers::{OutcomeState, TaskOutcome, TaskPage, TaskView};
use std::process::ExitCode;

/// Arguments of `diffuse tasks`.
#[derive(Args, Debug)]
pub struct TasksArgs {
    /// Only tasks in this state: queued, running, succeeded, failed or cancelled.
    #[arg(long, value_parser = ["queued", "running", "succeeded", "failed", "cancelled"])]
    state: Option<String>,
    /// At most this many, in submission order.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    limit: u64,
    /// Print one JSON array (each task as `GET /v1/tasks/{id}` shows it, without attempts).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    client: ClientArgs,
}

/// Why an ended task ended as it did, in a few words (empty for a success).
pub(crate) fn reason(outcome: Option<&TaskOutcome>) -> String {
    let Some(outcome) = outcome.filter(|o| o.state != OutcomeState::Succeeded) else {
        return String::new();
    };
    match (&outcome.error, outcome.exit_code) {
        (Some(e), _) => e.to_string(),
        (None, Some(c)) => format!("exit code {c}"),
        (None, None) => "killed by a signal".into(),
    }
}

/// `diffuse tasks`.
pub fn tasks(a: TasksArgs) -> Result<ExitCode> {
    let c = Client::new(&a.client)?;
    let rt = runtime()?;
    let mut all: Vec<TaskView> = Vec::new();
    let mut after: Option<String> = None;
    while (all.len() as u64) < a.limit {
        let mut q = format!(
            "{}/v1/tasks?limit={}",
            c.url,
            (a.limit - all.len() as u64).min(10_000)
        );
        if let Some(s) = &a.state {
            q.push_str(&format!("&state={s}"));
        }
        if let Some(n) = &after {
            q.push_str(&format!("&after={n}"));
        }
        let page: TaskPage = rt.block_on(c.call(c.http.get(q)))?;
        all.extend(page.tasks);
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    if a.json {
        println!("{}", serde_json::to_string(&all)?);
        return Ok(ExitCode::SUCCESS);
    }
    if all.is_empty() {
        println!("no task");
        return Ok(ExitCode::SUCCESS);
    }
    let width = all
        .iter()
        .map(|t| t.id.len())
        .max()
        .unwrap_or(2)
        .clamp(2, 40);
    println!(
        "{:<width$}  {:<9}  {:<12}  {:>7}  why",
        "id", "state", "worker", "attempt"
    );
    for t in &all {
        println!(
            "{:<width$}  {:<9}  {:<12}  {:>7}  {}",
            t.id,
            t.state,
            t.node.as_deref().unwrap_or("-"),
            t.attempt,
            reason(t.outcome.as_ref()),
        );
    }
    Ok(ExitCode::SUCCESS)
}
