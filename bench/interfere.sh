# shellcheck shell=bash
# Sourced by the real-software scenarios (sysbench.sh, openmp.sh) after lib.sh: a reference
# program timed alone and beside a neighbour under each thing a user would pick, rounds
# interleaved so that every round is a paired comparison against that round's alone time.
#
# The scenario sets:
#   REF=(program args...)  prints its own run time ("seconds=S", or as REF_TIME reads it)
#   REF_CPUS=N             the CPUs the reference asked for (CPUs 0..N-1 when pinned by hand)
#   NB=(program args...)   the neighbour, which asked for the other CPUs but starts more busy
#                          processes than that; empty for "no neighbour" (an overhead row)
#   ALONE=(program args...) optional: the alone run (default: REF as it is, on an idle machine)
#   VARIANTS="plain taskset slurm pjw"   which alternatives to run (slurm only where slurm_live)
# then calls interfere_run ROUNDS RAWFILE and interfere_rows LABEL ANCHOR GOAL_PCT.
# RAWFILE gets "variant seconds" lines; "alone" first in every round.

NB=()
ALONE=()
VARIANTS=${VARIANTS:-plain taskset slurm pjw}

# The reference's own timing from its output, seconds: a scenario sets REF_TIME to a filter
# (sed or awk program text on stdin); the default takes "seconds=S".
REF_TIME=${REF_TIME:-}
ref_secs() { if [ -n "$REF_TIME" ]; then eval "$REF_TIME"; else sed -n 's/.*seconds=\([0-9.]*\).*/\1/p'; fi; }

# CPU lists: the reference's (0..N-1) and the neighbour's (the rest of 0-1, or N..N if N = 2).
ref_cpulist() { [ "$REF_CPUS" = 1 ] && echo 0 || echo "0-$((REF_CPUS - 1))"; }
nb_cpulist() { echo "$REF_CPUS-$(( $(nproc) - 1 ))"; }

# nb_start VARIANT ROUND: the neighbour, as that variant confines it; sets NB_PID. In the
# reference's session (no setsid: a session of its own would be a scheduler autogroup and weigh
# as one process), so its busy processes compete as plain processes do.
NB_PID=""
nb_start() {
  NB_PID=""
  [ ${#NB[@]} -gt 0 ] && [ "$1" != alone ] || return 0
  local nbc=$(( $(nproc) - REF_CPUS ))
  case $1 in
    plain) spawn "${NB[@]}" ;;
    taskset) spawn taskset -c "$(nb_cpulist)" "${NB[@]}" ;;
    slurm) spawn srun -n1 -c "$nbc" --cpu-bind=cores -J "pjw-bench-nb-$2" "${NB[@]}"
      for _ in $(seq 100); do squeue -h -n "pjw-bench-nb-$2" -t R 2>/dev/null | grep -q . && break; sleep 0.1; done ;;
    pjw) spawn "$PJW" run -q --cpus "$nbc" --primary-only --job-id "nb-$2" -- "${NB[@]}"
      for _ in $(seq 100); do "$PJW" status --json | grep -q '"id": "nb-'"$2"'"' && break; sleep 0.02; done ;;
  esac
  NB_PID=${BGPIDS[-1]}
  sleep 0.3
}
# A process and every descendant (listed before any is killed, so none is re-parented first).
tree_pids() { local p; echo "$1"; for p in $(ps -o pid= --ppid "$1" 2>/dev/null); do tree_pids "$p"; done; }
nb_stop() {
  [ -n "$NB_PID" ] || return 0
  case $1 in
    slurm) scancel -n "pjw-bench-nb-$2" 2>/dev/null || true ;;
    pjw) "$PJW" kill "nb-$2" >/dev/null 2>&1 || true ;;
  esac
  # shellcheck disable=SC2046 # one PID a word
  kill -KILL $(tree_pids "$NB_PID") 2>/dev/null || true
  { wait "$NB_PID"; } 2>/dev/null || true
  NB_PID=""
}
# ref_run VARIANT: the reference under that variant; prints its seconds.
ref_run() {
  case $1 in
    alone) if [ ${#ALONE[@]} -gt 0 ]; then "${ALONE[@]}"; else "${REF[@]}"; fi ;;
    plain) "${REF[@]}" ;;
    taskset) taskset -c "$(ref_cpulist)" "${REF[@]}" ;;
    slurm) srun -n1 -c "$REF_CPUS" --cpu-bind=cores "${REF[@]}" ;;
    pjw) "$PJW" run -q --cpus "$REF_CPUS" --primary-only -- "${REF[@]}" ;;
  esac 2>>"$WORK/ref.err" | ref_secs
}

