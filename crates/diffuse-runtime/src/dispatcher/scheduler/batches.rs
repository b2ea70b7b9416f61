//! `diffuse stage`: a batch of objects copied to workers before the tasks that read them (GDS,
//! coordinated-transfers-gridftp-gds.txt, section 4), to warm many nodes with a reference
//! dataset without each one reading storage.
//!
//! The batch's requests `(object, worker)` are scheduled by the core's [`Stager`] under the
//! schedule asked for (GDS's MinMin, LDS or naive), with the rates the core has learned from
//! past transfers. A request moves whole: the stager plans it as one chunk whose parts name its
//! sources, and the worker is sent a `Fetch` from them (a peer first, the others as the extra
//! sources of a multi-source read; storage when the plan starts there). A worker reading a large
//! object from peers serves its chunks onward as they land ([`Stager::relay`]), so requests
//! planned after it may read from it at once; one reading from storage serves the object once
//! it is whole (its digest is not known before). A request is done when its
//! worker reports the object cached; a failed fetch is planned again without the source that
//! failed; a worker that leaves gives up its requests.
//!
//! Sizes and versions come from the workers' lookups, as for tasks' inputs. [`Batches`] owns
//! every batch.

use super::lookup::{Lookups, Waiter};
use super::objects::ObjectTable;
use super::sessions::Sessions;
use super::shared::Shared;
use crate::proto::{InputSource, ToWorker, MULTI_SOURCE_MIN};
use diffuse_core::bandwidth::Endpoint;
use diffuse_core::staging::{Chunk, Request, Schedule, StageConfig, Stager};
use diffuse_core::{Core, NodeId, ObjectId};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;

/// What a client asks to stage.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageAsk {
    /// Canonical URIs.
    pub uris: Vec<String>,
    /// Worker names; empty: every connected worker.
    #[serde(default)]
    pub to: Vec<String>,
    /// The schedule.
    #[serde(default)]
    pub schedule: Schedule,
    /// Drop the objects from those workers instead (a dataset no longer wanted there).
    /// Intermediate (`tmp://`) objects are refused: a worker's copy may be the only one.
    #[serde(default)]
    pub drop: bool,
}

/// A staged batch's progress (`GET /v1/stage/{id}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StageView {
    /// Its number.
    pub id: u64,
    /// `naive`, `lds` or `gds` (`drop` for a batch dropped).
    pub schedule: String,
    /// `looking up` (sizes and versions), `staging` or `done`.
    pub state: String,
    /// Objects in the batch.
    pub objects: usize,
    /// The workers they go to.
    pub destinations: Vec<String>,
    /// (object, worker) pairs that had to move (those already held are not counted).
    pub requests: usize,
    /// Of them, done.
    pub done: usize,
    /// Under way now.
    pub running: usize,
    /// Requests given up, and why: `uri -> worker: reason`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
    /// Bytes moved by the requests done.
    pub bytes: u64,
    /// Seconds since the batch was accepted (until it was done).
    pub seconds: f64,
    /// Bytes received from each source (a worker's name, or `storage`) by the batch's
    /// destinations while its requests to them were under way.
    pub by_source: BTreeMap<String, u64>,
}

/// A batch being staged.
struct StageRun {
    view: StageView,
    cfg: StageConfig,
    objects: Vec<ObjectId>,
    dests: Vec<NodeId>,
    sizes: FxHashMap<ObjectId, u64>,
    /// Lookups not yet answered.
    looking_up: usize,
    stager: Option<Stager>,
    /// The chunk under way to each (worker, object).
    running: FxHashMap<(NodeId, ObjectId), Chunk>,
    /// The last error of each request's fetches.
    errors: FxHashMap<(NodeId, ObjectId), String>,
    started: Instant,
}

impl StageRun {
    /// A batch with nothing looked up or planned yet.
    fn new(view: StageView, cfg: StageConfig, started: Instant) -> StageRun {
        StageRun {
            view,
            cfg,
            objects: Vec::new(),
            dests: Vec::new(),
            sizes: FxHashMap::default(),
            looking_up: 0,
            stager: None,
            running: FxHashMap::default(),
            errors: FxHashMap::default(),
            started,
        }
    }
}

/// Every batch staged since the start, by number.
pub struct Batches {
    runs: BTreeMap<u64, StageRun>,
    next: u64,
}

impl Default for Batches {
    fn default() -> Batches {
        Batches {
            runs: BTreeMap::new(),
            next: 1,
        }
    }
}

