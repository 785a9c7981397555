/* OpenCL host side of DUAL_SOFTMAX, DIFF_ATTN and ATTN (kernels in
 * attention.cl); shapes as in drt_ref_run_node. DIFF_ATTN and ATTN read
 * each row's keys base .. base + pos from the rows tensor (the kernels read
 * it on the device; the host copy in drt_exec only sizes the launches: up to
 * max_keys keys, the runs of the rows) and size their local-memory tiles
 * from dk, dv. On CPU-class devices (att_vl > 0) they run the barrier-free
 * kernels instead: flash (rows of a kv group in vector lanes) for prefill,
 * decode (a row per work-item, split-K) for a few rows per group; see
 * plan_attn. Every kernel exists per KV cache type (f32, f16, q8_0:
 * attn_kernel picks it from k's type) and reads the caches as stored,
 * widening each element where it is used; k and v go as byte offsets.
 *
 * Checked against the reference (exit status 0: every case within bound):
 *   diffrt conform --backend opencl --op DIFF_ATTN,ATTN,DUAL_SOFTMAX, and --kv-type f16 (q8_0) (PoCL runs it here;
 * ctest conform)
 */
#include <math.h>

#include "drt_error.h"
#include "ocl.h"

/* s1, s2 (H,T,S), lambda fp[0] or lambda_th (T,H) -> a (H,T,S) */
drt_status ocl_dual_softmax(ocl_ctx *x, const drt_tensor *t) {
    const drt_tensor *s1 = t->src[0], *lam = t->src[2];
    int H = (int)s1->ne[0], T = (int)s1->ne[1], S = (int)s1->ne[2];
    ocl_call c;
    ocl_begin(&c, x, OCL_K_DUAL_SOFTMAX);
    ocl_arg_tensor(&c, t);
    ocl_arg_tensor(&c, s1);
    ocl_arg_tensor(&c, t->src[1]);
    ocl_arg_tensor(&c, lam ? lam : s1); /* unread when has_lam = 0 */
    ocl_arg_int(&c, lam != NULL);
    ocl_arg_float(&c, t->fp[0]);
    ocl_arg_int(&c, H);
    ocl_arg_int(&c, T);
    ocl_arg_int(&c, S);
    size_t wg = ocl_row_wg(x, S);
    size_t g[2] = {wg, (size_t)H * T}, l[2] = {wg, 1};
    return ocl_run(&c, 2, g, l);
}

/* local tiles of one work-group of bq rows: qs (bq,nq,dk), ks (m*dk,BK+1),
 * vs (BK,dv), ss (nq,bq,BK) */
static void tile_floats(const ocl_ctx *x, int bq, int nq, int m, int dk, int dv, size_t f[4]) {
    f[0] = (size_t)bq * nq * dk;
    f[1] = (size_t)(x->att_bk + 1) * m * dk; /* transposed, padded */
    f[2] = (size_t)x->att_bk * dv;
    f[3] = (size_t)nq * bq * x->att_bk;
}

/* rows per work-group: the smallest of 1, 2, 4, 8 that holds all T*H/G rows
 * of a group, at most att_bq_max (a decode step without GQA has one row per
 * group: one row of work-items, not eight); returns log2 of it. T is the
 * longest run (rows of several sequences: a block holding several makes a
 * pass per sequence, so decode rows of many get blocks of H/G rows). */
static int rows_log2(const ocl_ctx *x, int T, int H, int G) {
    int rows = T * (H / G), l = 0;
    while ((1 << l) < rows && (2 << l) <= x->att_bq_max) l++;
    return l;
}

size_t ocl_attn_local_bytes(const ocl_ctx *x, const drt_tensor *t) {
    const drt_tensor *q = t->src[0], *k = t->src[1];
    int diff = t->op == DRT_OP_DIFF_ATTN;
    int dk = (int)q->ne[q->nd - 1], dv = (int)t->src[2]->ne[2];
    size_t f[4];
    tile_floats(x, x->att_bq_max, diff ? 2 : 1, diff ? (int)k->ne[2] : 1, dk, dv, f);
    return (f[0] + f[1] + f[2] + f[3]) * sizeof(float);
}

