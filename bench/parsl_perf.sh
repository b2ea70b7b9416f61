#!/usr/bin/env bash
# parsl-perf (Parsl's own benchmark) with HTEX and with DiffuseParslExecutor side by side, then
# 1,000 no-op apps with each: see bench/parsl_perf.py (arguments go to it) and
# docs/performance.md, "Parsl apps in warm processes". Uses the test virtualenv
# (target/python-venv: parsl, made by scripts/test-python.sh; or $VENV) and its bin on PATH, as
# HTEX needs; the diffuse binary at $DIFFUSE_BIN, else target/release/diffuse.
#   bench/parsl_perf.sh                   # --time 20, 1,000 apps, both executors
#   bench/parsl_perf.sh --rounds 2 --nolog
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-target/python-venv}
if [ ! -x "$VENV/bin/parsl-perf" ]; then
    echo "no parsl-perf in $VENV: run scripts/test-python.sh first (or set VENV)" >&2
    exit 1
fi
export DIFFUSE_BIN=${DIFFUSE_BIN:-$PWD/target/release/diffuse}
export PATH="$PWD/$VENV/bin:$PATH"
exec "$VENV/bin/python" bench/parsl_perf.py "$@"
