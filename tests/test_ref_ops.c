/* Unit tests of the CPU reference kernels (backends/ref/ref_ops.h), the
 * oracle every GPU backend is checked against. Each group is a table of
 * cases; a case names itself (op, shape, seed) in every failure message.
 *
 * Three kinds of expected values:
 *  - literal numbers derived by hand (written next to each case);
 *  - identities between ops: the fused DIFF_ATTN against its decomposed
 *    lowering, ATTN against DIFF_ATTN with lambda = 0, rotate_half RoPE on
 *    permuted rows against interleaved RoPE;
 *  - small double-precision references written here, independently of the
 *    kernels, for the softmax and attention cases (logits up to +-1e3).
 * Every output is poisoned with NaN before the call, so an element a kernel
 * forgets to write fails the comparison. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_graph.h"
#include "drt_quant.h"
#include "ref_ops.h"
#include "drt_half.h"
#include "drt_test.h"

static const double PI = 3.14159265358979323846;
static const float LN3 = 1.0986122886681098f;

/* ---- helpers ------------------------------------------------------------ */

/* n elements of size bytes each; a test that cannot allocate stops here */
static void *xalloc(int64_t n, size_t size) {
    void *p = malloc(size * (size_t)(n > 0 ? n : 1));
    if (!p) {
        fprintf(stderr, "test_cpu_ops: out of memory\n");
        exit(1);
    }
    return p;
}

static float *falloc(int64_t n) {
    return xalloc(n, sizeof(float));
}

/* the rows (drt_exec) of T tokens of one sequence from position p0, in one of
 * four buffers (a call may take two), reused by later calls */
static const int32_t *seq_rows(int T, int p0) {
    static int32_t *buf[4];
    static int next;
    int32_t *r = buf[next] = realloc(buf[next], sizeof(int32_t) * 2 * (size_t)(T > 0 ? T : 1));
    next = (next + 1) % 4;
    drt_exec_seq(NULL, r, T, 0, p0);
    return r;
}
static double *dalloc(int64_t n) {
    return xalloc(n, sizeof(double));
}

/* out and want are (n): every |out - want| <= tol * max(1, |want|). */
static void expect_near(const char *name, const float *out, const float *want, int64_t n, double tol) {
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++) {
        double d = fabs((double)out[i] - (double)want[i]);
        if (!(d <= tol * fmax(1.0, fabs((double)want[i])))) bad = i;
    }
    DRT_CHECK(bad < 0, "%s: element %lld is %.9g, expected %.9g", name, (long long)bad,
              bad < 0 ? 0.0 : (double)out[bad], bad < 0 ? 0.0 : (double)want[bad]);
}

/* NMSE of out against ref, both (n), with max |err| in the message. */
static void expect_nmse(const char *name, const char *what, const float *out, const float *ref, int64_t n, double tol) {
    double e = drt_nmse(out, ref, n);
    DRT_CHECK(e <= tol, "%s: %s NMSE %.3g > %.1g (max abs err %.3g)", name, what, e, tol, drt_max_abs_err(out, ref, n));
}

/* ---- double-precision references, written independently of the kernels -- */

/* p, s are (n): p = softmax(s), max-subtracted, all in double */
static void naive_softmax(double *p, const float *s, int n) {
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < n; j++) mx = fmax(mx, (double)s[j]);
    for (int j = 0; j < n; j++) sum += (p[j] = exp((double)s[j] - mx));
    for (int j = 0; j < n; j++) p[j] /= sum;
}

/* o is (T,H,dv); q is (T,H,2,dk); k is (S,G,m,dk); v is (S,G,dv). The
 * definition of docs/design.md section 3, one (t,h) at a time, in double. */
static void naive_diff_attn(float *o, const float *q, const float *k, const float *v, int T, int S, int H, int G, int m,
                            int dk, int dv, float lambda, const float *lambda_th) {
    const int p0 = S - T;
    const double s = 1.0 / sqrt((double)dk);
    double *a1 = dalloc(S), *a2 = dalloc(S);
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < H; h++) {
            const int g = h * G / H;
            const int nk = p0 + t + 1;
            double lam = lambda_th ? lambda_th[t * H + h] : lambda;
            for (int j = 0; j < nk; j++) {
                double d1 = 0, d2 = 0;
                for (int i = 0; i < dk; i++) {
                    d1 += (double)q[((t * H + h) * 2 + 0) * dk + i] * (double)k[((j * G + g) * m + 0) * dk + i];
                    d2 += (double)q[((t * H + h) * 2 + 1) * dk + i] * (double)k[((j * G + g) * m + (m - 1)) * dk + i];
                }
                /* the logits stay in double: stored as float they would
                 * lose ~1e-5 at |logit| ~ 300 */
                a1[j] = s * d1;
                a2[j] = s * d2;
            }
            double mx1 = -INFINITY, mx2 = -INFINITY, z1 = 0, z2 = 0;
            for (int j = 0; j < nk; j++) mx1 = fmax(mx1, a1[j]), mx2 = fmax(mx2, a2[j]);
            for (int j = 0; j < nk; j++) z1 += (a1[j] = exp(a1[j] - mx1));
            for (int j = 0; j < nk; j++) z2 += (a2[j] = exp(a2[j] - mx2));
            for (int e = 0; e < dv; e++) {
                double acc = 0;
                for (int j = 0; j < nk; j++) acc += (a1[j] / z1 - lam * a2[j] / z2) * (double)v[(j * G + g) * dv + e];
                o[(t * H + h) * dv + e] = (float)acc;
            }
        }
    }
    free(a1);
    free(a2);
}

/* the largest |s * q[t,h,c] . k[j,g,c']| over visible (t,j): proves a
 * large-logit case really reaches the magnitude it claims */
static double max_abs_logit(const float *q, const float *k, int T, int S, int H, int G, int m, int dk) {
    const int p0 = S - T;
    double mx = 0;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int c = 0; c < 2; c++)
                for (int j = 0; j <= p0 + t; j++) {
                    const int g = h * G / H, kc = c ? m - 1 : 0;
                    double d = 0;
                    for (int i = 0; i < dk; i++)
                        d += (double)q[((t * H + h) * 2 + c) * dk + i] * (double)k[((j * G + g) * m + kc) * dk + i];
                    mx = fmax(mx, fabs(d / sqrt((double)dk)));
                }
    return mx;
}

/* ---- drt_ref_load_weight --------------------------------------------------- */

static void test_load_weight(void) {
    static const struct {
        const char *name;
        drt_dtype t;
        uint16_t bits;
        float want;
    } cases[] = {
        /* clang-format off */
        {"load_weight f16 0x3c00", DRT_F16, 0x3c00, 1.0f},
        {"load_weight f16 0xc100", DRT_F16, 0xc100, -2.5f},
        {"load_weight f16 0x0001 (smallest subnormal)", DRT_F16, 0x0001, 5.9604644775390625e-8f},
        {"load_weight f16 0x7bff (largest finite)", DRT_F16, 0x7bff, 65504.0f},
        {"load_weight bf16 0x3f80", DRT_BF16, 0x3f80, 1.0f},
        {"load_weight bf16 0xc020", DRT_BF16, 0xc020, -2.5f},
        {"load_weight bf16 0x4049", DRT_BF16, 0x4049, 3.140625f},
        /* clang-format on */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        /* element 1 of a 3-element array, so the index is honoured */
        uint16_t w[3] = {0xffff, cases[c].bits, 0xffff};
        float got = drt_ref_load_weight(w, cases[c].t, 1);
        DRT_CHECK(got == cases[c].want, "%s: got %.9g, expected %.9g", cases[c].name, got, cases[c].want);
    }
    const float wf[3] = {0.1f, -7.25f, 3.0f};
    DRT_CHECK(drt_ref_load_weight(wf, DRT_F32, 1) == -7.25f, "load_weight f32 index 1");
}

/* ---- EMBED -------------------------------------------------------------- */

