//! A worker node's on-disk object cache: files fetched from persistent storage or from peers,
//! kept within a byte quota, evicted in exactly the order the simulator's
//! [`NodeCache`](diffuse_core::NodeCache) would evict them.
//!
//! # Layout on disk
//!
//! ```text
//! root/objects/<key>        object data (read-only file), key = hex SHA-256 of the URI
//! root/objects/<key>.meta   JSON `Meta` { uri, size, sha256, version }
//! root/tmp/                 partial downloads and meta files being written; emptied at open
//! root/uncached/            objects larger than the quota, handed to the caller; emptied at open
//! ```
//!
//! # Invariants
//!
//! * **Atomic visibility.** Data is written to `tmp/`, fsynced, then renamed into `objects/`;
//!   its meta is written the same way (temp file, fsync, rename), then the directory is fsynced.
//!   ([`CacheDir::commit_hashed`] skips the fsyncs for a caller that verifies the whole cache
//!   after an unclean shutdown.) An object is only in the index once both renames succeeded. A data file without a meta
//!   (or a meta without data) left by a crash is dropped at the next open; when an object is
//!   replaced or removed, its meta is deleted before its data.
//! * **Integrity.** Size and SHA-256 are computed when an object is committed and recorded in its
//!   meta. The size is checked on every [`CacheDir::lookup`], on [`CacheDir::path_for_key`] and at
//!   open; the full checksum by [`CacheDir::verify`] and, optionally, at open. A corrupt,
//!   partial or missing object is dropped (and reported by [`CacheDir::take_evicted`]).
//! * **Quota.** Committed objects never exceed the quota ([`NodeCache`] guarantees
//!   `used <= quota`); the only bytes not counted are the one download in flight in `tmp/`.
//!   A full cache evicts, it does not fail; an object larger than the quota is not cached
//!   (it is moved to `uncached/` and the caller deletes it after use).
//! * **Confinement.** Object file names are always the hex SHA-256 of the URI, never derived from
//!   user path text. Keys received from outside ([`CacheDir::path_for_key`]) are accepted only if
//!   they are exactly 64 lowercase hex digits. Only regular files are served or read: symlinks,
//!   directories and other special files planted in `objects/` are refused (and dropped at open),
//!   and on Unix a file that is swapped between the `lstat` and the `open` is detected by
//!   comparing device and inode numbers.
//! * **Source versions.** Each object records the opaque version string of its source (size,
//!   mtime or ETag); a lookup expecting another version removes the object and reports `Stale`.
//! * **Order after restart.** At open the index is rebuilt in a deterministic order: by data file
//!   modification time (the time the download was written), then by key. Recency of use is not
//!   persisted across restarts.
//!
//! All calls are synchronous `std::fs`; the worker calls them from `spawn_blocking`.

use diffuse_core::{Admission, EvictionPolicy, NodeCache, ObjectId};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Seed of the Random eviction policy (the simulator's nodes seed their caches the same way).
const RANDOM_SEED: u64 = 0;
/// Length of a key: hex SHA-256.
const KEY_LEN: usize = 64;
/// Largest meta file read at open (a meta is a URI and three short strings).
const MAX_META_BYTES: u64 = 1 << 20;
/// Read buffer of the streaming checksum.
const BUF_BYTES: usize = 64 * 1024;

/// What is recorded with each cached object (stored as `objects/<key>.meta`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// The object's URI (its key is the hex SHA-256 of this string).
    pub uri: String,
    /// Size in bytes.
    pub size: u64,
    /// Lowercase hex SHA-256 of the content.
    pub sha256: String,
    /// Opaque version of the source (size, mtime or ETag) when it was fetched.
    pub version: String,
    /// Modification time of the data file once committed, in nanoseconds since the epoch (0:
    /// unknown). A data file whose modification time differs has been written to since: it is
    /// fully verified before it is used again, and not served to peers until then.
    #[serde(default)]
    pub modified_ns: u64,
}

/// The result of [`CacheDir::lookup`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Held, with the expected version: the path of the object (under `root/objects`).
    Hit(PathBuf),
    /// Was held, but with another source version: it has been removed (and is reported by
    /// [`CacheDir::take_evicted`]); the caller refetches.
    Stale,
    /// Not held.
    Miss,
}

/// The result of [`CacheDir::commit`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// Where the object now is: `root/objects/<key>` if cached, else a file under
    /// `root/uncached/` that the caller must hand back to [`CacheDir::release_uncached`].
    pub path: PathBuf,
    /// False if the object is larger than the quota and was not cached.
    pub cached: bool,
    /// URIs evicted to make room for this object, in eviction order. They are also reported by
    /// [`CacheDir::take_evicted`]; report one or the other, not both.
    pub evicted: Vec<String>,
}

/// One held object.
#[derive(Clone, Debug)]
struct Entry {
    id: ObjectId,
    key: String,
    meta: Meta,
}

/// A worker's on-disk cache: a root directory, the eviction bookkeeping ([`NodeCache`]) and the
/// index of held objects. See the module documentation for the layout and invariants.
#[derive(Debug)]
pub struct CacheDir {
    objects: PathBuf,
    tmp: PathBuf,
    uncached: PathBuf,
    cache: NodeCache,
    /// uri -> entry.
    entries: HashMap<String, Entry>,
    /// key -> uri.
    by_key: HashMap<String, String>,
    /// NodeCache id -> uri.
    by_id: HashMap<ObjectId, String>,
    next_id: u64,
    evicted: Vec<String>,
    /// Distinguishes temp names of this instance from any other.
    nonce: u64,
    seq: AtomicU64,
}

