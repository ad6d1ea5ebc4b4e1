# shellcheck shell=bash
# Sourced by bench/run.sh: is the machine quiet enough to publish, by the measure of OTHER
# people's work, not the suite's own?
#
# The suite (this driver, every scenario, daemon and job, reaped or not) runs in one accounting
# cgroup made below the driver's own cgroup: the cgroup2 tree's on hybrid nodes (controller-less
# there: cpu.stat counts CPU time in every cgroup), the cpuacct hierarchy on pure v1. Then, over
# any window:
#   busy     the machine's busy time (/proc/stat: user, nice, system, irq, softirq, steal)
#   suite    the accounting cgroup's CPU time (cpu.stat usage_usec, or cpuacct.usage)
#   kernel   kernel threads' CPU time (children of kthreadd: kswapd, kworkers, kcompactd ...);
#            on an otherwise idle machine that is work done for the suite (swap, reclaim, cgroup
#            teardown), so it is reported apart and not counted as other people's
#   others   busy - suite - kernel (>= 0): other people's work, steal included
# and the runnable threads outside the accounting cgroup that are not kernel threads.
# Pure cgroup v2 (the systemd guest) gets no accounting cgroup (jobs live in a delegated scope
# and a pure-v2 parent cannot hold the driver's processes and the daemons' children at once):
# there the suite's time is what `times` says of the driver's reaped children (every scenario,
# with what it reaped, once it has ended), read in the driver's own shell: a $(...) subshell is a
# new process whose `times` has no children, which once made every pure-v2 run count the whole
# suite as other people's work. A process the suite leaves to init to reap still counts as
# other people's (errs towards "loaded"); a guest's run is marked for software emulation anyway.
#
# quiet_setup; quiet_mark NAME; quiet_since NAME (sets QUIET_SINCE: "others_pct kernel_pct suite_pct steal_pct secs");
# quiet_wait (before the first scenario: wait for a quiet window, or refuse with
# BENCH_REQUIRE_QUIET=1); quiet_teardown.

QUIET_ACCT=""      # the accounting cgroup's directory
QUIET_ACCT_FILE="" # its CPU time file
QUIET_ORIG=""      # the cgroup.procs file the driver came from
QUIET_TIMES_FILE="" # where `times` is written without a subshell (quiet_suite_now)
QUIET_SUITE_US=0   # the suite's CPU time, set by quiet_suite_now
QUIET_SINCE=""     # set by quiet_since
QUIET_WINDOW=${BENCH_QUIET_WINDOW:-5}        # seconds per quiet check
QUIET_WAIT=${BENCH_QUIET_WAIT:-600}          # longest wait for quiet before the first scenario
QUIET_MAX_OTHERS=${BENCH_QUIET_MAX_OTHERS:-5} # other people's CPU, % of all CPUs
QUIET_MAX_RUNNABLE=${BENCH_QUIET_MAX_RUNNABLE:-0.25}
declare -A QUIET_MARKS=()

quiet_setup() {
  local own mnt
  # Made here, in the driver's shell: quiet_window runs in a subshell and must not make its own.
  QUIET_TIMES_FILE=$(mktemp /tmp/pjw-bench-times.XXXXXX)
  if grep -q ' - cgroup2 ' /proc/self/mountinfo && ! grep -q ' - cgroup ' /proc/self/mountinfo; then
    return 0   # pure v2: no accounting cgroup (header)
  fi
  if grep -q ' - cgroup2 ' /proc/self/mountinfo; then
    mnt=$(awk '$0 ~ / - cgroup2 / {print $5; exit}' /proc/self/mountinfo)
    own=$(sed -n 's/^0:://p' /proc/self/cgroup)
    QUIET_ACCT_FILE=cpu.stat
  else
    mnt=$(awk '$0 ~ / - cgroup / && $0 ~ /cpuacct/ {print $5; exit}' /proc/self/mountinfo)
    own=$(awk -F: '$2 ~ /(^|,)cpuacct(,|$)/ {print $3; exit}' /proc/self/cgroup)
    QUIET_ACCT_FILE=cpuacct.usage
  fi
  [ -n "$mnt" ] || return 0
  own=${own%/}
  QUIET_ACCT="$mnt$own/pjw-bench-suite-$$"
  QUIET_ORIG="$mnt$own/cgroup.procs"
  mkdir "$QUIET_ACCT" || { QUIET_ACCT=""; return 0; }
  echo $$ >| "$QUIET_ACCT/cgroup.procs" || { rmdir "$QUIET_ACCT"; QUIET_ACCT=""; return 0; }
  # Where a delegated scope would hold the jobs (pure v2 only) nothing changes: never here.
}

