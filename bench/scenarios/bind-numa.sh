#!/usr/bin/env bash
# bind-numa: thread balancing in a job whose CPUs span two NUMA nodes (issue 17). The daemon's
# pool is one CPU of each of the first two nodes (BIND_NUMA_CPUS overrides: "A,B"), so a 2-CPU
# job spans both. The job runs `pjw-wl stream 2 MIB PASSES`: two threads, each writing every page
# of its own buffer first (first touch puts a page on the node of the CPU that writes it) and
# then streaming over it (read, modify, write every word), with `--bind none` (the kernel places
# the threads within the job's set) and `--bind threads` (pjw pins each busy thread to a CPU of
# the set; a thread born in a binding job is placed from the kernel's process events at once,
# so usually before it touches its pages). Rounds alternate which mode goes first and are
# paired: the time figure is the bound run's wall time over the unbound run's of the same round,
# the verdict is taken on the 95% bound.
#
# Placement, per run, from the workload itself (stream.rs): each thread samples the node of its
# CPU (getcpu) after every MiB streamed and asks the kernel where its pages are (move_pages with
# no target, a query) after the first touch and at the end. Recorded: the share of samples at
# which a thread ran on another node than its pages, how many threads ended on a CPU of another
# node than their pages, the threads' node changes, and how many threads' pages the kernel's
# NUMA balancing moved. The job's allowed CPUs, the per-thread lines (with tids) and the daemon's
# pins (its debug log) are in raw/bind-numa*.
#
# On a host with one NUMA node nothing is measured: the row says so. Measure it in a guest with
# two nodes: `make bench-vm-numa` (vm/systemd/run.sh session bench-numa). Under software
# emulation (qemu TCG) the guest's NUMA nodes are a topology only: a remote access costs what a
# local one does, so the time row cannot show a NUMA gain; the placement row shows what binding
# does to where threads run relative to their pages. When the host's load file is given
# (BENCH_HOST_LOAD_FILE, lines "EPOCH LOAD1 OTHER_RUNNABLE" written by the host, BENCH_HOST_CPUS)
# the emulator's host load is recorded too and a loaded host marks every verdict.
SCENARIO=bind-numa
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"

REPS=${BIND_NUMA_REPS:-$([ "$QUICK" = 1 ] && echo 3 || echo 8)}
SECS=${BIND_NUMA_SECS:-$([ "$QUICK" = 1 ] && echo 2 || echo 5)}
MIB=${BIND_NUMA_MIB:-64}
THREADS=2
label="bind-numa: $THREADS memory-streaming threads on a 2-CPU job spanning 2 NUMA nodes, --bind threads vs none"
raw=$BENCH_OUT/raw/bind-numa.txt
threads_raw=$BENCH_OUT/raw/bind-numa-threads.txt

# The nodes with CPUs, and the last CPU of each (CPU 0 does the guest's housekeeping).
nodes=()
for d in /sys/devices/system/node/node[0-9]*; do
  [ -s "$d/cpulist" ] && [ -n "$(tr -d '\n' < "$d/cpulist")" ] && nodes+=("$d")
