"""Shared storage at a fixed rate, as a file system: a read-only FUSE mount of a directory whose
reads all pass one token bucket, and which counts the bytes it serves.

    python3 bench/throttlefs.py SRC MNT --rate 100MB/s --stats STATS.json

Every process on the machine that reads a file under MNT (Snakemake's local executor, diffuse
workers staging ``file://`` inputs) shares the one rate, as the clients of a file server share
its link. The mount is opened with ``direct_io``: the kernel keeps no page cache of it, so each
read reaches the server, as when the readers of a file run on different nodes (one machine's
page cache would otherwise serve repeated reads of a file). The bytes served so far are written
to STATS (JSON: ``bytes``, ``reads``, ``opens``) every 0.2 s and at exit. Needs libfuse 2 and
fusepy (bench/snakemake.sh installs them).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import signal
import threading
import time
from typing import Any, Dict

from fuse import FUSE, FuseOSError, Operations  # type: ignore[import-untyped]


def parse_rate(s: str) -> float:
    """``100MB/s``, ``50MiB/s``, ``1e8`` -> bytes per second."""
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([KMGT]i?B)?(/s)?\s*", s)
    if not m:
        raise argparse.ArgumentTypeError(f"not a rate: {s}")
    units = {None: 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
             "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
    return float(m.group(1)) * units[m.group(2)]


class Bucket:
    """One FIFO token bucket: a read of n bytes ends n/rate seconds after the previous one."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.lock = threading.Lock()
        self.free_at = 0.0

    def take(self, n: int) -> None:
        with self.lock:
            now = time.monotonic()
            start = max(now, self.free_at)
            self.free_at = start + n / self.rate
            done = self.free_at
        delay = done - time.monotonic()
        if delay > 0:
            time.sleep(delay)


class ThrottleFS(Operations):  # type: ignore[misc]
    """Read-only passthrough of ``root``; reads are rate-limited and counted."""

    def __init__(self, root: str, rate: float) -> None:
        self.root = os.path.realpath(root)
        self.bucket = Bucket(rate)
        self.counts_lock = threading.Lock()
        self.stats: Dict[str, int] = {"bytes": 0, "reads": 0, "opens": 0}

    def _full(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def getattr(self, path: str, fh: Any = None) -> Dict[str, Any]:
        try:
            st = os.lstat(self._full(path))
        except OSError as e:
            raise FuseOSError(e.errno)
        keys = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink", "st_size", "st_uid")
        return {k: getattr(st, k) for k in keys}

    def readdir(self, path: str, fh: Any) -> Any:
        return [".", ".."] + os.listdir(self._full(path))

    def open(self, path: str, flags: int) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_TRUNC):
            raise FuseOSError(errno.EROFS)
        with self.counts_lock:
            self.stats["opens"] += 1
        return os.open(self._full(path), os.O_RDONLY)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        data = os.pread(fh, size, offset)
        self.bucket.take(len(data))
        with self.counts_lock:
            self.stats["bytes"] += len(data)
            self.stats["reads"] += 1
        return data

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0

    def statfs(self, path: str) -> Dict[str, Any]:
        st = os.statvfs(self._full(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")
        return {k: getattr(st, k) for k in keys}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("mnt")
    ap.add_argument("--rate", type=parse_rate, required=True)
    ap.add_argument("--stats", required=True)
    a = ap.parse_args()
    fs = ThrottleFS(a.src, a.rate)

    def dump() -> None:
        with fs.counts_lock:
            snap = dict(fs.stats)
        tmp = a.stats + ".tmp"
        with open(tmp, "w") as f:
            json.dump(snap, f)
        os.replace(tmp, a.stats)

    def loop() -> None:
        while True:
            dump()
            time.sleep(0.2)

    threading.Thread(target=loop, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: os.system(f"fusermount -u {a.mnt} 2>/dev/null"))
    try:
        FUSE(fs, a.mnt, foreground=True, ro=True, nothreads=False, direct_io=True, max_read=131072)
    finally:
        dump()


if __name__ == "__main__":
    main()
