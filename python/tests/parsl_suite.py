"""Parsl's own test suite against DiffuseParslExecutor (run by scripts/parsl-suite.sh).

Starts a real dispatcher and two workers (as the pytest fixtures do, helpers.Cluster), writes a
Parsl config module whose ``fresh_config()`` is the configuration python/README.md recommends
(``DiffuseParslExecutor`` with its defaults, the staging directory on the shared file system),
and runs ``pytest <parsl>/tests -k "not cleannet" --config <module>`` from a scratch directory.
Extra arguments go to pytest. ``--input-paths cached|original`` runs the executor with that
``input_paths`` instead of the default ``"auto"``; ``--cold`` with ``warm=False`` (each app a
process of its own, ``python -m diffuse_client.parsl_runner``); ``--isolation fork`` with
python apps forked from the warm process. The dispatcher reuses results unless
``$DIFFUSE_REUSE`` is ``off``; at the end the suite prints how many tasks were reused.

``--executor htex`` runs the same tests against Parsl's HighThroughputExecutor instead (4
workers on 127.0.0.1, a LocalProvider block; no dispatcher), for comparison; its interpreter's
``bin`` must be on ``PATH`` (HTEX starts ``interchange.py`` and ``process_worker_pool.py`` by
name; scripts/parsl-suite.sh puts it there). The wall time of the pytest run is printed at the
end for either.

Exit status: pytest's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import parsl

from helpers import Cluster

CONFIG = '''\
"""DiffuseParslExecutor against a dispatcher started by parsl_suite.py."""
from parsl.config import Config

from diffuse_client.parsl import DiffuseParslExecutor


def fresh_config():
    return Config(
        executors=[DiffuseParslExecutor(
            label="diffuse",
            url={url!r},
            token_file={token!r},
            input_paths={input_paths!r},
            warm={warm!r},
            isolation={isolation!r},
        )],
        strategy="none",
    )


config = fresh_config()
'''

HTEX_CONFIG = '''\
"""Parsl's HighThroughputExecutor, for comparison with DiffuseParslExecutor (parsl_suite.py)."""
from parsl.config import Config
from parsl.executors import HighThroughputExecutor
from parsl.providers import LocalProvider


def fresh_config():
    return Config(executors=[HighThroughputExecutor(
        label="htex", address="127.0.0.1", loopback_address="127.0.0.1",
        max_workers_per_node=4, provider=LocalProvider(init_blocks=1, max_blocks=1))])


config = fresh_config()
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input-paths", default="auto", choices=["auto", "cached", "original"])
    ap.add_argument("--cold", action="store_true", help="warm=False: a process per app")
    ap.add_argument("--isolation", default="reuse", choices=["reuse", "fork"])
    ap.add_argument("--executor", default="diffuse", choices=["diffuse", "htex"])
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    opts = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="parsl-suite-"))
    cluster = Cluster(root) if opts.executor == "diffuse" else None
    try:
        if cluster is not None:
            cluster.start()
            cfg = root / "diffuse_suite_config.py"
            cfg.write_text(CONFIG.format(url=cluster.url, token=str(cluster.token_file),
                                         input_paths=opts.input_paths, warm=not opts.cold,
                                         isolation=opts.isolation))
        else:
            cfg = root / "htex_suite_config.py"
            cfg.write_text(HTEX_CONFIG)
        tests = Path(parsl.__file__).parent / "tests"
        work = root / "work"  # Parsl's tests write pytest-parsl/ and runinfo/ in the cwd
        work.mkdir()
        select = "not cleannet"
        if os.geteuid() == 0:
            # They check that a bash app cannot open /bad/dir/... for its output, which root
            # can (and they leave /bad behind): they fail for every executor run as root.
            select += " and not test_bad_stdout_file and not test_bad_stderr_file"
            print("as root: the 2 tests of unwritable stdout/stderr paths are left out", flush=True)
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(tests),
               "-k", select, "--config", str(cfg), *opts.pytest_args]
        print("+", " ".join(cmd), flush=True)
        t0 = time.monotonic()
        code = subprocess.call(cmd, cwd=work)
        print(f"{opts.executor}: pytest took {time.monotonic() - t0:.1f} s", flush=True)
        if cluster is not None:
            kept = cluster.client().results()
            print(f"diffuse: reuse {'on' if kept.reuse else 'off'}, {kept.reused} task(s) reused, "
                  f"{kept.results} result(s) kept", flush=True)
        return code
    finally:
        if cluster is not None:
            cluster.stop()
        if opts.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
