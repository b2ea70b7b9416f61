//! # diffuse-core: the sans-IO scheduling core of diffuse
//!
//! Every scheduling decision of diffuse lives here, as a deterministic state machine: no tokio, no
//! clock reads (time comes in as `now`), no I/O, no unseeded randomness. Two drivers run it: the
//! discrete-event simulator (`diffuse-sim`) and the live dispatcher. A policy measured in the
//! simulator is the code that runs live.
//!
//! | module | what it holds | paper term |
//! |---|---|---|
//! | [`core`] | [`Core`]: tasks, nodes, slots; `handle_*` in, `poll_*` out | dispatcher |
//! | [`dispatch`] | every dispatch policy behind the [`DispatchPolicy`] trait, one file each, listed once in `dispatch::registry` | data-aware scheduler |
//! | [`locality`] | per-node candidate sets that make a decision O(\|Ti\| + log \|Q\|) | scheduling window |
//! | [`dad`] (= `dispatch::dad`) | DAD's score of file locality and load, with a bounded delay | data-aware dispatching |
//! | `dispatch::tiers` | MixApart's locality tiers (node, rack, in transfer, anywhere, storage) | compute scheduler |
//! | [`racks`] | which nodes share a switch | rack |
//! | `registry` | the shape every list of policies shares ([`PolicyKind`], [`EvictionPolicy`], `staging::Schedule`): names, builders, parsing | |
//! | [`queue`] | the wait queue by priority and its window boundary | wait queue, window W |
//! | [`resources`] | cores, memory, GPUs, disk: asked by tasks, had by nodes | executor = core |
//! | [`index`] | object <-> node location index | centralized index |
//! | [`cache`] | a node's cache: what it holds within its quota, in its eviction order | store |
//! | [`eviction`] | Random, FIFO, LRU, LFU behind the [`eviction::EvictionOrder`] trait, one file each, listed once in `eviction::registry` | eviction policy |
//! | [`provision`] | static and dynamic provisioning | DRP |
//! | `hooks` | the policies that act after dispatch, each in one place under one name behind one trait, listed once in `hooks/registry.rs`: cache hand-off on release (`hooks/handoff/`: what a released node pushes, and where), MixApart's data transfer scheduler (`hooks/prefetch/`: its settings and counters in `config.rs`), 2Mark (`hooks/two_mark/`: eviction across all nodes' caches, marking at two levels) | (section 6), data transfer scheduler, 2Mark |
//! | [`sharing`] | how jobs share the slots: FIFO and Fair behind one trait, one file each, listed once in `sharing/registry.rs` ([`JobOrder`]) | MixApart's compute scheduler |
//! | [`staging`] | staging a batch of objects to nodes: GDS's MinMin, LDS, naive | coordinated transfers |
//! | [`bandwidth`] | per-pair transfer rates and their prediction | GDS's bandwidth prediction |
//! | [`model`] | the abstract model of section 3.1 | abstract model |
//! | [`action`] | what the core asks the driver to do | |
//! | [`task`], [`ids`], [`time`] | vocabulary | task, executor = slot, store = node cache |

pub mod action;
pub mod bandwidth;
pub mod cache;
pub mod core;
pub mod dispatch;
pub mod eviction;
pub(crate) mod hooks;
pub mod ids;
pub mod index;
pub mod locality;
pub mod model;
pub mod provision;
pub mod queue;
pub mod racks;
pub(crate) mod registry;
pub mod resources;
pub mod sharing;
pub mod staging;
pub mod task;
pub mod time;

pub use crate::action::{Abandoned, Action, Dispatch, Source};
pub use crate::cache::{Admission, EvictionPolicy, NodeCache};
pub use crate::core::{Core, CoreConfig, CoreError, Counts, JobOrder, LostTasks};
pub use crate::dispatch::dad;
pub use crate::dispatch::dad::DadConfig;
pub use crate::dispatch::{DispatchPolicy, PolicyKind, PolicyParams, SchedView};
pub use crate::hooks::handoff::planner::{Handoff, HandoffConfig};
pub use crate::hooks::prefetch::config::{PrefetchConfig, PrefetchStats};
pub use crate::hooks::two_mark::marks::TwoMarkStats;
pub use crate::ids::{JobId, NodeId, NodeName, ObjectId, RackId, TaskId};
pub use crate::provision::{DynamicConfig, Provisioning, StepPolicy};
pub use crate::resources::{Bytes, Resources};
pub use crate::task::{Input, Outcome, Placement, TaskSpec, TaskState};
pub use crate::time::Time;
