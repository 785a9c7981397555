/* The node observer (runtime/dispatch.c drt_plan_run_observed, and the
 * public drt_session_set_observer; docs/design.md section 5).
 *
 * Dispatcher, per case (a small graph) and per backend (ref, cpu, and
 * "test-obs-dev": device memory the host cannot see, refusing SIGMOID so
 * that fallbacks run in between):
 *   - every node observed: the observer sees each node once, in order, with
 *     its output equal bit for bit to the same graph run unplanned (every
 *     node its own buffer) and read back afterwards; a KV_WRITE shows the
 *     rows it wrote; fallback nodes are flagged;
 *   - each node wanted alone: the value seen is the same, also for a node
 *     whose arena bytes a later node reuses (checked: after the run they
 *     hold something else);
 *   - no_data: no read-back; a nonzero return stops the run there.
 * Session, per bundled model and backend (ref, cpu): an observer of every
 * node sees op, name and layer as the builder names them, the inputs, and
 * changes no logits; one wanting only the hidden states sees the same values
 * as the one that saw everything; the attention probe still works and no
 * forward keeps tensors out of the activation arena. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffrt/diffrt.h"
#include "drt_graph.h"
#include "drt_test.h"
#include "session.h" /* drt_session_keep_attention */

/* ---- a device-memory backend that refuses SIGMOID ------------------------------- */