static void test_embed(void) {
    /* E (V=3,D=2) = [[1,2],[3,4],[5,6]] in each weight dtype; ids [2,0,2,1] */
    static const float ef[6] = {1, 2, 3, 4, 5, 6};
    static const uint16_t eh[6] = {0x3c00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600};
    static const uint16_t eb[6] = {0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0};
    static const struct {
        const char *name;
        drt_dtype t;
        const void *e;
    } cases[] = {
        /* clang-format off */
        {"embed f32 T=4 V=3 D=2", DRT_F32, ef},
        {"embed f16 T=4 V=3 D=2", DRT_F16, eh},
        {"embed bf16 T=4 V=3 D=2", DRT_BF16, eb},
        /* clang-format on */
    };
    const int32_t ids[4] = {2, 0, 2, 1};
    const float want[8] = {5, 6, 1, 2, 5, 6, 3, 4};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float out[8];
        drt_fill_nan(out, 8);
        drt_ref_embed(out, ids, 4, cases[c].e, cases[c].t, 3, 2);
        expect_near(cases[c].name, out, want, 8, 0);
    }
}

/* ---- RMSNORM ------------------------------------------------------------ */

static void test_rmsnorm(void) {
    static const struct {
        const char *name;
        int T, C;
        float eps;
        int has_w;
        float x[8], w[8], want[8];
    } cases[] = {
        /* clang-format off */
        /* mean(1,9,25,1) = 9, rms 3: x/3 * w */
        {"rmsnorm T=1 C=4 eps=0 w", 1, 4, 0.0f, 1, {1, 3, 5, 1}, {1, 2, 0.5f, -1},
         {1.0f / 3, 2, 5.0f / 6, -1.0f / 3}},
        /* row 0: mean(9,16) + 3.5 = 16, rms 4; row 1: 0 / sqrt(3.5) = 0 */
        {"rmsnorm T=2 C=2 eps=3.5 no w", 2, 2, 3.5f, 0, {3, -4, 0, 0}, {0}, {0.75f, -1, 0, 0}},
        /* mean(4*4) = 4, rms 2, for both rows */
        {"rmsnorm T=2 C=4 eps=0 no w", 2, 4, 0.0f, 0, {2, -2, 2, -2, 4, 0, 0, 0}, {0},
         {1, -1, 1, -1, 2, 0, 0, 0}},
        /* clang-format on */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int n = cases[c].T * cases[c].C;
        float y[8];
        drt_fill_nan(y, n);
        drt_ref_rmsnorm(y, cases[c].x, cases[c].T, cases[c].C, cases[c].has_w ? cases[c].w : NULL, cases[c].eps);
        expect_near(cases[c].name, y, cases[c].want, n, 1e-7);
    }
}

/* ---- GROUPNORM ---------------------------------------------------------- */

static void test_groupnorm(void) {
    static const struct {
        const char *name;
        int T, H, dv;
        float eps, scale;
        int has_w;
        float x[8], w[4], want[8];
    } cases[] = {
        /* clang-format off */
        /* head 0: rms(3,4,0,0) = 2.5 -> (1.2,1.6,0,0); head 1: rms 2 -> 1s; times 0.5 */
        {"groupnorm T=1 H=2 dv=4 eps=0 scale=0.5 no w", 1, 2, 4, 0.0f, 0.5f, 0,
         {3, 4, 0, 0, 2, 2, 2, 2}, {0}, {0.6f, 0.8f, 0, 0, 0.5f, 0.5f, 0.5f, 0.5f}},
        /* same rows, times w = (1,-1,2,0.5), times 0.2 */
        {"groupnorm T=1 H=2 dv=4 eps=0 scale=0.2 w", 1, 2, 4, 0.0f, 0.2f, 1,
         {3, 4, 0, 0, 2, 2, 2, 2}, {1, -1, 2, 0.5f},
         {0.24f, -0.32f, 0, 0, 0.2f, -0.2f, 0.4f, 0.1f}},
        /* each (t,h) row alone: (3,-4) and (-3,4): mean 12.5 + eps 3.5 = 16,
         * so divide by 4; (0,0): 0 / sqrt(3.5) = 0 */
        {"groupnorm T=2 H=2 dv=2 eps=3.5 scale=1 no w", 2, 2, 2, 3.5f, 1.0f, 0,
         {3, -4, -3, 4, 0, 0, 3, -4}, {0}, {0.75f, -1, -0.75f, 1, 0, 0, 0.75f, -1}},
        /* clang-format on */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int n = cases[c].T * cases[c].H * cases[c].dv;
        float y[8];
        drt_fill_nan(y, n);
        drt_ref_groupnorm(y, cases[c].x, cases[c].T, cases[c].H, cases[c].dv, cases[c].has_w ? cases[c].w : NULL,
                          cases[c].eps, cases[c].scale);
        expect_near(cases[c].name, y, cases[c].want, n, 1e-7);
    }
}

/* ---- MATMUL ------------------------------------------------------------- */

