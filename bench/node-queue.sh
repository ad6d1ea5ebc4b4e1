#!/usr/bin/env bash
# The node queue and governor, measured side by side in one run (issue: node queue and
# governor). Figures are ratios or paired comparisons; absolute times are shown, never judged.
#
#   backfill     an I/O-bound primary (busy half the time) alone and with a CPU-bound
#                backfiller on its CPU: the primary's slowdown and the backfiller's CPU share;
#                the same with a CPU-bound primary
#   priority     a priority-16 job arriving on a full node: time until it runs
#   turnaround   8 equal CPU-bound jobs on 2 CPUs with vcpus = 4, against all 8 time-sliced
#                by plain Linux: mean turnaround and makespan
#   memory       4 jobs growing to MEM_JOB_MIB each (and touching it) in a MEM_LIMIT partition
#                with a swap file, with and without the governor (MEM_TIMEOUT bounds each run)
#
# Usage: bench/node-queue.sh [SCENARIO...]   (default: all). Root; cleans up what it starts:
# daemons, jobs, cgroups and the swap file.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
PJW=$root/target/release/pjw
WL=$root/target/release/pjw-wl
REPS=${REPS:-3}
MEM_JOB_MIB=${MEM_JOB_MIB:-600}
MEM_LIMIT=${MEM_LIMIT:-1G}
MEM_ROUNDS=${MEM_ROUNDS:-60}
MEM_TIMEOUT=${MEM_TIMEOUT:-300}
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(backfill priority turnaround memory)

[ -x "$PJW" ] && [ -x "$WL" ] || { echo "build first: cargo build --release --workspace --bins" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "must run as root" >&2; exit 1; }

