"""``FunctionExecutor``: Python functions run as diffuse function tasks (docs/warm.md), behind
``concurrent.futures`` futures whose result is the function's return value.

::

    from diffuse_client import FunctionExecutor, Input

    def count_lines(path):
        with open(path) as f:
            return sum(1 for _ in f)

    with FunctionExecutor(isolation="reuse") as ex:
        print(ex.submit(pow, 2, 10).result())                     # 1024
        print(list(ex.map(lambda x: x * x, range(5))))             # [0, 1, 4, 9, 16]
        n = ex.submit(count_lines, Input("/shared/data/a.txt")).result()

Each call is one task whose ``call`` runs the default entry
``diffuse_client.calls:call_pickled`` in a warm Python process on a worker. The function is
serialized once per function object (:func:`diffuse_client.calls.dumps_function`: cloudpickle
where installed) and sent once per executor as a blob, ``blob://<sha256>``: the task's first
input, which each worker fetches once and caches. The arguments travel in the task
(``args``), or as a blob input (``args_input``) over ``inline_args_max`` bytes.

**Files as inputs.** An argument wrapped in :class:`Input` (a path or a URI, anywhere in the
arguments: in a list, a dict...) is declared as one of the task's inputs: the dispatcher places
the call on a worker that caches the file when it can, the worker stages it, and the function
gets the staged file's local path (a ``str``) in its place. ``submit_call(..., inputs=[...])``
declares inputs that are not passed to the function (placement only).

**What the workers need.** The interpreter ``python`` (default: this one, ``sys.executable``:
right when the workers run on this machine or see the same environment at the same path) with
``diffuse_client``, the modules the function imports, the same Python version as here, and
cloudpickle when this side has it (``pip install diffuse-client[functions]``): lambdas,
closures and functions defined in ``__main__`` or a notebook are sent by value with it. A
function of an importable module is sent by reference (its module must import on the
worker), unless the module is named in ``by_value``.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import importlib
import os
import pickle
import sys
import threading
import urllib.parse
from concurrent.futures import Future
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    OrderedDict,
    Sequence,
    Tuple,
    Union,
)
from types import ModuleType

from . import calls
from .client import Client, Task, TaskInfo, to_uri
from .errors import DiffuseError
from .executor import TaskExecutorBase, _fail, _Pending, _set, call_value
from .result import TaskFailed, TaskResult

#: The default entry (docs/warm.md), and the one used for calls with :class:`Input` arguments.
ENTRY = "diffuse_client.calls:call_pickled"
ENTRY_WITH_INPUTS = "diffuse_client.functions:call_with_inputs"

#: Arguments larger than this (serialized) go as a blob input rather than in the task.
INLINE_ARGS_MAX = 200 * 1024

#: Function objects whose serialized form an executor keeps (most recently used).
FUNCTION_CACHE = 256

#: Task fields a FunctionExecutor sets itself.
_OWN_FIELDS = ("id", "cmd", "call")


# ---------------------------------------------------------------------------------------------
# Files declared as inputs


class _Collector:
    """The inputs an argument serialization met, in order (index ``base + i``)."""

    def __init__(self, base: int) -> None:
        self.base = base
        self.uris: List[str] = []
        self._index: Dict[str, int] = {}

    def index(self, uri: str) -> int:
        i = self._index.get(uri)
        if i is None:
            i = self._index[uri] = self.base + len(self.uris)
            self.uris.append(uri)
        return i


_collecting = threading.local()

#: The staged inputs of the call running in this (warm) process; set by call_with_inputs.
_staged: Optional[List[str]] = None


def _local_path(uri: str) -> str:
    """A ``file://`` URI's path; any other URI as it is."""
    if uri.startswith("file://"):
        return urllib.parse.unquote(urllib.parse.urlsplit(uri).path)
    return uri


def _staged_input(index: int, uri: str) -> str:
    """What an :class:`Input` argument becomes on the worker: the staged file's local path.

    Outside a call (the arguments loaded elsewhere) a ``file://`` URI's path, or the URI."""
    staged = _staged
    if staged is not None and 0 <= index < len(staged):
        return staged[index]
    return _local_path(uri)


