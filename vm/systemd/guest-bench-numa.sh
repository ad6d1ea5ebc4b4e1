#!/bin/sh
# In the systemd guest (optional step `bench-numa`: make bench-vm-numa, or vm/systemd/run.sh
# session bench-numa): the NUMA-spanning thread balancing bench (bench/scenarios/bind-numa.sh)
# on the guest's two NUMA nodes, which the host (one node) cannot measure. The results file is
# written to the shared source tree's bench/results/<time>-bind-numa.md (BENCH_SAVE=1), named by
# its start time, never overwritten. The host passes its own load file and the emulation's
# caveat (BENCH_HOST_LOAD_FILE, BENCH_HOST_CPUS, BENCH_VM_NOTE) through the environment.
# usage: guest-bench-numa.sh <source-dir>
src=${1:?usage: guest-bench-numa.sh <source-dir>}
. "$src/vm/systemd/guest-lib.sh"
session_check
cd "$src" || { fail "no source tree at $src"; echo "=== done"; exit 1; }
log=/tmp/pjw-guest-bench-numa.log
BENCH_NO_BUILD=1 BENCH_SAVE=1 timeout 1500 bench/run.sh bind-numa > "$log" 2>&1; rc=$?
sed 's/^/  | /' "$log"
if [ "$rc" = 0 ]; then ok "bench/run.sh bind-numa ran to the end"; else fail "bench/run.sh bind-numa exited $rc"; fi
file=$(sed -n 's/^wrote //p' "$log" | tail -1)
if [ -n "$file" ] && [ -f "$file" ]; then ok "results file $file"; else fail "no results file written"; fi
for what in "wall time" placement; do
  row=$(grep "^| bind-numa: .*: $what |" "$log" | tail -1)
  case $row in
    *"not measured"*|"") fail "bind-numa $what row not measured: $row" ;;
    *) ok "bind-numa $what measured: $(echo "$row" | cut -d'|' -f3)" ;;
  esac
done
left=$(stray_pjw_cgroups)
if [ -z "$left" ]; then ok "the bench left no pjw-* cgroup"; else fail "the bench left cgroups: $(echo "$left" | tr '\n' ' ')"; fi
echo "=== done"
