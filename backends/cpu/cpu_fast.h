/* The fast CPU backend ("cpu"): a persistent thread pool, kernels compiled
 * once per instruction set and chosen at run time, weights read in place.
 * Internal to backends/cpu.
 *
 * Every kernel family file (matmul.c, attention.c, norm.c, elementwise.c) is
 * compiled once per ISA (avx512, avx2, neon or generic; CMakeLists.txt) with
 * DRT_ISA set; KFN(name) gives each copy its own symbol, and kernels.c
 * collects one copy's functions into a cpu_kernels table. backend.c (compiled
 * once, for the baseline ISA) picks the table from the CPU's features.
 *
 * Kernels follow the ggml convention: every thread of the pool calls the same
 * function with its index ith in [0, nth) and computes its share; the pool
 * returns when all have finished, which is the barrier between two ops. */
#ifndef DRT_CPU_FAST_H
#define DRT_CPU_FAST_H

#include <stdatomic.h>
#include <stdint.h>

#include "diffrt/diffrt.h"

/* ---- the thread pool ----------------------------------------------------- */
typedef struct cpu_pool cpu_pool;
typedef void (*cpu_task_fn)(void *ctx, int ith, int nth);

/* nth threads in all: the caller is thread 0, nth - 1 workers are started
 * once here and live until cpu_pool_free. */
cpu_pool *cpu_pool_new(int nth);
void cpu_pool_free(cpu_pool *p);
int cpu_pool_size(const cpu_pool *p);
/* Runs fn(ctx, i, nth) on every thread i (the caller runs i = 0) and returns
 * when all have returned. No allocation, no thread creation. */
void cpu_pool_run(cpu_pool *p, cpu_task_fn fn, void *ctx);

/* [*lo, *hi): thread ith's share of n items, in contiguous chunks that are
 * multiples of `align` items (the last takes the rest) */
static inline void cpu_split(int64_t n, int64_t align, int ith, int nth, int64_t *lo, int64_t *hi) {
    int64_t chunks = (n + align - 1) / align;
    int64_t c0 = chunks * ith / nth, c1 = chunks * (ith + 1) / nth;
    *lo = c0 * align < n ? c0 * align : n;
    *hi = c1 * align < n ? c1 * align : n;
}

/* ---- kernel arguments ------------------------------------------------------ */

/* MATMUL: y (B,T,N) = scale * x (B,T,K) w^T, w (Bw,N,K) or (Bw,K,N) when
 * trans_w, dtype wt; batch b of x reads batch b*Bw/B of w (drt_ref_matmul). */
/* x rows up to which MATMUL takes the GEMV path (matmul.c), per ISA; the
 * backend reads it as cpu_kernels.gemv_max_t. On avx512 the GEMV, which
 * widens each weight once per pass of 8 x rows in registers, beats the
 * GEMM, which widens whole panels to memory first, up to 128-256 rows
 * (2 threads, AMD EPYC, pp N of diffrt bench, GEMV / GEMM tok/s: 134M
 * DiffLlama f16 N=40 791/514, 64 861/711, 128 942/883, 256 924/954; the
 * 1.1B Llama f16 N=40 91/48, 128 92/84, 512 88/101; the 134M q4_0 N=40
 * 822/493); on avx2 only to about 40 (N=64 580/721), so 32 stays there and
 * on the ISAs not measured. */
#if defined(DRT_ISA_avx512)
#define CPU_GEMV_MAX_T 128
#else
#define CPU_GEMV_MAX_T 32
#endif

typedef struct {
    float *y;
    const float *x;
    const void *w;
    drt_dtype wt;
    int B, Bw, T, N, K, trans_w;
    float scale;
    int bf16;             /* GEMM in the bf16 mode (avx512 kernels on an AVX512-BF16 CPU only) */
    int x8;               /* the int8 mode: the int8-dot GEMVs take x in one int8 level a block */
    int qdot;             /* q8_0 / q4_0 GEMV on int8 dot products (avx512 kernels on an AVX512-VNNI + VBMI CPU only) */
    const void *wpack;    /* q8_0 / q4_0 w repacked by mm_pack (matmul.c qt_rows; avx512 kernels only), else NULL:
                           * the int8-dot GEMV reads it, the GEMM widens its panels from it */
    float **scratch;      /* per thread, cpu_mm_scratch_floats() each */
    float *xpack;         /* shared, cpu_mm_xpack_floats() */
    int phase;            /* GEMM: 0 packs x, 1 computes (cpu_mm_phases()) */
    atomic_int next_task; /* GEMM: dynamic task counter, zeroed by the caller */
} cpu_mm_args;

/* mm_pack: rows 0..rows of a q8_0 / q4_0 weight of K columns, src in the
 * checkpoint's layout, into dst (the same size) in the layout of the
 * int8-dot T == 1 GEMV */
typedef struct {
    void *dst;
    const void *src;
    drt_dtype wt;
    int64_t rows;
    int K;
} cpu_pack_args;

