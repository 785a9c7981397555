/* Fast CPU DIFF_ATTN and ATTN (docs/design.md section 3), compiled once per ISA.
 * Reference: backends/ref/attention.c (drt_ref_diff_attn, drt_ref_attn). Both
 * softmaxes are online; no (T,S) matrix is ever formed.
 *
 * A "row" below is one (query, map) pair: DIFF_ATTN has maps = 2 (A1 with
 * q[t,h,0] and k[.,g,0]; A2 with q[t,h,1] and k[.,g,m-1]), ATTN has maps = 1.
 *
 * Rows: row t attends the keys base .. base + pos of its rows entry. The
 * host (backend.c) cuts the rows into flash groups (up to VL consecutive rows
 * of one sequence, from a run of more than CPU_ATTN_DEC_T) and decode rows.
 *
 * Flash groups: flash attention with the queries in vector lanes. A
 * task is (head h, a group); their q rows are transposed once into
 * (maps, dk, VL). For each block of KB keys: logits = sum_d q^T[d] * k[j][d]
 * (a K element broadcast per FMA, K read in place), the causal mask, the
 * running max, exp, sums and rescaling as lane-wise vector ops (no
 * horizontal reductions), and o^T (maps, dv, VL) += v[j][e] * p[j] with P
 * still in registers. Napkin math, causal: ~2 * H * maps * (dk + dv) *
 * (T*p0 + T*T/2) flops (the decomposed path does twice that, plus two
 * (H,T,S) matrices written and read).
 *
 * Decode rows: where a kv group serves several heads (dec_lanes > 0), a
 * unit is up to VL heads of one group in vector lanes, run as a flash group
 * whose lanes are heads instead of queries: each key and value is read (and
 * widened) once for all of them, and no logit needs a horizontal sum.
 * Otherwise a unit is one head: two passes over the visible keys, logits by
 * vector dot products, exp, then P . V with dv held in registers. When
 * units alone leave threads idle, keys are split into n_split ranges whose
 * partial (max, sum, acc) are merged by attn_combine (flash decoding).
 *
 * K and V are read in the cache's type (kvt: f32, f16, q8_0), widened
 * exactly as they are used: the flash steps widen a block's KB rows into a
 * tile, the per-head decode loads vectors of the stored type.
 *
 * Checked against the reference (exit status 0: every case within bound):
 *   diffrt conform --backend cpu --op DIFF_ATTN,ATTN   the best kernel set
 *   DIFFRT_CPU_ISA=avx2 (avx512, neon, generic) ...    each set
 *   ... --kv-type f16 (q8_0)                           each cache type
 */
#include <math.h>
#include <string.h>

#include "cpu_fast.h"
#include "simd.h"

#if VL >= 16
#define KB 8 /* keys per block (registers: maps x KB vectors of P) */
#else
#define KB 4
#endif

/* ---- the cache's rows ---------------------------------------------------------- */

/* n elements of a K or V cache (type a->kvt) from element e (a multiple of
 * 32 for q8_0): in place for f32, else widened into buf (n floats). Single
 * vectors of a cache are simd.h's vload_w / load_w1 with the cache's type. */
static const float *kv_row(const cpu_attn_args *a, const void *c, int64_t e, int n, float *buf) {
    if (a->kvt == DRT_F32) return (const float *)c + e;
    const void *p = (const char *)c + wbytes(a->kvt, e);
    int i = 0;
    for (; i + VL <= n; i += VL) vstore(buf + i, vload_w(p, i, a->kvt)); /* q8_0: n is whole blocks */
    for (; i < n; i++) buf[i] = load_w1(p, i, a->kvt);
    return buf;
}

/* ---- prefill ------------------------------------------------------------------ */

/* One flash step for the VL queries t0.. of head h (maps a constant): keys
 * j0..j0+KB against the transposed queries qt (maps, dk, VL). Logits are
 * VL-lane vectors (lane = query), so the running max m, the sums l and the
 * rescaling are lane-wise vector ops; K rows are read in place, one element
 * broadcast per FMA. o (maps, dv, VL) accumulates P.V for every lane. */
