//! Tasks held ready on a node beyond its cores (`CoreConfig::ready_tasks`, Falkon's pre-fetched
//! tasks): the next task waits on the node while one runs, so a slot never waits for the
//! driver's round trip. Free cores are offered first; a ready slot holds a one-core task and
//! nothing else; its task is cancelled, retried and given back like any other. A node holds a
//! task ready only behind a task of a job seen to be short (`ready_below_s`): never behind a
//! long one, where it could wait while another node idles at the end of a run.

mod support;

use diffuse_core::{CoreConfig, Outcome, PolicyKind, Resources, TaskState};
use support::*;

/// Nodes hold `ready` tasks ready whatever they run (the rules of the slots themselves).
fn env(policy: PolicyKind, ready: u32) -> TestEnv {
    TestEnv::with_config(CoreConfig {
        ready_tasks: ready,
        ready_below_s: f64::INFINITY,
        ..config(policy)
    })
}

/// One ready slot per node, held only behind tasks of jobs whose attempts end within 1 s.
fn bounded() -> TestEnv {
    TestEnv::with_config(CoreConfig {
        ready_tasks: 1,
        ready_below_s: 1.0,
        ..config(PolicyKind::Fa)
    })
}

#[test]
fn a_task_is_held_ready_only_once_its_job_is_seen_to_be_short() {
    let mut env = bounded();
    env.node(0, 1);
    for i in 1..=4 {
        env.task(i, &[]);
    }
    // Nothing known of the job yet: its tasks count as long, no ready slot.
    assert_eq!(env.take_dispatches().len(), 1);
    env.advance_ms(10);
    env.finish(1);
    // Its first attempt took 10 ms: the next runs, and one waits ready behind it.
    let d = env.take_dispatches();
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!(env.counts().queued, 1);
}

#[test]
fn no_task_is_held_ready_behind_a_long_one() {
    let mut env = bounded();
    env.node(0, 1).node(1, 1);
    for i in 1..=6 {
        env.task(i, &[]);
    }
    assert_eq!(env.take_dispatches().len(), 2);
    // Task 1 took 5 s: its job is long, so neither node holds a task ready behind the next two.
    env.advance(5);
    env.finish(1);
    env.finish(2);
    let d = env.take_dispatches();
    assert_eq!(d.len(), 2, "one per free core, none ready: {d:?}");
    assert_eq!(env.counts().queued, 2);
    // Later tasks of the job run as cores free, still none held ready.
    env.advance(5);
    env.finish(3);
    let d = env.take_dispatches();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(env.counts().queued, 1);
}

#[test]
fn a_node_holds_one_task_ready_beyond_its_cores_and_the_slot_counts_stay_its_cores() {
    let mut env = env(PolicyKind::Fa, 1);
    env.node(0, 2);
    for i in 1..=4 {
        env.task(i, &[]);
    }
    let d = env.take_dispatches();
    assert_eq!(d.len(), 3, "two cores and one ready slot: {d:?}");
    let c = env.counts();
    assert_eq!((c.slots, c.busy_slots, c.running, c.queued), (2, 2, 3, 1));
    // A task ends: the ready one takes its core on the node, and the queue refills the ready
    // slot at once.
    env.finish(1);
    let d = env.take_dispatches();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(env.counts().queued, 0);
}

#[test]
fn free_cores_anywhere_are_offered_before_a_ready_slot() {
    let mut env = env(PolicyKind::Fa, 1);
    env.node(0, 1);
    env.task(1, &[]);
    assert_eq!(env.take_one().node, n(0));
    // Node 0 is full; node 1 joins with a free core: the next task goes there, not into 0's
    // ready slot, although node 0 comes first in the pass.
    env.node(1, 1);
    env.task(2, &[]);
    assert_eq!(env.take_one().node, n(1));
    // Now every core is busy: the ready slots take the next two.
    env.task(3, &[]).task(4, &[]);
    let mut nodes: Vec<_> = env.take_dispatches().iter().map(|d| d.node).collect();
    nodes.sort();
    assert_eq!(nodes, vec![n(0), n(1)]);
    env.task(5, &[]);
    assert!(env.take_dispatches().is_empty(), "no room left");
}

#[test]
fn a_ready_slot_takes_only_a_one_core_task() {
    let mut env = env(PolicyKind::Fa, 1);
    env.node_with(
        0,
        Resources {
            cores: 2,
            memory: 1 << 30,
            gpus: 0,
            disk: 0,
        },
    );
    env.task(1, &[]).task(2, &[]);
    assert_eq!(env.take_dispatches().len(), 2);
    // Two cores, or one core with memory, wait in the queue for a free core.
    env.submit(spec(3, &[]).with_resources(Resources::cores_only(2)));
    env.submit(spec(4, &[]).with_resources(Resources {
        cores: 1,
        memory: 1 << 20,
        gpus: 0,
        disk: 0,
    }));
    assert!(env.take_dispatches().is_empty());
    env.task(5, &[]);
    assert_eq!(env.take_one().task, t(5));
    assert_eq!(env.counts().queued, 2);
}

