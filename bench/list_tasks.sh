#!/usr/bin/env bash
# Listing tasks while 26,000 are queued (no workers): milliseconds per GET /v1/tasks call, for a
# state that holds nothing (state=running&limit=10) and for a page of 1,000 queued tasks. Before
# the index by state (commit 786039c) every call read every task on the scheduler thread.
# Usage: bench/list_tasks.sh [tasks=26000] [binary=target/release/diffuse]
source "$(dirname "$0")/common.sh"
N=${1:-26000}
BIN=${2:-$DIFFUSE}
export DIFFUSE_CLIENT_TOKEN=c-$RANDOM$RANDOM DIFFUSE_WORKER_TOKEN=w-$RANDOM$RANDOM
port=$((20000 + RANDOM % 20000))
"$BIN" dispatcher --listen 127.0.0.1:$port --journal "$WORK/j.sqlite" 2>"$WORK/d.log" & D=$!
trap 'kill $D 2>/dev/null; rm -rf "$WORK"' EXIT
sleep 0.5
python3 - "$N" "$port" <<'PY'
import json, os, sys, time, urllib.request
n, port = int(sys.argv[1]), sys.argv[2]
tok = os.environ["DIFFUSE_CLIENT_TOKEN"]
def call(path, data=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, headers={"Authorization": f"Bearer {tok}"})
    return urllib.request.urlopen(req).read()
for start in range(0, n, 5000):
    call("/v1/tasks", "\n".join(json.dumps({"id": f"t{i}", "cmd": ["true"]}) for i in range(start, min(n, start + 5000))).encode())
for path in ["/v1/tasks?state=running&limit=10", "/v1/tasks?state=queued&limit=1000"]:
    call(path)
    times = []
    for _ in range(30):
        t = time.perf_counter(); call(path); times.append(time.perf_counter() - t)
    times.sort()
    print(f"{n} tasks queued: GET {path}: median {times[15]*1000:.1f} ms (min {times[0]*1000:.1f}, max {times[-1]*1000:.1f})")
PY
