#!/usr/bin/env bash
# A peer fetch of a 1 GB object against curl downloading it from nginx on loopback.
# Worker A caches the object (t1), then is kept busy (t2: sleep) while a fresh worker B reads the
# object (t3): B fetches it from A's peer server, verifies its SHA-256 and renames it into its
# cache. The peer time is B's staging time of t3 from the task's report. This is done three
# times (a new B each time, the previous one stopped and its cache deleted), and curl runs three
# times; the best of each is compared. Dirty pages are flushed (`sync`) before every timed run,
# so neither side pays for the other's writeback.
source "$(dirname "$0")/common.sh"
head -c 1000000000 /dev/urandom >"$WORK/big.dat"
export DIFFUSE_CLIENT_TOKEN=c-$RANDOM$RANDOM DIFFUSE_WORKER_TOKEN=w-$RANDOM$RANDOM
port=$((20000 + RANDOM % 20000)); nport=$((port + 1))
B=
"$DIFFUSE" dispatcher --listen 127.0.0.1:$port --journal "$WORK/j.sqlite" 2>"$WORK/d.log" & D=$!
trap 'kill $D $A $B 2>/dev/null || true; stop_nginx || true; rm -rf "$WORK"' EXIT
sleep 0.5
"$DIFFUSE" worker --dispatcher http://127.0.0.1:$port --cache-dir "$WORK/a" --cache-size 3GB --name A 2>"$WORK/a.log" & A=$!
sleep 0.5
export DIFFUSE_DISPATCHER=http://127.0.0.1:$port
echo "{\"id\":\"t1\",\"cmd\":\"true\",\"inputs\":[\"file://$WORK/big.dat\"]}" >"$WORK/t1.jsonl"
"$DIFFUSE" submit "$WORK/t1.jsonl" >/dev/null && "$DIFFUSE" wait >/dev/null
echo '{"id":"t2","cmd":"sleep 120"}' >"$WORK/t2.jsonl"; "$DIFFUSE" submit "$WORK/t2.jsonl" >/dev/null
peer=999
for i in 1 2 3; do
  sync
  "$DIFFUSE" worker --dispatcher http://127.0.0.1:$port --cache-dir "$WORK/b$i" --cache-size 3GB --name B$i 2>"$WORK/b$i.log" & B=$!
  sleep 1
  echo "{\"id\":\"t3-$i\",\"cmd\":\"true\",\"inputs\":[\"file://$WORK/big.dat\"]}" >"$WORK/t3.jsonl"
  "$DIFFUSE" submit "$WORK/t3.jsonl" >/dev/null
  r=
  for _ in $(seq 600); do
    r=$(curl -s -H "Authorization: Bearer $DIFFUSE_CLIENT_TOKEN" http://127.0.0.1:$port/v1/tasks/t3-$i)
    echo "$r" | grep -q '"state":"succeeded"' && break; sleep 0.1
  done
  t=$(echo "$r" | python3 -c "
import json,sys
v=json.load(sys.stdin); rep=json.loads(v['outcome']['result_json'])
tr=rep['traffic']
assert v['node']=='B$i' and tr['peer']==1 and tr['bytes_peer']==1000000000 and tr['bytes_storage']==0, (v['node'], tr)
print(rep['staged_at']-rep['started_at'])")
  echo "peer fetch $i: $(printf %.2f "$t") s (B$i from A, 1000000000 bytes from the peer, 0 from storage)"
  peer=$(python3 -c "print(min($peer, $t))")
  kill $B; wait $B 2>/dev/null || true; B=; rm -rf "$WORK/b$i"
done
start_nginx $nport
sleep 0.3
best=999
for i in 1 2 3; do
  sync
  t=$(curl -sf -o "$WORK/curl.out" -w '%{time_total}' http://127.0.0.1:$nport/big.dat) || { echo "curl from nginx failed"; cat "$WORK/nginx.err"; exit 1; }
  rm -f "$WORK/curl.out"
  echo "curl from nginx $i: $(printf %.2f "$t") s"
  best=$(python3 -c "print(min($best, $t))")
done
python3 -c "print(f'best peer fetch {$peer:.2f} s, best curl {$best:.2f} s, ratio curl/peer {$best/$peer:.2f}')"
