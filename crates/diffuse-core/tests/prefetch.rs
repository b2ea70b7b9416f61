//! MixApart's data transfer scheduler on hand-built states: prefetches within the storage
//! budget, just in time, by demand and job order, into nodes with room; prefetched objects as
//! future locality; failures, evictions and departures give the budget back.

mod support;

use diffuse_core::{
    Action, CoreConfig, EvictionPolicy, JobId, JobOrder, NodeId, ObjectId, PolicyKind,
    PrefetchConfig, Source,
};
use std::time::Duration;
use support::*;

/// A core with prefetching under `cap` bytes/s (nodes' caches: `quota` bytes, half of it for
/// prefetches).
fn env_with(cap: f64, job_order: JobOrder) -> TestEnv {
    TestEnv::with_config(CoreConfig {
        policy: PolicyKind::MixApart,
        job_order,
        storage_cap: Some(cap),
        prefetch: Some(PrefetchConfig {
            cache_share: 0.5,
            lookahead: 1024,
        }),
        ..CoreConfig::default()
    })
}

/// Nodes 0..n with one slot and `quota` bytes of cache each, all busy with input-less tasks
/// 100+i.
fn busy_nodes(env: &mut TestEnv, nodes: u32, quota: u64) {
    for i in 0..nodes {
        env.node(i, 1);
        env.core
            .handle_node_cache(n(i), quota, EvictionPolicy::Lru, env.now)
            .unwrap();
        env.task(100 + i as u64, &[]);
    }
    assert_eq!(env.take_dispatches().len(), nodes as usize);
}

fn prefetches(actions: &[Action]) -> Vec<(ObjectId, NodeId)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Prefetch { object, node, .. } => Some((*object, *node)),
            _ => None,
        })
        .collect()
}

#[test]
fn prefetches_stay_within_the_budget_and_resume_as_copies_land() {
    // Cap 100 B/s over 2 slots: each read is budgeted at 50 B/s, so two at a time.
    let mut env = env_with(100.0, JobOrder::Fifo);
    busy_nodes(&mut env, 2, 1000);
    for i in 1..=5 {
        env.task(i, &[(i, 100)]);
    }
    let first = prefetches(&env.take_actions());
    assert_eq!(
        first,
        vec![(o(1), n(0)), (o(2), n(1))],
        "two, to the roomiest nodes"
    );
    assert_eq!(env.core.storage_budget_used(), 100);
    env.assert_idle();
    env.cached(0, 1);
    // Both nodes hold 100 B unread: the tie goes to the lower id.
    assert_eq!(prefetches(&env.take_actions()), vec![(o(3), n(0))]);
    let stats = env.core.prefetch_stats();
    assert_eq!(
        (stats.issued, stats.landed, stats.issued_bytes),
        (3, 1, 300)
    );
}

#[test]
fn a_prefetched_object_draws_its_task_and_the_task_joins_the_transfer() {
    let mut env = env_with(100.0, JobOrder::Fifo);
    busy_nodes(&mut env, 2, 1000);
    env.task(1, &[(1, 100)]).task(2, &[(2, 100)]);
    assert_eq!(
        prefetches(&env.take_actions()),
        vec![(o(1), n(0)), (o(2), n(1))]
    );
    // n1 frees first: it takes t2, whose input is on its way there, not the older t1.
    env.finish(101);
    let d = env.take_one();
    assert_eq!((d.task, d.node, source(&d, 2)), (t(2), n(1), Source::Local));
    assert_eq!(env.core.prefetch_stats().read, 1);
}

#[test]
fn objects_wanted_by_more_tasks_go_first() {
    let mut env = env_with(50.0, JobOrder::Fifo);
    busy_nodes(&mut env, 1, 1000);
    // One read at a time (the cap over one slot). o7 is read by three tasks, o1 by one.
    env.task(1, &[(1, 100)])
        .task(2, &[(7, 100)])
        .task(3, &[(7, 100)])
        .task(4, &[(7, 100)]);
    assert_eq!(prefetches(&env.take_actions()), vec![(o(7), n(0))]);
}

#[test]
fn a_failed_prefetch_gives_the_budget_back_and_is_no_longer_local_to_be() {
    // One slot: one read at a time.
    let mut env = env_with(50.0, JobOrder::Fifo);
    busy_nodes(&mut env, 1, 1000);
    env.task(1, &[(1, 100)]).task(2, &[(2, 100)]);
    assert_eq!(prefetches(&env.take_actions()), vec![(o(1), n(0))]);
    assert_eq!(env.core.storage_budget_used(), 50);
    env.core.handle_prefetch_failed(n(0), o(1), env.now);
    env.check();
    assert_eq!(env.core.storage_budget_used(), 0);
    // Planned again at once: o1 is cold again and comes first.
    assert_eq!(prefetches(&env.take_actions()), vec![(o(1), n(0))]);
    assert_eq!(env.core.prefetch_stats().failed, 1);
}

