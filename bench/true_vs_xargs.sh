#!/usr/bin/env bash
# 20,000 tasks of `true` through `diffuse run` against `xargs -P <same slots>` running the same
# commands, in one run. RUN_ARGS="--ready-tasks 1" passes options to `diffuse run`.
# REUSE_TASKS=1 makes every task reusable and distinct (`true <i>`, "reuse": true; xargs runs
# `true <i>` too): with RUN_ARGS="--reuse on" every identity is computed and every result kept,
# none reused, against RUN_ARGS="--reuse off".
# Usage: bench/true_vs_xargs.sh [tasks=20000] [workers=2] [slots=2]
source "$(dirname "$0")/common.sh"
N=${1:-20000}; W=${2:-2}; S=${3:-2}; P=$((W * S))
python3 -c "
import json
with open('$WORK/tasks.jsonl','w') as f:
    for i in range($N):
        t={'id':'t%d'%i,'cmd':['true']}
        if '${REUSE_TASKS:-}' == '1': t.update(cmd=['true', str(i)], reuse=True)
        f.write(json.dumps(t)+'\n')"
"$DIFFUSE" run "$WORK/tasks.jsonl" --workers "$W" --slots-per-worker "$S" ${RUN_ARGS:-} --run-dir "$WORK/run" $(cache_flag) --json >"$WORK/out.json" 2>/dev/null
d=$(json "['tasks_per_s']" <"$WORK/out.json")
start=$(date +%s.%N)
seq "$N" | xargs -P "$P" -n 1 true
end=$(date +%s.%N)
python3 -c "
n=$N; d=$d; x=n/($end-$start)
print(f'{n} x true, {$P} slots: diffuse run {d:.0f} tasks/s, xargs -P $P {x:.0f} tasks/s, ratio {d/x:.2f}')"
