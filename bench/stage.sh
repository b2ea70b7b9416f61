#!/usr/bin/env bash
# `diffuse stage` under naive, LDS and GDS on the shaped multi-host testbed (9 network
# namespaces: a dispatcher, an HTTP storage server at 100 Mbit/s, two fast sources at 400 Mbit/s,
# two slow ones at 80 Mbit/s, three destinations taking in 400 Mbit/s each), the GDS paper's
# experiments scaled down: 20 files of 4/20/100 MB in proportions 0.5/0.35/0.15, replicated on
# 1, 2 and 4 sources, wanted on 1 and 3 destinations. Prints a markdown table: throughput in
# Mb/s (makespan in s) per schedule, and the flow lower bound of each batch. Needs root
# (namespaces, tc). About 10 minutes. The benchmark is crates/diffuse/tests/stage_bench.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test -q -p diffuse --test stage_bench -- --ignored --nocapture 2>&1 | grep -E '^\||x[13]: '
