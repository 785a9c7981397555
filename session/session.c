/* Sessions: a model's weights uploaded once to a backend, a KV cache that
 * stays there, and forward graphs built once per shape class.
 *
 * A batch session holds max_seqs sequences (slots) of ctx positions each.
 * A forward runs n rows, each a token of some slot at its next position:
 * the graph's ROPE, KV_WRITE and attention read each row's cache base (its
 * slot's first cache row) and position from the rows tensor (drt_exec), so
 * one forward carries rows of many sequences and reads each weight once.
 * Graphs are built per shape class (T rows, L of them with logits): T is n
 * rounded up to a bucket (1, 2, 4, 8, 16, then multiples of 16) and the rows
 * past n are padding: token 0 at position 0 of a scratch cache row past
 * every slot, so a plan keeps fixed shapes and allocates nothing. Up to
 * N_GRAPHS graphs are kept, the least recently used one rebuilt when another
 * is needed; the one-row graph is built at creation. A drt_session is the
 * one-sequence case: a batch session with one slot. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "drt_settings.h"
#include "drt_kv.h"
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
    int row;          /* the row of the forward whose q and lambda are kept (its last real one) */
    int left;         /* nodes still to see: the rest of a re-run is skipped */
    int have;         /* the rows are those of the last forward (f) */
    drt_status st;
} probe_ctx;

static int probe_layer(const probe_ctx *c, const drt_tensor *t, int *lam);
static bool probe_want(void *ctx, const drt_tensor *t);
static int probe_seen(void *ctx, const drt_node_seen *ev, const drt_exec *ex);

#define N_GRAPHS 8

struct drt_batch_session {
    drt_model *m; /* a reference (model_ref.c) */
    drt_backend *be;
    drt_device_weights *dw;            /* the backend instance and the weights on it, maybe shared */
    drt_graph *store;                  /* owns the cache tensors */
    drt_model_tensors mt;              /* the weights (dw's) and the caches */
    int max_seqs, ctx, max_rows;       /* slots, positions per slot, rows per forward */
    int *len;                          /* per slot: positions held */
    int check_finite;                  /* drt_session_opts.check_finite or DIFFRT_CHECK_FINITE */
    drt_dtype kv_type;                 /* the caches' type (drt_kv.h) */
    drt_forward_graph graph[N_GRAPHS]; /* g NULL: a free entry */
    uint64_t used[N_GRAPHS], tick;     /* least recently used goes first */
    drt_forward_graph *last;           /* the graph of the last successful forward */
    int last_row;                      /* its last real row (the attention probe's) */
    int32_t *ids, *rows, *sel;         /* host staging, max_rows each (rows: 2 per row) */
    int64_t fallback_runs[DRT_OP_COUNT];
    drt_observer obs; /* on_node NULL: none (drt_session_set_observer) */
    int attn_bits;    /* drt_session_set_attn_bits: put on every attention node built */
    int keep_probe;   /* drt_session_keep_attention */
    probe_ctx probe;  /* its rows; probe.f: the forward they are of, NULL: none */
    /* held by whichever thread is inside the session (diffrt.h): a second
     * thread gets DRT_ERR_BUSY from the calls with a status and waits in the
     * others, so two forwards never share the KV cache, the lengths and the
     * graphs' arenas (they did: most forwards from two threads came out wrong) */
    pthread_mutex_t mu;
};

/* the one-sequence session: slot 0 of a batch session */
struct drt_session {
    drt_batch_session b;
};

/* Takes the session for this call, or DRT_ERR_BUSY naming `what`; then its
 * backend instance, which sessions of one model may share (waits for the
 * other session's call). */
static drt_status enter(drt_batch_session *s, const char *what) {
    if (pthread_mutex_trylock(&s->mu) != 0)
        return drt_set_error(DRT_ERR_BUSY, "%s: the session is in use by another thread", what);
    drt_device_weights_lock(s->dw);
    return DRT_OK;
}

/* For the calls without a status: wait for the thread inside. The getters
 * take a const session; the mutex is its one mutable part. */
static void wait_enter(const drt_batch_session *s) {
    pthread_mutex_lock((pthread_mutex_t *)&s->mu);
}

static void leave(const drt_batch_session *s) {
    pthread_mutex_unlock((pthread_mutex_t *)&s->mu);
}

/* leaves a call entered with enter() */
static void leave_call(drt_batch_session *s) {
    drt_device_weights_unlock(s->dw);
    leave(s);
}

static void forward_free(drt_forward_graph *f) {
    drt_plan_free(f->plan);
    drt_graph_free(f->g);
    free(f->q_rope);
    free(f->lambda);
    memset(f, 0, sizeof *f);
}

void drt_batch_session_free(drt_batch_session *s) {
    if (!s) return;
    /* a forward in flight on another thread finishes first (its last use of
     * s, diffrt.h); unlocked again so that the mutex is destroyed unlocked */
    wait_enter(s);
    leave(s);
    pthread_mutex_destroy(&s->mu);
    drt_device_weights_lock(s->dw); /* the plans and caches go back to a maybe shared instance */
    for (int i = 0; i < N_GRAPHS; i++) forward_free(&s->graph[i]);
    for (int l = 0; l < s->probe.n_layers; l++) {
        if (s->probe.q) free(s->probe.q[l]);
        if (s->probe.lam) free(s->probe.lam[l]);
    }
    free(s->probe.q);
    free(s->probe.lam);
    free(s->len);
    free(s->ids);
    free(s->rows);
    free(s->sel);
    drt_graph_free(s->store);
    free(s->mt.layers);
    drt_device_weights_unlock(s->dw);
    drt_device_weights_put(s->dw);
    drt_model *m = s->m;
    free(s);
    /* last: the buffers above may wrap the model's memory */
    if (m) drt_model_unref(m);
}

