//! The flow lower bound on a staging batch's makespan (coordinated-transfers-gridftp-gds.txt,
//! section 3), solved as a linear program.
//!
//! Each request `(file, destination)` gets the rates at which every endpoint sends it that file
//! (`Flow[i][j][f]`); the program maximizes the smallest normalized rate `InFlow[k][f] / size`
//! (the paper's MinRate), and the bound is its inverse, in seconds. The constraints are the
//! paper's:
//! - what a node takes in, over every file, is at most its inbound bandwidth (3);
//! - what it sends, at most its outbound bandwidth (4);
//! - what crosses a pair of endpoints, at most the path's bandwidth (5);
//! - only a file's destinations receive it (6), and a destination that does not hold a file
//!   sends it on no faster than it receives it (2).
//!
//! The paper forbids flow cycles among a file's destinations with integer constraints (7);
//! without them, two destinations could feed each other a file neither has. This program
//! states instead what any schedule obeys: for every set S of a file's destinations, the bytes
//! of the file entering S from outside reach at least its size (each byte enters S a first
//! time), here as a rate. Every such set is stated for files with at most [`SUBSETS_UP_TO`]
//! destinations; beyond that, only single destinations and the whole set (still a valid bound,
//! a weaker one).
//!
//! Why it is a lower bound: a schedule that ends at `T` moves, averaged over `[0, T]`, flows that
//! meet every constraint above with `MinRate >= 1 / T`. So `T >= 1 / max MinRate`.
//!
//! Bandwidths are the ones given (the testbed's shaped rates; the paper used peak values).
//! Start-up latency, TCP slow start and chunk boundaries are not modelled: they are what a real
//! schedule loses to the bound.

use diffuse_core::bandwidth::Endpoint;
use diffuse_core::staging::Request;
use diffuse_core::ObjectId;
use microlp::{ComparisonOp, OptimizationDirection, Problem, Variable};
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;

/// All subsets of a file's destinations are cut up to this many destinations.
pub const SUBSETS_UP_TO: usize = 8;

/// The platform's bandwidths, bytes/s.
pub trait Network {
    /// What `e` can send, over all its transfers.
    fn out_cap(&self, e: Endpoint) -> f64;
    /// What `e` can take in.
    fn in_cap(&self, e: Endpoint) -> f64;
    /// The path from `a` to `b` (infinite: only the endpoints limit it).
    fn path(&self, a: Endpoint, b: Endpoint) -> f64;
}

