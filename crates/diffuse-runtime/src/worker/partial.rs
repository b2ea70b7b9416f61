//! An object being read in chunks (`multi`): its file, filled in place; the board of which
//! chunks are waiting, being read or landed; and the digest its sources agreed on. What the
//! multi-source fetch writes and the relay (`relay`) serves from, while the fetch lasts.
//!
//! The landed chunks travel between workers as a bitmap in hex ([`encode`], [`decode`]):
//! chunk `i` is bit `i % 4` of hex digit `i / 4`.

use std::sync::{Condvar, Mutex};

/// Bytes per chunk.
pub(super) const CHUNK: u64 = 4 << 20;

/// The state of each chunk.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Chunk {
    Waiting,
    /// Being read by this many sources.
    Reading(u8),
    /// Received and being written by one source; another copy of it is thrown away, so bytes
    /// already hashed are never overwritten.
    Writing,
    Landed,
}

/// Which chunks are waiting, being read, or landed.
pub(super) struct Board {
    chunks: Vec<Chunk>,
    landed: usize,
    /// Chunks landed from the start without a gap: the hasher may read up to there.
    pub(super) prefix: usize,
    /// The fetch is over (done, failed or dropped): the hasher stops waiting.
    pub(super) over: bool,
    /// A source turned out to be a partial copy: the others read from the back.
    pub(super) partial_source: bool,
}

impl Board {
    fn new(size: u64) -> Board {
        let n = size.div_ceil(CHUNK).max(1) as usize;
        Board {
            chunks: vec![Chunk::Waiting; n],
            landed: 0,
            prefix: 0,
            over: false,
            partial_source: false,
        }
    }

    /// How many chunks the object has.
    pub(super) fn len(&self) -> usize {
        self.chunks.len()
    }

    /// A source has chunk `i` in hand: it may write it unless another copy is written or
    /// landed already.
    pub(super) fn claim(&mut self, i: usize) -> bool {
        match self.chunks[i] {
            Chunk::Writing | Chunk::Landed => false,
            _ => {
                self.chunks[i] = Chunk::Writing;
                true
            }
        }
    }

    /// The next chunk for a source that has them all: a waiting one, or else one only one
    /// source is reading.
    #[cfg(test)]
    fn take(&mut self) -> Option<usize> {
        self.take_among(None, false)
    }

    /// The next chunk for a source that has those in `have` (None: any); `partial`: the source
    /// is a partial copy. Partial copies fill from the front, so while one is a source the
    /// others take chunks from the back: they meet in the middle instead of racing for the
    /// same chunks.
    pub(super) fn take_among(&mut self, have: Option<&[bool]>, partial: bool) -> Option<usize> {
        let n = self.chunks.len();
        let from_back = !partial && self.partial_source;
        let order = move |k: usize| if from_back { n - 1 - k } else { k };
        let has = |i: &usize| have.is_none_or(|h| h.get(*i).copied().unwrap_or(false));
        let first = |state: Chunk| {
            (0..n)
                .map(order)
                .find(|i| self.chunks[*i] == state && has(i))
        };
        let i = first(Chunk::Waiting).or_else(|| first(Chunk::Reading(1)))?;
        self.chunks[i] = match self.chunks[i] {
            Chunk::Reading(n) => Chunk::Reading(n + 1),
            _ => Chunk::Reading(1),
        };
        Some(i)
    }

    /// Chunk `i` is written in place.
    pub(super) fn landed(&mut self, i: usize) {
        if self.chunks[i] != Chunk::Landed {
            self.chunks[i] = Chunk::Landed;
            self.landed += 1;
        }
        while self.prefix < self.chunks.len() && self.chunks[self.prefix] == Chunk::Landed {
            self.prefix += 1;
        }
    }

    /// A source gave up on chunk `i`: it waits again unless another source is reading it.
    pub(super) fn dropped(&mut self, i: usize) {
        self.chunks[i] = match self.chunks[i] {
            Chunk::Reading(n) if n > 1 => Chunk::Reading(n - 1),
            Chunk::Reading(_) => Chunk::Waiting,
            c => c,
        };
    }

    /// Every chunk has landed.
    pub(super) fn complete(&self) -> bool {
        self.landed == self.chunks.len()
    }

    /// Whether each chunk has landed (what this copy can relay).
    pub(super) fn landed_chunks(&self) -> impl Iterator<Item = bool> + '_ {
        self.chunks.iter().map(|c| *c == Chunk::Landed)
    }
}

