/* OpenCL kernels: MATMUL with q8_0 / q4_0 weights (docs/quantization.md;
 * reference backends/ref/matmul.c, elements as runtime/drt_quant.h's
 * drt_q8_0_get / drt_q4_0_get).
 *
 *   y (B,T,N) = scale * x (B,T,K) w^T, w (Bw,N,K) in blocks of 32 along K
 *   (K % 32 == 0, never transposed); batch b of x reads batch b*Bw/B of w.
 *   w is bytes: wo is its byte offset in the buffer.
 *
 * Two layouts of the work (the host picks by device class, as matmul.c):
 *  - GPUs: one work-group of QWG items per output (b, t, n): item i takes
 *    blocks i, i+QWG, ..., reads the block's f16 scale once and sums its 32
 *    values times x in f32, then scales; a tree reduction in local memory
 *    ends it;
 *  - CPU-class devices (register blocks): one item per tile of QMR rows of x
 *    times QNR weight rows; per block it widens each weight row's 32 values
 *    into two float16 vectors once and uses them for every x row, summing
 *    d * (x . q) per lane; one horizontal sum per output at the end. No
 *    local memory, no barriers (PoCL runs those as loops over the items).
 *    For T == 1: one x row times 8 (q8_0) or 4 (q4_0) weight rows; for a few
 *    rows (batched decode, 2 <= T <= 32) the rows kernels: an item owns 4
 *    weight rows and every row of x, in tiles of 4 rows (then 2, 1) over
 *    all of K, so its weight rows come from memory once for all T rows
 *    (the first tile) and from L1/L2 for the others.
 * Napkin math: N*K/32*(34|18) bytes of weights per row of x. */

#define QWG 32

/* an f16 bit pattern (bytes lo, hi) as float: vload_half from private memory
 * needs no cl_khr_fp16 */
inline float f16_from_bytes(uchar lo, uchar hi) {
    ushort h = (ushort)lo | (ushort)hi << 8;
    return vload_half(0, (const half *)&h);
}

#define MATMUL_Q(NAME, BS, QVAL)                                                                   \
    __kernel __attribute__((reqd_work_group_size(QWG, 1, 1))) void NAME(                          \
        __global float *y, ulong yo, __global const float *x, ulong xo, __global const uchar *w,  \
        ulong wo, int B, int Bw, int T, int N, int K, float scale) {                              \
        __local float part[QWG];                                                                   \
        const int li = get_local_id(0);                                                            \
        const int n = get_group_id(0), t = get_group_id(1), b = get_group_id(2);                   \
        const int bw = (int)((long)b * Bw / B), nb = K / 32;                                       \
        __global const uchar *wr = w + wo + ((long)bw * N + n) * nb * BS;                          \
        __global const float *xr = x + xo + ((long)b * T + t) * K;                                 \
        float acc = 0.0f;                                                                          \
        for (int blk = li; blk < nb; blk += QWG) {                                                 \
            __global const uchar *p = wr + (long)blk * BS;                                         \
            const float d = f16_from_bytes(p[0], p[1]);                                            \
            __global const float *xb = xr + blk * 32;                                              \
            float s = 0.0f;                                                                        \
            for (int j = 0; j < 32; j++) s = fma(xb[j], (float)(QVAL), s);                         \
            acc = fma(d, s, acc);                                                                  \
        }                                                                                          \
        part[li] = acc;                                                                            \
        barrier(CLK_LOCAL_MEM_FENCE);                                                              \
        for (int h = QWG / 2; h > 0; h >>= 1) {                                                    \
            if (li < h) part[li] += part[li + h];                                                  \
            barrier(CLK_LOCAL_MEM_FENCE);                                                          \
        }                                                                                          \
        if (li == 0) y[yo + ((long)b * T + t) * N + n] = scale * part[0];                          \
    }

/* q8_0: q = the signed byte 2 + j; q4_0: nibble j of bytes 2..17, minus 8 */
MATMUL_Q(matmul_q8_0, 34, (char)p[2 + j])
MATMUL_Q(matmul_q4_0, 18, (j < 16 ? (int)(p[2 + j] & 15) : (int)(p[2 + j - 16] >> 4)) - 8)

/* ---- register blocks (CPU-class devices) ---------------------------------------- */

/* values 16h .. 16h+15 of the block at p as floats */
inline float16 q8_vals(__global const uchar *p, int h) {
    return convert_float16(vload16(0, (__global const char *)p + 2 + 16 * h));
}
inline float16 q4_vals(__global const uchar *p, int h) {
    const uchar16 b = vload16(0, p + 2);
    return convert_float16(as_char16((h ? b >> (uchar16)(4) : b & (uchar16)(15)) - (uchar16)(8)));
}

inline float hsum16(float16 v) {
    float8 a = v.lo + v.hi;
    float4 b = a.lo + a.hi;
    float2 c = b.lo + b.hi;
    return c.x + c.y;
}

