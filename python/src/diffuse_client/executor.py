"""``DiffuseExecutor``: a ``concurrent.futures.Executor`` whose work items are diffuse tasks, and
:class:`TaskExecutorBase`, the machinery it shares with
:class:`~diffuse_client.functions.FunctionExecutor`.

The machinery: ``submit`` only queues a task (a dict of task fields) with its future. One
thread, the *submitter*, sends what is queued in acknowledged batches (what accumulated while
the previous batch was on its way, up to ``batch_size``) and sends the cancels of cancelled
futures. Two *follower* threads hear of ended tasks with the dispatcher's long poll
(``POST /v1/states`` with ``wait_s``: the answer comes as soon as one of the named tasks has
ended), so a result arrives when its task ends, not at the next poll. Each thread has its own
HTTP connection (``_http.Transport`` keeps one per thread).

Why two followers: a long poll names the tasks outstanding when it starts. Tasks sent while it
waits are covered by a poll the other follower starts at once; while both wait, polls are
short (``wait_s`` grows from 0.5 s with the time since the last task was sent, up to 30 s), so
a task sent then waits at most that long to be heard of even if no other task ends.
"""

from __future__ import annotations

import base64
import itertools
import json
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

from .client import ENDED_STATES, MAX_STATES, Client, Task, TaskInfo
from .errors import DiffuseAPIError, DiffuseConnectionError, DiffuseError
from .programs import FileDigests, ProgramHasher
from .result import TaskFailed, TaskResult

log = logging.getLogger(__name__)

CmdSpec = Union[str, Sequence[str], Callable[..., Any], Mapping[str, Any], Task]

#: The longest a follower's poll waits at the dispatcher (its answer comes earlier when a task
#: ends), and the shortest while tasks are being sent.
MAX_FOLLOW_WAIT_S = 30.0
MIN_FOLLOW_WAIT_S = 0.5

#: A poll names the oldest outstanding tasks, at least this many: four times as many as were
#: running or ended in the previous answer (tasks start roughly in the order they were sent,
#: so the next to end are among them), doubled (up to 10,000) after a poll during which none
#: of them ended. An answer's cost is its number of ids, for the dispatcher and here.
FOLLOW_WINDOW = 256

#: A poll that found fewer ended tasks than this is followed by the next at once; one that
#: found more, ``poll`` seconds after it started (ends come in bunches: batch them).
FOLLOW_BUNCH = 4


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
    future: "Future[Any]"
    task: Dict[str, Any]

    @property
    def task_id(self) -> str:
        return str(self.task["id"])


def build_cmd(cmd: CmdSpec, args: Tuple[Any, ...]) -> Tuple[Any, Dict[str, Any]]:
    """Turns ``submit``'s ``cmd`` and positional arguments into a command and extra task fields.

    - a callable is called with the arguments; it returns a command (string or argv list), or a
      mapping of task fields (with ``cmd``, or ``call``: a function task) or a :class:`Task`;
    - a mapping of task fields or a :class:`Task` is taken as it is (no arguments);
    - an argv list gets the arguments appended (as strings);
    - a shell string gets them appended, each quoted for ``sh`` (as ``xargs`` would).

    The command is ``None`` for a function task (``call`` is then among the extra fields).
    """
    extra: Dict[str, Any] = {}
    if isinstance(cmd, (Task, Mapping)) or callable(cmd):
        if isinstance(cmd, (Task, Mapping)):
            if args:
                raise TypeError("a task given as a mapping or a Task takes no arguments")
            made: Any = cmd
            what = "the task"
        else:
            made = cmd(*args)
            what = "the callable given as cmd"
        if isinstance(made, Task):
            extra = {k: v for k, v in made.to_dict().items() if k != "id" or made.id}
        elif isinstance(made, Mapping):
            extra = dict(made)
        else:
            extra = {"cmd": made}
        if extra.get("cmd") is None and extra.get("call") is None:
            raise TypeError(f"{what} has no 'cmd' (or 'call')")
        if "cmd" in extra and "call" in extra and extra["cmd"] is not None and extra["call"] is not None:
            raise TypeError(f"{what} has both 'cmd' and 'call': give one of them")
        c = extra.pop("cmd", None)
        return c, extra
    if isinstance(cmd, str):
        if args:
            return cmd + " " + " ".join(shlex.quote(str(a)) for a in args), extra
        return cmd, extra
    if isinstance(cmd, (list, tuple)):
        return [str(c) for c in cmd] + [str(a) for a in args], extra
    raise TypeError(
        f"cmd must be a string, an argv list, a mapping of task fields, a Task or a callable, "
        f"not {type(cmd).__name__}"
    )


