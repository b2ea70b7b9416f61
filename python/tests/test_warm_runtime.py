"""The warm process (``python -m diffuse_client.warm``, docs/warm.md) driven over its protocol.

Each test starts the real process with one end of a socket pair as its control fd and speaks
the protocol as a worker would (a small driver below, written independently of warm.py's own
framing). Calls write to FIFOs read by threads here, as the worker reads them.
``$WARM_PYTHON`` runs the warm process with another interpreter (diffuse_client and, for the
call_pickled tests, cloudpickle importable by it).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from diffuse_client import calls

HEADER = struct.Struct(">II")
TIMEOUT = 15.0
WARM_PYTHON = os.environ.get("WARM_PYTHON") or sys.executable

ENTRIES = textwrap.dedent(
    r'''
    import json, os, random, signal, subprocess, sys, threading, time

    G = {}

    def _fds():
        out = []
        for n in os.listdir("/proc/self/fd"):
            try:
                os.fstat(int(n))
                out.append(int(n))
            except OSError:
                pass
        return sorted(out)

    def info(fn, args, inputs):
        return {
            "fn": fn, "args": args.decode(), "inputs": inputs,
            "pid": os.getpid(), "pgid": os.getpgid(0), "cwd": os.getcwd(),
            "env": dict(os.environ), "argv": list(sys.argv), "path0": sys.path[0],
            "threads": threading.active_count(), "tasks": len(os.listdir("/proc/self/task")),
            "fds": _fds(), "stdin": os.readlink("/proc/self/fd/0"),
            "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
            "sigchld": signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL,
            "sigterm": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
            "sigpipe": signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN,
            "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
            "g": G.get("n"), "random": random.random(),
        }

    def echo(fn, args, inputs):
        print("out of", fn)
        print("err of", fn, file=sys.stderr)
        return json.dumps(info(fn, args, inputs)).encode()

    def mutate(fn, args, inputs):
        G["n"] = G.get("n", 0) + 1
        os.environ["LEAK"] = "1"
        os.chdir("/")
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sys.argv.append("junk")
        print("mutated")
        return b"ok"

    def rendezvous(fn, args, inputs):
        a = json.loads(args)
        open(os.path.join(a["dir"], str(os.getpid())), "w").close()
        deadline = time.time() + 10
        while len(os.listdir(a["dir"])) < a["n"]:
            if time.time() > deadline:
                raise RuntimeError("the other calls never started")
            time.sleep(0.01)
        return b"met"

    def boom(fn, args, inputs):
        print("before the boom", flush=True)
        raise ValueError("boom")

    def exit7(fn, args, inputs):
        sys.stdout.flush()
        os._exit(7)

    def sysexit0(fn, args, inputs):
        sys.exit(0)

    def notbytes(fn, args, inputs):
        return 5

    def sleeper(fn, args, inputs):
        print("sleeping", flush=True)
        time.sleep(60)
        return b"woke"

    def spawn(fn, args, inputs):
        p = subprocess.Popen(["sleep", "60"])
        return json.dumps({"pid": p.pid}).encode()

    def spawn_tree(fn, args, inputs):
        d = args.decode()
        # a child with a child of its own, and an orphan (its shell exits): 3+ processes
        subprocess.Popen(["sh", "-c", f"sleep 60 & echo $! > {d}/bg; sleep 60"])
        subprocess.run(["sh", "-c", f"sleep 60 >/dev/null 2>&1 & echo $! > {d}/orphan"], check=True)
        deadline = time.time() + 10
        while not os.path.exists(f"{d}/bg") or not os.path.getsize(f"{d}/bg"):
            assert time.time() < deadline
            time.sleep(0.01)
        return b"spawned"
    '''
)


# ---------------------------------------------------------------------------------------------
# the driver: a worker's side of the protocol


def send(sock: socket.socket, msg: Dict[str, Any], payload: bytes = b"") -> None:
    data = json.dumps(msg).encode()
    sock.sendall(HEADER.pack(len(data), len(payload)) + data + payload)


def recv_exact(sock: socket.socket, n: int) -> Optional[bytes]:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            assert not buf, "the connection ended in a frame"
            return None
        buf += chunk
    return buf


def recv(sock: socket.socket) -> Optional[Tuple[Dict[str, Any], bytes]]:
    head = recv_exact(sock, HEADER.size)
    if head is None:
        return None
    jlen, plen = HEADER.unpack(head)
    body = recv_exact(sock, jlen + plen) or b""
    return json.loads(body[:jlen]), body[jlen:]


class Fifo:
    """A FIFO read to its end by a thread, as the worker reads a call's stdout/stderr."""

    def __init__(self, path: Path) -> None:
        self.path = path
        os.mkfifo(path)
        self.data = bytearray()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with open(self.path, "rb", buffering=0) as f:  # waits for the writer
            while True:
                chunk = f.read(65536)
                if not chunk:
                    return
                self.data += chunk

    def text(self, timeout: float = TIMEOUT) -> str:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{self.path}: no end of file"
        return self.data.decode()

    def wait_for(self, s: str) -> None:
        deadline = time.time() + TIMEOUT
        while s.encode() not in self.data:
            assert time.time() < deadline, f"{s!r} never came on {self.path}"
            time.sleep(0.01)

    def release(self) -> None:
        """Unblock the reader if no writer ever came."""
        if self.thread.is_alive():
            try:
                os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass


