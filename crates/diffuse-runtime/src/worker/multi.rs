//! Multi-source fetch (GDS's coordinated transfer): an object that several peers hold is read
//! as disjoint chunks from all of them at once, so a fetch is bounded by the sum of their
//! links, not by the one link of the peer the dispatcher named.
//!
//! Chunks are handed out from one board as each source finishes its last one: a source twice
//! as fast takes twice the chunks, which is GDS's "sub-chunks in proportion to bandwidth"
//! measured as it happens rather than predicted. A source that fails, answers with another
//! version or digest, or stalls ([`STALL`] without a byte) is dropped and its chunk goes back
//! on the board. When nothing is left to hand out, an idle source also fetches a chunk still
//! under way elsewhere (the first copy to land is kept), so one slow source does not hold up the
//! end. The whole object is hashed and checked against the digest the peers recorded before
//! it is committed; any failure leaves the caller to read a single peer or storage.
//!
//! While it lasts, the fetch serves the chunks that have landed to other workers reading the
//! same object (`relay`), and a source may itself be such a partial copy: it answers 409 with
//! the chunks it has, and its reader asks only for those, polling as more land. A source
//! answering 404 in its first second (a relay whose own fetch has not started yet) is asked
//! again; later, it is dropped (a holder that lost its copy). A partial source that gives
//! nothing new for [`STALL`] is dropped like one that stalls.

use super::stage::{commit, Failed};
use super::Ctx;
use crate::cache_dir::CacheDir;
use crate::proto::AssignedInput;
use futures_util::StreamExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

pub(super) use crate::proto::MULTI_SOURCE_MIN as MIN_SIZE;

/// Bytes per chunk.
pub(super) const CHUNK: u64 = 4 << 20;

/// A source that sends nothing for this long is dropped.
const STALL: Duration = Duration::from_secs(10);

/// How long a source answering 404 is asked again, as a relay whose fetch is starting.
const RELAY_START: Duration = Duration::from_secs(1);

/// How often a partial source with nothing wanted is asked again.
const POLL: Duration = Duration::from_millis(100);

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
    prefix: usize,
    /// The fetch is over (done, failed or dropped): the hasher stops waiting.
    over: bool,
    /// A source turned out to be a partial copy: the others read from the back.
    partial_source: bool,
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

    /// A source has chunk `i` in hand: it may write it unless another copy is written or
    /// landed already.
    fn claim(&mut self, i: usize) -> bool {
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
    fn take_among(&mut self, have: Option<&[bool]>, partial: bool) -> Option<usize> {
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

    fn landed(&mut self, i: usize) {
        if self.chunks[i] != Chunk::Landed {
            self.chunks[i] = Chunk::Landed;
            self.landed += 1;
        }
        while self.prefix < self.chunks.len() && self.chunks[self.prefix] == Chunk::Landed {
            self.prefix += 1;
        }
    }

    /// A source gave up on chunk `i`: it waits again unless another source is reading it.
    fn dropped(&mut self, i: usize) {
        self.chunks[i] = match self.chunks[i] {
            Chunk::Reading(n) if n > 1 => Chunk::Reading(n - 1),
            Chunk::Reading(_) => Chunk::Waiting,
            c => c,
        };
    }

    fn complete(&self) -> bool {
        self.landed == self.chunks.len()
    }

    /// Whether each chunk has landed (what this copy can relay).
    pub(super) fn landed_chunks(&self) -> impl Iterator<Item = bool> + '_ {
        self.chunks.iter().map(|c| *c == Chunk::Landed)
    }
}

/// What the sources of one fetch share (and `relay` serves from).
pub(super) struct Shared {
    http: reqwest::Client,
    token: String,
    key: String,
    pub(super) version: String,
    pub(super) size: u64,
    pub(super) file: std::fs::File,
    pub(super) board: Mutex<Board>,
    /// Signalled when `board.prefix` grows or the fetch is over.
    progress: Condvar,
    /// The digest the first source to answer recorded; every other must match it.
    pub(super) sha256: Mutex<Option<String>>,
    /// What each source has done so far, in the order of `sources` (kept here, not returned,
    /// so a source whose duplicate read is cut short at the end is still counted).
    tally: Mutex<Vec<Outcome>>,
}

