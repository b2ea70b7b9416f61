//! Special file systems: files that are the kernel's or a process's state, not data. A worker
//! never reads one for a task (an input, a lookup, the source of an output) nor writes one (an
//! output's destination): `/proc/self/environ` read by the worker is the worker's environment,
//! with whatever tokens it was started with, and `/proc/sys/...` written by a root worker is the
//! kernel's configuration (docs/security.md, "Which files a task may name").
//!
//! The decision is made on an **opened** file descriptor, never on the path's text, so symbolic
//! links, `..` and bind mounts change nothing: `fstatfs(2)` gives the file system's magic
//! number, refused when it is one of [`SPECIAL`] (procfs, sysfs, devpts, debugfs, tracefs,
//! securityfs, cgroup and cgroup2, bpf, pstore, efivarfs, configfs, selinuxfs, smackfs, fusectl,
//! binfmt_misc, mqueue, nsfs, resctrl, binderfs, hugetlbfs, and a few only reachable through
//! `/proc`).
//!
//! **devtmpfs** (`/dev`) has no magic number of its own: it is tmpfs (ramfs without
//! `CONFIG_TMPFS`), like `/dev/shm` and `/tmp`, which hold ordinary data. So for a file on tmpfs
//! or ramfs the file's device (`st_dev` of the opened file) is looked up in
//! `/proc/self/mountinfo`: the file is refused if that device is mounted somewhere as
//! `devtmpfs`, or is the file system mounted at `/dev` whatever its type (a container's `/dev`
//! is often a plain tmpfs filled with device nodes by its runtime). A bind mount of `/dev`
//! elsewhere has the same device and is refused too, while `/dev/shm`, a tmpfs of its own, is
//! not. The mount table is read only for tmpfs and ramfs files, so other reads cost one
//! `fstatfs` and nothing more. Without a readable mount table the fallback is the device of
//! `/dev` itself, when `/dev` is a mount point (its device differs from that of `/`).
//!
//! The verdict for a tmpfs or ramfs is cached (`DevCache`), so inputs on `/tmp` or
//! `/dev/shm` and outputs in a work directory on tmpfs do not read the mount table once per
//! file. A mounted file system's type and mount point do not change while it stays mounted, so
//! the verdict for its device cannot change either; but a device number is given to another
//! file system once the first is unmounted (tmpfs devices are anonymous numbers, recycled), so
//! the key is the device together with the mount's id (`statx(2)`'s `STATX_MNT_ID`, Linux 5.8;
//! 0 before), and the cache is bounded: at `DEV_CACHE_MAX` entries it starts again empty.

use std::os::fd::AsFd;
use std::sync::Mutex;

/// Magic numbers (`linux/magic.h`) of the file systems refused outright, with their names.
pub const SPECIAL: &[(u32, &str)] = &[
    (0x0000_9fa0, "procfs"),
    (0x6265_6572, "sysfs"),
    (0x0000_1cd1, "devpts"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0xcafe_4a11, "bpf"),
    (0x6165_676c, "pstore"),
    (0xde5e_81e4, "efivarfs"),
    (0x6265_6570, "configfs"),
    (0xf97c_ff8c, "selinuxfs"),
    (0x4341_5d53, "smackfs"),
    (0x6573_5543, "fusectl"),
    (0x4249_4e4d, "binfmt_misc"),
    (0x1980_0202, "mqueue"),
    (0x6e73_6673, "nsfs"),
    (0x0765_5821, "resctrl"),
    (0x6c6f_6f70, "binderfs"),
    (0x9584_58f6, "hugetlbfs"),
    (0x6759_6969, "rpc_pipefs"),
    (0x6e66_7364, "nfsd"),
    (0x0000_9fa2, "usbdevfs"),
    (0xabba_1974, "xenfs"),
    (0x0904_1934, "anon_inodefs"),
    (0x5049_5045, "pipefs"),
    (0x534f_434b, "sockfs"),
];

const TMPFS_MAGIC: u32 = 0x0102_1994;
const RAMFS_MAGIC: u32 = 0x8584_58f6;