/// One object being read in chunks: what its sources write and the relay serves from.
pub(super) struct Partial {
    /// Its cache key.
    pub(super) key: String,
    pub(super) version: String,
    pub(super) size: u64,
    /// The temp file, filled in place.
    pub(super) file: std::fs::File,
    pub(super) board: Mutex<Board>,
    /// Signalled when `board.prefix` grows or the fetch is over.
    pub(super) progress: Condvar,
    /// The digest the first source to answer recorded; every other must match it.
    pub(super) sha256: Mutex<Option<String>>,
}

impl Partial {
    /// An object of `size` bytes, none landed yet, read into `file`.
    pub(super) fn new(key: String, version: String, size: u64, file: std::fs::File) -> Partial {
        Partial {
            key,
            version,
            size,
            file,
            board: Mutex::new(Board::new(size)),
            progress: Condvar::new(),
            sha256: Mutex::new(None),
        }
    }
}

/// The landed chunks as hex: chunk `i` is bit `i % 4` of digit `i / 4`.
pub(super) fn encode(have: &[bool]) -> String {
    have.chunks(4)
        .map(|four| {
            let v = four
                .iter()
                .enumerate()
                .fold(0u32, |v, (k, h)| v | (u32::from(*h) << k));
            char::from_digit(v, 16).expect("a nibble")
        })
        .collect()
}

/// The inverse of [`encode`] for an object of `chunks` chunks; None if malformed.
pub(super) fn decode(hex: &str, chunks: usize) -> Option<Vec<bool>> {
    if hex.len() != chunks.div_ceil(4) {
        return None;
    }
    let mut have = Vec::with_capacity(chunks);
    for c in hex.chars() {
        let v = c.to_digit(16)?;
        have.extend((0..4).map(|k| v & (1 << k) != 0));
    }
    have.truncate(chunks);
    Some(have)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_have_bitmap_round_trips() {
        for n in [1, 3, 4, 5, 9, 256] {
            let have: Vec<bool> = (0..n).map(|i| i % 3 == 0 || i == n - 1).collect();
            assert_eq!(decode(&encode(&have), n), Some(have), "{n} chunks");
        }
        assert_eq!(encode(&[true, false, false, true, true]), "91");
        assert_eq!(decode("91", 9), None, "too short for 9 chunks");
        assert_eq!(decode("g", 1), None);
    }

    #[test]
    fn the_board_hands_out_each_chunk_then_duplicates_the_last_ones() {
        let mut b = Board::new(3 * CHUNK - 1);
        assert_eq!(b.chunks.len(), 3);
        assert_eq!((b.take(), b.take(), b.take()), (Some(0), Some(1), Some(2)));
        b.landed(0);
        // Nothing waits: an idle source joins a chunk one other source reads.
        assert_eq!(b.take(), Some(1));
        assert_eq!(b.take(), Some(2));
        assert_eq!(b.take(), None, "no chunk is read by three sources");
        assert_eq!(b.prefix, 1);
        assert!(b.claim(1));
        assert!(!b.claim(1), "one copy of a chunk is written");
        b.landed(1);
        assert_eq!(b.prefix, 2);
        b.dropped(1); // the slower copy of chunk 1 gave up after the other landed
        assert_eq!(b.chunks[1], Chunk::Landed);
        b.dropped(2);
        b.dropped(2);
        assert_eq!(b.chunks[2], Chunk::Waiting, "a dropped chunk waits again");
        assert_eq!(b.take(), Some(2));
        b.landed(2);
        b.landed(2);
        assert!(b.complete());
    }

    #[test]
    fn a_partial_source_takes_what_it_has_and_full_sources_then_read_from_the_back() {
        let mut b = Board::new(6 * CHUNK);
        let have = [true, true, false, true, false, false];
        assert_eq!(b.take_among(Some(&have), true), Some(0));
        b.partial_source = true;
        assert_eq!(b.take(), Some(5), "a full source starts at the back");
        assert_eq!(b.take_among(Some(&have), true), Some(1));
        assert_eq!(b.take_among(Some(&have), true), Some(3));
        assert_eq!(b.take(), Some(4));
        assert_eq!(
            b.take_among(None, true),
            Some(2),
            "a partial copy is asked from the front"
        );
        b.dropped(2);
        assert_eq!(b.take(), Some(2));
        // Nothing waits: the partial copy may duplicate only a chunk it has.
        assert_eq!(
            b.take_among(Some(&[false, false, true, false, false, false]), true),
            Some(2)
        );
        assert_eq!(b.take_among(Some(&[false; 6]), true), None);
    }

    #[test]
    fn an_empty_object_is_one_chunk() {
        let mut b = Board::new(0);
        assert_eq!(b.take(), Some(0));
    }
}
