//! The worker's sessions with the dispatcher: one per connection, reconnecting when one is lost
//! (running tasks stopped, the cache kept) until the dispatcher says to shut down, refuses the
//! worker, cannot be reached for `--reconnect-timeout`, or a signal stops the worker. In a
//! session, assignments and other orders come in and are started; reports, cache changes,
//! heartbeats and the load go out.

use super::config::WorkerConfig;
use super::connect::{connect, Connect, Ws};
use super::ctx::Ctx;
use super::error::WorkerError;
use super::process::{self, Stop};
use super::signals::Signals;
use super::{inputs, lookup, peer, task};
use crate::proto::{ToDispatcher, ToWorker};
use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::Message;

/// How long a lost connection waits for tasks that are just ending before stopping the rest.
const REPORT_GRACE: Duration = Duration::from_millis(250);
/// First wait before connecting again; it doubles up to [`RECONNECT_MAX`].
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
/// Longest wait between two connection attempts.
const RECONNECT_MAX: Duration = Duration::from_secs(5);
/// How often a worker tells its load average.
const LOAD_EVERY: Duration = Duration::from_secs(5);

/// Why a session ended without being told to: the connection is lost, and the worker connects
/// again.
#[derive(Debug, thiserror::Error)]
enum Lost {
    /// The dispatcher closed it.
    #[error("lost the connection to the dispatcher")]
    Closed,
    /// Sending or receiving failed.
    #[error(transparent)]
    Ws(#[from] tokio_tungstenite::tungstenite::Error),
    /// The dispatcher sent something that is not a message of the protocol.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// Serve the dispatcher, one session per connection, until told to shut down or stopped by a
/// signal (Ok), or refused or unreachable for `--reconnect-timeout` (Err). `bound` is the peer
/// server's address; `out` carries what the worker's tasks say to the dispatcher.
pub(super) async fn serve(
    cfg: &WorkerConfig,
    ctx: &Arc<Ctx>,
    bound: std::net::SocketAddr,
    out: mpsc::UnboundedReceiver<ToDispatcher>,
) -> Result<(), WorkerError> {
    let mut signals = Signals::new(cfg.leave_at).map_err(WorkerError::Signals)?;
    // The WebSocket's TLS settings, built once (they read the system's roots).
    let ws_tls = cfg
        .dispatcher
        .starts_with("https://")
        .then(|| cfg.trust.client_config());
    // When a connection is lost the running tasks are stopped (the dispatcher has given their
    // attempts up and runs them again, so their results would be refused), and the worker
    // connects again, keeping its cache.
    let mut outbox = Outbox {
        rx: out,
        unsent: Vec::new(),
    };
    let mut unreachable_since: Option<std::time::Instant> = None;
    let mut delay = RECONNECT_FIRST;
    loop {
        let connected = tokio::select! {
            c = connect(cfg, ctx, bound, ws_tls.clone()) => c,
            () = signals.next() => return Ok(()),
        };
        match connected {
            Ok(ws) => {
                unreachable_since = None;
                delay = RECONNECT_FIRST;
                let mut tasks = JoinSet::new();
                match session(cfg, ctx, ws, &mut outbox, &mut tasks, &mut signals).await {
                    Ok(()) => return Ok(()),
                    Err(e) => {
                        // A task whose process already ended keeps its report (sent after
                        // reconnecting; the dispatcher refuses it by attempt number if it gave
                        // that attempt up). The others are stopped: dropping them kills their
                        // process groups.
                        let _ = tokio::time::timeout(REPORT_GRACE, async {
                            while tasks.join_next().await.is_some() {}
                        })
                        .await;
                        tracing::warn!(
                            worker = %cfg.name,
                            "{e}; stopping {} running task(s) and connecting again",
                            tasks.len()
                        );
                        tasks.shutdown().await;
                    }
                }
            }
            Err(Connect::Refused(e)) => return Err(WorkerError::Refused(e)),
            Err(Connect::Unreachable(e)) => {
                let since = *unreachable_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= cfg.reconnect_timeout {
                    return Err(WorkerError::Unreachable {
                        dispatcher: cfg.dispatcher.clone(),
                        tried: cfg.reconnect_timeout,
                        last: e,
                    });
                }
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = signals.next() => return Ok(()),
                }
                delay = (delay * 2).min(RECONNECT_MAX);
            }
        }
    }
}

/// The sending half of the connection.
type Sink = SplitSink<Ws, Message>;

/// Serve one connection: run what the dispatcher assigns, report what happens. Ok when told to
/// shut down (after the running tasks ended and their reports went out), or stopped by a signal
/// (running tasks stopped, the dispatcher told); Err when the connection is lost.
async fn session(
    cfg: &WorkerConfig,
    ctx: &Arc<Ctx>,
    (ws, heartbeat): (Ws, Duration),
    outbox: &mut Outbox,
    tasks: &mut JoinSet<()>,
    signals: &mut Signals,
) -> Result<(), Lost> {
    let (mut sink, mut stream) = ws.split();
    outbox.send_backlog(&mut sink).await?;
    let mut beat = tokio::time::interval(heartbeat);
    let mut load_tick = tokio::time::interval(LOAD_EVERY);
    let mut draining = false;
    loop {
        if draining && tasks.is_empty() {
            break;
        }
        tokio::select! {
            msg = stream.next() => {
                let Some(Ok(msg)) = msg else {
                    return Err(Lost::Closed);
                };
                let Message::Text(t) = msg else { continue };
                if on_message(cfg, ctx, crate::proto::read_to_worker(&t)?, tasks) {
                    draining = true;
                }
            }
            Some(m) = outbox.rx.recv() => deliver_queued(ctx, &mut sink, m, outbox).await?,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            _ = beat.tick() => {
                sink.send(Message::Text(serde_json::to_string(&ToDispatcher::Heartbeat)?.into())).await?;
            }
            _ = load_tick.tick() => send_load(ctx, &mut sink).await?,
            () = signals.next() => return leave(ctx, sink, outbox, tasks).await,
        }
    }
    // Flush the last reports before closing.
    while let Ok(m) = outbox.rx.try_recv() {
        deliver(&mut sink, m, &mut outbox.unsent).await?;
    }
    let _ = sink.close().await;
    Ok(())
}

/// Act on one message from the dispatcher; true when it says to shut down (once the running
/// tasks end).
fn on_message(cfg: &WorkerConfig, ctx: &Arc<Ctx>, msg: ToWorker, tasks: &mut JoinSet<()>) -> bool {
    match msg {
        ToWorker::Run(a) => {
            // Registered before the next message is read: a `Cancel` right behind this `Run`
            // finds it (it used to be lost until the task ended).
            let registered = ctx.running.register(&a.task, a.attempt);
            tasks.spawn(task::run_and_report(ctx.clone(), a, registered, cfg.noop));
        }
        ToWorker::Lookup {
            id,
            uris,
            timeout_ms,
        } => {
            tokio::spawn(lookup::lookup(
                ctx.clone(),
                id,
                uris,
                Duration::from_millis(timeout_ms),
            ));
        }
        ToWorker::Cancel { task, attempt } => ctx.running.stop(task, attempt, Stop::Cancelled),
        ToWorker::Withdraw { task, attempt } => ctx.running.withdraw(task, attempt),
        ToWorker::Drop { uris } => {
            {
                let mut cache = ctx.cache.lock().expect("cache lock");
                for u in &uris {
                    cache.remove(u);
                }
                cache.take_evicted();
            }
            let _ = ctx.out.send(ToDispatcher::Evicted { uris });
        }
        ToWorker::Verify { uris } => {
            tokio::spawn(peer::verify(ctx.clone(), uris));
        }
        ToWorker::Shutdown => return true,
        ToWorker::Fetch { inputs } => {
            for input in inputs {
                tokio::spawn(inputs::prefetch(ctx.clone(), input));
            }
        }
        ToWorker::StorageRate { bytes_per_s } => {
            if ctx.storage.read_rate() != bytes_per_s {
                tracing::debug!(?bytes_per_s, "storage read rate");
            }
            ctx.storage.set_read_rate(bytes_per_s);
        }
        ToWorker::Welcome { .. } => {}
    }
    false
}

/// Tell the dispatcher this machine's load and the cache's use (where the load is known).
async fn send_load(ctx: &Ctx, sink: &mut Sink) -> Result<(), Lost> {
    if let Some(load1) = load_average() {
        let (used, objects) = {
            let c = ctx.cache.lock().expect("cache lock");
            (c.used(), c.len() as u64)
        };
        let w = ctx.warm.figures();
        let load = ToDispatcher::Load {
            load1,
            cache_used: Some(used),
            cache_objects: Some(objects),
            warm: (w.processes > 0 || w.calls > 0).then_some(crate::proto::WarmUse {
                processes: w.processes,
                calls: w.calls,
                rss: w.rss,
            }),
        };
        sink.send(Message::Text(serde_json::to_string(&load)?.into()))
            .await?;
    }
    Ok(())
}

/// Stopped by a signal: stop every task (their groups get SIGTERM, then SIGKILL), keep the
/// reports of those that ended by themselves meanwhile, then tell the dispatcher the rest were
/// stopped, not crashed, so they run elsewhere.
async fn leave(
    ctx: &Ctx,
    mut sink: Sink,
    outbox: &mut Outbox,
    tasks: &mut JoinSet<()>,
) -> Result<(), Lost> {
    ctx.running.stop_all(Stop::Leaving);
    let _ = tokio::time::timeout(process::STOP_GRACE + Duration::from_secs(2), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.shutdown().await;
    while let Ok(m) = outbox.rx.try_recv() {
        deliver(&mut sink, m, &mut outbox.unsent).await?;
    }
    deliver(&mut sink, ToDispatcher::Leaving, &mut outbox.unsent).await?;
    let _ = sink.close().await;
    Ok(())
}

/// Messages for the dispatcher: those the worker's tasks queue, and task reports whose send
/// failed when a connection was lost (they go out first on the next one).
struct Outbox {
    rx: mpsc::UnboundedReceiver<ToDispatcher>,
    unsent: Vec<ToDispatcher>,
}

impl Outbox {
    /// At the start of a session: send the reports not sent before. Cache changes queued while
    /// disconnected are in the hello's snapshot; reports of tasks that finished meanwhile still
    /// go out (the dispatcher refuses them by attempt number if it has given those attempts
    /// up).
    async fn send_backlog(&mut self, sink: &mut Sink) -> Result<(), Lost> {
        let mut backlog = std::mem::take(&mut self.unsent);
        while let Ok(m) = self.rx.try_recv() {
            if matches!(m, ToDispatcher::Finished(_)) {
                backlog.push(m);
            }
        }
        let mut backlog = backlog.into_iter();
        while let Some(m) = backlog.next() {
            if let Err(e) = deliver(sink, m, &mut self.unsent).await {
                self.unsent.extend(backlog);
                return Err(e);
            }
        }
        Ok(())
    }
}

/// Most messages written together in one go.
const WRITE_AT_ONCE: usize = 64;

/// Send `first` and whatever else is queued behind it (up to [`WRITE_AT_ONCE`]) in one write:
/// the connection sends each write at once (no Nagle), so messages queued together leave
/// together. Then the attempts whose `Started` went out may run ([`Ctx::written`]).
async fn deliver_queued(
    ctx: &Ctx,
    sink: &mut Sink,
    first: ToDispatcher,
    outbox: &mut Outbox,
) -> Result<(), Lost> {
    let mut batch = vec![first];
    while batch.len() < WRITE_AT_ONCE {
        match outbox.rx.try_recv() {
            Ok(m) => batch.push(m),
            Err(_) => break,
        }
    }
    let mut fed = Vec::with_capacity(batch.len());
    let mut failed: Option<Lost> = None;
    for m in batch {
        if failed.is_none() {
            let text = serde_json::to_string(&m)?;
            if let Err(e) = sink.feed(Message::Text(text.into())).await {
                failed = Some(e.into());
            }
        }
        fed.push(m);
    }
    if failed.is_none() {
        if let Err(e) = sink.flush().await {
            failed = Some(e.into());
        }
    }
    if let Some(e) = failed {
        // Nothing is known to have gone out: keep every report to send again.
        outbox.unsent.extend(
            fed.into_iter()
                .filter(|m| matches!(m, ToDispatcher::Finished(_))),
        );
        return Err(e);
    }
    for m in &fed {
        ctx.written(m);
    }
    Ok(())
}

/// Send one message; a task report that could not be sent is kept in `unsent`.
async fn deliver(
    sink: &mut Sink,
    m: ToDispatcher,
    unsent: &mut Vec<ToDispatcher>,
) -> Result<(), Lost> {
    let text = serde_json::to_string(&m)?;
    if let Err(e) = sink.send(Message::Text(text.into())).await {
        if matches!(m, ToDispatcher::Finished(_)) {
            unsent.push(m);
        }
        return Err(e.into());
    }
    Ok(())
}

/// The machine's 1-minute load average, from `/proc/loadavg` (None where there is none).
fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_load_average_is_read_from_proc() {
        let l = super::load_average().expect("/proc/loadavg on Linux");
        assert!(l.is_finite() && l >= 0.0, "{l}");
    }
}
