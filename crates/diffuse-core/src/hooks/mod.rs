//! Policies that act after dispatch: what to do when objects are cached or evicted, a task is
//! dispatched or ends, a node joins or is released, and at every poll.
//!
//! A dispatch policy ([`crate::dispatch`]) decides which task a free slot takes. The policies
//! here watch what follows and answer with actions of their own: MixApart's transfer scheduler
//! prefetches, 2Mark evicts and moves copies across nodes, cache hand-off pushes a released
//! node's copies to the survivors. Each is a [`Hook`](hook::Hook) in a file of its own and
//! owns its state; the core owns what they all read and shows it to them read-only
//! ([`CoreView`](hook::CoreView)). A hook never changes the core: it returns
//! [`Effects`](hook::Effects), which the core carries out after the hook returns (its actions
//! go to the driver, a copy it gives up is forgotten and the other hooks are told).
//!
//! The core calls every hook from one place per event (`Step::notify`, in
//! `core/lifecycle.rs`), in the order of [`registry`](registry::registry), and a hook's effects
//! are carried out before the next hook hears of the same event.
//!
//! | module | policy | paper |
//! |---|---|---|
//! | [`hook`] | the [`Hook`](hook::Hook) trait, what a hook sees ([`CoreView`](hook::CoreView)) and asks for ([`Effects`](hook::Effects)), what it tells of itself ([`HookReport`](hook::HookReport)) | |
//! | [`registry`] | the hooks in use, in order, from the core's settings | |
//! | [`handoff`] | cache hand-off: what a released node pushes, and where (the plan in `handoff/planner.rs`) | data diffusion, section 6 |
//! | [`prefetch`] | MixApart's transfer scheduler: prefetches within a storage budget (settings and counters in `prefetch/config.rs`) | MixApart, Algorithm 2 |
//! | [`two_mark`] | 2Mark: evictions and moves across every node's cache (the marks in `two_mark/marks.rs`) | data diffusion, Figure 1 |
//!
//! Each hook is one place under one name: a file here, or a folder whose `mod.rs` is the hook
//! and whose other files are its algorithm. Adding one: that file (or folder) with a type
//! implementing [`Hook`](hook::Hook) (every event has a no-op default; its statistics, if
//! any, told through [`Hook::report`](hook::Hook::report)), its `mod` line below, and one line
//! in [`registry`](registry::registry); a setting for it in `CoreConfig` if it is chosen per
//! run.

pub(crate) mod handoff;
pub(crate) mod hook;
pub(crate) mod prefetch;
pub(crate) mod registry;
pub(crate) mod two_mark;