static void test_matmul_hand(void) {
    /* W as f16 / bf16 bit patterns: 1.5, -2.5, 0.5, 2, 0, -0.25 (and -1) */
    static const struct {
        const char *name;
        drt_dtype wt;
        int B, Bw, T, N, K, trans_w;
        float scale;
        float x[12];
        float wf[12];
        uint16_t wh[12];
        float want[8];
    } cases[] = {
        /* clang-format off */
        /* x = [[1,2,3],[4,5,6]], W = [[1,0,-1],[.5,.5,.5]]: [[-2,3],[-2,7.5]] */
        {"matmul f32 B=1 T=2 N=2 K=3", DRT_F32, 1, 1, 2, 2, 3, 0, 1.0f, {1, 2, 3, 4, 5, 6},
         {1, 0, -1, 0.5f, 0.5f, 0.5f}, {0}, {-2, 3, -2, 7.5f}},
        {"matmul f32 B=1 T=2 N=2 K=3 scale=2", DRT_F32, 1, 1, 2, 2, 3, 0, 2.0f, {1, 2, 3, 4, 5, 6},
         {1, 0, -1, 0.5f, 0.5f, 0.5f}, {0}, {-4, 6, -4, 15}},
        /* the same W stored (K,N) */
        {"matmul f32 B=1 T=2 N=2 K=3 trans_w", DRT_F32, 1, 1, 2, 2, 3, 1, 1.0f, {1, 2, 3, 4, 5, 6},
         {1, 0.5f, 0, 0.5f, -1, 0.5f}, {0}, {-2, 3, -2, 7.5f}},
        /* W = [[1.5,-2.5,0.5],[2,0,-0.25]]:
         * row 0: 1.5-5+1.5 = -2, 2-0.75 = 1.25; row 1: 6-12.5+3 = -3.5, 8-1.5 = 6.5 */
        {"matmul f16 B=1 T=2 N=2 K=3", DRT_F16, 1, 1, 2, 2, 3, 0, 1.0f, {1, 2, 3, 4, 5, 6}, {0},
         {0x3e00, 0xc100, 0x3800, 0x4000, 0x0000, 0xb400}, {-2, 1.25f, -3.5f, 6.5f}},
        {"matmul f16 B=1 T=2 N=2 K=3 trans_w", DRT_F16, 1, 1, 2, 2, 3, 1, 1.0f, {1, 2, 3, 4, 5, 6},
         {0}, {0x3e00, 0x4000, 0xc100, 0x0000, 0x3800, 0xb400}, {-2, 1.25f, -3.5f, 6.5f}},
        {"matmul bf16 B=1 T=2 N=2 K=3", DRT_BF16, 1, 1, 2, 2, 3, 0, 1.0f, {1, 2, 3, 4, 5, 6}, {0},
         {0x3fc0, 0xc020, 0x3f00, 0x4000, 0x0000, 0xbe80}, {-2, 1.25f, -3.5f, 6.5f}},
        /* B=4 over Bw=2: batches 0,1 use w0 = [1,1], batches 2,3 use w1 = [1,-1] */
        {"matmul f32 B=4 Bw=2 T=1 N=1 K=2", DRT_F32, 4, 2, 1, 1, 2, 0, 1.0f,
         {1, 2, 3, 4, 5, 6, 7, 8}, {1, 1, 1, -1}, {0}, {3, 7, -1, -1}},
        /* B=3 over Bw=1, W (K=2,N=1) = [2,-1] in bf16, scale 0.5: y = (2a - b)/2 */
        {"matmul bf16 B=3 Bw=1 T=2 N=1 K=2 trans_w scale=0.5", DRT_BF16, 3, 1, 2, 1, 2, 1, 0.5f,
         {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {0}, {0x4000, 0xbf80}, {0, 1, 2, 3, 4, 5}},
        /* 1e8 + 1 - 1e8: an f32 accumulator loses the 1 (spacing 8 at 1e8), a
         * double one keeps it */
        {"matmul f32 B=1 T=1 N=1 K=3 cancellation", DRT_F32, 1, 1, 1, 1, 3, 0, 1.0f,
         {1e8f, 1, -1e8f}, {1, 1, 1}, {0}, {1}},
        /* B=2 over Bw=2, f16 W batches [[1],[0.5]] (N=2,K=1) and [[-1],[2]] */
        {"matmul f16 B=2 Bw=2 T=2 N=2 K=1", DRT_F16, 2, 2, 2, 2, 1, 0, 1.0f, {1, 2, 3, 4}, {0},
         {0x3c00, 0x3800, 0xbc00, 0x4000}, {1, 0.5f, 2, 1, -3, 6, -4, 8}},
        /* clang-format on */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int n = cases[c].B * cases[c].T * cases[c].N;
        float y[8];
        const void *w = cases[c].wt == DRT_F32 ? (const void *)cases[c].wf : cases[c].wh;
        drt_fill_nan(y, n);
        drt_ref_matmul(y, cases[c].x, w, cases[c].wt, cases[c].B, cases[c].Bw, cases[c].T, cases[c].N, cases[c].K,
                       cases[c].trans_w, cases[c].scale);
        expect_near(cases[c].name, y, cases[c].want, n, 0);
    }
}

/* Odd sizes, random data, each weight dtype and layout, against a double
 * loop that reads W by its own (b,n,k) indexing. */
static void test_matmul_random(void) {
    static const struct {
        drt_dtype wt;
        int B, Bw, T, N, K, trans_w;
        uint64_t seed;
    } cases[] = {
        /* clang-format off */
        {DRT_F32, 6, 3, 5, 7, 13, 0, 101}, {DRT_F32, 6, 3, 5, 7, 13, 1, 102},
        {DRT_F16, 4, 1, 3, 9, 11, 0, 103}, {DRT_F16, 4, 4, 1, 9, 11, 1, 104},
        {DRT_BF16, 2, 2, 7, 5, 33, 0, 105}, {DRT_BF16, 6, 2, 2, 5, 17, 1, 106},
        /* K over the kernel's 8192-element row chunk: the chunked conversion path */
        {DRT_F16, 2, 1, 3, 4, 9000, 0, 107}, {DRT_BF16, 2, 2, 2, 3, 8193, 1, 108},
        /* clang-format on */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int B = cases[c].B, Bw = cases[c].Bw, T = cases[c].T, N = cases[c].N, K = cases[c].K,
                  tw = cases[c].trans_w;
        char name[128];
        snprintf(name, sizeof name, "matmul %s B=%d Bw=%d T=%d N=%d K=%d trans_w=%d seed=%llu",
                 drt_dtype_name(cases[c].wt), B, Bw, T, N, K, tw, (unsigned long long)cases[c].seed);
        drt_rng r;
        drt_rng_seed(&r, cases[c].seed);
        const int64_t nw = (int64_t)Bw * N * K;
        float *x = falloc((int64_t)B * T * K), *wf = falloc(nw);
        float *y = falloc((int64_t)B * T * N), *ref = falloc((int64_t)B * T * N);
        uint16_t *wh = xalloc(nw, sizeof(uint16_t));
        drt_fill_uniform(x, (int64_t)B * T * K, &r, -1, 1);
        drt_fill_uniform(wf, nw, &r, -1, 1);
        for (int64_t i = 0; i < nw; i++) {
            /* round to the weight dtype, so wf holds exactly what the kernel sees */
            if (cases[c].wt == DRT_F16) wf[i] = drt_f16_to_f32(wh[i] = drt_f32_to_f16(wf[i]));
            if (cases[c].wt == DRT_BF16) wf[i] = drt_bf16_to_f32(wh[i] = drt_f32_to_bf16(wf[i]));
        }
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int n = 0; n < N; n++) {
                    const int bw = b / (B / Bw);
                    double acc = 0;
                    for (int k = 0; k < K; k++) {
                        const float wv = tw ? wf[(bw * K + k) * N + n] : wf[(bw * N + n) * K + k];
                        acc += (double)x[(b * T + t) * K + k] * wv;
                    }
                    ref[(b * T + t) * N + n] = (float)(acc * 0.75);
                }
        drt_fill_nan(y, (int64_t)B * T * N);
        drt_ref_matmul(y, x, cases[c].wt == DRT_F32 ? (const void *)wf : wh, cases[c].wt, B, Bw, T, N, K, tw, 0.75f);
        expect_nmse(name, "vs double loop", y, ref, (int64_t)B * T * N, 1e-14);
        free(x), free(wf), free(y), free(ref), free(wh);
    }
}

/* ---- ROPE --------------------------------------------------------------- */

static void test_rope_hand(void) {
    const float pi3 = (float)(PI / 3), pi2 = (float)(PI / 2), pi1 = (float)PI;
    const struct {
        const char *name;
        int T, Hn, d, p0;
        float inv_freq[4];
        float x[16], want[16];
        double tol; /* 0 where cos and sin are exactly 1 and 0 */
    } cases[] = {
        /* clang-format off */
        /* positions 0,1,2 at angle pos*pi/3: identity; (cos,sin) = (1/2, sqrt3/2);
         * (0,2) at 2pi/3 -> (-2 sin, 2 cos) = (-sqrt3, -1) */
        {"rope T=3 Hn=1 d=2 p0=0 inv_freq=pi/3", 3, 1, 2, 0, {pi3}, {1, 0, 1, 0, 0, 2},
         {1, 0, 0.5f, 0.8660254037844386f, -1.7320508075688772f, -1}, 1e-6},
        /* position 1, angles (pi/2, pi): pairs (0,2) rotate by 90 degrees,
         * pairs (1,3) flip sign: (a,b,c,d) -> (-c,-b,a,-d) */
        {"rope T=1 Hn=2 d=4 p0=1 inv_freq=(pi/2,pi)", 1, 2, 4, 1, {pi2, pi1},
         {1, 2, 3, 4, 5, 6, 7, 8}, {-3, -2, 1, -4, -7, -6, 5, -8}, 1e-6},
        /* position 0 is the identity, whatever inv_freq is */
        {"rope T=1 Hn=2 d=8 p0=0 identity", 1, 2, 8, 0, {1.0f, 0.1f, 0.01f, 0.001f},
         {0.5f, -1, 2, 3, -4, 5, 6, -7, 8, 9, -10, 11, 12, 13, 14, -15},
         {0.5f, -1, 2, 3, -4, 5, 6, -7, 8, 9, -10, 11, 12, 13, 14, -15}, 0},
        /* clang-format on */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int n = cases[c].T * cases[c].Hn * cases[c].d;
        float y[16];
        drt_fill_nan(y, n);
        drt_ref_rope(y, cases[c].x, cases[c].T, cases[c].Hn, cases[c].d, seq_rows(cases[c].T, cases[c].p0),
                     cases[c].inv_freq);
        expect_near(cases[c].name, y, cases[c].want, n, cases[c].tol);
    }
}

/* x, y are (T,Hn,d): GPT-J interleaved RoPE, pairs (2i, 2i+1), angle
 * (p0+t)*inv_freq[i]. Only the test needs it: the loader turns it into
 * rotate_half by permuting rows (docs/design.md section 4). */
