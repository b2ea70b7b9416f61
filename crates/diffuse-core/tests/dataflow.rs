//! Dataflow in the core: tasks that wait for their producers, intermediate objects read from the
//! nodes that hold them, failures that travel down the graph, producers run again when the only
//! copy of what they wrote is lost, and objects released when nobody needs them.

mod support;

use diffuse_core::{
    Abandoned, Action, CoreError, Outcome, PolicyKind, Source, TaskId, TaskSpec, TaskState,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use support::*;

/// A task writing the intermediate objects `produces` and reading `inputs` (size 1 each).
fn step(id: u64, inputs: &[u64], produces: &[u64]) -> TaskSpec {
    let inputs: Vec<(u64, u64)> = inputs.iter().map(|&i| (i, 1)).collect();
    spec(id, &inputs).with_produces(produces.iter().map(|&p| o(p)).collect())
}

/// Split (t1 writes o10, o11), map (t2: o10 -> o20, t3: o11 -> o21), reduce (t4 reads both).
fn pipeline(env: &mut TestEnv) {
    env.submit(step(1, &[], &[10, 11]))
        .submit(step(2, &[10], &[20]))
        .submit(step(3, &[11], &[21]))
        .submit(step(4, &[20, 21], &[]));
}

fn drops(actions: &[Action]) -> BTreeSet<u64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::DropObject { object, .. } => Some(object.0),
            _ => None,
        })
        .collect()
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

/// Run `task` (dispatched now) to success on its node, which reports what it writes first.
fn produce(env: &mut TestEnv, d: &diffuse_core::Dispatch, writes: &[u64]) -> TaskState {
    for w in writes {
        env.cached(d.node.0, *w);
    }
    env.finish(d.task.0)
}

#[test]
fn consumers_wait_for_producers_and_read_from_their_nodes() {
    let mut env = TestEnv::new(PolicyKind::Gcc);
    env.node(0, 1).node(1, 1);
    pipeline(&mut env);
    assert_eq!(env.counts().blocked, 3);
    let split = env.take_one();
    assert_eq!(split.task, t(1));
    assert_eq!(env.state(2), Some(TaskState::Blocked));
    assert_eq!(
        produce(&mut env, &split, &[10, 11]),
        TaskState::Finished(Outcome::Succeeded)
    );
    let maps = env.take_dispatches();
    assert_eq!(maps.len(), 2, "both maps run once the split succeeded");
    for d in &maps {
        let (_, src) = d.inputs[0];
        assert_ne!(
            src,
            Source::Storage,
            "an intermediate is never read from storage"
        );
        if d.node == split.node {
            assert_eq!(src, Source::Local);
        } else {
            assert_eq!(src, Source::Peer(split.node));
        }
    }
    assert_eq!(env.state(4), Some(TaskState::Blocked));
    let by_task: BTreeMap<u64, _> = maps.iter().map(|d| (d.task.0, d.clone())).collect();
    produce(&mut env, &by_task[&2], &[20]);
    assert!(
        env.take_dispatches().is_empty(),
        "the reduce waits for both maps"
    );
    // o10 has been read and its only reader ended: it is released.
    assert_eq!(drops(&env.take_actions()), BTreeSet::from([10]));
    produce(&mut env, &by_task[&3], &[21]);
    let reduce = env.take_one();
    assert_eq!(reduce.task, t(4));
    assert_eq!(drops(&env.take_actions()), BTreeSet::from([11]));
    env.finish(4);
    assert_eq!(drops(&env.take_actions()), BTreeSet::from([20, 21]));
    let c = env.counts();
    assert_eq!((c.succeeded, c.blocked, c.queued, c.running), (4, 0, 0, 0));
    assert!(env.core.index().holders(o(20)).is_empty());
}

#[test]
fn a_failed_producer_abandons_everything_downstream() {
    let mut env = TestEnv::new(PolicyKind::Gcc);
    env.node(0, 2);
    pipeline(&mut env);
    env.submit(spec(5, &[]).with_after(vec![t(4)]));
    let split = env.take_one();
    assert_eq!(
        env.finish_with(split.task.0, Outcome::Failed("exit code 2".into())),
        TaskState::Finished(Outcome::Failed("exit code 2".into()))
    );
    let gone = abandoned(&env.take_actions());
    assert_eq!(
        gone[&2],
        Abandoned::DependencyFailed {
            task: t(1),
            object: Some(o(10))
        }
    );
    assert_eq!(
        gone[&4],
        Abandoned::DependencyFailed {
            task: t(2),
            object: Some(o(20))
        }
    );
    assert_eq!(
        gone[&5],
        Abandoned::DependencyFailed {
            task: t(4),
            object: None
        }
    );
    assert_eq!(gone.len(), 4);
    let c = env.counts();
    assert_eq!((c.failed, c.blocked, c.queued), (5, 0, 0));
}