/// The bound, seconds, for `requests` given the `copies` that exist (`(object, where)`, each
/// whole). Requests already met by a copy need nothing. None if a request has no source at all
/// (no finite bound) or the solver fails.
pub fn flow_bound(
    requests: &[Request],
    copies: &[(ObjectId, Endpoint)],
    net: &dyn Network,
) -> Option<f64> {
    let mut holders: FxHashMap<ObjectId, BTreeSet<Endpoint>> = FxHashMap::default();
    for (o, e) in copies {
        holders.entry(*o).or_default().insert(*e);
    }
    // Each file's size and destinations still wanting it.
    let mut files: FxHashMap<ObjectId, (u64, BTreeSet<Endpoint>)> = FxHashMap::default();
    for r in requests {
        let dest = Endpoint::Node(r.dest);
        if holders.get(&r.object).is_some_and(|h| h.contains(&dest)) {
            continue;
        }
        let f = files.entry(r.object).or_insert((r.size, BTreeSet::new()));
        f.1.insert(dest);
    }
    if files.is_empty() {
        return Some(0.0);
    }
    // Megabytes, so rates and sizes are of like magnitude for the solver.
    const UNIT: f64 = 1e6;
    let mut lp = Problem::new(OptimizationDirection::Maximize);
    let min_rate = lp.add_var(1.0, (0.0, f64::INFINITY));
    // Flow variables: (from, to, file).
    let mut flows: Vec<(Endpoint, Endpoint, ObjectId, Variable)> = Vec::new();
    let mut order: Vec<ObjectId> = files.keys().copied().collect();
    order.sort();
    for o in &order {
        let (_, dests) = &files[o];
        let sources: BTreeSet<Endpoint> = holders
            .get(o)
            .into_iter()
            .flatten()
            .chain(dests)
            .copied()
            .collect();
        for from in &sources {
            for to in dests {
                if from != to && net.path(*from, *to) > 0.0 {
                    flows.push((*from, *to, *o, lp.add_var(0.0, (0.0, f64::INFINITY))));
                }
            }
        }
    }
    let sum = |pick: &dyn Fn(Endpoint, Endpoint, ObjectId) -> bool| -> Vec<(Variable, f64)> {
        flows
            .iter()
            .filter(|(a, b, o, _)| pick(*a, *b, *o))
            .map(|f| (f.3, 1.0))
            .collect()
    };
    // Every set of a file's destinations takes the file in at MinRate x its size at least.
    for o in &order {
        let (size, dests) = &files[o];
        let dests: Vec<Endpoint> = dests.iter().copied().collect();
        let has_source = holders.get(o).is_some_and(|h| !h.is_empty());
        if !has_source {
            return None;
        }
        for set in cuts(dests.len()) {
            let inside = |e: Endpoint| dests.iter().enumerate().any(|(k, d)| *d == e && set(k));
            let mut terms = sum(&|a, b, f| f == *o && inside(b) && !inside(a));
            terms.push((min_rate, -(*size as f64) / UNIT));
            lp.add_constraint(terms.as_slice(), ComparisonOp::Ge, 0.0);
        }
        // A destination that does not hold the file relays no faster than it receives it.
        for relay in &dests {
            let inflow = sum(&|_, b, f| f == *o && b == *relay);
            for (a, _, f, var) in &flows {
                if f == o && a == relay {
                    let mut terms: Vec<(Variable, f64)> =
                        inflow.iter().map(|(v, _)| (*v, -1.0)).collect();
                    terms.push((*var, 1.0));
                    lp.add_constraint(terms.as_slice(), ComparisonOp::Le, 0.0);
                }
            }
        }
    }
    // Endpoint and path bandwidths.
    let endpoints: BTreeSet<Endpoint> = flows.iter().flat_map(|f| [f.0, f.1]).collect();
    for e in &endpoints {
        let out = sum(&|a, _, _| a == *e);
        if !out.is_empty() && net.out_cap(*e).is_finite() {
            lp.add_constraint(out.as_slice(), ComparisonOp::Le, net.out_cap(*e) / UNIT);
        }
        let into = sum(&|_, b, _| b == *e);
        if !into.is_empty() && net.in_cap(*e).is_finite() {
            lp.add_constraint(into.as_slice(), ComparisonOp::Le, net.in_cap(*e) / UNIT);
        }
    }
    let pairs: BTreeSet<(Endpoint, Endpoint)> = flows.iter().map(|f| (f.0, f.1)).collect();
    for (a, b) in pairs {
        let cap = net.path(a, b);
        if cap.is_finite() {
            let terms = sum(&|x, y, _| x == a && y == b);
            lp.add_constraint(terms.as_slice(), ComparisonOp::Le, cap / UNIT);
        }
    }
    let solved = lp.solve().ok()?;
    let rate = solved.objective();
    (rate > 0.0 && rate.is_finite()).then(|| 1.0 / rate)
}

/// The sets of `n` destinations cut: every non-empty one up to [`SUBSETS_UP_TO`], else each
/// single one and all of them. Each is a membership test on destination indices.
fn cuts(n: usize) -> Vec<Box<dyn Fn(usize) -> bool>> {
    if n <= SUBSETS_UP_TO {
        (1u32..(1 << n))
            .map(|mask| {
                Box::new(move |k: usize| mask & (1 << k) != 0) as Box<dyn Fn(usize) -> bool>
            })
            .collect()
    } else {
        let mut v: Vec<Box<dyn Fn(usize) -> bool>> = (0..n)
            .map(|one| Box::new(move |k: usize| k == one) as Box<dyn Fn(usize) -> bool>)
            .collect();
        v.push(Box::new(|_| true));
        v
    }
}

