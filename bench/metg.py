#!/usr/bin/env python3
"""METG(50%) as Task Bench (SC20) measures it: the smallest task duration at which a system
still keeps 50% efficiency, for process tasks and for function tasks, beside their peers.

    bench/metg.sh [--slots 2] [--seconds 2] [--only process,function] [--rounds 1]

Run through bench/metg.sh (it builds the release binary and picks the test virtualenv,
target/python-venv, for Parsl). Efficiency of a run of N tasks of duration d on P slots is
(N x d / P) / makespan; the duration d of a task is that of its kernel, a fixed amount of
work timed alone on an idle core (so work slowed by the engine's own CPU counts against it),
not a clock the task waits on. Durations are swept from 100 ms down (100, 50, 20, 10, 5, 2, 1,
0.5, 0.2, 0.1 ms), N chosen so that each run's ideal time is about ``--seconds`` (at least 100,
at most 20,000 tasks), until every system is below 25%. METG is interpolated between the two
durations that straddle 50% (linearly in log duration and efficiency, as Task Bench's plots
read); "< 0.1 ms" when the finest duration still keeps 50%.

- **process tasks**: a C kernel (a loop of k iterations, compiled here with gcc -O1) as one
  process per task. ``diffuse run`` with 1 worker x P slots (its ``makespan_s``: first dispatch
  to last outcome), ``xargs -P P`` (wall time), and GNU ``parallel -j P`` where installed.
- **function tasks**: a Python kernel (a loop of k additions) as a Parsl python app, on HTEX
  (``max_workers_per_node=P``, one block of the LocalProvider) and on DiffuseParslExecutor (a
  dispatcher and 1 worker x P slots, apps as calls in warm processes, isolation reuse), and as
  calls of ``diffuse_client.FunctionExecutor`` on the same cluster, with isolation reuse (a
  warm process runs call after call, as HTEX's workers do) and fork (its default: a child
  forked per call). The makespan is from the
  first submit to the last result, after 100 apps to warm up.

The last line names every METG.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DURATIONS_MS = [100, 50, 20, 10, 5, 2, 1, 0.5, 0.2, 0.1]

KERNEL_C = r"""
#include <stdlib.h>
int main(int argc, char **argv) {
    unsigned long n = argc > 1 ? strtoul(argv[1], 0, 10) : 0;
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < n; i++) x += i;
    return 0;
}
"""


def busy(n: int) -> int:
    """The Python kernel: ``n`` additions."""
    x = 0
    for i in range(n):
        x += i
    return x


def tasks_for(d_s: float, slots: int, seconds: float) -> int:
    return int(min(20_000, max(100, seconds * slots / d_s)))


def metg(points: List[Tuple[float, float]]) -> str:
    """METG(50%) from (duration s, efficiency) points, longest first."""
    above = [p for p in points if p[1] >= 0.5]
    if not above:
        return f"> {points[0][0] * 1e3:g} ms" if points else "n/a"
    finest = min(above)
    below = [p for p in points if p[0] < finest[0] and p[1] < 0.5]
    if not below:
        return f"< {finest[0] * 1e6:.0f} us" if finest[0] == DURATIONS_MS[-1] / 1e3 else \
            f"{finest[0] * 1e6:.0f} us"
    nxt = max(below)
    (d1, e1), (d0, e0) = finest, nxt
    f = (e1 - 0.5) / (e1 - e0)
    d = math.exp(math.log(d1) + f * (math.log(d0) - math.log(d1)))
    return f"{d * 1e6:.0f} us"


def sweep(name: str, run: Callable[[float, int], Optional[float]], slots: int,
          seconds: float) -> List[Tuple[float, float]]:
    """Efficiencies of ``run(d, n)`` (its makespan) down the durations, until below 25%."""
    points = []
    for ms in DURATIONS_MS:
        d = ms / 1e3
        n = tasks_for(d, slots, seconds)
        made = run(d, n)
        if made is None:
            print(f"  {name:22} {ms:6g} ms: failed", flush=True)
            break
        eff = n * d / slots / made
        points.append((d, eff))
        print(f"  {name:22} {ms:6g} ms x {n:6d}: makespan {made:7.3f} s, efficiency {eff:5.2f}",
              flush=True)
        if eff < 0.25:
            break
    return points


# ----- process tasks -----

def process_kernel(work: str) -> Tuple[str, float]:
    """The compiled kernel and its iterations per second on one idle core (best of 3)."""
    src, exe = os.path.join(work, "busy.c"), os.path.join(work, "busy")
    with open(src, "w") as f:
        f.write(KERNEL_C)
    subprocess.run(["gcc", "-O1", "-o", exe, src], check=True)
    n = 50_000_000
    best = min(timed([exe, str(n)]) for _ in range(3))
    return exe, n / best


def timed(cmd: List[str], **kw) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, **kw)
    return time.perf_counter() - t


def process_runs(diffuse: str, work: str, slots: int) -> Dict[str, Callable[[float, int], Optional[float]]]:
    exe, rate = process_kernel(work)
    print(f"process kernel: {rate / 1e6:.0f} M iterations/s on one core", flush=True)

    def diffuse_run(d: float, n: int) -> Optional[float]:
        k = int(rate * d)
        path = os.path.join(work, "tasks.jsonl")
        with open(path, "w") as f:
            for i in range(n):
                f.write(json.dumps({"id": f"t{i}", "cmd": [exe, str(k)]}) + "\n")
        run_dir = os.path.join(work, f"run-{time.monotonic_ns()}")
        p = subprocess.run([diffuse, "run", path, "--workers", "1", "--slots-per-worker",
                            str(slots), "--run-dir", run_dir, "--cache-dir",
                            os.path.join(work, "cache"), "--json"],
                           capture_output=True, text=True)
        shutil.rmtree(run_dir, ignore_errors=True)
        if p.returncode != 0:
            print(p.stderr[-2000:], file=sys.stderr)
            return None
        out = json.loads(p.stdout)
        return out["makespan_s"] if out["tasks_ok"] == n else None

    def xargs(d: float, n: int) -> Optional[float]:
        args = (f"{int(rate * d)}\n" * n).encode()
        t = time.perf_counter()
        subprocess.run(["xargs", "-P", str(slots), "-n", "1", exe], input=args, check=True)
        return time.perf_counter() - t

    def parallel(d: float, n: int) -> Optional[float]:
        args = (f"{int(rate * d)}\n" * n).encode()
        t = time.perf_counter()
        subprocess.run(["parallel", "-j", str(slots), exe], input=args, check=True)
        return time.perf_counter() - t

    runs = {"diffuse run": diffuse_run, f"xargs -P {slots}": xargs}
    if shutil.which("parallel"):
        runs[f"GNU parallel -j {slots}"] = parallel
    return runs


# ----- function tasks -----

def python_rate() -> float:
    """Iterations per second of ``busy`` in this interpreter (the workers' and HTEX's)."""
    n = 2_000_000
    best = math.inf
    for _ in range(3):
        t = time.perf_counter()
        busy(n)
        best = min(best, time.perf_counter() - t)
    return n / best


FUNCTION_CHILD = r"""
import importlib.util, json, sys, time
sys.path.insert(0, {bench!r})
import parsl
def busy(n):
    x = 0
    for i in range(n):
        x += i
    return x
