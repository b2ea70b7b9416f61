"""The warm Python process a diffuse worker keeps for function tasks (docs/warm.md).

Usage (by the worker, never by hand)::

    DIFFUSE_WARM_FD=N python -m diffuse_client.warm --mode fork|reuse

``N`` is one end of a Unix stream socket pair: the control connection to the worker (0: the
worker passes it as stdin; it is moved above 2 and /dev/null put in its place). Every
message is a frame: two big-endian ``u32`` (the JSON object's length, the payload's length),
the JSON object, the payload. The warm process says ``hello``, gets ``setup`` (modules to
import, code to run) and answers ``ready`` (or ``failed`` and exits 1), then runs ``call``\\ s
until ``exit`` or the end of the connection (then it exits 0 at once).

- ``--mode fork`` (a *zygote*): one child forked per call, several in flight. The zygote is a
  single thread: a ``selectors`` loop over the connection and a SIGCHLD wake-up pipe. It
  answers ``forked`` (the child's pid, which is also its process group) right after the fork,
  lets the child start on ``go``, and answers ``exited`` (its exit code, or minus the signal
  that killed it) once it has reaped it. The child resets what a fresh interpreter would have
  (signals, mask, atexit, environment, working directory, stdio), calls the entry, writes its
  bytes to ``result`` and ends with ``os._exit``: it never returns into the zygote's code.
- ``--mode reuse``: one call at a time, in this process; the environment, working directory,
  stdio, ``sys.argv``, signal handlers and umask are set for the call and put back after it;
  processes the call left (children, and orphans that come back to this process as a child
  subreaper) are killed before the answer, ``done``, whose payload is the returned bytes.

Standard library only; nothing here starts a thread.
"""

from __future__ import annotations

import atexit
import fcntl
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import struct
import sys
import traceback
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

#: The protocol this side speaks (``hello``'s ``protocol``).
PROTOCOL = 1

#: Exit status of the warm process on a protocol error (a malformed frame or message).
EXIT_PROTOCOL = 2

_HEADER = struct.Struct(">II")

#: Most bytes of a frame's JSON object / payload accepted (larger: a protocol error).
MAX_JSON = 16 << 20
MAX_PAYLOAD = 1 << 30

Message = Dict[str, Any]
Entry = Callable[[str, bytes, List[str]], Any]


class ProtocolError(Exception):
    """A frame or message that does not follow the protocol."""


# ---------------------------------------------------------------------------------------------
# Frames


def _recv_exact(sock: socket.socket, n: int, *, at_start: bool) -> Optional[bytearray]:
    """``n`` bytes from ``sock``; None at the end of the connection before the first byte of a
    frame (``at_start``); a ProtocolError in the middle of one."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            if at_start and got == 0:
                return None
            raise ProtocolError(f"the connection ended in a frame ({got} of {n} bytes)")
        got += k
    return buf


def recv_frame(sock: socket.socket) -> Optional[Tuple[Message, bytes]]:
    """The next frame's message and payload; None at the end of the connection."""
    head = _recv_exact(sock, _HEADER.size, at_start=True)
    if head is None:
        return None
    jlen, plen = _HEADER.unpack(head)
    if jlen > MAX_JSON or plen > MAX_PAYLOAD:
        raise ProtocolError(f"a frame of {jlen} + {plen} bytes")
    body = _recv_exact(sock, jlen + plen, at_start=False)
    assert body is not None
    try:
        msg = json.loads(bytes(body[:jlen]).decode("utf-8"))
    except ValueError as e:
        raise ProtocolError(f"a frame's JSON: {e}") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("op"), str):
        raise ProtocolError(f"a message without op: {msg!r:.200}")
    # bytes(): the entry gets bytes; a payload is copied once (in a fork child: in the child)
    return msg, bytes(body[jlen:]) if plen else b""


def send_frame(sock: socket.socket, msg: Mapping[str, Any], payload: bytes = b"") -> None:
    """Send one frame (the payload without copying it)."""
    data = json.dumps(msg, separators=(",", ":")).encode("utf-8")
    if len(payload) < 65536:
        sock.sendall(_HEADER.pack(len(data), len(payload)) + data + payload)
    else:
        sock.sendall(_HEADER.pack(len(data), len(payload)) + data)
        sock.sendall(payload)


