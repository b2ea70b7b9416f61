//! How jobs share the slots (MixApart's FIFO and Fair): the order in which a free slot asks the
//! jobs, or the groups of jobs sharing a dispatch policy, for a task.
//!
//! A dispatch policy ([`crate::dispatch`]) chooses a task among those it is shown; a job order
//! decides whose tasks it is shown first. Each order is a [`JobSharing`](share::JobSharing) in a
//! file of its own and owns its state (Fair keeps each job's queued tasks); the core tells it
//! of every task that joins or leaves the queue, asks it for the shares of each free slot in
//! turn, and the transfer scheduler ([`crate::hooks::prefetch`]) asks it to rank the jobs it
//! prefetches for.
//!
//! | module | holds |
//! |---|---|
//! | [`share`] | the [`JobSharing`](share::JobSharing) trait, a [`Share`](share::Share) of the queue and what an order sees ([`ShareView`](share::ShareView)) |
//! | [`registry`] | [`JobOrder`]: every order's name and builder, in one list |
//! | [`fifo`] | FIFO: the oldest task first, whatever its job |
//! | [`fair`] | Fair: the job holding the fewest cores first |
//!
//! Adding an order: a new file here, its `mod` line below, and one line in [`registry`].

pub(crate) mod fair;
pub(crate) mod fifo;
pub mod registry;
pub mod share;

pub use registry::JobOrder;
pub use share::{JobSharing, Share, ShareView};
