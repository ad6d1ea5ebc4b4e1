#!/usr/bin/env bash
# Run cargo test with the given arguments, show its output, and close with one line adding up
# every test binary's counts — "host: N passed, M failed, K skipped" — after the list of the
# skipped tests with their reasons. A test that called testkit's skip! (it could not run its
# point here) is counted as skipped, not passed: it appends a line to $PJW_SKIP_LOG. libtest's
# ignored tests are skipped too. --no-fail-fast: a failing test binary does not stop the ones
# after it, so one run shows every failure (a CI run once stopped at 80 of 345 tests). Exits with
# cargo's status.
set -uo pipefail
log=$(mktemp)
skips=$(mktemp)
trap 'rm -f "$log" "$skips"' EXIT
export PJW_SKIP_LOG=$skips
cargo test --no-fail-fast "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
scripts/count-tests.sh "$log" "$skips" "${TEST_LABEL:-host}" || true
exit "$rc"