impl Batches {
    /// Accept a batch: its number, or why not. Its lookups are queued in `lookups`; the caller
    /// sends them and then [`Batches::pump`]s (unless it was a drop, done at once).
    pub fn stage(
        &mut self,
        ask: StageAsk,
        sh: &mut Shared,
        lookups: &mut Lookups,
    ) -> Result<u64, String> {
        if ask.uris.is_empty() {
            return Err("nothing to stage".into());
        }
        let dests: Vec<NodeId> = if ask.to.is_empty() {
            sh.sessions.nodes().collect()
        } else {
            ask.to
                .iter()
                .map(|name| {
                    sh.sessions
                        .by_name(name)
                        .ok_or_else(|| format!("no connected worker is named {name}"))
                })
                .collect::<Result<_, _>>()?
        };
        if dests.is_empty() {
            return Err("no worker is connected".into());
        }
        if ask.drop {
            return self.unstage(&ask.uris, &dests, sh);
        }
        let id = self.next;
        self.next += 1;
        let mut objects = Vec::new();
        let mut sizes = FxHashMap::default();
        let mut looking_up = 0;
        for uri in &ask.uris {
            let o = sh.objects.intern(uri);
            if objects.contains(&o) {
                continue;
            }
            objects.push(o);
            if let Some(size) = sh.objects.tmp_size(o) {
                sizes.insert(o, size);
            } else if crate::uri::is_tmp(uri) {
                return Err(format!("{uri}: no worker holds it"));
            } else {
                lookups.want_for(uri, Waiter::Stage(id));
                looking_up += 1;
            }
        }
        let objects_n = objects.len();
        let names = dests
            .iter()
            .filter_map(|n| sh.sessions.name(n).map(str::to_string))
            .collect();
        self.runs.insert(
            id,
            StageRun {
                objects,
                dests,
                sizes,
                looking_up,
                ..StageRun::new(
                    StageView {
                        id,
                        schedule: ask.schedule.to_string(),
                        state: "looking up".into(),
                        objects: objects_n,
                        destinations: names,
                        ..StageView::default()
                    },
                    StageConfig {
                        schedule: ask.schedule,
                        // Whole objects: a worker's fetch splits one among its sources itself.
                        chunk_fraction: 1.0,
                        min_chunk: u64::MAX,
                        ..StageConfig::default()
                    },
                    sh.at.instant,
                )
            },
        );
        tracing::info!(stage = id, schedule = %ask.schedule, "staging {} objects", ask.uris.len());
        Ok(id)
    }

    /// Drop `uris` from `dests`: a batch that is done at once, counting the copies dropped.
    fn unstage(
        &mut self,
        uris: &[String],
        dests: &[NodeId],
        sh: &mut Shared,
    ) -> Result<u64, String> {
        if let Some(tmp) = uris.iter().find(|u| crate::uri::is_tmp(u)) {
            return Err(format!(
                "{tmp}: intermediate objects are not dropped (a worker's copy may be the only one)"
            ));
        }
        let mut by_node: BTreeMap<NodeId, Vec<String>> = BTreeMap::new();
        for uri in uris {
            let Some(o) = sh.objects.get(uri) else {
                continue; // never seen: no worker holds it
            };
            for &n in sh.core.locate(o).iter() {
                if dests.contains(&n) {
                    by_node.entry(n).or_default().push(uri.clone());
                }
            }
        }
        let id = self.next;
        self.next += 1;
        let dropped = by_node.values().map(Vec::len).sum();
        for (n, uris) in by_node {
            sh.send_connected(n, ToWorker::Drop { uris });
        }
        tracing::info!(stage = id, "dropping {dropped} copies");
        let destinations = dests
            .iter()
            .filter_map(|n| sh.sessions.name(n).map(str::to_string))
            .collect();
        self.runs.insert(
            id,
            StageRun::new(
                StageView {
                    id,
                    schedule: "drop".into(),
                    state: "done".into(),
                    objects: uris.len(),
                    destinations,
                    requests: dropped,
                    done: dropped,
                    ..StageView::default()
                },
                StageConfig::default(),
                sh.at.instant,
            ),
        );
        Ok(id)
    }

