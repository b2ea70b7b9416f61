"""Runs one Parsl app on a diffuse worker, as a process of its own (the task that
``DiffuseParslExecutor(warm=False)`` submits; by default apps are calls in warm processes,
:mod:`diffuse_client.parsl_calls`, which uses the helpers here).

Usage::

    python -m diffuse_client.parsl_runner FUNCTION PAYLOAD RESULT [INPUT...]

``FUNCTION`` is the app's function serialized with ``parsl.serialize``, ``PAYLOAD`` its
arguments and file plan, both staged by diffuse into the task's directory (they are the task's
first two inputs). ``INPUT...`` are the staged (cached) copies of the app's input files, in the
order of the plan. ``RESULT`` is the task's output: the function's return value, or the
exception it raised as a ``RemoteExceptionWrapper``, serialized with ``parsl.serialize``.

As TaskVine's ``exec_parsl_function.py`` does, each ``File`` argument gets its ``local_path``
set to where its data is here: an input to its staged copy (``<task>/inputs/<i>/<base name>``),
so a bash app's ``{inputs[0]}`` reads the cached copy; an output to a scratch path with the same
base name (``parsl-outputs/<j>/<base name>``), copied to the ``File``'s own path (shared
storage) after the function returns; other files, and every file under
``input_paths="original"``, to their absolute path. ``stdout``/``stderr``
of bash apps are opened at their absolute paths, so they append as Parsl expects.

Exit status: 0 once the result file is written (whatever the app did); 1 if the inputs could
not be read, an output could not be copied back or the result could not be written (then the
reason is on stderr, and the executor fails the app's future with it).

A reusable bash app (its payload has ``deliver``; ``RESULT`` is ``-``) is run so that diffuse
keeps only a success: its outputs are handed to the worker (``INPUT...`` is followed by the
task's ``{outputs[j]}`` paths, at the positions ``deliver`` gives), which writes them to their
URIs and keeps them for reuse. If the app returned ``0`` (a bash app's success) the runner exits
0 and writes nothing else; otherwise (a ``RemoteExceptionWrapper``: the command failed, an
output is missing...) it writes that value to ``<raised>/<task id>`` and exits
:data:`EXIT_NOT_KEPT`, so the attempt is failed for diffuse (never kept, never reused) and the
executor completes the app's future with the value.
"""

from __future__ import annotations

import os
import shutil
import sys
import traceback
from typing import Any, Dict, List, Mapping, Sequence

from parsl.app.errors import RemoteExceptionWrapper
from parsl.data_provider.files import File
from parsl.serialize import deserialize, serialize
from parsl.utils import get_std_fname_mode

#: Directory (in the task's scratch directory) where outputs are written before being copied.
OUTPUT_DIR = "parsl-outputs"

#: Exit status of a reusable app's task whose app did not succeed (its value is in ``raised``).
EXIT_NOT_KEPT = 3


def raised_name(task_id: str) -> str:
    """The file name, in the ``raised`` directory, of a task's value when it did not succeed."""
    return task_id.replace(os.sep, "_").replace("\0", "_")


def remap_file(f: Any, mapping: Mapping[str, str]) -> None:
    """Sets ``f.local_path`` to where its data is on this worker, if ``f`` is a mapped ``File``."""
    if not isinstance(f, File):
        return
    if f.scheme == "file" or f.local_path:
        key = f.filepath
        if key in mapping:
            f.local_path = mapping[key]


def remap_all(
    args: Sequence[Any], kwargs: Dict[str, Any], mapping: Mapping[str, str], std: Mapping[str, str]
) -> None:
    """Remaps the ``File`` objects of a call: positional ones, ``inputs``, ``outputs``, others."""
    for a in args:
        remap_file(a, mapping)
    for k, v in kwargs.items():
        if k in ("inputs", "outputs"):
            for f in v or []:
                remap_file(f, mapping)
        elif k in ("stdout", "stderr"):
            continue
        else:
            remap_file(v, mapping)
    for k, path in std.items():
        spec = kwargs.get(k)
        if isinstance(spec, File):
            spec.local_path = path
        elif spec is not None:
            _, mode = get_std_fname_mode(k, spec)
            kwargs[k] = (path, mode)