static void rope_interleaved(float *y, const float *x, int T, int Hn, int d, int p0, const float *inv_freq) {
    for (int t = 0; t < T; t++)
        for (int h = 0; h < Hn; h++)
            for (int i = 0; i < d / 2; i++) {
                const double a = (double)(p0 + t) * inv_freq[i];
                const float *xr = x + (t * Hn + h) * d;
                float *yr = y + (t * Hn + h) * d;
                yr[2 * i] = (float)(xr[2 * i] * cos(a) - xr[2 * i + 1] * sin(a));
                yr[2 * i + 1] = (float)(xr[2 * i + 1] * cos(a) + xr[2 * i] * sin(a));
            }
}

/* x, y are (rows,d): the loader's new order [0,2,4,...,d-2,1,3,...,d-1] */
static void permute_even_odd(float *y, const float *x, int rows, int d) {
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < d / 2; i++) {
            y[r * d + i] = x[r * d + 2 * i];
            y[r * d + d / 2 + i] = x[r * d + 2 * i + 1];
        }
}

static void test_rope_interleaved(void) {
    static const struct {
        int T, Hq, Hk, d, p0;
        uint64_t seed;
    } cases[] = {
        /* clang-format off */
        {3, 2, 1, 8, 5, 201},
        {4, 4, 2, 64, 100, 202},
        {2, 1, 1, 2, 0, 203},
        {1, 3, 3, 128, 1000, 204},
        /* clang-format on */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int T = cases[c].T, Hq = cases[c].Hq, Hk = cases[c].Hk, d = cases[c].d, p0 = cases[c].p0;
        char name[128];
        snprintf(name, sizeof name, "rope halves vs interleaved T=%d Hq=%d Hk=%d d=%d p0=%d seed=%llu", T, Hq, Hk, d,
                 p0, (unsigned long long)cases[c].seed);
        drt_rng r;
        drt_rng_seed(&r, cases[c].seed);
        const int nq = T * Hq * d, nk = T * Hk * d;
        float *inv = falloc(d / 2);
        for (int i = 0; i < d / 2; i++) inv[i] = (float)pow(10000.0, -2.0 * i / d);
        float *q = falloc(nq), *k = falloc(nk);
        float *qi = falloc(nq), *ki = falloc(nk);   /* interleaved rope on the old order */
        float *qip = falloc(nq), *kip = falloc(nk); /* ... then permuted */
        float *qp = falloc(nq), *kp = falloc(nk);   /* permuted, as the loader stores it */
        float *qh = falloc(nq), *kh = falloc(nk);   /* ... then rotate_half by the kernel */
        drt_fill_uniform(q, nq, &r, -1, 1);
        drt_fill_uniform(k, nk, &r, -1, 1);
        rope_interleaved(qi, q, T, Hq, d, p0, inv);
        rope_interleaved(ki, k, T, Hk, d, p0, inv);
        permute_even_odd(qip, qi, T * Hq, d);
        permute_even_odd(kip, ki, T * Hk, d);
        permute_even_odd(qp, q, T * Hq, d);
        permute_even_odd(kp, k, T * Hk, d);
        drt_fill_nan(qh, nq);
        drt_fill_nan(kh, nk);
        drt_ref_rope(qh, qp, T, Hq, d, seq_rows(T, p0), inv);
        drt_ref_rope(kh, kp, T, Hk, d, seq_rows(T, p0), inv);
        expect_near(name, qh, qip, nq, 1e-6);
        expect_near(name, kh, kip, nk, 1e-6);
        /* attention only sees q.k, which both orders must agree on */
        double worst = 0;
        for (int tq = 0; tq < T; tq++)
            for (int tk = 0; tk < T; tk++)
                for (int h = 0; h < Hq; h++) {
                    const int g = h * Hk / Hq;
                    double d_old = 0, d_new = 0;
                    for (int i = 0; i < d; i++) {
                        d_old += (double)qi[(tq * Hq + h) * d + i] * ki[(tk * Hk + g) * d + i];
                        d_new += (double)qh[(tq * Hq + h) * d + i] * kh[(tk * Hk + g) * d + i];
                    }
                    worst = fmax(worst, fabs(d_old - d_new) / fmax(1.0, fabs(d_old)));
                }
        DRT_CHECK(worst <= 1e-6, "%s: q.k differs by %.3g (relative)", name, worst);
        free(inv), free(q), free(k), free(qi), free(ki), free(qip), free(kip);
        free(qp), free(kp), free(qh), free(kh);
    }
}

/* ---- SWIGLU, SIGMOID, ADD ----------------------------------------------- */

static void test_pointwise(void) {
    /* silu(g) = g*sigmoid(g); sigmoid(+-ln3) = 3/4, 1/4 */
    {
        const float g[6] = {0, LN3, -LN3, 20, -1000, 1000};
        const float u[6] = {5, 2, 4, 0.5f, 1, -1};
        /* 0; 1.5 ln3; -ln3; 20*sigmoid(20)*0.5 = 9.99999998; -0 (not NaN); -1000 */
        const float want[6] = {0, 1.6479184330021646f, -LN3, 9.999999979388463f, 0, -1000};
        float y[6];
        drt_fill_nan(y, 6);
        drt_ref_swiglu(y, g, u, 6);
        expect_near("swiglu n=6", y, want, 6, 1e-7);
    }
    {
        const float x[6] = {0, LN3, -LN3, 100, -1000, 1000};
        const float want[6] = {0.5f, 0.75f, 0.25f, 1, 0, 1};
        float y[6];
        drt_fill_nan(y, 6);
        drt_ref_sigmoid(y, x, 6);
        expect_near("sigmoid n=6", y, want, 6, 1e-7);
    }
    {
        /* 1e8 + 1 is 1e8 in f32 (spacing 8 there) */
        const float a[4] = {1, 2, -3, 1e8f}, b[4] = {0.5f, -2, 3, 1};
        const float want[4] = {1.5f, 0, 0, 1e8f};
        float y[4];
        drt_fill_nan(y, 4);
        drt_ref_add(y, a, b, 4);
        expect_near("add n=4", y, want, 4, 0);
    }
}

/* ---- KV_WRITE ----------------------------------------------------------- */

static void test_kv_write(void) {
    static const struct {
        const char *name;
        int S_cap, T;
        int64_t row;
        int p0;
    } cases[] = {
        /* clang-format off */
        {"kv_write S_cap=4 T=2 row=2 p0=1", 4, 2, 2, 1},
        {"kv_write S_cap=5 T=1 row=3 p0=4 (last row)", 5, 1, 3, 4},
        {"kv_write S_cap=3 T=3 row=1 p0=0 (whole cache)", 3, 3, 1, 0},
        /* clang-format on */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t row = cases[c].row, n = cases[c].S_cap * row;
        float cache[16], src[16], want[16];
        for (int64_t i = 0; i < (int64_t)cases[c].T * row; i++) src[i] = (float)(i + 1);
        /* rows outside p0..p0+T-1 keep their sentinel -9 */
        for (int64_t i = 0; i < n; i++) {
            const int64_t s = i / row - cases[c].p0;
            want[i] = s >= 0 && s < cases[c].T ? src[s * row + i % row] : -9.0f;
            cache[i] = -9.0f;
        }
        drt_ref_kv_write(cache, src, cases[c].T, row, seq_rows(cases[c].T, cases[c].p0));
        expect_near(cases[c].name, cache, want, n, 0);
    }
}

/* ---- PERMUTE ------------------------------------------------------------ */

