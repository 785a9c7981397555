/* Fast CPU MATMUL (docs/design.md section 3), compiled once per ISA (cpu_fast.h).
 * Reference: backends/ref/matmul.c. y (B,T,N) = scale * x (B,T,K) w^T, w of
 * dtype f32/f16/bf16 read in place (nn.Linear layout (N,K), or (K,N) when
 * trans_w), accumulated in f32.
 *
 * Two paths:
 *  - GEMV (T <= GEMV_MAX_T, trans_w = 0: decode, decode steps of many
 *    sequences in one forward, and short prompts; cpu_fast.h): threads
 *    split the B*N output columns; each group of 8 weight rows (4 for more
 *    than one x row) is streamed once from memory, widened to
 *    f32 in registers, and dotted with every x row, GEMV_T x rows per pass
 *    (the registers' limit; the group's later passes read it from L1).
 *    Napkin math: the weights dominate, N*K elements read once per call:
 *    memory bound (compute bound from about 16 rows on two cores).
 *  - GEMM (prefill): x is packed once into MR-row slivers, KC deep, shared
 *    by all threads (phase 0). Then threads take tasks (batch, block of NB
 *    panels of NR weight columns) from a shared counter; per K block a task
 *    packs its panels widened to f32 (the f16/bf16 -> f32 conversion happens
 *    here, a panel at a time, in cache; never a whole f32 copy of a weight)
 *    and runs an MR x NR register-blocked micro-kernel over every sliver.
 *    Napkin math: 2*B*T*N*K flops.
 *
 * Checked against the reference (exit status 0: every case within bound):
 *   diffrt conform --backend cpu --op MATMUL     the best kernel set here
 *   DIFFRT_CPU_ISA=avx2 (avx512, neon, generic) diffrt conform --backend cpu
 *       --op MATMUL                              each set (ctest conform_cpu_<isa>)
 *   DIFFRT_CPU_PRECISION=int8 (bf16) ...         the int8-dot GEMVs, the bf16
 *       GEMM (AVX-512 machines; ctest conform_cpu_int8)
 *   DIFFRT_CPU_QDOT=0, DIFFRT_CPU_REPACK=0 ...   the block GEMV, the GEMV on
 *       blocks as stored (ctest conform_cpu_int8_norepack)
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "cpu_fast.h"
#include "simd.h"

#if VL == 16
#define MR 8
#elif VL == 8
#define MR 6
#else
#define MR 4
#endif
#define NV 2                      /* vectors per micro-tile row */
#define NR (NV * VL)              /* columns per panel */
#define KC 256                    /* depth of one packed block */
#define NB 4                      /* panels per task */
#define GEMV_T 8                  /* x rows a GEMV kernel pass holds in registers */
#define QT_R 8                    /* the most repacked q8_0 / q4_0 rows a qt_rows pass streams */
#define GEMV_R 8                  /* weight rows a decode GEMV pass streams at once (gemv_rows8) */
#define GEMV_MAX_T CPU_GEMV_MAX_T /* up to this many x rows: the GEMV path */
/* The GEMVs prefetch the weight bytes DRT_PF_ROWS rows ahead into L2
 * (prefetcht1), not L1. On the 134M model's decode (85 weights, 219 MB of
 * f16 read once per step, 2 threads) the f16 kernel streamed 25-26 GB/s so,
 * against 17-19 GB/s with prefetcht0, whose fills hold the L1 miss slots the
 * demand loads need; decode went from 83 to 111-129 tok/s (q8_0 128 -> 178-197).
 * 32 and 64 rows ahead measured no better than 16. Compile-time only
 * (-DDRT_PF_ROWS=..., -DDRT_PF_LOCALITY=3 for the old behaviour). */
#ifndef DRT_PF_LOCALITY
#define DRT_PF_LOCALITY 2
#endif
#ifndef DRT_PF_ROWS
#define DRT_PF_ROWS 16
#endif
#if defined(DRT_ISA_avx512)
#define HAVE_BF16 1 /* the bf16 mode's kernels (below) */
#else
#define HAVE_BF16 0
#endif

/* ---- GEMV: T <= GEMV_MAX_T, w (N,K) -------------------------------------------- */

/* y[t*N + n + i] for i < n4 (1..4 rows) and t < TT: the dot products of
 * weight rows n..n+n4 with x rows 0..TT. TT and dt are constants after inlining. */
VINL void gemv_rows(float *y, const float *x, const void *w, drt_dtype dt, int64_t n, int n4, int TT, int N, int K,
                    float scale) {
    vf acc[4][GEMV_T];
    for (int i = 0; i < 4; i++)
        for (int t = 0; t < TT; t++) acc[i][t] = vzero();
    int k = 0;
    if (n4 == 4) {
        /* the bytes DRT_PF_ROWS rows ahead: rows of a few KB are too short for the
         * hardware prefetcher to reach full speed by itself (measured on the
         * 134M model's decode: 4 rows ahead +10%, 8-16 rows ahead +20%) */
        /* bytes per weight times VL (block formats: a block of 32 is
         * drt_dtype_size bytes) */
        const int64_t rowb = wbytes(dt, K);
        const char *ahead = (const char *)w + (n + DRT_PF_ROWS) * rowb;
        for (; k + VL <= K; k += VL) {
            for (int i = 0; i < 4; i++) __builtin_prefetch(ahead + i * rowb + wbytes(dt, k), 0, DRT_PF_LOCALITY);
            vf w0 = vload_w(w, (n + 0) * K + k, dt), w1 = vload_w(w, (n + 1) * K + k, dt);
            vf w2 = vload_w(w, (n + 2) * K + k, dt), w3 = vload_w(w, (n + 3) * K + k, dt);
            for (int t = 0; t < TT; t++) {
                vf xv = vload(x + (int64_t)t * K + k);
                acc[0][t] = vfma(w0, xv, acc[0][t]);
                acc[1][t] = vfma(w1, xv, acc[1][t]);
                acc[2][t] = vfma(w2, xv, acc[2][t]);
                acc[3][t] = vfma(w3, xv, acc[3][t]);
            }
        }
    } else {
        for (; k + VL <= K; k += VL)
            for (int i = 0; i < n4; i++) {
                vf wv = vload_w(w, (n + i) * K + k, dt);
                for (int t = 0; t < TT; t++) acc[i][t] = vfma(wv, vload(x + (int64_t)t * K + k), acc[i][t]);
            }
    }
    for (int i = 0; i < n4; i++)
        for (int t = 0; t < TT; t++) {
            float s = vhsum(acc[i][t]);
            for (int kk = k; kk < K; kk++) s += load_w1(w, (n + i) * K + kk, dt) * x[(int64_t)t * K + kk];
            y[(int64_t)t * N + n + i] = scale * s;
        }
}

/* Decode's pass: GEMV_R (8) full weight rows n.. against one x row.
 *
 * One core streams 8 rows at a time faster than 4, and faster again with
 * the loop over the rows left rolled (the accumulators then live in L1,
 * not in registers). Measured on a 2 GB f16 weight set of the 1.1B
 * Llama's shapes, one thread, prefetch 16 rows ahead (bench_decode_gemv's
 * shapes in a stand-alone test): 4 rows unrolled 24-26 GB/s, 8 rows
 * unrolled 25, 8 rows rolled 31-34, one linear read of the same bytes 32
 * (bench_membw 1). The unrolled loop keeps about twice the demand misses
 * in flight, which take the L1 miss slots the prefetches need; with two
 * threads every form meets the machine's bus limit (33.5 GB/s). With two
 * x rows the rolled loop measured slower (20 against 26 GB/s), so they
 * take gemv_rows. */
VINL void gemv_rows8(float *y, const float *x, const void *w, drt_dtype dt, int64_t n, int K, float scale) {
    vf acc[GEMV_R];
    for (int i = 0; i < GEMV_R; i++) acc[i] = vzero();
    const int64_t rowb = wbytes(dt, K);
    const char *ahead = (const char *)w + (n + DRT_PF_ROWS) * rowb;
    int k = 0;
    for (; k + VL <= K; k += VL) {
        const vf xv = vload(x + k);
#if defined(__clang__)
#pragma clang loop unroll(disable)
#else
#pragma GCC unroll 1
#endif
        for (int i = 0; i < GEMV_R; i++) {
            __builtin_prefetch(ahead + i * rowb + wbytes(dt, k), 0, DRT_PF_LOCALITY);
            const vf wv = vload_w(w, (n + i) * K + k, dt);
            acc[i] = vfma(wv, xv, acc[i]);
        }
    }
    for (int i = 0; i < GEMV_R; i++) {
        float s = vhsum(acc[i]);
        for (int kk = k; kk < K; kk++) s += load_w1(w, (n + i) * K + kk, dt) * x[kk];
        y[n + i] = scale * s;
    }
}

