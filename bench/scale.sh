#!/usr/bin/env bash
# The dispatcher at the size of a cluster: `diffuse emulate` holds N worker sessions of 4 slots
# in one process (the real protocol; each task "runs" for its compute_s on a timer, as Falkon
# measured its dispatcher with emulated executors). For each N: seconds until all connected;
# dispatched no-op tasks/s (NOOP tasks plus the probe's, from the first submission to the last
# outcome); tasks/s for 1-s tasks (two waves of the whole pool; the ideal is N x 4 per s); the
# dispatcher's CPU seconds and RSS over the no-op phase; and p50/p99 latency of GET /v1/status,
# of a task listing and of a 10,000-task submission, probed while the no-op phase runs.
# The emulator takes one core of this 2-core machine: what is left is the dispatcher's.
# EMULATOR_BIN=path runs the emulator of another build (to measure a dispatcher built before
# `diffuse emulate` existed, with DIFFUSE_BIN).
# DISPATCHER_ARGS="--ready-tasks 1" passes options to the dispatcher.
# Usage: bench/scale.sh [workers=10,100,1000,10000] [noop_tasks=200000]
source "$(dirname "$0")/common.sh"
export DIFFUSE_CLIENT_TOKEN=c-$RANDOM$RANDOM DIFFUSE_WORKER_TOKEN=w-$RANDOM$RANDOM
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
python3 bench/scale.py "$DIFFUSE" "${EMULATOR_BIN:-$DIFFUSE}" "$WORK" "${1:-10,100,1000,10000}" "${2:-200000}"
