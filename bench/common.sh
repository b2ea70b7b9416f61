# Shared helpers for the bench scripts (sourced).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release --locked -p diffuse >/dev/null 2>&1
DIFFUSE="$PWD/target/release/diffuse"
WORK=$(mktemp -d /tmp/diffuse-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(d$1)"; }
