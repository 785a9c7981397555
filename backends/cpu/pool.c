/* The CPU backend's thread pool: nth - 1 workers started once, plus the
 * calling thread as thread 0. cpu_pool_run publishes a job by bumping a
 * generation counter; workers spin on it for a short while (a decode step
 * runs a few hundred small ops back to back) and then sleep on a condition
 * variable. No allocation and no thread creation per job. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "cpu_fast.h"

/* spins before a worker sleeps: ~50-100 us on a current core */
#define SPIN_ITERS 20000

struct cpu_pool {
    int nth;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;     /* bumped once per job */
    atomic_int pending;  /* workers still running the current job */
    atomic_int sleepers; /* workers that may be waiting on cv */
    atomic_int stop;
    cpu_task_fn fn;
    void *ctx;
};

typedef struct {
    cpu_pool *p;
    int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void *worker(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    cpu_pool *p = wa.p;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && !atomic_load(&p->stop)) {
            if (++spins < SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            /* sleep; the publisher broadcasts when it sees sleepers > 0 */
            atomic_fetch_add(&p->sleepers, 1);
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            spins = 0;
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        p->fn(p->ctx, wa.ith, p->nth);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
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
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa || pthread_create(&p->threads[i], NULL, worker, wa ? (*wa = (worker_arg){p, i}, wa) : NULL) != 0) {
            free(wa);
            p->nth = i; /* the workers started so far are joined by free */
            cpu_pool_free(p);
            return NULL;
        }
    }
    return p;
}

int cpu_pool_size(const cpu_pool *p) { return p->nth; }

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
    atomic_store(&p->pending, p->nth - 1);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: ordered before the sleepers read */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ctx, 0, p->nth);
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) cpu_relax();
}
