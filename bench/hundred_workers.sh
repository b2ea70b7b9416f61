#!/usr/bin/env bash
# 100 real `diffuse worker` processes on this machine against one dispatcher: 200,000 no-op
# tasks (workers started with --noop: each task reported done without a process) and 20,000
# `true` tasks (real processes), one slot per worker. Prints tasks/s over each phase (from the
# first submission to the last outcome), the dispatcher's CPU seconds and RSS, and the workers'
# total RSS.
# Usage: bench/hundred_workers.sh [workers=100] [noop_tasks=200000] [true_tasks=20000]
source "$(dirname "$0")/common.sh"
W=${1:-100}; NOOP=${2:-200000}; TRUE=${3:-20000}
export DIFFUSE_CLIENT_TOKEN=c-$RANDOM$RANDOM DIFFUSE_WORKER_TOKEN=w-$RANDOM$RANDOM
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
port=$((20000 + RANDOM % 20000))
"$DIFFUSE" dispatcher --listen 127.0.0.1:$port --journal "$WORK/j.sqlite" 2>"$WORK/d.log" & D=$!
PIDS=()
trap 'kill ${PIDS[@]:-} $D 2>/dev/null || true; wait 2>/dev/null; rm -rf "$WORK"' EXIT
sleep 0.5
pool() { # start W workers; $1: extra flag
  for i in $(seq 1 "$W"); do
    "$DIFFUSE" worker --dispatcher http://127.0.0.1:$port --name "w$i" --cache-dir "$WORK/c$i" \
      --cache-size 10MB --slots 1 $1 2>>"$WORK/w.log" & PIDS+=($!)
  done
}
stop_pool() { kill "${PIDS[@]}" 2>/dev/null || true; wait "${PIDS[@]}" 2>/dev/null || true; PIDS=(); }
phase() { # $1: name, $2: tasks, $3: id prefix
  python3 - "$port" "$1" "$2" "$3" "$D" "$W" <<'PY'
import json, os, sys, time, urllib.request
port, name, n, prefix, d, w = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
tok = os.environ["DIFFUSE_CLIENT_TOKEN"]
def call(path, data=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, headers={"Authorization": f"Bearer {tok}"})
    return json.loads(urllib.request.urlopen(req, timeout=600).read())
while call("/v1/status")["workers"] < w: time.sleep(0.1)
base = call("/v1/status")["succeeded"]
tick = os.sysconf("SC_CLK_TCK")
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick
c0, t0 = cpu(d), time.time()
for s in range(0, n, 50000):
    call("/v1/tasks", "\n".join(json.dumps({"id": f"{prefix}{i}", "cmd": ["true"]}) for i in range(s, min(n, s + 50000))).encode())
while True:
    st = call("/v1/status")
    if st["succeeded"] + st["failed"] - base >= n: break
    time.sleep(0.05)
dt = time.time() - t0
rss = lambda pid: int([l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS")][0].split()[1]) // 1024
print(f"{w} workers, {n} {name} tasks: {n/dt:.0f} tasks/s ({dt:.1f} s), failed {st['failed']}, dispatcher CPU {cpu(d)-c0:.1f} s, RSS {rss(d)} MiB")
PY
}
pool --noop
phase no-op "$NOOP" n
list=$(IFS=,; echo "${PIDS[*]}")
echo "workers' RSS: $( (ps -o rss= -p "$list"; ps -o rss= --ppid "$list") | awk '{s+=$1} END {printf "%d MiB in all, %d MiB a worker", s/1024, s/1024/'"$W"'}') (the worker and its guard)"
stop_pool
pool ""
phase true "$TRUE" t
stop_pool