VINL void flash_step(const cpu_attn_args *a, const float *qt, const float *const *krow, const float *const *vrow,
                     vf pos, int j0, vf *m, vf *l, float *o, int MAPS) {
    const int dk = a->dk, dv = a->dv;
    /* map 1's key of a row sits dk floats after map 0's (m = 2) or is the
     * same key (m = 1): 8 row pointers serve both maps */
    const int mo = a->m == 2 ? dk : 0;
    vf p[2][KB];
#pragma GCC unroll 2
    for (int mp = 0; mp < MAPS; mp++)
#pragma GCC unroll 8
        for (int j = 0; j < KB; j++) p[mp][j] = vzero();
    for (int d = 0; d < dk; d++) {
#pragma GCC unroll 2
        for (int mp = 0; mp < MAPS; mp++) {
            const vf q = vload(qt + ((int64_t)mp * dk + d) * VL);
#pragma GCC unroll 8
            for (int j = 0; j < KB; j++) p[mp][j] = vfma(q, vset1(krow[j][d + mp * mo]), p[mp][j]);
        }
    }
    const vf scale = vset1(1.0f / sqrtf((float)dk)), ninf = vset1(-INFINITY), zero = vzero();
    vf corr[2];
    int changed = 0;
#pragma GCC unroll 2
    for (int mp = 0; mp < MAPS; mp++) {
        vf mx = m[mp];
#pragma GCC unroll 8
        for (int j = 0; j < KB; j++) {
            /* key j0+j is visible to a lane whose position is >= it (keys past S
             * are past every position) */
            p[mp][j] = vsel_le(vset1((float)(j0 + j)), pos, vmul(p[mp][j], scale), ninf);
            mx = vmax(mx, p[mp][j]);
        }
        changed |= vhmax(vsub(mx, m[mp])) > 0.0f;
        corr[mp] = vexp(vsub(m[mp], mx)); /* ~0 on the first block (m = -inf) */
        m[mp] = mx;
        vf sum = vzero();
#pragma GCC unroll 8
        for (int j = 0; j < KB; j++) {
            p[mp][j] = vsel_le(vset1((float)(j0 + j)), pos, vexp(vsub(p[mp][j], mx)), zero);
            sum = vadd(sum, p[mp][j]);
        }
        l[mp] = vfma(l[mp], corr[mp], sum);
    }
    for (int e = 0; e < dv; e++) {
        vf acc[2];
#pragma GCC unroll 2
        for (int mp = 0; mp < MAPS; mp++) {
            acc[mp] = vload(o + ((int64_t)mp * dv + e) * VL);
            if (changed) acc[mp] = vmul(acc[mp], corr[mp]);
        }
#pragma GCC unroll 8
        for (int j = 0; j < KB; j++) {
            const vf v = vset1(vrow[j][e]);
#pragma GCC unroll 2
            for (int mp = 0; mp < MAPS; mp++) acc[mp] = vfma(p[mp][j], v, acc[mp]);
        }
#pragma GCC unroll 2
        for (int mp = 0; mp < MAPS; mp++) vstore(o + ((int64_t)mp * dv + e) * VL, acc[mp]);
    }
}

/* Flash steps over the keys ja .. jb-1 of the sequence whose keys start at
 * cache row base, kv group g: rows past jb read zrow (and are masked by
 * pos); a cache of another type than f32 is widened into tile, KB rows of
 * m*dk, then KB rows of dv. */
