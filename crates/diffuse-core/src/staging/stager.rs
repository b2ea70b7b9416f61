//! The stager: a batch, the schedule that picks its next chunk, and the chunks under way; what
//! the driver calls ([`Stager::poll`], [`Stager::done`], [`Stager::failed`], ...).

use super::batch::{Batch, Chunk, Pending, Request};
use super::registry::Schedule;
use super::schedule::StageSchedule;
use crate::bandwidth::{Endpoint, Predictor};
use crate::ids::{NodeId, ObjectId};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Settings of a stager.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageConfig {
    /// The schedule.
    pub schedule: Schedule,
    /// A chunk is this fraction of its file...
    pub chunk_fraction: f64,
    /// ...but at least this many bytes (the rest of the file if less).
    pub min_chunk: u64,
    /// Bandwidth an endpoint has, each way, when `caps` does not say.
    pub default_cap: f64,
    /// Seed of the naive schedule's choices.
    pub seed: u64,
}

impl Default for StageConfig {
    fn default() -> Self {
        StageConfig {
            schedule: Schedule::Gds,
            chunk_fraction: 0.25,
            min_chunk: 4 << 20,
            default_cap: 125e6,
            seed: 1,
        }
    }
}

/// The state of a batch being staged.
#[derive(Debug)]
pub struct Stager {
    batch: Batch,
    /// Which chunk starts next.
    schedule: Box<dyn StageSchedule>,
    running: FxHashMap<u64, (usize, Chunk, Vec<f64>)>,
    /// Chunks under way whose destination already serves what has landed ([`Stager::relay`]).
    relayed: FxHashSet<u64>,
    next_id: u64,
}

impl Clone for Stager {
    fn clone(&self) -> Self {
        Stager {
            batch: self.batch.clone(),
            schedule: self.schedule.boxed_clone(),
            running: self.running.clone(),
            relayed: self.relayed.clone(),
            next_id: self.next_id,
        }
    }
}

impl Stager {
    /// A batch: `requests`, the copies that exist (`(object, where)`, each whole), and the
    /// endpoints' bandwidths (each way; others get `cfg.default_cap`).
    pub fn new(
        cfg: StageConfig,
        requests: Vec<Request>,
        copies: &[(ObjectId, Endpoint)],
        caps: &[(Endpoint, f64)],
    ) -> Stager {
        let mut held: FxHashMap<ObjectId, BTreeMap<Endpoint, u64>> = FxHashMap::default();
        for (o, e) in copies {
            held.entry(*o).or_default().insert(*e, u64::MAX);
        }
        let mut pending: Vec<Pending> = requests
            .into_iter()
            .filter(|r| {
                !held
                    .get(&r.object)
                    .is_some_and(|h| h.contains_key(&Endpoint::Node(r.dest)))
            })
            .map(|req| Pending {
                req,
                next: 0,
                busy: false,
                shunned: Vec::new(),
            })
            .collect();
        let schedule = cfg.schedule.build(cfg.seed);
        schedule.arrange(&mut pending);
        Stager {
            batch: Batch {
                pending,
                held,
                caps: caps.iter().copied().collect(),
                in_caps: FxHashMap::default(),
                out_used: FxHashMap::default(),
                in_used: FxHashMap::default(),
                pair_used: FxHashMap::default(),
                chunk_fraction: cfg.chunk_fraction,
                min_chunk: cfg.min_chunk,
                default_cap: cfg.default_cap,
            },
            schedule,
            running: FxHashMap::default(),
            relayed: Default::default(),
            next_id: 0,
        }
    }

    /// Whether every request is done.
    pub fn finished(&self) -> bool {
        self.batch
            .pending
            .iter()
            .all(|p| p.next >= p.req.size && !p.busy)
    }

    /// The requests not yet done (nor given up).
    pub fn unfinished(&self) -> Vec<Request> {
        self.batch
            .pending
            .iter()
            .filter(|p| p.next < p.req.size || p.busy)
            .map(|p| p.req)
            .collect()
    }

    /// Chunks under way.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// The endpoints' inbound bandwidths, where they differ from what they send at (a link
    /// shaped one way, a host that was only seen sending).
    pub fn inbound_caps(mut self, caps: &[(Endpoint, f64)]) -> Stager {
        self.batch.in_caps = caps.iter().copied().collect();
        self
    }

