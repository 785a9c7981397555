/* The conformance harness must catch wrong kernels. Six deliberately wrong
 * backends (built only here) wrap the CPU reference and break one thing:
 *   wrong-mask    DIFF_ATTN and DUAL_SOFTMAX see one key past the causal mask
 *   wrong-lambda  DIFF_ATTN and DUAL_SOFTMAX drop lambda (A1 alone)
 *   wrong-scale   DIFF_ATTN and ATTN forget the 1/sqrt(dk) scale
 *   wrong-tail    every op leaves the last element of its output unwritten
 *   wrong-slot    the position ops ignore each row's cache base (every row
 *                 in the first sequence's slot)
 *   wrong-pos     the position ops take row t at position pos[0] + t (one
 *                 sequence), not its own
 * Each must come out of drt_conform_run as a named FAIL for exactly the ops
 * it breaks, while the ops it leaves alone still pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_conform.h"
#include "drt_graph.h"
#include "drt_test.h"

enum { BREAK_MASK = 1, BREAK_LAMBDA = 2, BREAK_SCALE = 4, BREAK_TAIL = 8, BREAK_SLOT = 16, BREAK_POS = 32 };
#define BREAK_ROWS (BREAK_SLOT | BREAK_POS)

/* rows as the wrong-slot and wrong-pos backends read them: a copy of n
 * rows, kept inside a cache of cap rows (0: no cache) */
static int32_t *knob_rows(const int32_t *rows, int n, int64_t cap, int brk) {
    int32_t *r = malloc(sizeof(int32_t) * 2 * (size_t)n);
    for (int t = 0; t < n; t++) {
        r[2 * t] = brk & BREAK_SLOT ? rows[0] : rows[2 * t];
        r[2 * t + 1] = brk & BREAK_POS ? rows[1] + t : rows[2 * t + 1];
        if (cap && r[2 * t] + r[2 * t + 1] >= cap) r[2 * t + 1] = (int32_t)(cap - 1 - r[2 * t]);
    }
    return r;
}

/* A plain differential attention with knobs for each break. q (T,H,2,dk),
 * k (S_cap,G,m,dk), v (S_cap,G,dv), o (T,H,dv), rows (T,2). ATTN is the same
 * with one map (q2 = none, lambda = 0): pass maps = 1. */
static void knob_attn(float *o, const float *q, const float *k, const float *v, int T, const int32_t *rows, int H,
                      int G, int m, int dk, int dv, int maps, float lambda, const float *lth, int brk) {
    int S = 0;
    for (int t = 0; t < T; t++) S = rows[2 * t + 1] + 2 > S ? rows[2 * t + 1] + 2 : S;
    double s = brk & BREAK_SCALE ? 1.0 : 1.0 / sqrt((double)dk);
    double *w = malloc(sizeof(double) * 2 * (size_t)S);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            int g = h * G / H;
            int last = rows[2 * t + 1] + (brk & BREAK_MASK ? 1 : 0);
            size_t base = (size_t)rows[2 * t];
            for (int c = 0; c < maps; c++) {
                const float *qq = q + ((size_t)(t * H + h) * maps + c) * dk;
                int kc = maps == 1 ? 0 : (c == 0 ? 0 : m - 1);
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= last; j++) {
                    const float *kk = k + (((base + (size_t)j) * G + g) * (maps == 1 ? 1 : m) + kc) * dk;
                    double d = 0;
                    for (int i = 0; i < dk; i++) d += (double)qq[i] * kk[i];
                    w[c * S + j] = d * s;
                    if (w[c * S + j] > mx) mx = w[c * S + j];
                }
                for (int j = 0; j <= last; j++) sum += (w[c * S + j] = exp(w[c * S + j] - mx));
                for (int j = 0; j <= last; j++) w[c * S + j] /= sum;
            }
            double lam = maps == 1 || (brk & BREAK_LAMBDA) ? 0 : lth ? lth[t * H + h] : lambda;
            for (int e = 0; e < dv; e++) {
                double acc = 0;
                for (int j = 0; j <= last; j++)
                    acc += (w[j] - (maps == 2 ? lam * w[S + j] : 0)) * v[((base + (size_t)j) * G + g) * dv + e];
                o[(size_t)(t * H + h) * dv + e] = (float)acc;
            }
        }
    free(w);
}

