"""The warm entry of Parsl apps (docs/warm.md): ``diffuse_client.parsl_calls:run``.

``DiffuseParslExecutor`` (with ``warm=True``, its default) sends each app as a function task
whose call runs this entry in a warm Python process on a worker, a process that imported
``parsl`` once (its ``preload``). What :mod:`diffuse_client.parsl_runner` does in a new
interpreter per app, this does in the warm process, and returns the result as the call's bytes
instead of writing a result file:

1. the arguments (the call's ``args``, or its ``args_input``) are :data:`Payload`, serialized
   by :func:`dumps` (``pickle`` for plain values, else ``parsl.serialize``);
2. the app's function is the task's input ``payload[0]``: ``parsl.serialize(func)``, a blob
   named by its SHA-256 (``payload[1]``), which the worker fetches once and caches; it is
   deserialized once per process (a reuse-mode process keeps it, as HTEX's workers keep
   Parsl's ``deserialize`` cache);
3. the ``File`` arguments are pointed at the staged inputs, the outputs at a scratch path
   (``plan``: as the runner's payload), the function is called, the outputs are copied back;
4. the return value, or the exception as a ``RemoteExceptionWrapper``, is returned serialized
   by :func:`dumps`: the task's result.

The task's ``fn`` input (``inputs[0]``) is not the app's function but :data:`POOL` (the same
bytes for every app), so that in ``isolation="reuse"`` every app shares the worker's warm
processes (a reuse-mode process is kept per function: one per app would start an interpreter
importing Parsl for each new app), as HTEX's worker processes run app after app.

A *reusable* bash app (``plan["deliver"]``, see :mod:`diffuse_client.parsl`) hands its outputs
to the worker as the task's outputs (``$DIFFUSE_TASK_DIR/outputs/<j>``), so that diffuse keeps
them with the result; one that did not succeed leaves its value in ``plan["raised"]/<task id>``
and raises :class:`NotKept`, so that the attempt fails and is never kept.

``PYTHONPATH`` in the task's environment (``task_defaults={"env": {"PYTHONPATH": ...}}``) is
put on ``sys.path`` for the call, as a new interpreter would (a warm process started before
the call cannot read it at start); a reuse-mode process puts ``sys.path`` back after the call.
"""

from __future__ import annotations

import os
import pickle
import shutil
import sys
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from parsl.app.errors import RemoteExceptionWrapper
from parsl.serialize import deserialize, serialize

from .parsl_runner import OUTPUT_DIR, copy_back, raised_name, remap_all

#: The bytes of every Parsl call's ``fn`` input: what a reuse-mode warm process is kept for
#: (one pool for all apps, as HTEX's workers). Changing them starts new warm processes.
POOL = b"diffuse_client.parsl_calls: Parsl apps (the function is an input named in the call)\n"

#: ``(function input index, function sha256, args, kwargs, plan or None)``.
Payload = Tuple[int, str, Sequence[Any], Dict[str, Any], Optional[Dict[str, Any]]]

#: Most functions a process keeps deserialized (most recently used).
CACHE_SIZE = 256

_functions: Dict[str, Callable[..., Any]] = {}


#: The first byte of :func:`dumps` bytes made by ``pickle`` (``parsl.serialize``'s begin with
#: the serializer's header, ``02\n``...).
PICKLED = b"\0"

#: Types pickled by :func:`dumps` with the standard library's C pickler (an object made of
#: these only: 10-50 times faster than Parsl's dill for the arguments and results of most
#: apps); anything else goes through ``parsl.serialize``.
_PLAIN = frozenset({type(None), bool, int, float, complex, str, bytes})
_CONTAINERS = frozenset({tuple, list, dict, set, frozenset})

#: Most objects looked at to tell a plain value (larger ones go through ``parsl.serialize``).
_PLAIN_MAX = 1000


def _plain(obj: Any) -> bool:
    """Whether ``obj`` is made only of :data:`_PLAIN` values in builtin containers."""
    todo = [obj]
    seen = 0
    while todo:
        x = todo.pop()
        t = type(x)
        seen += 1
        if seen > _PLAIN_MAX:
            return False
        if t in _PLAIN:
            continue
        if t not in _CONTAINERS:
            return False
        if t is dict:
            todo.extend(x.keys())
            todo.extend(x.values())
        else:
            todo.extend(x)
    return True


def dumps(obj: Any) -> bytes:
    """``obj`` as bytes :func:`loads` reads: :data:`PICKLED` and ``pickle`` for a plain value
    (:func:`_plain`), else ``parsl.serialize(obj)``."""
    if _plain(obj):
        return PICKLED + pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return serialize(obj, buffer_threshold=1 << 30)


def loads(data: bytes) -> Any:
    """The object :func:`dumps` (or ``parsl.serialize``) made ``data`` of."""
    if data[:1] == PICKLED:
        return pickle.loads(memoryview(data)[1:])
    return deserialize(data)


