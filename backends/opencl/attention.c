/* OpenCL host side of DUAL_SOFTMAX, DIFF_ATTN and ATTN (kernels in
 * attention.cl); shapes as in drt_ref_run_node. DIFF_ATTN and ATTN read
 * S = p0 + T rows of the cache and size their local-memory tiles from dk, dv.
 * On CPU-class devices (att_vl > 0) they run the barrier-free kernels
 * instead: flash (rows of a kv group in vector lanes) for prefill, decode
 * (a row per work-item, split-K) for a few rows per group; see pick_path. */
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
 * group: one row of work-items, not eight); returns log2 of it */
static int rows_log2(const ocl_ctx *x, int T, int H, int G) {
    int rows = T * (H / G), l = 0;
    while ((1 << l) < rows && (2 << l) <= x->att_bq_max)
        l++;
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
        return drt_set_error(DRT_ERR_OOM, "opencl: %zu bytes of split attention scratch: %s (%d)",
                             bytes, ocl_err_str(e), e);
    }
    x->part_bytes = bytes;
    return DRT_OK;
}

/* merges nsplit partial results in part into o (attn_combine) */
static drt_status combine(ocl_ctx *x, const drt_tensor *o, const drt_tensor *lam, float lambda,
                          int nq, int dv, int T, int H, int nsplit) {
    ocl_call cc;
    ocl_begin(&cc, x, OCL_K_ATTN_COMBINE);
    ocl_arg_tensor(&cc, o);
    ocl_arg_mem(&cc, x->part);
    ocl_arg_tensor(&cc, lam ? lam : o); /* unread when has_lam = 0 */
    ocl_arg_int(&cc, lam != NULL);
    ocl_arg_float(&cc, lambda);
    ocl_arg_int(&cc, T * H);
    ocl_arg_int(&cc, H);
    ocl_arg_int(&cc, dv);
    ocl_arg_int(&cc, nq);
    ocl_arg_int(&cc, nsplit);
    size_t g2[2] = {(size_t)dv, (size_t)T * H}, l2[2] = {64, 1};
    return ocl_run(&cc, 2, g2, l2);
}

/* The kernel family for an attention node: the local-memory kernels
 * (attention_body), or on CPU-class devices (att_vl > 0) flash with rows in
 * vector lanes when a kv group has more than 4 rows and its work-items (VL
 * rows each) cover the compute units, else decode (one row per work-item,
 * split-K; dk and dv whole vectors): a decode step under MQA/GQA (T = 1,
 * H/G rows in one flash item) runs H items, split further when S is long. */
typedef enum { ATT_LOCAL, ATT_FLASH, ATT_DECODE } att_path;

static att_path pick_path(const ocl_ctx *x, int T, int H, int G, int dk, int dv) {
    if (!x->att_vl) return ATT_LOCAL;
    int rows = T * (H / G), items = (rows + x->att_vl - 1) / x->att_vl * G;
    int dec_ok = dk % x->att_vl == 0 && dv % x->att_vl == 0 && dk <= 256;
    if (rows > 4 && ((cl_uint)items >= x->cu || !dec_ok)) return ATT_FLASH;
    if (dec_ok) return ATT_DECODE;
    return rows > 4 ? ATT_FLASH : ATT_LOCAL;
}

/* flash: arguments up to scale are set; one item per VL rows of a group,
 * launched in chunks of items whose scratch stays within FLASH_SCRATCH
 * (and never fewer than 4 work-items per compute unit per launch) */