/* gemv_rows8 for one dtype, out of line: inlined into gemv's large body
 * the loop kept the row stride on the stack and loaded it every step, one
 * more load beside the weight reads that fill the L1 miss slots. Out of
 * line, bench_decode_gemv --dtype f16 at the 1.1B shapes, one thread, four
 * interleaved pairs: 27.3-28.1 -> 28.9-30.5 GB/s (min times). */
#define GEMV_ROWS8_FN(NAME, DT)                                                                                        \
    static __attribute__((noinline)) void NAME(float *y, const float *x, const void *w, int64_t n, int K,              \
                                               float scale) {                                                          \
        gemv_rows8(y, x, w, DT, n, K, scale);                                                                          \
    }
GEMV_ROWS8_FN(gemv_rows8_f32, DRT_F32)
GEMV_ROWS8_FN(gemv_rows8_f16, DRT_F16)
GEMV_ROWS8_FN(gemv_rows8_bf16, DRT_BF16)
#undef GEMV_ROWS8_FN

/* The same for q8_0 / q4_0 rows, a block at a time: the block's 32 values
 * times x summed in f32, then scaled by the block's d once (one FMA), so a
 * block costs its integer widening, 32/VL FMAs and one scale per x row.
 * The sum order differs from the f32 path's (per block, then scaled), well
 * within the f32 bound. */
VINL void gemv_rows_q(float *y, const float *x, const void *w, drt_dtype dt, int64_t n, int n4, int TT, int N, int K,
                      float scale) {
    enum { NV_B = DRT_QK / VL };
    const int64_t rowb = wbytes(dt, K), bs = wbytes(dt, DRT_QK);
    const int nb = K / DRT_QK;
    vf acc[4][GEMV_T];
    for (int i = 0; i < 4; i++)
        for (int t = 0; t < TT; t++) acc[i][t] = vzero();
    const unsigned char *r[4];
    for (int i = 0; i < 4; i++) r[i] = (const unsigned char *)w + (n + (i < n4 ? i : 0)) * rowb;
    for (int blk = 0; blk < nb; blk++) {
        for (int i = 0; i < n4; i++) {
            const unsigned char *b = r[i] + blk * bs;
            /* the same block DRT_PF_ROWS rows ahead (as the f16 path prefetches) */
            __builtin_prefetch(b + DRT_PF_ROWS * rowb, 0, DRT_PF_LOCALITY);
            const vf d = vset1(vh2f((uint16_t)(b[0] | b[1] << 8)));
            vf q[NV_B];
            for (int v = 0; v < NV_B; v++)
                q[v] = dt == DRT_Q8_0 ? vload_q8((const int8_t *)b + 2, v * VL) : vload_q4(b + 2, v * VL);
            for (int t = 0; t < TT; t++) {
                const float *xb = x + (int64_t)t * K + (int64_t)blk * DRT_QK;
                vf s = vmul(q[0], vload(xb));
                for (int v = 1; v < NV_B; v++) s = vfma(q[v], vload(xb + v * VL), s);
                acc[i][t] = vfma(d, s, acc[i][t]);
            }
        }
    }
    for (int i = 0; i < n4; i++)
        for (int t = 0; t < TT; t++) y[(int64_t)t * N + n + i] = scale * vhsum(acc[i][t]);
}

/* The int8-dot q8_0 / q4_0 GEMV below (cpu_mm_args.qdot: avx512 kernels on
 * a CPU with AVX512-VNNI and VBMI; 0 elsewhere) reads x prepared per row in
 * groups of blocks laid out as the weights' bytes lie (qdot_prep_group):
 * quads for q4_0 (QX floats), pairs for q8_0 (QX8), a last
 * partial group padded with zeros. */
enum { QX = 96, QX8 = 64 };
/* quads (q4_0) or pairs (q8_0) of blocks per row */
static int qdot_groups(int K, drt_dtype wt) {
    return wt == DRT_Q8_0 ? (K / DRT_QK + 1) / 2 : (K / DRT_QK + 3) / 4;
}
static int64_t qdot_row_floats(int K, drt_dtype wt) {
    return (int64_t)qdot_groups(K, wt) * (wt == DRT_Q8_0 ? QX8 : QX);
}

#if defined(DRT_ISA_avx512)
/* ---- q8_0 / q4_0 GEMV on int8 dot products (CPUs with AVX512-VNNI and VBMI)
 * The block kernel above widens every weight to f32 and is bound by that
 * widening, not by memory. Here x is quantized once per call, per 32-value
 * block, in two int8 levels: a = round(x / s) with s = max |x| / 127, then
 * b = round((x - s a) 256 / s), clamped to 127. So x~ = s (a + b / 256) is
 * within s / 256 of x (s / 512 unless b was clamped): 2^-15 of the block's
 * largest value, which keeps the GEMV within the f32 bound (NMSE 2e-10 to
 * 1.3e-9 on conform's cases, 1.9e-9 on the one with |x| ~ 1e-36; the bound
 * is 1e-8).
 * The weights stay as they are: four blocks (72 bytes, two loads) take one
 * byte permute, and their low and high nibbles one AND and one shift + AND.
 * VPDPBUSD multiplies the unsigned nibbles n (0..15) by a, and after a
 * shift by 8 by b, four products per i32 lane: 256 sum(n a) + sum(n b), at
 * most 8 * 15 * 127 * 257 per lane, exact in f32. Lanes 4j..4j+3 belong to
 * block j of the quad, so one FMA applies s/256 and adds the -8 bias term
 * (-8 sum(x~) of the block, a quarter per lane) and one more the weight
 * scales. 14 vector ops per 128 weights, against the bf16-dot kernel's 20
 * that it replaces (x split into bf16 hi + lo, VDPBF16PS twice per value):
 * q4_0 decode of the 134M model, 2 threads, interleaved rounds: median 341
 * against 301 tok/s (8 rounds), 279 against 238 (7 rounds, another sitting).
 * q8_0 the same way, a pair of blocks (68 bytes, two loads) at a time: one
 * byte permute, and an XOR with 0x80 reads each weight as the unsigned
 * w + 128, whose extra 128 sum(x~) per block goes into the bias term. 1
 * thread, cache-resident 768 x 2048: 23.6 G weights/s against the block
 * kernel's 19.3. 134M q8_0 decode, 2 threads, 7 interleaved rounds: median
 * 215 against 197 tok/s in one sitting, 168 against 168 in another (there
 * memory bound). Only these functions carry the target attributes; the
 * backend sets cpu_mm_args.qdot only on a CPU that has both
 * (DIFFRT_CPU_QDOT=0: off). */
#define QDOT_FN static inline __attribute__((always_inline, target("avx512vnni,avx512vbmi,avx512bw")))
#define QDOT_ATTR __attribute__((target("avx512vnni,avx512vbmi,avx512bw")))

/* 16 floats -> 16 int8 */
QDOT_FN __m128i qdot_i8(__m512 v) {
    return _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v));
}

/* One block of x (32 values at xr) in two int8 levels: lv = a of values
 * 0..15 and 16..31, then b of the same; *sx = s/256 and *sum = sum(x~).
 * An all-zero block gives zeros; a NaN or Inf in x gives NaN for both, so
 * the block's dot products come out NaN as they would in f32. */
QDOT_FN void qdot_levels(const float *xr, __m128i lv[4], float *sx, float *sum, int one) {
    const __m512 lim = _mm512_set1_ps(127.0f);
    const __m512 x0 = _mm512_loadu_ps(xr), x1 = _mm512_loadu_ps(xr + 16);
    lv[0] = lv[1] = lv[2] = lv[3] = _mm_setzero_si128();
    *sx = *sum = 0.0f;
    float m = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const float tot = _mm512_reduce_add_ps(_mm512_add_ps(x0, x1)); /* NaN or Inf when an x is */
    if (!(m <= FLT_MAX) || !(tot - tot == 0.0f)) {
        *sx = *sum = NAN;
        return;
    }
    if (!(m > 0.0f)) return;
    /* blocks of tiny values are scaled up by 2^64 first (exact), so 1 / s
     * stays finite; their scales are scaled back */
    const float up = m < 0x1p-60f ? 0x1p64f : 1.0f, down = 1.0f / up;
    m *= up;
    const __m512 vup = _mm512_set1_ps(up);
    const __m512 y0 = _mm512_mul_ps(x0, vup), y1 = _mm512_mul_ps(x1, vup);
    const float sc = m / 127.0f;
    const __m512 inv = _mm512_set1_ps(127.0f / m), vs = _mm512_set1_ps(sc), inv256 = _mm512_set1_ps(256.0f / sc);
    /* round to nearest; the clamps only catch the last bit of float error */
    const __m512 fa0 = _mm512_roundscale_ps(_mm512_min_ps(lim, _mm512_max_ps(-lim, _mm512_mul_ps(y0, inv))), 0);
    const __m512 fa1 = _mm512_roundscale_ps(_mm512_min_ps(lim, _mm512_max_ps(-lim, _mm512_mul_ps(y1, inv))), 0);
    lv[0] = qdot_i8(fa0);
    lv[1] = qdot_i8(fa1);
    const float sa = _mm512_reduce_add_ps(_mm512_add_ps(fa0, fa1));
    *sx = sc / 256.0f * down;
    if (one) { /* the int8 mode: a alone, b stays 0 */
        *sum = sc * sa * down;
        return;
    }
    const __m512 r0 = _mm512_fnmadd_ps(fa0, vs, y0), r1 = _mm512_fnmadd_ps(fa1, vs, y1);
    const __m512 fb0 = _mm512_roundscale_ps(_mm512_min_ps(lim, _mm512_max_ps(-lim, _mm512_mul_ps(r0, inv256))), 0);
    const __m512 fb1 = _mm512_roundscale_ps(_mm512_min_ps(lim, _mm512_max_ps(-lim, _mm512_mul_ps(r1, inv256))), 0);
    lv[2] = qdot_i8(fb0);
    lv[3] = qdot_i8(fb1);
    const float sb = _mm512_reduce_add_ps(_mm512_add_ps(fb0, fb1));
    *sum = (sc * sa + sc / 256.0f * sb) * down;
}

