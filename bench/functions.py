#!/usr/bin/env python3
"""Function tasks end to end: no-op calls/s through FunctionExecutor, and a 100 MB file
argument placed where it is cached (docs/performance.md, "Function tasks").

    target/python-venv/bin/python bench/functions.py [--calls N] [--fork-calls M] [--modes reuse,fork]
        [--rounds R] [--file-mb 100] [--no-locality] [--profile] [--dir DIR]

Starts a dispatcher and 2 workers x 2 slots (as python/tests/helpers.py does: the binary at
$DIFFUSE_BIN, else target/release/diffuse; build it with cargo build --release -p diffuse),
with diffuse_client imported from python/src of this checkout on both sides (PYTHONPATH), and
the workers' warm processes run this interpreter (it needs cloudpickle: the test venv has it,
scripts/test-python.sh makes it).

1. For each mode: 200 calls to start the warm processes, and 50 calls one at a time (the
   latency from submit to result: median and 90th percentile). Then, alternating the modes,
   ``--rounds`` times: N calls (M in fork mode) of a no-op function (``noop(i)`` returns
   ``i``: defined here, in ``__main__``, so sent by value) submitted in a loop, every result
   read. Prints calls/s from the first submit to the last result, and the CPU per call of
   this client, the dispatcher and the workers with their warm processes (utime+stime of
   every process in each one's session, from /proc), and of the ``diffuse`` worker processes
   alone. The mode ``true`` (``--modes reuse,fork,true``) runs ``true`` commands through
   DiffuseExecutor instead, for comparison.
2. Locality: a 100 MB file given as ``Input(path)`` to a function that reads it (md5). The
   first call reads it from storage; the next three go to the worker that caches it and read
   it from its cache: where each ran, and its input reads by source (the task's report).

``--profile``: cProfile of this client during the first measured round, top 25 by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import os
import pstats
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python", "src"))

from diffuse_client import Client, DiffuseExecutor, FunctionExecutor, Input  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def noop(i: int) -> int:
    return i


def md5_of(path: str) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def session_cpu(sid: int, only: bool = False) -> float:
    """CPU seconds (utime+stime, and cutime+cstime of reaped children) of every process in
    session ``sid`` (``only``: of its diffuse processes alone, without their reaped children)."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) != sid:  # field 6: session
            continue
        if only:
            if stat[stat.index("(") + 1 : stat.rindex(")")] == "diffuse":
                total += sum(int(x) for x in fields[11:13])
        else:
            total += sum(int(x) for x in fields[11:15])
    return total / TICK


def self_cpu() -> float:
    t = os.times()
    return t.user + t.system


class Cluster:
    def __init__(self, root: str, workers: int = 2, cores: int = 2) -> None:
        self.root = root
        self.bin = os.environ.get("DIFFUSE_BIN") or os.path.join(ROOT, "target", "release", "diffuse")
        self.token = secrets.token_hex(16)
        env = dict(os.environ)
        env["DIFFUSE_CLIENT_TOKEN"] = self.token
        env["DIFFUSE_WORKER_TOKEN"] = secrets.token_hex(16)
        env.pop("DIFFUSE_DISPATCHER", None)
        src = os.path.join(ROOT, "python", "src")
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.env = env
        self.procs: Dict[str, "subprocess.Popen[bytes]"] = {}
        self.workers = workers
        self.cores = cores
        self.url = ""

    def spawn(self, name: str, args: List[str]) -> None:
        with open(os.path.join(self.root, f"{name}.log"), "wb") as out:
            self.procs[name] = subprocess.Popen(
                [self.bin, *args], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env, cwd=self.root, start_new_session=True,
            )

    def start(self) -> Client:
        self.spawn("dispatcher", ["dispatcher", "--listen", "127.0.0.1:0", "--journal",
                                  os.path.join(self.root, "journal.sqlite"), "--reuse", "off"])
        log = os.path.join(self.root, "dispatcher.log")
        deadline = time.monotonic() + 30
        while not self.url:
            with open(log, errors="replace") as f:
                m = re.search(r"listening on (http://\S+)", f.read())
            if m:
                self.url = m.group(1)
            elif time.monotonic() > deadline:
                raise SystemExit("the dispatcher did not start")
            else:
                time.sleep(0.05)
        for i in range(self.workers):
            self.spawn(f"w{i}", ["worker", "--dispatcher", self.url, "--cache-dir",
                                 os.path.join(self.root, f"cache-w{i}"), "--cache-size", "2GB",
                                 "--name", f"w{i}", "--cores", str(self.cores),
                                 "--listen", "127.0.0.1:0"])
        c = Client(self.url, self.token)
        while c.status().workers < self.workers:
            if time.monotonic() > deadline:
                raise SystemExit("the workers did not connect")
            time.sleep(0.05)
        return c

    def cpu(self) -> Dict[str, float]:
        out = {"client": self_cpu(), "dispatcher": session_cpu(self.procs["dispatcher"].pid)}
        ws = [p.pid for n, p in self.procs.items() if n != "dispatcher"]
        out["workers"] = sum(session_cpu(pid) for pid in ws)
        out["worker processes"] = sum(session_cpu(pid, only=True) for pid in ws)
        return out

    def stop(self) -> None:
        for p in reversed(list(self.procs.values())):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)


