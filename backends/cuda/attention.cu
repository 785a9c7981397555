/* CUDA: DUAL_SOFTMAX, DIFF_ATTN and ATTN (docs/design.md section 3). Reference:
 * backends/ref/attention.c (drt_ref_dual_softmax, drt_ref_diff_attn, drt_ref_attn).
 *
 * DIFF_ATTN, per diff-head h (kv group g = h*G/H), query row t with rows entry
 * {base, pos} (rows (T,2), device memory), keys j = 0 .. pos at cache rows
 * base + j, s = 1/sqrt(dk):
 *   A1 = softmax_j(s q[t,h,0].k[base+j,g,0]),  A2 = softmax_j(s q[t,h,1].k[base+j,g,m-1])
 *   o[t,h] = sum_j (A1[j] - lambda A2[j]) v[base+j,g]
 * Both softmaxes are computed online (flash-style): per map a running max m,
 * a running denominator l and a running numerator acc[dv], rescaled by
 * exp(m_old - m_new) whenever the max grows, so that
 *   o = acc1 / l1 - lambda * acc2 / l2
 * at the end. The two maps cannot share one accumulator because their
 * normalisers differ until the last key. ATTN is the same with one map.
 *
 * Kernels, llm.c-style (simple first, faster beside it):
 *   attn_kernel1      f32, CUDA cores. One block per (query, head, KV split).
 *                     Any rows, dk <= 1024, dv <= 512, m, GQA. The f32 path
 *                     (conformance bound 1e-8) and the decode path: when T*H
 *                     leaves SMs idle the keys are split across nsplit blocks
 *                     (split-K), each writes (m, l, acc) partials,
 *                     attn_combine_kernel1 merges them. nsplit is fixed from
 *                     T, H and the cache size at launch and each block derives
 *                     its key range from its row's pos, read from device
 *                     memory, so a captured graph stays valid.
 *   attn_tc_kernel2   tensor cores (mma.sync m16n8k16, f16 in, f32 accumulate),
 *                     fast mode, the rows in runs of at least TC_MIN_RUN
 *                     (consecutive rows of one sequence, consecutive
 *                     positions: a prompt or a prompt chunk); kernel 1 takes
 *                     the other rows (decode rows of a batch) in the same
 *                     graph, each kernel deciding per row from device memory
 *                     (in_run_of). One block per (64 queries, head); its rows
 *                     may hold several runs: it takes them one after the
 *                     other, each over its own sequence's keys. For
 *                     DIFF_ATTN 8 warps: warps 0-3 own map 1, warps 4-7 map 2,
 *                     16 query rows each; every K/V tile is loaded into shared
 *                     memory ONCE per block and serves both maps; dv = 2 dk is
 *                     native (one PV product of width dv per map, no split of
 *                     V). Instantiated for (dk,dv) in {(64,64), (64,128),
 *                     (128,128), (128,256)} (DIFF) and {(64,64), (128,128)}
 *                     (ATTN); other shapes use kernel 1.
 *
 * Napkin math (one sequence from position 0): pairs = T(T+1)/2 per head
 * (in general sum over rows of pos + 1, drt_exec.key_pairs);
 *   DIFF_ATTN useful flops = pairs*H*(4 dk + 2 dv) (the op table's count);
 *   kernel 2 executes pairs*H*(4 dk + 4 dv) MMA flops (two PV products);
 *   K/V bytes per block = S*(m dk + dv)*b, read once per 64 queries.
 *
 * KV cache types (runtime/drt_kv.h): k and v are f32, f16 or q8_0 (b = 4, 2
 * or 34/32 bytes per element above). Both kernels are instantiated per type
 * (kv_type below) and read the cache in it, widening each element exactly as
 * drt_kv_load does (f16 -> f32; q8_0 f32(d) * q) where they load it: no pass
 * widens the cache first. Kernel 1 then computes in f32 as for an f32 cache;
 * kernel 2 rounds the widened values to f16 (an f16 cache's are its stored
 * values).
 *
 * Checked against the reference (exit status 0: every case within bound):
 *   diffrt conform --backend cuda --op DIFF_ATTN,ATTN,DUAL_SOFTMAX           on a GPU
 *   build/diffrt_cuda_emu conform --backend cpu,cuda --op DIFF_ATTN,ATTN,DUAL_SOFTMAX
 *       the same code on the host emulator (backends/cuda/emu; ctest
 *       cuda_emu_conform), and with --set cuda.precision=fast the tensor-core
 *       path against its declared bound (ctest cuda_emu_fast)
 */
#include "common.cuh"

#define LOG2E_F 1.4426950408889634f

typedef struct {
    const float *q;      /* (T,H,nq,dk) */
    const void *k, *v;   /* k (S_cap,G,m,dk), v (S_cap,G,dv): the cache's type (kv_type) */
    const float *lam;    /* (T,H) or NULL */
    float *o;            /* (T,H,dv) */
    float *part;         /* split-K partials: (T*H, nsplit, 4 + 2 dv) */
    const int32_t *rows; /* (T,2) device: per row {cache base, pos} */
    int tc_min;          /* > 0: kernel 2 runs too, owns the rows in runs of >= tc_min */
    int T, H, G, m, dk, dv, nq, nsplit;
    float lambda, scale;
} attn_params;

/* The shortest run of rows (consecutive rows of one sequence at consecutive
 * positions) that kernel 2 takes in fast mode: shorter runs are decode rows,
 * better served by kernel 1's split-K (and then identical to f32 mode). */
#define TC_MIN_RUN 4

