/* The graph, the op table and the dispatcher:
 *   - op constructors reject bad shapes with a message naming the op;
 *   - FLOP counts from the op table for known shapes; MATMUL dims decoded;
 *   - the fused DIFF_ATTN node equals the decomposed lowering
 *     PERMUTE -> MATMUL -> DUAL_SOFTMAX -> MATMUL -> PERMUTE, built as graphs;
 *   - CPU fallback: a test backend with its own (not host-visible) memory that
 *     refuses some ops; the plan routes those to the CPU reference, counts
 *     them, and a whole model still matches the CPU backend;
 *   - the cpu backend's repacked q8_0 / q4_0 weights follow uploads, and
 *     are shared by the sessions of one model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "diffrt/diffrt.h"
#include "drt_graph.h"
#include "drt_quant.h"
#include "drt_test.h"

/* ---- a partial backend: device memory the host cannot see ----------------- */

static bool partial_supports(drt_backend *be, const drt_tensor *t) {
    return t->op != DRT_OP_ROPE && t->op != DRT_OP_GROUPNORM && t->op != DRT_OP_KV_WRITE;
}

static drt_status partial_probe(int *n, char *why, size_t wn) {
    *n = 1;
    return DRT_OK;
}
static drt_status partial_name(int dev, char *buf, size_t n) {
    snprintf(buf, n, "test device");
    return DRT_OK;
}
static drt_status partial_init(drt_backend *be, int dev) {
    return DRT_OK;
}
static drt_status partial_alloc(drt_backend *be, size_t size, drt_buffer *out) {
    out->handle = malloc(size);
    out->host = NULL; /* forces the dispatcher to mirror */
    out->size = size;
    return out->handle ? DRT_OK : DRT_ERR_OOM;
}
static void partial_free(drt_backend *be, drt_buffer *b) {
    free(b->handle);
}
static drt_status partial_upload(drt_backend *be, drt_buffer *b, size_t off, const void *src, size_t n) {
    memcpy((char *)b->handle + off, src, n);
    return DRT_OK;
}
static drt_status partial_download(drt_backend *be, const drt_buffer *b, size_t off, void *dst, size_t n) {
    memcpy(dst, (const char *)b->handle + off, n);
    return DRT_OK;
}
static void *dev_ptr(const drt_tensor *t) {
    return t ? (char *)t->buf->handle + t->offs : NULL;
}
static drt_status partial_compute(drt_backend *be, drt_tensor *const *nodes, int n, const drt_exec *ex) {
    for (int i = 0; i < n; i++) {
        void *srcs[DRT_MAX_SRC];
        for (int j = 0; j < DRT_MAX_SRC; j++) srcs[j] = dev_ptr(nodes[i]->src[j]);
        drt_status s = drt_ref_run_node(nodes[i], dev_ptr(nodes[i]), srcs, ex);
        if (s != DRT_OK) return s;
    }
    return DRT_OK;
}
static drt_status partial_sync(drt_backend *be) {
    return DRT_OK;
}

static const drt_backend_ops PARTIAL = {
    .name = "test-partial",
    .probe = partial_probe,
    .device_name = partial_name,
    .init = partial_init,
    .buf_alloc = partial_alloc,
    .buf_free = partial_free,
    .upload = partial_upload,
    .download = partial_download,
    .supports = partial_supports,
    .compute = partial_compute,
    .synchronize = partial_sync,
};

/* ---- shape checks ---------------------------------------------------------- */