class Input:
    """A file argument declared as an input of the call: a path (made a ``file://`` URI of its
    absolute path) or a URI (``file://``, ``s3://``, ``http(s)://``, ``blob://``...).

    Passed to :meth:`FunctionExecutor.submit` anywhere in the arguments, it becomes one of the
    task's inputs (the call is placed where the file is cached, and the worker stages it) and
    the function receives the staged file's local path, a ``str``, in its place. Called here
    directly, the function gets the object, which is path-like (``open(Input(p))`` works) for a
    ``file://`` URI."""

    __slots__ = ("uri",)

    def __init__(self, path: Union[str, "os.PathLike[str]", "Input"]) -> None:
        self.uri: str = path.uri if isinstance(path, Input) else to_uri(path)

    def __fspath__(self) -> str:
        if not self.uri.startswith("file://"):
            raise TypeError(f"{self.uri} is not a local path")
        return _local_path(self.uri)

    def __repr__(self) -> str:
        return f"Input({self.uri!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Input) and other.uri == self.uri

    def __hash__(self) -> int:
        return hash(("Input", self.uri))

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        c: Optional[_Collector] = getattr(_collecting, "c", None)
        if c is None:
            return (Input, (self.uri,))
        return (_staged_input, (c.index(self.uri), self.uri))


def call_with_inputs(fn_path: str, args: bytes, inputs: List[str]) -> bytes:
    """The warm entry of calls with :class:`Input` arguments: :func:`calls.call_pickled`, with
    each ``Input`` loaded as the staged input's local path."""
    global _staged
    _staged = list(inputs)
    try:
        return calls.call_pickled(fn_path, args, inputs)
    finally:
        _staged = None


#: Types pickle writes the same way as cloudpickle (arguments of only these skip cloudpickle's
#: slower pickler: about 20 us a call).
_PLAIN = frozenset({int, float, str, bytes, bool, type(None), complex})


def _dumps_args(
    fn: Any, args: Tuple[Any, ...], kwargs: Mapping[str, Any], base: int
) -> Tuple[bytes, List[str]]:
    """The argument bytes and the inputs the :class:`Input` arguments declared. An argument
    that cannot be serialized raises ``TypeError`` naming it."""
    if all(type(a) in _PLAIN for a in args) and all(type(v) in _PLAIN for v in kwargs.values()):
        return pickle.dumps((args, dict(kwargs)), protocol=pickle.HIGHEST_PROTOCOL), []
    c = _Collector(base)
    _collecting.c = c
    try:
        data = calls.dumps_args(args, kwargs)
    except Exception as e:
        why = e
    else:
        return data, c.uris
    finally:
        _collecting.c = None
    # which one?
    named: List[Tuple[str, Any]] = [(f"argument {i}", a) for i, a in enumerate(args)]
    named += [(f"keyword argument {k!r}", v) for k, v in kwargs.items()]
    for name, value in named:
        _collecting.c = _Collector(base)
        try:
            calls.dumps_args((value,))
        except Exception as e:
            raise TypeError(
                f"{name} of {_fn_name(fn)} ({_describe(value)}) cannot be serialised: {_summary(e)}"
            ) from e
        finally:
            _collecting.c = None
    raise TypeError(f"the arguments of {_fn_name(fn)} cannot be serialised: {_summary(why)}") from why


_by_value_lock = threading.Lock()


@contextlib.contextmanager
def _pickling_by_value(modules: List[ModuleType]) -> Iterator[None]:
    """cloudpickle sends the functions and classes of ``modules`` by value meanwhile (its
    registry is global: the modules registered here are unregistered after)."""
    if not modules:
        yield
        return
    cp = importlib.import_module("cloudpickle")
    with _by_value_lock:
        had = set(cp.list_registry_pickle_by_value())
        added = [m for m in modules if m.__name__ not in had]
        for m in added:
            cp.register_pickle_by_value(m)
        try:
            yield
        finally:
            for m in added:
                cp.unregister_pickle_by_value(m)


def _describe(value: Any) -> str:
    t = type(value)
    try:
        shown = repr(value)
    except Exception:
        shown = ""
    if len(shown) > 80:
        shown = shown[:80] + "..."
    return f"a {t.__module__}.{t.__qualname__}" + (f": {shown}" if shown else "")