static void flash_keys(const cpu_attn_args *a, const float *qt, float *o, const float *zrow, float *tile, int64_t base,
                       int g, int ja, int jb, vf pos, vf *m, vf *l) {
    const int dk = a->dk, dv = a->dv, kw = a->m * dk;
    float *vtile = tile + (int64_t)KB * kw;
    const float *krow[KB], *vrow[KB];
    for (int j0 = ja; j0 < jb; j0 += KB) {
        for (int j = 0; j < KB; j++) {
            const int64_t key = base + j0 + j;
            krow[j] = j0 + j < jb ? kv_row(a, a->k, (key * a->G + g) * kw, kw, tile + (int64_t)j * kw) : zrow;
            vrow[j] = j0 + j < jb ? kv_row(a, a->v, (key * a->G + g) * dv, dv, vtile + (int64_t)j * dv) : zrow;
        }
        if (a->maps == 2)
            flash_step(a, qt, krow, vrow, pos, j0, m, l, o, 2);
        else
            flash_step(a, qt, krow, vrow, pos, j0, m, l, o, 1);
    }
}

/* the nq <= VL queries t0.. of head h, one sequence at consecutive
 * positions (lanes past nq repeat the last query and are never written) */
static void flash_group(const cpu_attn_args *a, float *scratch, int h, int t0, int nq) {
    const int dk = a->dk, dv = a->dv, maps = a->maps;
    const int g = (int)((int64_t)h * a->G / a->H);
    const int64_t base = a->rows[2 * t0];
    float *qt = scratch;                              /* (maps, dk, VL) */
    float *o = qt + (int64_t)maps * dk * VL;          /* (maps, dv, VL) */
    float *zrow = o + (int64_t)maps * dv * VL;        /* (max(2 dk, dv)) zeros: keys past the last row's */
    float *tile = zrow + (2 * dk > dv ? 2 * dk : dv); /* KB widened K rows (m dk), then KB V rows */
    float posf[VL];
    for (int i = 0; i < VL; i++) {
        const int t = t0 + (i < nq ? i : nq - 1);
        posf[i] = (float)a->rows[2 * t + 1];
        for (int mp = 0; mp < maps; mp++) {
            const float *q = a->q + (((int64_t)t * a->H + h) * maps + mp) * dk;
            for (int d = 0; d < dk; d++) qt[((int64_t)mp * dk + d) * VL + i] = q[d];
        }
    }
    memset(o, 0, sizeof(float) * (size_t)maps * dv * VL);
    memset(zrow, 0, sizeof(float) * (size_t)(2 * dk > dv ? 2 * dk : dv));
    const vf pos = vload(posf);
    vf m[2] = {vset1(-INFINITY), vset1(-INFINITY)}, l[2] = {vzero(), vzero()};
    const int kend = a->rows[2 * (t0 + nq - 1) + 1] + 1; /* keys the last query sees */
    flash_keys(a, qt, o, zrow, tile, base, g, 0, kend, pos, m, l);
    float l0[VL], l1[VL];
    vstore(l0, l[0]);
    vstore(l1, l[1]);
    for (int i = 0; i < nq; i++) {
        const int t = t0 + i;
        float *out = a->o + ((int64_t)t * a->H + h) * dv;
        if (maps == 1) {
            const float inv = 1.0f / l0[i];
            for (int e = 0; e < dv; e++) out[e] = o[(int64_t)e * VL + i] * inv;
        } else {
            const float lam = a->lambda_th ? a->lambda_th[(int64_t)t * a->H + h] : a->lambda;
            const float i1 = 1.0f / l0[i], i2 = lam / l1[i];
            for (int e = 0; e < dv; e++) out[e] = o[(int64_t)e * VL + i] * i1 - o[((int64_t)dv + e) * VL + i] * i2;
        }
    }
}

/* ---- decode -------------------------------------------------------------------- */

/* q (n) . the n cache elements from element e */
VINL float dotv(const float *q, drt_dtype t, const void *c, int64_t e, int n) {
    vf acc = vzero();
    int i = 0;
    for (; i + VL <= n; i += VL) acc = vfma(vload(q + i), vload_w(c, e + i, t), acc);
    float s = vhsum(acc);
    for (; i < n; i++) s += q[i] * load_w1(c, e + i, t);
    return s;
}