void drt_session_free(drt_session *s) {
    drt_batch_session_free(s ? &s->b : NULL);
}

/* attention nodes carry the logit quantization in ip[1] (ref_ops.h) */
static void put_attn_bits(drt_forward_graph *f, int bits) {
    for (int i = 0; f->g && i < f->g->n_nodes; i++) {
        drt_tensor *t = f->g->nodes[i];
        if (t->op == DRT_OP_ATTN || t->op == DRT_OP_DIFF_ATTN) t->ip[1] = bits;
    }
}

static drt_status build(drt_batch_session *s, int T, int L, drt_forward_graph *f) {
    drt_status st = drt_build_forward(s->m, &s->mt, T, L, f);
    if (st == DRT_OK) put_attn_bits(f, s->attn_bits);
    if (st == DRT_OK) st = drt_plan_create(f->g, s->be, &f->plan);
    if (st != DRT_OK) forward_free(f);
    return st;
}

/* The graph for T rows with L logits rows: a kept one, else built in a free
 * entry or in place of the least recently used. */
static drt_status graph_for(drt_batch_session *s, int T, int L, drt_forward_graph **out) {
    int victim = 0;
    for (int i = 0; i < N_GRAPHS; i++) {
        drt_forward_graph *f = &s->graph[i];
        if (f->g && f->T == T && f->L == L) {
            s->used[i] = ++s->tick;
            *out = f;
            return DRT_OK;
        }
        if (!f->g || (s->graph[victim].g && s->used[i] < s->used[victim])) victim = i;
    }
    drt_forward_graph *f = &s->graph[victim];
    if (s->last == f) s->last = NULL;
    if (s->probe.f == f) s->probe.f = NULL;
    forward_free(f);
    drt_status st = build(s, T, L, f);
    if (st != DRT_OK) return st;
    s->used[victim] = ++s->tick;
    *out = f;
    return DRT_OK;
}

/* rows per forward, as built: n rounded up to 1, 2, 4, 8, 16, then a
 * multiple of 16 (at most 15 rows of padding), never past max */
static int bucket(int n, int max) {
    int b = 1;
    if (n <= 16)
        while (b < n) b *= 2;
    else
        b = (n + 15) / 16 * 16;
    return b < max ? b : max;
}