/* Keys per split-S work-group, or S when not splitting: split only when the
 * row blocks leave compute units idle (a decode step), aiming at two
 * work-groups per unit, at most 64 splits of at least 128 keys.
 * DIFFRT_OPENCL_ATTN_SPLIT forces a length (tests use it on any device). */
static int split_len(const ocl_ctx *x, int S, int groups) {
    int klen = S;
    if (x->split_keys > 0) {
        klen = x->split_keys; /* any length: a split may end inside a tile */
    } else if ((cl_uint)groups < x->cu && S > 256) {
        int want = (int)((2 * x->cu + (cl_uint)groups - 1) / (cl_uint)groups);
        klen = (S + want - 1) / want;
        if (klen < 128) klen = 128;
        klen = (klen + x->att_bk - 1) / x->att_bk * x->att_bk; /* whole tiles */
    }
    if ((S + klen - 1) / klen > 64) klen = (S + 63) / 64;
    return klen < S ? klen : S;
}

/* part must hold (nsplit, T*H, nq, 2 + dv) floats; grown (never shrunk) the
 * first time a launch needs more, so steady-state runs allocate nothing */
static drt_status ensure_part(ocl_ctx *x, size_t bytes) {
    if (bytes <= x->part_bytes) return DRT_OK;
    if (x->part) clReleaseMemObject(x->part); /* freed once queued kernels finish */
    x->part_bytes = 0;
    cl_int e;
    x->part = clCreateBuffer(x->ctx, CL_MEM_READ_WRITE, bytes, NULL, &e);
    if (e != CL_SUCCESS) {
        x->part = NULL;
        return drt_set_error(DRT_ERR_OOM, "opencl: %zu bytes of split attention scratch: %s (%d)", bytes,
                             ocl_err_str(e), e);
    }
    x->part_bytes = bytes;
    return DRT_OK;
}

/* merges nsplit partial results in part into the rows of o that are
 * decode rows of dec_t (attn_combine) */
static drt_status combine(ocl_ctx *x, const drt_tensor *o, int dec_t, int nsplit) {
    const int diff = o->op == DRT_OP_DIFF_ATTN, nq = diff ? 2 : 1;
    const drt_tensor *lam = diff ? o->src[3] : NULL;
    const int T = (int)o->ne[0], H = (int)o->ne[1], dv = (int)o->ne[2];
    ocl_call cc;
    ocl_begin(&cc, x, OCL_K_ATTN_COMBINE);
    ocl_arg_tensor(&cc, o);
    ocl_arg_mem(&cc, x->part);
    ocl_arg_tensor(&cc, lam ? lam : o); /* unread when has_lam = 0 */
    ocl_arg_int(&cc, lam != NULL);
    ocl_arg_float(&cc, diff ? o->fp[0] : 0.0f);
    ocl_arg_tensor(&cc, o->src[DRT_SRC_ROWS]);
    ocl_arg_int(&cc, T * H);
    ocl_arg_int(&cc, H);
    ocl_arg_int(&cc, dv);
    ocl_arg_int(&cc, nq);
    ocl_arg_int(&cc, nsplit);
    ocl_arg_int(&cc, dec_t);
    size_t g2[2] = {(size_t)dv, (size_t)T * H}, l2[2] = {64, 1};
    return ocl_run(&cc, 2, g2, l2);
}

/* The kernel family for an attention node of one sequence: the local-memory
 * kernels (attention_body), or on CPU-class devices (att_vl > 0) flash with
 * rows in vector lanes when a kv group has more than 4 rows and its
 * work-items (VL rows each) cover the compute units, else decode (one row
 * per work-item, split-K; dk and dv whole vectors): a decode step under
 * MQA/GQA (T = 1, H/G rows in one flash item) runs H items, split further
 * when S is long. */
typedef enum { ATT_LOCAL, ATT_FLASH, ATT_DECODE } att_path;

static int dec_ok(const ocl_ctx *x, int dk, int dv) {
    return dk % x->att_vl == 0 && dv % x->att_vl == 0 && dk <= 256;
}

