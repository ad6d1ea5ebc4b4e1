#!/usr/bin/env bash
# reaction: (1) from the last process of a job exiting to its CPUs being free: a 2-CPU job (a
# shell that sleeps, writes the time and exits: its last process) while a second 2-CPU job waits
# in the queue for those CPUs. Measured: the exit -> the daemon's "job ended" log line, and ->
# the waiting job's "job started" line (its CPUs handed on). (With `kill_leftovers = false` the
# daemon hands an ending job's CPUs on when its main process exits, before the leftovers are
# gone, so that setting would not measure the last process.)
# (2) from memory pressure crossing the governor's threshold to the victim frozen: one job
# holds 60% of the partition, a second grows past `high` (90%); the partition's memory is
# polled every 5 ms (no fork: bash builtins) for the crossing, the daemon's "memory pressure:
# job frozen" line gives the freeze. Default tick (`interval_ms = 1000`), no growth prediction
# (`vm_prediction = 0`, which would freeze before the crossing). A swap file keeps the kernel
# from killing the grower if the governor is late. Anchors: kubelet eviction >= 10 s,
# systemd-oomd 30 s.
SCENARIO=reaction
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"

REPS=${REACT_REPS:-$([ "$QUICK" = 1 ] && echo 4 || echo 10)}
FREPS=${REACT_FREEZE_REPS:-$([ "$QUICK" = 1 ] && echo 2 || echo 5)}
LIMIT_MIB=${REACT_LIMIT_MIB:-512}
raw=$BENCH_OUT/raw/reaction.txt
: > "$raw"
exec {nap}<> <(:)
nap() { read -r -t "$1" -u "$nap" _ || true; }
logtime() { # logtime PATTERN: wall seconds of the first daemon log line matching PATTERN
  local l
  l=$({ grep -m1 -- "$1" "$DAEMON_LOG" || true; } | awk '{print $1}')
  [ -n "$l" ] && log_secs "$l"
}

# (1) CPUs free.
start_daemon 'cpus = "0-1"' 'vcpus = 2'
for r in $(seq "$REPS"); do
  step "$r" "$((REPS + FREPS))" "CPUs free, round $r/$REPS"
  spawn "$PJW" run -q --cpus 2 --job-id "a-$r" -- sh -c "sleep 1; date +%s.%N > $WORK/a.$r; exit 0"; a=$!
  for _ in $(seq 200); do grep -q "job started job=a-$r " "$DAEMON_LOG" && break; nap 0.02; done
  spawn "$PJW" run -q --cpus 2 --job-id "b-$r" -- /bin/true; b=$!
  wait "$a" "$b" || true
  tx=$(cat "$WORK/a.$r")
  te=$(logtime "job ended job=a-$r ")
  ts=$(logtime "job started job=b-$r ")
  echo "cpus $r $(calc "printf \"%.2f %.2f\", ($te - $tx) * 1000, ($ts - $tx) * 1000")" >> "$raw"
done
stop_daemon

# (2) Freeze.
enable_swap "$((LIMIT_MIB * 2))M"
start_daemon 'cpus = "0-1"' 'vcpus = 2' '[memory]' "limit = \"${LIMIT_MIB}M\"" 'vm_prediction = 0' 'governor = true'
usage=""
for d in $(cgroup_dirs "$DAEMON_SUB"); do
  [ -r "$d/memory.usage_in_bytes" ] && usage=$d/memory.usage_in_bytes
  [ -r "$d/memory.current" ] && usage=$d/memory.current
