"""``DiffuseExecutor``: a ``concurrent.futures.Executor`` whose work items are diffuse tasks."""

from __future__ import annotations

import itertools
import logging
import os
import shlex
import threading
import time
import uuid
from concurrent.futures import Executor, Future, InvalidStateError
from concurrent.futures import ThreadPoolExecutor as _Pool
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .client import ENDED_STATES, Client, Task, TaskInfo
from .errors import DiffuseAPIError, DiffuseConnectionError, DiffuseError
from .programs import FileDigests, ProgramHasher
from .result import TaskFailed, TaskResult

log = logging.getLogger(__name__)

CmdSpec = Union[str, Sequence[str], Callable[..., Any]]


class TaskFuture(Future[TaskResult]):
    """A future of :class:`DiffuseExecutor`, carrying the diffuse ``task_id`` it stands for.

    Its result is a :class:`TaskResult`; a failed task raises :class:`TaskFailed`.
    ``cancel()`` succeeds until the task's outcome is known, and cancels the diffuse task too:
    a queued task ends at once, a running one's processes are stopped.
    """

    def __init__(self, task_id: str) -> None:
        super().__init__()
        self.task_id = task_id


@dataclass
class _Pending:
    future: TaskFuture
    task: Dict[str, Any]


def build_cmd(cmd: CmdSpec, args: Tuple[Any, ...]) -> Tuple[Any, Dict[str, Any]]:
    """Turns ``submit``'s ``cmd`` and positional arguments into a command and extra task fields.

    - a callable is called with the arguments; it returns a command (string or argv list), or a
      mapping of task fields (with ``cmd``) or a :class:`Task`;
    - an argv list gets the arguments appended (as strings);
    - a shell string gets them appended, each quoted for ``sh`` (as ``xargs`` would).
    """
    extra: Dict[str, Any] = {}
    if callable(cmd):
        made = cmd(*args)
        if isinstance(made, Task):
            extra = {k: v for k, v in made.to_dict().items() if k != "id" or made.id}
        elif isinstance(made, Mapping):
            extra = dict(made)
        else:
            extra = {"cmd": made}
        if "cmd" not in extra:
            raise TypeError("the callable given as cmd returned no 'cmd'")
        c = extra.pop("cmd")
        return c, extra
    if isinstance(cmd, str):
        if args:
            return cmd + " " + " ".join(shlex.quote(str(a)) for a in args), extra
        return cmd, extra
    if isinstance(cmd, (list, tuple)):
        return [str(c) for c in cmd] + [str(a) for a in args], extra
    raise TypeError(f"cmd must be a string, an argv list or a callable, not {type(cmd).__name__}")