static att_path pick_path(const ocl_ctx *x, int T, int H, int G, int dk, int dv) {
    if (!x->att_vl) return ATT_LOCAL;
    int rows = T * (H / G), items = (rows + x->att_vl - 1) / x->att_vl * G;
    int dok = dec_ok(x, dk, dv);
    if (rows > 4 && ((cl_uint)items >= x->cu || !dok)) return ATT_FLASH;
    if (dok) return ATT_DECODE;
    return rows > 4 ? ATT_FLASH : ATT_LOCAL;
}

/* In a forward of several sequences, the runs of at most this many rows are
 * decode rows on CPU-class devices (as the cpu backend's CPU_ATTN_DEC_T) */
#define DEC_T 2

/* What runs a node for ex's rows. One sequence (one run): pick_path's
 * family over all rows. Several: the local kernels with blocks sized by the
 * longest run; on CPU-class devices, decode over the rows of runs of at most
 * DEC_T and flash over the others, one launch each (each kernel leaves the
 * other's rows, dec_row in attention.cl), or flash over all when decode
 * cannot take dk, dv (its passes then serve one sequence each). */
typedef struct {
    int local, lb;     /* the local kernels, 1 << lb rows per work-group */
    int flash, decode; /* the CPU-class launches */
    int dec_t;         /* their split of the rows (dec_row) */
    int n_dec;         /* the rows decode takes */
} att_plan;

static att_plan plan_attn(const ocl_ctx *x, const drt_tensor *t, const drt_exec *ex) {
    const drt_tensor *q = t->src[0], *k = t->src[1];
    const int T = (int)q->ne[0], H = (int)q->ne[1], G = (int)k->ne[1];
    const int dk = (int)q->ne[q->nd - 1], dv = (int)t->src[2]->ne[2];
    const int32_t *r = ex->rows;
    int runs = 0, longest = 0, n_dec = 0;
    for (int t0 = 0; r && t0 < T;) {
        int t1 = t0 + 1; /* the run is t0 .. t1-1 */
        while (t1 < T && r[2 * t1] == r[2 * t0] && r[2 * t1 + 1] == r[2 * t1 - 1] + 1) t1++;
        runs++;
        if (t1 - t0 > longest) longest = t1 - t0;
        if (t1 - t0 <= DEC_T) n_dec += t1 - t0;
        t0 = t1;
    }
    att_plan p = {0};
    if (runs <= 1) {
        att_path path = pick_path(x, T, H, G, dk, dv);
        p.local = path == ATT_LOCAL;
        p.lb = rows_log2(x, T, H, G);
        p.flash = path == ATT_FLASH;
        p.decode = path == ATT_DECODE;
        p.dec_t = p.n_dec = p.decode ? T : 0;
    } else if (!x->att_vl) {
        p.local = 1;
        p.lb = rows_log2(x, longest, H, G);
    } else if (!dec_ok(x, dk, dv)) {
        p.flash = 1; /* dec_t 0: every row flash's */
    } else {
        p.flash = n_dec < T;
        p.decode = n_dec > 0;
        p.dec_t = !p.flash ? T : !p.decode ? 0 : DEC_T;
        p.n_dec = n_dec;
    }
    return p;
}

/* The kernel of f32 attention kernel id (OCL_K_DIFF_ATTN_Q1 .. OCL_K_ATTN_Q8,
 * OCL_K_DIFF_ATTN_FLASH .. OCL_K_ATTN_DECODE) for KV caches of type kvt:
 * the typed kernels are in the same order from OCL_K_DIFF_ATTN_Q1_F16 and
 * OCL_K_DIFF_ATTN_Q1_Q8_0 on (ocl.h) */
_Static_assert(OCL_K_ATTN_Q8 - OCL_K_DIFF_ATTN_Q1 == 7 && OCL_K_ATTN_DECODE - OCL_K_DIFF_ATTN_FLASH == 3 &&
                   OCL_K_ATTN_DECODE_F16 - OCL_K_DIFF_ATTN_Q1_F16 == 11 &&
                   OCL_K_ATTN_DECODE_Q8_0 - OCL_K_DIFF_ATTN_Q1_Q8_0 == 11,
               "attention kernel ids out of order");
