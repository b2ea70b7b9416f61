//! Placement hints in the core: a hard hint runs only on its node and ends clearly if that node
//! leaves for good; a soft hint waits its stated bound for its node and then runs anywhere; a
//! node takes the tasks hinted at it before its policy chooses.

mod support;

use diffuse_core::{
    Abandoned, Action, NodeId, NodeName, Outcome, Placement, PolicyKind, TaskId, TaskSpec,
    TaskState,
};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;
use support::*;

fn hard(task: TaskSpec, name: u32) -> TaskSpec {
    task.with_hint(Placement {
        node: NodeName(name),
        strict: true,
        wait: Duration::ZERO,
    })
}

fn soft(task: TaskSpec, name: u32, wait_s: u64) -> TaskSpec {
    task.with_hint(Placement {
        node: NodeName(name),
        strict: false,
        wait: Duration::from_secs(wait_s),
    })
}

/// A node `id` with `slots` slots, named `NodeName(id)`.
fn named(env: &mut TestEnv, id: u32, slots: u32) {
    env.node(id, slots);
    env.core.handle_node_named(n(id), NodeName(id)).unwrap();
    env.check();
}

fn abandoned(actions: &[Action]) -> BTreeMap<u64, Abandoned> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Abandon { task, why } => Some((task.0, why.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_hard_hint_waits_for_its_node_however_long_while_others_are_free() {
    let mut env = TestEnv::new(PolicyKind::Fa);
    named(&mut env, 1, 1);
    env.task(9, &[]);
    assert_eq!(env.take_one().node, n(1), "node 1 is busy with t9");
    named(&mut env, 0, 1);
    env.submit(hard(spec(1, &[]), 1));
    assert!(
        env.take_dispatches().is_empty(),
        "node 0 is free but not named 1"
    );
    env.advance(3600);
    assert!(env.take_dispatches().is_empty(), "a hard hint never lapses");
    env.finish(9);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(1), n(1)));
    assert_eq!(env.core.hint_held(t(1), n(1)), Some(true));
}

#[test]
fn a_node_takes_the_tasks_hinted_at_it_before_the_queue_head() {
    let mut env = TestEnv::new(PolicyKind::Fa);
    named(&mut env, 0, 1);
    env.task(9, &[]);
    env.take_one();
    env.task(1, &[])
        .task(2, &[])
        .submit(soft(spec(3, &[]), 0, 5));
    env.finish(9);
    assert_eq!(
        env.take_one().task,
        t(3),
        "t3 is hinted at node 0: it goes first"
    );
}

#[test]
fn a_soft_hint_waits_its_bound_then_runs_anywhere() {
    let mut env = TestEnv::new(PolicyKind::Fa);
    named(&mut env, 1, 1);
    env.task(9, &[]);
    env.take_one();
    named(&mut env, 0, 1);
    env.submit(soft(spec(1, &[]), 1, 2));
    assert!(
        env.take_dispatches().is_empty(),
        "within its wait, only node 1 may take it"
    );
    assert_eq!(
        env.core.poll_timeout(),
        Some(env.now + Duration::from_secs(2)),
        "the driver is asked to come back when the hint lapses"
    );
    env.advance(1);
    assert!(env.take_dispatches().is_empty());
    env.advance(1);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(1), n(0)), "lapsed: any free node");
    assert_eq!(env.core.hint_held(t(1), n(0)), Some(false));
    assert_eq!(env.core.poll_timeout(), None, "nothing left to wake up for");
}

#[test]
fn a_soft_hint_whose_node_frees_in_time_holds() {
    let mut env = TestEnv::new(PolicyKind::Fa);
    named(&mut env, 1, 1);
    env.task(9, &[]);
    env.take_one();
    named(&mut env, 0, 1);
    env.submit(soft(spec(1, &[]), 1, 2));
    assert!(env.take_dispatches().is_empty());
    env.advance(1);
    env.finish(9);
    assert_eq!(env.take_one().node, n(1));
    assert_eq!(env.core.hint_held(t(1), n(1)), Some(true));
}

