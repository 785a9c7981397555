/* Activation planning (runtime/dispatch.c, docs/design.md section 5): a plan puts
 * every intermediate (a node result with no DRT_TF_* flag, not a view) in
 * one arena where tensors whose lifetimes do not overlap share storage.
 *
 * Per case (a small graph) and per backend:
 *   - the layout, checked against lifetimes computed here, independently of
 *     the planner: every intermediate is in the arena, at a multiple of 256,
 *     inside it; flagged tensors and leaves are not; and no two arena
 *     tensors whose lifetimes [written, last read of it or of a view of it
 *     + 1] intersect have overlapping bytes (every pair is compared; the + 1:
 *     bytes a node reads are not written by the next node);
 *   - the arena is smaller than the sum of the intermediates it replaces
 *     (where the case allows reuse at all);
 *   - results: every intermediate is poisoned with NaN, the graph runs twice,
 *     and every result the host may read (nodes no other node reads, nodes
 *     flagged DRT_TF_OUTPUT, the cache) equals, bit for bit, the same graph
 *     run unplanned (every node flagged DRT_TF_OUTPUT: one buffer each).
 * Backends: cpu; "test-plan-dev", device memory the host cannot see that
 * refuses SIGMOID and ROPE, so fallbacks read and write arena tensors
 * through host mirrors; opencl and vulkan where available. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffrt/diffrt.h"
#include "drt_graph.h"
#include "drt_test.h"

/* ---- a device-memory backend that refuses some ops -------------------------- */

static bool dev_supports(drt_backend *be, const drt_tensor *t) {
    return t->op != DRT_OP_SIGMOID && t->op != DRT_OP_ROPE;
}
static drt_status dev_probe(int *n, char *why, size_t wn) {
    *n = 1;
    return DRT_OK;
}
static drt_status dev_name(int dev, char *buf, size_t n) {
    snprintf(buf, n, "test device");
    return DRT_OK;
}
static drt_status dev_init(drt_backend *be, int dev) {
    return DRT_OK;
}
static drt_status dev_alloc(drt_backend *be, size_t size, drt_buffer *out) {
    out->handle = malloc(size ? size : 1);
    out->host = NULL; /* the dispatcher mirrors for fallbacks */
    out->size = size;
    return out->handle ? DRT_OK : DRT_ERR_OOM;
}
static void dev_free(drt_backend *be, drt_buffer *b) {
    free(b->handle);
}
static drt_status dev_upload(drt_backend *be, drt_buffer *b, size_t off, const void *src, size_t n) {
    memcpy((char *)b->handle + off, src, n);
    return DRT_OK;
}
static drt_status dev_download(drt_backend *be, const drt_buffer *b, size_t off, void *dst, size_t n) {
    memcpy(dst, (const char *)b->handle + off, n);
    return DRT_OK;
}
static void *dev_ptr(const drt_tensor *t) {
    return t ? (char *)t->buf->handle + t->offs : NULL;
}
static drt_status dev_compute(drt_backend *be, drt_tensor *const *nodes, int n, const drt_exec *ex) {
    for (int i = 0; i < n; i++) {
        void *srcs[DRT_MAX_SRC];
        for (int j = 0; j < DRT_MAX_SRC; j++) srcs[j] = dev_ptr(nodes[i]->src[j]);
        drt_status s = drt_ref_run_node(nodes[i], dev_ptr(nodes[i]), srcs, ex);
        if (s != DRT_OK) return s;
    }
    return DRT_OK;
}
static drt_status dev_sync(drt_backend *be) {
    return DRT_OK;
}

static const drt_backend_ops DEV = {
    .name = "test-plan-dev",
    .probe = dev_probe,
    .device_name = dev_name,
    .init = dev_init,
    .buf_alloc = dev_alloc,
    .buf_free = dev_free,
    .upload = dev_upload,
    .download = dev_download,
    .supports = dev_supports,
    .compute = dev_compute,
    .synchronize = dev_sync,
};

/* ---- the cases ------------------------------------------------------------------ */

typedef struct {
    const char *name;
    void (*build)(drt_graph *g);
    int p0;
    int shrinks; /* the arena must be smaller than the sum of intermediates */
} plan_case;

