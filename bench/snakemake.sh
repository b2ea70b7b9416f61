#!/usr/bin/env bash
# Snakemake on diffuse (issues 29 and 39): a workflow of JOBS jobs over FILES shared input files of
# SIZE bytes (job i reads file i / (JOBS/FILES): each file is read by JOBS/FILES jobs, 10 by
# default), each job hashing its file into a small output. The input files are on shared storage
# shaped to RATE for every reader: a read-only FUSE mount whose reads all pass one token bucket
# and are counted, without page cache (bench/throttlefs.py). Side by side, at CORES cores:
#   local     Snakemake's own local executor, --cores CORES, reading the files in place;
#   warm      the diffuse executor (--executor diffuse, storage plugin diffuse, the quick start),
#             a dispatcher and 2 workers of CORES/2 cores started here: one task per job, each
#             job a child forked from the worker's warm Snakemake (the default);
#   cold      the same with --diffuse-warm false: each job a new `python -m snakemake` process;
#   grouped   cold, with Snakemake's job grouping (--groups hash=g --group-components
#             g=GROUP): one task per GROUP jobs, so one Snakemake process per GROUP jobs.
# RUNS="local warm" (a subset of "local warm cold grouped", the default) picks the runs.
# Prints makespan (Snakemake's command, start to end), the bytes the storage served (the
# mount's count; for diffuse also the dispatcher's traffic counters) and the warm calls run.
# Usage: bench/snakemake.sh [JOBS=500] [FILES=50] [SIZE=8000000] [RATE=50MB/s] [CORES=4] [GROUP=10]
# Needs root (FUSE), libfuse2 (installed from apt if missing); makes target/bench-snakemake-venv
# with Snakemake 9.27, fusepy and the plugins from ./python (bench/snakemake_common.sh).
source "$(dirname "$0")/common.sh"
JOBS=${1:-500}; FILES=${2:-50}; SIZE=${3:-8000000}; RATE=${4:-50MB/s}; CORES=${5:-4}; GROUP=${6:-10}
RUNS=${RUNS:-local warm cold grouped}

if ! ldconfig -p | grep -q 'libfuse.so.2'; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse libfuse2) >/dev/null
fi
source bench/snakemake_common.sh

mkdir -p "$WORK/src" "$WORK/shared"
"$PY" - "$WORK/src" "$FILES" "$SIZE" <<'PY'
import os, sys
d, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    with open(f"{d}/f{i:03d}.bin", "wb") as f:
        f.write(os.urandom(size))
PY
"$PY" bench/throttlefs.py "$WORK/src" "$WORK/shared" --rate "$RATE" --stats "$WORK/fs.json" >"$WORK/fs.log" 2>&1 &
FS_PID=$!
cleanup() {
  set +e
  for p in ${PIDS:-}; do kill -TERM -- "-$p" 2>/dev/null; done
  fusermount -u "$WORK/shared" 2>/dev/null; wait "$FS_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
for _ in $(seq 100); do mountpoint -q "$WORK/shared" && break; sleep 0.1; done
mountpoint -q "$WORK/shared" || { cat "$WORK/fs.log"; exit 1; }

PER=$((JOBS / FILES))
write_workflow() { # dir
  mkdir -p "$1"
  cat >"$1/Snakefile" <<EOF
SHARED = "$WORK/shared"
rule all:
    input: expand("out/{i}.txt", i=range($JOBS))
rule hash:
    input: lambda w: f"{SHARED}/f{int(w.i) // $PER:03d}.bin"
    output: "out/{i}.txt"
    shell: "sha256sum {input} | cut -c1-64 > {output}"
EOF
}
served() { "$PY" -c "import json; print(json.load(open('$WORK/fs.json'))['bytes'])"; }
declare -A BYTES_OF STORAGE_OF CALLS_OF JOBS_CPU_OF DIFFUSE_CPU_OF
measure() { # name dir snakemake-args...
  local name=$1 dir=$2; shift 2
  sleep 0.5; local b0; b0=$(served)
  run_snakemake "$name" "$dir" "$@"
  sleep 0.5; local b1; b1=$(served)
  BYTES_OF[$name]=$((b1 - b0))
  local n; n=$(find "$dir/out" -name '*.txt' | wc -l)
  [ "$n" = "$JOBS" ] || { echo "$name: $n outputs, wanted $JOBS"; exit 1; }
}
diffuse_run() { # name snakemake-args...: a fresh dispatcher, workers and caches
  local name=$1; shift
  start_diffuse "$name"
  write_workflow "$WORK/$name"
  measure "$name" "$WORK/$name" "${CACHED[@]}" --jobs "$JOBS" "$@"
  sleep 1.5  # the workers' load reports (warm calls)
  STORAGE_OF[$name]=$(status s.traffic.bytes_storage)
  CALLS_OF[$name]=$(status "(s.raw.get('warm') or {}).get('calls', 0)")
  read -r "JOBS_CPU_OF[$name]" "DIFFUSE_CPU_OF[$name]" < <(cluster_cpu)
  stop_diffuse
}

for run in $RUNS; do
  case $run in
    local) write_workflow "$WORK/local"; measure local "$WORK/local" --cores "$CORES" ;;
    warm) diffuse_run warm ;;
    cold) diffuse_run cold --diffuse-warm false ;;
    grouped) diffuse_run grouped --diffuse-warm false --groups hash=g --group-components "g=$GROUP" ;;
    *) echo "unknown run $run (local warm cold grouped)"; exit 1 ;;
  esac
done

echo "Snakemake 9.27: $JOBS jobs over $FILES files of $SIZE B (each read by $PER jobs), storage at $RATE, $CORES cores ($(nproc) on the machine)"
printf '%-40s %9s %15s %16s %6s  %s\n' "executor" "makespan" "storage served" "diffuse counted" "warm" \
  "CPU s: Snakemake (local: with its jobs) / jobs / diffuse"
for run in $RUNS; do
  case $run in
    local) printf '%-40s %8ss %13s B %16s %6s  %s\n' "local (--cores $CORES)" "${SECONDS_OF[local]}" "${BYTES_OF[local]}" "-" "-" \
             "${CPU_OF[local]}"
           continue ;;
    warm) label="diffuse, warm (2 workers x $((CORES / 2)))" ;;
    cold) label="diffuse, cold (--diffuse-warm false)" ;;
    grouped) label="diffuse, cold, groups of $GROUP jobs" ;;
  esac
  printf '%-40s %8ss %13s B %14s B %6s  %s / %s / %s\n' "$label" "${SECONDS_OF[$run]}" "${BYTES_OF[$run]}" \
    "${STORAGE_OF[$run]}" "${CALLS_OF[$run]}" "${CPU_OF[$run]}" "${JOBS_CPU_OF[$run]}" "${DIFFUSE_CPU_OF[$run]}"
done
echo "one read of each file: $((FILES * SIZE)) B; every job reading its file: $((JOBS * SIZE)) B"
