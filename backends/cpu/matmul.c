/* Fast CPU MATMUL (docs/design.md section 3), compiled once per ISA (cpu_fast.h).
 * Reference: backends/ref/matmul.c. y (B,T,N) = scale * x (B,T,K) w^T, w of
 * dtype f32/f16/bf16 read in place (nn.Linear layout (N,K), or (K,N) when
 * trans_w), accumulated in f32.
 *
 * Two paths:
 *  - GEMV (T <= GEMV_T, trans_w = 0; decode): threads split the B*N output
 *    columns; each weight row is streamed once, widened to f32 in registers,
 *    and dotted with every x row. Napkin math: the weights dominate, N*K
 *    elements read once per call: memory bound.
 *  - GEMM (prefill): x is packed once into MR-row slivers, KC deep, shared
 *    by all threads (phase 0). Then threads take tasks (batch, block of NB
 *    panels of NR weight columns) from a shared counter; per K block a task
 *    packs its panels widened to f32 (the f16/bf16 -> f32 conversion happens
 *    here, a panel at a time, in cache; never a whole f32 copy of a weight)
 *    and runs an MR x NR register-blocked micro-kernel over every sliver.
 *    Napkin math: 2*B*T*N*K flops. */
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
#define NV 2          /* vectors per micro-tile row */
#define NR (NV * VL)  /* columns per panel */
#define KC 256        /* depth of one packed block */
#define NB 4          /* panels per task */
#define GEMV_T 8      /* up to this many x rows: the GEMV path */
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
#define HAVE_BF16 1   /* the bf16 mode's kernels (below) */
#else
#define HAVE_BF16 0
#endif

/* ---- GEMV: T <= GEMV_T, w (N,K) ------------------------------------------------ */

/* y[t*N + n + i] for i < 4 (n4 rows, 1..4) and t < TT: the dot products of
 * weight rows n..n+n4 with x rows 0..TT. TT and dt are constants after inlining. */