#[test]
fn hard_hinted_tasks_end_when_the_last_node_of_their_name_leaves() {
    let mut env = TestEnv::new(PolicyKind::Fa);
    named(&mut env, 0, 1);
    named(&mut env, 1, 1);
    env.submit(hard(spec(1, &[]), 1))
        .submit(hard(spec(2, &[]), 1));
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(1), n(1)));
    // A second node of the same name keeps the name alive; then both go.
    named(&mut env, 5, 1);
    env.core.handle_node_named(n(5), NodeName(1)).unwrap();
    assert_eq!(env.take_one().task, t(2), "node 5 carries name 1 too");
    env.core.handle_node_left(n(5), env.now).unwrap();
    env.check();
    assert!(
        abandoned(&env.take_actions()).is_empty(),
        "node 1 still carries the name"
    );
    env.core.handle_node_lost(n(1), env.now).unwrap();
    env.check();
    let gone = abandoned(&env.take_actions());
    assert_eq!(
        gone.len(),
        2,
        "t1 ran on node 1 and t2 was requeued: {gone:?}"
    );
    for task in [1, 2] {
        assert_eq!(gone[&task], Abandoned::HintedNodeLeft { node: NodeName(1) });
        assert_eq!(env.state(task), None, "t{task} has left the core");
    }
    // Later tasks hard-hinted at the departed name end at once; a soft one runs elsewhere.
    env.submit(hard(spec(3, &[]), 1))
        .submit(soft(spec(4, &[]), 1, 0));
    let actions = env.take_actions();
    assert_eq!(
        abandoned(&actions).keys().copied().collect::<Vec<_>>(),
        vec![3]
    );
    assert!(actions
        .iter()
        .any(|a| matches!(a, Action::Dispatch(d) if d.task == t(4) && d.node == n(0))));
    // The name comes back: hard hints at it wait for it again.
    named(&mut env, 1, 1);
    env.finish(4);
    env.submit(hard(spec(6, &[]), 1));
    assert_eq!(env.take_one().node, n(1));
    assert_eq!(env.counts().failed, 3);
}

#[test]
fn a_hint_outranks_avoiding_the_node_a_retry_failed_on() {
    let mut env = TestEnv::new(PolicyKind::Fa);
    named(&mut env, 0, 1);
    named(&mut env, 1, 1);
    env.submit(hard(spec(1, &[]), 1).with_retries(1));
    env.take_one();
    env.finish_with(1, Outcome::Retryable("exit 1".into()));
    let d = env.take_one();
    assert_eq!(
        (d.task, d.node),
        (t(1), n(1)),
        "hard: its node, though it failed there"
    );
}

#[test]
fn a_hint_set_before_a_task_runs_places_it() {
    let mut env = TestEnv::new(PolicyKind::Fa);
    named(&mut env, 0, 1);
    env.task(9, &[]);
    env.take_one();
    env.task(1, &[]);
    assert!(env.take_dispatches().is_empty(), "node 0 is busy");
    named(&mut env, 1, 1);
    let placed = env
        .core
        .handle_hint(t(1), hard(spec(1, &[]), 0).hint.unwrap(), env.now)
        .unwrap();
    assert!(placed, "t1 is queued: its hint can change");
    env.check();
    assert!(
        env.take_dispatches().is_empty(),
        "node 1 is free, but t1 must run on 0"
    );
    env.finish(9);
    assert_eq!(env.take_one().node, n(0));
    let again = env
        .core
        .handle_hint(t(1), hard(spec(1, &[]), 1).hint.unwrap(), env.now);
    assert_eq!(again, Ok(false), "t1 runs: too late");
}

#[derive(Clone, Debug)]
enum Ev {
    Submit { strict: bool, name: u32, wait: u64 },
    Finish(usize),
    Lose(usize),
    Join(u32),
    Advance(u64),
}

