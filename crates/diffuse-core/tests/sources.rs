//! Source choice on hand-built states: a reader takes the holder whose read the bandwidth
//! predictor expects to end first, and the other holders come fastest first.

mod support;

use diffuse_core::bandwidth::Endpoint;
use diffuse_core::{PolicyKind, Source};
use support::*;

/// A and B hold o5 and are busy; C, free, runs the reader.
fn reader_on_c() -> TestEnv {
    let mut env = TestEnv::new(PolicyKind::Gcc);
    env.node(0, 1).node(1, 1);
    env.task(1, &[]).task(2, &[]);
    assert_eq!(env.take_dispatches().len(), 2, "A and B are busy");
    env.node(2, 1);
    env.cached(0, 5).cached(1, 5);
    env
}

#[test]
fn with_nothing_measured_the_reader_takes_the_least_busy_holder() {
    let mut env = reader_on_c();
    env.task(3, &[(5, 100)]);
    let d = env.take_one();
    assert_eq!(d.node, n(2));
    assert_eq!(source(&d, 5), Source::Peer(n(0)), "a tie: the lower id");
}

#[test]
fn the_reader_takes_the_holder_predicted_fastest_to_it() {
    let mut env = reader_on_c();
    // B sent to C at 100 MB/s, A at 10 MB/s.
    env.core
        .handle_transfer(Endpoint::Node(n(1)), n(2), 100_000_000, 1.0);
    env.core
        .handle_transfer(Endpoint::Node(n(0)), n(2), 10_000_000, 1.0);
    env.task(3, &[(5, 100)]);
    let d = env.take_one();
    assert_eq!(source(&d, 5), Source::Peer(n(1)));
    assert_eq!(
        env.core.holders_by_rate(o(5), n(2), &[n(2)]),
        vec![n(1), n(0)],
        "the other sources of a chunked read, fastest first"
    );
    assert_eq!(env.core.predicted_rate(Endpoint::Node(n(0)), n(2)), 10e6);
    // A pair never measured is predicted at the default, above A's measured 10 MB/s.
    assert!(env.core.predicted_rate(Endpoint::Node(n(0)), n(1)) > 10e6);
}
