/* CUDA: MATMUL (docs/design.md section 3). Reference: backends/ref/matmul.c.
 *
 *   y (B,T,N) = scale * x (B,T,K) . w^T,  w (Bw,N,K) [trans_w: (Bw,K,N)],
 *   batch b of x uses batch b*Bw/B of w.
 *
 * Row-major to cuBLAS (column-major): a row-major (R,C) array is a column-
 * major (C,R) one. So y^T (N x rows) = op(w) . x^T with op(w) = the column-
 * major (K,N) array w^T transposed (CUBLAS_OP_T, lda = K), or for trans_w the
 * column-major (N,K) array as is (CUBLAS_OP_N, lda = N). The B/Bw batches of
 * x that share one weight batch are contiguous, so they are ONE GEMM with
 * n = (B/Bw)*T columns; the Bw weight batches are a strided batch.
 *
 * Paths, by weight dtype and precision mode (cuda_ops.h):
 *   f32 weights   cublasSgemmStridedBatched, CUBLAS_DEFAULT_MATH (no TF32);
 *                 fast mode: cublasGemmStridedBatchedEx, COMPUTE_32F_FAST_TF32.
 *   f16/bf16, 2-d, T <= 8 (decode)
 *                 gemv_lowp_kernel2 (cuda.gemv=1: gemv_lowp_kernel1): weights
 *                 streamed once, widened exactly to f32, f32 FMA. Memory-
 *                 bound: this is what decode speed is. backend.c runs
 *                 consecutive ones over one x (q/k/v, gate/up) as one launch
 *                 (cu_matmul_group). H100: 1.5-2.7 TB/s of bf16 weights
 *                 (bench/results/gpu-20261127-h100).
 *   f16/bf16, 2-d, 8 < T <= 32, f32 mode (decode of a batch of sequences)
 *                 gemm_rows_kernel2: weights streamed once for all rows,
 *                 widened exactly in shared memory, f32 FMA.
 *   q8_0/q4_0, 2-d: gemv_q_kernel (T <= 8), gemm_rows_kernel2 (T <= 32),
 *                 either mode, weights read once; otherwise widened below.
 *   f16/bf16, otherwise
 *                 f32 mode: the weights are widened into scratch (row chunks
 *                   of <= 64 MiB) and multiplied by cublasSgemm: exact inputs,
 *                   f32 accumulation, NMSE ~1e-13.
 *                 fast mode: x is rounded to the weight dtype into scratch and
 *                   cublasGemmStridedBatchedEx multiplies on tensor cores with
 *                   f32 accumulation (CUBLAS_COMPUTE_32F) and f32 output.
 *                   Reduced precision: activations lose 13 (f16) / 16 (bf16)
 *                   mantissa bits; NMSE ~1e-7 (f16) / ~1e-5 (bf16).
 * Napkin math: 2*B*T*N*K flops; reads B*T*K*4 + Bw*N*K*sizeof(w) bytes.
 *
 * Checked against the reference (exit status 0: every case within bound):
 *   diffrt conform --backend cuda --op MATMUL           on a GPU
 *   build/diffrt_cuda_emu conform --backend cpu,cuda --op MATMUL
 *       the same code on the host emulator (backends/cuda/emu; ctest
 *       cuda_emu_conform), and with --set cuda.precision=fast the tensor-core
 *       path against its declared bound (ctest cuda_emu_fast)
 */
#include <type_traits>

#include "common.cuh"

#define GEMV_MAX_T 8
#define DEQUANT_CAP_BYTES ((size_t)64 << 20)

static drt_status blas_ok(cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS) return DRT_OK;
    return drt_set_error(DRT_ERR_BACKEND, "cuda: MATMUL %s: %s", what, cublasGetStatusString(s));
}

/* ---- conversions ------------------------------------------------------------------ */