#[test]
fn room_for_unread_prefetches_is_bounded_per_node() {
    // 1 node of 4 busy slots, quota 400, half for prefetches: the budget allows four reads,
    // room two objects of 100 B.
    let mut env = env_with(1e9, JobOrder::Fifo);
    env.node(0, 4);
    env.core
        .handle_node_cache(n(0), 400, EvictionPolicy::Lru, env.now)
        .unwrap();
    for i in 100..104 {
        env.task(i, &[]);
    }
    assert_eq!(env.take_dispatches().len(), 4);
    for i in 1..=4 {
        env.task(i, &[(i, 100)]);
    }
    assert_eq!(prefetches(&env.take_actions()).len(), 2);
    // A copy read by its task frees room for another.
    env.cached(0, 1);
    env.assert_idle();
    env.finish(100);
    let d = env.take_one();
    assert_eq!((d.task, source(&d, 1)), (t(1), Source::Local));
    assert_eq!(prefetches(&env.take_actions()), vec![(o(3), n(0))]);
}

#[test]
fn an_unread_prefetched_copy_evicted_is_counted_wasted() {
    let mut env = env_with(1e9, JobOrder::Fifo);
    busy_nodes(&mut env, 1, 1000);
    env.task(1, &[(1, 100)]);
    assert_eq!(prefetches(&env.take_actions()).len(), 1);
    env.cached(0, 1).evicted(0, 1);
    let s = env.core.prefetch_stats();
    assert_eq!((s.landed, s.evicted_unread, s.read), (1, 1, 0));
    // o1 is cold again: prefetched again.
    assert_eq!(prefetches(&env.take_actions()), vec![(o(1), n(0))]);
}

#[test]
fn under_fair_the_job_holding_fewer_cores_is_prefetched_first() {
    let mut env = env_with(50.0, JobOrder::Fair);
    // Job 1 holds the only slot.
    env.node(0, 1);
    env.core
        .handle_node_cache(n(0), 1000, EvictionPolicy::Lru, env.now)
        .unwrap();
    env.submit(spec(100, &[]).with_job(JobId(1)));
    assert_eq!(env.take_one().task, t(100));
    env.submit(spec(1, &[(1, 100)]).with_job(JobId(1)));
    env.submit(spec(2, &[(2, 100)]).with_job(JobId(2)));
    assert_eq!(prefetches(&env.take_actions()), vec![(o(2), n(0))]);
}

#[test]
fn a_tasks_own_storage_read_is_budgeted_until_it_lands() {
    // Cap 50 over one slot: a task reading from storage takes the whole budget.
    let mut env = env_with(50.0, JobOrder::Fifo);
    env.node(0, 1);
    env.core
        .handle_node_cache(n(0), 1000, EvictionPolicy::Lru, env.now)
        .unwrap();
    env.task(1, &[(1, 100)]);
    let d = env.take_one();
    assert_eq!(source(&d, 1), Source::Storage);
    assert_eq!(env.core.storage_budget_used(), 50);
    env.task(2, &[(2, 100)]);
    env.assert_idle();
    env.cached(0, 1);
    assert_eq!(env.core.storage_budget_used(), 0);
    assert_eq!(prefetches(&env.take_actions()), vec![(o(2), n(0))]);
}

#[test]
fn a_jobs_io_rate_is_learned_from_its_finished_tasks() {
    // Cap 1000 B/s over one slot: the first guess is 1000 B/s a read. A task reading 100 B in
    // 1 s teaches 100 B/s: ten reads fit in the budget.
    let mut env = env_with(1000.0, JobOrder::Fifo);
    env.node(0, 1);
    env.core
        .handle_node_cache(n(0), 1_000_000, EvictionPolicy::Lru, env.now)
        .unwrap();
    env.task(1, &[(1, 100)]);
    env.take_one();
    env.cached(0, 1);
    env.now = env.now + Duration::from_secs(1);
    env.finish(1);
    env.task(2, &[(1, 100)]);
    env.take_one();
    for i in 10..30 {
        env.task(i, &[(i, 100)]);
    }
    assert_eq!(prefetches(&env.take_actions()).len(), 10);
}

#[test]
fn a_departed_node_loses_its_prefetches() {
    let mut env = env_with(100.0, JobOrder::Fifo);
    busy_nodes(&mut env, 2, 1000);
    env.task(1, &[(1, 100)]).task(2, &[(2, 100)]);
    assert_eq!(
        prefetches(&env.take_actions()),
        vec![(o(1), n(0)), (o(2), n(1))]
    );
    env.lose(0);
    assert_eq!(env.core.prefetch_stats().failed, 1);
    assert_eq!(env.core.storage_budget_used(), 50, "n1's read is left");
    // One slot left, so a read is budgeted at the whole cap: o1 waits for o2 to land.
    env.assert_idle();
    env.cached(1, 2);
    assert_eq!(prefetches(&env.take_actions()), vec![(o(1), n(1))]);
}
