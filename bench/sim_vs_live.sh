#!/usr/bin/env bash
# The simulator against live runs on the multi-host testbed (network namespaces: a dispatcher,
# an HTTP store sending at 80 Mbit/s, four one-slot workers), each row run live, calibrated with
# `diffuse calibrate`, and simulated with `diffuse sim run` on the calibrated testbed file:
# MI-like (12 files of 4 MB, each read 4 times) and AP-like (6 x 6 pairs) tasks of 0.5 s,
# FA and GCC, caches of 100 MB and 10 MB a worker. Prints a markdown table with the abstract
# model's workload time next to both. Needs root (namespaces, tc). A few minutes. The benchmark
# is crates/diffuse/tests/sim_vs_live.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test -q -p diffuse --test sim_vs_live bench -- --ignored --nocapture 2>&1 | grep -E '^\|'
