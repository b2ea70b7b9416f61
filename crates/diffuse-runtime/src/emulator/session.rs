//! One emulated worker: a WebSocket session that answers as `diffuse worker` does, with a timer
//! standing for each task's process.

use super::shared::{EmulatorConfig, Tally};
use crate::proto::{
    Assignment, Held, InputSource, LookupResult, TaskReport, ToDispatcher, ToWorker, Traffic,
};
use crate::storage::Storage;
use futures_util::{FutureExt, SinkExt, StreamExt};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How long a session keeps trying to reach a dispatcher that does not answer.
const CONNECT_FOR: Duration = Duration::from_secs(60);

/// Serve one emulated worker until the dispatcher shuts it down, the connection is lost (Err)
/// or `stop` turns true (it then says `Leaving`).
pub(super) async fn serve(
    cfg: &EmulatorConfig,
    name: String,
    tally: &Tally,
    storage: Arc<Storage>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    let (ws, heartbeat) = connect(cfg, &name).await?;
    tally.connected.fetch_add(1, Ordering::Relaxed);
    let (mut sink, mut stream) = ws.split();
    let mut me = Emulated::default();
    let (lookups_tx, mut lookups) = mpsc::unbounded_channel::<ToDispatcher>();
    let mut beat = tokio::time::interval(heartbeat);
    let mut draining = false;
    let lost = |e: tokio_tungstenite::tungstenite::Error| format!("{name}: connection lost: {e}");
    loop {
        if draining && me.timers.is_empty() && me.waiting.is_empty() {
            let _ = sink.close().await;
            return Ok(());
        }
        let next_end = me.timers.keys().next().map(|(at, _)| *at);
        tokio::select! {
            msg = stream.next() => {
                let mut msg = msg;
                // Take every message already here before answering: one flush for a batch.
                loop {
                    let text = match msg {
                        Some(Ok(Message::Text(t))) => t,
                        Some(Ok(_)) => {
                            match stream.next().now_or_never() { Some(m) => { msg = m; continue } None => break }
                        }
                        Some(Err(e)) => return Err(lost(e)),
                        None => return Err(format!("{name}: the dispatcher closed the connection")),
                    };
                    let order: ToWorker = crate::proto::read_to_worker(&text)
                        .map_err(|e| format!("{name}: unreadable message from the dispatcher: {e}"))?;
                    draining |= me.on_order(cfg, order, tally, &storage, &lookups_tx);
                    match stream.next().now_or_never() {
                        Some(m) => msg = m,
                        None => break,
                    }
                }
            }
            Some(m) = lookups.recv() => me.out.push(m),
            () = sleep_until(next_end) => me.end_due(cfg, tally),
            _ = beat.tick() => me.out.push(ToDispatcher::Heartbeat),
            _ = stop.changed() => {
                // Stopped: its tasks did not crash, they run elsewhere.
                me.out.push(ToDispatcher::Leaving);
                send_all(&mut sink, &mut me.out).await.map_err(lost)?;
                let _ = sink.close().await;
                return Ok(());
            }
        }
        send_all(&mut sink, &mut me.out).await.map_err(lost)?;
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Wait until `at`, or forever when there is no timer.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Queue every message in `out` on the connection, then flush once.
async fn send_all(
    sink: &mut futures_util::stream::SplitSink<Ws, Message>,
    out: &mut Vec<ToDispatcher>,
) -> Result<(), tokio_tungstenite::tungstenite::Error> {
    if out.is_empty() {
        return Ok(());
    }
    for m in out.drain(..) {
        let text = serde_json::to_string(&m).expect("a report serializes");
        sink.feed(Message::Text(text.into())).await?;
    }
    sink.flush().await
}

/// What one emulated worker holds: its "running" tasks (timers), the objects it "caches", and
/// the messages to send.
#[derive(Default)]
struct Emulated {
    /// Running attempts by the time they end (and a sequence number to keep keys distinct).
    timers: BTreeMap<(Instant, u64), (Box<Assignment>, f64)>,
    /// Tasks sent ahead of a free slot, in the order they came.
    waiting: VecDeque<Box<Assignment>>,
    /// Where each running (task, attempt) is in `timers`.
    running: HashMap<(String, u32), (Instant, u64)>,
    seq: u64,
    held: HashSet<String>,
    out: Vec<ToDispatcher>,
}

impl Emulated {
    /// Act on one order; true when told to shut down (once the running tasks end).
    fn on_order(
        &mut self,
        cfg: &EmulatorConfig,
        order: ToWorker,
        tally: &Tally,
        storage: &Arc<Storage>,
        lookups: &mpsc::UnboundedSender<ToDispatcher>,
    ) -> bool {
        match order {
            ToWorker::Run(a) => {
                // A task sent ahead of a free slot (the dispatcher's --ready-tasks) waits for
                // one, as on a worker.
                if self.timers.len() < cfg.slots as usize {
                    self.start(cfg, a, tally);
                } else {
                    self.waiting.push_back(a);
                }
            }
            ToWorker::Cancel { task, attempt } => {
                if let Some(key) = self.running.remove(&(task.clone(), attempt)) {
                    if let Some((a, started)) = self.timers.remove(&key) {
                        self.finish(&a, started, Some("cancelled".into()), tally);
                    }
                    self.start_waiting(cfg, tally);
                } else if let Some(i) = self
                    .waiting
                    .iter()
                    .position(|a| a.task == task && a.attempt == attempt)
                {
                    let a = self.waiting.remove(i).expect("found");
                    self.finish(&a, unix_now(), Some("cancelled".into()), tally);
                }
            }
            ToWorker::Withdraw { task, attempt } => {
                // Only a task still waiting for a slot is given back.
                if let Some(i) = self
                    .waiting
                    .iter()
                    .position(|a| a.task == task && a.attempt == attempt)
                {
                    let a = self.waiting.remove(i).expect("found");
                    let mut report = TaskReport::blank(&a, unix_now());
                    report.withdrawn = true;
                    report.error = Some("given back before it started".into());
                    self.out.push(ToDispatcher::Finished(Box::new(report)));
                }
            }
            ToWorker::Drop { uris } => {
                for u in &uris {
                    self.held.remove(u);
                }
                self.out.push(ToDispatcher::Evicted { uris });
            }
            ToWorker::Fetch { inputs } => {
                // A prefetch lands at once: the emulated worker reads nothing.
                let objects = inputs
                    .into_iter()
                    .filter(|i| self.held.insert(i.uri.clone()))
                    .map(|i| Held {
                        uri: i.uri,
                        version: i.version,
                    })
                    .collect::<Vec<_>>();
                if !objects.is_empty() {
                    self.out.push(ToDispatcher::Cached { objects });
                }
            }
            ToWorker::Lookup {
                id,
                uris,
                timeout_ms,
            } => {
                // Input lookups are real: the dispatcher needs true sizes and versions.
                let (storage, lookups) = (storage.clone(), lookups.clone());
                tokio::spawn(async move {
                    let timeout = Duration::from_millis(timeout_ms);
                    let mut results = Vec::with_capacity(uris.len());
                    for uri in uris {
                        let r = tokio::time::timeout(timeout, storage.head(&uri)).await;
                        let (size, version, error) = match r {
                            Ok(Ok(info)) => (Some(info.size), Some(info.version), None),
                            Ok(Err(e)) => (None, None, Some(e.to_string())),
                            Err(_) => (
                                None,
                                None,
                                Some(format!("{uri}: no answer within {timeout:?}")),
                            ),
                        };
                        results.push(LookupResult {
                            uri,
                            size,
                            version,
                            error,
                        });
                    }
                    let _ = lookups.send(ToDispatcher::LookedUp { id, results });
                });
            }
            ToWorker::Shutdown => return true,
            ToWorker::Verify { .. } | ToWorker::StorageRate { .. } | ToWorker::Welcome { .. } => {}
        }
        false
    }

    /// Start `a`: it ends at once without a `compute_s`, else when its timer fires.
    fn start(&mut self, cfg: &EmulatorConfig, a: Box<Assignment>, tally: &Tally) {
        if a.held {
            self.out.push(ToDispatcher::Started {
                task: a.task.clone(),
                attempt: a.attempt,
            });
        }
        let compute = if cfg.honour_compute {
            a.more.compute_s.unwrap_or(0.0)
        } else {
            0.0
        };
        if compute <= 0.0 {
            self.finish(&a, unix_now(), None, tally);
        } else {
            self.seq += 1;
            let key = (Instant::now() + Duration::from_secs_f64(compute), self.seq);
            self.running.insert((a.task.clone(), a.attempt), key);
            self.timers.insert(key, (a, unix_now()));
        }
    }

    /// Start the tasks waiting for a slot while slots are free.
    fn start_waiting(&mut self, cfg: &EmulatorConfig, tally: &Tally) {
        while self.timers.len() < cfg.slots as usize {
            let Some(a) = self.waiting.pop_front() else {
                return;
            };
            self.start(cfg, a, tally);
        }
    }

    /// Report every task whose time is up, and start those waiting for its slot.
    fn end_due(&mut self, cfg: &EmulatorConfig, tally: &Tally) {
        let now = Instant::now();
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let (a, started) = entry.remove();
            self.running.remove(&(a.task.clone(), a.attempt));
            self.finish(&a, started, None, tally);
        }
        self.start_waiting(cfg, tally);
    }

    /// Report an attempt that started at `started` (Unix seconds) ended now (`error`: why it
    /// failed), after a `Cached` for each input it fetched, as a worker reports them.
    fn finish(&mut self, a: &Assignment, started: f64, error: Option<String>, tally: &Tally) {
        let mut traffic = Traffic::default();
        let mut cached = Vec::new();
        for i in &a.inputs {
            match &i.source {
                InputSource::Local => traffic.local += 1,
                InputSource::Peer { .. } => traffic.peer += 1,
                InputSource::Storage => traffic.storage += 1,
            }
            if a.caching && self.held.insert(i.uri.clone()) {
                cached.push(Held {
                    uri: i.uri.clone(),
                    version: i.version.clone(),
                });
            }
        }
        if !cached.is_empty() && error.is_none() {
            self.out.push(ToDispatcher::Cached { objects: cached });
        }
        let at = unix_now();
        let counter = if error.is_some() {
            &tally.cancelled
        } else {
            &tally.finished
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.out.push(ToDispatcher::Finished(Box::new(TaskReport {
            exit_code: error.is_none().then_some(0),
            error,
            finished_at: at,
            outputs: a.outputs.clone(),
            traffic,
            ..TaskReport::blank(a, started)
        })));
    }
}

/// Open the session: connect (retrying while the dispatcher cannot be reached, as a worker
/// does), hello, welcome. Returns the connection and the heartbeat period.
async fn connect(cfg: &EmulatorConfig, name: &str) -> Result<(Ws, Duration), String> {
    let url = format!(
        "{}/v1/workers/connect",
        cfg.dispatcher.replacen("http", "ws", 1)
    );
    let started = Instant::now();
    let mut delay = Duration::from_millis(100);
    let mut ws = loop {
        let mut request = url
            .as_str()
            .into_client_request()
            .map_err(|e| e.to_string())?;
        let auth = format!("Bearer {}", cfg.token)
            .parse()
            .map_err(|_| "bad token".to_string())?;
        request.headers_mut().insert("authorization", auth);
        match tokio_tungstenite::connect_async_with_config(
            request,
            Some(crate::proto::ws_config()),
            false,
        )
        .await
        {
            Ok((ws, _)) => break ws,
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                return Err(format!(
                    "{name}: refused by the dispatcher: {}",
                    resp.status()
                ))
            }
            Err(e) if started.elapsed() < CONNECT_FOR => {
                tracing::debug!("{name}: {e}; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(format!("{name}: cannot connect to {}: {e}", cfg.dispatcher)),
        }
    };
    let hello = ToDispatcher::Hello {
        protocol: crate::proto::PROTOCOL,
        name: name.to_string(),
        slots: cfg.slots,
        memory: None,
        gpus: 0,
        disk: None,
        cache_quota: 1 << 40,
        // Nothing is served there: an emulated worker holds no bytes. A real worker told to
        // read from it fails over to storage.
        peer_url: format!("http://127.0.0.1:9/{name}"),
        held: Vec::new(),
        request: None,
        leaves_in_s: None,
        eviction: None,
        rack: None,
    };
    let text = serde_json::to_string(&hello).expect("hello serializes");
    ws.send(Message::Text(text.into()))
        .await
        .map_err(|e| format!("{name}: {e}"))?;
    match ws.next().await {
        Some(Ok(Message::Text(t))) => match serde_json::from_str::<ToWorker>(&t) {
            Ok(ToWorker::Welcome { heartbeat_ms, .. }) => {
                Ok((ws, Duration::from_millis(heartbeat_ms.max(50))))
            }
            other => Err(format!("{name}: expected a welcome, got {other:?}")),
        },
        other => Err(format!(
            "{name}: the dispatcher closed the connection: {other:?}"
        )),
    }
}
