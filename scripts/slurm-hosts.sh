#!/usr/bin/env bash
# A real Slurm whose compute nodes are separate network hosts on this machine, for tests: the
# head (munged and slurmctld) in the root namespace on a bridge address, one slurmd per host, each
# in its own network, UTS and mount namespace with its own address, host name and node-local
# disk. Everything (config, munge key and socket, spool, state, logs, pids, the hosts' disks)
# lives under one directory. shared/design/slurm.md ("Several hosts on one machine") has the
# recipe this follows and its one trap: `nsenter --net`, not `ip netns exec`, whose fresh /sys
# hides the cgroup file system from slurmd.
#
#   scripts/slurm-hosts.sh up DIR N [CPUS]  start munged and slurmctld on the head, a slurmd on
#                                           each of N hosts declaring CPUS (default 1) CPUs; wait
#                                           until a job has run on every host; print
#                                           `export SLURM_CONF=DIR/slurm.conf` (the only stdout line)
#   scripts/slurm-hosts.sh down DIR         stop the daemons and jobs, remove the namespaces and the bridge
#   scripts/slurm-hosts.sh crash DIR I      host I loses power: its link cut, every process on it
#                                           killed (slurmd, its jobs), its namespace removed; its disk stays
#   scripts/slurm-hosts.sh boot DIR I       host I comes back: namespace and link made again, slurmd
#                                           started; returns once the controller hears from it
#
# DIR/net describes the cluster, one line each: `head ADDR BRIDGE`, then `host NAME ADDR NETNS`
# for hosts 1..N (node names node1..nodeN). Host I's node-local disk is DIR/disk/nodeI, which it
# sees at DIR/local (a bind mount in its own mount namespace; the head sees an empty DIR/local),
# so a path under DIR/local is one directory per host, as /local is on a cluster, and it
# outlives a crash. A process runs on host I under
#   nsenter --net=/var/run/netns/NETNS --mount=/proc/<its slurmd>/ns/mnt ...
# (or in a job: `sbatch -w nodeI`).
#
# Installation, ports, daemon start and stop are scripts/slurm.sh's (sourced). Root only.
# Exit codes: 0 ok, 1 failed (log tails printed, nothing left running), 2 usage, 3 not root.
set -euo pipefail
# shellcheck source=scripts/slurm.sh
source "$(dirname "$0")/slurm.sh"

log() { echo "slurm-hosts.sh: $*" >&2; }
usage() { log "usage: $0 up DIR N [CPUS] | down DIR | crash DIR I | boot DIR I"; exit 2; }

# Names of this DIR's bridge, namespaces and links (at most 15 characters each), from a hash
# of DIR, so that two clusters never share one.
tag() { printf '%06x' $(($(printf '%s' "$DIR" | cksum | cut -d' ' -f1) % 16777216)); }
bridge() { echo "dsb$(tag)"; }
netns() { echo "dsn$(tag)-$1"; }
outer() { echo "dsv$(tag)x$1"; }

# A /24 under 10.92.0.0/16 that no interface or route of this machine uses yet.
free_subnet() {
    local s used
    s=$(($(printf '%s' "$DIR" | cksum | cut -d' ' -f1) % 250 + 1))
    used=$(ip -4 -o addr show; ip -4 route show)
    while grep -qF "10.92.$s." <<<"$used"; do
        s=$((s % 250 + 1))
    done
    echo "10.92.$s"
}

host_addr() { awk -v n="node$1" '$1 == "host" && $2 == n { print $3 }' "$DIR/net"; }

# Host I's namespace, its link to the bridge (addressed, up).
make_host_net() {
    local i=$1 ns out addr
    ns=$(netns "$i") out=$(outer "$i") addr=$(host_addr "$i")
    ip netns add "$ns"
    ip link add "$out" type veth peer name "dsp$(tag)x$i"
    ip link set "dsp$(tag)x$i" netns "$ns"
    ip link set "$out" master "$(bridge)" up
    ip -n "$ns" link set "dsp$(tag)x$i" name eth0
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
}

# slurmd of host I, in the host's network namespace and new UTS and mount namespaces (its host
# name; its disk at DIR/local). setsid and every command after it exec in place: $! is slurmd.
start_slurmd() {
    local i=$1 node=node$1
    mkdir -p "$DIR/spool/$node" "$DIR/disk/$node"
    setsid nsenter --net="/var/run/netns/$(netns "$i")" \
        unshare --uts --mount --propagation private \
        sh -c 'hostname "$1" && mount --bind "$2" "$3" && exec slurmd -D -f "$4" -N "$1"' \
        sh "$node" "$DIR/disk/$node" "$DIR/local" "$DIR/slurm.conf" \
        </dev/null >>"$DIR/log/slurmd-$node.out" 2>&1 &
    sed -i "/^slurmd-$node /d" "$DIR/pids"
    echo "slurmd-$node $!" >>"$DIR/pids"
}

