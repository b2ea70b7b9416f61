//! Bandwidth prediction from past transfers (coordinated-transfers-gridftp-gds.txt, section
//! 4.1.3): for each source -> destination pair, the rates the last transfers achieved, kept in
//! a circular window; the prediction is their mean, times a scale that a feedback loop moves:
//! when `successive` transfers in a row reach `up_fraction` of what was expected, the scale
//! grows by `step`; when they fall under `down_fraction` of it, it shrinks by `step`. A pair
//! never measured is predicted at `default` bytes per second.

use crate::ids::NodeId;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// One end of a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Endpoint {
    /// A node's cache.
    Node(NodeId),
    /// Persistent storage.
    Storage,
}

/// Settings of the predictor.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BandwidthConfig {
    /// Transfers remembered per pair.
    pub window: usize,
    /// Bytes/s predicted for a pair never measured.
    pub default: f64,
    /// A transfer reaching this fraction of the prediction counts toward scaling up.
    pub up_fraction: f64,
    /// A transfer under this fraction of the prediction counts toward scaling down.
    pub down_fraction: f64,
    /// Transfers in a row that move the scale.
    pub successive: u32,
    /// Factor the scale moves by.
    pub step: f64,
}

impl Default for BandwidthConfig {
    fn default() -> Self {
        BandwidthConfig {
            window: 8,
            default: 100e6,
            up_fraction: 0.9,
            down_fraction: 0.5,
            successive: 3,
            step: 1.2,
        }
    }
}

#[derive(Clone, Debug)]
struct Pair {
    rates: VecDeque<f64>,
    scale: f64,
    /// Transfers in a row above `up_fraction` (positive) or under `down_fraction` (negative).
    streak: i32,
}

/// What the predictor knows of one pair, for reports and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PairView {
    /// Source.
    pub from: Endpoint,
    /// Destination.
    pub to: Endpoint,
    /// Predicted bytes/s.
    pub predicted: f64,
    /// Transfers remembered.
    pub samples: usize,
    /// The feedback scale.
    pub scale: f64,
}

/// Each endpoint's best rate out and in ([`Predictor::best_rates`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BestRates {
    /// Sending.
    pub out: Vec<(Endpoint, f64)>,
    /// Receiving.
    pub into: Vec<(Endpoint, f64)>,
}

/// Per-pair achieved rates and predictions.
#[derive(Clone, Debug, Default)]
pub struct Predictor {
    cfg: BandwidthConfig,
    pairs: FxHashMap<(Endpoint, Endpoint), Pair>,
}

impl Predictor {
    /// An empty predictor.
    pub fn new(cfg: BandwidthConfig) -> Predictor {
        Predictor {
            cfg,
            pairs: FxHashMap::default(),
        }
    }

    /// Predicted bytes/s from `from` to `to`.
    pub fn predict(&self, from: Endpoint, to: Endpoint) -> f64 {
        match self.pairs.get(&(from, to)) {
            Some(p) if !p.rates.is_empty() => {
                p.scale * p.rates.iter().sum::<f64>() / p.rates.len() as f64
            }
            _ => self.cfg.default,
        }
    }

    /// A transfer of `bytes` from `from` to `to` took `secs`.
    pub fn observe(&mut self, from: Endpoint, to: Endpoint, bytes: u64, secs: f64) {
        if secs <= 0.0 || bytes == 0 {
            return;
        }
        let rate = bytes as f64 / secs;
        let expected = self.predict(from, to);
        let cfg = self.cfg;
        let p = self.pairs.entry((from, to)).or_insert(Pair {
            rates: VecDeque::new(),
            scale: 1.0,
            streak: 0,
        });
        let measured = !p.rates.is_empty();
        if measured && rate >= cfg.up_fraction * expected {
            p.streak = p.streak.max(0) + 1;
        } else if measured && rate < cfg.down_fraction * expected {
            p.streak = p.streak.min(0) - 1;
        } else {
            p.streak = 0;
        }
        if p.streak >= cfg.successive as i32 {
            p.scale *= cfg.step;
            p.streak = 0;
        } else if p.streak <= -(cfg.successive as i32) {
            p.scale /= cfg.step;
            p.streak = 0;
        }
        if p.rates.len() == cfg.window.max(1) {
            p.rates.pop_front();
        }
        p.rates.push_back(rate);
    }