static bool dev_supports(drt_backend *be, const drt_tensor *t) {
    return t->op != DRT_OP_SIGMOID;
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
    out->host = NULL; /* the dispatcher reads back for observers */
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
    .name = "test-obs-dev",
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

/* ---- the cases ---------------------------------------------------------------------- */

typedef struct {
    const char *name;
    void (*build)(drt_graph *g);
    int p0;
    int reuses; /* some node's arena bytes are reused by a later node */
} obs_case;

/* elementwise ops and matmuls of one width: later results reuse earlier bytes */
static void build_chain(drt_graph *g) {
    drt_tensor *x = drt_new_tensor_2d(g, DRT_F32, 9, 48, "x");
    drt_tensor *w = drt_new_tensor_1d(g, DRT_F32, 48, "norm_w");
    drt_tensor *W = drt_new_tensor_2d(g, DRT_F32, 48, 48, "W");
    drt_tensor *h = drt_rmsnorm(g, x, w, 1e-5f);
    for (int i = 0; i < 4; i++) {
        drt_tensor *y = drt_matmul(g, h, W);
        drt_tensor *s = drt_sigmoid(g, y);
        h = drt_add(g, drt_swiglu(g, s, y), h);
    }
    drt_matmul(g, h, W);
}

/* two KV_WRITEs into caches at p0, then ATTN over the rows written */
enum { AT_T = 3, AT_S = 8, AT_H = 2, AT_DK = 16 };
static void build_attention(drt_graph *g) {
    drt_tensor *x = drt_new_tensor_2d(g, DRT_F32, AT_T, AT_H * AT_DK, "x");
    drt_tensor *W = drt_new_tensor_2d(g, DRT_F32, AT_H * AT_DK, AT_H * AT_DK, "W");
    drt_tensor *kc = drt_new_tensor_3d(g, DRT_F32, AT_S, AT_H, AT_DK, "k_cache");
    drt_tensor *vc = drt_new_tensor_3d(g, DRT_F32, AT_S, AT_H, AT_DK, "v_cache");
    kc->flags |= DRT_TF_CACHE;
    vc->flags |= DRT_TF_CACHE;
    int64_t ne[3] = {AT_T, AT_H, AT_DK};
    drt_tensor *q = drt_matmul(g, x, W);
    drt_tensor *k = drt_sigmoid(g, drt_matmul(g, x, W));
    drt_tensor *rows = drt_new_rows(g, AT_T);
    drt_tensor *kw = drt_kv_write(g, drt_view(g, k, 3, ne, 0), kc, rows);
    drt_tensor *vw = drt_kv_write(g, drt_view(g, x, 3, ne, 0), vc, rows);
    drt_tensor *o = drt_attn(g, drt_view(g, q, 3, ne, 0), kw, vw, rows);
    int64_t ne2[2] = {AT_T, AT_H * AT_DK};
    drt_matmul(g, drt_view(g, o, 2, ne2, 0), W);
}

static const obs_case CASES[] = {
    {"chain", build_chain, 0, 1},
    {"attention", build_attention, AT_S - AT_T - 1, 0},
};

/* every leaf filled from a seed of its index: the same values in every build */
static void fill_leaves(drt_graph *g) {
    for (int i = 0; i < g->n_owned; i++) {
        drt_tensor *t = g->owned[i];
        if (t->op != DRT_OP_NONE || t->view_src) continue;
        int64_t n = drt_nelem(t);
        float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
        drt_rng r;
        drt_rng_seed(&r, 1000 + (uint64_t)i);
        drt_fill_uniform(v, n, &r, -1.0f, 1.0f);
        drt_status s = drt_tensor_set(t, v, drt_nbytes(t));
        DRT_CHECK(s == DRT_OK, "fill %s: %s", t->name, drt_last_error());
        free(v);
    }
}

/* the bytes an observer sees of node t, read from an unplanned run */
typedef struct {
    void *data;
    size_t n;
} bytes;

static bytes node_bytes(const drt_tensor *t, int p0) {
    size_t off = 0, n = drt_nbytes(t);
    if (t->op == DRT_OP_KV_WRITE) {
        size_t row = n / (size_t)t->ne[0];
        off = (size_t)p0 * row;
        n = (size_t)t->src[0]->ne[0] * row;
    }
    bytes b = {malloc(drt_nbytes(t)), n};
    drt_status s = drt_tensor_get(t, b.data, drt_nbytes(t));
    DRT_CHECK(s == DRT_OK, "read %s: %s", t->name, drt_last_error());
    memmove(b.data, (char *)b.data + off, n);
    return b;
}

typedef struct {
    const obs_case *c;
    const char *be;
    drt_graph *g;
    bytes *ref;
    const drt_tensor *only; /* want this node alone; NULL: every node (want NULL) */
    int count, stop_at, expect_data;
    int dev; /* the test-obs-dev backend: SIGMOID falls back */
} obs_run;

static bool want_only(void *ctx, const drt_tensor *t) {
    return t == ((obs_run *)ctx)->only;
}

static int seen(void *ctx, const drt_node_seen *ev, const drt_exec *ex) {
    obs_run *r = ctx;
    int i = 0;
    while (i < r->g->n_nodes && r->g->nodes[i] != ev->node) i++;
    const char *nm = drt_op_name(ev->node->op);
    DRT_CHECK(i < r->g->n_nodes, "%s/%s: observed a node not in the graph", r->c->name, r->be);
    if (!r->only)
        DRT_CHECK(i == r->count, "%s/%s: node %d (%s) seen as the %d-th", r->c->name, r->be, i, nm, r->count);
    else
        DRT_CHECK(ev->node == r->only, "%s/%s: saw node %d (%s), wanted only another", r->c->name, r->be, i, nm);
    DRT_CHECK(ev->fallback == (r->dev && ev->node->op == DRT_OP_SIGMOID), "%s/%s: node %d (%s) fallback %d", r->c->name,
              r->be, i, nm, ev->fallback);
    DRT_CHECK(ex->first_pos == r->c->p0, "%s/%s: first position %d", r->c->name, r->be, ex->first_pos);
    if (r->expect_data && i < r->g->n_nodes) {
        const bytes *b = &r->ref[i];
        DRT_CHECK(ev->data && ev->nbytes == b->n && memcmp(ev->data, b->data, b->n) == 0,
                  "%s/%s: node %d (%s%s): the observed output (%zu bytes) is not the unplanned run's (%zu)", r->c->name,
                  r->be, i, nm, r->only ? ", wanted alone" : "", ev->nbytes, b->n);
    } else {
        DRT_CHECK(!ev->data, "%s/%s: no_data, yet node %d has data", r->c->name, r->be, i);
    }
    r->count++;
    return r->count == r->stop_at;
}

/* node k's arena bytes are written by a later node */
static int reused_later(const drt_graph *g, int k) {
    const drt_tensor *a = g->nodes[k];
    if (a->view_src || !a->buf) return 0;
    for (int j = k + 1; j < g->n_nodes; j++) {
        const drt_tensor *b = g->nodes[j];
        if (b->view_src || b->buf != a->buf) continue;
        if (b->offs < a->offs + drt_nbytes(a) && a->offs < b->offs + drt_nbytes(b)) return 1;
    }
    return 0;
}

static void test_case(const obs_case *c, const char *be_name) {
    drt_backend *be = NULL;
    drt_status s = drt_backend_open(be_name, NULL, &be);
    DRT_CHECK(s == DRT_OK, "%s: open %s: %s", c->name, be_name, drt_last_error());
    if (s != DRT_OK) return;
    drt_exec ex;
    int32_t rows[2 * AT_T];
    drt_exec_seq(&ex, rows, AT_T, 0, c->p0);
    if (c->build != build_attention) drt_exec_rows(&ex, NULL, 0); /* no position op */

    /* the reference: every node keeps its own buffer */
    drt_graph *g0 = drt_graph_new();
    c->build(g0);
    for (int i = 0; i < g0->n_nodes; i++) g0->nodes[i]->flags |= DRT_TF_OUTPUT;
    drt_plan *p0 = NULL;
    s = drt_plan_create(g0, be, &p0);
    DRT_CHECK(s == DRT_OK, "%s/%s: plan (unplanned): %s", c->name, be_name, drt_last_error());
    if (s != DRT_OK) goto out0;
    fill_leaves(g0);
    s = drt_plan_run(p0, &ex);
    DRT_CHECK(s == DRT_OK, "%s/%s: run (unplanned): %s", c->name, be_name, drt_last_error());
    bytes *ref = calloc((size_t)g0->n_nodes, sizeof *ref);
    for (int i = 0; i < g0->n_nodes; i++) ref[i] = node_bytes(g0->nodes[i], c->p0);

    drt_graph *g = drt_graph_new();
    c->build(g);
    drt_plan *p = NULL;
    s = drt_plan_create(g, be, &p);
    DRT_CHECK(s == DRT_OK, "%s/%s: plan: %s", c->name, be_name, drt_last_error());
    if (s == DRT_OK) {
        fill_leaves(g);
        obs_run r = {.c = c, .be = be_name, .g = g, .ref = ref, .expect_data = 1, .dev = !strcmp(be_name, DEV.name)};
        drt_plan_observer o = {.seen = seen, .ctx = &r};
        s = drt_plan_run_observed(p, &ex, &o);
        DRT_CHECK(s == DRT_OK && r.count == g->n_nodes, "%s/%s: every node: %d of %d seen (%s)", c->name, be_name,
                  r.count, g->n_nodes, s == DRT_OK ? "ok" : drt_last_error());
        /* each node alone; the same values, also where later nodes reuse its bytes */
        int reused = 0;
        for (int k = 0; k < g->n_nodes; k++) {
            r.only = g->nodes[k];
            r.count = 0;
            o.want = want_only;
            s = drt_plan_run_observed(p, &ex, &o);
            DRT_CHECK(s == DRT_OK && r.count == 1, "%s/%s: node %d alone: seen %d times", c->name, be_name, k, r.count);
            if (reused_later(g, k) && drt_host_ptr(g->nodes[k])) {
                reused++;
                DRT_CHECK(memcmp(drt_host_ptr(g->nodes[k]), ref[k].data, ref[k].n) != 0,
                          "%s/%s: node %d's bytes were to be reused later, yet still hold its output", c->name, be_name,
                          k);
            }
        }
        if (c->reuses && drt_host_ptr(g->nodes[0]))
            DRT_CHECK(reused > 0, "%s/%s: no node's arena bytes are reused: the case tests nothing", c->name, be_name);
        /* no_data; a stop after the third node */
        r = (obs_run){.c = c, .be = be_name, .g = g, .ref = ref, .stop_at = 3, .dev = r.dev};
        o = (drt_plan_observer){.seen = seen, .ctx = &r, .no_data = true};
        s = drt_plan_run_observed(p, &ex, &o);
        DRT_CHECK(s == DRT_OK && r.count == 3, "%s/%s: stop after 3: %d seen", c->name, be_name, r.count);
    }
    drt_plan_free(p);
    drt_graph_free(g);
    for (int i = 0; i < g0->n_nodes; i++) free(ref[i].data);
    free(ref);
out0:
    drt_plan_free(p0);
    drt_graph_free(g0);
    drt_backend_close(be);
}

/* ---- the session's observer --------------------------------------------------------- */

#define MAX_SEEN 4096

typedef struct {
    int n;
    char name[MAX_SEEN][48];
    char op[MAX_SEEN][16];
    int layer[MAX_SEEN];
    float *data[MAX_SEEN];
    size_t nbytes[MAX_SEEN];
    const char *want_suffix; /* NULL: every node */
    int n_layers, bad_src, kv_rows;
} session_seen;

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static int want_suffix(void *ctx, const char *op, const char *name, int layer) {
    return ends_with(name, ((session_seen *)ctx)->want_suffix);
}

static void on_node(void *ctx, const drt_node_event *ev) {
    session_seen *s = ctx;
    if (s->n >= MAX_SEEN) return;
    int i = s->n++;
    snprintf(s->name[i], sizeof s->name[i], "%s", ev->out.name);
    snprintf(s->op[i], sizeof s->op[i], "%s", ev->op);
    s->layer[i] = ev->layer;
    size_t n = 1; /* elements, then bytes in the output's type (a KV_WRITE's: the cache's) */
    for (int d = 0; d < ev->out.nd; d++) n *= (size_t)ev->out.ne[d];
    n = ev->out.type == DRT_F16 ? 2 * n : ev->out.type == DRT_Q8_0 ? n / 32 * 34 : 4 * n;
    s->nbytes[i] = n;
    s->data[i] = malloc(n);
    if (ev->out.data) memcpy(s->data[i], ev->out.data, n);
    for (int j = 0; j < ev->n_src; j++) s->bad_src += !ev->src[j].name || ev->src[j].nd < 1;
    if (!strcmp(ev->op, "KV_WRITE")) s->kv_rows = (int)ev->out.ne[0];
}

static void seen_free(session_seen *s) {
    for (int i = 0; i < s->n; i++) free(s->data[i]);
    s->n = 0;
}

static int find_seen(const session_seen *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->name[i], name)) return i;
    return -1;
}