VINL void gemv_rows(float *y, const float *x, const void *w, drt_dtype dt, int64_t n, int n4, int TT,
                    int N, int K, float scale) {
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

/* The same for q8_0 / q4_0 rows, a block at a time: the block's 32 values
 * times x summed in f32, then scaled by the block's d once (one FMA), so a
 * block costs its integer widening, 32/VL FMAs and one scale per x row.
 * The sum order differs from the f32 path's (per block, then scaled), well
 * within the f32 bound. */
VINL void gemv_rows_q(float *y, const float *x, const void *w, drt_dtype dt, int64_t n, int n4, int TT,
                      int N, int K, float scale) {
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

/* The bf16-dot q4_0 GEMV below (avx512 only; cpu_mm_args.qdot is 0
 * elsewhere) reads x prepared per row: quads of blocks (QX4 floats each)
 * while four blocks remain, then block pairs (QX floats each). */
enum { QX = 80, QX4 = 144 };

static int qdot_quads(int K) { return K / DRT_QK / 4; }
static int qdot_pairs(int K) { return (K / DRT_QK - 4 * qdot_quads(K) + 1) / 2; }
static int64_t qdot_row_floats(int K) { return (int64_t)qdot_quads(K) * QX4 + (int64_t)qdot_pairs(K) * QX; }

#if defined(DRT_ISA_avx512)
/* ---- q4_0 GEMV on bf16 dot products (CPUs with AVX512-BF16 and VBMI) -------
 * The block kernel above widens every weight to f32 and is bound by that
 * widening, not by memory (1 thread, cache-resident 768 x 2048: 15 G
 * weights/s, against 24 for f16). Here a nibble n becomes the bf16 1 + n/16
 * (bits 0x3F80 | n << 3), exactly: four blocks (72 bytes, two loads) take
 * one byte permute, then a shift and a ternary-logic op per vector of 32
 * nibbles; a last pair of blocks takes a zero-extending byte permute and two
 * of each (27 G weights/s on the same shape). q8_0 stays on the block
 * kernel: its bytes need a real conversion, and the same scheme measured
 * slower there (16 against 19 G weights/s).
 * x is split once per call into bf16 hi + lo parts (x - hi - lo is under
 * 2^-16 |x|) laid out to match the weights' words, so VDPBF16PS computes
 * the block dots in f32 within the f32 bound. x is scaled by 16 so the
 * dot is sum (16 + n) x; the 24 sum x that the bias adds (q = n - 8)
 * is removed by starting each sum at -1.5 sum(16 x) of the lane.
 * Each f32 lane of a sum belongs to one block (lanes 4j..4j+3 to block j of
 * a quad, 8j..8j+7 of a pair), so one vector of the f16 scales finishes a
 * quad or a pair with one FMA.
 * Only these functions carry the target attributes; the backend sets
 * cpu_mm_args.qdot only on a CPU that has both (DIFFRT_CPU_QDOT=0: off). */
#define QDOT_ATTR __attribute__((target("avx512bf16,avx512vbmi")))
#define QDOT_FN static inline __attribute__((always_inline, target("avx512bf16,avx512vbmi")))

/* v rounded to bf16 (16 values), and that rounding's f32 value */
QDOT_FN __m256i qdot_bf16(__m512 v, __m512 *back) {
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
    *back = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return h;
}

QDOT_FN __m512i qdot_cat(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

/* lane j of the result: a[2j] + a[2j+1] for j < 8, b[2j-16] + b[2j-15] after */
QDOT_FN __m512 qdot_pairsum(__m512 a, __m512 b) {
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    return _mm512_add_ps(_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b));
}

/* 16 x values split: bf16 hi and lo (h, l), and hi + lo as f32 (s) */
QDOT_FN void qdot_split(__m512 v, __m256i *h, __m256i *l, __m512 *s) {
    __m512 hf, lf;
    *h = qdot_bf16(v, &hf);
    *l = qdot_bf16(_mm512_sub_ps(v, hf), &lf);
    *s = _mm512_add_ps(hf, lf);
}

/* A q4_0 quad of x (128 values, scaled by 16) -> QX4 floats: xh[e], xl[e]
 * for e = 0..3, then -corr. Word m of vector e pairs with value
 * 2 (m % 8) + (0, 16, 1, 17)[e] of block m / 8. */
QDOT_FN void qdot_prep_quad(float *o, const float *xr) {
    const __m512 mul = _mm512_set1_ps(16.0f);
    /* word selectors over two blocks' 32-word vectors (second one: +32) */
    static const uint16_t ia[32] = {0,  2,  4,  6,  8,  10, 12, 14, 32, 34, 36, 38, 40, 42, 44, 46,
                                    16, 18, 20, 22, 24, 26, 28, 30, 48, 50, 52, 54, 56, 58, 60, 62};
    const __m512i sa = _mm512_loadu_si512(ia), sb = _mm512_add_epi16(sa, _mm512_set1_epi16(1));
    __m512i H[4], L[4];
    __m512 S[4];
    for (int j = 0; j < 4; j++) {
        __m256i h0, h1, l0, l1;
        __m512 s0, s1;
        qdot_split(_mm512_mul_ps(mul, _mm512_loadu_ps(xr + 32 * j)), &h0, &l0, &s0);
        qdot_split(_mm512_mul_ps(mul, _mm512_loadu_ps(xr + 32 * j + 16)), &h1, &l1, &s1);
        H[j] = qdot_cat(h0, h1); /* word k: value k of block j */
        L[j] = qdot_cat(l0, l1);
        S[j] = _mm512_add_ps(s0, s1); /* lane i: values i and i + 16 */
    }
    for (int part = 0; part < 2; part++) {
        const __m512i *V = part ? L : H;
        /* 0-7 block a even values < 16, 8-15 block b, 16-31 the same >= 16 */
        const __m512i a01 = _mm512_permutex2var_epi16(V[0], sa, V[1]), a23 = _mm512_permutex2var_epi16(V[2], sa, V[3]);
        const __m512i b01 = _mm512_permutex2var_epi16(V[0], sb, V[1]), b23 = _mm512_permutex2var_epi16(V[2], sb, V[3]);
        float *d = o + part * 64;
        _mm512_storeu_si512(d, _mm512_shuffle_i64x2(a01, a23, 0x44));      /* e0: 2q     */
        _mm512_storeu_si512(d + 16, _mm512_shuffle_i64x2(a01, a23, 0xEE)); /* e1: 2q + 16 */
        _mm512_storeu_si512(d + 32, _mm512_shuffle_i64x2(b01, b23, 0x44)); /* e2: 2q + 1  */
        _mm512_storeu_si512(d + 48, _mm512_shuffle_i64x2(b01, b23, 0xEE)); /* e3: 2q + 17 */
    }
    /* lane 4j + q: values 4q..4q+3 and 16+4q..16+4q+3 of block j */
    const __m512 u = qdot_pairsum(qdot_pairsum(S[0], S[1]), qdot_pairsum(S[2], S[3]));
    _mm512_storeu_ps(o + 128, _mm512_mul_ps(_mm512_set1_ps(-1.5f), u));
}

/* A pair of blocks of x (64 values, scaled by 16; two = 0: the first only,
 * the second is zero) -> QX floats: xh0 xh1 xl0 xl1, then -corr. Word m of
 * xh0 / xl0 pairs with value m of the first block's first half (m < 16) or
 * of the second block's (m >= 16); xh1 / xl1 the same for values 16..31. */
QDOT_FN void qdot_prep_pair(float *o, const float *xr, int two) {
    const __m512 mul = _mm512_set1_ps(16.0f);
    __m256i h[4], l[4];
    __m512 s[4];
    for (int i = 0; i < 4; i++) {
        const __m512 v = i < 2 || two ? _mm512_mul_ps(mul, _mm512_loadu_ps(xr + 16 * i)) : _mm512_setzero_ps();
        qdot_split(v, &h[i], &l[i], &s[i]);
    }
    _mm512_storeu_si512(o, qdot_cat(h[0], h[2]));
    _mm512_storeu_si512(o + 16, qdot_cat(h[1], h[3]));
    _mm512_storeu_si512(o + 32, qdot_cat(l[0], l[2]));
    _mm512_storeu_si512(o + 48, qdot_cat(l[1], l[3]));
    /* lane j: the four values its words cover, in either half */
    const __m512 c = qdot_pairsum(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3]));
    _mm512_storeu_ps(o + 64, _mm512_mul_ps(_mm512_set1_ps(-1.5f), c));
}

