#!/bin/sh
# In the systemd guest, as root in an ssh login session: every test executable of the workspace
# (the host's build; list lines "executable<TAB>package dir"), each from its package's directory
# as cargo test would, with PJW_SKIP_LOG; then scripts/count-tests.sh prints the skipped tests
# with their reasons and "<label>: N passed, M failed, K skipped".
# usage: guest-tests.sh <source-dir> <list> <label>
src=${1:?usage: guest-tests.sh <source-dir> <list> <label>}
list=${2:?}
label=${3:?}
. "$src/vm/systemd/guest-lib.sh"
session_check
export RUST_BACKTRACE=1
# Chaos: 40 job cycles with their kills and restarts here (the host tier runs 100, make chaos
# 1,000): what this guest adds is recovery under systemd's delegation, not more cycles.
export PJW_CHAOS_CYCLES=${PJW_CHAOS_CYCLES:-40}
export PJW_SKIP_LOG=/tmp/pjw-skips; : > "$PJW_SKIP_LOG"
all=/tmp/pjw-all.log; : > "$all"
cg_snapshot /tmp/pjw-cg-before-tests
extra=0; ran=0; n=0
tab=$(printf '\t')
while IFS=$tab read -r t dir; do
  [ -n "$t" ] || continue
  n=$((n + 1))
  name=${t##*/}
  echo "=== $name"
  if [ ! -x "$t" ]; then echo "=== $name: missing in the guest"; extra=$((extra + 1)); continue; fi
  log=/tmp/pjw-test-$name.log
  (cd "$dir" && CARGO_MANIFEST_DIR=$dir timeout 1200 "$t" --test-threads=4) > "$log" 2>&1; rc=$?
  cat "$log"; cat "$log" >> "$all"
  set -- $(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$log" | tail -1)
  if [ $# -lt 2 ]; then
    echo "=== $name: exit $rc without a test result line"; extra=$((extra + 1))
  else
    ran=$((ran + $1 + $2))
    if [ "$rc" != 0 ] && [ "$2" = 0 ]; then echo "=== $name: exit $rc"; extra=$((extra + 1)); fi
  fi
done < "$list"
echo "=== $n test executables"
# The tests remove what they create: no pjw cgroup may be left anywhere.
sleep 1
left=$(stray_pjw_cgroups)
if [ -n "$left" ]; then echo "=== cgroups left behind (counted as a failure):"; echo "$left" | head -20; extra=$((extra + 1)); fi
settle cg_new /tmp/pjw-cg-before-tests
left=$(cg_new /tmp/pjw-cg-before-tests)
if [ -n "$left" ]; then echo "=== new cgroups left behind (counted as a failure):"; echo "$left" | head -20; extra=$((extra + 1)); fi
left=$(pjw_processes)
if [ -n "$left" ]; then echo "=== pjw processes left behind (counted as a failure):"; echo "$left" | head -20; extra=$((extra + 1)); fi
# Failures outside libtest's counts (crashed executables, leftovers) join the failed count.
i=0; while [ "$i" -lt "$extra" ]; do echo "test result: FAILED. 0 passed; 1 failed; 0 ignored" >> "$all"; i=$((i + 1)); done
[ "$ran" -gt 0 ] || { echo "=== no test ran"; echo "test result: FAILED. 0 passed; 1 failed; 0 ignored" >> "$all"; }
sh "$src/scripts/count-tests.sh" "$all" "$PJW_SKIP_LOG" "$label"
echo "=== done"