/* CPU-class devices (PoCL, ...): rows the host asks for (PF_ROWS, as in
 * matmul.cl) are prefetched into L2 by the T == 1 kernels. */
#if defined(PF_ROWS) && defined(__clang__)
#define PREFETCH_L2(p) __builtin_prefetch((p), 0, 2)
#else
#define PREFETCH_L2(p)
#endif
#ifndef PF_ROWS
#define PF_ROWS 0
#endif

/* Global (ceil(T/MR) * ceil(N/NR), B), any local size; consecutive items
 * take consecutive weight rows, so a work-group streams one stretch of w.
 * Per block, the NR rows' f16 scales are gathered and widened as one vector
 * (vload_halfNR: PoCL turns that into vcvtph2ps, where its scalar
 * vload_half is some 20 integer instructions); for T == 1 (MR == 1) the
 * rows PF_ROWS ahead are prefetched. On PoCL, for the 134M model's 85
 * decode weights: q8_0 7 -> 18-20 GB/s, q4_0 6 -> 11-13 GB/s. */
#define QRB_KERNEL(NAME, BS, VALS, MR, NR)                                                          \
    __kernel void NAME(__global float *y, ulong yo, __global const float *x, ulong xo,              \
                       __global const uchar *w, ulong wo, int B, int Bw, int T, int N, int K,       \
                       float scale) {                                                               \
        const int nNt = (N + NR - 1) / NR, nMt = (T + MR - 1) / MR;                                 \
        const int i = get_global_id(0), b = get_global_id(1);                                       \
        if (i >= nMt * nNt) return;                                                                 \
        const int mt = nMt == 1 ? 0 : i / nNt; /* decode: one row of tiles, no division */        \
        const int m0 = mt * MR, n0 = (i - mt * nNt) * NR, nb = K / 32;                              \
        const long rs = (long)nb * BS; /* bytes per weight row */                                   \
        const int bw = (int)((long)b * Bw / B);                                                     \
        __global const uchar *wr[NR];                                                               \
        __global const float *xr[MR];                                                               \
        /* rows past N and T repeat the last one; their sums are not stored */                     \
        _Pragma("unroll") for (int c = 0; c < NR; c++)                                              \
            wr[c] = w + wo + ((long)bw * N + min(n0 + c, N - 1)) * rs;                              \
        _Pragma("unroll") for (int r = 0; r < MR; r++)                                              \
            xr[r] = x + xo + ((long)b * T + min(m0 + r, T - 1)) * K;                                \
        float16 acc[MR][NR];                                                                        \
        _Pragma("unroll") for (int r = 0; r < MR; r++)                                              \
            _Pragma("unroll") for (int c = 0; c < NR; c++) acc[r][c] = (float16)(0.0f);             \
        for (int blk = 0; blk < nb; blk++) {                                                        \
            float16 x0[MR], x1[MR];                                                                 \
            _Pragma("unroll") for (int r = 0; r < MR; r++) {                                        \
                x0[r] = vload16(0, xr[r] + blk * 32);                                               \
                x1[r] = vload16(0, xr[r] + blk * 32 + 16);                                          \
            }                                                                                       \
            ushort sb[NR];                                                                          \
            _Pragma("unroll") for (int c = 0; c < NR; c++)                                          \
                sb[c] = (ushort)(wr[c][(long)blk * BS] | wr[c][(long)blk * BS + 1] << 8);           \
            float d[NR];                                                                            \
            vstore##NR(vload_half##NR(0, (const half *)sb), 0, d);                                  \
            _Pragma("unroll") for (int c = 0; c < NR; c++) {                                        \
                __global const uchar *p = wr[c] + (long)blk * BS;                                   \
                if (MR == 1) PREFETCH_L2(p + PF_ROWS * rs);                                           \
                const float16 w0 = VALS(p, 0), w1 = VALS(p, 1);                                     \
                _Pragma("unroll") for (int r = 0; r < MR; r++)                                      \
                    acc[r][c] = fma((float16)(d[c]), fma(x0[r], w0, x1[r] * w1), acc[r][c]);        \
            }                                                                                       \
        }                                                                                           \
        _Pragma("unroll") for (int r = 0; r < MR; r++)                                              \
            _Pragma("unroll") for (int c = 0; c < NR; c++)                                          \
                if (m0 + r < T && n0 + c < N)                                                       \
                    y[yo + ((long)b * T + m0 + r) * N + n0 + c] = scale * hsum16(acc[r][c]);        \
    }

/* T == 1 (decode): one x row, 8 (q8_0) or 4 (q4_0) weight rows; else 4 x 4 */
QRB_KERNEL(gemv_q8_0, 34, q8_vals, 1, 8)
QRB_KERNEL(gemv_q4_0, 18, q4_vals, 1, 4)
QRB_KERNEL(dot_q8_0, 34, q8_vals, 4, 4)
QRB_KERNEL(dot_q4_0, 18, q4_vals, 4, 4)

