//! Input lookups: the size and source version of each input, asked of a worker.
//!
//! The dispatcher never reads storage itself (docs/security.md): a client must not learn through
//! it what exists on the dispatcher's host, nor make it send requests to addresses only it can
//! reach. Workers read the inputs anyway, with the credentials and mounts tasks use. So each
//! submitted batch's distinct inputs are sent to connected workers in requests of at most
//! [`CHUNK`] URIs, round robin; a worker looks each one up concurrently, each bounded by the
//! lookup timeout, and answers with a size and version or an error per URI. A URI already being
//! looked up for an earlier batch is not asked again: later tasks join that lookup. Requests to a
//! worker that is lost go to another one; with no worker connected they wait.

use super::comm::Comm;
use crate::proto::{LookupResult, ToWorker};
use diffuse_core::{NodeId, TaskId};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::time::Duration;

/// A worker's answer for one URI: the URI, (size, version) or the error, and who was waiting.
pub type Answer = (String, Result<(u64, String), String>, Vec<Waiter>);

/// Who waits for a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiter {
    /// A submitted task, for its input's size.
    Task(TaskId),
    /// A batch being staged (`diffuse stage`), by its number.
    Stage(u64),
}

/// Most URIs in one request to a worker.
pub const CHUNK: usize = 512;

/// Lookups waiting, and in flight.
#[derive(Default)]
pub struct Lookups {
    /// URIs not yet sent (no worker yet, or their worker was lost).
    queue: VecDeque<String>,
    /// Who waits for each URI queued or in flight.
    waiting: FxHashMap<String, Vec<Waiter>>,
    /// Requests in flight: id -> (worker, URIs).
    inflight: FxHashMap<u64, (NodeId, Vec<String>)>,
    next_id: u64,
    turn: usize,
}

impl Lookups {
    /// `task` needs `uri` looked up.
    pub fn want(&mut self, uri: &str, task: TaskId) {
        self.want_for(uri, Waiter::Task(task));
    }

    /// `waiter` needs `uri` looked up.
    pub fn want_for(&mut self, uri: &str, waiter: Waiter) {
        match self.waiting.get_mut(uri) {
            Some(w) => w.push(waiter),
            None => {
                self.waiting.insert(uri.to_string(), vec![waiter]);
                self.queue.push_back(uri.to_string());
            }
        }
    }

