/* Graph construction: leaves, views and op constructors. Every constructor
 * goes through new_node(), which runs the op table's shape check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "drt_error.h"
#include "drt_graph.h"

drt_graph *drt_graph_new(void) {
    return calloc(1, sizeof(drt_graph));
}

void drt_graph_free(drt_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_owned; i++) {
        drt_tensor *t = g->owned[i];
        if (t->buf && !t->view_src) {
            t->buf->be->ops->buf_free(t->buf->be, t->buf);
            free(t->buf);
        }
        free(t);
    }
    free(g->owned);
    free(g->nodes);
    free(g);
}

static int push(drt_tensor ***arr, int *n, int *cap, drt_tensor *t) {
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 64;
        drt_tensor **na = realloc(*arr, (size_t)nc * sizeof *na);
        if (!na) return 0;
        *arr = na;
        *cap = nc;
    }
    (*arr)[(*n)++] = t;
    return 1;
}

static drt_tensor *fail(drt_graph *g, drt_status s) {
    if (g->err == DRT_OK) g->err = s;
    return NULL;
}

static drt_tensor *alloc_tensor(drt_graph *g, drt_dtype type, int nd, const int64_t *ne, const char *name) {
    if (g->err != DRT_OK) return NULL;
    if (nd < 1 || nd > DRT_MAX_DIMS)
        return fail(g, drt_set_error(DRT_ERR_INVALID_ARG, "tensor %s: %d dims (1..4 allowed)", name ? name : "?", nd));
    drt_tensor *t = calloc(1, sizeof *t);
    if (!t || !push(&g->owned, &g->n_owned, &g->cap_owned, t)) {
        free(t);
        return fail(g, drt_set_error(DRT_ERR_OOM, "out of memory building a graph"));
    }
    t->type = type;
    t->nd = nd;
    for (int i = 0; i < nd; i++) {
        if (ne[i] < 0)
            return fail(g, drt_set_error(DRT_ERR_INVALID_ARG, "tensor %s: negative dim %lld", name ? name : "?",
                                         (long long)ne[i]));
        t->ne[i] = ne[i];
    }
    if (name) snprintf(t->name, sizeof t->name, "%s", name);
    return t;
}

drt_tensor *drt_new_tensor(drt_graph *g, drt_dtype type, int nd, const int64_t *ne, const char *name) {
    return alloc_tensor(g, type, nd, ne, name);
}

drt_tensor *drt_new_tensor_1d(drt_graph *g, drt_dtype type, int64_t n0, const char *name) {
    int64_t ne[1] = {n0};
    return alloc_tensor(g, type, 1, ne, name);
}

drt_tensor *drt_new_tensor_2d(drt_graph *g, drt_dtype type, int64_t n0, int64_t n1, const char *name) {
    int64_t ne[2] = {n0, n1};
    return alloc_tensor(g, type, 2, ne, name);
}

drt_tensor *drt_new_tensor_3d(drt_graph *g, drt_dtype type, int64_t n0, int64_t n1, int64_t n2, const char *name) {
    int64_t ne[3] = {n0, n1, n2};
    return alloc_tensor(g, type, 3, ne, name);
}

drt_tensor *drt_new_tensor_4d(drt_graph *g, drt_dtype type, int64_t n0, int64_t n1, int64_t n2, int64_t n3,
                              const char *name) {
    int64_t ne[4] = {n0, n1, n2, n3};
    return alloc_tensor(g, type, 4, ne, name);
}

static drt_tensor *base_of(drt_tensor *t) {
    while (t->view_src) t = t->view_src;
    return t;
}

drt_tensor *drt_view(drt_graph *g, drt_tensor *src, int nd, const int64_t *ne, size_t offs) {
    if (!src) return fail(g, g->err ? g->err : DRT_ERR_INVALID_ARG);
    drt_tensor *t = alloc_tensor(g, src->type, nd, ne, src->name);
    if (!t) return NULL;
    if (offs + drt_nbytes(t) > drt_nbytes(src))
        return fail(g, drt_set_error(DRT_ERR_INVALID_ARG, "view of %s: bytes [%zu, %zu) outside its %zu bytes",
                                     src->name, offs, offs + drt_nbytes(t), drt_nbytes(src)));
    /* views always point at the base so offsets add up once */
    t->view_offs = offs + src->view_offs;
    t->view_src = base_of(src);
    t->flags = src->flags & ~(DRT_TF_OUTPUT);
    return t;
}

/* Appends a node of op `op` with the given sources; shape out_ne. The op
 * table's check decides whether the node is well formed. */
