/* The conformance harness: ONE table of op cases, run on every selected
 * backend against the CPU reference (DESIGN.md section 6).
 *
 * A case builds a one-node graph on each backend from the same seeded inputs
 * (weights rounded to their dtype first, so every backend sees the same
 * numbers), poisons the output with NaN, runs, and compares with the CPU
 * reference: NMSE = sum((out-ref)^2)/sum(ref^2) <= 1e-8 for f32 paths, any
 * NaN/Inf where the reference is finite fails. A backend whose supports()
 * refuses the node is "unsupported", never "pass". */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "drt_conform.h"
#include "drt_error.h"
#include "drt_graph.h"
#include "drt_half.h"
#include "safetensors.h"

#define F32_NMSE 1e-8
#define REDUCED_NMSE 5e-4
#define MODEL_NMSE 1e-6
#define GREEDY_N 32

/* ---- the case table --------------------------------------------------------- */

enum { V_LAMBDA_TH = 1, V_NO_WEIGHT = 2, V_DECOMPOSED = 4 };

typedef struct {
    drt_op op;
    int a[10];    /* shape parameters, meaning per op (see build_case) */
    drt_dtype wt; /* weight dtype (MATMUL w, EMBED E) */
    int p0;
    float mag;    /* magnitude of uniform inputs; attention: of q (logit scale) */
    int var;
    float fparam; /* MATMUL scale, DUAL_SOFTMAX/DIFF_ATTN lambda */
} ccase;

#define F32 DRT_F32
#define F16 DRT_F16
#define BF16 DRT_BF16

/* Shapes follow DESIGN.md section 6: T=1 (decode), sizes that are not
 * multiples of any tile, GQA (G < H), p0 > 0, logits of +-300 and more,
 * dk in {64,128}, dv in {64,128,256}. Attention caches get 3 spare rows past
 * S = p0 + T filled with NaN: a kernel that reads past S fails. */