/* Keys ja..jb of query t (its sequence's, from its cache base), head h: per
 * map the max, the sum of exp(l - max) and acc[e] = sum_j exp(l_j - max)
 * v[j][e]; out (maps, 2 + dv). */
static void decode_range(const cpu_attn_args *a, float *scratch, int t, int h, int ja, int jb, float *out) {
    const int dk = a->dk, dv = a->dv, maps = a->maps;
    ja += a->rows[2 * t]; /* cache rows */
    jb += a->rows[2 * t];
    const int g = (int)((int64_t)h * a->G / a->H);
    const float scale = 1.0f / sqrtf((float)dk);
    const int n = jb - ja;
    for (int mp = 0; mp < maps; mp++) {
        float *res = out + (int64_t)mp * (2 + dv);
        if (n <= 0) {
            res[0] = -INFINITY;
            res[1] = 0.0f;
            memset(res + 2, 0, sizeof(float) * (size_t)dv);
        }
    }
    if (n <= 0) return;
    float *lg[2] = {scratch, scratch + n};
    for (int mp = 0; mp < maps; mp++) {
        const float *q = a->q + (((int64_t)t * a->H + h) * maps + mp) * dk;
        const int mk = a->m == 2 ? mp : 0;
        float mx = -INFINITY;
        for (int j = 0; j < n; j++) {
            float s = dotv(q, a->kvt, a->k, (((int64_t)(ja + j) * a->G + g) * a->m + mk) * dk, dk) * scale;
            lg[mp][j] = s;
            if (s > mx) mx = s;
        }
        vf sum = vzero(), mv = vset1(mx);
        int j = 0;
        for (; j + VL <= n; j += VL) {
            vf p = vexp(vsub(vload(lg[mp] + j), mv));
            vstore(lg[mp] + j, p);
            sum = vadd(sum, p);
        }
        float ls = vhsum(sum);
        for (; j < n; j++) {
            lg[mp][j] = expf(lg[mp][j] - mx);
            ls += lg[mp][j];
        }
        float *res = out + (int64_t)mp * (2 + dv);
        res[0] = mx;
        res[1] = ls;
    }
    const drt_dtype kvt = a->kvt;
    const int64_t vb = (int64_t)g * dv, vs = (int64_t)a->G * dv; /* elements */
    float *r0 = out + 2, *r1 = out + (2 + dv) + 2;
    int e = 0;
    for (; e + 4 * VL <= dv; e += 4 * VL) {
        vf o0[4], o1[4];
        for (int v = 0; v < 4; v++) o0[v] = o1[v] = vzero();
        for (int j = 0; j < n; j++) {
            const int64_t vj = vb + (int64_t)(ja + j) * vs + e;
            vf p0 = vset1(lg[0][j]), p1 = vset1(maps == 2 ? lg[1][j] : 0.0f);
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) {
                vf x = vload_w(a->v, vj + v * VL, kvt);
                o0[v] = vfma(p0, x, o0[v]);
                if (maps == 2) o1[v] = vfma(p1, x, o1[v]);
            }
        }
        for (int v = 0; v < 4; v++) {
            vstore(r0 + e + v * VL, o0[v]);
            if (maps == 2) vstore(r1 + e + v * VL, o1[v]);
        }
    }
    for (; e < dv; e++) {
        float s0 = 0, s1 = 0;
        for (int j = 0; j < n; j++) {
            const float x = load_w1(a->v, vb + (int64_t)(ja + j) * vs + e, kvt);
            s0 += lg[0][j] * x;
            if (maps == 2) s1 += lg[1][j] * x;
        }
        r0[e] = s0;
        if (maps == 2) r1[e] = s1;
    }
}