/* x for a group of blocks at xr (nblk of them; the rest zero) -> QX (q4_0)
 * or QX8 (q8_0) floats at o, levels laid out as the weights' bytes lie:
 *  - q4_0, a quad: a of each block's values < 16 (16 bytes a block), a of
 *    its values >= 16, then b of the same (64 bytes each);
 *  - q8_0, a pair: a of both blocks' 64 values in order, then b;
 * then per lane s/256 and the bias term: -8 sum(x~) for q4_0's q = n - 8,
 * -128 sum(x~) for q8_0's weights read as w + 128, shared by the block's
 * lanes. */
QDOT_FN void qdot_prep_group(float *o, const float *xr, int nblk, drt_dtype dt, int one) {
    const int q8 = dt == DRT_Q8_0, per = q8 ? 2 : 4, lanes = 16 / per;
    const float bias = -(q8 ? 128.0f : 8.0f) / (float)lanes;
    float *sxo = o + (q8 ? QX8 : QX) - 32, *co = sxo + 16;
    int8_t *q = (int8_t *)o;
    for (int j = 0; j < per; j++) {
        __m128i lv[4] = {_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()};
        float sx = 0.0f, sum = 0.0f;
        if (j < nblk) qdot_levels(xr + 32 * j, lv, &sx, &sum, one);
        for (int v = 0; v < 4; v++)
            _mm_storeu_si128((__m128i *)(q + (q8 ? 64 * (v / 2) + 32 * j + 16 * (v % 2) : 64 * v + 16 * j)), lv[v]);
        for (int l = 0; l < lanes; l++) {
            sxo[lanes * j + l] = sx;
            co[lanes * j + l] = bias * sum;
        }
    }
}

/* rows 0..T of one batch of x (K values each) -> xq, qdot_row_floats each */
QDOT_FN void qdot_prep_x(float *xq, const float *x, int K, int T, drt_dtype wt, int one) {
    const int nb = K / DRT_QK, per = wt == DRT_Q8_0 ? 2 : 4, ng = qdot_groups(K, wt);
    const int64_t gf = wt == DRT_Q8_0 ? QX8 : QX;
    for (int t = 0; t < T; t++)
        for (int g = 0; g < ng; g++) {
            const int left = nb - per * g;
            float *o = xq + ((int64_t)t * ng + g) * gf;
            const float *xr = x + (int64_t)t * K + (int64_t)g * per * DRT_QK;
            qdot_prep_group(o, xr, left < per ? left : per, wt, one);
        }
}

/* A group of nblk blocks at b, bs bytes each, as two 64-byte vectors: a
 * whole group (per blocks) loads b and b + off; a partial one loads its
 * blocks masked (nothing past them is touched) and zeros */
QDOT_FN void qdot_load(const unsigned char *b, int nblk, int per, int bs, int off, __m512i *l, __m512i *h) {
    if (nblk == per) {
        *l = _mm512_loadu_si512(b);
        *h = _mm512_loadu_si512(b + off);
    } else {
        *l = _mm512_maskz_loadu_epi8(((__mmask64)1 << (bs * nblk)) - 1, b);
        *h = _mm512_setzero_si512();
    }
}

/* the f16 scales at the words didx of l, as f32 lanes */
QDOT_FN __m512 qdot_scales(const uint16_t didx[32], __m512i l) {
    return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_loadu_si512(didx), l)));
}

/* the q4_0 quad at b (nblk blocks; 4: 72 bytes) -> its low and high
 * nibbles as bytes (block j in bytes 16j..16j+15) and each lane's scale */
QDOT_FN void qdot_q4_quad(const unsigned char *b, int nblk, __m512i *lo, __m512i *hi, __m512 *d) {
    /* value byte c of block j: byte 18 j + 2 + c; block 3's from the second
     * load (which starts at byte 8): index 64 + 48 + c */
    static const uint8_t qidx[64] = {2,   3,   4,   5,   6,   7,   8,   9,   10,  11,  12,  13,  14,  15,  16,  17,
                                     20,  21,  22,  23,  24,  25,  26,  27,  28,  29,  30,  31,  32,  33,  34,  35,
                                     38,  39,  40,  41,  42,  43,  44,  45,  46,  47,  48,  49,  50,  51,  52,  53,
                                     112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127};
    static const uint16_t didx[32] = {0, 0, 0, 0, 9, 9, 9, 9, 18, 18, 18, 18, 27, 27, 27, 27};
    __m512i l, h;
    qdot_load(b, nblk, 4, 18, 8, &l, &h);
    const __m512i p = _mm512_permutex2var_epi8(l, _mm512_loadu_si512(qidx), h);
    const __m512i m = _mm512_set1_epi8(0x0F);
    *lo = _mm512_and_si512(p, m);
    *hi = _mm512_and_si512(_mm512_srli_epi16(p, 4), m);
    *d = qdot_scales(didx, l);
}

/* the q8_0 pair at b (nblk blocks; 2: 68 bytes) -> its 64 values as
 * unsigned bytes w + 128 (block j in bytes 32j..32j+31) and each lane's
 * scale */
QDOT_FN void qdot_q8_pair(const unsigned char *b, int nblk, __m512i *u, __m512 *d) {
    /* value c of block 0: byte 2 + c; of block 1: byte 36 + c, from the
     * second load (which starts at byte 4): index 64 + 32 + c */
    static const uint8_t qidx[64] = {2,   3,   4,   5,   6,   7,   8,   9,   10,  11,  12,  13,  14,  15,  16,  17,
                                     18,  19,  20,  21,  22,  23,  24,  25,  26,  27,  28,  29,  30,  31,  32,  33,
                                     96,  97,  98,  99,  100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111,
                                     112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127};
    static const uint16_t didx[32] = {0, 0, 0, 0, 0, 0, 0, 0, 17, 17, 17, 17, 17, 17, 17, 17};
    __m512i l, h;
    qdot_load(b, nblk, 2, 34, 4, &l, &h);
    *u = _mm512_xor_si512(_mm512_permutex2var_epi8(l, _mm512_loadu_si512(qidx), h), _mm512_set1_epi8((char)0x80));
    *d = qdot_scales(didx, l);
}

/* one group's 16 lane sums for one x row (xp, qdot_prep_group's layout):
 * s/256 sum(w (256 a + b)) + bias, w the unsigned bytes: q4_0's low and
 * high nibbles (lo, hi), q8_0's w + 128 (lo; hi unused) */
QDOT_FN __m512 qdot_dot(__m512i lo, __m512i hi, const float *xp, int q8) {
    const int8_t *q = (const int8_t *)xp;
    const int lv = q8 ? 64 : 128; /* bytes of one level */
    __m512i i = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(q));
    if (!q8) i = _mm512_dpbusd_epi32(i, hi, _mm512_loadu_si512(q + 64));
    i = _mm512_slli_epi32(i, 8);
    i = _mm512_dpbusd_epi32(i, lo, _mm512_loadu_si512(q + lv));
    if (!q8) i = _mm512_dpbusd_epi32(i, hi, _mm512_loadu_si512(q + lv + 64));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_loadu_ps(xp + lv / 2), _mm512_loadu_ps(xp + lv / 2 + 16));
}

/* y[t*N + n + i] for i < n4 (1..4), t < TT: q8_0 / q4_0 weight rows n..
 * dotted with the prepared x rows (qdot_prep_x). dt and TT are constants
 * after inlining. */
