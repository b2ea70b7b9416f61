#!/usr/bin/env bash
# Formatting, lints and tests: what every change must pass.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== cargo fmt --check =="
cargo fmt --all -- --check
echo "== cargo clippy =="
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test =="
cargo test --workspace --locked