class DiffuseExecutor(Executor):
    """Runs commands as diffuse tasks behind ``concurrent.futures`` futures.

    ``submit(cmd, *args, inputs=..., outputs=..., **task_fields)`` queues one task and returns a
    :class:`TaskFuture` at once; ``map`` works as for any executor. A background thread sends
    queued tasks in acknowledged batches (up to ``batch_size``) and polls for their ends every
    ``poll`` seconds with at most one ``/v1/status`` request, and, when tasks ended, the
    listing of ended tasks in pages of 10,000 (never one request per task and poll). A
    succeeded task's stdout is then fetched (one request per task that printed something, by
    ``log_threads`` threads) unless ``fetch_stdout`` is false.

    A task that fails sets :class:`TaskFailed` (with the error and the end of stderr); one
    cancelled through diffuse (``diffuse cancel``, ``cancel_job``) cancels its future.
    ``defaults`` are task fields given to every task (``cores``, ``retries``, ``timeout_s``,
    ``job``...); ``job`` is a shortcut for ``defaults={"job": ...}``. ``lost_timeout``: seconds
    the dispatcher may stay unreachable before the outstanding futures fail.

    Each task's program files are hashed into its ``programs`` by the background thread, as
    its batch is sent (relative names under ``base_dir``, default the current directory; see
    :mod:`diffuse_client.programs`): each word is looked up once per batch, and an unchanged
    file is hashed once per executor. (Not in ``submit``: a file-system call there hands the
    GIL to the background thread, and a loop of submits slows down.)
    """

    def __init__(
        self,
        client: Optional[Client] = None,
        *,
        url: Optional[str] = None,
        token: Optional[str] = None,
        job: Optional[str] = None,
        defaults: Optional[Mapping[str, Any]] = None,
        poll: float = 0.2,
        batch_size: int = 1000,
        fetch_stdout: bool = True,
        log_threads: int = 16,
        id_prefix: Optional[str] = None,
        lost_timeout: float = 600.0,
        base_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
    ) -> None:
        self.client = client if client is not None else Client(url, token)
        self.base_dir = base_dir
        self._digests = FileDigests()
        self._defaults: Dict[str, Any] = dict(defaults or {})
        if job is not None:
            self._defaults["job"] = job
        Task.from_dict({"id": "x", "cmd": "x", **self._defaults})  # unknown fields fail here
        self.poll = poll
        self.batch_size = batch_size
        self.fetch_stdout = fetch_stdout
        self.lost_timeout = lost_timeout
        self.id_prefix = id_prefix if id_prefix is not None else f"py-{uuid.uuid4().hex[:10]}-"
        self._counter = itertools.count()
        self._cond = threading.Condition()
        self._queue: List[_Pending] = []
        self._outstanding: Dict[str, TaskFuture] = {}
        self._cancels: List[TaskFuture] = []
        self._shutdown = False
        self._log_threads = max(1, log_threads)
        self._logs: Optional[_Pool] = None
        self._thread = threading.Thread(target=self._run, name="diffuse-executor", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ public

    def submit(  # type: ignore[override]
        self,
        cmd: CmdSpec,
        /,
        *args: Any,
        inputs: Sequence[Any] = (),
        outputs: Sequence[Any] = (),
        **task_fields: Any,
    ) -> TaskFuture:
        """Queues one task; returns its future at once.

        ``cmd`` is a shell string, an argv list, or a callable making one from ``args`` (see
        :func:`build_cmd`). ``inputs``/``outputs`` are URIs or paths; ``task_fields`` any other
        task field (an unknown one raises ``TypeError`` here). ``id`` may be given; by default
        it is the executor's prefix and a counter.
        """
        command, extra = build_cmd(cmd, args)
        fields: Dict[str, Any] = {**self._defaults, **extra, **task_fields}
        task_id = fields.pop("id", None) or f"{self.id_prefix}{next(self._counter)}"
        if inputs:
            fields["inputs"] = list(inputs)
        if outputs:
            fields["outputs"] = list(outputs)
        task = Task.from_dict({"id": task_id, "cmd": command, **fields}).to_dict()
        fut = TaskFuture(str(task_id))
        with self._cond:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._queue.append(_Pending(fut, task))
            self._cond.notify_all()
        fut.add_done_callback(self._on_done)
        return fut

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stops taking tasks.

        With ``cancel_futures``, the futures of tasks not yet sent are cancelled, and so are
        those whose task is still queued at the dispatcher (each such task is cancelled there);
        running tasks go on. With ``wait``, returns once every future is done.
        """
        with self._cond:
            self._shutdown = True
            if cancel_futures:
                for p in self._queue:
                    p.future.cancel()
            self._cond.notify_all()
        if cancel_futures:
            self._cancel_queued()
        if wait:
            self._thread.join()

    def join(self, timeout: Optional[float] = None) -> bool:
        """After ``shutdown``: waits for the poller thread to finish (every future done).

        Returns whether it finished within ``timeout`` seconds.
        """
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def outstanding(self) -> int:
        """Futures not yet done (queued here, or sent and not ended)."""
        with self._cond:
            return len(self._queue) + len(self._outstanding)

    # ------------------------------------------------------------------ internals

    def _on_done(self, fut: "Future[Any]") -> None:
        if fut.cancelled() and isinstance(fut, TaskFuture):
            with self._cond:
                self._cancels.append(fut)
                self._cond.notify_all()

    def _cancel_queued(self) -> None:
        """Cancels the futures of this executor's tasks that the dispatcher still has queued."""
        with self._cond:
            if not self._outstanding:
                return
            ids = list(self._outstanding)
        try:
            found, _ = self.client.states(ids)
        except DiffuseError as e:
            log.warning("shutdown: could not read which tasks are queued to cancel them: %s", e)
            return
        for tid, info in found.items():
            if info.state == "queued":
                with self._cond:
                    fut = self._outstanding.get(tid)
                if fut is not None:
                    fut.cancel()

    def _run(self) -> None:
        last_poll = 0.0
        last_ended = -1
        unreachable_since: Optional[float] = None
        try:
            while True:
                with self._cond:
                    if self._done_locked():
                        break
                    if not self._queue and not self._cancels:
                        wait = self.poll - (time.monotonic() - last_poll) if self._outstanding else None
                        if wait is None or wait > 0:
                            self._cond.wait(wait if wait is not None else 1.0)
                    batch = self._take_batch_locked()
                    cancels, self._cancels = self._cancels, []
                for fut in cancels:
                    self._send_cancel(fut)
                if batch:
                    self._fill_programs(batch)
                    self._submit_batch(batch)
                with self._cond:
                    if not self._outstanding or time.monotonic() - last_poll < self.poll:
                        continue
                    wanted = list(self._outstanding)
                last_poll = time.monotonic()
                try:
                    st = self.client.status()
                    if st.ended != last_ended:
                        found, _ = self.client.states(wanted)
                        last_ended = st.ended
                        for info in found.values():
                            if info.ended:
                                self._resolve(info)
                    unreachable_since = None
                except DiffuseConnectionError as e:
                    now = time.monotonic()
                    if unreachable_since is None:
                        unreachable_since = now
                        log.warning("diffuse executor: %s; trying again", e)
                    if now - unreachable_since > self.lost_timeout:
                        self._fail_all(e)
                except DiffuseError as e:
                    log.warning("diffuse executor: polling failed: %s", e)
        except BaseException as e:  # pragma: no cover - a bug: fail futures rather than hang
            log.exception("diffuse executor thread stopped")
            self._fail_all(DiffuseError(f"the executor's thread stopped: {e!r}"))
            raise
        finally:
            if self._logs is not None:
                self._logs.shutdown(wait=True)

    def _done_locked(self) -> bool:
        return self._shutdown and not self._queue and not self._outstanding and not self._cancels

    def _take_batch_locked(self) -> List[_Pending]:
        # A future cancelled before it was sent is dropped here; its done callback has put it
        # in _cancels, where _send_cancel finds nothing to cancel at the dispatcher.
        live = [p for p in self._queue if not p.future.cancelled()]
        batch, self._queue = live[: self.batch_size], live[self.batch_size :]
        return batch

    def _fill_programs(self, batch: List[_Pending]) -> None:
        """Hashes the program files the batch's commands name (one lookup per word)."""
        hasher = ProgramHasher(self.base_dir, self._digests)
        for p in batch:
            hasher.fill(p.task)

    def _submit_batch(self, batch: List[_Pending]) -> None:
        """Sends a batch; splits it on a refusal so that only the refused tasks fail."""
        deadline = time.monotonic() + self.lost_timeout
        delay = 0.5
        retried = False
        while True:
            try:
                self.client._post_batch([p.task for p in batch])
                break
            except DiffuseConnectionError as e:
                if time.monotonic() > deadline:
                    for p in batch:
                        _fail(p.future, e)
                    return
                log.warning("diffuse executor: submitting %d task(s): %s; trying again", len(batch), e)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
                retried = True
            except DiffuseAPIError as e:
                if e.status == 409 and retried:
                    # the first try was taken before its answer was lost (ids are unique)
                    break
                if e.status in (400, 409, 413) and len(batch) > 1:
                    half = len(batch) // 2
                    self._submit_batch(batch[:half])
                    self._submit_batch(batch[half:])
                    return
                for p in batch:
                    _fail(p.future, e)
                return
            except DiffuseError as e:
                for p in batch:
                    _fail(p.future, e)
                return
        with self._cond:
            for p in batch:
                # one cancelled while being sent is in _cancels: cancelled at the dispatcher next
                self._outstanding[p.future.task_id] = p.future

    def _forget_locked(self, task_id: str) -> Optional[TaskFuture]:
        fut = self._outstanding.pop(task_id, None)
        if fut is not None:
            self._cond.notify_all()
        return fut

    def _send_cancel(self, fut: TaskFuture) -> None:
        # Each cancelled future comes here exactly once (from its done callback).
        with self._cond:
            sent = fut.task_id in self._outstanding
            self._forget_locked(fut.task_id)
        fut.set_running_or_notify_cancel()  # wakes concurrent.futures.wait/as_completed
        if sent:
            try:
                self.client.cancel(fut.task_id)
            except DiffuseAPIError as e:
                if e.status not in (404, 409):
                    log.warning("cancelling task %s: %s", fut.task_id, e)
            except DiffuseError as e:
                log.warning("cancelling task %s: %s", fut.task_id, e)

    def _resolve(self, info: TaskInfo) -> None:
        with self._cond:
            fut = self._forget_locked(info.id)
        if fut is None or info.state not in ENDED_STATES:
            return
        result = TaskResult.from_info(info)
        if info.state == "cancelled":
            fut.cancel()  # its done callback notifies waiters (through _send_cancel)
            return
        if info.state == "failed":
            _fail(fut, TaskFailed(result))
            return
        if not self.fetch_stdout:
            _set(fut, result)
        elif result.report.get("stdout") is None:
            result.stdout = ""
            _set(fut, result)
        else:
            if self._logs is None:
                self._logs = _Pool(self._log_threads, thread_name_prefix="diffuse-logs")
            self._logs.submit(self._fetch_stdout, fut, result)

    def _fetch_stdout(self, fut: TaskFuture, result: TaskResult) -> None:
        try:
            result.stdout = self.client.logs(result.task_id, "stdout", result.attempt or None)
        except DiffuseError as e:
            result.stdout_error = str(e)
            log.warning("task %s succeeded but its stdout could not be fetched: %s", result.task_id, e)
        _set(fut, result)

    def _fail_all(self, e: BaseException) -> None:
        with self._cond:
            futs = [p.future for p in self._queue] + list(self._outstanding.values())
            self._queue = []
            self._outstanding.clear()
            self._cond.notify_all()
        for f in futs:
            _fail(f, e)

    def __enter__(self) -> "DiffuseExecutor":
        return self


def _set(fut: "Future[Any]", value: Any) -> None:
    try:
        fut.set_result(value)
    except InvalidStateError:  # cancelled by its owner meanwhile
        pass


def _fail(fut: "Future[Any]", e: BaseException) -> None:
    try:
        fut.set_exception(e)
    except InvalidStateError:
        pass

