/* OpenCL kernels: DUAL_SOFTMAX, DIFF_ATTN and ATTN (docs/design.md section 3;
 * reference in backends/ref/attention.c). DUAL_SOFTMAX's causal mask has
 * offset p0 = S - T: query t sits at position p0+t and sees keys j <= p0+t.
 * DIFF_ATTN and ATTN read rows, (T,2) i32 {base, pos} (drt_exec): query t is
 * token pos of the sequence whose cache rows start at base, and sees the
 * keys at cache rows base .. base + pos. The rows of one sequence are
 * contiguous at consecutive positions (a run); a forward may hold several.
 * Every softmax subtracts a (running) maximum, so logits of +-300 and more
 * stay finite.
 *
 * Build-time constants (chosen by the host from the device's local memory):
 * and the rows per work-group bq in {1, 2, 4, 8}: one kernel each (suffix
 * _q<bq>), the host takes the smallest that holds T*H/G rows, so that a
 * decode step without GQA runs one row of items, not eight.
 *   ATT_BK      keys per tile staged in local memory
 *   ATT_NT      work-items per query row (each owns dv/ATT_NT output columns)
 *   ATT_DV_MAX  largest dv (a multiple of ATT_NT) */

#ifndef ATT_BK
#define ATT_BK 16
#endif
#ifndef ATT_NT
#define ATT_NT 32
#endif
#ifndef ATT_DV_MAX
#define ATT_DV_MAX 256
#endif
#define ATT_DVP (ATT_DV_MAX / ATT_NT)
/* K tiles are stored transposed, (m*dk, KS): the items computing one row's
 * logits read consecutive words (no bank conflicts, vector loads on CPUs);
 * the +1 spreads the transposing stores over the banks */
#define KS (ATT_BK + 1)
#define SM_WG_MAX 256

/* KV cache types (runtime/drt_kv.h; the values of drt_dtype). Every
 * attention kernel below exists per type (suffix _f16, _q8_0; none for
 * f32) and takes k and v as bytes at a byte offset: q8_0 blocks have no
 * element size. Elements are widened exactly where they are read (an f16
 * value, or f32(d) * q), never copied to an f32 cache first. A K or V row
 * (dk, m*dk or dv elements) of a q8_0 cache is whole blocks of 32: 34 bytes,
 * the f16 scale d then 32 int8 q; a block starts at an even byte, so its
 * scale is read as one ushort (kv_half). */
#define KV_F32 0
#define KV_F16 1
#define KV_Q8_0 4

/* the f16 at p widened exactly, bit for bit as drt_f16_to_f32 (vload_half
 * gives the same values; PoCL's also quiets signalling NaNs), in a few
 * integer ops: a q8_0 scale is read once per 32 elements, and a CPU device
 * without F16C instructions (or an OpenCL library that does not use them)
 * runs a scalar vload_half as a long routine. Zero and subnormals: m *
 * 2^-24; normals: exponent rebased; Inf and NaN: exponent all ones. */
inline float kv_half(__global const uchar *p) {
    const uint h = *(__global const ushort *)p, a = h & 0x7fffu;
    const uint w = a >= 0x7c00u ? a << 13 | 0x7f800000u : (a << 13) + 0x38000000u;
    const float f = a < 0x400u ? (float)a * 0x1p-24f : as_float(w);
    return as_float(as_uint(f) | (h & 0x8000u) << 16);
}

/* element e of a cache of type kvt at p */
inline float kv_get(__global const uchar *p, size_t e, const int kvt) {
    if (kvt == KV_F16) return vload_half(e, (__global const half *)p);
    if (kvt == KV_Q8_0) {
        __global const uchar *b = p + (e >> 5) * 34;
        return kv_half(b) * (float)((__global const char *)b)[2 + (e & 31)];
    }
    return ((__global const float *)p)[e];
}

/* Row t's run (the rows around it of the same base at consecutive
 * positions) has at most dec_t rows: t is a decode row. dec_t <= 0: no row
 * is, dec_t >= T: every row is (one run: the host knows, nothing is read).
 * The CPU-class kernels below split a forward's rows this way between flash
 * (long runs) and decode (the rest), one launch each. */
inline int dec_row(__global const int *rows, int t, int T, int dec_t) {
    if (dec_t <= 0) return 0;
    if (dec_t >= T) return 1;
    int n = 1;
    for (int u = t; u > 0 && n <= dec_t && rows[2 * u - 2] == rows[2 * u] &&
                    rows[2 * u - 1] + 1 == rows[2 * u + 1];
         u--)
        n++;
    for (int u = t; u + 1 < T && n <= dec_t && rows[2 * u + 2] == rows[2 * u] &&
                    rows[2 * u + 3] == rows[2 * u + 1] + 1;
         u++)
        n++;
    return n <= dec_t;
}

/* ---- DUAL_SOFTMAX ----------------------------------------------------------
 * a, s1, s2 are (H,T,S); lam is (T,H) when has_lam, else the scalar lambda.
 * a[h,t,j] = softmax(s1[h,t,:j<=p0+t])[j] - lambda * softmax(s2[...])[j], and
 * exactly 0 for masked j. One work-group (power of two <= SM_WG_MAX) per row;
 * three strided passes (max, sum of exps, write). Global (wg, H*T).
 * Napkin math: ~10*H*T*S flops; reads 2*H*T*S, writes H*T*S floats. */
