"""``DiffuseParslExecutor``: runs Parsl apps as diffuse tasks, with their files cached on workers.

Each app call becomes one diffuse task. By default (``warm=True``) it is a *function task*
(docs/warm.md): a call of :func:`diffuse_client.parsl_calls.run` in a warm Python process on
a worker, a process that imported Parsl once and runs app after app (``isolation="reuse"``,
as HTEX's workers do) or forks a child per app (``"fork"``). Its inputs are
:data:`~diffuse_client.parsl_calls.POOL` (the call's ``fn``: the same for every app, so that
all apps share a worker's warm processes), the app's function serialized with
``parsl.serialize`` (a blob named by its SHA-256, put at the dispatcher once and cached by
each worker), and every file-scheme ``File`` the app reads: the ``File`` objects in
``inputs=`` and ``File`` arguments that exist when the app is submitted. Those are diffuse
inputs, so the dispatcher sends the app where its data is cached, and a worker reads each file
from its own cache or a peer's rather than from shared storage. The arguments travel in the
task (a blob input when large). The entry points each ``File`` at its staged copy, runs the
function, copies ``outputs=`` back to their paths, and returns the value (or the app's
exception as a ``RemoteExceptionWrapper``), serialized: the task's result. ``submit`` only
queues the task: the executor's own thread puts the blobs and sends tasks in batches, two
others hear of their ends by long poll (:class:`~diffuse_client.executor.TaskExecutorBase`).

With ``warm=False`` each app is a process instead, ``python -m diffuse_client.parsl_runner``,
whose inputs are the function (one file per distinct function in ``reuse_dir``) and the
arguments (a file per task in ``staging_dir``), and which writes the result to a file, the
task's one diffuse output.

The staging directory and the output paths must be on storage the workers can read and
write (a shared file system), as for Parsl's other executors without a file transfer of
their own.

What path an app sees (``input_paths``): by default (``"auto"``) a ``File`` that existed before
the workflow wrote it (an input dataset) is staged and the app sees the staged copy, which keeps
the file's base name (``<task>/inputs/3/reads.fq``), while a ``File`` that an earlier app of this
executor wrote (one app's output passed to the next) is used at its own path, as Parsl's other
executors show it. ``"cached"`` stages every ``File``; ``"original"`` uses every ``File`` at its
own absolute path: nothing is staged or cached, and every read goes to shared storage. Outputs
are written in the task's directory (``parsl-outputs/0/out.txt``) and copied to their paths,
except under ``"original"``.

Results reused by content (``reuse=True``, the default): a *reusable* bash app, one whose
every ``File`` is staged or declared in ``outputs=`` (none used in place), that names at least
one, and that sends no ``stdout``/``stderr`` to files (they append: a side effect), is a diffuse
task the dispatcher may stand a kept result in for, within a run and across runs (a new
``DataFlowKernel``) of the same dispatcher. Everything its identity is made of is the same for
the same call in every run: the function is a blob named by its content and the arguments are
the same bytes (warm; ``warm=False``: files named by their SHA-256 in ``reuse_dir``, written
once, so their version stays the same), the app's own code and the versions of Parsl and of
this package are in the arguments (a function pickled by reference would otherwise hide an
edit of the command), its ``outputs=`` are the task's outputs (written back by diffuse, from a
kept copy when reused), and its value is ``0`` (kept with the result of a call; a process has
no per-run result file). An app that did not succeed leaves its exception in
``reuse_dir/raised/<task id>`` and fails its task (the runner exits
:data:`~diffuse_client.parsl_runner.EXIT_NOT_KEPT`; the call raises), so that a failure is
never kept and Parsl's retries run again. Python apps, and bash apps that are not reusable,
are sent with ``reuse: false``: what a Python function does is not a command with declared
files.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import itertools
import logging
import math
import os
import shutil
import sys
import threading
import time
import types
import uuid
from concurrent.futures import Future, InvalidStateError
from pathlib import Path
from typing import AbstractSet, Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import parsl
from parsl.app.bash import remote_side_bash_executor
from parsl.app.errors import wrap_error
from parsl.data_provider.files import File
from parsl.data_provider.staging import Staging
from parsl.executors.base import ParslExecutor
from parsl.executors.errors import ExecutorError
from parsl.monitoring.radios.base import RadioConfig
from parsl.monitoring.radios.filesystem import FilesystemRadio
from parsl.serialize import serialize
from parsl.utils import RepresentationMixin, get_std_fname_mode

from . import __version__
from .client import Client, Task, TaskInfo
from .errors import DiffuseError
from .executor import DiffuseExecutor, TaskFuture, _Pending, call_value
from .parsl_calls import POOL, dumps, loads
from .parsl_runner import EXIT_NOT_KEPT, raised_name
from .result import TaskFailed, TaskResult

logger = logging.getLogger(__name__)

#: What path an app sees for its files: the cached copy (default) or the file's own path.
INPUT_PATHS = ("auto", "cached", "original")

#: resource_specification keys this executor maps onto task fields.
RESOURCE_KEYS = ("cores", "cpus", "memory", "disk", "gpus", "running_time_min", "priority")

#: The warm entry of Parsl apps, and the modules the warm processes import before any app.
ENTRY = "diffuse_client.parsl_calls:run"
PRELOAD = ("parsl", "diffuse_client.parsl_calls")

#: An app's serialized arguments larger than this go as a blob input rather than in its task.
INLINE_ARGS_MAX = 200 * 1024

#: While apps come in a stream (a batch was sent less than BATCH_STREAM seconds before), the
#: executor's thread waits BATCH_LINGER seconds before sending the next, so that a batch
#: carries more than the one or two apps queued when it woke.
BATCH_LINGER = float(os.environ.get("DIFFUSE_PARSL_LINGER", "0.002"))
BATCH_STREAM = 0.01

#: Function objects whose serialized form the executor keeps (most recently used).
FUNCTION_CACHE = 256

#: The ``isolation`` of a warm call (docs/warm.md).
ISOLATIONS = ("reuse", "fork")

#: The code of the wrapper ``wrap_error`` puts around every app's function.
_WRAPPER_CODE = getattr(wrap_error(lambda: None), "__code__", None)


def bash_app_function(func: Callable[..., Any]) -> Optional[Callable[..., Any]]:
    """The user's function of a bash app, if ``func`` is exactly what ``@bash_app`` submits
    (``wrap_error(partial(remote_side_bash_executor, f))``): not a python app, and not wrapped
    again (monitoring, in-task staging), whose wrappers do more than run the command."""
    if _WRAPPER_CODE is None or getattr(func, "__code__", None) is not _WRAPPER_CODE:
        return None
    inner = getattr(func, "__wrapped__", None)
    if (isinstance(inner, functools.partial) and inner.func is remote_side_bash_executor
            and len(inner.args) == 1 and not inner.keywords):
        f: Callable[..., Any] = inner.args[0]
        return f
    return None


def code_digest(func: Callable[..., Any]) -> Optional[str]:
    """SHA-256 of a function's code (bytecode, constants, names; nested code too), the same in
    every process; ``None`` for a callable without code. Where it is defined (file, line) is
    not part of it; the globals it reads are not either (as a script's imports are not)."""
    code = getattr(func, "__code__", None)
    if not isinstance(code, types.CodeType):
        return None
    h = hashlib.sha256()
    _hash_code(h, code)
    return h.hexdigest()


def _hash_code(h: "hashlib._Hash", code: types.CodeType) -> None:
    h.update(len(code.co_code).to_bytes(8, "little"))
    h.update(code.co_code)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            h.update(b"\0code")
            _hash_code(h, c)
        else:
            _hash_text(h, _const_text(c))
    for names in (code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars):
        _hash_text(h, repr(names))


def _hash_text(h: "hashlib._Hash", text: str) -> None:
    data = text.encode("utf-8", "surrogatepass")
    h.update(len(data).to_bytes(8, "little"))
    h.update(data)


def _const_text(c: Any) -> str:
    """A constant as text, the same in every process (a frozenset's order is not)."""
    if isinstance(c, frozenset):
        return "frozenset(" + repr(sorted(_const_text(x) for x in c)) + ")"
    if isinstance(c, tuple):
        return "(" + ",".join(_const_text(x) for x in c) + ")"
    return f"{type(c).__name__}:{c!r}"


class DiffuseTaskFailure(ExecutorError):
    """The executor could not get an app's result: its diffuse task failed, was cancelled, or
    left no result file. (An exception raised by the app itself is not this: it comes back
    through Parsl as the app's own exception.) ``result`` is the task's outcome, if it ended."""

    def __init__(self, executor: ParslExecutor, reason: str, task_id: Optional[str] = None,
                 result: Optional[Any] = None) -> None:
        super().__init__(executor, reason)
        self.task_id = task_id
        self.result = result


def resources_to_fields(spec: Optional[Dict[str, Any]]) -> Tuple[Dict[str, Any], List[str]]:
    """Maps a Parsl ``resource_specification`` onto diffuse task fields.

    ``cores``/``cpus`` -> ``cores`` (rounded up); ``memory`` and ``disk`` in MB (as Work Queue
    and TaskVine read them; 1 MB = 1 MiB there) -> ``"<n>MiB"`` (a string such as ``"4GB"`` is
    passed as it is); ``memory`` is a request, what the dispatcher packs tasks by: the executor
    sends ``memory_limit: "none"`` unless ``task_defaults`` gives a limit; ``gpus`` -> ``gpus``;
    ``running_time_min`` (seconds the task needs on a worker) -> ``walltime_s``, so it goes only
    to a worker that stays that long; ``priority`` -> ``priority`` (rounded, clamped to
    -32768..32767). Returns the fields and the keys ignored.
    """
    fields: Dict[str, Any] = {}
    ignored: List[str] = []
    for k, v in (spec or {}).items():
        if v is None:
            continue
        if k in ("cores", "cpus"):
            fields["cores"] = max(1, int(math.ceil(float(v))))
        elif k in ("memory", "disk"):
            if isinstance(v, str):
                fields[k] = v
            elif float(v) > 0:
                fields[k] = f"{int(math.ceil(float(v)))}MiB"
        elif k == "gpus":
            if int(v) > 0:
                fields["gpus"] = int(v)
        elif k == "running_time_min":
            if float(v) > 0:
                fields["walltime_s"] = float(v)
        elif k == "priority":
            fields["priority"] = max(-32768, min(32767, int(round(float(v)))))
        else:
            ignored.append(k)
    return fields, ignored


class DiffuseParslExecutor(ParslExecutor, RepresentationMixin):
    """A Parsl executor that sends each app to a diffuse dispatcher.

    Parameters:
        label: the executor's unique label.
        url: the dispatcher (default ``$DIFFUSE_DISPATCHER``, else ``http://127.0.0.1:8700``).
        token_file: a file holding the client token (default ``$DIFFUSE_CLIENT_TOKEN``; the
            token itself is not a parameter, so that it never appears in Parsl's logged config).
        staging_dir: where the arguments and results of this run's apps are written
            (``warm=False``); must be readable and writable by the workers (shared storage).
            Default ``<run_dir>/<label>/staging``.
        python: the interpreter of the workers' warm processes (and of the runner under
            ``warm=False``); it needs this package, parsl
            and the same Python version as the client. Default: this one (``sys.executable``).
        job: the diffuse job of the apps (default ``parsl-<label>-<run id>``); ``shutdown``
            cancels what is left of it.
        task_defaults: task fields for every app (``retries``, ``timeout_s``, ``env``,
            ``eviction_priority``, ``job_policy``, ``memory_limit``...); resource_specification
            fields win. ``memory_limit`` defaults to ``"none"`` here: Parsl's ``memory`` is a
            request, not a limit.
        poll: seconds between polls for ended tasks.
        batch_size: most tasks per submission.
        working_dir: where Parsl's HTTP and zip staging providers put files (default
            ``<staging_dir>/data``); shared storage too.
        storage_access: Parsl staging providers (default: Parsl's default list).
        remote_monitoring_radio: how apps report monitoring (default ``FilesystemRadio``).
        shutdown_timeout: seconds ``shutdown`` waits for cancelled tasks to end.
        input_paths: ``"auto"`` (default): ``File`` inputs that no earlier app of this executor
            wrote are diffuse inputs, placed by and read from the workers' caches, and the app
            sees the staged copy under the file's own base name; a ``File`` an earlier app wrote
            is used at its own path. ``"cached"``: every ``File`` input is staged, those written
            by earlier apps too (an intermediate many apps read). ``"original"``: the app sees
            each ``File`` at its own absolute path (for programs that need the exact path);
            nothing is staged, so every read goes to shared storage and placement ignores the
            files.
        reuse: let diffuse reuse the results of reusable bash apps (see the module's
            docstring); ``False`` sends every app with ``reuse: false``.
        reuse_dir: where the files that make an app's identity are kept from run to run: the
            serialized functions (``functions/<sha256>.pkl``), the arguments of reusable bash
            apps (``calls/<sha256>.pkl``) and, briefly, their exceptions (``raised/``).
            Shared storage, like ``staging_dir``. Default ``<label>-reuse`` beside the run
            directories (``runinfo/diffuse-reuse``). Deleting it makes every app new.
        app_cwd: the directory apps run in on the workers. ``"client"`` (default): the
            client's working directory when the executor starts, as HTEX's workers started by
            a ``LocalProvider`` have it, so a bash app's ``bin/tool`` and a relative
            ``stdout=`` mean what they mean where the workflow script runs (it must be on a
            file system the workers share). ``"scratch"``: each task's own scratch directory,
            removed when it ends. Or an absolute path.
        warm: run apps as calls in the workers' warm Python processes (default; docs/warm.md,
            :mod:`diffuse_client.parsl_calls`): the interpreter, Parsl and the app's function
            are loaded once per process, not once per app. ``False``: each app is a process
            of its own, ``python -m diffuse_client.parsl_runner`` (a new interpreter that
            imports Parsl: about 0.9 s of CPU per app).
        isolation: how python apps share a warm process. ``"reuse"`` (default): one after
            another in the same processes, as HTEX's workers run them: what an app leaves in
            the process (module globals, caches, imported modules, the function's own state)
            is seen by later apps. ``"fork"``: each app in a child forked from the warm
            process (nothing an app does reaches another; a few ms more per app).
        bash_isolation: the same for bash apps (default ``"reuse"``: their command runs in a
            process of its own anyway; what stays is the command-building function's state).
        preload: more modules the warm processes import before the first app (``parsl`` and
            the entry are always imported).
        inline_args_max: an app's serialized arguments larger than this go as a blob input.
    """

    def __init__(
        self,
        label: str = "diffuse",
        url: Optional[str] = None,
        token_file: Optional[str] = None,
        staging_dir: Optional[str] = None,
        python: str = sys.executable,
        job: Optional[str] = None,
        task_defaults: Optional[Dict[str, Any]] = None,
        poll: float = 0.2,
        batch_size: int = 1000,
        working_dir: Optional[str] = None,
        storage_access: Optional[List[Staging]] = None,
        remote_monitoring_radio: Optional[RadioConfig] = None,
        shutdown_timeout: float = 30.0,
        input_paths: str = "auto",
        reuse: bool = True,
        reuse_dir: Optional[str] = None,
        app_cwd: str = "client",
        warm: bool = True,
        isolation: str = "reuse",
        bash_isolation: str = "reuse",
        preload: Sequence[str] = (),
        inline_args_max: int = INLINE_ARGS_MAX,
    ) -> None:
        super().__init__()
        for name, value in (("isolation", isolation), ("bash_isolation", bash_isolation)):
            if value not in ISOLATIONS:
                raise ValueError(f"DiffuseParslExecutor: {name}={value!r}: use 'reuse' or 'fork'")
        if isinstance(preload, str):
            raise TypeError("DiffuseParslExecutor: preload is a list of module names")
        self.warm = warm
        self.isolation = isolation
        self.bash_isolation = bash_isolation
        self.preload = list(preload)
        self.inline_args_max = inline_args_max
        if input_paths not in INPUT_PATHS:
            raise ValueError(f"DiffuseParslExecutor: input_paths={input_paths!r}: use one of "
                             f"{', '.join(map(repr, INPUT_PATHS))}")
        if app_cwd not in ("client", "scratch") and not os.path.isabs(app_cwd):
            raise ValueError(f"DiffuseParslExecutor: app_cwd={app_cwd!r}: use 'client', "
                             "'scratch' or an absolute path")
        self.app_cwd = app_cwd
        #: The ``cwd`` of every app's task (None: its scratch directory), fixed at start().
        self._cwd: Optional[str] = None
        self.input_paths = input_paths
        self.reuse = reuse
        self.reuse_dir = reuse_dir
        self.label = label
        self.url = url
        self.token_file = token_file
        self.staging_dir = staging_dir
        self.python = python
        self.job = job
        self.task_defaults = task_defaults
        if task_defaults:
            Task.from_dict({"id": "x", "cmd": "x", **task_defaults})  # unknown fields fail here
        self.poll = poll
        self.batch_size = batch_size
        self.working_dir = working_dir
        self.storage_access = storage_access
        self.remote_monitoring_radio = (
            remote_monitoring_radio if remote_monitoring_radio is not None else FilesystemRadio()
        )
        self.shutdown_timeout = shutdown_timeout
        self._executor: Optional[_AppExecutor] = None
        self._client: Optional[Client] = None
        #: The task fields every app's task has (job, task_defaults), fixed at start().
        self._fields: Dict[str, Any] = {}
        #: ``call`` of a python app's task and of a bash app's, but for ``args``.
        self._calls: Dict[bool, Dict[str, Any]] = {}
        self._pool_uri = ""
        #: Serialized functions by function object: (the object, its blob URI, its bytes).
        self._fn_blobs: Dict[int, Tuple[Any, str, str, bytes]] = {}
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._written: Set[str] = set()
        self._warned: Set[str] = set()
        self._futures: Dict[str, "Future[Any]"] = {}
        self._tasks_dir = ""
        self._functions_dir = ""
        self._calls_dir = ""
        self._raised_dir = ""
        #: Bytes of function and argument files given to tasks as inputs (summed per task).
        self.staged_bytes = 0
        # Absolute paths of the outputs of the apps submitted so far (``input_paths="auto"``).
        self._produced: Set[str] = set()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Connects to the dispatcher (checking the token) and makes the staging directories."""
        run = (self.run_id or uuid.uuid4().hex)[:8]
        if self.staging_dir is None:
            self.staging_dir = os.path.join(self.run_dir, self.label, "staging")
        self.staging_dir = os.path.abspath(self.staging_dir)
        if self.working_dir is None:
            self.working_dir = os.path.join(self.staging_dir, "data")
        if self.job is None:
            self.job = f"parsl-{self.label}-{run}"
        if self.reuse_dir is None:
            self.reuse_dir = os.path.join(_runs_dir(self.run_dir), f"{self.label}-reuse")
        self.reuse_dir = os.path.abspath(self.reuse_dir)
        self._functions_dir = os.path.join(self.reuse_dir, "functions")
        self._calls_dir = os.path.join(self.reuse_dir, "calls")
        self._raised_dir = os.path.join(self.reuse_dir, "raised")
        self._tasks_dir = os.path.join(self.staging_dir, "tasks", f"{run}-{uuid.uuid4().hex[:6]}")
        made = ([self._raised_dir] if self.warm else
                [self._functions_dir, self._calls_dir, self._raised_dir, self._tasks_dir])
        for d in made:
            os.makedirs(d, exist_ok=True)
        os.makedirs(self.working_dir, exist_ok=True)
        if self.app_cwd == "client":
            self._cwd = os.getcwd()
        elif self.app_cwd != "scratch":
            self._cwd = self.app_cwd
        self._client = Client(self.url, token_file=self.token_file)
        try:
            st = self._client.status()
        except DiffuseError as e:
            raise ExecutorError(self, f"cannot use the dispatcher at {self._client.url}: {e}") from e
        if st.workers == 0:
            logger.warning("diffuse dispatcher %s has no worker connected (yet)", self._client.url)
        if self.warm:
            try:
                self._pool_uri = self._client.put_blob(POOL)
            except DiffuseError as e:
                raise ExecutorError(self, f"cannot use the dispatcher at {self._client.url}: {e}") from e
            fields = Task.from_dict({"id": "x", "call": {}, **(self.task_defaults or {}),
                                     "job": self.job}).to_dict()
            fields.pop("id")
            fields.pop("call")
            if self._cwd is not None:
                fields.setdefault("cwd", self._cwd)
            self._fields = fields
            base = {"fn": 0, "entry": ENTRY, "python": self.python,
                    "preload": list(dict.fromkeys([*PRELOAD, *self.preload]))}
            self._calls = {False: {**base, "isolation": self.isolation},
                           True: {**base, "isolation": self.bash_isolation}}
        self._executor = _AppExecutor(
            self,
            self._client,
            job=self.job,
            # Parsl's memory is a request: no limit unless task_defaults gives one
            defaults=dict(self.task_defaults or {}),
            poll=self.poll,
            batch_size=self.batch_size,
            fetch_stdout=False,
            id_prefix=f"parsl-{run}-{uuid.uuid4().hex[:6]}-",
        )
        logger.info("DiffuseParslExecutor %s: dispatcher %s, staging in %s, job %s",
                    self.label, self._client.url, self.staging_dir, self.job)

    def shutdown(self) -> None:
        """Cancels what is left of the job, waits (``shutdown_timeout``) and completes every future."""
        ex = self._executor
        if ex is not None:
            if ex.outstanding() and self._client is not None and self.job is not None:
                logger.info("DiffuseParslExecutor %s: cancelling %d unfinished task(s) of job %s",
                            self.label, ex.outstanding(), self.job)
                try:
                    self._client.cancel_job(self.job)
                except DiffuseError as e:
                    logger.warning("cancelling job %s: %s", self.job, e)
            ex.shutdown(wait=False, cancel_futures=True)
            if not ex.join(self.shutdown_timeout):
                logger.warning("DiffuseParslExecutor %s: tasks still unfinished after %g s",
                               self.label, self.shutdown_timeout)
        with self._lock:
            left = list(self._futures.items())
            self._futures.clear()
        for tid, fut in left:
            _fail(fut, DiffuseTaskFailure(self, "the executor was shut down before the task ended", tid))
        if self._tasks_dir:
            shutil.rmtree(self._tasks_dir, ignore_errors=True)
        super().shutdown()

    # ------------------------------------------------------------------ submit

    def submit(self, func: Callable[..., Any], resource_specification: Dict[str, Any],
               *args: Any, **kwargs: Any) -> "Future[Any]":
        """Stages the call and submits its task; returns a future of the function's return value.

        Thread-safe; never waits for the task.
        """
        if self._executor is None:
            raise ExecutorError(self, "submit() before start()")
        if resource_specification:
            fields, ignored = resources_to_fields(resource_specification)
        else:
            fields, ignored = {}, []
        defaults = self.task_defaults or {}
        if ("memory" in fields or "memory" in defaults) and "memory_limit" not in defaults:
            # Parsl's memory is a request: no limit unless task_defaults gives one. Sent only
            # with a memory, so that a dispatcher without memory_limit takes the other tasks.
            fields["memory_limit"] = "none"
        if ignored:
            with self._lock:
                new = [k for k in ignored if k not in self._warned]
                self._warned.update(new)
            for k in new:
                logger.warning("DiffuseParslExecutor %s: resource_specification key %r ignored "
                               "(known: %s)", self.label, k, ", ".join(RESOURCE_KEYS))

        plan = plan_files(args, kwargs, stage=self.input_paths != "original",
                          produced=self._produced if self.input_paths == "auto" else None)
        if self.input_paths == "auto" and plan.outputs:
            with self._lock:
                self._produced.update(path for _, path in plan.outputs)
        user = bash_app_function(func)
        app = self._reusable_app(user, plan)
        if self.warm:
            return self._submit_call(func, user is not None, plan, app, args, kwargs, fields)
        if self._cwd is not None:
            fields["cwd"] = self._cwd
        fn_path, fn_size = self._stage_function(func)
        if app is not None:
            return self._submit_reusable(fn_path, fn_size, plan, app, args, kwargs, fields)
        return self._submit_once(fn_path, fn_size, plan, args, kwargs, fields)

    def _reusable_app(self, user: Optional[Callable[..., Any]], plan: "FilePlan") -> Optional[str]:
        """The code digest of a reusable bash app's function (``user``: the function of a bash
        app, see :func:`bash_app_function`); ``None`` for any other call."""
        if user is None or not self.reuse or self.input_paths == "original" or not plan.reusable():
            return None
        if (self.task_defaults or {}).get("reuse") is False:
            return None
        return code_digest(user)

    def _submit_call(self, func: Callable[..., Any], bash: bool, plan: "FilePlan",
                     app: Optional[str], args: Sequence[Any], kwargs: Dict[str, Any],
                     fields: Dict[str, Any]) -> "Future[Any]":
        """The app as a call in a warm process (:mod:`diffuse_client.parsl_calls`).

        Inputs: :data:`~diffuse_client.parsl_calls.POOL` (the call's ``fn``), the app's
        function (a blob, put once), the staged ``File`` inputs, and the arguments as a blob
        when they are over ``inline_args_max``. A reusable bash app (``app``: its code digest)
        is sent with ``reuse: true``, its ``outputs=`` as the task's outputs, and everything
        that makes its identity the same in every run (the function's and the arguments'
        bytes, the app's code, the versions of Parsl and of this package)."""
        assert self._executor is not None
        fn_uri, fn_sha, fn_data = self._function_blob(func)
        inputs = [self._pool_uri, fn_uri, *plan.uris]
        blobs = [(fn_uri, fn_data)]
        p: Optional[Dict[str, Any]] = None
        if app is not None:
            p = {**plan.payload(), "app": app, "versions": [parsl.__version__, __version__],
                 "raised": self._raised_dir, "deliver": True}
        elif plan.uris or plan.outputs or plan.paths or plan.std:
            p = plan.payload()
        if p is not None and p["inputs"]:
            p["inputs"] = {k: i + 2 for k, i in p["inputs"].items()}  # after POOL and fn
        data = dumps((1, fn_sha, args, kwargs, p))
        call = dict(self._calls[bash])
        staged = len(POOL) + len(fn_data)
        if len(data) > self.inline_args_max:
            args_uri = "blob://" + hashlib.sha256(data).hexdigest()
            inputs.append(args_uri)
            blobs.append((args_uri, data))
            call["args_input"] = len(inputs) - 1
            staged += len(data)
        else:
            call["args"] = base64.b64encode(data).decode("ascii")
        task_id = self._executor._new_id()
        if fields:
            # resource fields: in the form the dispatcher reads (as DiffuseExecutor sends them)
            task = Task.from_dict({**self._fields, **fields, "id": task_id,
                                   "call": call}).to_dict()
        else:
            task = {"id": task_id, **self._fields, "call": call}
        task["inputs"] = inputs
        raised_path = None
        if app is not None:
            task["outputs"] = [_uri(dest) for _, dest in plan.outputs]
            task["reuse"] = True
            if "retries" not in (self.task_defaults or {}):
                task["retries"] = 0  # the app's failure is Parsl's to retry, as for other apps
            raised_path = os.path.join(self._raised_dir, raised_name(task_id))
        else:
            task["reuse"] = False
        with self._lock:
            self.staged_bytes += staged
        inner = TaskFuture(task_id)
        outer = self._follow(inner, raised_path=raised_path, call=True)
        self._executor.enqueue_call(inner, task, blobs)
        return outer

    def _function_blob(self, func: Callable[..., Any]) -> Tuple[str, str, bytes]:
        """``parsl.serialize(func)``: its blob URI, SHA-256 and bytes (serialized once per
        function object while it is among the last FUNCTION_CACHE serialized; the same bytes
        make the same blob)."""
        key = id(func)
        with self._lock:
            hit = self._fn_blobs.get(key)
            if hit is not None and hit[0] is func:
                return hit[1], hit[2], hit[3]
        data = serialize(func, buffer_threshold=1 << 30)
        sha = hashlib.sha256(data).hexdigest()
        uri = f"blob://{sha}"
        with self._lock:
            # the object is kept: its id is not reused while it is here
            self._fn_blobs[key] = (func, uri, sha, data)
            while len(self._fn_blobs) > FUNCTION_CACHE:
                del self._fn_blobs[next(iter(self._fn_blobs))]
        return uri, sha, data

    def _submit_once(self, fn_path: str, fn_size: int, plan: "FilePlan", args: Sequence[Any],
                     kwargs: Dict[str, Any], fields: Dict[str, Any]) -> "Future[Any]":
        """A call that is never reused: arguments and result in a directory of this run."""
        n = next(self._counter)
        task_dir = os.path.join(self._tasks_dir, str(n))
        os.makedirs(task_dir)
        payload = {"args": args, "kwargs": kwargs, **plan.payload()}
        payload_path = os.path.join(task_dir, "payload")
        data = serialize(payload, buffer_threshold=1024 * 1024)
        with open(payload_path, "wb") as f:
            f.write(data)
        result_path = os.path.join(task_dir, "result")
        with self._lock:
            self.staged_bytes += fn_size + len(data)

        cmd = [self.python, "-m", "diffuse_client.parsl_runner", "{inputs[0]}", "{inputs[1]}",
               "{outputs[0]}"] + [f"{{inputs[{i + 2}]}}" for i in range(len(plan.uris))]
        inputs = [_uri(fn_path), _uri(payload_path)] + plan.uris
        assert self._executor is not None
        inner = self._executor.submit(cmd, inputs=inputs, outputs=[_uri(result_path)],
                                      **{**fields, "reuse": False})
        return self._follow(inner, task_dir=task_dir, result_path=result_path)

    def _submit_reusable(self, fn_path: str, fn_size: int, plan: "FilePlan", app: str,
                         args: Sequence[Any], kwargs: Dict[str, Any],
                         fields: Dict[str, Any]) -> "Future[Any]":
        """A reusable bash app: every part of its task is the same for the same call in any run.

        The arguments go in ``reuse_dir/calls/<sha256>.pkl``; the app's ``outputs=`` are the
        task's outputs (the runner hands the worker each one, at ``{outputs[j]}``); there is no
        result file (success is Parsl's ``0``; anything else comes back through ``raised/``).
        """
        deliver = [len(plan.uris) + j for j in range(len(plan.outputs))]
        # Parsl's bash runner and this package's are pickled by reference: their versions
        # stand for their code
        payload = {"args": args, "kwargs": kwargs, **plan.payload(), "app": app,
                   "versions": [parsl.__version__, __version__],
                   "raised": self._raised_dir, "deliver": deliver}
        data = serialize(payload, buffer_threshold=1024 * 1024)
        call_path = self._stage_blob(self._calls_dir, data)
        with self._lock:
            self.staged_bytes += fn_size + len(data)
        cmd = ([self.python, "-m", "diffuse_client.parsl_runner", "{inputs[0]}", "{inputs[1]}", "-"]
               + [f"{{inputs[{i + 2}]}}" for i in range(len(plan.uris))]
               + [f"{{outputs[{j}]}}" for j in range(len(plan.outputs))])
        inputs = [_uri(fn_path), _uri(call_path)] + plan.uris
        outputs = [_uri(dest) for _, dest in plan.outputs]
        extra: Dict[str, Any] = {"reuse": True}
        if "retries" not in (self.task_defaults or {}):
            extra["retries"] = 0  # the app's failure is Parsl's to retry, as for other apps
        assert self._executor is not None
        inner = self._executor.submit(cmd, inputs=inputs, outputs=outputs, **{**fields, **extra})
        return self._follow(inner, raised_path=os.path.join(self._raised_dir,
                                                            raised_name(inner.task_id)))

    def _follow(self, inner: TaskFuture, task_dir: Optional[str] = None,
                result_path: Optional[str] = None, raised_path: Optional[str] = None,
                call: bool = False) -> "Future[Any]":
        """The Parsl future of a submitted task, completed from ``inner`` when it ends
        (``call``: ``inner``'s result is the app's value)."""
        outer: "Future[Any]" = Future()
        outer.parsl_executor_task_id = inner.task_id  # type: ignore[attr-defined]
        with self._lock:
            self._futures[inner.task_id] = outer
        inner.add_done_callback(
            lambda f: self._complete(f, outer, task_dir, result_path, raised_path, call))
        return outer

    def _stage_function(self, func: Callable[..., Any]) -> Tuple[str, int]:
        """Writes the serialized function once, named by its SHA-256, so workers cache it."""
        data = serialize(func, buffer_threshold=1024 * 1024)
        return self._stage_blob(self._functions_dir, data), len(data)

    def _stage_blob(self, directory: str, data: bytes) -> str:
        """Writes ``data`` once as ``<directory>/<sha256>.pkl``; returns its path.

        A file already there is left as it is: it keeps its inode and mtime, which are its
        version for diffuse (a new version would drop the cached copies, and the dispatcher
        would not know its digest, so no result could be reused for it).
        """
        digest = hashlib.sha256(data).hexdigest()
        path = os.path.join(directory, f"{digest}.pkl")
        with self._lock:
            if path in self._written:
                return path
            if not os.path.exists(path):
                # link() never replaces the file another process may have put there meanwhile
                tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
                with open(tmp, "wb") as f:
                    f.write(data)
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    pass
                finally:
                    os.unlink(tmp)
            self._written.add(path)
        return path

    def _complete(self, inner: "Future[Any]", outer: "Future[Any]", task_dir: Optional[str],
                  result_path: Optional[str], raised_path: Optional[str],
                  call: bool = False) -> None:
        tid = inner.task_id if isinstance(inner, TaskFuture) else "?"
        with self._lock:
            if self._futures.pop(tid, None) is None:
                return  # already failed by shutdown
        try:
            if inner.cancelled():
                _fail(outer, DiffuseTaskFailure(self, f"diffuse task {tid} was cancelled", tid))
                return
            exc = inner.exception()
            if exc is not None:
                if (raised_path is not None and isinstance(exc, TaskFailed)
                        and (call or exc.exit_code == EXIT_NOT_KEPT)
                        and os.path.exists(raised_path)):
                    self._deliver(outer, tid, raised_path, "ended")
                    return
                res = exc.result if isinstance(exc, TaskFailed) else None
                _fail(outer, DiffuseTaskFailure(self, str(exc), tid, res))
                return
            if call:
                _set(outer, inner.result())
                return
            if result_path is None:
                _set(outer, 0)  # a reusable bash app that succeeded: remote_side_bash_executor's 0
                return
            self._deliver(outer, tid, result_path, "succeeded")
        finally:
            if task_dir is not None:
                shutil.rmtree(task_dir, ignore_errors=True)
            if raised_path is not None:
                _remove(raised_path)

    def _deliver(self, outer: "Future[Any]", tid: str, path: str, how: str) -> None:
        """Completes ``outer`` with the value serialized in ``path``."""
        try:
            with open(path, "rb") as f:
                value = loads(f.read())
        except Exception as e:
            _fail(outer, DiffuseTaskFailure(
                self, f"task {tid} {how} but left no readable result ({path}: {e})", tid))
            return
        _set(outer, value)

    def outstanding(self) -> int:
        """Apps submitted and not yet complete."""
        with self._lock:
            return len(self._futures)

    def monitor_resources(self) -> bool:
        """Resource monitoring works (each app's monitor runs beside it on the worker, as
        under HTEX; a warm call's leftover processes are stopped when it returns)."""
        return True


class _AppExecutor(DiffuseExecutor):
    """The :class:`DiffuseExecutor` of a :class:`DiffuseParslExecutor`: process tasks as
    DiffuseExecutor sends them, and calls whose blobs (the app's function, large arguments)
    are put at the dispatcher by the submitter thread before their batch is sent, so that
    ``submit`` never waits for the dispatcher; a call's future gets the app's value,
    deserialized on the thread that heard of its end (a result over 1 MiB is fetched by the
    executor's pool)."""

    def __init__(self, owner: DiffuseParslExecutor, client: Client, **kw: Any) -> None:
        self._owner = owner
        self._blob_lock = threading.Lock()
        #: blobs put at the dispatcher (by URI), and those tasks wait for (by task id)
        self._sent_blobs: Set[str] = set()
        self._blobs_for: Dict[str, List[Tuple[str, bytes]]] = {}
        super().__init__(client, **kw)

    def enqueue_call(self, fut: TaskFuture, task: Dict[str, Any],
                     blobs: Sequence[Tuple[str, bytes]]) -> None:
        """Queues a call's task (a dict of task fields); ``blobs`` are the ``(uri, bytes)`` of
        its inputs to put at the dispatcher first (those not put yet)."""
        with self._blob_lock:
            missing = [b for b in blobs if b[0] not in self._sent_blobs]
            if missing:
                self._blobs_for[fut.task_id] = missing
        self._enqueue(fut, task)

    def _prepare_batch(self, batch: List[_Pending]) -> None:
        if (BATCH_LINGER > 0 and len(batch) < self.batch_size
                and time.monotonic() - self._last_sent < BATCH_STREAM):
            # apps are coming one by one (the DFK submits them from one thread) in a stream:
            # a moment's wait sends many in one request rather than one or two per request
            time.sleep(BATCH_LINGER)
            with self._lock:
                more = self._take_batch_locked()
                room = self.batch_size - len(batch)
                if len(more) > room:
                    self._queue[:0] = more[room:]
                    more = more[:room]
            batch.extend(more)
        with self._blob_lock:
            waiting = bool(self._blobs_for)
        if waiting:
            kept = []
            for p in batch:
                if self._put_blobs(p):
                    kept.append(p)
            batch[:] = kept
        if any("cmd" in p.task for p in batch):  # programs hashed for process tasks only
            super()._prepare_batch(batch)

    def _put_blobs(self, p: _Pending) -> bool:
        """Puts the blobs ``p``'s task waits for; False (its future failed) if one cannot be."""
        with self._blob_lock:
            blobs = self._blobs_for.pop(p.task_id, None)
        for uri, data in blobs or ():
            with self._blob_lock:
                if uri in self._sent_blobs:
                    continue
            try:
                self.client.put_blob(data)
            except DiffuseError as e:
                _fail(p.future, DiffuseError(f"cannot put the app's {uri} at the dispatcher: {e}"))
                return False
            with self._blob_lock:
                self._sent_blobs.add(uri)
        return True

    def _resolve(self, pending: _Pending, info: TaskInfo) -> None:
        if "call" not in pending.task:
            super()._resolve(pending, info)
            return
        fut = pending.future
        if info.state == "cancelled":
            fut.cancel()
            return
        if info.state == "failed":
            _fail(fut, TaskFailed(TaskResult.from_info(info)))
            return
        report = info.outcome.report if info.outcome is not None else {}
        if isinstance(report.get("value"), str):
            self._decode(fut, info, report)
        elif report.get("value_blob"):
            self._background(self._decode, fut, info, report)
        else:
            _fail(fut, DiffuseError(f"call {info.id!r} succeeded without a result"))

    def _decode(self, fut: "Future[Any]", info: TaskInfo, report: Dict[str, Any]) -> None:
        try:
            data = call_value(self.client, report)
            if data is None:
                raise DiffuseError("no result in its report")
            value = loads(data)
        except Exception as e:
            _fail(fut, DiffuseError(f"task {info.id} succeeded but its result cannot be read: {e}"))
            return
        _set(fut, value)


class FilePlan:
    """Which ``File`` arguments of a call are staged as inputs, written back, or used in place."""

    def __init__(self, stage: bool = True, produced: Optional[AbstractSet[str]] = None) -> None:
        self.stage = stage
        self.produced: AbstractSet[str] = produced if produced is not None else frozenset()
        self.uris: List[str] = []
        self.inputs: Dict[str, int] = {}
        self.outputs: List[Tuple[str, str]] = []
        self.paths: Dict[str, str] = {}
        self.std: Dict[str, str] = {}

    def add_input(self, f: File) -> None:
        """Stages ``f`` (an absolute or client-relative path) as a diffuse input.

        A directory cannot be a diffuse input: it is used in place, at its absolute path; so is
        a file an earlier app wrote (``produced``).
        """
        key = _key(f)
        if key is None or key in self.inputs:
            return
        path = os.path.abspath(key)
        if not self.stage or path in self.produced or os.path.isdir(path):
            self.paths[key] = os.path.abspath(key)
            return
        uri = _uri(os.path.abspath(key))
        try:
            i = self.uris.index(uri)
        except ValueError:
            i = len(self.uris)
            self.uris.append(uri)
        self.inputs[key] = i

    def add_other(self, f: File) -> None:
        """A ``File`` argument outside inputs/outputs: staged if it exists, else used in place."""
        key = _key(f)
        if key is None:
            return
        if os.path.isfile(os.path.abspath(key)):
            self.add_input(f)
        else:
            self.paths[key] = os.path.abspath(key)

    def reusable(self) -> bool:
        """Whether the call's files are all declared: it names a ``File``, every one is staged
        or an output, no output is named twice, and no ``stdout``/``stderr`` goes to a file."""
        dests = [dest for _, dest in self.outputs]
        return (not self.paths and not self.std and len(set(dests)) == len(dests)
                and bool(self.uris or dests))

    def payload(self) -> Dict[str, Any]:
        """The plan as the runner reads it."""
        return {"inputs": self.inputs, "outputs": self.outputs, "paths": self.paths,
                "std": self.std}


def plan_files(args: Sequence[Any], kwargs: Dict[str, Any], stage: bool = True,
               produced: Optional[AbstractSet[str]] = None) -> FilePlan:
    """Plans the files of one call (see :class:`FilePlan` and the module's docstring).

    ``stage=False`` (``input_paths="original"``): every file is used in place, at its absolute
    path; outputs are written there directly. ``produced``: absolute paths that earlier apps
    wrote, used in place rather than staged (``input_paths="auto"``).
    """
    plan = FilePlan(stage, produced)
    for f in kwargs.get("inputs") or []:
        if isinstance(f, File):
            plan.add_input(f)
    for f in kwargs.get("outputs") or []:
        if isinstance(f, File):
            key = _key(f)
            if key is not None and stage:
                plan.outputs.append((key, os.path.abspath(key)))
            elif key is not None:
                plan.paths[key] = os.path.abspath(key)
    for a in args:
        if isinstance(a, File):
            plan.add_other(a)
    for k, v in kwargs.items():
        if k in ("inputs", "outputs"):
            continue
        if k in ("stdout", "stderr"):
            if v is None:
                continue
            name = v.filepath if isinstance(v, File) else get_std_fname_mode(k, v)[0]
            plan.std[k] = os.path.abspath(os.fspath(name))
        elif isinstance(v, File):
            plan.add_other(v)
    return plan


def _key(f: File) -> Optional[str]:
    """The name a ``File`` is remapped by (its client-side ``filepath``), if it has one."""
    if f.scheme == "file" or f.local_path:
        return f.filepath
    return None


def _runs_dir(run_dir: str) -> str:
    """Where Parsl makes its numbered run directories (``runinfo`` for ``runinfo/003``): the
    same for every run of a config. A run directory not so numbered is its own."""
    run_dir = os.path.abspath(run_dir)
    return os.path.dirname(run_dir) if os.path.basename(run_dir).isdigit() else run_dir


def _uri(path: str) -> str:
    return Path(path).as_uri()


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _set(fut: "Future[Any]", value: Any) -> None:
    try:
        fut.set_result(value)
    except InvalidStateError:
        pass


def _fail(fut: "Future[Any]", e: BaseException) -> None:
    try:
        fut.set_exception(e)
    except InvalidStateError:
        pass
