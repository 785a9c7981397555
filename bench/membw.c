/* Read bandwidth of this machine, for the decode roofline (bench/run_cpu.sh):
 * N threads each sum their share of a buffer much larger than the last-level
 * cache. Napkin math: bytes read / seconds.
 * Usage: bench_membw [THREADS (default 2)] [MiB (default 1024)] [REPEATS (default 7)]
 * Prints: membw threads=N MiB=M read GB/s: min X median Y max Z */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#include "drt_util.h" /* drt_now_s; header-only, libdiffrt is not linked */

typedef struct {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
    pthread_barrier_t *bar;
} job;

static void *reader(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->bar);
    /* four independent sums so the loads are not serialised by one add chain */
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= j->n; i += 4) {
        s0 += j->p[i];
        s1 += j->p[i + 1];
        s2 += j->p[i + 2];
        s3 += j->p[i + 3];
    }
    for (; i < j->n; i++) s0 += j->p[i];
    j->sum = s0 + s1 + s2 + s3;
    pthread_barrier_wait(j->bar);
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int nth = argc > 1 ? atoi(argv[1]) : 2, mib = argc > 2 ? atoi(argv[2]) : 1024, reps = argc > 3 ? atoi(argv[3]) : 7;
    if (nth < 1 || nth > 256 || mib < 64 || reps < 1 || reps > 100) {
        fprintf(stderr, "usage: bench_membw [THREADS 1..256] [MiB >= 64] [REPEATS 1..100]\n");
        return 2;
    }
    size_t n = (size_t)mib << 17; /* 8-byte words */
    /* in 2 MiB-aligned memory that asks for transparent huge pages, as
     * diffrt's checkpoint does (mapped from large page-cache folios, or read
     * with DIFFRT_NO_MMAP=1): with 4 KiB pages the reads take a TLB miss per
     * page, and the roofline would divide by less than decode can read */
    uint64_t *buf = aligned_alloc((size_t)2 << 20, n * sizeof *buf);
    if (!buf) {
        fprintf(stderr, "bench_membw: cannot allocate %d MiB\n", mib);
        return 1;
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(buf, n * sizeof *buf, MADV_HUGEPAGE); /* a hint: without THP, plain pages */
#endif
    for (size_t i = 0; i < n; i++) buf[i] = i; /* touch every page */
    double gbs[100];
    uint64_t check = 0;
    for (int r = 0; r < reps; r++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)nth + 1);
        pthread_t th[256];
        job jobs[256];
        for (int t = 0; t < nth; t++) {
            size_t lo = n * (size_t)t / (size_t)nth, hi = n * (size_t)(t + 1) / (size_t)nth;
            jobs[t] = (job){buf + lo, hi - lo, 0, &bar};
            pthread_create(&th[t], NULL, reader, &jobs[t]);
        }
        pthread_barrier_wait(&bar);
        double t0 = drt_now_s();
        pthread_barrier_wait(&bar);
        double dt = drt_now_s() - t0;
        for (int t = 0; t < nth; t++) {
            pthread_join(th[t], NULL);
            check += jobs[t].sum;
        }
        pthread_barrier_destroy(&bar);
        gbs[r] = (double)n * sizeof *buf / dt * 1e-9;
    }
    qsort(gbs, (size_t)reps, sizeof gbs[0], cmp);
    printf("membw threads=%d MiB=%d read GB/s: min %.2f median %.2f max %.2f (checksum %llu)\n", nth, mib, gbs[0],
           gbs[reps / 2], gbs[reps - 1], (unsigned long long)(check & 0xff));
    free(buf);
    return 0;
}
