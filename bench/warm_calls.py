#!/usr/bin/env python3
"""The Python side's ceiling for function tasks: calls/s and CPU per call of one warm process
(`python -m diffuse_client.warm`, docs/warm.md), driven directly over its protocol, no worker.

    python3 bench/warm_calls.py [--python PY] [--calls N] [--inflight K] [--entry noop|pickled]
                                [--modes fork,reuse] [--preloads none,parsl] [--fifos]

For each mode and preload: start the warm process, set it up, run 20 calls to warm up, then
N calls (fork: K in flight, each sent `go` as soon as it is `forked`; reuse: one at a time).
Prints calls/s and, per call, the CPU of the warm process and its reaped children
(/proc/<pid>/stat utime+stime+cutime+cstime) and of this driver; and, for comparison, the CPU
of a bare fork + _exit + waitpid of a process that imported the same modules. Calls write stdout/stderr to
/dev/null, or (--fifos) to FIFOs read by this driver as the worker does.

Entries: `noop` returns b"" (the protocol, fork, child setup and exit only); `pickled` is
diffuse_client.calls:call_pickled with a small function (load, call, pickle the result).
The interpreter (default: target/python-venv/bin/python if present) imports diffuse_client
from python/src of this checkout. A preload that does not import there is skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HEADER = struct.Struct(">II")
TICK = os.sysconf("SC_CLK_TCK")


def noop(fn: str, args: bytes, inputs: List[str]) -> bytes:
    """The no-op entry (imported by the warm process as warm_calls:noop)."""
    return b""


def send(sock: socket.socket, msg: Dict[str, Any], payload: bytes = b"") -> None:
    data = json.dumps(msg).encode()
    sock.sendall(HEADER.pack(len(data), len(payload)) + data + payload)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("the warm process closed the connection")
        buf += chunk
    return bytes(buf)


def recv(sock: socket.socket) -> Tuple[Dict[str, Any], bytes]:
    jlen, plen = HEADER.unpack(recv_exact(sock, HEADER.size))
    body = recv_exact(sock, jlen + plen)
    return json.loads(body[:jlen]), body[jlen:]


def cpu(pid: int) -> float:
    """utime + stime + cutime + cstime of pid (its reaped children included), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / TICK


def drain(path: str) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(65536):
            pass


class Bench:
    def __init__(self, python: str, mode: str, preload: List[str], work: str, fifos: bool) -> None:
        self.mode, self.work, self.fifos = mode, work, fifos
        ours, theirs = socket.socketpair()
        # as a worker starts it: a scrubbed environment
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/"),
                "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "python", "src"), HERE])}
        env = dict(base, DIFFUSE_WARM_FD=str(theirs.fileno()))
        self.log = open(os.path.join(work, f"warm-{mode}-{'-'.join(preload) or 'none'}.log"), "ab")
        self.proc = subprocess.Popen(
            [python, "-m", "diffuse_client.warm", "--mode", mode],
            pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
            stdout=self.log, stderr=self.log, start_new_session=True,
        )
        theirs.close()
        self.sock = ours
        hello, _ = recv(ours)
        assert hello["op"] == "hello", hello
        t = time.perf_counter()
        send(ours, {"op": "setup", "preload": preload, "setup": None})
        ready, _ = recv(ours)
        if ready["op"] != "ready":
            raise RuntimeError(ready.get("error", ready))
        self.setup_s = time.perf_counter() - t
        self.rss = ready["rss"]
        self.next_id = 0
        self.env = dict(base, DIFFUSE_JOB_ID="j1", DIFFUSE_CORES="1")

    def order(self, entry: str, fn: str, args: bytes) -> int:
        self.next_id += 1
        i = self.next_id
        out = err = os.devnull
        if self.fifos:
            out = os.path.join(self.work, f"o{i}")
            err = os.path.join(self.work, f"e{i}")
            for p in (out, err):
                os.mkfifo(p)
                threading.Thread(target=drain, args=(p,), daemon=True).start()
        send(self.sock, {
            "op": "call", "id": i, "entry": entry, "fn": fn, "inputs": [], "cwd": self.work,
            "env": dict(self.env, DIFFUSE_TASK_ID=f"t{i}", DIFFUSE_TASK_DIR=f"{self.work}/t{i}"),
            "stdout": out, "stderr": err,
            "result": os.path.join(self.work, f"r{i}"),
        }, args)
        return i

    def finish(self, i: int) -> None:
        os.unlink(os.path.join(self.work, f"r{i}")) if self.mode == "fork" else None
        if self.fifos:
            os.unlink(os.path.join(self.work, f"o{i}"))
            os.unlink(os.path.join(self.work, f"e{i}"))

    def run(self, n: int, inflight: int, entry: str, fn: str, args: bytes) -> Tuple[float, float]:
        """n calls; (wall seconds, warm-process CPU seconds)."""
        c0, t0 = cpu(self.proc.pid), time.perf_counter()
        if self.mode == "reuse":
            for _ in range(n):
                i = self.order(entry, fn, args)
                msg, _ = recv(self.sock)
                assert msg["op"] == "done" and msg["ok"], msg
                self.finish(i)
        else:
            sent = done = 0
            live: Deque[int] = deque()
            while done < n:
                while sent < n and sent - done < inflight:
                    live.append(self.order(entry, fn, args))
                    sent += 1
                msg, _ = recv(self.sock)
                if msg["op"] == "forked":
                    send(self.sock, {"op": "go", "id": msg["id"]})
                elif msg["op"] == "exited":
                    assert msg["code"] == 0, (msg, self.log.name)
                    self.finish(msg["id"])
                    done += 1
        return time.perf_counter() - t0, cpu(self.proc.pid) - c0

    def close(self) -> None:
        send(self.sock, {"op": "exit"})
        self.proc.wait(10)
        self.sock.close()
        self.log.close()


