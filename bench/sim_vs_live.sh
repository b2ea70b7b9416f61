#!/usr/bin/env bash
# The simulator against live runs on the multi-host testbed (network namespaces: a dispatcher,
# an HTTP store sending at 80 Mbit/s shared equally by its readers, four one-slot workers on
# hosts of their own), each row run live, calibrated with `diffuse calibrate`, and simulated
# with `diffuse sim run` on the calibrated testbed file: MI-like (40 files of 4 MB, each read
# 6 times) and AP-like (12 x 12 pairs) tasks of 0.5 s; FA and GCC; caches of 100 MB and 10 MB
# a worker; static pools and a dynamic one (the dispatcher's command provisioner starting
# workers on the testbed's hosts after a 4 s queue wait). Prints a markdown table with the
# abstract model's workload time next to both. Needs root (namespaces, tc). About 10 minutes.
# The benchmark is crates/diffuse/tests/sim_vs_live.rs.
#   SIM_VS_LIVE_ROWS=gcc-10MB,dyn   only the rows whose name contains one of these
#   SIM_VS_LIVE_OUT=DIR             keep each row's task file, calibrated testbed, live and
#                                   simulated traces (one JSON line a task) in DIR/<row>/
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test -q -p diffuse --test sim_vs_live bench -- --ignored --nocapture 2>&1 | grep -E '^\|'
