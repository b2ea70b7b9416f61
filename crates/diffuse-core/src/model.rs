//! The abstract model of section 3.1: predicted time per task, workload time, the largest arrival
//! rate the system can sustain, and utilisation, from hit ratios and access costs.
//!
//! Notation follows the paper: Rl, Rc, Rs are the costs of one local, peer-cache and persistent
//! storage access (seconds); C the compute per access; HRl, HRc, HRs the hit ratios (summing to 1);
//! N processors (slots) of speed P = 1.

use serde::{Deserialize, Serialize};

/// Inputs to the model.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelInput {
    /// Cost of a local-cache access, seconds.
    pub r_local: f64,
    /// Cost of a peer-cache access, seconds.
    pub r_peer: f64,
    /// Cost of a persistent-storage access, seconds.
    pub r_storage: f64,
    /// Compute per task, seconds.
    pub compute: f64,
    /// Local hit ratio.
    pub hr_local: f64,
    /// Peer hit ratio.
    pub hr_peer: f64,
    /// Miss ratio.
    pub hr_storage: f64,
    /// Accesses per task.
    pub accesses_per_task: f64,
    /// Number of tasks K.
    pub tasks: u64,
    /// Processors N.
    pub processors: u64,
    /// Aggregate cache size S, bytes.
    pub cache_bytes: u64,
    /// Working set W, bytes.
    pub working_set_bytes: u64,
    /// Offered arrival rate A, tasks per second (for utilisation).
    pub arrival_rate: f64,
}

/// What the model predicts.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelPrediction {
    /// TK = C + accesses * (Rl*HRl + Rc*HRc + Rs*HRs), seconds per task.
    pub task_time_s: f64,
    /// T_N(D) = K * TK / N: workload time with ideal packing, seconds.
    pub workload_time_s: f64,
    /// Lower bound of the sustainable arrival rate for the regime (S >= W or S < W), tasks/s.
    pub max_arrival_low: f64,
    /// Upper bound of the sustainable arrival rate for the regime, tasks/s.
    pub max_arrival_high: f64,
    /// Sustainable arrival rate at the given hit ratios: N / TK, tasks/s.
    pub max_arrival_at_hit_ratios: f64,
    /// U = A * TK / N.
    pub utilization: f64,
    /// Whether the aggregate cache holds the working set (S >= W).
    pub cache_holds_working_set: bool,
}

/// Evaluate the model.
pub fn predict(m: &ModelInput) -> ModelPrediction {
    let a = m.accesses_per_task;
    let tk = m.compute
        + a * (m.r_local * m.hr_local + m.r_peer * m.hr_peer + m.r_storage * m.hr_storage);
    let n = m.processors.max(1) as f64;
    let fits = m.cache_bytes >= m.working_set_bytes;
    let per_task = |r: f64| m.compute + a * r;
    let (low, high) = if fits {
        (n / per_task(m.r_peer), n / per_task(m.r_local))
    } else {
        (n / per_task(m.r_storage), n / per_task(m.r_peer))
    };
    ModelPrediction {
        task_time_s: tk,
        workload_time_s: m.tasks as f64 * tk / n,
        max_arrival_low: low,
        max_arrival_high: high,
        max_arrival_at_hit_ratios: if tk > 0.0 { n / tk } else { f64::INFINITY },
        utilization: m.arrival_rate * tk / n,
        cache_holds_working_set: fits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed() {
        let m = ModelInput {
            r_local: 0.1,
            r_peer: 0.2,
            r_storage: 1.0,
            compute: 0.01,
            hr_local: 0.5,
            hr_peer: 0.25,
            hr_storage: 0.25,
            accesses_per_task: 1.0,
            tasks: 1000,
            processors: 10,
            cache_bytes: 10,
            working_set_bytes: 100,
            arrival_rate: 20.0,
        };
        let p = predict(&m);
        // TK = 0.01 + 0.05 + 0.05 + 0.25 = 0.36
        assert!((p.task_time_s - 0.36).abs() < 1e-12);
        assert!((p.workload_time_s - 36.0).abs() < 1e-9);
        assert!(!p.cache_holds_working_set);
        assert!((p.max_arrival_low - 10.0 / 1.01).abs() < 1e-9);
        assert!((p.max_arrival_high - 10.0 / 0.21).abs() < 1e-9);
        assert!((p.utilization - 20.0 * 0.36 / 10.0).abs() < 1e-12);
    }
}