/* DIFF_ATTN (maps = 2) and ATTN (maps = 1), shapes as in drt_ref_diff_attn /
 * drt_ref_attn: o (T,H,dv); q (T,H,maps,dk); k (S_cap,G,m,dk) (m = 1 for ATTN);
 * v (S_cap,G,dv); lambda_th (T,H) or NULL; rows (T,2): row t attends the keys
 * rows[2t] .. rows[2t] + rows[2t+1] of the cache.
 *
 * The host cuts the rows into work (backend.c, attn_plan): a run of more
 * than CPU_ATTN_DEC_T consecutive rows of one sequence (same base, positions
 * one apart) becomes flash groups of at most VL rows (fseg: first row, row
 * count), every other row is a decode row (drow). */
#define CPU_ATTN_DEC_T 2
typedef struct {
    float *o;
    const float *q, *lambda_th;
    const void *k, *v; /* the caches, of type kvt (f32, f16, q8_0: drt_kv.h) */
    drt_dtype kvt;
    const int32_t *rows;
    float lambda;
    int T, S, H, G, m, dk, dv, maps; /* S: the most keys a row attends */
    const int32_t *fseg;             /* (n_fseg, 2) */
    const int32_t *drow;             /* (n_drow) */
    int n_fseg, n_drow;
    /* decode rows: dec_lanes > 0 puts up to that many heads of one kv group
     * in vector lanes (a unit), each key read once for them; 0: a unit is
     * one head. n_unit: units per row */
    int dec_lanes, n_unit;
    int n_split;          /* decode rows: key ranges per unit (1: no split) */
    float *partial;       /* n_split > 1: (n_drow, H, n_split, maps, 2 + dv) */
    float **scratch;      /* per thread, cpu_attn_scratch_floats() each */
    atomic_int next_task; /* dynamic task counter, zeroed by the caller */
} cpu_attn_args;

/* Row-wise and elementwise ops: one struct, fields used per op (backend.c). */
typedef struct {
    float *y;
    const float *a, *b, *c; /* inputs; meaning per op */
    const void *w;          /* EMBED table / norm weight */
    drt_dtype wt;
    const int32_t *ids;
    int64_t n, rows, cols; /* elementwise: n; row ops: rows x cols */
    int T, H, d;
    const int32_t *pos_rows; /* ROPE: (T, 2), the position is pos_rows[2t+1] */
    float eps, scale, lambda;
    float **scratch; /* DUAL_SOFTMAX: per slice, cols floats */
} cpu_ew_args;

/* ---- one ISA's kernels ----------------------------------------------------- */
typedef struct {
    const char *isa;                              /* "avx512", "avx2", "neon", "generic" */
    int vlen;                                     /* floats per vector */
    int gemv_max_t;                               /* CPU_GEMV_MAX_T of this ISA */
    void (*matmul)(void *args, int ith, int nth); /* cpu_mm_args */
    int64_t (*mm_scratch_floats)(const cpu_mm_args *a);
    int64_t (*mm_xpack_floats)(const cpu_mm_args *a);
    int (*mm_phases)(const cpu_mm_args *a);
    void (*mm_pack)(void *args, int ith, int nth); /* cpu_pack_args; NULL: no repacked GEMV (non-avx512) */
    void (*attn)(void *args, int ith, int nth);    /* cpu_attn_args */
    void (*attn_combine)(void *args, int ith, int nth);
    int64_t (*attn_scratch_floats)(const cpu_attn_args *a);
    void (*rmsnorm)(void *args, int ith, int nth);      /* y, a (rows,cols), w, eps */
    void (*groupnorm)(void *args, int ith, int nth);    /* y, a (rows,cols), w, eps, scale */
    void (*rope)(void *args, int ith, int nth);         /* y, a (T,H,d), b inv_freq, p0 */
    void (*swiglu)(void *args, int ith, int nth);       /* y, a gate, b up (n) */
    void (*sigmoid)(void *args, int ith, int nth);      /* y, a (n) */
    void (*add)(void *args, int ith, int nth);          /* y, a, b (n) */
    void (*embed)(void *args, int ith, int nth);        /* y (T,cols), ids, w (V,cols) wt */
    void (*dual_softmax)(void *args, int ith, int nth); /* y, a s1, b s2 (H,T,S=cols), lambda / c lambda_th */
    void (*kv_row)(const float *x, void *y, drt_dtype t, int64_t n); /* KV_WRITE: one f16 / q8_0 cache row (kv.c) */
} cpu_kernels;

#define KFN_CAT2(a, b) a##_##b
#define KFN_CAT(a, b) KFN_CAT2(a, b)
#define KFN(name) KFN_CAT(name, DRT_ISA)

extern const cpu_kernels cpu_kernels_generic;
#if defined(__x86_64__)
extern const cpu_kernels cpu_kernels_avx2;
extern const cpu_kernels cpu_kernels_avx512;
#endif
#if defined(__aarch64__)
extern const cpu_kernels cpu_kernels_neon;
#endif

#endif
