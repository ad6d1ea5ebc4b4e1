#!/bin/sh
# Self-check of the VM tier: with VM_INJECT_FAILURE=1 a real guest test fails, so the tier must
# exit non-zero and count exactly that failure. usage: vm/selfcheck.sh <dir-from-build.sh>
set -u
here=$(cd "$(dirname "$0")" && pwd)
# Only the injectable test, in the executable that holds it (numa.rs): the full tier has just
# run, and running it again would add its time (and its chances of a stall) for nothing.
out=$(VM_INJECT_FAILURE=1 VM_ONLY='numa-*' VM_TEST_FILTER=injected_failure_when_asked "$here/vmtest.sh" "$@" 2>&1); rc=$?
summary=$(printf '%s\n' "$out" | grep '^VM-[a-z0-9-]*: ' | tail -1)
echo "selfcheck: injected failure gave: $summary (exit $rc)"
if [ "$rc" != 0 ] && printf '%s\n' "$summary" | grep -q '^VM-[a-z0-9-]*: [0-9]* passed, 1 failed' \
   && printf '%s\n' "$out" | grep -q 'injected_failure_when_asked .*FAILED'; then
  echo "selfcheck: ok, the tier reports a failing guest test"
else
  printf '%s\n' "$out" | tail -40
  echo "selfcheck: FAILED, a failing guest test did not fail the tier" >&2
  exit 1
fi
