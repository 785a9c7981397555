/* The dispatcher: binds a graph to a backend once (allocation, routing,
 * host mirrors for fallbacks) and then runs it with no allocation.
 *
 * A node the backend does not support runs on the CPU reference: its inputs
 * are downloaded into host mirrors, the reference computes, the result is
 * uploaded back. Every such node is counted per op, so a fallback is never
 * silent (DESIGN.md section 5). */
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "drt_graph.h"

typedef struct {
    const drt_tensor *t;
    void *host; /* nbytes(t) */
} mirror;

struct drt_plan {
    drt_graph *g;
    drt_backend *be;
    unsigned char *fallback; /* per node */
    int fallback_nodes[DRT_OP_COUNT];
    int64_t fallback_runs[DRT_OP_COUNT];
    mirror *mirrors;
    int n_mirrors;
};

static void *mirror_of(drt_plan *p, const drt_tensor *t) {
    for (int i = 0; i < p->n_mirrors; i++)
        if (p->mirrors[i].t == t) return p->mirrors[i].host;
    return NULL;
}

static drt_status add_mirror(drt_plan *p, const drt_tensor *t) {
    if (!t || mirror_of(p, t) || drt_host_ptr(t)) return DRT_OK;
    mirror *nm = realloc(p->mirrors, (size_t)(p->n_mirrors + 1) * sizeof *nm);
    if (!nm) return drt_set_error(DRT_ERR_OOM, "out of memory");
    p->mirrors = nm;
    void *h = malloc(drt_nbytes(t) ? drt_nbytes(t) : 1);
    if (!h) return drt_set_error(DRT_ERR_OOM, "out of memory for a host mirror of %s", t->name);
    p->mirrors[p->n_mirrors++] = (mirror){t, h};
    return DRT_OK;
}

/* host address of t for the CPU reference: the tensor itself when its
 * buffer is host-visible, else its mirror */
static void *host_of(drt_plan *p, const drt_tensor *t) {
    if (!t) return NULL;
    void *h = drt_host_ptr(t);
    return h ? h : mirror_of(p, t);
}

void drt_plan_free(drt_plan *p) {
    if (!p) return;
    for (int i = 0; i < p->n_mirrors; i++) free(p->mirrors[i].host);
    free(p->mirrors);
    free(p->fallback);
    free(p);
}

drt_status drt_plan_create(drt_graph *g, drt_backend *be, drt_plan **out) {
    *out = NULL;
    if (g->err != DRT_OK) return drt_set_error(g->err, "graph has a construction error");
    drt_plan *p = calloc(1, sizeof *p);
    if (!p) return drt_set_error(DRT_ERR_OOM, "out of memory");
    p->g = g;
    p->be = be;
    p->fallback = calloc((size_t)g->n_nodes + 1, 1);
    drt_status s = p->fallback ? DRT_OK : drt_set_error(DRT_ERR_OOM, "out of memory");
    if (s == DRT_OK) s = drt_alloc_tensors(be, g->owned, g->n_owned);
    for (int i = 0; s == DRT_OK && i < g->n_nodes; i++) {
        drt_tensor *t = g->nodes[i];
        for (int j = 0; j < DRT_MAX_SRC; j++)
            if (t->src[j] && !t->src[j]->buf)
                s = drt_set_error(DRT_ERR_INVALID_ARG, "%s: input %s has no storage",
                                  drt_op_name(t->op), t->src[j]->name);
        if (s != DRT_OK) break;
        if (be->ops->supports(be, t)) continue;
        p->fallback[i] = 1;
        p->fallback_nodes[t->op]++;
        for (int j = 0; s == DRT_OK && j < DRT_MAX_SRC; j++) s = add_mirror(p, t->src[j]);
        /* an in-place node (KV_WRITE) computes into its aliased input's mirror */
        if (s == DRT_OK && !(t->view_src && t->op == DRT_OP_KV_WRITE)) s = add_mirror(p, t);
    }
    if (s != DRT_OK) {
        drt_plan_free(p);
        return s;
    }
    *out = p;
    return DRT_OK;
}

static drt_status run_fallback(drt_plan *p, drt_tensor *t, const drt_exec *ex) {
    void *srcs[DRT_MAX_SRC] = {0};
    drt_status s = p->be->ops->synchronize(p->be);
    for (int j = 0; s == DRT_OK && j < DRT_MAX_SRC; j++) {
        const drt_tensor *x = t->src[j];
        if (!x) continue;
        srcs[j] = host_of(p, x);
        if (!drt_host_ptr(x)) s = drt_tensor_get(x, srcs[j], drt_nbytes(x));
    }
    if (s != DRT_OK) return s;
    int in_place = t->view_src && t->op == DRT_OP_KV_WRITE;
    const drt_tensor *dst_t = in_place ? t->src[1] : t;
    void *dst = host_of(p, dst_t);
    s = drt_ref_run_node(t, dst, srcs, ex);
    if (s == DRT_OK && !drt_host_ptr(dst_t)) s = drt_tensor_set((drt_tensor *)dst_t, dst, drt_nbytes(dst_t));
    p->fallback_runs[t->op]++;
    return s;
}

drt_status drt_plan_run(drt_plan *p, const drt_exec *ex) {
    drt_graph *g = p->g;
    for (int i = 0; i < g->n_nodes; i++) {
        drt_status s = drt_op_check_exec(g->nodes[i], ex);
        if (s != DRT_OK) return s;
    }
    int i = 0;
    while (i < g->n_nodes) {
        if (p->fallback[i]) {
            drt_status s = run_fallback(p, g->nodes[i], ex);
            if (s != DRT_OK) return s;
            i++;
            continue;
        }
        int j = i;
        while (j < g->n_nodes && !p->fallback[j]) j++;
        drt_status s = p->be->ops->compute(p->be, g->nodes + i, j - i, ex);
        if (s != DRT_OK) return s;
        i = j;
    }
    return p->be->ops->synchronize(p->be);
}

int drt_plan_fallback_count(const drt_plan *p, drt_op op) {
    return (unsigned)op < DRT_OP_COUNT ? p->fallback_nodes[op] : 0;
}

const int64_t *drt_plan_fallback_runs(const drt_plan *p) { return p->fallback_runs; }
