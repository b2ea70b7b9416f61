//! What a task asks of the scheduler beyond its data: resources (cores, memory, GPUs, disk) it
//! holds while it runs, a priority that orders the queue, and retries of failures another attempt
//! may not repeat.

mod support;

use diffuse_core::{Outcome, PolicyKind, Resources, TaskState};
use support::{n, spec, t, TestEnv};

fn cores(c: u32) -> Resources {
    Resources {
        cores: c,
        ..Resources::ONE_CORE
    }
}

const GB: u64 = 1 << 30;

// ----- resources -----

#[test]
fn two_core_tasks_never_overlap_on_a_two_core_node_and_one_core_tasks_do() {
    for policy in [
        PolicyKind::Fa,
        PolicyKind::Mcu,
        PolicyKind::Mch,
        PolicyKind::Gcc,
    ] {
        let mut env = TestEnv::new(policy);
        env.node(1, 2);
        for i in 0..4 {
            env.submit(spec(i, &[]).with_resources(cores(2)));
        }
        for i in 0..4 {
            // One at a time: each holds both cores.
            let d = env.take_one();
            assert_eq!(d.task, t(i), "{policy:?}");
            assert_eq!(env.counts().busy_slots, 2);
            env.finish(i);
        }
        for i in 10..14 {
            env.task(i, &[]);
        }
        assert_eq!(
            env.take_dispatches().len(),
            2,
            "{policy:?}: two one-core tasks at once"
        );
    }
}

#[test]
fn a_task_runs_only_where_its_memory_and_gpus_fit_and_holds_them() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    let small = Resources {
        cores: 8,
        memory: 4 * GB,
        gpus: 0,
        disk: 100 * GB,
    };
    let gpu = Resources {
        cores: 8,
        memory: 16 * GB,
        gpus: 2,
        disk: 100 * GB,
    };
    env.node_with(1, small).node_with(2, gpu);
    let want = |memory, gpus| Resources {
        cores: 1,
        memory,
        gpus,
        disk: 0,
    };
    env.submit(spec(1, &[]).with_resources(want(8 * GB, 0)));
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(1), n(2)), "only n2 has 8 GB");
    env.submit(spec(2, &[]).with_resources(want(0, 1)));
    env.submit(spec(3, &[]).with_resources(want(0, 1)));
    env.submit(spec(4, &[]).with_resources(want(0, 1)));
    let d = env.take_dispatches();
    assert_eq!(d.len(), 2, "n2 has two GPUs: {d:?}");
    assert!(d.iter().all(|d| d.node == n(2)));
    // The 8 GB of t1 are held: a second 10 GB task waits for it.
    env.submit(spec(5, &[]).with_resources(want(10 * GB, 0)));
    assert!(env.take_dispatches().is_empty());
    env.finish(1);
    let d = env.take_one();
    assert_eq!((d.task, d.node), (t(5), n(2)));
    // t4 still waits for a GPU; one-core tasks fill the cores around it.
    env.task(6, &[]);
    assert_eq!(env.take_one().task, t(6));
    env.finish(d.task.0);
    env.finish(2);
    assert_eq!(env.take_one().task, t(4));
}

#[test]
fn a_task_that_fits_no_node_is_reported_unschedulable() {
    let mut env = TestEnv::new(PolicyKind::Gcc);
    let gpu = Resources {
        gpus: 1,
        ..Resources::ONE_CORE
    };
    env.submit(spec(1, &[]).with_resources(gpu));
    assert!(
        env.core.unschedulable().is_empty(),
        "no node yet: nothing to say"
    );
    env.node(1, 4);
    assert!(env.take_dispatches().is_empty());
    assert_eq!(env.core.unschedulable(), vec![t(1)]);
    env.submit(spec(2, &[]).with_resources(cores(8)));
    assert_eq!(env.core.unschedulable(), vec![t(1), t(2)]);
    env.node_with(
        2,
        Resources {
            cores: 8,
            memory: u64::MAX,
            gpus: 1,
            disk: u64::MAX,
        },
    );
    assert!(env.core.unschedulable().is_empty());
    assert_eq!(env.take_dispatches().len(), 1, "n2 takes one of them");
}

