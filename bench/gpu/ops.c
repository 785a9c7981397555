/* bench_gpu_ops: the kernel measurements of issue 6 on one GPU, side by side
 * in one process (docs/design.md section 7: ratios measured in one run).
 *
 *   MATMUL 4096^3 with bf16 weights:
 *     cuBLAS's own peak: cublasGemmEx bf16 x bf16 -> bf16 and -> f32
 *       (CUBLAS_COMPUTE_32F), the best cuBLAS does at this shape;
 *     diffrt's MATMUL node (f32 activations in, f32 out) in fast mode
 *       (activations rounded to bf16 + the same cuBLAS call) and in f32 mode
 *       (weights widened to f32 + SGEMM).
 *   Fused DIFF_ATTN, T = S = 4096, H = 16, dk = 128, dv = 256, m = 2, causal:
 *     fast mode (tensor-core kernel) and f32 mode (CUDA-core kernel);
 *   ATTN of the same useful flops (H = 32, d = 128): what one standard
 *     flash attention achieves on our own tensor-core kernel.
 *   Attention flops are the op table's (runtime/ops.c): causal pairs x H x
 *   (4 dk + 2 dv) for DIFF_ATTN, x (2 dk + 2 dv) for ATTN; pairs = T(T+1)/2.
 *
 * Times are medians of wall-clock runs of a one-node plan (each run ends in
 * a synchronize; after the second run it is one CUDA-graph launch), or of
 * cudaEvent-timed loops for raw cuBLAS.
 *
 *   The decode GEMVs of a 1B model (bench_gemv): GB/s of weights read by
 *   each kernel variant (cuda.gemv 1, 2) at T = 1 and 8.
 *
 *   bench_gpu_ops [--json FILE] [--reps N] [--skip-f32-attn] [--gemv-only | --skip-gemv] */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "diffrt/diffrt.h"
#include "drt_graph.h"
#include "drt_half.h"
#include "drt_util.h"

static int g_reps = 10;

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* uniform in [-a, a] */
static float uniform(uint64_t *seed, float a) {
    return (float)(((double)(drt_splitmix64(seed) >> 11) * (1.0 / 9007199254740992.0) * 2 - 1) * a);
}

/* t = uniform [-a, a] in t's dtype */
static drt_status fill(drt_tensor *t, float a, uint64_t seed) {
    int64_t n = drt_nelem(t);
    void *h = malloc(drt_nbytes(t) + 4);
    if (!h) return DRT_ERR_OOM;
    for (int64_t i = 0; i < n; i++) {
        float f = uniform(&seed, a);
        if (t->type == DRT_BF16)
            ((uint16_t *)h)[i] = drt_f32_to_bf16(f);
        else if (t->type == DRT_F16)
            ((uint16_t *)h)[i] = drt_f32_to_f16(f);
        else
            ((float *)h)[i] = f;
    }
    drt_status s = drt_tensor_set(t, h, drt_nbytes(t));
    free(h);
    return s;
}

/* median seconds of g_reps runs of a plan, after 2 warm-up runs */
static drt_status time_plan(drt_plan *p, const drt_exec *ex, double *med) {
    double *t = malloc(sizeof(double) * (size_t)g_reps);
    if (!t) return DRT_ERR_OOM;
    drt_status s = DRT_OK;
    for (int i = 0; s == DRT_OK && i < 2; i++) s = drt_plan_run(p, ex);
    for (int i = 0; s == DRT_OK && i < g_reps; i++) {
        double t0 = drt_now_s();
        s = drt_plan_run(p, ex);
        t[i] = drt_now_s() - t0;
    }
    if (s == DRT_OK) {
        qsort(t, (size_t)g_reps, sizeof(double), cmp_d);
        *med = t[g_reps / 2];
    }
    free(t);
    return s;
}

static drt_status open_cuda(const char *prec, drt_backend **be) {
    setenv("DIFFRT_CUDA_PRECISION", prec, 1); /* read when the instance is created */
    return drt_backend_open("cuda", NULL, be);
}

/* a one-node graph on a fresh backend instance in precision prec; returns
 * the median time and the node's op-table flops. T rows of one sequence
 * from position 0 for a position op (T = 0: none). */
typedef struct {
    const char *what;
    const char *prec;
    double seconds, flops;
    int fallbacks;
} measure;