# ---------------------------------------------------------------------------------------------
# What a fresh interpreter has, recorded before anything else runs


def _catchable_signals() -> List[int]:
    return [
        int(s)
        for s in signal.valid_signals()
        if s not in (signal.SIGKILL, signal.SIGSTOP) and 0 < int(s) < signal.NSIG
    ]


# _signal.getsignal: signal.getsignal without its enum conversion (10 times faster)
_getsignal: Callable[[int], Any] = getattr(importlib.import_module("_signal"), "getsignal")
_SIGNALS = _catchable_signals()
#: Signal handlers as the interpreter set them up (SIGINT: default_int_handler unless it was
#: ignored; SIGPIPE and SIGXFSZ ignored; the rest as inherited from the worker, SIG_DFL).
_FRESH_HANDLERS: Dict[int, Any] = {}
for _s in _SIGNALS:
    try:
        _h = _getsignal(_s)
    except (OSError, ValueError):
        continue
    if _h is not None:  # None: a handler not set from Python (left alone)
        _FRESH_HANDLERS[_s] = _h
del _s, _h


def _changed_signals() -> List[Tuple[int, Any]]:
    """The signals whose handler is not a fresh interpreter's, with the fresh one."""
    out = []
    for s, h in _FRESH_HANDLERS.items():
        try:
            now = _getsignal(s)
        except (OSError, ValueError):
            continue
        if now is not h and now != h:
            out.append((s, h))
    return out