class Call:
    def __init__(self, d: Path, call_id: int) -> None:
        d.mkdir()
        self.id = call_id
        self.dir = d
        self.cwd = d / "cwd"
        self.cwd.mkdir()
        self.stdout = Fifo(d / "stdout")
        self.stderr = Fifo(d / "stderr")
        self.result = d / "result"
        self.pid = 0

    def out(self) -> str:
        return self.stdout.text()

    def err(self) -> str:
        return self.stderr.text()

    def value(self) -> Any:
        return json.loads(self.result.read_bytes())


class Warm:
    """A warm process and the worker's end of its connection."""

    def __init__(self, tmp: Path, mode: str, entries: Path, *, fd0: bool = False) -> None:
        self.tmp = tmp
        self.mode = mode
        ours, theirs = socket.socketpair()
        self.log = tmp / f"warm-{mode}-{id(self)}.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in [str(entries), env.get("PYTHONPATH", "")] if p
        )
        env["DIFFUSE_WARM_FD"] = "0" if fd0 else str(theirs.fileno())
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [WARM_PYTHON, "-m", "diffuse_client.warm", "--mode", mode],
                stdin=theirs if fd0 else subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=() if fd0 else (theirs.fileno(),),
                env=env,
                start_new_session=True,
            )
        theirs.close()
        ours.settimeout(TIMEOUT)
        self.sock = ours
        self.pending: List[Tuple[Dict[str, Any], bytes]] = []
        self.calls = 0
        self.hello = self.expect("hello")

    def close(self) -> None:
        self.sock.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def expect(self, op: str, call_id: Optional[int] = None) -> Tuple[Dict[str, Any], bytes]:
        def match(m: Dict[str, Any]) -> bool:
            return m["op"] == op and (call_id is None or m.get("id") == call_id)

        for i, (m, p) in enumerate(self.pending):
            if match(m):
                return self.pending.pop(i)
        while True:
            frame = recv(self.sock)
            assert frame is not None, f"EOF waiting for {op} {call_id}; log:\n{self.logtext()}"
            if match(frame[0]):
                return frame
            self.pending.append(frame)

    def logtext(self) -> str:
        return self.log.read_text(errors="replace")

    def setup(self, preload: List[str] = [], code: Optional[str] = None) -> Dict[str, Any]:
        send(self.sock, {"op": "setup", "preload": preload, "setup": code})
        return self.expect("ready")[0]

    def start(
        self,
        entry: str,
        args: bytes = b"",
        *,
        env: Optional[Dict[str, str]] = None,
        fn: str = "/nonexistent/fn",
        inputs: List[str] = [],
    ) -> Call:
        self.calls += 1
        c = Call(self.tmp / f"call{self.calls}-{id(self)}", self.calls)
        send(
            self.sock,
            {
                "op": "call",
                "id": c.id,
                "entry": entry,
                "fn": fn,
                "inputs": inputs,
                "cwd": str(c.cwd),
                "env": env if env is not None else call_env(),
                "stdout": str(c.stdout.path),
                "stderr": str(c.stderr.path),
                "result": str(c.result),
            },
            args,
        )
        if self.mode == "fork":
            c.pid = self.expect("forked", c.id)[0]["pid"]
        return c

    def go(self, c: Call) -> None:
        send(self.sock, {"op": "go", "id": c.id})

    def exited(self, c: Call) -> int:
        code = self.expect("exited", c.id)[0]["code"]
        assert isinstance(code, int)
        return code

    def done(self, c: Call) -> Tuple[Dict[str, Any], bytes]:
        return self.expect("done", c.id)

    def run(self, entry: str, args: bytes = b"", **kw: Any) -> Tuple[Call, Any]:
        """A whole call: (the call, its exit code in fork mode / its done message in reuse)."""
        c = self.start(entry, args, **kw)
        if self.mode == "fork":
            self.go(c)
            return c, self.exited(c)
        return c, self.done(c)


    def value(self, c: Call, r: Any) -> Any:
        """A call's JSON result (fork: its result file; reuse: its done's payload)."""
        if self.mode == "fork":
            assert r == 0, c.err()
            return c.value()
        assert r[0]["ok"], c.err()
        return json.loads(r[1])


