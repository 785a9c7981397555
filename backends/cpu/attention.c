/* Fast CPU DIFF_ATTN and ATTN (DESIGN.md section 3), compiled once per ISA.
 * Reference: backends/ref/attention.c (ref_diff_attn, ref_attn). Both
 * softmaxes are online; no (T,S) matrix is ever formed.
 *
 * A "row" below is one (query, map) pair: DIFF_ATTN has maps = 2 (A1 with
 * q[t,h,0] and k[.,g,0]; A2 with q[t,h,1] and k[.,g,m-1]), ATTN has maps = 1.
 *
 * Prefill (T > DEC_T): flash attention. A task is (head h, QG micro-groups of
 * R rows). For each key block of KB keys the task packs K^T of that block
 * once (maps x dk x KB, in cache) and every micro-group of the task then
 * runs an R x KB logits micro-kernel (q broadcasts times K^T vectors, no
 * horizontal sums), the online max/sum update with a vectorised exp, and an
 * R x dv += P . V micro-kernel on V rows read in place. Napkin math, causal:
 * ~2 * H * maps * (dk + dv) * (T*p0 + T*T/2) flops (the decomposed path does
 * 2x that and writes two (H,T,S) matrices).
 *
 * Decode (T <= DEC_T): per (t, h) two passes over the visible keys: logits
 * by vector dot products, exp, then P . V with dv held in registers. When
 * heads alone leave threads idle, keys are split into n_split ranges whose
 * partial (max, sum, acc) are merged by attn_combine (flash decoding). */
#include <math.h>
#include <string.h>

#include "cpu_fast.h"
#include "simd.h"

#define R 8           /* rows per micro-group */
#define KV 2          /* vectors of keys per block */
#define KB (KV * VL)  /* keys per block */
#define QG 16          /* micro-groups per prefill task */
#define DEC_T 2       /* up to this many queries: the decode path */

typedef struct {
    int t[R];        /* query index of each row */
    const float *q[R];
    int map[R];
} rows_t;

/* ---- prefill ------------------------------------------------------------------ */

/* kt (maps, dk, KB) = K^T of keys j0..j0+KB of group g; keys >= S are zero */
static void pack_kt(float *kt, const cpu_attn_args *a, int g, int j0) {
    const int dk = a->dk, kb = a->S - j0 < KB ? a->S - j0 : KB;
    for (int mp = 0; mp < a->maps; mp++) {
        float *dst = kt + (int64_t)mp * dk * KB;
        const int mk = a->m == 2 ? mp : 0;
        for (int j = 0; j < kb; j++) {
            const float *src = a->k + (((int64_t)(j0 + j) * a->G + g) * a->m + mk) * dk;
            for (int d = 0; d < dk; d++) dst[d * KB + j] = src[d];
        }
        for (int j = kb; j < KB; j++)
            for (int d = 0; d < dk; d++) dst[d * KB + j] = 0.0f;
    }
}

/* One micro-group (rows rw) against key block j0: updates the running max
 * mx[R], sum l[R] and accumulators acc (R, dv). MAPS is a constant. */
