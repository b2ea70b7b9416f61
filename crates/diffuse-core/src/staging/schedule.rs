//! The staging schedule trait: which chunk of a batch starts next.

use super::batch::{Batch, Chunk, Pending};
use crate::bandwidth::{Endpoint, Predictor};
use std::fmt;

/// A staging schedule: picks the next chunk to start, reading the batch (what is held where,
/// the bandwidth booked) and planning chunks with [`Batch::plan`]. A schedule's name (for
/// `diffuse stage --schedule`) and how it is built are written once, in [`super::registry`].
pub trait StageSchedule: fmt::Debug + Send {
    /// Put the requests in the order the schedule takes them, once, before the first chunk.
    fn arrange(&self, _pending: &mut [Pending]) {}
    /// The next chunk to start now: the index of its request in `batch.pending`, the chunk
    /// and the rate booked for each of its parts; None: wait for a chunk under way to end.
    fn next(&mut self, batch: &Batch, pred: &Predictor) -> Option<(usize, Chunk, Vec<f64>)>;
    /// `source` failed for request `request` (the batch shuns it for that request from now).
    fn source_failed(&mut self, _request: usize, _source: Endpoint) {}
    /// A copy, for a stager that is cloned.
    fn boxed_clone(&self) -> Box<dyn StageSchedule>;
}
