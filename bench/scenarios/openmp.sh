#!/usr/bin/env bash
# openmp: an OpenMP kernel built with gcc's libgomp (bench/workloads/c/omp_kernel.c: rounds of
# parallel regions over an integer hash, each ending at a barrier, as bulk-synchronous codes do),
# the team sized by the runtime itself, as a user runs it.
#   1 CPU: the job asked for one CPU, beside stress-ng asking for the other but starting two
#   workers. Alone is one thread on an idle machine; plain Linux lets libgomp see both CPUs (two
#   threads, sharing them with the neighbour's two); taskset -c 0 and pjw's one-CPU job make it
#   size itself to one; Slurm srun -c1 where live.
#   2 CPUs: the whole machine, no neighbour: what confinement costs a job that fits (alone is
#   the plain run; pjw a 2-CPU job; taskset -c 0-1).
# Rounds interleaved (bench/interfere.sh), verdicts on the upper 95% bound of pjw's slowdown.
SCENARIO=openmp
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
# shellcheck source=../interfere.sh
source "$BENCH_ROOT/bench/interfere.sh"

REPS=${OMP_REPS:-$([ "$QUICK" = 1 ] && echo 3 || echo 8)}
SECS=${OMP_SECS:-$([ "$QUICK" = 1 ] && echo 0.5 || echo 2)}
for c in gcc stress-ng; do
  command -v "$c" >/dev/null || { row "not measured: $c is not installed (bench/setup.sh installs it)" "" "" "short" "openmp"; exit 0; }
done
kernel=$(c_workload omp_kernel) || { row "not measured: omp_kernel.c did not build with gcc -fopenmp" "" "" "short" "openmp"; exit 0; }
start_daemon 'cpus = "0-1"' 'vcpus = 2'
# WORK per round for SECS seconds on one thread, 100 rounds: calibrated from a short run.
t=$(OMP_NUM_THREADS=1 "$kernel" 200000 20 | ref_secs)
work=$(calc "w = 200000 * 20 / $t * $SECS / 100; printf \"%d\", (w < 1000) ? 1000 : w")

# One CPU beside the neighbour.
REF=("$kernel" "$work" 100)
ALONE=(env OMP_NUM_THREADS=1 "$kernel" "$work" 100)
REF_CPUS=1
NB=(stress-ng --cpu 2 --timeout 600 --quiet)
interfere_run "$REPS" "$BENCH_OUT/raw/openmp-1cpu.txt"
interfere_rows "$BENCH_OUT/raw/openmp-1cpu.txt" "OpenMP kernel, a 1-CPU job beside stress-ng --cpu 2" \
  "the runtime sizes its team to the CPUs it sees" 1
ok1=$INTERFERE_OK
threads=$("$PJW" run -q --cpus 1 -- "$kernel" 1000 1 | sed -n 's/.*threads=\([0-9]*\) procs=\([0-9]*\).*/\1 threads, omp_get_num_procs() = \2/p')
plain_threads=$("$kernel" 1000 1 | sed -n 's/.*threads=\([0-9]*\) procs=\([0-9]*\).*/\1 threads, omp_get_num_procs() = \2/p')
note "OpenMP's own sizing here: under pjw's one-CPU job $threads; under plain Linux $plain_threads."

# Two CPUs, no neighbour: the cost of confinement.
REF=("$kernel" "$(( work / 2 ))" 100)
ALONE=()
REF_CPUS=2
NB=()
VARIANTS="taskset slurm pjw"
interfere_run "$REPS" "$BENCH_OUT/raw/openmp-2cpu.txt"
interfere_rows "$BENCH_OUT/raw/openmp-2cpu.txt" "OpenMP kernel, a 2-CPU job on the idle machine (against plain Linux)" \
  "confinement should cost nothing" 1
stop_daemon
[ "$ok1" = met ] && [ "$INTERFERE_OK" = met ] || note "an OpenMP row is not within 1% of its alone time on the 95% bound."