static drt_status create(drt_model *m, const drt_session_opts *opts, const drt_batch_opts *bo, const char *fn,
                         drt_batch_session **out) {
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!m) return drt_set_error(DRT_ERR_INVALID_ARG, "%s: no model (m is NULL)", fn);
    drt_session_opts o = {0};
    if (opts) o = *opts;
    drt_batch_opts b = {0};
    if (bo) b = *bo;
    const drt_model_info *I = &m->info;
    if (o.max_ctx < 0 || o.max_ctx > DRT_MAX_CTX)
        return drt_set_error(DRT_ERR_INVALID_ARG,
                             "max_ctx %d is out of range: 1 .. %d positions (0: the model's "
                             "max_position_embeddings)",
                             o.max_ctx, DRT_MAX_CTX);
    if (b.max_seqs < 0 || b.max_seqs > DRT_MAX_SEQS)
        return drt_set_error(DRT_ERR_INVALID_ARG, "max_seqs %d is out of range: 1 .. %d sequences (0: 1)", b.max_seqs,
                             DRT_MAX_SEQS);
    if (b.ctx_per_seq < 0 || b.ctx_per_seq > DRT_MAX_CTX)
        return drt_set_error(DRT_ERR_INVALID_ARG,
                             "ctx_per_seq %d is out of range: 1 .. %d positions (0: as max_ctx decides)", b.ctx_per_seq,
                             DRT_MAX_CTX);
    if (b.max_batch_rows < 0 || b.max_batch_rows > DRT_MAX_BATCH_ROWS)
        return drt_set_error(DRT_ERR_INVALID_ARG, "max_batch_rows %d is out of range: 1 .. %d rows (0: %d)",
                             b.max_batch_rows, DRT_MAX_BATCH_ROWS, DRT_DEFAULT_BATCH_ROWS);
    int ctx = b.ctx_per_seq > 0 ? b.ctx_per_seq : o.max_ctx > 0 ? o.max_ctx : (I->max_ctx < 4096 ? I->max_ctx : 4096);
    if (ctx <= 0)
        return drt_set_error(DRT_ERR_INVALID_ARG,
                             "the model's max_position_embeddings is %d: give the context "
                             "(max_ctx, --ctx) explicitly",
                             I->max_ctx);
    int seqs = b.max_seqs > 0 ? b.max_seqs : 1;
    if ((int64_t)seqs * ctx + 1 > INT32_MAX)
        return drt_set_error(DRT_ERR_INVALID_ARG, "%d sequences x %d positions is more than one cache holds (%d rows)",
                             seqs, ctx, INT32_MAX - 1);
    int env_finite; /* check_finite (DIFFRT_CHECK_FINITE=1 for every session) */
    drt_status est = drt_setting_bool(o.settings, "check_finite", &env_finite);
    if (est != DRT_OK) return est;
    const char *kvs = o.kv_type; /* "": the backend's default, once it is known */
    if (!kvs || !*kvs) est = drt_setting_str(o.settings, "kv_type", &kvs);
    if (est != DRT_OK) return est;
    drt_dtype kvt = DRT_DTYPE_COUNT;
    if (strcmp(kvs, "f32") == 0) kvt = DRT_F32;
    if (strcmp(kvs, "f16") == 0) kvt = DRT_F16;
    if (strcmp(kvs, "q8_0") == 0) kvt = DRT_Q8_0;
    if (*kvs && kvt == DRT_DTYPE_COUNT)
        return drt_set_error(DRT_ERR_INVALID_ARG, "kv_type \"%.32s\": expected f32, f16 or q8_0", kvs);
    if (kvt == DRT_Q8_0 && (I->dk % DRT_QK || I->dv % DRT_QK))
        return drt_set_error(DRT_ERR_UNSUPPORTED,
                             "kv_type q8_0 needs head widths that are multiples of %d; this model's are dk %d, dv %d "
                             "(use f16 or f32)",
                             DRT_QK, I->dk, I->dv);
    /* the one-sequence session is the start of a batch session (drt_session) */
    drt_batch_session *s = calloc(1, sizeof(drt_session) > sizeof *s ? sizeof(drt_session) : sizeof *s);
    if (!s) return drt_set_error(DRT_ERR_OOM, "out of memory");
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        free(s);
        return drt_set_error(DRT_ERR_OOM, "%s: cannot initialise the session's mutex", fn);
    }
    s->m = m;
    drt_model_ref(m); /* dropped by drt_batch_session_free, failure below included */
    s->max_seqs = seqs;
    s->ctx = ctx;
    s->max_rows = b.max_batch_rows > 0 ? b.max_batch_rows : bo ? DRT_DEFAULT_BATCH_ROWS : ctx;
    s->check_finite = o.check_finite || env_finite;
    s->len = calloc((size_t)seqs, sizeof *s->len);
    s->ids = malloc(sizeof(int32_t) * (size_t)s->max_rows);
    s->rows = malloc(2 * sizeof(int32_t) * (size_t)s->max_rows);
    s->sel = malloc(sizeof(int32_t) * (size_t)s->max_rows);
    drt_status st = s->len && s->ids && s->rows && s->sel ? DRT_OK : drt_set_error(DRT_ERR_OOM, "out of memory");
    if (st == DRT_OK) st = drt_device_weights_get(m, o.backend, o.device, o.threads, o.settings, &s->dw);
    if (st == DRT_OK) {
        s->be = s->dw->be;
        s->kv_type = kvt != DRT_DTYPE_COUNT ? kvt : strcmp(s->be->ops->name, "cpu") == 0 ? DRT_F16 : DRT_F32;
        drt_device_weights_lock(s->dw); /* held while the caches and the first plan are made */
        s->store = drt_graph_new();
        s->mt = s->dw->w;
        s->mt.layers = calloc((size_t)I->n_layers, sizeof *s->mt.layers);
        if (!s->store || !s->mt.layers)
            st = drt_set_error(DRT_ERR_OOM, "out of memory");
        else
            memcpy(s->mt.layers, s->dw->w.layers, sizeof *s->mt.layers * (size_t)I->n_layers);
    }
    s->mt.n_layers = I->n_layers;
    s->probe.n_layers = I->n_layers;
    s->probe.q = calloc((size_t)I->n_layers, sizeof(float *));
    s->probe.lam = calloc((size_t)I->n_layers, sizeof(float *));
    if (st == DRT_OK && (!s->probe.q || !s->probe.lam)) st = drt_set_error(DRT_ERR_OOM, "out of memory");
    /* slot i's positions are cache rows i*ctx .., then one scratch row that
     * the padding rows write and read */
    const int64_t cache_rows = (int64_t)s->max_seqs * s->ctx + 1;
    for (int l = 0; st == DRT_OK && l < I->n_layers; l++) {
        drt_layer_tensors *L = &s->mt.layers[l];
        char nm[32];
        snprintf(nm, sizeof nm, "k_cache.%d", l);
        if (I->arch == DRT_ARCH_TRANSFORMER)
            L->k_cache = drt_new_tensor_3d(s->store, s->kv_type, cache_rows, I->n_kv_groups, I->dk, nm);
        else
            L->k_cache = drt_new_tensor_4d(s->store, s->kv_type, cache_rows, I->n_kv_groups, I->kv_m, I->dk, nm);
        snprintf(nm, sizeof nm, "v_cache.%d", l);
        L->v_cache = drt_new_tensor_3d(s->store, s->kv_type, cache_rows, I->n_kv_groups, I->dv, nm);
        if (!L->k_cache || !L->v_cache) {
            st = s->store->err;
            break;
        }
        L->k_cache->flags |= DRT_TF_CACHE;
        L->v_cache->flags |= DRT_TF_CACHE;
        drt_tensor *kv[2] = {L->k_cache, L->v_cache};
        st = drt_alloc_tensors(s->be, kv, 2);
    }
    drt_forward_graph *f;
    if (st == DRT_OK) st = graph_for(s, 1, 1, &f);
    /* a cache the backend cannot read in its type would run every attention
     * on the reference, the cache copied across each time: refused */
    if (st == DRT_OK && s->kv_type != DRT_F32 &&
        drt_plan_fallback_count(f->plan, DRT_OP_KV_WRITE) + drt_plan_fallback_count(f->plan, DRT_OP_ATTN) +
                drt_plan_fallback_count(f->plan, DRT_OP_DIFF_ATTN) >
            0)
        st = drt_set_error(DRT_ERR_UNSUPPORTED,
                           "kv_type %s: the %s backend cannot run this model's attention on a %s KV cache (use f32)",
                           drt_dtype_name(s->kv_type), s->be->ops->name, drt_dtype_name(s->kv_type));
    if (s->dw) drt_device_weights_unlock(s->dw);
    if (st != DRT_OK) {
        drt_batch_session_free(s);
        return st;
    }
    *out = s;
    return DRT_OK;
}