/* o[t,h] from n partial results (maps, 2 + dv) each, stride ps floats */
static void combine(const cpu_attn_args *a, int t, int h, const float *part, int n, int64_t ps) {
    const int dv = a->dv;
    float *o = a->o + ((int64_t)t * a->H + h) * dv;
    float w[2][64]; /* per map, per split: exp(max_s - M) / L; n <= 64 */
    for (int mp = 0; mp < a->maps; mp++) {
        float M = -INFINITY, L = 0.0f;
        for (int s = 0; s < n; s++) {
            const float mx = part[s * ps + mp * (2 + dv)];
            if (mx > M) M = mx;
        }
        for (int s = 0; s < n; s++) {
            const float *ps_ = part + s * ps + mp * (2 + dv);
            w[mp][s] = ps_[1] > 0.0f ? expf(ps_[0] - M) : 0.0f;
            L += ps_[1] * w[mp][s];
        }
        for (int s = 0; s < n; s++) w[mp][s] /= L;
    }
    const float lam = a->maps == 1 ? 0.0f : a->lambda_th ? a->lambda_th[(int64_t)t * a->H + h] : a->lambda;
    for (int e = 0; e < dv; e++) {
        float x = 0.0f;
        for (int s = 0; s < n; s++) x += w[0][s] * part[s * ps + 2 + e];
        if (a->maps == 2) {
            float y = 0.0f;
            for (int s = 0; s < n; s++) y += w[1][s] * part[s * ps + (2 + dv) + 2 + e];
            x -= lam * y;
        }
        o[e] = x;
    }
}

/* decode row i of drow, unit u (up to dec_lanes heads of one kv group, in
 * lanes), key range s of n_split */
static void decode_lanes(const cpu_attn_args *a, float *scratch, int i, int u, int s) {
    const int dk = a->dk, dv = a->dv, maps = a->maps, nl = a->dec_lanes, ns = a->n_split;
    const int hpg = a->H / a->G, upg = (hpg + nl - 1) / nl;
    const int g = u / upg, first = (u % upg) * nl, h0 = g * hpg + first;
    const int nh = hpg - first < nl ? hpg - first : nl;
    const int t = a->drow[i];
    const int keys = a->rows[2 * t + 1] + 1, len = (keys + ns - 1) / ns;
    const int ja = s * len < keys ? s * len : keys, jb = ja + len < keys ? ja + len : keys;
    float *qt = scratch;                              /* (maps, dk, VL): lane = head */
    float *o = qt + (int64_t)maps * dk * VL;          /* (maps, dv, VL) */
    float *zrow = o + (int64_t)maps * dv * VL;        /* (max(2 dk, dv)) zeros */
    float *tile = zrow + (2 * dk > dv ? 2 * dk : dv); /* flash_keys' */
    for (int r = 0; r < VL; r++) {
        const int h = h0 + (r < nh ? r : nh - 1);
        for (int mp = 0; mp < maps; mp++) {
            const float *q = a->q + (((int64_t)t * a->H + h) * maps + mp) * dk;
            for (int d = 0; d < dk; d++) qt[((int64_t)mp * dk + d) * VL + r] = q[d];
        }
    }
    memset(o, 0, sizeof(float) * (size_t)maps * dv * VL);
    memset(zrow, 0, sizeof(float) * (size_t)(2 * dk > dv ? 2 * dk : dv));
    vf m[2] = {vset1(-INFINITY), vset1(-INFINITY)}, l[2] = {vzero(), vzero()};
    flash_keys(a, qt, o, zrow, tile, a->rows[2 * t], g, ja, jb, vset1((float)(jb - 1)), m, l);
    float mv[2][VL], lv[2][VL];
    for (int mp = 0; mp < maps; mp++) {
        vstore(mv[mp], m[mp]);
        vstore(lv[mp], l[mp]);
    }
    const int64_t ps = (int64_t)maps * (2 + dv);
    for (int r = 0; r < nh; r++) {
        const int h = h0 + r;
        if (ns == 1) {
            float *out = a->o + ((int64_t)t * a->H + h) * dv;
            if (maps == 1) {
                const float inv = 1.0f / lv[0][r];
                for (int e = 0; e < dv; e++) out[e] = o[(int64_t)e * VL + r] * inv;
            } else {
                const float lam = a->lambda_th ? a->lambda_th[(int64_t)t * a->H + h] : a->lambda;
                const float i1 = 1.0f / lv[0][r], i2 = lam / lv[1][r];
                for (int e = 0; e < dv; e++) out[e] = o[(int64_t)e * VL + r] * i1 - o[((int64_t)dv + e) * VL + r] * i2;
            }
        } else {
            float *p = a->partial + (((int64_t)i * a->H + h) * ns + s) * ps;
            for (int mp = 0; mp < maps; mp++) {
                float *pm = p + (int64_t)mp * (2 + dv);
                pm[0] = mv[mp][r];
                pm[1] = lv[mp][r];
                for (int e = 0; e < dv; e++) pm[2 + e] = o[((int64_t)mp * dv + e) * VL + r];
            }
        }
    }
}