done
thr=$((LIMIT_MIB * 1024 * 1024 * 9 / 10))
big=$((LIMIT_MIB * 6 / 10))
for r in $(seq "$FREPS"); do
  step "$((REPS + r))" "$((REPS + FREPS))" "memory pressure to frozen, round $r/$FREPS"
  spawn "$PJW" run -q --job-id "m1-$r" -- "$WL" touch "$big" "$WORK/m1.$r"; m1=$!
  for _ in $(seq 600); do [ -e "$WORK/m1.$r" ] && break; nap 0.05; done
  nap 2 # let the governor see the first job settle
  spawn "$PJW" run -q --job-id "m2-$r" -- "$WL" touch "$big" "$WORK/m2.$r"; m2=$!
  tc=""
  for _ in $(seq 6000); do
    read -r u < "$usage"
    if [ "$u" -ge "$thr" ]; then tc=$EPOCHREALTIME; break; fi
    nap 0.005
  done
  tf=""
  for _ in $(seq 300); do
    tf=$({ grep "memory pressure: job frozen" "$DAEMON_LOG" || true; } | { grep -E "job=m[12]-$r " || true; } | head -1 | awk '{print $1}')
    [ -n "$tf" ] && break
    nap 0.05
  done
  if [ -n "$tc" ] && [ -n "$tf" ]; then
    echo "freeze $r $(calc "printf \"%.1f\", ($(log_secs "$tf") - $tc) * 1000")" >> "$raw"
  else
    echo "freeze $r missing crossing=${tc:-none} frozen=${tf:-none}" >> "$raw"
  fi
  "$PJW" kill "m1-$r" >/dev/null 2>&1 || true
  "$PJW" kill "m2-$r" >/dev/null 2>&1 || true
  wait "$m1" "$m2" 2>/dev/null || true
  nap 1.5
done
stop_daemon
disable_swap

read -r n _ _ _ emed _ emax < <(awk '$1=="cpus"{print $3}' "$raw" | stats)
read -r _ sm _ sci smed _ smax < <(awk '$1=="cpus"{print $4}' "$raw" | stats)
row "$(calc "printf \"job ended %.1f ms after its last process (median; max %.1f), next job started on its CPUs %.1f ms after (median; mean %.1f ± %.1f, max %.1f; n=%d)\", $emed, $emax, $smed, $sm, $sci, $smax, $n")" \
  "kubelet eviction ≥ 10 s; systemd-oomd 30 s" "≤ 100 ms" \
  "$(calc "print ($smax <= 100) ? \"met (worst of $n rounds)\" : \"short (worst of $n rounds)\"")" "reaction: last process exits → CPUs free"
fn=$(awk '$1=="freeze" && $3 != "missing"' "$raw" | wc -l)
if [ "$fn" -gt 0 ]; then
  read -r n fm _ _ fmed fmin fmax < <(awk '$1=="freeze" && $3 != "missing" {print $3}' "$raw" | stats)
  row "$(calc "printf \"%.0f ms median (mean %.0f, min %.0f, max %.0f; n=%d of %d) with interval_ms = 1000\", $fmed, $fm, $fmin, $fmax, $n, $FREPS")" \
    "kubelet eviction ≥ 10 s; systemd-oomd 30 s" "≤ 1 s" \
    "$(calc "print ($fmax <= 1000 && $n == $FREPS) ? \"met (worst of $n rounds)\" : \"short (worst of $n rounds)\"")" "reaction: memory pressure crossing → victim frozen"
else
  row "no freeze observed in $FREPS rounds (see raw/reaction.txt)" "kubelet eviction ≥ 10 s; systemd-oomd 30 s" "≤ 1 s" "short" "reaction: memory pressure crossing → victim frozen"
fi
if calc "exit !($smax > 100)"; then
  note "CPUs free: the slowest of $n rounds took $(calc "printf \"%.0f\", $smax") ms from the last process's exit to the next job's start. The daemon learns of the exit from inotify on the job's cgroup.events and hands the CPUs on at once; what remains is run-queue wait of the daemon and of the waiting client on this loaded machine."
fi
awk '$1=="cpus"{print "ended(ms)", $3; print "next-started(ms)", $4} $1=="freeze" && $3 != "missing" {print "frozen(ms)", $3}' "$raw" \
  | awk -f "$BENCH_ROOT/bench/plot.awk" -v mode=strip -v title="reaction times" -v ylabel="milliseconds" > "$BENCH_OUT/plots/reaction.svg"
