#!/usr/bin/env bash
# The serving side of a peer fetch alone: curl downloading a cached 1 GB object from worker A's
# peer server (/v1/cache/<key>, worker token) against curl downloading the same bytes from nginx
# (sendfile on), each to a file and to /dev/null, three rounds interleaved.
source "$(dirname "$0")/common.sh"
head -c 1000000000 /dev/urandom >"$WORK/big.dat"
export DIFFUSE_CLIENT_TOKEN=c-$RANDOM$RANDOM DIFFUSE_WORKER_TOKEN=w-$RANDOM$RANDOM
port=$((20000 + RANDOM % 20000)); nport=$((port + 1)); aport=$((port+2))
"$DIFFUSE" dispatcher --listen 127.0.0.1:$port --journal "$WORK/j.sqlite" 2>"$WORK/d.log" & D=$!
trap 'kill $D $A 2>/dev/null || true; stop_nginx || true; rm -rf "$WORK"' EXIT
sleep 0.5
"$DIFFUSE" worker --dispatcher http://127.0.0.1:$port --cache-dir "$WORK/a" --cache-size 3GB --name A --listen 127.0.0.1:$aport 2>"$WORK/a.log" & A=$!
sleep 0.5
export DIFFUSE_DISPATCHER=http://127.0.0.1:$port
echo "{\"id\":\"t1\",\"cmd\":\"true\",\"inputs\":[\"file://$WORK/big.dat\"]}" >"$WORK/t1.jsonl"
"$DIFFUSE" submit "$WORK/t1.jsonl" >/dev/null && "$DIFFUSE" wait >/dev/null
key=$(ls $WORK/a/objects | grep -v meta)
start_nginx $nport
sync; sleep 1
for i in 1 2 3; do
  t=$(curl -sf -o "$WORK/curl.out" -w '%{time_total}' http://127.0.0.1:$nport/big.dat); rm -f $WORK/curl.out; echo nginx-file $t
  t=$(curl -sf -o "$WORK/curl.out" -w '%{time_total}' -H "Authorization: Bearer $DIFFUSE_WORKER_TOKEN" http://127.0.0.1:$aport/v1/cache/$key); rm -f $WORK/curl.out; echo peer-file $t
  t=$(curl -sf -o /dev/null -w '%{time_total}' http://127.0.0.1:$nport/big.dat); echo nginx-null $t
  t=$(curl -sf -o /dev/null -w '%{time_total}' -H "Authorization: Bearer $DIFFUSE_WORKER_TOKEN" http://127.0.0.1:$aport/v1/cache/$key); echo peer-null $t
done
