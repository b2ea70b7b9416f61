#!/usr/bin/env bash
# Hercules' two benchmarks, scaled to this machine, each run twice side by side: intermediates
# kept in the workers' caches (tmp://) against the same pipeline writing them to the shared
# directory (file://, ordered with "after"). 2 workers x 2 slots, 500MB of cache each.
#   file copy:  N files of S bytes, copied twice (input -> c1 -> c2), then checksummed;
#   word count: M chunks of text, counted each (map), summed in one reduce.
# Prints makespan, bytes read from storage and bytes written to the shared directory.
# Usage: bench/hercules.sh [files=40] [file_size_bytes=4000000] [chunks=20]
source "$(dirname "$0")/common.sh"
N=${1:-40}; S=${2:-4000000}; M=${3:-20}
mkdir -p "$WORK/data"
python3 - "$WORK" "$N" "$S" "$M" <<'PY'
import json, os, random, sys
work, n, s, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(7)
words = [f"w{i}" for i in range(500)]
for i in range(n):
    with open(f"{work}/data/f{i:03d}", "wb") as f:
        f.write(os.urandom(s))
for i in range(m):
    with open(f"{work}/data/text{i:03d}", "w") as f:
        f.write(" ".join(rng.choice(words) for _ in range(s // 6)) + "\n")
def uri(kind, name):
    return f"tmp://{name}" if kind == "tmp" else f"file://{work}/shared-{kind}/{name}"
for kind in ("tmp", "dir"):
    dep = lambda t: {"after": [t]} if kind == "dir" else {}
    with open(f"{work}/copy-{kind}.jsonl", "w") as out:
        for i in range(n):
            out.write(json.dumps({"id": f"c1-{i}", "cmd": ["cp", "{inputs[0]}", "{outputs[0]}"],
                "inputs": [f"file://{work}/data/f{i:03d}"], "outputs": [uri(kind, f"c1-{i}")]}) + "\n")
            out.write(json.dumps({"id": f"c2-{i}", "cmd": ["cp", "{inputs[0]}", "{outputs[0]}"],
                "inputs": [uri(kind, f"c1-{i}")], "outputs": [uri(kind, f"c2-{i}")], **dep(f"c1-{i}")}) + "\n")
            out.write(json.dumps({"id": f"sum-{i}", "cmd": ["cksum", "{inputs[0]}"],
                "inputs": [uri(kind, f"c2-{i}")], **dep(f"c2-{i}")}) + "\n")
    with open(f"{work}/wc-{kind}.jsonl", "w") as out:
        for i in range(m):
            out.write(json.dumps({"id": f"map-{i}",
                "cmd": "tr -s ' ' '\\n' < {inputs[0]} | sort | uniq -c > {outputs[0]}",
                "inputs": [f"file://{work}/data/text{i:03d}"], "outputs": [uri(kind, f"count-{i}")]}) + "\n")
        ins = [uri(kind, f"count-{i}") for i in range(m)]
        cat = " ".join(f"{{inputs[{i}]}}" for i in range(m))
        extra = {"after": [f"map-{i}" for i in range(m)]} if kind == "dir" else {}
        out.write(json.dumps({"id": "reduce",
            "cmd": f"cat {cat} | awk '{{c[$2]+=$1}} END {{for (w in c) print w, c[w]}}' | sort > {{outputs[0]}}",
            "inputs": ins, "outputs": [f"file://{work}/out-wc-{kind}.txt"], **extra}) + "\n")
PY
for wl in copy wc; do
  for kind in tmp dir; do
    sync
    "$DIFFUSE" run "$WORK/$wl-$kind.jsonl" --workers 2 --slots-per-worker 2 --cache-size 500MB \
      --cache-dir "$WORK/cache-$wl-$kind" --run-dir "$WORK/run-$wl-$kind" --json 2>/dev/null >"$WORK/$wl-$kind.json"
    written=0; [ -d "$WORK/shared-$kind" ] && written=$(du -sb "$WORK/shared-$kind" | cut -f1)
    python3 - "$WORK/$wl-$kind.json" "$wl" "$kind" "$written" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); wl, kind, written = sys.argv[2], sys.argv[3], int(sys.argv[4])
label = "tmp:// (node caches)" if kind == "tmp" else "file:// (shared dir)"
print(f"{wl:5} {label:22} {s['tasks_ok']:4} ok  makespan {s['makespan_s']:6.2f} s  "
      f"read from storage {s['bytes_storage']/1e6:7.1f} MB  written to shared dir {written/1e6:7.1f} MB")
PY
    rm -rf "$WORK/shared-$kind"
  done
done
if cmp -s "$WORK/out-wc-tmp.txt" "$WORK/out-wc-dir.txt"; then echo "word counts agree"; else echo "word counts DIFFER"; exit 1; fi
