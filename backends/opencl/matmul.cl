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

/* ---- 3. register-blocked (CPU-class devices) --------------------------------
 * No local memory and no barriers: each work-item owns an MR x NR block of y
 * in registers and streams its operands straight from global memory (the
 * caches do the staging). On PoCL's CPU device a barrier-free kernel runs
 * each work-item as a plain loop iteration, and the explicit RB_V-wide
 * vectors (RB_V = the device's native float vector width, -DRB_V by the
 * host: 16 on AVX-512) become SIMD registers directly.
 *   dot   (trans_w == 0, w (N,K)): K is contiguous in both x and w, so each of
 *         the MR x NR outputs keeps an RB_V-wide partial sum along K; one
 *         horizontal sum at the end. Per step: MR + NR vector loads, MR*NR
 *         fmas. MR = 1 is the GEMV (decode) variant.
 *   rows  (trans_w == 0, a few rows: batched decode): an item owns NR weight
 *         rows and every row of x, walked in dot tiles of MR rows (then 2
 *         and 1 for the rest), each over all of K: the first tile streams the
 *         NR weight rows from memory, the others find them in L1/L2, so w is
 *         read from memory once for all T rows (dot's bands of tiles read it
 *         once per row tile).
 *   outer (trans_w == 1, w (K,N)): each item owns MR rows x OV*RB_V columns;
 *         per k: OV vector loads of w's row k, MR broadcasts of x, MR*OV fmas
 *         (the BLAS micro-kernel). Partial column blocks take a scalar path.
 * Tiles are walked in bands (RB_SW column tiles wide) so that a band of w
 * stays in L2 while every row block of x passes it once.
 * Accumulation is f32 with fma (more accurate than separate mul+add). */

#ifndef RB_V
#define RB_V 8
#endif
#if RB_V == 16
#define vfloat float16
#define vload_f vload16
#define vstore_f vstore16
#define vload_h vload_half16
#define vushort ushort16
#define vconv_u convert_uint16
#define as_vfloat as_float16
#elif RB_V == 8
#define vfloat float8
#define vload_f vload8
#define vstore_f vstore8
#define vload_h vload_half8
#define vushort ushort8
#define vconv_u convert_uint8
#define as_vfloat as_float8
#else
#define vfloat float4
#define vload_f vload4
#define vstore_f vstore4
#define vload_h vload_half4
#define vushort ushort4
#define vconv_u convert_uint4
#define as_vfloat as_float4
#endif
#ifndef RB_SW
#define RB_SW 16
#endif
/* the variants' register blocks (the host may set them from the device) */
#ifndef RB_GEMV_NR
#define RB_GEMV_NR 8
#endif
#ifndef RB_MR
#define RB_MR 4
#endif
#ifndef RB_NR
#define RB_NR 4
#endif
#ifndef RB_OMR
#define RB_OMR 4
#endif
#ifndef RB_OV
#define RB_OV 2
#endif

/* RB_V consecutive weights from element i as floats. f16: PoCL's
 * vload_halfN claims the alignment of the whole vector (2*RB_V bytes); the
 * GEMV relies on it folding into vcvtph2ps from memory, but where register
 * pressure split the load from its convert it became an aligned move that
 * faulted on rows of K not a multiple of 8. So al (the caller's: every
 * address it passes is a multiple of 2*RB_V bytes) takes vload_halfN, and
 * other addresses go through a private copy loaded as ushort (slower). */
inline vfloat load_wv(__global const uchar *w, size_t i, const int wt, const int al) {
    if (wt == WT_F16) {
        if (al) return vload_h(0, (__global const half *)w + i);
        const vushort u = vload_f(0, (__global const ushort *)w + i);
        return vload_h(0, (const half *)&u);
    }
    if (wt == WT_BF16) return as_vfloat(vconv_u(vload_f(0, (__global const ushort *)w + i)) << 16);
    return vload_f(0, (__global const float *)w + i);
}

