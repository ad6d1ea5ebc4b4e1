#!/usr/bin/env bash
# The benchmark suite (issue 7): builds the release binaries, runs the scenarios one after the
# other with a progress line, prints the table (scenario | measured | anchor | pjw's goal |
# result) and, for a whole-suite run, writes bench/results/<date>.md (or <date>-quick.md) with
# the machine, the table, the notes on every goal missed, and the plots beside it.
#
#   bench/run.sh [--quick] [SCENARIO...]      (make bench, make bench-quick, SCENARIO=name)
#
# Scenarios live in bench/scenarios/NAME.sh; each also runs alone and prints its own table.
# Sizes can be changed for an experiment through the variables at the top of each scenario
# (ISO_REPS, ISO_SECS, BF_REPS, TA_UNIT, MEM_LIMIT_MIB, MEM_TIMEOUT, LAUNCH_N, JOBMEM_N, DCPU_N,
# DCPU_WINDOW, REACT_REPS, ALLOC_REPS, ...); BENCH_SAVE=1 writes a results file for a partial
# run; BENCH_NO_BUILD=1 skips the build; BENCH_PARENT_CPU_SHARES=N gives the daemons' parent
# cgroup the CPU weight of N/1024 processes (an experiment: pjw leaves the default).
# Every figure is a ratio or a paired comparison taken in the same run; absolute times are
# shown, never judged. Root (pjw manages cgroups); cgroups only below this process's own.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
ALL=(isolation backfill turnaround memory launch jobmem daemoncpu sampler reaction allocator)
quick=0
want=()
for a in "$@"; do
  case $a in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *)
      [ -f "$root/bench/scenarios/$a.sh" ] || { echo "bench: no scenario '$a' (have: ${ALL[*]})" >&2; exit 2; }
      want+=("$a") ;;
  esac
done
whole=0
[ ${#want[@]} -gt 0 ] || { want=("${ALL[@]}"); whole=1; }
[ "$(id -u)" = 0 ] || { echo "bench: must run as root (pjw manages cgroups)" >&2; exit 1; }

if [ "${BENCH_NO_BUILD:-0}" != 1 ]; then
  echo "building release binaries (pjw, pjw-wl) ..." >&2
  # The same build as `make release`, so the artifacts are shared and nothing is rebuilt.
  (cd "$root" && cargo build --release -q --workspace --bins)
fi

export BENCH_QUICK=$quick
export BENCH_OUT
BENCH_OUT=$(mktemp -d /var/tmp/pjw-bench-run.XXXXXX)
child=""
# Pass an interrupt on to the running scenario, which cleans up after itself.
trap '[ -z "$child" ] || { kill -TERM "$child" 2>/dev/null; wait "$child"; }; rm -rf "$BENCH_OUT"' EXIT
trap 'exit 130' INT TERM
export BENCH_T0=$EPOCHREALTIME
export BENCH_TOTAL=${#want[@]}
load0=$(cut -d' ' -f1-3 /proc/loadavg)
failed=()
i=0
for s in "${want[@]}"; do
  i=$((i + 1))
  export BENCH_INDEX=$i
  # The scenario prints its own table on stdout; the driver keeps it in the log.
  "$root/bench/scenarios/$s.sh" >> "$BENCH_OUT/scenarios.log" &
  child=$!
  if ! wait "$child"; then failed+=("$s"); fi
  child=""
done
[ -t 2 ] && printf '\r\033[K' >&2
load1=$(cut -d' ' -f1-3 /proc/loadavg)
secs=$(awk -v a="$BENCH_T0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%d", b-a}')

table() {
  printf '| scenario | measured | anchor | pjw'"'"'s goal | result |\n|---|---|---|---|---|\n'
  awk -F'\t' '{printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5}' "$BENCH_OUT/rows.tsv"
}
echo
table
[ ${#failed[@]} -eq 0 ] || echo "failed scenarios: ${failed[*]}"
echo "$secs s; load average ${load0} at the start, ${load1} at the end"

[ $whole = 1 ] || [ "${BENCH_SAVE:-0}" = 1 ] || exit $(( ${#failed[@]} > 0 ))

day=$(date +%F)
name=$day$([ $quick = 1 ] && echo -quick || true)
[ $whole = 1 ] || name=$name-$(IFS=-; echo "${want[*]}")
mkdir -p "$root/bench/results/$name"
rm -f "$root/bench/results/$name"/*.svg
cp "$BENCH_OUT"/plots/*.svg "$root/bench/results/$name/" 2>/dev/null || true
cp -r "$BENCH_OUT/raw" "$root/bench/results/$name/"
out=$root/bench/results/$name.md
cgmode=$(awk '{ t = ""; for (i = 7; i < NF; i++) if ($i == "-") { t = $(i + 1); break } }
  t == "cgroup" {v1++} t == "cgroup2" {v2++} END {
  if (v1 && v2) printf "hybrid (%d v1 hierarchies + cgroup2)", v1; else if (v2) print "pure cgroup v2"; else printf "legacy v1 (%d hierarchies)", v1 }' /proc/self/mountinfo)
busy=$(awk -v a="${load0%% *}" -v b="${load1%% *}" -v n="$(nproc)" 'BEGIN {print (a > 0.25 * n || b > 0.25 * n) ? 1 : 0}')
{
  echo "# Benchmarks — $day$([ $quick = 1 ] && echo ' (quick)' || true)"
  echo
  echo "\`$([ $quick = 1 ] && echo 'make bench-quick' || echo 'make bench')\` on $(hostname): $(nproc) CPUs ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), Linux $(uname -r), cgroup mounts: $cgmode. Commit $(cd "$root" && git rev-parse --short HEAD)$(cd "$root" && git diff --quiet HEAD -- crates bench ':!bench/results' || echo ' (with uncommitted changes)'), release build. $secs s."
  echo
  if [ "$busy" = 1 ]; then
    echo "**The machine was not idle:** load average $load0 (1, 5, 15 min) at the start and $load1 at the end, on $(nproc) CPUs, from other work running beside the suite. Every figure below is a ratio or a paired comparison taken in the same run, but the rows that depend on a CPU being otherwise idle (isolation, backfill, launch, turnaround) carry that load's noise and should be judged again on an idle machine."
  else
    echo "Load average $load0 (1, 5, 15 min) at the start and $load1 at the end, on $(nproc) CPUs. Every figure below is a ratio or a paired comparison taken in the same run."
  fi
  [ $quick = 0 ] || echo "Quick mode: fewer rounds and shorter workloads than \`make bench\`."
  echo
  table
  echo
  [ ${#failed[@]} -eq 0 ] || { echo "Failed scenarios: ${failed[*]} (see the raw files)."; echo; }
  echo "## Where a goal is short: why, and what would close it"
  echo
  if [ -s "$BENCH_OUT/notes.md" ]; then cat "$BENCH_OUT/notes.md"; else echo "Every goal was met."; fi
  echo
  echo "## Plots"
  echo
  for f in "$root/bench/results/$name"/*.svg; do
    [ -e "$f" ] || continue
    echo "![$(basename "$f" .svg)]($name/$(basename "$f"))"
  done
  echo
  echo "Raw samples: [$name/raw/]($name/raw/). Each scenario's design is in the header of bench/scenarios/NAME.sh."
} > "$out"
echo "wrote $out"
exit $(( ${#failed[@]} > 0 ))