impl CacheDir {
    /// Open (or create) the cache at `root` with a byte `quota` and eviction `policy`.
    ///
    /// Layout: `root/objects/<key>` (data), `root/objects/<key>.meta` (JSON [`Meta`]),
    /// `root/tmp/` (partial downloads, emptied here), `root/uncached/` (emptied here).
    /// The index is rebuilt from `objects/` in a deterministic order (data mtime, then key).
    /// Objects whose meta is missing or unparsable, whose meta names another key, whose data is
    /// not a regular file or whose size differs from the meta are dropped; with
    /// `verify_on_open` the full SHA-256 of every object is checked too. If the objects exceed
    /// the quota, the first ones in that order are evicted until within it. The URIs of objects
    /// dropped or evicted here (when known) are reported by [`CacheDir::take_evicted`].
    ///
    /// Fails if `root` cannot be created or if `objects/`, `tmp/` or `uncached/` exists as
    /// something other than a real directory (e.g. a symlink).
    pub fn open(
        root: &Path,
        quota: u64,
        policy: EvictionPolicy,
        verify_on_open: bool,
    ) -> io::Result<CacheDir> {
        fs::create_dir_all(root)?;
        let objects = root.join("objects");
        let tmp = root.join("tmp");
        let uncached = root.join("uncached");
        for dir in [&objects, &tmp, &uncached] {
            ensure_real_dir(dir)?;
        }
        empty_dir(&tmp)?;
        empty_dir(&uncached)?;

        let nonce = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            ^ (u64::from(std::process::id()) << 32);
        let mut cd = CacheDir {
            objects,
            tmp,
            uncached,
            cache: NodeCache::new(policy, quota, RANDOM_SEED),
            entries: HashMap::new(),
            by_key: HashMap::new(),
            by_id: HashMap::new(),
            next_id: 0,
            evicted: Vec::new(),
            nonce,
            seq: AtomicU64::new(0),
        };

        let mut names = BTreeSet::new();
        for dent in fs::read_dir(&cd.objects)? {
            names.insert(dent?.file_name());
        }
        let mut found: Vec<(SystemTime, String, Meta)> = Vec::new();
        for name in &names {
            let path = cd.objects.join(name);
            let Some(s) = name.to_str() else {
                remove_any(&path);
                continue;
            };
            if let Some(k) = s.strip_suffix(".meta") {
                // Handled together with its data file; an orphan (or junk) meta goes.
                if !(valid_key(k) && names.contains(std::ffi::OsStr::new(k))) {
                    remove_any(&path);
                }
                continue;
            }
            if !valid_key(s) {
                remove_any(&path);
                continue;
            }
            match load_object(&cd.objects, s, verify_on_open) {
                Ok((mtime, meta)) => found.push((mtime, s.to_string(), meta)),
                Err(uri) => {
                    remove_object_files(&cd.objects, s);
                    cd.evicted.extend(uri);
                }
            }
        }
        sync_dir(&cd.objects);
        found.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        for (_, key, meta) in found {
            if let Err(meta) = cd.admit(key.clone(), meta) {
                // Larger than the whole quota.
                remove_object_files(&cd.objects, &key);
                cd.evicted.push(meta.uri);
            }
        }
        Ok(cd)
    }

    /// The key of `uri`: the lowercase hex SHA-256 of its bytes (the object's file name).
    pub fn key(uri: &str) -> String {
        hex::encode(Sha256::digest(uri.as_bytes()))
    }

    /// Byte quota.
    pub fn quota(&self) -> u64 {
        self.cache.quota()
    }

    /// Bytes held (sum of the sizes of cached objects).
    pub fn used(&self) -> u64 {
        self.cache.used()
    }

    /// Number of objects held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if nothing is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `uri` is held (does not count as a use and does not check the file).
    pub fn contains(&self, uri: &str) -> bool {
        self.entries.contains_key(uri)
    }

    /// Every URI held, sorted (for reporting at worker start).
    pub fn uris(&self) -> Vec<String> {
        let mut v: Vec<String> = self.entries.keys().cloned().collect();
        v.sort();
        v
    }

    /// A use of `uri` expecting source `version` (`None` = don't check).
    ///
    /// * [`Lookup::Hit`]: held with that version and its data file is a regular file of the
    ///   recorded size; the use touches the eviction order (exactly one `NodeCache::touch`).
    /// * [`Lookup::Stale`]: held with another version; the object is removed and reported by
    ///   [`CacheDir::take_evicted`].
    /// * [`Lookup::Miss`]: not held (or its data file was found missing or of the wrong size,
    ///   in which case it is dropped and reported).
    pub fn lookup(&mut self, uri: &str, version: Option<&str>) -> Lookup {
        let Some(e) = self.entries.get(uri) else {
            return Lookup::Miss;
        };
        if version.is_some_and(|v| v != e.meta.version) {
            self.drop_reported(uri);
            return Lookup::Stale;
        }
        let path = self.objects.join(&e.key);
        if !unchanged(&path, &e.meta) {
            // Written to since it was committed (or replaced, or truncated): use it only if its
            // content still has the recorded checksum; otherwise it is dropped.
            if !self.verify(uri).unwrap_or(false) {
                self.drop_reported(uri);
                return Lookup::Miss;
            }
            self.refresh_fingerprint(uri);
        }
        let Some(e) = self.entries.get(uri) else {
            return Lookup::Miss;
        };
        let id = e.id;
        self.cache.touch(id);
        Lookup::Hit(path)
    }

    /// Record the data file's current modification time for a verified object.
    fn refresh_fingerprint(&mut self, uri: &str) {
        let Some(e) = self.entries.get_mut(uri) else {
            return;
        };
        if let Ok(md) = fs::symlink_metadata(self.objects.join(&e.key)) {
            e.meta.modified_ns = modified_ns(&md);
            let (key, meta) = (e.key.clone(), e.meta.clone());
            let _ = self.write_meta(&key, &meta, false);
        }
    }

    /// Path and meta of a held object by key (for the peer server, which receives keys, not
    /// URIs). `None` unless `key` is exactly 64 lowercase hex digits, the object is held, and
    /// its data file is a regular file (not a symlink) of the recorded size. The path returned
    /// is always `root/objects/<key>`. Does not count as a use.
    pub fn path_for_key(&self, key: &str) -> Option<(PathBuf, Meta)> {
        if !valid_key(key) {
            return None;
        }
        let uri = self.by_key.get(key)?;
        let e = self.entries.get(uri)?;
        let path = self.objects.join(&e.key);
        unchanged(&path, &e.meta).then(|| (path, e.meta.clone()))
    }

    /// A fresh, unused temp file path under `root/tmp/` for a download. The file is not
    /// created; write it, then [`CacheDir::commit`] it (or delete it).
    pub fn temp_path(&self) -> PathBuf {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        self.tmp.join(format!("{:016x}-{n}.part", self.nonce))
    }

