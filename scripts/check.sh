#!/usr/bin/env bash
# Formatting, lints and tests: what every change must pass.
set -euo pipefail
cd "$(dirname "$0")/.."
# procps-ng 4.0.2's kill program (Debian 12) reads `kill -KILL -PGID` as kill(-1, SIGKILL): as
# root it kills every process on the machine, CI included. Signals go through rustix instead.
if grep -rn 'Command::new("kill")' crates/; then
    echo "check.sh: signal with rustix (tests/common: send_signal), not the kill program" >&2
    exit 1
fi
echo "== cargo fmt --check =="
cargo fmt --all -- --check
echo "== cargo clippy =="
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test =="
cargo test --workspace --locked --no-fail-fast