static void test_permute_hand(void) {
    static const struct {
        const char *name;
        int64_t ne[4];
        int perm[4];
        float want[8];
    } cases[] = {
        /* clang-format off */
        /* x = 0..n-1 in each case */
        /* 2x3 transpose: [[0,1,2],[3,4,5]] -> [[0,3],[1,4],[2,5]] */
        {"permute ne=(1,2,3,1) perm=(0,2,1,3)", {1, 2, 3, 1}, {0, 2, 1, 3}, {0, 3, 1, 4, 2, 5}},
        /* the same transpose on the outer and inner axes */
        {"permute ne=(2,1,1,3) perm=(3,1,2,0)", {2, 1, 1, 3}, {3, 1, 2, 0}, {0, 3, 1, 4, 2, 5}},
        {"permute ne=(1,1,2,2) identity", {1, 1, 2, 2}, {0, 1, 2, 3}, {0, 1, 2, 3}},
        /* x[a][b][c] = 4a+2b+c -> y[c][b][a] */
        {"permute ne=(2,2,2,1) perm=(2,1,0,3)", {2, 2, 2, 1}, {2, 1, 0, 3}, {0, 4, 2, 6, 1, 5, 3, 7}
         },
        /* clang-format on */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t *ne = cases[c].ne;
        const int64_t n = ne[0] * ne[1] * ne[2] * ne[3];
        float x[8], y[8];
        for (int64_t i = 0; i < n; i++) x[i] = (float)i;
        drt_fill_nan(y, n);
        drt_ref_permute(y, x, ne, cases[c].perm);
        expect_near(cases[c].name, y, cases[c].want, n, 0);
    }
}

/* all 24 permutations of a (2,3,4,5) tensor against the definition
 * y[i0,i1,i2,i3] = x[j] with j[perm[a]] = i_a */
static void test_permute_all(void) {
    const int64_t ne[4] = {2, 3, 4, 5};
    const int n = 120;
    float x[120], y[120];
    for (int i = 0; i < n; i++) x[i] = (float)i;
    int perm[4];
    for (perm[0] = 0; perm[0] < 4; perm[0]++)
        for (perm[1] = 0; perm[1] < 4; perm[1]++)
            for (perm[2] = 0; perm[2] < 4; perm[2]++)
                for (perm[3] = 0; perm[3] < 4; perm[3]++) {
                    if (perm[0] == perm[1] || perm[0] == perm[2] || perm[0] == perm[3] || perm[1] == perm[2] ||
                        perm[1] == perm[3] || perm[2] == perm[3])
                        continue;
                    drt_fill_nan(y, n);
                    drt_ref_permute(y, x, ne, perm);
                    int bad = -1;
                    for (int o = 0; o < n && bad < 0; o++) {
                        /* unravel o over the output shape, scatter into j */
                        int64_t i[4], j[4], rem = o;
                        for (int a = 3; a >= 0; a--) {
                            i[a] = rem % ne[perm[a]];
                            rem /= ne[perm[a]];
                        }
                        for (int a = 0; a < 4; a++) j[perm[a]] = i[a];
                        const int64_t src = ((j[0] * ne[1] + j[1]) * ne[2] + j[2]) * ne[3] + j[3];
                        if (y[o] != x[src]) bad = o;
                    }
                    DRT_CHECK(bad < 0, "permute ne=(2,3,4,5) perm=(%d,%d,%d,%d): element %d wrong", perm[0], perm[1],
                              perm[2], perm[3], bad);
                }
}

/* ---- DUAL_SOFTMAX ------------------------------------------------------- */

static void test_dual_softmax_hand(void) {
    /* H=1 T=2 S=2, lambda 0.5. Row 0 sees key 0 only: 1 - 0.5*1 = 0.5, then
     * the masked 0 (the 7 and -9 there must be ignored). Row 1:
     * softmax(0,ln3) = (1/4,3/4), softmax(ln3,0) = (3/4,1/4):
     * (1/4 - 3/8, 3/4 - 1/8) = (-0.125, 0.625). */
    {
        const float s1[4] = {0, 7, 0, LN3}, s2[4] = {5, -9, LN3, 0};
        const float want[4] = {0.5f, 0, -0.125f, 0.625f};
        float a[4];
        drt_fill_nan(a, 4);
        drt_ref_dual_softmax(a, s1, s2, 1, 2, 2, 0.5f, NULL);
        expect_near("dual_softmax H=1 T=2 S=2 lambda=0.5", a, want, 4, 1e-7);
    }
    /* H=1 T=1 S=3 (p0=2), lambda_th = 0.25 overrides the scalar 99:
     * softmax(0,ln3,0) = (.2,.6,.2), softmax(ln2,0,ln2) = (.4,.2,.4):
     * (.2-.1, .6-.05, .2-.1) */
    {
        const float s1[3] = {0, LN3, 0}, s2[3] = {(float)log(2.0), 0, (float)log(2.0)};
        const float lam[1] = {0.25f};
        const float want[3] = {0.1f, 0.55f, 0.1f};
        float a[3];
        drt_fill_nan(a, 3);
        drt_ref_dual_softmax(a, s1, s2, 1, 1, 3, 99.0f, lam);
        expect_near("dual_softmax H=1 T=1 S=3 lambda_th=0.25", a, want, 3, 1e-7);
    }
}

static void test_dual_softmax_random(void) {
    static const struct {
        int H, T, S;
        float lambda;
        int per_token;
        /* logits uniform in [shift-amp, shift+amp]: a shift of +-1000 with
         * amp 1 is a non-trivial softmax whose naive exp() is inf or 0 */
        float amp, shift;
        uint64_t seed;
    } cases[] = {
        /* clang-format off */
        {2, 4, 4, 0.0f, 0, 1, 0, 301},     {3, 3, 8, 0.0f, 0, 5, 0, 302},
        {3, 3, 8, 0.8f, 0, 1, 0, 303},     {2, 1, 6, 0.0f, 1, 1, 0, 304},
        {2, 5, 9, 0.5f, 0, 300, 0, 305},   {1, 6, 6, 0.0f, 1, 1000, 0, 306},
        {2, 3, 5, 0.0f, 0, 300, 0, 307},   {4, 7, 20, 0.2f, 0, 1000, 0, 308},
        {2, 4, 9, 0.0f, 0, 1, 1000, 309},  {2, 4, 9, 0.7f, 0, 1, -1000, 310},
        {3, 2, 16, 0.0f, 1, 2, 300, 311},
        /* clang-format on */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int H = cases[c].H, T = cases[c].T, S = cases[c].S, p0 = S - T;
        const int64_t n = (int64_t)H * T * S;
        char name[160], lam_s[32];
        if (cases[c].per_token)
            snprintf(lam_s, sizeof lam_s, "per-token");
        else
            snprintf(lam_s, sizeof lam_s, "%g", (double)cases[c].lambda);
        snprintf(name, sizeof name, "dual_softmax H=%d T=%d S=%d lambda=%s amp=%g shift=%g seed=%llu", H, T, S, lam_s,
                 (double)cases[c].amp, (double)cases[c].shift, (unsigned long long)cases[c].seed);
        drt_rng r;
        drt_rng_seed(&r, cases[c].seed);
        float *s1 = falloc(n), *s2 = falloc(n), *a = falloc(n), *ref = falloc(n);
        float *lam = falloc((int64_t)T * H);
        double *p1 = dalloc(S), *p2 = dalloc(S);
        const float lo = cases[c].shift - cases[c].amp, hi = cases[c].shift + cases[c].amp;
        drt_fill_uniform(s1, n, &r, lo, hi);
        drt_fill_uniform(s2, n, &r, lo, hi);
        drt_fill_uniform(lam, (int64_t)T * H, &r, 0, 1);
        const float *lam_th = cases[c].per_token ? lam : NULL;
        drt_fill_nan(a, n);
        /* the scalar must be ignored when lambda_th is given */
        drt_ref_dual_softmax(a, s1, s2, H, T, S, lam_th ? 123.0f : cases[c].lambda, lam_th);

        int masked_ok = 1, sums_ok = 1;
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const int64_t row = ((int64_t)h * T + t) * S;
                const int nk = p0 + t + 1;
                const double l = lam_th ? lam_th[t * H + h] : cases[c].lambda;
                naive_softmax(p1, s1 + row, nk);
                naive_softmax(p2, s2 + row, nk);
                double sum = 0;
                for (int j = 0; j < S; j++) {
                    ref[row + j] = j < nk ? (float)(p1[j] - l * p2[j]) : 0.0f;
                    sum += a[row + j];
                    if (j >= nk && a[row + j] != 0.0f) masked_ok = 0;
                }
                if (!(fabs(sum - (1.0 - l)) <= 1e-6)) sums_ok = 0;
            }
        DRT_CHECK(drt_all_finite(a, n), "%s: non-finite output", name);
        DRT_CHECK(masked_ok, "%s: a masked position is not 0", name);
        DRT_CHECK(sums_ok, "%s: a row does not sum to 1 - lambda", name);
        /* with lambda = 0 the reference is exactly a plain softmax */
        expect_nmse(name, lam_th == NULL && cases[c].lambda == 0 ? "vs plain softmax" : "vs double", a, ref, n, 1e-13);
        free(s1), free(s2), free(a), free(ref), free(lam), free(p1), free(p2);
    }
}