/// What one source did.
struct Outcome {
    url: String,
    bytes: u64,
    /// Seconds spent reading the chunks it sent (not waiting for a partial copy to have more).
    seconds: f64,
    error: Option<Failed>,
}

/// Read `input` from `sources` (peer base URLs) into `temp`, verify it and commit it.
pub(super) async fn fetch(
    ctx: &Ctx,
    sources: &[&str],
    input: &AssignedInput,
    temp: &Path,
) -> Result<(PathBuf, bool), Failed> {
    let started = Instant::now();
    // Read back by the hasher as chunks land.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(temp)
        .map_err(io_failed)?;
    file.set_len(input.size).map_err(io_failed)?;
    let shared = Arc::new(Shared {
        http: ctx.http.clone(),
        token: ctx.token.clone(),
        key: CacheDir::key(&input.uri),
        version: input.version.clone(),
        size: input.size,
        file,
        board: Mutex::new(Board::new(input.size)),
        progress: Condvar::new(),
        sha256: Mutex::new(None),
        tally: Mutex::new(
            sources
                .iter()
                .map(|url| Outcome {
                    url: url.to_string(),
                    bytes: 0,
                    seconds: 0.0,
                    error: None,
                })
                .collect(),
        ),
    });
    let _over = Over(shared.clone());
    let _listed = ctx.relays.list(&shared.key, &shared);
    let hasher = {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || hash_as_landed(&shared))
    };
    let mut readers = JoinSet::new();
    for (k, url) in sources.iter().enumerate() {
        readers.spawn(read_from(shared.clone(), k, url.to_string()));
    }
    while readers.join_next().await.is_some() {
        let tally = shared.tally.lock().expect("tally lock");
        if tally
            .iter()
            .any(|o| matches!(o.error, Some(Failed::NoSpace)))
        {
            return Err(Failed::NoSpace);
        }
        // A duplicate read of the last chunks is not waited for.
        if shared.board.lock().expect("board lock").complete() {
            readers.abort_all();
        }
    }
    let outcomes = std::mem::take(&mut *shared.tally.lock().expect("tally lock"));
    let shares: Vec<String> = outcomes
        .iter()
        .map(|o| match &o.error {
            None => format!("{} {} MB", o.url, o.bytes >> 20),
            Some(Failed::Other(e)) => format!("{} {} MB, dropped: {e}", o.url, o.bytes >> 20),
            Some(Failed::NoSpace) => format!("{} no space", o.url),
        })
        .collect();
    if !shared.board.lock().expect("board lock").complete() {
        return Err(Failed::Other(format!(
            "every source failed: {}",
            shares.join("; ")
        )));
    }
    for o in &outcomes {
        if o.bytes > 0 {
            let _ = ctx.out.send(crate::proto::ToDispatcher::Transferred {
                from: Some(o.url.clone()),
                bytes: o.bytes,
                seconds: o.seconds,
            });
        }
    }
    let expected = shared.sha256.lock().expect("sha lock").clone();
    let got = hasher
        .await
        .map_err(|e| Failed::Other(e.to_string()))?
        .map_err(io_failed)?
        .ok_or_else(|| Failed::Other("the hasher stopped".into()))?;
    tracing::info!(
        uri = %crate::uri::redacted(&input.uri),
        "read {} MB from {} peers in {:.2} s ({})",
        input.size >> 20,
        sources.len(),
        started.elapsed().as_secs_f64(),
        shares.join("; ")
    );
    if expected
        .as_deref()
        .is_some_and(|s| !s.eq_ignore_ascii_case(&got))
    {
        // Which source sent the bad chunk is not known: every one that sent some checks its
        // copy.
        for o in outcomes.iter().filter(|o| o.bytes > 0) {
            ctx.bad_copy(&input.uri, &o.url);
        }
    }
    commit(
        ctx,
        temp,
        &input.uri,
        &input.version,
        input.size,
        &got,
        expected.as_deref(),
    )
    .await
}