VINL void flash_block(const cpu_attn_args *a, const rows_t *rw, const float *kt, int g, int j0, float *mx, float *l,
                      float *acc, float *P, int MAPS) {
    const int dk = a->dk, dv = a->dv;
    const float scale = 1.0f / sqrtf((float)dk);
    vf s[R][KV];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int v = 0; v < KV; v++) s[r][v] = vzero();
    for (int d = 0; d < dk; d++) {
        vf k0[KV], k1[KV];
#pragma GCC unroll 2
        for (int v = 0; v < KV; v++) {
            k0[v] = vload(kt + (int64_t)d * KB + v * VL);
            k1[v] = MAPS == 2 ? vload(kt + ((int64_t)dk + d) * KB + v * VL) : k0[v];
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            vf qb = vset1(rw->q[r][d]);
#pragma GCC unroll 2
            for (int v = 0; v < KV; v++) s[r][v] = vfma(qb, (MAPS == 2 && (r & 1)) ? k1[v] : k0[v], s[r][v]);
        }
    }
    const int p0 = a->S - a->T;
    float corr[R];
    for (int r = 0; r < R; r++) {
        float *pr = P + r * KB;
        for (int v = 0; v < KV; v++) vstore(pr + v * VL, vmul(s[r][v], vset1(scale)));
        /* keys past the row's position (or past S) are masked */
        const int last = p0 + rw->t[r] - j0; /* last visible key in this block; < 0: none */
        const int jm = last + 1 > 0 ? last + 1 : 0;
        for (int j = jm; j < KB; j++) pr[j] = -INFINITY;
        vf m = vload(pr);
        for (int v = 1; v < KV; v++) m = vmax(m, vload(pr + v * VL));
        float bm = vhmax(m), mnew = bm > mx[r] ? bm : mx[r];
        corr[r] = expf(mx[r] - mnew); /* 0 on the first block (mx = -inf) */
        mx[r] = mnew;
        const vf mv = vset1(mnew);
        for (int v = 0; v < KV; v++) vstore(pr + v * VL, vexp(vsub(vload(pr + v * VL), mv)));
        for (int j = jm; j < KB; j++) pr[j] = 0.0f; /* exactly 0, not e^-87 */
        vf sum = vload(pr);
        for (int v = 1; v < KV; v++) sum = vadd(sum, vload(pr + v * VL));
        l[r] = l[r] * corr[r] + vhsum(sum);
    }
    const int kb = a->S - j0 < KB ? a->S - j0 : KB;
    const float *vb = a->v + (int64_t)g * dv;
    const int64_t vs = (int64_t)a->G * dv; /* stride between keys */
    int e = 0;
    for (; e + 2 * VL <= dv; e += 2 * VL) {
        vf o[R][2];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            vf c = vset1(corr[r]);
            o[r][0] = vmul(vload(acc + r * dv + e), c);
            o[r][1] = vmul(vload(acc + r * dv + e + VL), c);
        }
        for (int j = 0; j < kb; j++) {
            const float *vj = vb + (int64_t)(j0 + j) * vs + e;
            vf v0 = vload(vj), v1 = vload(vj + VL);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                vf pb = vset1(P[r * KB + j]);
                o[r][0] = vfma(pb, v0, o[r][0]);
                o[r][1] = vfma(pb, v1, o[r][1]);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            vstore(acc + r * dv + e, o[r][0]);
            vstore(acc + r * dv + e + VL, o[r][1]);
        }
    }
    for (; e < dv; e++)
        for (int r = 0; r < R; r++) {
            float o = acc[r * dv + e] * corr[r];
            for (int j = 0; j < kb; j++) o += P[r * KB + j] * vb[(int64_t)(j0 + j) * vs + e];
            acc[r * dv + e] = o;
        }
}

/* rows of micro-group gi of head h: queries qpg*gi.., maps interleaved;
 * rows past T repeat the last query (computed, never written) */
static void group_rows(const cpu_attn_args *a, int h, int gi, rows_t *rw) {
    const int qpg = R / a->maps;
    for (int r = 0; r < R; r++) {
        int t = gi * qpg + r / a->maps;
        if (t >= a->T) t = a->T - 1;
        rw->t[r] = t;
        rw->map[r] = r % a->maps;
        rw->q[r] = a->q + (((int64_t)t * a->H + h) * a->maps + rw->map[r]) * a->dk;
    }
}

static void write_group(const cpu_attn_args *a, const rows_t *rw, int h, const float *l, const float *acc) {
    const int dv = a->dv;
    for (int r = 0; r < R; r += a->maps) {
        const int t = rw->t[r];
        if (r > 0 && t == rw->t[r - a->maps]) break; /* padding rows */
        float *o = a->o + ((int64_t)t * a->H + h) * dv;
        if (a->maps == 1) {
            const float inv = 1.0f / l[r];
            for (int e = 0; e < dv; e++) o[e] = acc[r * dv + e] * inv;
        } else {
            const float lam = a->lambda_th ? a->lambda_th[(int64_t)t * a->H + h] : a->lambda;
            const float i1 = 1.0f / l[r], i2 = lam / l[r + 1];
            for (int e = 0; e < dv; e++) o[e] = acc[r * dv + e] * i1 - acc[(r + 1) * dv + e] * i2;
        }
    }
}

static void flash_task(const cpu_attn_args *a, float *scratch, int h, int gfirst, int ng) {
    const int dk = a->dk, dv = a->dv, p0 = a->S - a->T;
    const int g = (int)((int64_t)h * a->G / a->H);
    const int qpg = R / a->maps;
    float *kt = scratch;                            /* (maps, dk, KB) */
    float *P = kt + (int64_t)a->maps * dk * KB;     /* (R, KB) */
    float *st = P + R * KB;                         /* per group: mx[R], l[R], acc (R, dv) */
    const int64_t gs = 2 * R + (int64_t)R * dv;
    rows_t rw[QG];
    int kend[QG]; /* keys each group needs: p0 + its last query + 1 */
    int kmax = 0;
    for (int i = 0; i < ng; i++) {
        group_rows(a, h, gfirst + i, &rw[i]);
        float *s = st + i * gs;
        for (int r = 0; r < R; r++) {
            s[r] = -INFINITY;
            s[R + r] = 0.0f;
        }
        memset(s + 2 * R, 0, sizeof(float) * (size_t)R * dv);
        int tl = (gfirst + i + 1) * qpg - 1;
        if (tl >= a->T) tl = a->T - 1;
        kend[i] = p0 + tl + 1;
        if (kend[i] > kmax) kmax = kend[i];
    }
    for (int j0 = 0; j0 < kmax; j0 += KB) {
        pack_kt(kt, a, g, j0);
        for (int i = 0; i < ng; i++) {
            if (j0 >= kend[i]) continue;
            float *s = st + i * gs;
            if (a->maps == 2) flash_block(a, &rw[i], kt, g, j0, s, s + R, s + 2 * R, P, 2);
            else flash_block(a, &rw[i], kt, g, j0, s, s + R, s + 2 * R, P, 1);
        }
    }
    for (int i = 0; i < ng; i++) {
        float *s = st + i * gs;
        write_group(a, &rw[i], h, s + R, s + 2 * R);
    }
}