/* ---- DIFF_ATTN and ATTN --------------------------------------------------- */

/* The reference lowering of DIFF_ATTN out of single ops:
 *   q (T,H,2,dk) -> (2,H,T,dk); k (S,G,m,dk) -> (m,G,S,dk); v (S,G,dv) -> (G,S,dv)
 *   S_c = s * Q_c K_c^T        (H,T,S), head h reading group floor(h*G/H)
 *   A = DUAL_SOFTMAX(S_1, S_2) (H,T,S)
 *   O' = A V                   (H,T,dv) (V is (K=S,N=dv): trans_w = 1)
 *   o = O' -> (T,H,dv) */
static void decomposed_diff_attn(float *o, const float *q, const float *k, const float *v, int T, int S, int H, int G,
                                 int m, int dk, int dv, float lambda, const float *lambda_th) {
    float *qp = falloc(2 * H * T * dk), *kp = falloc(m * G * S * dk), *vp = falloc(G * S * dv);
    float *s1 = falloc(H * T * S), *s2 = falloc(H * T * S), *a = falloc(H * T * S);
    float *op = falloc(H * T * dv);
    drt_fill_nan(qp, 2 * H * T * dk), drt_fill_nan(kp, m * G * S * dk);
    drt_fill_nan(vp, G * S * dv), drt_fill_nan(s1, H * T * S), drt_fill_nan(s2, H * T * S);
    drt_fill_nan(a, H * T * S), drt_fill_nan(op, H * T * dv);
    const int swap02[4] = {2, 1, 0, 3}, swap12[4] = {0, 2, 1, 3};
    const int64_t qne[4] = {T, H, 2, dk}, kne[4] = {S, G, m, dk}, vne[4] = {1, S, G, dv};
    const int64_t one[4] = {1, H, T, dv};
    drt_ref_permute(qp, q, qne, swap02);
    drt_ref_permute(kp, k, kne, swap02);
    drt_ref_permute(vp, v, vne, swap12);
    const float s = 1.0f / sqrtf((float)dk);
    drt_ref_matmul(s1, qp, kp, DRT_F32, H, G, T, S, dk, 0, s);
    drt_ref_matmul(s2, qp + H * T * dk, kp + (m - 1) * G * S * dk, DRT_F32, H, G, T, S, dk, 0, s);
    drt_ref_dual_softmax(a, s1, s2, H, T, S, lambda, lambda_th);
    drt_ref_matmul(op, a, vp, DRT_F32, H, G, T, dv, S, 1, 1.0f);
    drt_ref_permute(o, op, one, swap12);
    free(qp), free(kp), free(vp), free(s1), free(s2), free(a), free(op);
}

static void test_diff_attn_hand(void) {
    /* dk = dv = 1 (s = 1), keys k = (0,1), values v = (8,16), lambda 0.5.
     * Query 0 sees key 0 only: (1 - 0.5) * 8 = 4.
     * Query 1, map 1: q1 = ln3 -> logits (0, ln3) -> (1/4, 3/4);
     * map 2 (m=1): q2 = -ln3 -> (0, -ln3) -> (3/4, 1/4);
     * map 2 (m=2): q2 = ln3 on its own key (1,0) -> (ln3, 0) -> (3/4, 1/4);
     * o = (1/4 - 3/8)*8 + (3/4 - 1/8)*16 = -1 + 10 = 9. */
    const float q_m1[4] = {LN3, -LN3, LN3, -LN3}, q_m2[4] = {LN3, LN3, LN3, LN3};
    const float k_m1[2] = {0, 1}, k_m2[4] = {0, 1, 1, 0}, v[2] = {8, 16};
    const float want[2] = {4, 9};
    float o[2];
    drt_fill_nan(o, 2);
    drt_ref_diff_attn(o, q_m1, k_m1, v, 2, seq_rows(2, 0), 1, 1, 1, 1, 1, 0.5f, NULL);
    expect_near("diff_attn T=2 S=2 H=1 G=1 m=1 dk=1 dv=1 lambda=0.5", o, want, 2, 1e-6);
    drt_fill_nan(o, 2);
    drt_ref_diff_attn(o, q_m2, k_m2, v, 2, seq_rows(2, 0), 1, 1, 2, 1, 1, 0.5f, NULL);
    expect_near("diff_attn T=2 S=2 H=1 G=1 m=2 dk=1 dv=1 lambda=0.5", o, want, 2, 1e-6);
    /* ATTN, same keys: query 0 -> 8; query 1 -> 8/4 + 16*3/4 = 14 */
    const float qa[2] = {LN3, LN3}, want_a[2] = {8, 14};
    drt_fill_nan(o, 2);
    drt_ref_attn(o, qa, k_m1, v, 2, seq_rows(2, 0), 1, 1, 1, 1);
    expect_near("attn T=2 S=2 H=1 G=1 dk=1 dv=1", o, want_a, 2, 1e-6);
}

static void test_diff_attn_decomposed(void) {
    static const struct {
        int T, S, H, G, m, dk, dv;
        float lambda;
        int per_token;
        uint64_t seed;
    } cases[] = {
        /* clang-format off */
        {1, 7, 2, 2, 2, 4, 8, 0.8f, 0, 401},      /* decode, V1 */
        {1, 7, 4, 2, 1, 8, 8, 0.0f, 1, 402},      /* decode, V2, GQA */
        {5, 5, 2, 1, 2, 4, 8, 0.3f, 0, 403},      /* prefill T = S */
        {5, 5, 3, 3, 1, 6, 6, 0.0f, 1, 404},      /* dk not a power of 2 */
        {3, 9, 4, 2, 2, 8, 16, 0.5f, 0, 405},     /* p0 > 0, GQA H=4 G=2 */
        {3, 9, 6, 3, 1, 8, 8, 0.0f, 1, 406},      /* p0 > 0, GQA H=6 G=3 */
        {3, 9, 6, 3, 2, 4, 8, 0.8f, 0, 407},      /* GQA H=6 G=3, m=2 */
        {4, 12, 4, 2, 1, 16, 16, 0.6f, 0, 408},   /* m=1 with a scalar lambda */
        {2, 33, 2, 1, 2, 64, 128, 0.0f, 1, 409},  /* real widths, m=2 per-token */
        {7, 7, 4, 1, 1, 16, 32, 0.0f, 1, 410},    /* G=1, dv = 2 dk */
        /* clang-format on */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int T = cases[c].T, S = cases[c].S, H = cases[c].H, G = cases[c].G, m = cases[c].m, dk = cases[c].dk,
                  dv = cases[c].dv;
        char name[192], lam_s[32];
        if (cases[c].per_token)
            snprintf(lam_s, sizeof lam_s, "per-token");
        else
            snprintf(lam_s, sizeof lam_s, "%g", (double)cases[c].lambda);
        snprintf(name, sizeof name, "diff_attn T=%d S=%d H=%d G=%d m=%d dk=%d dv=%d lambda=%s seed=%llu", T, S, H, G, m,
                 dk, dv, lam_s, (unsigned long long)cases[c].seed);
        drt_rng r;
        drt_rng_seed(&r, cases[c].seed);
        const int nq = T * H * 2 * dk, nk = S * G * m * dk, nv = S * G * dv, no = T * H * dv;
        float *q = falloc(nq), *k = falloc(nk), *v = falloc(nv), *lam = falloc(T * H);
        float *o = falloc(no), *od = falloc(no), *ref = falloc(no);
        drt_fill_uniform(q, nq, &r, -1, 1);
        drt_fill_uniform(k, nk, &r, -1, 1);
        drt_fill_uniform(v, nv, &r, -1, 1);
        drt_fill_uniform(lam, T * H, &r, 0, 1);
        const float *lam_th = cases[c].per_token ? lam : NULL;
        const float lam_s1 = lam_th ? 123.0f : cases[c].lambda; /* ignored with lambda_th */
        drt_fill_nan(o, no);
        drt_ref_diff_attn(o, q, k, v, T, seq_rows(T, S - T), H, G, m, dk, dv, lam_s1, lam_th);
        decomposed_diff_attn(od, q, k, v, T, S, H, G, m, dk, dv, lam_s1, lam_th);
        naive_diff_attn(ref, q, k, v, T, S, H, G, m, dk, dv, lam_s1, lam_th);
        DRT_CHECK(drt_all_finite(o, no), "%s: non-finite output", name);
        expect_nmse(name, "fused vs decomposed", o, od, no, 1e-12);
        expect_nmse(name, "fused vs double", o, ref, no, 1e-13);
        free(q), free(k), free(v), free(lam), free(o), free(od), free(ref);
    }
}