__device__ __forceinline__ float2 lowp2_to_float2(__half2 v) {
    return __half22float2(v);
}
__device__ __forceinline__ float2 lowp2_to_float2(__nv_bfloat162 v) {
    return __bfloat1622float2(v);
}
__device__ __forceinline__ float lowp_to_float(__half v) {
    return __half2float(v);
}
__device__ __forceinline__ float lowp_to_float(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
__device__ __forceinline__ void float_to_lowp(float f, __half *o) {
    *o = __float2half_rn(f);
}
__device__ __forceinline__ void float_to_lowp(float f, __nv_bfloat16 *o) {
    *o = __float2bfloat16_rn(f);
}

template <typename WT> struct lowp2;
template <> struct lowp2<__half> { typedef __half2 type; };
template <> struct lowp2<__nv_bfloat16> { typedef __nv_bfloat162 type; };

/* out (n) f32 = w (n), exactly. Napkin math: 6n bytes moved. */
template <typename WT> __global__ void widen_kernel(float *out, const WT *w, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = lowp_to_float(w[i]);
}

/* out (n) = x (n) rounded to nearest even in WT. Napkin math: 6n bytes. */
template <typename WT> __global__ void narrow_kernel(WT *out, const float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        float_to_lowp(x[i], &out[i]);
}

/* ---- decode GEMV -------------------------------------------------------------------- */

/* y (T,N) = scale * x (T,K) w^T with w (N,K) f16/bf16 and T <= GEMV_MAX_T.
 * One warp per output column n, 8 warps per block. vec: K % 8 == 0 and w, x
 * 16-byte aligned; then each lane loads 8 weights (16 bytes) per step and
 * a warp reads a contiguous 512-byte span of w's row: every weight byte is
 * read from DRAM exactly once. x (T*K*4 bytes) is re-read by every warp
 * from L1/L2 (__ldg), which is cheap next to the weights for T <= 8.
 * Napkin math: N*K*2 bytes of weights dominate; target = DRAM bandwidth. */
template <typename WT>
__global__ void __launch_bounds__(256)
    gemv_lowp_kernel1(float *y, const float *x, const WT *w, int T, int N, int K, float scale, int vec) {
    typedef typename lowp2<WT>::type WT2;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n = blockIdx.x * 8 + warp;
    if (n >= N) return; /* the whole warp leaves together */
    const WT *wr = w + (int64_t)n * K;
    float acc[GEMV_MAX_T];
#pragma unroll
    for (int t = 0; t < GEMV_MAX_T; t++) acc[t] = 0.0f;
    if (vec) {
        /* unrolled so that several 16-byte weight loads per lane are in
         * flight at once: one warp streams a whole row */
#pragma unroll 4
        for (int k = lane * 8; k < K; k += 32 * 8) {
            const uint4 raw = __ldg(reinterpret_cast<const uint4 *>(wr + k));
            const WT2 *h2 = reinterpret_cast<const WT2 *>(&raw);
            float wf[8];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float2 f = lowp2_to_float2(h2[i]);
                wf[2 * i] = f.x;
                wf[2 * i + 1] = f.y;
            }
#pragma unroll
            for (int t = 0; t < GEMV_MAX_T; t++) {
                if (t < T) {
                    const float4 *xp = reinterpret_cast<const float4 *>(x + (int64_t)t * K + k);
                    const float4 a = __ldg(xp), b = __ldg(xp + 1);
                    float s = acc[t];
                    s = fmaf(a.x, wf[0], s);
                    s = fmaf(a.y, wf[1], s);
                    s = fmaf(a.z, wf[2], s);
                    s = fmaf(a.w, wf[3], s);
                    s = fmaf(b.x, wf[4], s);
                    s = fmaf(b.y, wf[5], s);
                    s = fmaf(b.z, wf[6], s);
                    s = fmaf(b.w, wf[7], s);
                    acc[t] = s;
                }
            }
        }
    } else {
        for (int k = lane; k < K; k += 32) {
            const float wf = lowp_to_float(wr[k]);
#pragma unroll
            for (int t = 0; t < GEMV_MAX_T; t++)
                if (t < T) acc[t] = fmaf(x[(int64_t)t * K + k], wf, acc[t]);
        }
    }
#pragma unroll
    for (int t = 0; t < GEMV_MAX_T; t++) {
        if (t < T) {
            const float s = cu_warp_sum(acc[t]);
            if (lane == 0) y[(int64_t)t * N + n] = scale * s;
        }
    }
}

/* The same product, R rows per block, K split over the block's 8 warps:
 * chunk c (256 weights of a row) goes to warp c % 8, lane l takes weights
 * 8l .. 8l+7 of it (16 bytes). Each lane issues the 16-byte weight loads
 * of GEMV2_U chunks x R rows before it multiplies, where kernel 1
 * has one row per warp and the row's chunks one after another; x's 8
 * values per chunk are loaded once for all R rows. The warps' partial sums
 * meet in shared memory, added in warp order. Needs K % 8 == 0 and 16-byte
 * aligned w, x (the caller's vec). R is picked so that there are blocks
 * for every SM: N / R >= 2 x SMs where possible. TM: the most rows of x
 * (1: the decode of one sequence, with 1/8 of the accumulators; else 8).
 * Napkin math: as kernel 1, N*K*2 bytes of weights; target = DRAM
 * bandwidth, also for the (512, 2048) K/V projections of a 1B model. */
