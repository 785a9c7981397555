/* The OpenBLAS side of the MATMUL comparison: Y = X W^T with X (T,K) and
 * W (N,K) in f32, exactly the shapes `diffrt conform --perf` times, so the
 * two can be put side by side as a ratio from one run (bench/run_opencl.sh).
 * Napkin math: 2*T*N*K FLOPs. Prints median over repeats after one warm-up. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "drt_util.h" /* drt_now_s; header-only, libdiffrt is not linked */

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1 || reps > 1000) reps = 5;
    const int shapes[][3] = {{1024, 1024, 1024}, {1, 1024, 4096}, {512, 1024, 4096}}; /* T, K, N */
    printf("%-13s %-8s %-58s %10s %10s\n", "op", "backend", "shape", "median ms", "GFLOP/s");
    for (int s = 0; s < 3; s++) {
        int T = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        float *x = malloc(sizeof(float) * (size_t)T * K), *w = malloc(sizeof(float) * (size_t)N * K),
              *y = malloc(sizeof(float) * (size_t)T * N);
        double *t = malloc(sizeof(double) * (size_t)reps);
        for (long i = 0; i < (long)T * K; i++) x[i] = (float)((i * 7919 % 2001) - 1000) / 1000.0f;
        for (long i = 0; i < (long)N * K; i++) w[i] = (float)((i * 104729 % 2001) - 1000) / 1000.0f;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, N, K, 1.0f, x, K, w, K, 0.0f, y, N);
        for (int r = 0; r < reps; r++) {
            double t0 = drt_now_s();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, N, K, 1.0f, x, K, w, K, 0.0f, y, N);
            t[r] = drt_now_s() - t0;
        }
        qsort(t, (size_t)reps, sizeof(double), cmp);
        double med = t[reps / 2];
        char desc[64];
        snprintf(desc, sizeof desc, "B=1 Bw=1 T=%d K=%d N=%d w=f32 scale=1", T, K, N);
        printf("%-13s %-8s %-58s %10.3f %10.2f\n", "MATMUL", "openblas", desc, med * 1e3, 2.0 * T * N * K / med * 1e-9);
        free(x), free(w), free(y), free(t);
    }
    return 0;
}