/* ATTN is DIFF_ATTN with lambda = 0 and m = 1, the query in slot 0 (slot 1
 * then carries weight 0, whatever it holds). */
static void test_attn(void) {
    static const struct {
        int T, S, H, G, dk, dv;
        uint64_t seed;
    } cases[] = {
        /* clang-format off */
        {1, 7, 4, 2, 8, 8, 501},   {5, 5, 2, 2, 4, 8, 502},     {3, 9, 6, 3, 16, 16, 503},
        {4, 10, 4, 1, 64, 64, 504}, {2, 17, 2, 1, 128, 128, 505},
        /* clang-format on */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int T = cases[c].T, S = cases[c].S, H = cases[c].H, G = cases[c].G, dk = cases[c].dk, dv = cases[c].dv;
        char name[160];
        snprintf(name, sizeof name, "attn T=%d S=%d H=%d G=%d dk=%d dv=%d seed=%llu", T, S, H, G, dk, dv,
                 (unsigned long long)cases[c].seed);
        drt_rng r;
        drt_rng_seed(&r, cases[c].seed);
        const int nq = T * H * dk, nk = S * G * dk, nv = S * G * dv, no = T * H * dv;
        float *q = falloc(nq), *qd = falloc(2 * nq), *k = falloc(nk), *v = falloc(nv);
        float *o = falloc(no), *od = falloc(no);
        drt_fill_uniform(q, nq, &r, -1, 1);
        drt_fill_uniform(qd, 2 * nq, &r, -1, 1); /* slot 1 stays random */
        drt_fill_uniform(k, nk, &r, -1, 1);
        drt_fill_uniform(v, nv, &r, -1, 1);
        for (int th = 0; th < T * H; th++) memcpy(qd + th * 2 * dk, q + th * dk, sizeof(float) * dk);
        drt_fill_nan(o, no);
        drt_fill_nan(od, no);
        drt_ref_attn(o, q, k, v, T, seq_rows(T, S - T), H, G, dk, dv);
        drt_ref_diff_attn(od, qd, k, v, T, seq_rows(T, S - T), H, G, 1, dk, dv, 0.0f, NULL);
        DRT_CHECK(drt_all_finite(o, no), "%s: non-finite output", name);
        expect_nmse(name, "attn vs diff_attn lambda=0", o, od, no, 1e-14);
        free(q), free(qd), free(k), free(v), free(o), free(od);
    }
}

/* q and k uniform in [-amp,amp]: s q.k has standard deviation amp^2/3, so
 * |logits| reach 300 and beyond 710, where exp() overflows even in double
 * unless the row max is subtracted. Those rows are nearly one-hot; the kbias
 * cases instead add one vector of size ~kbias to every key of a (group, slot),
 * which shifts a whole row of logits by a large constant and leaves a spread
 * of O(1) between keys: a large AND non-trivial softmax. */
static void test_attn_large_logits(void) {
    static const struct {
        int T, S, H, G, m, dk, dv;
        float amp, kbias, lambda;
        double min_logit; /* the case must reach at least this |logit| */
        uint64_t seed;
    } cases[] = {
        /* clang-format off */
        {3, 9, 2, 1, 2, 16, 32, 20.0f, 0, 0.8f, 300, 601},
        {3, 9, 2, 1, 2, 16, 32, 30.0f, 0, 0.8f, 710, 602},
        {1, 12, 4, 2, 1, 64, 64, 40.0f, 0, 0.5f, 710, 603},
        {4, 4, 2, 2, 1, 128, 128, 60.0f, 0, 0.2f, 1000, 604},
        {3, 9, 2, 1, 2, 16, 32, 1.0f, 1000.0f, 0.8f, 300, 605},
        {2, 11, 4, 2, 1, 64, 64, 1.0f, 1000.0f, 0.5f, 710, 606},
        /* clang-format on */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int T = cases[c].T, S = cases[c].S, H = cases[c].H, G = cases[c].G, m = cases[c].m, dk = cases[c].dk,
                  dv = cases[c].dv;
        char name[192];
        snprintf(name, sizeof name,
                 "large logits T=%d S=%d H=%d G=%d m=%d dk=%d dv=%d amp=%g kbias=%g lambda=%g "
                 "seed=%llu",
                 T, S, H, G, m, dk, dv, (double)cases[c].amp, (double)cases[c].kbias, (double)cases[c].lambda,
                 (unsigned long long)cases[c].seed);
        drt_rng r;
        drt_rng_seed(&r, cases[c].seed);
        const int nq = T * H * 2 * dk, nk = S * G * m * dk, nv = S * G * dv, no = T * H * dv;
        float *q = falloc(nq), *k = falloc(nk), *v = falloc(nv);
        float *o = falloc(no), *od = falloc(no), *ref = falloc(no);
        drt_fill_uniform(q, nq, &r, -cases[c].amp, cases[c].amp);
        drt_fill_uniform(k, nk, &r, -cases[c].amp, cases[c].amp);
        drt_fill_uniform(v, nv, &r, -1, 1);
        if (cases[c].kbias > 0) {
            /* k[j,g,c] += b[g,c] for every j */
            float *b = falloc(G * m * dk);
            drt_fill_uniform(b, G * m * dk, &r, -cases[c].kbias, cases[c].kbias);
            for (int j = 0; j < S; j++)
                for (int i = 0; i < G * m * dk; i++) k[j * G * m * dk + i] += b[i];
            free(b);
        }
        const double reach = max_abs_logit(q, k, T, S, H, G, m, dk);
        DRT_CHECK(reach >= cases[c].min_logit, "%s: logits only reach %.1f, the case wants %.0f", name, reach,
                  cases[c].min_logit);

        drt_fill_nan(o, no);
        drt_ref_diff_attn(o, q, k, v, T, seq_rows(T, S - T), H, G, m, dk, dv, cases[c].lambda, NULL);
        naive_diff_attn(ref, q, k, v, T, S, H, G, m, dk, dv, cases[c].lambda, NULL);
        DRT_CHECK(drt_all_finite(o, no), "%s: diff_attn output not finite", name);
        expect_nmse(name, "diff_attn vs double", o, ref, no, 1e-12);
        /* the decomposed path rounds logits to f32 (~1e-5 at |300|), so only
         * finiteness and a loose match are asked of it */
        decomposed_diff_attn(od, q, k, v, T, S, H, G, m, dk, dv, cases[c].lambda, NULL);
        DRT_CHECK(drt_all_finite(od, no), "%s: decomposed output not finite", name);
        expect_nmse(name, "decomposed vs double", od, ref, no, 1e-6);

        if (m == 1) {
            /* ATTN on slot 0 against the same double reference with lambda 0 */
            float *qa = falloc(T * H * dk);
            for (int th = 0; th < T * H; th++) memcpy(qa + th * dk, q + th * 2 * dk, sizeof(float) * dk);
            drt_fill_nan(o, no);
            drt_ref_attn(o, qa, k, v, T, seq_rows(T, S - T), H, G, dk, dv);
            naive_diff_attn(ref, q, k, v, T, S, H, G, 1, dk, dv, 0.0f, NULL);
            DRT_CHECK(drt_all_finite(o, no), "%s: attn output not finite", name);
            expect_nmse(name, "attn vs double", o, ref, no, 1e-12);
            free(qa);
        }
        free(q), free(k), free(v), free(o), free(od), free(ref);
    }
}

