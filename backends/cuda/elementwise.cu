/* CUDA: EMBED, ROPE, SWIGLU, SIGMOID, ADD, KV_WRITE, PERMUTE (docs/design.md
 * section 3). Reference: backends/ref/elementwise.c. All of these are
 * memory-bound one-pass kernels: grid-stride loops, consecutive threads on
 * consecutive elements, so every warp access is coalesced. Napkin math is
 * bytes moved; the op table (runtime/ops.c) has the same formulas for the
 * perf reports.
 *
 * Checked against the reference (exit status 0: every case within bound):
 *   diffrt conform --backend cuda --op EMBED,ROPE,SWIGLU,SIGMOID,ADD,KV_WRITE,PERMUTE           on a GPU
 *   build/diffrt_cuda_emu conform --backend cpu,cuda --op EMBED,ROPE,SWIGLU,SIGMOID,ADD,KV_WRITE,PERMUTE
 *       the same code on the host emulator (backends/cuda/emu; ctest
 *       cuda_emu_conform), and with --set cuda.precision=fast the tensor-core
 *       path against its declared bound (ctest cuda_emu_fast)
 */
#include "common.cuh"

/* ---- EMBED ------------------------------------------------------------------------ */

/* out is (T,D); ids is (T); E is (V,D) of dtype et. One block per token.
 * An id outside [0,V) is never used as an address: its row becomes NaN and
 * err is raised (backend.c turns it into DRT_ERR_INVALID_ARG at synchronize).
 * Napkin math: reads T*D weights, writes T*D floats. */
__global__ void embed_kernel(float *out, const int32_t *ids, const void *E, int et, int V, int D, int *err) {
    const int t = blockIdx.x;
    const int id = ids[t];
    float *o = out + (int64_t)t * D;
    if (id < 0 || id >= V) {
        if (threadIdx.x == 0) atomicExch(err, 1);
        for (int d = threadIdx.x; d < D; d += blockDim.x) o[d] = CUDART_NAN_F;
        return;
    }
    const int64_t row = (int64_t)id * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) o[d] = cu_load_weight(E, et, row + d);
}

extern "C" drt_status cu_embed(cu_ctx *c, float *out, const int32_t *ids, int T, const void *E, drt_dtype et, int V,
                               int D) {
    if (T <= 0) return DRT_OK;
    CU_LAUNCH(embed_kernel, T, 256, 0, c->stream)(out, ids, E, (int)et, V, D, c->d_err);
    return cu_launched("EMBED");
}

/* ---- ROPE --------------------------------------------------------------------------- */

/* y, x are (T,Hn,d); inv_freq is (d/2); rows is (T,2): row t at position
 * rows[2t+1]. One thread per rotate_half pair (i, i+d/2). As in
 * drt_ref_rope the angle and its sine/cosine are in double: pos*inv_freq reaches ~1e3 rad at long
 * positions, where an f32 angle would be off by ~1e-4.
 * Napkin math: reads and writes 2*T*Hn*d floats (+ inv_freq). */
__global__ void rope_kernel(float *y, const float *x, int T, int Hn, int d, const float *inv_freq,
                            const int32_t *rows) {
    const int half = d / 2;
    const int64_t n = (int64_t)T * Hn * half;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < n;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int i = (int)(idx % half);
        const int64_t th = idx / half; /* t*Hn + h */
        const int t = (int)(th / Hn);
        const double a = (double)rows[2 * t + 1] * (double)inv_freq[i];
        double s, co;
        sincos(a, &s, &co);
        const int64_t off = th * d;
        const double x0 = x[off + i], x1 = x[off + i + half];
        y[off + i] = (float)(x0 * co - x1 * s);
        y[off + i + half] = (float)(x1 * co + x0 * s);
    }
}

extern "C" drt_status cu_rope(cu_ctx *c, float *y, const float *x, int T, int Hn, int d, const float *inv_freq,
                              const int32_t *rows) {
    const int64_t n = (int64_t)T * Hn * (d / 2);
    if (n <= 0) return DRT_OK;
    CU_LAUNCH(rope_kernel, cu_grid_for(c, n, 256), 256, 0, c->stream)(y, x, T, Hn, d, inv_freq, rows);
    return cu_launched("ROPE");
}

