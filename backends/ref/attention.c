/* CPU reference: DUAL_SOFTMAX, DIFF_ATTN and ATTN (docs/design.md section 3).
 * Logits, softmax numerators and denominators and the weighted sums over V are
 * all kept in double; each output element is rounded to f32 once.
 * DUAL_SOFTMAX's causal mask has offset p0 = S - T: query t sits at position
 * p0+t and sees keys j <= p0+t. The fused ops read per row (rows, (T,2)):
 * query t sits at position pos = rows[2t+1] of the sequence whose keys start
 * at cache row base = rows[2t], and sees its keys base .. base + pos. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "drt_kv.h"
#include "ref_ops.h"

/* a, b are (n) */
static double dot(const float *a, const float *b, int n) {
    double acc = 0.0;
    for (int i = 0; i < n; i++) acc += (double)a[i] * (double)b[i];
    return acc;
}

/* The n elements from element e of a K or V cache of type t, as floats: in
 * place for f32, else widened into buf (n). e is a multiple of 32 for q8_0
 * (rows of whole blocks). */
static const float *kv_at(const void *c, drt_dtype t, int64_t e, int n, float *buf) {
    if (t == DRT_F32) return (const float *)c + e;
    drt_kv_load(t, (const char *)c + drt_row_bytes(t, e), buf, n);
    return buf;
}

/* l is (n) logits, n >= 1. Replaces each by exp(l - max l) and returns their
 * sum. Subtracting the row max keeps every exp in (0,1] and the sum >= 1, so
 * logits of magnitude 300 (the paper's Table 5) or 1e4 cannot overflow. */
static double exp_row(double *l, int n) {
    double mx = l[0];
    for (int j = 1; j < n; j++)
        if (l[j] > mx) mx = l[j];
    double sum = 0.0;
    for (int j = 0; j < n; j++) {
        l[j] = exp(l[j] - mx);
        sum += l[j];
    }
    return sum;
}

/* One row of n logits before its softmax, quantized symmetric per-row
 * absmax to bits when bits > 0 (ref_ops.h). */
static void quantize_row(double *l, int n, int bits) {
    if (bits <= 0) return;
    double m = 0;
    for (int j = 0; j < n; j++) m = fabs(l[j]) > m ? fabs(l[j]) : m;
    if (!(m > 0)) return;
    const double L = ldexp(1.0, bits - 1) - 1;
    for (int j = 0; j < n; j++) l[j] = round(l[j] / m * L) * m / L;
}

/* the most keys a row sees: max of pos + 1 */
static int max_keys(const int32_t *rows, int T) {
    int n = 0;
    for (int t = 0; t < T; t++)
        if (rows[2 * t + 1] + 1 > n) n = rows[2 * t + 1] + 1;
    return n;
}

/* These functions return void, so when their scratch row cannot be
 * allocated the output is filled with NaN: every comparison then fails
 * loudly instead of reading stale numbers. o is (n). */
static void fill_nan(float *o, int64_t n) {
    for (int64_t i = 0; i < n; i++) o[i] = NAN;
}

/* a, s1, s2 are (H,T,S); lambda_th is (T,H) or NULL.
 * a[h,t,j] = softmax_j(s1[h,t,:])[j] - lambda * softmax_j(s2[h,t,:])[j] for
 * j <= p0+t, and exactly 0 for the masked j > p0+t (a later matmul with V
 * then needs no mask of its own). Each row sums to 1 - lambda. */
int drt_ref_dual_softmax(float *a, const float *s1, const float *s2, int H, int T, int S, float lambda,
                         const float *lambda_th) {
    const int p0 = S - T;
    double *e1 = malloc(sizeof(double) * 2 * (size_t)S); /* (2,S): both rows' exps */
    if (!e1) {
        fill_nan(a, (int64_t)H * T * S);
        return 0;
    }
    double *e2 = e1 + S;
    for (int h = 0; h < H; h++) {
        for (int t = 0; t < T; t++) {
            const int64_t row = ((int64_t)h * T + t) * S;
            const int n = p0 + t + 1;
            for (int j = 0; j < n; j++) {
                e1[j] = s1[row + j];
                e2[j] = s2[row + j];
            }
            const double sum1 = exp_row(e1, n);
            const double sum2 = exp_row(e2, n);
            const double lam = lambda_th ? lambda_th[(int64_t)t * H + h] : lambda;
            for (int j = 0; j < n; j++) a[row + j] = (float)(e1[j] / sum1 - lam * e2[j] / sum2);
            for (int j = n; j < S; j++) a[row + j] = 0.0f;
        }
    }
    free(e1);
    return 1;
}

/* o is (T,H,dv); q is (T,H,2,dk); k is (S,G,m,dk), m in {1,2}; v is (S,G,dv);
 * lambda_th is (T,H) or NULL. Diff-head h reads kv group g = floor(h*G/H).
 *   A1 = softmax_j(s * q[t,h,0] . k[j,g,0])
 *   A2 = softmax_j(s * q[t,h,1] . k[j,g,m-1])   (m = 1: both maps share k)
 *   o[t,h] = sum_j (A1[j] - lambda * A2[j]) v[j,g]
 * Napkin math: ~H*sum(pos+1)*(4*dk + 2*dv) flops. */
int drt_ref_diff_attn(float *o, const float *q, const float *k, const float *v, int T, const int32_t *rows, int H,
                      int G, int m, int dk, int dv, float lambda, const float *lambda_th) {
    return drt_ref_diff_attn_bits(o, q, k, v, T, rows, H, G, m, dk, dv, lambda, lambda_th, 0);
}