def call_env(**extra: str) -> Dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CALLVAR": "yes", **extra}


@pytest.fixture(scope="module")
def entries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("warm-entries")
    (d / "warm_entries.py").write_text(ENTRIES)
    return d


@pytest.fixture()
def fork(tmp_path: Path, entries: Path) -> Iterator[Warm]:
    w = Warm(tmp_path, "fork", entries)
    w.setup()
    yield w
    w.close()


@pytest.fixture()
def reuse(tmp_path: Path, entries: Path) -> Iterator[Warm]:
    w = Warm(tmp_path, "reuse", entries)
    w.setup()
    yield w
    w.close()


def gone_or_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_gone(pid: int) -> None:
    deadline = time.time() + TIMEOUT
    while not gone_or_zombie(pid):
        assert time.time() < deadline, f"process {pid} still there"
        time.sleep(0.01)


# ---------------------------------------------------------------------------------------------
# start, setup, end


@pytest.mark.parametrize("mode", ["fork", "reuse"])
def test_hello_setup_ready(tmp_path: Path, entries: Path, mode: str) -> None:
    w = Warm(tmp_path, mode, entries)
    try:
        assert w.hello[0]["protocol"] == 1
        assert w.hello[0]["pid"] == w.proc.pid
        if WARM_PYTHON == sys.executable:
            assert w.hello[0]["python"] == "%d.%d.%d" % sys.version_info[:3]
        ready = w.setup(["json", "warm_entries"], "import warm_entries\nwarm_entries.G['n'] = 41")
        assert ready["rss"] > 1 << 20
        if mode == "fork":
            assert ready["threads"] == 1
        # the setup's state is seen by calls (fork: inherited; reuse: the same process)
        c, r = w.run("warm_entries:echo")
        assert w.value(c, r)["g"] == 41
        send(w.sock, {"op": "exit"})
        assert w.proc.wait(5) == 0
    finally:
        w.close()


@pytest.mark.parametrize("mode", ["fork", "reuse"])
@pytest.mark.parametrize(
    "preload, code, expected",
    [(["no_such_module_xyz"], None, "ModuleNotFoundError"), ([], "raise RuntimeError('no')", "RuntimeError: no")],
)
def test_setup_failure(
    tmp_path: Path, entries: Path, mode: str, preload: List[str], code: Optional[str], expected: str
) -> None:
    w = Warm(tmp_path, mode, entries)
    try:
        send(w.sock, {"op": "setup", "preload": preload, "setup": code})
        msg, _ = w.expect("failed")
        assert "Traceback" in msg["error"] and expected in msg["error"]
        assert w.proc.wait(5) == 1
    finally:
        w.close()


@pytest.mark.parametrize("mode", ["fork", "reuse"])
def test_eof_ends_it(tmp_path: Path, entries: Path, mode: str) -> None:
    w = Warm(tmp_path, mode, entries)
    w.setup()
    c = w.start("warm_entries:echo")  # fork: a child waiting for go
    if mode == "reuse":
        w.done(c)
    w.sock.close()
    assert w.proc.wait(5) == 0
    if mode == "fork":
        wait_gone(c.pid)  # the zygote gone, the child never got go: it ends
        c.stdout.release()
        c.stderr.release()
        assert not c.result.exists()


