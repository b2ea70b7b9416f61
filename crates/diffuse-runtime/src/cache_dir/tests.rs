//! Tests of the on-disk cache: layout, quota, eviction, verification, confinement.

use super::*;
use sha2::{Digest, Sha256};
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

#[test]
fn reservations_and_a_full_disk_lower_the_room_for_objects() {
    let d = TempDir::new().unwrap();
    let mut c = open(d.path(), 100, EvictionPolicy::Fifo);
    put(&mut c, "s3://b/1", &[1; 30], "v");
    put(&mut c, "s3://b/2", &[2; 30], "v");
    put(&mut c, "s3://b/3", &[3; 30], "v");
    assert!(c.take_evicted().is_empty());
    // A finished task's 50 bytes of outputs count until released: the oldest two objects go.
    c.reserve(50);
    assert_eq!(c.take_evicted(), vec!["s3://b/1", "s3://b/2"]);
    assert_eq!((c.quota(), c.used()), (50, 30));
    assert!(!d
        .path()
        .join("objects")
        .join(CacheDir::key("s3://b/1"))
        .exists());
    c.release(50);
    assert_eq!(c.quota(), 100);
    // The disk is full with 10 bytes still needed: the quota drops to what is held less 10.
    put(&mut c, "s3://b/4", &[4; 30], "v");
    assert!(c.make_room(10));
    assert_eq!(c.take_evicted(), vec!["s3://b/3"]);
    assert_eq!((c.quota(), c.used()), (50, 30));
    c.set_quota(20);
    assert_eq!(c.take_evicted(), vec!["s3://b/4"]);
    assert!(!c.make_room(1), "nothing left to evict");
}