/// A network of endpoints with their own bandwidths each way and unlimited paths between them
/// (hosts on one switch, as on the shaped testbed).
#[derive(Clone, Debug, Default)]
pub struct Star {
    /// Outbound bandwidth of each endpoint; others get `default`.
    pub out: FxHashMap<Endpoint, f64>,
    /// Inbound bandwidth of each endpoint; others get `default`.
    pub into: FxHashMap<Endpoint, f64>,
    /// For endpoints not listed.
    pub default: f64,
}

impl Network for Star {
    fn out_cap(&self, e: Endpoint) -> f64 {
        self.out.get(&e).copied().unwrap_or(self.default)
    }
    fn in_cap(&self, e: Endpoint) -> f64 {
        self.into.get(&e).copied().unwrap_or(self.default)
    }
    fn path(&self, _: Endpoint, _: Endpoint) -> f64 {
        f64::INFINITY
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diffuse_core::NodeId;

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

    /// Every endpoint at `default` bytes/s each way, except those given.
    fn star(out: &[(Endpoint, f64)], into: &[(Endpoint, f64)], default: f64) -> Star {
        Star {
            out: out.iter().copied().collect(),
            into: into.iter().copied().collect(),
            default,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6 * b.max(1.0)
    }

    #[test]
    fn one_file_from_one_source_takes_its_size_over_the_slower_end() {
        // 100 MB from n1 (10 MB/s out) to n9 (100 MB/s in): 10 s.
        let net = star(&[(n(1), 10e6)], &[], 100e6);
        let b = flow_bound(&[req(1, 100_000_000, 9)], &[(ObjectId(1), n(1))], &net).unwrap();
        assert!(close(b, 10.0), "{b}");
    }

    #[test]
    fn a_file_from_two_sources_is_bounded_by_the_destinations_inbound() {
        // 150 MB held by n1 and n2 (10 MB/s out each) to n9 (15 MB/s in): 10 s, not 7.5.
        let net = star(&[(n(1), 10e6), (n(2), 10e6)], &[(n(9), 15e6)], 100e6);
        let copies = [(ObjectId(1), n(1)), (ObjectId(1), n(2))];
        let b = flow_bound(&[req(1, 150_000_000, 9)], &copies, &net).unwrap();
        assert!(close(b, 10.0), "{b}");
    }

    #[test]
    fn a_destination_relays_so_two_copies_take_the_time_of_one() {
        // 100 MB from n1 (10 MB/s out) to n8 and n9 (fast): n8 relays to n9 as it receives, so
        // 10 s, not 20; and no cycle between n8 and n9 makes it less.
        let net = star(&[(n(1), 10e6)], &[], 1e9);
        let b = flow_bound(
            &[req(1, 100_000_000, 8), req(1, 100_000_000, 9)],
            &[(ObjectId(1), n(1))],
            &net,
        )
        .unwrap();
        assert!(close(b, 10.0), "{b}");
    }

    #[test]
    fn destinations_share_the_sources_outbound() {
        // Two files of 50 MB, each from its own copy on n1 (10 MB/s out), to n8 and n9 each;
        // relaying lets each byte leave n1 once: 100 MB / 10 MB/s = 10 s.
        let net = star(&[(n(1), 10e6)], &[], 1e9);
        let reqs = [
            req(1, 50_000_000, 8),
            req(1, 50_000_000, 9),
            req(2, 50_000_000, 8),
            req(2, 50_000_000, 9),
        ];
        let copies = [(ObjectId(1), n(1)), (ObjectId(2), n(1))];
        let b = flow_bound(&reqs, &copies, &net).unwrap();
        assert!(close(b, 10.0), "{b}");
        // Without a relay (n8, n9 send nothing), 20 s.
        let mute = star(&[(n(1), 10e6), (n(8), 0.0), (n(9), 0.0)], &[], 1e9);
        let b = flow_bound(&reqs, &copies, &mute).unwrap();
        assert!(close(b, 20.0), "{b}");
    }

    #[test]
    fn a_request_already_met_needs_nothing_and_one_without_a_source_has_no_bound() {
        let net = star(&[], &[], 1e6);
        assert_eq!(
            flow_bound(&[req(1, 10, 9)], &[(ObjectId(1), n(9))], &net),
            Some(0.0)
        );
        assert_eq!(flow_bound(&[req(1, 10, 9)], &[], &net), None);
    }
}
