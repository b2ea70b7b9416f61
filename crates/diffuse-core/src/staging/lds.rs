//! LDS (coordinated-transfers-gridftp-gds.txt, Algorithm 3): each destination on its own, its
//! files smallest first, one chunk at a time, with GDS's replica selection but blind to what
//! other destinations take.

use super::batch::{Batch, Chunk, Pending, Rules};
use super::schedule::StageSchedule;
use crate::bandwidth::{Endpoint, Predictor};
use std::collections::BTreeSet;

/// LDS's rules: capacities only, chunks from several sources.
const LOCAL: Rules = Rules {
    coordinated: false,
    whole_file: false,
    one_source: false,
};

/// Each destination alone, smallest files first, chunks from several replicas.
#[derive(Clone, Debug, Default)]
pub struct Lds;

impl StageSchedule for Lds {
    fn arrange(&self, pending: &mut [Pending]) {
        // Each destination takes its files smallest first.
        pending.sort_by_key(|p| (p.req.dest, p.req.size, p.req.object));
    }
    fn next(&mut self, batch: &Batch, pred: &Predictor) -> Option<(usize, Chunk, Vec<f64>)> {
        each_destination_alone(batch, pred, LOCAL, |_| Some(None))
    }
    fn boxed_clone(&self) -> Box<dyn StageSchedule> {
        Box::new(self.clone())
    }
}

/// The first destination with nothing under way starts its next file's next chunk, blind to
/// the others (LDS and naive). `source_for(i)`: the one source request `i` must come from
/// (`Some(None)`: any), or None to pass it over for now.
pub fn each_destination_alone(
    batch: &Batch,
    pred: &Predictor,
    rules: Rules,
    mut source_for: impl FnMut(usize) -> Option<Option<Endpoint>>,
) -> Option<(usize, Chunk, Vec<f64>)> {
    let mut busy: BTreeSet<_> = batch
        .pending
        .iter()
        .filter(|p| p.busy)
        .map(|p| p.req.dest)
        .collect();
    // Each idle destination's first request that some source can serve.
    for (i, p) in batch.pending.iter().enumerate() {
        if p.busy || p.next >= p.req.size || busy.contains(&p.req.dest) {
            continue;
        }
        let Some(only) = source_for(i) else {
            continue;
        };
        match batch.plan(p, pred, rules, only) {
            Some((chunk, rates)) => return Some((i, chunk, rates)),
            // Its destination takes its next file only once this one can move.
            None => {
                busy.insert(p.req.dest);
            }
        }
    }
    None
}