QDOT_FN void qdot_rows(float *y, const float *xq, const void *w, drt_dtype dt, int64_t n, int n4, int TT, int N, int K,
                       float scale) {
    const int q8 = dt == DRT_Q8_0, per = q8 ? 2 : 4;
    const int nb = K / DRT_QK, ng = qdot_groups(K, dt), full = nb / per;
    const int64_t bs = wbytes(dt, DRT_QK), rowb = nb * bs, gf = q8 ? QX8 : QX, xrow = ng * gf;
    __m512 acc[4][GEMV_T];
    for (int i = 0; i < 4; i++)
        for (int t = 0; t < TT; t++) acc[i][t] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        const int nblk = g < full ? per : nb - per * g;
        for (int i = 0; i < n4; i++) {
            const unsigned char *b = (const unsigned char *)w + (n + i) * rowb + g * per * bs;
            __builtin_prefetch(b + DRT_PF_ROWS * rowb, 0, DRT_PF_LOCALITY);
            __builtin_prefetch(b + DRT_PF_ROWS * rowb + 64, 0, DRT_PF_LOCALITY);
            __m512i lo, hi = _mm512_setzero_si512();
            __m512 d;
            if (q8)
                qdot_q8_pair(b, nblk, &lo, &d);
            else
                qdot_q4_quad(b, nblk, &lo, &hi, &d);
            for (int t = 0; t < TT; t++) {
                const float *xp = xq + t * xrow + g * gf;
                acc[i][t] = _mm512_fmadd_ps(qdot_dot(lo, hi, xp, q8), d, acc[i][t]);
            }
        }
    }
    for (int i = 0; i < n4; i++)
        for (int t = 0; t < TT; t++) y[(int64_t)t * N + n + i] = scale * _mm512_reduce_add_ps(acc[i][t]);
}

/* qdot_rows with TT = tt (1 .. GEMV_T) as a constant */
QDOT_FN void qdot_rows_tt(float *y, const float *xq, const void *w, drt_dtype dt, int64_t n, int n4, int tt, int N,
                          int K, float scale) {
    switch (tt) {
    case 1: qdot_rows(y, xq, w, dt, n, n4, 1, N, K, scale); break;
    case 2: qdot_rows(y, xq, w, dt, n, n4, 2, N, K, scale); break;
    case 3: qdot_rows(y, xq, w, dt, n, n4, 3, N, K, scale); break;
    case 4: qdot_rows(y, xq, w, dt, n, n4, 4, N, K, scale); break;
    case 5: qdot_rows(y, xq, w, dt, n, n4, 5, N, K, scale); break;
    case 6: qdot_rows(y, xq, w, dt, n, n4, 6, N, K, scale); break;
    case 7: qdot_rows(y, xq, w, dt, n, n4, 7, N, K, scale); break;
    default: qdot_rows(y, xq, w, dt, n, n4, 8, N, K, scale); break;
    }
}

/* weight rows n.. (n4) against all T prepared x rows, GEMV_T at a time */
#define QDOT_T(dt)                                                                                                     \
    for (int t0 = 0; t0 < a->T; t0 += GEMV_T)                                                                          \
        qdot_rows_tt(yb + (int64_t)t0 * N, xq + (int64_t)t0 * qdot_row_floats(K, dt), wb, dt, n, (int)n4,              \
                     a->T - t0 < GEMV_T ? a->T - t0 : GEMV_T, N, K, a->scale);

/* ---- the T == 1 GEMV on repacked weights (cpu_mm_args.wpack)
 * Above, a block's values fill four (q4_0) or eight (q8_0) i32 lanes, so
 * every group of blocks needs a byte permute to drop the scales, a word
 * permute to spread them over the lanes, and its own convert and two FMAs:
 * 14 vector ops per 128 q4_0 weights, and the GEMV is bound by them (about
 * 25 GB/s of q4_0 on two cores with the weights in cache, less than memory
 * delivers). The backend therefore repacks each q8_0 / q4_0 weight once,
 * when a session loads it or else on its first T == 1 MATMUL (backend.c
 * packed_weight, with cpu_mm_pack below), so that one i32 lane holds one
 * block:
 *  - a row of K values (nb = K/32 blocks) is cut into superblocks of r = 16
 *    blocks (the last has nb % 16 when that is not 0);
 *  - a superblock holds the value bytes in chunks of four: chunk c (0..3 for
 *    q4_0's 16 bytes a block, 0..7 for q8_0's 32) of its r blocks, 4 r bytes,
 *    then chunk c + 1, ...; then the r f16 scales;
 *  - so a row has the same bytes (18 or 34 per block) as the checkpoint's,
 *    in the same place per superblock, and row n starts at n * rowb.
 * x is prepared to match (qt_prep_x): for each superblock 1024 bytes of
 * int8 levels (q4_0: per chunk a of the low nibbles' values, a of the high
 * nibbles', b of the low, b of the high; q8_0: per chunk a, then b), then
 * s/256 and the bias term per block, 16 floats each: QT floats in all.
 * A superblock of 16 blocks (512 weights) then takes per row 4 (q4_0) or 8
 * (q8_0) weight loads, q4_0's AND, shift and AND per load (q8_0's XOR), 16
 * VPDPBUSD, and one shift, add, convert, FMA, scale convert and FMA: 34 ops
 * per 512 q4_0 weights against 56 above. The x levels are loaded once per
 * chunk for four rows. */
enum { QT = 288 };
static int qt_sblocks(int K) {
    return (K / DRT_QK + 15) / 16;
}
/* blocks in superblock s of a row of nb blocks (16, or fewer in the last) */
static int qt_sb_blocks(int nb, int s) {
    return nb - 16 * s < 16 ? nb - 16 * s : 16;
}

/* the four 4-byte units of lv (values 4 u0 .. 4 u0 + 15 of one level of
 * block j) to chunks u0 .. u0 + 3: unit u at q + (u0 + u) * stride + 4 j */
QDOT_FN void qt_scatter(int8_t *q, const __m128i lv, int u0, int j, int stride) {
    int32_t w[4];
    _mm_storeu_si128((__m128i *)w, lv);
    for (int u = 0; u < 4; u++) memcpy(q + (int64_t)(u0 + u) * stride + 4 * j, &w[u], 4);
}

/* one x row of K values -> qt_sblocks(K) * QT floats at o */
QDOT_FN void qt_prep_x(float *o, const float *x, int K, drt_dtype dt, int one) {
    const int nb = K / DRT_QK, q8 = dt == DRT_Q8_0;
    const float bias = q8 ? -128.0f : -8.0f;
    for (int s = 0; s < qt_sblocks(K); s++) {
        float *so = o + (int64_t)s * QT;
        int8_t *q = (int8_t *)so;
        memset(so, 0, sizeof(float) * QT);
        for (int j = 0; j < qt_sb_blocks(nb, s); j++) {
            __m128i lv[4];
            float sx, sum;
            qdot_levels(x + (int64_t)(16 * s + j) * DRT_QK, lv, &sx, &sum, one);
            if (q8) { /* chunk c: a at 128 c, b at 128 c + 64 */
                qt_scatter(q, lv[0], 0, j, 128);
                qt_scatter(q, lv[1], 4, j, 128);
                qt_scatter(q + 64, lv[2], 0, j, 128);
                qt_scatter(q + 64, lv[3], 4, j, 128);
            } else { /* chunk c: a low, a high, b low, b high at 256 c + 0, 64, 128, 192 */
                qt_scatter(q, lv[0], 0, j, 256);
                qt_scatter(q + 64, lv[1], 0, j, 256);
                qt_scatter(q + 128, lv[2], 0, j, 256);
                qt_scatter(q + 192, lv[3], 0, j, 256);
            }
            so[256 + j] = sx;
            so[272 + j] = bias * sum;
        }
    }
}

/* repacked q8_0 / q4_0 weight rows a GEMV pass takes against T x rows in
 * the x form x8: 8 for one x row in two int8 levels (the f32 mode's
 * decode), else 4. As gemv_rows8, one core streams 8 rows faster than 4:
 * bench_decode_gemv at the 1.1B shapes, one thread, four interleaved
 * pairs, q8_0 20.8-21.0 -> 23.9-24.6 GB/s, q4_0 23.1-24.9 -> 27.5-28.9.
 * With one int8 level (the int8 mode) 8 rows measured slower (q8_0 23.4
 * -> 21.4-21.7) and 4 stay. */
static int qt_group(int T, int x8) {
    return T == 1 && !x8 ? QT_R : 4;
}

/* y[n + i] for i < n4 (1..QR, QR <= QT_R): repacked q8_0 / q4_0 weight
 * rows n.. dotted with the prepared x row xq (qt_prep_x) */
