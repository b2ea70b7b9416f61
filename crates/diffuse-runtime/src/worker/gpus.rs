//! The worker's GPUs: which are free, and the ones lent to a running attempt, given back when it
//! ends.

use std::collections::BTreeSet;
use std::sync::Mutex;

/// The GPUs tasks may be given.
pub(super) struct GpuPool {
    /// Their ids (`WorkerConfig::gpus`).
    ids: Vec<String>,
    /// Positions in `ids` of the GPUs not given to a running task.
    free: Mutex<BTreeSet<usize>>,
    /// Set every task's `CUDA_VISIBLE_DEVICES` to exactly its GPUs (none: empty): true when this
    /// worker has GPUs or this machine shows some, so a task that asked for none uses none.
    pub(super) env: bool,
}

impl GpuPool {
    /// The GPUs of `ids`, all free; `env`: see [`GpuPool::env`].
    pub(super) fn new(ids: Vec<String>, env: bool) -> GpuPool {
        GpuPool {
            free: Mutex::new((0..ids.len()).collect()),
            ids,
            env,
        }
    }

    /// Take `n` free GPUs (the dispatcher only sends a task where that many are free).
    pub(super) fn take(&self, n: u32) -> Gpus<'_> {
        let mut free = self.free.lock().expect("gpu lock");
        let indices: Vec<usize> = free.iter().copied().take(n as usize).collect();
        for i in &indices {
            free.remove(i);
        }
        if indices.len() < n as usize {
            tracing::warn!("asked for {n} GPUs, {} free", indices.len());
        }
        Gpus {
            pool: self,
            indices,
        }
    }
}

/// GPUs given to a running attempt (positions in the pool); given back when dropped.
pub(super) struct Gpus<'a> {
    pool: &'a GpuPool,
    indices: Vec<usize>,
}

impl Gpus<'_> {
    /// Their ids, as `CUDA_VISIBLE_DEVICES` takes them.
    pub(super) fn ids(&self) -> Vec<String> {
        self.indices
            .iter()
            .map(|&i| self.pool.ids[i].clone())
            .collect()
    }
}

impl Drop for Gpus<'_> {
    fn drop(&mut self) {
        self.pool
            .free
            .lock()
            .expect("gpu lock")
            .extend(self.indices.iter().copied());
    }
}
