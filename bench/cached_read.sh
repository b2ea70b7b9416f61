#!/usr/bin/env bash
# A task reading a cached 100 MB input against `cat file > /dev/null` on the same file.
# One worker, one slot: t1 fetches the file into the cache, then t01..t30 read it as local hits
# (hard link into the task directory, no copy). The task time is the worker's own measure
# (staging + process) from the results file; cat is timed on the cached object itself.
source "$(dirname "$0")/common.sh"
head -c 100000000 /dev/urandom >"$WORK/big.dat"
python3 -c "
import json
with open('$WORK/tasks.jsonl','w') as f:
    for i in range(31): f.write(json.dumps({'id':'t%02d'%i,'cmd':'cat {inputs[0]} > /dev/null','inputs':['file://$WORK/big.dat']})+'\n')"
"$DIFFUSE" run "$WORK/tasks.jsonl" --workers 1 --slots-per-worker 1 --cache-size 1GB --cache-dir "$WORK/cache" --run-dir "$WORK/run" --json >/dev/null 2>&1
obj=$(ls "$WORK"/cache/worker-0/objects/ | grep -v meta | head -1)
python3 - "$WORK/run/results.jsonl" "$WORK/cache/worker-0/objects/$obj" <<'PY'
import json, subprocess, sys, time, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
hits = [r["report"] for r in rows if r["report"]["traffic"]["local"] == 1]
task = statistics.median(r["finished_at"] - r["started_at"] for r in hits)
cats = []
for _ in range(30):
    t = time.time(); subprocess.run(f"cat {sys.argv[2]} > /dev/null", shell=True, check=True); cats.append(time.time() - t)
cat = statistics.median(cats)
print(f"cached 100 MB input: task {task*1000:.1f} ms (median of {len(hits)} local hits), cat {cat*1000:.1f} ms, ratio cat/task {cat/task:.2f}")
PY