QDOT_FN void qt_rows(float *y, const float *xq, const void *w, drt_dtype dt, int64_t n, int n4, int K, float scale,
                     int X8, int QR) {
    const int q8 = dt == DRT_Q8_0, nb = K / DRT_QK, ns = qt_sblocks(K), nch = q8 ? 8 : 4;
    const int64_t bs = wbytes(dt, DRT_QK), rowb = nb * bs;
    const __m512i m4 = _mm512_set1_epi8(0x0F), x80 = _mm512_set1_epi8((char)0x80);
    const unsigned char *r[QT_R]; /* rows past n4 repeat row n; their sums are dropped */
    for (int i = 0; i < QR; i++) r[i] = (const unsigned char *)w + (n + (i < n4 ? i : 0)) * rowb;
    __m512 acc[QT_R];
    for (int i = 0; i < QR; i++) acc[i] = _mm512_setzero_ps();
    for (int s = 0; s < ns; s++) {
        const int rb = qt_sb_blocks(nb, s);
        const __mmask64 mv = rb == 16 ? ~(__mmask64)0 : ((__mmask64)1 << (4 * rb)) - 1;
        const int64_t off = 16 * s * bs, cb = 4 * rb; /* superblock start; bytes per chunk */
        const int8_t *q = (const int8_t *)(xq + (int64_t)s * QT);
        __m512i ia[QT_R], ib[QT_R];
        for (int i = 0; i < QR; i++) ia[i] = ib[i] = _mm512_setzero_si512();
        for (int c = 0; c < nch; c++) {
            if (q8) {
                const __m512i xa = _mm512_loadu_si512(q + 128 * c), xb = _mm512_loadu_si512(q + 128 * c + 64);
                for (int i = 0; i < QR; i++) {
                    const unsigned char *b = r[i] + off + c * cb;
                    __builtin_prefetch(b + DRT_PF_ROWS * rowb, 0, DRT_PF_LOCALITY);
                    const __m512i u = _mm512_xor_si512(
                        rb == 16 ? _mm512_loadu_si512(b) : _mm512_maskz_loadu_epi8(mv, b), x80);
                    ia[i] = _mm512_dpbusd_epi32(ia[i], u, xa);
                    if (!X8) ib[i] = _mm512_dpbusd_epi32(ib[i], u, xb);
                }
            } else {
                const int8_t *qc = q + 256 * c;
                const __m512i xal = _mm512_loadu_si512(qc), xah = _mm512_loadu_si512(qc + 64);
                const __m512i xbl = _mm512_loadu_si512(qc + 128), xbh = _mm512_loadu_si512(qc + 192);
                for (int i = 0; i < QR; i++) {
                    const unsigned char *b = r[i] + off + c * cb;
                    __builtin_prefetch(b + DRT_PF_ROWS * rowb, 0, DRT_PF_LOCALITY);
                    const __m512i wv = rb == 16 ? _mm512_loadu_si512(b) : _mm512_maskz_loadu_epi8(mv, b);
                    const __m512i lo = _mm512_and_si512(wv, m4), hi = _mm512_and_si512(_mm512_srli_epi16(wv, 4), m4);
                    ia[i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(ia[i], lo, xal), hi, xah);
                    if (!X8) ib[i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(ib[i], lo, xbl), hi, xbh);
                }
            }
        }
        const __m512 sx = _mm512_loadu_ps(xq + (int64_t)s * QT + 256),
                     bias = _mm512_loadu_ps(xq + (int64_t)s * QT + 272);
        const __mmask32 md = rb == 16 ? 0xFFFF : ((__mmask32)1 << rb) - 1;
        for (int i = 0; i < QR; i++) {
            const unsigned char *b = r[i] + off + nch * cb;
            __builtin_prefetch(b + DRT_PF_ROWS * rowb, 0, DRT_PF_LOCALITY);
            /* 256 sum(w a) + sum(w b) per block: under 2^31 (32 * 255 * 127 * 257);
             * q4_0's (32 * 15 * 127 * 257) is exact in f32, q8_0's is rounded
             * to f32 (relative 6e-8) */
            const __m512i t = _mm512_add_epi32(_mm512_slli_epi32(ia[i], 8), ib[i]);
            const __m512 d = _mm512_cvtph_ps(rb == 16 ? _mm256_loadu_si256((const __m256i *)b)
                                                      : _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(md, b)));
            acc[i] = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_cvtepi32_ps(t), sx, bias), d, acc[i]);
        }
    }
    for (int i = 0; i < n4; i++) y[n + i] = scale * _mm512_reduce_add_ps(acc[i]);
}

/* The same for TT x rows (2..4, a constant after inlining) and two weight
 * rows n, n + 1 (n2 of them, 1..2): each weight chunk is loaded and its
 * nibbles split once for both rows' TT dot products, and each x row's
 * levels once for both weight rows; 24 accumulators stay in registers. xq
 * holds TT prepared x rows, xs floats apart. y is (TT, N). */
QDOT_FN void qt_rows_tt(float *y, const float *xq, int64_t xs, const void *w, drt_dtype dt, int64_t n, int n2, int TT,
                        int N, int K, float scale, int X8) {
    const int q8 = dt == DRT_Q8_0, nb = K / DRT_QK, ns = qt_sblocks(K), nch = q8 ? 8 : 4;
    const int64_t bs = wbytes(dt, DRT_QK), rowb = nb * bs;
    const __m512i m4 = _mm512_set1_epi8(0x0F), x80 = _mm512_set1_epi8((char)0x80);
    const unsigned char *r[2] = {(const unsigned char *)w + n * rowb, (const unsigned char *)w + (n + (n2 > 1)) * rowb};
    __m512 acc[2][4];
    for (int i = 0; i < 2; i++)
        for (int t = 0; t < TT; t++) acc[i][t] = _mm512_setzero_ps();
    for (int s = 0; s < ns; s++) {
        const int rb = qt_sb_blocks(nb, s);
        const __mmask64 mv = rb == 16 ? ~(__mmask64)0 : ((__mmask64)1 << (4 * rb)) - 1;
        const int64_t off = 16 * s * bs, cb = 4 * rb;
        __m512i ia[2][4], ib[2][4];
        for (int i = 0; i < 2; i++)
            for (int t = 0; t < TT; t++) ia[i][t] = ib[i][t] = _mm512_setzero_si512();
        for (int c = 0; c < nch; c++) {
            __m512i lo[2], hi[2];
            for (int i = 0; i < 2; i++) {
                const unsigned char *b = r[i] + off + c * cb;
                __builtin_prefetch(b + DRT_PF_ROWS * rowb, 0, DRT_PF_LOCALITY);
                const __m512i wv = rb == 16 ? _mm512_loadu_si512(b) : _mm512_maskz_loadu_epi8(mv, b);
                if (q8) {
                    lo[i] = _mm512_xor_si512(wv, x80);
                    hi[i] = lo[i];
                } else {
                    lo[i] = _mm512_and_si512(wv, m4);
                    hi[i] = _mm512_and_si512(_mm512_srli_epi16(wv, 4), m4);
                }
            }
            for (int t = 0; t < TT; t++) {
                const int8_t *q = (const int8_t *)(xq + t * xs + (int64_t)s * QT);
                if (q8) {
                    const __m512i xa = _mm512_loadu_si512(q + 128 * c), xb = _mm512_loadu_si512(q + 128 * c + 64);
                    for (int i = 0; i < 2; i++) {
                        ia[i][t] = _mm512_dpbusd_epi32(ia[i][t], lo[i], xa);
                        if (!X8) ib[i][t] = _mm512_dpbusd_epi32(ib[i][t], lo[i], xb);
                    }
                } else {
                    const int8_t *qc = q + 256 * c;
                    const __m512i xal = _mm512_loadu_si512(qc), xah = _mm512_loadu_si512(qc + 64);
                    const __m512i xbl = _mm512_loadu_si512(qc + 128), xbh = _mm512_loadu_si512(qc + 192);
                    for (int i = 0; i < 2; i++) {
                        ia[i][t] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(ia[i][t], lo[i], xal), hi[i], xah);
                        if (!X8) ib[i][t] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(ib[i][t], lo[i], xbl), hi[i], xbh);
                    }
                }
            }
        }
        const __mmask32 md = rb == 16 ? 0xFFFF : ((__mmask32)1 << rb) - 1;
        for (int i = 0; i < 2; i++) {
            const unsigned char *b = r[i] + off + nch * cb;
            const __m512 d = _mm512_cvtph_ps(rb == 16 ? _mm256_loadu_si256((const __m256i *)b)
                                                      : _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(md, b)));
            for (int t = 0; t < TT; t++) {
                const float *xt = xq + t * xs + (int64_t)s * QT;
                const __m512i u = _mm512_add_epi32(_mm512_slli_epi32(ia[i][t], 8), ib[i][t]);
                acc[i][t] = _mm512_fmadd_ps(
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), _mm512_loadu_ps(xt + 256), _mm512_loadu_ps(xt + 272)), d,
                    acc[i][t]);
            }
        }
    }
    for (int i = 0; i < n2; i++)
        for (int t = 0; t < TT; t++) y[(int64_t)t * N + n + i] = scale * _mm512_reduce_add_ps(acc[i][t]);
}

/* weight rows n.. (n4, 1..4) against T prepared x rows (xs floats apart):
 * qt_rows for one x row, else pairs of weight rows with up to 4 x rows a pass */