// ----- priority -----

#[test]
fn higher_priority_tasks_run_first_and_equal_ones_in_submission_order() {
    for policy in [PolicyKind::Fa, PolicyKind::Mcu, PolicyKind::Gcc] {
        let mut env = TestEnv::new(policy);
        env.submit(spec(1, &[(10, 5)]))
            .submit(spec(2, &[(11, 5)]).with_priority(5))
            .submit(spec(3, &[(12, 5)]).with_priority(-1))
            .submit(spec(4, &[(13, 5)]).with_priority(5))
            .submit(spec(5, &[(14, 5)]));
        env.node(1, 1);
        let mut order = Vec::new();
        for _ in 0..5 {
            let d = env.take_one();
            order.push(d.task.0);
            env.finish(d.task.0);
        }
        assert_eq!(order, vec![2, 4, 1, 5, 3], "{policy:?}");
    }
}

#[test]
fn locality_still_wins_within_the_window_whatever_the_priority() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 1).cached(1, 10);
    env.submit(spec(1, &[(11, 5)]).with_priority(9))
        .submit(spec(2, &[(10, 5)]));
    // The window holds both: the local task goes first, as it would at equal priority.
    assert_eq!(env.take_one().task, t(2));
}

// ----- retries -----

#[test]
fn a_retryable_failure_runs_again_on_another_node_until_retries_run_out() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 1).node(2, 1);
    env.submit(spec(1, &[]).with_retries(2));
    let d = env.take_one();
    let first = d.node;
    assert_eq!(
        env.finish_with(1, Outcome::Retryable("exit code 3".into())),
        TaskState::Queued
    );
    let d = env.take_one();
    assert_eq!(d.attempt, 2);
    assert_ne!(d.node, first, "the retry prefers another node");
    assert_eq!(
        env.finish_with(1, Outcome::Retryable("exit code 3".into())),
        TaskState::Queued
    );
    let d = env.take_one();
    assert_eq!(d.attempt, 3);
    assert_eq!(
        env.finish_with(1, Outcome::Retryable("exit code 3".into())),
        TaskState::Finished(Outcome::Failed("exit code 3".into()))
    );
    let c = env.counts();
    assert_eq!((c.failed, c.queued, c.running), (1, 0, 0));
}

#[test]
fn a_retry_takes_the_node_it_failed_on_when_no_other_has_room() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 1);
    env.submit(spec(1, &[]).with_retries(1));
    env.take_one();
    assert_eq!(
        env.finish_with(1, Outcome::Retryable("timed out after 1 s".into())),
        TaskState::Queued
    );
    let d = env.take_one();
    assert_eq!((d.node, d.attempt), (n(1), 2));
    assert_eq!(env.finish(1), TaskState::Finished(Outcome::Succeeded));
}

/// A node that cannot run a task for a fault of its own (its cache disk full with nothing to
/// evict) gives it back: not a failure, and no retry is spent. The task then waits for another
/// node rather than go back to the faulty one, free as that one is.
#[test]
fn a_node_fault_gives_the_task_back_and_it_waits_for_another_node() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 1).node(2, 1);
    env.submit(spec(1, &[])).submit(spec(2, &[]));
    let ds = env.take_dispatches();
    let on = |node: u32| ds.iter().find(|d| d.node == n(node)).unwrap().task.0;
    let (given_back, other) = (on(1), on(2));
    assert_eq!(
        env.finish_with(given_back, Outcome::NodeFault("no room".into())),
        TaskState::Queued
    );
    assert!(
        env.take_dispatches().is_empty(),
        "node 1 is free, but the task waits for node 2"
    );
    assert_eq!(env.finish(other), TaskState::Finished(Outcome::Succeeded));
    let d = env.take_one();
    assert_eq!((d.task, d.node, d.attempt), (t(given_back), n(2), 2));
    assert_eq!(
        env.finish(given_back),
        TaskState::Finished(Outcome::Succeeded)
    );
    let c = env.counts();
    assert_eq!((c.failed, c.succeeded), (0, 2));
}

