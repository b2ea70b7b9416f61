//! The registry of connected workers: each session by the core's [`NodeId`] and by its
//! connection id, with what the scheduler knows of the worker (name, peer URL, slots, when it
//! was last heard from, its cache). How a worker is reached is not here: that is the
//! scheduler's [`super::comm::Comm`].

use diffuse_core::NodeId;
use rustc_hash::FxHashMap;
use std::time::{Duration, Instant};

/// One connected worker.
pub struct Session {
    /// Its connection id (unique per WebSocket).
    pub conn: u64,
    /// Its name (`diffuse worker --name`).
    pub name: String,
    /// The pool request it answers, if the pool started it.
    pub request: Option<String>,
    /// Its peer data server.
    pub peer_url: String,
    /// Its slots (cores).
    pub slots: u32,
    /// When it was last heard from.
    pub last_seen: Instant,
    /// Its cache's quota, and what it last said it holds: bytes, objects.
    pub cache: (u64, u64, u64),
    /// What its warm Python processes hold, as it last said.
    pub warm: crate::proto::WarmUse,
}

/// Every connected worker. A session removed here is no longer the core's business (lost, left
/// or released).
#[derive(Default)]
pub struct Sessions {
    by_node: FxHashMap<NodeId, Session>,
    by_conn: FxHashMap<u64, NodeId>,
    next_node: u32,
}

impl Sessions {
    /// A node id never given before.
    pub fn next_node(&mut self) -> NodeId {
        let node = NodeId(self.next_node);
        self.next_node += 1;
        node
    }

    /// `node` is connected as `session`.
    pub fn insert(&mut self, node: NodeId, session: Session) {
        self.by_conn.insert(session.conn, node);
        self.by_node.insert(node, session);
    }

    /// `node`'s session is over; its connection's messages are ignored from now on.
    pub fn remove(&mut self, node: NodeId) -> Option<Session> {
        let s = self.by_node.remove(&node)?;
        self.by_conn.remove(&s.conn);
        Some(s)
    }

    /// The node of connection `conn`, if its session is current.
    pub fn node_of(&self, conn: u64) -> Option<NodeId> {
        self.by_conn.get(&conn).copied()
    }

    /// The session of `node`.
    pub fn get(&self, node: &NodeId) -> Option<&Session> {
        self.by_node.get(node)
    }

    /// The session of `node`, to change.
    pub fn get_mut(&mut self, node: &NodeId) -> Option<&mut Session> {
        self.by_node.get_mut(node)
    }

    /// Whether `node` is connected.
    pub fn contains(&self, node: &NodeId) -> bool {
        self.by_node.contains_key(node)
    }

    /// Every session, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&NodeId, &Session)> {
        self.by_node.iter()
    }

    /// Every session, in no order.
    pub fn values(&self) -> impl Iterator<Item = &Session> {
        self.by_node.values()
    }

    /// Every connected node, in no order.
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.by_node.keys().copied()
    }

    /// Connected workers.
    pub fn len(&self) -> usize {
        self.by_node.len()
    }

    /// Whether none is connected.
    pub fn is_empty(&self) -> bool {
        self.by_node.is_empty()
    }

    /// `node`'s name, if connected.
    pub fn name(&self, node: &NodeId) -> Option<&str> {
        self.by_node.get(node).map(|s| s.name.as_str())
    }

    /// A connected worker named `name` (several may share a name: any one).
    pub fn by_name(&self, name: &str) -> Option<NodeId> {
        self.by_node
            .iter()
            .find(|(_, s)| s.name == name)
            .map(|(n, _)| *n)
    }

    /// The worker whose peer server is at `url`.
    pub fn at_url(&self, url: &str) -> Option<NodeId> {
        self.by_node
            .iter()
            .find(|(_, s)| s.peer_url == url)
            .map(|(n, _)| *n)
    }

    /// Workers not heard from for longer than `timeout` at `now`.
    pub fn silent(&self, timeout: Duration, now: Instant) -> Vec<NodeId> {
        self.by_node
            .iter()
            .filter(|(_, s)| now.saturating_duration_since(s.last_seen) > timeout)
            .map(|(n, _)| *n)
            .collect()
    }
}
