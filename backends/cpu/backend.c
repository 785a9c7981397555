/* The fast CPU backend ("cpu"): what users type; the plain reference is
 * "ref" (backends/ref), the oracle conform checks this one against.
 *
 * - One persistent thread pool per backend instance (pool.c); the thread
 *   count is be->threads, else DIFFRT_THREADS, else the physical cores this
 *   process may run on.
 * - Kernels compiled per ISA (cpu_fast.h), the best one the CPU supports
 *   chosen at run time; DIFFRT_CPU_ISA=avx512|avx2|neon|generic forces one
 *   (an ISA the CPU lacks is an error, never a silent downgrade).
 * - DIFFRT_CPU_PRECISION=bf16 runs prefill GEMMs on AVX512-BF16 dot
 *   products (declared reduced precision); the default f32 mode meets 1e-8.
 * - Weights are used in place: buf_wrap makes a tensor's buffer point at the
 *   caller's memory (the model's mmapped checkpoint), nothing is copied;
 *   except that q8_0 / q4_0 weights get a repacked copy for the int8-dot
 *   decode GEMV (prepare_weight; DIFFRT_CPU_REPACK=0: none).
 * - Scratch memory grows to the largest shape seen and is then reused: a
 *   forward pass of a built graph allocates nothing once warmed up.
 * This file is compiled once, for the baseline ISA. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu_fast.h"
#include "drt_error.h"
#include "drt_graph.h"
#include "drt_settings.h"
#include "drt_util.h"
#include "ref_ops.h"

#define MAX_SPLIT 64 /* attention key splits (attention.c combine) */
#define MAX_ROPE_D 1024

typedef struct {
    cpu_pool *pool;
    const cpu_kernels *k;
    int nth;
    int bf16;        /* DIFFRT_CPU_PRECISION=bf16: prefill GEMMs on bf16 dot products */
    int x8;          /* DIFFRT_CPU_PRECISION=int8: the int8-dot GEMVs take x in one int8 level */
    int qdot;        /* q8_0 / q4_0 GEMVs on int8 dot products (pick_qdot) */
    int repack;      /* and their T == 1 GEMV on repacked weights (pick_qdot) */
    float **scratch; /* per thread */
    int64_t scratch_floats;
    float *shared; /* ensure_shared() */
    int64_t shared_floats;
    int32_t *attn_work; /* attention's flash groups and decode rows (attn_plan) */
    int64_t attn_work_cap;
} cpu_ctx;

/* ---- choosing threads and ISA ---------------------------------------------- */

/* requested, else DIFFRT_THREADS, else the physical cores this process may
 * run on (drt_util.h) */
static drt_status pick_threads(const drt_settings *settings, int requested, int *out) {
    if (requested > 0) {
        if (requested > DRT_MAX_THREADS)
            return drt_set_error(DRT_ERR_INVALID_ARG, "cpu: %d threads requested, at most %d", requested,
                                 DRT_MAX_THREADS);
        *out = requested;
        return DRT_OK;
    }
    long long n;
    drt_status s = drt_setting_int(settings, "cpu.threads", &n);
    if (s != DRT_OK) return s;
    *out = n > 0 ? (int)n : drt_physical_cores();
    return DRT_OK;
}

typedef struct {
    const cpu_kernels *k;
    int (*supported)(void);
    const char *needs;
} isa_entry;

