#!/usr/bin/env bash
# central: the load of a big cluster on one PostgreSQL (issue 30). crates/central/examples/
# central_load.rs simulates CENTRAL_NODES nodes (2000), each with about CENTRAL_JOBS running
# jobs (16: between 8 and 24 per node) sampled every 10 s (the default [profile] interval), jobs
# lasting CENTRAL_JOB_MEAN seconds on average (7200), shipping through pjw's own shipping pass
# (a connection per pass, closed after it; batches as multi-row upserts; TLS verify-full and a
# SCRAM password) into a private PostgreSQL 15 on this machine with fsync on and the stock
# max_connections of 100. Two runs of CENTRAL_SECS each (300; quick: 60): the default config
# (a job's whole series goes when it ends) and ship_samples = true (every node every 60 s).
# Before them, CENTRAL_HISTORY_DAYS days of finished jobs at the cluster's rate (7; quick: 1)
# are filed so that the cluster queries of `pjw report --central` are timed on a table of that
# size; after them, old partitions are filled and the retention drops them.
#
# The simulated nodes share this machine's CPUs with PostgreSQL: the rows/s are what one
# 2-CPU machine holds with the load generator beside it, a floor for a real server.
SCENARIO=central
BENCH_NEEDS_PJW=0
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"

NODES=${CENTRAL_NODES:-2000}
JOBS=${CENTRAL_JOBS:-16}
JOB_MEAN=${CENTRAL_JOB_MEAN:-7200}
SECS=${CENTRAL_SECS:-$([ "$QUICK" = 1 ] && echo 60 || echo 300)}
HISTORY=${CENTRAL_HISTORY_DAYS:-$([ "$QUICK" = 1 ] && echo 1 || echo 7)}
LOAD=$BENCH_ROOT/target/release/examples/central_load

if [ "${BENCH_NO_BUILD:-0}" != 1 ]; then
  step 1 4 "building the load generator"
  (cd "$BENCH_ROOT" && cargo build --release -q -p pjw-central --example central_load)
fi
[ -x "$LOAD" ] || { echo "bench: $LOAD is missing (cargo build --release -p pjw-central --example central_load)" >&2; exit 1; }

# The generator runs its own PostgreSQL: on an interrupt it is told to stop (SIGTERM), which
# stops that server, before the common cleanup.
LOAD_PID=""
stop_load() {
  [ -n "$LOAD_PID" ] || return 0
  kill -TERM "$LOAD_PID" 2>/dev/null || true
  for _ in $(seq 120); do kill -0 "$LOAD_PID" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$LOAD_PID" 2>/dev/null || true
  LOAD_PID=""
}
trap 'rc=$?; stop_load; (exit $rc); cleanup' EXIT

run_load() { # run_load MODE HISTORY_DAYS STEP: raw output in $BENCH_OUT/raw/central-MODE.txt
  local mode=$1 hist=$2
  "$LOAD" --nodes "$NODES" --jobs "$JOBS" --job-mean "$JOB_MEAN" --interval 10 --duration "$SECS" \
    --mode "$mode" --history-days "$hist" > "$BENCH_OUT/raw/central-$mode.txt" 2> "$WORK/central-$mode.err" &
  LOAD_PID=$!
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    step "$3" 4 "$mode: $(tail -1 "$WORK/central-$mode.err" 2>/dev/null | cut -c1-110)"
    sleep 5
  done
  wait "$pid" || { LOAD_PID=""; cat "$WORK/central-$mode.err" >&2; return 1; }
  LOAD_PID=""
  cp "$WORK/central-$mode.err" "$BENCH_OUT/raw/central-$mode.log"
}
get() { awk -F= -v k="$2" '$1 == k { sub(/^[^=]*=/, ""); print; exit }' "$BENCH_OUT/raw/central-$1.txt"; }

run_load finished "$HISTORY" 2
run_load live 0 3
step 4 4 "summing up"