static ocl_kernel_id attn_kernel(ocl_kernel_id id, drt_dtype kvt) {
    if (kvt == DRT_F32) return id;
    int i = id <= OCL_K_ATTN_Q8 ? (int)(id - OCL_K_DIFF_ATTN_Q1) : 8 + (int)(id - OCL_K_DIFF_ATTN_FLASH);
    return (ocl_kernel_id)((kvt == DRT_F16 ? OCL_K_DIFF_ATTN_Q1_F16 : OCL_K_DIFF_ATTN_Q1_Q8_0) + i);
}

/* Starts a call of attention kernel id (the f32 one: the KV type of k picks
 * its own) for node t with every argument up to scale: dec_t (dec_row) for
 * the CPU-class kernels, none when < 0. k and v go as byte offsets. */
static void begin_attn(ocl_call *c, ocl_ctx *x, ocl_kernel_id id, const drt_tensor *t, int dec_t) {
    const int diff = t->op == DRT_OP_DIFF_ATTN;
    const drt_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2], *lam = diff ? t->src[3] : NULL;
    const int dk = (int)q->ne[q->nd - 1];
    ocl_begin(c, x, attn_kernel(id, k->type));
    ocl_arg_tensor(c, t);
    ocl_arg_tensor(c, q);
    ocl_arg_mem(c, ocl_mem(k));
    ocl_arg_ulong(c, k->offs);
    ocl_arg_mem(c, ocl_mem(v));
    ocl_arg_ulong(c, v->offs);
    if (diff) {
        ocl_arg_tensor(c, lam ? lam : q); /* unread when has_lam = 0 */
        ocl_arg_int(c, lam != NULL);
        ocl_arg_float(c, t->fp[0]);
    }
    ocl_arg_tensor(c, t->src[DRT_SRC_ROWS]);
    ocl_arg_int(c, (int)q->ne[0]);
    ocl_arg_int(c, (int)q->ne[1]);
    ocl_arg_int(c, (int)k->ne[1]);
    if (diff) ocl_arg_int(c, (int)k->ne[2]);
    ocl_arg_int(c, dk);
    ocl_arg_int(c, (int)v->ne[2]);
    if (dec_t >= 0) ocl_arg_int(c, dec_t);
    ocl_arg_float(c, (float)(1.0 / sqrt((double)dk)));
}

/* flash: arguments up to scale are set; one item per VL rows of a group,
 * launched in chunks of items whose scratch stays within FLASH_SCRATCH
 * (and never fewer than 4 work-items per compute unit per launch) */
#define FLASH_SCRATCH ((size_t)16 << 20)
static drt_status launch_flash(ocl_call *c, ocl_ctx *x, int nq, int dk, int dv, int T, int H, int G) {
    size_t nb = (size_t)(T * (H / G) + x->att_vl - 1) / (size_t)x->att_vl;
    size_t per = (size_t)G * nq * (size_t)(dk + dv) * x->att_vl * sizeof(float);
    size_t cn = FLASH_SCRATCH / per, least = (4 * (size_t)x->cu + G - 1) / G;
    if (cn < least) cn = least;
    if (cn > nb) cn = nb;
    drt_status s = ensure_part(x, cn * per);
    if (s != DRT_OK) return s;
    cl_uint ia = c->n; /* ib0, then scr */
    for (size_t ib0 = 0; ib0 < nb && s == DRT_OK; ib0 += cn) {
        c->n = ia;
        ocl_arg_int(c, (int)ib0);
        ocl_arg_mem(c, x->part);
        size_t g[2] = {nb - ib0 < cn ? nb - ib0 : cn, (size_t)G}, l[2] = {1, 1};
        s = ocl_run(c, 2, g, l);
    }
    return s;
}

/* decode: arguments up to scale are set; one item per (split, row), keys
 * split by the longest row's S, n_dec rows of the node's T to do */