# The pid of host I's slurmd, if it runs.
slurmd_pid() {
    local pid
    pid=$(awk -v n="slurmd-node$1" '$1 == n { print $2 }' "$DIR/pids" 2>/dev/null)
    [ -n "$pid" ] && live_pids "$DIR" | grep -qx "$pid" && echo "$pid"
    return 0
}

# Every process in host I's network namespace gets SIGKILL (each by its own pid).
kill_host_processes() {
    local ns p i
    ns=$(netns "$1")
    for ((i = 0; i < 50; i++)); do
        [ -e "/var/run/netns/$ns" ] || return 0
        local pids
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [ -n "$pids" ] || return 0
        for p in $pids; do
            [ "$p" -gt 1 ] && [ "$p" != $$ ] && kill -KILL "$p" 2>/dev/null || true
        done
        sleep 0.1
    done
    log "processes left in $ns: $(ip netns pids "$ns" | tr '\n' ' ')"
}

hosts_count() { grep -c '^host ' "$DIR/net" 2>/dev/null || echo 0; }

# Everything `up` made: daemons and jobs (slurm.sh's stop), what is left in the hosts'
# namespaces, the namespaces, the bridge. Safe to call on a half-made cluster.
teardown() {
    local i n
    stop "$DIR"
    n=$(hosts_count)
    for ((i = 1; i <= n; i++)); do
        kill_host_processes "$i"
        ip netns del "$(netns "$i")" 2>/dev/null || true
    done
    ip link del "$(bridge)" 2>/dev/null || true
}

