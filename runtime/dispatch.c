/* The dispatcher: binds a graph to a backend once (allocation, routing,
 * host mirrors for fallbacks) and then runs it with no allocation.
 *
 * Activation memory is planned once per graph (docs/design.md section 5): every
 * intermediate (a node's result that is not a weight, input, output or
 * cache, and not a view) lives from the node that writes it to the last node
 * that reads it or a view of it, and gets a 256-byte aligned offset inside
 * ONE arena buffer, placed greedily (largest first, at the lowest offset
 * where it overlaps no placed tensor whose lifetime intersects its own).
 * Lifetimes are inclusive, so a node's result never shares storage with
 * its own inputs, and extended by one node (see plan_offsets). An
 * intermediate no node reads is a result the host wants: it lives to the
 * end of the graph. Everything else (leaves, flagged tensors) keeps a
 * buffer of its own.
 *
 * A node the backend does not support runs on the CPU reference: its inputs
 * are downloaded into host mirrors, the reference computes, the result is
 * uploaded back. Every such node is counted per op, so a fallback is never
 * silent (docs/design.md section 5). Mirrors are per tensor and refreshed from
 * the device before every fallback node that reads them, so a tensor whose
 * arena bytes were reused in between is read as it is now, when it is live.
 *
 * The position ops of a graph share one rows tensor (drt_exec): every run
 * first uploads the run's rows into it, so a plan is valid at every position
 * and for every mix of sequences. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "drt_graph.h"
#include "drt_half.h"
#include "drt_util.h"

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
    drt_buffer *arena; /* the planned intermediates; NULL when there are none */
    size_t arena_bytes, unplanned_bytes;
    drt_tensor *rows; /* the position ops' rows input, NULL: none */
};

/* ---- activation planning ------------------------------------------------- */

#define ARENA_ALIGN ((size_t)256)

typedef struct {
    drt_tensor *t;
    int first, last; /* node indices, inclusive */
    int read;        /* some node reads it (or a view of it) */
    size_t size;     /* bytes it occupies: nbytes rounded up to 16, at least 16 */
    size_t offs;
} interval;

static size_t align_up(size_t n, size_t a) {
    return (n + a - 1) / a * a;
}

static int by_ptr(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)((const interval *)a)->t, y = (uintptr_t)((const interval *)b)->t;
    return x < y ? -1 : x > y;
}

/* largest first; equal sizes in the order they are written */
static int by_size(const void *a, const void *b) {
    const interval *x = a, *y = b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return (x->first > y->first) - (x->first < y->first);
}

static int by_offs(const void *a, const void *b) {
    const interval *x = *(const interval *const *)a, *y = *(const interval *const *)b;
    return (x->offs > y->offs) - (x->offs < y->offs);
}

/* the interval of t's base, or NULL when the base is not planned (sorted by pointer) */
static interval *find(interval *iv, int n, const drt_tensor *t) {
    if (!t) return NULL;
    interval key = {.t = (drt_tensor *)(t->view_src ? t->view_src : t)};
    return bsearch(&key, iv, (size_t)n, sizeof *iv, by_ptr);
}

static bool plannable(const drt_tensor *t) {
    const int keep = DRT_TF_WEIGHT | DRT_TF_INPUT | DRT_TF_OUTPUT | DRT_TF_CACHE;
    return t->op != DRT_OP_NONE && !t->view_src && !(t->flags & keep) && !t->buf;
}

/* Lifetimes and offsets of g's intermediates into iv (sorted by size);
 * returns the arena size, or (size_t)-1 when out of memory. */
