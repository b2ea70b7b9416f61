#!/usr/bin/env python3
"""Parsl's own benchmark, ``parsl-perf``, with HTEX and with DiffuseParslExecutor, side by side
(docs/performance.md, "Parsl apps in warm processes"); then a 1,000-app no-op run with each.

    bench/parsl_perf.sh [--time 20] [--apps 1000] [--rounds 1] [--only htex,diffuse]
        [--isolation reuse|fork] [--nolog] [--no-perf] [--dir /dev/shm] [--profile] [--keep]

Run through bench/parsl_perf.sh (it picks the virtualenv and puts its bin on PATH: HTEX starts
``interchange.py`` and ``process_worker_pool.py`` by name).

- **HTEX**: ``HighThroughputExecutor(max_workers_per_node=4, address/loopback 127.0.0.1,
  LocalProvider(init_blocks=1, max_blocks=1))``, as target/research/parsl-warm/perf_htex.py.
  (On this 2-core machine the pool starts 2 workers: ``cores_per_worker=1``.)
- **diffuse**: a dispatcher and 2 workers x 2 slots started here (as python/tests/helpers.py
  does: the binary at $DIFFUSE_BIN, else target/release/diffuse), with this checkout's
  python/src on both sides (PYTHONPATH), and ``DiffuseParslExecutor(label="diffuse", url,
  token_file, isolation)``: python apps as calls in the workers' warm processes.

Both with Parsl's default logging (the DFK's DEBUG file log, about 80 % of its CPU per app:
target/research/parsl-warm.md); ``--nolog`` runs both with ``initialize_logging=False``.

1. ``parsl-perf --config <file> --time T`` (Parsl's estimate iteration: the last iteration's
   "Tasks per second" is the figure), alternating the executors ``--rounds`` times.
2. 1,000 no-op apps (``parsl.benchmark.perf.app``, as parsl-perf's): 100 to warm up (workers
   started, the function cached), then ``--apps`` submitted in a loop and every result read:
   apps/s from the first submit to the last result, and the CPU per app over that time of the
   client process and (diffuse) of the dispatcher and of the workers with their warm
   processes (utime+stime of every process in each one's session, from /proc); then 50 apps
   one at a time: the median and 90th percentile from submit to result.

``--dir``: where the dispatcher's journal and the workers' caches go (default $TMPDIR; the
per-call file-system work of the workers is much cheaper on tmpfs, /dev/shm).
``--profile``: cProfile of the client's threads (the main thread during the timed apps, the
others from their start: the DFK's, the executor's) in the diffuse 1,000-app run, top 40 by
own time (``$BENCH_SORT``: another pstats order, e.g. ``cumulative``; ``$BENCH_FILTER``: a
regular expression the functions shown must match, e.g. ``diffuse_client``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SRC = os.path.join(ROOT, "python", "src")
TICK = os.sysconf("SC_CLK_TCK")

#: Apps run one at a time after the timed ones (the latency from submit to result).
LATENCY_APPS = 50

HTEX_CONFIG = '''\
from parsl.config import Config
from parsl.executors import HighThroughputExecutor
from parsl.providers import LocalProvider

config = Config(executors=[HighThroughputExecutor(
    label="htex",
    address="127.0.0.1",
    loopback_address="127.0.0.1",
    max_workers_per_node=4,
    provider=LocalProvider(init_blocks=1, max_blocks=1),
)], initialize_logging={logging})
'''

DIFFUSE_CONFIG = '''\
from parsl.config import Config
from diffuse_client.parsl import DiffuseParslExecutor

config = Config(executors=[DiffuseParslExecutor(
    label="diffuse",
    url={url!r},
    token_file={token_file!r},
    isolation={isolation!r},
)], strategy="none", initialize_logging={logging})
'''


def session_cpu(sid: int) -> float:
    """CPU seconds of every process in session ``sid`` (their reaped children included)."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid:
            total += sum(int(x) for x in fields[11:15])
    return total / TICK


