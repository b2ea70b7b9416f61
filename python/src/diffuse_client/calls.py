"""Python functions as diffuse tasks, serialized with pickle (cloudpickle where installed).

Both sides of the default warm entry (docs/warm.md), ``diffuse_client.calls:call_pickled``:

- the client: :func:`dumps_function` (the task's function input), :func:`dumps_args` (its
  ``args``), and :func:`decode_result` (the task's result: the value, or the function's
  exception raised again with the remote traceback as its ``__cause__``);
- the worker's warm process: :func:`call_pickled`, which loads the function, calls it and
  returns the outcome as bytes.

The outcome is ``pickle.dumps(("ok", value))`` or ``pickle.dumps(("err", exception,
traceback_text))``. An exception that cannot be serialized (or that would not load again)
becomes a ``RuntimeError`` naming it; a value that cannot be serialized becomes a
``RuntimeError`` too (kind ``"err"``): the caller always gets an answer, never a hang.

cloudpickle is optional (``pip install diffuse-client[functions]``): with it, lambdas, nested
functions and functions defined in ``__main__`` or a notebook travel by value; without it only
functions importable on the worker by name (``module.function``) do. The worker loads either
with :func:`pickle.loads` (a cloudpickle stream imports cloudpickle itself).
"""

from __future__ import annotations

import importlib
import os
import pickle
import traceback
from types import ModuleType
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

#: Most functions kept loaded per process (a reuse-mode process runs one function).
_CACHE_SIZE = 16

_functions: Dict[Tuple[str, int, int, int], Callable[..., Any]] = {}
_cloudpickle: Optional[ModuleType] = None
_cloudpickle_missing = False


def _cp() -> Optional[ModuleType]:
    """cloudpickle, imported on first use; None where it is not installed."""
    global _cloudpickle, _cloudpickle_missing
    if _cloudpickle is None and not _cloudpickle_missing:
        try:
            _cloudpickle = importlib.import_module("cloudpickle")
        except ImportError:
            _cloudpickle_missing = True
    return _cloudpickle


def _dumps(obj: Any) -> bytes:
    """cloudpickle where installed (by value: lambdas, closures, ``__main__``), else pickle."""
    cp = _cp()
    if cp is not None:
        data: bytes = cp.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        return data
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def dumps_function(fn: Callable[..., Any]) -> bytes:
    """The bytes of a function input (the task's ``fn``)."""
    return _dumps(fn)


def dumps_args(args: Sequence[Any] = (), kwargs: Optional[Mapping[str, Any]] = None) -> bytes:
    """The bytes of a call's arguments (the task's ``args``, or its ``args_input``)."""
    return _dumps((tuple(args), dict(kwargs or {})))


def load_function(path: str) -> Callable[..., Any]:
    """The function in the file ``path``, loaded once per process (by path, inode, mtime and
    size: a new file at the same path is loaded again)."""
    st = os.stat(path)
    key = (path, st.st_ino, st.st_mtime_ns, st.st_size)
    fn = _functions.get(key)
    if fn is None:
        with open(path, "rb") as f:
            obj = pickle.load(f)
        if not callable(obj):
            raise TypeError(f"{path} holds a {type(obj).__name__}, not a function")
        fn = obj
        if len(_functions) >= _CACHE_SIZE:
            del _functions[next(iter(_functions))]
        _functions[key] = fn
    return fn


def _remote_tb(e: BaseException) -> str:
    """The traceback of ``e`` from the user's function down (without call_pickled's frame)."""
    tb = e.__traceback__
    if tb is not None and tb.tb_frame.f_code is call_pickled.__code__ and tb.tb_next is not None:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(e), e, tb))


def _summary(e: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(e), e)).strip()


def _encode_exception(e: BaseException, tb_text: str) -> bytes:
    """``("err", e, tb_text)``; ``e`` is checked to load again (an exception class whose
    ``__init__`` takes other arguments than ``args`` does not), else replaced."""
    try:
        data = _dumps(("err", e, tb_text))
        pickle.loads(data)
        return data
    except Exception as why:
        substitute = RuntimeError(
            f"the function raised {_summary(e)}, which cannot be serialised: {_summary(why)}"
        )
        return pickle.dumps(("err", substitute, tb_text), protocol=pickle.HIGHEST_PROTOCOL)


def call_pickled(fn_path: str, args: bytes, inputs: List[str]) -> bytes:
    """The warm entry: call the function in ``fn_path`` with the arguments in ``args``
    (``(args_tuple, kwargs_dict)`` pickled; empty: no arguments) and return the outcome as
    bytes. ``inputs`` (the staged inputs' paths) is not used: the arguments name the files.

    Loading the function or its arguments may raise (a module missing on the worker...): the
    call then fails as a task, its traceback on stderr. What the function raises is the
    outcome (kind ``"err"``)."""
    fn = load_function(fn_path)
    if args:
        a, kw = pickle.loads(args)
    else:
        a, kw = (), {}
    try:
        value = fn(*a, **kw)
    except BaseException as e:  # as concurrent.futures.ProcessPoolExecutor's workers
        return _encode_exception(e, _remote_tb(e))
    try:
        return pickle.dumps(("ok", value), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:
        why: BaseException = e
    cp = _cp()
    if cp is not None:  # a value pickle refuses (a lambda...) may go by value
        try:
            data: bytes = cp.dumps(("ok", value), protocol=pickle.HIGHEST_PROTOCOL)
            return data
        except Exception as e:
            why = e
    try:
        shown = repr(value)
    except Exception:
        shown = f"<{type(value).__name__}>"
    if len(shown) > 200:
        shown = shown[:200] + "..."
    err = RuntimeError(
        f"the function returned {shown} ({type(value).__module__}."
        f"{type(value).__qualname__}), which cannot be serialised: {_summary(why)}"
    )
    tb_text = "".join(traceback.format_exception(type(why), why, why.__traceback__))
    return pickle.dumps(("err", err, tb_text), protocol=pickle.HIGHEST_PROTOCOL)


class RemoteTraceback(Exception):
    """The traceback of an exception raised on a worker: the ``__cause__`` of the exception
    :func:`decode_result` raises (as ``concurrent.futures.process`` does)."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


def decode_result(data: bytes) -> Any:
    """The value a call returned, or raise the exception it raised (its ``__cause__`` a
    :class:`RemoteTraceback` with the worker's traceback)."""
    try:
        outcome = pickle.loads(data)
    except Exception as e:
        raise RuntimeError(
            f"the call's result ({len(data)} bytes) cannot be loaded here: {_summary(e)}"
        ) from e
    if not isinstance(outcome, tuple) or not outcome or outcome[0] not in ("ok", "err"):
        raise RuntimeError(f"the call's result is not an outcome of call_pickled: {outcome!r:.200}")
    if outcome[0] == "ok":
        return outcome[1]
    exc, tb_text = outcome[1], outcome[2]
    if not isinstance(exc, BaseException):
        exc = RuntimeError(repr(exc))
    exc.__cause__ = RemoteTraceback(f'\n"""\n{tb_text}"""')
    raise exc