    /// A lookup for batch `id` was answered.
    pub fn looked_up(
        &mut self,
        id: u64,
        o: ObjectId,
        uri: &str,
        result: &Result<(u64, String), String>,
    ) {
        let Some(run) = self.runs.get_mut(&id) else {
            return;
        };
        run.looking_up = run.looking_up.saturating_sub(1);
        match result {
            Ok((size, _)) => {
                run.sizes.insert(o, *size);
            }
            Err(e) => run
                .view
                .failed
                .push(format!("{}: {e}", crate::uri::redacted(uri))),
        }
    }

    /// Start what every batch's stager allows now.
    pub fn pump(&mut self, sh: &mut Shared) {
        for (id, run) in self.runs.iter_mut() {
            run.pump(*id, sh);
        }
    }

    /// `node` reported `o` cached: a request of a batch may be done.
    pub fn cached(&mut self, node: NodeId, o: ObjectId, sh: &mut Shared) {
        let mut touched = false;
        for run in self.runs.values_mut() {
            let Some(chunk) = run.running.remove(&(node, o)) else {
                continue;
            };
            touched = true;
            if let Some(stager) = run.stager.as_mut() {
                // Rates are learned from the workers' own transfer reports, not here.
                stager.done(
                    chunk.id,
                    &[],
                    &mut diffuse_core::bandwidth::Predictor::default(),
                );
            }
            run.view.done += 1;
            run.view.bytes += run.sizes.get(&o).copied().unwrap_or(chunk.len);
        }
        if touched {
            self.pump(sh);
        }
    }

    /// `node`'s fetch of `o` failed: a batch's request is planned again without its first
    /// source.
    pub fn fetch_failed(&mut self, node: NodeId, o: ObjectId, error: &str, sh: &mut Shared) {
        let mut touched = false;
        for run in self.runs.values_mut() {
            let Some(chunk) = run.running.remove(&(node, o)) else {
                continue;
            };
            touched = true;
            run.errors.insert((node, o), error.to_string());
            if let Some(stager) = run.stager.as_mut() {
                stager.failed(chunk.id, chunk.parts.first().map(|p| p.from));
            }
        }
        if touched {
            self.pump(sh);
        }
    }

    /// `node` received `bytes` from `from`: counted for the batches with a request to it under
    /// way (a worker's multi-source fetch decides the real shares).
    pub fn transferred(&mut self, node: NodeId, from: Endpoint, bytes: u64, sessions: &Sessions) {
        let name = match from {
            Endpoint::Storage => "storage".to_string(),
            Endpoint::Node(n) => sessions
                .name(&n)
                .map_or_else(|| format!("node {}", n.0), str::to_string),
        };
        for run in self.runs.values_mut() {
            if run.running.keys().any(|(n, _)| *n == node) {
                *run.view.by_source.entry(name.clone()).or_default() += bytes;
            }
        }
    }

    /// `node` left: batches give up their requests to it and stop reading from it.
    pub fn node_left(&mut self, node: NodeId, sh: &mut Shared) {
        let name = |n: NodeId| format!("node {}", n.0);
        for run in self.runs.values_mut() {
            if let Some(stager) = run.stager.as_mut() {
                let given_up = stager.node_left(node);
                run.running.retain(|(n, _), _| *n != node);
                if given_up > 0 {
                    run.view
                        .failed
                        .push(format!("{given_up} requests to {} (it left)", name(node)));
                }
            }
            run.dests.retain(|n| *n != node);
        }
        self.pump(sh);
    }

    /// The workers of the copies under way that read storage, one entry per copy: they count
    /// in the shares of the storage cap as a task's reads do.
    pub fn storage_reads(&self) -> Vec<NodeId> {
        self.runs
            .values()
            .flat_map(|run| run.running.values())
            .filter(|c| c.parts.first().is_none_or(|p| p.from == Endpoint::Storage))
            .map(|c| c.dest)
            .collect()
    }

    /// A batch's progress at `now`.
    pub fn view(&self, id: u64, now: Instant) -> Option<StageView> {
        let run = self.runs.get(&id)?;
        let mut v = run.view.clone();
        if v.state != "done" {
            v.seconds = now.saturating_duration_since(run.started).as_secs_f64();
        }
        Some(v)
    }
}

