//! DAD (dad-data-aware-dispatch-gfarm-torque.txt) on hand-built states: the paper's AAAABBBB
//! example, the bounded delay, no waiting when nothing would be local, and beta weighing file
//! locality against load.

mod support;

use diffuse_core::{CoreConfig, DadConfig, PolicyKind, Source};
use std::collections::BTreeMap;
use support::*;

fn dad(beta: f64, local_threshold: f64, delay: u32) -> TestEnv {
    TestEnv::with_config(CoreConfig {
        policy: PolicyKind::Dad,
        dad: DadConfig {
            beta,
            local_threshold,
            delay,
            ..DadConfig::default()
        },
        ..CoreConfig::default()
    })
}

/// Nodes 1 and 2 hold file A (object 10), nodes 3 and 4 file B (object 20), one slot each;
/// tasks 1-4 read A, tasks 5-8 read B, queued in the order AAAABBBB (Fig. 4 of the paper).
fn aaaabbbb(env: &mut TestEnv) {
    for (node, file) in [(1, 10), (2, 10), (3, 20), (4, 20)] {
        env.node(node, 1).cached(node, file);
    }
    for t in 1..=4 {
        env.task(t, &[(10, 1000)]);
    }
    for t in 5..=8 {
        env.task(t, &[(20, 1000)]);
    }
}

/// Where each task ran and whether it read locally.
type Runs = BTreeMap<u64, (u32, bool)>;

fn record(ran: &mut Runs, running: &mut Vec<u64>, ds: Vec<diffuse_core::Dispatch>) {
    for d in ds {
        let local = d.inputs.iter().all(|(_, s)| *s == Source::Local);
        ran.insert(d.task.0, (d.node.0, local));
        running.push(d.task.0);
    }
}

#[test]
fn aaaabbbb_with_a_delay_runs_every_task_local() {
    let mut env = dad(0.8, 0.5, 2);
    aaaabbbb(&mut env);
    let (mut ran, mut running) = (Runs::new(), Vec::new());
    record(&mut ran, &mut running, env.take_dispatches());
    // Round 1: two As on the A nodes, the third and fourth A wait, two Bs on the B nodes.
    assert_eq!(running, vec![1, 2, 5, 6], "{ran:?}");
    // Then one task ends per second (a new round each time), the oldest first.
    while !running.is_empty() {
        let t = running.remove(0);
        env.advance(1);
        env.finish(t);
        record(&mut ran, &mut running, env.take_dispatches());
    }
    assert_eq!(ran.len(), 8);
    for (t, (node, local)) in &ran {
        assert!(local, "t{t} read remotely on n{node}: {ran:?}");
    }
}

#[test]
fn aaaabbbb_without_delay_sends_half_the_as_away() {
    let mut env = dad(0.8, 0.5, 0);
    aaaabbbb(&mut env);
    let first: BTreeMap<u64, (u32, bool)> = env
        .take_dispatches()
        .iter()
        .map(|d| {
            let local = d.inputs.iter().all(|(_, s)| *s == Source::Local);
            (d.task.0, (d.node.0, local))
        })
        .collect();
    assert_eq!(first.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    let remote = first.values().filter(|(_, local)| !local).count();
    assert_eq!(
        remote, 2,
        "the third and fourth A run on the B nodes: {first:?}"
    );
}

#[test]
fn a_task_whose_data_is_nowhere_never_waits() {
    let mut env = dad(0.8, 0.5, 5);
    env.node(1, 1).node(2, 1).cached(1, 10);
    env.task(9, &[(10, 5)]);
    assert_eq!(env.take_one().node, n(1));
    // Node 1 is busy; o30 is on no node: no node would be local, so no delay.
    env.task(1, &[(30, 5)]);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(1), n(2)));
}

#[test]
fn the_delay_is_bounded_in_rounds() {
    let mut env = dad(0.8, 0.5, 2);
    env.node(1, 1).cached(1, 10);
    env.task(9, &[(10, 5)]);
    env.take_one();
    env.node(2, 1);
    env.task(1, &[(10, 5)]);
    // Node 1, which holds o10, stays busy: t1 waits two rounds, then runs remotely on node 2.
    assert!(env.take_dispatches().is_empty(), "round 1: delayed");
    env.advance(1);
    env.node(3, 1);
    assert!(env.take_dispatches().is_empty(), "round 2: delayed");
    env.advance(1);
    env.node(4, 1);
    let d = env.take_one();
    assert_eq!(d.task, t(1));
    assert_ne!(source(&d, 10), Source::Local);
}

#[test]
fn beta_weighs_file_locality_against_load() {
    // Node 1 (2 slots, one busy) holds o10; node 2 is idle and holds nothing.
    let place = |env: &mut TestEnv| {
        env.node(1, 2).cached(1, 10);
        env.task(9, &[(10, 5)]);
        env.take_one();
        env.node(2, 1);
        env.task(1, &[(10, 5)]);
        env.take_one().node
    };
    // beta 0.8: node 1 scores 0 * 0.8 + 0.5 * 0.2 = 0.1, local.
    assert_eq!(place(&mut dad(0.8, 0.5, 2)), n(1));
    // beta 0.2: node 1 scores 0.4, node 2 0.2: the idle node wins, though remote.
    assert_eq!(place(&mut dad(0.2, 0.1, 2)), n(2));
}

#[test]
fn a_task_may_state_its_own_beta() {
    // As in the test above, node 1 (one of two slots busy) holds o10, node 2 is idle. Under
    // beta 0.8 a task stating beta 0 goes by load alone: to node 2.
    let mut env = dad(0.8, 0.5, 2);
    env.node(1, 2).cached(1, 10);
    env.task(9, &[(10, 5)]);
    env.take_one();
    env.node(2, 1);
    env.submit(spec(1, &[(10, 5)]).with_dad_beta(Some(0.0)));
    assert_eq!(env.take_one().node, n(2));
}

#[test]
fn a_load_the_driver_measures_replaces_busy_slots() {
    let mut env = dad(0.8, 0.5, 2);
    env.node(1, 1).node(2, 1);
    env.task(1, &[(30, 5)]);
    assert_eq!(env.take_one().node, n(1), "both idle: the lowest id");
    env.finish(1);
    // Node 1's machine is loaded by something else (its load average says so).
    env.core.handle_node_load(n(1), 0.9);
    env.task(2, &[(31, 5)]);
    assert_eq!(env.take_one().node, n(2));
}

#[test]
fn a_threshold_above_beta_is_refused() {
    let c = DadConfig {
        beta: 0.3,
        local_threshold: 0.5,
        delay: 1,
        ..DadConfig::default()
    };
    assert!(c.check().unwrap_err().contains("local threshold 0.5"));
}