/* rows (T,2): does row t continue row t-1's run (same base, next position)? */
__device__ __forceinline__ bool cont_run(const int32_t *rows, int t) {
    return t > 0 && rows[2 * t] == rows[2 * t - 2] && rows[2 * t + 1] == rows[2 * t - 1] + 1;
}

/* Is row t in a run of at least n rows? Reads at most 2n rows; every thread
 * of a block gets the same answer (it decides which kernel owns the row). */
__device__ __forceinline__ bool in_run_of(const int32_t *rows, int T, int t, int n) {
    int a = t, b = t;
    while (b - a + 1 < n && a > 0 && cont_run(rows, a)) a--;
    while (b - a + 1 < n && b + 1 < T && cont_run(rows, b + 1)) b++;
    return b - a + 1 >= n;
}

/* ---- the cache's types (runtime/drt_kv.h) ------------------------------------------------------ */

/* The kernels are instantiated per KV type KT (DRT_F32, DRT_F16, DRT_Q8_0)
 * and read the cache in it, through kv_type<KT>: a cache is an array of
 * `unit`s (float, __half, bytes); the row that starts at element e (a
 * multiple of 32 for q8_0) starts at unit units(e); get(r, o, i) widens
 * element i of the row at unit o of r exactly, as drt_kv_load: f16 -> f32,
 * q8_0 d * q (the block's f16 d, 2-byte aligned, read as one __half; q an
 * int8 byte). The f32 instantiation makes the loads of the f32-only kernels. */
template <int KT> struct kv_type;

template <> struct kv_type<DRT_F32> {
    typedef float unit;
    static __device__ __forceinline__ int64_t units(int64_t e) { return e; }
    static __device__ __forceinline__ float get(const float *r, int64_t o, int i) { return r[o + i]; }
};

template <> struct kv_type<DRT_F16> {
    typedef __half unit;
    static __device__ __forceinline__ int64_t units(int64_t e) { return e; }
    static __device__ __forceinline__ float get(const __half *r, int64_t o, int i) { return __half2float(r[o + i]); }
};

template <> struct kv_type<DRT_Q8_0> {
    typedef unsigned char unit;
    static __device__ __forceinline__ int64_t units(int64_t e) { return e / 32 * 34; }
    static __device__ __forceinline__ float get(const unsigned char *r, int64_t o, int i) {
        const unsigned char *b = r + o + (i >> 5) * 34;
        return __half2float(*reinterpret_cast<const __half *>(b)) *
               (float)reinterpret_cast<const signed char *>(b)[2 + (i & 31)];
    }
};

/* ---- DUAL_SOFTMAX ------------------------------------------------------------------ */

/* a, s1, s2 are (H,T,S); lambda_th (T,H) or NULL; mask offset p0 = S - T.
 * One block per (h,t) row: block max, block sum of exps, then the row.
 * Masked entries are exactly 0. Napkin math: reads 2*H*T*S*4 bytes twice
 * (second pass from L2), writes H*T*S*4. */
__global__ void dual_softmax_kernel1(float *a, const float *s1, const float *s2, int H, int T, int S, float lambda,
                                     const float *lam_th) {
    __shared__ float red[32];
    const int row = blockIdx.x; /* h*T + t */
    const int h = row / T, t = row % T;
    const int n = S - T + t + 1;
    const int64_t off = (int64_t)row * S;
    float m1 = -CUDART_INF_F, m2 = -CUDART_INF_F;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        m1 = fmaxf(m1, s1[off + j]);
        m2 = fmaxf(m2, s2[off + j]);
    }
    m1 = cu_block_max(m1, red);
    m2 = cu_block_max(m2, red);
    float z1 = 0.0f, z2 = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        z1 += expf(s1[off + j] - m1);
        z2 += expf(s2[off + j] - m2);
    }
    z1 = cu_block_sum(z1, red);
    z2 = cu_block_sum(z2, red);
    const float lam = lam_th ? lam_th[(int64_t)t * H + h] : lambda;
    const float i1 = 1.0f / z1, i2 = lam / z2;
    for (int j = threadIdx.x; j < S; j += blockDim.x)
        a[off + j] = j < n ? expf(s1[off + j] - m1) * i1 - expf(s2[off + j] - m2) * i2 : 0.0f;
}

extern "C" drt_status cu_dual_softmax(cu_ctx *c, float *a, const float *s1, const float *s2, int H, int T, int S,
                                      float lambda, const float *lambda_th) {
    const int64_t rows = (int64_t)H * T;
    if (rows <= 0 || S <= 0) return DRT_OK;
    CU_LAUNCH(dual_softmax_kernel1, (unsigned)rows, 256, 0, c->stream)(a, s1, s2, H, T, S, lambda, lambda_th);
    return cu_launched("DUAL_SOFTMAX");
}

/* ---- kernel 1: f32, one block per (query, head, split) ------------------------------------- */

#define V1_THREADS 128
#define V1_BN 64                             /* keys per tile */
#define V1_EPT (CU_ATTN_MAX_DV / V1_THREADS) /* output elements per thread */
#define MAX_SPLIT 64
#define V1_MIN_CHUNK 32 /* the fewest keys a split takes */

