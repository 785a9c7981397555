/* Sessions: a model's weights uploaded once to a backend, a KV cache that
 * stays there, and forward graphs built once per shape class (decode T=1 is
 * built at creation; a prefill graph is kept for its T and rebuilt only when
 * a prompt of another length comes). Running a built graph allocates nothing. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "drt_settings.h"
#include "session.h"

/* The attention probe's inputs, the last token's row of each layer's q
 * after RoPE (H*maps, dk) and of lambda (H) for diff-v2, copied by an
 * observer as a forward computes them: during the forward itself when the
 * session keeps them (drt_session_keep_attention), else in a re-run of the
 * last forward when the probe is asked for. No forward keeps q or lambda
 * out of the activation arena. */
typedef struct {
    const drt_forward_graph *f; /* the graph whose nodes are observed */
    int n_layers;
    float **q, **lam; /* per layer: malloc'd rows, NULL before the first */
    int left;         /* nodes still to see: the rest of a re-run is skipped */
    int have;         /* the rows are those of the last forward (f) */
    drt_status st;
} probe_ctx;

static int probe_layer(const probe_ctx *c, const drt_tensor *t, int *lam);
static bool probe_want(void *ctx, const drt_tensor *t);
static int probe_seen(void *ctx, const drt_node_seen *ev, const drt_exec *ex);

struct drt_session {
    drt_model *m; /* a reference (model_ref.c) */
    drt_backend *be;
    drt_graph *store; /* owns the weight and cache tensors */
    drt_model_tensors mt;
    int max_ctx, pos;
    int check_finite; /* drt_session_opts.check_finite or DIFFRT_CHECK_FINITE */
    drt_forward_graph decode, prefill;
    drt_forward_graph *last; /* the graph of the last successful forward */
    int64_t fallback_runs[DRT_OP_COUNT];
    drt_observer obs; /* on_node NULL: none (drt_session_set_observer) */
    int attn_bits;    /* drt_session_set_attn_bits: put on every attention node built */
    int keep_probe;   /* drt_session_keep_attention */
    probe_ctx probe;  /* its rows; probe.f: the forward they are of, NULL: none */
    /* held by whichever thread is inside the session (diffrt.h): a second
     * thread gets DRT_ERR_BUSY from the calls with a status and waits in the
     * others, so two forwards never share the KV cache, pos and the graphs'
     * arenas (they did: most forwards from two threads came out wrong) */
    pthread_mutex_t mu;
};

/* Takes the session for this call, or DRT_ERR_BUSY naming `what`. */
static drt_status enter(drt_session *s, const char *what) {
    if (pthread_mutex_trylock(&s->mu) != 0)
        return drt_set_error(DRT_ERR_BUSY, "%s: the session is in use by another thread", what);
    return DRT_OK;
}

/* For the calls without a status: wait for the thread inside. The getters
 * take a const session; the mutex is its one mutable part. */
static void wait_enter(const drt_session *s) { pthread_mutex_lock((pthread_mutex_t *)&s->mu); }

static void leave(const drt_session *s) { pthread_mutex_unlock((pthread_mutex_t *)&s->mu); }

static drt_tensor *upload(drt_session *s, const drt_host_weight *w, drt_status *st) {
    if (*st != DRT_OK || !w->data) return NULL;
    drt_tensor *t = drt_new_tensor(s->store, w->type, w->nd, w->ne, w->name);
    if (!t) {
        *st = s->store->err;
        return NULL;
    }
    t->flags |= DRT_TF_WEIGHT;
    if (s->be->ops->buf_wrap) {
        /* a host backend reads the model's memory in place: no copy */
        drt_buffer *b = calloc(1, sizeof *b);
        *st = b ? s->be->ops->buf_wrap(s->be, (void *)w->data, drt_nbytes(t), b)
                : drt_set_error(DRT_ERR_OOM, "out of memory");
        if (*st != DRT_OK) {
            free(b);
            return NULL;
        }
        b->be = s->be;
        t->buf = b;
    } else {
        *st = drt_alloc_tensors(s->be, &t, 1);
        if (*st == DRT_OK) *st = drt_tensor_set(t, w->data, drt_nbytes(t));
    }
    if (*st == DRT_OK && s->be->ops->prepare_weight) *st = s->be->ops->prepare_weight(s->be, t);
    return t;
}

