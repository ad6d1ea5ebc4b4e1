#!/usr/bin/env bash
# Install what building and testing pjw needs and a fresh Debian 12 machine may lack.
# Idempotent and quiet when everything is there.
set -euo pipefail

need=()
command -v cc >/dev/null || need+=(build-essential)
command -v setpriv >/dev/null || need+=(util-linux)
command -v pkill >/dev/null || need+=(procps)
command -v taskset >/dev/null || need+=(util-linux)
# promtool checks the metrics page; tmux drives `pjw top` in its test; the central-store test
# runs a private PostgreSQL server (initdb, pg_ctl from the Debian package).
# Not in the project's test guests (/etc/pjw-guest): they have no network, and the tests that
# need these skip there (crates/testkit/src/skip.rs) while the host tier runs them.
if [ ! -e /etc/pjw-guest ]; then
  [ -x /usr/bin/promtool ] || need+=(prometheus)
  command -v tmux >/dev/null || need+=(tmux)
  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || need+=(postgresql)
  # The multi-node tier (crates/cli/tests/cluster.rs) joins its namespaces with veth pairs (ip)
  # and the TLS tests make a CA with openssl; Prometheus itself comes with promtool above.
  command -v ip >/dev/null || need+=(iproute2)
  command -v openssl >/dev/null || need+=(openssl)
  command -v prometheus >/dev/null || [ -x /usr/bin/prometheus ] || need+=(prometheus)
  # man renders the generated pages in their test; lintian checks the package (make deb).
  command -v man >/dev/null || need+=(man-db)
  command -v lintian >/dev/null || need+=(lintian)
  # The completion tests ask zsh and fish themselves for job ids.
  command -v zsh >/dev/null || need+=(zsh)
  command -v fish >/dev/null || need+=(fish)
  # The real-software tests (crates/cli/tests/hpc*.rs) run Open MPI, libgomp, hwloc,
  # stress-ng and sysbench under pjw (the systemd guest's image has them too); pjw status
  # counts stress-ng's processes (crates/cli/tests/top.rs).
  command -v mpirun >/dev/null || need+=(openmpi-bin)
  command -v mpicc >/dev/null || need+=(libopenmpi-dev)
  command -v hwloc-ps >/dev/null || need+=(hwloc)
  command -v stress-ng >/dev/null || need+=(stress-ng)
  command -v sysbench >/dev/null || need+=(sysbench)
  # The Slurm SPANK plugin (make spank) is built against Slurm's spank.h and json-c.
  [ -e /usr/include/slurm/spank.h ] || need+=(libslurm-dev)
  [ -e /usr/include/json-c/json.h ] || need+=(libjson-c-dev)
fi
# The PBS hook (packaging/pbs) is Python; its contract test runs it.
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing ${need[*]}; run as root or install them" >&2
    exit 1
  fi
  echo "install-deps: installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
  for c in "$HOME/.cargo/bin/cargo" /root/.cargo/bin/cargo; do
    if [ -x "$c" ]; then
      echo "install-deps: cargo is at $c but not on PATH; add $(dirname "$c") to PATH" >&2
      exit 1
    fi
  done
  echo "install-deps: cargo (Rust 1.80 or newer) is required; install it with rustup" >&2
  exit 1
fi
