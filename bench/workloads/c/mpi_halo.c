/* A 1-D halo exchange for the bench (bench/scenarios/mpi.sh), the shape of the seed's MPI jobs:
 * each rank owns N cells, and every step it computes a three-point stencil over them (with a few
 * multiply-adds per cell), swaps its edge cells with both neighbours on a ring (MPI_Sendrecv) and,
 * every 10 steps, takes a global residual (MPI_Allreduce). A rank that loses its CPU holds up its
 * neighbours at the next exchange, and everyone at the next reduction. Rank 0 prints
 * "ranks=R seconds=S residual=X". usage: mpi_halo N STEPS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 3) {
        if (rank == 0) fprintf(stderr, "usage: mpi_halo N STEPS\n");
        MPI_Finalize();
        return 2;
    }
    long n = atol(argv[1]), steps = atol(argv[2]);
    double *a = calloc(n + 2, sizeof *a), *b = calloc(n + 2, sizeof *b);
    for (long i = 1; i <= n; i++) a[i] = (double)((rank * n + i) % 97);
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    double residual = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long s = 0; s < steps; s++) {
        MPI_Sendrecv(&a[1], 1, MPI_DOUBLE, left, 0, &a[n + 1], 1, MPI_DOUBLE, right, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        MPI_Sendrecv(&a[n], 1, MPI_DOUBLE, right, 1, &a[0], 1, MPI_DOUBLE, left, 1, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        double local = 0;
        for (long i = 1; i <= n; i++) {
            double v = 0.25 * a[i - 1] + 0.5 * a[i] + 0.25 * a[i + 1];
            for (int k = 0; k < 8; k++) v = v * 0.999999 + 1e-9;
            local += (v - a[i]) * (v - a[i]);
            b[i] = v;
        }
        double *t = a; a = b; b = t;
        if (s % 10 == 9) MPI_Allreduce(&local, &residual, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    double secs = MPI_Wtime() - t0, worst;
    MPI_Reduce(&secs, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("ranks=%d seconds=%.6f residual=%.6g\n", size, worst, residual);
    free(a); free(b);
    MPI_Finalize();
    return 0;
}