#if defined(__x86_64__)
static int has_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
}
static int has_avx2(void) {
    __builtin_cpu_init();
    /* F16C has no __builtin_cpu_supports name in every compiler: every AVX2
     * CPU made has it (Haswell, Zen), so AVX2 + FMA stands for it */
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif
static int always(void) {
    return 1;
}

/* best first */
static const isa_entry ISAS[] = {
#if defined(__x86_64__)
    {&cpu_kernels_avx512, has_avx512, "avx512f, avx512bw, avx512vl, fma"},
    {&cpu_kernels_avx2, has_avx2, "avx2, fma, f16c"},
#endif
#if defined(__aarch64__)
    {&cpu_kernels_neon, always, "neon"},
#endif
    {&cpu_kernels_generic, always, "nothing"},
};
#define N_ISAS ((int)(sizeof ISAS / sizeof ISAS[0]))

static drt_status pick_isa(const drt_settings *settings, const cpu_kernels **out) {
    const char *want;
    drt_status s = drt_setting_str(settings, "cpu.isa", &want);
    if (s != DRT_OK) return s;
    if (*want) {
        for (int i = 0; i < N_ISAS; i++) {
            if (strcmp(ISAS[i].k->isa, want) != 0) continue;
            if (!ISAS[i].supported())
                return drt_set_error(DRT_ERR_UNAVAILABLE, "cpu.isa=%s (DIFFRT_CPU_ISA): this CPU lacks %s", want,
                                     ISAS[i].needs);
            *out = ISAS[i].k;
            return DRT_OK;
        }
        char known[128] = "";
        for (int i = 0; i < N_ISAS; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", ISAS[i].k->isa);
        return drt_set_error(DRT_ERR_INVALID_ARG, "cpu.isa=%s (DIFFRT_CPU_ISA): not built for this machine (known: %s)",
                             want, known);
    }
    for (int i = 0; i < N_ISAS; i++)
        if (ISAS[i].supported()) {
            *out = ISAS[i].k;
            return DRT_OK;
        }
    *out = &cpu_kernels_generic;
    return DRT_OK;
}

/* DIFFRT_CPU_PRECISION: "f32" (default; every op within 1e-8 of the
 * reference), "bf16" (prefill MATMULs round x and w to bf16 and use
 * AVX512-BF16 dot products; needs the avx512 kernels on a CPU with
 * AVX512-BF16) or "int8" (the q8_0 / q4_0 int8-dot GEMVs and row chunks quantize
 * x to one int8 level per block of 32, as llama.cpp's q8_0 activations,
 * instead of two: half the dot products; needs the int8-dot GEMV, AVX512-VNNI
 * and VBMI). bf16 and int8 are declared reduced-precision modes,
 * docs/design.md section 6. */
static drt_status pick_precision(const drt_settings *settings, const cpu_kernels *k, int *bf16, int *x8) {
    const char *p;
    *bf16 = *x8 = 0;
    drt_status s = drt_setting_str(settings, "cpu.precision", &p); /* f32, bf16 or int8, checked */
    if (s != DRT_OK || strcmp(p, "f32") == 0) return s;
    const int want_x8 = strcmp(p, "int8") == 0;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (!want_x8 && k == &cpu_kernels_avx512 && __builtin_cpu_supports("avx512bf16")) {
        *bf16 = 1;
        return DRT_OK;
    }
    if (want_x8 && k == &cpu_kernels_avx512 && __builtin_cpu_supports("avx512vnni") &&
        __builtin_cpu_supports("avx512vbmi")) {
        *x8 = 1;
        return DRT_OK;
    }
#endif
    if (want_x8)
        return drt_set_error(DRT_ERR_UNAVAILABLE,
                             "cpu.precision=int8 (DIFFRT_CPU_PRECISION) needs the avx512 kernels on a CPU with "
                             "AVX512-VNNI and AVX512-VBMI (%s kernels in use)",
                             k->isa);
    return drt_set_error(DRT_ERR_UNAVAILABLE,
                         "cpu.precision=bf16 (DIFFRT_CPU_PRECISION) needs the avx512 kernels on a CPU with AVX512-BF16 "
                         "(%s kernels in use%s)",
                         k->isa, k->vlen == 16 ? ", no avx512bf16" : "");
}

/* The q8_0 / q4_0 GEMV on int8 dot products (matmul.c gemv_qdot): with the
 * avx512 kernels on a CPU with AVX512-VNNI and AVX512-VBMI, unless
 * DIFFRT_CPU_QDOT=0 (the block kernel every ISA has; conform covers both).
 * It meets the f32 bound: this is a faster kernel, not a precision mode. */
static drt_status pick_qdot(const drt_settings *settings, const cpu_kernels *k, int *qdot, int *repack) {
    int want, pack;
    drt_status s = drt_setting_bool(settings, "cpu.qdot", &want);
    if (s == DRT_OK) s = drt_setting_bool(settings, "cpu.repack", &pack);
    *qdot = *repack = 0;
    if (s != DRT_OK || !want) return s;
#if defined(__x86_64__)
    __builtin_cpu_init();
    *qdot = k == &cpu_kernels_avx512 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi");
#else
    (void)k;
#endif
    *repack = *qdot && pack && k->mm_pack;
    return DRT_OK;
}

/* ---- repacked weights ------------------------------------------------------
 * The T == 1 int8-dot GEMV reads q8_0 / q4_0 weights from a repacked copy
 * (matmul.c qt_rows). A buffer's handle is a cpu_buf: the memory it owns
 * (NULL when it wraps the caller's) and the copies of the weights in it
 * (cpu_pack). A copy comes one of two ways:
 *  - a session loading a weight (prepare_weight): the model's memory is
 *    read-only and shared by every session made from the model, so the copy
 *    is shared too. It is one process-wide entry (cpu_shared), keyed by the
 *    weight's address, size, dtype and K and counted by the buffers that
 *    hold it: a second session of the same model reuses it, and it goes
 *    when the last of those buffers does;
 *  - else the weight's first T == 1 MATMUL (weights a caller uploaded, as
 *    conform and the graph API do): the buffer's own allocation.
 * An upload into a buffer drops its copies, and marks a shared one stale so
 * no other buffer uses it again (the bytes under it changed).
 * Shared copies are carved from chunks of 2 MiB-aligned memory that ask for
 * transparent huge pages, as the checkpoint's mapping does: the decode GEMV
 * streams them, and with 4 KiB pages each page costs a TLB miss (134M q4_0
 * decode, 6 interleaved rounds: median 391 tok/s with huge pages, 369
 * without). A chunk is freed when the last copy in it is. */
typedef struct cpu_chunk {
    struct cpu_chunk *next;
    char *base;
    size_t size, used;
    int live; /* copies carved from it and not yet freed */
} cpu_chunk;

typedef struct cpu_shared {
    struct cpu_shared *next;
    const void *src;
    size_t bytes;
    drt_dtype wt;
    int K;
    int refs;
    atomic_int stale;
    cpu_chunk *chunk;
    void *data;
} cpu_shared;

typedef struct cpu_pack {
    struct cpu_pack *next;
    size_t offs, bytes;
    drt_dtype wt;
    int K;
    cpu_shared *shared; /* NULL: data is this buffer's own allocation */
    void *data;
} cpu_pack;

typedef struct {
    void *own;
    cpu_pack *packs;
} cpu_buf;

#define CHUNK_ALIGN ((size_t)2 << 20)
#define CHUNK_MIN ((size_t)32 << 20)

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static cpu_chunk *shared_chunks; /* the newest first: the one carved from */
static cpu_shared *shared_packs;

/* bytes from the newest chunk, or a new one; *chunk: where. Under shared_mu. */
static void *chunk_alloc(size_t bytes, cpu_chunk **chunk) {
    bytes = (bytes + 63) & ~(size_t)63;
    cpu_chunk *h = shared_chunks;
    if (!h || h->size - h->used < bytes) {
        size_t size = (bytes + CHUNK_ALIGN - 1) & ~(CHUNK_ALIGN - 1);
        if (size < CHUNK_MIN) size = CHUNK_MIN;
        h = calloc(1, sizeof *h);
        if (!h || posix_memalign((void **)&h->base, CHUNK_ALIGN, size) != 0) {
            free(h);
            return NULL;
        }
#ifdef MADV_HUGEPAGE
        (void)madvise(h->base, size, MADV_HUGEPAGE); /* a hint: without THP, plain pages */
#endif
        h->size = size;
        h->next = shared_chunks;
        shared_chunks = h;
    }
    void *p = h->base + h->used;
    h->used += bytes;
    h->live++;
    *chunk = h;
    return p;
}

/* one buffer's reference to e goes; the last frees e and maybe its chunk */
static void shared_release(cpu_shared *e) {
    pthread_mutex_lock(&shared_mu);
    if (--e->refs == 0) {
        for (cpu_shared **q = &shared_packs; *q; q = &(*q)->next)
            if (*q == e) {
                *q = e->next;
                break;
            }
        cpu_chunk *h = e->chunk;
        if (--h->live == 0) {
            for (cpu_chunk **q = &shared_chunks; *q; q = &(*q)->next)
                if (*q == h) {
                    *q = h->next;
                    break;
                }
            free(h->base);
            free(h);
        }
        free(e);
    }
    pthread_mutex_unlock(&shared_mu);
}

/* the buffer's copies go; `written`: its bytes changed, so shared copies
 * made from them are stale for every other buffer too */
static void drop_packs(cpu_buf *cb, int written) {
    while (cb && cb->packs) {
        cpu_pack *p = cb->packs;
        cb->packs = p->next;
        if (p->shared) {
            if (written) atomic_store(&p->shared->stale, 1);
            shared_release(p->shared);
        } else {
            free(p->data);
        }
        free(p);
    }
}

/* weight w's bytes at src (K columns) repacked into dst by this backend's threads */
static void repack(cpu_ctx *c, void *dst, const drt_tensor *w, const void *src, size_t bytes, int K) {
    cpu_pack_args a = {dst, src, w->type, (int64_t)(bytes / drt_row_bytes(w->type, K)), K};
    cpu_pool_run(c->pool, c->k->mm_pack, &a);
}

/* The shared copy of weight w (src, bytes, K), found or made; NULL when out
 * of memory. */
static cpu_shared *shared_get(cpu_ctx *c, const drt_tensor *w, const void *src, size_t bytes, int K) {
    pthread_mutex_lock(&shared_mu);
    cpu_shared *e = shared_packs;
    while (e && (e->src != src || e->bytes != bytes || e->wt != w->type || e->K != K || atomic_load(&e->stale)))
        e = e->next;
    if (e) {
        e->refs++;
    } else if ((e = calloc(1, sizeof *e)) != NULL) {
        e->data = chunk_alloc(bytes ? bytes : 64, &e->chunk);
        if (!e->data) {
            free(e);
            e = NULL;
        } else {
            e->src = src;
            e->bytes = bytes;
            e->wt = w->type;
            e->K = K;
            e->refs = 1;
            atomic_init(&e->stale, 0);
            /* repacked under the lock: a second session of the same model
             * waits for this copy instead of making its own */
            repack(c, e->data, w, src, bytes, K);
            e->next = shared_packs;
            shared_packs = e;
        }
    }
    pthread_mutex_unlock(&shared_mu);
    return e;
}

/* *out: weight w (N rows of K, q8_0 / q4_0) in the repacked layout; made
 * now if it is not there: shared when `shared` (prepare_weight), else the
 * buffer's own */
static drt_status packed_weight(cpu_ctx *c, const drt_tensor *w, int K, int shared, const void **out) {
    cpu_buf *cb = w->buf ? w->buf->handle : NULL;
    const size_t bytes = drt_nbytes(w);
    *out = NULL;
    if (!cb) return drt_set_error(DRT_ERR_BACKEND, "cpu: weight %s has no buffer of this backend", w->name);
    for (cpu_pack **q = &cb->packs; *q; q = &(*q)->next) {
        cpu_pack *p = *q;
        if (p->offs != w->offs || p->bytes != bytes || p->wt != w->type || p->K != K) continue;
        if (p->shared && atomic_load(&p->shared->stale)) { /* its bytes were written through another buffer */
            *q = p->next;
            shared_release(p->shared);
            free(p);
            break;
        }
        *out = p->data;
        return DRT_OK;
    }
    cpu_pack *p = calloc(1, sizeof *p);
    const void *src = drt_host_ptr(w);
    if (p && shared) {
        p->shared = shared_get(c, w, src, bytes, K);
        p->data = p->shared ? p->shared->data : NULL;
    } else if (p && posix_memalign(&p->data, 64, bytes ? bytes : 64) != 0) {
        p->data = NULL;
    } else if (p) {
        repack(c, p->data, w, src, bytes, K);
    }
    if (!p || !p->data) {
        free(p);
        return drt_set_error(DRT_ERR_OOM, "cpu: cannot allocate %zu bytes to repack weight %s", bytes, w->name);
    }
    p->offs = w->offs;
    p->bytes = bytes;
    p->wt = w->type;
    p->K = K;
    p->next = cb->packs;
    cb->packs = p;
    *out = p->data;
    return DRT_OK;
}

static drt_status ensure_scratch(cpu_ctx *c, int64_t floats) {
    if (floats <= c->scratch_floats) return DRT_OK;
    for (int i = 0; i < c->nth; i++) {
        free(c->scratch[i]);
        c->scratch[i] = NULL;
    }
    c->scratch_floats = 0;
    for (int i = 0; i < c->nth; i++) {
        void *p = NULL;
        if (posix_memalign(&p, 64, sizeof(float) * (size_t)floats) != 0)
            return drt_set_error(DRT_ERR_OOM, "cpu: cannot allocate %lld floats of scratch", (long long)floats);
        c->scratch[i] = p;
    }
    c->scratch_floats = floats;
    return DRT_OK;
}

/* A prefill MATMUL of q8_0 / q4_0 weights: the rows go through the
 * repacked int8-dot GEMV (matmul.c qt_rows) CPU_ROW_CHUNK at a time, so
 * each weight is read T/32 times, from its repacked copy, instead of widened
 * to f32 for the GEMM (32-row chunks keep the prepared x rows in L2: 1.1B
 * q4_0 pp512 126 tok/s, 116 with 128-row chunks). In the int8 mode x is one
 * int8 level a block, and VPDPBUSD does four multiply-adds where the f32
 * GEMM's FMA does one. In the
 * f32 mode x is two levels (within the f32 bound, as the GEMV); there it
 * pays only where K is a multiple of 512, every superblock of 16 blocks
 * full (cpu_row_chunks): 1.1B q4_0 pp512 126 against 95 tok/s, q8_0 111
 * against 97; the 134M DiffLlama q4_0, whose K = 768 rows end in a half
 * superblock, 0.92x with it for every K and 1.07x for K = 2048 alone. */
enum { CPU_ROW_CHUNK = 32 };
static int cpu_row_chunks(const cpu_ctx *c, const cpu_mm_args *m) {
    const int quant = m->wt == DRT_Q8_0 || m->wt == DRT_Q4_0;
    return c->repack && m->qdot && quant && m->T > c->k->gemv_max_t && !m->trans_w && m->K > 0 && m->B == 1 &&
           m->Bw == 1 && (c->x8 || m->K % 512 == 0); /* 16 blocks of 32 */
}

static drt_status matmul_row_chunks(cpu_ctx *c, const cpu_mm_args *m, const drt_tensor *w) {
    cpu_mm_args r = *m;
    drt_status s = packed_weight(c, w, m->K, 0, &r.wpack);
    const int R = CPU_ROW_CHUNK;
    r.T = R;
    if (s == DRT_OK) s = ensure_scratch(c, c->k->mm_scratch_floats(&r));
    if (s != DRT_OK) return s;
    r.scratch = c->scratch;
    r.xpack = NULL;
    for (int t0 = 0; t0 < m->T; t0 += R) {
        r.T = m->T - t0 < R ? m->T - t0 : R;
        r.x = m->x + (int64_t)t0 * m->K;
        r.y = m->y + (int64_t)t0 * m->N;
        r.phase = 1;
        atomic_init(&r.next_task, 0);
        cpu_pool_run(c->pool, c->k->matmul, &r);
    }
    return DRT_OK;
}

/* ---- scratch ------------------------------------------------------------------ */

/* one grow-only buffer shared by all threads: packed x of a GEMM, or the
 * partial results of a split attention */
static drt_status ensure_shared(cpu_ctx *c, int64_t floats) {
    if (floats <= c->shared_floats) return DRT_OK;
    free(c->shared);
    c->shared = NULL;
    if (posix_memalign((void **)&c->shared, 64, sizeof(float) * (size_t)floats) != 0) c->shared = NULL;
    c->shared_floats = c->shared ? floats : 0;
    return c->shared
               ? DRT_OK
               : drt_set_error(DRT_ERR_OOM, "cpu: cannot allocate %lld floats of shared scratch", (long long)floats);
}

/* ---- PERMUTE, threaded over the outermost output axis ------------------------ */

typedef struct {
    float *y;
    const float *x;
    int64_t ne[4];
    int perm[4];
} permute_args;

/* as drt_ref_permute, for output rows [lo, hi) of axis 0 */
static void permute_task(void *args, int ith, int nth) {
    const permute_args *a = args;
    const int64_t *ne = a->ne;
    const int *perm = a->perm;
    const int64_t xs[4] = {ne[1] * ne[2] * ne[3], ne[2] * ne[3], ne[3], 1};
    const int64_t yn[4] = {ne[perm[0]], ne[perm[1]], ne[perm[2]], ne[perm[3]]};
    const int64_t gs[4] = {xs[perm[0]], xs[perm[1]], xs[perm[2]], xs[perm[3]]};
    int64_t lo, hi;
    cpu_split(yn[0], 1, ith, nth, &lo, &hi);
    float *y = a->y + lo * yn[1] * yn[2] * yn[3];
    for (int64_t i0 = lo; i0 < hi; i0++)
        for (int64_t i1 = 0; i1 < yn[1]; i1++)
            for (int64_t i2 = 0; i2 < yn[2]; i2++) {
                const float *xr = a->x + i0 * gs[0] + i1 * gs[1] + i2 * gs[2];
                if (gs[3] == 1) {
                    memcpy(y, xr, sizeof(float) * (size_t)yn[3]);
                    y += yn[3];
                } else {
                    for (int64_t i3 = 0; i3 < yn[3]; i3++) *y++ = xr[i3 * gs[3]];
                }
            }
}

/* ---- the node runner ------------------------------------------------------------ */

static int64_t rows_of(const drt_tensor *t) {
    return drt_nelem(t) / t->ne[t->nd - 1];
}

/* Cuts a's rows into flash groups and decode rows (cpu_fast.h): a run of
 * consecutive rows of one sequence longer than CPU_ATTN_DEC_T gives groups of
 * up to vl rows, every other row is a decode row. */
static drt_status attn_plan(cpu_ctx *c, cpu_attn_args *a) {
    const int64_t need = 3 * (int64_t)a->T; /* fseg (2 per group) and drow: at most 3 per row */
    if (need > c->attn_work_cap) {
        int32_t *w = realloc(c->attn_work, sizeof(int32_t) * (size_t)need);
        if (!w) return drt_set_error(DRT_ERR_OOM, "cpu: out of memory planning attention over %d rows", a->T);
        c->attn_work = w;
        c->attn_work_cap = need;
    }
    int32_t *fseg = c->attn_work, *drow = c->attn_work + 2 * (int64_t)a->T;
    const int32_t *r = a->rows;
    a->n_fseg = a->n_drow = 0;
    for (int t0 = 0; t0 < a->T;) {
        int t1 = t0 + 1; /* the run is t0 .. t1-1 */
        while (t1 < a->T && r[2 * t1] == r[2 * t0] && r[2 * t1 + 1] == r[2 * (t1 - 1) + 1] + 1) t1++;
        if (t1 - t0 <= CPU_ATTN_DEC_T) {
            for (int t = t0; t < t1; t++) drow[a->n_drow++] = t;
        } else {
            for (int t = t0; t < t1; t += c->k->vlen) {
                fseg[2 * a->n_fseg] = t;
                fseg[2 * a->n_fseg + 1] = t1 - t < c->k->vlen ? t1 - t : c->k->vlen;
                a->n_fseg++;
            }
        }
        t0 = t1;
    }
    a->fseg = fseg;
    a->drow = drow;
    return DRT_OK;
}

static drt_status run_attn(cpu_ctx *c, const drt_tensor *t, const drt_exec *ex) {
    const drt_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2];
    const int diff = t->op == DRT_OP_DIFF_ATTN;
    cpu_attn_args a = {
        .o = drt_host_ptr(t),
        .q = drt_host_ptr(q),
        .k = drt_host_ptr(k),
        .v = drt_host_ptr(v),
        .kvt = k->type,
        .lambda_th = diff && t->src[3] ? drt_host_ptr(t->src[3]) : NULL,
        .rows = drt_host_ptr(t->src[DRT_SRC_ROWS]),
        .lambda = diff ? t->fp[0] : 0.0f,
        .T = (int)q->ne[0],
        .S = ex->max_keys,
        .H = (int)q->ne[1],
        .G = (int)k->ne[1],
        .m = diff ? (int)k->ne[2] : 1,
        .dk = diff ? (int)q->ne[3] : (int)q->ne[2],
        .dv = (int)v->ne[2],
        .maps = diff ? 2 : 1,
        .n_split = 1,
    };
    drt_status s = attn_plan(c, &a);
    if (s != DRT_OK) return s;
    /* decode rows: a kv group of 2 or more heads that fill at least a
     * quarter of the lanes puts them in lanes, each key read once for them */
    const int hpg = a.H / a.G, vl = c->k->vlen;
    a.dec_lanes = 4 * hpg >= vl && hpg >= 2 ? (hpg < vl ? hpg : vl) : 0;
    a.n_unit = a.dec_lanes ? a.G * ((hpg + a.dec_lanes - 1) / a.dec_lanes) : a.H;
    /* split keys when the units alone leave threads idle */
    if (a.n_fseg == 0 && a.n_drow * a.n_unit < 2 * c->nth && a.S >= 256) {
        int ns = (2 * c->nth + a.n_drow * a.n_unit - 1) / (a.n_drow * a.n_unit);
        if (ns > a.S / 128) ns = a.S / 128;
        if (ns > MAX_SPLIT) ns = MAX_SPLIT;
        a.n_split = ns < 1 ? 1 : ns;
    }
    s = ensure_scratch(c, c->k->attn_scratch_floats(&a));
    if (s == DRT_OK && a.n_split > 1) s = ensure_shared(c, (int64_t)a.n_drow * a.H * a.n_split * a.maps * (2 + a.dv));
    if (s != DRT_OK) return s;
    a.scratch = c->scratch;
    a.partial = c->shared;
    atomic_init(&a.next_task, 0);
    cpu_pool_run(c->pool, c->k->attn, &a);
    if (a.n_split > 1) cpu_pool_run(c->pool, c->k->attn_combine, &a);
    return DRT_OK;
}

static drt_status run_node(cpu_ctx *c, const drt_tensor *t, const drt_exec *ex) {
    const drt_tensor *a = t->src[0], *b = t->src[1];
    float *y = drt_host_ptr(t);
    const float *x0 = a ? drt_host_ptr(a) : NULL, *x1 = b ? drt_host_ptr(b) : NULL;
    const int32_t *rows = t->src[DRT_SRC_ROWS] ? drt_host_ptr(t->src[DRT_SRC_ROWS]) : NULL;
    cpu_ew_args e = {.y = y, .a = x0, .b = x1, .pos_rows = rows};
    switch (t->op) {
    case DRT_OP_EMBED: {
        const int32_t *ids = (const int32_t *)x0;
        const int V = (int)b->ne[0];
        for (int64_t i = 0; i < a->ne[0]; i++)
            if (ids[i] < 0 || ids[i] >= V)
                return drt_set_error(DRT_ERR_INVALID_ARG, "EMBED: token id %d at position %lld is outside [0, %d)",
                                     ids[i], (long long)i, V);
        e.ids = ids;
        e.w = x1;
        e.wt = b->type;
        e.T = (int)a->ne[0];
        e.cols = b->ne[1];
        cpu_pool_run(c->pool, c->k->embed, &e);
        return DRT_OK;
    }
    case DRT_OP_RMSNORM:
        e.rows = rows_of(a);
        e.cols = a->ne[a->nd - 1];
        e.w = x1;
        e.eps = t->fp[0];
        cpu_pool_run(c->pool, c->k->rmsnorm, &e);
        return DRT_OK;
    case DRT_OP_GROUPNORM:
        e.rows = a->ne[0] * a->ne[1];
        e.cols = a->ne[2];
        e.w = x1;
        e.eps = t->fp[0];
        e.scale = t->fp[1];
        cpu_pool_run(c->pool, c->k->groupnorm, &e);
        return DRT_OK;
    case DRT_OP_MATMUL: {
        const drt_matmul_shape d = drt_matmul_dims(t);
        cpu_mm_args m = {
            .y = y,
            .x = x0,
            .w = drt_host_ptr(b),
            .wt = d.wtype,
            .B = (int)d.B,
            .Bw = (int)d.Bw,
            .T = (int)d.T,
            .K = (int)d.K,
            .N = (int)d.N,
            .trans_w = d.trans_w,
            .scale = d.scale,
        };
        m.bf16 = c->bf16 && !m.trans_w;
        m.x8 = c->x8;
        m.qdot = c->qdot;
        drt_status s = DRT_OK;
        const int quant = m.wt == DRT_Q8_0 || m.wt == DRT_Q4_0;
        if (cpu_row_chunks(c, &m)) return matmul_row_chunks(c, &m, b);
        /* every path reads a repacked weight from its copy, never the
         * original (prepare_weight may have dropped its pages) */
        if (c->repack && !m.trans_w && m.K > 0 && quant) s = packed_weight(c, b, m.K, 0, &m.wpack);
        if (s == DRT_OK) s = ensure_scratch(c, c->k->mm_scratch_floats(&m));
        if (s == DRT_OK) s = ensure_shared(c, c->k->mm_xpack_floats(&m));
        if (s != DRT_OK) return s;
        m.scratch = c->scratch;
        m.xpack = c->shared;
        atomic_init(&m.next_task, 0);
        const int phases = c->k->mm_phases(&m);
        for (m.phase = 2 - phases; m.phase < 2; m.phase++) cpu_pool_run(c->pool, c->k->matmul, &m);
        return DRT_OK;
    }
    case DRT_OP_ROPE:
        e.T = (int)a->ne[0];
        e.H = (int)a->ne[1];
        e.d = (int)a->ne[2];
        cpu_pool_run(c->pool, c->k->rope, &e);
        return DRT_OK;
    case DRT_OP_DUAL_SOFTMAX: {
        e.H = (int)a->ne[0];
        e.T = (int)a->ne[1];
        e.rows = a->ne[0] * a->ne[1];
        e.cols = a->ne[2];
        e.lambda = t->fp[0];
        e.c = t->src[2] ? drt_host_ptr(t->src[2]) : NULL;
        drt_status s = ensure_scratch(c, e.cols);
        if (s != DRT_OK) return s;
        e.scratch = c->scratch;
        cpu_pool_run(c->pool, c->k->dual_softmax, &e);
        return DRT_OK;
    }
    case DRT_OP_DIFF_ATTN:
    case DRT_OP_ATTN: return run_attn(c, t, ex);
    case DRT_OP_SWIGLU:
    case DRT_OP_SIGMOID:
    case DRT_OP_ADD:
        e.n = drt_nelem(t);
        cpu_pool_run(c->pool,
                     t->op == DRT_OP_SWIGLU    ? c->k->swiglu
                     : t->op == DRT_OP_SIGMOID ? c->k->sigmoid
                                               : c->k->add,
                     &e);
        return DRT_OK;
    case DRT_OP_KV_WRITE: {
        /* a row copy each; the node is a view of the cache (srcs[1]) */
        if (t->type == DRT_F16 || t->type == DRT_Q8_0) {
            const drt_tensor *src = t->src[0];
            const int64_t row = src->ne[0] ? drt_nelem(src) / src->ne[0] : 0;
            const size_t rb = drt_row_bytes(t->type, row);
            for (int64_t i = 0; i < src->ne[0]; i++) {
                void *dst = (char *)y + ((size_t)rows[2 * i] + (size_t)rows[2 * i + 1]) * rb;
                c->k->kv_row(x0 + i * row, dst, t->type, row);
            }
            return DRT_OK;
        }
        void *srcs[DRT_MAX_SRC] = {(void *)x0, (void *)x1, NULL, NULL, (void *)rows};
        return drt_ref_run_node(t, y, srcs, ex);
    }
    case DRT_OP_PERMUTE: {
        permute_args p = {.y = y, .x = x0};
        drt_permute_4d(t, p.ne, p.perm);
        cpu_pool_run(c->pool, permute_task, &p);
        return DRT_OK;
    }
    case DRT_OP_NONE:
    case DRT_OP_COUNT: break;
    }
    return drt_set_error(DRT_ERR_UNSUPPORTED, "cpu: op %s has no kernel", drt_op_name(t->op));
}

/* ---- backend table ------------------------------------------------------------- */

static drt_status cpu_probe(int *n, char *why, size_t wn) {
    *n = 1;
    return DRT_OK;
}

static void cpu_name(char *buf, size_t n, int nth, const cpu_kernels *k, int bf16, int x8, int qdot, int repack) {
    snprintf(buf, n, "host CPU (%d threads, %s kernels, %s%s)", nth, k->isa,
             bf16 ? "bf16 prefill GEMM"
             : x8 ? "int8 x in the q8_0/q4_0 GEMV"
                  : "f32",
             qdot ? (repack ? ", q8_0/q4_0 int8-dot GEMV, repacked" : ", q8_0/q4_0 int8-dot GEMV") : "");
}

/* the defaults (the environment's settings); an instance's own: cpu_instance_name */
static drt_status cpu_device_name(int dev, char *buf, size_t n) {
    int nth = 0, bf16 = 0, x8 = 0, qdot = 0, repack = 0;
    const cpu_kernels *k = NULL;
    if (pick_threads(NULL, 0, &nth) != DRT_OK || pick_isa(NULL, &k) != DRT_OK ||
        pick_precision(NULL, k, &bf16, &x8) != DRT_OK || pick_qdot(NULL, k, &qdot, &repack) != DRT_OK) {
        snprintf(buf, n, "host CPU (%s)", drt_last_error());
        return DRT_OK;
    }
    cpu_name(buf, n, nth, k, bf16, x8, qdot, repack);
    return DRT_OK;
}

static drt_status cpu_instance_name(drt_backend *be, char *buf, size_t n) {
    const cpu_ctx *c = be->ctx;
    cpu_name(buf, n, c->nth, c->k, c->bf16, c->x8, c->qdot, c->repack);
    return DRT_OK;
}

/* the host CPU itself; the kernel set and threads are in device_name */
static drt_status cpu_device_props(int dev, drt_device_props *out) {
    drt_host_cpu_props(out);
    return DRT_OK;
}

static void cpu_shutdown(drt_backend *be) {
    cpu_ctx *c = be->ctx;
    if (!c) return;
    cpu_pool_free(c->pool);
    for (int i = 0; c->scratch && i < c->nth; i++) free(c->scratch[i]);
    free(c->scratch);
    free(c->shared);
    free(c->attn_work);
    free(c);
    be->ctx = NULL;
}

static drt_status cpu_init(drt_backend *be, int dev) {
    be->device = 0;
    int nth = 0;
    const cpu_kernels *k = NULL;
    int bf16 = 0, x8 = 0, qdot = 0, repack = 0;
    drt_status s = pick_threads(be->settings, be->threads, &nth);
    if (s == DRT_OK) s = pick_isa(be->settings, &k);
    if (s == DRT_OK) s = pick_precision(be->settings, k, &bf16, &x8);
    if (s == DRT_OK) s = pick_qdot(be->settings, k, &qdot, &repack);
    if (s == DRT_OK && x8 && !qdot)
        s = drt_set_error(DRT_ERR_INVALID_ARG,
                          "cpu.precision=int8 (DIFFRT_CPU_PRECISION) is a mode of the int8-dot GEMV, which "
                          "cpu.qdot=0 (DIFFRT_CPU_QDOT) turns off");
    if (s != DRT_OK) return s;
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) return drt_set_error(DRT_ERR_OOM, "out of memory");
    be->ctx = c;
    c->k = k;
    c->bf16 = bf16;
    c->x8 = x8;
    c->qdot = qdot;
    c->repack = repack;
    c->nth = nth;
    c->scratch = calloc((size_t)nth, sizeof *c->scratch);
    c->pool = c->scratch ? cpu_pool_new(nth) : NULL;
    if (!c->pool) {
        cpu_shutdown(be);
        return drt_set_error(DRT_ERR_OOM, "cpu: cannot start %d threads", nth);
    }
    return DRT_OK;
}

