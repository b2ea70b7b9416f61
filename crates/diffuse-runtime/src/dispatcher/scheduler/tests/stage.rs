//! Batches staged with GDS: every worker gets its copy, from storage or from a worker that has
//! one, and storage is planned at the rate `--storage-bandwidth-cap` lets the workers read it.

use super::{found, Env};
use crate::proto::{Held, InputSource, ToDispatcher, ToWorker};
use diffuse_core::{CoreConfig, NodeId};

const URI: &str = "file:///data/ref.bin";

/// Stage [`URI`] (`size` bytes) to every worker and answer its lookup; the batch's id.
fn stage(env: &mut Env, size: u64) -> u64 {
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let ask: super::super::batches::StageAsk = serde_json::from_value(serde_json::json!({
        "uris": [URI], "schedule": "gds"
    }))
    .expect("an ask");
    env.send(super::SchedulerMsg::Stage(ask, tx));
    let id = rx.try_recv().expect("answered").expect("accepted");
    // Its size and version are looked up by a worker first.
    let (asked, lookup) = env
        .take()
        .into_iter()
        .find_map(|(n, m)| match m {
            ToWorker::Lookup { id, uris, .. } => Some((n, (id, uris))),
            _ => None,
        })
        .expect("a lookup");
    env.from(env.w(asked), found(lookup.0, &lookup.1, size));
    id
}

/// Every fetch sent so far: its worker and source, in order.
fn fetches(env: &Env) -> Vec<(NodeId, InputSource)> {
    env.comm
        .log()
        .sent
        .iter()
        .filter_map(|(n, m)| match m {
            ToWorker::Fetch { inputs } => Some((*n, inputs[0].source.clone())),
            _ => None,
        })
        .collect()
}

/// Each worker that was sent a fetch reports its copy, round after round, until the batch is
/// done; the fetches, and how many were under way at once at the start.
fn copy_until_done(env: &mut Env, id: u64) -> (Vec<(NodeId, InputSource)>, usize) {
    let first_round = fetches(env).len();
    for _ in 0..8 {
        if env
            .s
            .batches
            .view(id, env.now.instant)
            .expect("the batch")
            .state
            == "done"
        {
            break;
        }
        for (n, _) in fetches(env) {
            let objects = vec![Held {
                uri: URI.into(),
                version: "v1".into(),
            }];
            env.from(env.w(n), ToDispatcher::Cached { objects });
        }
    }
    let view = env.s.batches.view(id, env.now.instant).expect("the batch");
    assert_eq!(view.state, "done", "{view:?}");
    assert!(view.failed.is_empty(), "{view:?}");
    (fetches(env), first_round)
}

#[test]
fn a_staged_batch_copies_an_object_to_every_worker_and_reports_done() {
    let mut env = Env::new(CoreConfig::default());
    let w1 = env.join("w1", 1, None);
    let w2 = env.join("w2", 1, None);
    env.take();
    let id = stage(&mut env, 1000);
    assert!(!fetches(&env).is_empty(), "the stager starts copies");
    copy_until_done(&mut env, id);
    let view = env.s.batches.view(id, env.now.instant).expect("the batch");
    assert_eq!((view.requests, view.done), (2, 2));
    for w in [w1, w2] {
        let o = env.s.objects[URI];
        assert!(env.s.core.locate(o).contains(&w.node));
    }
}

/// Storage was seen sending 400 MB/s to every worker (tasks' reads from a local disk); the links
/// between workers are not measured yet (predicted 100 MB/s). Without a cap, storage is the
/// fastest source, and GDS reads every copy from it, one after the other. With
/// `--storage-bandwidth-cap 100MB/s`, which the workers hold their storage reads to, storage is
/// planned at 100 MB/s: it sends the first copy, and the others come from the workers.
#[test]
fn with_a_storage_cap_a_batch_reads_storage_once_and_copies_on_from_the_workers() {
    for (cap, want) in [(None, (1, 3, 3)), (Some(100e6), (1, 3, 1))] {
        let mut env = Env::new(CoreConfig {
            storage_cap: cap,
            ..CoreConfig::default()
        });
        for name in ["w1", "w2", "w3"] {
            let w = env.join(name, 1, None);
            let read = ToDispatcher::Transferred {
                from: None,
                bytes: 400_000_000,
                seconds: 1.0,
            };
            env.from(w, read);
        }
        env.take();
        let id = stage(&mut env, 40 << 20);
        let (sources, at_first) = copy_until_done(&mut env, id);
        let storage = sources
            .iter()
            .filter(|(_, s)| matches!(s, InputSource::Storage))
            .count();
        assert_eq!(
            (at_first, sources.len(), storage),
            want,
            "cap {cap:?}: {sources:?}"
        );
    }
}

/// A copy of a batch read from storage counts in the shares of the cap as a task's read does:
/// its worker gets 1.1 of the 1.3 parts (its read, and each worker's idle 0.1), not a third.
#[test]
fn a_copy_read_from_storage_gets_its_share_of_the_cap() {
    let mut env = Env::new(CoreConfig {
        storage_cap: Some(130e6),
        ..CoreConfig::default()
    });
    for name in ["w1", "w2", "w3"] {
        env.join(name, 1, None);
    }
    env.take();
    stage(&mut env, 40 << 20);
    let (reader, source) = fetches(&env)[0].clone();
    assert!(matches!(source, InputSource::Storage), "{source:?}");
    env.tick();
    let share = env
        .take()
        .into_iter()
        .filter_map(|(n, m)| match m {
            ToWorker::StorageRate { bytes_per_s } if n == reader => bytes_per_s,
            _ => None,
        })
        .last();
    let share = share.expect("a new share for the reader");
    assert!((share - 110e6).abs() < 1.0, "{share}");
}
