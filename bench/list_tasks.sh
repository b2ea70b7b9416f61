#!/usr/bin/env bash
# Listing tasks with 26,000 known to the dispatcher, 20,000 of them ended (run by a --noop worker)
# and 6,000 queued: milliseconds per GET /v1/tasks call, for a state that holds nothing
# (state=running&limit=10), a page of 1,000 queued tasks and a page of 1,000 succeeded ones (their
# outcomes read from the journal). Before the index by state (commit 786039c) every call built a
# view of every task on the scheduler thread, reading the journal for each ended one.
# Usage: bench/list_tasks.sh [ended=20000] [queued=6000]
source "$(dirname "$0")/common.sh"
E=${1:-20000}; Q=${2:-6000}
export DIFFUSE_CLIENT_TOKEN=c-$RANDOM$RANDOM DIFFUSE_WORKER_TOKEN=w-$RANDOM$RANDOM
port=$((20000 + RANDOM % 20000))
"$DIFFUSE" dispatcher --listen 127.0.0.1:$port --journal "$WORK/j.sqlite" 2>"$WORK/d.log" & D=$!
W=
trap 'kill $D $W 2>/dev/null || true; rm -rf "$WORK"' EXIT
sleep 0.5
"$DIFFUSE" worker --dispatcher http://127.0.0.1:$port --cache-dir "$WORK/w" --cache-size 1MB --slots 64 --noop 2>"$WORK/w.log" & W=$!
python3 - "$E" "$Q" "$port" "$W" <<'PY'
import json, os, sys, time, urllib.request, signal
e, q, port, w = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
tok = os.environ["DIFFUSE_CLIENT_TOKEN"]
def call(path, data=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, headers={"Authorization": f"Bearer {tok}"})
    return urllib.request.urlopen(req).read()
def submit(lo, hi):
    for start in range(lo, hi, 5000):
        call("/v1/tasks", "\n".join(json.dumps({"id": f"t{i}", "cmd": ["true"]}) for i in range(start, min(hi, start + 5000))).encode())
submit(0, e)
while json.loads(call("/v1/status"))["succeeded"] < e:
    time.sleep(0.1)
os.kill(w, signal.SIGTERM)
while json.loads(call("/v1/status"))["workers"] > 0:
    time.sleep(0.1)
submit(e, e + q)
for path in ["/v1/tasks?state=running&limit=10", "/v1/tasks?state=queued&limit=1000", "/v1/tasks?state=succeeded&limit=1000"]:
    call(path)
    times = []
    for _ in range(20):
        t = time.perf_counter(); call(path); times.append(time.perf_counter() - t)
    times.sort()
    print(f"{e} ended + {q} queued: GET {path}: median {times[10]*1000:.1f} ms (min {times[0]*1000:.1f}, max {times[-1]*1000:.1f})")
PY