class Cluster:
    """A dispatcher and ``workers`` workers x ``cores`` slots, this checkout's python/src on
    their PYTHONPATH (the warm processes import diffuse_client from it)."""

    def __init__(self, root: str, workers: int = 2, cores: int = 2) -> None:
        self.root = root
        self.bin = os.environ.get("DIFFUSE_BIN") or os.path.join(ROOT, "target", "release", "diffuse")
        self.token = secrets.token_hex(16)
        self.token_file = os.path.join(root, "client.token")
        with open(self.token_file, "w") as f:
            f.write(self.token + "\n")
        os.chmod(self.token_file, 0o600)
        env = dict(os.environ)
        env["DIFFUSE_CLIENT_TOKEN"] = self.token
        env["DIFFUSE_WORKER_TOKEN"] = secrets.token_hex(16)
        env.pop("DIFFUSE_DISPATCHER", None)
        env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.env = env
        self.procs: Dict[str, "subprocess.Popen[bytes]"] = {}
        self.workers, self.cores = workers, cores
        self.url = ""

    def spawn(self, name: str, args: List[str]) -> None:
        with open(os.path.join(self.root, f"{name}.log"), "wb") as out:
            self.procs[name] = subprocess.Popen(
                [self.bin, *args], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env, cwd=self.root, start_new_session=True)

    def start(self) -> None:
        self.spawn("dispatcher", ["dispatcher", "--listen", "127.0.0.1:0", "--journal",
                                  os.path.join(self.root, "journal.sqlite")])
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
        sys.path.insert(0, SRC)
        from diffuse_client import Client

        c = Client(self.url, self.token)
        while c.status().workers < self.workers:
            if time.monotonic() > deadline:
                raise SystemExit("the workers did not connect")
            time.sleep(0.05)

    def sessions(self) -> str:
        """``dispatcher=SID;workers=SID,SID`` (each process leads a session of its own)."""
        ws = ",".join(str(p.pid) for n, p in self.procs.items() if n != "dispatcher")
        return f"dispatcher={self.procs['dispatcher'].pid};workers={ws}"

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


def child_env() -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def parsl_perf(name: str, config: str, seconds: int, cwd: str) -> Optional[float]:
    """One parsl-perf run; the last iteration's tasks per second."""
    exe = os.path.join(os.path.dirname(sys.executable), "parsl-perf")
    t0 = time.monotonic()
    p = subprocess.run([exe, "--config", config, "--time", str(seconds)], cwd=cwd,
                       env=child_env(), capture_output=True, text=True)
    rates = re.findall(r"Tasks per second: ([0-9.]+)", p.stdout)
    sizes = re.findall(r"Will run (\d+) tasks", p.stdout)
    if p.returncode != 0 or not rates:
        print(f"  {name}: parsl-perf failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}",
              flush=True)
        return None
    print(f"  {name:8} parsl-perf --time {seconds}: {float(rates[-1]):7.1f} apps/s (iterations: "
          f"{', '.join(f'{float(r):.0f}' for r in rates)} apps/s; last {sizes[-1] if sizes else '?'} "
          f"apps; {time.monotonic() - t0:.0f} s in all)", flush=True)
    return float(rates[-1])