static drt_status cpu_buf_alloc(drt_backend *be, size_t size, drt_buffer *out) {
    void *p = NULL;
    size_t sz = (size + 63) & ~(size_t)63;
    cpu_buf *cb = calloc(1, sizeof *cb);
    if (!cb || posix_memalign(&p, 64, sz ? sz : 64) != 0 || !p) {
        free(cb);
        return drt_set_error(DRT_ERR_OOM, "cpu: cannot allocate %zu bytes", size);
    }
    cb->own = p;
    out->handle = cb;
    out->host = p;
    out->size = size;
    return DRT_OK;
}

/* the caller's memory, used in place: own stays NULL so free leaves it */
static drt_status cpu_buf_wrap(drt_backend *be, void *host, size_t size, drt_buffer *out) {
    cpu_buf *cb = calloc(1, sizeof *cb);
    if (!cb) return drt_set_error(DRT_ERR_OOM, "out of memory");
    out->handle = cb;
    out->host = host;
    out->size = size;
    return DRT_OK;
}

static void cpu_buf_free(drt_backend *be, drt_buffer *b) {
    cpu_buf *cb = b->handle;
    if (cb) {
        drop_packs(cb, 0);
        free(cb->own);
        free(cb);
    }
    b->handle = b->host = NULL;
}