__kernel void dual_softmax(__global float *a, ulong ao, __global const float *s1, ulong s1o,
                           __global const float *s2, ulong s2o, __global const float *lam, ulong lo,
                           int has_lam, float lambda, int H, int T, int S) {
    __local float r1[SM_WG_MAX], r2[SM_WG_MAX];
    const int lid = get_local_id(0), wg = get_local_size(0);
    const int row = get_group_id(1); /* h*T + t */
    const int h = row / T, t = row % T;
    const int n = S - T + t + 1;
    const size_t off = (size_t)row * S;
    a += ao + off;
    s1 += s1o + off;
    s2 += s2o + off;
    float m1 = -INFINITY, m2 = -INFINITY;
    for (int j = lid; j < n; j += wg) {
        m1 = fmax(m1, s1[j]);
        m2 = fmax(m2, s2[j]);
    }
    r1[lid] = m1;
    r2[lid] = m2;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = wg / 2; s > 0; s >>= 1) {
        if (lid < s) {
            r1[lid] = fmax(r1[lid], r1[lid + s]);
            r2[lid] = fmax(r2[lid], r2[lid + s]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    m1 = r1[0];
    m2 = r2[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    float z1 = 0.0f, z2 = 0.0f;
    for (int j = lid; j < n; j += wg) {
        z1 += exp(s1[j] - m1);
        z2 += exp(s2[j] - m2);
    }
    r1[lid] = z1;
    r2[lid] = z2;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = wg / 2; s > 0; s >>= 1) {
        if (lid < s) {
            r1[lid] += r1[lid + s];
            r2[lid] += r2[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    z1 = r1[0];
    z2 = r2[0];
    const float l = has_lam ? lam[lo + (size_t)t * H + h] : lambda;
    for (int j = lid; j < S; j += wg)
        a[j] = j < n ? exp(s1[j] - m1) / z1 - l * (exp(s2[j] - m2) / z2) : 0.0f;
}

/* ---- DIFF_ATTN and ATTN: one fused kernel body ------------------------------
 * o is (T,H,dv); q is (T,H,nq,dk); k is (S_cap,G,m,dk); v is (S_cap,G,dv);
 * nq = 2, m in {1,2} for DIFF_ATTN; nq = 1, m = 1 for ATTN; rows (T,2).
 * Diff-head h reads kv group g = h / (H/G) (= floor(h*G/H), as H % G == 0);
 * scale 1/sqrt(dk); lam is (T,H) when has_lam, else the scalar lambda.
 *   A1 = softmax_j(s q[t,h,0].k[j,g,0]),  A2 = softmax_j(s q[t,h,1].k[j,g,m-1])
 *   o[t,h] = sum_j (A1[j] - lambda A2[j]) v[j,g]
 *         = (sum_j e1_j v_j) / Z1 - lambda (sum_j e2_j v_j) / Z2
 * so each map keeps its own running max, sum and output accumulator (the
 * online softmax of flash attention), and no (T,S) matrix is ever formed.
 *
 * Work-group: ATT_NT x bq items on bq query rows of ONE kv group g.
 * The rows are the (t, h) pairs of the group, t-major (row r: t = r / Hg,
 * h = g*Hg + r % Hg with Hg = H/G), so under GQA the heads sharing a group
 * also share every K/V tile, and a decode step (T = 1) still fills Hg rows.
 * Per tile of ATT_BK keys: stage K (both maps) and V in local memory; all
 * items compute the tile's BQ x BK logits (dot products over dk); each row's
 * items find the tile max, turn logits into exp(l - new max), then rescale
 * and accumulate their dv/ATT_NT output columns.
 * Sequences: the tiles are one sequence's keys, so a block whose rows hold
 * several (batched decode rows, a run's edge) makes one pass over the tiles
 * per distinct base, the rows of other bases idle in it (one sequence: one
 * pass; the host sizes bq from the longest run, so decode rows of distinct
 * sequences and no GQA get blocks of one row).
 * Split S (flash decoding): when T*H/G rows leave most compute units idle
 * (a decode step), the keys are cut into nsplit ranges of `klen` keys, one
 * work-group each (group id 0); each writes its running (max, sum, acc) per
 * map into part, and attn_combine merges them. nsplit = 1 writes o directly.
 * Global (ATT_NT*nsplit, ceil(T*Hg/bq)*bq, G).
 * Local: qs (bq,nq,dk) pre-scaled queries; ks (m*dk, BK+1) transposed; vs (BK,dv);
 * ss (nq,bq,BK) logits then probabilities.
 * Napkin math: ~H*key_pairs*(2*nq*dk + 2*nq*dv) flops (key_pairs = sum over
 * rows of pos+1); K/V of the group are read once per work-group and pass. */
inline void attention_body(__global float *o, __global const float *q, __global const uchar *k,
                           __global const uchar *v, __global const float *lam, int has_lam,
                           float lambda, __global const int *rows, int T, int H, int G, int m,
                           int dk, int dv, float scale, int klen, __global float *part,
                           __local float *qs, __local float *ks, __local float *vs,
                           __local float *ss, const int nq, const int bq, const int kvt) {
    const int lane = get_local_id(0), qi = get_local_id(1);
    const int wg = bq * ATT_NT;
    const int tid = qi * ATT_NT + lane;
    const int g = get_group_id(2);
    const int Hg = H / G, nrows = T * Hg;
    const int r0 = get_group_id(1) * bq;
    const int row = r0 + qi;
    const int active = row < nrows;
    const int t = (active ? row : r0) / Hg, h = g * Hg + (active ? row : r0) % Hg;
    const int mybase = rows[2 * t], mypos = rows[2 * t + 1];
    const int qw = nq * dk, kw = m * dk;
    const int nvp = (dv + ATT_NT - 1) / ATT_NT; /* column slots in use */

    for (int i = tid; i < bq * qw; i += wg) {
        const int rr = i / qw, c = i - rr * qw, rw = r0 + rr;
        float val = 0.0f;
        if (rw < nrows) val = q[((size_t)(rw / Hg) * H + g * Hg + rw % Hg) * qw + c] * scale;
        qs[i] = val;
    }
    const int split = get_group_id(0), nsplit = get_num_groups(0);
    const int jbeg = split * klen, rend = min(nrows, r0 + bq);

    float m1 = -INFINITY, m2 = -INFINITY, z1 = 0.0f, z2 = 0.0f;
    float o1[ATT_DVP], o2[ATT_DVP];
    for (int i = 0; i < ATT_DVP; i++)
        o1[i] = o2[i] = 0.0f;
    __local float *p1 = ss + qi * ATT_BK, *p2 = p1 + bq * ATT_BK;

    /* one pass per distinct base among the block's rows, led by its first
     * row (the same test in every item: the barriers below stay uniform) */
    for (int lr = r0; lr < rend; lr++) {
        const int base = rows[2 * (lr / Hg)];
        int seen = 0;
        for (int pr = r0; pr < lr; pr++)
            seen |= rows[2 * (pr / Hg)] == base;
        if (seen) continue;
        /* keys 0 .. the largest pos of the pass's rows, within this split */
        int kmax = 0;
        for (int pr = lr; pr < rend; pr++)
            if (rows[2 * (pr / Hg)] == base) kmax = max(kmax, rows[2 * (pr / Hg) + 1] + 1);
        const int nkeys = min(kmax, jbeg + klen);
        const int mine = active && mybase == base;
        const size_t kb = (size_t)base * G * kw, vb = (size_t)base * G * dv; /* elements */

        for (int j0 = jbeg; j0 < nkeys; j0 += ATT_BK) {
            barrier(CLK_LOCAL_MEM_FENCE); /* the previous tile is consumed */
            /* the tiles hold the widened values */
            for (int i = tid; i < ATT_BK * kw; i += wg) {
                const int jj = i / kw, c = i - jj * kw, j = j0 + jj;
                ks[c * KS + jj] =
                    j < nkeys ? kv_get(k, kb + ((size_t)j * G + g) * kw + c, kvt) : 0.0f;
            }
            for (int i = tid; i < ATT_BK * dv; i += wg) {
                const int jj = i / dv, j = j0 + jj;
                vs[i] = j < nkeys ? kv_get(v, vb + ((size_t)j * G + g) * dv + (i - jj * dv), kvt)
                                  : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            /* logits; masked ones (inactive rows, rows of another pass, keys
             * past a row's position) are not computed and never read below */
            for (int i = tid; i < bq * ATT_BK; i += wg) {
                const int rr = i / ATT_BK, jj = i - rr * ATT_BK, rw = r0 + rr, j = j0 + jj;
                if (rw >= nrows || rows[2 * (rw / Hg)] != base || j > rows[2 * (rw / Hg) + 1])
                    continue;
                __local const float *qa = qs + rr * qw, *ka = ks + jj;
                float d1 = 0.0f;
                for (int c = 0; c < dk; c++)
                    d1 += qa[c] * ka[c * KS];
                ss[i] = d1;
                if (nq == 2) {
                    qa += dk;
                    ka += (m - 1) * dk * KS;
                    float d2 = 0.0f;
                    for (int c = 0; c < dk; c++)
                        d2 += qa[c] * ka[c * KS];
                    ss[bq * ATT_BK + i] = d2;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            /* keys of this tile the row sees: j0 .. j0+jn-1 */
            const int jn = mine ? clamp(min(mypos + 1, nkeys) - j0, 0, ATT_BK) : 0;
            float t1 = -INFINITY, t2 = -INFINITY;
            for (int jj = 0; jj < jn; jj++) {
                t1 = fmax(t1, p1[jj]);
                if (nq == 2) t2 = fmax(t2, p2[jj]);
            }
            const float n1 = fmax(m1, t1), n2 = fmax(m2, t2);
            /* a map that has seen no key yet has nothing to rescale */
            const float a1 = m1 == -INFINITY ? 0.0f : exp(m1 - n1);
            const float a2 = m2 == -INFINITY ? 0.0f : exp(m2 - n2);
            barrier(CLK_LOCAL_MEM_FENCE); /* every item of the row has read the logits */
            for (int jj = lane; jj < jn; jj += ATT_NT) {
                p1[jj] = exp(p1[jj] - n1);
                if (nq == 2) p2[jj] = exp(p2[jj] - n2);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            z1 *= a1;
            z2 *= a2;
            for (int jj = 0; jj < jn; jj++) {
                z1 += p1[jj];
                if (nq == 2) z2 += p2[jj];
            }
            /* column slots i < nvp hold columns; the test is uniform, so slots
             * past dv cost nothing (dv = 128 uses 4 of 8) */
            for (int i = 0; i < ATT_DVP; i++) {
                if (i >= nvp) break;
                const int e = min(lane + ATT_NT * i, dv - 1); /* past dv: read, never written */
                float s1 = o1[i] * a1, s2 = o2[i] * a2;
                for (int jj = 0; jj < jn; jj++) {
                    const float ve = vs[jj * dv + e];
                    s1 += p1[jj] * ve;
                    if (nq == 2) s2 += p2[jj] * ve;
                }
                o1[i] = s1;
                o2[i] = s2;
            }
            m1 = n1;
            m2 = n2;
        }
    }
    if (!active) return;
    const size_t r = (size_t)t * H + h;
    if (nsplit > 1) {
        /* part is (nsplit, T*H, nq, 2 + dv): max, sum, then the accumulator */
        __global float *p = part + ((size_t)split * T * H + r) * nq * (2 + dv);
        if (lane == 0) {
            p[0] = m1;
            p[1] = z1;
        }
        if (nq == 2 && lane == 0) {
            p[2 + dv] = m2;
            p[3 + dv] = z2;
        }
        for (int i = 0; i < ATT_DVP; i++) {
            const int e = lane + ATT_NT * i;
            if (e >= dv) continue;
            p[2 + e] = o1[i];
            if (nq == 2) p[4 + dv + e] = o2[i];
        }
        return;
    }
    const float l = nq == 2 ? (has_lam ? lam[r] : lambda) : 0.0f;
    __global float *orow = o + r * dv;
    for (int i = 0; i < ATT_DVP; i++) {
        const int e = lane + ATT_NT * i;
        if (e < dv) orow[e] = nq == 2 ? o1[i] / z1 - l * (o2[i] / z2) : o1[i] / z1;
    }
}

/* Merges the nsplit partial results of a split-S launch: per map
 *   M = max_s m_s,  Z = sum_s z_s e^(m_s - M),  A = sum_s acc_s e^(m_s - M)
 * (a split that saw no key has m = -inf and weighs 0; split 0 always holds
 * key 0), then o = A1/Z1 - lambda A2/Z2 (nq = 2) or A1/Z1.
 * part is (nsplit, T*H, nq, 2 + dv); o is (T,H,dv); only the decode rows of
 * dec_t (dec_row; T: all) are merged. Global (dv, T*H). */
__kernel void attn_combine(__global float *o, ulong oo, __global const float *part,
                           __global const float *lam, ulong lo, int has_lam, float lambda,
                           __global const int *rows, ulong ro, int TH, int H, int dv, int nq,
                           int nsplit, int dec_t) {
    const int e = get_global_id(0), r = get_global_id(1);
    if (e >= dv || r >= TH || !dec_row(rows + ro, r / H, TH / H, dec_t)) return;
    const size_t stride = (size_t)TH * nq * (2 + dv);
    float res[2];
    for (int mp = 0; mp < nq; mp++) {
        __global const float *p = part + ((size_t)r * nq + mp) * (2 + dv);
        float mx = -INFINITY;
        for (int sp = 0; sp < nsplit; sp++)
            mx = fmax(mx, p[sp * stride]);
        float z = 0.0f, acc = 0.0f;
        for (int sp = 0; sp < nsplit; sp++) {
            const float ms = p[sp * stride];
            if (ms == -INFINITY) continue;
            const float w = exp(ms - mx);
            z += p[sp * stride + 1] * w;
            acc += p[sp * stride + 2 + e] * w;
        }
        res[mp] = acc / z;
    }
    const float l = nq == 2 ? (has_lam ? lam[lo + r] : lambda) : 0.0f;
    o[oo + (size_t)r * dv + e] = nq == 2 ? res[0] - l * res[1] : res[0];
}

/* BQ rows per work-group, KV cache type KT (kernel name suffix SUF); k and v
 * at byte offsets ko, vo */
#define ATTENTION_KERNELS(BQ, SUF, KT)                                                             \
    __kernel __attribute__((reqd_work_group_size(ATT_NT, BQ, 1))) void diff_attn_q##BQ##SUF(       \
        __global float *o, ulong oo, __global const float *q, ulong qo, __global const uchar *k,   \
        ulong ko, __global const uchar *v, ulong vo, __global const float *lam, ulong lo,          \
        int has_lam, float lambda, __global const int *rows, ulong ro, int T, int H, int G, int m, \
        int dk, int dv, float scale, int klen, __global float *part, __local float *qs,            \
        __local float *ks, __local float *vs, __local float *ss) {                                 \
        attention_body(o + oo, q + qo, k + ko, v + vo, lam + lo, has_lam, lambda, rows + ro, T, H, \
                       G, m, dk, dv, scale, klen, part, qs, ks, vs, ss, 2, BQ, KT);                \
    }                                                                                              \
    __kernel __attribute__((reqd_work_group_size(ATT_NT, BQ, 1))) void attn_q##BQ##SUF(            \
        __global float *o, ulong oo, __global const float *q, ulong qo, __global const uchar *k,   \
        ulong ko, __global const uchar *v, ulong vo, __global const int *rows, ulong ro, int T,    \
        int H, int G, int dk, int dv, float scale, int klen, __global float *part,                 \
        __local float *qs, __local float *ks, __local float *vs, __local float *ss) {              \
        attention_body(o + oo, q + qo, k + ko, v + vo, q, 0, 0.0f, rows + ro, T, H, G, 1, dk, dv,  \
                       scale, klen, part, qs, ks, vs, ss, 1, BQ, KT);                              \
    }
ATTENTION_KERNELS(1, , KV_F32)
ATTENTION_KERNELS(2, , KV_F32)
ATTENTION_KERNELS(4, , KV_F32)
ATTENTION_KERNELS(8, , KV_F32)
ATTENTION_KERNELS(1, _f16, KV_F16)
ATTENTION_KERNELS(2, _f16, KV_F16)
ATTENTION_KERNELS(4, _f16, KV_F16)
ATTENTION_KERNELS(8, _f16, KV_F16)
ATTENTION_KERNELS(1, _q8_0, KV_Q8_0)
ATTENTION_KERNELS(2, _q8_0, KV_Q8_0)
ATTENTION_KERNELS(4, _q8_0, KV_Q8_0)
ATTENTION_KERNELS(8, _q8_0, KV_Q8_0)

/* ---- DIFF_ATTN and ATTN on CPU-class devices: queries in vector lanes ------
 * The loop structure of backends/cpu/attention.c, in explicit ATT_VL-wide
 * vectors (ATT_VL = the device's native float width, 8 or 16), with no local
 * memory and no barriers: one work-item per work-group, each a task of the
 * device's thread pool (PoCL runs a barrier-free single item as plain code).
 *
 * flash (prefill): a work-item owns ATT_VL rows of one kv group g (rows
 * t-major as above: under GQA the heads of a group share every K/V row);
 * lane i is row r0+i. Its queries are transposed once into qt (nq, dk, VL)
 * (pre-scaled) in the scratch buffer. Per block of ATT_FKB keys: the logits of
 * both maps as VL-lane vectors (one K element broadcast per fma), the causal
 * mask, the running max, exp, sums and rescaling all lane-wise (the online
 * softmax bookkeeping of all VL rows in parallel, no horizontal work), then
 * ot (nq, dv, VL) += p_j * v[j][e] with each V element broadcast once for both
 * maps. Global (items, G) from item ib0 on (the host launches the
 * ceil(T*Hg/VL) items of a group in chunks so that the scratch, (items, G,
 * nq*(dk+dv)*VL) floats, stays bounded for long prompts). The item's rows
 * of decode runs (dec_row) are left to decode; the rest make one pass over
 * the keys per distinct base (one sequence: one pass), lanes of other
 * passes following the pass leader's position and never written.
 *
 * decode (few rows per group): a work-item owns one row (t, h) and one key
 * range (split-K, as attention_body: part/attn_combine when nsplit > 1); q and
 * the dv accumulators of both maps sit in registers (dk, dv multiples of
 * VL). Per block of VL keys: the VL dot products per map are reduced into one
 * vector (lane = key) by a transposing tree of adds, then max/exp/sum on that
 * vector, and acc += p_j * v[j] (VL columns per fma). Rows that are not
 * decode rows (dec_row) are flash's and return at once. Global (nsplit, T*H). */

#ifndef ATT_VL
#define ATT_VL 16
#endif
#if ATT_VL == 16
#define avf float16
#define avload vload16
#define avstore vstore16
#define avload_half vload_half16
#define avconvert convert_float16
#define avload_q(i, p) vload16(i, (__global const char *)(p))
#else
#define avf float8
#define avload vload8
#define avstore vstore8
#define avload_half vload_half8
#define avconvert convert_float8
#define avload_q(i, p) vload8(i, (__global const char *)(p))
#endif
#define ATT_QB (32 / ATT_VL) /* vectors per q8_0 block */
#define ATT_FKB 8 /* keys per flash block: nq*FKB logit vectors in registers */
#define ATT_DK_MAX 256

/* the bytes of element e of a cache of type kvt at p (e at a block start for
 * q8_0: every K and V row, map and VL-vector of the kernels below is) */
inline __global const uchar *kv_at(__global const uchar *p, size_t e, const int kvt) {
    return p + (kvt == KV_Q8_0 ? (e >> 5) * 34 : kvt == KV_F16 ? e * 2 : e * 4);
}

/* ATT_VL elements e .. e+VL-1 of a cache row at p (e a multiple of VL: one
 * q8_0 block holds them), widened */
inline avf kv_vget(__global const uchar *p, int e, const int kvt) {
    if (kvt == KV_F16) return avload_half(0, (__global const half *)p + e);
    if (kvt == KV_Q8_0) {
        __global const uchar *b = p + (e >> 5) * 34;
        return kv_half(b) * avconvert(avload_q(0, b + 2 + (e & 31)));
    }
    return avload(0, (__global const float *)p + e);
}

inline float ahmax(avf v) {
#if ATT_VL == 16
    float8 a = fmax(v.lo, v.hi);
    float4 b = fmax(a.lo, a.hi);
#else
    float4 b = fmax(v.lo, v.hi);
#endif
    float2 c = fmax(b.lo, b.hi);
    return fmax(c.x, c.y);
}

inline float ahsum(avf v) {
#if ATT_VL == 16
    float8 a = v.lo + v.hi;
    float4 b = a.lo + a.hi;
#else
    float4 b = v.lo + v.hi;
#endif
    float2 c = b.lo + b.hi;
    return c.x + c.y;
}

/* s[j] holds VL partial sums of key j's dot product; returns lane j = sum s[j] */
inline avf tree_sum(const avf *s) {
#if ATT_VL == 16
    float16 x[8], y[4], z[2];
    #pragma unroll
    for (int i = 0; i < 8; i++)
        x[i] = (float16)(s[2 * i].lo + s[2 * i].hi, s[2 * i + 1].lo + s[2 * i + 1].hi);
    #pragma unroll
    for (int i = 0; i < 4; i++)
        y[i] = (float16)(x[2 * i].s012389ab + x[2 * i].s4567cdef,
                         x[2 * i + 1].s012389ab + x[2 * i + 1].s4567cdef);
    #pragma unroll
    for (int i = 0; i < 2; i++)
        z[i] = (float16)(y[2 * i].s014589cd + y[2 * i].s2367abef,
                         y[2 * i + 1].s014589cd + y[2 * i + 1].s2367abef);
    return (float16)(z[0].even + z[0].odd, z[1].even + z[1].odd);
#else
    float8 x[4], y[2];
    #pragma unroll
    for (int i = 0; i < 4; i++)
        x[i] = (float8)(s[2 * i].lo + s[2 * i].hi, s[2 * i + 1].lo + s[2 * i + 1].hi);
    #pragma unroll
    for (int i = 0; i < 2; i++)
        y[i] = (float8)(x[2 * i].s0145 + x[2 * i].s2367, x[2 * i + 1].s0145 + x[2 * i + 1].s2367);
    return (float8)(y[0].even + y[0].odd, y[1].even + y[1].odd);
#endif
}

inline void flash_body(__global float *o, __global const float *q, __global const uchar *k,
                       __global const uchar *v, __global const float *lam, int has_lam,
                       float lambda, __global const int *rows, int T, int H, int G, int m, int dk,
                       int dv, int dec_t, float scale, int ib0, __global float *scr,
                       const int nq, const int kvt) {
    const int ib = ib0 + get_global_id(0), g = get_global_id(1);
    const int Hg = H / G, nrows = T * Hg;
    const int r0 = ib * ATT_VL;
    if (r0 >= nrows || g >= G) return;
    const int nr = min(ATT_VL, nrows - r0);
    __global float *qt =
        scr + ((size_t)g * get_global_size(0) + get_global_id(0)) * nq * (dk + dv) * ATT_VL;
    __global float *ot = qt + (size_t)nq * dk * ATT_VL;
    /* lane i: its row's base and pos; pos -1 for a decode row or past nr */
    int bs[ATT_VL], ps[ATT_VL];
    #pragma unroll
    for (int i = 0; i < ATT_VL; i++) {
        const int rw = r0 + min(i, nr - 1), t = rw / Hg, h = g * Hg + rw % Hg;
        bs[i] = rows[2 * t];
        ps[i] = i < nr && !dec_row(rows, t, T, dec_t) ? rows[2 * t + 1] : -1;
        __global const float *qr = q + ((size_t)t * H + h) * nq * dk;
        for (int c = 0; c < nq * dk; c++)
            qt[c * ATT_VL + i] = qr[c] * scale;
    }
    const int kw = m * dk, mo = m == 2 ? dk : 0;
    /* one pass per distinct base, led by its first lane */
    for (int ld = 0; ld < nr; ld++) {
        if (ps[ld] < 0) continue;
        int seen = 0;
        for (int i = 0; i < ld; i++)
            seen |= ps[i] >= 0 && bs[i] == bs[ld];
        if (seen) continue;
        const int base = bs[ld];
        float posf[ATT_VL];
        int kend = 0; /* keys the pass's last row sees */
        #pragma unroll
        for (int i = 0; i < ATT_VL; i++) {
            const int in = ps[i] >= 0 && bs[i] == base;
            posf[i] = (float)(in ? ps[i] : ps[ld]);
            if (in) kend = max(kend, ps[i] + 1);
        }
        for (int i = 0; i < nq * dv; i++)
            avstore((avf)(0.0f), i, ot);
        const avf pos = avload(0, posf);
        const size_t kb = (size_t)base * G * kw, vb = (size_t)base * G * dv; /* elements */
        avf mx[2], l[2];
        #pragma unroll
        for (int mp = 0; mp < 2; mp++) {
            mx[mp] = (avf)(-INFINITY);
            l[mp] = (avf)(0.0f);
        }
        for (int j0 = 0; j0 < kend; j0 += ATT_FKB) {
            __global const uchar *kr[ATT_FKB], *vr[ATT_FKB];
            #pragma unroll
            for (int j = 0; j < ATT_FKB; j++) {
                const int key = min(j0 + j, kend - 1); /* past kend: a real row, masked */
                kr[j] = kv_at(k, kb + ((size_t)key * G + g) * kw, kvt);
                vr[j] = kv_at(v, vb + ((size_t)key * G + g) * dv, kvt);
            }
            avf p[2][ATT_FKB];
            #pragma unroll
            for (int mp = 0; mp < nq; mp++)
                #pragma unroll
                for (int j = 0; j < ATT_FKB; j++)
                    p[mp][j] = (avf)(0.0f);
            if (kvt == KV_F32) {
                for (int d = 0; d < dk; d++)
                    #pragma unroll
                    for (int mp = 0; mp < nq; mp++) {
                        const avf qv = avload(mp * dk + d, qt);
                        #pragma unroll
                        for (int j = 0; j < ATT_FKB; j++)
                            p[mp][j] = fma(qv, (avf)(kv_get(kr[j], d + mp * mo, kvt)), p[mp][j]);
                    }
            } else {
                /* f16, q8_0: each key's K widened VL elements at a time (one
                 * vector load and conversion; f16 tails of dk % VL by element),
                 * then broadcast from private memory as f32's from the cache */
                for (int d0 = 0; d0 < dk; d0 += ATT_VL) {
                    const int dn = min(ATT_VL, dk - d0), nk = m == 2 ? nq : 1; /* maps with own K */
                    float kf[2][ATT_FKB][ATT_VL];
                    for (int mp = 0; mp < nk; mp++)
                        #pragma unroll
                        for (int j = 0; j < ATT_FKB; j++) {
                            if (dn == ATT_VL)
                                avstore(kv_vget(kr[j], d0 + mp * mo, kvt), 0, kf[mp][j]);
                            else
                                for (int i = 0; i < dn; i++)
                                    kf[mp][j][i] = kv_get(kr[j], d0 + mp * mo + i, kvt);
                        }
                    for (int d = 0; d < dn; d++)
                        #pragma unroll
                        for (int mp = 0; mp < nq; mp++) {
                            const avf qv = avload(mp * dk + d0 + d, qt);
                            #pragma unroll
                            for (int j = 0; j < ATT_FKB; j++)
                                p[mp][j] = fma(qv, (avf)(kf[mp < nk ? mp : 0][j][d]), p[mp][j]);
                        }
                }
            }
            avf corr[2];
            #pragma unroll
            for (int mp = 0; mp < nq; mp++) {
                avf nm = mx[mp];
                #pragma unroll
                for (int j = 0; j < ATT_FKB; j++) {
                    p[mp][j] = select((avf)(-INFINITY), p[mp][j], islessequal((avf)(j0 + j), pos));
                    nm = fmax(nm, p[mp][j]);
                }
                /* every lane sees key 0, so nm is finite from the first block on */
                corr[mp] = exp(mx[mp] - nm);
                mx[mp] = nm;
                avf sum = (avf)(0.0f);
                #pragma unroll
                for (int j = 0; j < ATT_FKB; j++) {
                    p[mp][j] = exp(p[mp][j] - nm); /* masked: exp(-inf) = 0 */
                    sum += p[mp][j];
                }
                l[mp] = fma(l[mp], corr[mp], sum);
            }
            /* V as K: f32 from the cache, f16 and q8_0 widened VL at a time */
            const int vn = kvt == KV_F32 ? dv : ATT_VL;
            for (int e0 = 0; e0 < dv; e0 += vn) {
                const int en = min(vn, dv - e0);
                float vf[ATT_FKB][ATT_VL];
                if (kvt != KV_F32) {
                    #pragma unroll
                    for (int j = 0; j < ATT_FKB; j++) {
                        if (en == ATT_VL)
                            avstore(kv_vget(vr[j], e0, kvt), 0, vf[j]);
                        else
                            for (int i = 0; i < en; i++)
                                vf[j][i] = kv_get(vr[j], e0 + i, kvt);
                    }
                }
                for (int e = e0; e < e0 + en; e++) {
                    avf acc[2];
                    #pragma unroll
                    for (int mp = 0; mp < nq; mp++)
                        acc[mp] = avload(mp * dv + e, ot) * corr[mp];
                    #pragma unroll
                    for (int j = 0; j < ATT_FKB; j++) {
                        const avf ve = (avf)(kvt == KV_F32 ? kv_get(vr[j], e, kvt) : vf[j][e - e0]);
                        #pragma unroll
                        for (int mp = 0; mp < nq; mp++)
                            acc[mp] = fma(p[mp][j], ve, acc[mp]);
                    }
                    #pragma unroll
                    for (int mp = 0; mp < nq; mp++)
                        avstore(acc[mp], mp * dv + e, ot);
                }
            }
        }
        float l0[ATT_VL], l1[ATT_VL];
        avstore(l[0], 0, l0);
        avstore(l[1], 0, l1);
        for (int i = 0; i < nr; i++) {
            if (ps[i] < 0 || bs[i] != base) continue;
            const int rw = r0 + i, t = rw / Hg, h = g * Hg + rw % Hg;
            const size_t r = (size_t)t * H + h;
            __global float *orow = o + r * dv;
            if (nq == 1) {
                const float inv = 1.0f / l0[i];
                for (int e = 0; e < dv; e++)
                    orow[e] = ot[e * ATT_VL + i] * inv;
            } else {
                const float lm = has_lam ? lam[r] : lambda;
                for (int e = 0; e < dv; e++)
                    orow[e] = ot[e * ATT_VL + i] / l0[i] - lm * (ot[(dv + e) * ATT_VL + i] / l1[i]);
            }
        }
    }
}

inline void decode_body(__global float *o, __global const float *q, __global const uchar *k,
                        __global const uchar *v, __global const float *lam, int has_lam,
                        float lambda, __global const int *rows, int T, int H, int G, int m,
                        int dk, int dv, int dec_t, float scale, int klen, __global float *part,
                        const int nq, const int kvt) {
    const int split = get_global_id(0), nsplit = get_global_size(0), r = get_global_id(1);
    if (r >= T * H) return;
    const int t = r / H, h = r % H, g = h / (H / G);
    if (!dec_row(rows, t, T, dec_t)) return; /* flash's */
    const int jbeg = split * klen, jend = min(rows[2 * t + 1] + 1, jbeg + klen);
    const int nvk = dk / ATT_VL, nvv = dv / ATT_VL, kw = m * dk, mo = (m - 1) * dk;
    /* the sequence's cache rows (elements) */
    const size_t kb = (size_t)rows[2 * t] * G * kw, vb = (size_t)rows[2 * t] * G * dv;
    avf qv[2][ATT_DK_MAX / ATT_VL], acc[2][ATT_DV_MAX / ATT_VL];
    __global const float *qr = q + (size_t)r * nq * dk;
    #pragma unroll
    for (int mp = 0; mp < nq; mp++) {
        for (int c = 0; c < nvk; c++)
            qv[mp][c] = avload(c, qr + mp * dk) * scale;
        for (int c = 0; c < nvv; c++)
            acc[mp][c] = (avf)(0.0f);
    }
    float mx[2] = {-INFINITY, -INFINITY}, z[2] = {0.0f, 0.0f};
    for (int j0 = jbeg; j0 < jend; j0 += ATT_VL) {
        const int nk = min(ATT_VL, jend - j0);
        avf pv[2];
        #pragma unroll
        for (int mp = 0; mp < nq; mp++) {
            avf s[ATT_VL];
            #pragma unroll
            for (int j = 0; j < ATT_VL; j++) {
                __global const uchar *kr =
                    kv_at(k, kb + ((size_t)(j0 + min(j, nk - 1)) * G + g) * kw + mp * mo, kvt);
                avf a = (avf)(0.0f);
                if (kvt == KV_Q8_0) {
                    /* a block's scale once for its ATT_QB vectors */
                    for (int c = 0; c < nvk; c += ATT_QB, kr += 34) {
                        const float d = kv_half(kr);
                        #pragma unroll
                        for (int i = 0; i < ATT_QB; i++)
                            a = fma(qv[mp][c + i], d * avconvert(avload_q(i, kr + 2)), a);
                    }
                } else {
                    for (int c = 0; c < nvk; c++)
                        a = fma(qv[mp][c], kv_vget(kr, c * ATT_VL, kvt), a);
                }
                s[j] = a;
            }
            pv[mp] = tree_sum(s);
        }
        float cr[2];
        avf lane;
        #pragma unroll
        for (int j = 0; j < ATT_VL; j++)
            ((float *)&lane)[j] = (float)j;
        #pragma unroll
        for (int mp = 0; mp < nq; mp++) {
            const avf lg = select((avf)(-INFINITY), pv[mp], isless(lane, (avf)((float)nk)));
            const float nm = fmax(mx[mp], ahmax(lg));
            cr[mp] = exp(mx[mp] - nm); /* 0 on the first block: mx = -inf, nm finite */
            mx[mp] = nm;
            pv[mp] = exp(lg - nm);
            z[mp] = z[mp] * cr[mp] + ahsum(pv[mp]);
        }
        float p1[ATT_VL], p2[ATT_VL];
        avstore(pv[0], 0, p1);
        if (nq == 2) avstore(pv[1], 0, p2);
        if (kvt == KV_Q8_0) {
            /* the VL keys' V rows, each block's VL scales once for its ATT_QB vectors */
            __global const uchar *vrow[ATT_VL];
            #pragma unroll
            for (int j = 0; j < ATT_VL; j++)
                vrow[j] = kv_at(v, vb + ((size_t)(j0 + min(j, nk - 1)) * G + g) * dv, kvt);
            for (int c = 0; c < nvv; c += ATT_QB) {
                float vd[ATT_VL];
                #pragma unroll
                for (int j = 0; j < ATT_VL; j++)
                    vd[j] = kv_half(vrow[j] + (c / ATT_QB) * 34);
                #pragma unroll
                for (int i = 0; i < ATT_QB; i++) {
                    avf a1 = acc[0][c + i] * cr[0];
                    avf a2 = nq == 2 ? acc[1][c + i] * cr[1] : (avf)(0.0f);
                    #pragma unroll
                    for (int j = 0; j < ATT_VL; j++) {
                        const avf ve =
                            vd[j] * avconvert(avload_q(i, vrow[j] + (c / ATT_QB) * 34 + 2));
                        a1 = fma((avf)(p1[j]), ve, a1);
                        if (nq == 2) a2 = fma((avf)(p2[j]), ve, a2);
                    }
                    acc[0][c + i] = a1;
                    if (nq == 2) acc[1][c + i] = a2;
                }
            }
        } else {
            for (int c = 0; c < nvv; c++) {
                avf a1 = acc[0][c] * cr[0], a2 = nq == 2 ? acc[1][c] * cr[1] : (avf)(0.0f);
                #pragma unroll
                for (int j = 0; j < ATT_VL; j++) {
                    __global const uchar *vr =
                        kv_at(v, vb + ((size_t)(j0 + min(j, nk - 1)) * G + g) * dv, kvt);
                    const avf ve = kv_vget(vr, c * ATT_VL, kvt);
                    a1 = fma((avf)(p1[j]), ve, a1);
                    if (nq == 2) a2 = fma((avf)(p2[j]), ve, a2);
                }
                acc[0][c] = a1;
                if (nq == 2) acc[1][c] = a2;
            }
        }
    }
    if (nsplit > 1) {
        /* part is (nsplit, T*H, nq, 2 + dv), as attention_body writes it */
        __global float *p = part + ((size_t)split * T * H + r) * nq * (2 + dv);
        #pragma unroll
        for (int mp = 0; mp < nq; mp++) {
            __global float *pm = p + mp * (2 + dv);
            pm[0] = mx[mp];
            pm[1] = z[mp];
            for (int c = 0; c < nvv; c++)
                avstore(acc[mp][c], c, pm + 2);
        }
        return;
    }
    __global float *orow = o + (size_t)r * dv;
    if (nq == 1) {
        for (int c = 0; c < nvv; c++)
            avstore(acc[0][c] / z[0], c, orow);
    } else {
        const float lm = has_lam ? lam[r] : lambda;
        for (int c = 0; c < nvv; c++)
            avstore(acc[0][c] / z[0] - lm * (acc[1][c] / z[1]), c, orow);
    }
}

/* the four kernels for KV cache type KT (kernel name suffix SUF); k and v at
 * byte offsets ko, vo */
#define CPU_ATTENTION_KERNELS(SUF, KT)                                                             \
    __kernel void diff_attn_flash##SUF(                                                            \
        __global float *o, ulong oo, __global const float *q, ulong qo, __global const uchar *k,   \
        ulong ko, __global const uchar *v, ulong vo, __global const float *lam, ulong lo,          \
        int has_lam, float lambda, __global const int *rows, ulong ro, int T, int H, int G, int m, \
        int dk, int dv, int dec_t, float scale, int ib0, __global float *scr) {                    \
        flash_body(o + oo, q + qo, k + ko, v + vo, lam + lo, has_lam, lambda, rows + ro, T, H, G,  \
                   m, dk, dv, dec_t, scale, ib0, scr, 2, KT);                                      \
    }                                                                                              \
    __kernel void attn_flash##SUF(__global float *o, ulong oo, __global const float *q, ulong qo,  \
                                  __global const uchar *k, ulong ko, __global const uchar *v,      \
                                  ulong vo, __global const int *rows, ulong ro, int T, int H,      \
                                  int G, int dk, int dv, int dec_t, float scale, int ib0,          \
                                  __global float *scr) {                                           \
        flash_body(o + oo, q + qo, k + ko, v + vo, q, 0, 0.0f, rows + ro, T, H, G, 1, dk, dv,      \
                   dec_t, scale, ib0, scr, 1, KT);                                                 \
    }                                                                                              \
    __kernel void diff_attn_decode##SUF(                                                           \
        __global float *o, ulong oo, __global const float *q, ulong qo, __global const uchar *k,   \
        ulong ko, __global const uchar *v, ulong vo, __global const float *lam, ulong lo,          \
        int has_lam, float lambda, __global const int *rows, ulong ro, int T, int H, int G, int m, \
        int dk, int dv, int dec_t, float scale, int klen, __global float *part) {                  \
        decode_body(o + oo, q + qo, k + ko, v + vo, lam + lo, has_lam, lambda, rows + ro, T, H, G, \
                    m, dk, dv, dec_t, scale, klen, part, 2, KT);                                   \
    }                                                                                              \
    __kernel void attn_decode##SUF(__global float *o, ulong oo, __global const float *q, ulong qo, \
                                   __global const uchar *k, ulong ko, __global const uchar *v,     \
                                   ulong vo, __global const int *rows, ulong ro, int T, int H,     \
                                   int G, int dk, int dv, int dec_t, float scale, int klen,        \
                                   __global float *part) {                                         \
        decode_body(o + oo, q + qo, k + ko, v + vo, q, 0, 0.0f, rows + ro, T, H, G, 1, dk, dv,     \
                    dec_t, scale, klen, part, 1, KT);                                              \
    }
CPU_ATTENTION_KERNELS(, KV_F32)
CPU_ATTENTION_KERNELS(_f16, KV_F16)
CPU_ATTENTION_KERNELS(_q8_0, KV_Q8_0)
