//! What stops a worker on its own ([`Signals`]): SIGTERM, SIGINT, or the time to leave before
//! its batch job's limit.

/// What stops a worker on its own: SIGTERM, SIGINT, or the time to leave before its batch
/// job's limit.
pub(super) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    leave_at: Option<tokio::time::Instant>,
}

impl Signals {
    /// Watch for SIGTERM and SIGINT, and for `leave_at`.
    pub(super) fn new(leave_at: Option<std::time::Instant>) -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            leave_at: leave_at.map(tokio::time::Instant::from_std),
        })
    }

    /// The next SIGTERM or SIGINT, or the time to leave.
    pub(super) async fn next(&mut self) {
        let leave = async {
            match self.leave_at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.term.recv() => tracing::info!("SIGTERM: stopping"),
            _ = self.int.recv() => tracing::info!("SIGINT: stopping"),
            () = leave => tracing::info!("the batch job's time limit is near: leaving"),
        }
    }
}
