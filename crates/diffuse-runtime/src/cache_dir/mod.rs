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

mod files;

use files::{
    empty_dir, ensure_real_dir, hash_reader, load_object, modified_ns, open_regular,
    regular_of_size, remove_any, remove_object_files, sync_dir, unchanged, valid_key,
};
pub use files::{sha256_file, Meta};

use diffuse_core::{Admission, EvictionPolicy, NodeCache, ObjectId};
use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Seed of the Random eviction policy (the simulator's nodes seed their caches the same way).
const RANDOM_SEED: u64 = 0;

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
    /// Out of the eviction order ([`CacheDir::pin`]).
    pinned: bool,
}

/// A worker's on-disk cache: a root directory, the eviction bookkeeping ([`NodeCache`]) and the
/// index of held objects. See the module documentation for the layout and invariants.
#[derive(Debug)]
pub struct CacheDir {
    objects: PathBuf,
    tmp: PathBuf,
    uncached: PathBuf,
    cache: NodeCache,
    /// The quota set, before reservations.
    quota: u64,
    /// Bytes of other files counted against the quota ([`CacheDir::reserve`]).
    reserved: u64,
    /// Bytes of pinned objects, counted against the quota but never evicted.
    pinned: u64,
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
            quota,
            reserved: 0,
            pinned: 0,
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
        files::key_of(uri)
    }

    /// Byte quota for cached objects now: the quota set, less the bytes reserved.
    pub fn quota(&self) -> u64 {
        self.cache.quota()
    }

    /// Set the quota (before reservations), evicting what no longer fits.
    pub fn set_quota(&mut self, quota: u64) {
        self.quota = quota;
        self.apply_quota();
    }

    /// Count `bytes` of other files (a finished task's outputs, waiting for upload) against the
    /// quota until [`CacheDir::release`]: objects are evicted to keep the total within it.
    pub fn reserve(&mut self, bytes: u64) {
        self.reserved += bytes;
        self.apply_quota();
    }

    /// The files of a [`CacheDir::reserve`] are gone.
    pub fn release(&mut self, bytes: u64) {
        self.reserved = self.reserved.saturating_sub(bytes);
        self.apply_quota();
    }

    /// The disk is full while `bytes` more are needed: lower the quota to what is held less
    /// `bytes` (evicting), so the cache stops counting on space the disk does not have. Returns
    /// false if nothing could be evicted.
    pub fn make_room(&mut self, bytes: u64) -> bool {
        if self.used() == 0 {
            return false;
        }
        let quota = self.used().saturating_sub(bytes) + self.reserved + self.pinned;
        tracing::warn!(
            "the disk of the cache is full: its quota goes from {} to {} bytes",
            self.quota,
            quota.min(self.quota)
        );
        self.quota = quota.min(self.quota);
        self.apply_quota();
        true
    }

    fn apply_quota(&mut self) {
        let effective = self.quota.saturating_sub(self.reserved + self.pinned);
        for v in self.cache.set_quota(effective) {
            if let Some(uri) = self.by_id.get(&v).cloned() {
                self.forget(&uri);
                self.evicted.push(uri);
            }
        }
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

    /// The recorded source version and SHA-256 of a held object (no check of its data).
    pub fn digest(&self, uri: &str) -> Option<(&str, &str)> {
        self.entries
            .get(uri)
            .map(|e| (e.meta.version.as_str(), e.meta.sha256.as_str()))
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
                self.entries.insert(
                    meta.uri.clone(),
                    Entry {
                        id,
                        key,
                        meta,
                        pinned: false,
                    },
                );
                Ok(id)
            }
            Admission::TooLarge => Err(meta),
            Admission::AlreadyPresent => unreachable!("object ids are never reused"),
        }
    }

    /// Keep a held object out of eviction: an intermediate object (`tmp://`) that exists
    /// nowhere else until tasks read it. Its bytes still count against the quota, so other
    /// objects are evicted to make room; it goes only by [`CacheDir::remove`]. After a restart
    /// it is an ordinary cached object again. Returns whether `uri` is held.
    pub fn pin(&mut self, uri: &str) -> bool {
        let Some(e) = self.entries.get_mut(uri) else {
            return false;
        };
        if !e.pinned {
            e.pinned = true;
            let (id, size) = (e.id, e.meta.size);
            self.cache.remove(id);
            self.pinned += size;
            self.apply_quota();
        }
        true
    }

    /// Give held `uri` eviction priority `priority` (see [`NodeCache`]); a pinned object is
    /// not evicted at all and is left as it is. Returns whether `uri` is held.
    pub fn set_priority(&mut self, uri: &str, priority: i16) -> bool {
        let Some(e) = self.entries.get(uri) else {
            return false;
        };
        if !e.pinned {
            self.cache.set_priority(e.id, priority);
        }
        true
    }

    /// Bytes of pinned objects.
    pub fn pinned_bytes(&self) -> u64 {
        self.pinned
    }

    /// Remove `uri` from the index (not from the NodeCache) and delete its files.
    fn forget(&mut self, uri: &str) -> Option<Entry> {
        let e = self.entries.remove(uri)?;
        if e.pinned {
            self.pinned -= e.meta.size;
        }
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

#[cfg(test)]
mod tests;