/* ---- SWIGLU, SIGMOID, ADD ------------------------------------------------------------ */

/* y, g, u are (n): y = g / (1 + exp(-g)) * u. For g << 0, expf(-g) = inf and
 * the quotient is -0, never NaN. Napkin math: 3n floats moved. */
__global__ void swiglu_kernel(float *y, const float *g, const float *u, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float gi = g[i];
        y[i] = gi / (1.0f + expf(-gi)) * u[i];
    }
}

/* y, x are (n). Napkin math: 2n floats moved. */
__global__ void sigmoid_kernel(float *y, const float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = 1.0f / (1.0f + expf(-x[i]));
}

/* y, a, b are (n). Napkin math: 3n floats moved. */
__global__ void add_kernel(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = a[i] + b[i];
}

extern "C" drt_status cu_swiglu(cu_ctx *c, float *y, const float *g, const float *u, int64_t n) {
    if (n <= 0) return DRT_OK;
    CU_LAUNCH(swiglu_kernel, cu_grid_for(c, n, 256), 256, 0, c->stream)(y, g, u, n);
    return cu_launched("SWIGLU");
}

extern "C" drt_status cu_sigmoid(cu_ctx *c, float *y, const float *x, int64_t n) {
    if (n <= 0) return DRT_OK;
    CU_LAUNCH(sigmoid_kernel, cu_grid_for(c, n, 256), 256, 0, c->stream)(y, x, n);
    return cu_launched("SIGMOID");
}

extern "C" drt_status cu_add(cu_ctx *c, float *y, const float *a, const float *b, int64_t n) {
    if (n <= 0) return DRT_OK;
    CU_LAUNCH(add_kernel, cu_grid_for(c, n, 256), 256, 0, c->stream)(y, a, b, n);
    return cu_launched("ADD");
}

/* ---- KV_WRITE ---------------------------------------------------------------------------- */

/* cache is (S_cap,row); src is (T,row); rows is (T,2): row t of src lands at
 * cache row rows[2t] + rows[2t+1] (a scatter: the rows of a batch go to
 * their sequences' slots; the op table checked every one against S_cap
 * before the run). grid (x, min(T, 65535)): blockIdx.y picks rows, x strides
 * over a row's floats, so reads and writes stay coalesced.
 * Napkin math: 2*T*row floats moved. */
__global__ void kv_write_kernel(float *cache, const float *src, int T, int64_t row, const int32_t *rows) {
    for (int t = blockIdx.y; t < T; t += gridDim.y) {
        float *dst = cache + ((int64_t)rows[2 * t] + rows[2 * t + 1]) * row;
        const float *s = src + (int64_t)t * row;
        for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < row; e += (int64_t)gridDim.x * blockDim.x)
            dst[e] = s[e];
    }
}

/* f32 -> f16 bits as drt_f32_to_f16 (runtime/drt_half.h): round to nearest
 * even, beyond 65504 Inf (both __float2half_rn's), NaN as sign | 0x7e00
 * (__float2half_rn gives another NaN) */
__device__ __forceinline__ unsigned short kv_f16_bits(float x) {
    if (x != x) return (unsigned short)(signbit(x) ? 0xfe00u : 0x7e00u);
    return __half_as_ushort(__float2half_rn(x));
}

/* The f16 cache: as kv_write_kernel, cache (S_cap,row) of f16 bits.
 * Napkin math: T*row*(4 + 2) bytes moved. */
__global__ void kv_write_f16_kernel(unsigned short *cache, const float *src, int T, int64_t row, const int32_t *rows) {
    for (int t = blockIdx.y; t < T; t += gridDim.y) {
        unsigned short *dst = cache + ((int64_t)rows[2 * t] + rows[2 * t + 1]) * row;
        const float *s = src + (int64_t)t * row;
        for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < row; e += (int64_t)gridDim.x * blockDim.x)
            dst[e] = kv_f16_bits(s[e]);
    }
}