    /// Move a fully written temp file (from [`CacheDir::temp_path`]) into the cache as `uri`
    /// with source `version`.
    ///
    /// Computes its size and SHA-256 (streaming); if `expected_sha256` is given and differs
    /// (compared case-insensitively), the temp file is deleted, nothing changes, and an
    /// `InvalidData` error is returned. Then fsyncs it. If `uri` was already held, the old
    /// object is replaced (not reported as evicted, unless the new one is not cached).
    ///
    /// If the object is larger than the quota it is not cached and nothing is evicted: the temp
    /// file is moved to `root/uncached/<key>.<unique>` and returned with `cached = false`; the
    /// caller deletes it after use with [`CacheDir::release_uncached`].
    ///
    /// Otherwise objects are evicted by policy to make room (reported in [`Stored::evicted`]
    /// and by [`CacheDir::take_evicted`]), the data is made read-only and renamed atomically to
    /// `root/objects/<key>`, and its meta is written (temp, fsync, rename), then the directory
    /// is fsynced.
    ///
    /// Errors: `InvalidInput` if `temp` is not directly under `root/tmp/` or is not a regular
    /// file; `InvalidData` on a checksum mismatch; any I/O error (the cache is left consistent,
    /// the object not held).
    pub fn commit(
        &mut self,
        temp: &Path,
        uri: &str,
        version: &str,
        expected_sha256: Option<&str>,
    ) -> io::Result<Stored> {
        self.check_temp(temp)?;
        let (size, sha256) = {
            let mut f = open_regular(temp, true).map_err(|e| {
                if e.kind() == io::ErrorKind::InvalidData {
                    io::Error::new(io::ErrorKind::InvalidInput, e.to_string())
                } else {
                    e
                }
            })?;
            let (size, sha256) = hash_reader(&mut f)?;
            if let Some(want) = expected_sha256 {
                if !want.eq_ignore_ascii_case(&sha256) {
                    drop(f);
                    let _ = fs::remove_file(temp);
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("checksum mismatch for {uri}: expected {want}, got {sha256}"),
                    ));
                }
            }
            f.sync_all()?;
            (size, sha256)
        };
        self.place(temp, uri, version, size, sha256, true)
    }

    /// Like [`CacheDir::commit`], for a download whose size and SHA-256 the caller computed
    /// from the bytes as it wrote them (the worker does so while streaming, so a large object
    /// is not read a second time). The size is checked against the file; `expected_sha256`
    /// (the sender's checksum) against `sha256`.
    ///
    /// Nothing is fsynced: neither the data, nor its meta, nor the directory. This is for a
    /// caller that verifies every object ([`CacheDir::open`] with `verify_all`) after any
    /// shutdown it did not end with a sync, as the worker does (its clean-shutdown marker is
    /// written only after `sync -f`). A forced journal commit here would also flush the whole
    /// object's data under ext4's ordered mode: 0.57 s of a 1 GB peer fetch, measured.
    pub fn commit_hashed(
        &mut self,
        temp: &Path,
        uri: &str,
        version: &str,
        size: u64,
        sha256: &str,
        expected_sha256: Option<&str>,
    ) -> io::Result<Stored> {
        self.check_temp(temp)?;
        let on_disk = fs::symlink_metadata(temp)?;
        if !on_disk.is_file() || on_disk.len() != size {
            let _ = fs::remove_file(temp);
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{uri}: {} bytes written, {} on disk", size, on_disk.len()),
            ));
        }
        if let Some(want) = expected_sha256 {
            if !want.eq_ignore_ascii_case(sha256) {
                let _ = fs::remove_file(temp);
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("checksum mismatch for {uri}: expected {want}, got {sha256}"),
                ));
            }
        }
        self.place(temp, uri, version, size, sha256.to_ascii_lowercase(), false)
    }

    /// Refuse anything but a file directly under `root/tmp`.
    fn check_temp(&self, temp: &Path) -> io::Result<()> {
        if temp.parent() != Some(self.tmp.as_path()) || temp.file_name().is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "commit: {} is not a temp file of this cache",
                    temp.display()
                ),
            ));
        }
        Ok(())
    }

    /// Admit a verified temp file as `uri` (see `commit`); with `durable`, its meta and the
    /// directory are fsynced (the caller fsynced the data).
    fn place(
        &mut self,
        temp: &Path,
        uri: &str,
        version: &str,
        size: u64,
        sha256: String,
        durable: bool,
    ) -> io::Result<Stored> {
        let key = Self::key(uri);
        let replaced = self.drop_silently(uri);

        if size > self.cache.quota() {
            if replaced {
                self.evicted.push(uri.to_string());
            }
            let n = self.seq.fetch_add(1, Ordering::Relaxed);
            let path = self.uncached.join(format!("{key}.{:016x}-{n}", self.nonce));
            fs::rename(temp, &path)?;
            return Ok(Stored {
                path,
                cached: false,
                evicted: Vec::new(),
            });
        }

        let meta = Meta {
            uri: uri.to_string(),
            size,
            sha256,
            version: version.to_string(),
            modified_ns: 0, // set once the data file is in place
        };
        let mark = self.evicted.len();
        let id = self
            .admit(key.clone(), meta)
            .expect("size <= quota is always admitted");
        let evicted = self.evicted[mark..].to_vec();
        let data = self.objects.join(&key);
        let placed = (|| {
            let mut perms = fs::metadata(temp)?.permissions();
            perms.set_readonly(true);
            fs::set_permissions(temp, perms)?;
            fs::rename(temp, &data)?;
            let md = fs::symlink_metadata(&data)?;
            let entry = self.entries.get_mut(uri).expect("admitted above");
            entry.meta.modified_ns = modified_ns(&md);
            let meta = entry.meta.clone();
            self.write_meta(&key, &meta, durable)?;
            if durable {
                sync_dir(&self.objects);
            }
            Ok(())
        })();
        if let Err(e) = placed {
            // Roll back: the object is not held.
            if let Some(entry) = self.forget(uri) {
                self.cache.remove(entry.id);
            }
            let _ = fs::remove_file(temp);
            debug_assert!(!self.cache.contains(id));
            return Err(e);
        }
        Ok(Stored {
            path: data,
            cached: true,
            evicted,
        })
    }

    /// Delete a file returned by [`CacheDir::commit`] with `cached = false`. Does nothing for a
    /// path that is not directly under `root/uncached/` (or is a directory).
    pub fn release_uncached(&self, path: &Path) {
        if path.parent() != Some(self.uncached.as_path()) || path.file_name().is_none() {
            return;
        }
        if let Ok(md) = fs::symlink_metadata(path) {
            if !md.is_dir() {
                let _ = fs::remove_file(path);
            }
        }
    }

    /// Recompute the size and SHA-256 of a held object. On a mismatch (or a missing or
    /// non-regular data file) the object is removed, reported by [`CacheDir::take_evicted`], and
    /// `false` returned. Returns `false` if `uri` is not held. Other I/O errors are returned.
    pub fn verify(&mut self, uri: &str) -> io::Result<bool> {
        let Some(e) = self.entries.get(uri) else {
            return Ok(false);
        };
        let path = self.objects.join(&e.key);
        let ok = match open_regular(&path, false) {
            Ok(mut f) => {
                let (size, sha) = hash_reader(&mut f)?;
                size == e.meta.size && sha == e.meta.sha256
            }
            Err(err)
                if matches!(
                    err.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::InvalidData
                ) =>
            {
                false
            }
            Err(err) => return Err(err),
        };
        if !ok {
            self.drop_reported(uri);
        }
        Ok(ok)
    }

    /// Remove `uri` (invalidated by the dispatcher, or found corrupt): its files are deleted
    /// and it is reported by [`CacheDir::take_evicted`]. Returns whether it was held.
    pub fn remove(&mut self, uri: &str) -> bool {
        self.drop_reported(uri)
    }

    /// URIs that stopped being held since the last call (evictions, stale, corrupt, removed,
    /// dropped at open), in the order it happened, so the worker can report them.
    pub fn take_evicted(&mut self) -> Vec<String> {
        std::mem::take(&mut self.evicted)
    }

    /// Hard-link a held object to `dest` (the task's private input path) so that eviction
    /// cannot pull it from under a running task; falls back to a copy only if the hard link
    /// fails (e.g. cross-device). An existing non-directory at `dest` is replaced. Not a use
    /// (the [`CacheDir::lookup`] that found it was). `NotFound` if `uri` is not held or its data
    /// file is missing or corrupt (then it is dropped and reported).
    pub fn link_into(&mut self, uri: &str, dest: &Path) -> io::Result<()> {
        let Some(e) = self.entries.get(uri) else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{uri} is not cached"),
            ));
        };
        let src = self.objects.join(&e.key);
        if !regular_of_size(&src, e.meta.size) {
            self.drop_reported(uri);
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("cached file of {uri} is missing or corrupt"),
            ));
        }
        if let Ok(md) = fs::symlink_metadata(dest) {
            if md.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} is a directory", dest.display()),
                ));
            }
            fs::remove_file(dest)?;
        }
        match fs::hard_link(&src, dest) {
            Ok(()) => Ok(()),
            Err(link_err) => {
                let mut from = open_regular(&src, false)?;
                let mut to = File::create_new(dest).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("hard link failed ({link_err}), copy failed: {e}"),
                    )
                })?;
                let copied = io::copy(&mut from, &mut to).and_then(|n| {
                    to.sync_all()?;
                    Ok(n)
                });
                match copied {
                    Ok(_) => Ok(()),
                    Err(e) => {
                        drop(to);
                        let _ = fs::remove_file(dest);
                        Err(e)
                    }
                }
            }
        }
    }

    /// Put `meta` (whose data is, or is about to be, `objects/<key>`) into the index and the
    /// eviction order, evicting (and reporting) victims. `Err(meta)` if larger than the quota.
    fn admit(&mut self, key: String, meta: Meta) -> Result<ObjectId, Meta> {
        let id = ObjectId(self.next_id);
        match self.cache.insert(id, meta.size) {
            Admission::Stored(victims) => {
                self.next_id += 1;
                for v in victims {
                    if let Some(uri) = self.by_id.get(&v).cloned() {
                        self.forget(&uri);
                        self.evicted.push(uri);
                    }
                }
                self.by_key.insert(key.clone(), meta.uri.clone());
                self.by_id.insert(id, meta.uri.clone());
                self.entries
                    .insert(meta.uri.clone(), Entry { id, key, meta });
                Ok(id)
            }
            Admission::TooLarge => Err(meta),
            Admission::AlreadyPresent => unreachable!("object ids are never reused"),
        }
    }

    /// Remove `uri` from the index (not from the NodeCache) and delete its files.
    fn forget(&mut self, uri: &str) -> Option<Entry> {
        let e = self.entries.remove(uri)?;
        self.by_key.remove(&e.key);
        self.by_id.remove(&e.id);
        remove_object_files(&self.objects, &e.key);
        Some(e)
    }

    /// Remove `uri` everywhere without reporting it. Returns whether it was held.
    fn drop_silently(&mut self, uri: &str) -> bool {
        match self.forget(uri) {
            Some(e) => {
                self.cache.remove(e.id);
                true
            }
            None => false,
        }
    }

    /// Remove `uri` everywhere and report it. Returns whether it was held.
    fn drop_reported(&mut self, uri: &str) -> bool {
        let held = self.drop_silently(uri);
        if held {
            self.evicted.push(uri.to_string());
        }
        held
    }

    /// Write `objects/<key>.meta` atomically (temp under `tmp/`, fsync, rename).
    fn write_meta(&self, key: &str, meta: &Meta, durable: bool) -> io::Result<()> {
        let json = serde_json::to_vec(meta).map_err(io::Error::other)?;
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let tmp = self.tmp.join(format!("{:016x}-{n}.meta.part", self.nonce));
        let res = (|| {
            let mut f = File::create_new(&tmp)?;
            f.write_all(&json)?;
            if durable {
                f.sync_all()?;
            }
            drop(f);
            fs::rename(&tmp, self.objects.join(format!("{key}.meta")))
        })();
        if res.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        res
    }
}

