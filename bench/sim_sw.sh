#!/usr/bin/env bash
# Wall time and peak memory of the full SW workload (2,000,000 tasks, GCC, dynamic provisioning)
# in release mode. Prints the simulator's own summary line and the process's peak RSS.
# Usage: bench/sim_sw.sh [extra diffuse sim flags]
# DIFFUSE_BIN=path runs another build (e.g. an older commit's, to compare side by side).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${DIFFUSE_BIN:-}" ]; then
    bin=$DIFFUSE_BIN
else
    cargo build --release --locked -p diffuse >/dev/null 2>&1
    bin="${CARGO_TARGET_DIR:-$PWD/target}/release/diffuse"
fi
out=$(mktemp)
start=$(date +%s.%N)
if command -v /usr/bin/time >/dev/null; then
    /usr/bin/time -v "$bin" sim sw --provisioning dynamic --json "$@" >"$out.json" 2>"$out.time"
    rss_kb=$(awk -F: '/Maximum resident set size/ {gsub(/ /,"",$2); print $2}' "$out.time")
else
    "$bin" sim sw --provisioning dynamic --json "$@" >"$out.json"
    rss_kb="unknown (install GNU time: apt-get install time)"
fi
end=$(date +%s.%N)
python3 - "$out.json" "$start" "$end" "$rss_kb" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
wall = float(sys.argv[3]) - float(sys.argv[2])
rss = sys.argv[4]
rss_txt = f"{int(rss) / 1024:.0f} MiB" if rss.isdigit() else rss
print(f"sw gcc dynamic: {s['tasks']} tasks, efficiency {s['efficiency']:.3f}, "
      f"process wall {wall:.1f} s (simulation {s['sim_wall_s']:.1f} s), peak RSS {rss_txt}")
PY
rm -f "$out" "$out.json" "$out.time"