fail() {
    local f
    log "FAILED: $*"
    for f in "$DIR"/log/*.log "$DIR"/log/*.out; do
        [ -s "$f" ] || continue
        echo "--- tail $f" >&2
        tail -n "$([[ $f == *.log ]] && echo 30 || echo 10)" "$f" >&2
    done
    teardown
    exit 1
}

# The state of node I as sinfo shows it (`idle`, `alloc`, `down*`, ...).
node_state() { sinfo -h -n "node$1" -o %t 2>/dev/null | head -n1; }

up() {
    local n=$1 cpus=$2 port subnet conf deadline i state jobs job
    [[ $n =~ ^[1-9][0-9]?$ && $cpus =~ ^[1-9][0-9]*$ ]] || usage
    install_packages
    if [ "$(id -u)" != 0 ]; then
        log "a test Slurm runs its daemons as root and makes network namespaces: not root"
        exit 3
    fi
    command -v ip >/dev/null 2>&1 && command -v nsenter >/dev/null 2>&1 ||
        { log "needs ip (iproute2) and nsenter, unshare (util-linux)"; exit 1; }
    [ ! -f "$DIR/net" ] || teardown
    rm -f "$DIR/net"
    fresh_state
    mkdir -p "$DIR/local" "$DIR/disk"
    : >"$DIR/pids"

    subnet=$(free_subnet)
    echo "head $subnet.1 $(bridge)" >"$DIR/net"
    for ((i = 1; i <= n; i++)); do
        echo "host node$i $subnet.$((10 + i)) $(netns "$i")" >>"$DIR/net"
    done
    # A fixed MAC address: a bridge otherwise takes the lowest of its ports', so a crash that
    # removes that port changes the head's MAC, and every host's packets to the head go to the
    # old one until its ARP entry is probed again (measured: a live worker on another host was
    # silent for 5 s and given up by its heartbeat timeout).
    ip link add "$(bridge)" address "$(tag | sed 's/\(..\)\(..\)\(..\)/02:92:00:\1:\2:\3/')" type bridge ||
        fail "cannot make bridge $(bridge)"
    ip addr add "$subnet.1/24" dev "$(bridge)"
    ip link set "$(bridge)" up
    for ((i = 1; i <= n; i++)); do
        make_host_net "$i" || fail "cannot make host $i's namespace"
    done

    port=$(free_ports "$DIR")
    conf=$DIR/slurm.conf
    {
        echo "# Written by scripts/slurm-hosts.sh: a head and $n hosts on bridge $(bridge) ($subnet.0/24)."
        conf_common diffusehosts "$(hostname -s)($subnet.1)" "$port" "-%n"
        echo "SlurmdTimeout=10"
        for ((i = 1; i <= n; i++)); do
            echo "NodeName=node$i NodeAddr=$subnet.$((10 + i)) CPUs=$cpus RealMemory=4096 State=UNKNOWN"
        done
        echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    } >"$conf"
    export SLURM_CONF=$conf
    cd "$DIR"
    deadline=$((SECONDS + 60))

    start_munged
    setsid slurmctld -D -f "$conf" </dev/null >"$DIR/log/slurmctld.out" 2>&1 &
    echo "slurmctld $!" >>"$DIR/pids"
    for ((i = 1; i <= n; i++)); do
        start_slurmd "$i"
    done

    until scontrol ping >/dev/null 2>&1; do
        ((SECONDS < deadline)) || fail "slurmctld did not answer scontrol ping"
        need_daemons $((n + 2))
        sleep 0.2
    done
    for ((i = 1; i <= n; i++)); do
        while :; do
            state=$(node_state "$i")
            case $state in
            idle) break ;;
            drain* | drng* | inval* | fail*) fail "node$i is $state (never heals by itself)" ;;
            esac
            ((SECONDS < deadline)) || fail "node$i not idle (state '${state:-none}')"
            need_daemons $((n + 2))
            sleep 0.2
        done
    done

    # Up means a job ran on every host: under the host's name, with its disk at DIR/local, and
    # reaching the head's address over TCP.
    jobs=
    for ((i = 1; i <= n; i++)); do
        job=$(sbatch --parsable -J slurm-hosts-smoke -w "node$i" -o "$DIR/log/smoke-node$i.out" \
            --wrap "[ \"\$(hostname)\" = node$i ] && touch $DIR/local/smoke &&
                    timeout 5 bash -c ': </dev/tcp/$subnet.1/$port'" 2>"$DIR/log/sbatch.err") ||
            fail "smoke job not submitted: $(cat "$DIR/log/sbatch.err")"
        jobs="$jobs $job"
    done
    for job in $jobs; do
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
    done
    for ((i = 1; i <= n; i++)); do
        [ -f "$DIR/disk/node$i/smoke" ] || fail "node$i's job did not write to its own disk"
        rm -f "$DIR/disk/node$i/smoke"
    done
    log "up in $DIR: head $subnet.1, $n hosts of $cpus CPUs, ports $port-$((port + 1))"
    echo "export SLURM_CONF=$conf"
}

crash() {
    local i=$1
    [ -f "$DIR/net" ] && [ -n "$(host_addr "$i")" ] || usage
    ip link del "$(outer "$i")" 2>/dev/null || true # the cable: nothing more leaves or arrives
    kill_host_processes "$i"
    sed -i "/^slurmd-node$i /d" "$DIR/pids"
    ip netns del "$(netns "$i")" 2>/dev/null || true
    log "node$i crashed (link cut, processes killed, namespace removed)"
}

boot() {
    local i=$1 deadline state
    [ -f "$DIR/net" ] && [ -n "$(host_addr "$i")" ] || usage
    [ ! -e "/var/run/netns/$(netns "$i")" ] || { log "node$i is up"; exit 1; }
    export SLURM_CONF=$DIR/slurm.conf
    cd "$DIR"
    make_host_net "$i" || fail "cannot make node$i's namespace again"
    start_slurmd "$i"
    # Up once the controller has heard from it: no longer `*` (not responding) nor down.
    deadline=$((SECONDS + 60))
    while :; do
        state=$(node_state "$i")
        case $state in
        *'*' | down* | '') ;;
        drain* | inval* | fail*) log "node$i came back $state"; break ;;
        *) break ;;
        esac
        ((SECONDS < deadline)) || { log "node$i not back (state '${state:-none}')"; exit 1; }
        [ -n "$(slurmd_pid "$i")" ] || { sleep 0.5; [ -n "$(slurmd_pid "$i")" ]; } ||
            { tail -n 20 "$DIR/log/slurmd-node$i.log" >&2; log "slurmd of node$i exited"; exit 1; }
        sleep 0.2
    done
    log "node$i booted ($state)"
}

[ $# -ge 2 ] || usage
DIR=$(realpath -m -- "$2")
case $1 in
up)
    [ $# -ge 3 ] && [ $# -le 4 ] || usage
    mkdir -p "$DIR"
    up "$3" "${4:-1}"
    ;;
down)
    [ $# -eq 2 ] || usage
    [ -f "$DIR/net" ] || [ -f "$DIR/pids" ] || exit 0
    teardown
    ;;
crash)
    [ $# -eq 3 ] || usage
    crash "$3"
    ;;
boot)
    [ $# -eq 3 ] || usage
    boot "$3"
    ;;
*) usage ;;
esac
