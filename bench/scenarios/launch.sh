#!/usr/bin/env bash
# launch: N sequential `pjw run -q -- /bin/true` against N bare fork/exec of /bin/true from the
# same shell loop, in paired rounds; N sequential `srun -n1 /bin/true` on a live Slurm
# (lib.sh's slurm_live; otherwise a row "srun: not measured (why)"), and `systemd-run --scope
# /bin/true` where systemd is PID 1. Measured: launches per second and milliseconds pjw adds per
# launch (the difference of the paired loops over N), as medians over the rounds with their
# range; the verdict is taken on the 95% bound of the mean. Anchors: HTCondor 55-95 jobs/s,
# Slurm ~500/s published; every other figure is measured in this run. Also C = LAUNCH_CLIENTS
# (default 8) clients launching at once, against C bare loops, in the same rounds.
SCENARIO=launch
# shellcheck source=../lib.sh
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
  http_get "http://127.0.0.1:$port/metrics" | awk '/^pjw_launch_latency_seconds_sum/ {s = $2} /^pjw_launch_latency_seconds_count/ {c = $2} END {printf "%.6f %d\n", s, c}'
}
read -r lat0 n0 < <(daemon_ms)
for r in $(seq "$REPS"); do
  step "$r" "$REPS" "round $r/$REPS: $N bare, $N through pjw, $N refused pjw run"
  t0=$(now); for _ in $(seq "$N"); do /bin/true; done; t1=$(now)
  for _ in $(seq "$N"); do "$PJW" run -q -- /bin/true; done; t2=$(now)
  # The client's own start and one round trip to the daemon, without a job: a `pjw run` the
  # daemon refuses (more CPUs than the node has). Not `pjw status`: the launch front execs
  # pjw-full for every other subcommand (docs/decisions.md (cj)).
  for _ in $(seq "$N"); do "$PJW" run -q --cpus 1000000 -- /bin/true 2>/dev/null || true; done; t3=$(now)
  echo "$r $(calc "printf \"%.4f %.4f %.4f\", $t1 - $t0, $t2 - $t1, $t3 - $t2")" >> "$raw"
done
read -r lat1 n1 < <(daemon_ms)   # the sequential launches only
# Concurrent launches: C clients at once, each running N/C launches one after the other (as C
# ranks of a job array or C users would); against C bare fork/exec loops, in the same rounds.
C=${LAUNCH_CLIENTS:-8}
per=$((N / C))
rawc=$BENCH_OUT/raw/launch-concurrent.txt
: > "$rawc"
loop_pjw() { local i; for i in $(seq "$per"); do "$PJW" run -q -- /bin/true || echo "launch failed" >&2; done; }
loop_bare() { local i; for i in $(seq "$per"); do /bin/true; done; }
for r in $(seq "$REPS"); do
  step "$r" "$REPS" "round $r/$REPS: $C concurrent clients × $per launches, bare and through pjw"
  pids=(); t0=$(now); for _ in $(seq "$C"); do loop_bare & pids+=("$!"); done; wait "${pids[@]}"; t1=$(now)
  pids=(); for _ in $(seq "$C"); do loop_pjw & pids+=("$!"); done; wait "${pids[@]}"; t2=$(now)
  echo "$r $(calc "printf \"%.4f %.4f\", $t1 - $t0, $t2 - $t1")" >> "$rawc"
done
stop_daemon
# Mean submission-to-start time inside the daemon over the measured launches, ms.
dmn=$(calc "printf \"%.2f\", ($n1 > $n0) ? ($lat1 - $lat0) / ($n1 - $n0) * 1000 : -1")

