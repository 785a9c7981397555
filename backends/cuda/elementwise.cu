/* CUDA: EMBED, ROPE, SWIGLU, SIGMOID, ADD, KV_WRITE, PERMUTE (docs/design.md
 * section 3). Reference: backends/ref/elementwise.c. All of these are
 * memory-bound one-pass kernels: grid-stride loops, consecutive threads on
 * consecutive elements, so every warp access is coalesced. Napkin math is
 * bytes moved; the op table (runtime/ops.c) has the same formulas for the
 * perf reports. */
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

extern "C" drt_status cu_kv_write(cu_ctx *c, float *cache, const float *src, int T, int64_t row, const int32_t *rows) {
    if (T <= 0 || row <= 0) return DRT_OK;
    const dim3 grid(cu_grid_for(c, row, 256), (unsigned)(T < 65535 ? T : 65535));
    CU_LAUNCH(kv_write_kernel, grid, 256, 0, c->stream)(cache, src, T, row, rows);
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