def _restore_signals(changed: Optional[List[Tuple[int, Any]]] = None) -> None:
    """Signal dispositions and mask as a fresh interpreter's (in a fork child: ``changed``,
    computed in the zygote; after a reuse call: whatever the call changed)."""
    for s, h in _changed_signals() if changed is None else changed:
        try:
            signal.signal(s, h)
        except (OSError, ValueError, RuntimeError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


#: ``sys.argv`` of a call: this module's path, without the worker's options.
_CALL_ARGV = [sys.argv[0]] if sys.argv and sys.argv[0] else ["-m"]
#: ``-m`` put the start directory first on sys.path; a call gets its own cwd there instead,
#: as ``python -m`` started in its directory would have.
_PATH0_IS_CWD = bool(sys.path) and sys.path[0] == os.getcwd()


def _set_environ(env: Mapping[str, str]) -> None:
    """Make ``os.environ`` (and the C environment) exactly ``env``, changing only what
    differs."""
    now = os.environ.copy()
    for k in now:
        if k not in env:
            del os.environ[k]
    for k, v in env.items():
        if now.get(k) != v:
            os.environ[k] = v


def _set_call_argv(cwd: str) -> None:
    sys.argv[:] = _CALL_ARGV
    if _PATH0_IS_CWD and sys.path:
        sys.path[0] = cwd


def _open_stdio(stdout: Optional[str], stderr: Optional[str]) -> None:
    """The call's FIFOs (or files) as fds 1 and 2 (None: /dev/null)."""
    out = os.open(stdout or os.devnull, os.O_WRONLY)
    try:
        os.dup2(out, 1)
        if (stderr or os.devnull) == (stdout or os.devnull):
            os.dup2(out, 2)
        else:
            err = os.open(stderr or os.devnull, os.O_WRONLY)
            os.dup2(err, 2)
            os.close(err)
    finally:
        os.close(out)


def _flush_stdio() -> None:
    for f in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if f is not None:
                f.flush()
        except Exception:
            pass


def _threads() -> int:
    """This process's threads (native ones too)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


def _rss() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _log(text: str) -> None:
    """A line in the warm process's log (its stderr: the worker's warm-<pid>.log)."""
    try:
        sys.stderr.write(f"diffuse_client.warm[{os.getpid()}]: {text}\n")
        sys.stderr.flush()
    except Exception:
        pass


_ENTRIES: Dict[str, Entry] = {}


def load_entry(spec: str) -> Entry:
    """The function ``module:function`` names (imported once per process)."""
    fn = _ENTRIES.get(spec)
    if fn is None:
        mod, sep, name = spec.partition(":")
        if not sep or not mod or not name:
            raise ValueError(f"entry {spec!r} is not module:function")
        obj: Any = importlib.import_module(mod)
        for part in name.split("."):
            obj = getattr(obj, part)
        if not callable(obj):
            raise TypeError(f"entry {spec!r} is not callable")
        fn = obj
        _ENTRIES[spec] = fn
    return fn


def _as_bytes(value: Any, entry: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(
        f"entry {entry} returned {type(value).__name__}, not bytes "
        "(an entry serializes the function's result itself)"
    )


def _setup(sock: socket.socket, msg: Message, mode: str) -> None:
    """The ``setup`` step: imports, code, (fork) gc.freeze; answers ready, or failed and exits 1."""
    try:
        preload = msg.get("preload") or []
        code = msg.get("setup")
        for name in preload:
            importlib.import_module(name)
        if code:
            exec(compile(code, "<diffuse warm setup>", "exec"), {"__name__": "__diffuse_setup__"})
    except BaseException:
        tb = traceback.format_exc()
        _log(f"setup failed:\n{tb}")
        try:
            send_frame(sock, {"op": "failed", "error": tb})
        finally:
            _flush_stdio()
            os._exit(1)
    ready: Message = {"op": "ready", "rss": _rss()}
    if mode == "fork":
        threads = _threads()
        if threads > 1:
            _log(
                f"{threads} threads after setup: forking a process with threads is unsafe "
                "(a lock held by another thread stays locked in the child); preload less"
            )
        ready["threads"] = threads
        gc.collect()
        gc.freeze()
    send_frame(sock, ready)


# ---------------------------------------------------------------------------------------------
# fork mode


class _Child:
    __slots__ = ("id", "pid", "go_w")

    def __init__(self, call_id: Any, pid: int, go_w: int) -> None:
        self.id = call_id
        self.pid = pid
        self.go_w = go_w  # -1 once "go" is passed on


def _fresh_exit_state() -> None:
    """In a fork child: what runs at its exit is the call's, not the zygote's. The zygote's
    atexit callbacks and weakref finalizers (a setup's TemporaryDirectory...) are dropped;
    those the interpreter would register again in a process that imported the same modules
    (logging's flush, multiprocessing's) are registered again."""
    atexit._clear()
    registry = getattr(weakref.finalize, "_registry", None)
    if isinstance(registry, dict):
        registry.clear()
    if hasattr(weakref.finalize, "_registered_with_atexit"):
        setattr(weakref.finalize, "_registered_with_atexit", False)
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None and hasattr(mp_util, "_exit_function"):
        atexit.register(mp_util._exit_function)
    logging = sys.modules.get("logging")
    if logging is not None and hasattr(logging, "shutdown"):
        atexit.register(logging.shutdown)


def _exit_code(e: SystemExit) -> int:
    """The status the interpreter exits with for ``e`` (its message printed to stderr)."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except Exception:
        pass
    return 1


def _child_exit(code: int) -> None:
    """The end of a fork child, as the interpreter's: join non-daemon threads, atexit, flush,
    then ``os._exit`` (nothing of the zygote runs)."""
    try:
        shutdown = getattr(sys.modules.get("threading"), "_shutdown", None)
        if shutdown is not None:
            shutdown()
        atexit._run_exitfuncs()
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass
    _flush_stdio()
    os._exit(code)


def _child(
    msg: Message, payload: bytes, go_r: int, close: List[int], signals: List[Tuple[int, Any]]
) -> None:
    """A fork child: wait for go, run the call, exit. Never returns."""
    code = 1
    try:
        try:
            os.setpgid(0, 0)
        except OSError:
            pass
        signal.set_wakeup_fd(-1)
        for fd in close:
            try:
                os.close(fd)
            except OSError:
                pass
        _restore_signals(signals)
        gone = os.read(go_r, 1) == b""
        os.close(go_r)
        if gone:  # the zygote ended before "go"
            os._exit(1)
        _fresh_exit_state()
        # random re-seeds itself in a fork child (its os.register_at_fork hook)
        np_random = sys.modules.get("numpy.random")
        if np_random is not None:  # numpy's global RandomState has no at-fork hook
            try:
                np_random.seed()
            except Exception:
                pass
        _open_stdio(msg.get("stdout"), msg.get("stderr"))
        code = _run_child_call(msg, payload)
    except SystemExit as e:
        code = _exit_code(e) or 1  # 0 only once the result is written
    except KeyboardInterrupt:
        traceback.print_exc()
        _flush_stdio()
        # as CPython ends on an uncaught KeyboardInterrupt: killed by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass
        code = 1
    finally:
        try:
            _child_exit(code)
        finally:
            os._exit(code)


def _run_child_call(msg: Message, payload: bytes) -> int:
    env = msg.get("env")
    if env is not None:
        _set_environ(env)
    cwd = msg.get("cwd")
    if cwd:
        os.chdir(cwd)
    _set_call_argv(os.getcwd())
    entry_spec = str(msg["entry"])
    entry = load_entry(entry_spec)
    try:
        value = entry(str(msg["fn"]), payload, list(msg.get("inputs") or []))
    except SystemExit as e:
        code = _exit_code(e)
        if code == 0:
            # Success without a result is not one: the worker would find no result file.
            print(
                f"the entry {entry_spec} raised SystemExit({e.code!r}) instead of returning bytes",
                file=sys.stderr,
            )
        # A non-zero status ends the call with it, as the interpreter would, and says nothing.
        return code or 1
    data = _as_bytes(value, entry_spec)
    result = str(msg["result"])
    tmp = f"{result}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, result)
    return 0


class _Zygote:
    def __init__(self, sock: socket.socket, extra_fds: List[int]) -> None:
        self.sock = sock
        self.extra_fds = extra_fds  # inherited at start: closed in every child
        self.children: Dict[int, _Child] = {}  # by pid
        self.by_id: Dict[Any, int] = {}
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        self.signals = _changed_signals()  # what children set back
        self.sel.register(self.sock, selectors.EVENT_READ, "ctl")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "chld")

    def _own_fds(self) -> List[int]:
        fds = [self.sock.fileno(), self.wake_r, self.wake_w, *self.extra_fds]
        sel_fd = getattr(self.sel, "fileno", None)
        if sel_fd is not None:
            fds.append(sel_fd())
        fds.extend(c.go_w for c in self.children.values() if c.go_w >= 0)
        return fds

    def run(self) -> None:
        while True:
            for key, _ in self.sel.select():
                if key.data == "chld":
                    self._drain_wakeup()
                    self._reap()
                else:
                    frame = recv_frame(self.sock)
                    if frame is None:
                        return
                    msg, payload = frame
                    op = msg["op"]
                    if op == "call":
                        self._call(msg, payload)
                    elif op == "go":
                        self._go(msg)
                    elif op == "exit":
                        return
                    else:
                        _log(f"ignored a message: {msg!r:.200}")

    def _drain_wakeup(self) -> None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _call(self, msg: Message, payload: bytes) -> None:
        call_id = msg.get("id")
        try:
            entry = str(msg["entry"])
            try:  # imported once here, so that children share it (and parsl & co.)
                if entry not in _ENTRIES:
                    load_entry(entry)
                    gc.freeze()
                    self.signals = _changed_signals()
                    if _threads() > 1:
                        _log(f"importing the entry {entry} started threads: forks are unsafe")
            except Exception:
                pass  # the child imports it again, and its traceback goes to the call's stderr
            go_r = go_w = -1
            go_r, go_w = os.pipe()
            _flush_stdio()
            close = self._own_fds() + [go_w]
            pid = os.fork()
        except Exception as e:
            for fd in (go_r, go_w):
                if fd >= 0:
                    os.close(fd)
            _log(f"call {call_id}: {e!r}")
            _tell_call_stderr(msg, f"diffuse warm process: the call could not start: {e!r}\n")
            send_frame(self.sock, {"op": "exited", "id": call_id, "code": 1, "error": repr(e)})
            return
        if pid == 0:
            _child(msg, payload, go_r, close, self.signals)
            os._exit(1)  # not reached
        os.close(go_r)
        try:  # here too, so that the group exists before the worker hears of it
            os.setpgid(pid, pid)
        except OSError:
            pass
        self.children[pid] = _Child(call_id, pid, go_w)
        self.by_id[call_id] = pid
        send_frame(self.sock, {"op": "forked", "id": call_id, "pid": pid})

    def _go(self, msg: Message) -> None:
        pid = self.by_id.get(msg.get("id"))
        child = self.children.get(pid) if pid is not None else None
        if child is None or child.go_w < 0:
            return  # ended already (its exited is sent or on its way), or a second go
        try:
            os.write(child.go_w, b"g")
        except OSError:
            pass  # it died before go: reaped soon
        os.close(child.go_w)
        child.go_w = -1

    def _reap(self) -> None:
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 255 << 8
            if done == 0:
                continue
            child = self.children.pop(pid)
            self.by_id.pop(child.id, None)
            if child.go_w >= 0:
                os.close(child.go_w)
            send_frame(
                self.sock,
                {"op": "exited", "id": child.id, "code": os.waitstatus_to_exitcode(status)},
            )