def call_value(client: Client, report: Mapping[str, Any]) -> Optional[bytes]:
    """A function task's result bytes from its worker's report: inline (``value``) or, over
    1 MiB, read from the dispatcher's blob store (``value_blob``). ``None`` when the report has
    neither (a command, or a call that did not succeed). For a :class:`TaskResult` of a call
    sent through :class:`DiffuseExecutor`: ``call_value(executor.client, result.report)``."""
    v = report.get("value")
    if isinstance(v, str):
        return base64.b64decode(v)
    blob = report.get("value_blob")
    if isinstance(blob, str) and blob:
        return client.get_blob(blob)
    return None


class TaskExecutorBase(Executor):
    """What :class:`DiffuseExecutor` and :class:`~diffuse_client.functions.FunctionExecutor`
    share: a queue of tasks (dicts of task fields) and their futures, a submitter thread that
    sends them in batches, two follower threads that hear of their ends with long polls, the
    cancels of cancelled futures, ``shutdown`` and ``lost_timeout``.

    A subclass builds tasks in its ``submit`` and calls :meth:`_enqueue`, and says what an
    ended task's future gets in :meth:`_resolve` (called on a follower thread; slow work, such
    as a fetch, goes to :meth:`_background`).
    """

    def __init__(
        self,
        client: Optional[Client] = None,
        *,
        url: Optional[str] = None,
        token: Optional[str] = None,
        poll: float = 0.05,
        batch_size: int = 1000,
        log_threads: int = 16,
        id_prefix: Optional[str] = None,
        lost_timeout: float = 600.0,
    ) -> None:
        self.client = client if client is not None else Client(url, token)
        self.poll = poll
        self.batch_size = batch_size
        self.lost_timeout = lost_timeout
        self.id_prefix = id_prefix if id_prefix is not None else f"py-{uuid.uuid4().hex[:10]}-"
        self._counter = itertools.count()
        self._lock = threading.Lock()
        #: the submitter waits on this (tasks queued, futures cancelled, shutdown)
        self._work = threading.Condition(self._lock)
        #: the followers wait on this (tasks sent, tasks ended, shutdown)
        self._follow = threading.Condition(self._lock)
        self._queue: List[_Pending] = []
        #: sent and not ended, in the order they were sent
        self._outstanding: Dict[str, _Pending] = {}
        self._cancels: List[Tuple[str, "Future[Any]"]] = []
        self._shutdown = False
        #: batches sent so far, and the number each in-flight poll covers (by thread)
        self._sent_batches = 0
        self._last_sent = time.monotonic()
        self._polls: Dict[int, int] = {}
        self._next_poll = 0.0
        self._window = FOLLOW_WINDOW
        self._unreachable_since: Optional[float] = None
        self._log_threads = max(1, log_threads)
        self._logs: Optional[_Pool] = None
        self._followers = [
            threading.Thread(target=self._run_follower, name=f"diffuse-follow-{i}", daemon=True)
            for i in range(2)
        ]
        self._thread = threading.Thread(target=self._run, name="diffuse-executor", daemon=True)
        for t in self._followers:
            t.start()
        self._thread.start()

    # ------------------------------------------------------------------ public

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stops taking tasks.

        With ``cancel_futures``, the futures of tasks not yet sent are cancelled, and so are
        those whose task is still queued at the dispatcher (each such task is cancelled there);
        running tasks go on. With ``wait``, returns once every future is done.
        """
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                queued = [p.future for p in self._queue]
            else:
                queued = []
            self._work.notify_all()
            self._follow.notify_all()
        for f in queued:
            f.cancel()
        if cancel_futures:
            self._cancel_queued()
        if wait:
            self._thread.join()

    def join(self, timeout: Optional[float] = None) -> bool:
        """After ``shutdown``: waits for the executor's threads to finish (every future done).

        Returns whether they finished within ``timeout`` seconds.
        """
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def outstanding(self) -> int:
        """Futures not yet done (queued here, or sent and not ended)."""
        with self._lock:
            return len(self._queue) + len(self._outstanding)

    def __enter__(self) -> "TaskExecutorBase":
        return self

    # ------------------------------------------------------------------ for subclasses

    def _new_id(self) -> str:
        return f"{self.id_prefix}{next(self._counter)}"

    def _enqueue(self, fut: "Future[Any]", task: Dict[str, Any]) -> None:
        """Queues ``task`` (a dict of task fields with its ``id``) for ``fut``; raises
        ``RuntimeError`` after shutdown."""
        p = _Pending(fut, task)
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._queue.append(p)
            if len(self._queue) == 1:
                self._work.notify()
        task_id = p.task_id
        fut.add_done_callback(lambda f: self._on_done(task_id, f))

    def _resolve(self, pending: _Pending, info: TaskInfo) -> None:
        """Sets the future of an ended task (``info.state`` is final)."""
        raise NotImplementedError

    def _prepare_batch(self, batch: List[_Pending]) -> None:
        """Called on the submitter thread before a batch is sent (e.g. to hash programs)."""

    def _background(self, fn: Callable[..., Any], *args: Any) -> None:
        """Runs ``fn(*args)`` on the executor's pool (fetches that must not hold a follower)."""
        with self._lock:
            if self._logs is None:
                self._logs = _Pool(self._log_threads, thread_name_prefix="diffuse-fetch")
            pool = self._logs
        pool.submit(fn, *args)

    # ------------------------------------------------------------------ internals

    def _on_done(self, task_id: str, fut: "Future[Any]") -> None:
        if fut.cancelled():
            with self._lock:
                self._cancels.append((task_id, fut))
                self._work.notify()

    def _cancel_queued(self) -> None:
        """Cancels the futures of this executor's tasks that the dispatcher still has queued."""
        with self._lock:
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
                with self._lock:
                    p = self._outstanding.get(tid)
                if p is not None:
                    p.future.cancel()

    def _done_locked(self) -> bool:
        return self._shutdown and not self._queue and not self._outstanding and not self._cancels

    def _run(self) -> None:
        """The submitter: sends queued tasks in batches and the cancels of cancelled futures;
        at the end, waits for the followers and the fetches."""
        try:
            while True:
                with self._lock:
                    while not (self._queue or self._cancels or self._done_locked()):
                        self._work.wait()
                    if self._done_locked():
                        break
                    batch = self._take_batch_locked()
                    cancels, self._cancels = self._cancels, []
                for task_id, fut in cancels:
                    self._send_cancel(task_id, fut)
                if batch:
                    self._prepare_batch(batch)
                    self._submit_batch(batch)
        except BaseException as e:  # pragma: no cover - a bug: fail futures rather than hang
            log.exception("diffuse executor thread stopped")
            self._fail_all(DiffuseError(f"the executor's thread stopped: {e!r}"))
            raise
        finally:
            with self._lock:
                self._follow.notify_all()
            for t in self._followers:
                t.join()
            with self._lock:
                pool, self._logs = self._logs, None
            if pool is not None:
                pool.shutdown(wait=True)

    def _take_batch_locked(self) -> List[_Pending]:
        # A future cancelled before it was sent is dropped here; its done callback has put it
        # in _cancels, where _send_cancel finds nothing to cancel at the dispatcher.
        live = [p for p in self._queue if not p.future.cancelled()]
        batch, self._queue = live[: self.batch_size], live[self.batch_size :]
        return batch

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
        with self._lock:
            for p in batch:
                # one cancelled while being sent is in _cancels: cancelled at the dispatcher next
                self._outstanding[p.task_id] = p
            self._sent_batches += 1
            self._last_sent = time.monotonic()
            self._follow.notify()

    def _send_cancel(self, task_id: str, fut: "Future[Any]") -> None:
        # Each cancelled future comes here exactly once (from its done callback).
        with self._lock:
            sent = self._forget_locked(task_id) is not None
        fut.set_running_or_notify_cancel()  # wakes concurrent.futures.wait/as_completed
        if sent:
            try:
                self.client.cancel(task_id)
            except DiffuseAPIError as e:
                if e.status not in (404, 409):
                    log.warning("cancelling task %s: %s", task_id, e)
            except DiffuseError as e:
                log.warning("cancelling task %s: %s", task_id, e)

    def _forget_locked(self, task_id: str) -> Optional[_Pending]:
        p = self._outstanding.pop(task_id, None)
        if p is not None and self._done_locked():
            self._work.notify_all()
            self._follow.notify_all()
        return p

    # ------------------------------------------------------------------ following

    def _run_follower(self) -> None:
        me = threading.get_ident()
        try:
            while True:
                with self._lock:
                    ask = self._next_poll_locked()
                    if ask is None:
                        return
                    ids, wait_s = ask
                    self._polls[me] = self._sent_batches
                    self._next_poll = time.monotonic() + self.poll
                ended = -1
                try:
                    ended = self._poll_once(ids, wait_s)
                finally:
                    with self._lock:
                        del self._polls[me]
                        if 0 <= ended < FOLLOW_BUNCH:
                            # ends come one by one: the next poll may start at once (the
                            # shortest latency); in bunches, `poll` apart (fewer requests)
                            self._next_poll = min(self._next_poll, time.monotonic())
                        self._follow.notify_all()
        except BaseException as e:  # pragma: no cover - a bug: fail futures rather than hang
            log.exception("diffuse executor follower stopped")
            self._fail_all(DiffuseError(f"the executor's follower stopped: {e!r}"))
            raise

    def _next_poll_locked(self) -> Optional[Tuple[List[str], float]]:
        """Waits until this follower should poll: tasks are outstanding that no poll in flight
        names (none in flight, or one sent since it started), and ``poll`` seconds have passed
        since the last poll started. The ids to ask for and the wait; None at the end."""
        while True:
            if self._done_locked() or (self._shutdown and not self._thread.is_alive()):
                return None
            covered = max(self._polls.values(), default=-1)
            if self._outstanding and covered < self._sent_batches:
                now = time.monotonic()
                if now >= self._next_poll:
                    break
                self._follow.wait(self._next_poll - now)
            else:
                self._follow.wait(5.0)
        ids = list(itertools.islice(self._outstanding, self._window))
        client_timeout = float(getattr(self.client._http, "timeout", 60.0))
        longest = max(0.0, min(MAX_FOLLOW_WAIT_S, client_timeout - 5.0))
        wait_s = min(longest, max(MIN_FOLLOW_WAIT_S, time.monotonic() - self._last_sent))
        return ids, wait_s

    def _poll_once(self, ids: List[str], wait_s: float) -> int:
        """One poll; the number of tasks it found ended (-1: it failed)."""
        body = json.dumps({"ids": ids, "wait_s": wait_s} if wait_s > 0 else {"ids": ids}).encode()
        try:
            try:
                obj = self.client._http.request("POST", "/v1/states", body=body).json()
            except DiffuseConnectionError:
                # a kept-alive connection the dispatcher closed meanwhile: asking again is safe
                obj = self.client._http.request("POST", "/v1/states", body=body).json()
        except DiffuseConnectionError as e:
            now = time.monotonic()
            with self._lock:
                if self._unreachable_since is None:
                    self._unreachable_since = now
                    log.warning("diffuse executor: %s; trying again", e)
                lost = now - self._unreachable_since > self.lost_timeout
                self._next_poll = max(self._next_poll, now + min(1.0, max(self.poll, 0.2)))
            if lost:
                self._fail_all(e)
            return -1
        except DiffuseError as e:
            log.warning("diffuse executor: following tasks failed: %s", e)
            with self._lock:
                self._next_poll = max(self._next_poll, time.monotonic() + 1.0)
            return -1
        with self._lock:
            self._unreachable_since = None
        ended = [t for t in obj.get("tasks", []) if t.get("state") in ENDED_STATES]
        unknown = [str(u) for u in obj.get("unknown", [])]
        active = sum(1 for t in obj.get("tasks", []) if t.get("state") == "running") + len(ended)
        with self._lock:
            if ended or unknown:
                self._window = min(MAX_STATES, max(FOLLOW_WINDOW, 4 * active))
            elif len(ids) >= self._window:
                self._window = min(MAX_STATES, max(self._window * 2, 4 * active))
            taken = [(self._forget_locked(str(t["id"])), t) for t in ended]
            lost_ids = [(self._forget_locked(u), u) for u in unknown]
        for p, t in taken:
            if p is None:
                continue  # resolved by the other follower, or cancelled
            try:
                self._resolve(p, TaskInfo.from_json(t))
            except Exception as e:  # a bug in a subclass: fail that future, go on
                log.exception("diffuse executor: resolving task %s", p.task_id)
                _fail(p.future, e)
        for q, u in lost_ids:
            if q is not None:
                _fail(q.future, DiffuseError(
                    f"the dispatcher no longer knows task {u!r} (restarted without its journal?)"
                ))
        return len(ended)

    def _fail_all(self, e: BaseException) -> None:
        with self._lock:
            futs = [p.future for p in self._queue] + [p.future for p in self._outstanding.values()]
            self._queue = []
            self._outstanding.clear()
            self._work.notify_all()
            self._follow.notify_all()
        for f in futs:
            _fail(f, e)


