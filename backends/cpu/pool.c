/* The CPU backend's thread pool: nth - 1 workers started once, plus the
 * calling thread.
 *
 * A job is nth slices fn(ctx, i, nth), i in [0, nth). Slices are not bound
 * to threads: every participant (the caller and each worker) claims the next
 * unclaimed slice from one atomic word until none is left. So when a worker
 * is descheduled (another process holds its core: ctest -j, a shared
 * machine) the others run its slice instead of waiting for it; kernels may
 * still use i to index per-slice scratch, since a slice runs exactly once.
 *
 * The word holds (generation << 32 | next slice). A worker claims with a
 * compare-and-swap that names the generation it saw, so a late worker can
 * never take a slice of a newer job with the old job's fn/ctx. Workers spin
 * briefly for the next job (a decode step runs a few hundred small ops back
 * to back) and then sleep on a condition variable; the caller, waiting for
 * slices others are running, spins briefly and then yields its core. No
 * allocation and no thread creation per job. */
#define _GNU_SOURCE /* sched_yield */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu_fast.h"

/* pauses before a worker sleeps (~50-100 us) and before the caller yields */
#define SPIN_ITERS 20000
#define WAIT_SPINS 2000

struct cpu_pool {
    int nth;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic uint64_t state; /* generation << 32 | next unclaimed slice */
    atomic_int done;        /* slices finished in the current job */
    atomic_int sleepers;    /* workers that may be waiting on cv */
    atomic_int stop;
    cpu_task_fn fn;
    void *ctx;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline uint32_t gen_of(uint64_t s) {
    return (uint32_t)(s >> 32);
}

/* Claims and runs slices of generation g until none is left. */
static void run_slices(cpu_pool *p, uint32_t g) {
    uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
    for (;;) {
        if (gen_of(s) != g) return;
        const uint32_t i = (uint32_t)s;
        if (i >= (uint32_t)p->nth) return;
        if (!atomic_compare_exchange_weak_explicit(&p->state, &s, s + 1, memory_order_acq_rel, memory_order_acquire))
            continue; /* s was reloaded */
        /* slice i of job g is ours; that job cannot end before it does, so
         * fn and ctx are still job g's */
        p->fn(p->ctx, (int)i, p->nth);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel);
        s = atomic_load_explicit(&p->state, memory_order_acquire);
    }
}

static void *worker(void *arg) {
    cpu_pool *p = arg;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        int spins = 0;
        while ((g = gen_of(atomic_load_explicit(&p->state, memory_order_acquire))) == seen && !atomic_load(&p->stop)) {
            if (++spins < SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            /* sleep; the publisher broadcasts when it sees sleepers > 0 */
            atomic_fetch_add(&p->sleepers, 1);
            pthread_mutex_lock(&p->mu);
            while (gen_of(atomic_load(&p->state)) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            spins = 0;
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        run_slices(p, g);
    }
}

cpu_pool *cpu_pool_new(int nth) {
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->nth = nth < 1 ? 1 : nth;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc((size_t)p->nth, sizeof *p->threads);
    if (!p->threads) {
        cpu_pool_free(p);
        return NULL;
    }
    for (int i = 1; i < p->nth; i++) {
        if (pthread_create(&p->threads[i], NULL, worker, p) != 0) {
            p->nth = i; /* the workers started so far are joined by free */
            cpu_pool_free(p);
            return NULL;
        }
    }
    return p;
}

int cpu_pool_size(const cpu_pool *p) {
    return p->nth;
}

void cpu_pool_free(cpu_pool *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; p->threads && i < p->nth; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

void cpu_pool_run(cpu_pool *p, cpu_task_fn fn, void *ctx) {
    if (p->nth == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    const uint32_t g = gen_of(atomic_load(&p->state)) + 1;
    atomic_store(&p->state, (uint64_t)g << 32); /* seq_cst: before the sleepers read */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    run_slices(p, g);
    int spins = 0;
    while (atomic_load_explicit(&p->done, memory_order_acquire) < p->nth) {
        if (++spins < WAIT_SPINS)
            cpu_relax();
        else
            sched_yield();
    }
}