static drt_status run_node_graph(drt_graph *g, drt_tensor *node, int T, drt_backend *be, measure *m) {
    drt_plan *p = NULL;
    drt_status s = g->err != DRT_OK || !node ? g->err : drt_plan_create(g, be, &p);
    if (s != DRT_OK) return s;
    m->fallbacks = drt_plan_fallback_count(p, node->op);
    uint64_t seed = 1;
    for (int i = 0; s == DRT_OK && i < g->n_owned; i++)
        if (g->owned[i]->op == DRT_OP_NONE && !g->owned[i]->view_src) s = fill(g->owned[i], 1.0f, seed++);
    int32_t *rows = T ? malloc(sizeof(int32_t) * 2 * (size_t)T) : NULL;
    drt_exec ex = {0};
    if (s == DRT_OK && T) s = rows ? drt_exec_seq(&ex, rows, T, 0, 0) : DRT_ERR_OOM;
    if (s == DRT_OK) s = time_plan(p, &ex, &m->seconds);
    m->flops = drt_op_get(node->op)->flops(node, &ex);
    drt_plan_free(p);
    free(rows);
    return s;
}

static drt_status bench_matmul(const char *prec, int M, int N, int K, measure *m) {
    drt_backend *be = NULL;
    drt_status s = open_cuda(prec, &be);
    if (s != DRT_OK) return s;
    drt_graph *g = drt_graph_new();
    drt_tensor *x = drt_new_tensor_2d(g, DRT_F32, M, K, "x");
    drt_tensor *w = drt_new_tensor_2d(g, DRT_BF16, N, K, "w");
    drt_tensor *y = drt_matmul(g, x, w);
    m->prec = prec;
    s = run_node_graph(g, y, 0, be, m);
    drt_graph_free(g);
    drt_backend_close(be);
    return s;
}

/* diff: DIFF_ATTN (q (T,H,2,dk), k (S,H,2,dk)), else ATTN (q (T,H,dk), k (S,H,dk)); T = S, p0 = 0 */
static drt_status bench_attn(const char *prec, int diff, int T, int H, int dk, int dv, measure *m) {
    drt_backend *be = NULL;
    drt_status s = open_cuda(prec, &be);
    if (s != DRT_OK) return s;
    drt_graph *g = drt_graph_new();
    drt_tensor *node;
    if (diff) {
        drt_tensor *q = drt_new_tensor_4d(g, DRT_F32, T, H, 2, dk, "q");
        drt_tensor *k = drt_new_tensor_4d(g, DRT_F32, T, H, 2, dk, "k");
        drt_tensor *v = drt_new_tensor_3d(g, DRT_F32, T, H, dv, "v");
        node = drt_diff_attn(g, q, k, v, 0.5f, NULL, drt_new_rows(g, T));
    } else {
        drt_tensor *q = drt_new_tensor_3d(g, DRT_F32, T, H, dk, "q");
        drt_tensor *k = drt_new_tensor_3d(g, DRT_F32, T, H, dk, "k");
        drt_tensor *v = drt_new_tensor_3d(g, DRT_F32, T, H, dv, "v");
        node = drt_attn(g, q, k, v, drt_new_rows(g, T));
    }
    m->prec = prec;
    s = run_node_graph(g, node, T, be, m);
    drt_graph_free(g);
    drt_backend_close(be);
    return s;
}

/* The decode GEMV y (T,N) = x (T,K) w^T with bf16 w, kernel variant gemv
 * (cuda.gemv), f32 mode: n independent weight matrices (>= 1 GiB in all,
 * so L2 holds none of them between uses) multiplied in one plan, one CUDA
 * graph after the second run; *sec = median plan time / n, so the gaps
 * between kernels inside a graph count, as they do in a decode step. */
static drt_status bench_gemv(int gemv, int T, int N, int K, double *sec, int *nodes) {
    char v[8];
    snprintf(v, sizeof v, "%d", gemv);
    setenv("DIFFRT_CUDA_GEMV", v, 1);
    drt_backend *be = NULL;
    drt_status s = open_cuda("f32", &be);
    unsetenv("DIFFRT_CUDA_GEMV");
    if (s != DRT_OK) return s;
    const double bytes = 2.0 * N * K;
    int n = (int)((1024.0 * 1024 * 1024 + bytes - 1) / bytes);
    if (n < 2) n = 2;
    if (n > 256) n = 256;
    drt_graph *g = drt_graph_new();
    drt_tensor *x = drt_new_tensor_2d(g, DRT_F32, T, K, "x");
    drt_tensor *last = NULL;
    drt_tensor **w = calloc((size_t)n, sizeof *w);
    if (!w) s = DRT_ERR_OOM;
    for (int i = 0; s == DRT_OK && i < n; i++) {
        w[i] = drt_new_tensor_2d(g, DRT_BF16, N, K, "w");
        last = drt_matmul(g, x, w[i]);
    }
    drt_plan *p = NULL;
    if (s == DRT_OK) s = g->err != DRT_OK || !last ? g->err : drt_plan_create(g, be, &p);
    /* one random weight content for all n (distinct buffers all the same) */
    uint64_t seed = 7;
    if (s == DRT_OK) s = fill(x, 1.0f, seed++);
    uint16_t *h = s == DRT_OK ? malloc((size_t)N * K * 2) : NULL;
    if (s == DRT_OK && !h) s = DRT_ERR_OOM;
    for (int64_t i = 0; s == DRT_OK && i < (int64_t)N * K; i++) h[i] = drt_f32_to_bf16(uniform(&seed, 0.05f));
    for (int i = 0; s == DRT_OK && i < n; i++) s = drt_tensor_set(w[i], h, (size_t)N * K * 2);
    free(h);
    drt_exec ex = {0};
    double med = 0;
    if (s == DRT_OK) s = time_plan(p, &ex, &med);
    *sec = med / n;
    *nodes = n;
    drt_plan_free(p);
    free(w);
    drt_graph_free(g);
    drt_backend_close(be);
    return s;
}