impl StageRun {
    /// Plan the batch once its lookups are answered, then start what its stager allows now;
    /// when nothing is under way and nothing may start, it is done.
    fn pump(&mut self, id: u64, sh: &mut Shared) {
        if self.stager.is_none() && self.looking_up == 0 {
            self.stager = Some(self.plan(sh.core, sh.objects));
            self.view.state = "staging".into();
        }
        let Some(stager) = self.stager.as_mut() else {
            return;
        };
        while let Some(chunk) = stager.poll(sh.core.predictor()) {
            let (dest, o) = (chunk.dest, chunk.object);
            tracing::debug!(
                stage = id,
                uri = %crate::uri::redacted(sh.objects.uri(o)),
                to = sh.sessions.name(&dest).unwrap_or("?"),
                from = ?chunk.parts.iter().map(|p| p.from).collect::<Vec<_>>(),
                expected_s = chunk.expected_s,
                "copy planned"
            );
            if send_fetch(&chunk, self.sizes[&o], sh) {
                stager.relay(chunk.id);
            }
            self.running.insert((dest, o), chunk);
        }
        self.view.running = self.running.len();
        // Nothing under way and nothing may start: done, or the rest has no source left.
        if self.running.is_empty() && self.view.state != "done" {
            for r in stager.unfinished() {
                let why = self
                    .errors
                    .remove(&(r.dest, r.object))
                    .unwrap_or_else(|| "no source holds it".into());
                let name = sh.sessions.name(&r.dest).unwrap_or("?");
                let uri = crate::uri::redacted(sh.objects.uri(r.object));
                self.view.failed.push(format!("{uri} -> {name}: {why}"));
            }
            self.view.state = "done".into();
            self.view.seconds = sh.at.since(self.started).as_secs_f64();
            tracing::info!(
                stage = id,
                "staged {} of {} requests: {} bytes in {:.2} s",
                self.view.done,
                self.view.requests,
                self.view.bytes,
                self.view.seconds
            );
        }
    }

    /// The batch's stager: every (object, worker) not yet held, sourced from the holders and
    /// (for objects storage has) storage.
    fn plan(&mut self, core: &Core, objects: &ObjectTable) -> Stager {
        let mut requests = Vec::new();
        let mut copies = Vec::new();
        for &o in &self.objects {
            let Some(&size) = self.sizes.get(&o) else {
                continue; // its lookup failed
            };
            let holders = core.locate(o);
            for h in holders.iter() {
                copies.push((o, Endpoint::Node(*h)));
            }
            if objects.tmp_size(o).is_none() {
                copies.push((o, Endpoint::Storage));
            }
            for &dest in &self.dests {
                if !holders.contains(&dest) {
                    requests.push(Request {
                        object: o,
                        // An empty object is still a copy to make: the stager plans one byte.
                        size: size.max(1),
                        dest,
                    });
                }
            }
        }
        self.view.requests = requests.len();
        // Each endpoint books at most the best rates it was seen sending and receiving at (its
        // NIC, as far as known); storage, with `--storage-bandwidth-cap`, the cap, which the
        // workers hold all their storage reads to (`storage/throttle.rs`): planned faster,
        // storage would be chosen over workers that hold the object and then be paced.
        let caps = core.predictor().best_rates();
        let mut out = caps.out;
        if let Some(cap) = core.config().storage_cap {
            out.retain(|(e, _)| *e != Endpoint::Storage);
            out.push((Endpoint::Storage, cap));
        }
        Stager::new(self.cfg, requests, &copies, &out).inbound_caps(&caps.into)
    }
}

/// Send `chunk`'s worker a fetch from its sources: the first peer as the one named, the other
/// peers as extra sources; storage only when the plan starts there. True if the destination
/// serves the chunks as they land (a large object read from peers: the worker's `multi` and
/// `relay`).
fn send_fetch(chunk: &Chunk, size: u64, sh: &mut Shared) -> bool {
    if !sh.sessions.contains(&chunk.dest) {
        return false;
    }
    let urls: Vec<String> = chunk
        .parts
        .iter()
        .filter_map(|p| match p.from {
            Endpoint::Node(n) => sh.sessions.get(&n).map(|s| s.peer_url.clone()),
            Endpoint::Storage => None,
        })
        .collect();
    let from_storage = chunk
        .parts
        .first()
        .is_none_or(|p| p.from == Endpoint::Storage);
    let source = match urls.split_first() {
        Some((url, also)) if !from_storage => InputSource::Peer {
            url: url.clone(),
            also: also.to_vec(),
        },
        _ => InputSource::Storage,
    };
    let relayed = matches!(source, InputSource::Peer { .. }) && size >= MULTI_SOURCE_MIN;
    let fetch = ToWorker::Fetch {
        inputs: vec![sh.objects.input(chunk.object, size, source)],
    };
    sh.comm.send(chunk.dest, fetch);
    relayed
}
