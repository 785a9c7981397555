/* CUDA: RMSNORM and GROUPNORM (docs/design.md section 3). Reference:
 * backends/ref/norm.c. Both are "normalise each row by its RMS": RMSNORM
 * over C = D for each of T rows; GROUPNORM over dv for each of T*H heads,
 * with the extra scale (1 - lambda_init). One kernel serves both.
 *
 * norm_rows_kernel1: one block per row, a block-wide sum of squares, then
 * the scaled row. Rows are short (D <= ~8k, dv <= 512), so one block keeps
 * the row in L1/L2 between the two passes; reads are coalesced.
 * Napkin math: reads 2*rows*C floats (the second read usually hits cache),
 * writes rows*C: ~8 bytes per element through DRAM. */
#include "common.cuh"

/* y, x are (rows,C); w is (C) or NULL. f32 sum of squares: its relative
 * error (~C * 6e-8 worst case, ~sqrt(C) * 6e-8 typical) is far inside the
 * 1e-8 NMSE bound against the double reference. */
__global__ void norm_rows_kernel1(float *y, const float *x, int C, const float *w, float eps, float scale) {
    __shared__ float red[32];
    const int64_t r = blockIdx.x;
    const float *xr = x + r * C;
    float *yr = y + r * C;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) ss += xr[i] * xr[i];
    ss = cu_block_sum(ss, red);
    const float inv = scale / sqrtf(ss / (float)C + eps);
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float v = xr[i] * inv;
        if (w) v *= w[i];
        yr[i] = v;
    }
}

extern "C" drt_status cu_norm_rows(cu_ctx *c, float *y, const float *x, int64_t rows, int C, const float *w, float eps,
                                   float scale) {
    if (rows <= 0 || C <= 0) return DRT_OK;
    if (rows > 0x7fffffff) return drt_set_error(DRT_ERR_UNSUPPORTED, "cuda: norm over %lld rows", (long long)rows);
    const int block = C >= 1024 ? 256 : C >= 256 ? 128 : 64;
    CU_LAUNCH(norm_rows_kernel1, (unsigned)rows, block, 0, c->stream)(y, x, C, w, eps, scale);
    return cu_launched("RMSNORM/GROUPNORM");
}