static void forward_free(drt_forward_graph *f) {
    drt_plan_free(f->plan);
    drt_graph_free(f->g);
    free(f->q_rope);
    free(f->lambda);
    memset(f, 0, sizeof *f);
}

void drt_session_free(drt_session *s) {
    if (!s) return;
    /* a forward in flight on another thread finishes first (its last use of
     * s, diffrt.h); unlocked again so that the mutex is destroyed unlocked */
    wait_enter(s);
    leave(s);
    pthread_mutex_destroy(&s->mu);
    forward_free(&s->decode);
    forward_free(&s->prefill);
    for (int l = 0; l < s->probe.n_layers; l++) {
        if (s->probe.q) free(s->probe.q[l]);
        if (s->probe.lam) free(s->probe.lam[l]);
    }
    free(s->probe.q);
    free(s->probe.lam);
    drt_graph_free(s->store);
    free(s->mt.layers);
    drt_backend_close(s->be);
    drt_model *m = s->m;
    free(s);
    /* last: the buffers above may wrap the model's memory */
    if (m) drt_model_unref(m);
}

/* attention nodes carry the logit quantization in ip[1] (ref_ops.h) */
static void put_attn_bits(drt_forward_graph *f, int bits) {
    for (int i = 0; f->g && i < f->g->n_nodes; i++) {
        drt_tensor *t = f->g->nodes[i];
        if (t->op == DRT_OP_ATTN || t->op == DRT_OP_DIFF_ATTN) t->ip[1] = bits;
    }
}

static drt_status build(drt_session *s, int T, int all_logits, drt_forward_graph *f) {
    drt_status st = drt_build_forward(s->m, &s->mt, T, all_logits, f);
    if (st == DRT_OK) put_attn_bits(f, s->attn_bits);
    if (st == DRT_OK) st = drt_plan_create(f->g, s->be, &f->plan);
    if (st != DRT_OK) forward_free(f);
    return st;
}

