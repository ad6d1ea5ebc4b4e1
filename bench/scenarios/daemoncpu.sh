#!/usr/bin/env bash
# daemon CPU: the daemon's CPU time (its threads' schedstat, ns) over a WINDOW-second window while
# it holds N jobs whose running ones have 10 processes each. On 2 CPUs at most 8 jobs run at
# once (`vcpus` = 4 x the pool), so that is 8 running jobs x 10 processes plus N - 8 queued
# jobs. The daemon samples every second: the memory governor's tick (`interval_ms = 1000`,
# every job's memory and the node's pressure). The [profile] sampler of the profile issue is
# not on main yet; when it is, this scenario should turn it on at 1 s.
# Anchor: pbs_mom's "excessive CPU use"; sites disable profilers.
SCENARIO=daemoncpu
source "$(dirname "$0")/../lib.sh"

N=${DCPU_N:-1000}
WINDOW=${DCPU_WINDOW:-$([ "$QUICK" = 1 ] && echo 10 || echo 60)}
start_daemon 'cpus = "0-1"' 'vcpus = 8' '[memory]' 'governor = true' 'interval_ms = 1000'
step 1 3 "submitting $N jobs"
fill_node "$N" 10
running=$("$PJW" status --json | grep -cE '"state": "(running|backfill)"' || true)
procs=$("$PJW" status --json | awk -F': ' '/"procs":/ {gsub(/,/, "", $2); s += $2} END {print s+0}')
sleep 2
step 2 3 "measuring the daemon's CPU time for $WINDOW s"
c0=$(cpu_secs_fine "$DAEMON_PID"); k0=$(cpu_secs "$DAEMON_PID"); t0=$(now)
sleep "$WINDOW"
c1=$(cpu_secs_fine "$DAEMON_PID"); k1=$(cpu_secs "$DAEMON_PID"); t1=$(now)
step 3 3 "draining"
drain_node
stop_daemon
pct=$(calc "printf \"%.3f\", ($c1 - $c0) / ($t1 - $t0) * 100")
echo "$N jobs, $running running, $procs processes; cpu (threads' schedstat) $c0 -> $c1, (utime+stime) $k0 -> $k1 over $(calc "printf \"%.1f\", $t1 - $t0") s = $pct%" > "$BENCH_OUT/raw/daemoncpu.txt"
row "$pct% of one CPU over $WINDOW s ($(calc "printf \"%.4f\", $c1 - $c0") s CPU; $N jobs: $running running with $procs processes, $((N - running)) queued; governor tick 1 s; the [profile] sampler is not on main)" \
  "pbs_mom \"excessive CPU\"; sites disable profilers" "≤ 1% of one CPU" \
  "$(calc "print ($pct <= 1) ? \"pass\" : \"short\"")" "daemon CPU"
if calc "exit !($pct > 1)"; then
  note "daemon CPU $pct% of one CPU. See raw/daemoncpu.txt; the governor reads every running job's memory each tick."
fi
