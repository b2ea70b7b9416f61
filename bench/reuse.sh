#!/usr/bin/env bash
# Results reused by content (issue 27): a parameter sweep of N tasks over shared-storage inputs
# (F files of S bytes behind the storage emulation at RATE), then the same sweep with M new
# points, against the M new points alone: on the same warm caches with reuse off (run between
# the two sweeps; what the new points cost without the 2,000 reused ones), and on cold caches.
# Each task hashes its file with its point's salt and writes one small file:// result. 2 workers
# x 2 slots, caches kept between runs (as `diffuse run` keeps them).
# Prints each run's tasks run and reused, makespan and bytes read from storage.
# Usage: bench/reuse.sh [N=2000] [M=200] [F=100] [S=2000000] [RATE=50MB/s]
source "$(dirname "$0")/common.sh"
N=${1:-2000}; M=${2:-200}; F=${3:-100}; S=${4:-2000000}; RATE=${5:-50MB/s}
mkdir -p "$WORK/storage" "$WORK/out"
python3 - "$WORK" "$N" "$M" "$F" "$S" <<'PY'
import json, os, sys
work, n, m, f, s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
for i in range(f):
    with open(f"{work}/storage/f{i:04d}", "wb") as out:
        out.write(os.urandom(s))
def task(p):
    return json.dumps({"id": f"p{p}",
        "cmd": f"(echo {p}; cat {{inputs[0]}}) | sha256sum > {{outputs[0]}}",
        "inputs": [f"file://{work}/storage/f{p % f:04d}"],
        "outputs": [f"file://{work}/out/p{p}.txt"]}) + "\n"
with open(f"{work}/sweep.jsonl", "w") as out:
    out.writelines(task(p) for p in range(n))
with open(f"{work}/sweep-more.jsonl", "w") as out:
    out.writelines(task(p) for p in range(n + m))
with open(f"{work}/new-only.jsonl", "w") as out:
    out.writelines(task(p) for p in range(n, n + m))
PY
run() { # name task-file cache-dir [flags]
  "$DIFFUSE" run "$WORK/$2" --workers 2 --slots-per-worker 2 --cache-size 1GB \
    --storage-bandwidth "$RATE" --storage-root "$WORK/storage" ${4:-} \
    --cache-dir "$WORK/$3" --run-dir "$WORK/run-$1" --json 2>/dev/null >"$WORK/$1.json"
}
run first sweep.jsonl cache
run warm new-only.jsonl cache "--reuse off"
run second sweep-more.jsonl cache
run cold new-only.jsonl cache-cold
python3 - "$WORK" "$N" "$M" <<'PY'
import json, sys
work, n, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = {}
for name, what in (("first", f"{n} points"), ("second", f"{n}+{m} points"),
                   ("warm", f"{m} new alone, warm caches, reuse off"), ("cold", f"{m} new alone, cold")):
    s = json.load(open(f"{work}/{name}.json"))
    rows[name] = s
    print(f"{name:6} ({what}): {s['tasks_ok']} ok, {s['tasks_ok'] - s['tasks_reused']} run, "
          f"{s['tasks_reused']} reused, makespan {s['makespan_s']:.2f} s, "
          f"{s['bytes_storage'] / 1e6:.1f} MB from storage")
f, sec, w, c = rows["first"], rows["second"], rows["warm"], rows["cold"]
print(f"second/first makespan {sec['makespan_s'] / f['makespan_s']:.3f}, "
      f"second/warm-alone {sec['makespan_s'] / w['makespan_s']:.2f}, "
      f"second/cold-alone {sec['makespan_s'] / c['makespan_s']:.2f}, "
      f"second/first bytes from storage {sec['bytes_storage'] / max(f['bytes_storage'], 1):.3f}")
PY