static void knob_dual_softmax(float *a, const float *s1, const float *s2, int H, int T, int S, float lambda,
                              const float *lth, int brk) {
    int p0 = S - T;
    for (int h = 0; h < H; h++)
        for (int t = 0; t < T; t++) {
            int last = p0 + t + (brk & BREAK_MASK ? 1 : 0);
            if (last > S - 1) last = S - 1;
            const float *r[2] = {s1 + ((size_t)h * T + t) * S, s2 + ((size_t)h * T + t) * S};
            double mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0, 0};
            for (int c = 0; c < 2; c++) {
                for (int j = 0; j <= last; j++)
                    if (r[c][j] > mx[c]) mx[c] = r[c][j];
                for (int j = 0; j <= last; j++) sum[c] += exp(r[c][j] - mx[c]);
            }
            double lam = brk & BREAK_LAMBDA ? 0 : lth ? lth[t * H + h] : lambda;
            float *out = a + ((size_t)h * T + t) * S;
            for (int j = 0; j < S; j++)
                out[j] = j > last ? 0.f : (float)(exp(r[0][j] - mx[0]) / sum[0] - lam * exp(r[1][j] - mx[1]) / sum[1]);
        }
}

typedef struct {
    int brk;
} wrong_ctx;

static void *ptr(const drt_tensor *t) {
    return t ? drt_host_ptr(t) : NULL;
}

static drt_status wrong_compute(drt_backend *be, drt_tensor *const *nodes, int n, const drt_exec *ex) {
    int brk = ((wrong_ctx *)be->ctx)->brk;
    for (int i = 0; i < n; i++) {
        drt_tensor *t = nodes[i];
        const drt_tensor *q = t->src[0], *k = t->src[1];
        void *srcs[DRT_MAX_SRC];
        for (int j = 0; j < DRT_MAX_SRC; j++) srcs[j] = ptr(t->src[j]);
        float *dst = ptr(t);
        int T = (int)q->ne[0];
        int32_t *rows = t->src[DRT_SRC_ROWS]
                            ? knob_rows(srcs[DRT_SRC_ROWS], T, t->op == DRT_OP_ROPE ? 0 : k->ne[0], brk)
                            : NULL;
        if (t->op == DRT_OP_DIFF_ATTN && (brk & (BREAK_MASK | BREAK_LAMBDA | BREAK_SCALE | BREAK_ROWS))) {
            knob_attn(dst, srcs[0], srcs[1], srcs[2], T, rows, (int)q->ne[1], (int)k->ne[1], (int)k->ne[2],
                      (int)q->ne[3], (int)t->ne[2], 2, t->fp[0], srcs[3], brk);
        } else if (t->op == DRT_OP_ATTN && (brk & (BREAK_SCALE | BREAK_ROWS))) {
            knob_attn(dst, srcs[0], srcs[1], srcs[2], T, rows, (int)q->ne[1], (int)k->ne[1], 1, (int)q->ne[2],
                      (int)t->ne[2], 1, 0, NULL, brk);
        } else if ((t->op == DRT_OP_ROPE || t->op == DRT_OP_KV_WRITE) && (brk & BREAK_ROWS)) {
            srcs[DRT_SRC_ROWS] = rows;
            drt_status s = drt_ref_run_node(t, dst, srcs, ex);
            if (s != DRT_OK) {
                free(rows);
                return s;
            }
        } else if (t->op == DRT_OP_DUAL_SOFTMAX && (brk & (BREAK_MASK | BREAK_LAMBDA))) {
            knob_dual_softmax(dst, srcs[0], srcs[1], (int)q->ne[0], (int)q->ne[1], (int)q->ne[2], t->fp[0], srcs[2],
                              brk);
        } else if (brk & BREAK_TAIL) {
            /* compute into scratch, copy all but the last element written */
            drt_tensor *dt = t->op == DRT_OP_KV_WRITE ? t->src[1] : t;
            size_t nb = drt_nbytes(dt);
            char *tmp = malloc(nb);
            memcpy(tmp, ptr(dt), nb);
            drt_status s = drt_ref_run_node(
                t, tmp, t->op == DRT_OP_KV_WRITE ? (void *[]){srcs[0], tmp, NULL, NULL, srcs[DRT_SRC_ROWS]} : srcs, ex);
            size_t es = drt_dtype_size(dt->type);
            /* a KV_WRITE: the last element of the last row it writes */
            const int32_t *r = srcs[DRT_SRC_ROWS];
            size_t last = t->op == DRT_OP_KV_WRITE
                              ? (size_t)(r[2 * (T - 1)] + r[2 * (T - 1) + 1] + 1) * (nb / (size_t)dt->ne[0]) - es
                              : nb - es;
            memcpy(ptr(dt), tmp, last); /* the last element keeps its poison */
            if (t->op == DRT_OP_KV_WRITE) memcpy((char *)ptr(dt) + last + es, tmp + last + es, nb - last - es);
            free(tmp);
            if (s != DRT_OK) {
                free(rows);
                return s;
            }
        } else {
            drt_status s = drt_ref_run_node(t, dst, srcs, ex);
            if (s != DRT_OK) {
                free(rows);
                return s;
            }
        }
        free(rows);
    }
    return DRT_OK;
}