static const ccase CASES[] = {
    /* EMBED {T, V, D} */
    {DRT_OP_EMBED, {1, 37, 64}, F32, 0, 1, 0, 0},
    {DRT_OP_EMBED, {37, 300, 129}, F16, 0, 1, 0, 0},
    {DRT_OP_EMBED, {5, 11, 65}, BF16, 0, 1, 0, 0},
    /* RMSNORM {T, C}, fparam = eps */
    {DRT_OP_RMSNORM, {1, 37}, F32, 0, 1, 0, 1e-6f},
    {DRT_OP_RMSNORM, {37, 129}, F32, 0, 1, 0, 1e-5f},
    {DRT_OP_RMSNORM, {8, 4096}, F32, 0, 1, 0, 1e-5f},
    {DRT_OP_RMSNORM, {3, 4097}, F32, 0, 300, V_NO_WEIGHT, 1e-6f},
    /* MATMUL {B, Bw, T, K, N, trans_w}, fparam = scale */
    {DRT_OP_MATMUL, {1, 1, 1, 129, 37, 0}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 37, 129, 67, 0}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 64, 64, 64, 0}, F32, 0, 1, 0, 0.3f},
    {DRT_OP_MATMUL, {1, 1, 64, 256, 128, 0}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 3, 1025, 130, 0}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 1000, 129, 0}, F16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 37, 129, 65, 0}, F16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 1000, 129, 0}, BF16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 37, 129, 65, 0}, BF16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {8, 2, 9, 64, 33, 0}, F32, 0, 1, 0, 0.125f},
    {DRT_OP_MATMUL, {8, 2, 1, 64, 33, 0}, F32, 0, 1, 0, 0.125f},
    {DRT_OP_MATMUL, {4, 4, 7, 40, 65, 1}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {6, 3, 1, 17, 129, 1}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {3, 1, 5, 33, 70, 1}, BF16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {2, 2, 5, 33, 70, 0}, F16, 0, 1, 0, 2},
    /* several K blocks, several T blocks, N not a multiple of any panel
     * (the cpu backend's packed GEMM: KC 256, MC up to 128, NR up to 32) */
    {DRT_OP_MATMUL, {1, 1, 150, 520, 97, 0}, BF16, 0, 1, 0, 0.5f},
    {DRT_OP_MATMUL, {1, 1, 70, 700, 300, 0}, F16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {2, 1, 9, 300, 130, 1}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 8, 1000, 77, 0}, F32, 0, 1, 0, 1},
    /* ROPE {T, Hn, d}; inv_freq of theta 10000 */
    {DRT_OP_ROPE, {1, 4, 64}, F32, 17, 1, 0, 0},
    {DRT_OP_ROPE, {37, 3, 128}, F32, 0, 1, 0, 0},
    {DRT_OP_ROPE, {5, 8, 16}, F32, 3000, 1, 0, 0},
    /* DUAL_SOFTMAX {H, T, S} (p0 = S - T), fparam = lambda */
    {DRT_OP_DUAL_SOFTMAX, {4, 1, 33}, F32, 0, 1, 0, 0.8f},
    {DRT_OP_DUAL_SOFTMAX, {3, 37, 37}, F32, 0, 1, 0, 0.3f},
    {DRT_OP_DUAL_SOFTMAX, {2, 17, 300}, F32, 0, 1, V_LAMBDA_TH, 0},
    {DRT_OP_DUAL_SOFTMAX, {2, 9, 129}, F32, 0, 300, 0, 0.5f},
    /* DIFF_ATTN {T, H, G, m, dk, dv}, S = p0 + T, mag = |q| (300 gives logits
     * of several hundred), fparam = lambda; T*H/G query rows per kv group of
     * 1, 2, 4, 8 and more */
    {DRT_OP_DIFF_ATTN, {1, 8, 2, 2, 64, 128}, F32, 76, 1, 0, 0.6f},
    {DRT_OP_DIFF_ATTN, {37, 4, 4, 2, 64, 128}, F32, 0, 1, 0, 0.2f},
    {DRT_OP_DIFF_ATTN, {13, 4, 2, 1, 128, 128}, F32, 37, 1, V_LAMBDA_TH, 0},
    {DRT_OP_DIFF_ATTN, {16, 2, 1, 2, 128, 256}, F32, 0, 1, 0, 0.9f},
    {DRT_OP_DIFF_ATTN, {5, 3, 3, 2, 64, 64}, F32, 129, 1, 0, 0.5f},
    {DRT_OP_DIFF_ATTN, {33, 4, 2, 1, 64, 64}, F32, 0, 300, V_LAMBDA_TH, 0},
    {DRT_OP_DIFF_ATTN, {5, 2, 2, 2, 64, 128}, F32, 125, 300, 0, 0.7f},
    {DRT_OP_DIFF_ATTN, {1, 6, 3, 1, 128, 128}, F32, 199, 300, V_LAMBDA_TH, 0},
    {DRT_OP_DIFF_ATTN, {1, 8, 1, 2, 128, 256}, F32, 300, 1, 0, 0.4f},
    {DRT_OP_DIFF_ATTN, {7, 2, 1, 2, 16, 40}, F32, 3, 1, 0, 0.8f},
    {DRT_OP_DIFF_ATTN, {1, 4, 4, 2, 64, 64}, F32, 50, 1, 0, 0.3f},
    {DRT_OP_DIFF_ATTN, {2, 4, 4, 1, 64, 256}, F32, 70, 300, V_LAMBDA_TH, 0},
    {DRT_OP_DIFF_ATTN, {33, 4, 2, 1, 64, 64}, F32, 0, 900, V_LAMBDA_TH, 0},
    /* many query blocks per head; decode with few heads and a long cache
     * (keys split across threads, partials merged) */
    {DRT_OP_DIFF_ATTN, {70, 3, 1, 2, 64, 128}, F32, 40, 1, 0, 0.35f},
    {DRT_OP_DIFF_ATTN, {1, 1, 1, 2, 64, 128}, F32, 700, 1, 0, 0.45f},
    {DRT_OP_DIFF_ATTN, {2, 2, 1, 1, 64, 64}, F32, 600, 300, V_LAMBDA_TH, 0},
    /* the decomposed lowering (the cache has exactly S rows: it reads all) */
    {DRT_OP_DIFF_ATTN, {5, 4, 2, 2, 64, 128}, F32, 9, 1, V_DECOMPOSED, 0.6f},
    {DRT_OP_DIFF_ATTN, {1, 4, 2, 1, 64, 64}, F32, 20, 1, V_DECOMPOSED | V_LAMBDA_TH, 0},
    /* ATTN {T, H, G, dk, dv}, S = p0 + T */
    {DRT_OP_ATTN, {1, 8, 2, 64, 64}, F32, 76, 1, 0, 0},
    {DRT_OP_ATTN, {37, 4, 4, 128, 128}, F32, 0, 1, 0, 0},
    {DRT_OP_ATTN, {7, 6, 2, 64, 256}, F32, 83, 1, 0, 0},
    {DRT_OP_ATTN, {20, 2, 1, 64, 64}, F32, 0, 300, 0, 0},
    {DRT_OP_ATTN, {3, 4, 1, 128, 128}, F32, 61, 300, 0, 0},
    {DRT_OP_ATTN, {1, 4, 4, 64, 128}, F32, 33, 1, 0, 0},
    {DRT_OP_ATTN, {1, 6, 3, 128, 64}, F32, 9, 1, 0, 0},
    {DRT_OP_ATTN, {70, 2, 1, 64, 64}, F32, 20, 1, 0, 0},
    {DRT_OP_ATTN, {1, 1, 1, 64, 128}, F32, 500, 1, 0, 0},
    /* GROUPNORM {T, H, dv}, fparam = scale */
    {DRT_OP_GROUPNORM, {1, 8, 128}, F32, 0, 1, 0, 0.2f},
    {DRT_OP_GROUPNORM, {37, 3, 256}, F32, 0, 1, 0, 0.65f},
    {DRT_OP_GROUPNORM, {5, 4, 37}, F32, 0, 1, V_NO_WEIGHT, 1},
    /* SWIGLU / SIGMOID / ADD {rows, cols} */
    {DRT_OP_SWIGLU, {1, 1000}, F32, 0, 4, 0, 0},
    {DRT_OP_SWIGLU, {37, 129}, F32, 0, 300, 0, 0},
    {DRT_OP_SIGMOID, {1, 7}, F32, 0, 30, 0, 0},
    {DRT_OP_SIGMOID, {33, 129}, F32, 0, 300, 0, 0},
    {DRT_OP_ADD, {1, 4097}, F32, 0, 1, 0, 0},
    {DRT_OP_ADD, {37, 129}, F32, 0, 1, 0, 0},
    /* KV_WRITE {T, S_cap, G, m, d}: 4-d cache, or m = 0: (S_cap, G, d) */
    {DRT_OP_KV_WRITE, {1, 64, 2, 2, 64}, F32, 63, 1, 0, 0},
    {DRT_OP_KV_WRITE, {7, 40, 3, 0, 128}, F32, 5, 1, 0, 0},
    {DRT_OP_KV_WRITE, {37, 37, 1, 1, 16}, F32, 0, 1, 0, 0},
    /* PERMUTE {nd, n0, n1, n2, n3, p0, p1, p2, p3} */
    {DRT_OP_PERMUTE, {4, 3, 5, 2, 7, 2, 1, 0, 3}, F32, 0, 1, 0, 0},
    {DRT_OP_PERMUTE, {4, 9, 4, 1, 33, 1, 0, 2, 3}, F32, 0, 1, 0, 0},
    {DRT_OP_PERMUTE, {4, 2, 3, 4, 5, 3, 2, 1, 0}, F32, 0, 1, 0, 0},
    {DRT_OP_PERMUTE, {3, 5, 4, 9, 0, 1, 0, 2, 0}, F32, 0, 1, 0, 0},
    {DRT_OP_PERMUTE, {2, 37, 129, 0, 0, 1, 0, 0, 0}, F32, 0, 1, 0, 0},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

/* Perf shapes: what issue 3 and DESIGN section 7 ask to be measured. */
static const ccase PERF_CASES[] = {
    {DRT_OP_MATMUL, {1, 1, 1024, 1024, 1024, 0}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 1024, 4096, 0}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 512, 1024, 4096, 0}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 1024, 4096, 0}, F16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 512, 1024, 4096, 0}, BF16, 0, 1, 0, 1},
    /* the 134M DiffLlama's MLP, prefill and decode (bench/run_cpu.sh) */
    {DRT_OP_MATMUL, {1, 1, 512, 768, 2048, 0}, F16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 768, 2048, 0}, F16, 0, 1, 0, 1},
    /* decode GEMV streaming a 128 MiB f16 weight from memory (past any cache) */
    {DRT_OP_MATMUL, {1, 1, 1, 4096, 16384, 0}, F16, 0, 1, 0, 1},
    {DRT_OP_DIFF_ATTN, {1024, 8, 8, 2, 64, 128}, F32, 0, 1, 0, 0.5f},
    {DRT_OP_DIFF_ATTN, {1024, 8, 8, 2, 64, 128}, F32, 0, 1, V_DECOMPOSED, 0.5f},
    {DRT_OP_DIFF_ATTN, {1, 8, 8, 2, 64, 128}, F32, 1023, 1, 0, 0.5f},
    {DRT_OP_ATTN, {1024, 8, 8, 64, 128}, F32, 0, 1, 0, 0},
    {DRT_OP_ATTN, {1, 8, 8, 64, 128}, F32, 1023, 1, 0, 0},
    {DRT_OP_DUAL_SOFTMAX, {8, 1024, 1024}, F32, 0, 1, 0, 0.5f},
    {DRT_OP_RMSNORM, {512, 4096}, F32, 0, 1, 0, 0},
    {DRT_OP_ROPE, {512, 32, 128}, F32, 0, 1, 0, 0},
    {DRT_OP_SWIGLU, {512, 11008}, F32, 0, 4, 0, 0},
    {DRT_OP_ADD, {512, 4096}, F32, 0, 1, 0, 0},
    {DRT_OP_GROUPNORM, {512, 16, 256}, F32, 0, 1, 0, 0},
    {DRT_OP_PERMUTE, {4, 512, 16, 2, 128, 2, 1, 0, 3}, F32, 0, 1, 0, 0},
};
#define N_PERF ((int)(sizeof PERF_CASES / sizeof PERF_CASES[0]))