/// The name of the special file system the opened `fd` is on (`"devtmpfs"` for `/dev`), or
/// `None` for an ordinary one. `fd` may be an `O_PATH` descriptor.
pub fn special_fs(fd: impl AsFd) -> std::io::Result<Option<&'static str>> {
    let fs = rustix::fs::fstatfs(&fd)?;
    // The magic number is 32 bits whatever the width of `f_type`.
    let magic = fs.f_type as u32;
    if let Some((_, name)) = SPECIAL.iter().find(|(m, _)| *m == magic) {
        return Ok(Some(name));
    }
    if magic == TMPFS_MAGIC || magic == RAMFS_MAGIC {
        let (dev, mount) = device_and_mount(&fd)?;
        if DEV_CACHE.is_dev_mount(dev, mount, is_dev_mount) {
            return Ok(Some("devtmpfs"));
        }
    }
    Ok(None)
}

/// The device (`st_dev`) of the opened `fd` and the id of the mount it was reached through
/// (0 when the kernel does not say: before Linux 5.8, or without `statx`).
fn device_and_mount(fd: impl AsFd) -> std::io::Result<(u64, u64)> {
    use rustix::fs::{AtFlags, StatxFlags};
    match rustix::fs::statx(&fd, "", AtFlags::EMPTY_PATH, StatxFlags::MNT_ID) {
        Ok(st) => {
            let dev = rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor);
            let mount = if StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::MNT_ID) {
                st.stx_mnt_id
            } else {
                0
            };
            Ok((dev, mount))
        }
        Err(rustix::io::Errno::NOSYS) => Ok((rustix::fs::fstat(&fd)?.st_dev, 0)),
        Err(e) => Err(e.into()),
    }
}

/// How many (device, mount) verdicts [`DEV_CACHE`] keeps before it starts again empty: far more
/// than the tmpfs mounts of a host, and a few kilobytes at most.
const DEV_CACHE_MAX: usize = 256;

/// Whether each tmpfs or ramfs (by device and mount id) is `/dev`, as read from the mount table.
struct DevCache {
    verdicts: Mutex<rustc_hash::FxHashMap<(u64, u64), bool>>,
}

impl DevCache {
    /// An empty cache.
    const fn new() -> DevCache {
        DevCache {
            verdicts: Mutex::new(rustc_hash::FxHashMap::with_hasher(
                rustc_hash::FxBuildHasher,
            )),
        }
    }

    /// The verdict for `dev` reached through `mount`: cached, or `lookup(dev)` (which reads the
    /// mount table) the first time, then cached.
    fn is_dev_mount(&self, dev: u64, mount: u64, lookup: impl FnOnce(u64) -> bool) -> bool {
        let key = (dev, mount);
        if let Some(v) = self.verdicts.lock().expect("dev cache lock").get(&key) {
            return *v;
        }
        // Looked up outside the lock: two threads may both read the table, and agree.
        let verdict = lookup(dev);
        let mut verdicts = self.verdicts.lock().expect("dev cache lock");
        if verdicts.len() >= DEV_CACHE_MAX {
            verdicts.clear();
        }
        verdicts.insert(key, verdict);
        verdict
    }

    /// How many verdicts are cached.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.verdicts.lock().expect("dev cache lock").len()
    }
}

/// The process's verdicts.
static DEV_CACHE: DevCache = DevCache::new();

/// Whether the device `dev` is a devtmpfs or the file system mounted at `/dev`.
fn is_dev_mount(dev: u64) -> bool {
    match std::fs::read_to_string("/proc/self/mountinfo") {
        Ok(table) => table.lines().any(|line| dev_mount_line(line, dev)),
        Err(_) => {
            let dev_of =
                |p: &str| std::fs::metadata(p).map(|m| std::os::unix::fs::MetadataExt::dev(&m));
            match (dev_of("/dev"), dev_of("/")) {
                (Ok(d), Ok(root)) => d == dev && d != root,
                _ => false,
            }
        }
    }
}