/* grid (T*H, nsplit), block V1_THREADS, shared (nq*dk + nq*V1_BN) floats.
 * Row t sees keys j = 0 .. pos at cache rows base + j; split s takes chunk
 * s of them (at least V1_MIN_CHUNK keys each). A block of a row kernel 2
 * owns (P.tc_min) leaves at once. Per key tile: each warp computes whole dot
 * products (lanes over dk, coalesced k rows) for its keys, both maps at
 * once; every thread then reads the tile's logits from shared memory to
 * form the new max and the weights; thread e accumulates output element e
 * over the tile's keys (coalesced v rows). Everything is f32 with fmaf; exp
 * is expf (no fast math), so the result is within ~1e-6 relative of the
 * double reference. k and v are read in the cache's type KT (kv_type): an
 * f16 / q8_0 cache moves 1/2 / 17/64 of the f32 bytes. Napkin math
 * (decode): K/V bytes per (row, head) = (pos + 1) (m dk + dv) bytes/element.
 * The f16 / q8_0 instances carry a register budget (6 blocks per SM, <= 85
 * registers): ptxas's own choice for them spills; the f32 one is as it was. */
template <int KT> __global__ void __launch_bounds__(V1_THREADS, KT == DRT_F32 ? 0 : 6) attn_kernel1(attn_params P) {
    CU_DYN_SMEM(float, sm1);
    const int nq = P.nq, dk = P.dk, dv = P.dv;
    float *qs = sm1;               /* (nq, dk) */
    float *ps = sm1 + nq * dk;     /* (nq, V1_BN): logits, then exp weights */
    const int64_t th = blockIdx.x; /* t*H + h */
    const int split = blockIdx.y;
    const int t = (int)(th / P.H), h = (int)(th % P.H);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = (int)((int64_t)h * P.G / P.H);
    if (P.tc_min && in_run_of(P.rows, P.T, t, P.tc_min)) return; /* kernel 2's row: the whole block leaves */
    const int64_t base = P.rows[2 * t];
    const int n = P.rows[2 * t + 1] + 1; /* keys this query sees */
    const int chunk = max((n + P.nsplit - 1) / P.nsplit, V1_MIN_CHUNK);
    const int jb = split * chunk;
    const int je = min(n, jb + chunk);
    typedef kv_type<KT> KV;
    typedef typename KV::unit U;
    const int64_t vstride = KV::units((int64_t)P.G * dv); /* one key to the next in v */
    const U *kc = static_cast<const U *>(P.k), *vc = static_cast<const U *>(P.v);

    const float *qt = P.q + th * nq * dk;
    for (int i = tid; i < nq * dk; i += V1_THREADS) qs[i] = qt[i];
    float mrun[2] = {-CUDART_INF_F, -CUDART_INF_F}, lrun[2] = {0.0f, 0.0f};
    float acc[2][V1_EPT];
#pragma unroll
    for (int i = 0; i < V1_EPT; i++) acc[0][i] = acc[1][i] = 0.0f;
    __syncthreads();

    for (int j0 = jb; j0 < je; j0 += V1_BN) {
        const int nt = min(V1_BN, je - j0);
        /* logits of this tile: warp w takes keys w, w+4, ... */
        for (int jj = warp; jj < nt; jj += V1_THREADS / 32) {
            const int64_t krow = ((base + j0 + jj) * P.G + g) * P.m;
            for (int mm = 0; mm < nq; mm++) {
                const U *kr = kc + KV::units((krow + (P.m == 2 ? mm : 0)) * dk);
                float d = 0.0f;
                for (int i = lane; i < dk; i += 32) d = fmaf(qs[mm * dk + i], KV::get(kr, 0, i), d);
                d = cu_warp_sum(d);
                if (lane == 0) ps[mm * V1_BN + jj] = d * P.scale;
            }
        }
        __syncthreads();
        /* every thread forms the same new max and correction per map */
        float mnew[2] = {0.0f, 0.0f}, corr[2] = {0.0f, 0.0f};
#pragma unroll
        for (int mm = 0; mm < 2; mm++) {
            if (mm >= nq) break;
            float mx = -CUDART_INF_F;
            for (int jj = 0; jj < nt; jj++) mx = fmaxf(mx, ps[mm * V1_BN + jj]);
            mnew[mm] = fmaxf(mrun[mm], mx);       /* finite: nt >= 1 */
            corr[mm] = expf(mrun[mm] - mnew[mm]); /* 0 on the first tile */
        }
        __syncthreads(); /* all maxima read before the logits are replaced */
        for (int i = tid; i < nq * V1_BN; i += V1_THREADS) {
            const int mm = i / V1_BN, jj = i % V1_BN;
            ps[i] = jj < nt ? expf(ps[i] - (mm == 0 ? mnew[0] : mnew[1])) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int mm = 0; mm < 2; mm++) {
            if (mm >= nq) break;
            float z = 0.0f;
            for (int jj = 0; jj < nt; jj++) z += ps[mm * V1_BN + jj];
            lrun[mm] = lrun[mm] * corr[mm] + z;
            mrun[mm] = mnew[mm];
        }
        const U *vt = vc + KV::units(((base + j0) * P.G + g) * dv);
#pragma unroll
        for (int ei = 0; ei < V1_EPT; ei++) {
            const int e = tid + ei * V1_THREADS;
            if (e < dv) {
                float a0 = acc[0][ei] * corr[0], a1 = acc[1][ei] * corr[1];
                for (int jj = 0; jj < nt; jj++) {
                    const float vv = KV::get(vt, jj * vstride, e);
                    a0 = fmaf(ps[jj], vv, a0);
                    if (nq == 2) a1 = fmaf(ps[V1_BN + jj], vv, a1);
                }
                acc[0][ei] = a0;
                acc[1][ei] = a1;
            }
        }
        __syncthreads(); /* weights consumed before the next tile's logits */
    }

    if (P.nsplit == 1) {
        const float lam = nq == 2 ? (P.lam ? P.lam[th] : P.lambda) : 0.0f;
        const float i0 = 1.0f / lrun[0], i1 = nq == 2 ? 1.0f / lrun[1] : 0.0f;
        float *ot = P.o + th * dv;
#pragma unroll
        for (int ei = 0; ei < V1_EPT; ei++) {
            const int e = tid + ei * V1_THREADS;
            if (e < dv) ot[e] = nq == 2 ? acc[0][ei] * i0 - lam * (acc[1][ei] * i1) : acc[0][ei] * i0;
        }
    } else {
        /* partial: (m1, l1, m2, l2, acc1[dv], acc2[dv]); an empty range has
         * l = 0 and m = -inf, and the combine step skips it */
        float *pp = P.part + (th * P.nsplit + split) * (4 + 2 * (int64_t)dv);
        if (tid == 0) {
            pp[0] = mrun[0];
            pp[1] = lrun[0];
            pp[2] = mrun[1];
            pp[3] = lrun[1];
        }
#pragma unroll
        for (int ei = 0; ei < V1_EPT; ei++) {
            const int e = tid + ei * V1_THREADS;
            if (e < dv) {
                pp[4 + e] = acc[0][ei];
                pp[4 + dv + e] = acc[1][ei];
            }
        }
    }
}