QDOT_FN void qt_rows_any(float *y, const float *xq, int64_t xs, const void *w, drt_dtype dt, int64_t n, int n4, int T,
                         int N, int K, float scale, int x8) {
    if (T == 1) {
#define QT_1(DT, X) qt_rows(y, xq, w, DT, n, n4, K, scale, X, qt_group(1, X))
        if (dt == DRT_Q8_0)
            x8 ? QT_1(DRT_Q8_0, 1) : QT_1(DRT_Q8_0, 0);
        else
            x8 ? QT_1(DRT_Q4_0, 1) : QT_1(DRT_Q4_0, 0);
#undef QT_1
        return;
    }
    for (int i = 0; i < n4; i += 2) {
        const int n2 = n4 - i < 2 ? n4 - i : 2;
        for (int t0 = 0; t0 < T; t0 += 4) {
            const int tt = T - t0 < 4 ? T - t0 : 4;
            float *yt = y + (int64_t)t0 * N;
            const float *xt = xq + t0 * xs;
#define QT_TT(DT, TTC)                                                                                                 \
    do {                                                                                                               \
        if (x8)                                                                                                        \
            qt_rows_tt(yt, xt, xs, w, DT, n + i, n2, TTC, N, K, scale, 1);                                             \
        else                                                                                                           \
            qt_rows_tt(yt, xt, xs, w, DT, n + i, n2, TTC, N, K, scale, 0);                                             \
    } while (0)
            if (dt == DRT_Q8_0) {
                if (tt == 4)
                    QT_TT(DRT_Q8_0, 4);
                else if (tt == 3)
                    QT_TT(DRT_Q8_0, 3);
                else if (tt == 2)
                    QT_TT(DRT_Q8_0, 2);
                else
                    QT_TT(DRT_Q8_0, 1);
            } else {
                if (tt == 4)
                    QT_TT(DRT_Q4_0, 4);
                else if (tt == 3)
                    QT_TT(DRT_Q4_0, 3);
                else if (tt == 2)
                    QT_TT(DRT_Q4_0, 2);
                else
                    QT_TT(DRT_Q4_0, 1);
            }
#undef QT_TT
        }
    }
}

/* The GEMV's split (contiguous column ranges); each thread prepares the x
 * rows of the batches its range touches in its own scratch. */
QDOT_ATTR static void gemv_qdot(const cpu_mm_args *a, int ith, int nth) {
    const int N = a->N, K = a->K;
    int64_t lo, hi;
    const int grp = a->wpack ? qt_group(a->T, a->x8) : 4;
    cpu_split((int64_t)a->B * N, grp, ith, nth, &lo, &hi);
    float *xq = a->scratch[ith];
    int prepared = -1;
    for (int64_t c = lo; c < hi;) {
        const int b = (int)(c / N);
        const int64_t n = c % N;
        int64_t n4 = hi - c < grp ? hi - c : grp;
        if (N - n < n4) n4 = N - n;
        const int64_t xs = (int64_t)qt_sblocks(K) * QT; /* a repacked x row's floats */
        if (b != prepared) {
            if (a->wpack)
                for (int t = 0; t < a->T; t++)
                    qt_prep_x(xq + t * xs, a->x + ((int64_t)b * a->T + t) * K, K, a->wt, a->x8);
            else
                qdot_prep_x(xq, a->x + (int64_t)b * a->T * K, K, a->T, a->wt, a->x8);
            prepared = b;
        }
        const int64_t bw = (int64_t)b * a->Bw / a->B;
        const void *wb = (const char *)(a->wpack ? a->wpack : a->w) + bw * wbytes(a->wt, (int64_t)N * K);
        float *yb = a->y + (int64_t)b * a->T * N;
        if (a->wpack) {
            qt_rows_any(yb, xq, xs, wb, a->wt, n, (int)n4, a->T, N, K, a->scale, a->x8);
        } else if (a->wt == DRT_Q8_0) {
            QDOT_T(DRT_Q8_0)
        } else {
            QDOT_T(DRT_Q4_0)
        }
        c += n4;
    }
}

/* Rows [lo, hi) of a q8_0 / q4_0 weight (K columns), from the checkpoint's
 * layout at src to qt_rows' at dst (the comment above qt_rows) */
static void qt_pack_rows(unsigned char *dst, const unsigned char *src, drt_dtype wt, int64_t lo, int64_t hi, int K) {
    const int q8 = wt == DRT_Q8_0, nb = K / DRT_QK, nch = q8 ? 8 : 4;
    const int64_t bs = wbytes(wt, DRT_QK), rowb = nb * bs;
    for (int64_t row = lo; row < hi; row++)
        for (int s = 0; s < qt_sblocks(K); s++) {
            const int rb = qt_sb_blocks(nb, s);
            const unsigned char *in = src + row * rowb + 16 * s * bs;
            unsigned char *out = dst + row * rowb + 16 * s * bs;
            for (int j = 0; j < rb; j++) {
                for (int c = 0; c < nch; c++) memcpy(out + 4 * (c * rb + j), in + j * bs + 2 + 4 * c, 4);
                memcpy(out + nch * 4 * rb + 2 * j, in + j * bs, 2);
            }
        }
}

/* The inverse of qt_pack_rows for the blocks [b0, b0 + nb_out) of one row:
 * from the repacked row at src back to the checkpoint's block layout at dst
 * (the GEMM widens them from there, so a repacked weight's original is
 * never read again) */
static void qt_unpack_blocks(unsigned char *dst, const unsigned char *src, drt_dtype wt, int K, int b0, int nb_out) {
    const int q8 = wt == DRT_Q8_0, nb = K / DRT_QK, nch = q8 ? 8 : 4;
    const int64_t bs = wbytes(wt, DRT_QK);
    for (int i = 0; i < nb_out; i++) {
        const int blk = b0 + i, s = blk / 16, j = blk % 16, rb = qt_sb_blocks(nb, s);
        const unsigned char *in = src + 16 * s * bs;
        unsigned char *out = dst + i * bs;
        for (int c = 0; c < nch; c++) memcpy(out + 2 + 4 * c, in + 4 * (c * rb + j), 4);
        memcpy(out, in + nch * 4 * rb + 2 * j, 2);
    }
}

void KFN(cpu_mm_pack)(void *args, int ith, int nth) {
    const cpu_pack_args *p = args;
    int64_t lo, hi;
    cpu_split(p->rows, 1, ith, nth, &lo, &hi);
    qt_pack_rows(p->dst, p->src, p->wt, lo, hi, p->K);
}
#endif

static int use_qdot(const cpu_mm_args *a) {
    return a->qdot && (a->wt == DRT_Q8_0 || a->wt == DRT_Q4_0);
}

VINL void gemv_rows8_dt(float *y, const float *x, const void *w, drt_dtype dt, int64_t n, int K, float scale) {
    if (dt == DRT_F16)
        gemv_rows8_f16(y, x, w, n, K, scale);
    else if (dt == DRT_BF16)
        gemv_rows8_bf16(y, x, w, n, K, scale);
    else
        gemv_rows8_f32(y, x, w, n, K, scale);
}

/* weight rows n.. (nr: at most 4, or GEMV_R where tt == 1, gemv_group)
 * against x rows 0..tt (tt <= GEMV_T), tt a constant */
VINL void gemv_pass(float *y, const float *x, const void *w, drt_dtype dt, int64_t n, int nr, int tt, int N, int K,
                    float scale) {
#define GEMV_PASS(TT)                                                                                                  \
    if (dt == DRT_Q8_0 || dt == DRT_Q4_0)                                                                              \
        gemv_rows_q(y, x, w, dt, n, nr, TT, N, K, scale);                                                              \
    else if (TT == 1 && nr == GEMV_R)                                                                                  \
        gemv_rows8_dt(y, x, w, dt, n, K, scale);                                                                       \
    else if (nr > 4) {                                                                                                 \
        gemv_rows(y, x, w, dt, n, 4, TT, N, K, scale);                                                                 \
        gemv_rows(y, x, w, dt, n + 4, nr - 4, TT, N, K, scale);                                                        \
    } else                                                                                                             \
        gemv_rows(y, x, w, dt, n, nr, TT, N, K, scale);                                                                \
    break;
    switch (tt) {
    case 1: GEMV_PASS(1)
    case 2: GEMV_PASS(2)
    case 3: GEMV_PASS(3)
    case 4: GEMV_PASS(4)
    case 5: GEMV_PASS(5)
    case 6: GEMV_PASS(6)
    case 7: GEMV_PASS(7)
    default: GEMV_PASS(8)
    }
#undef GEMV_PASS
}

/* weight rows a group streams at once: GEMV_R for f32/f16/bf16 against
 * one x row (gemv_rows8), else 4 */
static int gemv_group(drt_dtype dt, int T) {
    return dt != DRT_Q8_0 && dt != DRT_Q4_0 && T == 1 ? GEMV_R : 4;
}

/* Output columns [lo, hi) of every batch: a group of weight rows at a
 * time, against all T x rows in passes of GEMV_T (the group stays in L1) */
