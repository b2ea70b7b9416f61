//! Dispatch policies (section 2.2 of the data diffusion paper): which queued task a free slot on
//! a node takes.
//!
//! The scheduler is window-based: for a node with a free slot, the policy looks at most `window`
//! tasks deep into the wait queue. A task whose inputs are all cached on the node (a 100% local
//! hit) is taken at once; otherwise the task with the highest local-hit fraction is taken. Every
//! free node gets this first pass before any falls back, so a task goes to a free node that holds
//! its data in preference to one that does not. What happens when no task has any local data for
//! a node is what tells the policies apart:
//!
//! | policy | no local data for this node |
//! |---|---|
//! | FA  | ignores locality: always the oldest task, every input from persistent storage |
//! | MCU | the oldest task in the window (keeps every slot busy) |
//! | MCH | only a task whose data is cached nowhere; otherwise the slot stays idle, and a task whose data is elsewhere waits for that node |
//! | GCC | MCU while utilisation (busy slots / allocated slots) is below the threshold, MCH above it |
//! | DAD | (one pass) the free node with the lowest score of file locality and load, waiting a bounded number of rounds for a busy local node ([`dad`]) |
//! | MixApart | locality tiers: node-local, rack-local, in transfer, then cached anywhere, storage ([`tiers`]) |
//!
//! Policies see the queue through [`SchedView`], whose answers come from the per-node candidate
//! sets of [`crate::locality`], so a decision costs O(|Ti| + log |Q|), not a scan of the window.
//!
//! | module | holds |
//! |---|---|
//! | [`policy`] | the [`DispatchPolicy`] trait |
//! | [`view`] | [`SchedView`]: what a policy reads |
//! | [`registry`] | [`PolicyKind`]: every built-in policy's name and builder, in one list |
//! | [`fa`], [`mcu`], [`mch`], [`gcc`] | the data diffusion paper's four policies |
//! | [`dad`] | DAD (data-aware dispatching), with its [`DadConfig`](dad::DadConfig) |
//! | [`tiers`] | MixApart's locality tiers ([`LocalityTiers`](tiers::LocalityTiers)) |
//!
//! Adding a policy: a new file here, its `mod` line below, and one line in [`registry`].

pub mod dad;
pub mod fa;
pub mod gcc;
pub mod mch;
pub mod mcu;
pub mod policy;
pub mod registry;
pub mod tiers;
pub mod view;

pub use policy::DispatchPolicy;
pub use registry::{PolicyKind, PolicyParams};
pub use view::SchedView;