/* ---- building a case ----------------------------------------------------------- */

/* IN_UNIT: uniform in [0,1) (lambda); IN_INV_FREQ: theta-10000 RoPE
 * frequencies; IN_CACHE: rows past `bound` (= S) are NaN, never to be read;
 * IN_KV_DST: the rows KV_WRITE must write start as NaN */
enum { IN_UNIFORM, IN_IDS, IN_UNIT, IN_INV_FREQ, IN_CACHE, IN_KV_DST };

typedef struct {
    drt_graph *g;
    drt_tensor *node; /* the op under test */
    drt_tensor *out;  /* what is compared: the node (for KV_WRITE, the cache) */
    drt_tensor *in[5];
    int kind[5];
    float mag[5];
    int bound[5]; /* IN_IDS: exclusive upper bound */
    int n_in;
    int p0;
    char desc[200];
} built;

static drt_tensor *add_in(built *b, drt_tensor *t, int kind, float mag, int bound) {
    if (!t) return NULL;
    b->in[b->n_in] = t;
    b->kind[b->n_in] = kind;
    b->mag[b->n_in] = mag;
    b->bound[b->n_in] = bound;
    b->n_in++;
    return t;
}

static drt_status build_case(const ccase *c, built *b) {
    memset(b, 0, sizeof *b);
    drt_graph *g = b->g = drt_graph_new();
    if (!g) return drt_set_error(DRT_ERR_OOM, "out of memory");
    const int *a = c->a;
    const char *wn = drt_dtype_name(c->wt);
    b->p0 = c->p0;
    switch (c->op) {
    case DRT_OP_MATMUL: {
        int B = a[0], Bw = a[1], T = a[2], K = a[3], N = a[4], tr = a[5];
        drt_tensor *x = B > 1 ? drt_new_tensor_3d(g, F32, B, T, K, "x") : drt_new_tensor_2d(g, F32, T, K, "x");
        drt_tensor *w;
        if (B > 1 || Bw > 1)
            w = tr ? drt_new_tensor_3d(g, c->wt, Bw, K, N, "w") : drt_new_tensor_3d(g, c->wt, Bw, N, K, "w");
        else
            w = tr ? drt_new_tensor_2d(g, c->wt, K, N, "w") : drt_new_tensor_2d(g, c->wt, N, K, "w");
        add_in(b, x, IN_UNIFORM, c->mag, 0);
        add_in(b, w, IN_UNIFORM, 1, 0);
        b->node = drt_matmul_ex(g, x, w, tr, c->fparam);
        snprintf(b->desc, sizeof b->desc, "B=%d Bw=%d T=%d K=%d N=%d w=%s%s scale=%g", B, Bw, T, K, N, wn,
                 tr ? " trans_w" : "", (double)c->fparam);
        break;
    }
    case DRT_OP_EMBED: {
        drt_tensor *ids = add_in(b, drt_new_tensor_1d(g, DRT_I32, a[0], "ids"), IN_IDS, 0, a[1]);
        drt_tensor *E = add_in(b, drt_new_tensor_2d(g, c->wt, a[1], a[2], "E"), IN_UNIFORM, 1, 0);
        b->node = drt_embed(g, ids, E);
        snprintf(b->desc, sizeof b->desc, "T=%d V=%d D=%d E=%s", a[0], a[1], a[2], wn);
        break;
    }
    case DRT_OP_RMSNORM: {
        drt_tensor *x = add_in(b, drt_new_tensor_2d(g, F32, a[0], a[1], "x"), IN_UNIFORM, c->mag, 0);
        drt_tensor *w = c->var & V_NO_WEIGHT ? NULL : add_in(b, drt_new_tensor_1d(g, F32, a[1], "w"), IN_UNIFORM, 1, 0);
        b->node = drt_rmsnorm(g, x, w, c->fparam);
        snprintf(b->desc, sizeof b->desc, "T=%d C=%d eps=%g%s |x|<=%g", a[0], a[1], (double)c->fparam,
                 w ? "" : " no-weight", (double)c->mag);
        break;
    }
    case DRT_OP_ROPE: {
        drt_tensor *x = add_in(b, drt_new_tensor_3d(g, F32, a[0], a[1], a[2], "x"), IN_UNIFORM, 1, 0);
        drt_tensor *f = add_in(b, drt_new_tensor_1d(g, F32, a[2] / 2, "inv_freq"), IN_INV_FREQ, 1, a[2]);
        b->node = drt_rope(g, x, f);
        snprintf(b->desc, sizeof b->desc, "T=%d Hn=%d d=%d p0=%d", a[0], a[1], a[2], c->p0);
        break;
    }
    case DRT_OP_DUAL_SOFTMAX: {
        int H = a[0], T = a[1], S = a[2];
        drt_tensor *s1 = add_in(b, drt_new_tensor_3d(g, F32, H, T, S, "s1"), IN_UNIFORM, c->mag, 0);
        drt_tensor *s2 = add_in(b, drt_new_tensor_3d(g, F32, H, T, S, "s2"), IN_UNIFORM, c->mag, 0);
        drt_tensor *l = c->var & V_LAMBDA_TH ? add_in(b, drt_new_tensor_2d(g, F32, T, H, "lambda"), IN_UNIT, 1, 0) : NULL;
        b->node = drt_dual_softmax(g, s1, s2, c->fparam, l);
        b->p0 = S - T;
        snprintf(b->desc, sizeof b->desc, "H=%d T=%d S=%d p0=%d lambda=%s |s|<=%g", H, T, S, S - T,
                 l ? "per-token" : "scalar", (double)c->mag);
        break;
    }
    case DRT_OP_DIFF_ATTN: {
        int T = a[0], H = a[1], G = a[2], m = a[3], dk = a[4], dv = a[5], S = c->p0 + T;
        int cap = c->var & V_DECOMPOSED ? S : S + 3; /* the decomposed path reads every row */
        drt_tensor *q = add_in(b, drt_new_tensor_4d(g, F32, T, H, 2, dk, "q"), IN_UNIFORM, c->mag, 0);
        drt_tensor *k = add_in(b, drt_new_tensor_4d(g, F32, cap, G, m, dk, "k"), IN_CACHE, 1, S);
        drt_tensor *v = add_in(b, drt_new_tensor_3d(g, F32, cap, G, dv, "v"), IN_CACHE, 1, S);
        drt_tensor *l = c->var & V_LAMBDA_TH ? add_in(b, drt_new_tensor_2d(g, F32, T, H, "lambda"), IN_UNIT, 1, 0) : NULL;
        b->node = c->var & V_DECOMPOSED ? drt_diff_attn_decomposed(g, q, k, v, c->fparam, l)
                                        : drt_diff_attn(g, q, k, v, c->fparam, l);
        snprintf(b->desc, sizeof b->desc, "%sT=%d S=%d p0=%d H=%d G=%d m=%d dk=%d dv=%d lambda=%s |q|<=%g",
                 c->var & V_DECOMPOSED ? "decomposed " : "", T, S, c->p0, H, G, m, dk, dv,
                 l ? "per-token" : "scalar", (double)c->mag);
        break;
    }
    case DRT_OP_ATTN: {
        int T = a[0], H = a[1], G = a[2], dk = a[3], dv = a[4], S = c->p0 + T;
        drt_tensor *q = add_in(b, drt_new_tensor_3d(g, F32, T, H, dk, "q"), IN_UNIFORM, c->mag, 0);
        drt_tensor *k = add_in(b, drt_new_tensor_3d(g, F32, S + 3, G, dk, "k"), IN_CACHE, 1, S);
        drt_tensor *v = add_in(b, drt_new_tensor_3d(g, F32, S + 3, G, dv, "v"), IN_CACHE, 1, S);
        b->node = drt_attn(g, q, k, v);
        snprintf(b->desc, sizeof b->desc, "T=%d S=%d p0=%d H=%d G=%d dk=%d dv=%d |q|<=%g", T, S, c->p0, H, G, dk,
                 dv, (double)c->mag);
        break;
    }
    case DRT_OP_GROUPNORM: {
        drt_tensor *x = add_in(b, drt_new_tensor_3d(g, F32, a[0], a[1], a[2], "x"), IN_UNIFORM, 1, 0);
        drt_tensor *w = c->var & V_NO_WEIGHT ? NULL : add_in(b, drt_new_tensor_1d(g, F32, a[2], "w"), IN_UNIFORM, 1, 0);
        b->node = drt_groupnorm(g, x, w, 1e-5f, c->fparam);
        snprintf(b->desc, sizeof b->desc, "T=%d H=%d dv=%d scale=%g%s", a[0], a[1], a[2], (double)c->fparam,
                 w ? "" : " no-weight");
        break;
    }
    case DRT_OP_SWIGLU:
    case DRT_OP_ADD: {
        drt_tensor *x = add_in(b, drt_new_tensor_2d(g, F32, a[0], a[1], "a"), IN_UNIFORM, c->mag, 0);
        drt_tensor *y = add_in(b, drt_new_tensor_2d(g, F32, a[0], a[1], "b"), IN_UNIFORM, c->mag, 0);
        b->node = c->op == DRT_OP_ADD ? drt_add(g, x, y) : drt_swiglu(g, x, y);
        snprintf(b->desc, sizeof b->desc, "%dx%d |x|<=%g", a[0], a[1], (double)c->mag);
        break;
    }
    case DRT_OP_SIGMOID: {
        drt_tensor *x = add_in(b, drt_new_tensor_2d(g, F32, a[0], a[1], "x"), IN_UNIFORM, c->mag, 0);
        b->node = drt_sigmoid(g, x);
        snprintf(b->desc, sizeof b->desc, "%dx%d |x|<=%g", a[0], a[1], (double)c->mag);
        break;
    }
    case DRT_OP_KV_WRITE: {
        int T = a[0], Sc = a[1], G = a[2], m = a[3], d = a[4];
        drt_tensor *src, *cache;
        if (m) {
            src = drt_new_tensor_4d(g, F32, T, G, m, d, "src");
            cache = drt_new_tensor_4d(g, F32, Sc, G, m, d, "cache");
        } else {
            src = drt_new_tensor_3d(g, F32, T, G, d, "src");
            cache = drt_new_tensor_3d(g, F32, Sc, G, d, "cache");
        }
        add_in(b, src, IN_UNIFORM, 1, 0);
        add_in(b, cache, IN_KV_DST, 1, 0);
        b->node = drt_kv_write(g, src, cache);
        snprintf(b->desc, sizeof b->desc, "T=%d cache=%d rows of %dx%dx%d p0=%d", T, Sc, G, m ? m : 1, d, c->p0);
        break;
    }
    case DRT_OP_PERMUTE: {
        int nd = a[0];
        int64_t ne[4] = {a[1], a[2], a[3], a[4]};
        drt_tensor *x = add_in(b, drt_new_tensor(g, F32, nd, ne, "x"), IN_UNIFORM, 1, 0);
        b->node = drt_permute(g, x, a[5], a[6], nd > 2 ? a[7] : -1, nd > 3 ? a[8] : -1);
        snprintf(b->desc, sizeof b->desc, "nd=%d (%d,%d,%d,%d) perm (%d,%d,%d,%d)", nd, a[1], a[2], a[3], a[4], a[5],
                 a[6], a[7], a[8]);
        break;
    }
    default:
        return drt_set_error(DRT_ERR_INVALID_ARG, "conform: no case builder for %s", drt_op_name(c->op));
    }
    if (!b->node) return drt_set_error(g->err ? g->err : DRT_ERR_INVALID_ARG, "conform case %s %s: %s",
                                       drt_op_name(c->op), b->desc, drt_last_error());
    b->out = c->op == DRT_OP_KV_WRITE ? b->node->src[1] : b->node;
    /* read after the run, and poisoned before it: its own storage, so no
     * earlier node of a multi-node case writes over the poison */
    b->out->flags |= DRT_TF_OUTPUT;
    return DRT_OK;
}