/* cuBLAS bf16 GEMM n^3 with output type ct: median seconds per call */
static int cublas_peak(int n, cudaDataType ct, double *sec) {
    void *a = NULL, *b = NULL, *c = NULL;
    cublasHandle_t h = NULL;
    cudaEvent_t e0, e1;
    size_t in = (size_t)n * n * 2, out = (size_t)n * n * (ct == CUDA_R_32F ? 4 : 2);
    if (cudaMalloc(&a, in) || cudaMalloc(&b, in) || cudaMalloc(&c, out) || cublasCreate(&h)) return 1;
    cudaMemset(a, 0x3c, in); /* bf16 0x3c3c ~ 0.0115: finite, nonzero */
    cudaMemset(b, 0x3c, in);
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const float one = 1.0f, zero = 0.0f;
    double t[64];
    int reps = g_reps < 64 ? g_reps : 64, rc = 0;
    for (int i = -2; i < reps && !rc; i++) {
        cudaEventRecord(e0, 0);
        for (int j = 0; j < 5 && !rc; j++)
            rc = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n, &zero,
                              c, ct, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS;
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (i >= 0) t[i] = ms * 1e-3 / 5;
    }
    if (!rc) {
        qsort(t, (size_t)reps, sizeof(double), cmp_d);
        *sec = t[reps / 2];
    }
    cublasDestroy(h);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return rc;
}

static cJSON *jres;

static void report(const char *group, const char *what, const char *prec, double sec, double flops, int fallbacks,
                   double ref_tflops) {
    double tf = flops / sec * 1e-12;
    printf("  %-44s %-5s %10.3f ms %8.1f TFLOP/s", what, prec, sec * 1e3, tf);
    if (ref_tflops > 0) printf("  (%5.1f%% of the reference)", 100 * tf / ref_tflops);
    if (fallbacks) printf("  [%d CPU fallbacks!]", fallbacks);
    printf("\n");
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "group", group);
    cJSON_AddStringToObject(j, "what", what);
    cJSON_AddStringToObject(j, "precision", prec);
    cJSON_AddNumberToObject(j, "median_s", sec);
    cJSON_AddNumberToObject(j, "flops", flops);
    cJSON_AddNumberToObject(j, "tflops", tf);
    cJSON_AddNumberToObject(j, "cpu_fallbacks", fallbacks);
    if (ref_tflops > 0) cJSON_AddNumberToObject(j, "fraction_of_reference", tf / ref_tflops);
    cJSON_AddItemToArray(jres, j);
}

