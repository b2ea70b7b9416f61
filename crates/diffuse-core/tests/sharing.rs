//! How jobs share the slots (MixApart's FIFO and Fair): under FIFO the oldest task goes first
//! whatever its job; under Fair the job holding the fewest cores goes first, and a job that has
//! nothing to run on a free node lets the next one run there (work-conserving).

mod support;

use diffuse_core::{CoreConfig, JobId, JobOrder, PolicyKind, Resources};
use support::*;

fn env(order: JobOrder) -> TestEnv {
    TestEnv::with_config(CoreConfig {
        policy: PolicyKind::Gcc,
        job_order: order,
        ..CoreConfig::default()
    })
}

/// One two-slot node; job 1 queues four tasks, then job 2 four. Returns the job of each task
/// dispatched, in order, as tasks end oldest first.
fn run(order: JobOrder) -> Vec<u32> {
    let mut env = env(order);
    env.node(1, 2);
    for t in 0..4 {
        env.submit(spec(t, &[]).with_job(JobId(1)));
    }
    for t in 10..14 {
        env.submit(spec(t, &[]).with_job(JobId(2)));
    }
    let mut jobs = Vec::new();
    let mut running = Vec::new();
    for _ in 0..20 {
        for d in env.take_dispatches() {
            jobs.push(if d.task.0 < 10 { 1 } else { 2 });
            running.push(d.task.0);
        }
        if running.is_empty() {
            break;
        }
        let t = running.remove(0);
        env.finish(t);
    }
    jobs
}

#[test]
fn fifo_runs_the_first_job_before_the_second() {
    assert_eq!(run(JobOrder::Fifo), vec![1, 1, 1, 1, 2, 2, 2, 2]);
}

#[test]
fn fair_gives_each_job_half_the_slots() {
    assert_eq!(run(JobOrder::Fair), vec![1, 2, 1, 2, 1, 2, 1, 2]);
}

#[test]
fn fair_is_work_conserving() {
    // Job 1's tasks need two cores; the node has one. Job 2's run though job 1 holds nothing.
    let mut env = env(JobOrder::Fair);
    env.node(1, 1);
    let big = Resources {
        cores: 2,
        ..Resources::ONE_CORE
    };
    env.submit(spec(1, &[]).with_job(JobId(1)).with_resources(big));
    env.submit(spec(2, &[]).with_job(JobId(2)));
    assert_eq!(env.take_one().task, t(2));
}

#[test]
fn the_job_order_is_parsed_by_name() {
    assert_eq!("fair".parse::<JobOrder>(), Ok(JobOrder::Fair));
    assert!("round-robin"
        .parse::<JobOrder>()
        .unwrap_err()
        .contains("expected fifo or fair"));
}
