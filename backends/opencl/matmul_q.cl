/* OpenCL kernels: MATMUL with q8_0 / q4_0 weights (docs/quantization.md;
 * reference backends/ref/matmul.c, elements as runtime/drt_quant.h's
 * drt_q8_0_get / drt_q4_0_get).
 *
 *   y (B,T,N) = scale * x (B,T,K) w^T, w (Bw,N,K) in blocks of 32 along K
 *   (K % 32 == 0, never transposed); batch b of x reads batch b*Bw/B of w.
 *   w is bytes: wo is its byte offset in the buffer.
 *
 * One work-group of QWG items per output (b, t, n): item i takes blocks i,
 * i+QWG, ..., reads the block's f16 scale once and sums its 32 values times
 * x in f32, then scales; a tree reduction in local memory ends it. Napkin
 * math: N*K/32*(34|18) bytes of weights per row of x. */

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
