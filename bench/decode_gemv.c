/* bench_decode_gemv: the weight GEMVs of one decode step, alone, as one graph
 * on one backend (the rest of the step left out).
 *
 *   bench_decode_gemv [--backend B] [--device D] [--dtype f16|bf16|f32|q8_0|q4_0]
 *                     [--layers 12] [--dim 768] [--ffn 2048] [--vocab 32000]
 *                     [--reps 20] [--rows 1] [--resident] [--tiny]
 *
 * Per layer: four dim x dim GEMVs (q, k, v, o), two ffn x dim (gate, up) and
 * one dim x ffn (down); then the vocab x dim head. The defaults are the 134M
 * DiffLlama of python/bench/make_models.py: 85 weights.
 *   --resident  every layer reads the first layer's weights and the head is
 *               dim x dim, so they stay in cache: the kernels' compute
 *               ceiling, against the default's stream from memory;
 *   --tiny      every shape 32: what a node costs the backend beyond its
 *               work (launch, dispatch), per node;
 *   --rows N    N rows of x per GEMV (batched decode of N sequences, issue
 *               27): a backend that reads each weight once for all rows
 *               takes about the same time as at 1 row while memory-bound.
 * Weights are prepared as a session's are (the backend's prepare_weight:
 * cpu's repacked q8_0 / q4_0 copy).
 * Prints min and median ms per graph run over the reps (after 2 warm-up
 * runs), and the weight bytes per run over those times. Exit status 1 when
 * the backend is unavailable or a node falls back to the CPU reference. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "diffrt/diffrt.h"
#include "drt_error.h"
#include "drt_graph.h"
#include "drt_util.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int usage(FILE *f, int rc) {
    fprintf(f, "usage: bench_decode_gemv [--backend B] [--device D] [--dtype f16|bf16|f32|q8_0|q4_0]\n"
               "                         [--layers N] [--dim N] [--ffn N] [--vocab N] [--reps N]\n"
               "                         [--rows N] [--resident] [--tiny]\n"
               "  the weight GEMVs of one decode step (per layer 4 dim x dim, 2 ffn x dim,\n"
               "  1 dim x ffn; then vocab x dim) as one graph; defaults: cpu, f16, the 134M\n"
               "  DiffLlama (12 layers, dim 768, ffn 2048, vocab 32000), 20 reps.\n"
               "  --resident: every layer reads layer 0's weights (cache-resident);\n"
               "  --tiny: every shape 32 (per-node cost).\n"
               "  --rows N: N rows of x per GEMV (batched decode), default 1.\n");
    return rc;
}

/* a positive integer option value, at most max */
static int arg_int(const char *name, const char *v, long max, long *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < 1 || x > max) {
        fprintf(stderr, "bench_decode_gemv: %s: expected an integer 1..%ld, got \"%s\"\n", name, max, v);
        return -1;
    }
    *out = x;
    return 0;
}

/* deterministic weight bytes: small finite values; for q8_0 / q4_0 random
 * quants under the f16 scale 2^-7 */
static void fill(unsigned char *p, size_t n, drt_dtype t, uint32_t *seed) {
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        p[i] = (unsigned char)(*seed >> 24);
    }
    if (t == DRT_F32)
        for (size_t i = 0; i + 4 <= n; i += 4) p[i + 3] = 0x3c; /* |w| < 2^-6 */
    else if (t == DRT_F16 || t == DRT_BF16)
        for (size_t i = 0; i + 2 <= n; i += 2) p[i + 1] = t == DRT_F16 ? 0x20 | (p[i + 1] & 0x83) : 0x3c;
    else {
        size_t bs = drt_dtype_size(t);
        for (size_t i = 0; i + bs <= n; i += bs) {
            p[i] = 0x00;
            p[i + 1] = 0x20; /* f16 2^-7 */
        }
    }
}

