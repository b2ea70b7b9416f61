#!/usr/bin/env bash
# Dispatcher memory with 1,000,000 queued tasks (no workers connected): submit them over HTTP in
# batches of 50,000, then read the dispatcher's resident set size.
# Usage: bench/queued_rss.sh [tasks=1000000]
source "$(dirname "$0")/common.sh"
N=${1:-1000000}
export DIFFUSE_CLIENT_TOKEN=c-$RANDOM$RANDOM DIFFUSE_WORKER_TOKEN=w-$RANDOM$RANDOM
port=$((20000 + RANDOM % 20000))
"$DIFFUSE" dispatcher --listen 127.0.0.1:$port --journal "$WORK/j.sqlite" 2>"$WORK/d.log" & D=$!
trap 'kill $D 2>/dev/null || true; rm -rf "$WORK"' EXIT
sleep 0.5
rss() { awk '/VmRSS/ {print $2}' /proc/$D/status; }
base=$(rss)
python3 - "$N" "$port" <<'PY'
import json, os, sys, urllib.request
n, port = int(sys.argv[1]), sys.argv[2]
tok = os.environ["DIFFUSE_CLIENT_TOKEN"]
for start in range(0, n, 50000):
    body = "\n".join(json.dumps({"id": f"t{i}", "cmd": ["true"]}) for i in range(start, min(n, start + 50000)))
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/tasks", data=body.encode(), headers={"Authorization": f"Bearer {tok}"})
    urllib.request.urlopen(req).read()
PY
sleep 1
q=$(curl -s -H "Authorization: Bearer $DIFFUSE_CLIENT_TOKEN" http://127.0.0.1:$port/v1/status | json "['queued']")
after=$(rss)
python3 -c "print(f'{$q} queued tasks: dispatcher RSS {$after/1024:.0f} MiB (idle {$base/1024:.0f} MiB), {($after-$base)*1024/$q:.0f} bytes per queued task')"