static drt_tensor *new_node(drt_graph *g, drt_op op, drt_dtype type, int nd, const int64_t *ne, drt_tensor *const *src,
                            int nsrc, const float *fp, const int32_t *ip) {
    if (g->err != DRT_OK) return NULL;
    const drt_op_info *info = drt_op_get(op);
    for (int i = 0; i < info->n_src_min; i++)
        if (!src[i]) return fail(g, drt_set_error(DRT_ERR_INVALID_ARG, "%s: input %d is missing", info->name, i));
    drt_tensor *t = alloc_tensor(g, type, nd, ne, info->name);
    if (!t) return NULL;
    t->op = op;
    for (int i = 0; i < nsrc; i++) t->src[i] = src[i];
    if (fp) memcpy(t->fp, fp, sizeof t->fp);
    if (ip) memcpy(t->ip, ip, sizeof t->ip);
    char why[256] = "";
    if (!info->check(t, why, sizeof why)) return fail(g, drt_set_error(DRT_ERR_INVALID_ARG, "%s: %s", info->name, why));
    if (!push(&g->nodes, &g->n_nodes, &g->cap_nodes, t))
        return fail(g, drt_set_error(DRT_ERR_OOM, "out of memory building a graph"));
    return t;
}

#define SRCS(...) ((drt_tensor *const[DRT_MAX_SRC]){__VA_ARGS__})

drt_tensor *drt_embed(drt_graph *g, drt_tensor *ids, drt_tensor *E) {
    if (!ids || !E) return fail(g, g->err ? g->err : DRT_ERR_INVALID_ARG);
    int64_t ne[2] = {ids->ne[0], E->ne[E->nd - 1]};
    return new_node(g, DRT_OP_EMBED, DRT_F32, 2, ne, SRCS(ids, E), 2, NULL, NULL);
}

drt_tensor *drt_rmsnorm(drt_graph *g, drt_tensor *x, drt_tensor *w, float eps) {
    if (!x) return fail(g, g->err ? g->err : DRT_ERR_INVALID_ARG);
    float fp[4] = {eps};
    return new_node(g, DRT_OP_RMSNORM, DRT_F32, x->nd, x->ne, SRCS(x, w), 2, fp, NULL);
}

drt_tensor *drt_matmul_ex(drt_graph *g, drt_tensor *x, drt_tensor *w, int trans_w, float scale) {
    if (!x || !w) return fail(g, g->err ? g->err : DRT_ERR_INVALID_ARG);
    int64_t ne[3];
    int nd = x->nd;
    int64_t n = trans_w ? w->ne[w->nd - 1] : w->ne[w->nd - 2 >= 0 ? w->nd - 2 : 0];
    for (int i = 0; i < nd - 1 && i < 3; i++) ne[i] = x->ne[i];
    if (nd >= 1 && nd <= 3) ne[nd - 1] = n;
    float fp[4] = {scale};
    int32_t ip[4] = {trans_w};
    return new_node(g, DRT_OP_MATMUL, DRT_F32, nd > 3 ? 3 : nd, ne, SRCS(x, w), 2, fp, ip);
}

drt_tensor *drt_matmul(drt_graph *g, drt_tensor *x, drt_tensor *w) {
    return drt_matmul_ex(g, x, w, 0, 1.0f);
}

drt_tensor *drt_new_rows(drt_graph *g, int64_t T) {
    drt_tensor *t = drt_new_tensor_2d(g, DRT_I32, T, 2, "rows");
    if (t) t->flags |= DRT_TF_INPUT;
    return t;
}

drt_tensor *drt_rope(drt_graph *g, drt_tensor *x, drt_tensor *inv_freq, drt_tensor *rows) {
    if (!x) return fail(g, g->err ? g->err : DRT_ERR_INVALID_ARG);
    return new_node(g, DRT_OP_ROPE, DRT_F32, x->nd, x->ne, SRCS(x, inv_freq, NULL, NULL, rows), 5, NULL, NULL);
}

drt_tensor *drt_dual_softmax(drt_graph *g, drt_tensor *s1, drt_tensor *s2, float lambda, drt_tensor *lambda_th) {
    if (!s1) return fail(g, g->err ? g->err : DRT_ERR_INVALID_ARG);
    float fp[4] = {lambda};
    return new_node(g, DRT_OP_DUAL_SOFTMAX, DRT_F32, s1->nd, s1->ne, SRCS(s1, s2, lambda_th), 3, fp, NULL);
}

drt_tensor *drt_diff_attn(drt_graph *g, drt_tensor *q, drt_tensor *k, drt_tensor *v, float lambda,
                          drt_tensor *lambda_th, drt_tensor *rows) {
    if (!q || !v) return fail(g, g->err ? g->err : DRT_ERR_INVALID_ARG);
    int64_t ne[3] = {q->ne[0], q->ne[1], v->ne[v->nd - 1]};
    float fp[4] = {lambda};
    return new_node(g, DRT_OP_DIFF_ATTN, DRT_F32, 3, ne, SRCS(q, k, v, lambda_th, rows), 5, fp, NULL);
}

drt_tensor *drt_attn(drt_graph *g, drt_tensor *q, drt_tensor *k, drt_tensor *v, drt_tensor *rows) {
    if (!q || !v) return fail(g, g->err ? g->err : DRT_ERR_INVALID_ARG);
    int64_t ne[3] = {q->ne[0], q->ne[1], v->ne[v->nd - 1]};
    return new_node(g, DRT_OP_ATTN, DRT_F32, 3, ne, SRCS(q, k, v, NULL, rows), 5, NULL, NULL);
}