drt_status drt_batch_session_create(drt_model *m, const drt_session_opts *opts, const drt_batch_opts *b,
                                    drt_batch_session **out) {
    drt_batch_opts d = {0};
    return create(m, opts, b ? b : &d, "drt_batch_session_create", out);
}

drt_status drt_session_create(drt_model *m, const drt_session_opts *opts, drt_session **out) {
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_session_create: out is NULL");
    drt_batch_session *b;
    /* one slot, a forward of up to the whole context */
    drt_status st = create(m, opts, NULL, "drt_session_create", &b);
    *out = (drt_session *)b;
    return st;
}

static void add_fallbacks(drt_batch_session *s, const drt_plan *p, const int64_t before[DRT_OP_COUNT]) {
    const int64_t *now = drt_plan_fallback_runs(p);
    for (int i = 0; i < DRT_OP_COUNT; i++) s->fallback_runs[i] += now[i] - before[i];
}

static const char *nonfinite_kind(float v) {
    return isnan(v) ? "NaN" : v > 0 ? "Inf" : "-Inf";
}

/* The logits of the forward f just ran at ex are not finite, first those of
 * row `row` (value v). With the finite check on, the forward is run again op
 * by op to name the first op whose output was not finite, and a weight of it
 * that holds the NaN or Inf. */
static drt_status nonfinite_error(drt_batch_session *s, drt_forward_graph *f, const drt_exec *ex, int row, float v) {
    char why[512];
    if (!s->check_finite) {
        snprintf(why, sizeof why,
                 "the model's weights or activations overflowed; rerun with -v (or "
                 "DIFFRT_CHECK_FINITE=1) to find the first op");
    } else {
        drt_nonfinite nf;
        drt_status st = drt_plan_find_nonfinite(f->plan, ex, &nf);
        int layer = -1;
        if (st != DRT_OK) {
            snprintf(why, sizeof why, "the finite check could not re-run the forward: %.300s", drt_last_error());
        } else if (!nf.node) {
            snprintf(why, sizeof why,
                     "the finite check re-ran the forward op by op and every output was finite "
                     "(the backend is not deterministic?)");
        } else {
            char lay[32] = "", wt[160] = "";
            if (sscanf(nf.node->name, "layers.%d.", &layer) == 1) snprintf(lay, sizeof lay, " (layer %d)", layer);
            if (nf.weight)
                snprintf(wt, sizeof wt, ", whose weight '%s' holds %s", nf.weight->name,
                         nonfinite_kind(nf.weight_value));
            snprintf(why, sizeof why, "first non-finite output: %s '%s'%s%s", drt_op_name(nf.node->op), nf.node->name,
                     lay, wt);
        }
    }
    int pos = ex->rows[2 * row + 1], seq = ex->rows[2 * row] / s->ctx;
    if (s->max_seqs == 1)
        return drt_set_error(DRT_ERR_NUMERIC, "logits at position %d are not finite (%s); %s", pos, nonfinite_kind(v),
                             why);
    return drt_set_error(DRT_ERR_NUMERIC, "logits of sequence %d at position %d are not finite (%s); %s", seq, pos,
                         nonfinite_kind(v), why);
}

/* The index of the first NaN or Inf of x[0..n), or -1. The common all-finite
 * case is one pass of 8 independent lanes (the per-element early-exit loop
 * cost ~20 us on a decode step's 32000 logits). */
static int64_t first_nonfinite(const float *x, int64_t n) {
    int bad = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) bad |= !(fabsf(x[i + j]) <= FLT_MAX);
    for (; i < n; i++) bad |= !(fabsf(x[i]) <= FLT_MAX);
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
 * may be absent) on one run of graph f with n real rows, n_flag of them
 * with logits. */
typedef struct {
    const drt_observer *obs;
    drt_plan_profile *prof;
    probe_ctx *probe;
    const drt_forward_graph *f;
    int n, n_flag;
} observe_ctx;

/* Is t past the gather of the logits rows (L rows, not T)? */
static int in_head(const drt_forward_graph *f, const drt_tensor *t) {
    if (t == f->sel) return 1;
    for (int i = f->g->n_nodes - 1; i >= 0; i--) {
        if (f->g->nodes[i] == t) return 1;
        if (f->g->nodes[i]->op == DRT_OP_EMBED && f->g->nodes[i]->src[0] == f->sel) break; /* logit_rows: the first */
    }
    return 0;
}