VINL void gemv_range(const cpu_mm_args *a, int64_t lo, int64_t hi, drt_dtype dt) {
    const int N = a->N, K = a->K, T = a->T, rr = gemv_group(dt, T);
    for (int64_t c = lo; c < hi;) {
        const int b = (int)(c / N);
        const int64_t n = c % N;
        int64_t nr = hi - c < rr ? hi - c : rr;
        if (N - n < nr) nr = N - n;
        const int64_t bw = (int64_t)b * a->Bw / a->B;
        const void *wb = (const char *)a->w + bw * wbytes(dt, (int64_t)N * K);
        float *y = a->y + (int64_t)b * T * N;
        const float *x = a->x + (int64_t)b * T * K;
        for (int t0 = 0; t0 < T; t0 += GEMV_T)
            gemv_pass(y + (int64_t)t0 * N, x + (int64_t)t0 * K, wb, dt, n, (int)nr, T - t0 < GEMV_T ? T - t0 : GEMV_T,
                      N, K, a->scale);
        c += nr;
    }
}

/* Threads split the columns into contiguous halves (thirds, ...): each
 * streams one linear range of weight rows, which the prefetchers follow
 * best (chunks handed out from a shared counter measured slower). */
static void gemv(const cpu_mm_args *a, int ith, int nth) {
#if defined(DRT_ISA_avx512)
    if (use_qdot(a)) {
        gemv_qdot(a, ith, nth);
        return;
    }
#endif
    int64_t lo, hi;
    cpu_split((int64_t)a->B * a->N, gemv_group(a->wt, a->T), ith, nth, &lo, &hi);
    if (a->wt == DRT_F16)
        gemv_range(a, lo, hi, DRT_F16);
    else if (a->wt == DRT_BF16)
        gemv_range(a, lo, hi, DRT_BF16);
    else if (a->wt == DRT_Q8_0)
        gemv_range(a, lo, hi, DRT_Q8_0);
    else if (a->wt == DRT_Q4_0)
        gemv_range(a, lo, hi, DRT_Q4_0);
    else
        gemv_range(a, lo, hi, DRT_F32);
}

/* ---- GEMM ------------------------------------------------------------------ */

/* bp (kc, NR): columns n0..n0+NR of w^T, rows k0..k0+kc, widened to f32;
 * columns past N are zero. */
VINL void pack_w(float *bp, const cpu_mm_args *a, const void *wb, int64_t n0, int k0, int kc, drt_dtype dt) {
    const int N = a->N, K = a->K;
    const int nn = N - n0 < NR ? (int)(N - n0) : NR;
    if (!a->trans_w) {
        /* w (N,K): row n is contiguous in k; widened a vector at a time,
         * then stored down the panel's column j */
        float tmp[KC];
        for (int j = 0; j < nn; j++) {
            const int64_t row = (n0 + j) * K + k0;
            int k = 0;
            for (; k + VL <= kc; k += VL) vstore(tmp + k, vload_w(wb, row + k, dt));
            for (; k < kc; k++) tmp[k] = load_w1(wb, row + k, dt);
            for (k = 0; k < kc; k++) bp[k * NR + j] = tmp[k];
        }
    } else {
        /* w (K,N): row k is contiguous in n */
        for (int k = 0; k < kc; k++) {
            const int64_t row = (int64_t)(k0 + k) * N + n0;
            if (nn == NR) {
                for (int v = 0; v < NV; v++) vstore(bp + k * NR + v * VL, vload_w(wb, row + v * VL, dt));
            } else {
                for (int j = 0; j < nn; j++) bp[k * NR + j] = load_w1(wb, row + j, dt);
            }
        }
    }
    if (nn < NR)
        for (int k = 0; k < kc; k++)
            for (int j = nn; j < NR; j++) bp[k * NR + j] = 0.0f;
}

/* ap (kc, MR): rows m0..m0+MR of x (rows past T are zero), columns
 * k0..k0+kc, one MR-row sliver */
static void pack_x(float *ap, const float *x, int K, int T, int m0, int k0, int kc) {
    const int rows = T - m0 < MR ? T - m0 : MR;
    for (int r = 0; r < rows; r++) {
        const float *src = x + (int64_t)(m0 + r) * K + k0;
        for (int k = 0; k < kc; k++) ap[k * MR + r] = src[k];
    }
    for (int r = rows; r < MR; r++)
        for (int k = 0; k < kc; k++) ap[k * MR + r] = 0.0f;
}

/* c (mr, nr) of row stride ldc (mr <= MR, nr <= NR) = (first ? 0 : c) + acc,
 * then times scale when last */
VINL void store_tile(vf acc[MR][NV], float *c, int64_t ldc, int first, int last, float scale, int mr, int nr) {
    const vf sc = vset1(scale);
    if (mr == MR && nr == NR) {
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) {
                float *cp = c + r * ldc + v * VL;
                vf s = first ? acc[r][v] : vadd(acc[r][v], vload(cp));
                vstore(cp, last ? vmul(s, sc) : s);
            }
        return;
    }
    float tmp[MR * NR];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) vstore(tmp + r * NR + v * VL, acc[r][v]);
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) {
            float s = first ? tmp[r * NR + j] : tmp[r * NR + j] + c[r * ldc + j];
            c[r * ldc + j] = last ? s * scale : s;
        }
}

/* c (mr, nr) += ap . bp as store_tile says; ap (kc, MR), bp (kc, NR) */
static void ukernel(int kc, const float *restrict ap, const float *restrict bp, float *c, int64_t ldc, int first,
                    int last, float scale, int mr, int nr) {
    vf acc[MR][NV];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) acc[r][v] = vzero();
    for (int k = 0; k < kc; k++) {
        vf b[NV];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) b[v] = vload(bp + k * NR + v * VL);
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            vf ar = vset1(ap[k * MR + r]);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) acc[r][v] = vfma(ar, b[v], acc[r][v]);
        }
    }
    store_tile(acc, c, ldc, first, last, scale, mr, nr);
}

#if defined(DRT_ISA_avx512)
/* ---- the bf16 mode (DIFFRT_CPU_PRECISION=bf16, AVX512-BF16 CPUs only) ----------
 * x and the weight panel are rounded to bf16 and packed as pairs along k;
 * VDPBF16PS adds two products per f32 lane, twice the FMA's work per
 * instruction. Declared reduced precision (backend.c nmse_bound). Only
 * these functions carry the avx512bf16 target; the backend calls them only
 * on a CPU that has it. */
#define BF16_FN __attribute__((target("avx512bf16")))

/* (x0, x1) -> one 32-bit lane: x0 in the low half (the first product) */
static inline uint32_t bf16_pair(float x0, float x1) {
    return (uint32_t)drt_f32_to_bf16(x0) | (uint32_t)drt_f32_to_bf16(x1) << 16;
}

/* ap ((kc+1)/2, MR) pairs of rows m0..m0+MR of x; rows past T are zero */
static void pack_x_bf16(uint32_t *ap, const float *x, int K, int T, int m0, int k0, int kc) {
    const int rows = T - m0 < MR ? T - m0 : MR, kp = (kc + 1) / 2;
    for (int r = 0; r < MR; r++) {
        const float *src = x + (int64_t)(m0 + r) * K + k0;
        for (int k = 0; k < kp; k++)
            ap[k * MR + r] = r < rows ? bf16_pair(src[2 * k], 2 * k + 1 < kc ? src[2 * k + 1] : 0.0f) : 0u;
    }
}

/* bp ((kc+1)/2, NR) pairs of columns n0..n0+NR of w^T (w (N,K) only; the
 * bf16 mode sends trans_w to the f32 path); bf16 weights are copied as they
 * are, f32/f16 ones rounded */
static void pack_w_bf16(uint32_t *bp, const cpu_mm_args *a, const void *wb, int64_t n0, int k0, int kc, drt_dtype dt) {
    const int N = a->N, K = a->K, kp = (kc + 1) / 2;
    const int nn = N - n0 < NR ? (int)(N - n0) : NR;
    float tmp[KC + 1];
    for (int j = 0; j < nn; j++) {
        const int64_t row = (n0 + j) * K + k0;
        if (dt == DRT_BF16) {
            const uint16_t *w = (const uint16_t *)wb + row;
            for (int k = 0; k < kp; k++)
                bp[k * NR + j] = (uint32_t)w[2 * k] | (2 * k + 1 < kc ? (uint32_t)w[2 * k + 1] << 16 : 0u);
            continue;
        }
        int k = 0;
        for (; k + VL <= kc; k += VL) vstore(tmp + k, vload_w(wb, row + k, dt));
        for (; k < kc; k++) tmp[k] = load_w1(wb, row + k, dt);
        tmp[kc] = 0.0f;
        for (k = 0; k < kp; k++) bp[k * NR + j] = bf16_pair(tmp[2 * k], tmp[2 * k + 1]);
    }
    for (int k = 0; k < kp; k++)
        for (int j = nn; j < NR; j++) bp[k * NR + j] = 0u;
}