/// Ends the fetch for the hasher however `fetch` returns.
struct Over(Arc<Shared>);

impl Drop for Over {
    fn drop(&mut self) {
        self.0.board.lock().expect("board lock").over = true;
        self.0.progress.notify_all();
    }
}

/// Hash the object in order as its chunks land, so that little is left to hash when the last
/// one does; None if the fetch ended first.
fn hash_as_landed(shared: &Shared) -> std::io::Result<Option<String>> {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; CHUNK as usize];
    let mut hashed = 0;
    let mut board = shared.board.lock().expect("board lock");
    loop {
        if hashed == board.chunks.len() {
            return Ok(Some(hex::encode(hasher.finalize())));
        }
        if board.prefix == hashed {
            if board.over {
                return Ok(None);
            }
            board = shared.progress.wait(board).expect("board lock");
            continue;
        }
        let upto = board.prefix;
        drop(board);
        for i in hashed..upto {
            let start = i as u64 * CHUNK;
            let len = ((start + CHUNK).min(shared.size) - start) as usize;
            shared.file.read_exact_at(&mut buf[..len], start)?;
            hasher.update(&buf[..len]);
        }
        hashed = upto;
        board = shared.board.lock().expect("board lock");
    }
}

fn io_failed(e: std::io::Error) -> Failed {
    if e.kind() == std::io::ErrorKind::StorageFull {
        Failed::NoSpace
    } else {
        Failed::Other(e.to_string())
    }
}

/// Source `k`'s loop: take a chunk, read it, write it in place, until the board is empty or
/// the source fails; what it did goes in the tally. A source that answers it lacks a chunk
/// (a partial copy) is asked next for one of those it said it has, and, when none of them is
/// wanted, again every [`POLL`].
async fn read_from(shared: Arc<Shared>, k: usize, url: String) {
    // The source said it is a partial copy (a 409; a later 404 means its fetch ended without
    // a copy).
    let mut partial = false;
    // What it has, as it said in its last answer (None: ask for the next chunk wanted).
    let mut have: Option<Vec<bool>> = None;
    let mut last_read = Instant::now();
    let began_reading = Instant::now();
    loop {
        let pick = shared
            .board
            .lock()
            .expect("board lock")
            .take_among(have.as_deref(), partial);
        let Some(i) = pick else {
            if have.is_none() || shared.board.lock().expect("board lock").complete() {
                return;
            }
            if last_read.elapsed() > STALL {
                let mut tally = shared.tally.lock().expect("tally lock");
                tally[k].error = Some(Failed::Other(format!(
                    "a partial copy with nothing new for {STALL:?}"
                )));
                return;
            }
            // Nothing it has is wanted: ask again later.
            tokio::time::sleep(POLL).await;
            have = None;
            continue;
        };
        let began = Instant::now();
        let read = match read_chunk(&shared, &url, i).await {
            // A relay is named as its own fetch is sent: in its first second it may not have
            // started yet. Later, or from a relay whose fetch has ended, 404 means no copy.
            Ok(Read::Missing) if !partial && began_reading.elapsed() < RELAY_START => {
                Ok(Read::Missing)
            }
            Ok(Read::Missing) => Err(Failed::Other("status 404 Not Found".into())),
            r => r,
        };
        let pause = {
            let mut tally = shared.tally.lock().expect("tally lock");
            let mine = &mut tally[k];
            match read {
                Ok(Read::Sent(n)) => {
                    mine.seconds += began.elapsed().as_secs_f64();
                    mine.bytes += n;
                    last_read = Instant::now();
                    have = None;
                    if n > 0 {
                        shared.board.lock().expect("board lock").landed(i);
                        shared.progress.notify_all();
                    }
                    false
                }
                Ok(Read::Missing) => {
                    shared.board.lock().expect("board lock").dropped(i);
                    true
                }
                Ok(Read::NotYet(h)) => {
                    let mut board = shared.board.lock().expect("board lock");
                    board.dropped(i);
                    board.partial_source = true;
                    drop(board);
                    have = Some(h);
                    partial = true;
                    false
                }
                Err(error) => {
                    mine.error = Some(error);
                    shared.board.lock().expect("board lock").dropped(i);
                    return;
                }
            }
        };
        if pause {
            tokio::time::sleep(POLL).await;
        }
    }
}

