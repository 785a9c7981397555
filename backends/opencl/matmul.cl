/* OpenCL kernels: MATMUL (docs/design.md section 3; reference in backends/cpu/matmul.c).
 *
 *   y = scale * x w^T, batched:
 *   x is (B,T,K) f32, y is (B,T,N) f32,
 *   w is (Bw,N,K) when trans_w == 0 (nn.Linear layout), (Bw,K,N) when trans_w == 1,
 *   of dtype f32, f16 or bf16; batch b of x reads batch b*Bw/B of w.
 *
 * Accumulation is in f32 (the reference uses double; for K in the thousands
 * the f32 sum stays around 1e-7 relative, far inside NMSE 1e-8). Napkin math:
 * 2*B*T*N*K flops; reads B*T*K + Bw*N*K, writes B*T*N elements.
 *
 * Two versions, one body per weight dtype (the dtype is a compile-time
 * constant of each kernel, so the branch in load_w folds away):
 *   1. matvec: T == 1 (decode). One work-group of MV_WG items per MV_NR
 *      outputs; the items stride over K (consecutive items read consecutive
 *      weights), then a tree reduction. Bound by reading w once.
 *   2. tiled: 64x64 output tiles, K in steps of 16 staged in local memory,
 *      16x16 work-items each accumulating a 4x4 block in registers (rows
 *      ty+16i, columns tx+16j, so local reads are conflict-free and global
 *      stores coalesce). Each weight tile is reused by 64 rows of x. */

#define WT_F32 0
#define WT_F16 1
#define WT_BF16 2

/* f16 via vload_half and bf16 via a 16-bit shift: no cl_khr_fp16 needed */
inline float load_w(__global const uchar *w, size_t i, const int wt) {
    if (wt == WT_F16) return vload_half(i, (__global const half *)w);
    if (wt == WT_BF16) return as_float((uint)((__global const ushort *)w)[i] << 16);
    return ((__global const float *)w)[i];
}

/* ---- 1. matvec ---------------------------------------------------------- */

#define MV_WG 64
#define MV_NR 4

/* Global (ceil(N/MV_NR)*MV_WG, B*T); trans_w == 0 only. */
inline void matvec_body(__global float *y, __global const float *x, __global const uchar *w,
                        size_t wo, int B, int Bw, int T, int N, int K, float scale,
                        __local float *red, const int wt) {
    const int lid = get_local_id(0);
    const int n0 = get_group_id(0) * MV_NR;
    const int row = get_group_id(1); /* b*T + t */
    const int b = row / T;
    const size_t wb = wo + (size_t)((long)b * Bw / B) * N * K;
    x += (size_t)row * K;
    size_t wr[MV_NR];
    for (int r = 0; r < MV_NR; r++)
        wr[r] = wb + (size_t)min(n0 + r, N - 1) * K;
    float acc[MV_NR] = {0.0f};
    for (int k = lid; k < K; k += MV_WG) {
        const float xk = x[k];
        for (int r = 0; r < MV_NR; r++)
            acc[r] += xk * load_w(w, wr[r] + k, wt);
    }
    for (int r = 0; r < MV_NR; r++)
        red[r * MV_WG + lid] = acc[r];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = MV_WG / 2; s > 0; s >>= 1) {
        if (lid < s)
            for (int r = 0; r < MV_NR; r++)
                red[r * MV_WG + lid] += red[r * MV_WG + lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid < MV_NR && n0 + lid < N) y[(size_t)row * N + n0 + lid] = scale * red[lid * MV_WG];
}

#define MATVEC(name, wt)                                                                           \
    __kernel __attribute__((reqd_work_group_size(MV_WG, 1, 1))) void name(                         \
        __global float *y, ulong yo, __global const float *x, ulong xo, __global const uchar *w,   \
        ulong wo, int B, int Bw, int T, int N, int K, float scale) {                               \
        __local float red[MV_NR * MV_WG];                                                          \
        matvec_body(y + yo, x + xo, w, wo, B, Bw, T, N, K, scale, red, wt);                        \
    }
