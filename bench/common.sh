# Shared helpers for the bench scripts (sourced).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# DIFFUSE_BIN=path runs another build (e.g. an older commit's, to compare side by side).
if [ -n "${DIFFUSE_BIN:-}" ]; then
  DIFFUSE="$DIFFUSE_BIN"
else
  cargo build --release --locked -p diffuse >/dev/null 2>&1
  DIFFUSE="${CARGO_TARGET_DIR:-$PWD/target}/release/diffuse"
fi
WORK=$(mktemp -d /tmp/diffuse-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(d$1)"; }
# nginx serving $WORK on 127.0.0.1:$1 with sendfile (the reference for peer transfers); installed
# from apt if missing. Stop it with `stop_nginx`.
start_nginx() {
  command -v nginx >/dev/null || { apt-get install -y -q nginx >/dev/null 2>&1 || { echo "nginx unavailable"; exit 1; }; }
  cat >"$WORK/nginx.conf" <<NGX
user root; daemon on; pid $WORK/nginx.pid; error_log $WORK/nginx.err;
events {}
http { access_log off; sendfile on; server { listen 127.0.0.1:$1; root $WORK; } }
NGX
  nginx -c "$WORK/nginx.conf"
}
stop_nginx() { [ -f "$WORK/nginx.conf" ] && nginx -c "$WORK/nginx.conf" -s stop 2>/dev/null || true; }
# `--cache-dir $WORK/cache` where the build has it (builds before issue 15 kept caches in the run
# directory), so a benchmark never touches the user's own caches.
cache_flag() { "$DIFFUSE" run --help 2>/dev/null | grep -q -- '--cache-dir' && echo "--cache-dir $WORK/cache" || true; }
# `--reuse off` where the build has it (results reused by content, issue 27): benchmarks that run
# the same tasks twice to measure warm caches, not skipped work.
reuse_off() { "$DIFFUSE" run --help 2>/dev/null | grep -q -- '--reuse' && echo "--reuse off" || true; }
