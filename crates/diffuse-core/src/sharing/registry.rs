//! The one list of job orders: each one's name (for `--job-order`, parsing and display) and
//! how it is built.
//!
//! Adding an order: write its file beside this one (a type implementing [`JobSharing`]),
//! declare it in `sharing/mod.rs` (`mod name;`), and add one line to the list below (the
//! shape is `registry!`'s, in `src/registry.rs`).

use super::fair::Fair;
use super::fifo::Fifo;
use super::share::JobSharing;
use crate::registry::registry;

registry! {
    /// How jobs share the slots.
    pub enum JobOrder: "job order", fn build(_none: ()) -> Box<dyn JobSharing>;
    /// The oldest task first, whatever its job (one queue).
    #[default]
    Fifo = "fifo" => |_| Box::new(Fifo),
    /// The job holding the fewest cores first.
    Fair = "fair" => |_| Box::new(Fair::default()),
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
