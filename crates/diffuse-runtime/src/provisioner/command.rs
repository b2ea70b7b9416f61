//! The command backend, for any other resource manager: a user's start command launches one
//! worker, a stop command gives it back.
//!
//! Both run under `sh -c` with placeholders quoted for where they stand:
//! `{request}` (the request's name, also the worker's), `{worker}` (the whole worker command
//! line), `{dispatcher}` (the URL workers reach the dispatcher at) and, in the stop command,
//! `{job}` (the last line the start command printed, or the request's name if it printed
//! none). The worker token is in the environment (`DIFFUSE_WORKER_TOKEN`), never on a command
//! line. Nothing follows the job between start and stop ([`Listing::Unlisted`]): a worker that
//! does not connect within the start time-out, or that stays disconnected, is stopped and counted
//! gone.

use super::backend::{Listing, ResourceManager, RmFuture};
use super::job::{Job, Launch, RmState};
use super::rm::{Call, RmPolicy};
use crate::placeholder::{substitute_shell, Value};

/// The user's commands.
#[derive(Clone, Debug)]
pub struct CommandConfig {
    /// Starts one worker.
    pub start: String,
    /// Stops one (none: the worker is only told to shut down).
    pub stop: Option<String>,
}

/// Starts and stops workers with the user's commands.
pub struct CommandBackend {
    cfg: CommandConfig,
    policy: RmPolicy,
}

impl CommandBackend {
    /// With these commands.
    pub fn new(cfg: CommandConfig, policy: RmPolicy) -> CommandBackend {
        CommandBackend { cfg, policy }
    }

    /// Run the start command; the job id is its last line of output, or the request.
    async fn start(&self, request: &str, launch: &Launch) -> Result<String, String> {
        let mut worker = vec![launch.exe.to_string_lossy().into_owned(), "worker".into()];
        worker.extend(launch.args.iter().cloned());
        let worker = worker
            .iter()
            .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
            .collect::<Vec<_>>()
            .join(" ");
        let line = substitute_shell(
            &self.cfg.start,
            &[
                ("{request}", Value::Quoted(request.into())),
                ("{worker}", Value::Raw(worker)),
                ("{dispatcher}", Value::Quoted(launch.dispatcher.clone())),
            ],
        );
        let out = self.sh(&line, launch).run(&self.policy).await?;
        Ok(out
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .unwrap_or(request)
            .to_string())
    }

    /// Run the stop command, if there is one.
    async fn stop(&self, request: &str, job: &str, launch: &Launch) -> Result<(), String> {
        let Some(stop) = &self.cfg.stop else {
            return Ok(());
        };
        let line = substitute_shell(
            stop,
            &[
                ("{request}", Value::Quoted(request.into())),
                ("{job}", Value::Quoted(job.into())),
            ],
        );
        self.sh(&line, launch).run(&self.policy).await.map(drop)
    }

    fn sh(&self, line: &str, launch: &Launch) -> Call {
        let mut call = Call::new("sh").args(["-c", line]);
        for (k, v) in &launch.env {
            call = call.env(k, v);
        }
        call
    }
}

impl ResourceManager for CommandBackend {
    fn listing(&self) -> Listing {
        Listing::Unlisted
    }

    /// The start command: the job is taken as started.
    fn submit<'a>(
        &'a mut self,
        request: &'a str,
        launch: &'a Launch,
    ) -> RmFuture<'a, Result<(String, RmState), String>> {
        Box::pin(async move {
            self.start(request, launch)
                .await
                .map(|job| (job, RmState::Running))
        })
    }

    /// Never called: the pool does not list an [`Listing::Unlisted`] backend.
    fn list(&mut self) -> RmFuture<'_, Result<Vec<Job>, String>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// The stop command, the same asked or forced.
    fn cancel<'a>(
        &'a mut self,
        request: &'a str,
        job: &'a str,
        launch: &'a Launch,
        _force: bool,
    ) -> RmFuture<'a, Result<(), String>> {
        Box::pin(self.stop(request, job, launch))
    }
}
