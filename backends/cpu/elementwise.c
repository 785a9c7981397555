/* Fast CPU EMBED, ROPE, SWIGLU, SIGMOID, ADD and DUAL_SOFTMAX (docs/design.md
 * section 3), compiled once per ISA. Reference: backends/ref/elementwise.c
 * and attention.c. Threads split elements or rows; exp is vexp (simd.h).
 * Napkin math: each reads its inputs and writes its output once.
 *
 * Checked against the reference (exit status 0: every case within bound):
 *   diffrt conform --backend cpu --op EMBED,ROPE,SWIGLU,SIGMOID,ADD,DUAL_SOFTMAX,
 *   and with DIFFRT_CPU_ISA=avx2 (avx512, neon, generic) each kernel set
 */
#include <math.h>
#include <string.h>

#include "cpu_fast.h"
#include "simd.h"

/* y, a gate, b up are (n): y = a / (1 + e^-a) * b */
void KFN(cpu_swiglu)(void *args, int ith, int nth) {
    const cpu_ew_args *a = args;
    int64_t lo, hi, i;
    cpu_split(a->n, VL, ith, nth, &lo, &hi);
    const vf one = vset1(1.0f);
    for (i = lo; i + VL <= hi; i += VL) {
        vf g = vload(a->a + i);
        /* e^-g overflows to +inf for g < -88: the quotient is then -0, as in the reference */
        vf e = vexp(vsub(vzero(), g));
        vstore(a->y + i, vmul(vmul(g, vload(a->b + i)), vdiv1(one, vadd(one, e))));
    }
    for (; i < hi; i++) a->y[i] = a->a[i] / (1.0f + expf(-a->a[i])) * a->b[i];
}

/* y, a are (n) */
void KFN(cpu_sigmoid)(void *args, int ith, int nth) {
    const cpu_ew_args *a = args;
    int64_t lo, hi, i;
    cpu_split(a->n, VL, ith, nth, &lo, &hi);
    const vf one = vset1(1.0f);
    for (i = lo; i + VL <= hi; i += VL) vstore(a->y + i, vdiv1(one, vadd(one, vexp(vsub(vzero(), vload(a->a + i))))));
    for (; i < hi; i++) a->y[i] = 1.0f / (1.0f + expf(-a->a[i]));
}

/* y, a, b are (n) */
void KFN(cpu_add)(void *args, int ith, int nth) {
    const cpu_ew_args *a = args;
    int64_t lo, hi, i;
    cpu_split(a->n, VL, ith, nth, &lo, &hi);
    for (i = lo; i + VL <= hi; i += VL) vstore(a->y + i, vadd(vload(a->a + i), vload(a->b + i)));
    for (; i < hi; i++) a->y[i] = a->a[i] + a->b[i];
}

/* y (T, cols) = rows ids[t] of w (V, cols) of dtype wt (ids checked by the caller) */
void KFN(cpu_embed)(void *args, int ith, int nth) {
    const cpu_ew_args *a = args;
    int64_t lo, hi;
    cpu_split(a->T, 1, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        const int64_t row = (int64_t)a->ids[t] * a->cols;
        float *y = a->y + t * a->cols;
        int64_t c = 0;
        if (a->wt == DRT_F16)
            for (; c + VL <= a->cols; c += VL) vstore(y + c, vload_w(a->w, row + c, DRT_F16));
        else if (a->wt == DRT_BF16)
            for (; c + VL <= a->cols; c += VL) vstore(y + c, vload_w(a->w, row + c, DRT_BF16));
        for (; c < a->cols; c++) y[c] = load_w1(a->w, row + c, a->wt);
    }
}

/* y, a are (T, H, d); b is inv_freq (d/2); row t at position pos_rows[2t+1].
 * rotate_half pairs (i, i + d/2); the angle is formed in double as in the
 * reference (pos * inv_freq reaches ~1e3 at long positions), cos/sin once per
 * (t, i) for all H heads. Threads split tokens. */
void KFN(cpu_rope)(void *args, int ith, int nth) {
    const cpu_ew_args *a = args;
    const int half = a->d / 2;
    int64_t lo, hi;
    cpu_split(a->T, 1, ith, nth, &lo, &hi);
    float cs[2 * 512]; /* cos, sin for half <= 512 (op check: d <= 1024) */
    for (int64_t t = lo; t < hi; t++) {
        const double pos = (double)a->pos_rows[2 * t + 1];
        for (int i = 0; i < half; i++) {
            const double ang = pos * (double)a->b[i];
            cs[i] = (float)cos(ang);
            cs[half + i] = (float)sin(ang);
        }
        for (int h = 0; h < a->H; h++) {
            const int64_t off = (t * a->H + h) * a->d;
            const float *x = a->a + off;
            float *y = a->y + off;
            int i = 0;
            for (; i + VL <= half; i += VL) {
                vf x0 = vload(x + i), x1 = vload(x + half + i), c = vload(cs + i), s = vload(cs + half + i);
                vf y0 = vsub(vmul(x0, c), vmul(x1, s)), y1 = vfma(x0, s, vmul(x1, c));
                vstore(y + i, y0);
                vstore(y + half + i, y1);
            }
            for (; i < half; i++) {
                const float x0 = x[i], x1 = x[half + i];
                y[i] = x0 * cs[i] - x1 * cs[half + i];
                y[half + i] = x1 * cs[i] + x0 * cs[half + i];
            }
        }
    }
}

/* e (n) = exp(s - max s), returns the sum; s may alias e */
static float exp_row(float *e, const float *s, int64_t n) {
    vf m = vset1(-INFINITY);
    int64_t j = 0;
    for (; j + VL <= n; j += VL) m = vmax(m, vload(s + j));
    float mx = vhmax(m);
    for (; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    const vf mv = vset1(mx);
    vf sum = vzero();
    for (j = 0; j + VL <= n; j += VL) {
        vf x = vexp(vsub(vload(s + j), mv));
        vstore(e + j, x);
        sum = vadd(sum, x);
    }
    float ls = vhsum(sum);
    for (; j < n; j++) ls += e[j] = expf(s[j] - mx);
    return ls;
}

/* y, a s1, b s2 are (H, T, S = cols), p0 = S - T; c is lambda_th (T, H) or
 * NULL (scalar lambda). Threads split the H*T rows; per row the second map's
 * exps go to a scratch row (slice ith's), the first map's into y. */
void KFN(cpu_dual_softmax)(void *args, int ith, int nth) {
    const cpu_ew_args *a = args;
    const int64_t S = a->cols, T = a->T, p0 = S - T;
    float *e2 = a->scratch[ith];
    int64_t lo, hi;
    cpu_split(a->rows, 1, ith, nth, &lo, &hi);
    for (int64_t row = lo; row < hi; row++) {
        const int64_t h = row / T, t = row % T, n = p0 + t + 1;
        float *y = a->y + row * S;
        const float l1 = exp_row(y, a->a + row * S, n), l2 = exp_row(e2, a->b + row * S, n);
        const float lam = a->c ? a->c[t * a->H + h] : a->lambda;
        const float i1 = 1.0f / l1, i2 = lam / l2;
        const vf v1 = vset1(i1), v2 = vset1(i2);
        int64_t j = 0;
        for (; j + VL <= n; j += VL) vstore(y + j, vsub(vmul(vload(y + j), v1), vmul(vload(e2 + j), v2)));
        for (; j < n; j++) y[j] = y[j] * i1 - e2[j] * i2;
        for (j = n; j < S; j++) y[j] = 0.0f;
    }
}