/* decode row i of drow, head h, key range s of n_split */
static void decode_task(const cpu_attn_args *a, float *scratch, int i, int h, int s) {
    const int ns = a->n_split, t = a->drow[i];
    const int64_t ps = (int64_t)a->maps * (2 + a->dv);
    const int keys = a->rows[2 * t + 1] + 1, len = (keys + ns - 1) / ns;
    const int ja = s * len, jb = ja + len < keys ? ja + len : keys;
    if (ns == 1) {
        float *mine = scratch + 2 * (int64_t)a->S;
        decode_range(a, scratch, t, h, ja, jb, mine);
        combine(a, t, h, mine, 1, ps);
    } else {
        decode_range(a, scratch, t, h, ja, jb, a->partial + (((int64_t)i * a->H + h) * ns + s) * ps);
    }
}

void KFN(cpu_attn_combine)(void *args, int ith, int nth) {
    const cpu_attn_args *a = args;
    const int64_t ps = (int64_t)a->maps * (2 + a->dv);
    for (int64_t i = ith; i < (int64_t)a->n_drow * a->H; i += nth)
        combine(a, a->drow[i / a->H], (int)(i % a->H), a->partial + i * a->n_split * ps, a->n_split, ps);
}

/* Tasks from a shared counter: the flash groups' (head, group), last groups
 * first (causal: later groups see more keys, so the longest start early),
 * then the decode rows' (row, head, key range). */
void KFN(cpu_attn)(void *args, int ith, int nth) {
    cpu_attn_args *a = args;
    const int64_t nflash = (int64_t)a->H * a->n_fseg, ntasks = nflash + (int64_t)a->n_drow * a->n_unit * a->n_split;
    (void)nth;
    for (;;) {
        const int64_t task = atomic_fetch_add(&a->next_task, 1);
        if (task >= ntasks) break;
        if (task < nflash) {
            const int gi = a->n_fseg - 1 - (int)(task / a->H), h = (int)(task % a->H);
            flash_group(a, a->scratch[ith], h, a->fseg[2 * gi], a->fseg[2 * gi + 1]);
        } else {
            const int64_t d = task - nflash;
            const int s = (int)(d % a->n_split), u = (int)(d / a->n_split % a->n_unit);
            const int i = (int)(d / a->n_split / a->n_unit);
            if (a->dec_lanes)
                decode_lanes(a, a->scratch[ith], i, u, s);
            else
                decode_task(a, a->scratch[ith], i, u, s);
        }
    }
}

int64_t KFN(cpu_attn_scratch_floats)(const cpu_attn_args *a) {
    /* the flash groups and the decode units in lanes: q^T, o, a zero row, the
     * widened K and V rows of one block */
    const int64_t fl = (int64_t)a->maps * (a->dk + a->dv) * VL + (2 * a->dk > a->dv ? 2 * a->dk : a->dv) +
                       (int64_t)KB * (a->m * a->dk + a->dv);
    const int64_t dec = a->dec_lanes ? fl : 2 * (int64_t)a->S + (int64_t)a->maps * (2 + a->dv);
    return (a->n_drow ? dec : 0) > (a->n_fseg ? fl : 0) ? dec : (a->n_fseg ? fl : 0);
}