#define GEMV2_WARPS 8
#define GEMV2_U 4
template <typename WT, int R, int TM>
__global__ void __launch_bounds__(256) gemv_lowp_kernel2(cu_gemv_group G, const float *x, int T, int K, float scale) {
    typedef typename lowp2<WT>::type WT2;
    __shared__ float red[GEMV2_WARPS][R * TM];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    /* the matrix this block's rows are in: blocks [first[i], first[i+1]) */
    int gi = 0;
#pragma unroll
    for (int i = 1; i < CU_GEMV_GROUP; i++)
        if (i < G.n && (int)blockIdx.x >= G.first[i]) gi = i;
    const WT *w = (const WT *)G.w[gi];
    float *y = G.y[gi];
    const int N = G.N[gi];
    const int n0 = ((int)blockIdx.x - G.first[gi]) * R;
    const WT *wr[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        wr[r] = w + (int64_t)(n0 + r < N ? n0 + r : n0) * K; /* a past-the-end row re-reads row n0 */
    float acc[R][TM];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < TM; t++) acc[r][t] = 0.0f;
    /* U chunks a lane at a time: all their loads issued before any FMA (2
     * for 4 rows of 8 accumulators each, which would spill with 4) */
    constexpr int U = TM > 1 && R >= 4 ? 2 : GEMV2_U;
    const int stride = GEMV2_WARPS * 256;
    for (int k0 = (warp * 32 + lane) * 8; k0 < K; k0 += U * stride) {
        uint4 raw[U][R];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (k0 + u * stride < K)
#pragma unroll
                for (int r = 0; r < R; r++) raw[u][r] = __ldg(reinterpret_cast<const uint4 *>(wr[r] + k0 + u * stride));
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = k0 + u * stride;
            if (k >= K) break;
#pragma unroll
            for (int t = 0; t < TM; t++) {
                if (t < T) {
                    const float4 *xp = reinterpret_cast<const float4 *>(x + (int64_t)t * K + k);
                    const float4 a = __ldg(xp), b = __ldg(xp + 1);
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        const WT2 *h2 = reinterpret_cast<const WT2 *>(&raw[u][r]);
                        const float2 w0 = lowp2_to_float2(h2[0]), w1 = lowp2_to_float2(h2[1]);
                        const float2 w2 = lowp2_to_float2(h2[2]), w3 = lowp2_to_float2(h2[3]);
                        float s = acc[r][t];
                        s = fmaf(a.x, w0.x, s);
                        s = fmaf(a.y, w0.y, s);
                        s = fmaf(a.z, w1.x, s);
                        s = fmaf(a.w, w1.y, s);
                        s = fmaf(b.x, w2.x, s);
                        s = fmaf(b.y, w2.y, s);
                        s = fmaf(b.z, w3.x, s);
                        s = fmaf(b.w, w3.y, s);
                        acc[r][t] = s;
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < TM; t++)
            if (t < T) {
                const float v = cu_warp_sum(acc[r][t]);
                if (lane == 0) red[warp][r * TM + t] = v;
            }
    __syncthreads();
    const int i = threadIdx.x, r = i / TM, t = i % TM;
    if (i < R * TM && t < T && n0 + r < N) {
        float v = 0.0f;
#pragma unroll
        for (int j = 0; j < GEMV2_WARPS; j++) v += red[j][i];
        y[(int64_t)t * N + n0 + r] = scale * v;
    }
}

/* ---- q8_0 / q4_0 weights (runtime/drt_quant.h, docs/quantization.md) ----------------- */

/* an f16 bit pattern as float, exactly (subnormals included) */
__device__ __forceinline__ float f16_bits_to_float(unsigned h) {
    const unsigned s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        const float f = (float)m * 5.9604644775390625e-8f; /* m * 2^-24 */
        return s ? -f : f;
    }
    if (e == 31) return __int_as_float((int)(s | 0x7f800000u | (m << 13)));
    return __int_as_float((int)(s | ((e + 112u) << 23) | (m << 13)));
}

/* element i of a q8_0 (q4 = 0) / q4_0 (q4 = 1) array: d * q of its block */
__device__ __forceinline__ float q_get(const unsigned char *w, int64_t i, int q4) {
    const unsigned char *b = w + (i >> 5) * (q4 ? 18 : 34);
    const float d = f16_bits_to_float((unsigned)b[0] | (unsigned)b[1] << 8);
    const int j = (int)(i & 31);
    if (!q4) return d * (float)(signed char)b[2 + j];
    const int q = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4);
    return d * (float)(q - 8);
}

/* out[i] = w[off + i] dequantized, i < n */
__global__ void widen_q_kernel(float *out, const unsigned char *w, int64_t off, int64_t n, int q4) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = q_get(w, off + i, q4);
}

/* y (T,N) = scale * x (T,K) w^T, w (N,K) in blocks, T <= GEMV_MAX_T. One warp
 * per output column n; lane l takes blocks l, l+32, ...: its block's 34 /
 * 18 bytes are read once. Napkin math: N*K/32*(34|18) bytes of weights. */
__global__ void __launch_bounds__(256)
    gemv_q_kernel(float *y, const float *x, const unsigned char *w, int T, int N, int K, float scale, int q4) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n = blockIdx.x * 8 + warp;
    if (n >= N) return;
    const int nb = K >> 5, bs = q4 ? 18 : 34;
    const unsigned char *wr = w + (int64_t)n * nb * bs;
    float acc[GEMV_MAX_T];