work=$(mktemp -d /var/tmp/pjw-bench.XXXXXX)
daemon_pid=""
swapfile=""
sub=""
cleanup() {
  set +e
  stop_daemon
  if [ -n "$swapfile" ]; then swapoff "$swapfile" 2>/dev/null; rm -f "$swapfile"; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Start a private daemon with the given config lines.
start_daemon() {
  stop_daemon
  sub="pjw-bench-$$-$RANDOM"
  export PJW_SOCKET=$work/pjw.sock
  printf '%s\n' "$@" > "$work/pjw.toml"
  "$PJW" daemon --config "$work/pjw.toml" --socket "$PJW_SOCKET" --state-dir "$work/state-$sub" \
    --cgroup-parent "self/$sub" 2>>"$work/daemon.log" &
  daemon_pid=$!
  for _ in $(seq 200); do [ -S "$PJW_SOCKET" ] && return 0; sleep 0.02; done
  echo "daemon did not start" >&2; cat "$work/daemon.log" >&2; exit 1
}

stop_daemon() {
  [ -n "$daemon_pid" ] || return 0
  for j in $("$PJW" status --json 2>/dev/null | sed -n 's/.*"id": "\([^"]*\)".*/\1/p'); do
    "$PJW" kill "$j" >/dev/null 2>&1
  done
  sleep 0.3
  kill -TERM "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null || true
  daemon_pid=""
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
now() { date +%s.%N; }
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
row() { printf '| %-58s | %-22s | %-14s | %s |\n' "$1" "$2" "$3" "$4"; }
results=()

bench_backfill() {
  start_daemon 'cpus = "1"' 'vcpus = 2'
  local iters10 iters2 hz
  iters10=$("$WL" calibrate 0.01)
  iters2=$("$WL" calibrate 2)
  hz=$(getconf CLK_TCK)
  local io_alone=() io_bf=() cpu_alone=() cpu_bf=() share=()
  for r in $(seq "$REPS"); do
    io_alone+=("$("$PJW" run --primary-only -- "$WL" duty 150 "$iters10" 10)")
    cpu_alone+=("$("$PJW" run --primary-only -- "$WL" spin "$iters2")")
    "$PJW" run --backfill-only --job-id "bf-$r" -- "$WL" spin-forever &
    local bf=$!
    sleep 0.3
    local c0 t0 c1 t1
    c0=$(cpu_ticks "$bf"); t0=$(now)
    io_bf+=("$("$PJW" run --primary-only -- "$WL" duty 150 "$iters10" 10)")
    c1=$(cpu_ticks "$bf"); t1=$(now)
    share+=("$(awk -v c="$((c1 - c0))" -v hz="$hz" -v t0="$t0" -v t1="$t1" 'BEGIN{printf "%.3f", c/hz/(t1-t0)}')")
    cpu_bf+=("$("$PJW" run --primary-only -- "$WL" spin "$iters2")")
    "$PJW" kill "bf-$r" >/dev/null 2>&1; { wait "$bf"; } 2>/dev/null || true
  done
  local a b c d s
  a=$(printf '%s\n' "${io_alone[@]}" | median); b=$(printf '%s\n' "${io_bf[@]}" | median)
  c=$(printf '%s\n' "${cpu_alone[@]}" | median); d=$(printf '%s\n' "${cpu_bf[@]}" | median)
  s=$(printf '%s\n' "${share[@]}" | median)
  results+=("$(row "backfill: I/O-bound primary slowdown with a backfiller" "$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%+.1f%% (%.2f s vs %.2f s)", (b/a-1)*100, b, a}')" "within 2%" "$(awk -v a="$a" -v b="$b" 'BEGIN{print ((b/a-1)*100 <= 2 ? "met" : "short")}')")")
  results+=("$(row "backfill: backfiller's share of a CPU beside it" "$(awk -v s="$s" 'BEGIN{printf "%.0f%%", s*100}')" ">= 40%" "$(awk -v s="$s" 'BEGIN{print (s >= 0.4 ? "met" : "short")}')")")
  results+=("$(row "backfill: CPU-bound primary slowdown with a backfiller" "$(awk -v a="$c" -v b="$d" 'BEGIN{printf "%+.1f%% (%.2f s vs %.2f s)", (b/a-1)*100, b, a}')" "within 2%" "$(awk -v a="$c" -v b="$d" 'BEGIN{print ((b/a-1)*100 <= 2 ? "met" : "short")}')")")
  stop_daemon
}

bench_priority() {
  start_daemon 'cpus = "0-1"' 'vcpus = 2'
  local iters
  iters=$("$WL" calibrate 3)
  local lat=() ok=0
  for r in $(seq "$REPS"); do
    "$PJW" run --cpus 2 --priority 5 --job-id "low-$r" -- "$WL" spin "$iters" > "$work/low-$r.out" &
    local low=$!
    for _ in $(seq 100); do "$PJW" status --json | grep -q '"running"' && break; sleep 0.02; done
    local t0
    t0=$(now)
    local t1
    t1=$("$PJW" run --cpus 2 --priority 16 --job-id "high-$r" -- date +%s.%N)
    lat+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')")
    wait "$low" && grep -qE '^[0-9.]+$' "$work/low-$r.out" && ok=$((ok + 1))
  done
  local m
  m=$(printf '%s\n' "${lat[@]}" | median)
  results+=("$(row "priority 16 on a full node: submit to running (median)" "${m} s; displaced done ok ${ok}/${REPS}" "< 1 s" "$(awk -v m="$m" -v ok="$ok" -v n="$REPS" 'BEGIN{print (m < 1 && ok == n ? "met" : "short")}')")")
  stop_daemon
}

# Run 8 copies of CMD at once; print mean turnaround and makespan.
eight() {
  local t0 i
  t0=$(now)
  for i in $(seq 8); do ( "$@" >/dev/null; now > "$work/done.$i" ) & done
  wait
  for i in $(seq 8); do cat "$work/done.$i"; done | awk -v t0="$t0" '{t=$1-t0; s+=t; if (t>m) m=t} END {printf "%.3f %.3f\n", s/NR, m}'
}

bench_turnaround() {
  local iters
  iters=$("$WL" calibrate 2)
  read -r plain_mean plain_span < <(eight "$WL" spin "$iters")
  start_daemon 'cpus = "0-1"' 'vcpus = 4'
  read -r pjw_mean pjw_span < <(eight "$PJW" run -q -- "$WL" spin "$iters")
  stop_daemon
  results+=("$(row "turnaround: 8 CPU-bound jobs, 2 CPUs, vcpus 4: mean" "$(awk -v a="$plain_mean" -v b="$pjw_mean" 'BEGIN{printf "%+.1f%% (%.1f s vs %.1f s)", (b/a-1)*100, b, a}')" ">= 30% lower" "$(awk -v a="$plain_mean" -v b="$pjw_mean" 'BEGIN{print ((1-b/a)*100 >= 30 ? "met" : "short")}')")")
  results+=("$(row "turnaround: makespan" "$(awk -v a="$plain_span" -v b="$pjw_span" 'BEGIN{printf "%+.1f%% (%.1f s vs %.1f s)", (b/a-1)*100, b, a}')" "within 3%" "$(awk -v a="$plain_span" -v b="$pjw_span" 'BEGIN{print ((b/a-1)*100 <= 3 ? "met" : "short")}')")")
}

# Run 4 growing jobs under the current daemon; print "seconds finished oom".
four_growers() {
  local t0 i fin=0 oom=0
  t0=$(now)
  for i in 1 2 3 4; do
    ( timeout "$MEM_TIMEOUT" "$PJW" run -q --job-id "g$i-$1" -- "$WL" grow "$MEM_JOB_MIB" 3 "$MEM_ROUNDS" > "$work/g$i.out" 2>"$work/g$i.err"; echo $? > "$work/g$i.rc" ) &
  done
  wait
  local want
  want=$("$WL" check "$MEM_JOB_MIB" "$MEM_ROUNDS")
  for i in 1 2 3 4; do
    [ "$(cat "$work/g$i.rc")" = 0 ] && [ "$(cat "$work/g$i.out")" = "$want" ] && fin=$((fin + 1))
    [ "$(cat "$work/g$i.rc")" = 137 ] && oom=$((oom + 1))
  done
  echo "$(awk -v t0="$t0" -v t1="$(now)" 'BEGIN{printf "%.1f", t1-t0}') $fin $oom"
}

bench_memory() {
  swapfile=$work/swap
  fallocate -l 3G "$swapfile" && chmod 600 "$swapfile" && mkswap "$swapfile" >/dev/null && swapon "$swapfile"
  start_daemon 'cpus = "0-1"' 'vcpus = 4' '[memory]' "limit = \"$MEM_LIMIT\"" 'interval_ms = 250' 'governor = true'
  read -r g_t g_fin g_oom < <(four_growers gov)
  local frozen
  frozen=$(grep -c "memory pressure: job frozen" "$work/daemon.log" || true)
  stop_daemon
  start_daemon 'cpus = "0-1"' 'vcpus = 4' '[memory]' "limit = \"$MEM_LIMIT\"" 'governor = false'
  read -r p_t p_fin p_oom < <(four_growers plain)
  stop_daemon
  swapoff "$swapfile"; rm -f "$swapfile"; swapfile=""
  results+=("$(row "memory: 4 x ${MEM_JOB_MIB} MiB in ${MEM_LIMIT}, governor (freezes: $frozen)" "${g_t} s, ${g_fin}/4 correct, ${g_oom} killed" "0 lost" "$([ "$g_fin" = 4 ] && echo met || echo short)")")
  results+=("$(row "memory: the same without the governor" "${p_t} s, ${p_fin}/4 correct, ${p_oom} killed" "(baseline)" "")")
  results+=("$(row "memory: governor vs plain" "$(awk -v g="$g_t" -v p="$p_t" -v pf="$p_fin" 'BEGIN{printf "%.2fx sooner%s", p/g, (pf<4?" (plain lost jobs or hit the timeout)":"")}')" "sooner" "$(awk -v g="$g_t" -v p="$p_t" 'BEGIN{print (g < p ? "met" : "short")}')")")
}

echo "pjw node-queue benchmarks on $(hostname), $(nproc) CPUs, $(uname -r), $(date -Iseconds)"
for s in "${scenarios[@]}"; do
  echo "running $s ..." >&2
  "bench_$s"
done
echo
row "scenario" "measured" "goal" "result"
row "---" "---" "---" "---"
printf '%s\n' "${results[@]}"