# The driver goes back where it came from and the accounting cgroup is removed (it is empty once
# every scenario's cleanup has run; a leftover process keeps it, and says so).
quiet_teardown() {
  [ -z "$QUIET_TIMES_FILE" ] || rm -f "$QUIET_TIMES_FILE"
  QUIET_TIMES_FILE=""
  [ -n "$QUIET_ACCT" ] || return 0
  echo $$ >| "$QUIET_ORIG" 2>/dev/null || true
  for _ in $(seq 50); do rmdir "$QUIET_ACCT" 2>/dev/null && { QUIET_ACCT=""; return 0; }; sleep 0.1; done
  echo "bench: $QUIET_ACCT still holds processes: $(tr '\n' ' ' < "$QUIET_ACCT/cgroup.procs")" >&2
}

# Microseconds: the machine's busy time, the suite's, kernel threads', steal.
quiet_busy_us() { awk -v hz="$(getconf CLK_TCK)" '/^cpu / {printf "%.0f\n", ($2 + $3 + $4 + $7 + $8 + $9) / hz * 1e6}' /proc/stat; }
quiet_steal_us() { awk -v hz="$(getconf CLK_TCK)" '/^cpu / {printf "%.0f\n", $9 / hz * 1e6}' /proc/stat; }
# quiet_suite_now: sets QUIET_SUITE_US, the suite's CPU time so far. Call it in the driver's
# shell, never inside $(...): without an accounting cgroup it is `times` (second line: the
# reaped children's user and system time), which only this shell's own process knows.
quiet_suite_now() {
  if [ -z "$QUIET_ACCT" ]; then
    times >| "$QUIET_TIMES_FILE"
    QUIET_SUITE_US=$(awk 'function sec(t,   m) { m = t; sub(/m.*/, "", m); sub(/^[0-9]+m/, "", t); sub(/s$/, "", t); return m * 60 + t }
      NR == 2 { printf "%.0f\n", (sec($1) + sec($2)) * 1e6 }' "$QUIET_TIMES_FILE")
  elif [ "$QUIET_ACCT_FILE" = cpu.stat ]; then
    QUIET_SUITE_US=$(awk '$1 == "usage_usec" {print $2}' "$QUIET_ACCT/cpu.stat")
  else
    QUIET_SUITE_US=$(awk '{printf "%.0f\n", $1 / 1000}' "$QUIET_ACCT/cpuacct.usage")
  fi
}
# Kernel threads: kthreadd (pid 2) and its children; utime + stime (fields 14, 15 after the
# command, which may hold spaces: counted from the closing parenthesis).
quiet_kernel_us() {
  local hz; hz=$(getconf CLK_TCK)
  cat /proc/[0-9]*/stat 2>/dev/null | awk -v hz="$hz" '{
      line = $0; i = index(line, ") "); rest = substr(line, i + 2); pid = $1
      n = split(rest, f, " ")
      # rest: state(1) ppid(2) ... utime(12) stime(13)
      if (pid == 2 || f[2] == 2) s += f[12] + f[13]
    } END { printf "%.0f\n", s / hz * 1e6 }'
}
# Runnable threads outside the suite's accounting cgroup (or, without one, outside this
# driver's session), kernel threads apart: "N (names)".
quiet_others_runnable() {
  local sid inside=""
  sid=$(ps -o sid= -p $$ | tr -d ' ')
  [ -z "$QUIET_ACCT" ] || inside=$(find "$QUIET_ACCT" -name cgroup.procs -exec cat {} + 2>/dev/null | tr '\n' ' ')
  ps -eL -o stat=,pid=,ppid=,sid=,comm= | awk -v me="$sid" -v inside="$inside" -v acct="$QUIET_ACCT" '
    BEGIN { n = split(inside, p, " "); for (i = 1; i <= n; i++) in_suite[p[i]] = 1 }
    $1 ~ /^R/ && $5 != "ps" && $2 != 2 && $3 != 2 {
      if (acct != "" ? ($2 in in_suite) : ($4 == me)) next
      k++; c[$5]++
    }
    END { s = ""; for (x in c) s = s (s == "" ? "" : ", ") x (c[x] > 1 ? " x" c[x] : "")
          printf "%d%s\n", k, (k ? " (" s ")" : "") }'
}