#pragma unroll
    for (int t = 0; t < GEMV_MAX_T; t++) acc[t] = 0.0f;
    for (int blk = lane; blk < nb; blk += 32) {
        const unsigned char *b = wr + (int64_t)blk * bs;
        const float d = f16_bits_to_float((unsigned)b[0] | (unsigned)b[1] << 8);
        /* the weight d*q, then one FMA per x row (no per-block partial sums:
         * T <= 8 of them would spill) */
        for (int j = 0; j < 32; j++) {
            const float wq = d * (q4 ? (float)((j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4)) - 8)
                                     : (float)(signed char)b[2 + j]);
#pragma unroll
            for (int t = 0; t < GEMV_MAX_T; t++)
                if (t < T) acc[t] = fmaf(__ldg(x + (int64_t)t * K + blk * 32 + j), wq, acc[t]);
        }
    }
#pragma unroll
    for (int t = 0; t < GEMV_MAX_T; t++) {
        if (t < T) {
            const float s = cu_warp_sum(acc[t]);
            if (lane == 0) y[(int64_t)t * N + n] = scale * s;
        }
    }
}

/* ---- batches of rows: GEMM of 9..32 rows, weights read once ------------------------------ */

/* y (T,N) = scale * x (T,K) w^T with GEMV_MAX_T < T <= MR_MAX_T: the decode
 * step of a batch of sequences. gemv_*_kernel keep T partial sums per lane
 * and read x once per output column, which stops scaling past 8 rows; here
 * a block owns MR_NB columns and all rows, walks K in tiles of MR_KC: the
 * weight tile is read from DRAM once (coalesced, 16-byte loads for f16/bf16,
 * whole q8_0/q4_0 blocks) and widened exactly to f32 in shared memory, the x
 * tile (8*RT rows, zero past T) beside it; thread (tx, ty) accumulates rows
 * ty*RT .. +RT-1 times columns tx + 16j (j < 4) in f32 FMA from float4
 * shared loads (x rows: one broadcast per half-warp; w rows: pitch MR_LD
 * keeps 16 lanes on distinct bank quads). When N gives too few blocks to
 * fill the device, K is split over gridDim.y (whole tiles per split) and
 * split_sum_kernel adds the partials in a fixed order: deterministic.
 * Numerics as the f32 path: exact weights, f32 accumulation.
 * Napkin math: N*K weight bytes once (+ x: T*K*4 per block from L2);
 * 2*T*N*K flops, CUDA-core f32: compute-bound near T = 32 on a GPU whose
 * f32 FMA rate / DRAM bandwidth is ~10 flop/byte (A100/H100). */
#define MR_MAX_T 32
#define MR_NB 64                   /* columns per block */
#define MR_KC 64                   /* k per tile: two q8_0/q4_0 blocks */
#define MR_THREADS 128             /* 16 column lanes x 8 row groups */
#define MR_LD (MR_KC + 4)          /* shared row pitch (floats): 16-byte rows */
#define MR_MIN_SPLIT_K (4 * MR_KC) /* the fewest k a split takes */
#define MR_MAX_SPLIT 16

/* weight formats of the kernel */
enum { MR_F16, MR_BF16, MR_Q8, MR_Q4 };

/* Ws (MR_NB, MR_LD): Ws[r][k] = w[n0 + r][k0 + k] widened, 0 past N and K.
 * vec: 16-byte loads of 8 weights (f16/bf16: K % 8 == 0, w aligned). */