static drt_status cpu_upload(drt_backend *be, drt_buffer *b, size_t off, const void *src, size_t n) {
    drop_packs(b->handle, 1);
    if ((const char *)b->host + off != src) memcpy((char *)b->host + off, src, n);
    return DRT_OK;
}

static drt_status cpu_download(drt_backend *be, const drt_buffer *b, size_t off, void *dst, size_t n) {
    memcpy(dst, (const char *)b->host + off, n);
    return DRT_OK;
}

static bool cpu_supports(drt_backend *be, const drt_tensor *t) {
    if (t->op == DRT_OP_ROPE) return t->src[0]->ne[2] <= MAX_ROPE_D;
    return t->op > DRT_OP_NONE && t->op < DRT_OP_COUNT;
}

static drt_status cpu_compute(drt_backend *be, drt_tensor *const *nodes, int n, const drt_exec *ex) {
    cpu_ctx *c = be->ctx;
    for (int i = 0; i < n; i++) {
        drt_status s = run_node(c, nodes[i], ex);
        if (s != DRT_OK) return s;
    }
    return DRT_OK;
}

static drt_status cpu_sync(drt_backend *be) {
    return DRT_OK;
}

/* docs/design.md section 6: 1e-8 everywhere in the f32 mode; the bf16 mode
 * declares 5e-4 for MATMUL */
