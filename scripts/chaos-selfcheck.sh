#!/usr/bin/env bash
# Self-check of the chaos gate (crates/cli/tests/chaos.rs): a run in which one client is made to
# lose its job's exit status (PJW_CHAOS_INJECT=lost-status: it reaches no daemon and ends with
# pjw's own error, exit 125) must fail, and fail for that client. Like scripts/skip-selfcheck.sh
# for the skip rules: a gate that cannot fail proves nothing. Root; 10 cycles, a few seconds.
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(PJW_CHAOS_INJECT=lost-status PJW_CHAOS_CYCLES=10 cargo test -q -p pjw --test chaos -- --nocapture 2>&1); rc=$?
if [ "$rc" != 0 ] && printf '%s\n' "$out" | grep -q '^chaos: lost0: no exit status (wanted 7)' \
   && printf '%s\n' "$out" | grep -qE "no exit status \(pjw's error\) [1-9]"; then
  echo "chaos-selfcheck: ok, a client that lost its exit status failed the chaos gate"
else
  printf '%s\n' "$out" | grep -E '^chaos|panicked|test result' | tail -20
  echo "chaos-selfcheck: FAILED, the chaos gate passed (exit $rc) with a client that lost its exit status" >&2
  exit 1
fi
