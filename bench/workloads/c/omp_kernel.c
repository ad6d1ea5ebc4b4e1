/* An OpenMP kernel for the bench (bench/scenarios/openmp.sh): ROUNDS parallel regions, each
 * splitting WORK integer-hash iterations over the team with a static schedule and ending at the
 * region's barrier, as a bulk-synchronous HPC code does: a thread that loses its CPU delays the
 * whole team at every barrier. Prints "threads=T procs=P seconds=S checksum=C".
 * usage: omp_kernel WORK ROUNDS   (libgomp sizes the team itself unless OMP_NUM_THREADS says) */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: omp_kernel WORK ROUNDS\n");
        return 2;
    }
    long work = atol(argv[1]), rounds = atol(argv[2]);
    uint64_t sum = 0;
    int threads = 0;
    double t0 = now();
    for (long r = 0; r < rounds; r++) {
#pragma omp parallel reduction(+ : sum)
        {
#pragma omp single
            threads = omp_get_num_threads();
#pragma omp for schedule(static)
            for (long i = 0; i < work; i++) {
                uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ULL + (uint64_t)r;
                for (int k = 0; k < 16; k++) x ^= x >> 29, x *= 0xbf58476d1ce4e5b9ULL;
                sum += x & 1;
            }
        }
    }
    printf("threads=%d procs=%d seconds=%.6f checksum=%llu\n", threads, omp_get_num_procs(), now() - t0,
           (unsigned long long)sum);
    return 0;
}