# "n mean sd ci95 median min max" of each figure; medians are quoted, the verdict is taken on
# the unfavourable 95% bound of the mean.
read -r n _ _ _ bare _ < <(awk '{print $2}' "$raw" | stats)
read -r _ _ _ _ jail _ < <(awk '{print $3}' "$raw" | stats)
read -r _ ratem _ rci rate rmin rmax < <(awk -v n="$N" '{print n / $3}' "$raw" | stats)
read -r _ brm _ bci brate bmin bmax < <(awk -v n="$N" '{print n / $2}' "$raw" | stats)
read -r _ addm _ aci add amin amax < <(awk -v n="$N" '{print ($3 - $2) / n * 1000}' "$raw" | stats)
read -r _ _ _ _ cli _ < <(awk -v n="$N" '{print ($4 - $2) / n * 1000}' "$raw" | stats)
ok=$(verdict_all "$(verdict_ge "$ratem" "$rci" 1000)" "$(verdict_le "$addm" "$aci" 1)")
row "$(calc "printf \"%.0f launches/s (median of %d rounds, range %.0f–%.0f; mean %.0f ± %.0f, 95%% CI); %.3f ms added per launch (median, range %.3f–%.3f; mean %.3f ± %.3f): %.2f s for %d vs %.2f s bare (medians), of which %.2f ms is the client's start and one round trip (a \`pjw run\` the daemon refuses) and %.2f ms the daemon's work from submission to start (mean of its histogram)\", $rate, $n, $rmin, $rmax, $ratem, $rci, $add, $amin, $amax, $addm, $aci, $jail, $N, $bare, $cli, $dmn")" \
  "HTCondor 55–95 jobs/s; Slurm ~500/s published" "≥ 1,000 launches/s; ≤ 1 ms added per launch" \
  "$ok" "launch: sequential \`pjw run -q -- /bin/true\`"
row "$(calc "printf \"%.0f launches/s (median of %d rounds, range %.0f–%.0f; mean %.0f ± %.0f)\", $brate, $n, $bmin, $bmax, $brm, $bci")" \
  "the floor: fork and exec from the same shell loop" "(baseline)" "–" "launch: bare fork/exec of /bin/true"
read -r cn crm _ cci crate cmin cmax < <(awk -v n="$((per * C))" '{print n / $3}' "$rawc" | stats)
read -r _ cbm _ _ cbrate _ < <(awk -v n="$((per * C))" '{print n / $2}' "$rawc" | stats)
# pjw's rate as a share of the bare loops' in the same round (bare time / pjw time).
read -r _ shm _ shci _ < <(awk '{print $2 / $3 * 100}' "$rawc" | stats)
row "$(calc "printf \"%.0f launches/s with %d clients at once (median of %d rounds of %d, range %.0f–%.0f; mean %.0f ± %.0f, 95%% CI) against %.0f/s for %d bare fork/exec loops on %d CPUs: %.0f%% ± %.0f of bare's rate, round by round\", $crate, $C, $cn, $((per * C)), $cmin, $cmax, $crm, $cci, $cbrate, $C, $(nproc), $shm, $shci")" \
  "" "≥ the sequential rate (the daemon serves clients at once), and ≥ 50% of the bare loops' rate (95% bounds)" \
  "$(verdict_all "$(verdict_ge "$crm" "$cci" "$ratem")" "$(verdict_ge "$shm" "$shci" 50)")" "launch: $C concurrent clients of \`pjw run -q -- /bin/true\`"

SRUN_N=${LAUNCH_SRUN_N:-$([ "$QUICK" = 1 ] && echo 10 || echo 50)}
if slurm_live; then
  : > "$BENCH_OUT/raw/launch-srun.txt"
  for r in $(seq "$REPS"); do
    step "$r" "$REPS" "round $r/$REPS: $SRUN_N sequential srun -n1 /bin/true"
    t0=$(now); for _ in $(seq "$SRUN_N"); do timeout 60 srun -n1 /bin/true; done; t1=$(now)
    calc "print $SRUN_N / ($t1 - $t0)" >> "$BENCH_OUT/raw/launch-srun.txt"
  done
  read -r sn srm _ sci srate smin smax < <(stats < "$BENCH_OUT/raw/launch-srun.txt")
  row "$(calc "printf \"%.1f launches/s (median of %d rounds of %d, range %.1f–%.1f; mean %.1f ± %.1f)\", $srate, $sn, $SRUN_N, $smin, $smax, $srm, $sci")" \
    "Slurm ~500/s published (job arrays, not sequential srun)" "(baseline)" "–" "launch: sequential \`srun -n1 /bin/true\` (live Slurm)"
else
  row "srun: not measured ($SLURM_WHY)" "" "(baseline)" "–" "launch: sequential \`srun -n1 /bin/true\`"
fi
if [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ] && command -v systemd-run >/dev/null; then
  step "$REPS" "$REPS" "$SRUN_N sequential systemd-run --scope /bin/true"
  t0=$(now); for _ in $(seq "$SRUN_N"); do systemd-run -q --scope /bin/true; done; t1=$(now)
  row "$(calc "printf \"%.1f launches/s (%d sequential, one round)\", $SRUN_N / ($t1 - $t0), $SRUN_N")" "" "(baseline)" "–" \
    "launch: sequential \`systemd-run --scope /bin/true\`"
else
  row "systemd-run: not measured (PID 1 is $(cat /proc/1/comm 2>/dev/null || echo unknown), not systemd)" "" "(baseline)" "–" \
    "launch: sequential \`systemd-run --scope /bin/true\`"
fi
if [ "$ok" != met ]; then
  per_bare=$(calc "printf \"%.2f\", $bare / $N * 1000")
  note "$(calc "printf \"%.0f launches/s, %.2f ms added per launch: %.2f ms are the pjw client's own start and one round trip (a loop of pjw run the daemon refuses, no job), %.2f ms the daemon's work from submission to the Started answer (its launch-latency histogram: a store record, the job's cgroups made in every hierarchy with their limits, the client moved into them, the record marked running), the rest the client's second exec (into the command) and the hand-overs between shell, client, daemon and command on %d CPUs\", $rate, $add, $cli, $dmn, $(nproc)") (load average $(cut -d' ' -f1 /proc/loadavg)). A bare fork and exec from the same shell loop takes $per_bare ms here, so 1,000 launches/s would leave pjw $(calc "printf \"%.2f\", 1 - $per_bare") ms for a client start, a round trip, the cgroup work and an exec: out of reach for a design in which the job is the client process that asked (which is what confines it from its first instruction). The client is already the lean launch front (docs/decisions.md (cj)); docs/launch-profile.md has the rest."
fi