/* The q8_0 cache: a cache row is row/32 blocks of 34 bytes (f16 d, then 32
 * int8 q; 2-byte aligned only: d is stored as one 16-bit word, the q as
 * bytes). One warp per block, lane i on element i, the rounding of
 * quantize_q8_0 (runtime/quant.c) to the bit: amax over the block (NaN
 * ignored, as its `a > amax`), d = amax / 127, id = 1/d (0 when d = 0), q =
 * round-half-away(x id) clamped to +-127, NaN -> 0. grid (x, min(T, 65535)),
 * block 256: x strides over the row's blocks, 8 per thread block.
 * Napkin math: T*row*(4 + 34/32) bytes moved. */
__global__ void kv_write_q8_0_kernel(unsigned char *cache, const float *src, int T, int64_t row, const int32_t *rows) {
    const int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
    const int64_t nb = row / 32;
    for (int t = blockIdx.y; t < T; t += gridDim.y) {
        unsigned char *dst = cache + ((int64_t)rows[2 * t] + rows[2 * t + 1]) * nb * 34;
        const float *s = src + (int64_t)t * row;
        /* warp-uniform loop: every lane reaches the shuffles */
        for (int64_t b = blockIdx.x * (int64_t)wpb + (threadIdx.x >> 5); b < nb; b += (int64_t)gridDim.x * wpb) {
            const float x = s[b * 32 + lane];
            const float amax = cu_warp_max(fmaxf(fabsf(x), 0.0f)); /* fmaxf(NaN, 0) = 0 */
            const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            float v = roundf(x * id);
            v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v == v ? v : 0.0f;
            unsigned char *blk = dst + b * 34;
            if (lane == 0) *reinterpret_cast<unsigned short *>(blk) = kv_f16_bits(d);
            blk[2 + lane] = (unsigned char)(signed char)v;
        }
    }
}

extern "C" drt_status cu_kv_write(cu_ctx *c, void *cache, drt_dtype ct, const float *src, int T, int64_t row,
                                  const int32_t *rows) {
    if (T <= 0 || row <= 0) return DRT_OK;
    const dim3 grid(cu_grid_for(c, row, 256), (unsigned)(T < 65535 ? T : 65535));
    if (ct == DRT_F16)
        CU_LAUNCH(kv_write_f16_kernel, grid, 256, 0, c->stream)((unsigned short *)cache, src, T, row, rows);
    else if (ct == DRT_Q8_0)
        CU_LAUNCH(kv_write_q8_0_kernel, grid, 256, 0, c->stream)((unsigned char *)cache, src, T, row, rows);
    else
        CU_LAUNCH(kv_write_kernel, grid, 256, 0, c->stream)((float *)cache, src, T, row, rows);
    return cu_launched("KV_WRITE");
}

/* ---- PERMUTE ------------------------------------------------------------------------------ */

/* y has shape yn[0..3] and is written in order; element (i0,i1,i2,i3) of y
 * is x[i0*gs[0] + i1*gs[1] + i2*gs[2] + i3*gs[3]] (gs: x's strides, permuted;
 * see drt_ref_permute). Writes are coalesced, reads are gathered.
 * Napkin math: 2n floats moved. */
struct perm_args {
    int64_t yn[4], gs[4];
};

__global__ void permute_kernel(float *y, const float *x, int64_t n, perm_args a) {
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n; o += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = o;
        const int64_t i3 = r % a.yn[3];
        r /= a.yn[3];
        const int64_t i2 = r % a.yn[2];
        r /= a.yn[2];
        const int64_t i1 = r % a.yn[1];
        const int64_t i0 = r / a.yn[1];
        y[o] = x[i0 * a.gs[0] + i1 * a.gs[1] + i2 * a.gs[2] + i3 * a.gs[3]];
    }
}

extern "C" drt_status cu_permute(cu_ctx *c, float *y, const float *x, const int64_t ne[4], const int perm[4]) {
    const int64_t xs[4] = {ne[1] * ne[2] * ne[3], ne[2] * ne[3], ne[3], 1};
    perm_args a;
    for (int i = 0; i < 4; i++) {
        a.yn[i] = ne[perm[i]];
        a.gs[i] = xs[perm[i]];
    }
    const int64_t n = ne[0] * ne[1] * ne[2] * ne[3];
    if (n <= 0) return DRT_OK;
    CU_LAUNCH(permute_kernel, cu_grid_for(c, n, 256), 256, 0, c->stream)(y, x, n, a);
    return cu_launched("PERMUTE");
}
