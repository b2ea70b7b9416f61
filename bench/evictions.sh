#!/usr/bin/env bash
# 2Mark against the per-node eviction policies on the MI workload (GCC, dynamic provisioning,
# 64 nodes): efficiency, hit rates and what 2Mark did, per cache size. Then the scheduling
# window's effect at 1 GB. Deterministic (seed 1): the same figures on every run.
# Usage: bench/evictions.sh [cache sizes, default "1GB 1.5GB"]
source "$(dirname "$0")/common.sh"
sizes=${*:-1GB 1.5GB}
printf "%-7s %-7s %7s %10s %7s %6s %6s  %s\n" cache evict window efficiency local peer miss "2mark (local phases, global phases, evicted, of which replicas, moved)"
row() {
  "$DIFFUSE" sim mi --cache-size "$1" --eviction "$2" --window "$3" --json | python3 -c "
import json, sys
d = json.load(sys.stdin)
m = d['two_mark']
extra = '' if m is None else '%d, %d, %d, %d, %d' % (m['local_phases'], m['global_phases'], m['evicted'], m['evicted_replicas'], m['moved'])
print('%-7s %-7s %7s %10.3f %6.1f%% %5.1f%% %5.1f%%  %s' % ('$1', '$2', '$3', d['efficiency'], 100*d['hit_local'], 100*d['hit_peer'], 100*d['miss'], extra))"
}
for size in $sizes; do
  for e in lru lfu fifo random 2mark; do row "$size" "$e" 2500; done
done
for w in 10000 50000; do
  for e in lru 2mark; do row 1GB "$e" "$w"; done
done
