//! Reading inputs, simulated: where each input of a dispatched task really comes from (its
//! node's cache, a fetch already under way there, a peer, or storage), the flows that move it,
//! and the bytes booked to each second of the time series.

use super::*;
use diffuse_core::bandwidth::Endpoint;

impl Simulation {
    /// The dispatch reached its node: decide where each input really comes from and start reading.
    pub(super) fn deliver(&mut self, task: TaskId) -> Result<(), SimError> {
        let t = secs(self.now);
        let tb = self.cfg.testbed.clone();
        let caching = self.core.caches_for(task);
        let mut r = self.running.remove(&task).expect("dispatched task");
        r.delivered = t;
        let node = r.node;
        let mut starts = Vec::new();
        let mut joined = 0;
        for (i, (object, _size, src)) in r.inputs.iter().enumerate() {
            let here = &self.nodes[&node];
            // Single-flight: an object this node is already fetching is waited for, not fetched
            // again (the core sends such tasks here on purpose, as `Source::Local`).
            if caching && !here.cache.contains(*object) {
                if let Some(waiters) = self.inflight.get_mut(&(node, *object)) {
                    waiters.push((task, i as u32));
                    self.accesses[Used::Local as usize] += 1;
                    self.current.accesses[Used::Local as usize] += 1;
                    r.plan.push((Vec::new(), Used::Local));
                    r.requested.push(t);
                    joined += 1;
                    continue;
                }
            }
            let (resources, used, latency) = match src {
                Source::Local if here.cache.contains(*object) => {
                    (vec![here.disk], Used::Local, 0.0)
                }
                Source::Peer(p)
                    if caching
                        && self
                            .nodes
                            .get(p)
                            .is_some_and(|pn| pn.cache.contains(*object)) =>
                {
                    (
                        transfers::peer_path(&self.nodes[p], here),
                        Used::Peer,
                        tb.peer_latency_s,
                    )
                }
                _ => (self.storage_path(here), Used::Storage, tb.storage_latency_s),
            };
            let read_from = match (used, src) {
                (Used::Local, _) => Some(node),
                (Used::Peer, Source::Peer(p)) => Some(*p),
                _ => None,
            };
            if let Some(holder) = read_from {
                if self.pushed_unread.remove(&(holder, *object)) {
                    self.handoff.useful += 1;
                }
            }
            if used == Used::Local {
                self.nodes
                    .get_mut(&node)
                    .expect("node")
                    .cache
                    .touch(*object);
            } else if caching {
                self.inflight.insert((node, *object), Vec::new());
            }
            let k = used as usize;
            self.accesses[k] += 1;
            self.current.accesses[k] += 1;
            r.plan.push((resources, used));
            r.requested.push(t);
            starts.push((i as u32, latency));
        }
        r.pending = starts.len() as u32 + joined;
        let compute = self.arrival(task).compute_s;
        self.running.insert(task, r);
        if starts.is_empty() && joined == 0 {
            self.running.get_mut(&task).expect("running task").staged = t;
            self.push(
                self.now + Duration::from_secs_f64(compute),
                Ev::ComputeDone(task),
            );
        }
        for (i, latency) in starts {
            if latency > 0.0 {
                self.push(
                    self.now + Duration::from_secs_f64(latency),
                    Ev::FlowStart(task, i),
                );
            } else {
                self.event(Ev::FlowStart(task, i))?;
            }
        }
        Ok(())
    }

    /// One input of `task` has been read.
    pub(super) fn input_done(
        &mut self,
        task: TaskId,
        i: usize,
        bytes: u64,
    ) -> Result<(), SimError> {
        let caching = self.core.caches_for(task);
        let r = self.running.get_mut(&task).expect("running task");
        let (object, size, planned) = r.inputs[i];
        let used = r.plan[i].1;
        let node = r.node;
        self.bytes[used as usize] += bytes;
        let requested = r.requested[i];
        let took = secs(self.now) - requested;
        // The predictor learns the rate, as from a live worker's transfer report.
        let from = match (used, planned) {
            (Used::Peer, Source::Peer(p)) => Some(Endpoint::Node(p)),
            (Used::Storage, _) => Some(Endpoint::Storage),
            _ => None,
        };
        if let Some(from) = from {
            self.core.handle_transfer(from, node, bytes, took);
        }
        self.access_time[used as usize] += took;
        r.pending -= 1;
        let ready = r.pending == 0;
        self.book_bytes(requested, secs(self.now), bytes, used);
        if used != Used::Local && caching {
            let n = self.nodes.get_mut(&node).expect("node of a running task");
            if let Admission::Stored(evicted) = n.cache.insert(object, size) {
                for o in evicted {
                    self.pushed_unread.remove(&(node, o));
                    self.core
                        .handle_object_evicted(node, o, self.now)
                        .map_err(|e| self.core_err(e))?;
                }
                self.core
                    .handle_object_cached(node, object, self.now)
                    .map_err(|e| self.core_err(e))?;
            }
        }
        if ready {
            self.running.get_mut(&task).expect("running task").staged = secs(self.now);
            let compute = self.arrival(task).compute_s;
            self.push(
                self.now + Duration::from_secs_f64(compute),
                Ev::ComputeDone(task),
            );
        }
        if used != Used::Local {
            for (waiter, j) in self.inflight.remove(&(node, object)).unwrap_or_default() {
                self.joined_fetch_done(waiter, j as usize);
            }
        }
        Ok(())
    }

    /// A task that waited for its node's fetch of an input (single-flight) has that input.
    pub(super) fn joined_fetch_done(&mut self, task: TaskId, i: usize) {
        let t = secs(self.now);
        let r = self
            .running
            .get_mut(&task)
            .expect("waiting task is running");
        let size = r.inputs[i].1;
        let requested = r.requested[i];
        r.pending -= 1;
        let ready = r.pending == 0;
        self.bytes[Used::Local as usize] += size;
        self.access_time[Used::Local as usize] += t - requested;
        self.current.bytes_local += size as f64;
        if ready {
            r.staged = t;
            let compute = self.arrival(task).compute_s;
            self.push(
                self.now + Duration::from_secs_f64(compute),
                Ev::ComputeDone(task),
            );
        }
    }

    /// Spread a transfer's bytes over the per-second samples it was in flight for, so the
    /// throughput series shows bytes as they moved, not when the transfer ended.
    fn book_bytes(&mut self, from: f64, to: f64, bytes: u64, used: Used) {
        let current = self.samples.len();
        let first = (from.max(0.0).floor() as usize).min(current);
        let last = (to.floor() as usize).min(current);
        let span = to - from;
        for k in first..=last {
            let share = if span <= 0.0 || first == last {
                1.0
            } else {
                let lo = from.max(k as f64);
                let hi = to.min(k as f64 + 1.0);
                ((hi - lo) / span).max(0.0)
            };
            let sample = if k == current {
                &mut self.current
            } else {
                &mut self.samples[k]
            };
            let b = bytes as f64 * share;
            match used {
                Used::Local => sample.bytes_local += b,
                Used::Peer => sample.bytes_peer += b,
                Used::Storage => sample.bytes_storage += b,
            }
        }
    }
}