/* rows 0..T of one batch of x (K values each) -> xq, qdot_row_floats each */
QDOT_FN void qdot_prep_x(float *xq, const float *x, int K, int T) {
    const int nb = K / DRT_QK, nq = qdot_quads(K), np = qdot_pairs(K);
    for (int t = 0; t < T; t++) {
        const float *xr = x + (int64_t)t * K;
        float *o = xq + t * qdot_row_floats(K);
        for (int g = 0; g < nq; g++, o += QX4) qdot_prep_quad(o, xr + g * 4 * DRT_QK);
        for (int g = 0; g < np; g++, o += QX) {
            const int b0 = 4 * nq + 2 * g;
            qdot_prep_pair(o, xr + b0 * DRT_QK, b0 + 1 < nb);
        }
    }
}

/* the q4_0 quad at b (72 bytes) as four vectors of bf16 weights (w[e], as
 * qdot_prep_quad's x) and the f32 scale of each lane */
QDOT_FN void qdot_q4_quad(const unsigned char *b, __m512i w[4], __m512 *d) {
    /* value byte c of block j: quad byte 18 j + 2 + c; block 3's from the
     * second load (which starts at byte 8): index 64 + 48 + c */
    static const uint8_t qidx[64] = {
        2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 20,  21,  22,  23,  24,  25,
        26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 38, 39, 40, 41, 42, 43, 44,  45,  46,  47,  48,  49,
        50, 51, 52, 53, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127};
    static const uint16_t didx[32] = {0, 0, 0, 0, 9, 9, 9, 9, 18, 18, 18, 18, 27, 27, 27, 27};
    const __m512i lo = _mm512_loadu_si512(b), hi = _mm512_loadu_si512(b + 8);
    const __m512i p = _mm512_permutex2var_epi8(lo, _mm512_loadu_si512(qidx), hi);
    const __m512i m = _mm512_set1_epi16(0x78), one = _mm512_set1_epi16(0x3F80);
    /* nibble e of each word to bits 3..6, then | 0x3F80: (a & b) | c */
    w[0] = _mm512_ternarylogic_epi32(_mm512_slli_epi16(p, 3), m, one, 0xEA);
    w[1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(p, 1), m, one, 0xEA);
    w[2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(p, 5), m, one, 0xEA);
    w[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(p, 9), m, one, 0xEA);
    *d = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_loadu_si512(didx), lo)));
}

