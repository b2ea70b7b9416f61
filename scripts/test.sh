#!/usr/bin/env bash
# The project's test command (README): installs what the tests need, then runs every check.
#   - formatting (cargo fmt --check) and lints (cargo clippy --all-targets -D warnings)
#   - all unit, integration and property tests (cargo test --workspace)
#   - the paper-reproduction acceptance checks (diffuse sim paper exits 1 if any check fails)
# The live-runtime tests need a real S3-compatible server: moto's server mode, from PyPI, which
# the S3 test starts and stops itself. Tests that need several hosts, other users, resource
# limits or a small file system use iproute2 (network namespaces), util-linux (setpriv, prlimit,
# mount) and run as root; as another user they say SKIPPED and pass. The elastic pool's Slurm
# tests run a real one-node Slurm (scripts/slurm.sh installs munge and slurm-wlm's daemons from
# Debian when missing, and starts and stops them per test); the faults across hosts
# (tests/faults_slurm*.rs) a Slurm whose nodes are network namespaces (scripts/slurm-hosts.sh). The Python client's tests
# (scripts/test-python.sh) run last, against the release binary, in a virtualenv under target/
# with pytest, parsl and mypy from PyPI. `/metrics` is checked by promtool (Debian's prometheus
# package) and the web dashboard in a headless Chromium (Debian's chromium), both installed when
# missing; so are bwa, samtools and bcftools (Debian's), which the Snakemake read-mapping test runs.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
# The network faults of tests/faults_slurm_net.rs (a cut, loss, a delay) are netfilter rules.
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
{ command -v setpriv && command -v prlimit && command -v mount; } >/dev/null 2>&1 || missing+=(util-linux mount)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# The Snakemake read-mapping test (python/tests/test_snakemake.py) runs the real tools.
{ command -v bwa && command -v samtools && command -v bcftools; } >/dev/null 2>&1 || missing+=(bwa samtools bcftools)
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing ${missing[*]} =="
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! python3 -c "import moto.server" >/dev/null 2>&1; then
    echo "== installing moto[server] (S3-compatible test server) =="
    python3 -m pip install --quiet --disable-pip-version-check 'moto[server]'
fi

# Toolchain components: present on the project's machines; added if a fresh rustup lacks them.
if ! cargo clippy --version >/dev/null 2>&1 || ! cargo fmt --version >/dev/null 2>&1; then
    rustup component add clippy rustfmt
fi

scripts/check.sh

echo "== paper reproduction (release) =="
cargo build --release --locked -p diffuse
./target/release/diffuse sim paper --out target/paper

echo "== Python client (python/) =="
scripts/test-python.sh