/// Size and lowercase hex SHA-256 of the file at `path`, read in a streaming fashion.
pub fn sha256_file(path: &Path) -> io::Result<(u64, String)> {
    let mut f = File::open(path)?;
    hash_reader(&mut f)
}

fn hash_reader(r: &mut impl Read) -> io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; BUF_BYTES];
    let mut size = 0u64;
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((size, hex::encode(hasher.finalize())))
}

/// True if `s` is a well-formed key: exactly 64 lowercase hex digits.
fn valid_key(s: &str) -> bool {
    s.len() == KEY_LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// True if `path` is a regular file (not a symlink) of `size` bytes.
fn regular_of_size(path: &Path, size: u64) -> bool {
    fs::symlink_metadata(path).is_ok_and(|md| md.file_type().is_file() && md.len() == size)
}

/// Open `path` only if it is a regular file and not a symlink (`InvalidData` otherwise). On
/// Unix, a swap between the check and the open is detected by comparing device and inode.
fn open_regular(path: &Path, write: bool) -> io::Result<File> {
    let before = fs::symlink_metadata(path)?;
    if !before.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a regular file", path.display()),
        ));
    }
    let f = fs::OpenOptions::new().read(true).write(write).open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let after = f.metadata()?;
        if (after.dev(), after.ino()) != (before.dev(), before.ino()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} changed while being opened", path.display()),
            ));
        }
    }
    Ok(f)
}

/// Create `dir` if missing; fail if it exists as anything but a real directory.
fn ensure_real_dir(dir: &Path) -> io::Result<()> {
    match fs::symlink_metadata(dir) {
        Ok(md) if md.file_type().is_dir() => Ok(()),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a directory", dir.display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir(dir),
        Err(e) => Err(e),
    }
}

/// Delete everything inside `dir` (symlinks are removed, never followed).
fn empty_dir(dir: &Path) -> io::Result<()> {
    for dent in fs::read_dir(dir)? {
        remove_any(&dent?.path());
    }
    Ok(())
}

