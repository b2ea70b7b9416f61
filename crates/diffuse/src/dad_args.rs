//! DAD's command-line parameters, shared by `dispatcher`, `run` and `sim`.

use clap::Args;
use diffuse_core::DadConfig;

/// `--dad-beta`, `--dad-threshold`, `--dad-delay` (used with `--policy dad`).
#[derive(Args, Debug, Clone)]
pub struct DadArgs {
    /// DAD: weight of file locality against node load in a node's score, in [0, 1].
    #[arg(long, default_value_t = 0.8, value_parser = unit, allow_hyphen_values = true)]
    dad_beta: f64,
    /// DAD: a free node scoring under this is local, in [0, --dad-beta].
    #[arg(long, default_value_t = 0.5, value_parser = unit, allow_hyphen_values = true)]
    dad_threshold: f64,
    /// DAD: most scheduling rounds a task waits for a local node while a busy node would be
    /// local.
    #[arg(long, default_value_t = 2)]
    dad_delay: u32,
    /// DAD: seconds between scheduling rounds while a task is delayed (a delay of N rounds
    /// lasts about N times this when nothing else happens).
    #[arg(long, default_value_t = 1.0, value_parser = crate::numbers::positive_seconds, allow_hyphen_values = true)]
    dad_round: f64,
}

fn unit(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("'{s}' must be a number in [0, 1]")),
    }
}

impl DadArgs {
    /// The parameters, checked together.
    pub fn config(&self) -> Result<DadConfig, String> {
        let c = DadConfig {
            beta: self.dad_beta,
            local_threshold: self.dad_threshold,
            delay: self.dad_delay,
            round_s: self.dad_round,
        };
        c.check()
            .map_err(|e| format!("--dad-threshold/--dad-beta: {e}"))?;
        Ok(c)
    }
}
