#!/usr/bin/env bash
# METG(50%), Task Bench's measure: the smallest task duration at which diffuse still keeps 50%
# efficiency, for process tasks (`diffuse run` beside `xargs -P` and GNU parallel where
# installed) and for function tasks (Parsl apps on HTEX and on diffuse, and FunctionExecutor
# calls): see bench/metg.py (arguments go to it). The function part needs the test virtualenv
# (target/python-venv, made by scripts/test-python.sh; or $VENV); without it, process tasks only.
#   bench/metg.sh                     # both, slots = cores
#   bench/metg.sh --only process
source "$(dirname "$0")/common.sh"
VENV=${VENV:-target/python-venv}
export DIFFUSE_BIN="$DIFFUSE"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import parsl" 2>/dev/null; then
    export PATH="$PWD/$VENV/bin:$PATH"
    exec "$VENV/bin/python" bench/metg.py "$@"
fi
echo "no Parsl in $VENV: process tasks only" >&2
exec python3 bench/metg.py --only process "$@"
