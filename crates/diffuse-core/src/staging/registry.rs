//! The one list of staging schedules: each one's name (for `diffuse stage --schedule`,
//! parsing and display) and how it is built.
//!
//! Adding a schedule: write its file beside this one (a type implementing
//! [`StageSchedule`]), declare it in `staging/mod.rs` (`mod name;`), and add one line to the
//! `schedules!` list below.

use super::gds::Gds;
use super::lds::Lds;
use super::naive::Naive;
use super::schedule::StageSchedule;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// `schedules! { Variant = "name" => |seed| build, ... }`: the enum [`Schedule`] with one
/// variant per line, its name and its builder.
macro_rules! schedules {
    ($( $(#[$attr:meta])* $variant:ident = $name:literal => $build:expr, )*) => {
        /// Which schedule stages the batch.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub enum Schedule {
            $( $(#[$attr])* #[serde(rename = $name)] $variant, )*
        }

        impl Schedule {
            /// Every schedule, in the order of the list.
            pub const ALL: &'static [Schedule] = &[$(Schedule::$variant),*];

            /// Its name, as on the command line.
            pub fn name(self) -> &'static str {
                match self {
                    $(Schedule::$variant => $name,)*
                }
            }

            /// The schedule, before its first chunk; `seed` drives one that draws at random.
            pub fn build(self, seed: u64) -> Box<dyn StageSchedule> {
                match self {
                    $(Schedule::$variant => {
                        let build: fn(u64) -> Box<dyn StageSchedule> = $build;
                        build(seed)
                    })*
                }
            }
        }
    };
}

schedules! {
    /// Each destination alone, each file whole from a random replica.
    Naive = "naive" => |seed| Box::new(Naive::new(seed)),
    /// Each destination alone, smallest files first, chunks from several replicas.
    Lds = "lds" => |_| Box::new(Lds),
    /// One scheduler: MinMin over every pending chunk, bandwidth booked as it goes.
    #[default]
    Gds = "gds" => |_| Box::new(Gds),
}

impl FromStr for Schedule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.to_ascii_lowercase();
        if let Some(k) = Self::ALL.iter().find(|k| k.name() == lower) {
            return Ok(*k);
        }
        let names: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
        let expected = match names.split_last() {
            Some((last, [])) => last.to_string(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        };
        Err(format!("unknown schedule '{s}' (expected {expected})"))
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
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
