/* CUDA: RMSNORM and GROUPNORM (docs/design.md section 3). Reference:
 * backends/ref/norm.c. Both are "normalise each row by its RMS": RMSNORM
 * over C = D for each of T rows; GROUPNORM over dv for each of T*H heads,
 * with the extra scale (1 - lambda_init). One kernel serves both.
 *
 * norm_rows_kernel1: one block per row, a block-wide sum of squares, then
 * the scaled row; norm_rows_kernel2 the same with the row in registers. Rows are short (D <= ~8k, dv <= 512), so one
 * block keeps the row in L1/L2 between the two passes; reads are coalesced. Napkin math: reads 2*rows*C floats (the
 * second read usually hits cache), writes rows*C: ~8 bytes per element through DRAM.
 *
 * Checked against the reference (exit status 0: every case within bound):
 *   diffrt conform --backend cuda --op RMSNORM,GROUPNORM           on a GPU
 *   build/diffrt_cuda_emu conform --backend cpu,cuda --op RMSNORM,GROUPNORM
 *       the same code on the host emulator (backends/cuda/emu; ctest
 *       cuda_emu_conform), and with --set cuda.precision=fast the tensor-core
 *       path against its declared bound (ctest cuda_emu_fast)
 */
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

/* The same for C % 4 == 0, C <= 4 * NORM2_V * blockDim.x and 16-byte
 * aligned x, y: each thread loads its float4s of the row (up to NORM2_V)
 * into registers at once, so the sum of squares waits for one round trip
 * instead of C / blockDim.x dependent ones, and the scaled row is written
 * from those registers (x read once). Kernel 1 took ~9 us per row of 2048
 * on an H100 (a decode step's RMSNORM), mostly those round trips. */
#define NORM2_V 4
__global__ void norm_rows_kernel2(float *y, const float *x, int C, const float *w, float eps, float scale) {
    __shared__ float red[32];
    const int64_t r = blockIdx.x;
    const float4 *xr = reinterpret_cast<const float4 *>(x + r * C);
    float4 *yr = reinterpret_cast<float4 *>(y + r * C);
    const int c4 = C / 4;
    float4 v[NORM2_V];
    float ss = 0.0f;
#pragma unroll
    for (int u = 0; u < NORM2_V; u++) {
        const int i = threadIdx.x + u * blockDim.x;
        v[u] = i < c4 ? xr[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < NORM2_V; u++) ss += v[u].x * v[u].x + v[u].y * v[u].y + v[u].z * v[u].z + v[u].w * v[u].w;
    ss = cu_block_sum(ss, red);
    const float inv = scale / sqrtf(ss / (float)C + eps);
#pragma unroll
    for (int u = 0; u < NORM2_V; u++) {
        const int i = threadIdx.x + u * blockDim.x;
        if (i < c4) {
            float4 o = make_float4(v[u].x * inv, v[u].y * inv, v[u].z * inv, v[u].w * inv);
            if (w) {
                const float4 g = reinterpret_cast<const float4 *>(w)[i];
                o.x *= g.x;
                o.y *= g.y;
                o.z *= g.z;
                o.w *= g.w;
            }
            yr[i] = o;
        }
    }
}

extern "C" drt_status cu_norm_rows(cu_ctx *c, float *y, const float *x, int64_t rows, int C, const float *w, float eps,
                                   float scale) {
    if (rows <= 0 || C <= 0) return DRT_OK;
    if (rows > 0x7fffffff) return drt_set_error(DRT_ERR_UNSUPPORTED, "cuda: norm over %lld rows", (long long)rows);
    const int block = C >= 1024 ? 256 : C >= 256 ? 128 : 64;
    const int al = ((uintptr_t)x & 15) == 0 && ((uintptr_t)y & 15) == 0 && (!w || ((uintptr_t)w & 15) == 0);
    if (al && C % 4 == 0 && C <= 4 * NORM2_V * block) {
        CU_LAUNCH(norm_rows_kernel2, (unsigned)rows, block, 0, c->stream)(y, x, C, w, eps, scale);
        return cu_launched("RMSNORM/GROUPNORM");
    }
    CU_LAUNCH(norm_rows_kernel1, (unsigned)rows, block, 0, c->stream)(y, x, C, w, eps, scale);
    return cu_launched("RMSNORM/GROUPNORM");
}