def test_zygote_signals(tmp_path: Path, entries: Path) -> None:
    """SIGINT is ignored by the zygote; SIGTERM ends it at once (a child waiting for go ends
    with it; running children are the worker's to kill)."""
    w = Warm(tmp_path, "fork", entries)
    try:
        w.setup()
        os.kill(w.proc.pid, signal.SIGINT)
        c, code = w.run("warm_entries:echo")
        assert code == 0 and c.value()["sigint"]
        running = w.start("warm_entries:sleeper")
        w.go(running)
        running.stdout.wait_for("sleeping")
        waiting = w.start("warm_entries:echo")
        os.kill(w.proc.pid, signal.SIGTERM)
        assert w.proc.wait(5) == -signal.SIGTERM
        wait_gone(waiting.pid)
        assert not gone_or_zombie(running.pid)
        os.killpg(running.pid, signal.SIGKILL)
        wait_gone(running.pid)
        for f in (waiting.stdout, waiting.stderr):
            f.release()
    finally:
        w.close()


def test_control_socket_as_stdin(tmp_path: Path, entries: Path) -> None:
    """DIFFUSE_WARM_FD=0 (the worker passes the socket as stdin): moved, /dev/null put there."""
    for mode in ("fork", "reuse"):
        w = Warm(tmp_path, mode, entries, fd0=True)
        try:
            w.setup()
            c, r = w.run("warm_entries:echo")
            v = w.value(c, r)
            assert v["stdin"] == "/dev/null"
            assert "DIFFUSE_WARM_FD" not in v["env"]
        finally:
            w.close()


# ---------------------------------------------------------------------------------------------
# fork mode


def test_fork_call_end_to_end(fork: Warm) -> None:
    c = fork.start("warm_entries:echo", b"the args", fn="/staged/fn", inputs=["/staged/0", "/x"])
    # before go: the child is in its own process group, and waits
    assert os.getpgid(c.pid) == c.pid
    time.sleep(0.05)
    assert not c.result.exists()
    fork.go(c)
    assert fork.exited(c) == 0
    assert c.out() == "out of /staged/fn\n"
    assert c.err() == "err of /staged/fn\n"
    v = c.value()
    assert (v["fn"], v["args"], v["inputs"]) == ("/staged/fn", "the args", ["/staged/0", "/x"])
    assert v["pid"] == c.pid and v["pgid"] == c.pid
    assert v["cwd"] == str(c.cwd) and v["path0"] == str(c.cwd)
    assert v["env"] == call_env()  # the call's environment only: no DIFFUSE_WARM_FD
    assert v["threads"] == 1 and v["tasks"] == 1  # the zygote had no thread when it forked
    assert v["fds"] == [0, 1, 2]  # the control socket, wake-up pipe, go pipes: closed
    assert v["sigint"] and v["sigchld"] and v["sigterm"] and v["sigpipe"] and v["mask"] == []
    assert v["argv"][0].endswith("warm.py") and len(v["argv"]) == 1
    assert not list(c.dir.glob("result.tmp*"))
    assert "out of" not in fork.logtext() and "err of" not in fork.logtext()


def test_fork_calls_in_flight(fork: Warm, tmp_path: Path) -> None:
    meet = tmp_path / "meet"
    meet.mkdir()
    args = json.dumps({"dir": str(meet), "n": 3}).encode()
    cs = [fork.start("warm_entries:rendezvous", args) for _ in range(3)]
    assert len({c.pid for c in cs}) == 3
    for c in reversed(cs):
        fork.go(c)
    assert [fork.exited(c) for c in cs] == [0, 0, 0]
    assert all(c.result.read_bytes() == b"met" for c in cs)


def test_fork_isolation(fork: Warm) -> None:
    c1, code = fork.run("warm_entries:mutate")
    assert code == 0 and c1.out() == "mutated\n"
    c2, code = fork.run("warm_entries:echo", env=call_env(OTHER="2"))
    assert code == 0
    v = c2.value()
    assert v["g"] is None  # the first call's global
    assert "LEAK" not in v["env"] and v["env"]["OTHER"] == "2"
    assert v["cwd"] == str(c2.cwd)
    assert v["sigterm"] and len(v["argv"]) == 1
    assert "mutated" not in c2.out()
    # random state differs between children
    c3, _ = fork.run("warm_entries:echo")
    assert c3.value()["random"] != v["random"]