    /// The next chunk to start now, if any may (none: wait for one under way to end).
    pub fn poll(&mut self, pred: &Predictor) -> Option<Chunk> {
        let (i, mut chunk, rates) = self.schedule.next(&self.batch, pred)?;
        chunk.id = self.next_id;
        self.next_id += 1;
        let p = &mut self.batch.pending[i];
        p.busy = true;
        p.next = chunk.offset + chunk.len;
        self.batch.book(&chunk, &rates, 1.0);
        self.running.insert(chunk.id, (i, chunk.clone(), rates));
        Some(chunk)
    }

    /// Chunk `id` arrived whole; each part took the seconds in `secs` (in the order of its
    /// parts), which the predictor learns from. The destination now serves those bytes.
    pub fn done(&mut self, id: u64, secs: &[f64], pred: &mut Predictor) {
        let Some((i, chunk, rates)) = self.running.remove(&id) else {
            return;
        };
        self.release(&chunk, &rates);
        self.relayed.remove(&id);
        let dest = Endpoint::Node(chunk.dest);
        for (part, s) in chunk.parts.iter().zip(secs) {
            pred.observe(part.from, dest, part.len, *s);
        }
        let p = &mut self.batch.pending[i];
        p.busy = false;
        let have = self
            .batch
            .held
            .entry(chunk.object)
            .or_default()
            .entry(dest)
            .or_insert(0);
        *have = (*have).max(chunk.offset + chunk.len);
        if *have >= p.req.size {
            *have = u64::MAX;
        }
    }

    /// Chunk `id`, under way, is served onward by its destination as its pieces land: from
    /// now on the destination counts as a source of the whole chunk. The live driver moves
    /// whole objects as one chunk, read in pieces that a worker relays as they land (see the
    /// runtime's `worker::relay`), so a copy need not be whole before it is copied on; the
    /// simulator's chunks are small enough to relay when each is done. If the chunk fails, the
    /// destination is no source of it any more.
    pub fn relay(&mut self, id: u64) {
        let Some((i, chunk, _)) = self.running.get(&id) else {
            return;
        };
        let end = chunk.offset + chunk.len;
        let end = if end >= self.batch.pending[*i].req.size {
            u64::MAX
        } else {
            end
        };
        let have = self
            .batch
            .held
            .entry(chunk.object)
            .or_default()
            .entry(Endpoint::Node(chunk.dest))
            .or_insert(0);
        if *have < end {
            *have = end;
            self.relayed.insert(id);
        }
    }

    /// Chunk `id` failed because of `source` (None: not known): it will be planned again, and
    /// that source is not used for this request again.
    pub fn failed(&mut self, id: u64, source: Option<Endpoint>) {
        let Some((i, chunk, rates)) = self.running.remove(&id) else {
            return;
        };
        if self.relayed.remove(&id) {
            // What it relayed was never whole: back to what had landed before the chunk.
            if let Some(h) = self.batch.held.get_mut(&chunk.object) {
                let dest = Endpoint::Node(chunk.dest);
                if chunk.offset == 0 {
                    h.remove(&dest);
                } else {
                    h.insert(dest, chunk.offset);
                }
            }
        }
        self.release(&chunk, &rates);
        let p = &mut self.batch.pending[i];
        p.busy = false;
        p.next = chunk.offset;
        if let Some(s) = source {
            p.shunned.push(s);
            self.schedule.source_failed(i, s);
        }
    }

    /// `node` left: requests to it are given up (returned: how many were not done), and it is
    /// no source any more. Chunks under way to it are forgotten.
    pub fn node_left(&mut self, node: NodeId) -> usize {
        let gone = Endpoint::Node(node);
        let lost: Vec<u64> = self
            .running
            .iter()
            .filter(|(_, (_, c, _))| c.dest == node || c.parts.iter().any(|p| p.from == gone))
            .map(|(id, _)| *id)
            .collect();
        for id in lost {
            let dest = self.running.get(&id).map(|(_, c, _)| c.dest);
            if dest == Some(node) {
                if let Some((i, chunk, rates)) = self.running.remove(&id) {
                    self.release(&chunk, &rates);
                    self.batch.pending[i].busy = false;
                    self.batch.pending[i].next = chunk.offset;
                }
            } else {
                self.failed(id, Some(gone));
            }
        }
        let mut given_up = 0;
        for p in &mut self.batch.pending {
            if p.req.dest == node && p.next < p.req.size {
                p.next = p.req.size;
                given_up += 1;
            }
        }
        for h in self.batch.held.values_mut() {
            h.remove(&gone);
        }
        given_up
    }

    fn release(&mut self, chunk: &Chunk, rates: &[f64]) {
        self.batch.book(chunk, rates, -1.0);
    }
}
