#!/usr/bin/env bash
# A peer fetch of a 1 GB object against curl downloading it from nginx on loopback.
# Worker A caches the object (t1), then is kept busy (t2: sleep) while t3 on worker B reads the
# object: B fetches it from A's peer server, verifies its SHA-256 and renames it into its cache.
# The peer time is B's staging time of t3 from the results file.
source "$(dirname "$0")/common.sh"
command -v nginx >/dev/null || { apt-get install -y -q nginx >/dev/null 2>&1 || { echo "nginx unavailable"; exit 1; }; }
head -c 1000000000 /dev/urandom >"$WORK/big.dat"
export DIFFUSE_CLIENT_TOKEN=c-$RANDOM$RANDOM DIFFUSE_WORKER_TOKEN=w-$RANDOM$RANDOM
port=$((20000 + RANDOM % 20000)); nport=$((port + 1))
"$DIFFUSE" dispatcher --listen 127.0.0.1:$port --journal "$WORK/j.sqlite" 2>"$WORK/d.log" & D=$!
trap 'kill $D $A $B 2>/dev/null; nginx -c "$WORK/nginx.conf" -s stop 2>/dev/null; rm -rf "$WORK"' EXIT
sleep 0.5
"$DIFFUSE" worker --dispatcher http://127.0.0.1:$port --cache-dir "$WORK/a" --cache-size 3GB --name A 2>"$WORK/a.log" & A=$!
sleep 0.5
export DIFFUSE_DISPATCHER=http://127.0.0.1:$port
echo "{\"id\":\"t1\",\"cmd\":\"true\",\"inputs\":[\"file://$WORK/big.dat\"]}" >"$WORK/t1.jsonl"
"$DIFFUSE" submit "$WORK/t1.jsonl" >/dev/null && "$DIFFUSE" wait >/dev/null
echo '{"id":"t2","cmd":"sleep 30"}' >"$WORK/t2.jsonl"; "$DIFFUSE" submit "$WORK/t2.jsonl" >/dev/null
"$DIFFUSE" worker --dispatcher http://127.0.0.1:$port --cache-dir "$WORK/b" --cache-size 3GB --name B 2>"$WORK/b.log" & B=$!
sleep 1
echo "{\"id\":\"t3\",\"cmd\":\"true\",\"inputs\":[\"file://$WORK/big.dat\"]}" >"$WORK/t3.jsonl"
"$DIFFUSE" submit "$WORK/t3.jsonl" >/dev/null
for _ in $(seq 600); do
  r=$(curl -s -H "Authorization: Bearer $DIFFUSE_CLIENT_TOKEN" http://127.0.0.1:$port/v1/tasks/t3)
  echo "$r" | grep -q '"state":"succeeded"' && break; sleep 0.1
done
cat >"$WORK/nginx.conf" <<NGX
user root; daemon on; pid $WORK/nginx.pid; error_log $WORK/nginx.err;
events {}
http { access_log off; sendfile on; server { listen 127.0.0.1:$nport; root $WORK; } }
NGX
nginx -c "$WORK/nginx.conf"
sleep 0.3
cat "$WORK/big.dat" >/dev/null
best=999
for _ in 1 2 3; do
  t=$(curl -sf -o "$WORK/curl.out" -w '%{time_total}' http://127.0.0.1:$nport/big.dat) || { echo "curl from nginx failed"; cat "$WORK/nginx.err"; exit 1; }
  rm -f "$WORK/curl.out"
  best=$(python3 -c "print(min($best, $t))")
done
echo "$r" | python3 -c "
import json,sys
v=json.load(sys.stdin); rep=json.loads(v['outcome']['result_json'])
peer=rep['staged_at']-rep['started_at']; tr=rep['traffic']
assert tr['peer']==1 and tr['bytes_storage']==0, tr
print(f'peer fetch of 1 GB: {peer:.2f} s (node {v[\"node\"]}, {tr}), curl from nginx {$best:.2f} s, ratio curl/peer {$best/peer:.2f}')"