    /// The best rate each endpoint was seen to send at, and to receive at, over the transfers
    /// remembered: estimates of its NIC each way (a link shaped or shared one way only is
    /// seen as such), the bandwidth the batch stager books ([`crate::staging::Stager::new`]'s
    /// caps). Endpoints never measured that way are left out.
    pub fn best_rates(&self) -> BestRates {
        let mut out: BTreeMap<Endpoint, f64> = BTreeMap::new();
        let mut into: BTreeMap<Endpoint, f64> = BTreeMap::new();
        for ((from, to), p) in &self.pairs {
            let top = p.rates.iter().copied().fold(0.0, f64::max);
            for (map, e) in [(&mut out, from), (&mut into, to)] {
                let b = map.entry(*e).or_insert(0.0);
                *b = b.max(top);
            }
        }
        BestRates {
            out: out.into_iter().collect(),
            into: into.into_iter().collect(),
        }
    }

    /// Every pair measured, for reports.
    pub fn pairs(&self) -> Vec<PairView> {
        let mut v: Vec<PairView> = self
            .pairs
            .iter()
            .map(|((from, to), p)| PairView {
                from: *from,
                to: *to,
                predicted: self.predict(*from, *to),
                samples: p.rates.len(),
                scale: p.scale,
            })
            .collect();
        v.sort_by_key(|p| (p.from, p.to));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Endpoint = Endpoint::Node(NodeId(0));
    const B: Endpoint = Endpoint::Node(NodeId(1));

    #[test]
    fn an_endpoints_best_rates_are_its_fastest_transfers_out_and_in() {
        let mut p = Predictor::default();
        p.observe(A, B, 100, 1.0); // A -> B at 100 B/s and at 300
        p.observe(A, B, 300, 1.0);
        p.observe(Endpoint::Storage, B, 50, 1.0);
        p.observe(Endpoint::Storage, A, 900, 1.0);
        let best = p.best_rates();
        assert_eq!(best.out, vec![(A, 300.0), (Endpoint::Storage, 900.0)]);
        assert_eq!(best.into, vec![(A, 900.0), (B, 300.0)]);
    }

    #[test]
    fn an_unmeasured_pair_gets_the_default_and_a_measured_one_the_mean_of_its_window() {
        let mut p = Predictor::new(BandwidthConfig {
            window: 2,
            successive: 100,
            ..BandwidthConfig::default()
        });
        assert_eq!(p.predict(A, B), 100e6);
        p.observe(A, B, 100, 1.0);
        p.observe(A, B, 300, 1.0);
        assert_eq!(p.predict(A, B), 200.0);
        p.observe(A, B, 500, 1.0); // 100 leaves the window
        assert_eq!(p.predict(A, B), 400.0);
        assert_eq!(p.predict(B, A), 100e6, "pairs are directed");
        assert_eq!(p.predict(Endpoint::Storage, B), 100e6);
    }

    #[test]
    fn transfers_meeting_the_prediction_in_a_row_scale_it_up_and_slow_ones_down() {
        let cfg = BandwidthConfig {
            window: 8,
            successive: 2,
            step: 2.0,
            ..BandwidthConfig::default()
        };
        let mut p = Predictor::new(cfg);
        p.observe(A, B, 100, 1.0); // the first: no streak
        p.observe(A, B, 100, 1.0); // meets 90% of 100
        assert_eq!(p.predict(A, B), 100.0);
        p.observe(A, B, 100, 1.0); // the second in a row: scale x2
        assert_eq!(p.predict(A, B), 200.0);
        // 20 B/s is under half the prediction, twice in a row: the scale halves again.
        p.observe(A, B, 20, 1.0);
        assert_eq!(p.predict(A, B), 160.0, "2 x mean(100, 100, 100, 20)");
        p.observe(A, B, 20, 1.0);
        assert_eq!(p.pairs()[0].scale, 1.0);
        assert_eq!(p.predict(A, B), 68.0, "mean(100, 100, 100, 20, 20)");
    }
}