/// Delete a file, symlink or directory tree at `path` (never following symlinks); errors are
/// logged and otherwise ignored.
fn remove_any(path: &Path) {
    let res = match fs::symlink_metadata(path) {
        Ok(md) if md.file_type().is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) => Err(e),
    };
    if let Err(e) = res {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "cache: cannot remove");
        }
    }
}

/// Delete an object's meta, then its data (so a crash in between leaves data without a meta,
/// which the next open drops).
fn remove_object_files(objects: &Path, key: &str) {
    remove_any(&objects.join(format!("{key}.meta")));
    remove_any(&objects.join(key));
}

/// Fsync a directory so renames in it are durable (best effort; a no-op off Unix).
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

/// Check one object found at open. `Ok((data mtime, meta))` if it is sound, else `Err(uri)`
/// (the URI if its meta could be read) and the caller drops it.
fn load_object(
    objects: &Path,
    key: &str,
    verify: bool,
) -> Result<(SystemTime, Meta), Option<String>> {
    let data = objects.join(key);
    let meta_path = objects.join(format!("{key}.meta"));
    let md = fs::symlink_metadata(&data).map_err(|_| None)?;
    if !md.file_type().is_file() {
        return Err(None);
    }
    let meta_md = fs::symlink_metadata(&meta_path).map_err(|_| None)?;
    if !meta_md.file_type().is_file() || meta_md.len() > MAX_META_BYTES {
        return Err(None);
    }
    let mut bytes = Vec::new();
    open_regular(&meta_path, false)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|_| None)?;
    let meta: Meta = serde_json::from_slice(&bytes).map_err(|_| None)?;
    let uri = Some(meta.uri.clone());
    if CacheDir::key(&meta.uri) != key || !valid_key(&meta.sha256) || md.len() != meta.size {
        return Err(uri);
    }
    if verify || modified_ns(&md) != meta.modified_ns {
        let (size, sha) = open_regular(&data, false)
            .and_then(|mut f| hash_reader(&mut f))
            .map_err(|_| uri.clone())?;
        if size != meta.size || sha != meta.sha256 {
            return Err(uri);
        }
    }
    let meta = Meta {
        modified_ns: modified_ns(&md),
        ..meta
    };
    Ok((md.modified().unwrap_or(UNIX_EPOCH), meta))
}

