#!/usr/bin/env bash
# bind: thread balancing inside a job (issue 17). A 2-CPU job runs N busy threads
# (`pjw-wl par N ITERS`, each thread the same integer loop) and reports the wall time until the
# last thread finished, with `--bind none` (the kernel's scheduler places the threads within the
# job's set) and `--bind threads` (pjw pins busy threads round-robin, one per CPU). Two shapes:
# as many busy threads as CPUs (2), and more busy threads than CPUs (3). Rounds alternate
# none/threads so each round is a paired comparison; the figure is the bound run's time over the
# unbound run's of the same round, and the verdict is taken on the 95% bound. The balancing
# interval is 200 ms and the first pass only measures, so the pins land about 0.4 s into a run.
# What is measured is reported as it is, including no difference or a loss: with more busy
# threads than CPUs, round-robin pins put two threads on one CPU and one on the other, while the
# kernel time-shares all three over both.
SCENARIO=bind
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"

REPS=${BIND_REPS:-$([ "$QUICK" = 1 ] && echo 3 || echo 6)}
SECS=${BIND_SECS:-$([ "$QUICK" = 1 ] && echo 0.5 || echo 1.5)}

start_daemon 'cpus = "0-1"' 'vcpus = 2' '[job]' 'bind_interval_ms = 200'
iters=$("$WL" calibrate "$SECS")
raw=$BENCH_OUT/raw/bind.txt
: > "$raw"
total=$((REPS * 2))
i=0
for n in 2 3; do
  for r in $(seq "$REPS"); do
    i=$((i + 1))
    for mode in none threads; do
      step "$i" "$total" "$n busy threads on 2 cpus, round $r/$REPS: --bind $mode"
      t=$("$PJW" run -q --cpus 2 --primary-only --bind "$mode" -- "$WL" par "$n" "$iters")
      echo "$n $mode $r $t" >> "$raw"
    done
  done
done
stop_daemon

# Per round: bound time over unbound time, in percent.
for n in 2 3; do
  awk -v n="$n" '$1 == n && $2 == "none" { u[$3] = $4 } $1 == n && $2 == "threads" { b[$3] = $4 }
    END { for (r in u) if (r in b) print (b[r] / u[r] - 1) * 100 }' "$raw" > "$WORK/ratio-$n"
  read -r cnt m sd ci _ < <(stats < "$WORK/ratio-$n")
  read -r _ um usd _ < <(awk -v n="$n" '$1 == n && $2 == "none" {print $4}' "$raw" | stats)
  read -r _ bm bsd _ < <(awk -v n="$n" '$1 == n && $2 == "threads" {print $4}' "$raw" | stats)
  if [ "$n" = 2 ]; then
    anchor="the original pjw: busy threads locked one per CPU; unbound, the scheduler may migrate them"
  else
    anchor="round-robin pins: 2 threads on one CPU, 1 on the other; unbound, 3 threads share 2 CPUs (ideal 1.5× one thread)"
  fi
  goal="bound ≤ unbound + 2% (95% bound)"
  ok=$(verdict_le "$m" "$ci" 2)
  row "$(calc "printf \"%+.2f%% ± %.2f (95%% CI), sd %.2f, n=%d; unbound %.3f s (sd %.3f), bound %.3f s (sd %.3f); one thread alone ≈ %.2f s\", $m, $ci, $sd, $cnt, $um, $usd, $bm, $bsd, $SECS")" \
    "$anchor" "$goal" "$ok" "bind: $n busy threads on a 2-CPU job, --bind threads vs none"
done
read -r _ r3 _ r3ci _ < <(stats < "$WORK/ratio-3")
note "with 3 busy threads on 2 CPUs, --bind threads changed the wall time by $(calc "printf \"%+.1f%% ± %.1f\", $r3, $r3ci") (load average $(cut -d' ' -f1 /proc/loadavg) at the end). What to expect: round-robin pinning leaves one CPU with two of the threads, so the last one finishes when that CPU has run two loops (2× one loop), where the kernel time-shares all three over both CPUs (ideal 1.5×); binding is for threads that would otherwise migrate across caches or NUMA nodes, not for making an oversubscribed job finish sooner. Other processes on the same CPUs (this bench's daemon does not own the machine) blur both."
