#!/usr/bin/env bash
# Parsl's own test suite (the tests Parsl runs every executor against) with DiffuseParslExecutor
# configured as python/README.md recommends, against a real dispatcher and two workers:
#   pytest <parsl>/tests -k "not cleannet" --config <a fresh_config() module>
# See python/tests/parsl_suite.py. Its own virtualenv (target/parsl-suite-venv): Parsl's
# conftest needs pytest < 9, and the tests import a few packages parsl does not require.
# Arguments after -- go to pytest: scripts/parsl-suite.sh -- -x --deselect ... (a second -k
# replaces "not cleannet").
# --input-paths cached|original runs the executor with that input_paths (default: "auto");
# --cold with warm=False (a process per app); --isolation fork forks python apps;
# --executor htex runs the same tests against Parsl's HighThroughputExecutor, for comparison.
# The pytest run's wall time is printed at the end.
# The diffuse binary is $DIFFUSE_BIN, else target/release/diffuse.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=target/parsl-suite-venv
export DIFFUSE_BIN=${DIFFUSE_BIN:-$PWD/target/release/diffuse}
case "$DIFFUSE_BIN" in /*) ;; *) DIFFUSE_BIN=$PWD/$DIFFUSE_BIN ;; esac
if [ ! -x "$DIFFUSE_BIN" ]; then
    echo "no diffuse binary at $DIFFUSE_BIN: run cargo build --release, or set DIFFUSE_BIN" >&2
    exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    mkdir -p target
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade --force-reinstall --no-deps ./python
# parsl[monitoring] and pandas: the monitoring tests import them (Parsl's test-requirements)
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check './python[parsl]' \
    'parsl[monitoring]' pandas 'pytest>=7,<9'

# HTEX starts interchange.py and process_worker_pool.py by name (--executor htex)
export PATH="$PWD/$VENV/bin:$PATH"
cd python/tests
exec "../../$VENV/bin/python" parsl_suite.py "$@"