#[test]
fn cancelling_a_producer_abandons_its_consumers() {
    let mut env = TestEnv::new(PolicyKind::Gcc);
    pipeline(&mut env);
    assert_eq!(env.cancel(1), Some(TaskState::Cancelled));
    assert_eq!(abandoned(&env.take_actions()).len(), 3);
    let c = env.counts();
    assert_eq!((c.cancelled, c.failed, c.blocked), (1, 3, 0));
}

#[test]
fn explicit_after_orders_tasks_without_data() {
    let mut env = TestEnv::new(PolicyKind::Fa);
    env.node(0, 4);
    env.submit(spec(1, &[]))
        .submit(spec(2, &[]).with_after(vec![t(1)]));
    assert_eq!(env.take_one().task, t(1));
    env.finish(1);
    assert_eq!(env.take_one().task, t(2));
    // Retries do not release dependents early.
    env.submit(spec(3, &[]).with_retries(1))
        .submit(spec(4, &[]).with_after(vec![t(3)]));
    env.take_one();
    assert_eq!(
        env.finish_with(3, Outcome::Retryable("exit code 1".into())),
        TaskState::Queued
    );
    assert_eq!(env.take_one().task, t(3));
    assert_eq!(env.state(4), Some(TaskState::Blocked));
}

#[test]
fn bad_dependencies_are_refused_and_change_nothing() {
    let mut env = TestEnv::new(PolicyKind::Gcc);
    env.submit(step(1, &[], &[10]));
    let before = env.counts();
    let err = |env: &mut TestEnv, s: TaskSpec| env.core.handle_submit(s, env.now).unwrap_err();
    assert_eq!(
        err(&mut env, spec(2, &[]).with_after(vec![t(9)])),
        CoreError::UnknownTask(t(9))
    );
    assert_eq!(
        err(&mut env, spec(2, &[]).with_after(vec![t(2)])),
        CoreError::UnknownTask(t(2))
    );
    assert_eq!(
        err(&mut env, step(2, &[], &[10])),
        CoreError::DuplicateProducer(o(10))
    );
    assert_eq!(
        err(&mut env, step(2, &[], &[12, 12])),
        CoreError::DuplicateProducer(o(12))
    );
    assert_eq!(
        err(&mut env, step(2, &[12], &[12])),
        CoreError::ReadsOwnOutput(t(2), o(12))
    );
    assert_eq!(env.counts(), before);
    env.check();
}

#[test]
fn losing_the_only_copy_runs_the_producer_again() {
    let mut env = TestEnv::new(PolicyKind::Gcc);
    env.node(0, 1).node(1, 1);
    // A slow gate keeps the consumer blocked while the producer's node is lost.
    env.submit(spec(9, &[]))
        .submit(step(1, &[], &[10]))
        .submit(step(2, &[10], &[]).with_after(vec![t(9)]));
    let first = env.take_dispatches();
    let p = first.iter().find(|d| d.task == t(1)).unwrap().clone();
    produce(&mut env, &p, &[10]);
    assert_eq!(env.lose(p.node.0), Vec::<TaskId>::new());
    assert_eq!(
        env.core.remakes(),
        (1, 0),
        "the producer waits to run again, its success already counted"
    );
    env.node(2, 1);
    let again = env.take_dispatches();
    assert!(
        again.iter().all(|d| d.task == t(1)),
        "only the producer runs again: {again:?}"
    );
    // The gate may have run on the lost node too; run whatever is now dispatched.
    let gate_lost = first.iter().any(|d| d.task == t(9) && d.node == p.node);
    let p2 = match again.iter().find(|d| d.task == t(1)) {
        Some(d) => d.clone(),
        None => env.take_one(),
    };
    assert_eq!(p2.attempt, 2);
    assert_eq!(env.core.remakes(), (0, 1));
    assert_eq!(
        produce(&mut env, &p2, &[10]),
        TaskState::Finished(Outcome::Succeeded)
    );
    assert_eq!(
        env.counts().succeeded,
        1,
        "a remake is not a second outcome"
    );
    if gate_lost {
        let g = env.take_one();
        assert_eq!(g.task, t(9));
    }
    env.finish(9);
    let c = env.take_one();
    assert_eq!(c.task, t(2));
    assert_eq!(source(&c, 10), Source::Local);
    env.finish(2);
    assert_eq!(env.counts().succeeded, 3);
}