/* x -> 8 elementwise ops, each reading the previous result and the one before */
static void build_chain(drt_graph *g) {
    drt_tensor *x = drt_new_tensor_2d(g, DRT_F32, 37, 96, "x");
    drt_tensor *a = drt_sigmoid(g, x), *b = drt_add(g, a, x);
    for (int i = 0; i < 3; i++) {
        drt_tensor *c = drt_sigmoid(g, b);
        drt_tensor *d = drt_swiglu(g, c, b);
        a = b;
        b = drt_add(g, d, a);
    }
}

/* matmuls change the width: intermediates of 5 different sizes */
static void build_ladder(drt_graph *g) {
    drt_tensor *x = drt_new_tensor_2d(g, DRT_F32, 7, 64, "x");
    static const int widths[] = {160, 24, 200, 64, 33};
    drt_tensor *h = x;
    for (int i = 0; i < 5; i++) {
        drt_tensor *w = drt_new_tensor_2d(g, DRT_F32, widths[i], h->ne[1], "w");
        drt_tensor *y = drt_matmul(g, h, w);
        h = drt_add(g, drt_sigmoid(g, y), y);
    }
}

/* y is read directly by the next node, then only through a view of its
 * second half, at the very end: the view keeps y alive over the twelve
 * nodes between, which would otherwise reuse its bytes */
static void build_view_late(drt_graph *g) {
    drt_tensor *x = drt_new_tensor_2d(g, DRT_F32, 2, 300, "x");
    drt_tensor *z = drt_new_tensor_2d(g, DRT_F32, 1, 300, "z");
    int64_t ne[2] = {1, 300};
    drt_tensor *y = drt_sigmoid(g, x);
    drt_tensor *h = drt_view(g, drt_sigmoid(g, y), 2, ne, 0);
    for (int i = 0; i < 6; i++) h = drt_add(g, drt_sigmoid(g, h), z);
    drt_add(g, drt_view(g, y, 2, ne, 300 * sizeof(float)), h);
}

/* a result the host reads in the middle of the graph (flagged) that later
 * nodes also read; and a sink (read by no node) early on */
static void build_output_mid(drt_graph *g) {
    drt_tensor *x = drt_new_tensor_2d(g, DRT_F32, 16, 64, "x");
    drt_sigmoid(g, x); /* sink: the host may read it after the run */
    drt_tensor *m = drt_add(g, drt_sigmoid(g, x), x);
    m->flags |= DRT_TF_OUTPUT;
    drt_tensor *h = m;
    for (int i = 0; i < 4; i++) h = drt_add(g, drt_sigmoid(g, h), m);
}

/* k is written into a cache in place (a view of a flagged leaf, never in
 * the arena); the cache is then read through that view */
static void build_kv(drt_graph *g) {
    drt_tensor *x = drt_new_tensor_3d(g, DRT_F32, 3, 2, 32, "x");
    drt_tensor *cache = drt_new_tensor_3d(g, DRT_F32, 8, 2, 32, "cache");
    drt_tensor *c2 = drt_new_tensor_3d(g, DRT_F32, 8, 2, 32, "c2");
    cache->flags |= DRT_TF_CACHE;
    drt_tensor *k = drt_sigmoid(g, drt_add(g, x, x));
    drt_tensor *kc = drt_kv_write(g, k, cache, drt_new_rows(g, 3));
    drt_sigmoid(g, drt_add(g, kc, c2));
}

/* the decomposed DIFF_ATTN lowering: permutes, views of intermediates at
 * offsets, batched matmuls, DUAL_SOFTMAX; ROPE on q first */
static void build_attn(drt_graph *g) {
    const int T = 5, S = 9, H = 4, G = 2, dk = 16, dv = 32;
    drt_tensor *q = drt_new_tensor_4d(g, DRT_F32, T, H, 2, dk, "q");
    drt_tensor *k = drt_new_tensor_4d(g, DRT_F32, S, G, 2, dk, "k");
    drt_tensor *v = drt_new_tensor_3d(g, DRT_F32, S, G, dv, "v");
    drt_tensor *f = drt_new_tensor_1d(g, DRT_F32, dk / 2, "inv_freq");
    int64_t ne3[3] = {T, 2 * H, dk}, ne4[4] = {T, H, 2, dk};
    drt_tensor *qr = drt_rope(g, drt_view(g, q, 3, ne3, 0), f, drt_new_rows(g, T));
    drt_tensor *o = drt_diff_attn_decomposed(g, drt_view(g, qr, 4, ne4, 0), k, v, 0.4f, NULL);
    drt_sigmoid(g, o);
}

