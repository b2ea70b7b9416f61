//! The naive schedule: each destination on its own, each file whole from one replica chosen at
//! random (seeded), the baseline GDS and LDS are compared with.

use super::batch::{Batch, Chunk, Rules};
use super::lds::each_destination_alone;
use super::schedule::StageSchedule;
use crate::bandwidth::{Endpoint, Predictor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashMap;

/// Whole files from one source.
const WHOLE: Rules = Rules {
    coordinated: false,
    whole_file: true,
    one_source: true,
};

/// Each destination alone, each file whole from a random replica.
#[derive(Clone, Debug)]
pub struct Naive {
    /// Each request's one source, once drawn (drawn again if it fails).
    fixed: FxHashMap<usize, Endpoint>,
    rng: ChaCha8Rng,
}

impl Naive {
    /// No source drawn yet; `seed` drives the draws.
    pub fn new(seed: u64) -> Naive {
        Naive {
            fixed: FxHashMap::default(),
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }
}

impl StageSchedule for Naive {
    fn next(&mut self, batch: &Batch, pred: &Predictor) -> Option<(usize, Chunk, Vec<f64>)> {
        let fixed = &mut self.fixed;
        let rng = &mut self.rng;
        each_destination_alone(batch, pred, WHOLE, |i| {
            if let Some(f) = fixed.get(&i) {
                return Some(Some(*f));
            }
            let sources = batch.sources(&batch.pending[i], 0);
            if sources.is_empty() {
                return None;
            }
            let k = rng.random_range(0..sources.len());
            fixed.insert(i, sources[k].0);
            Some(Some(sources[k].0))
        })
    }
    fn source_failed(&mut self, request: usize, source: Endpoint) {
        if self.fixed.get(&request) == Some(&source) {
            self.fixed.remove(&request);
        }
    }
    fn boxed_clone(&self) -> Box<dyn StageSchedule> {
        Box::new(self.clone())
    }
}
