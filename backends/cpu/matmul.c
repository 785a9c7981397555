/* Fast CPU MATMUL (DESIGN.md section 3), compiled once per ISA (cpu_fast.h).
 * Reference: backends/ref/matmul.c. y (B,T,N) = scale * x (B,T,K) w^T, w of
 * dtype f32/f16/bf16 read in place (nn.Linear layout (N,K), or (K,N) when
 * trans_w), accumulated in f32.
 *
 * Two paths:
 *  - GEMV (T <= GEMV_T, trans_w = 0; decode): threads split the B*N output
 *    columns; each weight row is streamed once, widened to f32 in registers,
 *    and dotted with every x row. Napkin math: the weights dominate, N*K
 *    elements read once per call: memory bound.
 *  - GEMM (prefill): cache-blocked over K (KC) and T (MC); a task packs a
 *    block of NB panels of NR weight columns, widened to f32, KC deep (the
 *    f16/bf16 -> f32 conversion happens here, a panel at a time, in cache;
 *    never a whole f32 copy of a weight), packs MR-row slivers of x, and runs
 *    an MR x NR register-blocked micro-kernel. Threads take tasks (batch,
 *    column block) from a shared counter. Napkin math: 2*B*T*N*K flops. */
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
#define MC (MR * 16)  /* x rows packed at a time */
#define NB 4          /* panels per task */
#define GEMV_T 8      /* up to this many x rows: the GEMV path */

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
        for (; k + VL <= K; k += VL) {
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

VINL void gemv_range(const cpu_mm_args *a, int64_t lo, int64_t hi, drt_dtype dt, int TT) {
    const int N = a->N, K = a->K;
    for (int64_t c = lo; c < hi;) {
        const int b = (int)(c / N);
        const int64_t n = c % N;
        int64_t n4 = hi - c < 4 ? hi - c : 4;
        if (N - n < n4) n4 = N - n;
        const int64_t bw = (int64_t)b * a->Bw / a->B;
        const void *wb = (const char *)a->w + bw * (int64_t)N * K * (int64_t)drt_dtype_size(dt);
        gemv_rows(a->y + (int64_t)b * a->T * N, a->x + (int64_t)b * a->T * K, wb, dt, n, (int)n4, TT, N, K, a->scale);
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

static void gemv(const cpu_mm_args *a, int ith, int nth) {
    int64_t lo, hi;
    cpu_split((int64_t)a->B * a->N, 4, ith, nth, &lo, &hi);
    if (a->wt == DRT_F16) {
        GEMV_DT(DRT_F16)
    } else if (a->wt == DRT_BF16) {
        GEMV_DT(DRT_BF16)
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
        /* w (N,K): row n is contiguous in k */
        for (int j = 0; j < nn; j++) {
            const int64_t row = (n0 + j) * K + k0;
            for (int k = 0; k < kc; k++) bp[k * NR + j] = load_w1(wb, row + k, dt);
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

/* ap (ceil(mc/MR), kc, MR): rows m0..m0+mc of x, columns k0..k0+kc, in
 * MR-row slivers; rows past mc are zero. */
static void pack_x(float *ap, const float *x, int K, int m0, int mc, int k0, int kc) {
    for (int s = 0; s < mc; s += MR) {
        float *dst = ap + (int64_t)s * kc;
        const int rows = mc - s < MR ? mc - s : MR;
        for (int r = 0; r < rows; r++) {
            const float *src = x + (int64_t)(m0 + s + r) * K + k0;
            for (int k = 0; k < kc; k++) dst[k * MR + r] = src[k];
        }
        for (int r = rows; r < MR; r++)
            for (int k = 0; k < kc; k++) dst[k * MR + r] = 0.0f;
    }
}

/* c (mr, nr) of row stride ldc (mr <= MR, nr <= NR) = (first ? 0 : c) + ap . bp,
 * then times scale when last. ap (kc, MR), bp (kc, NR). */
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

static void gemm_task(const cpu_mm_args *a, float *scratch, int b, int64_t nblk, drt_dtype dt) {
    const int N = a->N, K = a->K, T = a->T;
    float *bp = scratch;                       /* (NB, KC, NR) */
    float *ap = scratch + (int64_t)NB * KC * NR; /* (MC/MR, KC, MR) */
    const int64_t bw = (int64_t)b * a->Bw / a->B;
    const void *wb = (const char *)a->w + bw * (int64_t)N * K * (int64_t)drt_dtype_size(dt);
    const float *xb = a->x + (int64_t)b * T * K;
    float *yb = a->y + (int64_t)b * T * N;
    const int64_t n_first = nblk * NB * NR;
    int np = 0;
    for (int p = 0; p < NB && n_first + (int64_t)p * NR < N; p++) np++;
    for (int k0 = 0; k0 < K; k0 += KC) {
        const int kc = K - k0 < KC ? K - k0 : KC;
        for (int p = 0; p < np; p++) pack_w(bp + (int64_t)p * KC * NR, a, wb, n_first + (int64_t)p * NR, k0, kc, dt);
        for (int m0 = 0; m0 < T; m0 += MC) {
            const int mc = T - m0 < MC ? T - m0 : MC;
            pack_x(ap, xb, K, m0, mc, k0, kc);
            for (int p = 0; p < np; p++) {
                const int64_t n0 = n_first + (int64_t)p * NR;
                const int nr = N - n0 < NR ? (int)(N - n0) : NR;
                for (int s = 0; s < mc; s += MR)
                    ukernel(kc, ap + (int64_t)s * kc, bp + (int64_t)p * KC * NR, yb + (int64_t)(m0 + s) * N + n0, N,
                            k0 == 0, k0 + kc == K, a->scale, mc - s < MR ? mc - s : MR, nr);
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
        else gemm_task(a, a->scratch[ith], b, t % nblks, DRT_F32);
    }
}

static int use_gemv(const cpu_mm_args *a) { return a->T <= GEMV_T && !a->trans_w; }

void KFN(cpu_matmul)(void *args, int ith, int nth) {
    cpu_mm_args *a = args;
    if (a->K == 0) {
        int64_t lo, hi;
        cpu_split((int64_t)a->B * a->T * a->N, 1, ith, nth, &lo, &hi);
        memset(a->y + lo, 0, sizeof(float) * (size_t)(hi - lo));
        return;
    }
    if (use_gemv(a)) gemv(a, ith, nth);
    else gemm(a, ith);
}

int64_t KFN(cpu_mm_scratch_floats)(const cpu_mm_args *a) {
    return use_gemv(a) ? 0 : (int64_t)NB * KC * NR + (int64_t)MC * KC;
}