FLOOR = """
import gc, os, resource, sys
for m in sys.argv[2:]:
    __import__(m)
gc.collect(); gc.freeze()
def cpu():
    return sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))
n = int(sys.argv[1]); c = cpu()
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
print((cpu() - c) / n)
"""


def fork_floor(python: str, preload: List[str], n: int) -> float:
    """CPU seconds of a bare fork + _exit + waitpid of a process that imported diffuse_client
    and the preload (the kernel's share of a fork-mode call)."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python", "src"))
    out = subprocess.check_output([python, "-c", FLOOR, str(n), "diffuse_client", *preload], env=env, text=True)
    return float(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    venv = os.path.join(ROOT, "target", "python-venv", "bin", "python")
    ap.add_argument("--python", default=venv if os.path.exists(venv) else sys.executable)
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--inflight", type=int, default=2, help="fork mode: calls in flight (the worker's cores)")
    ap.add_argument("--entry", choices=["noop", "pickled"], default="noop")
    ap.add_argument("--modes", default="fork,reuse")
    ap.add_argument("--preloads", default="none,parsl")
    ap.add_argument("--fifos", action="store_true")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="warm-bench-")
    if a.entry == "noop":
        entry, fn, args = "warm_calls:noop", "/dev/null", b""
    else:
        entry, fn = "diffuse_client.calls:call_pickled", os.path.join(work, "fn")
        with open(fn, "wb") as f:
            pickle.dump(divmod, f)
        args = pickle.dumps(((7, 2), {}))
    uname = os.uname()
    print(f"# {a.python} ({subprocess.check_output([a.python, '-V'], text=True).strip()}), "
          f"{os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}, {uname.sysname} {uname.release}")
    print(f"# entry {entry}, {a.calls} calls, fork: {a.inflight} in flight, "
          f"stdio: {'FIFOs' if a.fifos else '/dev/null'}")
    print(f"{'mode':6} {'preload':8} {'setup s':>8} {'rss MB':>7} {'calls/s':>9} "
          f"{'warm CPU/call':>14} {'driver CPU/call':>16}")
    for preload_name in a.preloads.split(","):
        preload = [] if preload_name == "none" else [preload_name]
        if preload and subprocess.run([a.python, "-c", f"import {preload_name}"],
                                      capture_output=True).returncode:
            print(f"# {preload_name}: not importable by {a.python}, skipped")
            continue
        for mode in a.modes.split(","):
            b = Bench(a.python, mode, preload, work, a.fifos)
            try:
                b.run(20, a.inflight, entry, fn, args)
                d0 = time.process_time()
                wall, warm_cpu = b.run(a.calls, a.inflight, entry, fn, args)
                driver = time.process_time() - d0
                print(f"{mode:6} {preload_name:8} {b.setup_s:8.2f} {b.rss / 2**20:7.1f} "
                      f"{a.calls / wall:9.0f} {warm_cpu / a.calls * 1e6:11.0f} us "
                      f"{driver / a.calls * 1e6:13.0f} us", flush=True)
            finally:
                b.close()
        if "fork" in a.modes.split(","):
            floor = fork_floor(a.python, preload, min(a.calls, 300))
            print(f"# {preload_name}: a bare fork + _exit + waitpid of a process of that size: "
                  f"{floor * 1e6:.0f} us CPU", flush=True)


if __name__ == "__main__":
    main()