/* grid (T*H), block 128: merges the nsplit partials of one (t,h) (none for
 * a row kernel 2 owns):
 *   M = max_s m_s,  L = sum_s l_s e^(m_s - M),  O = sum_s acc_s e^(m_s - M)
 * per map, then o = O1/L1 - lambda O2/L2 (ATTN: O1/L1).
 * Napkin math: reads T*H*nsplit*(4 + 2 dv)*4 bytes. */
__global__ void attn_combine_kernel1(attn_params P) {
    __shared__ float wsh[2][MAX_SPLIT];
    const int64_t th = blockIdx.x;
    if (P.tc_min && in_run_of(P.rows, P.T, (int)(th / P.H), P.tc_min)) return;
    const int ns = P.nsplit, dv = P.dv, nq = P.nq;
    const int64_t stride = 4 + 2 * (int64_t)dv;
    const float *pp = P.part + th * ns * stride;
    float M[2] = {-CUDART_INF_F, -CUDART_INF_F}, L[2] = {0.0f, 0.0f};
    for (int s = 0; s < ns; s++)
        for (int mm = 0; mm < nq; mm++)
            if (pp[s * stride + 2 * mm + 1] > 0.0f) M[mm] = fmaxf(M[mm], pp[s * stride + 2 * mm]);
    for (int s = 0; s < ns; s++)
        for (int mm = 0; mm < nq; mm++) {
            const float l = pp[s * stride + 2 * mm + 1];
            const float w = l > 0.0f ? expf(pp[s * stride + 2 * mm] - M[mm]) : 0.0f;
            L[mm] += l * w;
            if (threadIdx.x == 0) wsh[mm][s] = w;
        }
    __syncthreads();
    const float lam = nq == 2 ? (P.lam ? P.lam[th] : P.lambda) : 0.0f;
    float *ot = P.o + th * dv;
    for (int e = threadIdx.x; e < dv; e += blockDim.x) {
        float o0 = 0.0f, o1 = 0.0f;
        for (int s = 0; s < ns; s++) {
            o0 = fmaf(pp[s * stride + 4 + e], wsh[0][s], o0);
            if (nq == 2) o1 = fmaf(pp[s * stride + 4 + dv + e], wsh[1][s], o1);
        }
        ot[e] = nq == 2 ? o0 / L[0] - lam * (o1 / L[1]) : o0 / L[0];
    }
}

/* ---- kernel 2: tensor cores (sm_80+) ------------------------------------------------------ */

/* D (16x8 f32) += A (16x16 f16, row) . B (16x8 f16, col). Fragments, with
 * grp = lane/4 and tig = lane%4 (PTX ISA, mma.m16n8k16):
 *   a0: A[grp][2tig..+1]    a1: A[grp+8][2tig..+1]
 *   a2: A[grp][8+2tig..+1]  a3: A[grp+8][8+2tig..+1]
 *   b0: B[2tig..+1][grp]    b1: B[8+2tig..+1][grp]
 *   d0,d1: D[grp][2tig..+1] d2,d3: D[grp+8][2tig..+1]
 * Each register holds two f16, the lower column/row index in the low half. */
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(CU_EMU)
    cuemu::mma_m16n8k16(d, a, b0, b1);
#else
    __trap(); /* the host never launches kernel 2 below compute capability 8.0 */
#endif
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi); /* lo in the low 16 bits */
    return *reinterpret_cast<uint32_t *>(&h);
}

__device__ __forceinline__ uint32_t ld32(const __half *p) {
    return *reinterpret_cast<const uint32_t *>(p);
}

/* elements 4 c4 .. 4 c4 + 3 of a cache row of type KT, as 4 f16 (low
 * first): f32 and q8_0 (d * q, exact in f32) rounded to nearest, f16 the
 * stored bits (8-byte aligned: the row starts at a multiple of 64
 * elements of a 16-byte aligned cache) */
