#!/usr/bin/env bash
# What the benchmark suite needs beyond the build (make bench runs it): the real software its
# scenarios run side by side with pjw — Debian's sysbench and stress-ng, gcc's libgomp (OpenMP),
# Open MPI (mpicc, mpirun) and hwloc. Idempotent and quiet when everything is there.
set -euo pipefail
need=()
command -v sysbench >/dev/null || need+=(sysbench)
command -v stress-ng >/dev/null || need+=(stress-ng)
command -v mpicc >/dev/null || need+=(libopenmpi-dev)
command -v mpirun >/dev/null || need+=(openmpi-bin)
command -v hwloc-ps >/dev/null || need+=(hwloc)
echo 'int main(void){return 0;}' | gcc -fopenmp -x c -o /dev/null - 2>/dev/null || need+=(gcc libgomp1)
[ ${#need[@]} -eq 0 ] && exit 0
[ "$(id -u)" = 0 ] || { echo "bench/setup.sh: missing ${need[*]}; run as root or install them" >&2; exit 1; }
echo "bench/setup.sh: installing ${need[*]}"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 || {
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}