#[test]
fn a_ready_task_is_cancelled_retried_and_given_back_like_a_running_one() {
    let mut env = env(PolicyKind::Fa, 1);
    env.node(0, 1).node(1, 1);
    for i in 1..=4 {
        env.submit(spec(i, &[]).with_retries(1));
    }
    let d = env.take_dispatches();
    assert_eq!(d.len(), 4, "{d:?}");
    let ready_on_0 = d.iter().filter(|d| d.node == n(0)).nth(1).unwrap().task;
    // Cancelled while ready: it ends when the node reports it stopped, as a running task does.
    assert_eq!(env.cancel(ready_on_0.0), None);
    assert_eq!(
        env.finish_with(ready_on_0.0, Outcome::Failed("cancelled".into())),
        TaskState::Cancelled
    );
    // A retryable failure of a ready task queues it again, to run elsewhere.
    let on_1: Vec<_> = d
        .iter()
        .filter(|d| d.node == n(1))
        .map(|d| d.task)
        .collect();
    let state = env.finish_with(on_1[1].0, Outcome::Retryable("spawn failed".into()));
    assert_eq!(state, TaskState::Queued);
    // Node 1 is lost with its running and ready tasks: both are queued again and fenced (a
    // late report of the old attempt is refused).
    let old = env.attempt(on_1[0].0);
    let failed = env.lose(1);
    assert!(failed.is_empty(), "{failed:?}");
    assert!(matches!(
        env.state(on_1[0].0),
        Some(TaskState::Queued | TaskState::Running { .. })
    ));
    assert!(
        env.report(on_1[0].0, old).is_err(),
        "a late report of the lost attempt"
    );
    env.check();
}

#[test]
fn a_ready_task_stranded_behind_a_long_one_is_taken_back_for_a_free_core() {
    let mut env = env(PolicyKind::Fa, 1);
    env.node(0, 1).node(1, 1);
    for i in 1..=3 {
        env.task(i, &[]);
    }
    let d = env.take_dispatches();
    assert_eq!(d.len(), 3, "two cores and a ready slot: {d:?}");
    let ready = d[2].clone();
    let other = if ready.node == n(0) { 1 } else { 0 };
    let running_there = d.iter().find(|x| x.node == n(other)).unwrap().task;
    // The other node's task ends, and nothing is queued: the ready task is asked back.
    env.finish(running_there.0);
    let actions = env.take_actions();
    assert!(
        actions.iter().any(|a| matches!(a, diffuse_core::Action::Withdraw { task, node, .. } if *task == ready.task && *node == ready.node)),
        "{actions:?}"
    );
    // Once only, however often the core is asked.
    env.timeout();
    assert!(!env
        .take_actions()
        .iter()
        .any(|a| matches!(a, diffuse_core::Action::Withdraw { .. })));
    // Given back unstarted: queued again with no retry spent, and sent to the free core.
    assert_eq!(
        env.finish_with(ready.task.0, Outcome::Withdrawn),
        TaskState::Queued
    );
    let again = env.take_one();
    assert_eq!((again.task, again.node), (ready.task, n(other)));
    assert_eq!(again.attempt, ready.attempt + 1, "a new attempt, fenced");
    env.check();
}

#[test]
fn a_lost_node_counts_the_crash_against_its_running_task_not_the_one_held_ready() {
    let mut env = TestEnv::with_config(CoreConfig {
        ready_tasks: 1,
        ready_below_s: f64::INFINITY,
        crash_limit: 1,
        ..config(PolicyKind::Fa)
    });
    env.node(0, 1);
    env.task(1, &[]);
    env.advance(1);
    env.task(2, &[]);
    assert_eq!(
        env.take_dispatches().len(),
        2,
        "one running, one held ready"
    );
    // The node dies (its running task killed it): that task reaches the crash limit; the one
    // held ready had not started, and runs again.
    let failed = env.lose(0);
    assert_eq!(failed, vec![t(1)]);
    assert_eq!(env.state(2), Some(TaskState::Queued));
    env.check();
}

#[test]
fn once_its_node_says_it_started_a_held_task_counts_the_crash_and_is_not_asked_back() {
    let mut env = TestEnv::with_config(CoreConfig {
        ready_tasks: 1,
        ready_below_s: f64::INFINITY,
        crash_limit: 1,
        ..config(PolicyKind::Fa)
    });
    env.node(0, 1);
    env.task(1, &[]).task(2, &[]);
    let d = env.take_dispatches();
    assert_eq!((d[0].held, d[1].held), (false, true));
    // Task 1 ended on the node (its report not in yet) and task 2 started: it counts.
    env.core.handle_task_started(t(2), d[1].attempt);
    let mut failed = env.lose(0);
    failed.sort();
    assert_eq!(failed, vec![t(1), t(2)]);
    env.check();
}
