#!/usr/bin/env bash
# Snakemake on diffuse (issue 29): a workflow of JOBS jobs over FILES shared input files of SIZE
# bytes (job i reads file i / (JOBS/FILES): each file is read by JOBS/FILES jobs, 10 by default),
# each job hashing its file into a small output. The input files are on shared storage shaped to
# RATE for every reader: a read-only FUSE mount whose reads all pass one token bucket and are
# counted, without page cache (bench/throttlefs.py). Side by side, at CORES cores:
#   local     Snakemake's own local executor, --cores CORES, reading the files in place;
#   diffuse   the diffuse executor (--executor diffuse, storage plugin diffuse, the quick start),
#             a dispatcher and 2 workers of CORES/2 cores started here: one task per job;
#   grouped   the same with Snakemake's job grouping (--groups hash=g --group-components
#             g=GROUP): one task per GROUP jobs, so one Snakemake process per GROUP jobs.
# Prints makespan (Snakemake's command, start to end), the bytes the storage served (the
# mount's count; for diffuse also the dispatcher's traffic counters) and the jobs run.
# Usage: bench/snakemake.sh [JOBS=500] [FILES=50] [SIZE=8000000] [RATE=50MB/s] [CORES=4] [GROUP=10]
# Needs root (FUSE), libfuse2 (installed from apt if missing); makes target/bench-snakemake-venv
# with Snakemake 9.27, fusepy and the plugins from ./python.
source "$(dirname "$0")/common.sh"
JOBS=${1:-500}; FILES=${2:-50}; SIZE=${3:-8000000}; RATE=${4:-50MB/s}; CORES=${5:-4}; GROUP=${6:-10}
REPO=$PWD
VENV=$REPO/target/bench-snakemake-venv
PY=$VENV/bin/python

if ! ldconfig -p | grep -q 'libfuse.so.2'; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse libfuse2) >/dev/null
fi
if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
fi
"$PY" -m pip install -q --disable-pip-version-check snakemake==9.27.0 snakemake-interface-common==1.23.0 \
  snakemake-interface-executor-plugins==9.4.0 snakemake-interface-storage-plugins==4.4.1 fusepy==3.0.1
"$PY" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps ./python ./python/snakemake-executor-plugin-diffuse

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
now() { date +%s.%N; }
declare -A SECONDS_OF BYTES_OF STORAGE_OF
measure() { # name dir snakemake-args...
  local name=$1 dir=$2; shift 2
  sleep 0.5; local b0; b0=$(served); local t0; t0=$(now)
  (cd "$dir" && "$PY" -m snakemake --nocolor --quiet all "$@" >"$WORK/$name.log" 2>&1) ||
    { tail -50 "$WORK/$name.log"; exit 1; }
  local t1; t1=$(now); sleep 0.5; local b1; b1=$(served)
  SECONDS_OF[$name]=$("$PY" -c "print(f'{$t1 - $t0:.1f}')")
  BYTES_OF[$name]=$((b1 - b0))
  local n; n=$(find "$dir/out" -name '*.txt' | wc -l)
  [ "$n" = "$JOBS" ] || { echo "$name: $n outputs, wanted $JOBS"; exit 1; }
}

# 1. Snakemake's local executor
write_workflow "$WORK/local"
measure local "$WORK/local" --cores "$CORES"

# 2. and 3. diffuse: a dispatcher and two workers of CORES/2 cores, fresh caches for each run
export DIFFUSE_CLIENT_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export DIFFUSE_WORKER_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
PIDS=""
start_diffuse() { # name
  setsid "$DIFFUSE" dispatcher --listen 127.0.0.1:0 --journal "$WORK/$1-journal.sqlite" --reuse off \
    >"$WORK/$1-dispatcher.log" 2>&1 &
  DPID=$!; PIDS="$PIDS $DPID"
  URL=""
  for _ in $(seq 300); do
    URL=$(grep -o 'listening on http://[^ ]*' "$WORK/$1-dispatcher.log" | head -1 | cut -d' ' -f3 || true)
    [ -n "$URL" ] && break; sleep 0.1
  done
  [ -n "$URL" ] || { cat "$WORK/$1-dispatcher.log"; exit 1; }
  for w in 0 1; do
    setsid "$DIFFUSE" worker --dispatcher "$URL" --cache-dir "$WORK/$1-cache-$w" --cache-size 4GB \
      --name "w$w" --cores $((CORES / 2)) --listen 127.0.0.1:0 >"$WORK/$1-w$w.log" 2>&1 &
    PIDS="$PIDS $!"
  done
  export DIFFUSE_DISPATCHER=$URL
  for _ in $(seq 300); do
    [ "$("$PY" -c 'from diffuse_client import Client; print(Client().status().workers)')" = 2 ] && break
    sleep 0.1
  done
}
stop_diffuse() {
  STORAGE_OF[$1]=$("$PY" -c 'from diffuse_client import Client; print(Client().status().traffic.bytes_storage)')
  for p in $PIDS; do kill -TERM -- "-$p" 2>/dev/null || true; done
  sleep 1; PIDS=""
}
CACHED=(--executor diffuse --jobs "$JOBS" --default-storage-provider diffuse
  --shared-fs-usage persistence software-deployment sources source-cache)

start_diffuse diffuse
write_workflow "$WORK/diffuse"
measure diffuse "$WORK/diffuse" "${CACHED[@]}"
stop_diffuse diffuse

start_diffuse grouped
write_workflow "$WORK/grouped"
measure grouped "$WORK/grouped" "${CACHED[@]}" --groups hash=g --group-components "g=$GROUP"
stop_diffuse grouped

echo "Snakemake 9.27: $JOBS jobs over $FILES files of $SIZE B (each read by $PER jobs), storage at $RATE, $CORES cores ($(nproc) on the machine)"
printf '%-34s %10s %16s %16s\n' "executor" "makespan" "storage served" "diffuse counted"
printf '%-34s %9ss %14s B %16s\n' "local (--cores $CORES)" "${SECONDS_OF[local]}" "${BYTES_OF[local]}" "-"
printf '%-34s %9ss %14s B %14s B\n' "diffuse (2 workers x $((CORES / 2)))" "${SECONDS_OF[diffuse]}" "${BYTES_OF[diffuse]}" "${STORAGE_OF[diffuse]}"
printf '%-34s %9ss %14s B %14s B\n' "diffuse, groups of $GROUP jobs" "${SECONDS_OF[grouped]}" "${BYTES_OF[grouped]}" "${STORAGE_OF[grouped]}"
echo "one read of each file: $((FILES * SIZE)) B; every job reading its file: $((JOBS * SIZE)) B"