/* An observer sees the forward's rows, not the padding the session adds at
 * their end: a tensor of the graph's rows shows the real ones. */
static void trim_rows(const observe_ctx *c, const drt_tensor *t, drt_node_tensor *nt) {
    if (t->flags & (DRT_TF_WEIGHT | DRT_TF_CACHE) || nt->nd < 1) return;
    int head = in_head(c->f, t);
    if (nt->ne[0] == (head ? c->f->L : c->f->T)) nt->ne[0] = head ? c->n_flag : c->n;
}

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
    drt_node_event e = {.op = drt_op_name(t->op),
                        .layer = layer_of(t->name),
                        .p0 = ex->first_pos,
                        .seconds = ev->seconds,
                        .fallback = ev->fallback};
    node_tensor(t, ev->data, &e.out);
    if (t->op == DRT_OP_KV_WRITE)
        e.out.ne[0] = c->n; /* the rows it wrote */
    else
        trim_rows(c, t, &e.out);
    for (int j = 0; j < DRT_MAX_SRC; j++) {
        if (!t->src[j]) continue;
        node_tensor(t->src[j], drt_host_ptr(t->src[j]), &e.src[e.n_src]);
        trim_rows(c, t->src[j], &e.src[e.n_src++]);
    }
    c->obs->on_node(c->obs->ctx, &e);
    return 0;
}

drt_status drt_session_set_observer(drt_session *ss, const drt_observer *obs) {
    if (!ss) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_session_set_observer: the session is NULL");
    drt_batch_session *s = &ss->b;
    drt_status st = enter(s, "drt_session_set_observer");
    if (st != DRT_OK) return st;
    if (obs && obs->on_node)
        s->obs = *obs;
    else
        memset(&s->obs, 0, sizeof s->obs);
    leave_call(s);
    return DRT_OK;
}

drt_status drt_session_keep_attention(drt_session *ss, int on) {
    if (!ss) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_session_keep_attention: the session is NULL");
    drt_batch_session *s = &ss->b;
    drt_status st = enter(s, "drt_session_keep_attention");
    if (st != DRT_OK) return st;
    s->keep_probe = on != 0;
    leave_call(s);
    return DRT_OK;
}

drt_status drt_session_set_attn_bits(drt_session *ss, int bits) {
    drt_batch_session *s = &ss->b;
    if (bits && strcmp(s->be->ops->name, "ref") != 0)
        return drt_set_error(DRT_ERR_UNSUPPORTED, "attention logit quantization runs on the ref backend only (not %s)",
                             s->be->ops->name);
    drt_status st = enter(s, "drt_session_set_attn_bits");
    if (st != DRT_OK) return st;
    s->attn_bits = bits;
    for (int i = 0; i < N_GRAPHS; i++) put_attn_bits(&s->graph[i], bits);
    leave_call(s);
    return DRT_OK;
}

/* ---- forwards ------------------------------------------------------------------ */

/* A forward's rows as the entry points give them: drt_batch, or (seq NULL)
 * the one sequence of a drt_session. flags NULL: the last row of each
 * sequence's run has logits, or every row when all. */
typedef struct {
    int n;
    const int32_t *token, *seq, *pos;
    const int8_t *flags;
    int all;
} rowset;

static int row_seq(const rowset *r, int i) {
    return r->seq ? r->seq[i] : 0;
}

static int row_flag(const rowset *r, int i) {
    if (r->all) return 1;
    if (r->flags) return r->flags[i] != 0;
    return i + 1 == r->n || row_seq(r, i + 1) != row_seq(r, i);
}

/* The rules of a batch (diffrt.h), each broken one a message naming the row;
 * *n_flag: the rows with logits. Writes nothing: the staging buffers still
 * hold the last forward's rows (the attention probe re-runs it). */
static drt_status check_rows(drt_batch_session *s, const rowset *r, int *n_flag) {
    const int V = s->m->info.vocab;
    if (r->n < 1 || r->n > s->max_rows)
        return drt_set_error(DRT_ERR_INVALID_ARG,
                             "drt_batch_forward: %d rows (a forward takes 1 .. %d: max_batch_rows)", r->n, s->max_rows);
    if (!r->token || (!r->seq && s->max_seqs > 1))
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_batch_forward: %s is NULL", !r->token ? "token" : "seq");
    *n_flag = 0;
    int start = 0; /* first row of the current sequence's run */
    for (int i = 0; i < r->n; i++) {
        int seq = row_seq(r, i);
        if (r->token[i] < 0 || r->token[i] >= V)
            return drt_set_error(DRT_ERR_INVALID_ARG, "row %d: token id %d is outside the vocabulary [0, %d)", i,
                                 r->token[i], V);
        if (seq < 0 || seq >= s->max_seqs)
            return drt_set_error(DRT_ERR_INVALID_ARG, "row %d: sequence %d is not a slot of this session (0 .. %d)", i,
                                 seq, s->max_seqs - 1);
        if (i > 0 && seq != row_seq(r, i - 1)) {
            start = i;
            for (int j = 0; j < i; j++)
                if (row_seq(r, j) == seq)
                    return drt_set_error(DRT_ERR_INVALID_ARG,
                                         "row %d: sequence %d also has rows %d .. %d: a sequence's rows must be "
                                         "contiguous",
                                         i, seq, j, i - 1);
        }
        int want = s->len[seq] + (i - start), pos = r->pos ? r->pos[i] : want;
        if (pos != want)
            return drt_set_error(DRT_ERR_INVALID_ARG,
                                 "row %d: position %d of sequence %d, which holds %d positions: its rows continue "
                                 "at %d (drt_seq_truncate first to rewrite)",
                                 i, pos, seq, s->len[seq], want);
        if (pos >= s->ctx)
            return drt_set_error(DRT_ERR_INVALID_ARG,
                                 "row %d: position %d of sequence %d is past its context of %d positions", i, pos, seq,
                                 s->ctx);
        *n_flag += row_flag(r, i);
    }
    return DRT_OK;
}