class DiffuseExecutor(TaskExecutorBase):
    """Runs commands as diffuse tasks behind ``concurrent.futures`` futures.

    ``submit(cmd, *args, inputs=..., outputs=..., **task_fields)`` queues one task and returns a
    :class:`TaskFuture` at once; ``map`` works as for any executor. A background thread sends
    queued tasks in acknowledged batches (up to ``batch_size``); two others follow their ends
    with the dispatcher's long poll (``POST /v1/states`` with ``wait_s``), so a future is set as
    soon as its task ends; ``poll`` is the shortest time between two polls (tasks that end
    within it come back in one answer). A succeeded task's stdout is then fetched (one request
    per task that printed something, by ``log_threads`` threads) unless ``fetch_stdout`` is
    false.

    A task that fails sets :class:`TaskFailed` (with the error and the end of stderr); one
    cancelled through diffuse (``diffuse cancel``, ``cancel_job``) cancels its future.
    ``defaults`` are task fields given to every task (``cores``, ``retries``, ``timeout_s``,
    ``job``...); ``job`` is a shortcut for ``defaults={"job": ...}``. ``lost_timeout``: seconds
    the dispatcher may stay unreachable before the outstanding futures fail.

    Function tasks: ``cmd`` may be a mapping of task fields (or a :class:`Task`, or a callable
    returning either) with ``call`` instead of ``cmd`` (docs/warm.md), so other code (the Parsl
    executor...) can send calls through this executor with its own serialization. Such a
    future's :class:`TaskResult` carries the entry's bytes in its report:
    :func:`call_value` reads them (inline, or from the blob store over 1 MiB).
    :class:`~diffuse_client.functions.FunctionExecutor` does all of it for Python functions.

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
        poll: float = 0.05,
        batch_size: int = 1000,
        fetch_stdout: bool = True,
        log_threads: int = 16,
        id_prefix: Optional[str] = None,
        lost_timeout: float = 600.0,
        base_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
    ) -> None:
        defaults_d: Dict[str, Any] = dict(defaults or {})
        if job is not None:
            defaults_d["job"] = job
        Task.from_dict({"id": "x", "cmd": "x", **defaults_d})  # unknown fields fail here
        self.base_dir = base_dir
        self._digests = FileDigests()
        self._defaults = defaults_d
        self.fetch_stdout = fetch_stdout
        super().__init__(
            client,
            url=url,
            token=token,
            poll=poll,
            batch_size=batch_size,
            log_threads=log_threads,
            id_prefix=id_prefix,
            lost_timeout=lost_timeout,
        )

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

        ``cmd`` is a shell string, an argv list, a mapping of task fields or a :class:`Task`
        (with ``cmd``, or ``call`` for a function task), or a callable making one of those from
        ``args`` (see :func:`build_cmd`). ``inputs``/``outputs`` are URIs or paths;
        ``task_fields`` any other task field (an unknown one raises ``TypeError`` here). ``id``
        may be given; by default it is the executor's prefix and a counter.
        """
        command, extra = build_cmd(cmd, args)
        fields: Dict[str, Any] = {**self._defaults, **extra, **task_fields}
        task_id = fields.pop("id", None) or self._new_id()
        if inputs:
            fields["inputs"] = list(inputs)
        if outputs:
            fields["outputs"] = list(outputs)
        if command is not None:
            fields["cmd"] = command
        task = Task.from_dict({"id": task_id, **fields}).to_dict()
        fut = TaskFuture(str(task_id))
        self._enqueue(fut, task)
        return fut

    def __enter__(self) -> "DiffuseExecutor":
        return self

    def _prepare_batch(self, batch: List[_Pending]) -> None:
        """Hashes the program files the batch's commands name (one lookup per word)."""
        hasher = ProgramHasher(self.base_dir, self._digests)
        for p in batch:
            hasher.fill(p.task)

    def _resolve(self, pending: _Pending, info: TaskInfo) -> None:
        fut = pending.future
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
            self._background(self._fetch_stdout, fut, result)

    def _fetch_stdout(self, fut: "Future[Any]", result: TaskResult) -> None:
        try:
            result.stdout = self.client.logs(result.task_id, "stdout", result.attempt or None)
        except DiffuseError as e:
            result.stdout_error = str(e)
            log.warning("task %s succeeded but its stdout could not be fetched: %s", result.task_id, e)
        _set(fut, result)


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
