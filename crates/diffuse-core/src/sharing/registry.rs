//! The one list of job orders: each one's name (for `--job-order`, parsing and display) and
//! how it is built.
//!
//! Adding an order: write its file beside this one (a type implementing [`JobSharing`]),
//! declare it in `sharing/mod.rs` (`mod name;`), and add one line to the `orders!` list below.

use super::fair::Fair;
use super::fifo::Fifo;
use super::share::JobSharing;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// `orders! { Variant = "name" => || build, ... }`: the enum [`JobOrder`] with one variant per
/// line, its name and its builder.
macro_rules! orders {
    ($( $(#[$attr:meta])* $variant:ident = $name:literal => $build:expr, )*) => {
        /// How jobs share the slots.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub enum JobOrder {
            $( $(#[$attr])* #[serde(rename = $name)] $variant, )*
        }

        impl JobOrder {
            /// Every job order, in the order of the list.
            pub const ALL: &'static [JobOrder] = &[$(JobOrder::$variant),*];

            /// Its name, as on the command line.
            pub fn name(self) -> &'static str {
                match self {
                    $(JobOrder::$variant => $name,)*
                }
            }

            /// The order, with no task queued.
            pub(crate) fn build(self) -> Box<dyn JobSharing> {
                match self {
                    $(JobOrder::$variant => {
                        let build: fn() -> Box<dyn JobSharing> = $build;
                        build()
                    })*
                }
            }
        }
    };
}

orders! {
    /// The oldest task first, whatever its job (one queue).
    #[default]
    Fifo = "fifo" => || Box::new(Fifo),
    /// The job holding the fewest cores first.
    Fair = "fair" => || Box::new(Fair::default()),
}

impl FromStr for JobOrder {
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
        Err(format!("unknown job order '{s}' (expected {expected})"))
    }
}

impl fmt::Display for JobOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_order_parses_from_its_name_and_displays_it() {
        for k in JobOrder::ALL {
            assert_eq!(k.name().parse::<JobOrder>(), Ok(*k));
            assert_eq!(k.to_string().to_uppercase().parse::<JobOrder>(), Ok(*k));
        }
        assert_eq!(
            "round-robin".parse::<JobOrder>(),
            Err("unknown job order 'round-robin' (expected fifo or fair)".into())
        );
        assert_eq!(JobOrder::default(), JobOrder::Fifo);
    }
}