static void test_session(const char *model, const char *be) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", DRT_MODELS_DIR, model);
    drt_model *m = NULL;
    if (drt_model_load(dir, &m) != DRT_OK) {
        DRT_CHECK(0, "%s: load: %s", model, drt_last_error());
        return;
    }
    drt_model_info I;
    drt_model_get_info(m, &I);
    enum { T = 11 };
    int32_t ids[T];
    for (int i = 0; i < T; i++) ids[i] = (int32_t)((i * 37 + 5) % I.vocab);
    drt_session_opts so = {.backend = be, .max_ctx = 64};
    drt_session *plain = NULL, *all = NULL, *some = NULL, *kept = NULL;
    DRT_CHECK(drt_session_create(m, &so, &plain) == DRT_OK && drt_session_create(m, &so, &all) == DRT_OK &&
                  drt_session_create(m, &so, &some) == DRT_OK && drt_session_create(m, &so, &kept) == DRT_OK,
              "%s/%s: sessions: %s", model, be, drt_last_error());
    float *l0 = malloc(sizeof(float) * (size_t)I.vocab), *l1 = malloc(sizeof(float) * (size_t)I.vocab);
    float *w0 = malloc(sizeof(float) * (T + 1)), *w1 = malloc(sizeof(float) * (T + 1));
    session_seen *sa = calloc(1, sizeof *sa), *ss = calloc(1, sizeof *ss);
    if (!plain || !all || !some || !kept) goto out;
    /* kept: the probe's rows copied during the forwards (niah --attention) */
    DRT_CHECK(drt_session_keep_attention(kept, 1) == DRT_OK, "%s/%s: keep_attention", model, be);
    ss->want_suffix = ".mlp_residual";
    drt_observer oa = {.on_node = on_node, .ctx = sa}, os = {.want = want_suffix, .on_node = on_node, .ctx = ss};
    DRT_CHECK(drt_session_set_observer(all, &oa) == DRT_OK && drt_session_set_observer(some, &os) == DRT_OK,
              "%s/%s: set_observer: %s", model, be, drt_last_error());

    DRT_CHECK(drt_session_forward(plain, ids, T, l0, 0) == DRT_OK, "%s/%s: forward: %s", model, be, drt_last_error());
    DRT_CHECK(drt_session_forward(all, ids, T, l1, 0) == DRT_OK, "%s/%s: observed forward: %s", model, be,
              drt_last_error());
    DRT_CHECK(!memcmp(l0, l1, sizeof(float) * (size_t)I.vocab), "%s/%s: observing changed the logits", model, be);
    DRT_CHECK(drt_session_forward(some, ids, T, l1, 0) == DRT_OK, "%s/%s: forward (some): %s", model, be,
              drt_last_error());

    /* op, name and layer as the builder names them (model/builder.c) */
    static const struct {
        const char *name, *op;
        int layer;
    } names[] = {{"embed", "EMBED", -1},
                 {"layers.0.attn_norm", "RMSNORM", 0},
                 {"layers.0.attn.q_rope", "ROPE", 0},
                 {"layers.0.attn.k_cache", "KV_WRITE", 0},
                 {"layers.1.mlp.down", "MATMUL", 1},
                 {"layers.1.mlp_residual", "ADD", 1},
                 {"final_norm", "RMSNORM", -1},
                 {"lm_head", "MATMUL", -1}};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        int i = find_seen(sa, names[k].name);
        DRT_CHECK(i >= 0, "%s/%s: node %s not observed", model, be, names[k].name);
        if (i < 0) continue;
        DRT_CHECK(!strcmp(sa->op[i], names[k].op) && sa->layer[i] == names[k].layer,
                  "%s/%s: %s seen as op %s layer %d, expected %s layer %d", model, be, names[k].name, sa->op[i],
                  sa->layer[i], names[k].op, names[k].layer);
    }
    DRT_CHECK(!strcmp(sa->name[0], "embed") && !strcmp(sa->name[sa->n - 1], "lm_head"),
              "%s/%s: first and last nodes seen: %s, %s", model, be, sa->name[0], sa->name[sa->n - 1]);
    DRT_CHECK(!sa->bad_src, "%s/%s: %d inputs without a name or shape", model, be, sa->bad_src);
    DRT_CHECK(sa->kv_rows == T, "%s/%s: a KV_WRITE showed %d rows, wrote %d", model, be, sa->kv_rows, T);
    /* the last logits row seen equals what the forward returned */
    int lh = find_seen(sa, "lm_head");
    DRT_CHECK(lh >= 0 && sa->nbytes[lh] == sizeof(float) * (size_t)I.vocab && !memcmp(sa->data[lh], l0, sa->nbytes[lh]),
              "%s/%s: lm_head as observed is not the logits", model, be);
    /* wanting only the hidden states: the same values as seen among all */
    DRT_CHECK(ss->n == I.n_layers, "%s/%s: %d .mlp_residual nodes seen, %d layers", model, be, ss->n, I.n_layers);
    for (int i = 0; i < ss->n; i++) {
        int j = find_seen(sa, ss->name[i]);
        DRT_CHECK(j >= 0 && ss->nbytes[i] == sa->nbytes[j] && !memcmp(ss->data[i], sa->data[j], ss->nbytes[i]),
                  "%s/%s: %s wanted alone differs from %s seen with every node", model, be, ss->name[i], ss->name[i]);
    }
    /* a decode step shows its one KV row; the probe reads the same on both */
    int32_t next = 7;
    seen_free(sa);
    DRT_CHECK(drt_session_forward(plain, &next, 1, l0, 0) == DRT_OK &&
                  drt_session_forward(all, &next, 1, l1, 0) == DRT_OK,
              "%s/%s: decode: %s", model, be, drt_last_error());
    DRT_CHECK(sa->kv_rows == 1, "%s/%s: a decode KV_WRITE showed %d rows", model, be, sa->kv_rows);
    DRT_CHECK(drt_session_last_attention(plain, w0) == DRT_OK && drt_session_last_attention(all, w1) == DRT_OK,
              "%s/%s: probe: %s", model, be, drt_last_error());
    DRT_CHECK(!memcmp(w0, w1, sizeof(float) * (T + 1)), "%s/%s: the probe differs when observed", model, be);
    /* the rows kept during the forward give what a re-run gives, after a
     * prefill and after a decode step */
    DRT_CHECK(drt_session_forward(kept, ids, T, l1, 0) == DRT_OK && drt_session_last_attention(kept, w1) == DRT_OK,
              "%s/%s: kept prefill: %s", model, be, drt_last_error());
    drt_session_reset(plain);
    DRT_CHECK(drt_session_forward(plain, ids, T, l0, 0) == DRT_OK && drt_session_last_attention(plain, w0) == DRT_OK,
              "%s/%s: prefill again: %s", model, be, drt_last_error());
    DRT_CHECK(!memcmp(w0, w1, sizeof(float) * T), "%s/%s: kept rows give another probe after a prefill", model, be);
    DRT_CHECK(drt_session_forward(kept, &next, 1, l1, 0) == DRT_OK && drt_session_last_attention(kept, w1) == DRT_OK &&
                  drt_session_forward(plain, &next, 1, l0, 0) == DRT_OK &&
                  drt_session_last_attention(plain, w0) == DRT_OK,
              "%s/%s: kept decode: %s", model, be, drt_last_error());
    DRT_CHECK(!memcmp(w0, w1, sizeof(float) * (T + 1)), "%s/%s: kept rows give another probe after a decode", model,
              be);
    double sum = 0;
    for (int j = 0; j < T + 1; j++) sum += w0[j];
    DRT_CHECK(isfinite(sum) && sum != 0, "%s/%s: probe weights sum to %g", model, be, sum);
    /* NULL: no observer */
    seen_free(sa);
    DRT_CHECK(drt_session_set_observer(all, NULL) == DRT_OK, "%s/%s: set_observer NULL", model, be);
    DRT_CHECK(drt_session_forward(all, &next, 1, l1, 0) == DRT_OK && sa->n == 0,
              "%s/%s: %d nodes seen after the observer was removed", model, be, sa->n);
    /* no probe tensor keeps storage outside the arena */
    size_t unplanned = 0, arena = drt_session_activation_bytes(plain, &unplanned);
    printf("%s/%s: activation arena %zu bytes (decode; %zu unplanned)\n", model, be, arena, unplanned);
out:
    seen_free(sa);
    seen_free(ss);
    free(sa);
    free(ss);
    free(l0);
    free(l1);
    free(w0);
    free(w1);
    drt_session_free(plain);
    drt_session_free(all);
    drt_session_free(some);
    drt_session_free(kept);
    drt_model_free(m);
}

int main(void) {
    DRT_CHECK(drt_registry_add(&DEV) == DRT_OK, "register %s", DEV.name);
    const char *bes[] = {"ref", "cpu", DEV.name};
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++)
        for (int b = 0; b < 3; b++) test_case(&CASES[c], bes[b]);
    const char *models[] = {"diff-v1-tiny", "diff-v2-tiny", "transformer-tiny"};
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < 2; b++) test_session(models[i], bes[b]);
    return drt_test_summary("test_observer");
}
