"""Test helpers: a real diffuse dispatcher and two real workers, started from the built binary.

The binary is ``$DIFFUSE_BIN``, else ``<repo>/target/release/diffuse``. Each process is started
in a session of its own and its whole process group is stopped at teardown.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

from diffuse_client import Client, DiffuseError

REPO = Path(__file__).resolve().parents[2]
WORKERS = 2
CORES = 2


def diffuse_bin() -> Path:
    """The diffuse binary the tests run."""
    env = os.environ.get("DIFFUSE_BIN")
    return Path(env) if env else REPO / "target" / "release" / "diffuse"


class Cluster:
    """A dispatcher on a free loopback port and ``WORKERS`` workers with their own caches.

    ``reuse``: the dispatcher's ``--reuse`` (``"on"``/``"off"``); ``None`` leaves it to
    ``$DIFFUSE_REUSE`` and the dispatcher's default (on).
    """

    def __init__(self, root: Path, reuse: Optional[str] = None) -> None:
        self.root = root
        self.reuse = reuse
        self.bin = diffuse_bin()
        if not os.access(self.bin, os.X_OK):
            pytest.fail(
                f"no diffuse binary at {self.bin}: build it (cargo build --release) or set DIFFUSE_BIN",
                pytrace=False,
            )
        self.client_token = secrets.token_hex(16)
        self.worker_token = secrets.token_hex(16)
        self.token_file = root / "client.token"
        self.token_file.write_text(self.client_token + "\n")
        self.token_file.chmod(0o600)
        self.env: Dict[str, str] = dict(os.environ)
        self.env["DIFFUSE_CLIENT_TOKEN"] = self.client_token
        self.env["DIFFUSE_WORKER_TOKEN"] = self.worker_token
        self.env.pop("DIFFUSE_DISPATCHER", None)
        self.procs: List[subprocess.Popen[bytes]] = []
        self.logs: List[Path] = []
        self.url = ""
        self.worker_names = [f"w{i}" for i in range(WORKERS)]
        self.cache_dirs = [root / f"cache-{n}" for n in self.worker_names]

    def _spawn(self, name: str, args: List[str]) -> "subprocess.Popen[bytes]":
        log = self.root / f"{name}.log"
        self.logs.append(log)
        with open(log, "wb") as out:
            p = subprocess.Popen(
                [str(self.bin), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.root,
                start_new_session=True,
            )
        self.procs.append(p)
        return p

    def start(self) -> None:
        """Starts the dispatcher, reads the port it bound from its log, starts the workers."""
        args = ["dispatcher", "--listen", "127.0.0.1:0", "--journal", str(self.root / "journal.sqlite")]
        if self.reuse is not None:
            args += ["--reuse", self.reuse]
        d = self._spawn("dispatcher", args)
        log = self.root / "dispatcher.log"
        deadline = time.monotonic() + 30
        while not self.url:
            m = re.search(r"listening on (http://\S+)", log.read_text(errors="replace"))
            if m:
                self.url = m.group(1)
            elif d.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the dispatcher did not start:\n{log.read_text(errors='replace')}")
            else:
                time.sleep(0.05)
        for name, cache in zip(self.worker_names, self.cache_dirs):
            self._spawn(
                name,
                [
                    "worker", "--dispatcher", self.url, "--cache-dir", str(cache),
                    "--cache-size", "1GB", "--name", name, "--cores", str(CORES),
                    "--listen", "127.0.0.1:0",
                ],
            )
        c = self.client()
        deadline = time.monotonic() + 30
        while c.status().workers < WORKERS:
            if time.monotonic() > deadline:
                pytest.fail("workers did not connect:\n" + self.dump_logs())
            time.sleep(0.05)

    def client(self) -> Client:
        """A client of this dispatcher."""
        return Client(self.url, self.client_token)

    def dump_logs(self) -> str:
        """Every process's log, for a failure message."""
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}" for p in self.logs)

    def stop(self) -> None:
        """SIGTERM to each process group (workers first), SIGKILL to any left after 10 s."""
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)


def wait_until(pred: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    """Polls ``pred()`` every 50 ms until it is true, or fails the test."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def unique(prefix: str) -> str:
    """A task id or job name not used before in this session."""
    return f"{prefix}-{secrets.token_hex(4)}"



def started(client: Client, task_id: str) -> bool:
    """Whether a task whose command begins with ``echo started`` has started its process.

    A task listed ``running`` may still be on its way to the worker; a cancel that reaches the
    worker before the process exists is lost there (the process then runs to its end), so tests
    that cancel running tasks wait for their first output instead.
    """
    try:
        return client.logs(task_id) == "started\n"
    except DiffuseError:
        return False
