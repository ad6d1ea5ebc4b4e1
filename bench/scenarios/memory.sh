#!/usr/bin/env bash
# memory: 4 jobs whose working sets total 2x the job partition (`[memory] limit`), on a machine
# with a swap file made for the run: each grows to MIB MiB in steps, then writes every page
# ROUNDS times and prints a checksum (`pjw-wl grow`). Run with the governor (it freezes jobs
# whose growth would make the partition swap, thaws them when memory is free) and without it
# (plain: the same partition limit, the kernel swaps). Each run is bounded by TIMEOUT seconds;
# a job is complete when its checksum is right, lost when killed (OOM) or cut off by the bound.
# Anchor: MCOpt 2.8-3.6x faster under memory pressure, plain runs failed.
SCENARIO=memory
source "$(dirname "$0")/../lib.sh"

# The quick suite keeps the sizes (smaller ones swap too little to show anything) and bounds
# the plain run sooner.
LIMIT_MIB=${MEM_LIMIT_MIB:-1024}
JOB_MIB=$((LIMIT_MIB / 2))
ROUNDS=${MEM_ROUNDS:-60}
TIMEOUT=${MEM_TIMEOUT:-$([ "$QUICK" = 1 ] && echo 40 || echo 240)}
raw=$BENCH_OUT/raw/memory.txt
: > "$raw"

# Memory of the partition (the daemon's parent cgroup in the memory hierarchy), MiB.
partition_file() {
  local d
  for d in $(cgroup_dirs "$DAEMON_SUB"); do
    [ -r "$d/memory.usage_in_bytes" ] && { echo "$d/memory.usage_in_bytes"; return; }
    [ -r "$d/memory.current" ] && { echo "$d/memory.current"; return; }
  done
}

# growers LABEL: 4 growing jobs under the current daemon; prints "seconds complete lost cutoff".
growers() {
  local label=$1 t0 i pids=() fin=0 lost=0 cut=0 want
  t0=$(now)
  for i in 1 2 3 4; do
    ( timeout -s KILL "$TIMEOUT" "$PJW" run -q --job-id "$label-$i" -- "$WL" grow "$JOB_MIB" 3 "$ROUNDS" \
        > "$WORK/$label.$i.out" 2>"$WORK/$label.$i.err"; echo $? > "$WORK/$label.$i.rc" ) &
    pids+=("$!"); BGPIDS+=("$!")
  done
  # Time line of the partition's memory, every 0.5 s, while the jobs run.
  local f
  f=$(partition_file)
  while kill -0 "${pids[@]}" 2>/dev/null || [ -z "$(cat "$WORK"/"$label".*.rc 2>/dev/null | wc -l | grep -x 4)" ]; do
    [ -n "$f" ] && [ -r "$f" ] && echo "$label $(calc "printf \"%.1f\", $(now) - $t0") $(( $(cat "$f") >> 20 ))" >> "$BENCH_OUT/raw/memory-timeline.txt"
    local alive=0 p
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 1 ] || break
    sleep 0.5
  done
  wait "${pids[@]}" 2>/dev/null || true
  local t1
  t1=$(now)
  want=$("$WL" check "$JOB_MIB" "$ROUNDS")
  for i in 1 2 3 4; do
    local rc
    rc=$(cat "$WORK/$label.$i.rc" 2>/dev/null || echo 255)
    echo "$label job $i: exit $rc, $(head -c 200 "$WORK/$label.$i.err" | tr '\n' ' ')" >> "$BENCH_OUT/raw/memory.txt"
    if [ "$rc" = 0 ] && [ "$(cat "$WORK/$label.$i.out")" = "$want" ]; then fin=$((fin + 1))
    elif [ "$rc" = 137 ] && [ "$(calc "print ($t1 - $t0 >= $TIMEOUT - 1) ? 1 : 0")" = 1 ]; then cut=$((cut + 1))
    else lost=$((lost + 1)); fi
  done
  echo "$(calc "printf \"%.1f\", $t1 - $t0") $fin $lost $cut"
}

: > "$BENCH_OUT/raw/memory-timeline.txt"
step 1 3 "making a $((LIMIT_MIB * 3)) MiB swap file"
enable_swap "$((LIMIT_MIB * 3))M"
step 2 3 "4 x $JOB_MIB MiB in a $LIMIT_MIB MiB partition, governor"
start_daemon 'cpus = "0-1"' 'vcpus = 4' '[memory]' "limit = \"${LIMIT_MIB}M\"" 'interval_ms = 250' 'governor = true'
read -r gt gfin glost gcut < <(growers governor)
freezes=$(grep -c "frozen" "$DAEMON_LOG" || true)
oomg=$(grep -ci "oom" "$DAEMON_LOG" || true)
stop_daemon
step 3 3 "the same without the governor (bounded by $TIMEOUT s)"
start_daemon 'cpus = "0-1"' 'vcpus = 4' '[memory]' "limit = \"${LIMIT_MIB}M\"" 'governor = false'
read -r pt pfin plost pcut < <(growers plain)
stop_daemon
disable_swap
echo "governor $gt $gfin $glost $gcut $freezes; plain $pt $pfin $plost $pcut" >> "$raw"

ratio=$(calc "printf \"%.2f\", $pt / $gt")
bound=""
[ "$pfin" -lt 4 ] && bound="≥ "
row "governor: $gfin/4 complete, $glost lost, $gcut cut off, ${gt} s ($freezes freeze log lines); plain: $pfin/4 complete, $plost lost, $pcut cut off at ${TIMEOUT} s, ${pt} s; makespan ${bound}${ratio}× better" \
  "MCOpt: 2.8–3.6× faster; plain runs failed" "0 lost; makespan ≥ 2× better than plain" \
  "$(calc "print ($glost == 0 && $gcut == 0 && $pt / $gt >= 2) ? \"pass\" : \"short\"")" \
  "memory pressure: 4 × $JOB_MIB MiB in a $LIMIT_MIB MiB partition, swap file"
if calc "exit !($glost > 0 || $gcut > 0 || $pt / $gt < 2)"; then
  note "governor: $gfin/4 complete, $glost lost, $gcut cut off, ${gt} s; plain ${pt} s. Memory-bound jobs on a machine whose CPUs are shared with other users slow down for both runs alike; the log of the governor run is the place to look for freeze/thaw churn."
fi
awk -f "$BENCH_ROOT/bench/plot.awk" -v mode=lines -v title="memory pressure: the partition's memory (limit $LIMIT_MIB MiB)" -v xlabel="seconds" -v ylabel="MiB charged (RAM)" "$BENCH_OUT/raw/memory-timeline.txt" > "$BENCH_OUT/plots/memory.svg"