spec = importlib.util.spec_from_file_location("cfg", {config!r})
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
app = parsl.python_app(busy, executors="all")
out = {{}}
with parsl.load(mod.config):
    for f in [app(10) for _ in range(100)]:
        f.result()
    for k, n in {plan!r}:
        t = time.perf_counter()
        fs = [app(k) for _ in range(n)]
        for f in fs:
            f.result()
        out[str(k)] = time.perf_counter() - t
print(json.dumps(out))
"""


def parsl_makespans(config: str, plan: List[Tuple[int, int]], work: str) -> Dict[int, float]:
    """Run ``plan`` ((iterations, apps) per duration) under the Parsl ``config``, in a child."""
    code = FUNCTION_CHILD.format(bench=HERE, config=config, plan=plan)
    env = dict(os.environ)
    src = os.path.join(ROOT, "python", "src")
    env["PYTHONPATH"] = src + os.pathsep + HERE + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    p = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True,
                       text=True)
    if p.returncode != 0:
        print(f"Parsl run failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}", file=sys.stderr)
        return {}
    return {int(k): v for k, v in json.loads(p.stdout.strip().splitlines()[-1]).items()}


def function_points(slots: int, seconds: float, work: str, diffuse_bin: str) -> Dict[str, List[Tuple[float, float]]]:
    sys.path.insert(0, HERE)
    import parsl_perf  # the HTEX and diffuse configurations, and the cluster, of bench/parsl_perf.py

    rate = python_rate()
    print(f"function kernel: {rate / 1e6:.1f} M additions/s on one core", flush=True)
    plan = [(max(1, int(rate * ms / 1e3)), tasks_for(ms / 1e3, slots, seconds))
            for ms in DURATIONS_MS]
    results: Dict[str, List[Tuple[float, float]]] = {}

    def points(name: str, made: Dict[int, float]) -> None:
        pts = []
        for ms, (k, n) in zip(DURATIONS_MS, plan):
            if k not in made:
                break
            eff = n * (ms / 1e3) / slots / made[k]
            pts.append((ms / 1e3, eff))
            print(f"  {name:22} {ms:6g} ms x {n:6d}: makespan {made[k]:7.3f} s, efficiency "
                  f"{eff:5.2f}", flush=True)
        results[name] = pts

    htex = os.path.join(work, "htex.py")
    with open(htex, "w") as f:
        f.write(parsl_perf.HTEX_CONFIG.format(logging=False).replace(
            "max_workers_per_node=4", f"max_workers_per_node={slots}"))
    points("Parsl on HTEX", parsl_makespans(htex, plan, work))

    os.environ["DIFFUSE_BIN"] = diffuse_bin
    root = tempfile.mkdtemp(dir=work)
    cluster = parsl_perf.Cluster(root, workers=1, cores=slots)
    cluster.start()
    try:
        cfg = os.path.join(work, "diffuse.py")
        with open(cfg, "w") as f:
            f.write(parsl_perf.DIFFUSE_CONFIG.format(url=cluster.url, token_file=cluster.token_file,
                                                     isolation="reuse", logging=False))
        points("Parsl on diffuse", parsl_makespans(cfg, plan, work))

        from diffuse_client import Client, FunctionExecutor

        for isolation in ("reuse", "fork"):
            made: Dict[int, float] = {}
            with FunctionExecutor(client=Client(cluster.url, cluster.token),
                                  isolation=isolation) as ex:
                for f in [ex.submit(busy, 10) for _ in range(100)]:
                    f.result()
                for k, n in plan:
                    t = time.perf_counter()
                    fs = [ex.submit(busy, k) for _ in range(n)]
                    for f in fs:
                        f.result()
                    made[k] = time.perf_counter() - t
                    if n * (k / rate) / slots / made[k] < 0.25:
                        break
            points(f"FunctionExecutor {isolation}", made)
    finally:
        cluster.stop()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slots", type=int, default=os.cpu_count() or 2,
                    help="slots of every system (default: the machine's cores)")
    ap.add_argument("--seconds", type=float, default=2.0,
                    help="ideal time of each run (sets the number of tasks)")
    ap.add_argument("--only", default="process,function")
    o = ap.parse_args()
    diffuse = os.environ.get("DIFFUSE_BIN") or os.path.join(ROOT, "target", "release", "diffuse")
    work = tempfile.mkdtemp(prefix="diffuse-metg.")
    summary = []
    try:
        if "process" in o.only:
            print(f"== process tasks, {o.slots} slots", flush=True)
            for name, run in process_runs(diffuse, work, o.slots).items():
                summary.append((f"{name} (process)", metg(sweep(name, run, o.slots, o.seconds))))
        if "function" in o.only:
            print(f"== function tasks, {o.slots} slots", flush=True)
            for name, pts in function_points(o.slots, o.seconds, work, diffuse).items():
                summary.append((f"{name} (function)", metg(pts)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("METG(50%): " + "; ".join(f"{n} {m}" for n, m in summary))


if __name__ == "__main__":
    main()