/// What a source answered for one chunk.
enum Read {
    /// It sent the chunk; the bytes written (0 when another copy landed first).
    Sent(u64),
    /// It is a partial copy without that chunk yet; the chunks it has.
    NotYet(Vec<bool>),
    /// It has no copy: a holder that dropped it, or a relay whose own fetch has not started.
    Missing,
}

/// Read chunk `i` from `url` and write it at its offset.
async fn read_chunk(shared: &Arc<Shared>, url: &str, i: usize) -> Result<Read, Failed> {
    let start = i as u64 * CHUNK;
    let end = (start + CHUNK).min(shared.size); // exclusive
    let resp = tokio::time::timeout(
        STALL,
        shared
            .http
            .get(format!("{url}/v1/cache/{}", shared.key))
            .bearer_auth(&shared.token)
            .header(reqwest::header::RANGE, format!("bytes={start}-{}", end - 1))
            .send(),
    )
    .await
    .map_err(|_| Failed::Other(format!("no answer in {STALL:?}")))?
    .map_err(|e| Failed::Other(crate::tls::describe(&e)))?;
    if resp.status() == reqwest::StatusCode::CONFLICT {
        let chunks = shared.board.lock().expect("board lock").chunks.len();
        return resp
            .headers()
            .get("x-diffuse-have")
            .and_then(|v| v.to_str().ok())
            .and_then(|h| super::relay::decode(h, chunks))
            .map(Read::NotYet)
            .ok_or_else(|| Failed::Other("a partial copy without a valid x-diffuse-have".into()));
    }
    if resp.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(Read::Missing);
    }
    if resp.status() != reqwest::StatusCode::PARTIAL_CONTENT {
        return Err(Failed::Other(format!("status {}", resp.status())));
    }
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    if header("x-diffuse-version").as_deref() != Some(shared.version.as_str()) {
        return Err(Failed::Other(format!(
            "holds version {:?}, wanted {}",
            header("x-diffuse-version"),
            shared.version
        )));
    }
    let Some(sha) = header("x-diffuse-sha256") else {
        return Err(Failed::Other("no digest".into()));
    };
    {
        let mut agreed = shared.sha256.lock().expect("sha lock");
        match agreed.as_deref() {
            None => *agreed = Some(sha),
            Some(s) if s == sha => {}
            Some(s) => {
                return Err(Failed::Other(format!(
                    "its copy's digest {sha} is not the others' {s}"
                )))
            }
        }
    }
    let want = (end - start) as usize;
    let mut data = Vec::with_capacity(want);
    let mut body = resp.bytes_stream();
    loop {
        match tokio::time::timeout(STALL, body.next()).await {
            Err(_) => return Err(Failed::Other(format!("stalled for {STALL:?}"))),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(Failed::Other(crate::tls::describe(&e))),
            Ok(Some(Ok(b))) => {
                if data.len() + b.len() > want {
                    return Err(Failed::Other("sent more than the range".into()));
                }
                data.extend_from_slice(&b);
            }
        }
    }
    if data.len() != want {
        return Err(Failed::Other(format!(
            "sent {} of {want} bytes",
            data.len()
        )));
    }
    if !shared.board.lock().expect("board lock").claim(i) {
        return Ok(Read::Sent(0)); // another source's copy landed first
    }
    let file = shared.clone();
    tokio::task::spawn_blocking(move || file.file.write_all_at(&data, start))
        .await
        .map_err(|e| Failed::Other(e.to_string()))?
        .map_err(io_failed)?;
    Ok(Read::Sent(want as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

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