template <int WF>
__device__ __forceinline__ void mr_load_w(float *Ws, const void *w, int n0, int k0, int N, int K, int vec) {
    if constexpr (WF == MR_Q8 || WF == MR_Q4) {
        /* one q block (32 weights) per thread: k0 is a multiple of 64, K of 32 */
        const int q4 = WF == MR_Q4, bs = q4 ? 18 : 34, nb = K >> 5;
        for (int idx = threadIdx.x; idx < MR_NB * (MR_KC / 32); idx += MR_THREADS) {
            const int r = idx / (MR_KC / 32), b = idx % (MR_KC / 32);
            const int n = n0 + r, kb = (k0 >> 5) + b;
            float *o = Ws + r * MR_LD + 32 * b;
            if (n >= N || kb >= nb) {
                for (int j = 0; j < 32; j += 4)
                    *reinterpret_cast<float4 *>(o + j) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                continue;
            }
            const unsigned char *blk = (const unsigned char *)w + ((int64_t)n * nb + kb) * bs;
            const float d = f16_bits_to_float((unsigned)blk[0] | (unsigned)blk[1] << 8);
            for (int j = 0; j < 32; j += 4) {
                float q[4];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int jj = j + i;
                    q[i] = q4 ? (float)((jj < 16 ? (blk[2 + jj] & 15) : (blk[2 + jj - 16] >> 4)) - 8)
                              : (float)(signed char)blk[2 + jj];
                }
                *reinterpret_cast<float4 *>(o + j) = make_float4(d * q[0], d * q[1], d * q[2], d * q[3]);
            }
        }
    } else {
        typedef typename std::conditional<WF == MR_BF16, __nv_bfloat16, __half>::type WT;
        typedef typename lowp2<WT>::type WT2;
        /* 8 threads per row of the tile: 128 contiguous bytes of w's row */
        for (int idx = threadIdx.x; idx < MR_NB * (MR_KC / 8); idx += MR_THREADS) {
            const int r = idx / (MR_KC / 8), g = idx % (MR_KC / 8);
            const int n = n0 + r, k = k0 + 8 * g;
            float f[8];
            const WT *wr = (const WT *)w + (int64_t)(n < N ? n : 0) * K;
            if (n < N && vec && k + 8 <= K) {
                const uint4 raw = __ldg(reinterpret_cast<const uint4 *>(wr + k));
                const WT2 *h2 = reinterpret_cast<const WT2 *>(&raw);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float2 v = lowp2_to_float2(h2[i]);
                    f[2 * i] = v.x;
                    f[2 * i + 1] = v.y;
                }
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) f[i] = n < N && k + i < K ? lowp_to_float(wr[k + i]) : 0.0f;
            }
            float *o = Ws + r * MR_LD + 8 * g;
            *reinterpret_cast<float4 *>(o) = make_float4(f[0], f[1], f[2], f[3]);
            *reinterpret_cast<float4 *>(o + 4) = make_float4(f[4], f[5], f[6], f[7]);
        }
    }
}

/* grid (ceil(N/MR_NB), splits), block MR_THREADS, dynamic shared
 * (8*RT + MR_NB) * MR_LD floats. Split s takes k in [s*kchunk, (s+1)*kchunk)
 * (kchunk a multiple of MR_KC); one split writes y, several write part
 * (splits, T, N). RT = 2: T <= 16, RT = 4: T <= 32. vecx: K % 4 == 0 and x
 * aligned. */
template <int WF, int RT>
__global__ void __launch_bounds__(MR_THREADS)
    gemm_rows_kernel2(float *y, float *part, const float *x, const void *w, int T, int N, int K, int kchunk,
                      float scale, int vecw, int vecx) {
    CU_DYN_SMEM(float, mrs);
    float *Xs = mrs;                  /* (8*RT, MR_LD) */
    float *Ws = mrs + 8 * RT * MR_LD; /* (MR_NB, MR_LD) */
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int n0 = blockIdx.x * MR_NB;
    const int kb = blockIdx.y * kchunk, ke = min(K, kb + kchunk);
    float acc[RT][4];
#pragma unroll
    for (int i = 0; i < RT; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

    for (int k0 = kb; k0 < ke; k0 += MR_KC) {
        __syncthreads(); /* the previous tile consumed */
        for (int idx = threadIdx.x; idx < 8 * RT * (MR_KC / 4); idx += MR_THREADS) {
            const int t = idx / (MR_KC / 4), k = k0 + 4 * (idx % (MR_KC / 4));
            float4 f = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (t < T) {
                const float *xr = x + (int64_t)t * K;
                if (vecx && k + 4 <= K) {
                    f = __ldg(reinterpret_cast<const float4 *>(xr + k));
                } else {
                    f.x = k < K ? xr[k] : 0.0f;
                    f.y = k + 1 < K ? xr[k + 1] : 0.0f;
                    f.z = k + 2 < K ? xr[k + 2] : 0.0f;
                    f.w = k + 3 < K ? xr[k + 3] : 0.0f;
                }
            }
            *reinterpret_cast<float4 *>(Xs + t * MR_LD + (k - k0)) = f;
        }
        mr_load_w<WF>(Ws, w, n0, k0, N, K, vecw);
        __syncthreads();
#pragma unroll 4
        for (int kq = 0; kq < MR_KC; kq += 4) {
            float4 xv[RT], wv[4];
#pragma unroll
            for (int i = 0; i < RT; i++) xv[i] = *reinterpret_cast<const float4 *>(Xs + (ty * RT + i) * MR_LD + kq);
#pragma unroll
            for (int j = 0; j < 4; j++) wv[j] = *reinterpret_cast<const float4 *>(Ws + (tx + 16 * j) * MR_LD + kq);
#pragma unroll
            for (int i = 0; i < RT; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    float a = acc[i][j];
                    a = fmaf(xv[i].x, wv[j].x, a);
                    a = fmaf(xv[i].y, wv[j].y, a);
                    a = fmaf(xv[i].z, wv[j].z, a);
                    a = fmaf(xv[i].w, wv[j].w, a);
                    acc[i][j] = a;
                }
        }
    }
#pragma unroll
    for (int i = 0; i < RT; i++) {
        const int t = ty * RT + i;
        if (t >= T) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int n = n0 + tx + 16 * j;
            if (n >= N) continue;
            if (gridDim.y == 1)
                y[(int64_t)t * N + n] = scale * acc[i][j];
            else
                part[((int64_t)blockIdx.y * T + t) * N + n] = acc[i][j];
        }
    }
}

