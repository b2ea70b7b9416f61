//! GDS (coordinated-transfers-gridftp-gds.txt, Algorithm 1): one scheduler for the whole
//! batch. Every pending request's next chunk is planned with the bandwidth already booked, and
//! the one that would finish first starts (MinMin). A chunk that only slow sources could serve
//! now (more than [`WAIT_FACTOR`] times the time it would take with every source free) waits
//! for the fast ones instead: this project's addition.

use super::batch::EPSILON;
use super::batch::{Batch, Chunk, Rules};
use super::schedule::StageSchedule;
use crate::bandwidth::{Endpoint, Predictor};

/// GDS waits instead of starting a chunk that would take more than this many times what it
/// would with every source free.
pub const WAIT_FACTOR: f64 = 2.0;

const COORDINATED: Rules = Rules {
    coordinated: true,
    whole_file: false,
    one_source: false,
};
const UNHURRIED: Rules = Rules {
    coordinated: false,
    whole_file: false,
    one_source: false,
};

/// MinMin over every pending chunk, bandwidth booked as it goes.
#[derive(Clone, Debug, Default)]
pub struct Gds;

impl StageSchedule for Gds {
    /// Of every pending request's next chunk, the one that would end first.
    fn next(&mut self, batch: &Batch, pred: &Predictor) -> Option<(usize, Chunk, Vec<f64>)> {
        let mut best: Option<(f64, usize, Chunk, Vec<f64>)> = None;
        for (i, p) in batch.pending.iter().enumerate() {
            if p.busy || p.next >= p.req.size {
                continue;
            }
            if batch.in_left(Endpoint::Node(p.req.dest)) < EPSILON {
                continue;
            }
            let Some((chunk, rates)) = batch.plan(p, pred, COORDINATED, None) else {
                continue;
            };
            // A chunk that only slow sources could take now waits for the fast ones, busy
            // with other chunks, to free up: started now it would finish later than that.
            let unhurried = batch
                .plan(p, pred, UNHURRIED, None)
                .map_or(f64::MAX, |(c, _)| c.expected_s);
            if chunk.expected_s > WAIT_FACTOR * unhurried {
                continue;
            }
            if best.as_ref().is_none_or(|b| chunk.expected_s < b.0) {
                best = Some((chunk.expected_s, i, chunk, rates));
            }
        }
        best.map(|(_, i, c, r)| (i, c, r))
    }
    fn boxed_clone(&self) -> Box<dyn StageSchedule> {
        Box::new(self.clone())
    }
}