/* the rest of the table is the CPU backend's, looked up at run time */
static const drt_backend_ops *cpu(void) {
    return drt_registry_find("ref");
}
static drt_status w_probe(int *n, char *why, size_t wn) {
    return cpu()->probe(n, why, wn);
}
static drt_status w_name(int d, char *b, size_t n) {
    return cpu()->device_name(d, b, n);
}
static drt_status w_alloc(drt_backend *be, size_t s, drt_buffer *o) {
    return cpu()->buf_alloc(be, s, o);
}
static void w_free(drt_backend *be, drt_buffer *b) {
    cpu()->buf_free(be, b);
}
static drt_status w_up(drt_backend *be, drt_buffer *b, size_t off, const void *s, size_t n) {
    return cpu()->upload(be, b, off, s, n);
}
static drt_status w_down(drt_backend *be, const drt_buffer *b, size_t off, void *d, size_t n) {
    return cpu()->download(be, b, off, d, n);
}
static bool w_supports(drt_backend *be, const drt_tensor *t) {
    return true;
}
static drt_status w_sync(drt_backend *be) {
    return DRT_OK;
}
static void w_shutdown(drt_backend *be) {
    free(be->ctx);
}

#define WRONG_INIT(fn, bits)                                                                                           \
    static drt_status fn(drt_backend *be, int dev) {                                                                   \
        wrong_ctx *c = malloc(sizeof *c);                                                                              \
        c->brk = bits;                                                                                                 \
        be->ctx = c;                                                                                                   \
        return DRT_OK;                                                                                                 \
    }
WRONG_INIT(init_mask, BREAK_MASK)
WRONG_INIT(init_lambda, BREAK_LAMBDA)
WRONG_INIT(init_scale, BREAK_SCALE)
WRONG_INIT(init_tail, BREAK_TAIL)
WRONG_INIT(init_slot, BREAK_SLOT)
WRONG_INIT(init_pos, BREAK_POS)

#define WRONG_OPS(nm, initfn)                                                                                          \
    {                                                                                                                  \
        .name = nm, .probe = w_probe, .device_name = w_name, .init = initfn, .shutdown = w_shutdown,                   \
        .buf_alloc = w_alloc, .buf_free = w_free, .upload = w_up, .download = w_down, .supports = w_supports,          \
        .compute = wrong_compute, .synchronize = w_sync                                                                \
    }

#define N_WRONG 6
static const drt_backend_ops WRONG[N_WRONG] = {
    WRONG_OPS("wrong-mask", init_mask), WRONG_OPS("wrong-lambda", init_lambda), WRONG_OPS("wrong-scale", init_scale),
    WRONG_OPS("wrong-tail", init_tail), WRONG_OPS("wrong-slot", init_slot),     WRONG_OPS("wrong-pos", init_pos)};

typedef struct {
    const char *backend;
    const char *must_fail[14]; /* ops whose row must say FAIL */
    const char *must_pass[4];
} expectation;

static const expectation EXPECT[] = {
    {"wrong-mask", {"DIFF_ATTN", "DUAL_SOFTMAX"}, {"ATTN", "MATMUL"}},
    {"wrong-lambda", {"DIFF_ATTN", "DUAL_SOFTMAX"}, {"ATTN", "GROUPNORM"}},
    {"wrong-scale", {"DIFF_ATTN", "ATTN"}, {"DUAL_SOFTMAX", "ROPE"}},
    {"wrong-tail",
     {"EMBED", "RMSNORM", "MATMUL", "ROPE", "DUAL_SOFTMAX", "DIFF_ATTN", "ATTN", "GROUPNORM", "SWIGLU", "SIGMOID",
      "ADD", "KV_WRITE", "PERMUTE"},
     {NULL}},
    /* only the cases of several sequences (runs) catch these */
    {"wrong-slot", {"DIFF_ATTN", "ATTN", "KV_WRITE"}, {"ROPE", "MATMUL", "DUAL_SOFTMAX"}},
    {"wrong-pos", {"DIFF_ATTN", "ATTN", "KV_WRITE", "ROPE"}, {"MATMUL", "DUAL_SOFTMAX", "GROUPNORM"}},
};