/* y (n) = scale * sum_s part (ns, n), s in order. Napkin math: (ns+1)*n*4 bytes. */
__global__ void split_sum_kernel(float *y, const float *part, int64_t n, int ns, float scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int sp = 0; sp < ns; sp++) s += part[sp * n + i];
        y[i] = scale * s;
    }
}

/* ---- launchers ------------------------------------------------------------------------- */

static int aligned16(const void *p) {
    return ((uintptr_t)p & 15) == 0;
}

static int use_gemv(drt_dtype wt, int B, int Bw, int T, int trans_w) {
    return wt != DRT_F32 && B == 1 && Bw == 1 && !trans_w && T <= GEMV_MAX_T;
}

static int is_quant(drt_dtype wt) {
    return wt == DRT_Q8_0 || wt == DRT_Q4_0;
}

/* gemm_rows_kernel2: block weights in either mode; f16/bf16 in f32 mode (fast
 * mode keeps cuBLAS on tensor cores, which reads the weights once too) */
static int use_rows(const cu_ctx *c, drt_dtype wt, int B, int Bw, int T, int trans_w) {
    return wt != DRT_F32 && B == 1 && Bw == 1 && !trans_w && T > GEMV_MAX_T && T <= MR_MAX_T &&
           (is_quant(wt) || c->prec == CU_PREC_F32);
}

/* K per split of gemm_rows_kernel2 (a multiple of MR_KC) and the splits:
 * about 4 blocks per SM, at least MR_MIN_SPLIT_K per split */
static int rows_kchunk(const cu_ctx *c, int N, int K, int *splits) {
    const int64_t nbn = (N + MR_NB - 1) / MR_NB;
    int64_t ns = (4 * (int64_t)c->n_sm + nbn - 1) / nbn;
    if (ns > K / MR_MIN_SPLIT_K) ns = K / MR_MIN_SPLIT_K;
    if (ns > MR_MAX_SPLIT) ns = MR_MAX_SPLIT;
    if (ns < 1) ns = 1;
    const int kchunk = (int)(((K + ns - 1) / ns + MR_KC - 1) / MR_KC * MR_KC);
    *splits = (K + kchunk - 1) / kchunk;
    return kchunk;
}

/* rows of one weight batch widened per chunk (f32 mode, lowp weights) */
static int64_t widen_rows(int N, int K, int trans_w) {
    if (trans_w) return N; /* (K,N) layout: the whole batch at once */
    int64_t rows = (int64_t)(DEQUANT_CAP_BYTES / ((size_t)K * 4));
    if (rows < 1) rows = 1;
    return rows < N ? rows : N;
}

extern "C" size_t cu_matmul_scratch(const cu_ctx *c, drt_dtype wt, int B, int Bw, int T, int N, int K, int trans_w) {
    if (wt == DRT_F32 || use_gemv(wt, B, Bw, T, trans_w)) return 0;
    if (use_rows(c, wt, B, Bw, T, trans_w)) {
        int ns;
        rows_kchunk(c, N, K, &ns);
        return ns > 1 ? (size_t)ns * T * N * sizeof(float) : 0;
    }
    if (c->prec == CU_PREC_FAST && !is_quant(wt)) return (size_t)B * T * K * 2;
    return (size_t)widen_rows(N, K, trans_w) * K * 4;
}

/* rows per block of gemv_lowp_kernel2 for a launch of N rows in all */
static int gemv2_rows(const cu_ctx *c, int64_t N) {
    return N >= 4 * 2 * c->n_sm ? 4 : N >= 2 * 2 * c->n_sm ? 2 : 1;
}

/* gemv_lowp_kernel2 over the matrices of g (g->first filled in here) */
template <typename WT>
static drt_status launch_gemv2(cu_ctx *c, cu_gemv_group *g, const float *x, int T, int K, float scale) {
    int64_t total = 0;
    for (int i = 0; i < g->n; i++) total += g->N[i];
    const int r = gemv2_rows(c, total);
    int64_t nb = 0;
    for (int i = 0; i < g->n; i++) {
        g->first[i] = (int)nb;
        nb += (g->N[i] + r - 1) / r;
    }
#define GEMV2(R, TM) CU_LAUNCH((gemv_lowp_kernel2<WT, R, TM>), (unsigned)nb, 256, 0, c->stream)(*g, x, T, K, scale)
    if (T == 1) {
        if (r == 4)
            GEMV2(4, 1);
        else if (r == 2)
            GEMV2(2, 1);
        else
            GEMV2(1, 1);
    } else {
        if (r == 4)
            GEMV2(4, GEMV_MAX_T);
        else if (r == 2)
            GEMV2(2, GEMV_MAX_T);
        else
            GEMV2(1, GEMV_MAX_T);
    }
#undef GEMV2
    return cu_launched(g->n > 1 ? "MATMUL (gemv 2, grouped)" : "MATMUL (gemv 2)");
}