#[test]
fn a_consumer_that_finds_its_input_gone_waits_for_it_to_be_made_again() {
    let mut env = TestEnv::new(PolicyKind::Gcc);
    env.node(0, 1).node(1, 1);
    env.submit(step(1, &[], &[10]))
        .submit(step(2, &[10], &[]))
        .submit(step(3, &[10], &[]));
    let p = env.take_one();
    produce(&mut env, &p, &[10]);
    let readers = env.take_dispatches();
    assert_eq!(readers.len(), 2);
    // The holder drops it (a damaged file) while both readers stage it: nothing is remade
    // until a reader says it could not read it.
    env.evicted(p.node.0, 10);
    assert!(env.take_dispatches().is_empty());
    let r = readers.iter().find(|d| d.node != p.node).unwrap();
    assert_eq!(
        env.finish_with(r.task.0, Outcome::InputLost(o(10))),
        TaskState::Queued
    );
    assert_eq!(env.state(r.task.0), Some(TaskState::Blocked));
    let remade = env.take_one();
    assert_eq!(remade.task, t(1));
    produce(&mut env, &remade, &[10]);
    let again = env.take_one();
    assert_eq!(again.task, r.task);
    env.finish(again.task.0);
    let other = readers.iter().find(|d| d.node == p.node).unwrap();
    env.finish(other.task.0);
    assert_eq!(env.counts().succeeded, 3);
}

#[test]
fn replicas_made_ahead_of_time_spare_the_producer_a_rerun() {
    let mut env = TestEnv::with_config(diffuse_core::CoreConfig {
        tmp_replicas: 2,
        ..config(PolicyKind::Gcc)
    });
    env.node(0, 1).node(1, 2).node(2, 1);
    env.submit(step(1, &[], &[10]));
    let p = env.take_one();
    // Node 1 gets busy: the replica goes to the least busy other node.
    env.submit(spec(8, &[])).submit(spec(9, &[]));
    let busy: Vec<_> = env.take_dispatches();
    assert_eq!(busy.len(), 2);
    produce(&mut env, &p, &[10]);
    let copies: Vec<(u32, u32)> = env
        .take_actions()
        .iter()
        .filter_map(|a| match a {
            Action::Replicate { object, from, to } if *object == o(10) => Some((from.0, to.0)),
            _ => None,
        })
        .collect();
    assert_eq!(copies.len(), 1, "two copies in all: {copies:?}");
    let (from, to) = copies[0];
    assert_eq!(from, p.node.0);
    let running = |n: u32| busy.iter().filter(|d| d.node.0 == n).count();
    let others: Vec<u32> = [0, 1, 2].into_iter().filter(|n| *n != from).collect();
    let least = others
        .iter()
        .copied()
        .min_by_key(|n| (running(*n), *n))
        .unwrap();
    assert_eq!(to, least, "the least busy node other than the producer's");
    env.cached(to, 10);
    // The producer's node is lost: the replica serves the reader, nothing runs again.
    env.lose(from);
    env.submit(step(2, &[10], &[]));
    let d = env
        .take_dispatches()
        .into_iter()
        .find(|d| d.task == t(2))
        .expect("the reader runs at once");
    assert!(matches!(source(&d, 10), Source::Local | Source::Peer(_)));
    assert_eq!(
        env.state(1),
        Some(TaskState::Finished(Outcome::Succeeded)),
        "the producer is not running again"
    );
}

#[test]
fn remakes_are_bounded() {
    let mut env = TestEnv::new(PolicyKind::Gcc);
    env.submit(spec(9, &[]))
        .submit(step(1, &[], &[10]))
        .submit(step(2, &[10], &[]).with_after(vec![t(9)]));
    let mut node = 0;
    env.node(node, 1);
    // The gate runs first (submitted first) and stays running on node 100.
    env.node(100, 1);
    let first = env.take_dispatches();
    assert_eq!(first.len(), 2);
    let limit = env.core.config().crash_limit;
    let mut p = first.into_iter().find(|d| d.task == t(1)).unwrap();
    for made in 0..=limit {
        produce(&mut env, &p, &[10]);
        env.lose(p.node.0);
        node += 1;
        env.node(node, 1);
        let next = env.take_dispatches();
        if made < limit {
            p = next.into_iter().find(|d| d.task == t(1)).expect("remade");
        } else {
            assert!(next.is_empty(), "no more remakes: {next:?}");
        }
    }
    let gone = abandoned(&env.take_actions());
    assert_eq!(
        gone[&2],
        Abandoned::InputLost {
            object: o(10),
            producer: t(1)
        }
    );
    let c = env.counts();
    assert_eq!((c.succeeded, c.failed, c.blocked), (1, 1, 0));
}

