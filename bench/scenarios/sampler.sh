#!/usr/bin/env bash
# sampler: the daemon's CPU time while N jobs (default 200) RUN and the [profile] sampler reads
# every one of them each second (issue 5's bar: at most 2% of one CPU with 200 running jobs).
# To have 200 jobs running on this 2-CPU machine the daemon gets `vcpus = N` (backfillers share
# the CPUs; the jobs only sleep). The same window is measured twice with the same jobs: once with
# profiles on (1 s) and once with them off, so the sampler's own share is the difference; the
# proc connector's share (it hears every fork on the machine) is in both and reported with the
# machine's fork rate. Then the thread rows' cost (issue 27): THREADS_N jobs (default 50) of
# THREADS_T sleeping threads each (default 16), profiles on, once with `[profile] threads = 0`
# (before: no thread rows) and once with the default top 4 threads per job (after); the
# difference divided by the jobs is the cost per job.
SCENARIO=sampler
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"

N=${SAMPLER_N:-200}
WINDOW=${SAMPLER_WINDOW:-$([ "$QUICK" = 1 ] && echo 5 || echo 12)}
ROUNDS=${SAMPLER_ROUNDS:-$([ "$QUICK" = 1 ] && echo 3 || echo 5)}
forks() { awk '/^processes/ {print $2}' /proc/stat; }

measure() { # measure LABEL PROFILE_ENABLED [THREADS JOBS CMD...]: sets PCT (mean) CI FPS RUNNING; ROUNDS windows
  local label=$1 on=$2 threads=${3:-4} N=${4:-$N}
  shift 4 2>/dev/null || shift $#
  start_daemon 'cpus = "0-1"' "vcpus = $N" '[memory]' 'governor = false' '[profile]' "enabled = $on" 'interval = 1' "threads = $threads"
  step 1 3 "$label: starting $N jobs"
  fill_node "$N" 1 "$@"
  local running=0
  for _ in $(seq 300); do
    running=$("$PJW" status --json | grep -cE '"state": "(running|backfill)"' || true)
    [ "$running" -ge "$N" ] && break
    sleep 0.2
  done
  sleep 3
  local c0 c1 f0 f1 t0 t1 r a b ta tb
  : > "$WORK/pcts"
  f0=$(forks); t0=$(now)
  for r in $(seq "$ROUNDS"); do
    step 2 3 "$label: the daemon's CPU with $running jobs running, window $r/$ROUNDS of $WINDOW s"
    a=$(cpu_secs_fine "$DAEMON_PID"); ta=$(now)
    sleep "$WINDOW"
    b=$(cpu_secs_fine "$DAEMON_PID"); tb=$(now)
    calc "printf \"%.4f\n\", ($b - $a) / ($tb - $ta) * 100" >> "$WORK/pcts"
  done
  f1=$(forks); t1=$(now)
  step 3 3 "$label: draining"
  drain_node
  stop_daemon
  read -r _ PCT _ CI _ < <(stats < "$WORK/pcts")
  FPS=$(calc "printf \"%.0f\", ($f1 - $f0) / ($t1 - $t0)")
  RUNNING=$running
}

measure "profiles on" true
on_pct=$PCT on_ci=$CI on_fps=$FPS on_run=$RUNNING
measure "profiles off" false
off_pct=$PCT off_fps=$FPS off_run=$RUNNING
TN=${THREADS_N:-50} TT=${THREADS_T:-16}
measure "threads before (threads = 0)" true 0 "$TN" "$WL" idle "$TT"
t0_pct=$PCT t0_ci=$CI t0_run=$RUNNING
measure "threads after (threads = 4)" true 4 "$TN" "$WL" idle "$TT"
t4_pct=$PCT t4_ci=$CI t4_run=$RUNNING
per_job=$(calc "printf \"%.4f\", ($t4_pct - $t0_pct) / $TN")
share=$(calc "printf \"%.3f\", $on_pct - $off_pct")
echo "N=$N window=$WINDOW on: $on_pct% ($on_run running, $on_fps forks/s) off: $off_pct% ($off_run running, $off_fps forks/s)" > "$BENCH_OUT/raw/sampler.txt"
echo "threads: $TN jobs of $TT threads: threads=0 $t0_pct% ± $t0_ci ($t0_run running), threads=4 $t4_pct% ± $t4_ci ($t4_run running), per job $per_job points" >> "$BENCH_OUT/raw/sampler.txt"
ok=$(verdict_le "$on_pct" "$on_ci" 2)
row "$(calc "printf \"%.3f%% ± %.3f\", $on_pct, $on_ci") of one CPU (mean of $ROUNDS windows of $WINDOW s, 95% CI) with $on_run jobs running, sampled every 1 s (profiles off, same jobs: $(calc "printf \"%.3f%%\", $off_pct"); the sampler's share $share points; machine forks/s $on_fps / $off_fps)" \
  "MCOpt's profiler, pbs_mom \"excessive CPU\"" "≤ 2% of one CPU at 200 running jobs" \
  "$ok" "sampler (200 jobs, 1 s)"
row "$(calc "printf \"%+.4f\", $per_job") points of one CPU per job for its top-4 thread rows ($TN jobs of $TT threads, sampled every 1 s: $(calc "printf \"%.3f%% ± %.3f\", $t4_pct, $t4_ci") with threads = 4, $(calc "printf \"%.3f%% ± %.3f\", $t0_pct, $t0_ci") with threads = 0; mean of $ROUNDS windows of $WINDOW s, 95% CI)" \
  "MCOpt's per-thread JobProfiler" "≤ 2% of one CPU at 200 running jobs, thread rows included" \
  "$(verdict_le "$(calc "printf \"%.4f\", $per_job * 200 + $on_pct")" "$(calc "printf \"%.4f\", ($t4_ci + $t0_ci) / $TN * 200 + $on_ci")" 2)" "sampler: thread rows per job"