done
if [ ${#nodes[@]} -lt 2 ]; then
  row "not measured (one NUMA node: $(cat /sys/devices/system/node/online 2>/dev/null || echo '?'); run make bench-vm-numa for a guest with two)" \
    "the original pjw: busy threads locked one per CPU, one NUMA node before the next" \
    "bound ≤ unbound + 2% (95% bound); threads on their pages' node" "not measured" "$label"
  exit 0
fi
last_cpu() { tr ',' '\n' < "$1/cpulist" | tail -1 | sed 's/.*-//'; }
cpus=${BIND_NUMA_CPUS:-$(last_cpu "${nodes[0]}"),$(last_cpu "${nodes[1]}")}
cpu_node() { local d; for d in /sys/devices/system/node/node[0-9]*; do [ -e "$d/cpu$1" ] && { echo "${d##*node}"; return; }; done; echo '?'; }
where="CPUs ${cpus%,*} (node $(cpu_node "${cpus%,*}")) and ${cpus#*,} (node $(cpu_node "${cpus#*,}"))"
balancing=$(cat /proc/sys/kernel/numa_balancing 2>/dev/null || echo '?')

host_line() { [ -r "${BENCH_HOST_LOAD_FILE:-}" ] && wc -l < "$BENCH_HOST_LOAD_FILE" || echo 0; }
host0=$(host_line)

# Passes for about SECS of streaming per thread: one thread alone, timed, pinned to a CPU of the set.
cal=$(taskset -c "${cpus%,*}" "$WL" stream 1 "$MIB" 3 2>/dev/null | cut -d' ' -f1)
passes=$(calc "p = int($SECS / ($cal / 4)); print (p < 1) ? 1 : p")
echo "cpus $cpus ($where); $THREADS threads x $MIB MiB, $passes passes (one thread, 3 passes: $cal s); kernel.numa_balancing=$balancing" > "$raw"
: > "$threads_raw"

# The binder's pins at debug level, kept in raw/bind-numa-pins.txt beside the threads' tids.
PJW_LOG=${PJW_LOG:-info,pjw_daemon::bind=debug} start_daemon "cpus = \"$cpus\"" 'vcpus = 2' '[job]' 'bind_interval_ms = 200'
total=$((REPS * 2))
i=0
for r in $(seq "$REPS"); do
  if [ $((r % 2)) = 1 ]; then order="none threads"; else order="threads none"; fi
  for mode in $order; do
    i=$((i + 1))
    step "$i" "$total" "round $r/$REPS: --bind $mode"
    echo "round $r $mode:" >> "$threads_raw"
    out=$("$PJW" run -q --cpus 2 --primary-only --bind "$mode" -- \
      sh -c 'grep Cpus_allowed_list /proc/self/status >&2; exec "$@"' sh "$WL" stream "$THREADS" "$MIB" "$passes" 2>> "$threads_raw")
    # mode round wall remote_end changes remote_pct pages_moved
    echo "$mode $r $out" >> "$raw"
  done
done
grep -e 'thread pinned' -e 'thread unpinned' "$DAEMON_LOG" > "$BENCH_OUT/raw/bind-numa-pins.txt" || true
stop_daemon

# Per round: bound over unbound wall time (%), and bound minus unbound remote share (points).
awk '$1 == "none" { u[$2] = $3 } $1 == "threads" { b[$2] = $3 }
  END { for (r in u) if (r in b) print (b[r] / u[r] - 1) * 100 }' "$raw" > "$WORK/ratio"
read -r cnt m sd ci _ < <(stats < "$WORK/ratio")
read -r _ um usd _ < <(awk '$1 == "none" {print $3}' "$raw" | stats)
read -r _ bm bsd _ < <(awk '$1 == "threads" {print $3}' "$raw" | stats)

# The emulator's host: load and other runnable threads while this scenario ran.
host_why=""
if [ -r "${BENCH_HOST_LOAD_FILE:-}" ]; then
  read -r hn hl0 hl1 hmean hmax < <(awk -v a="$host0" 'NR > a { n++; if (n == 1) l0 = $2; l1 = $2; s += $3; if ($3 > mx) mx = $3 }
    END { printf "%d %.2f %.2f %.1f %d\n", n, l0, l1, n ? s / n : 0, mx }' "$BENCH_HOST_LOAD_FILE")
  hcpus=${BENCH_HOST_CPUS:-?}
  host_desc="the emulator's host ($hcpus CPUs): load average $hl0 at the start, $hl1 at the end; runnable threads outside the emulator: mean $hmean, max $hmax ($hn samples, every 2 s)"
  if [ "$hn" = 0 ] || calc "exit !($hmean > 0.25)"; then
    host_why="; NOT PUBLISHABLE: emulator's host loaded ($host_desc)"
    [ "$hn" != 0 ] || host_why="; NOT PUBLISHABLE: emulator's host load not sampled"
  fi
  note "$host_desc."
fi

tcg=""
if [ -n "${BENCH_VM_NOTE:-}" ]; then tcg=" ${BENCH_VM_NOTE}"; fi
row "$(calc "printf \"%+.2f%% ± %.2f (95%% CI), sd %.2f, n=%d; unbound %.3f s (sd %.3f), bound %.3f s (sd %.3f)\", $m, $ci, $sd, $cnt, $um, $usd, $bm, $bsd"); $where, $THREADS threads × $MIB MiB, $passes passes" \
  "the original pjw: busy threads locked one per CPU, one NUMA node before the next; unbound, the scheduler may run a thread on the other node than its pages" \
  "bound ≤ unbound + 2% (95% bound)" "$(verdict_le "$m" "$ci" 2)$host_why" "$label: wall time"

if grep -q ' - - - -$' "$raw"; then
  row "not measured (the kernel did not report where the threads' pages are: move_pages or getcpu failed)" "" \
    "threads on their pages' node" "not measured" "$label: placement"
else
  awk '$1 == "none" { u[$2] = $6 } $1 == "threads" { b[$2] = $6 }
    END { for (r in u) if (r in b) print b[r] - u[r] }' "$raw" > "$WORK/remote"
  read -r _ dm _ dci _ < <(stats < "$WORK/remote")
  placement() {   # placement MODE: "remote share X% (per run: a..b), ended remote R of T, node changes C, pages moved M"
    awk -v n="$THREADS" -v mode="$1" '$1 == mode { k++; s += $6; if (k == 1 || $6 < lo) lo = $6; if (k == 1 || $6 > hi) hi = $6; re += $4; ch += $5; mv += $7 }
      END { printf "ran on another node than its pages at %.1f%% of samples (runs: %.1f–%.1f%%), ended on another node %d of %d times, %d node changes, pages moved by the kernel %d times", s / k, lo, hi, re, k * n, ch, mv }' "$raw"
  }
  row "unbound: $(placement none); bound: $(placement threads); bound − unbound: $(calc "printf \"%+.1f ± %.1f points (95%% CI)\", $dm, $dci")" \
    "first touch puts a thread's pages on the node it ran on; a thread moved to the other node reads them remotely" \
    "bound: remote share ≤ unbound's (95% bound)" "$(verdict_le "$dm" "$dci" 0)$host_why" "$label: placement"
fi
note "NUMA-spanning job: $where; $THREADS threads × $MIB MiB, $passes passes each; kernel.numa_balancing=$balancing.${tcg} Binding pins a busy thread to a CPU; whether its pages are on that CPU's node depends on where it first touched them: a thread placed from the kernel's process events at birth touches them on its own CPU, one pinned later by a pass may be moved away from them. Wall time $(calc "printf \"%+.1f%% ± %.1f\", $m, $ci") bound against unbound (load average $(cut -d' ' -f1 /proc/loadavg) at the end)."