static const plan_case CASES[] = {
    {"chain", build_chain, 0, 1},           {"ladder", build_ladder, 0, 1}, {"view-late", build_view_late, 0, 1},
    {"output-mid", build_output_mid, 0, 1}, {"kv-write", build_kv, 2, 0},   {"decomposed-attn", build_attn, 4, 1},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

/* ---- the layout checker: lifetimes recomputed from the graph ----------------------- */

static bool is_intermediate(const drt_tensor *t) {
    const int keep = DRT_TF_WEIGHT | DRT_TF_INPUT | DRT_TF_OUTPUT | DRT_TF_CACHE;
    return t->op != DRT_OP_NONE && !t->view_src && !(t->flags & keep);
}

static const drt_tensor *base_of(const drt_tensor *t) {
    return t->view_src ? t->view_src : t;
}

/* the node after the last one reading t or a view of t (whose bytes it
 * must not write: a GPU may run the two without a barrier); the end of the
 * graph when no node reads t */
static int last_use(const drt_graph *g, const drt_tensor *t) {
    int last = -1;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < DRT_MAX_SRC; j++)
            if (g->nodes[i]->src[j] && base_of(g->nodes[i]->src[j]) == t) last = i;
    return last < 0 ? g->n_nodes - 1 : last + 1;
}

/* 0 when the layout is sound, else a reason in why */
static int check_layout(const drt_graph *g, size_t arena_bytes, char *why, size_t n) {
    const drt_buffer *arena = NULL;
    for (int i = 0; i < g->n_nodes; i++)
        if (is_intermediate(g->nodes[i])) arena = g->nodes[i]->buf;
    for (int i = 0; i < g->n_owned; i++) {
        const drt_tensor *t = g->owned[i];
        if (t->view_src) continue;
        if (!is_intermediate(t) && t->buf == arena && arena) {
            snprintf(why, n, "%s (flags %d, op %s) is in the arena", t->name, t->flags, drt_op_name(t->op));
            return 1;
        }
    }
    for (int a = 0; a < g->n_nodes; a++) {
        const drt_tensor *ta = g->nodes[a];
        if (!is_intermediate(ta)) continue;
        if (ta->buf != arena || ta->offs % 256 || ta->offs + drt_nbytes(ta) > arena_bytes ||
            arena->size < arena_bytes) {
            snprintf(why, n, "%s (node %d) at offset %zu of %zu bytes is outside the one arena of %zu", ta->name, a,
                     ta->offs, drt_nbytes(ta), arena_bytes);
            return 1;
        }
        int la = last_use(g, ta);
        for (int b = a + 1; b < g->n_nodes; b++) {
            const drt_tensor *tb = g->nodes[b];
            if (!is_intermediate(tb)) continue;
            int lb = last_use(g, tb);
            bool alive_together = b <= la && a <= lb; /* [a, la] and [b, lb] intersect */
            bool share = ta->offs < tb->offs + drt_nbytes(tb) && tb->offs < ta->offs + drt_nbytes(ta);
            if (alive_together && share) {
                snprintf(why, n,
                         "node %d %s [%d,%d] bytes [%zu,%zu) and node %d %s [%d,%d] bytes "
                         "[%zu,%zu) overlap while both are alive",
                         a, ta->name, a, la, ta->offs, ta->offs + drt_nbytes(ta), b, tb->name, b, lb, tb->offs,
                         tb->offs + drt_nbytes(tb));
                return 1;
            }
        }
    }
    return 0;
}

/* ---- running a case ------------------------------------------------------------------ */

