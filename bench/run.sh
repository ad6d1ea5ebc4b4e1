#!/usr/bin/env bash
# The benchmark suite (issues 7 and 14): builds the release binaries, runs the scenarios one
# after the other with a progress line, prints the table (scenario | measured | anchor | pjw's
# goal | result) and, for a whole-suite run, writes bench/results/<date>T<time>Z.md (-quick.md
# for the quick suite) with the machine, its load, the table, the notes on every goal missed,
# and the plots and raw samples in the directory of the same name.
#
#   bench/run.sh [--quick] [SCENARIO...]      (make bench, make bench-quick, SCENARIO=name)
#
# A results file is never overwritten: its name is the run's start time (UTC), and the run
# refuses to write over a file or directory that exists. Verdicts are taken on the 95%
# confidence bound in the unfavourable direction (met / short / within noise), not the mean.
# Load (bench/quiet.sh): other people's work, not the suite's own. The suite runs in an
# accounting cgroup of its own, so its CPU time (every scenario, daemon and job, reaped or not)
# is known; kernel threads' time (swap, reclaim, cgroup teardown: work done for the suite on an
# otherwise idle machine) is reported apart; the rest of the machine's busy time, and the
# runnable threads outside the suite, are other people's. Before the first scenario the suite
# waits for a quiet window (BENCH_QUIET_WAIT s, default 600; BENCH_REQUIRE_QUIET=1 refuses to
# run without one); each scenario's share of other work is measured, and the rows of a scenario
# that ran beside other work are marked "NOT PUBLISHABLE: machine loaded (...)" (all rows when
# the run as a whole was); scripts/bench-readme.sh carries the mark into README's table.
#
# Scenarios live in bench/scenarios/NAME.sh; each also runs alone and prints its own table.
# Sizes can be changed for an experiment through the variables at the top of each scenario
# (ISO_REPS, ISO_SECS, BF_REPS, TA_UNIT, MEM_LIMIT_MIB, MEM_TIMEOUT, MEM_REPS, LAUNCH_N, ...);
# BENCH_SAVE=1 writes a results file for a partial run; BENCH_NO_BUILD=1 skips the build;
# BENCH_SLURM_CONF=FILE (a live Slurm's slurm.conf) or BENCH_SLURM=up (start a private one with
# scripts/wlm/slurm-up.sh when no other is up) gives the Slurm rows a Slurm to measure;
# BENCH_PARENT_CPU_SHARES=N gives the daemons' parent cgroup the CPU weight of N/1024 processes
# (an experiment: pjw leaves the default). Root; cgroups only below this process's own.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
ALL=(isolation sysbench openmp mpi backfill turnaround memory launch jobmem daemoncpu sampler reaction allocator io bind bind-numa)
quick=0
want=()
for a in "$@"; do
  case $a in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *)
      [ -f "$root/bench/scenarios/$a.sh" ] || { echo "bench: no scenario '$a' (have: ${ALL[*]})" >&2; exit 2; }
      want+=("$a") ;;
  esac
