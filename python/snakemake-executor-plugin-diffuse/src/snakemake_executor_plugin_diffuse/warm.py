"""Snakemake jobs run warm: the entry a diffuse worker's warm process calls for each job.

The executor submits each job as a *function task* (docs/warm.md) instead of a command: the
worker keeps a warm Python process that imported Snakemake once (:mod:`.preload`), forks a child
per job, and the child calls :func:`run_job`, which does what ``python -m snakemake ARGV`` does
in a new process: the same ``snakemake.cli.main``, the same arguments, environment, working
directory (the task's ``cwd``), stdout and stderr (captured by the worker as a process task's),
exit code and signals. What differs is what the fork saves: the interpreter's start and
Snakemake's imports, about 0.9 s of CPU per job, and the second a cold job waits at its end for
Snakemake's rate-limiter timer.

The task's ``call``::

    {"fn": <index of the FUNCTION blob in the inputs>, "args": base64(encode_args(...)),
     "entry": ENTRY, "python": <the job's interpreter>, "preload": PRELOAD, "isolation": "fork"}

``args`` is a JSON object: ``argv``, the job's arguments after ``python -m snakemake`` (what
``format_job_exec`` gives every remote executor), and ``staged``, whether the job reads its
inputs from the task's staged copies (``SNAKEMAKE_DIFFUSE_STAGED`` is then set to the task's
``inputs`` directory, as the cold command's ``export`` does). The function input itself is a
constant (:data:`FUNCTION`): one small blob, cached once per worker.

What the child puts back to a fresh interpreter's state (target/research/snakemake-warm.md §2.3,
§4; the warm process already restored signals, the environment, the working directory, stdio,
``sys.argv`` and ``sys.path[0]``, atexit, and joins threads at the end):

- ``sys.argv[0]``: Snakemake's ``__main__.py``, as ``-m snakemake`` sets it;
- ``Workflow._rundir``: a class attribute Snakemake sets to the working directory at import
  (the zygote's), shown as "Run directory" and given to logger plugins;
- the job rate limiter's ``threading.Timer`` (1 s by default, ``--max-jobs-per-timespan``) is
  cancelled once ``main`` returns: a cold job's interpreter waits for it at exit, doing nothing.

A job whose environment changes what an interpreter fixes at its start (``PYTHONPATH``,
``PYTHONHASHSEED``, any other ``PYTHON*`` variable, the locale: ``--envvars`` can pass these)
runs ``python -m snakemake ARGV`` as a new process instead, from the same child.

The entry returns ``b""`` when the job's Snakemake exits 0, and raises ``SystemExit(code)``
otherwise: the warm process's child then exits with that code, and the task fails with it, as
the cold command would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any, Dict, List, Mapping, Sequence

#: The entry, ``module:function``.
ENTRY = "snakemake_executor_plugin_diffuse.warm:run_job"
#: What the warm process imports before forking (importing it preloads Snakemake).
PRELOAD = ["snakemake_executor_plugin_diffuse.preload"]
#: The function input's bytes: a constant (the job is in the arguments), put once as a blob.
FUNCTION = b"snakemake_executor_plugin_diffuse.warm:run_job\n"
#: The version of :func:`encode_args`'s object.
ARGS_VERSION = 1


def _fixed_at_start(name: str) -> bool:
    """Whether an environment variable is read by the interpreter at its start only (its
    value in a forked child cannot take effect)."""
    return name.startswith("PYTHON") or name in ("LANG", "LC_ALL", "LC_CTYPE")


#: Those variables as this process started (imported in the warm process before it forks).
_START_ENV: Dict[str, str] = {k: v for k, v in os.environ.items() if _fixed_at_start(k)}


def encode_args(argv: Sequence[str], staged: bool) -> bytes:
    """The call's argument bytes for a job: its ``python -m snakemake`` arguments."""
    return json.dumps(
        {"v": ARGS_VERSION, "argv": [str(a) for a in argv], "staged": bool(staged)},
        separators=(",", ":"),
    ).encode("utf-8")