template <typename WT>
static drt_status launch_gemv(cu_ctx *c, float *y, const float *x, const void *w, int T, int N, int K, float scale) {
    const int vec = K % 8 == 0 && aligned16(w) && aligned16(x);
    if (vec && c->gemv == 2) {
        cu_gemv_group g;
        memset(&g, 0, sizeof g);
        g.n = 1;
        g.w[0] = w;
        g.y[0] = y;
        g.N[0] = N;
        return launch_gemv2<WT>(c, &g, x, T, K, scale);
    }
    CU_LAUNCH(gemv_lowp_kernel1<WT>, (unsigned)((N + 7) / 8), 256, 0, c->stream)
    (y, x, (const WT *)w, T, N, K, scale, vec);
    return cu_launched("MATMUL (gemv)");
}

extern "C" int cu_gemv_groupable(const cu_ctx *c, drt_dtype wt, int B, int Bw, int T, int N, int K, int trans_w,
                                 const void *x, const void *w) {
    return c->gemv == 2 && (wt == DRT_F16 || wt == DRT_BF16) && use_gemv(wt, B, Bw, T, trans_w) && K % 8 == 0 &&
           aligned16(w) && aligned16(x) && N > 0;
}

extern "C" drt_status cu_matmul_group(cu_ctx *c, cu_gemv_group *g, drt_dtype wt, const float *x, int T, int K,
                                      float scale) {
    return wt == DRT_BF16 ? launch_gemv2<__nv_bfloat16>(c, g, x, T, K, scale)
                          : launch_gemv2<__half>(c, g, x, T, K, scale);
}

template <int WF>
static drt_status launch_rows(cu_ctx *c, float *y, const float *x, const void *w, int T, int N, int K, float scale) {
    int ns;
    const int kchunk = rows_kchunk(c, N, K, &ns);
    const int vecw = (WF == MR_F16 || WF == MR_BF16) && K % 8 == 0 && aligned16(w);
    const int vecx = K % 4 == 0 && aligned16(x);
    float *part = (float *)c->scratch;
    const dim3 grid((unsigned)((N + MR_NB - 1) / MR_NB), (unsigned)ns);
    if (T <= 16) {
        const size_t shm = sizeof(float) * (16 + MR_NB) * MR_LD;
        CU_LAUNCH((gemm_rows_kernel2<WF, 2>), grid, MR_THREADS, shm, c->stream)
        (y, part, x, w, T, N, K, kchunk, scale, vecw, vecx);
    } else {
        const size_t shm = sizeof(float) * (32 + MR_NB) * MR_LD;
        CU_LAUNCH((gemm_rows_kernel2<WF, 4>), grid, MR_THREADS, shm, c->stream)
        (y, part, x, w, T, N, K, kchunk, scale, vecw, vecx);
    }
    drt_status s = cu_launched("MATMUL (rows)");
    if (s != DRT_OK || ns == 1) return s;
    const int64_t n = (int64_t)T * N;
    CU_LAUNCH(split_sum_kernel, cu_grid_for(c, n, 256), 256, 0, c->stream)(y, part, n, ns, scale);
    return cu_launched("MATMUL (rows, split sum)");
}

template <typename WT> static drt_status launch_widen(cu_ctx *c, float *out, const void *w, int64_t off, int64_t n) {
    CU_LAUNCH(widen_kernel<WT>, cu_grid_for(c, n, 256), 256, 0, c->stream)(out, (const WT *)w + off, n);
    return cu_launched("MATMUL (widen weights)");
}

template <typename WT> static drt_status launch_narrow(cu_ctx *c, void *out, const float *x, int64_t n) {
    CU_LAUNCH(narrow_kernel<WT>, cu_grid_for(c, n, 256), 256, 0, c->stream)((WT *)out, x, n);
    return cu_launched("MATMUL (round activations)");
}