/* the pair of blocks at b (two = 0: only the first exists) as two vectors
 * of bf16 weights (w0: each block's values 0..15, w1: 16..31) and the f32
 * scale of each lane */
QDOT_FN void qdot_q4_pair(const unsigned char *b, int two, __m512i *w0, __m512i *w1, __m512 *d) {
    static const uint8_t qidx[64] = {2,  0, 3,  0, 4,  0, 5,  0, 6,  0, 7,  0, 8,  0, 9,  0, 10, 0, 11, 0, 12, 0,
                                     13, 0, 14, 0, 15, 0, 16, 0, 17, 0, 20, 0, 21, 0, 22, 0, 23, 0, 24, 0, 25, 0,
                                     26, 0, 27, 0, 28, 0, 29, 0, 30, 0, 31, 0, 32, 0, 33, 0, 34, 0, 35, 0};
    static const uint16_t didx[32] = {0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9};
    /* masked: the bytes past the pair are never touched (the end of a mapping) */
    const __m512i raw = _mm512_maskz_loadu_epi8(two ? 0xFFFFFFFFFull : 0x3FFFFull, b);
    /* value byte m of the pair zero-extended into word m */
    const __m512i z = _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, _mm512_loadu_si512(qidx), raw);
    const __m512i m = _mm512_set1_epi16(0x78), one = _mm512_set1_epi16(0x3F80);
    *w0 = _mm512_ternarylogic_epi32(_mm512_slli_epi16(z, 3), m, one, 0xEA);
    *w1 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(z, 1), m, one, 0xEA);
    *d = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_loadu_si512(didx), raw)));
}

QDOT_FN __m512 qdot_dp(__m512 s, __m512i w, const float *x) {
    return _mm512_dpbf16_ps(s, (__m512bh)w, (__m512bh)_mm512_loadu_si512(x));
}

/* y[t*N + n + i] for i < n4 (1..4), t < TT: q4_0 weight rows n.. dotted
 * with the prepared x rows (qdot_prep_x). TT is a constant after inlining. */
QDOT_FN void qdot_rows(float *y, const float *xq, const void *w, int64_t n, int n4, int TT, int N, int K,
                       float scale) {
    const int nb = K / DRT_QK, nq = qdot_quads(K), np = qdot_pairs(K);
    const int64_t bs = 18, rowb = nb * bs, xrow = qdot_row_floats(K);
    __m512 acc[4][GEMV_T];
    for (int i = 0; i < 4; i++)
        for (int t = 0; t < TT; t++) acc[i][t] = _mm512_setzero_ps();
    for (int g = 0; g < nq; g++)
        for (int i = 0; i < n4; i++) {
            const unsigned char *b = (const unsigned char *)w + (n + i) * rowb + g * 4 * bs;
            __builtin_prefetch(b + DRT_PF_ROWS * rowb, 0, DRT_PF_LOCALITY); /* as gemv_rows */
            __builtin_prefetch(b + DRT_PF_ROWS * rowb + 64, 0, DRT_PF_LOCALITY);
            __m512i wq[4];
            __m512 d;
            qdot_q4_quad(b, wq, &d);
            for (int t = 0; t < TT; t++) {
                const float *xp = xq + t * xrow + (int64_t)g * QX4;
                __m512 s = _mm512_loadu_ps(xp + 128);
                for (int e = 0; e < 4; e++) s = qdot_dp(qdot_dp(s, wq[e], xp + 16 * e), wq[e], xp + 64 + 16 * e);
                acc[i][t] = _mm512_fmadd_ps(s, d, acc[i][t]);
            }
        }
    for (int g = 0; g < np; g++) {
        const int b0 = 4 * nq + 2 * g, two = b0 + 1 < nb;
        for (int i = 0; i < n4; i++) {
            const unsigned char *b = (const unsigned char *)w + (n + i) * rowb + b0 * bs;
            __builtin_prefetch(b + DRT_PF_ROWS * rowb, 0, DRT_PF_LOCALITY);
            __m512i w0, w1;
            __m512 d;
            qdot_q4_pair(b, two, &w0, &w1, &d);
            for (int t = 0; t < TT; t++) {
                const float *xp = xq + t * xrow + (int64_t)nq * QX4 + (int64_t)g * QX;
                __m512 s = _mm512_loadu_ps(xp + 64);
                s = qdot_dp(qdot_dp(s, w0, xp), w0, xp + 32);
                s = qdot_dp(qdot_dp(s, w1, xp + 16), w1, xp + 48);
                acc[i][t] = _mm512_fmadd_ps(s, d, acc[i][t]);
            }
        }
    }
    for (int i = 0; i < n4; i++)
        for (int t = 0; t < TT; t++) y[(int64_t)t * N + n + i] = scale * _mm512_reduce_add_ps(acc[i][t]);
}