drt_status drt_session_create(drt_model *m, const drt_session_opts *opts, drt_session **out) {
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_session_create: out is NULL");
    *out = NULL;
    if (!m) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_session_create: no model (m is NULL)");
    drt_session_opts o = {0};
    if (opts) o = *opts;
    const drt_model_info *I = &m->info;
    if (o.max_ctx < 0 || o.max_ctx > DRT_MAX_CTX)
        return drt_set_error(DRT_ERR_INVALID_ARG,
                             "max_ctx %d is out of range: 1 .. %d positions (0: the model's "
                             "max_position_embeddings)",
                             o.max_ctx, DRT_MAX_CTX);
    int ctx = o.max_ctx > 0 ? o.max_ctx : (I->max_ctx < 4096 ? I->max_ctx : 4096);
    if (ctx <= 0)
        return drt_set_error(DRT_ERR_INVALID_ARG,
                             "the model's max_position_embeddings is %d: give the context "
                             "(max_ctx, --ctx) explicitly",
                             I->max_ctx);
    int env_finite; /* check_finite (DIFFRT_CHECK_FINITE=1 for every session) */
    drt_status est = drt_setting_bool(o.settings, "check_finite", &env_finite);
    if (est != DRT_OK) return est;
    drt_session *s = calloc(1, sizeof *s);
    if (!s) return drt_set_error(DRT_ERR_OOM, "out of memory");
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        free(s);
        return drt_set_error(DRT_ERR_OOM, "drt_session_create: cannot initialise the session's mutex");
    }
    s->m = m;
    drt_model_ref(m); /* dropped by drt_session_free, failure below included */
    s->max_ctx = ctx;
    s->check_finite = o.check_finite || env_finite;
    drt_status st = drt_backend_open_settings(o.backend, o.device, o.threads, o.settings, &s->be);
    if (st == DRT_OK) {
        s->store = drt_graph_new();
        s->mt.layers = calloc((size_t)I->n_layers, sizeof *s->mt.layers);
        if (!s->store || !s->mt.layers) st = drt_set_error(DRT_ERR_OOM, "out of memory");
    }
    s->mt.n_layers = I->n_layers;
    s->probe.n_layers = I->n_layers;
    s->probe.q = calloc((size_t)I->n_layers, sizeof(float *));
    s->probe.lam = calloc((size_t)I->n_layers, sizeof(float *));
    if (st == DRT_OK && (!s->probe.q || !s->probe.lam)) st = drt_set_error(DRT_ERR_OOM, "out of memory");
    s->mt.embed = upload(s, &m->embed, &st);
    s->mt.final_norm = upload(s, &m->final_norm, &st);
    s->mt.lm_head = I->tied_embeddings ? s->mt.embed : upload(s, &m->lm_head, &st);
    drt_host_weight fw = {.name = "inv_freq", .type = DRT_F32, .nd = 1, .ne = {I->dk / 2}, .data = m->inv_freq};
    s->mt.inv_freq = upload(s, &fw, &st);
    for (int l = 0; st == DRT_OK && l < I->n_layers; l++) {
        const drt_layer_weights *lw = &m->layers[l];
        drt_layer_tensors *L = &s->mt.layers[l];
        L->attn_norm = upload(s, &lw->attn_norm, &st);
        L->ffn_norm = upload(s, &lw->ffn_norm, &st);
        L->wq = upload(s, &lw->wq, &st);
        L->wk = upload(s, &lw->wk, &st);
        L->wv = upload(s, &lw->wv, &st);
        L->wo = upload(s, &lw->wo, &st);
        L->w_lambda = upload(s, &lw->w_lambda, &st);
        L->subln = upload(s, &lw->subln, &st);
        L->wg = upload(s, &lw->wg, &st);
        L->wu = upload(s, &lw->wu, &st);
        L->wd = upload(s, &lw->wd, &st);
        if (st != DRT_OK) break;
        char nm[32];
        snprintf(nm, sizeof nm, "k_cache.%d", l);
        if (I->arch == DRT_ARCH_TRANSFORMER)
            L->k_cache = drt_new_tensor_3d(s->store, DRT_F32, s->max_ctx, I->n_kv_groups, I->dk, nm);
        else
            L->k_cache = drt_new_tensor_4d(s->store, DRT_F32, s->max_ctx, I->n_kv_groups, I->kv_m,
                                           I->dk, nm);
        snprintf(nm, sizeof nm, "v_cache.%d", l);
        L->v_cache = drt_new_tensor_3d(s->store, DRT_F32, s->max_ctx, I->n_kv_groups, I->dv, nm);
        if (!L->k_cache || !L->v_cache) {
            st = s->store->err;
            break;
        }
        L->k_cache->flags |= DRT_TF_CACHE;
        L->v_cache->flags |= DRT_TF_CACHE;
        drt_tensor *kv[2] = {L->k_cache, L->v_cache};
        st = drt_alloc_tensors(s->be, kv, 2);
    }
    if (st == DRT_OK) st = build(s, 1, 1, &s->decode);
    if (st != DRT_OK) {
        drt_session_free(s);
        return st;
    }
    *out = s;
    return DRT_OK;
}

static void add_fallbacks(drt_session *s, const drt_plan *p, const int64_t before[DRT_OP_COUNT]) {
    const int64_t *now = drt_plan_fallback_runs(p);
    for (int i = 0; i < DRT_OP_COUNT; i++) s->fallback_runs[i] += now[i] - before[i];
}

static const char *nonfinite_kind(float v) {
    return isnan(v) ? "NaN" : v > 0 ? "Inf" : "-Inf";
}

/* The logits of the forward f just ran at p0 are not finite, first at
 * sequence position `at` (value v). With the finite check on, the forward
 * is run again op by op to name the first op whose output was not finite,
 * and a weight of it that holds the NaN or Inf. */
