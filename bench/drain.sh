#!/usr/bin/env bash
# Dispatch alone: N no-op tasks queued first (no worker), then W emulated workers of S slots
# (`diffuse emulate`) connect and drain the queue. Prints the drain rate and the dispatcher's
# CPU per task. PERF=1 also profiles the dispatcher for 3 s of the drain with `perf record` and
# prints each thread's share (the split in docs/scale.md).
# Usage: bench/drain.sh [tasks=200000] [workers=100] [slots=4]
source "$(dirname "$0")/common.sh"
N=${1:-200000}; W=${2:-100}; S=${3:-4}
export DIFFUSE_CLIENT_TOKEN=c-$RANDOM$RANDOM DIFFUSE_WORKER_TOKEN=w-$RANDOM$RANDOM
port=$((20000 + RANDOM % 20000))
"$DIFFUSE" dispatcher --listen 127.0.0.1:$port --journal "$WORK/j.sqlite" 2>"$WORK/d.log" & D=$!
E=
trap 'kill $E $D 2>/dev/null || true; rm -rf "$WORK"' EXIT
python3 - "$N" "$port" <<'PY'
import json, os, sys, time, urllib.request
n, port = int(sys.argv[1]), sys.argv[2]
tok = os.environ["DIFFUSE_CLIENT_TOKEN"]
def call(path, data=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, headers={"Authorization": f"Bearer {tok}"})
    return urllib.request.urlopen(req, timeout=600).read()
for _ in range(100):
    try: call("/v1/status"); break
    except Exception: time.sleep(0.1)
for s in range(0, n, 50000):
    call("/v1/tasks", "\n".join(json.dumps({"id": f"t{i}", "cmd": ["true"]}) for i in range(s, min(n, s + 50000))).encode())
PY
cpu() { awk '{print $14+$15}' /proc/$D/stat; }
c0=$(cpu)
if [ "${PERF:-0}" = 1 ]; then (sleep 1.5; perf record -F 999 -g -p $D -o "$WORK/perf.data" -- sleep 3 >/dev/null 2>&1) & P=$!; fi
"$DIFFUSE" emulate --dispatcher http://127.0.0.1:$port --workers "$W" --slots "$S" >"$WORK/e.out" 2>"$WORK/e.log" & E=$!
python3 - "$N" "$port" <<'PY'
import json, os, sys, time, urllib.request
n, port = int(sys.argv[1]), sys.argv[2]
tok = os.environ["DIFFUSE_CLIENT_TOKEN"]
def status():
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/status", headers={"Authorization": f"Bearer {tok}"})
    return json.loads(urllib.request.urlopen(req, timeout=600).read())
while status()["running"] == 0: time.sleep(0.002)
t = time.time()
while status()["succeeded"] < n: time.sleep(0.02)
dt = time.time() - t
print(f"drained {n} no-op tasks in {dt:.2f} s: {n/dt:.0f} tasks/s")
PY
c1=$(cpu)
python3 -c "print(f'dispatcher CPU {($c1-$c0)*10} ms: {($c1-$c0)*10000/$N:.1f} us per task')"
if [ "${PERF:-0}" = 1 ]; then
  wait $P
  perf report -i "$WORK/perf.data" --no-children --sort comm -g none --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head -4
fi