#[test]
fn a_task_submitted_after_its_input_was_released_remakes_it() {
    let mut env = TestEnv::new(PolicyKind::Gcc);
    env.node(0, 1);
    env.submit(step(1, &[], &[10])).submit(step(2, &[10], &[]));
    let p = env.take_one();
    produce(&mut env, &p, &[10]);
    env.take_one();
    env.finish(2);
    assert_eq!(drops(&env.take_actions()), BTreeSet::from([10]));
    env.submit(step(3, &[10], &[]));
    assert_eq!(env.take_one().task, t(1));
    assert_eq!(env.state(3), Some(TaskState::Blocked));
}

#[test]
fn an_unread_object_is_kept_until_its_job_ends() {
    let mut env = TestEnv::new(PolicyKind::Gcc);
    env.node(0, 1);
    env.submit(step(1, &[], &[10])).submit(spec(2, &[]));
    let p = env.take_one();
    produce(&mut env, &p, &[10]);
    assert_eq!(env.take_one().task, t(2));
    assert!(
        drops(&env.take_actions()).is_empty(),
        "its job still runs t2"
    );
    env.finish(2);
    assert_eq!(drops(&env.take_actions()), BTreeSet::from([10]));
}

#[test]
fn held_tasks_wait_for_their_sizes() {
    let mut env = TestEnv::new(PolicyKind::Gcc);
    env.node(0, 1);
    env.submit(spec(1, &[(5, 0)]).held());
    assert!(env.take_dispatches().is_empty());
    assert_eq!(env.counts().blocked, 1);
    env.core
        .handle_inputs_known(t(1), &[(o(5), 100)], env.now)
        .unwrap();
    assert_eq!(env.take_one().task, t(1));
    env.submit(spec(2, &[(5, 0)]).held())
        .submit(spec(3, &[]).with_after(vec![t(2)]));
    env.core.handle_failed_unrun(t(2), env.now).unwrap();
    env.check();
    assert_eq!(abandoned(&env.take_actions()).len(), 1);
}

#[test]
fn a_node_holding_a_needed_intermediate_is_not_released() {
    let mut cfg = config(PolicyKind::Gcc);
    cfg.provisioning = dynamic(diffuse_core::StepPolicy::AllAtOnce, 0, 4, 1, 5);
    let mut env = TestEnv::with_config(cfg);
    env.node(0, 1).node(1, 1);
    env.submit(spec(9, &[]))
        .submit(step(1, &[], &[10]))
        .submit(step(2, &[10], &[]).with_after(vec![t(9)]));
    let first = env.take_dispatches();
    let p = first.iter().find(|d| d.task == t(1)).unwrap().clone();
    produce(&mut env, &p, &[10]);
    env.advance(60).timeout();
    let released: Vec<_> = env
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Release { node, .. } => Some(node),
            _ => None,
        })
        .collect();
    assert!(
        !released.contains(&p.node),
        "{} holds the only copy of o10",
        p.node
    );
}

// ----- property: any sequence of events -----

#[derive(Clone, Debug)]
enum Ev {
    Succeed(prop::sample::Index),
    Fail(prop::sample::Index),
    Retry(prop::sample::Index),
    LoseInput(prop::sample::Index),
    LoseNode(prop::sample::Index),
    Join,
    Drop(prop::sample::Index),
    Cancel(prop::sample::Index),
}

fn ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        6 => any::<prop::sample::Index>().prop_map(Ev::Succeed),
        1 => any::<prop::sample::Index>().prop_map(Ev::Fail),
        1 => any::<prop::sample::Index>().prop_map(Ev::Retry),
        1 => any::<prop::sample::Index>().prop_map(Ev::LoseInput),
        1 => any::<prop::sample::Index>().prop_map(Ev::LoseNode),
        1 => Just(Ev::Join),
        1 => any::<prop::sample::Index>().prop_map(Ev::Drop),
        1 => any::<prop::sample::Index>().prop_map(Ev::Cancel),
    ]
}

