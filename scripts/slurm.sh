#!/usr/bin/env bash
# A real one-node Slurm cluster for tests, everything (config, munge key and socket, spool,
# state, logs, pids) under one directory, the daemons running as root without systemd.
#
#   scripts/slurm.sh up DIR [CPUS]   start munged, slurmctld and slurmd; wait until a job has run;
#                                    print `export SLURM_CONF=DIR/slurm.conf` (the only stdout line)
#   scripts/slurm.sh down DIR        stop exactly the daemons `up` started (and their jobs)
#
# `up` installs munge and Slurm with apt when missing (root only; otherwise exit 3), stops what a
# previous `up` on DIR left running and clears its saved state. CPUS (default 8) is what the node
# declares, however many the machine has: that many one-CPU jobs run at once. The ports are free
# ones picked per DIR, so two clusters (or a system-wide Slurm) do not collide; every client
# command must use SLURM_CONF. `up` gives the daemons 60 s (after any install) to run a job.
# Exit codes: 0 ok, 1 failed (log tails printed, nothing left running), 2 usage, 3 not root.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin                # the daemons, for a user whose PATH lacks them

log() { echo "slurm.sh: $*" >&2; }
usage() { log "usage: $0 up DIR [CPUS] | down DIR"; exit 2; }

# The pids recorded in DIR/pids that still are our daemons: their command line names DIR, so a
# reused pid is never killed.
live_pids() {
    local dir=$1 name pid
    [ -f "$dir/pids" ] || return 0
    while read -r name pid; do
        [ -n "${pid:-}" ] && [ -r "/proc/$pid/cmdline" ] || continue
        if tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$dir/"; then
            echo "$pid"
        fi
    done <"$dir/pids"
}

# The slurmstepds of DIR's slurmds (one per job step, each in a session of its own with the
# job's processes): they keep their slurmd's log open (slurmd.log, or slurmd-<node>.log with
# several hosts).
stepds() {
    local dir=$1 p
    for p in $(pgrep -x slurmstepd); do
        ls -l "/proc/$p/fd" 2>/dev/null | grep -qF -- "-> $dir/log/slurmd" && echo "$p"
    done
    return 0
}

# Fail unless all N daemons of DIR/pids run. A daemon that looks gone is looked at again a
# moment later, as /proc/PID/cmdline reads empty while its process execs (slurmd of
# slurm-hosts.sh is four execs: setsid, nsenter, unshare, sh) and CI once failed a start on it.
need_daemons() {
    local n=$1 name pid gone
    [ "$(live_pids "$DIR" | wc -l)" = "$n" ] && return 0
    sleep 0.5
    [ "$(live_pids "$DIR" | wc -l)" = "$n" ] && return 0
    gone=
    while read -r name pid; do
        live_pids "$DIR" | grep -qx "$pid" || gone="$gone $name (pid $pid)"
    done <"$DIR/pids"
    fail "a daemon exited:$gone"
}

