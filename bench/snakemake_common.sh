# Shared by bench/snakemake.sh and bench/snakemake_sleep.sh (sourced after common.sh): the
# venv with Snakemake 9.27 and the plugins from ./python, diffuse clusters of a dispatcher and
# two workers of CORES/2 cores, and a measured Snakemake run.
VENV=$PWD/target/bench-snakemake-venv
PY=$VENV/bin/python
if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
fi
"$PY" -m pip install -q --disable-pip-version-check snakemake==9.27.0 snakemake-interface-common==1.23.0 \
  snakemake-interface-executor-plugins==9.4.0 snakemake-interface-storage-plugins==4.4.1 fusepy==3.0.1
"$PY" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps ./python ./python/snakemake-executor-plugin-diffuse

export DIFFUSE_CLIENT_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export DIFFUSE_WORKER_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
PIDS=""
now() { date +%s.%N; }
secs() { "$PY" -c "print(f'{$2 - $1:.1f}')"; }
status() { "$PY" -c "from diffuse_client import Client; s = Client().status(); print($1)"; }

# start_diffuse NAME [WORKER ARGS...]: a dispatcher and workers w0, w1 (CORES/2 cores each), fresh
# journal and caches; DIFFUSE_DISPATCHER exported.
start_diffuse() {
  local name=$1; shift
  setsid "$DIFFUSE" dispatcher --listen 127.0.0.1:0 --journal "$WORK/$name-journal.sqlite" --reuse off \
    >"$WORK/$name-dispatcher.log" 2>&1 &
  PIDS="$PIDS $!"
  local url=""
  for _ in $(seq 300); do
    url=$(grep -o 'listening on http://[^ ]*' "$WORK/$name-dispatcher.log" | head -1 | cut -d' ' -f3 || true)
    [ -n "$url" ] && break; sleep 0.1
  done
  [ -n "$url" ] || { cat "$WORK/$name-dispatcher.log"; exit 1; }
  for w in 0 1; do
    setsid "$DIFFUSE" worker --dispatcher "$url" --cache-dir "$WORK/$name-cache-$w" --cache-size 4GB \
      --name "w$w" --cores $((CORES / 2)) --listen 127.0.0.1:0 "$@" >"$WORK/$name-w$w.log" 2>&1 &
    PIDS="$PIDS $!"
  done
  export DIFFUSE_DISPATCHER=$url
  for _ in $(seq 300); do
    [ "$(status s.workers)" = 2 ] && break
    sleep 0.1
  done
}
stop_diffuse() {
  for p in $PIDS; do kill -TERM -- "-$p" 2>/dev/null || true; done
  sleep 1; PIDS=""
}
# warm_processes: the warm processes the workers report (their load reports: a second behind).
warm_processes() { status "(s.raw.get('warm') or {}).get('processes', 0)"; }
# cluster_cpu: CPU seconds of the running cluster's process trees (call it before stop_diffuse),
# "JOBS DIFFUSE": diffuse's own (its processes, dispatcher and workers) and the rest: the jobs
# (commands, their Snakemake processes, warm processes and their children), alive or reaped.
cluster_cpu() {
  "$PY" - $PIDS <<'PY'
import os, sys
tick = os.sysconf("SC_CLK_TCK")
procs = {}
for name in os.listdir("/proc"):
    if name.isdigit():
        try:
            with open(f"/proc/{name}/stat") as f:
                head, tail = f.read().rsplit(")", 1)
            v = tail.split()
            procs[int(name)] = (head.split("(", 1)[1], int(v[1]), [int(x) / tick for x in v[11:15]])
        except (OSError, IndexError, ValueError):
            pass
children = {}
for pid, (_, ppid, _) in procs.items():
    children.setdefault(ppid, []).append(pid)
todo = [int(p) for p in sys.argv[1:] if int(p) in procs]
jobs = own = 0.0
while todo:
    pid = todo.pop()
    comm, _, (u, s, cu, cs) = procs[pid]
    if comm == "diffuse":
        own += u + s
        jobs += cu + cs
    else:
        jobs += u + s + cu + cs
    todo.extend(children.get(pid, []))
print(f"{jobs:.1f} {own:.1f}")
PY
}
# run_snakemake NAME DIR ARGS...: Snakemake's command in DIR, timed (SECONDS_OF[NAME]) and its
# CPU seconds with its children's (CPU_OF[NAME]: the local executor's jobs too); its output in
# $WORK/NAME.log, shown if it fails.
declare -A SECONDS_OF CPU_OF
run_snakemake() {
  local name=$1 dir=$2; shift 2
  local t0; t0=$(now)
  (cd "$dir" && /usr/bin/time -f "%U %S" -o "$WORK/$name.cpu" "$PY" -m snakemake --nocolor --quiet all "$@" \
    >"$WORK/$name.log" 2>&1) || { tail -50 "$WORK/$name.log"; exit 1; }
  local t1; t1=$(now)
  SECONDS_OF[$name]=$(secs "$t0" "$t1")
  CPU_OF[$name]=$(awk '{printf "%.1f", $1 + $2}' "$WORK/$name.cpu")
}

CACHED=(--executor diffuse --default-storage-provider diffuse
  --shared-fs-usage persistence software-deployment sources source-cache)