    /// Whether any lookup is waiting to be sent.
    pub fn has_queued(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Send what is queued to `workers`, round robin.
    pub fn send(&mut self, workers: &[NodeId], comm: &mut dyn Comm, timeout: Duration) {
        if workers.is_empty() {
            return;
        }
        while !self.queue.is_empty() {
            let n = self.queue.len().min(CHUNK);
            let uris: Vec<String> = self.queue.drain(..n).collect();
            let node = workers[self.turn % workers.len()];
            self.turn = self.turn.wrapping_add(1);
            let id = self.next_id;
            self.next_id += 1;
            let msg = ToWorker::Lookup {
                id,
                uris: uris.clone(),
                timeout_ms: timeout.as_millis() as u64,
            };
            if !comm.send(node, msg) {
                // Its session is closing; the loss will be reported: try another next round.
                self.queue.extend(uris);
                return;
            }
            self.inflight.insert(id, (node, uris));
        }
    }

    /// A worker answered request `id`: each URI it was asked with its result and the tasks
    /// waiting for it. Results for URIs it was not asked are ignored; a URI it left out is
    /// asked again.
    pub fn answered(&mut self, from: NodeId, id: u64, results: Vec<LookupResult>) -> Vec<Answer> {
        let Some((node, asked)) = self.inflight.remove(&id) else {
            return Vec::new();
        };
        if node != from {
            self.inflight.insert(id, (node, asked));
            return Vec::new();
        }
        let mut by_uri: FxHashMap<String, LookupResult> =
            results.into_iter().map(|r| (r.uri.clone(), r)).collect();
        let mut out = Vec::with_capacity(asked.len());
        for uri in asked {
            let Some(r) = by_uri.remove(&uri) else {
                self.queue.push_back(uri);
                continue;
            };
            let result = match (r.size, r.version, r.error) {
                (_, _, Some(e)) => Err(e),
                (Some(size), Some(version), None) => Ok((size, version)),
                _ => Err("the worker's answer had neither a size and version nor an error".into()),
            };
            let tasks = self.waiting.remove(&uri).unwrap_or_default();
            out.push((uri, result, tasks));
        }
        out
    }

    /// `node` is gone: what it was asked goes to another worker.
    pub fn node_lost(&mut self, node: NodeId) {
        let lost: Vec<u64> = self
            .inflight
            .iter()
            .filter(|(_, (n, _))| *n == node)
            .map(|(id, _)| *id)
            .collect();
        for id in lost {
            if let Some((_, uris)) = self.inflight.remove(&id) {
                for uri in uris.into_iter().rev() {
                    self.queue.push_front(uri);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::comm::RecordingComm;
    use super::*;

    /// The lookups sent to `node` since message `from` of the recording.
    fn lookups_to(comm: &RecordingComm, node: NodeId, from: usize) -> Vec<(u64, Vec<String>)> {
        comm.log()
            .sent_since(from)
            .iter()
            .filter_map(|(n, m)| match m {
                ToWorker::Lookup { id, uris, .. } if *n == node => Some((*id, uris.clone())),
                _ => None,
            })
            .collect()
    }

    fn ok(uri: &str, size: u64) -> LookupResult {
        LookupResult {
            uri: uri.into(),
            size: Some(size),
            version: Some(format!("{size}:v")),
            error: None,
        }
    }

    #[test]
    fn lookups_join_chunk_resend_and_refuse_strangers() {
        let mut comm = RecordingComm::default();
        let (w1, w2) = (NodeId(1), NodeId(2));
        for n in [w1, w2] {
            comm.attach(n, tokio::sync::mpsc::unbounded_channel().0);
        }
        let mut l = Lookups::default();
        for i in 0..(CHUNK + 1) {
            l.want(&format!("file:///f{i}"), TaskId(i as u64));
        }
        l.want("file:///f0", TaskId(9999));
        l.send(&[], &mut comm, Duration::from_secs(1));
        assert!(l.has_queued(), "no worker: nothing sent");
        l.send(&[w1, w2], &mut comm, Duration::from_secs(1));
        assert!(!l.has_queued());
        let [(a, uris)] = &lookups_to(&comm, w1, 0)[..] else {
            panic!("first request to worker 1")
        };
        let a = *a;
        assert_eq!(uris.len(), CHUNK);
        let [(b, rest)] = &lookups_to(&comm, w2, 0)[..] else {
            panic!("second request to worker 2")
        };
        let b = *b;
        assert_eq!(rest, &vec![format!("file:///f{CHUNK}")]);
        // An answer from the wrong worker is ignored.
        assert!(l
            .answered(NodeId(2), a, vec![ok("file:///f0", 1)])
            .is_empty());
        // f0 answered for both its tasks; f1 left out is asked again.
        let done = l.answered(
            NodeId(1),
            a,
            vec![ok("file:///f0", 1), ok("file:///zzz", 2)],
        );
        let f0 = done.iter().find(|d| d.0 == "file:///f0").unwrap();
        assert_eq!(f0.1, Ok((1, "1:v".into())));
        assert_eq!(
            f0.2,
            vec![Waiter::Task(TaskId(0)), Waiter::Task(TaskId(9999))]
        );
        assert!(done.iter().all(|d| d.0 != "file:///zzz"));
        assert!(l.has_queued(), "the URIs left out are queued again");
        // Worker 2 is lost: its request goes back to the queue.
        l.node_lost(NodeId(2));
        assert!(l.answered(NodeId(2), b, vec![]).is_empty());
        let from = comm.log().sent.len();
        l.send(&[w1], &mut comm, Duration::from_secs(1));
        let resent: Vec<String> = lookups_to(&comm, w1, from)
            .into_iter()
            .flat_map(|(_, uris)| uris)
            .collect();
        assert_eq!(resent.len(), CHUNK); // CHUNK - 1 left out + the lost one
        assert!(resent.contains(&format!("file:///f{CHUNK}")));
    }
}