/* ---- inputs ------------------------------------------------------------------- */

static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double unif(uint64_t *s) { return (double)(mix(s) >> 11) * (1.0 / 9007199254740992.0); }

/* Fills every input of b from seed, converted to its dtype, and uploads it. */
static drt_status fill_inputs(built *b, uint64_t seed) {
    for (int i = 0; i < b->n_in; i++) {
        drt_tensor *t = b->in[i];
        int64_t n = drt_nelem(t);
        uint64_t s = seed * 1000003ull + (uint64_t)i * 7919ull;
        void *h = malloc((size_t)n * 4 + 4);
        if (!h) return drt_set_error(DRT_ERR_OOM, "out of memory");
        for (int64_t j = 0; j < n; j++) {
            double u = unif(&s);
            float f;
            switch (b->kind[i]) {
            case IN_IDS: ((int32_t *)h)[j] = (int32_t)(u * b->bound[i]); continue;
            case IN_UNIT: f = (float)u; break;
            case IN_INV_FREQ: f = (float)pow(10000.0, -2.0 * (double)j / (double)b->bound[i]); break;
            default: f = (float)((2 * u - 1) * b->mag[i]); break;
            }
            if (t->type == DRT_F16) ((uint16_t *)h)[j] = drt_f32_to_f16(f);
            else if (t->type == DRT_BF16) ((uint16_t *)h)[j] = drt_f32_to_bf16(f);
            else ((float *)h)[j] = f;
        }
        int64_t row = t->ne[0] ? n / t->ne[0] : 0;
        if (b->kind[i] == IN_KV_DST) {
            /* the rows KV_WRITE must write are poisoned: unwritten rows fail */
            int64_t T = b->node->src[0]->ne[0];
            for (int64_t j = (int64_t)b->p0 * row; j < (b->p0 + T) * row && j < n; j++) ((float *)h)[j] = NAN;
        }
        if (b->kind[i] == IN_CACHE) /* rows past S must never be read */
            for (int64_t j = (int64_t)b->bound[i] * row; j < n; j++) ((float *)h)[j] = NAN;
        drt_status st = drt_tensor_set(t, h, drt_nbytes(t));
        free(h);
        if (st != DRT_OK) return st;
    }
    if (b->node->op != DRT_OP_KV_WRITE) {
        int64_t n = drt_nelem(b->out);
        float *p = malloc((size_t)n * 4 + 4);
        if (!p) return drt_set_error(DRT_ERR_OOM, "out of memory");
        for (int64_t j = 0; j < n; j++) p[j] = NAN;
        drt_status st = drt_tensor_set(b->out, p, (size_t)n * 4);
        free(p);
        if (st != DRT_OK) return st;
    }
    return DRT_OK;
}