#define FLASH_SCRATCH ((size_t)16 << 20)
static drt_status launch_flash(ocl_call *c, ocl_ctx *x, int nq, int dk, int dv, int T, int H,
                               int G) {
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

/* decode: arguments up to scale are set; one item per (split, row) */
static drt_status launch_decode(ocl_call *c, ocl_ctx *x, const drt_tensor *o,
                                const drt_tensor *lam, float lambda, int nq, int dv, int T, int H,
                                int p0) {
    int S = p0 + T;
    int klen = split_len(x, S, T * H);
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
    return combine(x, o, lam, lambda, nq, dv, T, H, nsplit);
}

/* Completes the arguments of an attention kernel (klen, part, the four local
 * tiles) and launches ATT_NT x bq work-groups, nsplit along dimension 0;
 * then merges the splits into o when there are several. lam is NULL for
 * ATTN and for a scalar lambda. */
static drt_status launch(ocl_call *c, ocl_ctx *x, const drt_tensor *o, const drt_tensor *lam,
                         float lambda, int nq, int m, int dk, int dv, int T, int H, int G, int p0,
                         int bq) {
    int rows = T * (H / G), S = p0 + T;
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
    for (int i = 0; i < 4; i++)
        ocl_arg_local(c, f[i] * sizeof(float));
    size_t g[3] = {(size_t)x->att_nt * nsplit, (size_t)rows, (size_t)G};
    size_t l[3] = {(size_t)x->att_nt, (size_t)bq, 1};
    drt_status s = ocl_run(c, 3, g, l);
    if (s != DRT_OK || nsplit == 1) return s;
    return combine(x, o, lam, lambda, nq, dv, T, H, nsplit);
}

/* q (T,H,2,dk), k (S_cap,G,m,dk), v (S_cap,G,dv), lambda fp[0] or
 * lambda_th (T,H) -> o (T,H,dv); keys 0..p0+T-1 */
drt_status ocl_diff_attn(ocl_ctx *x, const drt_tensor *t, const drt_exec *ex) {
    const drt_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2], *lam = t->src[3];
    int T = (int)q->ne[0], H = (int)q->ne[1], dk = (int)q->ne[3];
    int G = (int)k->ne[1], m = (int)k->ne[2], dv = (int)v->ne[2];
    int lb = rows_log2(x, T, H, G);
    att_path path = pick_path(x, T, H, G, dk, dv);
    ocl_call c;
    ocl_begin(&c, x,
              path == ATT_FLASH    ? OCL_K_DIFF_ATTN_FLASH
              : path == ATT_DECODE ? OCL_K_DIFF_ATTN_DECODE
                                   : (ocl_kernel_id)(OCL_K_DIFF_ATTN_Q1 + lb));
    ocl_arg_tensor(&c, t);
    ocl_arg_tensor(&c, q);
    ocl_arg_tensor(&c, k);
    ocl_arg_tensor(&c, v);
    ocl_arg_tensor(&c, lam ? lam : q); /* unread when has_lam = 0 */
    ocl_arg_int(&c, lam != NULL);
    ocl_arg_float(&c, t->fp[0]);
    ocl_arg_int(&c, T);
    ocl_arg_int(&c, H);
    ocl_arg_int(&c, G);
    ocl_arg_int(&c, m);
    ocl_arg_int(&c, dk);
    ocl_arg_int(&c, dv);
    ocl_arg_int(&c, ex->p0);
    ocl_arg_float(&c, (float)(1.0 / sqrt((double)dk)));
    if (path == ATT_FLASH) return launch_flash(&c, x, 2, dk, dv, T, H, G);
    if (path == ATT_DECODE) return launch_decode(&c, x, t, lam, t->fp[0], 2, dv, T, H, ex->p0);
    return launch(&c, x, t, lam, t->fp[0], 2, m, dk, dv, T, H, G, ex->p0, 1 << lb);
}

/* q (T,H,dk), k (S_cap,G,dk), v (S_cap,G,dv) -> o (T,H,dv) */
drt_status ocl_attn(ocl_ctx *x, const drt_tensor *t, const drt_exec *ex) {
    const drt_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2];
    int T = (int)q->ne[0], H = (int)q->ne[1], dk = (int)q->ne[2];
    int G = (int)k->ne[1], dv = (int)v->ne[2];
    int lb = rows_log2(x, T, H, G);
    att_path path = pick_path(x, T, H, G, dk, dv);
    ocl_call c;
    ocl_begin(&c, x,
              path == ATT_FLASH    ? OCL_K_ATTN_FLASH
              : path == ATT_DECODE ? OCL_K_ATTN_DECODE
                                   : (ocl_kernel_id)(OCL_K_ATTN_Q1 + lb));
    ocl_arg_tensor(&c, t);
    ocl_arg_tensor(&c, q);
    ocl_arg_tensor(&c, k);
    ocl_arg_tensor(&c, v);
    ocl_arg_int(&c, T);
    ocl_arg_int(&c, H);
    ocl_arg_int(&c, G);
    ocl_arg_int(&c, dk);
    ocl_arg_int(&c, dv);
    ocl_arg_int(&c, ex->p0);
    ocl_arg_float(&c, (float)(1.0 / sqrt((double)dk)));
    if (path == ATT_FLASH) return launch_flash(&c, x, 1, dk, dv, T, H, G);
    if (path == ATT_DECODE) return launch_decode(&c, x, t, NULL, 0.0f, 1, dv, T, H, ex->p0);
    return launch(&c, x, t, NULL, 0.0f, 1, 1, dk, dv, T, H, G, ex->p0, 1 << lb);
}

const char *ocl_attn_variant(const ocl_ctx *x, const drt_tensor *t) {
    static const char *const names[2][4] = {
        {"attn local q1", "attn local q2", "attn local q4", "attn local q8"},
        {"diff_attn local q1", "diff_attn local q2", "diff_attn local q4", "diff_attn local q8"}};
    static const char *const flash[2][2] = {{"attn flash rows-in-lanes v8", "attn flash rows-in-lanes v16"},
                                            {"diff_attn flash rows-in-lanes v8",
                                             "diff_attn flash rows-in-lanes v16"}};
    static const char *const dec[2][2] = {{"attn decode row/item split-k v8", "attn decode row/item split-k v16"},
                                          {"diff_attn decode row/item split-k v8",
                                           "diff_attn decode row/item split-k v16"}};
    const drt_tensor *q = t->src[0], *k = t->src[1];
    int diff = t->op == DRT_OP_DIFF_ATTN;
    int T = (int)q->ne[0], H = (int)q->ne[1], G = (int)k->ne[1];
    int dk = (int)q->ne[q->nd - 1], dv = (int)t->src[2]->ne[2];
    att_path p = pick_path(x, T, H, G, dk, dv);
    if (p == ATT_FLASH) return flash[diff][x->att_vl == 16];
    if (p == ATT_DECODE) return dec[diff][x->att_vl == 16];
    return names[diff][rows_log2(x, T, H, G)];
}
