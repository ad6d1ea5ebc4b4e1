#!/usr/bin/env bash
# launchprof: where a launch's time goes (issue 14: "pjw ≥ 1,000/s or a committed profile
# explaining the floor"). Not in the default suite; run it with
#   BENCH_SAVE=1 bench/run.sh launchprof
# which writes bench/results/<time>-launchprof.md. In paired rounds of N each, from one shell loop:
#   bare      fork + exec of /bin/true                         (the floor)
#   start     `pjw run --cpus 0 -- /bin/true`: the client's (the launch front's) exec, dynamic
#             linking, argument parsing, refused before it connects (not `pjw --version`: the
#             front execs pjw-full for that, docs/decisions.md (cj))
#   trip      `pjw run --cpus 1000000 -- /bin/true`: the client's start + one round trip to the
#             daemon, which refuses it (no job)
#   launch    `pjw run -q -- /bin/true`: the whole launch
# and the daemon's own share from its launch-latency histogram (submission to Started). Then, for
# M launches with the daemon under `strace -f -T -y` (strace slows every call, so read the
# ranking, not the totals), the daemon's calls summed per kind of path (cgroup files, the store,
# the socket), and the client's own (one launch under strace -f -c -w).
SCENARIO=launchprof
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
command -v strace >/dev/null || { echo "bench launchprof: needs strace (apt-get install strace)" >&2; exit 1; }

N=${LAUNCHPROF_N:-$([ "$QUICK" = 1 ] && echo 100 || echo 500)}
M=${LAUNCHPROF_STRACE_N:-100}
REPS=${LAUNCHPROF_REPS:-3}
raw=$BENCH_OUT/raw/launchprof.txt
: > "$raw"
port=$((20000 + RANDOM % 20000))
start_daemon 'cpus = "0-1"' '[metrics]' "listen = \"127.0.0.1:$port\""
"$PJW" run -q -- /bin/true
daemon_ms() {
  http_get "http://127.0.0.1:$port/metrics" | awk '/^pjw_launch_latency_seconds_sum/ {s = $2} /^pjw_launch_latency_seconds_count/ {c = $2} END {printf "%.6f %d\n", s, c}'
}
dm=()
for r in $(seq "$REPS"); do
  step "$r" "$((REPS + 1))" "round $r/$REPS: $N each of bare, refused runs (client, daemon), pjw run"
  t0=$(now); for _ in $(seq "$N"); do /bin/true; done
  t1=$(now); for _ in $(seq "$N"); do "$PJW" run -q --cpus 0 -- /bin/true 2>/dev/null || true; done
  t2=$(now); for _ in $(seq "$N"); do "$PJW" run -q --cpus 1000000 -- /bin/true 2>/dev/null || true; done
  t3=$(now)
  read -r l0 c0 < <(daemon_ms)
  for _ in $(seq "$N"); do "$PJW" run -q -- /bin/true; done
  t4=$(now)
  read -r l1 c1 < <(daemon_ms)
  echo "$r $(calc "printf \"%.6f %.6f %.6f %.6f %.6f\", ($t1 - $t0) / $N * 1000, ($t2 - $t1) / $N * 1000, ($t3 - $t2) / $N * 1000, ($t4 - $t3) / $N * 1000, ($c1 > $c0) ? ($l1 - $l0) / ($c1 - $c0) * 1000 : -1")" >> "$raw"
done
med() { awk -v c="$1" '{print $c}' "$raw" | median; }
bare=$(med 2); start=$(med 3); trip=$(med 4); launch=$(med 5); dmn=$(med 6)

# The daemon's work, by what it touched: M launches with the daemon under strace -f -T -y (each
# call's time and the path behind its descriptor), summed per call and per kind of path (a cgroup
# file by its name, the store, the socket); the waits (futex, epoll) are left out.
step "$((REPS + 1))" "$((REPS + 1))" "$M launches with the daemon under strace -T"
sd=$BENCH_OUT/raw/launchprof-daemon-strace.txt
strace -f -T -y -o "$sd" -e trace='!futex,epoll_wait,epoll_pwait,poll,ppoll,clock_nanosleep,nanosleep,restart_syscall,sched_yield,rt_sigprocmask,rt_sigreturn,sigaltstack,munmap,madvise,mmap,mprotect,brk,getrandom,statx,newfstatat,fstat,lseek' -p "$DAEMON_PID" &
spid=$!
BGPIDS+=("$spid")
sleep 1
for _ in $(seq "$M"); do "$PJW" run -q -- /bin/true; done
sleep 0.5
kill -INT "$spid" 2>/dev/null || true
wait "$spid" 2>/dev/null || true
sc=$BENCH_OUT/raw/launchprof-client-strace.txt
strace -f -c -w -o "$sc" "$PJW" run -q -- /bin/true || true
stop_daemon

# The daemon's calls summed per "call kind-of-path", the top 10 by time, µs per launch.
dtop=$(awk -v m="$M" '
  match($0, /<[0-9.]+>$/) {
    t = substr($0, RSTART + 1, RLENGTH - 2)
    call = $2; sub(/\(.*/, "", call)
    what = "other"
    if (match($0, /<\/sys\/fs\/cgroup\/[^>]*>/) || match($0, /"\/sys\/fs\/cgroup\/[^"]*"/)) {
      p = substr($0, RSTART + 1, RLENGTH - 2); n = split(p, a, "/"); what = "cgroup " a[n]
      if (call ~ /mkdir|rmdir/) what = "cgroup dir"
    } else if ($0 ~ /\.db|-wal|-journal|-shm/) what = "store"
    else if ($0 ~ /socket:|UNIX/) what = "socket"
    else if ($0 ~ /NETLINK/) what = "netlink"
    else if ($0 ~ /\/proc\//) what = "/proc"
    k = call " (" what ")"; s[k] += t; c[k]++; tot += t
  }
  END { for (k in s) printf "%.0f\t%s: %.0f µs/launch (%d calls)\n", s[k] * 1e6, k, s[k] / m * 1e6, c[k]; printf "%.0f\tall traced calls: %.0f µs/launch\n", 1e18, tot / m * 1e6 }
' "$sd" | sort -rn | head -n 11 | cut -f2 | paste -sd ';' | sed 's/;/; /g')
ctop=$(awk '$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" {printf "%s %.1f%% %.0f µs\n", $NF, $1, $2 * 1e6}' "$sc" | head -n 8 | paste -sd ';' | sed 's/;/; /g')
rest=$(calc "printf \"%.3f\", $launch - $trip - $dmn - $bare")
row "$(calc "printf \"per launch (medians of %d rounds of %d): whole launch %.3f ms = bare fork/exec %.3f ms + client start %.3f ms (a \`pjw run\` the client refuses, %.3f ms, less bare) + round trip %.3f ms (a \`pjw run\` the daemon refuses, less the one the client refuses) + daemon submission-to-Started %.3f ms (its histogram) + the rest %.3f ms (the client's exec into the command, hand-overs, the end report)\", $REPS, $N, $launch, $bare, $start - $bare, $start, $trip - $start, $dmn, $rest")" \
  "" "≥ 1,000 launches/s or the floor explained" "profile" "launch profile: where the time goes"
row "the daemon system calls over $M launches under strace -T (strace inflates each call: read the ranking, not the totals): $dtop" \
  "" "" "profile" "launch profile: the daemon's system calls"
row "one client's system calls by wall time (exec into /bin/true followed): $ctop" \
  "" "" "profile" "launch profile: the client's system calls"