int drt_ref_diff_attn_bits(float *o, const float *q, const float *k, const float *v, int T, const int32_t *rows, int H,
                           int G, int m, int dk, int dv, float lambda, const float *lambda_th, int attn_bits) {
    return drt_ref_diff_attn_kv(o, q, k, v, DRT_F32, T, rows, H, G, m, dk, dv, lambda, lambda_th, attn_bits);
}

int drt_ref_diff_attn_kv(float *o, const float *q, const void *k, const void *v, drt_dtype kvt, int T,
                         const int32_t *rows, int H, int G, int m, int dk, int dv, float lambda, const float *lambda_th,
                         int attn_bits) {
    const int S = max_keys(rows, T);
    const double s = 1.0 / sqrt((double)dk);
    /* (2*S + dv): the two maps' logits over keys, then one output row;
     * then (2*dk + dv) floats: a key of each map and a value, widened */
    double *l1 = malloc(sizeof(double) * (2 * (size_t)S + (size_t)dv) + sizeof(float) * (2 * (size_t)dk + (size_t)dv));
    if (!l1) {
        fill_nan(o, (int64_t)T * H * dv);
        return 0;
    }
    double *l2 = l1 + S, *acc = l2 + S;
    float *kb1 = (float *)(acc + dv), *kb2 = kb1 + dk, *vb = kb2 + dk;
    for (int t = 0; t < T; t++) {
        const int64_t base = rows[2 * t];
        const int n = rows[2 * t + 1] + 1;
        for (int h = 0; h < H; h++) {
            const int64_t g = (int64_t)h * G / H;
            const float *q1 = q + ((int64_t)t * H + h) * 2 * dk;
            const float *q2 = q1 + dk;
            for (int j = 0; j < n; j++) {
                const int64_t e1 = ((base + j) * G + g) * m * dk;
                const float *k1 = kv_at(k, kvt, e1, dk, kb1);
                const float *k2 = m == 1 ? k1 : kv_at(k, kvt, e1 + dk, dk, kb2);
                l1[j] = s * dot(q1, k1, dk);
                l2[j] = s * dot(q2, k2, dk);
            }
            quantize_row(l1, n, attn_bits);
            quantize_row(l2, n, attn_bits);
            const double sum1 = exp_row(l1, n);
            const double sum2 = exp_row(l2, n);
            const double lam = lambda_th ? lambda_th[(int64_t)t * H + h] : lambda;
            for (int e = 0; e < dv; e++) acc[e] = 0.0;
            for (int j = 0; j < n; j++) {
                const double w = l1[j] / sum1 - lam * l2[j] / sum2;
                const float *vj = kv_at(v, kvt, ((base + j) * G + g) * dv, dv, vb);
                for (int e = 0; e < dv; e++) acc[e] += w * (double)vj[e];
            }
            float *ot = o + ((int64_t)t * H + h) * dv;
            for (int e = 0; e < dv; e++) ot[e] = (float)acc[e];
        }
    }
    free(l1);
    return 1;
}

/* o is (T,H,dv); q is (T,H,dk); k is (S_cap,G,dk); v is (S_cap,G,dv); head h
 * reads kv group floor(h*G/H); scale 1/sqrt(dk); rows as above.
 * Napkin math: ~H*sum(pos+1)*(2*dk + 2*dv) flops. */
int drt_ref_attn(float *o, const float *q, const float *k, const float *v, int T, const int32_t *rows, int H, int G,
                 int dk, int dv) {
    return drt_ref_attn_bits(o, q, k, v, T, rows, H, G, dk, dv, 0);
}

int drt_ref_attn_bits(float *o, const float *q, const float *k, const float *v, int T, const int32_t *rows, int H,
                      int G, int dk, int dv, int attn_bits) {
    return drt_ref_attn_kv(o, q, k, v, DRT_F32, T, rows, H, G, dk, dv, attn_bits);
}

int drt_ref_attn_kv(float *o, const float *q, const void *k, const void *v, drt_dtype kvt, int T, const int32_t *rows,
                    int H, int G, int dk, int dv, int attn_bits) {
    const int S = max_keys(rows, T);
    const double s = 1.0 / sqrt((double)dk);
    /* (S + dv): logits over keys, then one output row; then a key and a
     * value widened (dk + dv floats) */
    double *l = malloc(sizeof(double) * ((size_t)S + (size_t)dv) + sizeof(float) * ((size_t)dk + (size_t)dv));
    if (!l) {
        fill_nan(o, (int64_t)T * H * dv);
        return 0;
    }
    double *acc = l + S;
    float *kb = (float *)(acc + dv), *vb = kb + dk;
    for (int t = 0; t < T; t++) {
        const int64_t base = rows[2 * t];
        const int n = rows[2 * t + 1] + 1;
        for (int h = 0; h < H; h++) {
            const int64_t g = (int64_t)h * G / H;
            const float *qt = q + ((int64_t)t * H + h) * dk;
            for (int j = 0; j < n; j++) l[j] = s * dot(qt, kv_at(k, kvt, ((base + j) * G + g) * dk, dk, kb), dk);
            quantize_row(l, n, attn_bits);
            const double sum = exp_row(l, n);
            for (int e = 0; e < dv; e++) acc[e] = 0.0;
            for (int j = 0; j < n; j++) {
                const double w = l[j] / sum;
                const float *vj = kv_at(v, kvt, ((base + j) * G + g) * dv, dv, vb);
                for (int e = 0; e < dv; e++) acc[e] += w * (double)vj[e];
            }
            float *ot = o + ((int64_t)t * H + h) * dv;
            for (int e = 0; e < dv; e++) ot[e] = (float)acc[e];
        }
    }
    free(l);
    return 1;
}
