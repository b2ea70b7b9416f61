//! What the pool asks of a resource manager: [`ResourceManager`], the face every backend
//! ([`super::local`], [`super::slurm`], [`super::command`]) shows the pool, and [`Listing`], what
//! it can show of its jobs.
//!
//! A backend only carries calls out (submit, list, cancel). What to make of their answers (the
//! limits, when to list, the reconciliation of jobs no request owns, when a job missing from a
//! listing is gone, the jobs of an earlier run) is the pool's ([`super::Pool`]), the same for
//! every backend that lists its jobs the same way.
//!
//! The methods return boxed futures ([`RmFuture`]): the pool holds its backend as a
//! `Box<dyn ResourceManager>`, and an `async fn` in a trait cannot be called through one.

use super::job::{Job, Launch, RmState};
use std::time::Duration;

/// What a backend's calls return: a boxed future that may be sent across threads (the pool runs
/// as a task on the dispatcher's multi-threaded runtime).
pub type RmFuture<'a, T> = futures_util::future::BoxFuture<'a, T>;

/// What a resource manager can show of its jobs, which sets how the pool follows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    /// Nothing (a user's start and stop commands): a job is not followed between its start and
    /// its stop, and once stopped it is counted gone. [`ResourceManager::list`] is never called.
    Unlisted,
    /// The jobs it started itself, by request, at no cost (processes on this machine): listed at
    /// every tick of the pool. An ended job is listed once, then forgotten.
    Own,
    /// Every job of this user under the pool's names, by running `command` (`squeue`): listed
    /// each `--rm-poll`. Such a listing shows jobs no request owns (an `sbatch` that failed yet
    /// made a job, the jobs of an earlier run of this dispatcher), so the pool lists at start to
    /// adopt an earlier run's jobs, and reconciles every listing against its requests. A job
    /// missing from one listing may just be late (a resource manager forgets ended jobs after a
    /// while: Slurm's `MinJobAge`): it is gone when two listings in a row miss it.
    Named {
        /// The command that lists, for messages ("no longer in squeue").
        command: &'static str,
    },
}

/// A resource manager, as the pool drives it. One implementation per backend, each in its own
/// file; [`super::Backend::build`] makes the one configured.
pub trait ResourceManager: Send {
    /// How the pool can follow its jobs.
    fn listing(&self) -> Listing;

    /// Submit the job of `request`, which runs `diffuse worker` with `launch`'s arguments and
    /// environment: its job id and where the fresh job stands ([`RmState::Pending`]: queued;
    /// [`RmState::Running`]: started at once). An error means that no job was made (a backend
    /// that cannot tell makes sure before it answers, as Slurm's does).
    fn submit<'a>(
        &'a mut self,
        request: &'a str,
        launch: &'a Launch,
    ) -> RmFuture<'a, Result<(String, RmState), String>>;

    /// Most requests one [`Self::submit_group`] takes (1: every request is submitted alone).
    fn group_size(&self) -> u32 {
        1
    }

    /// Submit several requests in one call (at most [`Self::group_size`], more than one):
    /// each one's job id and state, in order. `launch` says `{request}` where each worker's
    /// name goes. An error means that no job was made for any of them. Only a backend whose
    /// group size is above 1 is asked.
    fn submit_group<'a>(
        &'a mut self,
        requests: &'a [String],
        launch: &'a Launch,
    ) -> RmFuture<'a, Result<Vec<(String, RmState)>, String>> {
        let _ = (requests, launch);
        Box::pin(async { Err("this resource manager submits one worker per call".to_string()) })
    }

    /// Its jobs, as [`Self::listing`] says (never called when it is [`Listing::Unlisted`]). A
    /// job's name is the request it was submitted for; several may share one
    /// ([`Listing::Named`]).
    fn list(&mut self) -> RmFuture<'_, Result<Vec<Job>, String>>;

    /// Cancel `job`, submitted for `request` (`launch` is that request's worker, for a backend
    /// that passes its environment on). `force`: kill it rather than ask it to stop (a second
    /// try, after it did not stop when asked).
    fn cancel<'a>(
        &'a mut self,
        request: &'a str,
        job: &'a str,
        launch: &'a Launch,
        force: bool,
    ) -> RmFuture<'a, Result<(), String>>;

    /// Cancel many jobs, `(request, job, launch)` each (at shutdown): the requests whose job
    /// could not be cancelled, and why. One [`Self::cancel`] each unless the backend has
    /// better (Slurm: one `scancel` for many jobs).
    fn cancel_all<'a>(
        &'a mut self,
        jobs: &'a [(String, String, Launch)],
    ) -> RmFuture<'a, Vec<(String, String)>> {
        Box::pin(async move {
            let mut failed = Vec::new();
            for (request, job, launch) in jobs {
                if let Err(e) = self.cancel(request, job, launch, false).await {
                    failed.push((request.clone(), e));
                }
            }
            failed
        })
    }

    /// At shutdown, once every job was cancelled: a backend whose workers are this process's
    /// children waits up to `grace` for them to end and kills the others. Others have nothing
    /// to do (their jobs end at the resource manager).
    fn wind_down(&mut self, grace: Duration) -> RmFuture<'_, ()> {
        let _ = grace;
        Box::pin(async {})
    }
}
