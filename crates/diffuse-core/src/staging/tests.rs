//! The stager's unit tests (moved from staging.rs).

use super::*;
use crate::bandwidth::{BandwidthConfig, Endpoint, Predictor};
use crate::ids::{NodeId, ObjectId};

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