static drt_status launch_decode(ocl_call *c, ocl_ctx *x, const drt_tensor *o, int nq, int dv, int T, int H, int S,
                                int n_dec, int dec_t) {
    int klen = split_len(x, S, n_dec * H);
    int nsplit = (S + klen - 1) / klen;
    if (nsplit > 1) {
        drt_status s = ensure_part(x, (size_t)nsplit * T * H * nq * (2 + dv) * sizeof(float));
        if (s != DRT_OK) return s;
    }
    ocl_arg_int(c, klen);
    ocl_arg_mem(c, nsplit > 1 ? x->part : ocl_mem(o));
    size_t g[2] = {(size_t)nsplit, (size_t)T * H}, l[2] = {1, 1};
    drt_status s = ocl_run(c, 2, g, l);
    if (s != DRT_OK || nsplit == 1) return s;
    return combine(x, o, dec_t, nsplit);
}

/* Completes the arguments of an attention kernel (klen, part, the four local
 * tiles) and launches ATT_NT x bq work-groups, nsplit along dimension 0;
 * then merges the splits into o when there are several. S: the most keys
 * a row sees. */
static drt_status launch(ocl_call *c, ocl_ctx *x, const drt_tensor *o, int nq, int m, int dk, int dv, int T, int H,
                         int G, int S, int bq) {
    int rows = T * (H / G);
    int klen = split_len(x, S, G * ((rows + bq - 1) / bq));
    int nsplit = (S + klen - 1) / klen;
    if (nsplit > 1) {
        drt_status s = ensure_part(x, (size_t)nsplit * T * H * nq * (2 + dv) * sizeof(float));
        if (s != DRT_OK) return s;
    }
    ocl_arg_int(c, klen);
    ocl_arg_mem(c, nsplit > 1 ? x->part : ocl_mem(o)); /* unused when nsplit = 1 */
    size_t f[4];
    tile_floats(x, bq, nq, m, dk, dv, f);
    for (int i = 0; i < 4; i++) ocl_arg_local(c, f[i] * sizeof(float));
    size_t g[3] = {(size_t)x->att_nt * nsplit, (size_t)rows, (size_t)G};
    size_t l[3] = {(size_t)x->att_nt, (size_t)bq, 1};
    drt_status s = ocl_run(c, 3, g, l);
    if (s != DRT_OK || nsplit == 1) return s;
    return combine(x, o, T, nsplit);
}

/* DIFF_ATTN: q (T,H,2,dk), k (S_cap,G,m,dk), v (S_cap,G,dv), lambda fp[0]
 * or lambda_th (T,H); ATTN: q (T,H,dk), k (S_cap,G,dk), v (S_cap,G,dv);
 * rows (T,2) -> o (T,H,dv), row t over the keys base .. base + pos. With
 * decode and flash both (plan_attn), decode and its merge go first: flash
 * takes the part buffer as its scratch after them. */
static drt_status run_attn(ocl_ctx *x, const drt_tensor *t, const drt_exec *ex) {
    const int diff = t->op == DRT_OP_DIFF_ATTN, nq = diff ? 2 : 1;
    const drt_tensor *q = t->src[0], *k = t->src[1];
    const int T = (int)q->ne[0], H = (int)q->ne[1], G = (int)k->ne[1];
    const int m = diff ? (int)k->ne[2] : 1, dk = (int)q->ne[q->nd - 1], dv = (int)t->src[2]->ne[2];
    const int S = ex->max_keys > 0 ? ex->max_keys : 1;
    const att_plan p = plan_attn(x, t, ex);
    ocl_call c;
    if (p.local) {
        ocl_kernel_id id = (ocl_kernel_id)((diff ? OCL_K_DIFF_ATTN_Q1 : OCL_K_ATTN_Q1) + p.lb);
        begin_attn(&c, x, id, t, -1);
        return launch(&c, x, t, nq, m, dk, dv, T, H, G, S, 1 << p.lb);
    }
    drt_status s = DRT_OK;
    if (p.decode) {
        begin_attn(&c, x, diff ? OCL_K_DIFF_ATTN_DECODE : OCL_K_ATTN_DECODE, t, p.dec_t);
        s = launch_decode(&c, x, t, nq, dv, T, H, S, p.n_dec, p.dec_t);
    }
    if (s == DRT_OK && p.flash) {
        begin_attn(&c, x, diff ? OCL_K_DIFF_ATTN_FLASH : OCL_K_ATTN_FLASH, t, p.dec_t);
        s = launch_flash(&c, x, nq, dk, dv, T, H, G);
    }
    return s;
}