template <int KT> __device__ __forceinline__ uint2 kv_half4(const typename kv_type<KT>::unit *r, int c4) {
    uint2 u;
    if constexpr (KT == DRT_F16) {
        u = reinterpret_cast<const uint2 *>(r)[c4];
    } else if constexpr (KT == DRT_Q8_0) {
        const unsigned char *b = r + (c4 >> 3) * 34;
        const float d = __half2float(*reinterpret_cast<const __half *>(b));
        const signed char *q = reinterpret_cast<const signed char *>(b) + 2 + (c4 & 7) * 4;
        u.x = pack_half2(d * (float)q[0], d * (float)q[1]);
        u.y = pack_half2(d * (float)q[2], d * (float)q[3]);
    } else {
        const float4 f = reinterpret_cast<const float4 *>(r)[c4];
        u.x = pack_half2(f.x, f.y);
        u.y = pack_half2(f.z, f.w);
    }
    return u;
}

template <int DK, int DV, int NQ> struct tc_cfg {
    static constexpr int BM = 64;                  /* queries per block */
    static constexpr int BN = DV >= 256 ? 32 : 64; /* keys per tile (registers: acc is DV/2 per thread) */
    static constexpr int NT = 128 * NQ;            /* threads: 4 warps per map */
    /* shared memory rows padded by 8 halves: the 32-bit fragment loads of
     * a warp (8 rows x 4 words) then fall in 32 distinct banks */
    static constexpr int LDQ = DK + 8, LDK = DK + 8, LDV = BN + 8;
    static constexpr int Q_HALFS = NQ * BM * LDQ; /* Qs[map][row][dk] */
    static constexpr int K_HALFS = NQ * BN * LDK; /* Ks[kmap][key][dk] */
    static constexpr int V_HALFS = DV * LDV;      /* Vt[col][key]: V transposed */
    static constexpr int LOAD_BYTES = 2 * (Q_HALFS + K_HALFS + V_HALFS);
    static constexpr int LDO = DV + 4; /* map-2 result, f32, for the combine */
    static constexpr int OUT_BYTES = NQ == 2 ? 4 * BM * LDO : 0;
    static constexpr int SMEM = LOAD_BYTES > OUT_BYTES ? LOAD_BYTES : OUT_BYTES;
};

/* grid (ceil(T/64), H), block 128*NQ, dynamic shared tc_cfg::SMEM.
 * Warp w: map w/4, query rows 16*(w%4) .. +15 of the block's 64.
 * The block's rows are cut into runs (rows of one sequence at consecutive
 * positions); a run kernel 2 owns (in_run_of, P.tc_min) is one segment of
 * the block's rows, one cache base, keys 0 .. the pos of its last row. The
 * segments are taken one after the other, each over its own keys; a row
 * outside the segment sees no key of it, so its softmax state is left as it
 * is, and a warp without rows in it skips the products. One sequence's
 * prompt is one segment: the plain flash loop.
 * Per key tile (BN keys of the segment):
 *   all threads: K tile(s) and V tile (cache type) -> f16 into shared (V transposed,
 *     so PV's B fragments are 32-bit loads like QK's); keys past the
 *     segment's last position are zero, never read (another sequence's)
 *   per warp:    S = Q K^T (16 x BN, f32) on tensor cores; scale, causal
 *     mask; online softmax on the fragments (each thread holds 2 rows; the
 *     4 threads of a quad share a row: max/sum via 2 shuffles); P -> f16
 *     A-fragments in registers (the accumulator layout of S is the A layout
 *     of the next product); acc (16 x DV) += P V on tensor cores.
 * Only the rows of owned runs are stored; kernel 1 writes the others.
 * DIFF: map-2 warps park lambda*acc2/l2 in shared memory; map-1 warps
 * subtract it from acc1/l1 and store. f16 inputs: declared fast mode. */