extern "C" drt_status cu_matmul(cu_ctx *c, float *y, const float *x, const void *w, drt_dtype wt, int B, int Bw, int T,
                                int N, int K, int trans_w, float scale) {
    if (B <= 0 || T <= 0 || N <= 0) return DRT_OK;
    const float zero = 0.0f;
    const int r = B / Bw;     /* x batches per weight batch, contiguous */
    const int n_cols = r * T; /* columns of one GEMM */
    const cublasOperation_t opA = trans_w ? CUBLAS_OP_N : CUBLAS_OP_T;
    const int lda = trans_w ? N : K;
    const long long sA = (long long)N * K, sB = (long long)n_cols * K, sC = (long long)n_cols * N;

    if (K == 0) { /* an empty sum: cuBLAS rejects k = 0 with beta = 0 on some versions */
        cudaError_t e = cudaMemsetAsync(y, 0, sizeof(float) * (size_t)B * T * N, c->stream);
        return e == cudaSuccess ? DRT_OK : drt_set_error(DRT_ERR_BACKEND, "cuda: MATMUL: %s", cudaGetErrorString(e));
    }
    if (wt == DRT_F32) {
        if (c->prec == CU_PREC_FAST)
            return blas_ok(cublasGemmStridedBatchedEx(c->blas, opA, CUBLAS_OP_N, N, n_cols, K, &scale, w, CUDA_R_32F,
                                                      lda, sA, x, CUDA_R_32F, K, sB, &zero, y, CUDA_R_32F, N, sC, Bw,
                                                      CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
                           "tf32 gemm");
        return blas_ok(cublasSgemmStridedBatched(c->blas, opA, CUBLAS_OP_N, N, n_cols, K, &scale, (const float *)w, lda,
                                                 sA, x, K, sB, &zero, y, N, sC, Bw),
                       "sgemm");
    }
    const int bf = wt == DRT_BF16, q4 = wt == DRT_Q4_0;
    if (use_gemv(wt, B, Bw, T, trans_w)) {
        if (is_quant(wt)) {
            CU_LAUNCH(gemv_q_kernel, (unsigned)((N + 7) / 8), 256, 0, c->stream)
            (y, x, (const unsigned char *)w, T, N, K, scale, q4);
            return cu_launched("MATMUL (gemv, block weights)");
        }
        return bf ? launch_gemv<__nv_bfloat16>(c, y, x, w, T, N, K, scale)
                  : launch_gemv<__half>(c, y, x, w, T, N, K, scale);
    }
    if (use_rows(c, wt, B, Bw, T, trans_w)) {
        if (wt == DRT_Q8_0) return launch_rows<MR_Q8>(c, y, x, w, T, N, K, scale);
        if (wt == DRT_Q4_0) return launch_rows<MR_Q4>(c, y, x, w, T, N, K, scale);
        return bf ? launch_rows<MR_BF16>(c, y, x, w, T, N, K, scale) : launch_rows<MR_F16>(c, y, x, w, T, N, K, scale);
    }

    /* block weights: widened to f32 chunk by chunk below in either mode (the
     * f32 bound holds for them) */
    if (c->prec == CU_PREC_FAST && !is_quant(wt)) {
        const int64_t nx = (int64_t)B * T * K;
        drt_status s = bf ? launch_narrow<__nv_bfloat16>(c, c->scratch, x, nx)
                          : launch_narrow<__half>(c, c->scratch, x, nx);
        if (s != DRT_OK) return s;
        const cudaDataType_t dt = bf ? CUDA_R_16BF : CUDA_R_16F;
        return blas_ok(cublasGemmStridedBatchedEx(c->blas, opA, CUBLAS_OP_N, N, n_cols, K, &scale, w, dt, lda, sA,
                                                  c->scratch, dt, K, sB, &zero, y, CUDA_R_32F, N, sC, Bw,
                                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       bf ? "bf16 gemm" : "f16 gemm");
    }

    /* f32 mode: widen a chunk of weight rows into scratch, then SGEMM on it.
     * Chunk rows n0..n0+rows of batch bw produce y[:, n0..n0+rows) of the
     * batch's n_cols rows: column-major C at y + n0 with ldc = N. */
    const int64_t chunk = widen_rows(N, K, trans_w);
    float *wf = (float *)c->scratch;
    for (int bw = 0; bw < Bw; bw++) {
        const float *xb = x + (int64_t)bw * sB;
        float *yb = y + (int64_t)bw * sC;
        for (int64_t n0 = 0; n0 < N; n0 += chunk) {
            const int rows = (int)(N - n0 < chunk ? N - n0 : chunk);
            const int64_t off = (int64_t)bw * sA + n0 * K; /* trans_w: n0 = 0, rows = N */
            drt_status s;
            if (is_quant(wt)) {
                const int64_t n = (int64_t)rows * K;
                CU_LAUNCH(widen_q_kernel, cu_grid_for(c, n, 256), 256, 0, c->stream)
                (wf, (const unsigned char *)w, off, n, q4);
                s = cu_launched("MATMUL (dequantize weights)");
            } else {
                s = bf ? launch_widen<__nv_bfloat16>(c, wf, w, off, (int64_t)rows * K)
                       : launch_widen<__half>(c, wf, w, off, (int64_t)rows * K);
            }
            if (s != DRT_OK) return s;
            s = blas_ok(cublasSgemm(c->blas, opA, CUBLAS_OP_N, rows, n_cols, K, &scale, wf, trans_w ? N : K, xb, K,
                                    &zero, yb + n0, N),
                        "sgemm (widened weights)");
            if (s != DRT_OK) return s;
        }
    }
    return DRT_OK;
}