static void shape_errors(void) {
    struct {
        const char *what, *must_say;
    } cases[] = {
        {"matmul inner dims", "MATMUL"},
        {"diff_attn q without 2 maps", "DIFF_ATTN"},
        {"add shapes differ", "ADD"},
        {"rope odd d", "ROPE"},
        {"G does not divide H", "DIFF_ATTN"},
        {"embed f32 ids", "EMBED"},
        {"attn rows of another T", "rows must be i32 (T=2,2)"},
        {"kv_write without rows", "rows input"},
    };
    for (int c = 0; c < 8; c++) {
        drt_graph *g = drt_graph_new();
        drt_tensor *r = NULL;
        switch (c) {
        case 0:
            r = drt_matmul(g, drt_new_tensor_2d(g, DRT_F32, 3, 5, "x"), drt_new_tensor_2d(g, DRT_F32, 4, 6, "w"));
            break;
        case 1:
            r = drt_diff_attn(g, drt_new_tensor_4d(g, DRT_F32, 2, 4, 1, 8, "q"),
                              drt_new_tensor_4d(g, DRT_F32, 2, 2, 2, 8, "k"),
                              drt_new_tensor_3d(g, DRT_F32, 2, 2, 16, "v"), 0.5f, NULL, drt_new_rows(g, 2));
            break;
        case 2:
            r = drt_add(g, drt_new_tensor_2d(g, DRT_F32, 3, 5, "a"), drt_new_tensor_2d(g, DRT_F32, 5, 3, "b"));
            break;
        case 3:
            r = drt_rope(g, drt_new_tensor_3d(g, DRT_F32, 2, 2, 7, "x"), drt_new_tensor_1d(g, DRT_F32, 3, "f"),
                         drt_new_rows(g, 2));
            break;
        case 4:
            r = drt_diff_attn(g, drt_new_tensor_4d(g, DRT_F32, 2, 4, 2, 8, "q"),
                              drt_new_tensor_4d(g, DRT_F32, 2, 3, 2, 8, "k"),
                              drt_new_tensor_3d(g, DRT_F32, 2, 3, 16, "v"), 0.5f, NULL, drt_new_rows(g, 2));
            break;
        case 6:
            r = drt_attn(g, drt_new_tensor_3d(g, DRT_F32, 2, 4, 8, "q"), drt_new_tensor_3d(g, DRT_F32, 9, 2, 8, "k"),
                         drt_new_tensor_3d(g, DRT_F32, 9, 2, 8, "v"), drt_new_rows(g, 3));
            break;
        case 7:
            r = drt_kv_write(g, drt_new_tensor_3d(g, DRT_F32, 2, 2, 8, "src"),
                             drt_new_tensor_3d(g, DRT_F32, 9, 2, 8, "cache"), NULL);
            break;
        case 5:
            r = drt_embed(g, drt_new_tensor_1d(g, DRT_F32, 3, "ids"), drt_new_tensor_2d(g, DRT_F32, 10, 4, "E"));
            break;
        }
        DRT_CHECK(r == NULL && g->err == DRT_ERR_INVALID_ARG, "shape case '%s' was accepted", cases[c].what);
        DRT_CHECK(strstr(drt_last_error(), cases[c].must_say), "shape case '%s': message \"%s\" lacks %s",
                  cases[c].what, drt_last_error(), cases[c].must_say);
        /* errors are sticky: later constructors return NULL too */
        DRT_CHECK(drt_sigmoid(g, drt_new_tensor_1d(g, DRT_F32, 4, "z")) == NULL, "error not sticky");
        drt_graph_free(g);
    }
}

static void flop_counts(void) {
    drt_graph *g = drt_graph_new();
    drt_tensor *mm = drt_matmul(g, drt_new_tensor_2d(g, DRT_F32, 7, 32, "x"),
                                drt_new_tensor_2d(g, DRT_F16, 48, 32, "w"));
    drt_exec ex = {0};
    DRT_CHECK(drt_op_get(DRT_OP_MATMUL)->flops(mm, &ex) == 2.0 * 7 * 48 * 32, "matmul flops");
    DRT_CHECK(drt_op_get(DRT_OP_MATMUL)->bytes(mm, &ex) == 7 * 32 * 4 + 48 * 32 * 2 + 7 * 48 * 4, "matmul bytes");
    /* T=4 queries at p0=6: keys 7+8+9+10 = 34 pairs per head */
    drt_tensor *da = drt_diff_attn(g, drt_new_tensor_4d(g, DRT_F32, 4, 2, 2, 8, "q"),
                                   drt_new_tensor_4d(g, DRT_F32, 16, 1, 2, 8, "k"),
                                   drt_new_tensor_3d(g, DRT_F32, 16, 1, 16, "v"), 0.3f, NULL, drt_new_rows(g, 4));
    int32_t rows[8];
    drt_exec_seq(&ex, rows, 4, 0, 6);
    DRT_CHECK(drt_op_get(DRT_OP_DIFF_ATTN)->flops(da, &ex) == 34.0 * 2 * (4 * 8 + 2 * 16), "diff_attn flops %g",
              drt_op_get(DRT_OP_DIFF_ATTN)->flops(da, &ex));
    for (int op = 1; op < DRT_OP_COUNT; op++)
        DRT_CHECK(drt_op_get((drt_op)op)->check && drt_op_name((drt_op)op)[0], "op %d lacks a table row", op);
    drt_graph_free(g);
}

