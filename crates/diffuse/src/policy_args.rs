//! The dispatch policy's settings on the command line: one clap group shared by `dispatcher`,
//! `run` and `sim`, so that a policy is chosen and tuned with the same flags, defaults and
//! checks whether it is measured in the simulator or run live. `--policy`, `--window`,
//! `--threshold`, DAD's (`dad_args.rs`), `--job-order`, and MixApart's storage cap and prefetch
//! (`transfer_args.rs`); [`PolicyArgs::apply`] sets them on the core's configuration.

use crate::dad_args::DadArgs;
use crate::transfer_args::TransferArgs;
use clap::Args;
use diffuse_core::{CoreConfig, JobOrder, PolicyKind};

/// `--policy`, `--window`, `--threshold`, `--dad-*`, `--job-order`, `--storage-bandwidth-cap`,
/// `--prefetch`, `--prefetch-share`.
#[derive(Args, Debug, Clone)]
pub struct PolicyArgs {
    /// Dispatch policy: fa, mcu, mch, gcc, dad or mixapart (docs/policies.md).
    #[arg(long, value_parser = |s: &str| s.parse::<PolicyKind>(), default_value = "gcc")]
    policy: PolicyKind,
    /// Scheduling window: how many queued tasks a decision looks at.
    #[arg(long, default_value_t = 2500, value_parser = clap::value_parser!(u64).range(1..), allow_hyphen_values = true)]
    window: u64,
    /// GCC's utilisation threshold, in (0, 1].
    #[arg(long, default_value_t = 0.9, value_parser = threshold, allow_hyphen_values = true)]
    threshold: f64,
    #[command(flatten)]
    dad: DadArgs,
    /// How jobs share the slots: fifo (the oldest task first, whatever its job) or fair (the
    /// job holding the fewest cores first; work-conserving).
    #[arg(long, value_parser = |s: &str| s.parse::<JobOrder>(), default_value = "fifo")]
    job_order: JobOrder,
    #[command(flatten)]
    transfers: TransferArgs,
}

/// `--threshold`: a number in (0, 1].
fn threshold(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(format!("'{s}' must be a number in (0, 1]")),
    }
}

impl PolicyArgs {
    /// The settings checked together (DAD's threshold against its beta, prefetch against the
    /// cap); the message names the flags.
    pub fn check(&self) -> Result<(), String> {
        self.transfers.check()?;
        self.dad.config().map(|_| ())
    }

    /// Set them on the core's configuration (call [`PolicyArgs::check`] first: DAD's settings
    /// that do not hold together are left at their defaults).
    pub fn apply(&self, cfg: &mut CoreConfig) {
        cfg.policy = self.policy;
        cfg.window = self.window as usize;
        cfg.threshold = self.threshold;
        cfg.dad = self.dad.config().unwrap_or_default();
        cfg.job_order = self.job_order;
        self.transfers.apply(cfg);
    }
}
