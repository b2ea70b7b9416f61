//! Staging a batch of objects to nodes (coordinated-transfers-gridftp-gds.txt, section 4): the
//! requests `(object, destination)` are moved in chunks, each chunk from one or more sources at
//! once in disjoint parts sized by their predicted bandwidth ([`crate::bandwidth`]). A
//! destination that has received the first bytes of an object serves them onward (a chunk-level
//! replica source).
//!
//! Three schedules, compared by `diffuse stage --schedule` and in docs/transfers.md:
//!
//! - **GDS** (Algorithm 1): one scheduler for the whole batch. While some destination has
//!   bandwidth left, every pending request's next chunk is planned (replica selection below)
//!   and the one that would finish first starts (MinMin); the bandwidth it takes is booked at
//!   its sources, its destination and the path between them, so later choices see it. A chunk
//!   that only slow sources could serve now (more than twice the time it would take with every
//!   source free) waits for the fast ones instead: this project's addition, after the first
//!   runs showed GDS starting 500 MB parts on a 4 Mb/s path while the 880 Mb/s ones were busy.
//! - **LDS** (Algorithm 3): each destination on its own, its files smallest first, one chunk at
//!   a time, with the same replica selection but blind to what other destinations take.
//! - **Naive**: each destination on its own, each file whole from one replica chosen at random
//!   (seeded).
//!
//! Replica selection (Algorithm 2): the sources holding the chunk's bytes, best predicted
//! bandwidth to the destination first (under GDS, less what chunks under way already take of
//! the source's NIC and of the path between the two), are added until the destination's inbound
//! bandwidth is used up; parts are sized in proportion to those bandwidths. A source offering
//! under a hundredth of the best one's bandwidth is left out: its part would finish last. The paper's filter on small files (under a multiple of the bandwidth-delay
//! product) is left out: on a cluster's links the product is a few hundred kilobytes.
//!
//! This is planning only: [`Stager::poll`] says which chunk to start, the driver moves the
//! bytes and reports each chunk done ([`Stager::done`], which teaches the predictor) or failed
//! ([`Stager::failed`], which drops the failing source).

use crate::bandwidth::{Endpoint, Predictor};
use crate::ids::{NodeId, ObjectId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Which schedule stages the batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    /// Each destination alone, each file whole from a random replica.
    Naive,
    /// Each destination alone, smallest files first, chunks from several replicas.
    Lds,
    /// One scheduler: MinMin over every pending chunk, bandwidth booked as it goes.
    #[default]
    Gds,
}

impl FromStr for Schedule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "naive" => Ok(Schedule::Naive),
            "lds" => Ok(Schedule::Lds),
            "gds" => Ok(Schedule::Gds),
            _ => Err(format!(
                "unknown schedule '{s}' (expected naive, lds or gds)"
            )),
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Schedule::Naive => "naive",
            Schedule::Lds => "lds",
            Schedule::Gds => "gds",
        })
    }
}

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

/// One object wanted on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// The object.
    pub object: ObjectId,
    /// Its size, bytes.
    pub size: u64,
    /// Where it is wanted.
    pub dest: NodeId,
}

/// A disjoint part of a chunk, read from one source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    /// Where it is read from.
    pub from: Endpoint,
    /// First byte.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

/// A chunk to move now: bytes `[offset, offset + len)` of `object` to `dest`, in `parts`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    /// Its number, reported back with [`Stager::done`] or [`Stager::failed`].
    pub id: u64,
    /// The object.
    pub object: ObjectId,
    /// The destination.
    pub dest: NodeId,
    /// First byte.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// Sources and their parts, covering `[offset, offset + len)` in order.
    pub parts: Vec<Part>,
    /// Seconds it is expected to take.
    pub expected_s: f64,
}

#[derive(Clone, Debug)]
struct Pending {
    req: Request,
    /// Bytes scheduled so far (the next chunk starts here).
    next: u64,
    busy: bool,
    /// Sources that failed for this request.
    shunned: Vec<Endpoint>,
    /// Naive: its one source.
    fixed: Option<Endpoint>,
}