/* A forward of checked rows with the session entered: logits receives
 * [rows with logits, vocab] in row order. */
static drt_status run_rows(drt_batch_session *s, const rowset *r, int n_flag, float *logits, drt_profile *prof) {
    const drt_model_info *I = &s->m->info;
    const int n = r->n, T = bucket(n, s->max_rows);
    const int L = n_flag <= s->max_seqs ? (T < s->max_seqs ? T : s->max_seqs) : T;
    drt_forward_graph *f;
    drt_status st = graph_for(s, T, L, &f);
    if (st != DRT_OK) return st;
    /* the rows, then the padding: token 0 at position 0 of the scratch row */
    int nf = 0;
    for (int i = 0, start = 0; i < T; i++) {
        if (i < n) {
            int seq = row_seq(r, i);
            if (i > 0 && seq != row_seq(r, i - 1)) start = i;
            s->ids[i] = r->token[i];
            s->rows[2 * i] = seq * s->ctx;
            s->rows[2 * i + 1] = s->len[seq] + (i - start);
            if (row_flag(r, i)) s->sel[nf++] = i;
        } else {
            s->ids[i] = 0;
            s->rows[2 * i] = s->max_seqs * s->ctx;
            s->rows[2 * i + 1] = 0;
        }
    }
    for (int i = nf; i < L; i++) s->sel[i] = 0;
    drt_exec ex;
    st = drt_exec_rows(&ex, s->rows, T);
    int64_t before[DRT_OP_COUNT];
    memcpy(before, drt_plan_fallback_runs(f->plan), sizeof before);
    if (st == DRT_OK) st = drt_tensor_set(f->ids, s->ids, sizeof(int32_t) * (size_t)T);
    if (st == DRT_OK) st = drt_tensor_set(f->sel, s->sel, sizeof(int32_t) * (size_t)L);
    s->last = NULL;
    s->probe.have = 0;
    probe_ctx *pr = s->keep_probe ? &s->probe : NULL;
    if (pr) *pr = (probe_ctx){.f = f, .n_layers = pr->n_layers, .q = pr->q, .lam = pr->lam, .row = n - 1, .left = -1};
    if (st == DRT_OK && (prof || s->obs.on_node || pr)) {
        drt_plan_profile pp = {0};
        observe_ctx oc = {.obs = s->obs.on_node ? &s->obs : NULL,
                          .prof = prof ? &pp : NULL,
                          .probe = pr,
                          .f = f,
                          .n = n,
                          .n_flag = nf};
        drt_plan_observer po = {.want = observe_want, .seen = observe_seen, .ctx = &oc, .no_data = !oc.obs && !pr};
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
    const int64_t V = I->vocab;
    if (st == DRT_OK && nf > 0) st = drt_tensor_get(f->logits, logits, sizeof(float) * (size_t)nf * (size_t)V);
    if (st != DRT_OK) return st;
    /* a NaN or Inf is never handed on as if it were a distribution: no
     * sequence advances, and the probes have nothing to read */
    int64_t i = first_nonfinite(logits, nf * V);
    if (i >= 0) return nonfinite_error(s, f, &ex, s->sel[i / V], logits[i]);
    for (int k = 0; k < n; k++) s->len[row_seq(r, k)] = s->rows[2 * k + 1] + 1;
    s->last = f;
    s->last_row = n - 1;
    s->probe.have = pr && pr->st == DRT_OK;
    return DRT_OK;
}

static drt_status forward_rows(drt_batch_session *s, const rowset *r, float *logits, drt_profile *prof,
                               const char *fn) {
    int n_flag = 0;
    drt_status st = check_rows(s, r, &n_flag);
    if (st == DRT_OK && n_flag > 0 && !logits) st = drt_set_error(DRT_ERR_INVALID_ARG, "%s: logits is NULL", fn);
    if (st == DRT_OK) st = run_rows(s, r, n_flag, logits, prof);
    return st;
}

drt_status drt_batch_forward(drt_batch_session *s, const drt_batch *b, float *logits) {
    if (!s || !b)
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_batch_forward: %s is NULL", !s ? "the session" : "the batch");
    drt_status st = enter(s, "drt_batch_forward");
    if (st != DRT_OK) return st;
    rowset r = {.n = b->n, .token = b->token, .seq = b->seq, .pos = b->pos, .flags = b->logits};
    if (!b->seq) st = drt_set_error(DRT_ERR_INVALID_ARG, "drt_batch_forward: seq is NULL");
    if (st == DRT_OK) st = forward_rows(s, &r, logits, NULL, "drt_batch_forward");
    leave_call(s);
    return st;
}

drt_status drt_seq_truncate(drt_batch_session *s, int seq, int new_len) {
    if (!s) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_seq_truncate: the session is NULL");
    drt_status st = enter(s, "drt_seq_truncate");
    if (st != DRT_OK) return st;
    if (seq < 0 || seq >= s->max_seqs)
        st = drt_set_error(DRT_ERR_INVALID_ARG, "drt_seq_truncate: sequence %d is not a slot of this session (0 .. %d)",
                           seq, s->max_seqs - 1);
    else if (new_len < 0 || new_len > s->len[seq])
        st = drt_set_error(DRT_ERR_INVALID_ARG,
                           "drt_seq_truncate: sequence %d holds %d positions; it can be cut to 0 .. %d, not %d", seq,
                           s->len[seq], s->len[seq], new_len);
    else
        s->len[seq] = new_len;
    if (st == DRT_OK) s->last = NULL; /* the probe's positions are gone */
    leave_call(s);
    return st;
}

int drt_seq_len(const drt_batch_session *s, int seq) {
    if (!s || seq < 0 || seq >= s->max_seqs) return -1;
    wait_enter(s);
    int n = s->len[seq];
    leave(s);
    return n;
}

drt_status drt_batch_session_get_opts(const drt_batch_session *s, drt_batch_opts *out) {
    if (!s || !out)
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_batch_session_get_opts: %s is NULL", !s ? "the session" : "out");
    *out = (drt_batch_opts){.max_seqs = s->max_seqs, .ctx_per_seq = s->ctx, .max_batch_rows = s->max_rows};
    return DRT_OK;
}

/* A prompt longer than DRT_DEFAULT_BATCH_ROWS goes through in forwards of
 * that many rows, as llama.cpp's micro-batches: the activations are planned
 * for 512 rows, not for the whole prompt. Logits: with all, each chunk's
 * rows in place; else the last chunk's last row. A profile counts the call
 * as one forward. A failure leaves the sequence where the call found it.
 * Not while the session keeps its attention probe (its rows are those of
 * one forward). */
static drt_status forward_chunks(drt_batch_session *s, const rowset *r, float *logits, drt_profile *prof) {
    const int C = DRT_DEFAULT_BATCH_ROWS;
    if (r->n <= C || s->keep_probe) return forward_rows(s, r, logits, prof, "drt_session_forward");
    const int len0 = s->len[0], fw0 = prof ? prof->forwards : 0;
    const size_t V = (size_t)s->m->info.vocab;
    drt_status st = DRT_OK;
    for (int i = 0; i < r->n && st == DRT_OK; i += C) {
        rowset c = {.n = r->n - i < C ? r->n - i : C, .token = r->token + i, .all = r->all};
        st = forward_rows(s, &c, r->all ? logits + (size_t)i * V : logits, prof, "drt_session_forward");
    }
    if (st != DRT_OK)
        s->len[0] = len0;
    else if (prof)
        prof->forwards = fw0 + 1;
    return st;
}

/* drt_session_forward, and with prof drt_session_forward_profiled. The busy
 * check comes before the arguments' (a rejected call never ran anyway). */
static drt_status forward(drt_session *ss, const int32_t *ids, int T, float *logits, int all_logits,
                          drt_profile *prof) {
    if (!ss) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_session_forward: the session is NULL");
    drt_batch_session *s = &ss->b;
    drt_status st = enter(s, prof ? "drt_session_forward_profiled" : "drt_session_forward");
    if (st != DRT_OK) return st;
    const int V = s->m->info.vocab;
    if (!ids || !logits)
        st = drt_set_error(DRT_ERR_INVALID_ARG, "drt_session_forward: %s is NULL", !ids ? "ids" : "logits");
    else if (T <= 0)
        st = drt_set_error(DRT_ERR_INVALID_ARG, "forward: %d tokens (need at least 1)", T);
    else if (T > s->ctx - s->len[0])
        st = drt_set_error(DRT_ERR_INVALID_ARG, "forward: %d + %d tokens exceed the context of %d (raise --ctx)",
                           s->len[0], T, s->ctx);
    for (int i = 0; st == DRT_OK && i < T; i++)
        if (ids[i] < 0 || ids[i] >= V)
            st = drt_set_error(DRT_ERR_INVALID_ARG, "token id %d (position %d) is outside the vocabulary [0, %d)",
                               ids[i], i, V);
    rowset r = {.n = T, .token = ids, .all = all_logits != 0};
    if (st == DRT_OK) st = forward_chunks(s, &r, logits, prof);
    leave_call(s);
    return st;
}

_Static_assert(DRT_OP_COUNT <= DRT_PROFILE_MAX_OPS, "drt_profile holds one entry per op");

drt_status drt_session_forward(drt_session *s, const int32_t *ids, int T, float *logits, int all_logits) {
    return forward(s, ids, T, logits, all_logits, NULL);
}

drt_status drt_session_forward_profiled(drt_session *s, const int32_t *ids, int T, float *logits, drt_profile *prof) {
    if (!prof) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_session_forward_profiled: prof is NULL");
    return forward(s, ids, T, logits, 0, prof);
}

void drt_session_reset(drt_session *ss) {
    if (!ss) return;
    drt_batch_session *s = &ss->b;
    wait_enter(s);
    s->len[0] = 0;
    s->last = NULL;
    leave(s);
}

/* Host copy of a device tensor (or of its first n bytes). */
static void *fetch(const drt_tensor *t, size_t n, drt_status *st) {
    if (*st != DRT_OK) return NULL;
    void *h = malloc(n ? n : 1);
    if (!h)
        *st = drt_set_error(DRT_ERR_OOM, "out of memory");
    else
        *st = drt_tensor_get(t, h, n);
    return h;
}

/* the first n elements of a KV cache, widened to f32 */
static float *fetch_kv(const drt_tensor *t, int64_t n, drt_status *st) {
    void *raw = fetch(t, drt_row_bytes(t->type, n), st);
    if (*st != DRT_OK || t->type == DRT_F32) return raw;
    float *y = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!y)
        *st = drt_set_error(DRT_ERR_OOM, "out of memory");
    else
        drt_kv_load(t->type, raw, y, n);
    free(raw);
    return y;
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
    size_t row = ev->nbytes / (size_t)ev->node->ne[0]; /* the bytes of one of its T rows */
    float **dst = lam ? &c->lam[l] : &c->q[l];
    free(*dst);
    *dst = malloc(row);
    if (!*dst) {
        c->st = drt_set_error(DRT_ERR_OOM, "out of memory");
        return 1;
    }
    memcpy(*dst, (const char *)ev->data + (size_t)c->row * row, row); /* the last real row's */
    return --c->left == 0;
}