static double cpu_nmse_bound(drt_backend *be, const drt_tensor *t) {
    const cpu_ctx *c = be->ctx;
    if (t->op != DRT_OP_MATMUL) return 1e-8;
    if (c->bf16) return 5e-4;
    const drt_dtype wt = t->src[1]->type;
    return c->x8 && (wt == DRT_Q8_0 || wt == DRT_Q4_0) ? 5e-4 : 1e-8;
}

/* a loaded q8_0 / q4_0 weight (N, K) is repacked now, so the first decode
 * step does not pay for it, and its mapped original dropped */
static drt_status cpu_prepare_weight(drt_backend *be, const drt_tensor *w) {
    cpu_ctx *c = be->ctx;
    const void *p;
    if (!c->repack || (w->type != DRT_Q8_0 && w->type != DRT_Q4_0) || w->nd < 2 || w->ne[w->nd - 1] <= 0) return DRT_OK;
    drt_status s = packed_weight(c, w, (int)w->ne[w->nd - 1], 1, &p);
    /* every MATMUL path reads the copy from now on: one copy stays resident */
    if (s == DRT_OK && (w->flags & DRT_TF_MAPPED)) drt_release_pages(drt_host_ptr(w), drt_nbytes(w));
    return s;
}

static const char *cpu_precision(drt_backend *be) {
    const cpu_ctx *c = be->ctx;
    return c->bf16 ? "bf16" : c->x8 ? "int8" : "f32";
}

const drt_backend_ops drt_cpu_backend_ops = {
    .name = "cpu",
    .probe = cpu_probe,
    .device_name = cpu_device_name,
    .init = cpu_init,
    .shutdown = cpu_shutdown,
    .buf_alloc = cpu_buf_alloc,
    .buf_wrap = cpu_buf_wrap,
    .buf_free = cpu_buf_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .supports = cpu_supports,
    .compute = cpu_compute,
    .synchronize = cpu_sync,
    .nmse_bound = cpu_nmse_bound,
    .device_props = cpu_device_props,
    .precision = cpu_precision,
    .prepare_weight = cpu_prepare_weight,
    .instance_name = cpu_instance_name,
};
