#!/usr/bin/env bash
# Short Snakemake jobs (issue 39): JOBS jobs of `sleep SECONDS`, no inputs, Snakemake's local
# executor against the diffuse executor at CORES cores (2 workers of CORES/2), REPEAT rounds,
# alternating, each run a new Snakemake command (makespan: the command, start to end):
#   local       Snakemake's local executor, --cores CORES;
#   warm-first  diffuse, jobs run warm, on workers just started: each worker's warm Snakemake
#               is started by its first job (about 0.8 s of CPU, once per worker);
#   warm        diffuse, jobs run warm, the same workers again (their warm Snakemake kept,
#               as for every later run within --warm-idle);
#   prestarted  diffuse, jobs run warm, on workers just started with `diffuse worker --warm
#               PYTHON:snakemake_executor_plugin_diffuse.preload` (their warm Snakemake started
#               with them, before the run);
#   cold        diffuse, --diffuse-warm false: each job a new `python -m snakemake` process.
# For the diffuse runs also: when the first task started and the last one ended (the
# dispatcher's reports, from the command's start), each task's time on its worker (median), and
# CPU seconds of the main Snakemake, of the jobs, and of diffuse (dispatcher and workers).
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
# timeline T0 SINCE: "+first-start +last-end median-task-seconds" of the tasks after cursor SINCE
timeline() {
  "$PY" - "$1" "$2" <<'PY'
import statistics, sys
from diffuse_client import Client
t0, since = float(sys.argv[1]), int(sys.argv[2])
rs = [t.outcome.report for t in Client().iter_tasks(after=since - 1 if since else None) if t.outcome]
print(f"+{min(r['started_at'] for r in rs) - t0:.2f} +{max(r['finished_at'] for r in rs) - t0:.2f} "
      f"{statistics.median(r['finished_at'] - r['started_at'] for r in rs):.2f}")
PY
}
declare -A ALL DETAIL
for r in $(seq "$REPEAT"); do
  write_workflow "$WORK/local"
  run_snakemake local "$WORK/local" --cores "$CORES"
  ALL[local]="${ALL[local]:-} ${SECONDS_OF[local]}"
  DETAIL[local]="${DETAIL[local]:-}    round $r: ${SECONDS_OF[local]} s, CPU ${CPU_OF[local]} s (Snakemake and its jobs)\n"
  start_diffuse "sleep$r"
  for run in warm-first warm cold prestarted; do
    args=()
    [ "$run" = cold ] && args=(--diffuse-warm false)
    if [ "$run" = prestarted ]; then
      stop_diffuse
      start_diffuse "prestarted$r" --warm "$PY:snakemake_executor_plugin_diffuse.preload"
      for _ in $(seq 100); do [ "$(warm_processes)" = 2 ] && break; sleep 0.2; done
    fi
    write_workflow "$WORK/$run"
    since=$(status s.submitted)
    read -r jobs0 own0 < <(cluster_cpu)
    t0=$(now)
    run_snakemake "$run" "$WORK/$run" "${CACHED[@]}" --jobs "$JOBS" "${args[@]}"
    n=$(find "$WORK/$run/out" -name '*.txt' | wc -l)
    [ "$n" = "$JOBS" ] || { echo "$run: $n outputs, wanted $JOBS"; exit 1; }
    read -r first last task < <(timeline "$t0" "$since")
    read -r jobs1 own1 < <(cluster_cpu)
    ALL[$run]="${ALL[$run]:-} ${SECONDS_OF[$run]}"
    DETAIL[$run]="${DETAIL[$run]:-}    round $r: ${SECONDS_OF[$run]} s; tasks from $first to $last s, each $task s (median); CPU s: Snakemake ${CPU_OF[$run]}, jobs $(secs "$jobs0" "$jobs1"), diffuse $(secs "$own0" "$own1")\n"
  done
  stop_diffuse
done

echo "Snakemake 9.27: $JOBS jobs of sleep $SLEEP, $CORES cores ($(nproc) on the machine), $REPEAT rounds"
printf '%-12s %-24s %8s %11s\n' "run" "makespans (s)" "median" "of local's"
med() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
LOCAL_MED=$(echo "${ALL[local]}" | med)
for run in local warm-first warm prestarted cold; do
  m=$(echo "${ALL[$run]}" | med)
  printf '%-12s %-24s %7ss %11s\n' "$run" "${ALL[$run]}" "$m" "$("$PY" -c "print(f'{$m / $LOCAL_MED:.2f}x')")"
  printf "${DETAIL[$run]}"
done