/* the tensors the host may read after a run, by node index (-1: the leaf cache) */
static bool host_reads(const drt_graph *g, int i) {
    const drt_tensor *t = g->nodes[i];
    if (t->view_src) return false;
    if (t->flags & DRT_TF_OUTPUT) return true;
    for (int k = 0; k < g->n_nodes; k++)
        for (int j = 0; j < DRT_MAX_SRC; j++)
            if (g->nodes[k]->src[j] && base_of(g->nodes[k]->src[j]) == t) return false;
    return true;
}

static float *download(const drt_tensor *t) {
    int64_t n = drt_nelem(t);
    float *h = malloc(sizeof(float) * (size_t)n + 4);
    drt_fill_nan(h, n);
    DRT_CHECK(drt_tensor_get(t, h, (size_t)n * 4) == DRT_OK, "download %s: %s", t->name, drt_last_error());
    return h;
}

/* Builds c, planned or not (every node flagged), fills the leaves from a
 * fixed seed and runs it twice; *outs receives the host-readable results
 * (and the leaves, which must be untouched), in graph order. */
static drt_status run_case(drt_backend *be, const plan_case *c, int planned, float ***outs, int *n_outs, size_t *arena,
                           size_t *unplanned) {
    drt_graph *g = drt_graph_new();
    c->build(g);
    /* what the host may read is decided on the graph as built */
    bool *reads = calloc((size_t)g->n_nodes + 1, sizeof *reads);
    for (int i = 0; i < g->n_nodes; i++) reads[i] = host_reads(g, i);
    if (!planned)
        for (int i = 0; i < g->n_nodes; i++)
            if (!g->nodes[i]->view_src) g->nodes[i]->flags |= DRT_TF_OUTPUT;
    drt_plan *p = NULL;
    drt_status s = g->err != DRT_OK ? g->err : drt_plan_create(g, be, &p);
    if (s != DRT_OK) {
        free(reads);
        drt_graph_free(g);
        return s;
    }
    *arena = drt_plan_arena_bytes(p, unplanned);
    char why[300] = "";
    DRT_CHECK(check_layout(g, *arena, why, sizeof why) == 0, "%s on %s (%s): %s", c->name, be->ops->name,
              planned ? "planned" : "unplanned", why);
    drt_rng r;
    drt_rng_seed(&r, 4242);
    for (int i = 0; i < g->n_owned; i++) {
        drt_tensor *t = g->owned[i];
        if (t->op != DRT_OP_NONE || t->view_src) continue;
        int64_t n = drt_nelem(t);
        float *h = malloc(sizeof(float) * (size_t)n + 4);
        drt_fill_uniform(h, n, &r, -1.f, 1.f);
        drt_tensor_set(t, h, (size_t)n * 4);
        free(h);
    }
    /* one sequence at p0 over the graph's rows tensor, if it has one */
    drt_exec ex;
    int32_t rows[2 * 16];
    int T = 0;
    for (int i = 0; i < g->n_owned; i++)
        if (g->owned[i]->type == DRT_I32 && !strcmp(g->owned[i]->name, "rows")) T = (int)g->owned[i]->ne[0];
    drt_exec_seq(&ex, rows, T, 0, c->p0);
    for (int run = 0; s == DRT_OK && run < 2; run++) {
        /* poison every node result (the arena too) before each run */
        for (int i = 0; i < g->n_nodes; i++) {
            drt_tensor *t = g->nodes[i];
            if (t->view_src) continue;
            int64_t n = drt_nelem(t);
            float *h = malloc(sizeof(float) * (size_t)n + 4);
            drt_fill_nan(h, n);
            drt_tensor_set(t, h, (size_t)n * 4);
            free(h);
        }
        s = drt_plan_run(p, &ex);
    }
    *n_outs = 0;
    *outs = calloc((size_t)g->n_owned + 1, sizeof **outs);
    for (int i = 0; s == DRT_OK && i < g->n_nodes; i++)
        if (reads[i]) (*outs)[(*n_outs)++] = download(g->nodes[i]);
    for (int i = 0; s == DRT_OK && i < g->n_owned; i++)
        if (g->owned[i]->op == DRT_OP_NONE && !g->owned[i]->view_src) (*outs)[(*n_outs)++] = download(g->owned[i]);
    drt_plan_free(p);
    drt_graph_free(g);
    free(reads);
    return s;
}

