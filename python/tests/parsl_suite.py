"""Parsl's own test suite against DiffuseParslExecutor (run by scripts/parsl-suite.sh).

Starts a real dispatcher and two workers (as the pytest fixtures do, helpers.Cluster), writes a
Parsl config module whose ``fresh_config()`` is the configuration python/README.md recommends
(``DiffuseParslExecutor`` with its defaults, the staging directory on the shared file system),
and runs ``pytest <parsl>/tests -k "not cleannet" --config <module>`` from a scratch directory.
Extra arguments go to pytest. ``--input-paths cached|original`` runs the executor with that
``input_paths`` instead of the default ``"auto"``. The dispatcher reuses results unless
``$DIFFUSE_REUSE`` is ``off``; at the end the suite prints how many tasks were reused.

Exit status: pytest's.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
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
        )],
        strategy="none",
    )


config = fresh_config()
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input-paths", default="auto", choices=["auto", "cached", "original"])
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    opts = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="parsl-suite-"))
    cluster = Cluster(root)
    try:
        cluster.start()
        cfg = root / "diffuse_suite_config.py"
        cfg.write_text(CONFIG.format(url=cluster.url, token=str(cluster.token_file),
                                     input_paths=opts.input_paths))
        tests = Path(parsl.__file__).parent / "tests"
        work = root / "work"  # Parsl's tests write pytest-parsl/ and runinfo/ in the cwd
        work.mkdir()
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(tests),
               "-k", "not cleannet", "--config", str(cfg), *opts.pytest_args]
        print("+", " ".join(cmd), flush=True)
        code = subprocess.call(cmd, cwd=work)
        kept = cluster.client().results()
        print(f"diffuse: reuse {'on' if kept.reuse else 'off'}, {kept.reused} task(s) reused, "
              f"{kept.results} result(s) kept", flush=True)
        return code
    finally:
        cluster.stop()
        if opts.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
