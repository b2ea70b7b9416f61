#!/usr/bin/env bash
# Short Snakemake jobs (issue 39): JOBS jobs of `sleep SECONDS`, no inputs, Snakemake's local
# executor against the diffuse executor at CORES cores (2 workers of CORES/2), REPEAT times,
# alternating, each run a new Snakemake command (makespan: the command, start to end):
#   local       Snakemake's local executor, --cores CORES;
#   warm-first  diffuse, jobs run warm, on workers just started: each worker's warm Snakemake
#               is started by its first job (about 0.8 s of CPU, once per worker);
#   warm        diffuse, jobs run warm, the same workers again (their warm Snakemake kept,
#               as for every later run within --warm-idle, or started by `diffuse worker --warm`);
#   cold        diffuse, --diffuse-warm false: each job a new `python -m snakemake` process.
# Usage: bench/snakemake_sleep.sh [JOBS=20] [SECONDS=0.3] [CORES=4] [REPEAT=3]
source "$(dirname "$0")/common.sh"
JOBS=${1:-20}; SLEEP=${2:-0.3}; CORES=${3:-4}; REPEAT=${4:-3}
source bench/snakemake_common.sh
cleanup() {
  set +e
  for p in ${PIDS:-}; do kill -TERM -- "-$p" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT

write_workflow() { # dir
  rm -rf "$1"; mkdir -p "$1"
  cat >"$1/Snakefile" <<EOF
rule all:
    input: expand("out/{i}.txt", i=range($JOBS))
rule nap:
    output: "out/{i}.txt"
    shell: "sleep $SLEEP; touch {output}"
EOF
}
declare -A ALL
record() { # name: run it, then add its makespan to its list
  local n; n=$(find "$WORK/$1/out" -name '*.txt' | wc -l)
  [ "$n" = "$JOBS" ] || { echo "$1: $n outputs, wanted $JOBS"; exit 1; }
  ALL[$1]="${ALL[$1]:-} ${SECONDS_OF[$1]}"
}

for r in $(seq "$REPEAT"); do
  write_workflow "$WORK/local"
  run_snakemake local "$WORK/local" --cores "$CORES"; record local
  start_diffuse "sleep$r"
  for run in warm-first warm cold; do
    args=()
    [ "$run" = cold ] && args=(--diffuse-warm false)
    write_workflow "$WORK/$run"
    run_snakemake "$run" "$WORK/$run" "${CACHED[@]}" --jobs "$JOBS" "${args[@]}"; record "$run"
  done
  stop_diffuse
done

echo "Snakemake 9.27: $JOBS jobs of sleep $SLEEP, $CORES cores ($(nproc) on the machine), $REPEAT rounds"
printf '%-12s %-30s %8s %14s\n' "run" "makespans (s)" "median" "of local's"
med() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
LOCAL_MED=$(echo "${ALL[local]}" | med)
for run in local warm-first warm cold; do
  m=$(echo "${ALL[$run]}" | med)
  printf '%-12s %-30s %7ss %13s\n' "$run" "${ALL[$run]}" "$m" "$("$PY" -c "print(f'{$m / $LOCAL_MED:.2f}x')")"
done