fn ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        3 => (any::<bool>(), 0..3u32, 0..4u64).prop_map(|(strict, name, wait)| Ev::Submit { strict, name, wait }),
        3 => (0..8usize).prop_map(Ev::Finish),
        1 => (0..4usize).prop_map(Ev::Lose),
        1 => (0..3u32).prop_map(Ev::Join),
        2 => (0..3u64).prop_map(Ev::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Under any sequence of submissions, finishes, lost and joining nodes and time: a hard-hinted
    /// task runs only on a node of its name, a soft-hinted one runs elsewhere only once its wait
    /// has passed, every task ends exactly once, and nothing is left once the nodes stay.
    #[test]
    fn hints_bind_as_stated_and_every_task_ends_once(events in prop::collection::vec(ev(), 0..50)) {
        let mut env = TestEnv::new(PolicyKind::Gcc);
        let mut names: BTreeMap<u32, u32> = BTreeMap::new(); // node -> name
        let mut hints: BTreeMap<u64, (bool, u32, u64)> = BTreeMap::new();
        let mut queued_at: BTreeMap<u64, diffuse_core::Time> = BTreeMap::new();
        let mut ended: BTreeMap<u64, u32> = BTreeMap::new();
        let mut running: Vec<u64> = Vec::new();
        let mut next_node = 0u32;
        let mut next_task = 0u64;
        let join = |env: &mut TestEnv, names: &mut BTreeMap<u32, u32>, next: &mut u32, name: u32| {
            named(env, *next, 1);
            env.core.handle_node_named(n(*next), NodeName(name)).unwrap();
            names.insert(*next, name);
            *next += 1;
        };
        for name in 0..3 {
            join(&mut env, &mut names, &mut next_node, name);
        }
        let step = |env: &mut TestEnv, running: &mut Vec<u64>, ended: &mut BTreeMap<u64, u32>,
                    names: &BTreeMap<u32, u32>, hints: &BTreeMap<u64, (bool, u32, u64)>,
                    queued_at: &mut BTreeMap<u64, diffuse_core::Time>| -> Result<(), TestCaseError> {
            for a in env.take_actions() {
                match a {
                    Action::Dispatch(d) => {
                        let (strict, name, wait) = hints[&d.task.0];
                        let here = names[&d.node.0];
                        if strict {
                            prop_assert_eq!(here, name, "hard-hinted {} ran off its node", d.task);
                        } else if here != name {
                            let since = queued_at[&d.task.0];
                            prop_assert!(env.now >= since + Duration::from_secs(wait),
                                "soft-hinted {} ran elsewhere within its wait", d.task);
                        }
                        running.push(d.task.0);
                    }
                    Action::Abandon { task, why } => {
                        prop_assert!(matches!(why, Abandoned::HintedNodeLeft { .. }), "{:?}", why);
                        *ended.entry(task.0).or_default() += 1;
                    }
                    _ => {}
                }
            }
            Ok(())
        };
        for e in events {
            match e {
                Ev::Submit { strict, name, wait } => {
                    let id = next_task;
                    next_task += 1;
                    hints.insert(id, (strict, name, wait));
                    queued_at.insert(id, env.now);
                    let s = spec(id, &[]).with_retries(0);
                    env.submit(if strict { hard(s, name) } else { soft(s, name, wait) });
                }
                Ev::Finish(i) if !running.is_empty() => {
                    let task = running.remove(i % running.len());
                    let st = env.finish(task);
                    prop_assert!(st.is_terminal());
                    *ended.entry(task).or_default() += 1;
                }
                Ev::Lose(i) if !names.is_empty() => {
                    let node = *names.keys().nth(i % names.len()).unwrap();
                    names.remove(&node);
                    let was_running: Vec<TaskId> = env.core.running_on(NodeId(node)).to_vec();
                    let lost = env.core.handle_node_lost(NodeId(node), env.now).unwrap();
                    env.check();
                    for task in lost.failed.iter().chain(&lost.cancelled) {
                        *ended.entry(task.0).or_default() += 1;
                    }
                    running.retain(|t| env.core.task_state(TaskId(*t)).is_some_and(|s| matches!(s, TaskState::Running { .. })));
                    // A requeued task's soft wait starts again.
                    for t in was_running {
                        if matches!(env.core.task_state(t), Some(TaskState::Queued)) {
                            queued_at.insert(t.0, env.now);
                        }
                    }
                }
                Ev::Join(name) => join(&mut env, &mut names, &mut next_node, name),
                Ev::Advance(s) => { env.advance(s); }
                _ => {}
            }
            step(&mut env, &mut running, &mut ended, &names, &hints, &mut queued_at)?;
        }
        // Every name back, time passes, every run succeeds: nothing is left.
        for name in 0..3 {
            join(&mut env, &mut names, &mut next_node, name);
        }
        for _ in 0..200 {
            env.advance(5);
            step(&mut env, &mut running, &mut ended, &names, &hints, &mut queued_at)?;
            let Some(task) = running.pop() else { break };
            env.finish(task);
            *ended.entry(task).or_default() += 1;
        }
        for id in 0..next_task {
            prop_assert_eq!(ended.get(&id).copied(), Some(1), "t{} ended {:?} times", id, ended.get(&id));
        }
    }
}