def _summary(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _fn_name(fn: Any) -> str:
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    mod = getattr(fn, "__module__", None)
    if name:
        return f"{mod}.{name}" if mod else str(name)
    return repr(fn)


# ---------------------------------------------------------------------------------------------
# The executor


class CallFuture(Future[Any]):
    """A future of :class:`FunctionExecutor`: its result is the function's return value; an
    exception the function raised is raised again, with the worker's traceback as its
    ``__cause__`` (a :class:`diffuse_client.calls.RemoteTraceback`). A call whose task failed
    (it timed out, ran out of memory, its function could not be loaded on the worker...)
    raises :class:`~diffuse_client.TaskFailed`.

    ``task_id`` is the diffuse task; ``info`` its :class:`~diffuse_client.TaskInfo` once it
    ended (``info.outcome.node``: the worker it ran on; ``info.outcome.report["traffic"]``: its
    input reads by source). As for :class:`~diffuse_client.TaskFuture`, ``cancel()`` succeeds
    until the call's outcome is known, and cancels its task too: a queued call never runs, a
    running one is stopped (its process group signalled). A call cancelled through diffuse
    (``client.cancel(task_id)``, ``cancel_job``, ``diffuse cancel``) cancels its future."""

    def __init__(self, task_id: str) -> None:
        super().__init__()
        self.task_id = task_id
        self.info: Optional[TaskInfo] = None


class FunctionExecutor(TaskExecutorBase):
    """A ``concurrent.futures.Executor`` that runs Python functions as diffuse function tasks:
    ``submit(fn, *args, **kwargs)`` returns a :class:`CallFuture` at once; ``map`` and
    ``shutdown(wait=, cancel_futures=)`` work as for any executor.

    Options:

    - ``isolation``: ``"fork"`` (default): each call in a child forked from a warm process,
      so nothing a call does reaches another; ``"reuse"``: calls of one function run one after
      another in a process kept for it (no fork: faster for short calls), and state a call
      leaves (module globals, caches) is seen by later calls of that function, as in Parsl's
      HTEX or Dask.
    - ``python``: the interpreter on the workers (default ``sys.executable``); ``preload``:
      modules the warm process imports before the first call (and before forking), with
      ``cloudpickle`` first when this side has it; ``setup``: code it runs once after them.
    - ``by_value``: modules (or their names) whose functions are sent by value rather than
      imported on the worker (cloudpickle's ``register_pickle_by_value``; a module not
      installed on the workers: a script's helper module, a test module).
    - task fields for every call, in ``defaults`` or as keywords: ``cores``, ``memory``,
      ``memory_limit``, ``timeout_s``, ``retries``, ``env``, ``cwd``, ``priority``... and
      ``job`` (docs/runtime.md). ``reuse`` is ``False`` by default: a function may not be
      deterministic; ``reuse=True`` lets a kept result of an identical call (the same
      function bytes, arguments and input contents) stand in for a new one.
    - ``poll``: the shortest time between two polls for ended calls (calls ending within it
      come back in one answer); ``batch_size``: most calls in one submission;
      ``inline_args_max``: larger arguments go as a blob input; ``lost_timeout``: seconds the
      dispatcher may stay unreachable before outstanding futures fail.

    :meth:`submit_call` takes task fields for one call, and ``inputs`` that are not arguments.
    """

    def __init__(
        self,
        client: Optional[Client] = None,
        *,
        url: Optional[str] = None,
        token: Optional[str] = None,
        isolation: str = "fork",
        python: Optional[str] = None,
        preload: Sequence[str] = (),
        setup: Optional[str] = None,
        by_value: Iterable[Union[str, ModuleType]] = (),
        job: Optional[str] = None,
        defaults: Optional[Mapping[str, Any]] = None,
        poll: float = 0.02,
        batch_size: int = 1000,
        inline_args_max: int = INLINE_ARGS_MAX,
        id_prefix: Optional[str] = None,
        lost_timeout: float = 600.0,
        fetch_threads: int = 4,
        **task_fields: Any,
    ) -> None:
        if isolation not in ("fork", "reuse"):
            raise ValueError(f"isolation is 'fork' or 'reuse', not {isolation!r}")
        fields: Dict[str, Any] = {"reuse": False, **dict(defaults or {}), **task_fields}
        if job is not None:
            fields["job"] = job
        own = [k for k in _OWN_FIELDS if k in fields]
        if own:
            raise TypeError(f"{', '.join(map(repr, own))}: set by the executor, not a default")
        # unknown fields raise TypeError here; values are put in the form the dispatcher reads
        checked = Task.from_dict({"id": "x", "call": {}, **fields}).to_dict()
        checked.pop("id")
        checked.pop("call")
        self._fields = checked
        self._default_inputs: List[str] = list(checked.pop("inputs", []))
        self.isolation = isolation
        self.python = python or sys.executable or "python3"
        self._call_base: Dict[str, Any] = {
            "fn": 0,
            "entry": ENTRY,
            "python": self.python,
            "isolation": isolation,
        }
        if isinstance(preload, str):
            raise TypeError("preload is a list of module names")
        modules = [str(m) for m in preload]
        if calls._cp() is not None and "cloudpickle" not in modules:
            # what this side sends by value needs cloudpickle to load: imported once by the
            # warm process, not by each forked child (about 3 ms of CPU per call saved)
            modules.insert(0, "cloudpickle")
        if modules:
            self._call_base["preload"] = modules
        if setup:
            self._call_base["setup"] = str(setup)
        self._by_value = self._by_value_modules(by_value)
        self.inline_args_max = inline_args_max
        self._fn_lock = threading.Lock()
        self._functions: OrderedDict[int, Tuple[Any, str]] = collections.OrderedDict()
        super().__init__(
            client,
            url=url,
            token=token,
            poll=poll,
            batch_size=batch_size,
            log_threads=fetch_threads,
            id_prefix=id_prefix,
            lost_timeout=lost_timeout,
        )

    @staticmethod
    def _by_value_modules(modules: Iterable[Union[str, ModuleType]]) -> List[ModuleType]:
        mods = [importlib.import_module(m) if isinstance(m, str) else m for m in modules]
        if mods:
            try:
                importlib.import_module("cloudpickle")
            except ImportError:
                raise RuntimeError(
                    "by_value needs cloudpickle: pip install diffuse-client[functions]"
                ) from None
        return mods

    # ------------------------------------------------------------------ public

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> CallFuture:
        """Queues ``fn(*args, **kwargs)`` as a task; returns its :class:`CallFuture` at once.

        The function and the arguments are serialized here: one that cannot be raises
        ``TypeError`` naming it. :class:`Input` arguments are declared as inputs and become the
        staged files' paths."""
        return self.submit_call(fn, args, kwargs)

    def submit_call(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any] = (),
        kwargs: Optional[Mapping[str, Any]] = None,
        *,
        inputs: Sequence[Union[str, "os.PathLike[str]", Input]] = (),
        **task_fields: Any,
    ) -> CallFuture:
        """As :meth:`submit`, with task fields for this call (``timeout_s``, ``cores``,
        ``memory``, ``id``...; an unknown one raises ``TypeError``) and ``inputs``: files the
        task declares as inputs without passing them to the function (it is placed where they
        are cached; the worker stages them)."""
        if not callable(fn):
            raise TypeError(f"{fn!r} is not callable")
        fn_uri = self._function_uri(fn)
        kw = dict(kwargs or {})
        if args or kw:
            if self._by_value:
                with _pickling_by_value(self._by_value):
                    data, declared = _dumps_args(fn, tuple(args), kw, 1)
            else:
                data, declared = _dumps_args(fn, tuple(args), kw, 1)
        else:
            data, declared = b"", []
        task_inputs = [fn_uri, *declared]
        for x in [*inputs, *self._default_inputs]:
            u = x.uri if isinstance(x, Input) else to_uri(x)
            if u not in task_inputs[1:]:
                task_inputs.append(u)
        call = dict(self._call_base)
        if declared:
            call["entry"] = ENTRY_WITH_INPUTS
        if len(data) > self.inline_args_max:
            task_inputs.append(self.client.put_blob(data))
            call["args_input"] = len(task_inputs) - 1
        elif data:
            call["args"] = base64.b64encode(data).decode("ascii")
        if task_fields:
            own = [k for k in ("cmd", "call", "inputs") if k in task_fields]
            if own:
                raise TypeError(f"{', '.join(map(repr, own))}: set by the executor")
            task_id = str(task_fields.pop("id", None) or self._new_id())
            task = Task.from_dict(
                {**self._fields, **task_fields, "id": task_id, "call": call}
            ).to_dict()
        else:
            task_id = self._new_id()
            task = {"id": task_id, **self._fields, "call": call}
        task["inputs"] = task_inputs
        fut = CallFuture(task_id)
        self._enqueue(fut, task)
        return fut

    def __enter__(self) -> "FunctionExecutor":
        return self

    # ------------------------------------------------------------------ internals

    def _function_uri(self, fn: Callable[..., Any]) -> str:
        """The blob of ``fn``: serialized and sent once per function object (kept while it is
        among the executor's most recently used ones)."""
        key = id(fn)
        with self._fn_lock:
            hit = self._functions.get(key)
            if hit is not None and hit[0] is fn:
                self._functions.move_to_end(key)
                return hit[1]
        try:
            with _pickling_by_value(self._by_value):
                data = calls.dumps_function(fn)
        except Exception as e:
            raise TypeError(f"the function {_fn_name(fn)} cannot be serialised: {_summary(e)}") from e
        uri = self.client.put_blob(data)
        with self._fn_lock:
            self._functions[key] = (fn, uri)  # the object kept: its id is not reused meanwhile
            self._functions.move_to_end(key)
            while len(self._functions) > FUNCTION_CACHE:
                self._functions.popitem(last=False)
        return uri

    def _resolve(self, pending: _Pending, info: TaskInfo) -> None:
        fut = pending.future
        if isinstance(fut, CallFuture):
            fut.info = info
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

    def _decode(self, fut: "Future[Any]", info: TaskInfo, report: Mapping[str, Any]) -> None:
        try:
            data = call_value(self.client, report)
            if data is None:
                raise DiffuseError(f"call {info.id!r} succeeded without a result")
            value = calls.decode_result(data)
        except BaseException as e:  # the function's own exception (or a loading error)
            _fail(fut, e)
            return
        _set(fut, value)