# interfere_run ROUNDS RAW: every round, alone then each variant.
interfere_run() {
  local rounds=$1 raw=$2 r v t
  : > "$raw"
  for r in $(seq "$rounds"); do
    for v in alone $VARIANTS; do
      [ "$v" != slurm ] || slurm_live || continue
      step "$r" "$rounds" "round $r/$rounds: $v"
      nb_start "$v" "$r"
      t=$(ref_run "$v")
      nb_stop "$v" "$r"
      [ -n "$t" ] || { echo "bench: $SCENARIO: the reference printed no time under $v ($(tail -2 "$WORK/ref.err" | tr '\n' ' '))" >&2; return 1; }
      echo "$v $t" >> "$raw"
    done
  done
}

# interfere_rows RAW LABEL ANCHOR GOAL_PCT: pjw's row (its mean slowdown over the round's alone
# time, the verdict on the upper 95% bound against GOAL_PCT, and against taskset round by round)
# and one (baseline) row per other variant. Sets INTERFERE_OK (met/short/within noise).
interfere_rows() {
  local raw=$1 label=$2 anchor=$3 goal=$4 slow="$WORK/slow-$RANDOM"
  awk '$1 == "alone" { a = $2; next } { print $1, ($2 / a - 1) * 100 }' "$raw" > "$slow"
  local n jm jsd jci am asd jtm jtsd dm dci
  read -r n jm jsd jci _ < <(awk '$1=="pjw"{print $2}' "$slow" | stats)
  read -r _ am asd _ < <(awk '$1=="alone"{print $2}' "$raw" | stats)
  read -r _ jtm jtsd _ < <(awk '$1=="pjw"{print $2}' "$raw" | stats)
  read -r _ dm _ dci _ < <(awk '$1 == "taskset" { t = $2 } $1 == "pjw" { print $2 - t }' "$slow" | stats)
  INTERFERE_OK=$(verdict_le "$jm" "$jci" "$goal")
  row "$(calc "printf \"%+.2f%% ± %.2f (95%% CI; upper bound %+.2f%%), sd %.2f, n=%d; against taskset, round by round: %+.2f ± %.2f points; times: alone %.3f s (sd %.3f), pjw %.3f s (sd %.3f)\", $jm, $jci, $jm + $jci, $jsd, $n, $dm, $dci, $am, $asd, $jtm, $jtsd")" \
    "$anchor" "≤ $goal% slowdown (95% bound)" "$INTERFERE_OK" "$label: pjw"
  local v bm bsd bci btm btsd what
  for v in $VARIANTS; do
    [ "$v" != pjw ] || continue
    if ! grep -q "^$v " "$raw"; then
      [ "$v" != slurm ] || row "Slurm: not measured ($SLURM_WHY)" "" "(baseline)" "–" "$label: Slurm"
      continue
    fi
    read -r _ bm bsd bci _ < <(awk -v k="$v" '$1 == k {print $2}' "$slow" | stats)
    read -r _ btm btsd _ < <(awk -v k="$v" '$1 == k {print $2}' "$raw" | stats)
    case $v in
      plain) what="plain Linux" ;;
      taskset) what="pinning by hand (taskset -c $(ref_cpulist)$([ ${#NB[@]} = 0 ] || echo ", neighbour -c $(nb_cpulist)"))" ;;
      slurm) what="Slurm, srun -n1 -c $REF_CPUS --cpu-bind=cores ($(scontrol show config 2>/dev/null | awk -F' *= *' '$1 == "TaskPlugin" {print $2}'))" ;;
    esac
    row "$(calc "printf \"%+.2f%% ± %.2f (95%% CI), sd %.2f, n=%d; %.3f s (sd %.3f)\", $bm, $bci, $bsd, $n, $btm, $btsd")" \
      "" "(baseline)" "–" "$label: $what"
  done
  cp "$slow" "$BENCH_OUT/raw/$(basename "$raw" .txt)-slowdown.txt"
}

# c_workload NAME: compile bench/workloads/c/NAME.c into $WORK/NAME (gcc -fopenmp, or mpicc for
# mpi_*); prints the path. The packages come from bench/setup.sh (make bench).
c_workload() {
  local src="$BENCH_ROOT/bench/workloads/c/$1.c" out="$WORK/$1"
  case $1 in
    mpi_*) mpicc -O2 -o "$out" "$src" ;;
    *) gcc -O2 -fopenmp -o "$out" "$src" ;;
  esac
  echo "$out"
}