static drt_status nonfinite_error(drt_session *s, drt_forward_graph *f, int p0, int at, float v) {
    char why[512];
    if (!s->check_finite) {
        snprintf(why, sizeof why,
                 "the model's weights or activations overflowed; rerun with -v (or "
                 "DIFFRT_CHECK_FINITE=1) to find the first op");
    } else {
        drt_exec ex = {.p0 = p0};
        drt_nonfinite nf;
        drt_status st = drt_plan_find_nonfinite(f->plan, &ex, &nf);
        int layer = -1;
        if (st != DRT_OK) {
            snprintf(why, sizeof why, "the finite check could not re-run the forward: %.300s",
                     drt_last_error());
        } else if (!nf.node) {
            snprintf(why, sizeof why,
                     "the finite check re-ran the forward op by op and every output was finite "
                     "(the backend is not deterministic?)");
        } else {
            char lay[32] = "", wt[160] = "";
            if (sscanf(nf.node->name, "layers.%d.", &layer) == 1)
                snprintf(lay, sizeof lay, " (layer %d)", layer);
            if (nf.weight)
                snprintf(wt, sizeof wt, ", whose weight '%s' holds %s", nf.weight->name,
                         nonfinite_kind(nf.weight_value));
            snprintf(why, sizeof why, "first non-finite output: %s '%s'%s%s",
                     drt_op_name(nf.node->op), nf.node->name, lay, wt);
        }
    }
    return drt_set_error(DRT_ERR_NUMERIC, "logits at position %d are not finite (%s); %s", at,
                         nonfinite_kind(v), why);
}

/* The index of the first NaN or Inf of x[0..n), or -1. The common all-finite
 * case is one pass of 8 independent lanes (the per-element early-exit loop
 * cost ~20 us on a decode step's 32000 logits). */