BF16_FN static void ukernel_bf16(int kc, const uint32_t *restrict ap, const uint32_t *restrict bp, float *c,
                                 int64_t ldc, int first, int last, float scale, int mr, int nr) {
    const int kp = (kc + 1) / 2;
    vf acc[MR][NV];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) acc[r][v] = vzero();
    for (int k = 0; k < kp; k++) {
        __m512bh b[NV];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) b[v] = (__m512bh)_mm512_loadu_si512(bp + k * NR + v * VL);
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            const __m512bh ar = (__m512bh)_mm512_set1_epi32((int)ap[k * MR + r]);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], ar, b[v]);
        }
    }
    store_tile(acc, c, ldc, first, last, scale, mr, nr);
}
#endif

/* The packed x of every batch, shared by all tasks: per batch, per K block
 * k0, per sliver s: (kc, MR) floats at xp_offset(). */
static int64_t slivers(int T) {
    return (T + MR - 1) / MR;
}
static int64_t xp_batch(const cpu_mm_args *a) {
    return slivers(a->T) * MR * (int64_t)a->K;
}
static int64_t xp_offset(const cpu_mm_args *a, int b, int k0, int64_t s) {
    const int kc = a->K - k0 < KC ? a->K - k0 : KC;
    return b * xp_batch(a) + slivers(a->T) * MR * (int64_t)k0 + s * MR * kc;
}

/* phase 1: threads pack disjoint (batch, K block, sliver) units */
static void pack_all_x(const cpu_mm_args *a, int ith, int nth) {
    const int64_t ns = slivers(a->T), nk = (a->K + KC - 1) / KC;
    int64_t lo, hi;
    cpu_split((int64_t)a->B * nk * ns, 1, ith, nth, &lo, &hi);
    for (int64_t u = lo; u < hi; u++) {
        const int b = (int)(u / (nk * ns)), k0 = (int)(u / ns % nk) * KC;
        const int64_t s = u % ns;
        const int kc = a->K - k0 < KC ? a->K - k0 : KC;
        float *dst = a->xpack + xp_offset(a, b, k0, s);
        const float *xb = a->x + (int64_t)b * a->T * a->K;
#if HAVE_BF16
        if (a->bf16) {
            pack_x_bf16((uint32_t *)dst, xb, a->K, a->T, (int)s * MR, k0, kc);
            continue;
        }
#endif
        pack_x(dst, xb, a->K, a->T, (int)s * MR, k0, kc);
    }
}

/* phase 2, one task: columns nblk*NB*NR .. +NB*NR of batch b; for each K
 * block the task's NB weight panels are packed once (in L2) and every x
 * sliver runs against them (the sliver stays in L1 across the panels) */
static void gemm_task(const cpu_mm_args *a, float *bp, int b, int64_t nblk, drt_dtype dt) {
    const int N = a->N, K = a->K, T = a->T;
    const int64_t bw = (int64_t)b * a->Bw / a->B;
    const void *wb = (const char *)a->w + bw * wbytes(dt, (int64_t)N * K);
    float *yb = a->y + (int64_t)b * T * N;
    const int64_t n_first = nblk * NB * NR, ns = slivers(T);
    int np = 0;
    for (int p = 0; p < NB && n_first + (int64_t)p * NR < N; p++) np++;
    for (int k0 = 0; k0 < K; k0 += KC) {
        const int kc = K - k0 < KC ? K - k0 : KC;
        for (int p = 0; p < np; p++) {
            float *panel = bp + (int64_t)p * KC * NR;
            const cpu_mm_args *pa = a;
            const void *pw = wb;
            int64_t pn0 = n_first + (int64_t)p * NR;
            int pk0 = k0;
#if defined(DRT_ISA_avx512)
            /* a repacked q8_0 / q4_0 weight: the panel's rows, blocks
             * k0/32.., back in the checkpoint's layout in qb, read as a
             * (rows, kc) matrix */
            cpu_mm_args sub;
            unsigned char qb[NR * (KC / DRT_QK) * 34];
            if (a->wpack && (dt == DRT_Q8_0 || dt == DRT_Q4_0)) {
                const int64_t rowb = wbytes(dt, K);
                const int rows = N - pn0 < NR ? (int)(N - pn0) : NR;
                const unsigned char *src = (const unsigned char *)a->wpack + bw * wbytes(dt, (int64_t)N * K);
                for (int r = 0; r < rows; r++)
                    qt_unpack_blocks(qb + r * wbytes(dt, kc), src + (pn0 + r) * rowb, dt, K, k0 / DRT_QK, kc / DRT_QK);
                sub = *a;
                sub.N = rows;
                sub.K = kc;
                pa = &sub, pw = qb, pn0 = 0, pk0 = 0;
            }
#endif
#if HAVE_BF16
            if (a->bf16) {
                pack_w_bf16((uint32_t *)panel, pa, pw, pn0, pk0, kc, dt);
                continue;
            }
#endif
            pack_w(panel, pa, pw, pn0, pk0, kc, dt);
        }
        for (int64_t s = 0; s < ns; s++) {
            const float *ap = a->xpack + xp_offset(a, b, k0, s);
            const int mr = T - (int)s * MR < MR ? T - (int)s * MR : MR;
            for (int p = 0; p < np; p++) {
                const int64_t n0 = n_first + (int64_t)p * NR;
                const int nr = N - n0 < NR ? (int)(N - n0) : NR;
                float *cp = yb + s * MR * N + n0;
                const float *panel = bp + (int64_t)p * KC * NR;
#if HAVE_BF16
                if (a->bf16) {
                    ukernel_bf16(kc, (const uint32_t *)ap, (const uint32_t *)panel, cp, N, k0 == 0, k0 + kc == K,
                                 a->scale, mr, nr);
                    continue;
                }
#endif
                ukernel(kc, ap, panel, cp, N, k0 == 0, k0 + kc == K, a->scale, mr, nr);
            }
        }
    }
}

static void gemm(cpu_mm_args *a, int ith) {
    const int64_t nblks = ((int64_t)a->N + NB * NR - 1) / (NB * NR);
    const int64_t ntasks = (int64_t)a->B * nblks;
    for (;;) {
        const int64_t t = atomic_fetch_add(&a->next_task, 1);
        if (t >= ntasks) break;
        const int b = (int)(t / nblks);
        if (a->wt == DRT_F16)
            gemm_task(a, a->scratch[ith], b, t % nblks, DRT_F16);
        else if (a->wt == DRT_BF16)
            gemm_task(a, a->scratch[ith], b, t % nblks, DRT_BF16);
        else if (a->wt == DRT_Q8_0)
            gemm_task(a, a->scratch[ith], b, t % nblks, DRT_Q8_0);
        else if (a->wt == DRT_Q4_0)
            gemm_task(a, a->scratch[ith], b, t % nblks, DRT_Q4_0);
        else
            gemm_task(a, a->scratch[ith], b, t % nblks, DRT_F32);
    }
}

static int use_gemv(const cpu_mm_args *a) {
    return a->T <= GEMV_MAX_T && !a->trans_w;
}

/* Runs as two pool jobs for the GEMM path: phase 0 packs x (a->phase = 0),
 * phase 1 computes; the GEMV path needs only phase 1. */
void KFN(cpu_matmul)(void *args, int ith, int nth) {
    cpu_mm_args *a = args;
    if (a->K == 0) {
        int64_t lo, hi;
        cpu_split((int64_t)a->B * a->T * a->N, 1, ith, nth, &lo, &hi);
        memset(a->y + lo, 0, sizeof(float) * (size_t)(hi - lo));
        return;
    }
    if (use_gemv(a))
        gemv(a, ith, nth);
    else if (a->phase == 0)
        pack_all_x(a, ith, nth);
    else
        gemm(a, ith);
}

/* per-thread scratch: NB packed weight panels, or the GEMV's prepared x on
 * the int8-dot path */
int64_t KFN(cpu_mm_scratch_floats)(const cpu_mm_args *a) {
    if (use_gemv(a)) {
        if (!use_qdot(a)) return 0;
        int64_t f = (int64_t)a->T * qdot_row_floats(a->K, a->wt);
#if defined(DRT_ISA_avx512)
        if (a->wpack) f = (int64_t)a->T * qt_sblocks(a->K) * QT;
#endif
        return f;
    }
    return (int64_t)NB * KC * NR;
}

/* shared: packed x (0 when the GEMV path runs, or K == 0) */
int64_t KFN(cpu_mm_xpack_floats)(const cpu_mm_args *a) {
    return use_gemv(a) || a->K == 0 ? 0 : (int64_t)a->B * xp_batch(a);
}

int KFN(cpu_mm_phases)(const cpu_mm_args *a) {
    return use_gemv(a) || a->K == 0 ? 1 : 2;
}
