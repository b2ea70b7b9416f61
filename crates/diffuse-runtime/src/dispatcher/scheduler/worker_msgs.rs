//! What workers say of themselves and of their caches, taken in by the owners it concerns: a
//! joining worker introduced to the core (capacity, name, cache, rack, when it leaves), the
//! copies a worker holds (a hand-off, a prefetch or a staged batch landed; a stale version
//! dropped), a fetch that failed, a transfer's rate. A worker's report of an attempt is
//! [`super::outcomes`]'; its answers to lookups, [`super::intake`]'s.

use super::batches::Batches;
use super::placement::NodeNames;
use super::pool::PoolLink;
use super::prefetch::Prefetch;
use super::sessions::Session;
use super::shared::Shared;
use crate::proto::{Held, ToDispatcher, ToWorker};
use diffuse_core::bandwidth::Endpoint;
use diffuse_core::{NodeId, Resources};
use std::time::Duration;

/// Worker `node` (on connection `conn`) says hello: the core learns its capacity, name, cache,
/// rack and when it leaves. Its session and the objects it already holds, or None if `hello`
/// is not a hello or the core refuses the worker.
pub fn introduce(
    conn: u64,
    hello: ToDispatcher,
    node: NodeId,
    sh: &mut Shared,
    names: &mut NodeNames,
    prefetch: &mut Prefetch,
) -> Option<(Session, Vec<Held>)> {
    let ToDispatcher::Hello {
        name,
        slots,
        memory,
        gpus,
        disk,
        peer_url,
        held,
        request,
        leaves_in_s,
        eviction,
        cache_quota,
        rack,
        ..
    } = hello
    else {
        return None;
    };
    let now = sh.now;
    let capacity = Resources {
        cores: slots.max(1),
        memory: memory.unwrap_or(u64::MAX),
        gpus,
        disk: disk.unwrap_or(u64::MAX),
    };
    if let Err(e) = sh.core.handle_node_joined_with(node, capacity, now) {
        tracing::error!("worker {name}: {e}");
        return None;
    }
    let label = names.id(&name);
    let _ = sh.core.handle_node_named(node, label);
    let _ = sh
        .core
        .handle_node_cache(node, cache_quota, eviction.unwrap_or_default(), now);
    if let Some(r) = rack.as_deref().filter(|r| !r.is_empty()) {
        let rack = prefetch.rack_id(r);
        let _ = sh.core.handle_node_rack(node, rack);
    }
    if let Some(s) = leaves_in_s.filter(|s| s.is_finite() && *s >= 0.0) {
        let ends = now + Duration::from_secs_f64(s.min(1e9));
        sh.core.handle_node_deadline(node, Some(ends));
    }
    let session = Session {
        conn,
        name,
        request,
        peer_url,
        slots,
        last_seen: sh.at.instant,
        cache: (cache_quota, 0, 0),
        warm: Default::default(),
    };
    Some((session, held))
}

/// `node` holds these objects. A version not yet known is taken as the current one until a
/// lookup says otherwise; a copy of another version than the current one is dropped.
pub fn cached(
    node: NodeId,
    held: Vec<Held>,
    sh: &mut Shared,
    mut pool: Option<&mut PoolLink>,
    prefetch: &mut Prefetch,
    batches: &mut Batches,
) {
    let now = sh.now;
    let mut stale = Vec::new();
    for h in held {
        let o = sh.objects.intern(&h.uri);
        let known = sh.objects.version_mut(o);
        if known.is_empty() {
            *known = h.version.clone();
        }
        if *known == h.version {
            let _ = sh.core.handle_object_cached(node, o, now);
            if let Some(p) = &mut pool {
                p.handed_off(node, o, sh.comm);
            }
            prefetch.move_ended(node, o, sh);
            batches.cached(node, o, sh);
        } else {
            stale.push(h.uri);
        }
    }
    if !stale.is_empty() {
        sh.send_connected(node, ToWorker::Drop { uris: stale });
    }
}

/// Worker `node` could not fetch `uri`.
pub fn fetch_failed(
    node: NodeId,
    uri: &str,
    error: &str,
    sh: &mut Shared,
    prefetch: &mut Prefetch,
    batches: &mut Batches,
) {
    tracing::info!(uri = %crate::uri::redacted(uri), "fetch failed: {error}");
    if let Some(o) = sh.objects.get(uri) {
        sh.core.handle_prefetch_failed(node, o, sh.now);
        prefetch.move_ended(node, o, sh);
        batches.fetch_failed(node, o, error, sh);
    }
}

/// `node` received `bytes` from `from` (a peer's URL, None: storage) in `seconds`.
pub fn transferred(
    node: NodeId,
    from: Option<&str>,
    bytes: u64,
    seconds: f64,
    sh: &mut Shared,
    batches: &mut Batches,
) {
    let from = match from {
        None => Endpoint::Storage,
        Some(url) => match sh.sessions.at_url(url) {
            Some(n) => Endpoint::Node(n),
            None => return, // it left
        },
    };
    sh.core.handle_transfer(from, node, bytes, seconds);
    batches.transferred(node, from, bytes, sh.sessions);
}
