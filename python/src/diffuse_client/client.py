"""The dispatcher's HTTP API as Python calls (docs/runtime.md, "Dispatcher HTTP API")."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import (
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
)

from ._http import Transport
from .errors import DiffuseAPIError, DiffuseError
from .programs import fill_programs

#: The dispatcher a client talks to when neither ``url`` nor ``DIFFUSE_DISPATCHER`` says.
DEFAULT_URL = "http://127.0.0.1:8700"

#: The states a task can be listed in; the last three are final.
STATES = ("queued", "running", "succeeded", "failed", "cancelled")
#: The final states.
ENDED_STATES = ("succeeded", "failed", "cancelled")

#: Most tasks ``submit_many`` puts in one batch, and most bytes (the ``diffuse submit`` limits).
MAX_BATCH_TASKS = 50_000
MAX_BATCH_BYTES = 8 * 1024 * 1024

#: Largest page the listing serves.
MAX_PAGE = 10_000

#: Most ids in one ``POST /v1/states`` (:meth:`Client.states`).
MAX_STATES = 10_000

Size = Union[int, str]
Cmd = Union[str, Sequence[str]]
PathArg = Union[str, "os.PathLike[str]"]


def to_uri(x: Union[str, "os.PathLike[str]"]) -> str:
    """An input or output as a URI.

    A string with a scheme (``file://``, ``s3://``, ``http(s)://``, ``tmp://``) is kept as it is;
    a path (a ``str`` without ``://`` or an ``os.PathLike``) becomes a ``file://`` URI of its
    absolute path, percent-encoded as ``Path.as_uri()`` writes it (what the dispatcher reads).
    """
    if isinstance(x, str) and "://" in x:
        return x
    return Path(os.path.abspath(os.fspath(x))).as_uri()


@dataclass
class Task:
    """A task as the dispatcher takes it (docs/runtime.md, "Task fields").

    Only ``id`` and ``cmd`` are required; a field left ``None`` (or an empty list) is not sent,
    so the dispatcher's default applies. ``cmd`` is an argv list, run directly, or a string,
    run by ``sh -c``; ``{inputs[i]}`` and ``{outputs[i]}`` in it become local paths. Inputs and
    outputs are URIs; a plain path is turned into a ``file://`` URI (:func:`to_uri`). Sizes
    (``memory``, ``memory_limit``, ``disk``) are bytes or strings such as ``"4GB"`` or
    ``"512MiB"``. ``memory`` is what the task asks for (the scheduler packs by it);
    ``memory_limit`` is what the kernel enforces, ``memory`` unless given, ``"none"`` for none.

    ``reuse``: whether the task's result may stand for a later identical task and a kept result
    for it (docs/runtime.md, "Results reused by content"): ``None`` (default) when it declares an
    input or an output, ``False`` never (it reads the clock, the network, a random seed...),
    ``True`` even without inputs or outputs. ``programs`` maps each word of ``cmd`` that names a
    program file to its SHA-256; :meth:`Client.submit` fills it in (see
    :mod:`diffuse_client.programs`), so it is not normally given. ``cwd``: the absolute path
    the program starts in on the worker (a shared file system); default its scratch directory.

    ``call`` instead of ``cmd``: a function task, run in a warm Python process on the worker
    (docs/warm.md): ``{"fn": i, "entry": "module:function", "args": base64, ...}`` where input
    ``i`` is the serialized function. :class:`~diffuse_client.functions.FunctionExecutor` makes
    these; most code does not write them by hand.
    """

    id: str
    cmd: Optional[Cmd] = None
    inputs: List[str] = field(default_factory=list)
    outputs: List[str] = field(default_factory=list)
    after: List[str] = field(default_factory=list)
    cores: Optional[int] = None
    memory: Optional[Size] = None
    memory_limit: Optional[Size] = None
    gpus: Optional[int] = None
    disk: Optional[Size] = None
    timeout_s: Optional[float] = None
    walltime_s: Optional[float] = None
    retries: Optional[int] = None
    priority: Optional[int] = None
    eviction_priority: Optional[int] = None
    env: Optional[Dict[str, str]] = None
    cwd: Optional[str] = None
    stdout: Optional[str] = None
    stderr: Optional[str] = None
    job: Optional[str] = None
    job_policy: Optional[str] = None
    dad_beta: Optional[float] = None
    compute_s: Optional[float] = None
    hint: Optional[Dict[str, Any]] = None
    reuse: Optional[bool] = None
    programs: Optional[Dict[str, str]] = None
    call: Optional[Dict[str, Any]] = None

    def __post_init__(self) -> None:
        if (self.cmd is None) == (self.call is None):
            raise TypeError(f"task {self.id!r}: give cmd (a command) or call (a function call), one of them")

    @classmethod
    def field_names(cls) -> Tuple[str, ...]:
        """Every task field, in the order of the dataclass."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Task":
        """A task from a mapping of task fields; an unknown field raises ``TypeError`` naming it."""
        names = set(cls.field_names())
        unknown = sorted(k for k in d if k not in names)
        if unknown:
            raise TypeError(
                f"unknown task field(s) {', '.join(map(repr, unknown))}; "
                f"the fields are {', '.join(cls.field_names())}"
            )
        return cls(**dict(d))

    def to_dict(self) -> Dict[str, Any]:
        """The JSON object sent to the dispatcher (fields left unset are omitted)."""
        out: Dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None or (isinstance(v, list) and not v and f.name != "cmd"):
                continue
            if f.name == "call":
                out[f.name] = dict(v)
                continue
            if f.name in ("inputs", "outputs"):
                v = [to_uri(x) for x in v]
            elif f.name == "cmd" and not isinstance(v, str):
                v = [str(a) for a in v]
            elif f.name == "after":
                v = list(v)
            out[f.name] = v
        return out


TaskLike = Union[Task, Mapping[str, Any]]


def reused_from(report: Mapping[str, Any]) -> Optional[str]:
    """The ``reused_from`` of a worker's report: the task whose kept result stood in, if any."""
    r = report.get("reused_from")
    return r if isinstance(r, str) and r else None


def _task_dict(t: TaskLike) -> Dict[str, Any]:
    if isinstance(t, Task):
        return t.to_dict()
    return Task.from_dict(t).to_dict()


@dataclass
class Outcome:
    """How a task ended: its final state, exit code, error and the worker's report.

    ``report`` is the worker's report (``result_json`` parsed): ``started_at``, ``staged_at``,
    ``finished_at``, ``stdout``/``stderr`` (paths on the worker, or ``None`` when the stream was
    empty), ``stderr_tail`` (failed attempts), ``outputs``, ``uncached`` and ``traffic`` (this
    task's input reads by source: ``local``, ``peer``, ``storage`` and ``bytes_*``). It is
    ``{}`` for a task that never ran (cancelled while queued, failed lookup...). A task whose
    result was reused (:attr:`reused_from`) did not run: its report says which task's result
    stood in (``reused_from``), and ``reuse_failed`` says why a kept result could not be used
    when the task ran instead.
    """

    state: str
    attempt: int
    node: Optional[str]
    exit_code: Optional[int]
    error: Optional[str]
    report: Dict[str, Any]
    finished_at: Optional[float]

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> "Outcome":
        """Reads the ``outcome`` object of a task view."""
        raw = o.get("result_json")
        report: Dict[str, Any] = {}
        if isinstance(raw, str) and raw:
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = {"unparsed": raw}
            if isinstance(parsed, dict):
                report = parsed
        elif isinstance(raw, dict):
            report = dict(raw)
        return cls(
            state=str(o.get("state")),
            attempt=int(o.get("attempt") or 0),
            node=o.get("node"),
            exit_code=o.get("exit_code"),
            error=o.get("error"),
            report=report,
            finished_at=o.get("finished_at"),
        )

    @property
    def value(self) -> Optional[bytes]:
        """A function task's result: the bytes its entry returned (``None`` for a command, or
        a call that did not end well)."""
        v = self.report.get("value")
        return base64.b64decode(v) if isinstance(v, str) else None

    @property
    def stderr_tail(self) -> str:
        """The last 4 KiB of stderr the worker put in a failed attempt's report ('' if none)."""
        tail = self.report.get("stderr_tail")
        return tail if isinstance(tail, str) else ""

    @property
    def reused_from(self) -> Optional[str]:
        """The id of the task whose kept result stood in for this one (``None``: it ran)."""
        return reused_from(self.report)


@dataclass
class Attempt:
    """One attempt of a task: the worker it ran on, and its report if it failed and was retried."""

    attempt: int
    node: Optional[str]
    report: Optional[Dict[str, Any]]


@dataclass
class TaskInfo:
    """A task as the dispatcher shows it: state, batch, node, attempt and outcome.

    ``attempts`` is filled only by :meth:`Client.get` (the listing does not carry it).
    ``raw`` is the JSON object as received.
    """

    id: str
    state: str
    batch: Optional[int]
    node: Optional[str]
    attempt: int
    outcome: Optional[Outcome]
    attempts: List[Attempt]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> "TaskInfo":
        """Reads a task view (``GET /v1/tasks/{id}`` or an item of the listing)."""
        oc = o.get("outcome")
        attempts = []
        for a in o.get("attempts") or []:
            rep = a.get("report")
            if isinstance(rep, str):
                try:
                    rep = json.loads(rep)
                except ValueError:
                    rep = {"unparsed": rep}
            attempts.append(Attempt(int(a.get("attempt") or 0), a.get("node"), rep))
        return cls(
            id=str(o["id"]),
            state=str(o["state"]),
            batch=o.get("batch"),
            node=o.get("node"),
            attempt=int(o.get("attempt") or 0),
            outcome=Outcome.from_json(oc) if isinstance(oc, dict) else None,
            attempts=attempts,
            raw=dict(o),
        )

    @property
    def ended(self) -> bool:
        """Whether the task is in a final state (succeeded, failed or cancelled)."""
        return self.state in ENDED_STATES


@dataclass
class Submitted:
    """An acknowledged batch: it is journaled and will run.

    ``floor`` is a lower bound of the listing cursor of the batch's first task (the number of
    tasks the dispatcher held before it), which lets a waiter read the listing from there.
    """

    submitted: int
    batch: int
    floor: Optional[int] = field(default=None, repr=False)


@dataclass
class Traffic:
    """Input reads by source since the dispatcher started: counts and bytes."""

    local: int = 0
    peer: int = 0
    storage: int = 0
    bytes_local: int = 0
    bytes_peer: int = 0
    bytes_storage: int = 0


@dataclass
class Status:
    """The dispatcher's counters (``GET /v1/status``); ``raw`` has every field as received.

    Each task counts in exactly one of ``queued``, ``held_ready``, ``running``, ``ending``,
    ``succeeded``, ``failed`` and ``cancelled``. ``held_ready``: sent to a worker ahead of a
    free core (``--ready-tasks``), not started. ``reused``: tasks that succeeded by reuse (a
    kept result stood in) since the dispatcher started.
    """

    submitted: int
    queued: int
    looking_up: int
    running: int
    ending: int
    succeeded: int
    failed: int
    cancelled: int
    workers: int
    slots: int
    busy_slots: int
    unschedulable: int
    traffic: Traffic
    raw: Dict[str, Any] = field(repr=False)
    reused: int = 0
    held_ready: int = 0

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> "Status":
        """Reads the ``/v1/status`` answer."""
        t = o.get("traffic") or {}
        names = [f.name for f in dataclasses.fields(Traffic)]
        return cls(
            submitted=int(o.get("submitted", 0)),
            queued=int(o.get("queued", 0)),
            looking_up=int(o.get("looking_up", 0)),
            running=int(o.get("running", 0)),
            ending=int(o.get("ending", 0)),
            succeeded=int(o.get("succeeded", 0)),
            failed=int(o.get("failed", 0)),
            cancelled=int(o.get("cancelled", 0)),
            workers=int(o.get("workers", 0)),
            slots=int(o.get("slots", 0)),
            busy_slots=int(o.get("busy_slots", 0)),
            unschedulable=int(o.get("unschedulable", 0)),
            traffic=Traffic(**{n: int(t.get(n, 0)) for n in names}),
            raw=dict(o),
            reused=int(o.get("reused", 0)),
            held_ready=int(o.get("held_ready", 0)),
        )

    @property
    def ended(self) -> int:
        """Tasks in a final state."""
        return self.succeeded + self.failed + self.cancelled

    @property
    def unfinished(self) -> int:
        """Tasks not yet in a final state."""
        return self.queued + self.held_ready + self.running + self.ending


@dataclass
class ResultsInfo:
    """The dispatcher's kept results (``GET /v1/results``; ``DELETE`` answers the same counts,
    taken before it forgot them).

    ``reuse``: whether reuse is on (``diffuse dispatcher --reuse on|off``); ``results`` and
    ``bytes``: results kept and the bytes of their files; ``digests``: input digests known;
    ``reused``: tasks ended by reuse since the dispatcher started; ``waiting``: tasks waiting
    for an identical one in flight; ``store``: where the index is kept (``None``: nowhere).
    """

    reuse: bool
    results: int
    bytes: int
    digests: int
    reused: int
    waiting: int
    store: Optional[str]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> "ResultsInfo":
        """Reads the ``/v1/results`` answer."""
        store = o.get("store")
        return cls(
            reuse=bool(o.get("reuse", False)),
            results=int(o.get("results", 0)),
            bytes=int(o.get("bytes", 0)),
            digests=int(o.get("digests", 0)),
            reused=int(o.get("reused", 0)),
            waiting=int(o.get("waiting", 0)),
            store=str(store) if store is not None else None,
            raw=dict(o),
        )


@dataclass
class BatchInfo:
    """A submission's counters (``GET /v1/batches/{b}``)."""

    batch: int
    tasks: int
    pending: int
    succeeded: int
    failed: int
    cancelled: int
    failed_ids: List[str]


@dataclass
class JobInfo:
    """A job's counters (``GET /v1/jobs/{job}``)."""

    job: str
    tasks: int
    queued: int
    running: int
    succeeded: int
    failed: int
    cancelled: int


@dataclass
class JobCancelled:
    """What ``cancel_job`` did: tasks ended at once, tasks being stopped, tasks already ended."""

    job: str
    cancelled: int
    stopping: int
    ended: int


@dataclass
class Location:
    """Where an object is (``GET /v1/objects/{uri}``): its state and the workers holding it.

    For a ``tmp://`` object ``state`` is ``pending``, ``written``, ``lost``, ``released`` or
    ``failed``, with ``size`` and ``producer``; for another URI it is ``cached`` or
    ``uncached``. ``raw`` has every field as received.
    """

    uri: str
    state: str
    nodes: List[str]
    size: Optional[int]
    producer: Optional[str]
    raw: Dict[str, Any] = field(repr=False)


class PartialSubmitError(DiffuseError):
    """``submit_many`` stopped at a refused batch; the batches before it were taken.

    ``batches`` are the acknowledged batches, ``first_unsent`` the index (in the tasks given)
    of the first task not submitted, and ``__cause__`` the dispatcher's refusal.
    """

    def __init__(self, batches: List[Submitted], first_unsent: int, cause: DiffuseError) -> None:
        self.batches = batches
        self.first_unsent = first_unsent
        self.cause = cause
        taken = sum(b.submitted for b in batches)
        super().__init__(
            f"{cause} (tasks 0..{first_unsent - 1} were submitted in {len(batches)} batch(es), "
            f"{taken} tasks; nothing from task {first_unsent} on)"
            if batches
            else str(cause)
        )


class WaitTimeout(DiffuseError, TimeoutError):
    """``wait`` ran out of time; ``done`` holds the tasks that ended, ``pending`` the others."""

    def __init__(self, done: Dict[str, TaskInfo], pending: List[str], timeout: float) -> None:
        self.done = done
        self.pending = pending
        super().__init__(
            f"{len(pending)} of {len(done) + len(pending)} task(s) still unfinished after "
            f"{timeout:g} s (first: {', '.join(pending[:5])})"
        )


def _read_token(token: Optional[str], token_file: Optional[str]) -> str:
    if token is None and token_file is not None:
        with open(token_file, encoding="utf-8") as f:
            token = f.read()
    if token is None:
        token = os.environ.get("DIFFUSE_CLIENT_TOKEN")
    if token is None:
        raise DiffuseError("no client token: pass token= or token_file=, or set DIFFUSE_CLIENT_TOKEN")
    token = token.strip()
    if not token:
        raise DiffuseError("the client token is empty")
    return token


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


class Client:
    """A connection to a diffuse dispatcher.

    ``url`` defaults to ``$DIFFUSE_DISPATCHER``, else ``http://127.0.0.1:8700``; the token to
    ``token``, else the contents of ``token_file``, else ``$DIFFUSE_CLIENT_TOKEN``. ``timeout``
    is the socket timeout of each request, in seconds. A client may be shared between threads
    (each thread keeps its own connection).

    Errors the dispatcher answers with raise :class:`~diffuse_client.DiffuseAPIError` (HTTP
    status and the dispatcher's message); an unreachable dispatcher raises
    :class:`~diffuse_client.DiffuseConnectionError`.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        *,
        token_file: Optional[str] = None,
        timeout: float = 60.0,
    ) -> None:
        self.url = (url or os.environ.get("DIFFUSE_DISPATCHER") or DEFAULT_URL).rstrip("/")
        self._http = Transport(self.url, _read_token(token, token_file), timeout)
        self._submit_lock = threading.Lock()
        self._next_floor: Optional[int] = None
        #: Blobs this client has seen kept at the dispatcher.
        self._blobs: Set[str] = set()

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    # ----------------------------------------------------------------- submitting

    def submit(self, task: TaskLike, base_dir: Optional[PathArg] = None) -> Submitted:
        """Submits one task (a :class:`Task` or a mapping of task fields); its own batch.

        The program files its command names are hashed into its ``programs`` (relative names
        under ``base_dir``, default the current directory; see :mod:`diffuse_client.programs`).
        """
        d = _task_dict(task)
        fill_programs([d], base_dir)
        return self._post_batch([d])

    def submit_many(
        self,
        tasks: Iterable[TaskLike],
        batch_size: int = 10_000,
        max_bytes: int = MAX_BATCH_BYTES,
        base_dir: Optional[PathArg] = None,
    ) -> List[Submitted]:
        """Submits tasks in acknowledged batches of at most ``batch_size`` tasks and ``max_bytes``.

        Every task is checked before anything is sent (an unknown field raises ``TypeError``).
        Each batch is all or nothing and is acknowledged once the dispatcher has journaled it.
        If one is refused, :class:`PartialSubmitError` says which batches went in and from which
        task on nothing was sent; the dispatcher's refusal (line and field) is its cause.
        Program files are hashed as for :meth:`submit`, each one once.
        """
        if not 1 <= batch_size <= MAX_BATCH_TASKS:
            raise ValueError(f"batch_size must be between 1 and {MAX_BATCH_TASKS}")
        # every task is checked (its field names) before anything is sent, as `diffuse submit` does
        dicts = [_task_dict(t) for t in tasks]
        fill_programs(dicts, base_dir)
        lines = [json.dumps(d, separators=(",", ":")).encode("utf-8") for d in dicts]
        done: List[Submitted] = []
        start = 0
        size = 0
        for index, line in enumerate(lines):
            if index > start and (index - start >= batch_size or size + len(line) + 1 > max_bytes):
                self._send_lines(lines[start:index], done, start)
                start, size = index, 0
            size += len(line) + 1
        if start < len(lines):
            self._send_lines(lines[start:], done, start)
        return done

    def _send_lines(self, lines: List[bytes], done: List[Submitted], start: int) -> None:
        try:
            done.append(self._post_body(b"\n".join(lines) + b"\n", len(lines)))
        except DiffuseError as e:
            raise PartialSubmitError(list(done), start, e) from e

    def _post_batch(self, tasks: List[Dict[str, Any]]) -> Submitted:
        body = "\n".join(json.dumps(t, separators=(",", ":")) for t in tasks) + "\n"
        return self._post_body(body.encode("utf-8"), len(tasks))

    def _post_body(self, body: bytes, n: int) -> Submitted:
        # Batches of one client go one at a time, so that each batch's floor (a lower bound of
        # its first task's place in the listing) is the previous floor plus its tasks.
        with self._submit_lock:
            if self._next_floor is None:
                self._next_floor = self.status().submitted
            floor = self._next_floor
            r = self._http.request("POST", "/v1/tasks", body=body, content_type="application/x-ndjson")
            obj = r.json()
            sub = Submitted(int(obj["submitted"]), int(obj["batch"]), floor)
            self._next_floor = floor + sub.submitted
            return sub

    # ----------------------------------------------------------------- reading

    def get(self, task_id: str) -> TaskInfo:
        """One task: state, batch, node, attempt, outcome and attempts (404 if unknown)."""
        return TaskInfo.from_json(self._http.request("GET", f"/v1/tasks/{_q(task_id)}").json())

    def list_tasks(
        self, state: Optional[str] = None, limit: int = 1000, after: Optional[Union[int, str]] = None
    ) -> Tuple[List[TaskInfo], Optional[int]]:
        """One page of the listing, in submission order, and the cursor of the next page.

        ``state`` is one of :data:`STATES` or ``None`` (all); ``limit`` 1 to 10,000; ``after``
        a cursor from a previous page. The cursor returned is ``None`` on the last page.
        """
        q: Dict[str, Union[str, int]] = {"limit": limit}
        if state is not None:
            q["state"] = state
        if after is not None:
            q["after"] = after
        obj = self._http.request("GET", "/v1/tasks", query=q).json()
        nxt = obj.get("next")
        return [TaskInfo.from_json(t) for t in obj.get("tasks", [])], (
            int(nxt) if nxt is not None else None
        )

    def iter_tasks(
        self, state: Optional[str] = None, after: Optional[int] = None, page_size: int = MAX_PAGE
    ) -> Iterator[TaskInfo]:
        """Every task (in ``state``, if given) after the cursor ``after``, page by page."""
        cursor: Optional[int] = after
        while True:
            page, cursor = self.list_tasks(state, page_size, cursor)
            yield from page
            if cursor is None:
                return

    def batch(self, batch: int) -> BatchInfo:
        """A submission's counters (404 if unknown)."""
        o = self._http.request("GET", f"/v1/batches/{int(batch)}").json()
        return BatchInfo(
            int(o["batch"]), int(o["tasks"]), int(o["pending"]), int(o["succeeded"]),
            int(o["failed"]), int(o["cancelled"]), list(o.get("failed_ids") or []),
        )

    def job(self, job: str) -> JobInfo:
        """A job's counters (404 if no task is in it)."""
        o = self._http.request("GET", f"/v1/jobs/{_q(job)}").json()
        return JobInfo(
            str(o["job"]), int(o["tasks"]), int(o["queued"]), int(o["running"]),
            int(o["succeeded"]), int(o["failed"]), int(o["cancelled"]),
        )

    def status(self) -> Status:
        """The dispatcher's counters: tasks by state, workers, slots, traffic by source."""
        return Status.from_json(self._http.request("GET", "/v1/status").json())

    def workers(self) -> List[Dict[str, Any]]:
        """Every connected worker as the dispatcher lists it (``GET /v1/workers``, a page of
        1,000 at a time, in name order): ``name``, ``state``, ``slots`` (``[cores, in use]``),
        ``cache`` and the other fields of docs/runtime.md, as received."""
        out: List[Dict[str, Any]] = []
        after: Optional[str] = None
        while True:
            q: Dict[str, Union[str, int]] = {"limit": 1000}
            if after is not None:
                q["after"] = after
            o = self._http.request("GET", "/v1/workers", query=q).json()
            out.extend(w for w in o.get("workers") or [] if isinstance(w, dict))
            nxt = o.get("next")
            if not nxt:
                return out
            after = str(nxt)

    def results(self) -> ResultsInfo:
        """The kept results' counts (``GET /v1/results``)."""
        return ResultsInfo.from_json(self._http.request("GET", "/v1/results").json())

    def clear_results(self) -> ResultsInfo:
        """Forgets every kept result (``DELETE /v1/results``): later tasks run again. Returns
        the counts from before. The copies stay in the workers' caches until evicted."""
        return ResultsInfo.from_json(self._http.request("DELETE", "/v1/results").json())

    def metrics(self) -> str:
        """The Prometheus text of ``/metrics``."""
        return self._http.request("GET", "/metrics").text()

    def locate(self, uri: Union[str, "os.PathLike[str]"]) -> Location:
        """Where an object is cached (Hercules' *locate*): its state and holders.

        A path is turned into a ``file://`` URI first (:func:`to_uri`). An object no task has
        read or written is a 404 error (``no task reads or writes URI``).
        """
        u = to_uri(uri)
        o = self._http.request("GET", f"/v1/objects/{_q(u)}").json()
        return Location(
            uri=str(o.get("uri", u)),
            state=str(o.get("state")),
            nodes=list(o.get("nodes") or []),
            size=o.get("size"),
            producer=o.get("producer"),
            raw=dict(o),
        )

    def logs(self, task_id: str, stream: str = "stdout", attempt: Optional[int] = None) -> str:
        """An attempt's captured ``stdout`` or ``stderr`` (default: the last attempt's).

        It is fetched from the worker that ran it through the dispatcher; a stream the task
        left empty, or a worker that is no longer connected, gives a 404 error saying so.
        """
        if stream not in ("stdout", "stderr"):
            raise ValueError("stream must be 'stdout' or 'stderr'")
        q: Dict[str, Union[str, int]] = {"stream": stream}
        if attempt is not None:
            q["attempt"] = attempt
        return self._http.request(
            "GET", f"/v1/tasks/{_q(task_id)}/logs", query=q, fresh=True
        ).text()

    # ----------------------------------------------------------------- cancelling

    def cancel(self, task_id: str) -> str:
        """Cancels a task: a queued one ends at once, a running one's processes are stopped.

        Returns the dispatcher's message; 404 if unknown, 409 if it already ended.
        """
        o = self._http.request("POST", f"/v1/tasks/{_q(task_id)}/cancel").json()
        return str(o.get("result", o))

    def cancel_job(self, job: str) -> JobCancelled:
        """Cancels every unfinished task of a job (404 if no task is in it)."""
        o = self._http.request("POST", f"/v1/jobs/{_q(job)}/cancel").json()
        return JobCancelled(str(o["job"]), int(o["cancelled"]), int(o["stopping"]), int(o["ended"]))

    # ----------------------------------------------------------------- waiting

    def states(
        self, task_ids: Iterable[str], wait_s: Optional[float] = None
    ) -> Tuple[Dict[str, TaskInfo], List[str]]:
        """Each named task's :class:`TaskInfo` (state and outcome, as the listing shows it), and
        the ids no task has, in one request (``POST /v1/states``) per 10,000 ids: the cost is
        the number of ids asked, not the number of tasks the dispatcher holds.

        ``wait_s``: the dispatcher answers once one of the named tasks has ended, or after that
        many seconds (at most 60): a follower hears of each end at once without polling (with
        more than 10,000 ids, only the first request waits)."""
        ids = list(dict.fromkeys(task_ids))
        found: Dict[str, TaskInfo] = {}
        unknown: List[str] = []
        for i in range(0, len(ids), MAX_STATES):
            ask: Dict[str, Any] = {"ids": ids[i : i + MAX_STATES]}
            if wait_s is not None and i == 0:
                ask["wait_s"] = wait_s
            body = json.dumps(ask).encode()
            obj = self._http.request("POST", "/v1/states", body=body).json()
            for t in obj.get("tasks", []):
                info = TaskInfo.from_json(t)
                found[info.id] = info
            unknown.extend(obj.get("unknown", []))
        return found, unknown

    def wait(
        self,
        task_ids: Iterable[str],
        timeout: Optional[float] = None,
        poll: float = 0.5,
    ) -> Dict[str, TaskInfo]:
        """Waits until every task has ended; returns each one's final :class:`TaskInfo`.

        At most one ``/v1/status`` request per ``poll`` seconds while nothing ends. When tasks
        end, the pending ones are asked for by id (:meth:`states`: one request per 10,000).
        Raises :class:`WaitTimeout` (a ``TimeoutError``) after ``timeout`` seconds, and
        :class:`DiffuseAPIError` (404) for an unknown id.
        """
        pending: Set[str] = set(task_ids)
        done: Dict[str, TaskInfo] = {}
        deadline = None if timeout is None else time.monotonic() + timeout
        last_ended = -1
        while pending:
            st = self.status()
            if st.ended != last_ended:
                last_ended = st.ended
                found, unknown = self.states(sorted(pending))
                if unknown:
                    raise DiffuseAPIError(404, f"unknown task '{unknown[0]}'", "POST", "/v1/states")
                done.update((tid, info) for tid, info in found.items() if info.ended)
                pending -= done.keys()
            if not pending:
                break
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WaitTimeout(done, sorted(pending), timeout or 0.0)
                time.sleep(min(poll, left))
            else:
                time.sleep(poll)
        return done

    # ----------------------------------------------------------------- blobs

    def put_blob(self, data: bytes) -> str:
        """Keeps ``data`` at the dispatcher as a blob (``PUT /v1/blobs/{sha256}``), unless it is
        kept already; returns its URI, ``blob://<sha256>``, an input workers read and cache.
        Each blob is sent once per client."""
        sha = hashlib.sha256(data).hexdigest()
        with self._submit_lock:
            if sha in self._blobs:
                return f"blob://{sha}"
        try:
            self._http.request("HEAD", f"/v1/blobs/{sha}")
        except DiffuseAPIError as e:
            if e.status != 404:
                raise
            self._http.request("PUT", f"/v1/blobs/{sha}", body=data,
                               content_type="application/octet-stream", ok=(200, 201))
        with self._submit_lock:
            self._blobs.add(sha)
        return f"blob://{sha}"

    def get_blob(self, uri: str) -> bytes:
        """A blob's bytes (``blob://<sha256>``), checked against its name."""
        sha = uri[len("blob://"):] if uri.startswith("blob://") else uri
        data = self._http.request("GET", f"/v1/blobs/{sha}").body
        if hashlib.sha256(data).hexdigest() != sha:
            raise DiffuseError(f"blob {sha}: the bytes read do not match its name")
        return data

    def close(self) -> None:
        """Closes the calling thread's connection."""
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def is_not_found(e: BaseException) -> bool:
    """Whether ``e`` is the dispatcher's 404."""
    return isinstance(e, DiffuseAPIError) and e.status == 404
