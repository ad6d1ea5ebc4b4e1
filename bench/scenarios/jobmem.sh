#!/usr/bin/env bash
# per-job memory: the daemon's memory per job it holds, at N jobs. On 2 CPUs at most
# `vcpus` = 4 x 2 = 8 jobs can run at once (2 primaries, 6 backfillers), so the figure at N is
# for 8 running jobs and N - 8 waiting in the queue (each a connected client the daemon keeps a
# record and a task for); the running jobs' share is measured on its own (0 -> 8 jobs). Memory
# is the daemon's private memory (smaps_rollup Private_*), and its VmRSS. Helpers: pjw's client
# execs the command, so a running job's cgroup holds only the command's processes; checked.
# Then a second daemon with `vcpus` raised runs R short sleepers at once (R = JOBMEM_RUNNING,
# default 1,000, capped at what `vcpus` may be: 512 x the pool, so 1,024 on 2 CPUs; a 1-CPU
# pool runs 512): the figure per *running* job, each with its cgroups in every
# hierarchy, its pidfd and its watch.
# Anchor: condor_shadow 516-972 KB private per running job.
SCENARIO=jobmem
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"

N=${JOBMEM_N:-1000}
start_daemon 'cpus = "0-1"' 'vcpus = 8'
"$PJW" run -q -- /bin/true # warm up: the store, the first cgroups, the allocator
sleep 1
p0=$(private_kib "$DAEMON_PID"); r0=$(rss_kib "$DAEMON_PID")
step 1 4 "8 running jobs"
fill_node 8 1
for _ in $(seq 100); do # until all 8 have started (2 primaries, 6 backfillers)
  [ "$("$PJW" status --json | grep -cE '"state": "(running|backfill)"' || true)" -ge 8 ] && break
  sleep 0.1
done
sleep 1
p8=$(private_kib "$DAEMON_PID"); r8=$(rss_kib "$DAEMON_PID")
running=$("$PJW" status --json | grep -cE '"state": "(running|backfill)"' || true)
# Helpers: the processes in the jobs, and the jobs holding more than their one command (a job
# still starting has none yet, so the count is per job, not processes against running jobs).
read -r procs helpers < <("$PJW" status --json | awk -F': ' '/"procs":/ {gsub(/,/, "", $2); s += $2; if ($2 + 0 > 1) h++} END {print s+0, h+0}')
step 2 4 "$N jobs ($((N - 8)) more, queued)"
# Submit the rest under new ids.
for i in $(seq 9 "$N"); do
  "$PJW" run -q --job-id "more-$i" -- sleep 3600 </dev/null >/dev/null 2>&1 &
  FILL_PIDS+=("$!"); BGPIDS+=("$!")
  [ $((i % 100)) = 0 ] && step 2 4 "submitting jobs: $i/$N"
done
for _ in $(seq 600); do
  have=$("$PJW" status --json | grep -c '"id": "' || true)
  [ "$have" -ge "$N" ] && break
  sleep 0.2
done
sleep 1
pn=$(private_kib "$DAEMON_PID"); rn=$(rss_kib "$DAEMON_PID")
queued=$("$PJW" status --json | grep -c '"state": "queued"' || true)
client=$(private_kib "${FILL_PIDS[$((${#FILL_PIDS[@]} - 1))]}" 2>/dev/null || echo 0)
step 3 4 "draining"
drain_node
stop_daemon

# Running jobs: as many as `vcpus` may hold on this pool.
ncpu=$(nproc)
pool=$([ "$ncpu" -ge 2 ] && echo "0-1" || echo "0")
pool_n=$([ "$ncpu" -ge 2 ] && echo 2 || echo 1)
R=${JOBMEM_RUNNING:-1000}
[ "$R" -le $((512 * pool_n)) ] || R=$((512 * pool_n))
start_daemon "cpus = \"$pool\"" "vcpus = $R"
"$PJW" run -q -- /bin/true
sleep 1
q0=$(private_kib "$DAEMON_PID"); s0=$(rss_kib "$DAEMON_PID")
step 4 4 "$R running jobs"
fill_node "$R" 1
runs=0
for _ in $(seq 600); do
  runs=$("$PJW" status --json | grep -cE '"state": "(running|backfill)"' || true)
  [ "$runs" -ge "$R" ] && break
  sleep 0.2
done
sleep 1
qr=$(private_kib "$DAEMON_PID"); sr=$(rss_kib "$DAEMON_PID")
drain_node
stop_daemon
echo "idle $p0 $r0; 8 $p8 $r8 running=$running procs=$procs; $N $pn $rn queued=$queued; waiting client private $client; running-daemon idle $q0 $s0; $R asked $qr $sr running=$runs" > "$BENCH_OUT/raw/jobmem.txt"
per_r=$(calc "printf \"%.1f\", ($qr - $q0) / ($runs > 0 ? $runs : 1)")

per_all=$(calc "printf \"%.1f\", ($pn - $p0) / $N")
per_run=$(calc "printf \"%.1f\", ($p8 - $p0) / 8")
per_q=$(calc "printf \"%.1f\", ($pn - $p8) / ($N - 8)")
row "single measurement (one daemon per figure; the daemon's private memory is a count of pages, not a timing): $per_all KiB private per job at $N jobs ($running running + $queued queued; daemon $p0 → $pn KiB private, VmRSS $r0 → $rn KiB); running jobs alone: $per_run KiB each at 8, $per_r KiB each at $runs running (vcpus = $R$([ "$R" -lt 1000 ] && echo ", the most 512 × the $pool_n-CPU pool allows; 1,000 running needs ≥ 2 CPUs"); daemon $q0 → $qr KiB private); queued: $per_q KiB each; per-job helper: $([ "$helpers" = 0 ] && echo none || echo "$helpers jobs with more than their command") ($procs processes in $running running jobs, one command each; a waiting \`pjw run\` client is the job itself, $client KiB private)" \
  "condor_shadow 516–972 KB private per job" "≤ 16 KB per job, no per-job helper" \
  "$(calc "print ($per_all <= 16 && $per_run <= 16 && $per_r <= 16 && $runs >= $R && $helpers == 0) ? \"met (single measurement)\" : \"short (single measurement)\"")" \
  "per-job memory (daemon)"
if calc "exit !($per_all > 16 || $per_run > 16 || $per_r > 16)"; then
  note "daemon memory: $per_all KiB per job at $N jobs, $per_run KiB per running job at 8, $per_r KiB at $runs. Each running job holds a pidfd, an inotify watch, its cgroup paths in every hierarchy (six on this hybrid machine) and a store row; each queued job a connection and the task waiting on it; heap growth is counted in whole pages and the allocator keeps freed memory, so small N over-counts."
fi
