//! `diffuse status --job J` and `diffuse cancel --job J`, through `/v1/jobs/{job}`.

use super::api::Client;
use anyhow::Result;
use diffuse_runtime::dispatcher::answers::{JobCancelled, JobView};
use std::process::ExitCode;

fn job_url(c: &Client, job: &str, tail: &[&str]) -> Result<reqwest::Url> {
    let mut url = reqwest::Url::parse(&format!("{}/v1/jobs/", c.url))?;
    {
        let mut seg = url
            .path_segments_mut()
            .map_err(|()| anyhow::anyhow!("{} cannot take a path", c.url))?;
        seg.pop_if_empty().push(job);
        seg.extend(tail);
    }
    Ok(url)
}

/// `diffuse status --job J`: `job J: N tasks; queued Q, running R, succeeded S, failed F, cancelled C`.
pub fn status(rt: &tokio::runtime::Runtime, c: &Client, job: &str, json: bool) -> Result<ExitCode> {
    let v: JobView = match rt.block_on(c.call(c.http.get(job_url(c, job, &[])?))) {
        Ok(v) => v,
        Err(e) => return e.exit_if(&[404]),
    };
    if json {
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!(
            "job {job}: {} tasks; queued {}, running {}, succeeded {}, failed {}, cancelled {}",
            v.tasks, v.queued, v.running, v.succeeded, v.failed, v.cancelled
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `diffuse cancel --job J`: what ended at once and what is being stopped.
pub fn cancel(rt: &tokio::runtime::Runtime, c: &Client, job: &str) -> Result<ExitCode> {
    let v: JobCancelled = match rt.block_on(c.call(c.http.post(job_url(c, job, &["cancel"])?))) {
        Ok(v) => v,
        Err(e) => return e.exit_if(&[404]),
    };
    println!(
        "job {job}: {} cancelled, {} running being stopped, {} had already ended",
        v.cancelled, v.stopping, v.ended
    );
    Ok(ExitCode::SUCCESS)
}
