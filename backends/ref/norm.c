/* CPU reference: RMSNORM and GROUPNORM (docs/design.md section 3).
 * The sum of squares is accumulated in double and the whole row is scaled in
 * double, so each output is rounded to f32 exactly once. */
#include <math.h>

#include "ref_ops.h"

/* x, y are (T,C); w is (C) or NULL.
 * Napkin math: 4*T*C flops; reads T*C (+C), writes T*C floats. */
void drt_ref_rmsnorm(float *y, const float *x, int T, int C, const float *w, float eps) {
    for (int t = 0; t < T; t++) {
        const float *xt = x + (int64_t)t * C;
        float *yt = y + (int64_t)t * C;
        double ss = 0.0;
        for (int c = 0; c < C; c++) ss += (double)xt[c] * (double)xt[c];
        const double r = 1.0 / sqrt(ss / C + (double)eps);
        for (int c = 0; c < C; c++) {
            double v = (double)xt[c] * r;
            if (w) v *= (double)w[c];
            yt[c] = (float)v;
        }
    }
}

/* x, y are (T,H,dv); w is (dv) or NULL. Each (t,h) row of dv is one head's
 * attention output, normalised on its own; scale is (1 - lambda_init) in V1.
 * Written out rather than calling drt_ref_rmsnorm so that the extra scale does not
 * round the output a second time. */
void drt_ref_groupnorm(float *y, const float *x, int T, int H, int dv, const float *w, float eps, float scale) {
    const int64_t rows = (int64_t)T * H;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * dv;
        float *yr = y + r * dv;
        double ss = 0.0;
        for (int e = 0; e < dv; e++) ss += (double)xr[e] * (double)xr[e];
        const double inv = (double)scale / sqrt(ss / dv + (double)eps);
        for (int e = 0; e < dv; e++) {
            double v = (double)xr[e] * inv;
            if (w) v *= (double)w[e];
            yr[e] = (float)v;
        }
    }
}
