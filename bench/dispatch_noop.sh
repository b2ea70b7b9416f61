#!/usr/bin/env bash
# Dispatcher throughput: N tasks through `diffuse run --noop` (journal, WebSocket sessions and
# the scheduling core all in the path; workers report each task done without spawning it).
# REUSE_TASKS=1 makes every task reusable and distinct (`true <i>`, "reuse": true), so that with
# RUN_ARGS="--reuse on" the dispatcher computes every identity and reuses none: what reuse costs
# when nothing is reused (against RUN_ARGS="--reuse off").
# Usage: bench/dispatch_noop.sh [tasks=100000]
source "$(dirname "$0")/common.sh"
N=${1:-100000}
python3 -c "
import json,sys
with open('$WORK/tasks.jsonl','w') as f:
    for i in range($N):
        t={'id':'t%d'%i,'cmd':['true']}
        if '${REUSE_TASKS:-}' == '1': t.update(cmd=['true', str(i)], reuse=True)
        f.write(json.dumps(t)+'\n')"
"$DIFFUSE" run "$WORK/tasks.jsonl" --noop --workers 2 --slots-per-worker 256 ${RUN_ARGS:-} --run-dir "$WORK/run" $(cache_flag) --json >"$WORK/out.json" 2>/dev/null
python3 - "$WORK/out.json" <<'PY'
import json,sys
s=json.load(open(sys.argv[1]))
print(f"noop dispatch: {s['tasks_ok']} tasks in {s['makespan_s']:.2f} s = {s['tasks_per_s']:.0f} tasks/s (failed {s['tasks_failed']})")
PY