/* element i of w (2-byte f16) starts a vector load_wv may take aligned */
inline int wv_aligned(__global const uchar *w, size_t i) {
    return ((size_t)(w + 2 * i) & (2 * RB_V - 1)) == 0;
}

inline float hsum(vfloat v) {
#if RB_V == 16
    float8 a = v.lo + v.hi;
    float4 b = a.lo + a.hi;
#elif RB_V == 8
    float4 b = v.lo + v.hi;
#else
    float4 b = v;
#endif
    float2 c = b.lo + b.hi;
    return c.x + c.y;
}

/* tile (mb, nb) of a 1-d launch over all tiles of one batch, in bands of
 * RB_SW column tiles (the last band may be narrower) */
inline void band_tile(int i, int nMt, int nNt, int *mb, int *nb) {
    const int band = i / (RB_SW * nMt), r = i - band * RB_SW * nMt;
    const int bw = min(RB_SW, nNt - band * RB_SW);
    *mb = r / bw;
    *nb = band * RB_SW + r % bw;
}

#define RB_MAX 8

/* CPU devices (the host defines PF_ROWS): the GEMVs prefetch the weight rows
 * PF_ROWS ahead of the ones they read into L2. Decode's rows are short (K of
 * 768-2048), too short for the hardware prefetchers to follow them; on PoCL
 * this took the f16 GEMV from ~16 to ~26 GB/s. OpenCL's own prefetch() is a
 * no-op there. */
#if defined(PF_ROWS) && defined(__clang__)
#define PREFETCH_L2(p) __builtin_prefetch((p), 0, 2)
#else
#define PREFETCH_L2(p)
#endif

/* One MR x NR tile of y at (m0, n0) over all of K: rows m0.. of x (past T:
 * the last, not stored) times weight rows n0.. (past N: the last, not
 * stored) of the batch's weights from element wb; pf: prefetch the weight
 * rows PF_ROWS ahead into L2; al: load_wv's (dot_tile decides it). */
inline __attribute__((always_inline)) void dot_tile_al(__global float *y, __global const float *x,
                                                       __global const uchar *w, size_t wb, int m0,
                                                       int n0, int T, int N, int K, float scale,
                                                       const int wt, const int MR, const int NR,
                                                       const int pf, const int al) {
    size_t wr[RB_MAX];
    #pragma unroll
    for (int c = 0; c < NR; c++)
        wr[c] = wb + (size_t)min(n0 + c, N - 1) * K;
    __global const float *xr[RB_MAX];
    #pragma unroll
    for (int r = 0; r < MR; r++)
        xr[r] = x + (size_t)min(m0 + r, T - 1) * K;
    vfloat acc[RB_MAX][RB_MAX];
    #pragma unroll
    for (int r = 0; r < MR; r++)
        #pragma unroll
        for (int c = 0; c < NR; c++)
            acc[r][c] = (vfloat)(0.0f);
    int k = 0;
    for (; k + RB_V <= K; k += RB_V) {
        vfloat a[RB_MAX], bv[RB_MAX];
        #pragma unroll
        for (int r = 0; r < MR; r++)
            a[r] = vload_f(0, xr[r] + k);
        #pragma unroll
        for (int c = 0; c < NR; c++)
            bv[c] = load_wv(w, wr[c] + k, wt, al);
#ifdef PF_ROWS
        if (pf)
            #pragma unroll
            for (int c = 0; c < NR; c++)
                PREFETCH_L2(w + (wr[c] + (size_t)PF_ROWS * K + k) * (wt == WT_F32 ? 4 : 2));
#endif
        #pragma unroll
        for (int r = 0; r < MR; r++)
            #pragma unroll
            for (int c = 0; c < NR; c++)
                acc[r][c] = fma(a[r], bv[c], acc[r][c]);
    }
    float s[RB_MAX][RB_MAX];
    #pragma unroll
    for (int r = 0; r < MR; r++)
        #pragma unroll
        for (int c = 0; c < NR; c++)
            s[r][c] = hsum(acc[r][c]);
    for (; k < K; k++)
        #pragma unroll
        for (int r = 0; r < MR; r++) {
            const float a = xr[r][k];
            #pragma unroll
            for (int c = 0; c < NR; c++)
                s[r][c] = fma(a, load_w(w, wr[c] + k, wt), s[r][c]);
        }
    #pragma unroll
    for (int r = 0; r < MR; r++) {
        if (m0 + r >= T) break;
        #pragma unroll
        for (int c = 0; c < NR; c++)
            if (n0 + c < N) y[(size_t)(m0 + r) * N + n0 + c] = scale * s[r][c];
    }
}

