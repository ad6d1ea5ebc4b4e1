#!/usr/bin/env bash
# Self-check of the skip rules: on the host a component that make test provides (here tmux,
# pretended missing with PJW_TEST_PRETEND_MISSING) must fail the test that needs it, not skip
# it. Runs the one test executable that needs tmux.
set -uo pipefail
cd "$(dirname "$0")/.."
skips=$(mktemp); trap 'rm -f "$skips"' EXIT
out=$(PJW_SKIP_LOG=$skips PJW_TEST_PRETEND_MISSING=tmux cargo test -q -p pjw --test top 2>&1); rc=$?
if [ "$rc" != 0 ] && printf '%s\n' "$out" | grep -q 'tmux is missing on this host, and make test provides it' \
   && ! grep -q . "$skips"; then
  echo "skip-selfcheck: ok, a missing tmux failed the test on the host (no skip recorded)"
else
  printf '%s\n' "$out" | tail -30
  echo "skip-selfcheck: FAILED, a missing provided component did not fail its test (exit $rc)" >&2
  exit 1
fi
