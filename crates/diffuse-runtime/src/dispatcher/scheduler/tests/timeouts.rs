//! The scheduler's timeouts on the test's clock ([`Env::advance`]): a silent worker given up
//! exactly past the heartbeat timeout, a hand-off held until its time bound, the dashboard
//! sampled once a second, a staged batch's seconds.

use super::{Env, HEARTBEAT_TIMEOUT};
use crate::proto::{ToDispatcher, ToWorker};
use crate::provisioner::PoolCmd;
use diffuse_core::CoreConfig;
use std::time::Duration;

#[test]
fn a_silent_worker_is_given_up_just_past_the_heartbeat_timeout_and_its_task_runs_elsewhere() {
    let mut env = Env::new(CoreConfig::default());
    let quiet = env.join("quiet", 1, None);
    env.submit(r#"{"id":"a","cmd":"true"}"#);
    let (on, first) = env.take_runs(1).remove(0);
    assert_eq!(on, quiet.node);
    let talker = env.join("talker", 1, None);
    // Both are heard from at the start; then only the talker, every 2 s.
    let step = Duration::from_secs(2);
    let mut silent_for = Duration::ZERO;
    while silent_for + step <= HEARTBEAT_TIMEOUT {
        env.advance(step);
        silent_for += step;
        env.from(talker, ToDispatcher::Heartbeat);
        env.tick();
        assert_eq!(
            env.status().workers,
            2,
            "given up after {silent_for:?} of silence"
        );
    }
    assert_eq!(silent_for, HEARTBEAT_TIMEOUT);
    env.advance(Duration::from_millis(1));
    env.from(talker, ToDispatcher::Heartbeat);
    env.tick();
    assert_eq!(env.status().workers, 1);
    assert_eq!(env.comm.log().detached, vec![quiet.node]);
    let (to, again) = env.take_runs(1).remove(0);
    assert_eq!((to, again.attempt), (talker.node, 2));
    // Its late result is not taken; the second attempt's is.
    env.finish(quiet, &first, 0, vec![]);
    env.finish(talker, &again, 0, vec![]);
    env.round();
    assert_eq!(env.status().succeeded, 1);
}

#[test]
fn a_worker_heard_from_is_kept_however_long_it_runs() {
    let mut env = Env::new(CoreConfig::default());
    let w = env.join("w", 1, None);
    env.submit(r#"{"id":"long","cmd":"sleep 3600"}"#);
    env.take_runs(1);
    for _ in 0..360 {
        env.advance(Duration::from_secs(9));
        env.from(w, ToDispatcher::Heartbeat);
        env.tick();
    }
    let st = env.status();
    assert_eq!((st.workers, st.running), (1, 1));
    assert!(env.comm.log().detached.is_empty());
}

#[test]
fn a_released_worker_waits_for_its_hand_off_until_the_time_bound_then_leaves() {
    let bound = Duration::from_secs(60);
    let (mut env, a, b) = super::two_workers_one_holding_x(bound);
    // a is released and pushes x to b, which never reports the copy but stays connected.
    env.tick();
    assert!(env
        .take()
        .iter()
        .any(|(to, m)| *to == b.node && matches!(m, ToWorker::Fetch { .. })));
    let released = |env: &Env| {
        env.comm
            .log()
            .pool
            .iter()
            .any(|c| matches!(c, PoolCmd::Release(r) if r == "dfs-1"))
    };
    let mut waited = Duration::ZERO;
    while waited + Duration::from_secs(5) < bound {
        env.advance(Duration::from_secs(5));
        waited += Duration::from_secs(5);
        env.from(b, ToDispatcher::Heartbeat);
        env.tick();
        assert!(
            !released(&env),
            "released after {waited:?}, before the bound"
        );
        assert!(!env
            .take()
            .iter()
            .any(|(to, m)| *to == a.node && matches!(m, ToWorker::Shutdown)));
    }
    env.advance(bound - waited);
    env.from(b, ToDispatcher::Heartbeat);
    env.tick();
    assert!(released(&env), "given back at the bound");
    assert!(env
        .take()
        .iter()
        .any(|(to, m)| *to == a.node && matches!(m, ToWorker::Shutdown)));
}

#[test]
fn the_dashboard_is_sampled_once_a_second_at_the_clocks_time() {
    let mut env = Env::new(CoreConfig::default());
    env.tick();
    let points = |env: &Env| env.s.ledger.series.points_since(0);
    assert_eq!(points(&env).len(), 1);
    assert_eq!(points(&env)[0].t, env.now.unix);
    env.advance(Duration::from_millis(999));
    env.tick();
    assert_eq!(points(&env).len(), 1, "not yet a second");
    env.advance(Duration::from_millis(1));
    env.tick();
    let p = points(&env);
    assert_eq!(p.len(), 2);
    assert!(
        (p[1].t - p[0].t - 1.0).abs() < 1e-6,
        "{} {}",
        p[0].t,
        p[1].t
    );
    assert!((env.status().uptime_s - 1.0).abs() < 1e-9);
}