MATVEC(matvec_f32, WT_F32)
MATVEC(matvec_f16, WT_F16)
MATVEC(matvec_bf16, WT_BF16)

/* ---- 2. tiled ------------------------------------------------------------ */

#define TM 64 /* rows of y (T) per tile */
#define TN 64 /* columns of y (N) per tile */
#define TK 16 /* step along K */
#define TW 16 /* work-group is TW x TW; each item owns (TM/TW) x (TN/TW) = 4x4 */

/* Global (ceil(N/TN)*TW, ceil(T/TM)*TW, B). xs is (TK, TM+1), ws (TK, TN+1):
 * the +1 keeps the transposing stores of xs off one bank. */
inline void tiled_body(__global float *y, __global const float *x, __global const uchar *w,
                       size_t wo, int B, int Bw, int T, int N, int K, int trans_w, float scale,
                       __local float *xs, __local float *ws, const int wt) {
    const int tx = get_local_id(0), ty = get_local_id(1), tid = ty * TW + tx;
    const int n0 = get_group_id(0) * TN, m0 = get_group_id(1) * TM, b = get_group_id(2);
    const size_t wb = wo + (size_t)((long)b * Bw / B) * N * K;
    x += (size_t)b * T * K;
    y += (size_t)b * T * N;
    float acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TK) {
        /* stage x[m0.., k0..] and w into local: TM*TK = 1024 values each, 4 per item */
        for (int i = 0; i < 4; i++) {
            const int idx = tid + TW * TW * i;
            const int r = idx / TK, c = idx % TK; /* r < 64 rows, c < 16 along K */
            const int gk = k0 + c;
            const int gm = m0 + r;
            xs[c * (TM + 1) + r] = (gm < T && gk < K) ? x[(size_t)gm * K + gk] : 0.0f;
            if (!trans_w) {
                const int gn = n0 + r;
                ws[c * (TN + 1) + r] =
                    (gn < N && gk < K) ? load_w(w, wb + (size_t)gn * K + gk, wt) : 0.0f;
            } else {
                const int r2 = idx / TN, c2 = idx % TN; /* r2 < 16 along K, c2 < 64 along N */
                const int gk2 = k0 + r2, gn2 = n0 + c2;
                ws[r2 * (TN + 1) + c2] =
                    (gk2 < K && gn2 < N) ? load_w(w, wb + (size_t)gk2 * N + gn2, wt) : 0.0f;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < TK; kk++) {
            float a[4], bv[4];
            for (int i = 0; i < 4; i++)
                a[i] = xs[kk * (TM + 1) + ty + TW * i];
            for (int j = 0; j < 4; j++)
                bv[j] = ws[kk * (TN + 1) + tx + TW * j];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    acc[i][j] += a[i] * bv[j];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int i = 0; i < 4; i++) {
        const int m = m0 + ty + TW * i;
        if (m >= T) continue;
        for (int j = 0; j < 4; j++) {
            const int n = n0 + tx + TW * j;
            if (n < N) y[(size_t)m * N + n] = scale * acc[i][j];
        }
    }
}

#define TILED(name, wt)                                                                            \
    __kernel __attribute__((reqd_work_group_size(TW, TW, 1))) void name(                           \
        __global float *y, ulong yo, __global const float *x, ulong xo, __global const uchar *w,   \
        ulong wo, int B, int Bw, int T, int N, int K, int trans_w, float scale) {                  \
        __local float xs[TK * (TM + 1)];                                                           \
        __local float ws[TK * (TN + 1)];                                                           \
        tiled_body(y + yo, x + xo, w, wo, B, Bw, T, N, K, trans_w, scale, xs, ws, wt);             \
    }
TILED(matmul_f32, WT_F32)
TILED(matmul_f16, WT_F16)
TILED(matmul_bf16, WT_BF16)