/// A random graph: task i writes object 1000 + i, reads some earlier tasks' objects and waits
/// for some others.
fn graph() -> impl Strategy<Value = Vec<(Vec<u64>, Vec<u64>)>> {
    prop::collection::vec(
        (
            prop::collection::vec(any::<prop::sample::Index>(), 0..3),
            prop::collection::vec(any::<prop::sample::Index>(), 0..2),
        ),
        1..12,
    )
    .prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (reads, after))| {
                if i == 0 {
                    return (Vec::new(), Vec::new());
                }
                let mut r: Vec<u64> = reads.iter().map(|x| x.index(i) as u64).collect();
                r.sort();
                r.dedup();
                let mut a: Vec<u64> = after.iter().map(|x| x.index(i) as u64).collect();
                a.sort();
                a.dedup();
                (r, a)
            })
            .collect()
    })
}

/// Follows the events and checks what every dispatch and every end may be.
struct Model {
    reads: Vec<Vec<u64>>,
    after: Vec<Vec<u64>>,
    /// Tasks that succeeded at least once.
    succeeded: BTreeSet<u64>,
    /// Tasks with a recorded outcome, and it.
    outcome: BTreeMap<u64, String>,
    running: BTreeMap<u64, (u32, u32)>,
    next_node: u32,
}

impl Model {
    fn end(&mut self, task: u64, how: &str) {
        if how == "succeeded" && self.outcome.get(&task).is_some_and(|o| o == "succeeded") {
            return; // a remake
        }
        assert!(
            self.outcome.insert(task, how.to_string()).is_none(),
            "t{task} ended twice ({how}, after {:?})",
            self.outcome.get(&task)
        );
    }

    fn drain(&mut self, env: &mut TestEnv) {
        let mut copies = Vec::new();
        for a in env.take_actions() {
            match a {
                Action::Replicate { object, from, to } => {
                    assert!(
                        env.core.producer_of(object).is_some(),
                        "{object} is not an intermediate"
                    );
                    assert_ne!(from, to);
                    copies.push((object, to));
                }
                Action::Dispatch(d) => {
                    let i = d.task.0 as usize;
                    for dep in self.reads[i].iter().chain(&self.after[i]) {
                        assert!(
                            self.succeeded.contains(dep),
                            "t{i} dispatched before its dependency t{dep} succeeded"
                        );
                    }
                    for (obj, src) in &d.inputs {
                        assert_ne!(*src, Source::Storage, "{obj} read from storage");
                        if let Source::Peer(p) = src {
                            assert!(env.core.index().holds(*p, *obj), "peer {p} lacks {obj}");
                        }
                    }
                    self.running.insert(d.task.0, (d.node.0, d.attempt));
                }
                Action::Abandon { task, .. } => self.end(task.0, "failed"),
                Action::DropObject { .. } | Action::Provision { .. } | Action::Release { .. } => {}
                Action::Withdraw { .. } => panic!("no task is held ready here"),
                Action::Prefetch { .. } | Action::Evict { .. } | Action::Move { .. } => {
                    panic!("prefetching and 2Mark are off")
                }
            }
        }
        // Each copy arrives at once, unless its target or the object has gone meanwhile.
        for (object, to) in copies {
            if env.core.producer_of(object).is_some() {
                let _ = env.core.handle_object_cached(to, object, env.now);
                env.check();
            }
        }
        if env.core.poll_action(env.now).is_some() {
            panic!("a copy arriving asked for nothing");
        }
    }

