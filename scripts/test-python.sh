#!/usr/bin/env bash
# Tests of the Python client (python/): type checks and the pytest suite against a real
# dispatcher and two workers.
#   - a virtualenv in target/python-venv (made once, reused), with ./python[test] installed
#     from PyPI's pytest, parsl and mypy (python3-venv is installed from Debian if missing)
#   - mypy --strict on the diffuse_client package
#   - pytest python/tests: the client API, DiffuseExecutor (1,000 tasks), the Parsl executor,
#     Snakemake on diffuse (python/snakemake-executor-plugin-diffuse, with Snakemake 9.27 and
#     its plugin interfaces pinned below; Python 3.11 or newer, else those tests are skipped)
#   - then Parsl's own test suite (scripts/parsl-suite.sh), unless PARSL_SUITE=0
# The tests run the diffuse binary at $DIFFUSE_BIN, else target/release/diffuse (build it first:
# cargo build --release). PYTHON picks the interpreter (default python3; 3.9 or newer).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=target/python-venv
export DIFFUSE_BIN=${DIFFUSE_BIN:-$PWD/target/release/diffuse}
case "$DIFFUSE_BIN" in /*) ;; *) DIFFUSE_BIN=$PWD/$DIFFUSE_BIN ;; esac
if [ ! -x "$DIFFUSE_BIN" ]; then
    echo "no diffuse binary at $DIFFUSE_BIN: run cargo build --release, or set DIFFUSE_BIN" >&2
    exit 1
fi

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    rm -rf "$VENV"
    mkdir -p target
    if ! "$PYTHON" -m venv "$VENV" >/dev/null 2>&1; then
        # Debian's python3 comes without venv/ensurepip (package python3-venv)
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            echo "== installing python3-venv =="
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
            rm -rf "$VENV"
            "$PYTHON" -m venv "$VENV"
        else
            echo "cannot create a virtualenv with $PYTHON: install python3-venv" >&2
            exit 1
        fi
    fi
fi

echo "== installing ./python[test] into $VENV =="
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade --force-reinstall --no-deps ./python
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check './python[test]'
if "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "== installing ./python/snakemake-executor-plugin-diffuse and Snakemake 9.27 =="
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade --force-reinstall --no-deps ./python/snakemake-executor-plugin-diffuse
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        snakemake==9.27.0 snakemake-interface-common==1.23.0 \
        snakemake-interface-executor-plugins==9.4.0 snakemake-interface-storage-plugins==4.4.1
    SNAKEMAKE_PLUGIN=1
else
    SNAKEMAKE_PLUGIN=0
fi

echo "== mypy --strict (diffuse_client) =="
(cd python && MYPY_CACHE_DIR=../target/mypy-cache "../$VENV/bin/python" -m mypy --strict src/diffuse_client)
if [ "$SNAKEMAKE_PLUGIN" = 1 ]; then
    echo "== mypy (the Snakemake plugins; strict, see their pyproject.toml) =="
    (cd python/snakemake-executor-plugin-diffuse && MYPY_CACHE_DIR=../../target/mypy-cache \
        "../../$VENV/bin/python" -m mypy src)  # strict, as its pyproject.toml says
fi

echo "== pytest python/tests =="
(cd python && "../$VENV/bin/python" -m pytest -p no:cacheprovider -q tests "$@")

# Parsl's own suite against the executor (about 20 s with apps in warm processes, plus its
# virtualenv the first time); PARSL_SUITE=0 skips it.
if [ "${PARSL_SUITE:-1}" = 1 ]; then
    echo "== Parsl's test suite (scripts/parsl-suite.sh) =="
    exec scripts/parsl-suite.sh
fi
