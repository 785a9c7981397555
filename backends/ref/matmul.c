/* CPU reference: MATMUL (docs/design.md section 3) and the weight-dtype reader it
 * shares with EMBED. Plain loops; every dot product is accumulated in double
 * so that this file can be the oracle for f32 GPU kernels (NMSE <= 1e-8). */
#include "drt_quant.h"
#include "ref_ops.h"

#include "drt_half.h"

/* w is a flat array of dtype t; f32/f16/bf16 and the block formats q8_0 /
 * q4_0 (dequantized exactly, drt_quant.h) are weight dtypes (the op table
 * never hands an i32 tensor to a weight slot, nor a block format to a slot
 * whose rows are not contiguous). */
float drt_ref_load_weight(const void *w, drt_dtype t, int64_t i) {
    switch (t) {
    case DRT_F16: return drt_f16_to_f32(((const uint16_t *)w)[i]);
    case DRT_BF16: return drt_bf16_to_f32(((const uint16_t *)w)[i]);
    case DRT_Q8_0: return drt_q8_0_get(w, i);
    case DRT_Q4_0: return drt_q4_0_get(w, i);
    default: return ((const float *)w)[i];
    }
}

/* Weights are converted to f32 in row chunks of this many elements, on the stack. */
#define ROW_CHUNK 8192

/* x is (B,T,K), y is (B,T,N);
 * w is (Bw,N,K) when trans_w == 0 (nn.Linear layout: row n is contiguous),
 *      (Bw,K,N) when trans_w == 1 (e.g. V in A.V: column n is strided by N).
 * Batch b of x reads batch floor(b*Bw/B) of w, so G kv groups serve H heads.
 * Napkin math: 2*B*T*N*K flops; reads B*T*K + Bw*N*K, writes B*T*N elements. */
void drt_ref_matmul(float *y, const float *x, const void *w, drt_dtype wt, int B, int Bw, int T, int N, int K,
                    int trans_w, float scale) {
    /* element (n,k) of one weight batch sits at n*n_stride + k*k_stride */
    const int64_t n_stride = trans_w ? 1 : K;
    const int64_t k_stride = trans_w ? N : 1;
    float row[ROW_CHUNK];
    const int whole = K <= ROW_CHUNK; /* the whole row fits: convert it once per n */
    for (int b = 0; b < B; b++) {
        const int64_t bw = (int64_t)b * Bw / B;
        const float *xb = x + (int64_t)b * T * K;
        float *yb = y + (int64_t)b * T * N;
        const int64_t wb = bw * N * K;
        /* n outside t: one weight row/column is converted to f32 once (a
         * contiguous copy) and then stays in cache for all T rows of x; a row
         * longer than ROW_CHUNK is converted chunk by chunk for every t. Either
         * way it is the same double sum in the same order as loading each
         * weight in the inner loop. */
        for (int n = 0; n < N; n++) {
            const int64_t wn = wb + n * n_stride;
            if (whole)
                for (int k = 0; k < K; k++) row[k] = drt_ref_load_weight(w, wt, wn + k * k_stride);
            for (int t = 0; t < T; t++) {
                const float *xt = xb + (int64_t)t * K;
                double acc = 0.0;
                for (int k0 = 0; k0 < K; k0 += ROW_CHUNK) {
                    const int kn = K - k0 < ROW_CHUNK ? K - k0 : ROW_CHUNK;
                    if (!whole)
                        for (int k = 0; k < kn; k++) row[k] = drt_ref_load_weight(w, wt, wn + (k0 + k) * k_stride);
                    for (int k = 0; k < kn; k++) acc += (double)xt[k0 + k] * (double)row[k];
                }
                /* scale is applied once, in double, so y is rounded only once */
                yb[(int64_t)t * N + n] = (float)((double)scale * acc);
            }
        }
    }
}