/// On a node alone, a task it gives back goes to it again, and fails with the reason once it
/// has been given back as often as the crash limit allows.
#[test]
fn a_node_fault_on_the_only_node_fails_the_task_at_the_crash_limit() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 1);
    env.submit(spec(1, &[]));
    let mut attempts = 0;
    let end = loop {
        let d = env.take_one();
        attempts += 1;
        assert_eq!((d.node, d.attempt), (n(1), attempts));
        match env.finish_with(1, Outcome::NodeFault("no room".into())) {
            TaskState::Queued => continue,
            end => break end,
        }
    };
    assert_eq!(attempts, 3, "the default crash limit");
    assert_eq!(
        end,
        TaskState::Finished(Outcome::Failed("no room (3 times)".into()))
    );
}

#[test]
fn failures_that_would_repeat_are_not_retried_and_nor_are_cancelled_tasks() {
    let mut env = TestEnv::new(PolicyKind::Mcu);
    env.node(1, 2);
    env.submit(spec(1, &[]).with_retries(5))
        .submit(spec(2, &[]).with_retries(5));
    assert_eq!(env.take_dispatches().len(), 2);
    assert_eq!(
        env.finish_with(1, Outcome::Failed("not found: file:///x".into())),
        TaskState::Finished(Outcome::Failed("not found: file:///x".into()))
    );
    env.cancel(2);
    assert_eq!(
        env.finish_with(2, Outcome::Retryable("killed".into())),
        TaskState::Cancelled
    );
}

// ----- random sequences -----

mod random {
    use super::*;
    use diffuse_core::{Action, Core, CoreConfig, NodeId, TaskId};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Clone, Debug)]
    enum Step {
        /// cores, GB of memory, GPUs, priority, retries
        Submit(u32, u64, u32, i16, u32),
        /// cores, GB of memory, GPUs
        Join(u32, u64, u32),
        /// finish the running task at this index: 0 ok, 1 retryable failure, 2 failure
        Finish(usize, u8),
        Lose(usize),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            5 => (1..=3u32, 0..=4u64, 0..=1u32, -2..=2i16, 0..=2u32)
                .prop_map(|(c, m, g, p, r)| Step::Submit(c, m, g, p, r)),
            2 => (1..=4u32, 1..=8u64, 0..=2u32).prop_map(|(c, m, g)| Step::Join(c, m, g)),
            5 => (any::<usize>(), 0..3u8).prop_map(|(i, k)| Step::Finish(i, k)),
            1 => any::<usize>().prop_map(Step::Lose),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// Under every policy: nodes never hold more than they have (checked by the core's
        /// invariants after each step), a task runs only where it fits, priorities are
        /// respected among tasks that fit, and at the end every task that fits some node ends.
        #[test]
        fn resources_priorities_and_retries_keep_the_core_consistent(
            steps in prop::collection::vec(step(), 1..120),
            policy in prop_oneof![Just(PolicyKind::Fa), Just(PolicyKind::Mcu),
                                  Just(PolicyKind::Mch), Just(PolicyKind::Gcc)],
        ) {
            let mut core = Core::new(CoreConfig { policy, ..CoreConfig::default() });
            let now = diffuse_core::Time::ZERO;
            let mut want: BTreeMap<TaskId, Resources> = BTreeMap::new();
            let mut caps: BTreeMap<NodeId, Resources> = BTreeMap::new();
            let mut running: Vec<(TaskId, u32, NodeId)> = Vec::new();
            let (mut next_task, mut next_node) = (0u64, 0u32);
            let drain = |core: &mut Core, running: &mut Vec<(TaskId, u32, NodeId)>,
                             want: &BTreeMap<TaskId, Resources>, caps: &BTreeMap<NodeId, Resources>| {
                while let Some(a) = core.poll_action(now) {
                    if let Action::Dispatch(d) = a {
                        prop_assert!(want[&d.task].fits_in(&caps[&d.node]));
                        running.push((d.task, d.attempt, d.node));
                    }
                }
                prop_assert_eq!(core.check_invariants(), Ok(()));
                Ok(())
            };
            for s in &steps {
                match s {
                    Step::Submit(c, m, g, p, r) => {
                        let res = Resources { cores: *c, memory: m * GB, gpus: *g, disk: 0 };
                        let id = TaskId(next_task);
                        next_task += 1;
                        want.insert(id, res);
                        core.handle_submit(
                            spec(id.0, &[]).with_resources(res).with_priority(*p).with_retries(*r),
                            now,
                        ).unwrap();
                    }
                    Step::Join(c, m, g) => {
                        let cap = Resources { cores: *c, memory: m * GB, gpus: *g, disk: u64::MAX };
                        let id = NodeId(next_node);
                        next_node += 1;
                        caps.insert(id, cap);
                        core.handle_node_joined_with(id, cap, now).unwrap();
                    }
                    Step::Finish(i, kind) if !running.is_empty() => {
                        let (task, attempt, _) = running.remove(i % running.len());
                        let outcome = match kind {
                            0 => Outcome::Succeeded,
                            1 => Outcome::Retryable("exit code 1".into()),
                            _ => Outcome::Failed("exec".into()),
                        };
                        core.handle_task_finished(task, attempt, outcome, now).unwrap();
                    }
                    Step::Lose(i) if !caps.is_empty() => {
                        let node = *caps.keys().nth(i % caps.len()).unwrap();
                        caps.remove(&node);
                        core.handle_node_lost(node, now).unwrap();
                        running.retain(|(_, _, n)| *n != node);
                    }
                    _ => {}
                }
                drain(&mut core, &mut running, &want, &caps)?;
            }
            // A node big enough for anything joins; finishing everything ends every task.
            let big = Resources { cores: 4, memory: 8 * GB, gpus: 2, disk: u64::MAX };
            caps.insert(NodeId(next_node), big);
            core.handle_node_joined_with(NodeId(next_node), big, now).unwrap();
            drain(&mut core, &mut running, &want, &caps)?;
            let mut rounds = 0;
            while let Some((task, attempt, _)) = running.pop() {
                core.handle_task_finished(task, attempt, Outcome::Succeeded, now).unwrap();
                drain(&mut core, &mut running, &want, &caps)?;
                rounds += 1;
                prop_assert!(rounds < 10_000);
            }
            let c = core.counts();
            prop_assert_eq!((c.queued, c.running), (0, 0), "every task ended: {:?}", c);
            prop_assert!(core.unschedulable().is_empty());
        }
    }
}

