#!/usr/bin/env bash
# launch: N sequential `pjw run -q -- /bin/true` against N bare fork/exec of /bin/true from the
# same shell loop, in paired rounds; and N sequential `srun /bin/true` when a working Slurm
# answers. Measured: launches per second and milliseconds pjw adds per launch (the difference
# of the paired loops over N). Anchors: HTCondor 55-95 jobs/s, Slurm ~500/s published, srun
# 7-9/s on this machine.
SCENARIO=launch
source "$(dirname "$0")/../lib.sh"

N=${LAUNCH_N:-$([ "$QUICK" = 1 ] && echo 100 || echo 1000)}
REPS=${LAUNCH_REPS:-3}
raw=$BENCH_OUT/raw/launch.txt
: > "$raw"

# The metrics endpoint gives the daemon's own share: its launch-latency histogram runs from a
# job's submission to the Started answer.
port=$((20000 + RANDOM % 20000))
start_daemon 'cpus = "0-1"' '[metrics]' "listen = \"127.0.0.1:$port\""
"$PJW" run -q -- /bin/true # warm the page cache and the store
daemon_ms() {
  curl -s "http://127.0.0.1:$port/metrics" | awk '/^pjw_launch_latency_seconds_sum/ {s = $2} /^pjw_launch_latency_seconds_count/ {c = $2} END {printf "%.6f %d\n", s, c}'
}
read -r lat0 n0 < <(daemon_ms)
for r in $(seq "$REPS"); do
  step "$r" "$REPS" "round $r/$REPS: $N bare, $N through pjw, $N pjw status"
  t0=$(now); for _ in $(seq "$N"); do /bin/true; done; t1=$(now)
  for _ in $(seq "$N"); do "$PJW" run -q -- /bin/true; done; t2=$(now)
  # The client's own start and one round trip to the daemon, without a job.
  for _ in $(seq "$N"); do "$PJW" status >/dev/null; done; t3=$(now)
  echo "$r $(calc "printf \"%.4f %.4f %.4f\", $t1 - $t0, $t2 - $t1, $t3 - $t2")" >> "$raw"
done
read -r lat1 n1 < <(daemon_ms)
stop_daemon
# Mean submission-to-start time inside the daemon over the measured launches, ms.
dmn=$(calc "printf \"%.2f\", ($n1 > $n0) ? ($lat1 - $lat0) / ($n1 - $n0) * 1000 : -1")

read -r n bare _ < <(awk '{print $2}' "$raw" | stats)
read -r _ jail _ < <(awk '{print $3}' "$raw" | stats)
read -r _ rate rsd rci _ < <(awk -v n="$N" '{print n / $3}' "$raw" | stats)
read -r _ add asd aci _ < <(awk -v n="$N" '{print ($3 - $2) / n * 1000}' "$raw" | stats)
read -r _ cli _ < <(awk -v n="$N" '{print ($4 - $2) / n * 1000}' "$raw" | stats)

srun_txt="srun: no working Slurm here"
SRUN_N=$([ "$QUICK" = 1 ] && echo 10 || echo 50)
if command -v srun >/dev/null && timeout 20 srun -n1 /bin/true >/dev/null 2>&1; then
  step "$REPS" "$REPS" "$SRUN_N sequential srun /bin/true"
  t0=$(now); for _ in $(seq "$SRUN_N"); do timeout 20 srun -n1 /bin/true; done; t1=$(now)
  srun_txt=$(calc "printf \"srun %.1f/s (%d sequential)\", $SRUN_N / ($t1 - $t0), $SRUN_N")
fi
row "$(calc "printf \"%.0f launches/s ± %.0f (95%% CI); %.3f ms added per launch ± %.3f (%.2f s for %d vs %.2f s bare, medians of %d rounds), of which %.2f ms is the client's start and one round trip (\`pjw status\`) and %.2f ms the daemon's work from submission to start\", $rate, $rci, $add, $aci, $jail, $N, $bare, $n, $cli, $dmn"); $srun_txt" \
  "HTCondor 55–95 jobs/s; Slurm ~500/s published; srun 7–9/s here" "≥ 1,000 launches/s; ≤ 1 ms added per launch" \
  "$(calc "print ($rate >= 1000 && $add <= 1) ? \"pass\" : \"short\"")"
if calc "exit !($rate < 1000 || $add > 1)"; then
  per_bare=$(calc "printf \"%.2f\", $bare / $N * 1000")
  note "$(calc "printf \"%.0f launches/s, %.2f ms added per launch: %.2f ms are the pjw client's own start and one round trip (a pjw status loop, no job), %.2f ms the daemon's work from submission to the Started answer (its launch-latency histogram: a store record, the job's cgroups made in every hierarchy with their limits, the client moved into them, the record marked running), the rest the client's second exec (into the command) and the hand-overs between shell, client, daemon and command on two vCPUs\", $rate, $add, $cli, $dmn") (load average $(cut -d' ' -f1 /proc/loadavg)). A bare fork and exec from the same shell loop takes $per_bare ms here, so 1,000 launches/s would leave pjw $(calc "printf \"%.2f\", 1 - $per_bare") ms for a client start, a round trip, the cgroup work and an exec: out of reach for a design in which the job is the client process that asked (which is what confines it from its first instruction). A smaller client binary would trim the client's part."
fi