static drt_status last_attention_entered(drt_batch_session *s, float *weights) {
    const drt_model *m = s->m;
    const drt_model_info *I = &m->info;
    drt_forward_graph *f = s->last;
    if (!f) return drt_set_error(DRT_ERR_INVALID_ARG, "attention probe: no forward has run since the last reset");
    int P = s->len[0], H = I->n_heads, G = I->n_kv_groups, dk = I->dk, km = I->kv_m, NL = I->n_layers;
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
        *pc = (probe_ctx){.f = f, .n_layers = NL, .q = pc->q, .lam = pc->lam, .row = s->last_row};
        for (int l = 0; l < NL; l++) pc->left += 1 + (f->lambda[l] != NULL);
        drt_exec ex; /* the staging buffers hold the last forward's rows */
        st = drt_exec_rows(&ex, s->rows, f->T);
        drt_plan_observer po = {.want = probe_want, .seen = probe_seen, .ctx = pc};
        if (st == DRT_OK) st = drt_plan_run_observed(f->plan, &ex, &po);
        if (st == DRT_OK) st = pc->st;
        pc->have = st == DRT_OK && pc->left == 0;
        if (st == DRT_OK && !pc->have)
            st = drt_set_error(DRT_ERR_INVALID_ARG, "attention probe: the re-run did not reach every layer's q");
    }
    double scale = 1.0 / sqrt((double)dk);
    for (int l = 0; st == DRT_OK && l < NL; l++) {
        const drt_layer_tensors *L = &s->mt.layers[l];
        const float *q = pc->q[l], *lam = f->lambda[l] ? pc->lam[l] : NULL;
        float *k = fetch_kv(L->k_cache, (int64_t)P * G * km * dk, &st);
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

drt_status drt_session_last_attention(drt_session *ss, float *weights) {
    if (!ss || !weights)
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_session_last_attention: %s is NULL",
                             !ss ? "the session" : "weights");
    drt_batch_session *s = &ss->b;
    drt_status st = enter(s, "drt_session_last_attention");
    if (st != DRT_OK) return st;
    st = last_attention_entered(s, weights);
    leave_call(s);
    return st;
}