drt_tensor *drt_groupnorm(drt_graph *g, drt_tensor *x, drt_tensor *w, float eps, float scale) {
    if (!x) return fail(g, g->err ? g->err : DRT_ERR_INVALID_ARG);
    float fp[4] = {eps, scale};
    return new_node(g, DRT_OP_GROUPNORM, DRT_F32, x->nd, x->ne, SRCS(x, w), 2, fp, NULL);
}

drt_tensor *drt_swiglu(drt_graph *g, drt_tensor *gate, drt_tensor *up) {
    if (!gate) return fail(g, g->err ? g->err : DRT_ERR_INVALID_ARG);
    return new_node(g, DRT_OP_SWIGLU, DRT_F32, gate->nd, gate->ne, SRCS(gate, up), 2, NULL, NULL);
}

drt_tensor *drt_sigmoid(drt_graph *g, drt_tensor *x) {
    if (!x) return fail(g, g->err ? g->err : DRT_ERR_INVALID_ARG);
    return new_node(g, DRT_OP_SIGMOID, DRT_F32, x->nd, x->ne, SRCS(x), 1, NULL, NULL);
}

drt_tensor *drt_add(drt_graph *g, drt_tensor *a, drt_tensor *b) {
    if (!a) return fail(g, g->err ? g->err : DRT_ERR_INVALID_ARG);
    return new_node(g, DRT_OP_ADD, DRT_F32, a->nd, a->ne, SRCS(a, b), 2, NULL, NULL);
}

drt_tensor *drt_kv_write(drt_graph *g, drt_tensor *src, drt_tensor *cache, drt_tensor *rows) {
    if (!cache) return fail(g, g->err ? g->err : DRT_ERR_INVALID_ARG);
    drt_tensor *t = new_node(g, DRT_OP_KV_WRITE, cache->type, cache->nd, cache->ne, SRCS(src, cache, NULL, NULL, rows),
                             5, NULL, NULL);
    if (!t) return NULL;
    /* the result is the cache itself, written in place */
    t->view_src = base_of(cache);
    t->view_offs = cache->view_offs;
    return t;
}

drt_tensor *drt_permute(drt_graph *g, drt_tensor *x, int p0, int p1, int p2, int p3) {
    if (!x) return fail(g, g->err ? g->err : DRT_ERR_INVALID_ARG);
    int32_t ip[4] = {p0, p1, p2, p3};
    int64_t ne[4] = {1, 1, 1, 1};
    for (int a = 0; a < x->nd; a++)
        if (ip[a] >= 0 && ip[a] < x->nd) ne[a] = x->ne[ip[a]];
    return new_node(g, DRT_OP_PERMUTE, x->type, x->nd, ne, SRCS(x), 1, NULL, ip);
}

drt_tensor *drt_diff_attn_decomposed(drt_graph *g, drt_tensor *q, drt_tensor *k, drt_tensor *v, float lambda,
                                     drt_tensor *lambda_th) {
    if (!q || !k || !v) return fail(g, g->err ? g->err : DRT_ERR_INVALID_ARG);
    if (q->nd != 4 || k->nd != 4 || v->nd != 3)
        return fail(g, drt_set_error(DRT_ERR_INVALID_ARG, "decomposed DIFF_ATTN: q must be (T,H,2,dk), k (S,G,m,dk), "
                                                          "v (S,G,dv)"));
    int64_t T = q->ne[0], H = q->ne[1], dk = q->ne[3];
    int64_t S = k->ne[0], G = k->ne[1], m = k->ne[2], dv = v->ne[2];
    float scale = 1.0f / sqrtf((float)dk);
    /* (T,H,2,dk) -> (2,H,T,dk): the two query maps become two batches of H */
    drt_tensor *qp = drt_permute(g, q, 2, 1, 0, 3);
    int64_t qne[3] = {H, T, dk};
    drt_tensor *q1 = drt_view(g, qp, 3, qne, 0);
    drt_tensor *q2 = drt_view(g, qp, 3, qne, (size_t)(H * T * dk) * sizeof(float));
    /* (S,G,m,dk) -> (m,G,S,dk) */
    drt_tensor *kp = drt_permute(g, k, 2, 1, 0, 3);
    int64_t kne[3] = {G, S, dk};
    drt_tensor *k1 = drt_view(g, kp, 3, kne, 0);
    drt_tensor *k2 = drt_view(g, kp, 3, kne, (size_t)((m - 1) * G * S * dk) * sizeof(float));
    drt_tensor *s1 = drt_matmul_ex(g, q1, k1, 0, scale); /* (H,T,S) */
    drt_tensor *s2 = drt_matmul_ex(g, q2, k2, 0, scale);
    drt_tensor *a = drt_dual_softmax(g, s1, s2, lambda, lambda_th);
    drt_tensor *vp = drt_permute(g, v, 1, 0, 2, -1);  /* (G,S,dv) */
    drt_tensor *o = drt_matmul_ex(g, a, vp, 1, 1.0f); /* (H,T,dv) */
    (void)dv;
    return drt_permute(g, o, 1, 0, 2, -1); /* (T,H,dv) */
}
