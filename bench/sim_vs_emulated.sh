#!/usr/bin/env bash
# The simulator at the size of a cluster: for each row, a dispatcher and an emulated pool
# (`diffuse emulate`: real sessions, tasks on timers), measured by `diffuse calibrate
# --dispatch-only` into a testbed file; then WAVES tasks a slot of COMPUTE_S seconds each are
# submitted at once (makespan: from the submission to the batch's last outcome) and the same
# task file is simulated on that testbed (`diffuse sim run --provisioning static`). Prints a
# line a row (the calibrated cost of an empty task, the emulated and the simulated makespan, the
# error) and, last, the largest error of the rows of 1-s tasks or longer against the 15% goal.
# The emulator and the dispatcher share this machine's 2 cores.
# Usage: bench/sim_vs_emulated.sh [rows=1000x1:1,1000x4:1] [waves=10]
#   a row is WORKERSxSLOTS:COMPUTE_S
source "$(dirname "$0")/common.sh"
export DIFFUSE_CLIENT_TOKEN=c-$RANDOM$RANDOM DIFFUSE_WORKER_TOKEN=w-$RANDOM$RANDOM
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
python3 bench/sim_vs_emulated.py "$DIFFUSE" "$WORK" "${1:-1000x1:1,1000x4:1}" "${2:-10}"