int drt_session_pos(const drt_session *s) {
    return s ? drt_seq_len(&s->b, 0) : -1;
}

int drt_session_ctx(const drt_session *s) {
    return s ? s->b.ctx : -1;
}

size_t drt_batch_session_kv_bytes(const drt_batch_session *s) {
    if (!s) return 0;
    size_t n = 0;
    for (int l = 0; l < s->m->info.n_layers; l++)
        n += drt_nbytes(s->mt.layers[l].k_cache) + drt_nbytes(s->mt.layers[l].v_cache);
    return n;
}

drt_dtype drt_batch_session_kv_type(const drt_batch_session *s) {
    return s ? s->kv_type : DRT_F32;
}

drt_dtype drt_session_kv_type(const drt_session *s) {
    return s ? s->b.kv_type : DRT_F32;
}

size_t drt_session_kv_bytes(const drt_session *s) {
    return s ? drt_batch_session_kv_bytes(&s->b) : 0;
}

size_t drt_session_activation_bytes(const drt_session *ss, size_t *unplanned) {
    if (!ss) {
        if (unplanned) *unplanned = 0;
        return 0;
    }
    const drt_batch_session *s = &ss->b;
    wait_enter(s);
    const drt_forward_graph *f = s->last;
    for (int i = 0; !f && i < N_GRAPHS; i++)
        if (s->graph[i].g && s->graph[i].T == 1) f = &s->graph[i];
    size_t bytes = f ? drt_plan_arena_bytes(f->plan, unplanned) : 0;
    if (!f && unplanned) *unplanned = 0;
    leave(s);
    return bytes;
}

int drt_batch_session_fallbacks(const drt_batch_session *s, char *lines, size_t n) {
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

int drt_session_fallbacks(const drt_session *s, char *lines, size_t n) {
    if (lines && n) lines[0] = 0;
    return s ? drt_batch_session_fallbacks(&s->b, lines, n) : 0;
}