/* One MR x NR tile of the rows kernels: rows m0.. of x (past T: the last,
 * not stored) times weight rows n0.. (past N: the last, not stored) from
 * the batch's weights wb, as the tiles above; pf: prefetch the weight rows
 * PF_ROWS ahead (the tile that streams them). */
inline __attribute__((always_inline)) void q_tile(__global float *y, __global const float *x,
                                                  __global const uchar *wb, int m0, int n0, int T,
                                                  int N, int K, float scale, const int q8,
                                                  const int MR, const int NR, const int pf) {
    const int BS = q8 ? 34 : 18, nb = K / 32;
    const long rs = (long)nb * BS; /* bytes per weight row */
    __global const uchar *wr[4];
    __global const float *xr[4];
    #pragma unroll
    for (int c = 0; c < NR; c++)
        wr[c] = wb + (long)min(n0 + c, N - 1) * rs;
    #pragma unroll
    for (int r = 0; r < MR; r++)
        xr[r] = x + (long)min(m0 + r, T - 1) * K;
    float16 acc[4][4];
    #pragma unroll
    for (int r = 0; r < MR; r++)
        #pragma unroll
        for (int c = 0; c < NR; c++)
            acc[r][c] = (float16)(0.0f);
    for (int blk = 0; blk < nb; blk++) {
        float16 x0[4], x1[4];
        #pragma unroll
        for (int r = 0; r < MR; r++) {
            x0[r] = vload16(0, xr[r] + blk * 32);
            x1[r] = vload16(0, xr[r] + blk * 32 + 16);
        }
        ushort sb[4];
        #pragma unroll
        for (int c = 0; c < NR; c++)
            sb[c] = (ushort)(wr[c][(long)blk * BS] | wr[c][(long)blk * BS + 1] << 8);
        float d[4];
        vstore4(vload_half4(0, (const half *)sb), 0, d);
        #pragma unroll
        for (int c = 0; c < NR; c++) {
            __global const uchar *p = wr[c] + (long)blk * BS;
            if (pf) PREFETCH_L2(p + PF_ROWS * rs);
            const float16 w0 = q8 ? q8_vals(p, 0) : q4_vals(p, 0);
            const float16 w1 = q8 ? q8_vals(p, 1) : q4_vals(p, 1);
            #pragma unroll
            for (int r = 0; r < MR; r++)
                acc[r][c] = fma((float16)(d[c]), fma(x0[r], w0, x1[r] * w1), acc[r][c]);
        }
    }
    #pragma unroll
    for (int r = 0; r < MR; r++)
        #pragma unroll
        for (int c = 0; c < NR; c++)
            if (m0 + r < T && n0 + c < N) y[(long)(m0 + r) * N + n0 + c] = scale * hsum16(acc[r][c]);
}

/* Global (ceil(N/4), B), any local size: item i owns weight rows 4i.. and
 * all T rows of x (2 <= T <= 32: batched decode) */
inline void q_rows_body(__global float *y, __global const float *x, __global const uchar *w,
                        ulong wo, int B, int Bw, int T, int N, int K, float scale, const int q8) {
    const int i = get_global_id(0), b = get_global_id(1);
    if (i >= (N + 3) / 4) return;
    const int bw = (int)((long)b * Bw / B), n0 = 4 * i;
    __global const uchar *wb = w + wo + (long)bw * N * (K / 32) * (q8 ? 34 : 18);
    y += (long)b * T * N;
    x += (long)b * T * K;
    int m0 = 0;
    if (T >= 4) { /* the first tile streams w (prefetching), the rest reuse it */
        q_tile(y, x, wb, 0, n0, T, N, K, scale, q8, 4, 4, 1);
        for (m0 = 4; m0 + 4 <= T; m0 += 4)
            q_tile(y, x, wb, m0, n0, T, N, K, scale, q8, 4, 4, 0);
    }
    if (T - m0 >= 2) {
        q_tile(y, x, wb, m0, n0, T, N, K, scale, q8, 2, 4, m0 == 0);
        m0 += 2;
    }
    if (m0 < T) q_tile(y, x, wb, m0, n0, T, N, K, scale, q8, 1, 4, m0 == 0);
}

__kernel void rows_q8_0(__global float *y, ulong yo, __global const float *x, ulong xo,
                        __global const uchar *w, ulong wo, int B, int Bw, int T, int N, int K,
                        float scale) {
    q_rows_body(y + yo, x + xo, w, wo, B, Bw, T, N, K, scale, 1);
}
__kernel void rows_q4_0(__global float *y, ulong yo, __global const float *x, ulong xo,
                        __global const uchar *w, ulong wo, int B, int Bw, int T, int N, int K,
                        float scale) {
    q_rows_body(y + yo, x + xo, w, wo, B, Bw, T, N, K, scale, 0);
}
