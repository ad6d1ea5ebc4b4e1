#!/usr/bin/env bash
# Run cargo test with the given arguments, show its output, and close with one line adding up
# every test binary's counts: "tests: N passed, N failed". Exits with cargo's status.
set -uo pipefail
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     END { printf "\ntests: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
exit "$rc"
