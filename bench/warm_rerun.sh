#!/usr/bin/env bash
# The same workload run twice with the caches `diffuse run` keeps between runs: 600 tasks over
# 200 files of 1 MB (md5sum of one file each), 2 workers x 2 slots, 200MB of cache each. The
# second run's bytes from storage, local hits and makespan are printed next to the first's.
# Reuse is off: the second run reads what the first cached (bench/reuse.sh measures reuse).
# Usage: bench/warm_rerun.sh [tasks=600] [files=200] [file_size_bytes=1000000]
source "$(dirname "$0")/common.sh"
N=${1:-600}; F=${2:-200}; S=${3:-1000000}
mkdir -p "$WORK/data"
python3 - "$WORK" "$N" "$F" "$S" <<'PY'
import json, os, random, sys
work, n, f, s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for i in range(f):
    with open(f"{work}/data/f{i:04d}", "wb") as out:
        out.write(os.urandom(s))
rng = random.Random(7)
with open(f"{work}/tasks.jsonl", "w") as out:
    for t in range(n):
        i = t % f if t < f else rng.randrange(f)
        out.write(json.dumps({"id": f"t{t}", "cmd": ["md5sum", "{inputs[0]}"],
                              "inputs": [f"file://{work}/data/f{i:04d}"]}) + "\n")
PY
for round in first second; do
  "$DIFFUSE" run "$WORK/tasks.jsonl" --workers 2 --slots-per-worker 2 --cache-size 200MB \
    --cache-dir "$WORK/cache" --run-dir "$WORK/run-$round" $(reuse_off) --json 2>/dev/null >"$WORK/$round.json"
done
python3 - "$WORK/first.json" "$WORK/second.json" <<'PY'
import json, sys
for name, path in (("first", sys.argv[1]), ("second", sys.argv[2])):
    s = json.load(open(path))
    print(f"{name:6} run: {s['tasks_ok']} ok, makespan {s['makespan_s']:.2f} s, "
          f"{s['bytes_storage']/1e6:.1f} MB from storage, "
          f"{100*s['hit_local']:.1f}% local, {100*s['hit_peer']:.1f}% peer, {100*s['miss']:.1f}% from storage")
PY
