//! Copies the core asks for apart from tasks' reads, while they are under way: MixApart's
//! prefetches from storage to a node, and 2Mark's moves from one node to another. Ids come from
//! one sequence.

use diffuse_core::{NodeId, ObjectId};
use rustc_hash::FxHashMap;

/// A prefetch under way: to `node`, `object` of `size` bytes.
#[derive(Clone, Copy, Debug)]
pub(super) struct Prefetch {
    pub(super) node: NodeId,
    pub(super) object: ObjectId,
    pub(super) size: u64,
}

/// A 2Mark move under way: `object` of `size` bytes, `from` one node `to` another.
#[derive(Clone, Copy, Debug)]
pub(super) struct Move {
    pub(super) object: ObjectId,
    pub(super) size: u64,
    pub(super) from: NodeId,
    pub(super) to: NodeId,
}

/// Prefetches and moves under way, by id.
#[derive(Default)]
pub(super) struct Copies {
    prefetches: FxHashMap<u64, Prefetch>,
    moves: FxHashMap<u64, Move>,
    next_id: u64,
}

impl Copies {
    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id - 1
    }

    /// A prefetch begins: its id.
    pub(super) fn prefetch(&mut self, p: Prefetch) -> u64 {
        let id = self.new_id();
        self.prefetches.insert(id, p);
        id
    }

    /// Prefetch `id`, if under way.
    pub(super) fn prefetching(&self, id: u64) -> Option<Prefetch> {
        self.prefetches.get(&id).copied()
    }

    /// Prefetch `id` ended (landed or given up).
    pub(super) fn prefetch_ended(&mut self, id: u64) -> Option<Prefetch> {
        self.prefetches.remove(&id)
    }

    /// A move begins: its id.
    pub(super) fn move_copy(&mut self, m: Move) -> u64 {
        let id = self.new_id();
        self.moves.insert(id, m);
        id
    }

    /// Move `id`, if under way.
    pub(super) fn moving(&self, id: u64) -> Option<Move> {
        self.moves.get(&id).copied()
    }

    /// Move `id` ended (landed or given up).
    pub(super) fn move_ended(&mut self, id: u64) -> Option<Move> {
        self.moves.remove(&id)
    }
}