/* the table row of op for the single selected backend: "OP  <cell>" */
static const char *row_cell(const char *report, const char *op, char *buf, size_t n) {
    const char *p = report;
    size_t len = strlen(op);
    while ((p = strstr(p, op))) {
        if ((p == report || p[-1] == '\n') && p[len] == ' ') {
            const char *c = p + len;
            while (*c == ' ') c++;
            size_t k = 0;
            while (c[k] && c[k] != '\n' && k + 1 < n) k++;
            memcpy(buf, c, k);
            buf[k] = 0;
            return buf;
        }
        p += len;
    }
    return NULL;
}

int main(void) {
    for (int i = 0; i < N_WRONG; i++) DRT_CHECK(drt_registry_add(&WRONG[i]) == DRT_OK, "register %s", WRONG[i].name);
    for (size_t e = 0; e < sizeof EXPECT / sizeof EXPECT[0]; e++) {
        char *report = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&report, &len);
        drt_conform_opts o = {.backends = EXPECT[e].backend, .out = mem};
        drt_conform_result r;
        drt_status s = drt_conform_run(&o, &r);
        fclose(mem);
        DRT_CHECK(s == DRT_OK, "%s: harness error %s", EXPECT[e].backend, drt_last_error());
        DRT_CHECK(r.fail > 0, "%s: no failure reported", EXPECT[e].backend);
        for (int k = 0; k < 14 && EXPECT[e].must_fail[k]; k++) {
            char cellb[64], named[96];
            const char *c = row_cell(report, EXPECT[e].must_fail[k], cellb, sizeof cellb);
            DRT_CHECK(c && strncmp(c, "FAIL", 4) == 0, "%s: %s row is \"%s\", expected FAIL", EXPECT[e].backend,
                      EXPECT[e].must_fail[k], c ? c : "(missing)");
            snprintf(named, sizeof named, "FAIL %s: %s ", EXPECT[e].backend, EXPECT[e].must_fail[k]);
            DRT_CHECK(strstr(report, named) && strstr(report, "seed="), "%s: no named failure line \"%s\"",
                      EXPECT[e].backend, named);
        }
        for (int k = 0; k < 4 && EXPECT[e].must_pass[k]; k++) {
            char cellb[64];
            const char *c = row_cell(report, EXPECT[e].must_pass[k], cellb, sizeof cellb);
            DRT_CHECK(c && strncmp(c, "pass", 4) == 0, "%s: %s row is \"%s\", expected pass", EXPECT[e].backend,
                      EXPECT[e].must_pass[k], c ? c : "(missing)");
        }
        /* show what a failure looks like */
        const char *f = strstr(report, "failures");
        printf("== %s ==\n%s", EXPECT[e].backend, f ? f : report);
        free(report);
    }
    /* whole models: a slot or a position read wrong breaks every batch_*
     * case (rows of several sequences; the one-sequence model case may
     * pass, or fail on the padding rows of its prompt's graph) */
    static const char *const batch_cases[] = {"batch_lengths", "batch_mixed", "batch_truncate", "batch_reuse"};
    for (int w = 4; w < N_WRONG; w++) {
        char *report = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&report, &len);
        drt_conform_opts o = {
            .backends = WRONG[w].name, .ops = "none", .models_dir = DRT_FIXTURES_DIR "/diff_v2", .out = mem};
        drt_conform_result r;
        drt_status s = drt_conform_run(&o, &r);
        fclose(mem);
        DRT_CHECK(s == DRT_OK && r.fail >= 4, "%s on a model: %d failed (want the 4 batch cases): %s", WRONG[w].name,
                  r.fail, s == DRT_OK ? "" : drt_last_error());
        for (int k = 0; k < 4; k++) {
            char named[96];
            snprintf(named, sizeof named, "FAIL %s: %s of model diff_v2", WRONG[w].name, batch_cases[k]);
            DRT_CHECK(strstr(report, named), "%s: no failure line \"%s\"", WRONG[w].name, named);
        }
        printf("== %s, batch cases ==\n%s", WRONG[w].name,
               strstr(report, "failures") ? strstr(report, "failures") : report);
        free(report);
    }
    /* a required name that is no backend is a usage error, never a silent pass */
    drt_conform_opts o = {.backends = "cpu", .require = "cpu,nosuch", .ops = "ADD"};
    drt_conform_result r;
    DRT_CHECK(drt_conform_run(&o, &r) == DRT_ERR_INVALID_ARG && r.usage_error && strstr(drt_last_error(), "\"nosuch\""),
              "required unknown backend not refused: %s", drt_last_error());
    return drt_test_summary("test_conform_catches");
}