# quiet_mark NAME: remember now's counters under NAME.
quiet_mark() {
  quiet_suite_now
  QUIET_MARKS[$1]="$EPOCHREALTIME $(quiet_busy_us) $QUIET_SUITE_US $(quiet_kernel_us) $(quiet_steal_us)"
}
# quiet_since NAME: sets QUIET_SINCE to what happened since the mark, as percentages of all
# CPUs' time: "others kernel suite steal seconds" (a variable, not output: see quiet_suite_now).
quiet_since() {
  local t0 b0 s0 k0 st0
  read -r t0 b0 s0 k0 st0 <<< "${QUIET_MARKS[$1]}"
  quiet_suite_now
  QUIET_SINCE=$(awk -v t0="$t0" -v t1="$EPOCHREALTIME" -v b0="$b0" -v b1="$(quiet_busy_us)" -v s0="$s0" -v s1="$QUIET_SUITE_US" \
      -v k0="$k0" -v k1="$(quiet_kernel_us)" -v st0="$st0" -v st1="$(quiet_steal_us)" -v n="$(nproc)" 'BEGIN {
    all = (t1 - t0) * 1e6 * n; if (all <= 0) all = 1
    suite = s1 - s0; kern = k1 - k0; if (kern < 0) kern = 0
    o = (b1 - b0) - suite - kern; if (o < 0) o = 0
    printf "%.1f %.1f %.1f %.1f %.0f\n", o / all * 100, kern / all * 100, suite / all * 100, (st1 - st0) / all * 100, t1 - t0 }')
}

# quiet_window: one window of QUIET_WINDOW seconds: "others_pct runnable_mean (names)".
quiet_window() {
  local i n=0 sum=0 r names=""
  quiet_mark window
  for i in $(seq $((QUIET_WINDOW * 2))); do
    r=$(quiet_others_runnable)
    sum=$((sum + ${r%% *})); n=$((n + 1))
    [ "${r%% *}" = 0 ] || names=${r#* }
    sleep 0.5
  done
  quiet_since window
  read -r o _ _ _ _ <<< "$QUIET_SINCE"
  echo "$o $(awk -v s="$sum" -v n="$n" 'BEGIN {printf "%.2f", s / n}') $names"
}

# quiet_wait: wait for a quiet window before the suite starts. Prints what it saw; sets
# QUIET_START ("quiet after N s" or "not quiet after N s: ..."). Exit 3 with
# BENCH_REQUIRE_QUIET=1 when no quiet window came within QUIET_WAIT seconds.
QUIET_START=""
quiet_wait() {
  local t0=$EPOCHREALTIME o r rest waited
  while :; do
    read -r o r rest <<< "$(quiet_window)"
    waited=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%d", b - a}')
    if awk -v o="$o" -v r="$r" -v mo="$QUIET_MAX_OTHERS" -v mr="$QUIET_MAX_RUNNABLE" 'BEGIN {exit !(o <= mo && r <= mr)}'; then
      QUIET_START="quiet after ${waited} s of waiting (other people's work ${o}% of the CPUs, ${r} other runnable threads on average over ${QUIET_WINDOW} s)"
      return 0
    fi
    echo "bench: waiting for a quiet machine: other people's work ${o}% of the CPUs, ${r} other runnable threads ${rest} (${waited} s of ${QUIET_WAIT})" >&2
    if [ "$waited" -ge "$QUIET_WAIT" ]; then
      QUIET_START="not quiet after ${waited} s of waiting (other people's work ${o}% of the CPUs, ${r} other runnable threads ${rest})"
      if [ "${BENCH_REQUIRE_QUIET:-0}" = 1 ]; then
        echo "bench: refusing to run (BENCH_REQUIRE_QUIET=1): $QUIET_START" >&2
        return 3
      fi
      return 0
    fi
  done
}
