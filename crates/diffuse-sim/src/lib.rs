//! # diffuse-sim: the discrete-event simulator
//!
//! Drives the same scheduling core as the live dispatcher (`diffuse-core`) in virtual time, over
//! a model of a cluster: slots per node, local disk and NIC bandwidth, persistent storage whose
//! aggregate bandwidth its concurrent readers share, latencies and node start-up time.
//!
//! | module | what it holds |
//! |---|---|
//! | [`engine`] | the event loop, [`simulate`]: [`Simulation`] composing its owners (the event queue, the network model, the nodes' caches, the tasks, single-flight reads, prefetches and 2Mark moves, hand-off, the run's counters; table in `engine/mod.rs`) |
//! | [`flows`] | transfers as fluid flows over shared resources |
//! | [`flow_bound`] | GDS's lower bound on a staging batch's makespan, as a linear program |
//! | [`workload`] | the paper's MI, SW and AP workloads, and custom lists |
//! | [`testbed`] | cluster models of the paper's testbeds |
//! | [`report`] | summary, per-second samples, time series, CSV |
//! | [`plot`] | SVG figures of a run |
//! | [`paper`] | the paper's experiments, run side by side with its results |
//! | [`mixapart`] | MixApart's job mixes, next to an all-local ideal |
//! | [`staging`] | GDS, LDS and naive staging of a batch on the paper's four sites |

pub mod engine;
pub mod flow_bound;
pub mod flows;
pub mod mixapart;
pub mod paper;
pub mod plot;
pub mod report;
pub mod staging;
pub mod testbed;
pub mod workload;

pub use engine::{simulate, DynamicSettings, SimConfig, SimError, Simulation, TaskTrace};
pub use report::{HandoffReport, Sample, SeriesRow, Summary};
pub use testbed::Testbed;
pub use workload::{Arrival, Workload};