static size_t plan_offsets(const drt_graph *g, interval *iv, int n) {
    if (n <= 0) return 0;
    qsort(iv, (size_t)n, sizeof *iv, by_ptr);
    for (int i = 0; i < g->n_nodes; i++) {
        const drt_tensor *t = g->nodes[i];
        interval *w = find(iv, n, t); /* a write: the node itself, or the base it writes in place */
        if (w) {
            if (i < w->first) w->first = i;
            if (i > w->last) w->last = i;
        }
        for (int j = 0; j < DRT_MAX_SRC; j++) {
            interval *r = find(iv, n, t->src[j]);
            if (!r) continue;
            if (i < r->first) r->first = i;
            if (i > r->last) r->last = i;
            r->read = 1;
        }
    }
    /* bytes freed by node i's reads are reused from node i + 2 on: a GPU
     * backend that records node i + 1 beside node i without a barrier
     * (independent dispatches) need not order a write of i + 1 after a read
     * of i (Vulkan: 30 barriers per decode step of the diff_v2 fixture
     * instead of 36, for about 10% more arena) */
    for (int k = 0; k < n; k++) iv[k].last = iv[k].read ? iv[k].last + 1 : g->n_nodes - 1;
    qsort(iv, (size_t)n, sizeof *iv, by_size);
    interval **live = malloc(sizeof *live * (size_t)n);
    if (!live) return (size_t)-1;
    size_t top = 0;
    for (int k = 0; k < n; k++) {
        /* the placed tensors alive at the same time, by offset; the first gap that fits */
        int nl = 0;
        for (int j = 0; j < k; j++)
            if (iv[j].first <= iv[k].last && iv[k].first <= iv[j].last) live[nl++] = &iv[j];
        qsort(live, (size_t)nl, sizeof *live, by_offs);
        size_t off = 0;
        for (int j = 0; j < nl; j++) {
            if (off + iv[k].size <= live[j]->offs) break;
            size_t end = align_up(live[j]->offs + live[j]->size, ARENA_ALIGN);
            if (end > off) off = end;
        }
        iv[k].offs = off;
        if (off + iv[k].size > top) top = off + iv[k].size;
    }
    free(live);
    return top;
}

/* Places the intermediates of g in one arena buffer of be. */
static drt_status plan_arena(drt_plan *p) {
    drt_graph *g = p->g;
    int n = 0;
    for (int i = 0; i < g->n_owned; i++) n += plannable(g->owned[i]);
    if (n == 0) return DRT_OK;
    interval *iv = calloc((size_t)n, sizeof *iv);
    if (!iv) return drt_set_error(DRT_ERR_OOM, "%s: out of memory planning activations", p->be->ops->name);
    n = 0;
    for (int i = 0; i < g->n_owned; i++) {
        drt_tensor *t = g->owned[i];
        if (!plannable(t)) continue;
        size_t nb = drt_nbytes(t);
        iv[n++] = (interval){.t = t, .first = g->n_nodes, .last = -1, .size = nb ? align_up(nb, 16) : 16};
        p->unplanned_bytes += nb;
    }
    size_t top = plan_offsets(g, iv, n);
    drt_status s = DRT_OK;
    if (top == (size_t)-1) s = drt_set_error(DRT_ERR_OOM, "%s: out of memory planning activations", p->be->ops->name);
    if (s == DRT_OK) {
        p->arena = calloc(1, sizeof *p->arena);
        if (!p->arena) s = drt_set_error(DRT_ERR_OOM, "%s: out of memory", p->be->ops->name);
    }
    if (s == DRT_OK) s = p->be->ops->buf_alloc(p->be, top, p->arena);
    if (s != DRT_OK) {
        free(p->arena);
        p->arena = NULL;
        free(iv);
        return s;
    }
    p->arena->be = p->be;
    p->arena_bytes = top;
    for (int k = 0; k < n; k++) {
        iv[k].t->buf = p->arena;
        iv[k].t->offs = iv[k].offs;
    }
    free(iv);
    return DRT_OK;
}

size_t drt_plan_arena_bytes(const drt_plan *p, size_t *unplanned) {
    if (unplanned) *unplanned = p ? p->unplanned_bytes : 0;
    return p ? p->arena_bytes : 0;
}

static void *mirror_of(drt_plan *p, const drt_tensor *t) {
    for (int i = 0; i < p->n_mirrors; i++)
        if (p->mirrors[i].t == t) return p->mirrors[i].host;
    return NULL;
}