def _tell_call_stderr(msg: Message, text: str) -> None:
    """Best effort: a line on a call's stderr FIFO, if its reader is there (never blocks)."""
    path = msg.get("stderr")
    if not path:
        return
    try:
        fd = os.open(str(path), os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        os.write(fd, text.encode("utf-8", "replace"))
    except OSError:
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# reuse mode


def _set_child_subreaper() -> bool:
    """PR_SET_CHILD_SUBREAPER: orphans of the calls' processes come back to this process."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(36, 1, 0, 0, 0)) == 0
    except Exception:
        return False


def _children_pids() -> List[int]:
    """This process's children (its threads' children; a call's orphans once reparented)."""
    me = os.getpid()
    pids: List[int] = []
    try:
        tasks = os.listdir(f"/proc/{me}/task")
        for tid in tasks:
            try:
                with open(f"/proc/{me}/task/{tid}/children", "rb") as f:
                    pids.extend(int(p) for p in f.read().split())
            except FileNotFoundError:
                continue
        return pids
    except OSError:
        pass
    # no /proc/.../children (CONFIG_PROC_CHILDREN): every process's parent
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            if int(stat[stat.rindex(b")") + 2 :].split()[1]) == me:
                pids.append(int(name))
        except (OSError, ValueError):
            continue
    return pids


def _reap_nohang() -> bool:
    """Reap the children that ended; whether any child is left."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def kill_leftovers() -> int:
    """SIGKILL every process left by a call (children, and orphans reparented here), reap
    them, and repeat until none is left; the number killed."""
    killed = 0
    for _ in range(1000):
        if not _reap_nohang():
            break  # no child at all (the usual case: one syscall)
        pids = _children_pids()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        for pid in pids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    return killed


def _reuse_call(
    sock: socket.socket, msg: Message, payload: bytes, home_fd: int, log_fds: Tuple[int, int]
) -> None:
    call_id = msg.get("id")
    env_before = os.environ.copy()
    stdout_before, stderr_before = sys.stdout, sys.stderr
    argv_before, path_before = list(sys.argv), list(sys.path)
    umask = os.umask(0o022)
    os.umask(umask)
    ok = False
    data = b""
    try:
        _flush_stdio()
        _open_stdio(msg.get("stdout"), msg.get("stderr"))
    except Exception as e:
        os.dup2(log_fds[0], 1)
        os.dup2(log_fds[1], 2)
        _log(f"call {call_id}: its stdout/stderr: {e!r}")
        _tell_call_stderr(msg, f"diffuse warm process: the call's stdout/stderr: {e!r}\n")
        send_frame(sock, {"op": "done", "id": call_id, "ok": False, "killed": 0, "error": repr(e)})
        return
    try:
        env = msg.get("env")
        if env is not None:
            _set_environ(env)
        cwd = msg.get("cwd")
        if cwd:
            os.chdir(cwd)
        _set_call_argv(os.getcwd())
        entry_spec = str(msg["entry"])
        entry = load_entry(entry_spec)
        value = entry(str(msg["fn"]), payload, list(msg.get("inputs") or []))
        data = _as_bytes(value, entry_spec)
        ok = True
    except SystemExit as e:
        print(f"the call raised SystemExit({e.code!r}) instead of returning", file=sys.stderr)
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass
    finally:
        # put everything back: stdio first (the call's output goes to its FIFOs)
        _flush_stdio()
        sys.stdout, sys.stderr = stdout_before, stderr_before
        _flush_stdio()
        os.dup2(log_fds[0], 1)
        os.dup2(log_fds[1], 2)
        try:
            os.fchdir(home_fd)
        except OSError as e:
            _log(f"cannot go back to the start directory: {e}")
        _set_environ(env_before)
        sys.argv[:] = argv_before
        sys.path[:] = path_before
        os.umask(umask)
        _restore_signals()
    killed = kill_leftovers()
    send_frame(sock, {"op": "done", "id": call_id, "ok": ok, "killed": killed}, data)


def _reuse_loop(sock: socket.socket) -> None:
    home_fd = os.open(".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    log_fds = (os.dup(1), os.dup(2))  # the warm process's own stdout/stderr (its log)
    while True:
        frame = recv_frame(sock)
        if frame is None:
            return
        msg, payload = frame
        op = msg["op"]
        if op == "call":
            _reuse_call(sock, msg, payload, home_fd, log_fds)
        elif op == "exit":
            return
        elif op == "go":
            pass
        else:
            _log(f"ignored a message: {msg!r:.200}")


# ---------------------------------------------------------------------------------------------
# start


def _parse_mode(argv: List[str]) -> str:
    mode = "fork"
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--mode" and i + 1 < len(argv):
            mode = argv[i + 1]
            i += 2
            continue
        if a.startswith("--mode="):
            mode = a.split("=", 1)[1]
        else:
            raise SystemExit(f"usage: python -m diffuse_client.warm --mode fork|reuse (not {a!r})")
        i += 1
    if mode not in ("fork", "reuse"):
        raise SystemExit(f"--mode is fork or reuse, not {mode!r}")
    return mode


def _take_control_fd() -> socket.socket:
    """The control socket (``$DIFFUSE_WARM_FD``, removed from the environment). An fd of 0-2 is
    moved above 2 and /dev/null put in its place."""
    raw = os.environ.pop("DIFFUSE_WARM_FD", None)
    if raw is None:
        raise SystemExit("diffuse_client.warm is started by a diffuse worker (no DIFFUSE_WARM_FD)")
    try:
        fd = int(raw)
        os.fstat(fd)
    except (ValueError, OSError) as e:
        raise SystemExit(f"DIFFUSE_WARM_FD={raw!r}: {e}") from None
    if fd <= 2:
        moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
        null = os.open(os.devnull, os.O_RDWR if fd else os.O_RDONLY)
        os.dup2(null, fd)
        os.close(null)
        fd = moved
    else:
        os.set_inheritable(fd, False)
    return socket.socket(fileno=fd)


def _inherited_fds(keep: int) -> List[int]:
    """Fds above 2 this process was started with, besides ``keep``: closed in fork children."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    fds = []
    for n in names:
        fd = int(n)
        if fd > 2 and fd != keep:
            try:
                os.fstat(fd)
            except OSError:
                continue  # the listing's own fd
            fds.append(fd)
    return fds


def main(argv: Optional[List[str]] = None) -> None:
    mode = _parse_mode(sys.argv[1:] if argv is None else argv)
    if mode == "fork":
        # The zygote ignores SIGINT (it is in its own process group: a terminal's ^C never
        # reaches it; one sent on purpose must not end it mid-fork); SIGTERM keeps its default
        # action. Children get the interpreter's handlers back.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = _take_control_fd()
    extra = _inherited_fds(sock.fileno())
    try:
        send_frame(
            sock,
            {
                "op": "hello",
                "protocol": PROTOCOL,
                "pid": os.getpid(),
                "python": sys.version.split()[0],
                "mode": mode,
            },
        )
        first = recv_frame(sock)
        if first is None or first[0]["op"] == "exit":
            return
        if first[0]["op"] != "setup":
            raise ProtocolError(f"{first[0]['op']} before setup")
        _setup(sock, first[0], mode)
        if mode == "fork":
            _Zygote(sock, extra).run()
        else:
            _set_child_subreaper()
            _reuse_loop(sock)
    except ProtocolError as e:
        _log(f"protocol error: {e}")
        _flush_stdio()
        os._exit(EXIT_PROTOCOL)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the worker went away
    _flush_stdio()
    # no interpreter teardown: in fork mode, children are the worker's to kill
    os._exit(0)


if __name__ == "__main__":
    main()
