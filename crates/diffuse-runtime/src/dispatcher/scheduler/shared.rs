//! What the scheduler's owners act through ([`Shared`]): the core, the connected workers, the
//! object table and the outside, borrowed from the scheduler for one step, with the time of it.
//! The helpers here are the ones several owners need: a message to a worker if it is still
//! connected, a peer read of an object, the extra sources of a multi-source read.

use super::clock::Now;
use super::comm::Comm;
use super::objects::ObjectTable;
use super::sessions::Sessions;
use crate::proto::{InputSource, ToWorker, MULTI_SOURCE_MIN};
use diffuse_core::{Core, NodeId, ObjectId, Time};

/// The scheduler's core, sessions, objects and [`Comm`], borrowed for one step.
pub struct Shared<'a> {
    /// The scheduling core.
    pub core: &'a mut Core,
    /// Connected workers.
    pub sessions: &'a Sessions,
    /// Every object named so far.
    pub objects: &'a mut ObjectTable,
    /// The outside.
    pub comm: &'a mut dyn Comm,
    /// The core's time of this step.
    pub now: Time,
    /// The clock's reading for this step.
    pub at: Now,
}

impl Shared<'_> {
    /// Send `msg` to `node` if it is connected.
    pub fn send_connected(&mut self, node: NodeId, msg: ToWorker) {
        if self.sessions.contains(&node) {
            self.comm.send(node, msg);
        }
    }

    /// The holders of `o` other than `from` that worker `to` may read it from, fastest
    /// predicted first, as peer URLs: up to 15 to read from at the same time when it is large
    /// enough to be read in chunks (`worker::multi`), else up to 2 to read from in turn if a
    /// read fails (a holder gone mid-read), before storage or a remake.
    pub fn other_holders(&self, o: ObjectId, size: u64, from: NodeId, to: NodeId) -> Vec<String> {
        let most = if size < MULTI_SOURCE_MIN { 2 } else { 15 };
        self.core
            .holders_by_rate(o, to, &[from, to])
            .iter()
            .filter_map(|h| self.sessions.get(h).map(|s| s.peer_url.clone()))
            .take(most)
            .collect()
    }

    /// Worker `to` fetches `o` (`size` bytes) from worker `from`, as a peer read; it reports
    /// the copy when it is cached. False (nothing sent) if either is not connected.
    pub fn fetch_from_peer(&mut self, o: ObjectId, size: u64, from: NodeId, to: NodeId) -> bool {
        let (Some(source), true) = (self.sessions.get(&from), self.sessions.contains(&to)) else {
            return false;
        };
        let source = InputSource::Peer {
            url: source.peer_url.clone(),
            also: self.other_holders(o, size, from, to),
        };
        let input = self.objects.input(o, size, source);
        self.comm.send(
            to,
            ToWorker::Fetch {
                inputs: vec![input],
            },
        );
        true
    }
}
