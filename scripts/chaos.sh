#!/usr/bin/env bash
# `make chaos`: the chaos test (crates/cli/tests/chaos.rs) with PJW_CHAOS_CYCLES (1000) job
# cycles and random kill -9 of the daemon; prints its figures and keeps them, with the seed and
# the machine, in bench/results/chaos-<date>T<time>.md (a new file each run). Root.
set -uo pipefail
cd "$(dirname "$0")/.."
cycles=${PJW_CHAOS_CYCLES:-1000}
stamp=$(date -u +%Y-%m-%dT%H%M%S)
out=bench/results/chaos-$stamp.md
log=$(mktemp /tmp/pjw-chaos.XXXXXX)
trap 'rm -f "$log"' EXIT
PJW_CHAOS_CYCLES=$cycles cargo test -p pjw --test chaos -- --nocapture 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
[ -e "$out" ] && out=bench/results/chaos-$stamp-$$.md
{
  echo "# Chaos run $stamp (UTC)"
  echo
  echo "\`make chaos\` (crates/cli/tests/chaos.rs): $cycles job cycles, daemon kill -9 and restart at random."
  echo "Machine: $(nproc) CPUs, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg), exit $rc."
  echo
  echo '```'
  grep '^chaos:' "$log"
  echo '```'
} > "$out"
echo "figures kept in $out"
exit "$rc"