/* dot_tile_al, with the f16 loads aligned when every weight row starts a
 * whole aligned vector (k steps keep it): the loop is compiled both ways */
inline __attribute__((always_inline)) void dot_tile(__global float *y, __global const float *x,
                                                    __global const uchar *w, size_t wb, int m0,
                                                    int n0, int T, int N, int K, float scale,
                                                    const int wt, const int MR, const int NR,
                                                    const int pf) {
    int al = wt == WT_F16;
    #pragma unroll
    for (int c = 0; c < NR; c++)
        al &= wv_aligned(w, wb + (size_t)min(n0 + c, N - 1) * K);
    if (al) dot_tile_al(y, x, w, wb, m0, n0, T, N, K, scale, wt, MR, NR, pf, 1);
    else dot_tile_al(y, x, w, wb, m0, n0, T, N, K, scale, wt, MR, NR, pf, 0);
}

/* Global (ceil(T/MR)*ceil(N/NR), B), any local size. */
inline void dot_body(__global float *y, __global const float *x, __global const uchar *w,
                     size_t wo, int B, int Bw, int T, int N, int K, float scale, const int wt,
                     const int MR, const int NR) {
    const int nMt = (T + MR - 1) / MR, nNt = (N + NR - 1) / NR;
    const int i = get_global_id(0), b = get_global_id(1);
    if (i >= nMt * nNt) return;
    int mb, nb;
    band_tile(i, nMt, nNt, &mb, &nb);
    const size_t wb = wo + (size_t)((long)b * Bw / B) * N * K;
    dot_tile(y + (size_t)b * T * N, x + (size_t)b * T * K, w, wb, mb * MR, nb * NR, T, N, K, scale,
             wt, MR, NR, MR == 1);
}

/* Global (ceil(N/NR), B), any local size: item i owns weight rows NR*i.. and
 * all T rows of x (rows, above). */
inline void rows_body(__global float *y, __global const float *x, __global const uchar *w,
                      size_t wo, int B, int Bw, int T, int N, int K, float scale, const int wt,
                      const int MR, const int NR) {
    const int i = get_global_id(0), b = get_global_id(1);
    if (i >= (N + NR - 1) / NR) return;
    const int n0 = i * NR;
    const size_t wb = wo + (size_t)((long)b * Bw / B) * N * K;
    y += (size_t)b * T * N;
    x += (size_t)b * T * K;
    int m0 = 0;
    if (T >= MR) { /* the first tile streams w (prefetching), the rest reuse it */
        dot_tile(y, x, w, wb, 0, n0, T, N, K, scale, wt, MR, NR, 1);
        for (m0 = MR; m0 + MR <= T; m0 += MR)
            dot_tile(y, x, w, wb, m0, n0, T, N, K, scale, wt, MR, NR, 0);
    }
    if (MR > 2 && T - m0 >= 2) {
        dot_tile(y, x, w, wb, m0, n0, T, N, K, scale, wt, 2, NR, m0 == 0);
        m0 += 2;
    }
    if (m0 < T) dot_tile(y, x, w, wb, m0, n0, T, N, K, scale, wt, 1, NR, m0 == 0);
}