def copy_back(local: str, dest: str) -> None:
    """Copies an output to its destination: a temporary name beside it, then a rename."""
    d = os.path.dirname(dest)
    if d:
        os.makedirs(d, exist_ok=True)
    tmp = f"{dest}.diffuse-{os.getpid()}.tmp"
    try:
        shutil.copyfile(local, tmp)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def run(function_path: str, payload_path: str, result_path: str, local_inputs: List[str]) -> int:
    """Loads, remaps, calls, copies outputs back and writes the result; returns the exit code."""
    try:
        with open(function_path, "rb") as f:
            fn = deserialize(f.read())
        with open(payload_path, "rb") as f:
            payload: Dict[str, Any] = deserialize(f.read())
    except Exception:
        traceback.print_exc()
        print("diffuse parsl_runner: cannot load the function or its arguments", file=sys.stderr)
        return 1
    args: List[Any] = list(payload["args"])
    kwargs: Dict[str, Any] = dict(payload["kwargs"])
    mapping: Dict[str, str] = dict(payload.get("paths", {}))
    for key, i in payload.get("inputs", {}).items():
        mapping[key] = local_inputs[i]
    outputs: List[List[str]] = [list(o) for o in payload.get("outputs", [])]
    # the task's scratch directory: its working directory may be another (the executor's app_cwd)
    out_dir = os.path.join(os.environ.get("DIFFUSE_TASK_DIR", os.getcwd()), OUTPUT_DIR)
    os.makedirs(out_dir, exist_ok=True)
    for j, (key, dest) in enumerate(outputs):
        # a directory per output, so the app writes under the output's own base name
        local = os.path.abspath(os.path.join(out_dir, str(j), os.path.basename(dest)))
        os.makedirs(os.path.dirname(local), exist_ok=True)
        if key in mapping and os.path.exists(mapping[key]):
            # also an input: the app may read it and write it again (staged copies are read-only)
            shutil.copyfile(mapping[key], local)
        mapping[key] = local
        outputs[j] = [key, dest, local]

    result: Any
    try:
        remap_all(args, kwargs, mapping, payload.get("std", {}))
        result = fn(*args, **kwargs)
    except Exception:
        result = RemoteExceptionWrapper(*sys.exc_info())

    deliver = payload.get("deliver")
    if deliver is not None:
        return finish_reusable(result, [local for _, _, local in outputs],
                               [local_inputs[k] for k in deliver], str(payload["raised"]))
    for _key, dest, local in outputs:
        if os.path.exists(local):
            try:
                copy_back(local, dest)
            except OSError as e:
                print(f"diffuse parsl_runner: cannot copy output {dest}: {e}", file=sys.stderr)
                return 1
    try:
        data = serialize(result)
    except Exception:
        traceback.print_exc()
        print("diffuse parsl_runner: the app's result cannot be serialized", file=sys.stderr)
        data = serialize(RemoteExceptionWrapper(*sys.exc_info()))
    with open(result_path, "wb") as f:
        f.write(data)
    return 0


def finish_reusable(result: Any, made: List[str], delivered: List[str], raised: str) -> int:
    """Ends a reusable app's task: a success hands its outputs (``made``, where the app wrote
    them) to the worker (``delivered``, its ``{outputs[j]}``) and exits 0; anything else is
    written to ``<raised>/<task id>`` and exits :data:`EXIT_NOT_KEPT`."""
    if type(result) is int and result == 0:
        for local, out in zip(made, delivered):
            if os.path.exists(local):
                shutil.move(local, out)
        return 0
    task_id = os.environ.get("DIFFUSE_TASK_ID")
    if not task_id:
        print("diffuse parsl_runner: DIFFUSE_TASK_ID is not set (not run by a diffuse worker)",
              file=sys.stderr)
        return 1
    try:
        data = serialize(result)
    except Exception:
        traceback.print_exc()
        data = serialize(RemoteExceptionWrapper(*sys.exc_info()))
    path = os.path.join(raised, raised_name(task_id))
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return EXIT_NOT_KEPT


def main(argv: List[str]) -> int:
    """Entry point: ``FUNCTION PAYLOAD RESULT [INPUT...]``."""
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    return run(argv[0], argv[1], argv[2], argv[3:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
