//! Places under a server's connection limit, and which connection gives way when they run out.
//!
//! Every accepted connection is registered, in accept order, as **unproven** until a request on
//! it shows a valid token: the router's token check calls [`Connection::prove`] on the handle
//! the server puts in each request's extensions. When no place is free, the oldest unproven
//! connection that is **idle** (no request in flight, which includes waiting for its first byte
//! or its TLS handshake and sending a request head) or whose request showed no valid token
//! ([`Connection::showed_no_token`]: a stranger sending a body slowly) is closed and its place
//! given to the newcomer; when there is none, the newcomer is closed as before. A proven
//! connection (an authorised client, a worker's session) never gives way. Otherwise a request in
//! flight keeps its connection's place until its response body is sent: a worker's peer server,
//! whose router neither proves nor doubts, never cuts a transfer short.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use tokio::sync::Notify;

/// A connection's `busy` count once it was chosen to give way: no request may make it busy again.
const EVICTED: usize = usize::MAX / 2;

/// Counters of one server's connection limit.
#[derive(Debug, Default)]
pub struct ConnectionStats {
    evicted: AtomicU64,
    refused: AtomicU64,
}

impl ConnectionStats {
    /// Connections that had shown no valid token (idle, or whose request showed none), closed to
    /// make room for a new one.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// New connections closed at once because every place was taken by a proven or busy one.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    pub(super) fn count_eviction(&self) -> u64 {
        self.evicted.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(super) fn count_refusal(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }
}

type Unproven = Mutex<BTreeMap<u64, Arc<State>>>;

/// The unproven connections of one server, oldest first.
#[derive(Default)]
pub(super) struct Registry {
    unproven: Arc<Unproven>,
    next: AtomicU64,
}

struct State {
    id: u64,
    peer: SocketAddr,
    /// Requests in flight (until their response body is sent), or [`EVICTED`] and more.
    busy: AtomicUsize,
    proven: AtomicBool,
    /// A request showed no valid token: the connection gives way even while busy.
    doubted: AtomicBool,
    close: Notify,
    unproven: Weak<Unproven>,
}

/// The connection a request came on, in the request's extensions (`Extension<Connection>` or
/// `request.extensions().get::<Connection>()`): a router marks it proven once the request shows
/// a valid token, so the connection keeps its place under the limit.
#[derive(Clone)]
pub struct Connection(Arc<State>);

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.0.peer)
            .field("proven", &self.is_proven())
            .finish()
    }
}

impl Connection {
    /// This connection showed a valid token: it no longer gives way to new connections.
    pub fn prove(&self) {
        if self.0.proven.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(unproven) = self.0.unproven.upgrade() {
            unproven.lock().expect("registry").remove(&self.0.id);
        }
    }

    /// A request on this connection showed no valid token (it will be answered 401, or is for a
    /// public page): unless the connection is proven, it gives way to a new one when places run
    /// out even while this request is in flight (a body sent slowly cannot hold a place).
    pub fn showed_no_token(&self) {
        self.0.doubted.store(true, Ordering::Release);
    }

    /// Whether [`Connection::prove`] was called.
    pub fn is_proven(&self) -> bool {
        self.0.proven.load(Ordering::Acquire)
    }

    /// A request starts on this connection; it is in flight until the guard is dropped.
    pub(super) fn start_request(&self) -> InFlight {
        self.0.busy.fetch_add(1, Ordering::AcqRel);
        InFlight(self.0.clone())
    }

    /// Resolves when the server chose this connection to give way.
    pub(super) async fn evicted(&self) {
        self.0.close.notified().await
    }
}

impl Registry {
    /// Register a newly accepted connection as unproven; it leaves the registry when proven,
    /// evicted, or when the returned guard is dropped (the connection ended).
    pub(super) fn register(&self, peer: SocketAddr) -> (Connection, Registered) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(State {
            id,
            peer,
            busy: AtomicUsize::new(0),
            proven: AtomicBool::new(false),
            doubted: AtomicBool::new(false),
            close: Notify::new(),
            unproven: Arc::downgrade(&self.unproven),
        });
        self.unproven
            .lock()
            .expect("registry")
            .insert(id, state.clone());
        (
            Connection(state),
            Registered {
                id,
                unproven: Arc::downgrade(&self.unproven),
            },
        )
    }

    /// Choose the oldest unproven connection that is idle or showed no token, tell it to close,
    /// and return its peer; None if every open connection is proven or busy with a request that
    /// was not doubted.
    pub(super) fn evict_oldest(&self) -> Option<SocketAddr> {
        let mut unproven = self.unproven.lock().expect("registry");
        let victim = unproven.values().find(|s| {
            s.doubted.load(Ordering::Acquire)
                || s.busy
                    .compare_exchange(0, EVICTED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
        })?;
        let victim = victim.clone();
        unproven.remove(&victim.id);
        victim.close.notify_one();
        Some(victim.peer)
    }
}

/// Removes its connection from the registry when the connection ends.
pub(super) struct Registered {
    id: u64,
    unproven: Weak<Unproven>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Some(unproven) = self.unproven.upgrade() {
            unproven.lock().expect("registry").remove(&self.id);
        }
    }
}

/// A request in flight on a connection.
pub(super) struct InFlight(Arc<State>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request in flight until it is sent (or dropped).
pub(super) struct Guarded {
    pub(super) body: axum::body::Body,
    pub(super) _in_flight: InFlight,
}

impl http_body::Body for Guarded {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