/* The GEMV's split (contiguous column ranges); each thread prepares the x
 * rows of the batches its range touches in its own scratch. */
QDOT_ATTR static void gemv_qdot(const cpu_mm_args *a, int ith, int nth) {
    const int N = a->N, K = a->K;
    int64_t lo, hi;
    cpu_split((int64_t)a->B * N, 4, ith, nth, &lo, &hi);
    float *xq = a->scratch[ith];
    int prepared = -1;
    for (int64_t c = lo; c < hi;) {
        const int b = (int)(c / N);
        const int64_t n = c % N;
        int64_t n4 = hi - c < 4 ? hi - c : 4;
        if (N - n < n4) n4 = N - n;
        if (b != prepared) {
            qdot_prep_x(xq, a->x + (int64_t)b * a->T * K, K, a->T);
            prepared = b;
        }
        const int64_t bw = (int64_t)b * a->Bw / a->B;
        const void *wb = (const char *)a->w + bw * wbytes(a->wt, (int64_t)N * K);
        float *yb = a->y + (int64_t)b * a->T * N;
        switch (a->T) {
        case 1: qdot_rows(yb, xq, wb, n, (int)n4, 1, N, K, a->scale); break;
        case 2: qdot_rows(yb, xq, wb, n, (int)n4, 2, N, K, a->scale); break;
        case 3: qdot_rows(yb, xq, wb, n, (int)n4, 3, N, K, a->scale); break;
        case 4: qdot_rows(yb, xq, wb, n, (int)n4, 4, N, K, a->scale); break;
        case 5: qdot_rows(yb, xq, wb, n, (int)n4, 5, N, K, a->scale); break;
        case 6: qdot_rows(yb, xq, wb, n, (int)n4, 6, N, K, a->scale); break;
        case 7: qdot_rows(yb, xq, wb, n, (int)n4, 7, N, K, a->scale); break;
        default: qdot_rows(yb, xq, wb, n, (int)n4, 8, N, K, a->scale); break;
        }
        c += n4;
    }
}
#endif

static int use_qdot(const cpu_mm_args *a) { return a->qdot && a->wt == DRT_Q4_0; }

VINL void gemv_range(const cpu_mm_args *a, int64_t lo, int64_t hi, drt_dtype dt, int TT) {
    const int N = a->N, K = a->K;
    for (int64_t c = lo; c < hi;) {
        const int b = (int)(c / N);
        const int64_t n = c % N;
        int64_t n4 = hi - c < 4 ? hi - c : 4;
        if (N - n < n4) n4 = N - n;
        const int64_t bw = (int64_t)b * a->Bw / a->B;
        const void *wb = (const char *)a->w + bw * wbytes(dt, (int64_t)N * K);
        if (dt == DRT_Q8_0 || dt == DRT_Q4_0)
            gemv_rows_q(a->y + (int64_t)b * a->T * N, a->x + (int64_t)b * a->T * K, wb, dt, n, (int)n4, TT, N, K,
                        a->scale);
        else
            gemv_rows(a->y + (int64_t)b * a->T * N, a->x + (int64_t)b * a->T * K, wb, dt, n, (int)n4, TT, N, K,
                      a->scale);
        c += n4;
    }
}

