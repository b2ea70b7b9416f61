//! Staging a batch of objects to nodes (coordinated-transfers-gridftp-gds.txt, section 4): the
//! requests `(object, destination)` are moved in chunks, each chunk from one or more sources at
//! once in disjoint parts sized by their predicted bandwidth ([`crate::bandwidth`]). A
//! destination that has received the first bytes of an object serves them onward (a chunk-level
//! replica source).
//!
//! Three schedules, compared by `diffuse stage --schedule` and in docs/transfers.md:
//!
//! - **GDS** (Algorithm 1): one scheduler for the whole batch. While some destination has
//!   bandwidth left, every pending request's next chunk is planned (replica selection below)
//!   and the one that would finish first starts (MinMin); the bandwidth it takes is booked at
//!   its sources, its destination and the path between them, so later choices see it. A chunk
//!   that only slow sources could serve now (more than twice the time it would take with every
//!   source free) waits for the fast ones instead: this project's addition, after the first
//!   runs showed GDS starting 500 MB parts on a 4 Mb/s path while the 880 Mb/s ones were busy.
//! - **LDS** (Algorithm 3): each destination on its own, its files smallest first, one chunk at
//!   a time, with the same replica selection but blind to what other destinations take.
//! - **Naive**: each destination on its own, each file whole from one replica chosen at random
//!   (seeded).
//!
//! Replica selection (Algorithm 2): the sources holding the chunk's bytes, best predicted
//! bandwidth to the destination first (under GDS, less what chunks under way already take of
//! the source's NIC and of the path between the two), are added until the destination's inbound
//! bandwidth is used up; parts are sized in proportion to those bandwidths. A source offering
//! under a hundredth of the best one's bandwidth is left out: its part would finish last. The paper's filter on small files (under a multiple of the bandwidth-delay
//! product) is left out: on a cluster's links the product is a few hundred kilobytes.
//!
//! This is planning only: [`Stager::poll`] says which chunk to start, the driver moves the
//! bytes and reports each chunk done ([`Stager::done`], which teaches the predictor) or failed
//! ([`Stager::failed`], which drops the failing source).
//!
//! | module | holds |
//! |---|---|
//! | [`stager`] | [`Stager`], what the driver calls, and [`StageConfig`] |
//! | [`batch`] | the batch every schedule reads ([`Request`], [`Chunk`], what is held where, bandwidth booked) and replica selection |
//! | [`schedule`] | the [`StageSchedule`](schedule::StageSchedule) trait |
//! | [`registry`] | [`Schedule`]: every schedule's name and builder, in one list |
//! | [`gds`], [`lds`], [`naive`] | the schedules |
//!
//! Adding a schedule: a new file here, its `mod` line below, and one line in [`registry`].

pub mod batch;
pub mod gds;
pub mod lds;
pub mod naive;
pub mod registry;
pub mod schedule;
pub mod stager;
#[cfg(test)]
mod tests;

pub use batch::{Chunk, Part, Request};
pub use registry::Schedule;
pub use stager::{StageConfig, Stager};