/* element counts of the host-readable results, as run_case lists them */
static int64_t *out_sizes(const plan_case *c, int *n) {
    drt_graph *g = drt_graph_new();
    c->build(g);
    int64_t *ns = calloc((size_t)g->n_owned + 1, sizeof *ns);
    *n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (host_reads(g, i)) ns[(*n)++] = drt_nelem(g->nodes[i]);
    for (int i = 0; i < g->n_owned; i++)
        if (g->owned[i]->op == DRT_OP_NONE && !g->owned[i]->view_src) ns[(*n)++] = drt_nelem(g->owned[i]);
    drt_graph_free(g);
    return ns;
}

static void free_outs(float **o, int n) {
    for (int i = 0; i < n; i++) free(o[i]);
    free(o);
}

static void check_case(drt_backend *be, const plan_case *c) {
    float **a = NULL, **b = NULL;
    int na = 0, nb = 0, ns = 0;
    size_t arena = 0, unplanned = 0, arena_u = 0, unplanned_u = 0;
    drt_status s = run_case(be, c, 1, &a, &na, &arena, &unplanned);
    DRT_CHECK(s == DRT_OK, "%s on %s: planned run: %s", c->name, be->ops->name, drt_last_error());
    drt_status s2 = run_case(be, c, 0, &b, &nb, &arena_u, &unplanned_u);
    DRT_CHECK(s2 == DRT_OK, "%s on %s: unplanned run: %s", c->name, be->ops->name, drt_last_error());
    DRT_CHECK(arena_u == 0 && unplanned_u == 0, "%s: every node flagged, yet %zu bytes planned", c->name, arena_u);
    DRT_CHECK(arena > 0 && unplanned > 0, "%s on %s: nothing planned", c->name, be->ops->name);
    if (c->shrinks)
        DRT_CHECK(arena < unplanned,
                  "%s on %s: arena %zu bytes is not smaller than the %zu bytes "
                  "of intermediates",
                  c->name, be->ops->name, arena, unplanned);
    int64_t *sz = out_sizes(c, &ns);
    if (s == DRT_OK && s2 == DRT_OK) {
        DRT_CHECK(na == ns && nb == ns, "%s: %d / %d results, expected %d", c->name, na, nb, ns);
        for (int i = 0; i < ns && i < na && i < nb; i++) {
            int64_t bad = -1;
            for (int64_t j = 0; j < sz[i] && bad < 0; j++)
                if (!(a[i][j] == b[i][j])) bad = j; /* NaN fails too */
            DRT_CHECK(bad < 0,
                      "%s on %s: result %d differs from the unplanned run at element %lld "
                      "(%g vs %g)",
                      c->name, be->ops->name, i, (long long)bad, bad < 0 ? 0.0 : a[i][bad], bad < 0 ? 0.0 : b[i][bad]);
        }
    }
    printf("  %-16s %-14s arena %7zu bytes for %7zu bytes of intermediates\n", c->name, be->ops->name, arena,
           unplanned);
    free(sz);
    free_outs(a, na);
    free_outs(b, nb);
}

int main(void) {
    DRT_CHECK(drt_registry_add(&DEV) == DRT_OK, "register: %s", drt_last_error());
    const char *names[] = {"ref", "cpu", "test-plan-dev", "opencl", "vulkan"};
    for (int k = 0; k < 5; k++) {
        drt_backend *be = NULL;
        if (drt_backend_open(names[k], NULL, &be) != DRT_OK) {
            /* ref, cpu and the test device always open; a GPU backend may
             * be absent unless DIFFRT_REQUIRE names it */
            const char *req = getenv("DIFFRT_REQUIRE");
            DRT_CHECK(k >= 3 && !(req && strstr(req, names[k])), "%s: %s", names[k], drt_last_error());
            printf("  %s: skipped (%s)\n", names[k], drt_last_error());
            continue;
        }
        for (int i = 0; i < N_CASES; i++) check_case(be, &CASES[i]);
        drt_backend_close(be);
    }
    return drt_test_summary("test_plan");
}
