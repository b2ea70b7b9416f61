#!/usr/bin/env bash
# A wave of arrivals, live and simulated: the SW workload's sine-wave rate compressed to about
# 2.5 minutes (308 tasks, up to 7 per second; each reads a 100 KB file and sleeps 1 s), run on a
# dispatcher that starts local workers as the queue grows and releases them after --idle-release,
# and the same arrivals given to `diffuse sim arrivals` with the same pool settings. One SVG shows
# demand, workers and queue over time, live and simulated; a summary is printed.
# Usage: bench/wave.sh [svg=docs/img/wave.svg]   (about 3-4 minutes)
# Pool settings: WAVE_MAX_WORKERS (6), WAVE_IDLE (5 s), WAVE_STEP (all), WAVE_HANDOFF (cache
# hand-off budget per release: 4GB, or none); the wave's shape:
# WAVE_COMPRESS (36), WAVE_SCALE (0.007), see bench/wave.py.
source "$(dirname "$0")/common.sh"
SVG=${1:-docs/img/wave.svg}
MAX=${WAVE_MAX_WORKERS:-6}; IDLE=${WAVE_IDLE:-5}; STEP=${WAVE_STEP:-all}; HANDOFF=${WAVE_HANDOFF:-4GB}
# The simulator's model of this machine: the `local` testbed, with the start-up time of a local
# worker measured in this run (below) unless WAVE_STARTUP says otherwise.
python3 bench/wave.py gen "$WORK"
export DIFFUSE_CLIENT_TOKEN=c-$RANDOM$RANDOM$RANDOM DIFFUSE_WORKER_TOKEN=w-$RANDOM$RANDOM$RANDOM
port=$((20000 + RANDOM % 20000))
DIFFUSE_LOG=info "$DIFFUSE" dispatcher --listen 127.0.0.1:$port --journal "$WORK/j.sqlite" \
  --provisioner local --max-workers "$MAX" --worker-cores 1 --step "$STEP" \
  --idle-release "${IDLE}s" --worker-cache-size 100MB --pool-dir "$WORK/pool" --handoff "$HANDOFF" \
  --worker-arg=--input-root="$WORK/data" 2>"$WORK/dispatcher.log" & D=$!
# (errexit holds in a trap too: every command here must succeed for rm to run)
trap 'kill $D 2>/dev/null || true; wait $D 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do
  curl -sf -H "Authorization: Bearer $DIFFUSE_CLIENT_TOKEN" http://127.0.0.1:$port/v1/status >/dev/null && break
  sleep 0.1
done
python3 bench/wave.py drive "$WORK" http://127.0.0.1:$port "$DIFFUSE_CLIENT_TOKEN"
kill $D; wait $D 2>/dev/null || true
# Start-up of a local worker: from the pool's "worker requested" to the worker's hello, per worker.
startup=$(python3 bench/wave.py startup "$WORK")
echo "local worker start-up: $startup"
STARTUP=${WAVE_STARTUP:-$(echo "$startup" | awk '{print $2}')}
"$DIFFUSE" sim arrivals --arrivals "$WORK/arrivals.jsonl" --testbed local --nodes "$MAX" \
  --slots-per-node 1 --node-startup "$STARTUP" --step "$STEP" --idle-timeout "$IDLE" \
  --cache-size 100MB --handoff "$HANDOFF" --series "$WORK/sim.csv" --series-step 1 --json >"$WORK/sim.json"
mkdir -p "$(dirname "$SVG")"
python3 bench/wave.py plot "$WORK" "$SVG" \
  "SW wave, live (local workers) and simulated: max $MAX workers, step $STEP, idle release ${IDLE} s, start-up ${STARTUP} s"
echo "plot: $SVG"
[ -n "${WAVE_KEEP:-}" ] && { mkdir -p "$WAVE_KEEP"; cp "$WORK"/*.csv "$WORK"/*.json "$WORK"/*.jsonl "$WORK/dispatcher.log" "$WAVE_KEEP"/; echo "kept in $WAVE_KEEP"; }
exit 0
