//! The one list of staging schedules: each one's name (for `diffuse stage --schedule`,
//! parsing and display) and how it is built.
//!
//! Adding a schedule: write its file beside this one (a type implementing
//! [`StageSchedule`]), declare it in `staging/mod.rs` (`mod name;`), and add one line to the
//! `registry!` list below.

use super::gds::Gds;
use super::lds::Lds;
use super::naive::Naive;
use super::schedule::StageSchedule;
use crate::registry::registry;

registry! {
    /// Which schedule stages the batch.
    pub enum Schedule: "schedule", fn build(seed: u64) -> Box<dyn StageSchedule>;
    /// Each destination alone, each file whole from a random replica.
    Naive = "naive" => |seed| Box::new(Naive::new(seed)),
    /// Each destination alone, smallest files first, chunks from several replicas.
    Lds = "lds" => |_| Box::new(Lds),
    /// One scheduler: MinMin over every pending chunk, bandwidth booked as it goes.
    #[default]
    Gds = "gds" => |_| Box::new(Gds),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schedule_parses_from_its_name_and_displays_it() {
        for k in Schedule::ALL {
            assert_eq!(k.name().parse::<Schedule>(), Ok(*k));
            assert_eq!(k.to_string().to_uppercase().parse::<Schedule>(), Ok(*k));
        }
        let err = "fast".parse::<Schedule>().unwrap_err();
        assert!(
            err.starts_with("unknown schedule 'fast' (expected naive, lds"),
            "{err}"
        );
        assert_eq!(Schedule::default(), Schedule::Gds);
    }
}