    fn finish(&mut self, env: &mut TestEnv, task: u64, outcome: Outcome) {
        let (node, attempt) = self.running.remove(&task).expect("running");
        if outcome == Outcome::Succeeded {
            env.cached(node, 1000 + task);
        }
        let st = env
            .core
            .handle_task_finished(TaskId(task), attempt, outcome, env.now)
            .unwrap();
        env.check();
        match st {
            TaskState::Finished(Outcome::Succeeded) => {
                self.succeeded.insert(task);
                self.end(task, "succeeded");
            }
            // A failed remake: the producer's recorded success stands.
            TaskState::Finished(_) if self.succeeded.contains(&task) => {}
            TaskState::Finished(_) => self.end(task, "failed"),
            TaskState::Cancelled => self.end(task, "cancelled"),
            _ => {}
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    /// Under any sequence of successes, failures, retries, lost inputs, lost and joining nodes,
    /// dropped copies and cancels: no task runs before its dependencies succeeded, no
    /// intermediate is read from storage, every task ends exactly once, and once events stop
    /// and every run succeeds, nothing is left waiting.
    #[test]
    fn every_task_ends_once_and_never_before_its_producers(
        g in graph(),
        events in prop::collection::vec(ev(), 0..60),
        replicas in 1..3u32,
    ) {
        let mut env = TestEnv::with_config(diffuse_core::CoreConfig {
            tmp_replicas: replicas,
            ..config(PolicyKind::Gcc)
        });
        let n = g.len();
        let mut m = Model {
            reads: g.iter().map(|(r, _)| r.clone()).collect(),
            after: g.iter().map(|(_, a)| a.clone()).collect(),
            succeeded: BTreeSet::new(),
            outcome: BTreeMap::new(),
            running: BTreeMap::new(),
            next_node: 2,
        };
        env.node(0, 2).node(1, 1);
        let mut nodes: Vec<u32> = vec![0, 1];
        for (i, (reads, after)) in g.iter().enumerate() {
            // A dependency that has already failed: the driver fails such a task itself.
            if reads.iter().chain(after).any(|d| m.outcome.get(d).is_some_and(|o| o != "succeeded")) {
                m.end(i as u64, "failed");
                continue;
            }
            let inputs: Vec<(u64, u64)> = reads.iter().map(|r| (1000 + r, 1)).collect();
            let s = spec(i as u64, &inputs)
                .with_produces(vec![o(1000 + i as u64)])
                .with_after(after.iter().map(|a| t(*a)).collect())
                .with_retries(1);
            env.core.handle_submit(s, env.now).unwrap();
            env.check();
            m.drain(&mut env);
        }
        for e in events {
            match e {
                Ev::Succeed(i) | Ev::Fail(i) | Ev::Retry(i) | Ev::LoseInput(i) => {
                    let running: Vec<u64> = m.running.keys().copied().collect();
                    if running.is_empty() { continue; }
                    let task = running[i.index(running.len())];
                    let outcome = match e {
                        Ev::Succeed(_) => Outcome::Succeeded,
                        Ev::Fail(_) => Outcome::Failed("exit code 1".into()),
                        Ev::Retry(_) => Outcome::Retryable("exit code 1".into()),
                        _ => match m.reads[task as usize].first() {
                            Some(r) => Outcome::InputLost(o(1000 + r)),
                            None => Outcome::Retryable("exit code 1".into()),
                        },
                    };
                    m.finish(&mut env, task, outcome);
                }
                Ev::LoseNode(i) => {
                    if nodes.is_empty() { continue; }
                    let node = nodes.remove(i.index(nodes.len()));
                    let lost = env.core.handle_node_lost(diffuse_core::NodeId(node), env.now).unwrap();
                    env.check();
                    m.running.retain(|_, (nd, _)| *nd != node);
                    for f in lost.failed {
                        if !m.succeeded.contains(&f.0) { m.end(f.0, "failed"); }
                    }
                    for c in lost.cancelled { m.end(c.0, "cancelled"); }
                }
                Ev::Join => {
                    env.node(m.next_node, 1);
                    nodes.push(m.next_node);
                    m.next_node += 1;
                }
                Ev::Drop(i) => {
                    let pairs: Vec<_> = env.core.index().pairs().collect();
                    if pairs.is_empty() { continue; }
                    let (node, obj) = pairs[i.index(pairs.len())];
                    env.evicted(node.0, obj.0);
                }
                Ev::Cancel(i) => {
                    let task = i.index(n) as u64;
                    if m.outcome.contains_key(&task) { continue; }
                    if let Ok(Some(TaskState::Cancelled)) = env.core.handle_cancel(t(task), env.now) {
                        m.end(task, "cancelled");
                    }
                    env.check();
                }
            }
            m.drain(&mut env);
        }
        // Quiet end: a node to run on, and every run succeeds.
        env.node(m.next_node, 2);
        m.drain(&mut env);
        for _ in 0..(20 * n) {
            let Some(&task) = m.running.keys().next() else { break };
            m.finish(&mut env, task, Outcome::Succeeded);
            m.drain(&mut env);
        }
        prop_assert!(m.running.is_empty(), "still running: {:?}", m.running);
        for i in 0..n as u64 {
            prop_assert!(m.outcome.contains_key(&i), "t{i} never ended");
        }
        let c = env.core.counts();
        prop_assert_eq!((c.blocked, c.queued, c.running), (0, 0, 0));
    }
}