for mode in finished live; do
  offered=$(get "$mode" offered_rows_per_s)
  rate=$(get "$mode" rows_per_s_second_half)
  b1=$(get "$mode" backlog_first_third); b3=$(get "$mode" backlog_last_third); bmax=$(get "$mode" backlog_max)
  lag=$(get "$mode" pass_lag_p99_ms)
  # Sustained: PostgreSQL took rows at the offered rate (within 10 %: the second half of a
  # finite run sees job ends at random) and passes did not fall further behind.
  ok=$(calc "print ($rate >= 0.9 * $offered && $b3 <= $b1 + 1 && $lag < 10000) ? \"met\" : \"short\"")
  label="central ($mode: $([ "$mode" = live ] && echo 'ship_samples = true' || echo 'default config'))"
  row "$rate rows/s into PostgreSQL over the run's second half (offered $offered: $NODES nodes × ~$JOBS jobs / 10 s), $(get "$mode" jobs_shipped) jobs in $(get "$mode" passes) passes over $(get "$mode" duration_s) s; backlog (passes overdue > 1 s) mean $b1 in the first third, $b3 in the last, max $bmax; pass start lag p99 $lag ms; errors $(get "$mode" errors)" \
    "one node's shipper, decisions (y)" "the offered rate sustained, backlog not growing" "$ok" "$label: rows/s"
  cmax=$(get "$mode" connections_max); mc=$(get "$mode" max_connections)
  row "peak $cmax connections (p99 $(get "$mode" connections_p99), mean $(get "$mode" connections_mean)) of max_connections $mc; refused at the limit: $(get "$mode" connection_limit_refusals); PostgreSQL's CPU $(get "$mode" postgres_cpu_share) of one CPU; WAL $(get "$mode" wal_bytes_per_s) B/s" \
    "a connection held per node: $NODES" "well under max_connections, none refused" \
    "$(calc "print ($cmax < $mc / 2 && $(get "$mode" connection_limit_refusals) == 0) ? \"met\" : \"short\"")" "$label: connections"
  if [ "$mode" = finished ]; then
    p99=$(get "$mode" ship_latency_p99_ms)
    row "job end → committed in PostgreSQL: p50 $(get "$mode" ship_latency_p50_ms) ms, p99 $p99 ms, max $(get "$mode" ship_latency_max_ms) ms ($(get "$mode" ship_latency_jobs) jobs); one pass (connect, TLS, SCRAM, batch, close) p50 $(get "$mode" pass_ms_p50) ms, p99 $(get "$mode" pass_ms_p99) ms" \
      "–" "p99 ≤ 5 s" "$(calc "print ($p99 <= 5000) ? \"met\" : \"short\"")" "$label: ship latency"
  else
    row "one pass (connect, TLS, SCRAM, high-water query, new samples of ~$JOBS jobs, close) p50 $(get "$mode" pass_ms_p50) ms, p99 $(get "$mode" pass_ms_p99) ms, max $(get "$mode" pass_ms_max) ms; a sample waits at most one retry period (60 s) plus that" \
      "–" "p99 ≤ 5 s" "$(calc "print ($(get "$mode" pass_ms_p99) <= 5000) ? \"met\" : \"short\"")" "$label: ship latency"
  fi
done

# Size: bytes per row measured after the run; a day at the offered rate; the retention's worth.
f=finished
bps=$(get $f pjw_samples_bytes_per_row_before_retention); bpj=$(get $f pjw_jobs_bytes_per_row_before_retention)
offered=$(get $f offered_rows_per_s); jpd=$(get $f jobs_per_day)
day_gb=$(calc "printf \"%.1f\", $offered * 86400 * $bps / 1e9")
row "samples $bps B/row, jobs $bpj B/row (heap + indexes) → $day_gb GB of samples a day at $offered rows/s; steady state with the default retention (30 days of samples, 400 of jobs): $(calc "printf \"%.0f\", $day_gb * 30") GB + $(calc "printf \"%.0f\", $jpd * 400 * $bpj / 1e9") GB; the retention dropped $(get $f retention_dropped_partitions) partitions older than it ($(get $f retention_dropped)), $(get $f retention_old_rows_left) of their rows left; after it: samples $(get $f pjw_samples_bytes_after_retention) B in $(get $f pjw_samples_partitions_after_retention) partitions, jobs $(get $f pjw_jobs_bytes_after_retention) B in $(get $f pjw_jobs_partitions_after_retention)" \
  "plain tables that grow without bound" "old partitions dropped whole" \
  "$(calc "print ($(get $f retention_old_rows_left) == 0 && $(get $f retention_dropped_partitions) >= 4) ? \"met\" : \"short\"")" "central: table size after retention"

worst=$(get $f query_cluster_worst_ms)
qs=""
for q in user node range_1h newest top_cpu_week top_mem_day top_wait_day; do
  qs="$qs$q $(get $f "query_${q}_ms_median") ms, "
done
row "worst of the 7 cluster queries (a user, a node, an hour's range, the newest, top CPU over a week, top memory and wait over a day; 5 runs each, the first cold): $worst ms; medians: ${qs%, }; on $(get $f pjw_jobs_rows_before_retention) jobs ($HISTORY days at $jpd jobs/day plus the run's). A user's own top CPU over a week: median $(get $f query_user_top_cpu_week_ms_median) ms, max $(get $f query_user_top_cpu_week_ms_max) ms" \
  "–" "well under a second (≤ 500 ms)" "$(calc "print ($worst <= 500) ? \"met\" : \"short\"")" "central: report --central queries"