def run_calls(ex: FunctionExecutor, n: int) -> float:
    t0 = time.perf_counter()
    fs = [ex.submit(noop, i) for i in range(n)]
    for i, f in enumerate(fs):
        if f.result() != i:
            raise SystemExit(f"call {i} returned {f.result()!r}")
    return time.perf_counter() - t0


def run_true(ex: DiffuseExecutor, n: int) -> float:
    t0 = time.perf_counter()
    fs = [ex.submit(["true"]) for _ in range(n)]
    for f in fs:
        f.result()
    return time.perf_counter() - t0


def throughput(cluster: Cluster, client: Client, modes: List[str], n: int, fork_n: int,
               rounds: int, profile: bool) -> None:
    executors: Dict[str, Any] = {}
    for m in modes:
        if m == "true":
            executors[m] = DiffuseExecutor(client, fetch_stdout=False, defaults={"reuse": False})
            run_true(executors[m], 200)
        else:
            executors[m] = FunctionExecutor(client, isolation=m)
            run_calls(executors[m], 200)  # warm processes started, the function cached on both workers
    for m, ex in executors.items():
        lat = []
        for _ in range(50):
            t0 = time.perf_counter()
            (ex.submit(["true"]) if m == "true" else ex.submit(noop, 1)).result()
            lat.append(time.perf_counter() - t0)
        lat.sort()
        print(f"{m}: one call at a time, submit to result: median {lat[25] * 1e3:.1f} ms, "
              f"90th percentile {lat[45] * 1e3:.1f} ms (50 calls)")
    print(f"{n} no-op calls ({fork_n} in fork mode), 2 workers x {cluster.cores} slots")
    print(f"{'mode':6} {'calls/s':>8} {'wall s':>7}   CPU us per call: {'client':>7} {'dispatcher':>10} "
          f"{'workers':>8} (of which the diffuse worker processes: {'':>4}, warm processes: {'':>4})")
    results: Dict[str, List[float]] = {m: [] for m in modes}
    profiled = False
    for r in range(rounds):
        for m in modes:
            before = cluster.cpu()
            prof = cProfile.Profile() if profile and not profiled else None
            if prof is not None:
                prof.enable()
            k = fork_n if m == "fork" else n
            took = run_true(executors[m], k) if m == "true" else run_calls(executors[m], k)
            if prof is not None:
                prof.disable()
            after = cluster.cpu()
            d = {x: (after[x] - before[x]) / k * 1e6 for x in after}
            results[m].append(k / took)
            print(f"{m:6} {k / took:8.0f} {took:7.2f}   {'':16}{d['client']:7.0f} "
                  f"{d['dispatcher']:10.0f} {d['workers']:8.0f} {d['worker processes']:42.0f} "
                  f"{d['workers'] - d['worker processes']:22.0f}", flush=True)
            if prof is not None:
                profiled = True
                s = io.StringIO()
                pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
                print(f"--- cProfile of the client ({m}), by own time\n{s.getvalue()}")
    for m in modes:
        print(f"{m}: " + ", ".join(f"{x:.0f}" for x in results[m]) + " calls/s")
    for ex in executors.values():
        ex.shutdown()


def locality(client: Client, root: str, mb: int) -> None:
    path = os.path.join(root, "big.bin")
    with open(path, "wb") as f:
        block = os.urandom(1 << 20)
        for _ in range(mb):
            f.write(block)
    want = md5_of(path)
    print(f"\nlocality: a {mb} MB file as Input(path), md5 read by the function")
    print(f"{'call':5} {'worker':6} {'from storage':>13} {'from cache':>11} {'from peer':>10} {'s':>6}")
    with FunctionExecutor(client, isolation="fork") as ex:
        for i in range(4):
            t0 = time.perf_counter()
            f = ex.submit(md5_of, Input(path))
            got = f.result()
            took = time.perf_counter() - t0
            assert got == want, (got, want)
            assert f.info is not None and f.info.outcome is not None
            tr = f.info.outcome.report.get("traffic", {})
            print(f"{i + 1:<5} {f.info.outcome.node:6} {tr.get('bytes_storage', 0):13,} "
                  f"{tr.get('bytes_local', 0):11,} {tr.get('bytes_peer', 0):10,} {took:6.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=10000)
    ap.add_argument("--fork-calls", type=int, default=2000)
    ap.add_argument("--modes", default="reuse,fork")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--file-mb", type=int, default=100)
    ap.add_argument("--no-locality", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--dir", default=None,
                    help="where the journal and the workers' caches go (default: $TMPDIR)")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="diffuse-bench-fn.", dir=a.dir)
    print(f"# {sys.executable} (Python {sys.version.split()[0]}), {os.cpu_count()} cpus, "
          f"load {os.getloadavg()[0]:.2f}, caches in {root}")
    cluster = Cluster(root)
    try:
        client = cluster.start()
        throughput(cluster, client, a.modes.split(","), a.calls, a.fork_calls, a.rounds, a.profile)
        if not a.no_locality:
            locality(client, root, a.file_mb)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