def test_fork_entry_raises(fork: Warm) -> None:
    c, code = fork.run("warm_entries:boom")
    assert code == 1
    assert c.out() == "before the boom\n"
    err = c.err()
    assert "Traceback" in err and "ValueError: boom" in err
    assert not c.result.exists()


def test_fork_bad_entries(fork: Warm) -> None:
    c, code = fork.run("warm_entries:notbytes")
    assert code == 1 and "returned int, not bytes" in c.err() and not c.result.exists()
    c, code = fork.run("no_such_module_xyz:f")
    assert code == 1 and "ModuleNotFoundError" in c.err()
    c, code = fork.run("warm_entries:sysexit0")
    assert code == 1 and "SystemExit(0)" in c.err() and not c.result.exists()


def test_fork_os_exit(fork: Warm) -> None:
    c, code = fork.run("warm_entries:exit7")
    assert code == 7
    assert not c.result.exists()


def test_fork_killed(fork: Warm) -> None:
    c = fork.start("warm_entries:sleeper")
    fork.go(c)
    c.stdout.wait_for("sleeping")
    os.killpg(c.pid, signal.SIGKILL)
    assert fork.exited(c) == -signal.SIGKILL
    assert not c.result.exists()
    # killed before go
    c3 = fork.start("warm_entries:echo")
    os.killpg(c3.pid, signal.SIGKILL)
    assert fork.exited(c3) == -signal.SIGKILL
    fork.go(c3)  # too late: ignored
    c3.stdout.release()
    c3.stderr.release()
    # the zygote goes on
    c2, code = fork.run("warm_entries:echo")
    assert code == 0


def test_fork_leftover_in_the_calls_group(fork: Warm) -> None:
    c, code = fork.run("warm_entries:spawn")
    assert code == 0
    pid = c.value()["pid"]
    try:
        assert os.getpgid(pid) == c.pid  # the worker kills it with the call's group
    finally:
        os.killpg(c.pid, signal.SIGKILL)
    c.out()  # the sleep held the FIFO: end of file once it is killed


def test_fork_go_before_forked_reply_and_unknown_go(fork: Warm) -> None:
    # a go for no call, a second go: ignored
    send(fork.sock, {"op": "go", "id": 999})
    c = fork.start("warm_entries:echo")
    fork.go(c)
    fork.go(c)
    assert fork.exited(c) == 0


def test_fork_large_payload(fork: Warm) -> None:
    c = fork.start("warm_entries:echo", b"x" * (5 << 20))
    fork.go(c)
    assert fork.exited(c) == 0
    assert len(c.value()["args"]) == 5 << 20


# ---------------------------------------------------------------------------------------------
# reuse mode


def test_reuse_state_kept_environment_restored(reuse: Warm) -> None:
    start_cwd = os.readlink(f"/proc/{reuse.proc.pid}/cwd")
    c1, (msg, payload) = reuse.run("warm_entries:mutate")
    assert msg["ok"] and payload == b"ok" and msg["killed"] == 0
    assert c1.out() == "mutated\n"
    assert os.readlink(f"/proc/{reuse.proc.pid}/cwd") == start_cwd
    c2, (msg, payload) = reuse.run("warm_entries:echo", b"two", env=call_env(OTHER="2"))
    assert msg["ok"]
    v = json.loads(payload)
    assert v["g"] == 1  # module state is kept
    assert "LEAK" not in v["env"] and v["env"] == call_env(OTHER="2")
    assert v["cwd"] == str(c2.cwd) and v["path0"] == str(c2.cwd)
    assert v["sigterm"] and v["sigint"] and len(v["argv"]) == 1  # handlers, argv put back
    assert v["pid"] == reuse.proc.pid and v["args"] == "two"
    assert c2.out() == "out of /nonexistent/fn\n" and c2.err() == "err of /nonexistent/fn\n"
    assert not c2.result.exists()  # reuse mode answers with the payload
    assert "mutated" not in reuse.logtext() and "out of" not in reuse.logtext()


