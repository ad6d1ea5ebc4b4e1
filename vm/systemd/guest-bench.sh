#!/bin/sh
# In the systemd guest (optional step `bench`: vm/systemd/run.sh session bench): the launch
# scenario where systemd is PID 1, so its `systemd-run --scope /bin/true` row is measured beside
# pjw's and bare fork/exec's in the same run (issue 14). Under software emulation the absolute
# rates mean little; the rows side by side do. The results file is written to the shared source
# tree's bench/results/<time>-launch.md (BENCH_SAVE=1), named by its start time, never overwritten.
# usage: guest-bench.sh <source-dir>
src=${1:?usage: guest-bench.sh <source-dir>}
. "$src/vm/systemd/guest-lib.sh"
session_check
cd "$src" || { fail "no source tree at $src"; echo "=== done"; exit 1; }
log=/tmp/pjw-guest-bench.log
BENCH_NO_BUILD=1 BENCH_SAVE=1 LAUNCH_N=${VM_BENCH_LAUNCH_N:-200} LAUNCH_SRUN_N=${VM_BENCH_SYSTEMD_RUN_N:-50} \
  timeout 1500 bench/run.sh launch > "$log" 2>&1; rc=$?
sed 's/^/  | /' "$log"
if [ "$rc" = 0 ]; then ok "bench/run.sh launch ran to the end"; else fail "bench/run.sh launch exited $rc"; fi
file=$(sed -n 's/^wrote //p' "$log" | tail -1)
if [ -n "$file" ] && [ -f "$file" ]; then ok "results file $file"; else fail "no results file written"; fi
row=$(grep '^| launch: sequential `systemd-run' "$log" | tail -1)
case $row in
  *"not measured"*|"") fail "systemd-run row not measured: $row" ;;
  *) ok "systemd-run measured beside pjw: $(echo "$row" | cut -d'|' -f3)" ;;
esac
left=$(stray_pjw_cgroups)
if [ -z "$left" ]; then ok "the bench left no pjw-* cgroup"; else fail "the bench left cgroups: $(echo "$left" | tr '\n' ' ')"; fi
echo "=== done"