done
whole=0
[ ${#want[@]} -gt 0 ] || { want=("${ALL[@]}"); whole=1; }
[ "$(id -u)" = 0 ] || { echo "bench: must run as root (pjw manages cgroups)" >&2; exit 1; }

# The commit measured, and whether the tree differs from it; where git is missing (the systemd
# guest's lean image) the hash is read from .git and the tree's state is not known; BENCH_COMMIT
# (the host's description, for a guest) wins.
commit_desc() {
  # A guest whose tree is a worktree (its .git a pointer to a directory it cannot see) is told.
  if [ -n "${BENCH_COMMIT:-}" ]; then
    echo "$BENCH_COMMIT (as the host saw the tree)"
  elif command -v git >/dev/null; then
    echo "$(cd "$root" && git rev-parse --short HEAD)$(cd "$root" && git diff --quiet HEAD -- crates bench ':!bench/results' || echo ' (with uncommitted changes)')"
  else
    local head ref
    head=$(cat "$root/.git/HEAD" 2>/dev/null || true)
    case $head in "ref: "*) ref=${head#ref: }; head=$(cat "$root/.git/$ref" 2>/dev/null || grep " $ref\$" "$root/.git/packed-refs" 2>/dev/null | cut -c1-40) ;; esac
    echo "${head:0:7} (no git here: uncommitted changes not checked)"
  fi
}

# The results file's name: the start time, so that no run replaces another's file.
day=$(date -u +%F)
name=$(date -u +%Y-%m-%dT%H%M%SZ)$([ $quick = 1 ] && echo -quick || true)
[ $whole = 1 ] || name=$name-$(IFS=-; echo "${want[*]}")
out=$root/bench/results/$name.md
if [ -e "$out" ] || [ -e "$root/bench/results/$name" ]; then
  echo "bench: $out exists; a results file is never overwritten" >&2; exit 1
fi

# Taken before the build: the binaries are this commit's. A tree that moves while the suite runs
# (a commit, an edit) is named at the end beside it, since later scenarios' scripts are read then.
measured=$(commit_desc)

if [ "${BENCH_NO_BUILD:-0}" != 1 ]; then
  echo "building release binaries (pjw, pjw-wl) ..." >&2
  # The same build as `make release`, so the artifacts are shared and nothing is rebuilt.
  (cd "$root" && cargo build --release -q --workspace --bins)
fi

export BENCH_QUICK=$quick
export BENCH_OUT
BENCH_OUT=$(mktemp -d /var/tmp/pjw-bench-run.XXXXXX)
child=""
sampler=""
# Pass an interrupt on to the running scenario, which cleans up after itself.
trap '[ -z "$child" ] || { kill -TERM "$child" 2>/dev/null; wait "$child"; }; [ -z "$sampler" ] || kill "$sampler" 2>/dev/null; quiet_teardown; rm -rf "$BENCH_OUT"' EXIT
trap 'exit 130' INT TERM

# Load: other people's work (bench/quiet.sh).
. "$root/bench/quiet.sh"
quiet_setup
quiet_wait || exit $?
export BENCH_T0=$EPOCHREALTIME
export BENCH_TOTAL=${#want[@]}
load0=$(cut -d' ' -f1-3 /proc/loadavg)
run0=$(quiet_others_runnable)
quiet_mark suite
# Every 2 s while the suite runs: time, load average (1 min), other runnable threads.
( while :; do echo "$EPOCHREALTIME $(cut -d' ' -f1 /proc/loadavg) $(quiet_others_runnable | cut -d' ' -f1)"; sleep 2; done ) \
  > "$BENCH_OUT/load.txt" 2>/dev/null &
sampler=$!
scen_load=()   # "scenario others% runnable_mean": the other work beside each scenario

failed=()
loaded_scens=()
took=()   # "scenario N s", for the results file: where a suite's time goes
i=0
for s in "${want[@]}"; do
  i=$((i + 1))
  export BENCH_INDEX=$i
  ts=$EPOCHREALTIME
  quiet_mark "$s"
  touch "$BENCH_OUT/rows.tsv"; rows_before=$(wc -l < "$BENCH_OUT/rows.tsv")
  load_before=$(wc -l < "$BENCH_OUT/load.txt")
  # The scenario prints its own table on stdout; the driver keeps it in the log.
  "$root/bench/scenarios/$s.sh" >> "$BENCH_OUT/scenarios.log" &
  child=$!
  if ! wait "$child"; then failed+=("$s"); fi
  child=""
  took+=("$s $(awk -v a="$ts" -v b="$EPOCHREALTIME" 'BEGIN{printf "%d", b-a}') s")
  # Other people's work beside this scenario; its rows are marked when there was too much.
  quiet_since "$s"
  read -r so _ _ _ _ <<< "$QUIET_SINCE"
  sr=$(tail -n +"$((load_before + 1))" "$BENCH_OUT/load.txt" | awk '{ t += $3; n++ } END { printf "%.2f", n ? t / n : 0 }')
  scen_load+=("$s $so $sr")
  if awk -v o="$so" -v r="$sr" -v mo="$QUIET_MAX_OTHERS" -v mr="$QUIET_MAX_RUNNABLE" 'BEGIN {exit !(o > mo || r > mr)}'; then
    touch "$BENCH_OUT/rows.tsv"
    awk -F'\t' -v OFS='\t' -v from="$rows_before" -v why="other work took $so% of the CPUs during this scenario, $sr other runnable threads on average" \
      'NR > from { if ($5 != "–" && $5 != "" && $5 !~ /^not measured/) $5 = $5 "; NOT PUBLISHABLE: machine loaded (" why ")" } { print }' \
      "$BENCH_OUT/rows.tsv" > "$BENCH_OUT/rows.marked" && mv "$BENCH_OUT/rows.marked" "$BENCH_OUT/rows.tsv"
    # A scenario that measured nothing (every row "not measured") has no figure to mark.
    if tail -n +"$((rows_before + 1))" "$BENCH_OUT/rows.tsv" | awk -F'\t' '$5 != "–" && $5 != "" && $5 !~ /^not measured/ { m = 1 } END { exit !m }'; then
      loaded_scens+=("$s")
    fi
  fi
done
[ -t 2 ] && printf '\r\033[K' >&2
load1=$(cut -d' ' -f1-3 /proc/loadavg)
run1=$(quiet_others_runnable)
# The load sampler is the suite's too: reaped before the suite's time is read.
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
sampler=""
quiet_since suite
read -r other_pct kernel_pct suite_pct steal_pct _ <<< "$QUIET_SINCE"
secs=$(awk -v a="$BENCH_T0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%d", b-a}')
ncpu=$(nproc)
read -r run_mean run_max < <(awk '{ s += $3; n++; if ($3 > m) m = $3 } END { printf "%.2f %d\n", n ? s / n : 0, m }' "$BENCH_OUT/load.txt")
# Loaded as a whole: other people's work over the run, or other runnable threads on average,
# past the quiet thresholds (the load average is the suite's own by its end, and is only shown).
loaded=$(awk -v rm="$run_mean" -v o="$other_pct" -v mo="$QUIET_MAX_OTHERS" -v mr="$QUIET_MAX_RUNNABLE" \
  'BEGIN { print (rm > mr || o > mo) ? 1 : 0 }')
load_why="other people's work took $other_pct% of the CPUs over the run (kernel threads $kernel_pct%, the suite itself $suite_pct%, steal $steal_pct%); other runnable threads: mean $run_mean, max $run_max; ${QUIET_START}"
# Under software emulation (a qemu TCG guest: the systemd guest's bench steps) every vCPU is a
# thread on a host the guest cannot see the load of: absolute times mean little, only the
# ratios paired within this run compare, and no verdict stands. BENCH_HOST (set by
# vm/systemd/run.sh) says what the host was and its load when the step began.
tcg=0
grep -q 'QEMU TCG' /proc/cpuinfo && tcg=1
tcg_why="software emulation: QEMU TCG, $ncpu vCPUs${BENCH_HOST:+ on $BENCH_HOST}"
if [ "$tcg" = 1 ]; then
  awk -F'\t' -v OFS='\t' -v why="$tcg_why" '{ if ($5 != "–" && $5 != "") $5 = $5 "; NOT PUBLISHABLE: " why; print }' \
    "$BENCH_OUT/rows.tsv" > "$BENCH_OUT/rows.marked"
  mv "$BENCH_OUT/rows.marked" "$BENCH_OUT/rows.tsv"
fi
# On a loaded machine no verdict stands: every one is marked (a row marked for its own scenario
# already carries the mark).
if [ "$loaded" = 1 ]; then
  awk -F'\t' -v OFS='\t' -v why="$load_why" '{ if ($5 != "–" && $5 != "" && $5 !~ /NOT PUBLISHABLE: machine loaded/) $5 = $5 "; NOT PUBLISHABLE: machine loaded (" why ")"; print }' \
    "$BENCH_OUT/rows.tsv" > "$BENCH_OUT/rows.marked"
  mv "$BENCH_OUT/rows.marked" "$BENCH_OUT/rows.tsv"
fi

table() {
  printf '| scenario | measured | anchor | pjw'"'"'s goal | result |\n|---|---|---|---|---|\n'
  awk -F'\t' '{printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5}' "$BENCH_OUT/rows.tsv"
}
echo
table
[ ${#failed[@]} -eq 0 ] || echo "failed scenarios: ${failed[*]}"
echo "$secs s; $load_why$([ "$loaded" = 1 ] && echo ': NOT PUBLISHABLE' || true)"

[ $whole = 1 ] || [ "${BENCH_SAVE:-0}" = 1 ] || exit $(( ${#failed[@]} > 0 ))

# mkdir without -p and noclobber: what appeared meanwhile is not replaced.
mkdir "$root/bench/results/$name" || { echo "bench: $root/bench/results/$name exists; not overwritten" >&2; exit 1; }
cp "$BENCH_OUT"/plots/*.svg "$root/bench/results/$name/" 2>/dev/null || true
cp -r "$BENCH_OUT/raw" "$root/bench/results/$name/"
cp "$BENCH_OUT/load.txt" "$root/bench/results/$name/raw/load.txt"
set -o noclobber
took_list=$(printf '%s, ' "${took[@]}"); took_list=${took_list%, }
cgmode=$(awk '{ t = ""; for (i = 7; i < NF; i++) if ($i == "-") { t = $(i + 1); break } }
  t == "cgroup" {v1++} t == "cgroup2" {v2++} END {
  if (v1 && v2) printf "hybrid (%d v1 hierarchies + cgroup2)", v1; else if (v2) print "pure cgroup v2"; else printf "legacy v1 (%d hierarchies)", v1 }' /proc/self/mountinfo)
{
  echo "# Benchmarks — $day $(date -u -d "@${BENCH_T0%%.*}" +%H:%M:%S) UTC$([ $quick = 1 ] && echo ' (quick)' || true)$([ $whole = 1 ] || echo " (partial: ${want[*]})")"
  echo
  echo "\`$([ $quick = 1 ] && echo 'make bench-quick' || echo 'make bench')\` on $(hostname): $ncpu CPUs ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), Linux $(uname -r), cgroup mounts: $cgmode. Commit $measured$([ "$(commit_desc)" = "$measured" ] || echo " (the tree changed to $(commit_desc) while the suite ran: scenario scripts started after the change ran from it; the binaries are $measured's)"), release build. $secs s ($took_list)."
  echo
  acct_how="the suite runs in an accounting cgroup"
  [ -n "$QUIET_ACCT" ] || acct_how="no accounting cgroup on pure cgroup v2: the suite's time is that of the processes it reaped, and one it left to init counts as other people's"
  echo "Load: other people's work, apart from the suite's own (bench/quiet.sh: $acct_how). Before the first scenario the machine was $QUIET_START. Over the run, other people's work took $other_pct% of the CPUs' time, kernel threads (swap, reclaim, cgroup teardown: mostly work done for the suite) $kernel_pct%, the suite itself $suite_pct%, steal $steal_pct%; runnable threads outside the suite: $run0 at the start, $run1 at the end, mean $run_mean and max $run_max while it ran (every 2 s: [raw/load.txt]($name/raw/load.txt)). Per scenario, other people's work and other runnable threads on average: $(printf '%s; ' "${scen_load[@]}" | sed 's/\([a-z-]*\) \([0-9.]*\) \([0-9.]*\); /\1 \2% (\3), /g; s/, $//'). Load average (1, 5, 15 min; the suite's own included): $load0 at the start, $load1 at the end, on $ncpu CPUs."
  echo
  if [ "$tcg" = 1 ]; then
    echo "**NOT PUBLISHABLE: $tcg_why.** Each vCPU is a thread on the host, which other work shares and whose load this guest cannot see (the load line above is the guest's own). Absolute times mean little; only the ratios paired within this run (each round's alternatives against that round's own alone time, on the same emulated CPUs) compare."
    echo
  fi
  if [ "$loaded" = 1 ]; then
    echo "**NOT PUBLISHABLE: machine loaded ($load_why).** Every verdict below carries this mark. The figures are ratios or paired comparisons taken in the same run, but the rows that depend on a CPU being otherwise idle (isolation, backfill, launch, turnaround, memory) carry the load's noise: judge them again on an idle machine."
  else
    echo "The machine was quiet by this suite's measure: other people's work at most $QUIET_MAX_OTHERS% of the CPUs and at most $QUIET_MAX_RUNNABLE other runnable threads on average over the run$([ ${#loaded_scens[@]} -gt 0 ] || echo ' and beside every scenario')."
  fi
  if [ "$loaded" = 0 ] && [ ${#loaded_scens[@]} -gt 0 ]; then
    echo
    echo "**Scenarios that ran beside other work: ${loaded_scens[*]}.** Their rows carry the NOT PUBLISHABLE mark; the others stand."
  fi
  echo
  echo "Verdicts are taken on the 95% confidence bound in the unfavourable direction, not on the mean: **met** when that bound meets the goal, **short** when even the favourable bound misses it, **within noise** in between. Rows marked (baseline) are the alternatives a user would pick instead, measured in the same run."
  [ $quick = 0 ] || { echo; echo "Quick mode: fewer rounds and shorter workloads than \`make bench\`; not a full results file (scripts/bench-readme.sh ignores it)."; }
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