def test_reuse_entry_raises(reuse: Warm) -> None:
    c, (msg, payload) = reuse.run("warm_entries:boom")
    assert not msg["ok"] and payload == b""
    assert "ValueError: boom" in c.err() and c.out() == "before the boom\n"
    c, (msg, _) = reuse.run("warm_entries:notbytes")
    assert not msg["ok"] and "not bytes" in c.err()
    c, (msg, _) = reuse.run("warm_entries:sysexit0")
    assert not msg["ok"] and "SystemExit" in c.err()
    c, (msg, payload) = reuse.run("warm_entries:echo")  # still serving
    assert msg["ok"] and json.loads(payload)["pid"] == reuse.proc.pid


def test_reuse_leftovers_killed(reuse: Warm, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    c, (msg, payload) = reuse.run("warm_entries:spawn_tree", str(marks).encode())
    assert msg["ok"] and payload == b"spawned"
    assert msg["killed"] >= 3, msg
    for name in ("bg", "orphan"):
        pid = int((marks / name).read_text())
        assert gone_or_zombie(pid), name
    c.out()  # every writer of the FIFO is gone
    c2, (msg, _) = reuse.run("warm_entries:echo")
    assert msg["ok"] and msg["killed"] == 0


def test_reuse_os_exit_ends_the_process(reuse: Warm) -> None:
    reuse.start("warm_entries:exit7")
    assert recv(reuse.sock) is None
    assert reuse.proc.wait(5) == 7


# ---------------------------------------------------------------------------------------------
# the default entry, diffuse_client.calls


def _add(x: int, y: int = 1) -> int:
    return x + y


class Picky(Exception):
    def __init__(self, a: int, b: int) -> None:  # loads again only with both: it cannot
        super().__init__(f"{a}/{b}")


def _raise_picky() -> None:
    raise Picky(1, 2)


def _raise_value() -> None:
    raise ValueError("remote trouble")


def test_call_pickled_in_process(tmp_path: Path) -> None:
    fn = tmp_path / "fn"
    fn.write_bytes(calls.dumps_function(_add))
    assert calls.decode_result(calls.call_pickled(str(fn), calls.dumps_args((2,), {"y": 3}), [])) == 5
    assert calls.decode_result(calls.call_pickled(str(fn), pickle.dumps(((4,), {})), [])) == 5
    fn.write_bytes(calls.dumps_function(_raise_value))
    with pytest.raises(ValueError, match="remote trouble") as info:
        calls.decode_result(calls.call_pickled(str(fn), b"", []))
    cause = info.value.__cause__
    assert isinstance(cause, calls.RemoteTraceback)
    assert "_raise_value" in str(cause) and "call_pickled" not in str(cause)
    fn.write_bytes(calls.dumps_function(_raise_picky))
    with pytest.raises(RuntimeError, match="Picky.*cannot be serialised"):
        calls.decode_result(calls.call_pickled(str(fn), b"", []))
    # a value that cannot be serialised: a clear error
    fn.write_bytes(calls.dumps_function(threading.Lock))
    with pytest.raises(RuntimeError, match="cannot be serialised"):
        calls.decode_result(calls.call_pickled(str(fn), b"", []))


@pytest.mark.parametrize("mode", ["fork", "reuse"])
def test_call_pickled_through_warm(tmp_path: Path, entries: Path, mode: str) -> None:
    cloudpickle = pytest.importorskip("cloudpickle")
    w = Warm(tmp_path, mode, entries)
    try:
        w.setup()
        base = 10

        def result(fn: Any, args: bytes) -> Any:
            path = tmp_path / f"fn{w.calls}"
            path.write_bytes(cloudpickle.dumps(fn))
            c, r = w.run("diffuse_client.calls:call_pickled", args, fn=str(path))
            if mode == "fork":
                assert r == 0, c.err()
                data = c.result.read_bytes()
            else:
                assert r[0]["ok"], c.err()
                data = r[1]
            return calls.decode_result(data)

        assert result(lambda x, y=0: x * base + y, calls.dumps_args((4,), {"y": 2})) == 42

        def fails(msg: str) -> None:
            raise KeyError(msg)

        with pytest.raises(KeyError) as info:
            result(fails, calls.dumps_args(("lost",)))
        assert "in fails" in str(info.value.__cause__)
        with pytest.raises(RuntimeError, match="cannot be serialised"):
            result(lambda: (x for x in ()), b"")  # a generator
        assert result(lambda: (lambda: 7), b"")() == 7  # a lambda by value (cloudpickle)
    finally:
        w.close()
