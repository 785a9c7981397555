/* Fast CPU RMSNORM and GROUPNORM (docs/design.md section 3), compiled once per
 * ISA. Reference: backends/ref/norm.c. Threads split the rows; each row's
 * sum of squares is a vector reduction in f32.
 * Napkin math: 4 flops per element; reads x (and w), writes y.
 *
 * Checked against the reference (exit status 0: every case within bound):
 *   diffrt conform --backend cpu --op RMSNORM,GROUPNORM, and with
 *   DIFFRT_CPU_ISA=avx2 (avx512, neon, generic) each kernel set
 */
#include <math.h>

#include "cpu_fast.h"
#include "simd.h"

/* y, x (cols); y = x * r * (w or 1) */
static void norm_row(float *y, const float *x, int64_t C, const float *w, float eps, float scale) {
    vf ss = vzero();
    int64_t c = 0;
    for (; c + VL <= C; c += VL) {
        vf v = vload(x + c);
        ss = vfma(v, v, ss);
    }
    float s = vhsum(ss);
    for (; c < C; c++) s += x[c] * x[c];
    const float r = scale / sqrtf(s / (float)C + eps);
    const vf rv = vset1(r);
    for (c = 0; c + VL <= C; c += VL) {
        vf v = vmul(vload(x + c), rv);
        vstore(y + c, w ? vmul(v, vload(w + c)) : v);
    }
    for (; c < C; c++) y[c] = x[c] * r * (w ? w[c] : 1.0f);
}

/* y, a are (rows, cols); w (cols) or NULL */
void KFN(cpu_rmsnorm)(void *args, int ith, int nth) {
    const cpu_ew_args *a = args;
    int64_t lo, hi;
    cpu_split(a->rows, 1, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) norm_row(a->y + r * a->cols, a->a + r * a->cols, a->cols, a->w, a->eps, 1.0f);
}

/* y, a are (T*H, dv) = (rows, cols); w (dv) or NULL; times scale */
void KFN(cpu_groupnorm)(void *args, int ith, int nth) {
    const cpu_ew_args *a = args;
    int64_t lo, hi;
    cpu_split(a->rows, 1, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) norm_row(a->y + r * a->cols, a->a + r * a->cols, a->cols, a->w, a->eps, a->scale);
}