/* ---- decode -------------------------------------------------------------------- */

VINL float dotv(const float *a, const float *b, int n) {
    vf acc = vzero();
    int i = 0;
    for (; i + VL <= n; i += VL) acc = vfma(vload(a + i), vload(b + i), acc);
    float s = vhsum(acc);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Keys ja..jb of query t, head h: per map the max, the sum of exp(l - max)
 * and acc[e] = sum_j exp(l_j - max) v[j][e]; out (maps, 2 + dv). */
static void decode_range(const cpu_attn_args *a, float *scratch, int t, int h, int ja, int jb, float *out) {
    const int dk = a->dk, dv = a->dv, maps = a->maps;
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
            const float *k = a->k + (((int64_t)(ja + j) * a->G + g) * a->m + mk) * dk;
            float s = dotv(q, k, dk) * scale;
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
    const float *vb = a->v + (int64_t)g * dv;
    const int64_t vs = (int64_t)a->G * dv;
    float *r0 = out + 2, *r1 = out + (2 + dv) + 2;
    int e = 0;
    for (; e + 4 * VL <= dv; e += 4 * VL) {
        vf o0[4], o1[4];
        for (int v = 0; v < 4; v++) o0[v] = o1[v] = vzero();
        for (int j = 0; j < n; j++) {
            const float *vj = vb + (int64_t)(ja + j) * vs + e;
            vf p0 = vset1(lg[0][j]), p1 = vset1(maps == 2 ? lg[1][j] : 0.0f);
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) {
                vf x = vload(vj + v * VL);
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
            const float x = vb[(int64_t)(ja + j) * vs + e];
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

static void decode(const cpu_attn_args *a, int ith, int nth) {
    const int ns = a->n_split, p0 = a->S - a->T;
    const int64_t ps = (int64_t)a->maps * (2 + a->dv);
    float *scratch = a->scratch[ith];
    float *mine = scratch + 2 * (int64_t)a->S; /* ns == 1: one partial */
    const int64_t ntasks = (int64_t)a->T * a->H * ns;
    for (int64_t task = ith; task < ntasks; task += nth) {
        const int s = (int)(task % ns), h = (int)(task / ns % a->H), t = (int)(task / ns / a->H);
        const int keys = p0 + t + 1, len = (keys + ns - 1) / ns;
        const int ja = s * len, jb = ja + len < keys ? ja + len : keys;
        if (ns == 1) {
            decode_range(a, scratch, t, h, ja, jb, mine);
            combine(a, t, h, mine, 1, ps);
        } else {
            decode_range(a, scratch, t, h, ja, jb, a->partial + (((int64_t)t * a->H + h) * ns + s) * ps);
        }
    }
}

void KFN(cpu_attn_combine)(void *args, int ith, int nth) {
    const cpu_attn_args *a = args;
    const int64_t ps = (int64_t)a->maps * (2 + a->dv);
    for (int64_t i = ith; i < (int64_t)a->T * a->H; i += nth)
        combine(a, (int)(i / a->H), (int)(i % a->H), a->partial + i * a->n_split * ps, a->n_split, ps);
}

void KFN(cpu_attn)(void *args, int ith, int nth) {
    const cpu_attn_args *a = args;
    if (a->T <= DEC_T) {
        decode(a, ith, nth);
        return;
    }
    const int qpg = R / a->maps;
    const int ngrp = (a->T + qpg - 1) / qpg, nblk = (ngrp + QG - 1) / QG;
    /* interleaved: causal tasks grow with the query block; each thread
     * gets early and late ones */
    for (int64_t task = ith; task < (int64_t)a->H * nblk; task += nth) {
        const int h = (int)(task % a->H), b = (int)(task / a->H);
        const int g0 = b * QG, ng = ngrp - g0 < QG ? ngrp - g0 : QG;
        flash_task(a, a->scratch[ith], h, g0, ng);
    }
}

int64_t KFN(cpu_attn_scratch_floats)(const cpu_attn_args *a) {
    if (a->T <= DEC_T) return 2 * (int64_t)a->S + (int64_t)a->maps * (2 + a->dv);
    return (int64_t)a->maps * a->dk * KB + R * KB + (int64_t)QG * (2 * R + (int64_t)R * a->dv);
}