def run_apps_child(config: str, n: int, profile: bool) -> None:
    """In a child process: load ``config``, 100 apps to warm up, then ``n`` timed; prints JSON."""
    import importlib.util

    import parsl
    from parsl.benchmark.perf import app

    profiles: List[Any] = []
    if profile:  # every thread started from here on is profiled too (the DFK's, the executor's)
        import cProfile
        import threading

        run = threading.Thread.run

        def profiled(self: threading.Thread) -> None:
            p = cProfile.Profile()
            profiles.append(p)
            p.enable()
            try:
                run(self)
            finally:
                p.disable()

        threading.Thread.run = profiled  # type: ignore[method-assign]
    spec = importlib.util.spec_from_file_location("bench_config", config)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    t_load = time.perf_counter()
    with parsl.load(mod.config):
        warm = [app(0, parsl_resource_specification={}) for _ in range(100)]
        for f in warm:
            assert f.result() == 7
        t_warm = time.perf_counter()
        given = filter(None, os.environ.get("BENCH_SESSIONS", "").split(";"))
        sids = {k: [int(x) for x in v.split(",")] for k, v in (kv.split("=") for kv in given)}
        others0 = {k: sum(session_cpu(s) for s in v) for k, v in sids.items()}
        cpu0 = time.process_time()
        prof = None
        if profile:
            import cProfile

            prof = cProfile.Profile()
            profiles.append(prof)
            prof.enable()
        t0 = time.perf_counter()
        fs = [app(0, parsl_resource_specification={}) for _ in range(n)]
        t_sub = time.perf_counter()
        for f in fs:
            assert f.result() == 7
        t1 = time.perf_counter()
        if prof is not None:
            prof.disable()
        cpu1 = time.process_time()
        others = {k: sum(session_cpu(s) for s in v) - others0[k] for k, v in sids.items()}
        lat = []
        for _ in range(LATENCY_APPS):  # one at a time: submit to result
            t = time.perf_counter()
            assert app(0, parsl_resource_specification={}).result() == 7
            lat.append(time.perf_counter() - t)
        lat.sort()
    if prof is not None:
        import io
        import pstats

        s = io.StringIO()
        st = pstats.Stats(prof, stream=s)
        for p in profiles[:-1]:
            try:
                st.add(p)
            except TypeError:  # a thread's profile still running
                pass
        st.sort_stats(os.environ.get("BENCH_SORT", "tottime"))
        st.print_stats(os.environ.get("BENCH_FILTER", ""), 40)
        print(s.getvalue(), file=sys.stderr)
    print(json.dumps({"seconds": t1 - t0, "submit": t_sub - t0, "client_cpu": cpu1 - cpu0,
                      "start": t_warm - t_load, "others": others,
                      "latency": [lat[len(lat) // 2], lat[int(len(lat) * 0.9)]]}))


def run_apps(name: str, config: str, n: int, cwd: str, cluster: Optional[Cluster],
             profile: bool) -> None:
    env = child_env()
    if cluster is not None:
        env["BENCH_SESSIONS"] = cluster.sessions()
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--apps-child", config, str(n)]
                       + (["--profile"] if profile else []),
                       cwd=cwd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"  {name}: the {n}-app run failed:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
        return
    r = json.loads(p.stdout.strip().splitlines()[-1])
    extra = "".join(f", {k} {1000 * v / n:.2f}" for k, v in r["others"].items())
    print(f"  {name:8} {n} no-op apps: {n / r['seconds']:7.1f} apps/s ({r['seconds']:.2f} s, "
          f"submitted in {r['submit']:.2f} s; warm-up 100 apps {r['start']:.1f} s); CPU ms/app: "
          f"client {1000 * r['client_cpu'] / n:.2f}{extra}; one at a time: median "
          f"{1000 * r['latency'][0]:.1f} ms, 90th percentile {1000 * r['latency'][1]:.1f} ms "
          f"({LATENCY_APPS} apps)", flush=True)
    if profile and r:
        print(p.stderr[-8000:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time", type=int, default=20, help="parsl-perf --time (seconds)")
    ap.add_argument("--apps", type=int, default=1000, help="apps in the no-op run (0: none)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--only", default="htex,diffuse")
    ap.add_argument("--isolation", default="reuse", choices=["reuse", "fork"])
    ap.add_argument("--nolog", action="store_true", help="initialize_logging=False for both")
    ap.add_argument("--no-perf", action="store_true", help="skip parsl-perf")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--dir", default=None,
                    help="where the dispatcher's journal and the workers' caches go (default: "
                         "$TMPDIR); /dev/shm: tmpfs")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--apps-child", nargs=2, help=argparse.SUPPRESS)
    o = ap.parse_args()
    if o.apps_child:
        run_apps_child(o.apps_child[0], int(o.apps_child[1]), o.profile)
        return
    names = [n for n in o.only.split(",") if n]
    root = tempfile.mkdtemp(prefix="parsl-perf-", dir=o.dir)
    cluster: Optional[Cluster] = None
    try:
        configs = {}
        logging = "False" if o.nolog else "True"
        if "htex" in names:
            configs["htex"] = os.path.join(root, "htex_config.py")
            with open(configs["htex"], "w") as f:
                f.write(HTEX_CONFIG.format(logging=logging))
        if "diffuse" in names:
            cluster = Cluster(root)
            cluster.start()
            configs["diffuse"] = os.path.join(root, "diffuse_config.py")
            with open(configs["diffuse"], "w") as f:
                f.write(DIFFUSE_CONFIG.format(url=cluster.url, token_file=cluster.token_file,
                                              isolation=o.isolation, logging=logging))
        runs = os.path.join(root, "runs")
        os.makedirs(runs)
        print(f"parsl-perf: {', '.join(names)}; logging {'off' if o.nolog else 'on'}; "
              f"diffuse isolation {o.isolation}, caches in {root}; "
              f"load {' '.join(open('/proc/loadavg').read().split()[:3])}", flush=True)
        for r in range(o.rounds):
            if o.rounds > 1:
                print(f"round {r + 1}", flush=True)
            if not o.no_perf:
                for n in names:
                    parsl_perf(n, configs[n], o.time, runs)
            if o.apps:
                for n in names:
                    run_apps(n, configs[n], o.apps, runs, cluster if n == "diffuse" else None,
                             o.profile and n == "diffuse")
    finally:
        if cluster is not None:
            cluster.stop()
        if o.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
