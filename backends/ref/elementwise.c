/* CPU reference: EMBED, ROPE, SWIGLU, SIGMOID, ADD, KV_WRITE and the
 * permuted copy used by the decomposed attention path (docs/design.md section 3).
 * Transcendentals are evaluated in double so each output is rounded once. */
#include <math.h>
#include <string.h>

#include "drt_kv.h"
#include "ref_ops.h"

/* out is (T,D); ids is (T), each in [0,V) (checked by the op table, so no
 * read here can go out of bounds); E is (V,D) of dtype et. */
void drt_ref_embed(float *out, const int32_t *ids, int T, const void *E, drt_dtype et, int V, int D) {
    (void)V;
    for (int t = 0; t < T; t++) {
        const int64_t row = (int64_t)ids[t] * D;
        for (int d = 0; d < D; d++) out[(int64_t)t * D + d] = drt_ref_load_weight(E, et, row + d);
    }
}

/* x, y are (T,Hn,d); inv_freq is (d/2); row t is at position rows[2t+1].
 * rotate_half pairs element i with i+d/2 (not 2i with 2i+1: checkpoints with
 * interleaved RoPE have their q/k rows permuted at load time instead).
 * Both inputs of a pair are read before either output is written, so y == x
 * works. The angle is formed in double: pos*inv_freq reaches ~1e3 at long
 * positions, where an f32 product would be off by ~1e-4 radians. */
void drt_ref_rope(float *y, const float *x, int T, int Hn, int d, const int32_t *rows, const float *inv_freq) {
    const int half = d / 2;
    for (int t = 0; t < T; t++) {
        const double pos = (double)rows[2 * t + 1];
        for (int h = 0; h < Hn; h++) {
            const int64_t off = ((int64_t)t * Hn + h) * d;
            for (int i = 0; i < half; i++) {
                const double a = pos * (double)inv_freq[i];
                const double c = cos(a), s = sin(a);
                const double x0 = x[off + i], x1 = x[off + i + half];
                y[off + i] = (float)(x0 * c - x1 * s);
                y[off + i + half] = (float)(x1 * c + x0 * s);
            }
        }
    }
}

/* y, g, u are (n): y = g / (1 + exp(-g)) * u. For g << 0, exp(-g) is +inf in
 * double and the quotient is -0, never NaN. */
void drt_ref_swiglu(float *y, const float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const double gi = g[i];
        y[i] = (float)(gi / (1.0 + exp(-gi)) * (double)u[i]);
    }
}

/* y, x are (n) */
void drt_ref_sigmoid(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = (float)(1.0 / (1.0 + exp(-(double)x[i])));
}

/* y, a, b are (n); one f32 add is already correctly rounded */
void drt_ref_add(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

/* cache is (S_cap,row); src is (T,row); row t lands at cache row
 * rows[2t] + rows[2t+1] (its sequence's base plus its position). */
void drt_ref_kv_write(float *cache, const float *src, int T, int64_t row, const int32_t *rows) {
    drt_ref_kv_write_typed(cache, DRT_F32, src, T, row, rows);
}

void drt_ref_kv_write_typed(void *cache, drt_dtype ct, const float *src, int T, int64_t row, const int32_t *rows) {
    const size_t rb = drt_row_bytes(ct, row);
    for (int t = 0; t < T; t++)
        drt_kv_store(ct, src + (int64_t)t * row, (char *)cache + ((size_t)rows[2 * t] + (size_t)rows[2 * t + 1]) * rb,
                     row);
}

/* x has shape ne[0..3] (row-major, ne[3] fastest); y has shape
 * (ne[perm[0]], ne[perm[1]], ne[perm[2]], ne[perm[3]]).
 * Output axis a walks input axis perm[a], so its step through x is
 * gs[a] = xs[perm[a]]; y is written in order, x is gathered. */
void drt_ref_permute(float *y, const float *x, const int64_t ne[4], const int perm[4]) {
    const int64_t xs[4] = {ne[1] * ne[2] * ne[3], ne[2] * ne[3], ne[3], 1};
    const int64_t yn[4] = {ne[perm[0]], ne[perm[1]], ne[perm[2]], ne[perm[3]]};
    const int64_t gs[4] = {xs[perm[0]], xs[perm[1]], xs[perm[2]], xs[perm[3]]};
    int64_t o = 0;
    for (int64_t i0 = 0; i0 < yn[0]; i0++) {
        for (int64_t i1 = 0; i1 < yn[1]; i1++) {
            for (int64_t i2 = 0; i2 < yn[2]; i2++) {
                for (int64_t i3 = 0; i3 < yn[3]; i3++) {
                    y[o++] = x[i0 * gs[0] + i1 * gs[1] + i2 * gs[2] + i3 * gs[3]];
                }
            }
        }
    }
}