/// The state of a batch being staged.
#[derive(Clone, Debug)]
pub struct Stager {
    cfg: StageConfig,
    pending: Vec<Pending>,
    /// Bytes of each object each endpoint holds from its start (`u64::MAX`: all of it).
    held: FxHashMap<ObjectId, BTreeMap<Endpoint, u64>>,
    caps: FxHashMap<Endpoint, f64>,
    /// Inbound bandwidths where they differ from `caps` ([`Stager::inbound_caps`]).
    in_caps: FxHashMap<Endpoint, f64>,
    /// Bandwidth booked by chunks under way, out of and into each endpoint, and between each
    /// pair.
    out_used: FxHashMap<Endpoint, f64>,
    in_used: FxHashMap<Endpoint, f64>,
    pair_used: FxHashMap<(Endpoint, Endpoint), f64>,
    running: FxHashMap<u64, (usize, Chunk, Vec<f64>)>,
    /// Chunks under way whose destination already serves what has landed ([`Stager::relay`]).
    relayed: FxHashSet<u64>,
    next_id: u64,
    rng: ChaCha8Rng,
}

/// Bandwidth below which an endpoint counts as busy.
const EPSILON: f64 = 1.0;

/// GDS waits instead of starting a chunk that would take more than this many times what it
/// would with every source free.
const WAIT_FACTOR: f64 = 2.0;

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
                fixed: None,
            })
            .collect();
        if cfg.schedule == Schedule::Lds {
            // Each destination takes its files smallest first.
            pending.sort_by_key(|p| (p.req.dest, p.req.size, p.req.object));
        }
        Stager {
            cfg,
            pending,
            held,
            caps: caps.iter().copied().collect(),
            in_caps: FxHashMap::default(),
            out_used: FxHashMap::default(),
            in_used: FxHashMap::default(),
            pair_used: FxHashMap::default(),
            running: FxHashMap::default(),
            relayed: Default::default(),
            next_id: 0,
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
        }
    }

    /// Whether every request is done.
    pub fn finished(&self) -> bool {
        self.pending.iter().all(|p| p.next >= p.req.size && !p.busy)
    }

    /// The requests not yet done (nor given up).
    pub fn unfinished(&self) -> Vec<Request> {
        self.pending
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
        self.in_caps = caps.iter().copied().collect();
        self
    }

    fn cap(&self, e: Endpoint) -> f64 {
        self.caps.get(&e).copied().unwrap_or(self.cfg.default_cap)
    }

    fn cap_in(&self, e: Endpoint) -> f64 {
        self.in_caps.get(&e).copied().unwrap_or_else(|| self.cap(e))
    }

    fn out_left(&self, e: Endpoint) -> f64 {
        self.cap(e) - self.out_used.get(&e).copied().unwrap_or(0.0)
    }

    fn in_left(&self, e: Endpoint) -> f64 {
        self.cap_in(e) - self.in_used.get(&e).copied().unwrap_or(0.0)
    }

    /// The next chunk to start now, if any may (none: wait for one under way to end).
    pub fn poll(&mut self, pred: &Predictor) -> Option<Chunk> {
        let choice = match self.cfg.schedule {
            Schedule::Gds => self.min_min(pred),
            Schedule::Lds | Schedule::Naive => self.local(pred),
        }?;
        let (i, mut chunk, rates) = choice;
        chunk.id = self.next_id;
        self.next_id += 1;
        let p = &mut self.pending[i];
        p.busy = true;
        p.next = chunk.offset + chunk.len;
        let dest = Endpoint::Node(chunk.dest);
        for (part, rate) in chunk.parts.iter().zip(&rates) {
            *self.out_used.entry(part.from).or_default() += rate;
            *self.in_used.entry(dest).or_default() += rate;
            *self.pair_used.entry((part.from, dest)).or_default() += rate;
        }
        self.running.insert(chunk.id, (i, chunk.clone(), rates));
        Some(chunk)
    }

    /// GDS: of every pending request's next chunk, the one that would end first.
    fn min_min(&self, pred: &Predictor) -> Option<(usize, Chunk, Vec<f64>)> {
        let mut best: Option<(f64, usize, Chunk, Vec<f64>)> = None;
        for (i, p) in self.pending.iter().enumerate() {
            if p.busy || p.next >= p.req.size {
                continue;
            }
            if self.in_left(Endpoint::Node(p.req.dest)) < EPSILON {
                continue;
            }
            let Some((chunk, rates)) = self.plan(p, pred, true) else {
                continue;
            };
            // A chunk that only slow sources could take now waits for the fast ones, busy
            // with other chunks, to free up: started now it would finish later than that.
            let unhurried = self
                .plan(p, pred, false)
                .map_or(f64::MAX, |(c, _)| c.expected_s);
            if chunk.expected_s > WAIT_FACTOR * unhurried {
                continue;
            }
            if best.as_ref().is_none_or(|b| chunk.expected_s < b.0) {
                best = Some((chunk.expected_s, i, chunk, rates));
            }
        }
        best.map(|(_, i, c, r)| (i, c, r))
    }

    /// LDS and naive: the first destination with nothing under way starts its next file's
    /// next chunk, blind to the others.
    fn local(&mut self, pred: &Predictor) -> Option<(usize, Chunk, Vec<f64>)> {
        let mut busy: std::collections::BTreeSet<NodeId> = self
            .pending
            .iter()
            .filter(|p| p.busy)
            .map(|p| p.req.dest)
            .collect();
        // Each idle destination's first request that some source can serve.
        for i in 0..self.pending.len() {
            let p = &self.pending[i];
            if p.busy || p.next >= p.req.size || busy.contains(&p.req.dest) {
                continue;
            }
            if self.cfg.schedule == Schedule::Naive && p.fixed.is_none() {
                let sources = self.sources(p, 0);
                if sources.is_empty() {
                    continue;
                }
                let k = self.rng.random_range(0..sources.len());
                self.pending[i].fixed = Some(sources[k].0);
            }
            match self.plan(&self.pending[i], pred, false) {
                Some((chunk, rates)) => return Some((i, chunk, rates)),
                // Its destination takes its next file only once this one can move.
                None => {
                    busy.insert(self.pending[i].req.dest);
                }
            }
        }
        None
    }

    /// Sources holding byte `offset` of the request's object, with the bytes they hold.
    fn sources(&self, p: &Pending, offset: u64) -> Vec<(Endpoint, u64)> {
        self.held
            .get(&p.req.object)
            .into_iter()
            .flatten()
            .filter(|(e, have)| {
                **e != Endpoint::Node(p.req.dest) && **have > offset && !p.shunned.contains(e)
            })
            .map(|(e, have)| (*e, *have))
            .collect()
    }

    /// The next chunk of `p` and the rate booked for each part; `coordinated`: bandwidth
    /// others have booked counts (GDS), else only the endpoints' capacities (LDS, naive).
    fn plan(&self, p: &Pending, pred: &Predictor, coordinated: bool) -> Option<(Chunk, Vec<f64>)> {
        let dest = Endpoint::Node(p.req.dest);
        let left = p.req.size - p.next;
        let chunk_len = match self.cfg.schedule {
            Schedule::Naive => left,
            _ => ((p.req.size as f64 * self.cfg.chunk_fraction) as u64)
                .max(self.cfg.min_chunk)
                .min(left)
                .max(1),
        };
        let mut sources: Vec<(Endpoint, u64, f64)> = self
            .sources(p, p.next)
            .into_iter()
            .filter(|(e, _)| p.fixed.is_none_or(|f| f == *e))
            .map(|(e, have)| {
                let predicted = pred.predict(e, dest);
                let bw = if coordinated {
                    // What is left of the source's NIC and of the path to this destination.
                    let on_path = self.pair_used.get(&(e, dest)).copied().unwrap_or(0.0);
                    (predicted - on_path).min(self.out_left(e))
                } else {
                    predicted.min(self.cap(e))
                };
                (e, have, bw.max(0.0))
            })
            .collect();
        if sources.is_empty() {
            return None;
        }
        sources.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
        let mut inbound = if coordinated {
            self.in_left(dest)
        } else {
            self.cap_in(dest)
        };
        let mut chosen: Vec<(Endpoint, u64, f64)> = Vec::new();
        let best = sources[0].2;
        for (e, have, bw) in sources.iter().copied() {
            if bw < EPSILON || bw < best / 100.0 {
                continue;
            }
            let rate = bw.min(inbound);
            chosen.push((e, have, rate));
            inbound -= rate;
            if inbound < EPSILON || self.cfg.schedule == Schedule::Naive {
                break;
            }
        }
        if chosen.is_empty() {
            // Every source is busy: the best one anyway, at a trickle, if nothing else runs.
            if coordinated {
                return None;
            }
            let (e, have, _) = sources[0];
            chosen.push((e, have, EPSILON));
        }
        // Parts in proportion to the rates, each within what its source holds.
        let total: f64 = chosen.iter().map(|c| c.2).sum();
        let mut parts = Vec::with_capacity(chosen.len());
        let mut rates = Vec::with_capacity(chosen.len());
        let mut at = p.next;
        let end = p.next + chunk_len;
        for (k, (e, have, rate)) in chosen.iter().enumerate() {
            if at >= end {
                break;
            }
            let share = if k + 1 == chosen.len() {
                end - at
            } else {
                ((chunk_len as f64 * rate / total) as u64).max(1)
            };
            let len = share.min(end - at).min(have.saturating_sub(at));
            if len == 0 {
                continue;
            }
            parts.push(Part {
                from: *e,
                offset: at,
                len,
            });
            rates.push(*rate);
            at += len;
        }
        if parts.is_empty() {
            return None;
        }
        let len = at - p.next;
        let expected_s = parts
            .iter()
            .zip(&rates)
            .map(|(part, r)| part.len as f64 / r)
            .fold(0.0, f64::max);
        Some((
            Chunk {
                id: 0,
                object: p.req.object,
                dest: p.req.dest,
                offset: p.next,
                len,
                parts,
                expected_s,
            },
            rates,
        ))
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
        let p = &mut self.pending[i];
        p.busy = false;
        let have = self
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
        let end = if end >= self.pending[*i].req.size {
            u64::MAX
        } else {
            end
        };
        let have = self
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
            if let Some(h) = self.held.get_mut(&chunk.object) {
                let dest = Endpoint::Node(chunk.dest);
                if chunk.offset == 0 {
                    h.remove(&dest);
                } else {
                    h.insert(dest, chunk.offset);
                }
            }
        }
        self.release(&chunk, &rates);
        let p = &mut self.pending[i];
        p.busy = false;
        p.next = chunk.offset;
        if let Some(s) = source {
            p.shunned.push(s);
            if p.fixed == Some(s) {
                p.fixed = None;
            }
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
                    self.pending[i].busy = false;
                    self.pending[i].next = chunk.offset;
                }
            } else {
                self.failed(id, Some(gone));
            }
        }
        let mut given_up = 0;
        for p in &mut self.pending {
            if p.req.dest == node && p.next < p.req.size {
                p.next = p.req.size;
                given_up += 1;
            }
        }
        for h in self.held.values_mut() {
            h.remove(&gone);
        }
        given_up
    }

    fn release(&mut self, chunk: &Chunk, rates: &[f64]) {
        let dest = Endpoint::Node(chunk.dest);
        for (part, rate) in chunk.parts.iter().zip(rates) {
            *self.out_used.entry(part.from).or_default() -= rate;
            *self.in_used.entry(dest).or_default() -= rate;
            *self.pair_used.entry((part.from, dest)).or_default() -= rate;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bandwidth::BandwidthConfig;

    fn n(i: u32) -> Endpoint {
        Endpoint::Node(NodeId(i))
    }

    fn req(object: u64, size: u64, dest: u32) -> Request {
        Request {
            object: ObjectId(object),
            size,
            dest: NodeId(dest),
        }
    }

    fn cfg(schedule: Schedule) -> StageConfig {
        StageConfig {
            schedule,
            chunk_fraction: 1.0,
            min_chunk: 1,
            default_cap: 100.0,
            seed: 1,
        }
    }

    fn predictor(pairs: &[(Endpoint, Endpoint, f64)]) -> Predictor {
        let mut p = Predictor::new(BandwidthConfig {
            default: 100.0,
            successive: 1000,
            ..BandwidthConfig::default()
        });
        for (a, b, bw) in pairs {
            p.observe(*a, *b, *bw as u64, 1.0);
        }
        p
    }

    #[test]
    fn a_node_that_leaves_is_given_up_as_destination_and_dropped_as_source() {
        // n1 holds o1, wanted on n8 and n9; n8 leaves while its chunk from n1 is under way.
        let pred = predictor(&[]);
        let mut s = Stager::new(
            cfg(Schedule::Gds),
            vec![req(1, 100, 8), req(1, 100, 9)],
            &[(ObjectId(1), n(1))],
            &[(n(1), 1000.0)],
        );
        let a = s.poll(&pred).unwrap();
        let b = s.poll(&pred).unwrap();
        let to8 = if a.dest == NodeId(8) { &a } else { &b };
        assert_eq!(to8.dest, NodeId(8));
        assert_eq!(s.node_left(NodeId(8)), 1, "its one request is given up");
        assert_eq!(s.running(), 1);
        // Then the source leaves: n9's chunk fails and no source is left for it.
        assert_eq!(s.node_left(NodeId(1)), 0);
        assert_eq!(s.running(), 0);
        assert!(s.poll(&pred).is_none(), "no one holds o1 any more");
        assert!(!s.finished(), "n9's request is still wanted");
    }

    #[test]
    fn a_relayed_chunk_makes_its_destination_a_source_until_it_fails() {
        // n1 holds o1 (out 100 B/s), wanted on n8 and n9. Once n1's bandwidth goes to n8, n9
        // would wait; with n8 relaying as the bytes land, n9 reads from n8 at once.
        let pred = predictor(&[]);
        let mut s = Stager::new(
            cfg(Schedule::Gds),
            vec![req(1, 1000, 8), req(1, 1000, 9)],
            &[(ObjectId(1), n(1))],
            &[(n(1), 100.0)],
        );
        let first = s.poll(&pred).unwrap();
        assert_eq!(first.parts[0].from, n(1));
        assert!(s.poll(&pred).is_none(), "n1's 100 B/s are booked");
        s.relay(first.id);
        let second = s.poll(&pred).unwrap();
        assert_eq!(second.dest, NodeId(8 + 9 - first.dest.0));
        assert_eq!(second.parts[0].from, Endpoint::Node(first.dest));
        // The relay fails: its destination is no source any more, and the chunk it fed is
        // planned from n1 again when that one fails too.
        s.failed(first.id, None);
        s.failed(second.id, Some(Endpoint::Node(first.dest)));
        let again: Vec<Chunk> = std::iter::from_fn(|| s.poll(&pred)).collect();
        assert!(!again.is_empty());
        assert!(
            again.iter().all(|c| c.parts.iter().all(|p| p.from == n(1))),
            "{again:?}"
        );
    }

    #[test]
    fn min_min_starts_the_chunk_that_ends_first() {
        // Two requests to n9: a 1000 B object from storage (100 B/s: 10 s) and a 200 B one
        // (2 s). MinMin starts the small one; the big one waits, since n9's inbound is used.
        let pred = predictor(&[]);
        let mut s = Stager::new(
            cfg(Schedule::Gds),
            vec![req(1, 1000, 9), req(2, 200, 9)],
            &[
                (ObjectId(1), Endpoint::Storage),
                (ObjectId(2), Endpoint::Storage),
            ],
            &[(Endpoint::Storage, 1000.0)],
        );
        let c = s.poll(&pred).unwrap();
        assert_eq!((c.object, c.expected_s), (ObjectId(2), 2.0));
        assert!(s.poll(&pred).is_none(), "n9's 100 B/s are booked");
    }

    #[test]
    fn a_chunk_comes_from_several_sources_sized_by_their_bandwidth() {
        // n1 and n2 hold the object; n1 -> n9 at 60 B/s, n2 -> n9 at 30 B/s, storage 10 B/s;
        // n9 takes in 100 B/s. All three are used, parts of 600, 300 and 100 of 1000 B.
        let pred = predictor(&[
            (n(1), n(9), 60.0),
            (n(2), n(9), 30.0),
            (Endpoint::Storage, n(9), 10.0),
        ]);
        let mut s = Stager::new(
            cfg(Schedule::Gds),
            vec![req(1, 1000, 9)],
            &[
                (ObjectId(1), n(1)),
                (ObjectId(1), n(2)),
                (ObjectId(1), Endpoint::Storage),
            ],
            &[],
        );
        let c = s.poll(&pred).unwrap();
        let parts: Vec<(Endpoint, u64, u64)> =
            c.parts.iter().map(|p| (p.from, p.offset, p.len)).collect();
        assert_eq!(
            parts,
            vec![
                (n(1), 0, 600),
                (n(2), 600, 300),
                (Endpoint::Storage, 900, 100)
            ]
        );
        assert_eq!(c.expected_s, 10.0);
    }

    #[test]
    fn a_source_already_booked_is_passed_over_for_another() {
        // n1 serves n8 and n9 each a 1000 B object; n2 holds the second one too. n1 is the
        // faster source of both, but once its 100 B/s out go to the first chunk, GDS reads the
        // second from n2.
        let pred = predictor(&[(n(1), n(8), 100.0), (n(1), n(9), 100.0), (n(2), n(9), 50.0)]);
        let mut s = Stager::new(
            cfg(Schedule::Gds),
            vec![req(1, 1000, 8), req(2, 1000, 9)],
            &[
                (ObjectId(1), n(1)),
                (ObjectId(2), n(1)),
                (ObjectId(2), n(2)),
            ],
            &[],
        );
        let first = s.poll(&pred).unwrap();
        let second = s.poll(&pred).unwrap();
        assert_eq!(first.parts[0].from, n(1));
        assert_eq!(second.object, ObjectId(2));
        assert_eq!(
            second.parts.iter().map(|p| p.from).collect::<Vec<_>>(),
            vec![n(2)]
        );
    }

    #[test]
    fn a_destination_serves_the_bytes_it_has_received() {
        // Chunks of 250 B: after n8's first chunk of the object lands, n8 is a source for n9.
        let pred = predictor(&[(n(8), n(9), 100.0), (Endpoint::Storage, n(9), 10.0)]);
        let mut s = Stager::new(
            StageConfig {
                chunk_fraction: 0.25,
                ..cfg(Schedule::Gds)
            },
            vec![req(1, 1000, 8), req(1, 1000, 9)],
            &[(ObjectId(1), Endpoint::Storage)],
            &[],
        );
        let mut p = pred;
        let a = s.poll(&p).unwrap();
        assert_eq!(
            a.dest,
            NodeId(8),
            "n8 reads storage faster (default 100 B/s)"
        );
        s.done(a.id, &[2.5], &mut p);
        // n8's next chunk takes storage's 100 B/s; n9's first then comes from n8.
        let c = s.poll(&p).unwrap();
        assert_eq!((c.dest, c.offset), (NodeId(8), 250));
        let b = s.poll(&p).unwrap();
        assert_eq!(b.dest, NodeId(9));
        assert_eq!(b.parts[0].from, n(8), "n8 holds bytes 0-250 now");
        assert!(b
            .parts
            .iter()
            .all(|part| part.offset + part.len <= 250 || part.from != n(8)));
    }

    #[test]
    fn a_failed_source_is_dropped_and_the_chunk_planned_again() {
        let pred = predictor(&[(n(1), n(9), 100.0), (n(2), n(9), 10.0)]);
        let mut s = Stager::new(
            StageConfig {
                chunk_fraction: 1.0,
                ..cfg(Schedule::Naive)
            },
            vec![req(1, 100, 9)],
            &[(ObjectId(1), n(1)), (ObjectId(1), n(2))],
            &[],
        );
        let a = s.poll(&pred).unwrap();
        let first = a.parts[0].from;
        s.failed(a.id, Some(first));
        let b = s.poll(&pred).unwrap();
        assert_eq!(b.offset, 0);
        assert_ne!(b.parts[0].from, first, "another replica");
        let mut pred = pred;
        s.done(b.id, &[1.0], &mut pred);
        assert!(s.finished());
    }

    #[test]
    fn lds_takes_each_destinations_files_smallest_first_one_at_a_time() {
        let pred = predictor(&[]);
        let mut s = Stager::new(
            cfg(Schedule::Lds),
            vec![req(1, 500, 9), req(2, 100, 9), req(3, 300, 8)],
            &[
                (ObjectId(1), Endpoint::Storage),
                (ObjectId(2), Endpoint::Storage),
                (ObjectId(3), Endpoint::Storage),
            ],
            &[(Endpoint::Storage, 1e9)],
        );
        let a = s.poll(&pred).unwrap();
        let b = s.poll(&pred).unwrap();
        assert_eq!((a.dest, a.object), (NodeId(8), ObjectId(3)));
        assert_eq!(
            (b.dest, b.object),
            (NodeId(9), ObjectId(2)),
            "n9's smallest"
        );
        assert!(
            s.poll(&pred).is_none(),
            "one chunk per destination at a time"
        );
    }
}