def decode_args(data: bytes) -> Dict[str, Any]:
    """The object :func:`encode_args` made."""
    spec = json.loads(data.decode("utf-8"))
    if not isinstance(spec, dict) or spec.get("v") != ARGS_VERSION or not isinstance(spec.get("argv"), list):
        raise ValueError(
            f"not the arguments of a Snakemake job of this plugin's version ({ARGS_VERSION}): "
            f"{data[:200]!r}"
        )
    return spec


def changed_at_start(environ: Mapping[str, str]) -> List[str]:
    """The variables fixed at an interpreter's start whose value in ``environ`` is not this
    process's at its start."""
    names = {k for k in environ if _fixed_at_start(k)} | set(_START_ENV)
    return sorted(k for k in names if environ.get(k) != _START_ENV.get(k))


def _exit_status(code: Any) -> int:
    """The status an interpreter exits with for ``SystemExit(code)`` (a message printed)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def cancel_rate_limiter_timers() -> int:
    """Cancel the ``threading.Timer`` Snakemake's job scheduler leaves for its rate limiter
    (``JobScheduler._schedule_reevalutation``): it only releases a semaphore nobody waits on
    once the job has run, and an interpreter's exit waits for it (up to a second). Only timers
    whose function comes from ``snakemake/scheduling/job_scheduler.py``. Returns how many."""
    n = 0
    for t in threading.enumerate():
        fn = getattr(t, "function", None)
        code = getattr(fn, "__code__", None)
        where = getattr(code, "co_filename", "") or ""
        if isinstance(t, threading.Timer) and where.replace(os.sep, "/").endswith(
            "snakemake/scheduling/job_scheduler.py"
        ):
            t.cancel()
            n += 1
    return n


def _run_in_process(argv: List[str]) -> int:
    """``snakemake.cli.main(argv)`` as ``python -m snakemake ARGV`` runs it; its exit status."""
    import snakemake
    import snakemake.workflow
    from snakemake.cli import main

    # -m snakemake: argv[0] is the module's file (Snakemake's header prints " ".join(argv));
    # never import snakemake.__main__, which calls main() when imported
    sys.argv[:] = [os.path.join(os.path.dirname(snakemake.__file__), "__main__.py"), *argv]
    # a class attribute set to the working directory when snakemake.workflow was imported
    snakemake.workflow.Workflow._rundir = os.getcwd()
    try:
        main(argv)
        return 0  # main always exits; as an interpreter whose main module returned
    except SystemExit as e:
        return _exit_status(e.code)
    finally:
        cancel_rate_limiter_timers()


def _run_new_process(argv: List[str], why: List[str]) -> int:
    """``python -m snakemake ARGV`` as a new process (its stdio, cwd and environment are this
    child's); its exit status, as a shell would give it."""
    sys.stderr.write(
        f"diffuse: {', '.join(why)} differ(s) from the warm process's: this job runs in a new "
        "interpreter\n"
    )
    sys.stderr.flush()
    p = subprocess.run([sys.executable, "-m", "snakemake", *argv], stdin=subprocess.DEVNULL)
    return p.returncode if p.returncode >= 0 else 128 - p.returncode


def run_job(fn_path: str, args: bytes, inputs: List[str]) -> bytes:
    """The warm entry: run the Snakemake job ``args`` names (:func:`encode_args`) in this
    process, a child forked from the warm process, in the task's working directory and
    environment. ``b""`` when it succeeded; ``SystemExit(status)`` otherwise. ``fn_path`` (the
    constant :data:`FUNCTION`) and ``inputs`` (the staged inputs, which the storage plugin finds
    through ``SNAKEMAKE_DIFFUSE_INPUTS``) are not used."""
    spec = decode_args(args)
    argv = [str(a) for a in spec["argv"]]
    if spec.get("staged"):
        from snakemake_storage_plugin_diffuse import ENV_STAGED

        task_dir = os.environ.get("DIFFUSE_TASK_DIR")
        if not task_dir:
            raise RuntimeError("no DIFFUSE_TASK_DIR: run_job runs in a diffuse task")
        os.environ[ENV_STAGED] = os.path.join(task_dir, "inputs")
    changed = changed_at_start(os.environ)
    status = _run_new_process(argv, changed) if changed else _run_in_process(argv)
    if status != 0:
        raise SystemExit(status)
    return b""
