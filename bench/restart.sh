#!/usr/bin/env bash
# A queue of N no-op tasks (`["true"]`, no workers connected): acknowledged submissions per second
# (POSTed in batches of 50,000, each answered once committed to the journal), then the
# dispatcher killed (SIGKILL) and started again on the same journal: seconds until /v1/status
# answers, and until it shows all N queued.
# Usage: bench/restart.sh [tasks=1000000]
source "$(dirname "$0")/common.sh"
N=${1:-1000000}
export DIFFUSE_CLIENT_TOKEN=c-$RANDOM$RANDOM DIFFUSE_WORKER_TOKEN=w-$RANDOM$RANDOM
port=$((20000 + RANDOM % 20000))
start() { "$DIFFUSE" dispatcher --listen 127.0.0.1:$port --journal "$WORK/j.sqlite" 2>>"$WORK/d.log" & D=$!; }
start
trap 'kill -9 $D 2>/dev/null || true; rm -rf "$WORK"' EXIT
python3 - "$N" "$port" "$WORK" <<'PY'
import json, os, sys, time, urllib.request
n, port, work = int(sys.argv[1]), sys.argv[2], sys.argv[3]
tok = os.environ["DIFFUSE_CLIENT_TOKEN"]
def call(path, data=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, headers={"Authorization": f"Bearer {tok}"})
    return urllib.request.urlopen(req, timeout=600).read()
for _ in range(100):
    try: call("/v1/status"); break
    except Exception: time.sleep(0.1)
bodies = ["\n".join(json.dumps({"id": f"t{i}", "cmd": ["true"]}) for i in range(s, min(n, s + 50000))).encode() for s in range(0, n, 50000)]
t = time.perf_counter()
for b in bodies: call("/v1/tasks", b)
dt = time.perf_counter() - t
print(f"submitted {n} tasks in {dt:.2f} s: {n/dt:.0f} acknowledged tasks/s")
PY
kill -9 $D; wait $D 2>/dev/null || true
t0=$(date +%s.%N)
start
python3 - "$N" "$port" "$t0" <<'PY'
import json, os, sys, time, urllib.request
n, port, t0 = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
tok = os.environ["DIFFUSE_CLIENT_TOKEN"]
answered = None
while True:
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/status", headers={"Authorization": f"Bearer {tok}"})
        s = json.loads(urllib.request.urlopen(req, timeout=600).read())
        answered = answered or time.time() - t0
        if s["queued"] >= n: break
    except Exception:
        pass
    time.sleep(0.01)
print(f"restart with {n} queued: /v1/status answered after {answered:.2f} s, all {n} queued after {time.time()-t0:.2f} s")
PY