int main(int argc, char **argv) {
    const char *backend = "cpu", *device = NULL;
    drt_dtype dt = DRT_F16;
    long layers = 12, dim = 768, ffn = 2048, vocab = 32000, reps = 20, rows = 1;
    int resident = 0, tiny = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout, 0);
        if (!strcmp(a, "--resident")) {
            resident = 1;
            continue;
        }
        if (!strcmp(a, "--tiny")) {
            tiny = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "bench_decode_gemv: %s: unknown option or missing value\n", a);
            return usage(stderr, 2);
        }
        i++;
        if (!strcmp(a, "--backend"))
            backend = v;
        else if (!strcmp(a, "--device"))
            device = v;
        else if (!strcmp(a, "--dtype")) {
            int found = 0;
            for (int t = 0; t < DRT_DTYPE_COUNT; t++)
                if (t != DRT_I32 && !strcmp(v, drt_dtype_name((drt_dtype)t))) {
                    dt = (drt_dtype)t;
                    found = 1;
                }
            if (!found) {
                fprintf(stderr, "bench_decode_gemv: --dtype: expected f16, bf16, f32, q8_0 or q4_0, got \"%s\"\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--layers")  ? arg_int(a, v, 1000, &layers)
                   : !strcmp(a, "--dim")   ? arg_int(a, v, 65536, &dim)
                   : !strcmp(a, "--ffn")   ? arg_int(a, v, 262144, &ffn)
                   : !strcmp(a, "--vocab") ? arg_int(a, v, 1 << 20, &vocab)
                   : !strcmp(a, "--reps")  ? arg_int(a, v, 100000, &reps)
                   : !strcmp(a, "--rows")  ? arg_int(a, v, 4096, &rows)
                                           : (fprintf(stderr, "bench_decode_gemv: unknown option %s\n", a), -1))
            return usage(stderr, 2);
    }
    if (tiny) dim = ffn = vocab = 32;
    const int blk = drt_dtype_block(dt);
    if (dim % blk || ffn % blk) {
        fprintf(stderr, "bench_decode_gemv: %s needs --dim and --ffn multiples of %d\n", drt_dtype_name(dt), blk);
        return 2;
    }

    drt_backend *be = NULL;
    if (drt_backend_open(backend, device, &be) != DRT_OK) {
        fprintf(stderr, "bench_decode_gemv: %s\n", drt_last_error());
        return 1;
    }
    drt_graph *g = drt_graph_new();
    drt_tensor *x = drt_new_tensor_2d(g, DRT_F32, rows, dim, "x"), *h = drt_new_tensor_2d(g, DRT_F32, rows, ffn, "h");
    x->flags |= DRT_TF_INPUT;
    h->flags |= DRT_TF_INPUT;
    /* the weights: per layer q k v o gate up down, then the head */
    const int64_t shape[7][2] = {{dim, dim}, {dim, dim}, {dim, dim}, {dim, dim}, {ffn, dim}, {ffn, dim}, {dim, ffn}};
    drt_tensor *w[8 * 1000 + 1];
    int nw = 0, nmm = 0;
    double bytes = 0;
    for (long l = 0; l < layers; l++)
        for (int j = 0; j < 7; j++) {
            drt_tensor *wt;
            if (resident && l > 0) {
                wt = w[j];
            } else {
                char name[32];
                snprintf(name, sizeof name, "w%ld.%d", l, j);
                wt = drt_new_tensor_2d(g, dt, shape[j][0], shape[j][1], name);
                wt->flags |= DRT_TF_WEIGHT;
                w[nw++] = wt;
            }
            drt_tensor *y = drt_matmul(g, shape[j][1] == dim ? x : h, wt);
            y->flags |= DRT_TF_OUTPUT;
            bytes += (double)drt_nbytes(wt);
            nmm++;
        }
    drt_tensor *head = drt_new_tensor_2d(g, dt, resident ? dim : vocab, dim, "head");
    head->flags |= DRT_TF_WEIGHT;
    w[nw++] = head;
    drt_tensor *logits = drt_matmul(g, x, head);
    logits->flags |= DRT_TF_OUTPUT;
    bytes += (double)drt_nbytes(head);
    nmm++;

    drt_plan *p = NULL;
    drt_status st = drt_plan_create(g, be, &p);
    uint32_t seed = 12345;
    for (int i = 0; st == DRT_OK && i < nw; i++) {
        size_t n = drt_nbytes(w[i]);
        unsigned char *buf = malloc(n);
        if (!buf) {
            st = DRT_ERR_OOM;
            break;
        }
        fill(buf, n, dt, &seed);
        st = drt_tensor_set(w[i], buf, n);
        free(buf);
        /* as a session does once a weight is loaded (cpu: the decode GEMV's repacked copy) */
        if (st == DRT_OK && be->ops->prepare_weight) st = be->ops->prepare_weight(be, w[i]);
    }
    const long xn = rows * (dim > ffn ? dim : ffn);
    float *xs = malloc(sizeof(float) * (size_t)xn);
    for (long i = 0; xs && i < xn; i++) xs[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    if (st == DRT_OK && xs) st = drt_tensor_set(x, xs, sizeof(float) * (size_t)(rows * dim));
    if (st == DRT_OK && xs) st = drt_tensor_set(h, xs, sizeof(float) * (size_t)(rows * ffn));
    if (st == DRT_OK && drt_plan_fallback_count(p, DRT_OP_MATMUL) > 0)
        st = drt_set_error(DRT_ERR_UNSUPPORTED, "%s runs %s MATMUL on the CPU reference (a fallback): not measured",
                           backend, drt_dtype_name(dt));
    double *t = calloc((size_t)reps, sizeof *t);
    drt_exec ex = {0};
    for (int i = 0; st == DRT_OK && i < 2; i++) st = drt_plan_run(p, &ex);
    for (long i = 0; st == DRT_OK && t && i < reps; i++) {
        double t0 = drt_now_s();
        st = drt_plan_run(p, &ex);
        t[i] = drt_now_s() - t0;
    }
    int rc = 0;
    if (st != DRT_OK || !t || !xs) {
        fprintf(stderr, "bench_decode_gemv: %s\n", st != DRT_OK ? drt_last_error() : "out of memory");
        rc = 1;
    } else {
        qsort(t, (size_t)reps, sizeof *t, cmp_d);
        double mn = t[0], med = reps % 2 ? t[reps / 2] : (t[reps / 2 - 1] + t[reps / 2]) / 2;
        printf("%s, %s: %d GEMVs of %ld row%s (%ld layers, dim %ld, ffn %ld, %s %ld), %.1f MB of weights a run%s\n",
               backend, drt_dtype_name(dt), nmm, rows, rows > 1 ? "s" : "", layers, dim, ffn,
               resident ? "head" : "vocab", resident ? dim : vocab, bytes / 1e6,
               tiny       ? ", tiny shapes"
               : resident ? ", cache-resident (layer 0's weights reused)"
                          : ", streamed");
        printf("  ms per run: min %.3f median %.3f over %ld runs; weight GB/s: %.2f (min time) %.2f (median)", mn * 1e3,
               med * 1e3, reps, bytes / mn / 1e9, bytes / med / 1e9);
        if (tiny) printf("; us per node: %.2f (min) %.2f (median)", mn * 1e6 / nmm, med * 1e6 / nmm);
        printf("\n");
    }
    free(t);
    free(xs);
    drt_plan_free(p);
    drt_graph_free(g);
    drt_backend_close(be);
    return rc;
}