/* drt_matmul_dims over the layouts drt_matmul_ex accepts: 2-d and batched x,
 * shared and per-group weights, trans_w, scale and the weight dtype. */
static void matmul_dims(void) {
    static const struct {
        const char *what;
        int xnd, wnd;
        int64_t xne[3], wne[3];
        int trans_w;
        float scale;
        drt_dtype wt;
        drt_matmul_shape want;
    } cases[] = {
        {"x (T,K), w (N,K)", 2, 2, {7, 32}, {48, 32}, 0, 1.0f, DRT_F16, {1, 1, 7, 48, 32, 0, 1.0f, DRT_F16}},
        {"decode GEMV q8_0", 2, 2, {1, 64}, {96, 64}, 0, 1.0f, DRT_Q8_0, {1, 1, 1, 96, 64, 0, 1.0f, DRT_Q8_0}},
        {"x (B,T,K), w (N,K)", 3, 2, {4, 5, 8}, {3, 8}, 0, 1.0f, DRT_F32, {4, 1, 5, 3, 8, 0, 1.0f, DRT_F32}},
        {"scores: H=6 over G=2 k groups",
         3,
         3,
         {6, 5, 16},
         {2, 9, 16},
         0,
         0.25f,
         DRT_F32,
         {6, 2, 5, 9, 16, 0, 0.25f, DRT_F32}},
        {"A.V: w (Bw,K,N) transposed",
         3,
         3,
         {4, 5, 9},
         {4, 9, 32},
         1,
         1.0f,
         DRT_BF16,
         {4, 4, 5, 32, 9, 1, 1.0f, DRT_BF16}},
        {"x (T,K), w (K,N) transposed", 2, 2, {3, 10}, {10, 6}, 1, 2.0f, DRT_F32, {1, 1, 3, 6, 10, 1, 2.0f, DRT_F32}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        drt_graph *g = drt_graph_new();
        drt_tensor *x = drt_new_tensor(g, DRT_F32, cases[c].xnd, cases[c].xne, "x");
        drt_tensor *w = drt_new_tensor(g, cases[c].wt, cases[c].wnd, cases[c].wne, "w");
        drt_tensor *y = drt_matmul_ex(g, x, w, cases[c].trans_w, cases[c].scale);
        DRT_CHECK(y, "matmul_dims '%s': not built: %s", cases[c].what, drt_last_error());
        if (y) {
            drt_matmul_shape m = drt_matmul_dims(y), e = cases[c].want;
            DRT_CHECK(m.B == e.B && m.Bw == e.Bw && m.T == e.T && m.N == e.N && m.K == e.K && m.trans_w == e.trans_w &&
                          m.scale == e.scale && m.wtype == e.wtype,
                      "matmul_dims '%s': got B=%lld Bw=%lld T=%lld N=%lld K=%lld trans_w=%d scale=%g %s, "
                      "want B=%lld Bw=%lld T=%lld N=%lld K=%lld trans_w=%d scale=%g %s",
                      cases[c].what, (long long)m.B, (long long)m.Bw, (long long)m.T, (long long)m.N, (long long)m.K,
                      m.trans_w, (double)m.scale, drt_dtype_name(m.wtype), (long long)e.B, (long long)e.Bw,
                      (long long)e.T, (long long)e.N, (long long)e.K, e.trans_w, (double)e.scale,
                      drt_dtype_name(e.wtype));
            /* the napkin math of the op table agrees: 2*B*T*N*K */
            drt_exec ex = {0};
            DRT_CHECK(drt_op_get(DRT_OP_MATMUL)->flops(y, &ex) == 2.0 * m.B * m.T * m.N * m.K,
                      "matmul_dims '%s': flops disagree with the op table", cases[c].what);
        }
        drt_graph_free(g);
    }
}

/* ---- fused vs decomposed, as graphs, on a given backend ----------------------- */

typedef struct {
    int T, S, H, G, m, dk, dv, per_token;
    uint64_t seed;
} attn_case;

static void fused_vs_decomposed(const char *backend, const attn_case *c) {
    drt_backend *be;
    if (drt_backend_open(backend, NULL, &be) != DRT_OK) {
        DRT_CHECK(0, "%s: %s", backend, drt_last_error());
        return;
    }
    drt_graph *g = drt_graph_new();
    drt_tensor *q = drt_new_tensor_4d(g, DRT_F32, c->T, c->H, 2, c->dk, "q");
    drt_tensor *k = drt_new_tensor_4d(g, DRT_F32, c->S, c->G, c->m, c->dk, "k");
    drt_tensor *v = drt_new_tensor_3d(g, DRT_F32, c->S, c->G, c->dv, "v");
    drt_tensor *lam = c->per_token ? drt_new_tensor_2d(g, DRT_F32, c->T, c->H, "lambda") : NULL;
    drt_tensor *fused = drt_diff_attn(g, q, k, v, 0.37f, lam, drt_new_rows(g, c->T));
    drt_tensor *dec = drt_diff_attn_decomposed(g, q, k, v, 0.37f, lam);
    /* both are poisoned before the run and read after it */
    if (fused) fused->flags |= DRT_TF_OUTPUT;
    if (dec) dec->flags |= DRT_TF_OUTPUT;
    drt_plan *p = NULL;
    DRT_CHECK(g->err == DRT_OK && drt_plan_create(g, be, &p) == DRT_OK, "plan: %s", drt_last_error());
    if (p) {
        drt_rng r;
        drt_rng_seed(&r, c->seed);
        drt_tensor *in[4] = {q, k, v, lam};
        for (int i = 0; i < 4; i++) {
            if (!in[i]) continue;
            int64_t n = drt_nelem(in[i]);
            float *h = malloc(sizeof(float) * (size_t)n);
            drt_fill_uniform(h, n, &r, i == 3 ? 0.f : -1.f, 1.f);
            drt_tensor_set(in[i], h, (size_t)n * 4);
            free(h);
        }
        int64_t n = drt_nelem(fused);
        float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
        drt_fill_nan(a, n);
        drt_fill_nan(b, n);
        drt_tensor_set(fused, a, (size_t)n * 4); /* poison */
        drt_tensor_set(dec, b, (size_t)n * 4);
        drt_exec ex;
        int32_t *rows = malloc(sizeof(int32_t) * 2 * (size_t)c->T);
        drt_exec_seq(&ex, rows, c->T, 0, c->S - c->T);
        DRT_CHECK(drt_plan_run(p, &ex) == DRT_OK, "run: %s", drt_last_error());
        free(rows);
        drt_tensor_get(fused, a, (size_t)n * 4);
        drt_tensor_get(dec, b, (size_t)n * 4);
        double e = drt_nmse(a, b, n);
        DRT_CHECK(e <= 1e-12,
                  "%s fused vs decomposed: NMSE %.3e (T=%d S=%d H=%d G=%d m=%d dk=%d dv=%d lambda_th=%d seed=%llu)",
                  backend, e, c->T, c->S, c->H, c->G, c->m, c->dk, c->dv, c->per_token, (unsigned long long)c->seed);
        free(a);
        free(b);
    }
    drt_plan_free(p);
    drt_graph_free(g);
    drt_backend_close(be);
}

/* ---- the cpu backend's repacked q8_0 / q4_0 weights follow uploads ----------
 * Its T = 1 GEMV reads a repacked copy of the weight made on first use; an
 * upload of new bytes into the weight must drop it, or the second run would
 * use the first weight. Both runs are checked against drt_ref_matmul. */
static void cpu_repack_follows_uploads(drt_dtype wt) {
    enum { N = 13, K = 800 }; /* 25 blocks: a superblock of 16 and one of 9 */
    drt_backend *be;
    if (drt_backend_open("cpu", NULL, &be) != DRT_OK) {
        DRT_CHECK(0, "cpu: %s", drt_last_error());
        return;
    }
    drt_graph *g = drt_graph_new();
    drt_tensor *x = drt_new_tensor_2d(g, DRT_F32, 1, K, "x");
    drt_tensor *w = drt_new_tensor_2d(g, wt, N, K, "w");
    drt_tensor *y = drt_matmul(g, x, w);
    if (y) y->flags |= DRT_TF_OUTPUT;
    drt_plan *p = NULL;
    DRT_CHECK(g->err == DRT_OK && drt_plan_create(g, be, &p) == DRT_OK, "plan: %s", drt_last_error());
    const size_t wb = drt_row_bytes(wt, (int64_t)N * K);
    float *xf = malloc(sizeof(float) * K), *wf = malloc(sizeof(float) * N * K), *want = malloc(sizeof(float) * N);
    float *got = malloc(sizeof(float) * N);
    unsigned char *wq = malloc(wb);
    drt_rng r;
    drt_rng_seed(&r, 77);
    drt_fill_uniform(xf, K, &r, -1.f, 1.f);
    for (int round = 0; p && round < 2; round++) {
        drt_fill_uniform(wf, (int64_t)N * K, &r, -1.f, 1.f);
        for (int n = 0; n < N; n++)
            drt_quantize_row(wf + (int64_t)n * K, wt, wq + drt_row_bytes(wt, (int64_t)n * K), K);
        drt_ref_matmul(want, xf, wq, wt, 1, 1, 1, N, K, 0, 1.0f);
        drt_fill_nan(got, N);
        drt_tensor_set(x, xf, sizeof(float) * K);
        drt_tensor_set(w, wq, wb);
        drt_tensor_set(y, got, sizeof(float) * N); /* poison */
        drt_exec ex = {0};
        DRT_CHECK(drt_plan_run(p, &ex) == DRT_OK, "run: %s", drt_last_error());
        drt_tensor_get(y, got, sizeof(float) * N);
        double e = drt_nmse(got, want, N);
        DRT_CHECK(e <= 1e-8, "cpu %s GEMV after upload %d: NMSE %.3e (N=%d K=%d seed 77)", drt_dtype_name(wt),
                  round + 1, e, N, K);
    }
    free(xf);
    free(wf);
    free(want);
    free(got);
    free(wq);
    drt_plan_free(p);
    drt_graph_free(g);
    drt_backend_close(be);
}

/* ---- sessions of one model share the cpu backend's repacked copy -----------
 * A session wraps the model's memory (buf_wrap) and calls prepare_weight;
 * a second backend instance preparing the same bytes reuses the first's
 * copy instead of making its own. White-box probe: the host bytes are
 * changed behind the backends' backs between the two prepares, so the
 * second computes with what the first saw exactly when it shares. An
 * upload through one buffer marks the shared copy stale for the other;
 * once every holder is gone, a new prepare makes a fresh copy. */
typedef struct {
    drt_backend *be;
    drt_graph *g;
    drt_tensor *x, *w, *y;
    drt_buffer *wb;
    drt_plan *p;
} wrapped_mm;

static int wrapped_open(wrapped_mm *m, void *host, drt_dtype wt, int N, int K) {
    memset(m, 0, sizeof *m);
    if (drt_backend_open("cpu", NULL, &m->be) != DRT_OK) return 0;
    m->g = drt_graph_new();
    m->x = drt_new_tensor_2d(m->g, DRT_F32, 1, K, "x");
    m->w = drt_new_tensor_2d(m->g, wt, N, K, "w");
    m->w->flags |= DRT_TF_WEIGHT;
    m->wb = calloc(1, sizeof *m->wb);
    if (!m->wb || m->be->ops->buf_wrap(m->be, host, drt_nbytes(m->w), m->wb) != DRT_OK) return 0;
    m->wb->be = m->be;
    m->w->buf = m->wb;
    m->y = drt_matmul(m->g, m->x, m->w);
    m->y->flags |= DRT_TF_OUTPUT;
    return m->g->err == DRT_OK && drt_plan_create(m->g, m->be, &m->p) == DRT_OK &&
           m->be->ops->prepare_weight(m->be, m->w) == DRT_OK;
}

static double wrapped_run(wrapped_mm *m, const float *x, const float *want, int N, int K) {
    float *got = malloc(sizeof(float) * N);
    drt_fill_nan(got, N);
    drt_tensor_set(m->x, x, sizeof(float) * K);
    drt_tensor_set(m->y, got, sizeof(float) * N);
    drt_exec ex = {0};
    double e = 1e30;
    if (drt_plan_run(m->p, &ex) == DRT_OK) {
        drt_tensor_get(m->y, got, sizeof(float) * N);
        e = drt_nmse(got, want, N);
    }
    free(got);
    return e;
}

static void wrapped_close(wrapped_mm *m) {
    drt_plan_free(m->p);
    if (m->wb && m->wb->handle) m->be->ops->buf_free(m->be, m->wb);
    if (m->w) m->w->buf = NULL;
    free(m->wb);
    drt_graph_free(m->g);
    if (m->be) drt_backend_close(m->be);
}

static void cpu_repack_shared(void) {
    enum { N = 9, K = 544 };
    const drt_dtype wt = DRT_Q4_0;
    drt_backend *probe;
    if (drt_backend_open("cpu", NULL, &probe) != DRT_OK) return;
    char name[256];
    probe->ops->device_name(0, name, sizeof name);
    drt_backend_close(probe);
    if (!strstr(name, "repacked")) { /* no int8-dot GEMV here, or DIFFRT_CPU_REPACK=0 */
        printf("cpu_repack_shared: skipped (%s)\n", name);
        return;
    }
    const size_t wbytes = drt_row_bytes(wt, (int64_t)N * K);
    unsigned char *host = malloc(wbytes);
    float *x = malloc(sizeof(float) * K), *wf = malloc(sizeof(float) * N * K);
    float *want[3] = {malloc(sizeof(float) * N), malloc(sizeof(float) * N), malloc(sizeof(float) * N)};
    unsigned char *w3 = malloc(wbytes);
    drt_rng r;
    drt_rng_seed(&r, 91);
    drt_fill_uniform(x, K, &r, -1.f, 1.f);
    /* three weights: A, B (written under the copies), C (uploaded) */
    unsigned char *wq[3] = {malloc(wbytes), malloc(wbytes), w3};
    for (int k = 0; k < 3; k++) {
        drt_fill_uniform(wf, (int64_t)N * K, &r, -1.f, 1.f);
        for (int n = 0; n < N; n++)
            drt_quantize_row(wf + (int64_t)n * K, wt, wq[k] + drt_row_bytes(wt, (int64_t)n * K), K);
        drt_ref_matmul(want[k], x, wq[k], wt, 1, 1, 1, N, K, 0, 1.0f);
    }
    wrapped_mm a, b, c, d;
    memcpy(host, wq[0], wbytes);
    DRT_CHECK(wrapped_open(&a, host, wt, N, K), "first: %s", drt_last_error());
    memcpy(host, wq[1], wbytes); /* behind a's back */
    DRT_CHECK(wrapped_open(&b, host, wt, N, K), "second: %s", drt_last_error());
    double e = wrapped_run(&b, x, want[0], N, K);
    DRT_CHECK(e <= 1e-8, "the second backend did not reuse the first's copy: NMSE %.3e against A (N=%d K=%d seed 91)",
              e, N, K);
    wrapped_close(&a);
    wrapped_close(&b);
    /* every holder gone: a new prepare reads the bytes as they are now */
    DRT_CHECK(wrapped_open(&c, host, wt, N, K), "third: %s", drt_last_error());
    e = wrapped_run(&c, x, want[1], N, K);
    DRT_CHECK(e <= 1e-8, "a copy outlived its holders: NMSE %.3e against B (N=%d K=%d seed 91)", e, N, K);
    /* an upload through c's buffer: d's shared copy is stale and is made again */
    DRT_CHECK(wrapped_open(&d, host, wt, N, K), "fourth: %s", drt_last_error());
    drt_tensor_set(c.w, w3, wbytes);
    e = wrapped_run(&d, x, want[2], N, K);
    DRT_CHECK(e <= 1e-8, "after an upload through the other buffer: NMSE %.3e against C (N=%d K=%d seed 91)", e, N, K);
    e = wrapped_run(&c, x, want[2], N, K);
    DRT_CHECK(e <= 1e-8, "after its own upload: NMSE %.3e against C (N=%d K=%d seed 91)", e, N, K);
    wrapped_close(&c);
    wrapped_close(&d);
    for (int k = 0; k < 3; k++) {
        free(wq[k]);
        free(want[k]);
    }
    free(host);
    free(x);
    free(wf);
}

/* ---- fallbacks: whole models on the partial backend ---------------------------- */

static void model_on_partial(const char *fixture) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", DRT_FIXTURES_DIR, fixture);
    drt_model *m;
    if (drt_model_load(dir, &m) != DRT_OK) {
        DRT_CHECK(0, "%s: %s", fixture, drt_last_error());
        return;
    }
    drt_model_info I;
    drt_model_get_info(m, &I);
    drt_session *cpu = NULL, *part = NULL;
    drt_session_opts oc = {.backend = "ref", .max_ctx = 16}, op = {.backend = "test-partial", .max_ctx = 16};
    DRT_CHECK(drt_session_create(m, &oc, &cpu) == DRT_OK, "cpu session: %s", drt_last_error());
    DRT_CHECK(drt_session_create(m, &op, &part) == DRT_OK, "partial session: %s", drt_last_error());
    if (cpu && part) {
        int32_t ids[5] = {3, 9, 27, 81, 243 % I.vocab};
        size_t n = (size_t)I.vocab * 5;
        float *a = malloc(n * 4), *b = malloc(n * 4);
        drt_fill_nan(b, (int64_t)n);
        drt_session_forward(cpu, ids, 4, a, 1);
        drt_session_forward(cpu, ids + 4, 1, a + (size_t)4 * I.vocab, 1);
        DRT_CHECK(drt_session_forward(part, ids, 4, b, 1) == DRT_OK, "partial prefill: %s", drt_last_error());
        DRT_CHECK(drt_session_forward(part, ids + 4, 1, b + (size_t)4 * I.vocab, 1) == DRT_OK, "partial decode: %s",
                  drt_last_error());
        double e = drt_nmse(b, a, (int64_t)n);
        DRT_CHECK(e == 0.0, "%s: partial backend with fallbacks differs from cpu: NMSE %.3e", fixture, e);
        char lines[256];
        int total = drt_session_fallbacks(part, lines, sizeof lines);
        /* per layer and forward: ROPE x2 and KV_WRITE x2, GROUPNORM x1 for V1 */
        int per_layer = 4 + (I.arch == DRT_ARCH_DIFF_V1 ? 1 : 0);
        DRT_CHECK(total == 2 * I.n_layers * per_layer, "%s: %d fallbacks counted (%s), expected %d", fixture, total,
                  lines, 2 * I.n_layers * per_layer);
        DRT_CHECK(strstr(lines, "ROPE=") && strstr(lines, "KV_WRITE="), "%s: fallback list \"%s\"", fixture, lines);
        DRT_CHECK(drt_session_fallbacks(cpu, NULL, 0) == 0, "%s: the cpu backend fell back", fixture);
        printf("%s on test-partial: %s\n", fixture, lines);
        free(a);
        free(b);
    }
    drt_session_free(cpu);
    drt_session_free(part);
    drt_model_free(m);
}