# Every process in the sessions of `pids`.
session_members() {
    local sids=" $* " stat p rest
    [ $# -gt 0 ] || return 0
    for stat in /proc/[0-9]*/stat; do
        p=${stat#/proc/}; p=${p%/stat}
        rest=$(cat "$stat" 2>/dev/null) || continue
        rest=${rest##*) }                       # after "pid (comm) "
        read -r _ _ _ sid _ <<<"$rest"          # state ppid pgrp session
        [[ $sids == *" $sid "* ]] && echo "$p"
    done
    return 0
}

# Whether any of the pids still runs (a zombie has no command line).
any_alive() {
    local p
    for p in "$@"; do
        [ -n "$(tr -d '\0' 2>/dev/null <"/proc/$p/cmdline")" ] && return 0
    done
    return 1
}

stop() {
    local dir=$1 pids stray p i
    pids=$(live_pids "$dir")
    # What slurmd leaves behind when it stops: slurmstepds and the jobs still running (each
    # daemon and each slurmstepd leads a session; the jobs' processes are in their stepd's).
    # shellcheck disable=SC2046
    stray=$(session_members $pids $(for p in $(stepds "$dir"); do ps -o sid= -p "$p"; done))
    if [ -n "$pids" ]; then
        # shellcheck disable=SC2086
        kill -TERM $pids 2>/dev/null || true
        # A test may have frozen a daemon (SIGSTOP): CONT so that it sees the TERM.
        # shellcheck disable=SC2086
        kill -CONT $pids 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            [ -z "$(live_pids "$dir")" ] && break
            sleep 0.1
        done
        pids=$(live_pids "$dir")
        # shellcheck disable=SC2086
        [ -z "$pids" ] || { log "daemons $pids ignored TERM: KILL"; kill -KILL $pids 2>/dev/null || true; }
    fi
    for p in $stray; do
        [ "$p" = $$ ] || kill -KILL "$p" 2>/dev/null || true
    done
    for ((i = 0; i < 50; i++)); do
        # shellcheck disable=SC2086
        any_alive $stray || break
        sleep 0.1
    done
    rm -f "$dir/pids"
}

# Ports listening on this machine (decimal), from /proc/net/tcp{,6}.
listening_ports() {
    local _ local_addr state port
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | while read -r _ local_addr _ state _; do
        port=${local_addr##*:}
        [ "$state" = 0A ] && echo $((16#$port))
    done | sort -un
}

# Two consecutive free ports, starting from a place that depends on DIR.
free_ports() {
    local used p
    used=" $(listening_ports | tr '\n' ' ') "
    p=$((20000 + $(printf '%s' "$1" | cksum | cut -d' ' -f1) % 20000 / 2 * 2))
    while [[ $used == *" $p "* || $used == *" $((p + 1)) "* ]]; do
        p=$((p + 2))
        ((p < 40000)) || p=20000
    done
    echo "$p"
}

install_packages() {
    if command -v sbatch && command -v slurmctld && command -v munged; then return 0; fi >/dev/null 2>&1
    if [ "$(id -u)" != 0 ]; then
        log "Slurm is not installed (sbatch, slurmctld, munged) and installing it needs root:"
        log "  apt-get install --no-install-recommends munge slurmctld slurmd slurm-client"
        exit 3
    fi
    command -v apt-get >/dev/null 2>&1 || { log "Slurm is not installed and there is no apt-get"; exit 1; }
    local created=
    # Keep the packages' install scripts from starting system-wide daemons.
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        created=1
    fi
    log "installing munge slurmctld slurmd slurm-client"
    local pkgs=(munge slurmctld slurmd slurm-client) rc=0
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -q --no-install-recommends "${pkgs[@]}" ||
        { apt-get update -q && apt-get install -y -q --no-install-recommends "${pkgs[@]}"; }
    } >"$DIR/apt.log" 2>&1 || rc=$?
    [ -z "$created" ] || rm -f /usr/sbin/policy-rc.d
    [ "$rc" = 0 ] || { tail -n 30 "$DIR/apt.log" >&2; log "apt-get install failed (log: $DIR/apt.log)"; exit 1; }
}

fail() {
    local f
    log "FAILED: $*"
    # The .out files (a daemon's own output) hold what it said before it opened its log.
    for f in "$DIR"/log/*.log "$DIR"/log/*.out; do
        [ -s "$f" ] || continue
        echo "--- tail $f" >&2
        tail -n "$([[ $f == *.log ]] && echo 30 || echo 10)" "$f" >&2
    done
    stop "$DIR"                                 # a failed `up` leaves nothing running
    exit 1
}

# Fresh state every time (a stale node state, drain, or job list would leak into the test):
# DIR's state, spool, munge, log and run directories, and the munge key.
fresh_state() {
    rm -rf "$DIR/state" "$DIR/spool" "$DIR/munge" "$DIR/log"
    mkdir -p "$DIR/state" "$DIR/spool" "$DIR/munge" "$DIR/log" "$DIR/run"
    chmod 755 "$DIR"
    chmod 711 "$DIR/munge"                      # munged refuses a more open socket directory
    [ -s "$DIR/munge.key" ] || mungekey -c -k "$DIR/munge.key" >&2
    chmod 600 "$DIR/munge.key"
}

# The slurm.conf lines every test cluster shares: cluster NAME, slurmctld at CTLD
# (`host(addr)`), ports PORT and PORT+1; PER_NODE "-%n" gives each slurmd its own spool, pid
# and log file (several on one machine), "" one slurmd's.
conf_common() {
    local name=$1 ctld=$2 port=$3 per_node=$4
    cat <<EOF
ClusterName=$name
SlurmctldHost=$ctld
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool${per_node:+/%n}
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd$per_node.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd$per_node.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
SchedulerParameters=batch_sched_delay=0
ReturnToService=2
KillWait=5
MailProg=/bin/true
EOF
}

# munged in the foreground in its own session (its pid in DIR/pids), until it answers or
# $deadline passes.
start_munged() {
    setsid munged -F --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge.key" \
        --log-file="$DIR/log/munged.log" --pid-file="$DIR/run/munged.pid" \
        --seed-file="$DIR/munge/munge.seed" </dev/null >"$DIR/log/munged.out" 2>&1 &
    echo "munged $!" >>"$DIR/pids"
    until munge -S "$DIR/munge/munge.socket" -n </dev/null >/dev/null 2>&1; do
        ((SECONDS < deadline)) || fail "munged did not answer"
        sleep 0.1
    done
}

up() {
    local cpus=$1 node port conf deadline state job i
    [[ $cpus =~ ^[1-9][0-9]*$ ]] || usage
    install_packages
    if [ "$(id -u)" != 0 ]; then
        log "a test Slurm runs its daemons as root (SlurmUser=root, slurmd launches jobs): not root"
        exit 3
    fi
    stop "$DIR"
    fresh_state

    node=$(hostname -s)
    port=$(free_ports "$DIR")
    conf=$DIR/slurm.conf
    {
        echo "# Written by scripts/slurm.sh: a one-node test cluster."
        conf_common diffusetest "$node(127.0.0.1)" "$port" ""
        echo "NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=4096 State=UNKNOWN"
        echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    } >"$conf"
    export SLURM_CONF=$conf
    cd "$DIR"                                   # the daemons' working directory
    deadline=$((SECONDS + 60))

    # Each daemon in the foreground, in its own session, its output in a file (never the caller's
    # pipes); setsid execs in place, so $! is the daemon's pid.
    : >"$DIR/pids"
    start_munged

    setsid slurmctld -D -f "$conf" </dev/null >"$DIR/log/slurmctld.out" 2>&1 &
    echo "slurmctld $!" >>"$DIR/pids"
    setsid slurmd -D -f "$conf" -N "$node" </dev/null >"$DIR/log/slurmd.out" 2>&1 &
    echo "slurmd $!" >>"$DIR/pids"

    until scontrol ping >/dev/null 2>&1; do
        ((SECONDS < deadline)) || fail "slurmctld did not answer scontrol ping"
        need_daemons 3
        sleep 0.2
    done
    while :; do
        state=$(sinfo -h -N -o %t 2>/dev/null | head -n1)
        case $state in
        idle) break ;;
        drain* | drng* | inval* | fail*) fail "node is $state (never heals by itself)" ;;
        esac
        ((SECONDS < deadline)) || fail "node not idle (state '${state:-none}')"
        need_daemons 3
        sleep 0.2
    done

    # Up means a job ran: a fresh slurmctld takes a few seconds before it schedules.
    job=$(sbatch --parsable -J slurm-sh-smoke -o /dev/null --wrap true 2>"$DIR/log/sbatch.err") ||
        fail "smoke job not submitted: $(cat "$DIR/log/sbatch.err")"
    while :; do
        state=$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
        case $state in
        COMPLETED) break ;;
        FAILED | CANCELLED | TIMEOUT | NODE_FAIL | BOOT_FAIL | OUT_OF_MEMORY)
            fail "smoke job $job ended $state" ;;
        esac
        ((SECONDS < deadline)) || fail "smoke job $job did not run (state '${state:-none}')"
        sleep 0.1
    done
    log "up in $DIR: ${cpus} CPUs, ports $port-$((port + 1)), pids $(live_pids "$DIR" | tr '\n' ' ')"
    echo "export SLURM_CONF=$conf"
}

# Sourced (scripts/slurm-hosts.sh does, for the functions above): define, do nothing.
[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0

[ $# -ge 2 ] || usage
DIR=$(realpath -m -- "$2")
case $1 in
up)
    [ $# -le 3 ] || usage
    mkdir -p "$DIR"
    up "${3:-8}"
    ;;
down)
    [ $# -eq 2 ] || usage
    stop "$DIR"
    ;;
*) usage ;;
esac