/// A file's modification time in nanoseconds since the epoch (0 if unavailable).
fn modified_ns(md: &fs::Metadata) -> u64 {
    md.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Whether the data file at `path` is still the regular file of `meta`'s size and modification
/// time (the cheap check made on every use; a full check hashes the content).
fn unchanged(path: &Path, meta: &Meta) -> bool {
    fs::symlink_metadata(path).is_ok_and(|md| {
        md.file_type().is_file() && md.len() == meta.size && modified_ns(&md) == meta.modified_ns
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tempfile::TempDir;

    /// Flip the byte at `offset` and put the modification time back: corruption the file
    /// system did not see (bit rot), which only a checksum finds.
    fn flip_silently(path: &Path, offset: usize) {
        let mtime = fs::metadata(path).unwrap().modified().unwrap();
        let mut b = fs::read(path).unwrap();
        b[offset] ^= 0xff;
        fs::write(path, &b).unwrap();
        let f = fs::OpenOptions::new().write(true).open(path).unwrap();
        f.set_modified(mtime).unwrap();
    }

    fn open(dir: &Path, quota: u64, policy: EvictionPolicy) -> CacheDir {
        CacheDir::open(dir, quota, policy, false).unwrap()
    }

    /// Download `data` into a temp file and commit it as `uri`.
    fn put(c: &mut CacheDir, uri: &str, data: &[u8], version: &str) -> Stored {
        let t = c.temp_path();
        fs::write(&t, data).unwrap();
        c.commit(&t, uri, version, None).unwrap()
    }

    fn hit(l: Lookup) -> PathBuf {
        match l {
            Lookup::Hit(p) => p,
            other => panic!("expected Hit, got {other:?}"),
        }
    }

    #[allow(clippy::permissions_set_readonly_false)]
    fn make_writable(p: &Path) {
        let mut perms = fs::metadata(p).unwrap().permissions();
        perms.set_readonly(false);
        fs::set_permissions(p, perms).unwrap();
    }

    fn dir_names(p: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(p)
            .unwrap()
            .map(|d| d.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn cache_dir_store_lookup_hit() {
        let d = TempDir::new().unwrap();
        let mut c = open(d.path(), 1000, EvictionPolicy::Lru);
        assert!(c.is_empty());
        assert_eq!(c.lookup("s3://b/a", None), Lookup::Miss);
        let s = put(&mut c, "s3://b/a", b"hello world", "v1");
        assert!(s.cached);
        assert!(s.evicted.is_empty());
        let key = CacheDir::key("s3://b/a");
        assert_eq!(key.len(), 64);
        assert_eq!(s.path, d.path().join("objects").join(&key));
        assert_eq!(c.used(), 11);
        assert_eq!(c.len(), 1);
        assert!(c.contains("s3://b/a"));
        assert_eq!(c.uris(), vec!["s3://b/a".to_string()]);
        let p = hit(c.lookup("s3://b/a", Some("v1")));
        assert_eq!(fs::read(&p).unwrap(), b"hello world");
        let p2 = hit(c.lookup("s3://b/a", None));
        assert_eq!(p, p2);
        // Meta on disk matches.
        let meta: Meta = serde_json::from_slice(
            &fs::read(d.path().join("objects").join(format!("{key}.meta"))).unwrap(),
        )
        .unwrap();
        let (size, sha) = sha256_file(&p).unwrap();
        assert_eq!(
            meta,
            Meta {
                uri: "s3://b/a".into(),
                size,
                sha256: sha,
                version: "v1".into(),
                modified_ns: modified_ns(&fs::metadata(&p).unwrap()),
            }
        );
        // The cached object is read-only (a task writing through a hard link cannot corrupt it).
        assert!(fs::metadata(&p).unwrap().permissions().readonly());
        // Temp dir is empty after commit.
        assert!(dir_names(&d.path().join("tmp")).is_empty());
        assert!(c.take_evicted().is_empty());
    }

    #[test]
    fn cache_dir_expected_checksum_and_bad_temp_paths() {
        let d = TempDir::new().unwrap();
        let mut c = open(d.path(), 1000, EvictionPolicy::Lru);
        let t = c.temp_path();
        fs::write(&t, b"abc").unwrap();
        let err = c.commit(&t, "u", "v", Some(&"0".repeat(64))).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(!t.exists(), "bad download is deleted");
        assert!(!c.contains("u"));
        assert_eq!(c.used(), 0);

        let t = c.temp_path();
        fs::write(&t, b"abc").unwrap();
        let want = hex::encode(Sha256::digest(b"abc")).to_uppercase();
        assert!(c.commit(&t, "u", "v", Some(&want)).unwrap().cached);

        // A temp file outside root/tmp is refused (and left alone).
        let outside = d.path().join("elsewhere");
        fs::write(&outside, b"x").unwrap();
        let err = c.commit(&outside, "w", "v", None).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(outside.exists());
        let sneaky = d.path().join("tmp").join("..").join("elsewhere");
        assert_eq!(
            c.commit(&sneaky, "w", "v", None).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert!(!c.contains("w"));
    }

    #[test]
    fn cache_dir_temp_not_visible_before_commit() {
        let d = TempDir::new().unwrap();
        let mut c = open(d.path(), 1000, EvictionPolicy::Lru);
        let uri = "file:///data/x";
        let t = c.temp_path();
        assert!(t.starts_with(d.path().join("tmp")));
        assert_ne!(t, c.temp_path(), "temp paths are unique");
        fs::write(&t, b"partial download").unwrap();
        assert_eq!(c.lookup(uri, None), Lookup::Miss);
        assert!(!c.contains(uri));
        assert!(c.path_for_key(&CacheDir::key(uri)).is_none());
        assert!(dir_names(&d.path().join("objects")).is_empty());
        assert_eq!(c.used(), 0);
        c.commit(&t, uri, "v", None).unwrap();
        assert!(!t.exists());
        let p = hit(c.lookup(uri, None));
        assert_eq!(fs::read(p).unwrap(), b"partial download");
        let key = CacheDir::key(uri);
        assert_eq!(
            dir_names(&d.path().join("objects")),
            vec![key.clone(), format!("{key}.meta")]
        );
    }

    #[test]
    fn cache_dir_lru_and_fifo_orders() {
        for (policy, victim) in [(EvictionPolicy::Lru, "u2"), (EvictionPolicy::Fifo, "u1")] {
            let d = TempDir::new().unwrap();
            let mut c = open(d.path(), 30, policy);
            for u in ["u1", "u2", "u3"] {
                assert!(put(&mut c, u, &[7u8; 10], "v").evicted.is_empty());
            }
            hit(c.lookup("u1", None));
            let s = put(&mut c, "u4", &[8u8; 10], "v");
            assert_eq!(s.evicted, vec![victim.to_string()], "{policy}");
            assert_eq!(c.take_evicted(), vec![victim.to_string()]);
            assert!(!c.contains(victim));
            assert!(!d
                .path()
                .join("objects")
                .join(CacheDir::key(victim))
                .exists());
            assert_eq!(c.used(), 30);
        }
    }

    /// Drive a CacheDir and a bare NodeCache with the same operations: the evictions must be
    /// identical, and the quota always respected, while inserting 10x the quota.
    #[test]
    fn cache_dir_eviction_follows_node_cache() {
        for policy in [
            EvictionPolicy::Lru,
            EvictionPolicy::Fifo,
            EvictionPolicy::Lfu,
            EvictionPolicy::Random,
        ] {
            let d = TempDir::new().unwrap();
            let quota = 1000;
            let mut c = open(d.path(), quota, policy);
            let mut mirror = NodeCache::new(policy, quota, RANDOM_SEED);
            let mut ids: HashMap<String, ObjectId> = HashMap::new();
            let mut rev: HashMap<ObjectId, String> = HashMap::new();
            let mut next = 0u64;
            let mut rng = 0x2545_f491_4f6c_dd1du64;
            let mut inserted = 0u64;
            let mut hits = 0;
            let mut step = 0u32;
            while inserted < 10 * quota {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let uri = format!("s3://bucket/obj-{}", rng % 25);
                let size = 40 + (rng >> 8) % 200;
                if c.contains(&uri) {
                    hit(c.lookup(&uri, Some("v")));
                    assert!(mirror.touch(ids[&uri]));
                    hits += 1;
                } else {
                    let data = vec![(step % 251) as u8; size as usize];
                    let s = put(&mut c, &uri, &data, "v");
                    assert!(s.cached);
                    let id = ObjectId(next);
                    next += 1;
                    ids.insert(uri.clone(), id);
                    rev.insert(id, uri.clone());
                    let want: Vec<String> = match mirror.insert(id, size) {
                        Admission::Stored(v) => v.iter().map(|o| rev[o].clone()).collect(),
                        other => panic!("{other:?}"),
                    };
                    assert_eq!(s.evicted, want, "{policy} step {step}");
                    assert_eq!(c.take_evicted(), want);
                    inserted += size;
                }
                assert!(c.used() <= quota);
                assert_eq!(c.used(), mirror.used());
                assert_eq!(c.len(), mirror.len());
                step += 1;
            }
            assert!(hits > 0, "the run exercised hits");
            // On disk: exactly a data file and a meta per held object.
            assert_eq!(dir_names(&d.path().join("objects")).len(), 2 * c.len());
            let on_disk: u64 = c
                .uris()
                .iter()
                .map(|u| {
                    fs::metadata(d.path().join("objects").join(CacheDir::key(u)))
                        .unwrap()
                        .len()
                })
                .sum();
            assert_eq!(on_disk, c.used());
        }
    }

    #[test]
    fn cache_dir_too_large_is_not_cached() {
        let d = TempDir::new().unwrap();
        let mut c = open(d.path(), 100, EvictionPolicy::Lru);
        put(&mut c, "a", &[1u8; 40], "v");
        put(&mut c, "b", &[2u8; 40], "v");
        let big = vec![3u8; 101];
        let s = put(&mut c, "big", &big, "v");
        assert!(!s.cached);
        assert!(s.evicted.is_empty());
        assert!(s.path.starts_with(d.path().join("uncached")));
        assert_eq!(fs::read(&s.path).unwrap(), big);
        assert!(c.contains("a") && c.contains("b") && !c.contains("big"));
        assert_eq!(c.used(), 80);
        assert!(c.take_evicted().is_empty());
        assert_eq!(c.lookup("big", None), Lookup::Miss);

        // release_uncached deletes it, but never anything outside root/uncached.
        let outside = d.path().join("keep-me");
        fs::write(&outside, b"x").unwrap();
        c.release_uncached(&outside);
        c.release_uncached(&d.path().join("uncached").join("..").join("keep-me"));
        assert!(outside.exists());
        c.release_uncached(&s.path);
        assert!(!s.path.exists());

        // Uncached leftovers are emptied at open.
        let s2 = put(&mut c, "big", &big, "v");
        assert!(s2.path.exists());
        drop(c);
        let _c = open(d.path(), 100, EvictionPolicy::Lru);
        assert!(dir_names(&d.path().join("uncached")).is_empty());
    }

    #[test]
    fn cache_dir_stale_version_is_removed_and_reported() {
        let d = TempDir::new().unwrap();
        let mut c = open(d.path(), 1000, EvictionPolicy::Lru);
        let s = put(&mut c, "u", b"old contents", "etag-1");
        hit(c.lookup("u", Some("etag-1")));
        assert_eq!(c.lookup("u", Some("etag-2")), Lookup::Stale);
        assert!(!c.contains("u"));
        assert!(!s.path.exists());
        assert_eq!(c.used(), 0);
        assert_eq!(c.take_evicted(), vec!["u".to_string()]);
        assert!(c.take_evicted().is_empty());
        assert_eq!(c.lookup("u", Some("etag-2")), Lookup::Miss);
        // Refetch with the new version.
        put(&mut c, "u", b"new contents!", "etag-2");
        let p = hit(c.lookup("u", Some("etag-2")));
        assert_eq!(fs::read(p).unwrap(), b"new contents!");
        // Re-committing a held uri replaces it silently.
        put(&mut c, "u", b"newest", "etag-3");
        assert_eq!(c.used(), 6);
        assert_eq!(c.len(), 1);
        assert!(c.take_evicted().is_empty());
        hit(c.lookup("u", Some("etag-3")));
    }

    #[test]
    fn cache_dir_verify_detects_flipped_byte() {
        let d = TempDir::new().unwrap();
        let mut c = open(d.path(), 1000, EvictionPolicy::Lru);
        let s = put(&mut c, "u", b"0123456789", "v");
        put(&mut c, "w", b"other", "v");
        assert!(c.verify("u").unwrap());
        assert!(c.take_evicted().is_empty());
        make_writable(&s.path);
        flip_silently(&s.path, 4);
        // Same size and modification time (bit rot), so only the checksum can tell.
        assert!(matches!(c.lookup("u", None), Lookup::Hit(_)));
        assert!(!c.verify("u").unwrap());
        assert!(!c.contains("u"));
        assert!(!s.path.exists());
        assert_eq!(c.take_evicted(), vec!["u".to_string()]);
        assert_eq!(c.used(), 5);
        assert!(!c.verify("u").unwrap(), "not held");
        assert!(c.verify("w").unwrap());
        // remove() reports too.
        assert!(c.remove("w"));
        assert!(!c.remove("w"));
        assert_eq!(c.take_evicted(), vec!["w".to_string()]);
        assert!(c.is_empty());
    }

    #[test]
    fn cache_dir_reopen_rebuilds_index_and_drops_bad_objects() {
        let d = TempDir::new().unwrap();
        let objects = d.path().join("objects");
        {
            let mut c = open(d.path(), 1000, EvictionPolicy::Lru);
            put(&mut c, "good", b"good data", "v1");
            put(&mut c, "trunc", b"will be truncated", "v1");
            put(&mut c, "flip", b"will be flipped", "v1");
            put(&mut c, "nometa", b"meta goes missing", "v1");
            put(&mut c, "badmeta", b"meta is garbage", "v1");
            // Leave a partial download behind, and a stray directory in tmp.
            fs::write(c.temp_path(), b"partial").unwrap();
            fs::create_dir(d.path().join("tmp").join("junkdir")).unwrap();
        }
        let p = |u: &str| objects.join(CacheDir::key(u));
        let m = |u: &str| objects.join(format!("{}.meta", CacheDir::key(u)));
        make_writable(&p("trunc"));
        fs::OpenOptions::new()
            .write(true)
            .open(p("trunc"))
            .unwrap()
            .set_len(5)
            .unwrap();
        make_writable(&p("flip"));
        flip_silently(&p("flip"), 0);
        fs::remove_file(m("nometa")).unwrap();
        fs::write(m("badmeta"), b"{not json").unwrap();
        // An orphan meta and a junk file.
        fs::write(objects.join(format!("{}.meta", "a".repeat(64))), b"{}").unwrap();
        fs::write(objects.join("junk.txt"), b"junk").unwrap();

        let mut c = open(d.path(), 1000, EvictionPolicy::Lru);
        assert!(dir_names(&d.path().join("tmp")).is_empty());
        // Without verify_on_open the silently flipped object survives the size and time check.
        assert_eq!(c.uris(), vec!["flip".to_string(), "good".to_string()]);
        assert_eq!(
            c.used(),
            (b"good data".len() + b"will be flipped".len()) as u64
        );
        assert!(!p("trunc").exists() && !m("trunc").exists());
        assert!(!p("nometa").exists());
        assert!(!p("badmeta").exists() && !m("badmeta").exists());
        assert!(!objects.join("junk.txt").exists());
        assert_eq!(dir_names(&objects).len(), 4);
        assert_eq!(c.take_evicted(), vec!["trunc".to_string()]);
        assert_eq!(
            fs::read(hit(c.lookup("good", Some("v1")))).unwrap(),
            b"good data"
        );
        drop(c);

        // With verify_on_open the flipped object is dropped as well.
        let mut c = CacheDir::open(d.path(), 1000, EvictionPolicy::Lru, true).unwrap();
        assert_eq!(c.uris(), vec!["good".to_string()]);
        assert_eq!(c.take_evicted(), vec!["flip".to_string()]);
        assert!(!p("flip").exists());
        drop(c);

        // Reopening with a smaller quota evicts until within it.
        let mut c = open(d.path(), 4, EvictionPolicy::Lru);
        assert!(c.is_empty());
        assert_eq!(c.take_evicted(), vec!["good".to_string()]);
        assert!(dir_names(&objects).is_empty());
    }

    #[test]
    fn cache_dir_reopen_over_quota_evicts_oldest_first() {
        let d = TempDir::new().unwrap();
        {
            let mut c = open(d.path(), 100, EvictionPolicy::Fifo);
            for (i, u) in ["a", "b", "c"].iter().enumerate() {
                put(&mut c, u, &[i as u8; 30], "v");
                // Distinct mtimes even on coarse-grained file systems.
                let f = File::open(d.path().join("objects").join(CacheDir::key(u))).unwrap();
                f.set_modified(UNIX_EPOCH + std::time::Duration::from_secs(1000 + i as u64))
                    .unwrap();
            }
        }
        let mut c = open(d.path(), 60, EvictionPolicy::Fifo);
        assert_eq!(c.take_evicted(), vec!["a".to_string()]);
        assert_eq!(c.uris(), vec!["b".to_string(), "c".to_string()]);
        assert!(c.used() <= c.quota());
        let s = put(&mut c, "d", &[9u8; 30], "v");
        assert_eq!(s.evicted, vec!["b".to_string()]);
    }

    #[test]
    fn cache_dir_path_for_key_refuses_bad_keys() {
        let d = TempDir::new().unwrap();
        let mut c = open(d.path(), 1000, EvictionPolicy::Lru);
        let s = put(&mut c, "u", b"data", "v");
        let key = CacheDir::key("u");
        let (path, meta) = c.path_for_key(&key).unwrap();
        assert_eq!(path, s.path);
        assert!(path.starts_with(d.path().join("objects")));
        assert_eq!(meta.uri, "u");
        assert_eq!(meta.size, 4);

        // A file outside the cache root that an attacker would like to read.
        let secret = d.path().join("secret");
        fs::write(&secret, b"secret").unwrap();
        let bad = [
            String::new(),
            "..".into(),
            "../secret".into(),
            "objects/../../secret".into(),
            "%2e%2e/secret".into(),
            format!("%2e%2e{}", &key[6..]),
            format!("{}/x", &key[..62]),
            format!("..{}", &key[2..]),
            format!("{}\\x", &key[..62]),
            format!("{}\0", &key[..63]),
            format!("/{}", &key[1..]),
            secret.display().to_string(),
            key[..63].to_string(),
            format!("{key}0"),
            format!("{}g", &key[..63]),
            key.to_uppercase(),
            format!("{key}.meta"),
        ];
        for k in &bad {
            assert!(c.path_for_key(k).is_none(), "{k:?} must be refused");
        }
        // Well-formed but not held.
        assert!(c.path_for_key(&"0".repeat(64)).is_none());
    }

    #[cfg(unix)]
    #[test]
    fn cache_dir_symlink_in_objects_is_not_served() {
        use std::os::unix::fs::symlink;
        let d = TempDir::new().unwrap();
        let root = d.path().join("cache");
        let secret = d.path().join("secret");
        fs::write(&secret, b"top secret").unwrap();
        let mut c = open(&root, 1000, EvictionPolicy::Lru);
        // Held object whose data file is replaced by a symlink of the same size.
        let s = put(&mut c, "u", b"0123456789", "v");
        fs::remove_file(&s.path).unwrap();
        symlink(&secret, &s.path).unwrap();
        assert!(fs::symlink_metadata(&s.path)
            .unwrap()
            .file_type()
            .is_symlink());
        let key = CacheDir::key("u");
        assert!(c.path_for_key(&key).is_none());
        assert!(!c.verify("u").unwrap());
        assert!(c.path_for_key(&key).is_none());
        let dest = d.path().join("task-input");
        put(&mut c, "w", b"0123456789", "v");
        let wpath = root.join("objects").join(CacheDir::key("w"));
        fs::remove_file(&wpath).unwrap();
        symlink(&secret, &wpath).unwrap();
        assert_eq!(c.lookup("w", None), Lookup::Miss);
        assert!(c.link_into("w", &dest).is_err());
        assert!(!dest.exists());

        // A planted symlink with a valid-looking meta is dropped at open, target untouched.
        let planted = "s3://b/planted";
        let pkey = CacheDir::key(planted);
        let meta = Meta {
            uri: planted.into(),
            size: 10,
            sha256: sha256_file(&secret).unwrap().1,
            version: "v".into(),
            modified_ns: 0,
        };
        drop(c);
        symlink(&secret, root.join("objects").join(&pkey)).unwrap();
        fs::write(
            root.join("objects").join(format!("{pkey}.meta")),
            serde_json::to_vec(&meta).unwrap(),
        )
        .unwrap();
        let c = CacheDir::open(&root, 1000, EvictionPolicy::Lru, true).unwrap();
        assert!(!c.contains(planted));
        assert!(c.path_for_key(&pkey).is_none());
        assert!(fs::symlink_metadata(root.join("objects").join(&pkey)).is_err());
        assert_eq!(fs::read(&secret).unwrap(), b"top secret");

        // A symlinked subdirectory is refused at open.
        let root2 = d.path().join("cache2");
        fs::create_dir(&root2).unwrap();
        symlink(d.path(), root2.join("objects")).unwrap();
        assert!(CacheDir::open(&root2, 1000, EvictionPolicy::Lru, false).is_err());
    }

    #[test]
    fn cache_dir_link_into_survives_eviction() {
        let d = TempDir::new().unwrap();
        let mut c = open(d.path().join("cache").as_path(), 20, EvictionPolicy::Lru);
        let s = put(&mut c, "in", b"task input", "v");
        let dest = d.path().join("task").join("input.dat");
        fs::create_dir_all(dest.parent().unwrap()).unwrap();
        fs::write(&dest, b"stale leftover").unwrap();
        hit(c.lookup("in", None));
        c.link_into("in", &dest).unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"task input");
        // Evict it.
        let s2 = put(&mut c, "other", &[0u8; 20], "v");
        assert_eq!(s2.evicted, vec!["in".to_string()]);
        assert!(!c.contains("in"));
        assert!(!s.path.exists());
        assert_eq!(fs::read(&dest).unwrap(), b"task input");
        assert!(c.link_into("in", &dest).is_err());
        assert_eq!(
            fs::read(&dest).unwrap(),
            b"task input",
            "failed link leaves dest"
        );
    }

    #[test]
    fn an_object_written_to_after_commit_is_verified_before_use_and_dropped_if_changed() {
        let d = TempDir::new().unwrap();
        let mut c = open(d.path(), 1 << 20, EvictionPolicy::Lru);
        let t = c.temp_path();
        fs::write(&t, b"hello world").unwrap();
        c.commit(&t, "s3://b/a", "v1", None).unwrap();
        let path = hit(c.lookup("s3://b/a", None));
        let key = CacheDir::key("s3://b/a");
        let later = |p: &Path| {
            let f = fs::OpenOptions::new().write(true).open(p).unwrap();
            f.set_modified(SystemTime::now() + std::time::Duration::from_secs(5))
                .unwrap();
        };
        // Touched, same content: verified, still a hit, and served again.
        later(&path);
        assert!(c.path_for_key(&key).is_none(), "not served until verified");
        assert_eq!(hit(c.lookup("s3://b/a", None)), path);
        assert!(c.path_for_key(&key).is_some());
        // One byte flipped: dropped at the next use and reported.
        let mut bytes = fs::read(&path).unwrap();
        bytes[0] ^= 1;
        let mut perms = fs::metadata(&path).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        fs::set_permissions(&path, perms).unwrap();
        fs::write(&path, &bytes).unwrap();
        later(&path);
        assert_eq!(c.lookup("s3://b/a", None), Lookup::Miss);
        assert_eq!(c.take_evicted(), vec!["s3://b/a".to_string()]);
        assert!(!path.exists());
    }
}