#define GEMV_DT(dt)                                                              \
    switch (a->T) {                                                              \
    case 1: gemv_range(a, lo, hi, dt, 1); break;                                 \
    case 2: gemv_range(a, lo, hi, dt, 2); break;                                 \
    case 3: gemv_range(a, lo, hi, dt, 3); break;                                 \
    case 4: gemv_range(a, lo, hi, dt, 4); break;                                 \
    case 5: gemv_range(a, lo, hi, dt, 5); break;                                 \
    case 6: gemv_range(a, lo, hi, dt, 6); break;                                 \
    case 7: gemv_range(a, lo, hi, dt, 7); break;                                 \
    default: gemv_range(a, lo, hi, dt, 8); break;                                \
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
    cpu_split((int64_t)a->B * a->N, 4, ith, nth, &lo, &hi);
    if (a->wt == DRT_F16) {
        GEMV_DT(DRT_F16)
    } else if (a->wt == DRT_BF16) {
        GEMV_DT(DRT_BF16)
    } else if (a->wt == DRT_Q8_0) {
        GEMV_DT(DRT_Q8_0)
    } else if (a->wt == DRT_Q4_0) {
        GEMV_DT(DRT_Q4_0)
    } else {
        GEMV_DT(DRT_F32)
    }
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
static void ukernel(int kc, const float *restrict ap, const float *restrict bp, float *c, int64_t ldc,
                    int first, int last, float scale, int mr, int nr) {
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
static int64_t slivers(int T) { return (T + MR - 1) / MR; }
static int64_t xp_batch(const cpu_mm_args *a) { return slivers(a->T) * MR * (int64_t)a->K; }
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
#if HAVE_BF16
            if (a->bf16) {
                pack_w_bf16((uint32_t *)panel, a, wb, n_first + (int64_t)p * NR, k0, kc, dt);
                continue;
            }
#endif
            pack_w(panel, a, wb, n_first + (int64_t)p * NR, k0, kc, dt);
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
        if (a->wt == DRT_F16) gemm_task(a, a->scratch[ith], b, t % nblks, DRT_F16);
        else if (a->wt == DRT_BF16) gemm_task(a, a->scratch[ith], b, t % nblks, DRT_BF16);
        else if (a->wt == DRT_Q8_0) gemm_task(a, a->scratch[ith], b, t % nblks, DRT_Q8_0);
        else if (a->wt == DRT_Q4_0) gemm_task(a, a->scratch[ith], b, t % nblks, DRT_Q4_0);
        else gemm_task(a, a->scratch[ith], b, t % nblks, DRT_F32);
    }
}

static int use_gemv(const cpu_mm_args *a) { return a->T <= GEMV_T && !a->trans_w; }

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
    if (use_gemv(a)) gemv(a, ith, nth);
    else if (a->phase == 0) pack_all_x(a, ith, nth);
    else gemm(a, ith);
}

/* per-thread scratch: NB packed weight panels, or the GEMV's prepared x on
 * the bf16-dot path */
int64_t KFN(cpu_mm_scratch_floats)(const cpu_mm_args *a) {
    if (use_gemv(a)) return use_qdot(a) ? (int64_t)a->T * qdot_row_floats(a->K) : 0;
    return (int64_t)NB * KC * NR;
}

/* shared: packed x (0 when the GEMV path runs, or K == 0) */
int64_t KFN(cpu_mm_xpack_floats)(const cpu_mm_args *a) {
    return use_gemv(a) || a->K == 0 ? 0 : (int64_t)a->B * xp_batch(a);
}

int KFN(cpu_mm_phases)(const cpu_mm_args *a) { return use_gemv(a) || a->K == 0 ? 1 : 2; }
