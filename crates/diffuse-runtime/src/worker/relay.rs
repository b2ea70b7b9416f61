//! Chunk-level relay (GDS's "a node that has received part of a file serves it onward"): while
//! a worker reads an object from peers in chunks (`multi`), the chunks that have landed are
//! served to other readers of the same object, so a batch staged to many workers does not wait
//! for each copy to be whole before it is copied on.
//!
//! A `Range` request for an object being read here is answered from the partial file:
//! - every chunk of the range has landed: 206 with those bytes, the version, and the digest the
//!   whole object must match (the one this worker's own sources gave);
//! - otherwise: 409 with `x-diffuse-have`, the landed chunks as a bitmap in hex
//!   ([`super::partial::encode`]), so the reader asks for one of those instead.
//!
//! A request without a range gets 404: only a chunked reader can use a partial copy. The reader
//! hashes the whole object and checks it against the digest before committing, as it does
//! for any peer, so a relayed chunk that was bad is never kept; and a partial copy is only
//! listed while its fetch lasts, so a failed fetch stops being served at once.

use super::partial::{encode, Partial, CHUNK};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

/// The objects being read in chunks here, by cache key.
#[derive(Default)]
pub(super) struct Relays(Mutex<HashMap<String, Arc<Partial>>>);

impl Relays {
    /// Serve the landed chunks of `shared` until the returned guard drops.
    pub(super) fn list<'a>(&'a self, key: &str, shared: &Arc<Partial>) -> Listed<'a> {
        self.0
            .lock()
            .expect("relays lock")
            .insert(key.to_string(), shared.clone());
        Listed {
            relays: self,
            key: key.to_string(),
            shared: shared.clone(),
        }
    }

    fn get(&self, key: &str) -> Option<Arc<Partial>> {
        self.0.lock().expect("relays lock").get(key).cloned()
    }
}

/// Lists a partial object while it lives.
pub(super) struct Listed<'a> {
    relays: &'a Relays,
    key: String,
    shared: Arc<Partial>,
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        let mut map = self.relays.0.lock().expect("relays lock");
        if map
            .get(&self.key)
            .is_some_and(|s| Arc::ptr_eq(s, &self.shared))
        {
            map.remove(&self.key);
        }
    }
}

/// Answer a request for `key`, which is not cached here, from a partial copy if there is one.
pub(super) async fn serve(relays: &Relays, key: &str, headers: &HeaderMap) -> Response {
    let Some(shared) = relays.get(key) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let Some((start, end)) = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|r| parse_range(r, shared.size))
    else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let (have, sha) = {
        let board = shared.board.lock().expect("board lock");
        let have: Vec<bool> = board.landed_chunks().collect();
        (have, shared.sha256.lock().expect("sha lock").clone())
    };
    let first = (start / CHUNK) as usize;
    let last = (end / CHUNK) as usize;
    let (Some(sha), true) = (sha, have[first..=last].iter().all(|h| *h)) else {
        let mut resp = StatusCode::CONFLICT.into_response();
        if let Ok(v) = HeaderValue::from_str(&encode(&have)) {
            resp.headers_mut().insert("x-diffuse-have", v);
        }
        return resp;
    };
    let len = (end - start + 1) as usize;
    let file = shared.clone();
    let read = tokio::task::spawn_blocking(move || {
        let mut buf = vec![0u8; len];
        file.file.read_exact_at(&mut buf, start).map(|_| buf)
    })
    .await;
    let Ok(Ok(bytes)) = read else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let mut resp = (StatusCode::PARTIAL_CONTENT, bytes).into_response();
    let h = resp.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_RANGE.as_str(),
            format!("bytes {start}-{end}/{}", shared.size),
        ),
        ("x-diffuse-sha256", sha),
        ("x-diffuse-version", shared.version.clone()),
    ] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(header::HeaderName::from_static(name), v);
        }
    }
    resp
}

/// `bytes=A-B` within an object of `size` bytes: (A, B), inclusive.
fn parse_range(range: &str, size: u64) -> Option<(u64, u64)> {
    let (a, b) = range.strip_prefix("bytes=")?.split_once('-')?;
    let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    (a <= b && b < size).then_some((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_single_and_within_the_object() {
        assert_eq!(parse_range("bytes=0-9", 10), Some((0, 9)));
        assert_eq!(parse_range("bytes=4-3", 10), None);
        assert_eq!(parse_range("bytes=0-10", 10), None);
        assert_eq!(parse_range("bytes=-5", 10), None);
        assert_eq!(parse_range("bytes=0-1,4-5", 10), None);
    }
}