// ----- walltime -----

#[test]
fn a_task_goes_only_to_a_node_that_stays_as_long_as_it_says_it_runs() {
    use std::time::Duration;
    for policy in [PolicyKind::Fa, PolicyKind::Gcc] {
        let mut env = TestEnv::new(policy);
        env.node(1, 1);
        let ends = env.now + Duration::from_secs(60);
        env.core.handle_node_deadline(n(1), Some(ends));
        let long = |i| spec(i, &[]).with_walltime(Some(Duration::from_secs(90)));
        let short = |i| spec(i, &[]).with_walltime(Some(Duration::from_secs(30)));
        env.submit(long(1));
        assert!(
            env.take_dispatches().is_empty(),
            "{policy:?}: 90 s do not fit in the 60 s n1 has left"
        );
        env.submit(short(2));
        let d = env.take_one();
        assert_eq!((d.task, d.node), (t(2), n(1)), "{policy:?}");
        env.finish(2);
        // 40 s later, n1 has 20 s left: not even the short task fits; one that states nothing
        // does.
        env.advance(40);
        env.submit(short(3));
        assert!(env.take_dispatches().is_empty(), "{policy:?}");
        env.task(4, &[]);
        assert_eq!(env.take_one().task, t(4), "{policy:?}");
        env.finish(4);
        // A node with no time limit takes the long ones.
        env.node(2, 2);
        let got: Vec<_> = env
            .take_dispatches()
            .iter()
            .map(|d| (d.task, d.node))
            .collect();
        assert_eq!(got, vec![(t(1), n(2)), (t(3), n(2))], "{policy:?}");
        env.check();
    }
}