drt_status ocl_diff_attn(ocl_ctx *x, const drt_tensor *t, const drt_exec *ex) {
    return run_attn(x, t, ex);
}

drt_status ocl_attn(ocl_ctx *x, const drt_tensor *t, const drt_exec *ex) {
    return run_attn(x, t, ex);
}

/* the family of one sequence's rows (kernel_variant has no rows), and the
 * KV cache type of f16 and q8_0 caches */
const char *ocl_attn_variant(const ocl_ctx *x, const drt_tensor *t) {
    static const char *const names[3][2][4] = {
        {{"attn local q1", "attn local q2", "attn local q4", "attn local q8"},
         {"diff_attn local q1", "diff_attn local q2", "diff_attn local q4", "diff_attn local q8"}},
        {{"attn local q1 kv f16", "attn local q2 kv f16", "attn local q4 kv f16", "attn local q8 kv f16"},
         {"diff_attn local q1 kv f16", "diff_attn local q2 kv f16", "diff_attn local q4 kv f16",
          "diff_attn local q8 kv f16"}},
        {{"attn local q1 kv q8_0", "attn local q2 kv q8_0", "attn local q4 kv q8_0", "attn local q8 kv q8_0"},
         {"diff_attn local q1 kv q8_0", "diff_attn local q2 kv q8_0", "diff_attn local q4 kv q8_0",
          "diff_attn local q8 kv q8_0"}}};
    static const char *const flash[3][2][2] = {
        {{"attn flash rows-in-lanes v8", "attn flash rows-in-lanes v16"},
         {"diff_attn flash rows-in-lanes v8", "diff_attn flash rows-in-lanes v16"}},
        {{"attn flash rows-in-lanes v8 kv f16", "attn flash rows-in-lanes v16 kv f16"},
         {"diff_attn flash rows-in-lanes v8 kv f16", "diff_attn flash rows-in-lanes v16 kv f16"}},
        {{"attn flash rows-in-lanes v8 kv q8_0", "attn flash rows-in-lanes v16 kv q8_0"},
         {"diff_attn flash rows-in-lanes v8 kv q8_0", "diff_attn flash rows-in-lanes v16 kv q8_0"}}};
    static const char *const dec[3][2][2] = {
        {{"attn decode row/item split-k v8", "attn decode row/item split-k v16"},
         {"diff_attn decode row/item split-k v8", "diff_attn decode row/item split-k v16"}},
        {{"attn decode row/item split-k v8 kv f16", "attn decode row/item split-k v16 kv f16"},
         {"diff_attn decode row/item split-k v8 kv f16", "diff_attn decode row/item split-k v16 kv f16"}},
        {{"attn decode row/item split-k v8 kv q8_0", "attn decode row/item split-k v16 kv q8_0"},
         {"diff_attn decode row/item split-k v8 kv q8_0", "diff_attn decode row/item split-k v16 kv q8_0"}}};
    const drt_tensor *q = t->src[0], *k = t->src[1];
    int diff = t->op == DRT_OP_DIFF_ATTN, ty = k->type == DRT_F16 ? 1 : k->type == DRT_Q8_0 ? 2 : 0;
    int T = (int)q->ne[0], H = (int)q->ne[1], G = (int)k->ne[1];
    int dk = (int)q->ne[q->nd - 1], dv = (int)t->src[2]->ne[2];
    att_path p = pick_path(x, T, H, G, dk, dv);
    if (p == ATT_FLASH) return flash[ty][diff][x->att_vl == 16];
    if (p == ATT_DECODE) return dec[ty][diff][x->att_vl == 16];
    return names[ty][diff][rows_log2(x, T, H, G)];
}