int main(void) {
    shape_errors();
    flop_counts();
    matmul_dims();
    DRT_CHECK(drt_registry_add(&PARTIAL) == DRT_OK, "register: %s", drt_last_error());
    DRT_CHECK(drt_registry_add(&PARTIAL) != DRT_OK, "double registration accepted");
    const attn_case cases[] = {
        {1, 7, 4, 2, 2, 16, 32, 0, 11}, {5, 5, 2, 2, 2, 8, 16, 0, 12},    {3, 9, 6, 3, 1, 8, 8, 1, 13},
        {4, 4, 4, 1, 1, 16, 16, 1, 14}, {2, 11, 4, 4, 2, 64, 128, 0, 15},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fused_vs_decomposed("ref", &cases[i]);
        fused_vs_decomposed("cpu", &cases[i]);
        fused_vs_decomposed("test-partial", &cases[i]);
    }
    const char *fx[] = {"hf_diffllama_gqa", "hf_llama_gqa", "unilm_v1", "diff_v2"};
    for (int i = 0; i < 4; i++) model_on_partial(fx[i]);
    cpu_repack_follows_uploads(DRT_Q4_0);
    cpu_repack_follows_uploads(DRT_Q8_0);
    cpu_repack_shared();
    return drt_test_summary("test_graph");
}