/* Global (ceil(T/MR)*ceil(N/(OV*RB_V)), B), any local size. */
inline void outer_body(__global float *y, __global const float *x, __global const uchar *w,
                       size_t wo, int B, int Bw, int T, int N, int K, float scale, const int wt,
                       const int MR, const int OV) {
    const int NC = OV * RB_V;
    const int nMt = (T + MR - 1) / MR, nNt = (N + NC - 1) / NC;
    const int i = get_global_id(0), b = get_global_id(1);
    if (i >= nMt * nNt) return;
    int mb, nb;
    band_tile(i, nMt, nNt, &mb, &nb);
    const int m0 = mb * MR, n0 = nb * NC;
    const size_t wb = wo + (size_t)((long)b * Bw / B) * N * K + n0;
    x += (size_t)b * T * K;
    y += (size_t)b * T * N + n0;
    __global const float *xr[RB_MAX];
    #pragma unroll
    for (int r = 0; r < MR; r++)
        xr[r] = x + (size_t)min(m0 + r, T - 1) * K;
    if (n0 + NC <= N) {
        /* f16: row k's vectors aligned when the first is and N is whole vectors */
        const int al = N % RB_V == 0 && wv_aligned(w, wb);
        vfloat acc[RB_MAX][4];
        #pragma unroll
        for (int r = 0; r < MR; r++)
            #pragma unroll
            for (int c = 0; c < OV; c++)
                acc[r][c] = (vfloat)(0.0f);
        for (int k = 0; k < K; k++) {
            vfloat bv[4];
            #pragma unroll
            for (int c = 0; c < OV; c++)
                bv[c] = load_wv(w, wb + (size_t)k * N + c * RB_V, wt, al);
            #pragma unroll
            for (int r = 0; r < MR; r++) {
                const vfloat a = (vfloat)(xr[r][k]);
                #pragma unroll
                for (int c = 0; c < OV; c++)
                    acc[r][c] = fma(a, bv[c], acc[r][c]);
            }
        }
        #pragma unroll
        for (int r = 0; r < MR; r++) {
            if (m0 + r >= T) break;
            #pragma unroll
            for (int c = 0; c < OV; c++)
                vstore_f(scale * acc[r][c], 0, y + (size_t)(m0 + r) * N + c * RB_V);
        }
        return;
    }
    /* the last, partial column block: one column at a time */
    for (int c = 0; c < N - n0; c++) {
        float s[RB_MAX];
        #pragma unroll
        for (int r = 0; r < MR; r++)
            s[r] = 0.0f;
        for (int k = 0; k < K; k++) {
            const float wv = load_w(w, wb + (size_t)k * N + c, wt);
            #pragma unroll
            for (int r = 0; r < MR; r++)
                s[r] = fma(xr[r][k], wv, s[r]);
        }
        #pragma unroll
        for (int r = 0; r < MR; r++)
            if (m0 + r < T) y[(size_t)(m0 + r) * N + c] = scale * s[r];
    }
}

#define RB_KERNEL(name, body, wt, MR, NR)                                                          \
    __kernel void name(__global float *y, ulong yo, __global const float *x, ulong xo,             \
                       __global const uchar *w, ulong wo, int B, int Bw, int T, int N, int K,      \
                       float scale) {                                                              \
        body(y + yo, x + xo, w, wo, B, Bw, T, N, K, scale, wt, MR, NR);                            \
    }
#define RB_KERNELS(wt, sfx)                                                                        \
    RB_KERNEL(gemv_##sfx, dot_body, wt, 1, RB_GEMV_NR)                                             \
    RB_KERNEL(dot_##sfx, dot_body, wt, RB_MR, RB_NR)                                               \
    RB_KERNEL(rows_##sfx, rows_body, wt, RB_MR, RB_NR)                                             \
    RB_KERNEL(outer_##sfx, outer_body, wt, RB_OMR, RB_OV)
RB_KERNELS(WT_F32, f32)
RB_KERNELS(WT_F16, f16)
RB_KERNELS(WT_BF16, bf16)
