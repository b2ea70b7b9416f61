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

use super::ctx::Ctx;
use super::fetch_error::Failed;
use super::partial::{decode, Partial, CHUNK};
use crate::cache_dir::CacheDir;
use crate::proto::AssignedInput;
use futures_util::StreamExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

pub(super) use crate::proto::MULTI_SOURCE_MIN as MIN_SIZE;

/// A source that sends nothing for this long is dropped.
const STALL: Duration = Duration::from_secs(10);

/// How long a source answering 404 is asked again, as a relay whose fetch is starting.
const RELAY_START: Duration = Duration::from_secs(1);

/// How often a partial source with nothing wanted is asked again.
const POLL: Duration = Duration::from_millis(100);

/// How the sources of one fetch are reached, and what each has done so far.
struct Sources {
    http: reqwest::Client,
    token: String,
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

/// The digest of an object read by [`fetch`], to commit it with.
pub(super) struct Read {
    /// The SHA-256 of the bytes received.
    pub(super) sha256: String,
    /// The digest the sources recorded, which it must match.
    pub(super) expected: Option<String>,
}

/// Read `input` from `sources` (peer base URLs) into `temp` and hash it; the caller commits it
/// (which checks the digest against the one the sources recorded).
pub(super) async fn fetch(
    ctx: &Ctx,
    sources: &[&str],
    input: &AssignedInput,
    temp: &Path,
) -> Result<Read, Failed> {
    let started = Instant::now();
    // Read back by the hasher as chunks land.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(temp)
        .map_err(Failed::io)?;
    file.set_len(input.size).map_err(Failed::io)?;
    let shared = Arc::new(Partial::new(
        CacheDir::key(&input.uri),
        input.version.clone(),
        input.size,
        file,
    ));
    let src = Arc::new(Sources {
        http: ctx.http.clone(),
        token: ctx.token.clone(),
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
        readers.spawn(read_from(shared.clone(), src.clone(), k, url.to_string()));
    }
    while readers.join_next().await.is_some() {
        let tally = src.tally.lock().expect("tally lock");
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
    let outcomes = std::mem::take(&mut *src.tally.lock().expect("tally lock"));
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
        .map_err(Failed::io)?
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
    Ok(Read {
        sha256: got,
        expected,
    })
}

/// Ends the fetch for the hasher however `fetch` returns.
struct Over(Arc<Partial>);

impl Drop for Over {
    fn drop(&mut self) {
        self.0.board.lock().expect("board lock").over = true;
        self.0.progress.notify_all();
    }
}

/// Hash the object in order as its chunks land, so that little is left to hash when the last
/// one does; None if the fetch ended first.
fn hash_as_landed(shared: &Partial) -> std::io::Result<Option<String>> {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; CHUNK as usize];
    let mut hashed = 0;
    let mut board = shared.board.lock().expect("board lock");
    loop {
        if hashed == board.len() {
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

/// Source `k`'s loop: take a chunk, read it, write it in place, until the board is empty or
/// the source fails; what it did goes in the tally. A source that answers it lacks a chunk
/// (a partial copy) is asked next for one of those it said it has, and, when none of them is
/// wanted, again every [`POLL`].
async fn read_from(shared: Arc<Partial>, src: Arc<Sources>, k: usize, url: String) {
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
                let mut tally = src.tally.lock().expect("tally lock");
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
        let read = match read_chunk(&shared, &src, &url, i).await {
            // A relay is named as its own fetch is sent: in its first second it may not have
            // started yet. Later, or from a relay whose fetch has ended, 404 means no copy.
            Ok(Answer::Missing) if !partial && began_reading.elapsed() < RELAY_START => {
                Ok(Answer::Missing)
            }
            Ok(Answer::Missing) => Err(Failed::Other("status 404 Not Found".into())),
            r => r,
        };
        let pause = {
            let mut tally = src.tally.lock().expect("tally lock");
            let mine = &mut tally[k];
            match read {
                Ok(Answer::Sent(n)) => {
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
                Ok(Answer::Missing) => {
                    shared.board.lock().expect("board lock").dropped(i);
                    true
                }
                Ok(Answer::NotYet(h)) => {
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
enum Answer {
    /// It sent the chunk; the bytes written (0 when another copy landed first).
    Sent(u64),
    /// It is a partial copy without that chunk yet; the chunks it has.
    NotYet(Vec<bool>),
    /// It has no copy: a holder that dropped it, or a relay whose own fetch has not started.
    Missing,
}

/// Read chunk `i` from `url` and write it at its offset.
async fn read_chunk(
    shared: &Arc<Partial>,
    src: &Sources,
    url: &str,
    i: usize,
) -> Result<Answer, Failed> {
    let start = i as u64 * CHUNK;
    let end = (start + CHUNK).min(shared.size); // exclusive
    let resp = tokio::time::timeout(
        STALL,
        src.http
            .get(format!("{url}/v1/cache/{}", shared.key))
            .bearer_auth(&src.token)
            .header(reqwest::header::RANGE, format!("bytes={start}-{}", end - 1))
            .send(),
    )
    .await
    .map_err(|_| Failed::Other(format!("no answer in {STALL:?}")))?
    .map_err(|e| Failed::Other(crate::tls::describe(&e)))?;
    if resp.status() == reqwest::StatusCode::CONFLICT {
        let chunks = shared.board.lock().expect("board lock").len();
        return resp
            .headers()
            .get("x-diffuse-have")
            .and_then(|v| v.to_str().ok())
            .and_then(|h| decode(h, chunks))
            .map(Answer::NotYet)
            .ok_or_else(|| Failed::Other("a partial copy without a valid x-diffuse-have".into()));
    }
    if resp.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(Answer::Missing);
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
        return Ok(Answer::Sent(0)); // another source's copy landed first
    }
    let file = shared.clone();
    tokio::task::spawn_blocking(move || file.file.write_all_at(&data, start))
        .await
        .map_err(|e| Failed::Other(e.to_string()))?
        .map_err(Failed::io)?;
    Ok(Answer::Sent(want as u64))
}