static drt_status add_mirror(drt_plan *p, const drt_tensor *t) {
    if (!t || mirror_of(p, t) || drt_host_ptr(t)) return DRT_OK;
    mirror *nm = realloc(p->mirrors, (size_t)(p->n_mirrors + 1) * sizeof *nm);
    if (!nm) return drt_set_error(DRT_ERR_OOM, "%s: out of memory", p->be->ops->name);
    p->mirrors = nm;
    void *h = malloc(drt_nbytes(t) ? drt_nbytes(t) : 1);
    if (!h) return drt_set_error(DRT_ERR_OOM, "%s: out of memory for a host mirror of %s", p->be->ops->name, t->name);
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
    if (p->arena) {
        /* the graph's tensors stop pointing into the arena (views too) */
        for (int i = 0; i < p->g->n_owned; i++) {
            drt_tensor *t = p->g->owned[i];
            if (t->buf != p->arena) continue;
            t->buf = NULL;
            t->offs = 0;
        }
        p->be->ops->buf_free(p->be, p->arena);
        free(p->arena);
    }
    for (int i = 0; i < p->n_mirrors; i++) free(p->mirrors[i].host);
    free(p->mirrors);
    free(p->fallback);
    free(p);
}

drt_status drt_plan_create(drt_graph *g, drt_backend *be, drt_plan **out) {
    *out = NULL;
    if (g->err != DRT_OK) return drt_set_error(g->err, "graph has a construction error");
    drt_plan *p = calloc(1, sizeof *p);
    if (!p) return drt_set_error(DRT_ERR_OOM, "%s: out of memory", be->ops->name);
    p->g = g;
    p->be = be;
    p->fallback = calloc((size_t)g->n_nodes + 1, 1);
    drt_status s = p->fallback ? DRT_OK : drt_set_error(DRT_ERR_OOM, "%s: out of memory", be->ops->name);
    if (s == DRT_OK) s = plan_arena(p);
    if (s == DRT_OK) s = drt_alloc_tensors(be, g->owned, g->n_owned);
    for (int i = 0; s == DRT_OK && i < g->n_nodes; i++) {
        drt_tensor *t = g->nodes[i];
        for (int j = 0; j < DRT_MAX_SRC; j++)
            if (t->src[j] && !t->src[j]->buf)
                s = drt_set_error(DRT_ERR_INVALID_ARG, "%s: input %s has no storage", drt_op_name(t->op),
                                  t->src[j]->name);
        if (s != DRT_OK) break;
        drt_tensor *r = t->src[DRT_SRC_ROWS];
        if (r && p->rows && r != p->rows)
            s = drt_set_error(DRT_ERR_INVALID_ARG, "%s %s: the graph's position ops take two rows tensors",
                              drt_op_name(t->op), t->name);
        if (r) p->rows = r;
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
    s = drt_registry_fallback()->run_node(t, dst, srcs, ex);
    if (s == DRT_OK && !drt_host_ptr(dst_t)) s = drt_tensor_set((drt_tensor *)dst_t, dst, drt_nbytes(dst_t));
    p->fallback_runs[t->op]++;
    return s;
}

/* Runs nodes [i, end) of the plan: batches the backend runs as one
 * submission, fallbacks one by one on the CPU reference. */
static drt_status run_range(drt_plan *p, int i, int end, const drt_exec *ex) {
    drt_graph *g = p->g;
    while (i < end) {
        if (p->fallback[i]) {
            drt_status s = run_fallback(p, g->nodes[i], ex);
            if (s != DRT_OK) return s;
            i++;
            continue;
        }
        int j = i;
        while (j < end && !p->fallback[j]) j++;
        drt_status s = p->be->ops->compute(p->be, g->nodes + i, j - i, ex);
        if (s != DRT_OK) return s;
        i = j;
    }
    return DRT_OK;
}

/* The run's checks, then its rows into the graph's rows tensor. */
static drt_status check_exec_all(const drt_plan *p, const drt_exec *ex) {
    for (int i = 0; i < p->g->n_nodes; i++) {
        drt_status s = drt_op_check_exec(p->g->nodes[i], ex);
        if (s != DRT_OK) return s;
    }
    if (!p->rows) return DRT_OK;
    return drt_tensor_set(p->rows, ex->rows, sizeof(int32_t) * 2 * (size_t)ex->n_rows);
}

drt_status drt_plan_run(drt_plan *p, const drt_exec *ex) {
    drt_status s = check_exec_all(p, ex);
    if (s == DRT_OK) s = run_range(p, 0, p->g->n_nodes, ex);
    return s == DRT_OK ? p->be->ops->synchronize(p->be) : s;
}

/* ---- observing nodes --------------------------------------------------------- */

/* Node t's output in host memory for an observer (a KV_WRITE: the T rows
 * it wrote, (T, ...), gathered from their cache rows; the rest is other
 * runs'), in place when host-visible, else downloaded into *tmp (grown to
 * *cap bytes). */
static drt_status read_output(const drt_tensor *t, const drt_exec *ex, void **tmp, size_t *cap, const void **data,
                              size_t *n) {
    *n = drt_nbytes(t);
    int kv = t->op == DRT_OP_KV_WRITE && t->ne[0] > 0;
    size_t row = kv ? *n / (size_t)t->ne[0] : 0;
    if (kv) *n = (size_t)t->src[0]->ne[0] * row;
    const char *h = drt_host_ptr(t);
    if (h && !kv) {
        *data = h;
        return DRT_OK;
    }
    if (*n > *cap) {
        void *nt = realloc(*tmp, *n);
        if (!nt) return drt_set_error(DRT_ERR_OOM, "out of memory reading back %s", t->name);
        *tmp = nt;
        *cap = *n;
    }
    *data = *tmp;
    if (!kv) return t->buf->be->ops->download(t->buf->be, t->buf, t->offs, *tmp, *n);
    drt_status s = DRT_OK;
    for (int i = 0; s == DRT_OK && i < ex->n_rows; i++) {
        size_t at = (size_t)(ex->rows[2 * i] + ex->rows[2 * i + 1]) * row;
        char *dst = (char *)*tmp + (size_t)i * row;
        if (h)
            memcpy(dst, h + at, row);
        else
            s = t->buf->be->ops->download(t->buf->be, t->buf, t->offs + at, dst, row);
    }
    return s;
}

drt_status drt_plan_run_observed(drt_plan *p, const drt_exec *ex, const drt_plan_observer *obs) {
    if (!obs) return drt_plan_run(p, ex);
    drt_graph *g = p->g;
    drt_status s = check_exec_all(p, ex);
    /* work queued before this call is not charged to the first wanted node */
    if (s == DRT_OK) s = p->be->ops->synchronize(p->be);
    void *tmp = NULL;
    size_t cap = 0;
    int i = 0;
    while (s == DRT_OK && i < g->n_nodes) {
        double t0 = drt_now_s();
        int w = i; /* the next wanted node, or n_nodes */
        while (w < g->n_nodes && obs->want && !obs->want(obs->ctx, g->nodes[w])) w++;
        int end = w < g->n_nodes ? w + 1 : g->n_nodes;
        s = run_range(p, i, end, ex);
        if (s == DRT_OK) s = p->be->ops->synchronize(p->be);
        i = end;
        if (s != DRT_OK || w == g->n_nodes) break;
        drt_node_seen ev = {.node = g->nodes[w], .seconds = drt_now_s() - t0, .fallback = p->fallback[w]};
        if (!obs->no_data && g->nodes[w]->buf) s = read_output(g->nodes[w], ex, &tmp, &cap, &ev.data, &ev.nbytes);
        if (s == DRT_OK && obs->seen(obs->ctx, &ev, ex)) break;
    }
    free(tmp);
    return s;
}

/* ---- profiling: node by node, synchronized ---------------------------------- */

void drt_plan_profile_add(drt_plan_profile *prof, const drt_node_seen *ev, const drt_exec *ex) {
    const drt_tensor *t = ev->node;
    const drt_op_info *info = drt_op_get(t->op);
    prof->seconds[t->op] += ev->seconds;
    prof->flops[t->op] += info->flops(t, ex);
    prof->bytes[t->op] += info->bytes(t, ex);
    prof->nodes[t->op]++;
    prof->fallback_nodes[t->op] += ev->fallback;
}

static int profile_node(void *ctx, const drt_node_seen *ev, const drt_exec *ex) {
    drt_plan_profile_add(ctx, ev, ex);
    return 0;
}

drt_status drt_plan_run_profiled(drt_plan *p, const drt_exec *ex, drt_plan_profile *prof) {
    drt_plan_observer obs = {.seen = profile_node, .ctx = prof, .no_data = true};
    return drt_plan_run_observed(p, ex, &obs);
}

/* ---- where a NaN or Inf came from ----------------------------------------- */

/* index of the first NaN or +-Inf among the n elements of `type` at x (its
 * value in *bad), or -1; integer tensors are always finite */
static int64_t first_nonfinite(drt_dtype type, const void *x, int64_t n, float *bad) {
    for (int64_t i = 0; i < n; i++) {
        float v;
        switch (type) {
        case DRT_F32: v = ((const float *)x)[i]; break;
        case DRT_F16: v = drt_f16_to_f32(((const uint16_t *)x)[i]); break;
        case DRT_BF16: v = drt_bf16_to_f32(((const uint16_t *)x)[i]); break;
        default: return -1;
        }
        if (!isfinite(v)) {
            *bad = v;
            return i;
        }
    }
    return -1;
}

/* Scans bytes [off, off + n) of t: in place when its buffer is host memory,
 * else downloaded into *tmp (grown to *cap bytes). */
static drt_status scan_nonfinite(const drt_tensor *t, size_t off, size_t n, void **tmp, size_t *cap, int64_t *at,
                                 float *bad) {
    *at = -1;
    const char *h = drt_host_ptr(t);
    if (h) {
        h += off;
    } else {
        if (n > *cap) {
            void *nt = realloc(*tmp, n);
            if (!nt) return drt_set_error(DRT_ERR_OOM, "out of memory reading back %s", t->name);
            *tmp = nt;
            *cap = n;
        }
        drt_status s = t->buf->be->ops->download(t->buf->be, t->buf, t->offs + off, *tmp, n);
        if (s != DRT_OK) return s;
        h = *tmp;
    }
    size_t es = drt_dtype_size(t->type);
    *at = es ? first_nonfinite(t->type, h, (int64_t)(n / es), bad) : -1;
    return DRT_OK;
}

typedef struct {
    drt_nonfinite *out;
    drt_status st;
} nonfinite_hunt;

static int hunt_node(void *ctx, const drt_node_seen *ev, const drt_exec *ex) {
    nonfinite_hunt *h = ctx;
    const drt_tensor *t = ev->node;
    size_t es = drt_dtype_size(t->type);
    float bad = 0;
    int64_t at = ev->data && es ? first_nonfinite(t->type, ev->data, (int64_t)(ev->nbytes / es), &bad) : -1;
    if (at < 0) return 0;
    *h->out = (drt_nonfinite){.node = t, .index = at, .value = bad};
    /* the usual culprit: a weight it read holds the NaN or Inf */
    void *tmp = NULL;
    size_t cap = 0;
    for (int j = 0; h->st == DRT_OK && j < DRT_MAX_SRC; j++) {
        const drt_tensor *x = t->src[j];
        if (!x || !(x->flags & DRT_TF_WEIGHT) || !x->buf) continue;
        h->st = scan_nonfinite(x, 0, drt_nbytes(x), &tmp, &cap, &at, &bad);
        if (h->st == DRT_OK && at >= 0) {
            h->out->weight = x;
            h->out->weight_index = at;
            h->out->weight_value = bad;
            break;
        }
    }
    free(tmp);
    return 1;
}

drt_status drt_plan_find_nonfinite(drt_plan *p, const drt_exec *ex, drt_nonfinite *out) {
    memset(out, 0, sizeof *out);
    nonfinite_hunt h = {.out = out, .st = DRT_OK};
    drt_plan_observer obs = {.seen = hunt_node, .ctx = &h};
    drt_status s = drt_plan_run_observed(p, ex, &obs);
    return s != DRT_OK ? s : h.st;
}

int drt_plan_fallback_count(const drt_plan *p, drt_op op) {
    return (unsigned)op < DRT_OP_COUNT ? p->fallback_nodes[op] : 0;
}

const int64_t *drt_plan_fallback_runs(const drt_plan *p) {
    return p->fallback_runs;
}