/// Whether one line of `/proc/self/mountinfo` mounts `dev` as devtmpfs or at `/dev`.
/// The format (proc(5)): `id parent major:minor root mountpoint options [optional...] - fstype
/// source superoptions`.
fn dev_mount_line(line: &str, dev: u64) -> bool {
    let mut fields = line.split(' ');
    let Some(numbers) = fields.nth(2) else {
        return false;
    };
    let Some((major, minor)) = numbers.split_once(':') else {
        return false;
    };
    let (Ok(major), Ok(minor)) = (major.parse::<u32>(), minor.parse::<u32>()) else {
        return false;
    };
    if rustix::fs::makedev(major, minor) != dev {
        return false;
    }
    let mount_point = fields.nth(1).unwrap_or_default();
    let fs_type = line
        .split_once(" - ")
        .and_then(|(_, rest)| rest.split(' ').next())
        .unwrap_or_default();
    fs_type == "devtmpfs" || mount_point == "/dev"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn procfs_sysfs_and_dev_are_special_and_ordinary_files_are_not() {
        let open = |p: &str| std::fs::File::open(p).unwrap();
        assert_eq!(
            special_fs(open("/proc/self/environ")).unwrap(),
            Some("procfs")
        );
        assert_eq!(
            special_fs(open("/proc/self/status")).unwrap(),
            Some("procfs")
        );
        assert_eq!(special_fs(open("/sys/kernel")).unwrap(), Some("sysfs"));
        assert_eq!(special_fs(open("/dev/null")).unwrap(), Some("devtmpfs"));
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"x").unwrap();
        assert_eq!(
            special_fs(open(d.path().join("f").to_str().unwrap())).unwrap(),
            None
        );
        if std::path::Path::new("/dev/shm").is_dir() {
            // A tmpfs of its own under /dev: ordinary data.
            let f = tempfile::NamedTempFile::new_in("/dev/shm").unwrap();
            assert_eq!(special_fs(f.as_file()).unwrap(), None);
        }
    }

    #[test]
    fn the_mount_table_is_read_once_per_device_and_the_cache_is_bounded() {
        let cache = DevCache::new();
        let reads = std::cell::Cell::new(0);
        let lookup = |dev: u64| {
            reads.set(reads.get() + 1);
            dev == 6
        };
        for _ in 0..3 {
            assert!(cache.is_dev_mount(6, 30, lookup));
            assert!(!cache.is_dev_mount(7, 31, lookup));
        }
        assert_eq!(reads.get(), 2, "one read of the table per device");
        // The same device through another mount (a recycled number) is looked up again.
        assert!(!cache.is_dev_mount(6, 99, |_| false));
        for dev in 100..100 + 2 * DEV_CACHE_MAX as u64 {
            cache.is_dev_mount(dev, 1, |_| false);
            assert!(cache.len() <= DEV_CACHE_MAX);
        }
        // The real table: /dev/shm and a tmpfs file in /dev stay what they are when cached.
        if std::path::Path::new("/dev/shm").is_dir() {
            for _ in 0..2 {
                let f = tempfile::NamedTempFile::new_in("/dev/shm").unwrap();
                assert_eq!(special_fs(f.as_file()).unwrap(), None);
                let null = std::fs::File::open("/dev/null").unwrap();
                assert_eq!(special_fs(null).unwrap(), Some("devtmpfs"));
            }
        }
    }

    #[test]
    fn mount_lines_name_devtmpfs_or_the_dev_mount() {
        let dev = rustix::fs::makedev(0, 6);
        let line = |numbers: &str, at: &str, fs: &str| {
            format!("23 1 {numbers} / {at} rw,nosuid shared:2 - {fs} udev rw,size=4k")
        };
        assert!(dev_mount_line(&line("0:6", "/dev", "devtmpfs"), dev));
        assert!(dev_mount_line(
            &line("0:6", "/mnt/elsewhere", "devtmpfs"),
            dev
        ));
        assert!(dev_mount_line(&line("0:6", "/dev", "tmpfs"), dev));
        assert!(!dev_mount_line(&line("0:6", "/dev/shm", "tmpfs"), dev));
        assert!(!dev_mount_line(&line("0:7", "/dev", "devtmpfs"), dev));
        assert!(!dev_mount_line("garbage", dev));
    }
}