static int64_t first_nonfinite(const float *x, int64_t n) {
    int bad = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            bad |= !(fabsf(x[i + j]) <= FLT_MAX);
    for (; i < n; i++)
        bad |= !(fabsf(x[i]) <= FLT_MAX);
    if (!bad) return -1;
    for (i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

/* ---- observers -------------------------------------------------------------- */

static int layer_of(const char *name) {
    int l;
    return sscanf(name, "layers.%d.", &l) == 1 ? l : -1;
}

static void node_tensor(const drt_tensor *t, const void *data, drt_node_tensor *out) {
    *out = (drt_node_tensor){.name = t->name, .type = t->type, .nd = t->nd, .data = data};
    for (int d = 0; d < t->nd && d < 4; d++) out->ne[d] = t->ne[d];
}

/* The session's observer, a profile and the attention probe's rows (each
 * may be absent) on one run. */
typedef struct {
    const drt_observer *obs;
    drt_plan_profile *prof;
    probe_ctx *probe;
} observe_ctx;

static bool user_wants(const drt_observer *o, const drt_tensor *t) {
    return !o->want || o->want(o->ctx, drt_op_name(t->op), t->name, layer_of(t->name));
}

static bool observe_want(void *ctx, const drt_tensor *t) {
    observe_ctx *c = ctx;
    /* profiling times every node alone */
    return c->prof || (c->obs && user_wants(c->obs, t)) || (c->probe && probe_want(c->probe, t));
}

static int observe_seen(void *ctx, const drt_node_seen *ev, const drt_exec *ex) {
    observe_ctx *c = ctx;
    const drt_tensor *t = ev->node;
    if (c->probe && probe_want(c->probe, t)) probe_seen(c->probe, ev, ex);
    if (c->prof) drt_plan_profile_add(c->prof, ev, ex);
    /* wanted for the others: asked again */
    if (!c->obs || ((c->prof || c->probe) && !user_wants(c->obs, t))) return 0;
    drt_node_event e = {.op = drt_op_name(t->op), .layer = layer_of(t->name), .p0 = ex->p0,
                        .seconds = ev->seconds, .fallback = ev->fallback};
    node_tensor(t, ev->data, &e.out);
    if (t->op == DRT_OP_KV_WRITE) e.out.ne[0] = t->src[0]->ne[0]; /* the rows it wrote */
    for (int j = 0; j < DRT_MAX_SRC; j++)
        if (t->src[j]) node_tensor(t->src[j], drt_host_ptr(t->src[j]), &e.src[e.n_src++]);
    c->obs->on_node(c->obs->ctx, &e);
    return 0;
}

drt_status drt_session_set_observer(drt_session *s, const drt_observer *obs) {
    if (!s) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_session_set_observer: the session is NULL");
    drt_status st = enter(s, "drt_session_set_observer");
    if (st != DRT_OK) return st;
    if (obs && obs->on_node)
        s->obs = *obs;
    else
        memset(&s->obs, 0, sizeof s->obs);
    leave(s);
    return DRT_OK;
}

drt_status drt_session_keep_attention(drt_session *s, int on) {
    drt_status st = enter(s, "drt_session_keep_attention");
    if (st != DRT_OK) return st;
    s->keep_probe = on != 0;
    leave(s);
    return DRT_OK;
}

drt_status drt_session_set_attn_bits(drt_session *s, int bits) {
    if (bits && strcmp(s->be->ops->name, "ref") != 0)
        return drt_set_error(DRT_ERR_UNSUPPORTED, "attention logit quantization runs on the ref backend only (not %s)",
                             s->be->ops->name);
    drt_status st = enter(s, "drt_session_set_attn_bits");
    if (st != DRT_OK) return st;
    s->attn_bits = bits;
    put_attn_bits(&s->decode, bits);
    put_attn_bits(&s->prefill, bits);
    leave(s);
    return DRT_OK;
}

/* forward() with the session entered */
static drt_status forward_entered(drt_session *s, const int32_t *ids, int T, float *logits, int all_logits,
                                  drt_profile *prof) {
    if (!ids || !logits)
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_session_forward: %s is NULL", !ids ? "ids" : "logits");
    const drt_model_info *I = &s->m->info;
    if (T <= 0) return drt_set_error(DRT_ERR_INVALID_ARG, "forward: %d tokens (need at least 1)", T);
    if (T > s->max_ctx - s->pos)
        return drt_set_error(DRT_ERR_INVALID_ARG,
                             "forward: %d + %d tokens exceed the context of %d (raise --ctx)", s->pos,
                             T, s->max_ctx);
    for (int i = 0; i < T; i++)
        if (ids[i] < 0 || ids[i] >= I->vocab)
            return drt_set_error(DRT_ERR_INVALID_ARG,
                                 "token id %d (position %d) is outside the vocabulary [0, %d)", ids[i],
                                 i, I->vocab);
    drt_forward_graph *f;
    if (T == 1) {
        f = &s->decode;
    } else {
        f = &s->prefill;
        if (!f->g || f->T != T || f->all_logits != all_logits) {
            forward_free(f);
            drt_status st = build(s, T, all_logits, f);
            if (st != DRT_OK) return st;
        }
    }
    int64_t before[DRT_OP_COUNT];
    memcpy(before, drt_plan_fallback_runs(f->plan), sizeof before);
    drt_status st = drt_tensor_set(f->ids, ids, sizeof(int32_t) * (size_t)T);
    drt_exec ex = {.p0 = s->pos};
    s->probe.have = 0;
    probe_ctx *pr = s->keep_probe ? &s->probe : NULL;
    if (pr) *pr = (probe_ctx){.f = f, .n_layers = pr->n_layers, .q = pr->q, .lam = pr->lam, .left = -1};
    if (st == DRT_OK && (prof || s->obs.on_node || pr)) {
        drt_plan_profile pp = {0};
        observe_ctx oc = {.obs = s->obs.on_node ? &s->obs : NULL, .prof = prof ? &pp : NULL, .probe = pr};
        drt_plan_observer po = {.want = observe_want, .seen = observe_seen, .ctx = &oc,
                                .no_data = !oc.obs && !pr};
        st = drt_plan_run_observed(f->plan, &ex, &po);
        for (int i = 0; prof && i < DRT_OP_COUNT; i++) {
            prof->op[i] = drt_op_name((drt_op)i);
            prof->nodes[i] += pp.nodes[i];
            prof->fallback[i] += pp.fallback_nodes[i];
            prof->seconds[i] += pp.seconds[i];
            prof->flops[i] += pp.flops[i];
            prof->bytes[i] += pp.bytes[i];
        }
        if (prof) prof->n_ops = DRT_OP_COUNT;
        if (prof && st == DRT_OK) prof->forwards++;
    } else if (st == DRT_OK) {
        st = drt_plan_run(f->plan, &ex);
    }
    add_fallbacks(s, f->plan, before);
    /* (T, V) when all_logits, else (1, V): the last row only */
    if (st == DRT_OK) st = drt_tensor_get(f->logits, logits, drt_nbytes(f->logits));
    if (st != DRT_OK) return st;
    /* a NaN or Inf is never handed on as if it were a distribution: the
     * position does not advance, and the probes have nothing to read */
    int64_t rows = f->logits->ne[0], V = I->vocab, i = first_nonfinite(logits, rows * V);
    if (i >= 0) {
        s->last = NULL;
        return nonfinite_error(s, f, s->pos, s->pos + T - (int)rows + (int)(i / V), logits[i]);
    }
    s->pos += T;
    s->last = f;
    s->probe.have = pr && pr->st == DRT_OK;
    return DRT_OK;
}

/* drt_session_forward, and with prof drt_session_forward_profiled. The busy
 * check comes before the arguments' (a rejected call never ran anyway). */
static drt_status forward(drt_session *s, const int32_t *ids, int T, float *logits, int all_logits,
                          drt_profile *prof) {
    if (!s) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_session_forward: the session is NULL");
    drt_status st = enter(s, prof ? "drt_session_forward_profiled" : "drt_session_forward");
    if (st != DRT_OK) return st;
    st = forward_entered(s, ids, T, logits, all_logits, prof);
    leave(s);
    return st;
}

_Static_assert(DRT_OP_COUNT <= DRT_PROFILE_MAX_OPS, "drt_profile holds one entry per op");

drt_status drt_session_forward(drt_session *s, const int32_t *ids, int T, float *logits,
                               int all_logits) {
    return forward(s, ids, T, logits, all_logits, NULL);
}

drt_status drt_session_forward_profiled(drt_session *s, const int32_t *ids, int T, float *logits,
                                        drt_profile *prof) {
    if (!prof)
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_session_forward_profiled: prof is NULL");
    return forward(s, ids, T, logits, 0, prof);
}

void drt_session_reset(drt_session *s) {
    if (!s) return;
    wait_enter(s);
    s->pos = 0;
    s->last = NULL;
    leave(s);
}

/* Host copy of a device tensor (or of its first n bytes). */
static void *fetch(const drt_tensor *t, size_t n, drt_status *st) {
    if (*st != DRT_OK) return NULL;
    void *h = malloc(n ? n : 1);
    if (!h) *st = drt_set_error(DRT_ERR_OOM, "out of memory");
    else *st = drt_tensor_get(t, h, n);
    return h;
}

/* the layer whose q_rope (*lam 0) or lambda (*lam 1) t is, or -1 */
static int probe_layer(const probe_ctx *c, const drt_tensor *t, int *lam) {
    *lam = 0;
    for (int l = 0; l < c->n_layers; l++) {
        *lam = t == c->f->lambda[l];
        if (t == c->f->q_rope[l] || *lam) return l;
    }
    return -1;
}

static bool probe_want(void *ctx, const drt_tensor *t) {
    int lam;
    return probe_layer(ctx, t, &lam) >= 0;
}

static int probe_seen(void *ctx, const drt_node_seen *ev, const drt_exec *ex) {
    probe_ctx *c = ctx;
    int lam, l = probe_layer(c, ev->node, &lam);
    size_t row = ev->nbytes / (size_t)ev->node->ne[0]; /* the last of its T rows */
    float **dst = lam ? &c->lam[l] : &c->q[l];
    free(*dst);
    *dst = malloc(row);
    if (!*dst) {
        c->st = drt_set_error(DRT_ERR_OOM, "out of memory");
        return 1;
    }
    memcpy(*dst, (const char *)ev->data + ev->nbytes - row, row);
    return --c->left == 0;
}

static drt_status last_attention_entered(drt_session *s, float *weights) {
    const drt_model *m = s->m;
    const drt_model_info *I = &m->info;
    drt_forward_graph *f = s->last;
    if (!f) return drt_set_error(DRT_ERR_INVALID_ARG, "attention probe: no forward has run since the last reset");
    int P = s->pos, H = I->n_heads, G = I->n_kv_groups, dk = I->dk, km = I->kv_m, NL = I->n_layers;
    int diff = I->arch != DRT_ARCH_TRANSFORMER, maps = diff ? 2 : 1;
    double *acc = calloc((size_t)P, sizeof(double)), *a[2];
    a[0] = malloc(sizeof(double) * (size_t)P);
    a[1] = malloc(sizeof(double) * (size_t)P);
    drt_status st = acc && a[0] && a[1] ? DRT_OK : drt_set_error(DRT_ERR_OOM, "out of memory");
    probe_ctx *pc = &s->probe;
    if (st == DRT_OK && !(pc->have && pc->f == f)) {
        /* the same forward again at the same position computes the same
         * values (it rewrites its own cache rows with them), up to the last
         * node wanted */
        *pc = (probe_ctx){.f = f, .n_layers = NL, .q = pc->q, .lam = pc->lam};
        for (int l = 0; l < NL; l++) pc->left += 1 + (f->lambda[l] != NULL);
        drt_exec ex = {.p0 = s->pos - f->T};
        drt_plan_observer po = {.want = probe_want, .seen = probe_seen, .ctx = pc};
        st = drt_plan_run_observed(f->plan, &ex, &po);
        if (st == DRT_OK) st = pc->st;
        pc->have = st == DRT_OK && pc->left == 0;
        if (st == DRT_OK && !pc->have)
            st = drt_set_error(DRT_ERR_INVALID_ARG, "attention probe: the re-run did not reach every layer's q");
    }
    double scale = 1.0 / sqrt((double)dk);
    for (int l = 0; st == DRT_OK && l < NL; l++) {
        const drt_layer_tensors *L = &s->mt.layers[l];
        const float *q = pc->q[l], *lam = f->lambda[l] ? pc->lam[l] : NULL;
        float *k = fetch(L->k_cache, (size_t)P * (size_t)G * (size_t)km * (size_t)dk * sizeof(float), &st);
        for (int h = 0; st == DRT_OK && h < H; h++) {
            int g = h * G / H;
            for (int c = 0; c < maps; c++) {
                const float *qq = q + ((size_t)h * maps + c) * dk;
                int kc = c == 0 ? 0 : km - 1;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < P; j++) {
                    const float *kk = k + ((size_t)j * G * km + (size_t)g * km + kc) * dk;
                    double d = 0;
                    for (int i = 0; i < dk; i++) d += (double)qq[i] * kk[i];
                    a[c][j] = d * scale;
                    if (a[c][j] > mx) mx = a[c][j];
                }
                for (int j = 0; j < P; j++) sum += (a[c][j] = exp(a[c][j] - mx));
                for (int j = 0; j < P; j++) a[c][j] /= sum;
            }
            double lm = !diff ? 0 : lam ? lam[h] : m->layers[l].lambda;
            for (int j = 0; j < P; j++) acc[j] += a[0][j] - (diff ? lm * a[1][j] : 0);
        }
        free(k);
    }
    for (int j = 0; st == DRT_OK && j < P; j++) weights[j] = (float)(acc[j] / ((double)I->n_layers * H));
    free(acc);
    free(a[0]);
    free(a[1]);
    return st;
}

drt_status drt_session_last_attention(drt_session *s, float *weights) {
    if (!s || !weights)
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_session_last_attention: %s is NULL",
                             !s ? "the session" : "weights");
    drt_status st = enter(s, "drt_session_last_attention");
    if (st != DRT_OK) return st;
    st = last_attention_entered(s, weights);
    leave(s);
    return st;
}