/* Logit quantization (ref_ops.h, niah --attn-bits): with attn_bits, ATTN's
 * logits are quantized per row before the softmax, exactly as written here
 * by hand; also through a graph node asking for it in ip[1]. */
static void test_attn_bits(void) {
    enum { T = 3, S = 3, DK = 4, DV = 2 };
    const float q[T * DK] = {1, -2, 0.5f, 3, -1, 0.25f, 2, 1, 0.5f, 0.5f, -0.5f, 2};
    const float k[S * DK] = {0.3f, 1, -1, 0.7f, 2, -0.5f, 0.1f, 1, -1.5f, 0.2f, 0.9f, -0.3f};
    const float v[S * DV] = {1, 2, -3, 0.5f, 4, -1};
    for (int bits = 2; bits <= 8; bits += 3) {
        float o[T * DV];
        drt_ref_attn_bits(o, q, k, v, T, seq_rows(T, S - T), 1, 1, DK, DV, bits);
        for (int t = 0; t < T; t++) {
            double l[S], m = 0, L = ldexp(1.0, bits - 1) - 1, mx = -1e300, den = 0, acc[DV] = {0};
            for (int j = 0; j <= t; j++) {
                l[j] = 0;
                for (int d = 0; d < DK; d++) l[j] += (double)q[t * DK + d] * k[j * DK + d];
                l[j] *= 0.5; /* 1/sqrt(4) */
                m = fabs(l[j]) > m ? fabs(l[j]) : m;
            }
            for (int j = 0; j <= t; j++) {
                l[j] = round(l[j] / m * L) * m / L;
                mx = l[j] > mx ? l[j] : mx;
            }
            for (int j = 0; j <= t; j++) den += exp(l[j] - mx);
            for (int j = 0; j <= t; j++)
                for (int e = 0; e < DV; e++) acc[e] += exp(l[j] - mx) / den * v[j * DV + e];
            for (int e = 0; e < DV; e++)
                DRT_CHECK(fabs(o[t * DV + e] - acc[e]) <= 1e-6 * (1 + fabs(acc[e])),
                          "attn_bits %d: o[%d,%d] = %.9g, expected %.9g (quantized logits by hand)", bits, t, e,
                          o[t * DV + e], acc[e]);
        }
    }
    /* 0 bits is the plain kernel; a node's ip[1] reaches the kernel */
    float plain[T * DV], zero[T * DV], two[T * DV], node2[T * DV];
    drt_ref_attn(plain, q, k, v, T, seq_rows(T, S - T), 1, 1, DK, DV);
    drt_ref_attn_bits(zero, q, k, v, T, seq_rows(T, S - T), 1, 1, DK, DV, 0);
    drt_ref_attn_bits(two, q, k, v, T, seq_rows(T, S - T), 1, 1, DK, DV, 2);
    DRT_CHECK(!memcmp(plain, zero, sizeof plain), "attn_bits 0 is not the plain kernel");
    drt_graph *g = drt_graph_new();
    drt_tensor *tq = drt_new_tensor_3d(g, DRT_F32, T, 1, DK, "q"), *tk = drt_new_tensor_3d(g, DRT_F32, S, 1, DK, "k");
    drt_tensor *tv = drt_new_tensor_3d(g, DRT_F32, S, 1, DV, "v");
    drt_tensor *node = drt_attn(g, tq, tk, tv, drt_new_rows(g, T));
    DRT_CHECK(node != NULL, "attn node: %s", drt_last_error());
    if (node) {
        node->ip[1] = 2;
        void *srcs[DRT_MAX_SRC] = {(void *)q, (void *)k, (void *)v, NULL, (void *)seq_rows(T, S - T)};
        drt_exec ex;
        drt_exec_rows(&ex, seq_rows(T, S - T), T);
        DRT_CHECK(drt_ref_run_node(node, node2, srcs, &ex) == DRT_OK, "run attn node: %s", drt_last_error());
        DRT_CHECK(!memcmp(node2, two, sizeof two), "an ATTN node with ip[1] = 2 is not the 2-bit kernel");
    }
    drt_graph_free(g);
    int differ = 0;
    for (int i = 0; i < T * DV; i++) differ |= plain[i] != two[i];
    DRT_CHECK(differ, "attn_bits 2 changed nothing: the quantization is not applied");
}

/* q8_0 / q4_0: hand-made blocks read back element by element (drt_quant.h),
 * and quantize -> dequantize within half a step of the input */
static void test_quant_blocks(void) {
    unsigned char b8[34] = {0x00, 0x3c}; /* d = 1.0 (f16 0x3c00) */
    for (int j = 0; j < 32; j++) b8[2 + j] = (unsigned char)(int8_t)(j - 16);
    unsigned char b4[18] = {0x00, 0x40}; /* d = 2.0 */
    for (int j = 0; j < 16; j++) b4[2 + j] = (unsigned char)(j | (15 - j) << 4);
    for (int j = 0; j < 32; j++) {
        DRT_CHECK(drt_ref_load_weight(b8, DRT_Q8_0, j) == (float)(j - 16), "q8_0 element %d", j);
        int qv = j < 16 ? j : 15 - (j - 16);
        DRT_CHECK(drt_ref_load_weight(b4, DRT_Q4_0, j) == 2.0f * (float)(qv - 8), "q4_0 element %d: %g", j,
                  drt_ref_load_weight(b4, DRT_Q4_0, j));
    }
    float x[64], y[64];
    unsigned char blk[4 * 34];
    uint64_t s = 99;
    for (int i = 0; i < 64; i++)
        x[i] = (float)((int64_t)((s = s * 6364136223846793005ull + 1) >> 33) % 2001 - 1000) / 137.0f;
    for (int f = 0; f < 2; f++) {
        drt_dtype t = f ? DRT_Q4_0 : DRT_Q8_0;
        drt_quantize_row(x, t, blk, 64);
        drt_dequantize_row(blk, t, y, 64);
        for (int b = 0; b < 2; b++) {
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fabsf(x[b * 32 + j]) > amax ? fabsf(x[b * 32 + j]) : amax;
            /* half a step, plus the scale's f16 rounding over the whole range;
             * q4_0's 16 levels reach -8d = m but only 7d = -7/8 m on the
             * other side: values there are clipped by up to a whole step */
            double step = f ? amax / 8.0 : amax / 127.0, tol = step * (f ? 1.0 : 0.5) + amax * 1.0 / 1024;
            for (int j = 0; j < 32; j++)
                DRT_CHECK(fabs((double)y[b * 32 + j] - x[b * 32 + j]) <= tol, "%s block %d element %d: %g -> %g",
                          drt_dtype_name(t), b, j, x[b * 32 + j], y[b * 32 + j]);
        }
    }
}

int main(void) {
    test_load_weight();
    test_attn_bits();
    test_quant_blocks();
    test_embed();
    test_rmsnorm();
    test_groupnorm();
    test_matmul_hand();
    test_matmul_random();
    test_rope_hand();
    test_rope_interleaved();
    test_pointwise();
    test_kv_write();
    test_permute_hand();
    test_permute_all();
    test_dual_softmax_hand();
    test_dual_softmax_random();
    test_diff_attn_hand();
    test_diff_attn_decomposed();
    test_attn();
    test_attn_large_logits();
    return drt_test_summary("test_cpu_ops");
}