class NotKept(Exception):
    """A reusable bash app that did not succeed: its attempt fails (diffuse keeps no result),
    and its value is in the ``raised`` file the executor reads."""


def _sync_pythonpath() -> None:
    """Puts the call's ``PYTHONPATH`` entries on ``sys.path``, after ``sys.path[0]`` (where a
    new interpreter puts them), unless they are there already."""
    value = os.environ.get("PYTHONPATH")
    if not value:
        return
    at = 1 if sys.path else 0
    for entry in value.split(os.pathsep):
        if entry and entry not in sys.path:
            sys.path.insert(at, entry)
            at += 1


def load_function(path: str, digest: str) -> Callable[..., Any]:
    """The app's function in the file ``path`` (the blob named ``digest``), deserialized once
    per process."""
    fn = _functions.get(digest)
    if fn is None:
        with open(path, "rb") as f:
            fn = deserialize(f.read())
        if len(_functions) >= CACHE_SIZE:
            del _functions[next(iter(_functions))]
        _functions[digest] = fn
    return fn


def run(fn_path: str, args: bytes, inputs: List[str]) -> bytes:
    """The entry: runs the app the payload ``args`` describes; returns its serialized result.

    Raises (the task fails, the traceback on its stderr) when the function or its arguments
    cannot be loaded, an input is missing or an output cannot be copied back: the executor
    fails the app's future with :class:`~diffuse_client.parsl.DiffuseTaskFailure`."""
    _sync_pythonpath()
    payload: Payload = loads(args)
    f_index, digest, a, kw, plan = payload
    fn = load_function(inputs[f_index], digest)
    if plan is None:  # no File to remap (most python apps)
        try:
            result = fn(*a, **kw)
        except Exception:
            result = RemoteExceptionWrapper(*sys.exc_info())
        return _serialize(result)
    return _run_planned(fn, list(a), dict(kw), plan, inputs)


def _run_planned(fn: Callable[..., Any], args: List[Any], kwargs: Dict[str, Any],
                 plan: Dict[str, Any], inputs: List[str]) -> bytes:
    """The call of an app with ``File`` arguments (:mod:`diffuse_client.parsl_runner`'s run)."""
    mapping: Dict[str, str] = dict(plan.get("paths", {}))
    for key, i in plan.get("inputs", {}).items():
        mapping[key] = inputs[i]
    outputs: List[List[str]] = [list(o) for o in plan.get("outputs", [])]
    task_dir = os.environ.get("DIFFUSE_TASK_DIR", os.getcwd())
    if outputs:
        out_dir = os.path.join(task_dir, OUTPUT_DIR)
        for j, (key, dest) in enumerate(outputs):
            # a directory per output, so the app writes under the output's own base name
            local = os.path.abspath(os.path.join(out_dir, str(j), os.path.basename(dest)))
            os.makedirs(os.path.dirname(local), exist_ok=True)
            if key in mapping and os.path.exists(mapping[key]):
                # also an input: the app may read it and write it again (staged copies are
                # read-only)
                shutil.copyfile(mapping[key], local)
            mapping[key] = local
            outputs[j] = [key, dest, local]

    result: Any
    try:
        remap_all(args, kwargs, mapping, plan.get("std", {}))
        result = fn(*args, **kwargs)
    except Exception:
        result = RemoteExceptionWrapper(*sys.exc_info())

    if plan.get("deliver") is not None:
        return _finish_reusable(result, [local for _, _, local in outputs], task_dir,
                                str(plan["raised"]))
    for _key, dest, local in outputs:
        if os.path.exists(local):
            try:
                copy_back(local, dest)
            except OSError as e:
                raise OSError(f"diffuse parsl_calls: cannot copy output {dest}: {e}") from e
    return _serialize(result)


def _finish_reusable(result: Any, made: List[str], task_dir: str, raised: str) -> bytes:
    """A reusable app's end: a success (``0``) hands its outputs to the worker (the task's
    ``outputs/<j>``) and returns ``0`` serialized; anything else is written to
    ``<raised>/<task id>`` and raises :class:`NotKept`."""
    if type(result) is int and result == 0:
        for j, local in enumerate(made):
            if os.path.exists(local):
                shutil.move(local, os.path.join(task_dir, "outputs", str(j)))
        return _serialize(result)
    task_id = os.environ.get("DIFFUSE_TASK_ID")
    if not task_id:
        raise RuntimeError("diffuse parsl_calls: DIFFUSE_TASK_ID is not set (not run by a worker)")
    data = _serialize(result)
    path = os.path.join(raised, raised_name(task_id))
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    raise NotKept(f"the app did not succeed (not kept); its exception is in {path}")


def _serialize(result: Any) -> bytes:
    try:
        return dumps(result)
    except Exception:
        traceback.print_exc()
        print("diffuse parsl_calls: the app's result cannot be serialized", file=sys.stderr)
        return serialize(RemoteExceptionWrapper(*sys.exc_info()))