static int fail(const char *what) {
    fprintf(stderr, "bench_gpu_ops: %s: %s\n", what, drt_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *json = NULL;
    int skip_f32_attn = 0, gemv_only = 0, skip_gemv = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
            json = argv[++i];
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            g_reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--skip-f32-attn") == 0)
            skip_f32_attn = 1;
        else if (strcmp(argv[i], "--gemv-only") == 0)
            gemv_only = 1;
        else if (strcmp(argv[i], "--skip-gemv") == 0)
            skip_gemv = 1;
        else {
            fprintf(stderr, "usage: bench_gpu_ops [--json FILE] [--reps N] [--skip-f32-attn] [--gemv-only | "
                            "--skip-gemv]\n");
            return 2;
        }
    }
    if (g_reps < 1) g_reps = 1;
    int dev = 0;
    struct cudaDeviceProp prop;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        fprintf(stderr, "bench_gpu_ops: no CUDA device: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    jres = cJSON_CreateArray();
    if (gemv_only || !skip_gemv) {
        /* the bf16 shapes of a 1B decode step (bench_gpu_decode_1b's model) */
        static const struct {
            const char *what;
            int N, K;
        } G[] = {{"q, o (2048x2048)", 2048, 2048},
                 {"k, v (512x2048)", 512, 2048},
                 {"gate, up (8192x2048)", 8192, 2048},
                 {"down (2048x8192)", 2048, 8192},
                 {"lm_head (128256x2048)", 128256, 2048}};
        printf("decode GEMV, bf16 weights, f32 mode: GB/s of weights read (copy bandwidth: %s)\n",
               "see bench_gpu_decode_1b");
        for (size_t i = 0; i < sizeof G / sizeof G[0]; i++)
            for (int T = 1; T <= 8; T += 7)
                for (int kv = 1; kv <= 2; kv++) {
                    double sec = 0;
                    int nodes = 0;
                    if (bench_gemv(kv, T, G[i].N, G[i].K, &sec, &nodes) != DRT_OK) return fail("GEMV");
                    const double gbs = 2.0 * G[i].N * G[i].K / sec * 1e-9;
                    printf("  %-24s T=%d gemv %d %9.2f us %8.1f GB/s  (%d matrices a graph)\n", G[i].what, T, kv,
                           sec * 1e6, gbs, nodes);
                    cJSON *j = cJSON_CreateObject();
                    cJSON_AddStringToObject(j, "group", "gemv");
                    cJSON_AddStringToObject(j, "what", G[i].what);
                    cJSON_AddNumberToObject(j, "T", T);
                    cJSON_AddNumberToObject(j, "gemv", kv);
                    cJSON_AddNumberToObject(j, "median_s", sec);
                    cJSON_AddNumberToObject(j, "gbps", gbs);
                    cJSON_AddItemToArray(jres, j);
                }
    }
    measure m;
    const int n = 4096;
    if (gemv_only) goto done;
    const double gemm_flops = 2.0 * n * n * (double)n;

    printf("MATMUL %dx%dx%d, bf16 weights\n", n, n, n);
    double pk16 = 0, pk32 = 0;
    if (cublas_peak(n, CUDA_R_16BF, &pk16) || cublas_peak(n, CUDA_R_32F, &pk32)) {
        fprintf(stderr, "bench_gpu_ops: cuBLAS peak measurement failed\n");
        return 1;
    }
    double peak = gemm_flops / (pk16 < pk32 ? pk16 : pk32) * 1e-12;
    report("matmul", "cuBLAS GemmEx bf16 x bf16 -> bf16", "bf16", pk16, gemm_flops, 0, 0);
    report("matmul", "cuBLAS GemmEx bf16 x bf16 -> f32", "bf16", pk32, gemm_flops, 0, 0);
    if (bench_matmul("fast", n, n, n, &m) != DRT_OK) return fail("MATMUL fast");
    report("matmul", "diffrt MATMUL f32 x bf16 -> f32", "fast", m.seconds, m.flops, m.fallbacks, peak);
    if (bench_matmul("f32", n, n, n, &m) != DRT_OK) return fail("MATMUL f32");
    report("matmul", "diffrt MATMUL f32 x bf16 -> f32", "f32", m.seconds, m.flops, m.fallbacks, peak);

    const int T = 4096;
    printf("DIFF_ATTN T=S=%d H=16 dk=128 dv=256 m=2 causal (useful flops: pairs*H*(4dk+2dv))\n", T);
    if (bench_attn("fast", 1, T, 16, 128, 256, &m) != DRT_OK) return fail("DIFF_ATTN fast");
    double diff_fast = m.flops / m.seconds * 1e-12;
    report("diff_attn", "diffrt DIFF_ATTN fused (tensor cores)", "fast", m.seconds, m.flops, m.fallbacks, 0);
    if (!skip_f32_attn) {
        if (bench_attn("f32", 1, T, 16, 128, 256, &m) != DRT_OK) return fail("DIFF_ATTN f32");
        report("diff_attn", "diffrt DIFF_ATTN (CUDA cores, f32)", "f32", m.seconds, m.flops, m.fallbacks, diff_fast);
    }
    printf("ATTN of the same useful flops, causal\n");
    if (bench_attn("fast", 0, T, 32, 128, 128, &m) != DRT_OK) return fail("ATTN fast");
    report("attn", "diffrt ATTN H=32 d=128 (tensor cores)", "fast", m.seconds, m.flops, m.fallbacks, diff_fast);
done:

    if (json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "device", prop.name);
        cJSON_AddNumberToObject(root, "reps", g_reps);
        cJSON_AddItemToObject(root, "results", jres);
        char *txt = cJSON_Print(root);
        FILE *f = fopen(json, "w");
        if (!f || !txt) {
            fprintf(stderr, "bench_gpu_ops: %s: cannot write\n", json);
            return 1;
        }
        fputs(txt, f);
        fclose(f);
        free(txt);
        cJSON_Delete(root);
    } else {
        cJSON_Delete(jres);
    }
    return 0;
}