template <int DK, int DV, int NQ, int KT> __global__ void __launch_bounds__(128 * NQ) attn_tc_kernel2(attn_params P) {
    typedef tc_cfg<DK, DV, NQ> C;
    CU_DYN_SMEM(unsigned char, smem2);
    __shared__ int32_t rs[2 * C::BM]; /* the block's rows entries */
    __shared__ int sg[2];             /* the segment: block rows sg[0] .. sg[1]-1 */
    __half *Qs = reinterpret_cast<__half *>(smem2);
    __half *Ks = Qs + C::Q_HALFS;
    __half *Vt = Ks + C::K_HALFS;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int grp = lane >> 2, tig = lane & 3;
    const int map = warp >> 2;
    const int wr = (warp & 3) * 16;
    const int t0 = (gridDim.x - 1 - blockIdx.x) * C::BM; /* long (late) query tiles first */
    const int h = blockIdx.y;
    const int T = P.T, H = P.H, G = P.G, m = P.m;
    const int g = (int)((int64_t)h * G / H);
    const int nr = min(C::BM, T - t0);          /* rows of this block */
    const int km = (NQ == 2 && m == 2) ? 2 : 1; /* key maps in a tile */
    const int kmap = m == 2 ? map : 0;          /* the one this warp reads */
    typedef kv_type<KT> KV;
    typedef typename KV::unit U;
    const U *kc = static_cast<const U *>(P.k), *vc = static_cast<const U *>(P.v);

    for (int i = tid; i < 2 * nr; i += C::NT) rs[i] = P.rows[2 * (int64_t)t0 + i];
    /* Q tile, all maps, f16; rows past T are zero (their outputs are dropped) */
    for (int idx = tid; idx < NQ * C::BM * (DK / 4); idx += C::NT) {
        const int c4 = idx % (DK / 4);
        const int r = (idx / (DK / 4)) % C::BM;
        const int mm = idx / (C::BM * (DK / 4));
        const int t = t0 + r;
        float4 f = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (t < T) f = *reinterpret_cast<const float4 *>(P.q + (((int64_t)t * H + h) * NQ + mm) * DK + c4 * 4);
        uint2 u;
        u.x = pack_half2(f.x, f.y);
        u.y = pack_half2(f.z, f.w);
        *reinterpret_cast<uint2 *>(Qs + (mm * C::BM + r) * C::LDQ + c4 * 4) = u;
    }

    float acc[DV / 8][4];
#pragma unroll
    for (int nt = 0; nt < DV / 8; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
    float mrow[2] = {-CUDART_INF_F, -CUDART_INF_F}, lrow[2] = {0.0f, 0.0f};
    const float sl2 = P.scale * LOG2E_F; /* exp(s x) = exp2(s log2(e) x) */
    const int rlo = wr + grp;            /* block rows of this thread: rlo, rlo + 8 */
    const __half *Qw = Qs + (map * C::BM + wr) * C::LDQ;
    const __half *Kw = Ks + kmap * C::BN * C::LDK;
    __syncthreads(); /* rs stored */

    for (int ra = 0; ra < nr;) {
        int rb = ra + 1; /* the run is block rows ra .. rb-1 */
        while (rb < nr && rs[2 * rb] == rs[2 * ra] && rs[2 * rb + 1] == rs[2 * rb - 1] + 1) rb++;
        const int seg_a = ra;
        ra = rb;
        if (!in_run_of(P.rows, T, t0 + seg_a, P.tc_min)) continue; /* kernel 1's rows */
        /* the segment's bounds live in shared memory, read again after
         * every barrier: registers are what this loop is short of */
        __syncthreads(); /* the previous segment's bounds read */
        if (tid == 0) {
            sg[0] = seg_a;
            sg[1] = rb;
        }
        for (int j0 = 0;; j0 += C::BN) {
            __syncthreads();                          /* Q, sg stored (first tile) / previous tile consumed */
            const int kv_end = rs[2 * sg[1] - 1] + 1; /* keys 0 .. the last row's pos */
            if (j0 >= kv_end) break;
            const int base = rs[2 * sg[0]];
            for (int idx = tid; idx < km * C::BN * (DK / 4); idx += C::NT) {
                const int c4 = idx % (DK / 4);
                const int jj = (idx / (DK / 4)) % C::BN;
                const int mm = idx / (C::BN * (DK / 4));
                const int j = j0 + jj;
                uint2 u = make_uint2(0u, 0u);
                if (j < kv_end) u = kv_half4<KT>(kc + KV::units((((int64_t)(base + j) * G + g) * m + mm) * DK), c4);
                *reinterpret_cast<uint2 *>(Ks + (mm * C::BN + jj) * C::LDK + c4 * 4) = u;
            }
            for (int idx = tid; idx < (C::BN / 2) * DV; idx += C::NT) {
                const int c = idx % DV, kp = idx / DV, j = j0 + 2 * kp;
                const float v0 = j < kv_end ? KV::get(vc, KV::units(((int64_t)(base + j) * G + g) * DV), c) : 0.0f;
                const float v1 = j + 1 < kv_end ? KV::get(vc, KV::units(((int64_t)(base + j + 1) * G + g) * DV), c)
                                                : 0.0f;
                *reinterpret_cast<uint32_t *>(Vt + c * C::LDV + 2 * kp) = pack_half2(v0, v1);
            }
            __syncthreads();
            if (wr >= sg[1] || wr + 16 <= sg[0]) continue; /* no row of the warp in it (warp-uniform) */
            /* the last key each of this thread's rows sees: its pos, or -1
             * outside the segment */
            int lim[2];
#pragma unroll
            for (int rr = 0; rr < 2; rr++) {
                const int r = rlo + 8 * rr;
                lim[rr] = r >= sg[0] && r < sg[1] ? rs[2 * r + 1] : -1;
            }

            /* S (16 x BN) = Q (16 x DK) K^T */
            float s[C::BN / 8][4];
#pragma unroll
            for (int nt = 0; nt < C::BN / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < DK / 16; ks++) {
                const __half *qa = Qw + grp * C::LDQ + ks * 16 + 2 * tig;
                const uint32_t a[4] = {ld32(qa), ld32(qa + 8 * C::LDQ), ld32(qa + 8), ld32(qa + 8 * C::LDQ + 8)};
#pragma unroll
                for (int nt = 0; nt < C::BN / 8; nt++) {
                    const __half *kb = Kw + (nt * 8 + grp) * C::LDK + ks * 16 + 2 * tig;
                    mma_16816(s[nt], a, ld32(kb), ld32(kb + 8));
                }
            }
            /* to log2 units; key j is visible to a row iff j <= lim */
#pragma unroll
            for (int nt = 0; nt < C::BN / 8; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int col = j0 + nt * 8 + 2 * tig + (i & 1);
                    s[nt][i] = col <= lim[i >> 1] ? s[nt][i] * sl2 : -CUDART_INF_F;
                }
                /* online softmax: rr = 0 is row rlo (elements 0,1), rr = 1 row
                 * rlo+8; a row that sees no key of the tile keeps its state
                 * (corr = 1, or 0 times an all-zero state) */
#pragma unroll
            for (int rr = 0; rr < 2; rr++) {
                float mx = -CUDART_INF_F;
#pragma unroll
                for (int nt = 0; nt < C::BN / 8; nt++) mx = fmaxf(mx, fmaxf(s[nt][2 * rr], s[nt][2 * rr + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float mnew = fmaxf(mrow[rr], mx);
                const float mref = mnew == -CUDART_INF_F ? 0.0f : mnew; /* no inf - inf */
                const float corr = exp2f(mrow[rr] - mref);
                mrow[rr] = mnew;
                float ls = 0.0f;
#pragma unroll
                for (int nt = 0; nt < C::BN / 8; nt++) {
                    const float e0 = exp2f(s[nt][2 * rr] - mref), e1 = exp2f(s[nt][2 * rr + 1] - mref);
                    s[nt][2 * rr] = e0;
                    s[nt][2 * rr + 1] = e1;
                    ls += e0 + e1;
                }
                lrow[rr] = lrow[rr] * corr + ls; /* this thread's columns; quad-summed at the end */
#pragma unroll
                for (int nt = 0; nt < DV / 8; nt++) {
                    acc[nt][2 * rr] *= corr;
                    acc[nt][2 * rr + 1] *= corr;
                }
            }
            /* acc (16 x DV) += P (16 x BN) V (BN x DV) */
#pragma unroll
            for (int kk = 0; kk < C::BN / 16; kk++) {
                const uint32_t a[4] = {pack_half2(s[2 * kk][0], s[2 * kk][1]), pack_half2(s[2 * kk][2], s[2 * kk][3]),
                                       pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                       pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
                for (int nt = 0; nt < DV / 8; nt++) {
                    const __half *vb = Vt + (nt * 8 + grp) * C::LDV + kk * 16 + 2 * tig;
                    mma_16816(acc[nt], a, ld32(vb), ld32(vb + 8));
                }
            }
        }
    }

    /* bit rr: this thread's row rr is in a run kernel 2 owns (found again
     * rather than kept through the loop: registers) */
    int mine = 0;
#pragma unroll
    for (int rr = 0; rr < 2; rr++)
        if (rlo + 8 * rr < nr && in_run_of(P.rows, T, t0 + rlo + 8 * rr, P.tc_min)) mine |= 1 << rr;
    float inv[2];
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        float l = lrow[rr];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        inv[rr] = mine >> rr & 1 ? 1.0f / l : 0.0f; /* l >= 1: key 0 is visible to every row */
    }
    if (NQ == 1) {
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            if (!(mine >> rr & 1)) continue;
            float *ot = P.o + ((int64_t)(t0 + rlo + 8 * rr) * H + h) * DV + 2 * tig;
#pragma unroll
            for (int nt = 0; nt < DV / 8; nt++)
                *reinterpret_cast<float2 *>(ot + nt * 8) = make_float2(acc[nt][2 * rr] * inv[rr],
                                                                       acc[nt][2 * rr + 1] * inv[rr]);
        }
        return;
    }
    /* DIFF: map 2 -> shared (lambda folded in), then map 1 subtracts it */
    __syncthreads(); /* every warp is done with Qs/Ks/Vt: reuse them as Ob */
    float *Ob = reinterpret_cast<float *>(smem2);
    if (map == 1) {
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            const int r = rlo + 8 * rr, t = t0 + r;
            const float lam = mine >> rr & 1 ? (P.lam ? P.lam[(int64_t)t * H + h] : P.lambda) : 0.0f;
            const float f = lam * inv[rr];
#pragma unroll
            for (int nt = 0; nt < DV / 8; nt++)
                *reinterpret_cast<float2 *>(Ob + r * C::LDO + nt * 8 + 2 * tig) = make_float2(acc[nt][2 * rr] * f,
                                                                                              acc[nt][2 * rr + 1] * f);
        }
    }
    __syncthreads();
    if (map == 0) {
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            if (!(mine >> rr & 1)) continue;
            const int r = rlo + 8 * rr, t = t0 + r;
            float *ot = P.o + ((int64_t)t * H + h) * DV + 2 * tig;
#pragma unroll
            for (int nt = 0; nt < DV / 8; nt++) {
                const float2 b = *reinterpret_cast<const float2 *>(Ob + r * C::LDO + nt * 8 + 2 * tig);
                *reinterpret_cast<float2 *>(ot + nt * 8) = make_float2(acc[nt][2 * rr] * inv[rr] - b.x,
                                                                       acc[nt][2 * rr + 1] * inv[rr] - b.y);
            }
        }
    }
}

/* ---- launchers -------------------------------------------------------------------------------- */

typedef void (*tc_kernel_fn)(attn_params);

typedef struct {
    int nq, dk, dv, kt, smem;
    tc_kernel_fn fn;
} tc_entry;

#define TC_ENTRY(NQ, DK, DV, KT)                                                                                       \
    { NQ, DK, DV, KT, tc_cfg<DK, DV, NQ>::SMEM, attn_tc_kernel2<DK, DV, NQ, KT> }
#define TC_ENTRIES(KT)                                                                                                 \
    TC_ENTRY(2, 64, 64, KT), TC_ENTRY(2, 64, 128, KT), TC_ENTRY(2, 128, 128, KT), TC_ENTRY(2, 128, 256, KT),           \
        TC_ENTRY(1, 64, 64, KT), TC_ENTRY(1, 128, 128, KT)
static const tc_entry TC_KERNELS[] = {TC_ENTRIES(DRT_F32), TC_ENTRIES(DRT_F16), TC_ENTRIES(DRT_Q8_0)};
#define N_TC ((int)(sizeof TC_KERNELS / sizeof TC_KERNELS[0]))

extern "C" drt_status cu_attention_init(cu_ctx *c) {
    if (c->cc_major < 8) return DRT_OK;
    for (int i = 0; i < N_TC; i++) {
        if ((size_t)TC_KERNELS[i].smem > c->smem_optin) continue;
        cudaError_t e = cudaFuncSetAttribute(reinterpret_cast<const void *>(TC_KERNELS[i].fn),
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, TC_KERNELS[i].smem);
        if (e != cudaSuccess)
            return drt_set_error(DRT_ERR_BACKEND, "cuda: attention kernel setup: %s", cudaGetErrorString(e));
    }
    return DRT_OK;
}

/* kernel 2 for these shapes, or NULL; with fewer than TC_MIN_RUN rows no
 * row can be its */
static const tc_entry *tc_pick(const cu_ctx *c, int nq, int T, int dk, int dv, drt_dtype kt) {
    if (c->prec != CU_PREC_FAST || T < TC_MIN_RUN || c->cc_major < 8) return NULL;
    for (int i = 0; i < N_TC; i++)
        if (TC_KERNELS[i].nq == nq && TC_KERNELS[i].dk == dk && TC_KERNELS[i].dv == dv && TC_KERNELS[i].kt == (int)kt &&
            (size_t)TC_KERNELS[i].smem <= c->smem_optin)
            return &TC_KERNELS[i];
    return NULL;
}

/* blocks per (t,h) for kernel 1: enough to give every SM ~4 blocks when
 * T*H is small (decode; 32 sequences of 16 heads: 2 splits), at least
 * V1_MIN_CHUNK cache rows per split (a row with fewer keys leaves the last
 * splits empty) */
static int attn_nsplit(const cu_ctx *c, int T, int S_cap, int H) {
    const int64_t units = (int64_t)T * H;
    int64_t want = (4 * (int64_t)c->n_sm + units - 1) / units;
    int64_t most = S_cap / V1_MIN_CHUNK;
    if (want > most) want = most;
    if (want > MAX_SPLIT) want = MAX_SPLIT;
    return want < 1 ? 1 : (int)want;
}

extern "C" size_t cu_attention_scratch(const cu_ctx *c, int nq, int T, int S_cap, int H, int dv) {
    const int ns = attn_nsplit(c, T, S_cap, H);
    if (ns <= 1) return 0;
    return (size_t)T * H * ns * (4 + 2 * (size_t)dv) * sizeof(float);
}

static int aligned16(const void *p) {
    return ((uintptr_t)p & 15) == 0;
}

extern "C" drt_status cu_attention(cu_ctx *c, float *o, const float *q, const void *k, const void *v, drt_dtype kvt,
                                   int nq, int T, int S_cap, int H, int G, int m, int dk, int dv, float lambda,
                                   const float *lambda_th, const int32_t *rows) {
    if (T <= 0 || H <= 0) return DRT_OK;
    attn_params P;
    P.q = q;
    P.k = k;
    P.v = v;
    P.lam = lambda_th;
    P.o = o;
    P.part = (float *)c->scratch;
    P.rows = rows;
    P.tc_min = 0;
    P.T = T;
    P.H = H;
    P.G = G;
    P.m = nq == 2 ? m : 1;
    P.dk = dk;
    P.dv = dv;
    P.nq = nq;
    P.lambda = lambda;
    P.scale = (float)(1.0 / sqrt((double)dk));

    if (dk > CU_ATTN_MAX_DK || dv > CU_ATTN_MAX_DV)
        return drt_set_error(DRT_ERR_UNSUPPORTED, "cuda: attention with dk=%d dv=%d (max %d, %d)", dk, dv,
                             CU_ATTN_MAX_DK, CU_ATTN_MAX_DV);
    /* Which rows kernel 2 takes depends on the rows, which only device
     * memory knows: with kernel 2 both kernels are launched and each takes
     * its rows (in_run_of), so the launches depend on shapes alone. A
     * one-sequence prompt leaves kernel 1 blocks that read a few rows and
     * leave; a batch of decode rows leaves kernel 2 blocks that do the same. */
    const tc_entry *tc = tc_pick(c, nq, T, dk, dv, kvt);
    if (tc && aligned16(q) && aligned16(k) && aligned16(o)) {
        P.nsplit = 1;
        P.tc_min = TC_MIN_RUN;
        dim3 grid((unsigned)((T + 63) / 64), (unsigned)H);
        CU_LAUNCH(tc->fn, grid, 128 * nq, tc->smem, c->stream)(P);
        drt_status s = cu_launched(nq == 2 ? "DIFF_ATTN (tensor cores)" : "ATTN (tensor cores)");
        if (s != DRT_OK) return s;
    }
    P.nsplit = attn_nsplit(c, T, S_cap, H);
    const size_t smem = sizeof(float) * (size_t)nq * (dk + V1_BN);
    dim3 grid((unsigned)((int64_t)T * H), (unsigned)P.nsplit);
    if (kvt == DRT_F16)
        CU_LAUNCH(attn_kernel1<DRT_F16>, grid, V1_THREADS, smem, c->stream)(P);
    else if (kvt == DRT_Q8_0)
        CU_LAUNCH(attn_kernel1<DRT_Q8_0>, grid, V1_THREADS, smem, c->stream)(P);
    else
        CU_LAUNCH(attn_kernel1<DRT_F32>, grid, V1_THREADS, smem, c->stream)(P);
    drt_status s = cu_launched(nq == 2 ? "DIFF_ATTN" : "ATTN");
    if (s != DRT_OK || P.nsplit == 1) return s;
    CU_LAUNCH(attn_combine_kernel1, (unsigned)((int64_t)T * H), 128, 0, c->stream)(P);
    return cu_launched(nq == 2 ? "DIFF_ATTN (combine)" : "ATTN (combine)");
}
