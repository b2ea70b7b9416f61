//! A batch being staged, as every schedule reads it: the requests, what each endpoint holds,
//! the bandwidth booked by chunks under way, and replica selection (GDS's Algorithm 2): the
//! sources of a request's next chunk and the part each one sends.

use crate::bandwidth::{Endpoint, Predictor};
use crate::ids::{NodeId, ObjectId};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
    /// Its number, reported back with [`Stager::done`](super::Stager::done) or
    /// [`Stager::failed`](super::Stager::failed).
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

/// A request and how far it has got.
#[derive(Clone, Debug)]
pub struct Pending {
    /// The request.
    pub req: Request,
    /// Bytes scheduled so far (the next chunk starts here).
    pub next: u64,
    /// A chunk of it is under way.
    pub busy: bool,
    /// Sources that failed for this request.
    pub shunned: Vec<Endpoint>,
}

/// How a schedule plans a chunk.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    /// Bandwidth that chunks under way have booked counts (GDS); else only the endpoints'
    /// capacities (LDS, naive).
    pub coordinated: bool,
    /// A chunk is the rest of the file (naive).
    pub whole_file: bool,
    /// One source per chunk (naive).
    pub one_source: bool,
}

/// Bandwidth below which an endpoint counts as busy.
pub const EPSILON: f64 = 1.0;

/// The state of a batch that schedules read.
#[derive(Clone, Debug)]
pub struct Batch {
    /// The requests, in the order the schedule arranged them.
    pub pending: Vec<Pending>,
    /// Bytes of each object each endpoint holds from its start (`u64::MAX`: all of it).
    pub held: FxHashMap<ObjectId, BTreeMap<Endpoint, u64>>,
    pub(super) caps: FxHashMap<Endpoint, f64>,
    /// Inbound bandwidths where they differ from `caps` (`Stager::inbound_caps`).
    pub(super) in_caps: FxHashMap<Endpoint, f64>,
    /// Bandwidth booked by chunks under way, out of and into each endpoint, and between each
    /// pair.
    pub(super) out_used: FxHashMap<Endpoint, f64>,
    pub(super) in_used: FxHashMap<Endpoint, f64>,
    pub(super) pair_used: FxHashMap<(Endpoint, Endpoint), f64>,
    /// A chunk is this fraction of its file...
    pub(super) chunk_fraction: f64,
    /// ...but at least this many bytes (the rest of the file if less).
    pub(super) min_chunk: u64,
    /// Bandwidth an endpoint has, each way, when `caps` does not say.
    pub(super) default_cap: f64,
}

impl Batch {
    fn cap(&self, e: Endpoint) -> f64 {
        self.caps.get(&e).copied().unwrap_or(self.default_cap)
    }

    fn cap_in(&self, e: Endpoint) -> f64 {
        self.in_caps.get(&e).copied().unwrap_or_else(|| self.cap(e))
    }

    fn out_left(&self, e: Endpoint) -> f64 {
        self.cap(e) - self.out_used.get(&e).copied().unwrap_or(0.0)
    }

    /// Inbound bandwidth of `e` not booked by chunks under way.
    pub fn in_left(&self, e: Endpoint) -> f64 {
        self.cap_in(e) - self.in_used.get(&e).copied().unwrap_or(0.0)
    }

    /// Book (`sign` 1) or give back (-1) the bandwidth of `chunk`'s parts.
    pub fn book(&mut self, chunk: &Chunk, rates: &[f64], sign: f64) {
        let dest = Endpoint::Node(chunk.dest);
        for (part, rate) in chunk.parts.iter().zip(rates) {
            *self.out_used.entry(part.from).or_default() += sign * rate;
            *self.in_used.entry(dest).or_default() += sign * rate;
            *self.pair_used.entry((part.from, dest)).or_default() += sign * rate;
        }
    }

    /// Sources holding byte `offset` of the request's object, with the bytes they hold.
    pub fn sources(&self, p: &Pending, offset: u64) -> Vec<(Endpoint, u64)> {
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

    /// The next chunk of `p` and the rate booked for each part, under `rules`; `only`: the one
    /// source it may come from (naive's).
    pub fn plan(
        &self,
        p: &Pending,
        pred: &Predictor,
        rules: Rules,
        only: Option<Endpoint>,
    ) -> Option<(Chunk, Vec<f64>)> {
        let coordinated = rules.coordinated;
        let dest = Endpoint::Node(p.req.dest);
        let left = p.req.size - p.next;
        let chunk_len = if rules.whole_file {
            left
        } else {
            ((p.req.size as f64 * self.chunk_fraction) as u64)
                .max(self.min_chunk)
                .min(left)
                .max(1)
        };
        let mut sources: Vec<(Endpoint, u64, f64)> = self
            .sources(p, p.next)
            .into_iter()
            .filter(|(e, _)| only.is_none_or(|f| f == *e))
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
            if inbound < EPSILON || rules.one_source {
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
}