/* ---- running one case on one backend --------------------------------------------- */

typedef enum { R_PASS, R_FAIL, R_UNSUPPORTED, R_UNAVAILABLE, R_NONE } verdict;
static const char *VERDICT[] = {"pass", "FAIL", "unsupported", "unavailable", "-"};

typedef struct {
    verdict v;
    double nmse, maxerr;
    char why[200];
} outcome;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs c on be; *out_host receives the output (malloc'd) when it ran. With
 * times != NULL, runs warmup + repeats times and writes each duration. */
static drt_status run_case(drt_backend *be, const ccase *c, uint64_t seed, float **out_host, int64_t *n_out,
                           int *supported, double *times, int warmup, int repeats, built *keep) {
    built b;
    *out_host = NULL;
    drt_status st = build_case(c, &b);
    if (st != DRT_OK) {
        drt_graph_free(b.g);
        return st;
    }
    /* a case is supported when the backend runs every node of it itself */
    *supported = 1;
    for (int i = 0; i < b.g->n_nodes; i++) *supported &= be->ops->supports(be, b.g->nodes[i]) ? 1 : 0;
    if (!*supported) {
        if (keep) *keep = b; else drt_graph_free(b.g);
        return DRT_OK;
    }
    drt_plan *p = NULL;
    st = drt_plan_create(b.g, be, &p);
    if (st == DRT_OK) st = fill_inputs(&b, seed);
    drt_exec ex = {.p0 = b.p0};
    if (st == DRT_OK && !times) st = drt_plan_run(p, &ex);
    if (st == DRT_OK && times) {
        for (int i = 0; st == DRT_OK && i < warmup; i++) st = drt_plan_run(p, &ex);
        for (int i = 0; st == DRT_OK && i < repeats; i++) {
            double t0 = now_s();
            st = drt_plan_run(p, &ex);
            times[i] = now_s() - t0;
        }
    }
    if (st == DRT_OK) {
        *n_out = drt_nelem(b.out);
        *out_host = malloc((size_t)*n_out * 4 + 4);
        if (!*out_host) st = drt_set_error(DRT_ERR_OOM, "out of memory");
        else st = drt_tensor_get(b.out, *out_host, (size_t)*n_out * 4);
    }
    drt_plan_free(p);
    if (keep) *keep = b; else drt_graph_free(b.g);
    return st;
}

static void compare(const float *out, const float *ref, int64_t n, double bound, outcome *o) {
    double num = 0, den = 0, mx = 0;
    int64_t bad = -1;
    for (int64_t i = 0; i < n; i++) {
        if (isfinite(ref[i]) && !isfinite(out[i])) {
            if (bad < 0) bad = i;
            continue;
        }
        double d = (double)out[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        if (fabs(d) > mx) mx = fabs(d);
    }
    o->nmse = den > 0 ? num / den : (num > 0 ? INFINITY : 0);
    o->maxerr = mx;
    if (bad >= 0) {
        o->v = R_FAIL;
        o->nmse = INFINITY;
        snprintf(o->why, sizeof o->why, "non-finite output at element %lld (reference %g)", (long long)bad,
                 (double)ref[bad]);
    } else if (!(o->nmse <= bound)) {
        o->v = R_FAIL;
        snprintf(o->why, sizeof o->why, "NMSE %.3e > %.0e", o->nmse, bound);
    } else {
        o->v = R_PASS;
    }
}

/* ---- selection helpers --------------------------------------------------------------- */

static int in_list(const char *list, const char *name) {
    if (!list || !*list) return 0;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncasecmp(p, name, n) == 0) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

#define MAX_BE 16
typedef struct {
    const char *name;
    drt_backend *be;
    int required;
    char why[300];
} be_slot;

/* per (op, backend) aggregate */
typedef struct {
    verdict v;
    int n_pass, n_fail, n_unsup;
    double worst_nmse;
    char worst[420];
} cell;

static void cell_add(cell *c, const outcome *o, const char *desc, uint64_t seed, const char *op) {
    if (o->v == R_PASS) c->n_pass++;
    if (o->v == R_FAIL) c->n_fail++;
    if (o->v == R_UNSUPPORTED) c->n_unsup++;
    if (o->v == R_FAIL && (c->v != R_FAIL || !(o->nmse <= c->worst_nmse))) {
        c->worst_nmse = o->nmse;
        snprintf(c->worst, sizeof c->worst, "%s %s seed=%llu: %s (NMSE %.3e, max|d| %.3e)", op, desc,
                 (unsigned long long)seed, o->why, o->nmse, o->maxerr);
    }
    if (c->v == R_NONE || o->v == R_FAIL || (o->v == R_UNSUPPORTED && c->v == R_PASS)) c->v = c->v == R_FAIL ? R_FAIL : o->v;
}

static cJSON *case_json(const char *kind, const char *op, const char *be, const char *desc, uint64_t seed,
                        const outcome *o) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", kind);
    cJSON_AddStringToObject(j, "op", op);
    cJSON_AddStringToObject(j, "backend", be);
    cJSON_AddStringToObject(j, "case", desc);
    cJSON_AddNumberToObject(j, "seed", (double)seed);
    cJSON_AddStringToObject(j, "status", VERDICT[o->v]);
    if (o->v == R_PASS || o->v == R_FAIL) {
        if (isfinite(o->nmse)) cJSON_AddNumberToObject(j, "nmse", o->nmse);
        else cJSON_AddStringToObject(j, "nmse", "inf");
        cJSON_AddNumberToObject(j, "max_abs_err", o->maxerr);
    }
    if (o->why[0]) cJSON_AddStringToObject(j, "detail", o->why);
    return j;
}

/* ---- whole models --------------------------------------------------------------------- */

typedef struct {
    int n_tok;
    int32_t tok[64];
} prompt_t;

static drt_status read_prompt(const char *dir, prompt_t *p) {
    char path[1400];
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    drt_st_file f;
    drt_status s = drt_st_open(path, &f);
    if (s != DRT_OK) return s;
    const drt_st_tensor *t = drt_st_find(&f, "tokens");
    if (!t || t->dtype != DRT_I32 || t->ndim != 1 || t->shape[0] < 1 || t->shape[0] > 64) {
        drt_st_close(&f);
        return drt_set_error(DRT_ERR_FORMAT, "%s: no i32 \"tokens\" of 1..64 ids", path);
    }
    p->n_tok = (int)t->shape[0];
    memcpy(p->tok, t->data, sizeof(int32_t) * (size_t)p->n_tok);
    drt_st_close(&f);
    return DRT_OK;
}

/* prefill logits (T,V) and GREEDY_N greedy tokens, and fallback count */
static drt_status model_run(drt_model *m, const char *backend, const prompt_t *p, float *logits, int32_t *greedy,
                            int *fallbacks, char *fb, size_t fbn) {
    drt_model_info I;
    drt_model_get_info(m, &I);
    drt_session *s;
    drt_session_opts so = {.backend = backend, .max_ctx = p->n_tok + GREEDY_N + 1};
    drt_status st = drt_session_create(m, &so, &s);
    if (st != DRT_OK) return st;
    for (int64_t i = 0; i < (int64_t)p->n_tok * I.vocab; i++) logits[i] = NAN;
    st = drt_session_forward(s, p->tok, p->n_tok, logits, 1);
    float *last = malloc(sizeof(float) * (size_t)I.vocab);
    if (!last) st = drt_set_error(DRT_ERR_OOM, "out of memory");
    if (st == DRT_OK) memcpy(last, logits + (size_t)(p->n_tok - 1) * I.vocab, sizeof(float) * (size_t)I.vocab);
    for (int i = 0; st == DRT_OK && i < GREEDY_N; i++) {
        int best = 0;
        for (int v = 1; v < I.vocab; v++)
            if (last[v] > last[best]) best = v;
        greedy[i] = best;
        if (i + 1 < GREEDY_N) st = drt_session_forward(s, &greedy[i], 1, last, 0);
    }
    *fallbacks = drt_session_fallbacks(s, fb, fbn);
    free(last);
    drt_session_free(s);
    return st;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* ---- the run ----------------------------------------------------------------------------- */

static int median_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

drt_status drt_conform_run(const drt_conform_opts *o, drt_conform_result *r) {
    memset(r, 0, sizeof *r);
    FILE *out = o->out;
    be_slot be[MAX_BE];
    int nbe = 0;
    int n_models = 0;
    char *models[64];

    /* backends: the selection, in registry order; a required one that is not
     * compiled in or not available is recorded, never skipped silently */
    for (int i = 0; i < drt_registry_count() && nbe < MAX_BE; i++) {
        const drt_backend_ops *ops = drt_registry_get(i);
        drt_backend_info bi = {0};
        const char *name = ops ? ops->name : NULL;
        if (!ops) {
            drt_backend_get_info(i, &bi);
            name = bi.name;
        }
        if (o->backends && *o->backends && !in_list(o->backends, name)) continue;
        be_slot *b = &be[nbe++];
        memset(b, 0, sizeof *b);
        b->name = name;
        b->required = in_list(o->require, name);
        if (!ops) {
            snprintf(b->why, sizeof b->why, "%s", bi.reason ? bi.reason : "not compiled in");
            continue;
        }
        if (drt_backend_open(name, NULL, &b->be) != DRT_OK) snprintf(b->why, sizeof b->why, "%s", drt_last_error());
    }
    /* a required name that matches no backend at all */
    if (o->require)
        for (const char *p = o->require; *p;) {
            const char *e = strchr(p, ',');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            int found = 0;
            for (int i = 0; i < nbe; i++)
                if (strlen(be[i].name) == len && strncasecmp(be[i].name, p, len) == 0) found = 1;
            if (!found && len) {
                r->unavailable_required++;
                if (out) fprintf(out, "required backend %.*s: not selected or unknown\n", (int)len, p);
            }
            if (!e) break;
            p = e + 1;
        }
    for (int i = 0; i < nbe; i++) {
        if (be[i].be) continue;
        if (be[i].required) r->unavailable_required++;
        if (out) fprintf(out, "backend %-8s unavailable%s: %s\n", be[i].name, be[i].required ? " (REQUIRED)" : "", be[i].why);
    }
    drt_backend *ref = NULL;
    drt_status st = drt_backend_open("ref", NULL, &ref);
    if (st != DRT_OK) goto finish;

    cJSON *jroot = cJSON_CreateArray();

    if (o->list) {
        for (int i = 0; i < N_CASES; i++) {
            built b;
            if (build_case(&CASES[i], &b) == DRT_OK && out) fprintf(out, "%-13s %s\n", drt_op_name(CASES[i].op), b.desc);
            drt_graph_free(b.g);
        }
        goto done;
    }

    if (o->perf) {
        int reps = o->repeats > 0 ? o->repeats : 5, warm = o->warmup >= 0 ? o->warmup : 1;
        double *times = malloc(sizeof(double) * (size_t)reps);
        /* each backend's own peaks, measured with its own kernels: a large
         * copy (identity PERMUTE of 64 MiB) and a large GEMM (1024^3 f32) */
        static const ccase PEAK_COPY = {DRT_OP_PERMUTE, {4, 64, 1024, 256, 1, 0, 1, 2, 3}, F32, 0, 1, 0, 0};
        double peak_bw[MAX_BE] = {0}, peak_fl[MAX_BE] = {0};
        for (int k = 0; k < nbe; k++) {
            if (!be[k].be) continue;
            const ccase *pk[2] = {&PEAK_COPY, &PERF_CASES[0]};
            for (int q = 0; q < 2; q++) {
                float *res = NULL;
                int64_t n;
                int sup;
                built b;
                st = run_case(be[k].be, pk[q], 999, &res, &n, &sup, times, warm, reps, &b);
                free(res);
                if (st == DRT_OK && sup) {
                    qsort(times, (size_t)reps, sizeof(double), median_cmp);
                    drt_exec ex = {0};
                    const drt_op_info *info = drt_op_get(pk[q]->op);
                    if (q == 0) peak_bw[k] = info->bytes(b.node, &ex) / times[reps / 2] * 1e-9;
                    else peak_fl[k] = info->flops(b.node, &ex) / times[reps / 2] * 1e-9;
                }
                drt_graph_free(b.g);
                if (st != DRT_OK) goto done;
            }
            if (out)
                fprintf(out, "peak %-8s copy %.2f GB/s (identity PERMUTE, 64 MiB), GEMM %.2f GFLOP/s (MATMUL 1024^3 f32)\n",
                        be[k].name, peak_bw[k], peak_fl[k]);
        }
        if (out)
            fprintf(out, "%-13s %-8s %-58s %10s %10s %9s %7s %7s\n", "op", "backend", "shape", "median ms", "GFLOP/s",
                    "GB/s", "%FLOP", "%BW");
        for (int i = 0; i < N_PERF; i++) {
            const ccase *c = &PERF_CASES[i];
            if (o->ops && *o->ops && !in_list(o->ops, drt_op_name(c->op))) continue;
            for (int k = 0; k < nbe; k++) {
                if (!be[k].be) continue;
                float *res = NULL;
                int64_t n;
                int sup;
                built b;
                st = run_case(be[k].be, c, 1000 + (uint64_t)i, &res, &n, &sup, times, warm, reps, &b);
                free(res);
                if (st != DRT_OK) {
                    drt_graph_free(b.g);
                    goto done;
                }
                if (!sup) {
                    if (out) fprintf(out, "%-13s %-8s %-58s %10s\n", drt_op_name(c->op), be[k].name, b.desc, "unsupported");
                    drt_graph_free(b.g);
                    continue;
                }
                qsort(times, (size_t)reps, sizeof(double), median_cmp);
                double med = times[reps / 2];
                drt_exec ex = {.p0 = b.p0};
                double fl = 0, by = 0; /* every node's napkin math: a decomposed case counts its own work */
                for (int q = 0; q < b.g->n_nodes; q++) {
                    const drt_op_info *info = drt_op_get(b.g->nodes[q]->op);
                    fl += info->flops(b.g->nodes[q], &ex);
                    by += info->bytes(b.g->nodes[q], &ex);
                }
                double gf = fl / med * 1e-9, gb = by / med * 1e-9;
                double pf = peak_fl[k] > 0 ? 100 * gf / peak_fl[k] : 0, pb = peak_bw[k] > 0 ? 100 * gb / peak_bw[k] : 0;
                if (out)
                    fprintf(out, "%-13s %-8s %-58s %10.3f %10.2f %9.2f %6.1f%% %6.1f%%\n", drt_op_name(c->op), be[k].name,
                            b.desc, med * 1e3, gf, gb, pf, pb);
                cJSON *j = cJSON_CreateObject();
                cJSON_AddStringToObject(j, "kind", "perf");
                cJSON_AddStringToObject(j, "op", drt_op_name(c->op));
                cJSON_AddStringToObject(j, "backend", be[k].name);
                cJSON_AddStringToObject(j, "case", b.desc);
                cJSON_AddNumberToObject(j, "median_s", med);
                cJSON_AddNumberToObject(j, "repeats", reps);
                cJSON_AddNumberToObject(j, "gflops", gf);
                cJSON_AddNumberToObject(j, "gbytes_per_s", gb);
                cJSON_AddNumberToObject(j, "peak_gflops", peak_fl[k]);
                cJSON_AddNumberToObject(j, "peak_gbytes_per_s", peak_bw[k]);
                cJSON_AddItemToArray(jroot, j);
                drt_graph_free(b.g);
            }
        }
        free(times);
        goto done;
    }

    /* op cases */
    cell cells[DRT_OP_COUNT][MAX_BE];
    for (int i = 0; i < DRT_OP_COUNT; i++)
        for (int k = 0; k < MAX_BE; k++) cells[i][k] = (cell){.v = R_NONE};
    for (int i = 0; i < N_CASES; i++) {
        const ccase *c = &CASES[i];
        const char *opn = drt_op_name(c->op);
        if (o->ops && *o->ops && !in_list(o->ops, opn)) continue;
        uint64_t seed = 0x5eed0000ull + (uint64_t)i;
        float *refout = NULL;
        int64_t n;
        int sup;
        built b;
        st = run_case(ref, c, seed, &refout, &n, &sup, NULL, 0, 0, &b);
        if (st != DRT_OK) goto done;
        char desc[200];
        snprintf(desc, sizeof desc, "%s", b.desc);
        drt_graph_free(b.g);
        for (int k = 0; k < nbe; k++) {
            outcome oc = {.v = R_UNAVAILABLE};
            if (be[k].be) {
                float *res = NULL;
                int64_t n2 = 0;
                built bk = {0};
                st = run_case(be[k].be, c, seed, &res, &n2, &sup, NULL, 0, 0, &bk);
                /* the bound the backend declares for this node in its precision mode */
                double bound = F32_NMSE;
                if (bk.node && be[k].be->ops->nmse_bound) bound = be[k].be->ops->nmse_bound(be[k].be, bk.node);
                /* DESIGN section 6: no declared mode may be looser than 5e-4 */
                if (!(bound <= REDUCED_NMSE)) bound = REDUCED_NMSE;
                drt_graph_free(bk.g);
                if (st != DRT_OK) {
                    oc.v = R_FAIL;
                    oc.nmse = INFINITY;
                    snprintf(oc.why, sizeof oc.why, "run failed: %s", drt_last_error());
                    st = DRT_OK;
                } else if (!sup) {
                    oc.v = R_UNSUPPORTED;
                } else {
                    compare(res, refout, n, bound, &oc);
                }
                free(res);
                cell_add(&cells[c->op][k], &oc, desc, seed, opn);
            }
            cJSON_AddItemToArray(jroot, case_json("op", opn, be[k].name, desc, seed, &oc));
        }
        free(refout);
    }

    /* whole models */
    if (o->models_dir) {
        DIR *d = opendir(o->models_dir);
        if (!d) {
            st = drt_set_error(DRT_ERR_IO, "%s: cannot open the fixture folder", o->models_dir);
            goto done;
        }
        struct dirent *e;
        while ((e = readdir(d)) && n_models < 64) {
            if (e->d_name[0] == '.') continue;
            char p[1300];
            snprintf(p, sizeof p, "%s/%s/expected.safetensors", o->models_dir, e->d_name);
            FILE *f = fopen(p, "rb");
            if (!f) continue;
            fclose(f);
            models[n_models++] = strdup(e->d_name);
        }
        closedir(d);
        qsort(models, (size_t)n_models, sizeof models[0], cmp_str);
    }
    cell mcells[64][MAX_BE];
    for (int mi = 0; mi < n_models; mi++) {
        char dir[1300];
        snprintf(dir, sizeof dir, "%s/%s", o->models_dir, models[mi]);
        for (int k = 0; k < MAX_BE; k++) mcells[mi][k] = (cell){.v = R_NONE};
        drt_model *m = NULL;
        prompt_t pr;
        st = read_prompt(dir, &pr);
        if (st == DRT_OK) st = drt_model_load(dir, &m);
        if (st != DRT_OK) goto done;
        drt_model_info I;
        drt_model_get_info(m, &I);
        size_t nl = (size_t)pr.n_tok * (size_t)I.vocab;
        float *rl = malloc(nl * 4), *bl = malloc(nl * 4);
        int32_t rg[GREEDY_N], bg[GREEDY_N];
        int fbn;
        char fb[300];
        st = model_run(m, "ref", &pr, rl, rg, &fbn, fb, sizeof fb);
        for (int k = 0; st == DRT_OK && k < nbe; k++) {
            outcome oc = {.v = R_UNAVAILABLE};
            if (be[k].be) {
                drt_status s2 = model_run(m, be[k].name, &pr, bl, bg, &fbn, fb, sizeof fb);
                if (s2 != DRT_OK) {
                    oc.v = R_FAIL;
                    oc.nmse = INFINITY;
                    snprintf(oc.why, sizeof oc.why, "run failed: %s", drt_last_error());
                } else {
                    double num = 0, den = 0, mx = 0;
                    int nonfinite = 0;
                    for (size_t i = 0; i < nl; i++) {
                        if (!isfinite(bl[i])) nonfinite = 1;
                        double dd = (double)bl[i] - rl[i];
                        num += dd * dd;
                        den += (double)rl[i] * rl[i];
                        if (fabs(dd) > mx) mx = fabs(dd);
                    }
                    oc.nmse = nonfinite ? INFINITY : num / den;
                    oc.maxerr = mx;
                    int first = -1;
                    for (int i = 0; i < GREEDY_N && first < 0; i++)
                        if (bg[i] != rg[i]) first = i;
                    oc.v = R_PASS;
                    if (!(oc.nmse <= MODEL_NMSE)) {
                        oc.v = R_FAIL;
                        snprintf(oc.why, sizeof oc.why, "logits NMSE %.3e > %.0e", oc.nmse, MODEL_NMSE);
                    } else if (first >= 0) {
                        oc.v = R_FAIL;
                        snprintf(oc.why, sizeof oc.why, "greedy token %d is %d, reference %d", first, bg[first], rg[first]);
                    } else if (fbn > 0) {
                        if (be[k].required) oc.v = R_FAIL;
                        snprintf(oc.why, sizeof oc.why, "%d CPU fallbacks: %.170s", fbn, fb);
                    }
                }
                char desc[160];
                snprintf(desc, sizeof desc, "%.60s (%s, %s) T=%d + %d greedy", models[mi], I.layout_name,
                         drt_dtype_name(I.weight_dtype), pr.n_tok, GREEDY_N);
                cell_add(&mcells[mi][k], &oc, desc, 0, "model");
                if (oc.v == R_PASS && oc.why[0]) snprintf(mcells[mi][k].worst, sizeof mcells[mi][k].worst, "%s", oc.why);
            }
            cJSON_AddItemToArray(jroot, case_json("model", models[mi], be[k].name, models[mi], 0, &oc));
        }
        free(rl);
        free(bl);
        drt_model_free(m);
        if (st != DRT_OK) goto done;
    }

    /* the table */
    if (out) {
        fprintf(out, "\n%-24s", "op \\ backend");
        for (int k = 0; k < nbe; k++) fprintf(out, " %-12s", be[k].name);
        fprintf(out, "\n");
    }
    for (int op = 1; op < DRT_OP_COUNT; op++) {
        int any = 0;
        for (int k = 0; k < nbe; k++) any |= cells[op][k].v != R_NONE || !be[k].be;
        if (o->ops && *o->ops && !in_list(o->ops, drt_op_name((drt_op)op))) continue;
        if (!any) continue;
        if (out) fprintf(out, "%-24s", drt_op_name((drt_op)op));
        for (int k = 0; k < nbe; k++) {
            cell *c = &cells[op][k];
            char txt[32];
            if (!be[k].be) snprintf(txt, sizeof txt, "n/a");
            else if (c->v == R_PASS) snprintf(txt, sizeof txt, "pass %d", c->n_pass);
            else if (c->v == R_FAIL) snprintf(txt, sizeof txt, "FAIL %d/%d", c->n_fail, c->n_fail + c->n_pass);
            else if (c->v == R_UNSUPPORTED) snprintf(txt, sizeof txt, "unsupported");
            else snprintf(txt, sizeof txt, "-");
            if (out) fprintf(out, " %-12s", txt);
            if (!be[k].be) continue;
            r->pass += c->n_pass;
            r->fail += c->n_fail;
            r->unsupported += c->n_unsup;
            if (be[k].required && c->n_unsup) r->fail += c->n_unsup;
        }
        if (out) fprintf(out, "\n");
    }
    for (int mi = 0; mi < n_models; mi++) {
        if (out) fprintf(out, "model:%-18s", models[mi]);
        for (int k = 0; k < nbe; k++) {
            cell *c = &mcells[mi][k];
            const char *txt = !be[k].be ? "n/a" : c->v == R_PASS ? (c->worst[0] ? "pass*" : "pass") : c->v == R_FAIL ? "FAIL" : "-";
            if (out) fprintf(out, " %-12s", txt);
            if (!be[k].be) continue;
            r->pass += c->n_pass;
            r->fail += c->n_fail;
        }
        if (out) fprintf(out, "\n");
    }
    if (out) {
        int hdr = 0;
        for (int op = 1; op < DRT_OP_COUNT; op++)
            for (int k = 0; k < nbe; k++)
                if (cells[op][k].v == R_FAIL) {
                    if (!hdr++) fprintf(out, "\nfailures (worst case per op and backend):\n");
                    fprintf(out, "  FAIL %s: %s\n", be[k].name, cells[op][k].worst);
                }
        for (int mi = 0; mi < n_models; mi++)
            for (int k = 0; k < nbe; k++)
                if (mcells[mi][k].worst[0]) fprintf(out, "  %s %s: %s\n", mcells[mi][k].v == R_FAIL ? "FAIL" : "note",
                                                    be[k].name, mcells[mi][k].worst);
        for (int k = 0; k < nbe; k++)
            if (be[k].required)
                for (int op = 1; op < DRT_OP_COUNT; op++)
                    if (cells[op][k].n_unsup) fprintf(out, "  FAIL %s: %s unsupported on a required backend\n", be[k].name, drt_op_name((drt_op)op));
        fprintf(out, "\n%d passed, %d failed, %d unsupported%s\n", r->pass, r->fail, r->unsupported,
                r->unavailable_required ? ", required backend unavailable" : "");
    }

done:
    for (int mi = 0; mi < n_models; mi++) free(models[mi]);
    if (st == DRT_OK && o->json_path) {
        char *txt = cJSON_Print(jroot);
        FILE *f = fopen(o->json_path, "w");
        if (!f || !txt) st = drt_set_error(DRT_ERR_IO, "%s: cannot write", o->json_path);
        else fputs(txt, f);
        if (f) fclose(f);
        free(txt);
    }
    cJSON_Delete(jroot);
    drt_backend_close(ref);
finish:
    for (int k = 0; k < nbe; k++) drt_backend_close(be[k].be);
    return st;
}