int drt_session_pos(const drt_session *s) {
    if (!s) return -1;
    wait_enter(s);
    int pos = s->pos;
    leave(s);
    return pos;
}

int drt_session_ctx(const drt_session *s) { return s ? s->max_ctx : -1; }

size_t drt_session_activation_bytes(const drt_session *s, size_t *unplanned) {
    if (!s) {
        if (unplanned) *unplanned = 0;
        return 0;
    }
    wait_enter(s);
    const drt_forward_graph *f = s->last ? s->last : &s->decode;
    size_t bytes = drt_plan_arena_bytes(f->plan, unplanned);
    leave(s);
    return bytes;
}

int drt_session_fallbacks(const drt_session *s, char *lines, size_t n) {
    int64_t total = 0;
    size_t o = 0;
    if (lines && n) lines[0] = 0;
    if (!s) return 0;
    wait_enter(s);
    for (int i = 0; i < DRT_OP_COUNT; i++) {
        if (!s->fallback_runs[i]) continue;
        total += s->fallback_runs[i];
        if (lines && o < n)
            o += (size_t)snprintf(lines + o, n - o, "%s%s=%lld", o ? " " : "", drt_op_name((drt_op)i),
                                  (long long)s->fallback_runs[i]);
    }
    leave(s);
    return (int)total;
}
