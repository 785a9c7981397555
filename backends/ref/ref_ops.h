/* The CPU reference kernels, one plain function per op (docs/design.md section 3).
 * Arrays are flat and row-major; every shape is written next to its pointer.
 * Activations are f32; weights (W of MATMUL, E of EMBED) may be f32/f16/bf16.
 * Every reduction (dot products, sums of squares, softmax denominators and
 * the weighted sums of attention) accumulates in double. These functions do
 * no validation: the op table checks shapes before a node is ever run. */
#ifndef DRT_REF_OPS_H
#define DRT_REF_OPS_H

#include <stdint.h>

#include "diffrt/diffrt.h"

/* Reads element i of a weight array of dtype t (f32/f16/bf16) as float. */
float drt_ref_load_weight(const void *w, drt_dtype t, int64_t i);

/* out is (T,D); ids is (T) with every id in [0,V); E is (V,D) of dtype et */
void drt_ref_embed(float *out, const int32_t *ids, int T, const void *E, drt_dtype et, int V, int D);

/* y, x are (T,C); w is (C) or NULL (no weight); y = x / sqrt(mean(x^2)+eps) * w */
void drt_ref_rmsnorm(float *y, const float *x, int T, int C, const float *w, float eps);

/* Batched Y = scale * X W^T.
 * x is (B,T,K); y is (B,T,N);
 * w is (Bw,N,K) when trans_w == 0, (Bw,K,N) when trans_w == 1, dtype wt;
 * batch b of x uses batch floor(b*Bw/B) of w (B is a multiple of Bw). */
void drt_ref_matmul(float *y, const float *x, const void *w, drt_dtype wt, int B, int Bw, int T, int N, int K,
                    int trans_w, float scale);

/* rows is (T,2): row t is token rows[2t+1] (its position) of the sequence
 * whose cache rows start at rows[2t] (drt_exec in drt_graph.h). */

/* y, x are (T,Hn,d), d even; row t is at position pos[t] (rows); inv_freq is (d/2).
 * rotate_half ("NeoX"): for i < d/2, with a = pos*inv_freq[i],
 *   y[i]       = x[i] cos a - x[i+d/2] sin a
 *   y[i+d/2]   = x[i+d/2] cos a + x[i] sin a */
void drt_ref_rope(float *y, const float *x, int T, int Hn, int d, const int32_t *rows, const float *inv_freq);

/* a, s1, s2 are (H,T,S), S >= T, mask offset p0 = S - T: query t sees keys j <= p0+t.
 * a = softmax(s1 + M) - lambda * softmax(s2 + M); masked entries of a are 0.
 * lambda_th is (T,H) (per token and head, V2) or NULL, then the scalar lambda is used. */
int drt_ref_dual_softmax(float *a, const float *s1, const float *s2, int H, int T, int S, float lambda,
                         const float *lambda_th);

/* Fused differential attention, docs/design.md section 3.
 * o is (T,H,dv); q is (T,H,2,dk); k is (S_cap,G,m,dk) with m in {1,2}; v is
 * (S_cap,G,dv). Row t attends the keys base .. base + pos of its rows entry;
 * diff-head h uses kv group g = floor(h*G/H); scale 1/sqrt(dk).
 * lambda_th is (T,H) or NULL (then scalar lambda). */
int drt_ref_diff_attn(float *o, const float *q, const float *k, const float *v, int T, const int32_t *rows, int H,
                      int G, int m, int dk, int dv, float lambda, const float *lambda_th);

/* Standard causal attention. o is (T,H,dv); q is (T,H,dk); k is (S_cap,G,dk);
 * v is (S_cap,G,dv); rows as above. */
int drt_ref_attn(float *o, const float *q, const float *k, const float *v, int T, const int32_t *rows, int H, int G,
                 int dk, int dv);

/* The three above return 1, or 0 when their scratch row (a few doubles per
 * key position) cannot be allocated: the output is then all NaN, and
 * drt_ref_run_node turns it into a "ref: ... cannot allocate" error. */

/* y, x are (T,H,dv); per (t,h): RMSNORM over dv with eps, times w (dv, or NULL), times scale. */
void drt_ref_groupnorm(float *y, const float *x, int T, int H, int dv, const float *w, float eps, float scale);

/* y, g, u are (n): y = silu(g) * u */
void drt_ref_swiglu(float *y, const float *g, const float *u, int64_t n);
/* y, x are (n) */
void drt_ref_sigmoid(float *y, const float *x, int64_t n);
/* y, a, b are (n) */
void drt_ref_add(float *y, const float *a, const float *b, int64_t n);

/* cache is (S_cap, row) floats; src is (T, row); row t goes to cache row
 * base + pos of its rows entry. */
void drt_ref_kv_write(float *cache, const float *src, int T, int64_t row, const int32_t *rows);
/* The same into a cache of type ct (f32, f16, q8_0: drt_kv.h's rounding). */
void drt_ref_kv_write_typed(void *cache, drt_dtype ct, const float *src, int T, int64_t row, const int32_t *rows);

/* General 4-d permuted copy. x has shape ne[0..3] (row-major, ne[3] fastest);
 * y has shape ne[perm[0]], ne[perm[1]], ne[perm[2]], ne[perm[3]] and
 * y[i0,i1,i2,i3] = x[j] where j[perm[a]] = i_a. */
void drt_ref_permute(float *y, const float *x, const int64_t ne[4], const int perm[4]);

/* The two above with every row of attention logits (q.k/sqrt(dk), each map
 * of a DIFF head) quantized before its softmax when attn_bits > 0,
 * symmetric per-row absmax to that many bits (diffrt niah --attn-bits, the
 * paper's Fig. 8): m = max|l|, L = 2^(bits-1) - 1, l <- round(l / m * L) * m / L.
 * A graph's ATTN / DIFF_ATTN node asks for it in ip[1] (drt_ref_run_node). */
int drt_ref_diff_attn_bits(float *o, const float *q, const float *k, const float *v, int T, const int32_t *rows, int H,
                           int G, int m, int dk, int dv, float lambda, const float *lambda_th, int attn_bits);
int drt_ref_attn_bits(float *o, const float *q, const float *k, const float *v, int T, const int32_t *rows, int H,
                      int G, int dk, int dv, int attn_bits);
/* ... and with k and v of type kvt (f32, f16, q8_0; drt_kv.h), every key and
 * value widened exactly before use. */
int drt_ref_diff_attn_kv(float *o, const float *q, const void *k, const void *v, drt_dtype kvt, int T,
                         const int32_t *rows, int H, int G, int m, int dk, int dv, float lambda, const float *lambda_th,
                         int attn_bits);
int drt_ref_attn_kv(float *o, const float *q, const void *k, const void *v, drt_dtype kvt, int T, const int32_t *rows,
                    int H, int G, int dk, int dv, int attn_bits);

#endif
