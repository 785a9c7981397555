/* Vulkan: MATMUL (shaders/matmul.comp tiled, shaders/matvec.comp for few
 * rows) and EMBED (shaders/embed.comp), the two ops that read weights of
 * dtype f32/f16/bf16 (shaders/weights.glsl). CPU reference:
 * backends/ref/matmul.c and elementwise.c; node dims -> kernel arguments as
 * in backends/ref/backend.c (drt_ref_run_node).
 *
 * Checked against the reference (exit status 0: every case within bound):
 *   diffrt conform --backend vulkan --op MATMUL,EMBED
 *   and with --set vulkan.fp16=0, vulkan.subgroup=0, vulkan.tune=gpu (cpu), vulkan.mm_tm=..., vulkan.int64=0
 *   for the variants those pick (lavapipe runs it here; ctest conform)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "vk_internal.h"

/* push constants: mirrors of the shaders' PC blocks */
typedef struct {
    uint32_t o_x, o_w, o_y, B, Bw, T, N, K, ns, ks, trans;
    float scale;
} matmul_pc;

typedef struct {
    uint32_t o_x, o_w, o_y, B, Bw, T, N, K;
    float scale;
} matvec_pc;

typedef struct {
    uint32_t o_ids, o_e, o_y, T, V, D;
} embed_pc;

/* Rows up to these go through matvec.comp with all of them in one
 * workgroup, each weight streamed once for the rows (decode rows of
 * several sequences, issue 27); more go through the tiled GEMM. GPUs: up
 * to 32, where the GEMM's 64-row shared tiles would leave most of the
 * device idle (N/64 workgroups). CPU devices: up to 2; from 3 rows the
 * register-tiled GEMM, which reads each weight once per 8 rows, wins on
 * lavapipe (134M decode GEMVs, 4 layers, f16, 2 loaded cores, min ms:
 * T=2 matvec 36 vs reg 41, T=3 48 vs 38, T=4 60 vs 48). */
#define MATVEC_MAX_T 32
#define MATVEC_MAX_T_CPU 2

/* Picks the module for weight dtype wt out of its three compiled forms
 * (f32; f16 through 16-bit storage; f16/bf16 as packed words) and sets the
 * W_BF16 specialization constant (id 9). */
static vk_shader weight_variant(const vk_ctx *c, drt_dtype wt, vk_shader f32, vk_shader f16, vk_shader u16,
                                uint32_t *bf16) {
    *bf16 = wt == DRT_BF16;
    if (wt == DRT_F32) return f32;
    if (wt == DRT_F16 && c->use_f16) return f16;
    return u16;
}

/* The kernel MATMUL node t runs, by shape class:
 *   gemv   T <= MATVEC_MAX_T (CPU devices: MATVEC_MAX_T_CPU), W not
 *          transposed: matvec.comp, the T rows in one workgroup;
 *   reg    CPU devices: matmul.comp with REG (register tiles, no shared
 *          memory): TM rows x WG*TN columns per workgroup of WG lanes, TM
 *          shrunk for skinny T so that few rows are computed twice;
 *   shared GPUs: matmul.comp tiled through shared memory, 64x64 tiles of
 *          4x4 per thread (256 threads), 32x32 where 256 are not allowed.
 * Tile sizes come from the device's limits (the subgroup size is the lane
 * count of a CPU device's SIMD registers; workgroup invocations and shared
 * memory bound the GPU tile). */
typedef struct {
    enum { MM_GEMV, MM_REG, MM_SHARED } kind;
    uint32_t wg, bm, bn, bk, tm, tn;
    uint32_t tt; /* gemv: rows t per workgroup */
} mm_plan;

static mm_plan plan_of(const vk_ctx *c, uint32_t T, uint32_t trans) {
    mm_plan p = {0};
    if (!trans && T <= (c->tune_cpu ? MATVEC_MAX_T_CPU : MATVEC_MAX_T)) {
        p.kind = MM_GEMV;
        p.wg = vk_wg(c, 128, vk_cpu_lanes(c));
        p.tt = T;
        return p;
    }
    if (c->tune_cpu) {
        p.kind = MM_REG;
        /* one SIMD register of lanes per row of the tile, at least 4 */
        uint32_t sg = c->subgroup_size >= 4 && c->subgroup_size <= 64 ? c->subgroup_size : 8;
        p.wg = vk_wg(c, sg, sg);
        /* 8x4 per lane: measured best of 4..16 x 1..8 on lavapipe (the
         * (TM + TN) loads per 4*TM*TN FMAs dominate; larger tiles spill).
         * vulkan.mm_tm / _tn / _wg (lanes multiplier) override, for tuning;
         * read and checked at init (device.c read_settings) */
        p.tn = c->mm_tn;
        p.tm = c->mm_tm;
        uint32_t wmul = c->mm_wg;
        p.wg = vk_wg(c, p.wg * wmul, p.wg * wmul);
        /* skinny T: the smallest power of two >= T, so rows past T (read
         * clamped, computed, not written) stay few */
        while (p.tm > 4 && p.tm / 2 >= T) p.tm /= 2;
        p.bm = p.tm;
        p.bn = p.wg * p.tn;
        p.bk = 1;
        return p;
    }
    p.kind = MM_SHARED;
    p.bm = vk_wg(c, 256, 64) >= 256 ? 64 : 32;
    p.bn = p.bm;
    p.bk = 16;
    p.tm = 4;
    p.tn = 4;
    /* As + Bs must fit the device's shared memory */
    while ((p.bm + p.bn) * p.bk * 4 > c->props.limits.maxComputeSharedMemorySize && p.bk > 1) p.bk /= 2;
    p.wg = (p.bm / p.tm) * (p.bn / p.tn);
    return p;
}

static vk_shader matmul_select(const vk_ctx *c, const drt_tensor *t, uint32_t eo_x, uint32_t eo_w, mm_plan *p,
                               uint32_t spec[10]);
static uint64_t bind_bytes(const drt_tensor *w);

/* "gemv wg64", "gemv wg128 x8 rows", "gemv wg8 row/thread i64 (split)",
 * "reg 16x16 (8 lanes x 16x2)",
 * "shared 64x64x16 (4x4)" */
const char *vk_matmul_variant(vk_ctx *c, const drt_tensor *t) {
    static _Thread_local char buf[8][64];
    static _Thread_local int next;
    if (t->op != DRT_OP_MATMUL) return NULL;
    if (drt_dtype_block(t->src[1]->type) > 1) return vk_matmul_q_variant(c, t);
    const drt_matmul_shape m = drt_matmul_dims(t);
    mm_plan p = plan_of(c, (uint32_t)m.T, m.trans_w != 0);
    char *s = buf[next++ & 7];
    if (p.kind == MM_GEMV) {
        uint32_t spec[10];
        mm_plan q;
        matmul_select(c, t, vk_eoff(t->src[0]), vk_eoff(t->src[1]), &q, spec);
        char rows[24] = "";
        if (p.tt > 1) snprintf(rows, sizeof rows, " x%u rows", p.tt);
        snprintf(s, sizeof buf[0], "gemv wg%u%s%s%s", p.wg, rows, spec[2] == 2 ? " row/thread i64" : "",
                 bind_bytes(t->src[1]) > c->split_bytes && vk_matmul_splits(c, t) ? " (split)" : "");
    } else if (p.kind == MM_REG)
        snprintf(s, sizeof buf[0], "reg %ux%u (%u lanes x %ux%u)", p.bm, p.bn, p.wg, p.tm, p.tn);
    else
        snprintf(s, sizeof buf[0], "shared %ux%ux%u (%ux%u)", p.bm, p.bn, p.bk, p.tm, p.tn);
    return s;
}

/* The module and specialization MATMUL node t runs, given the element
 * offsets of x and w inside their bindings (the vector paths need them
 * aligned). */
static vk_shader matmul_select(const vk_ctx *c, const drt_tensor *t, uint32_t eo_x, uint32_t eo_w, mm_plan *p,
                               uint32_t spec[10]) {
    const drt_tensor *w = t->src[1];
    const drt_matmul_shape m = drt_matmul_dims(t);
    const uint32_t K = (uint32_t)m.K, trans = m.trans_w != 0;
    *p = plan_of(c, (uint32_t)m.T, trans);
    memset(spec, 0, sizeof(uint32_t) * 10);
    spec[0] = p->wg;
    spec[1] = c->use_sg;
    if (p->kind == MM_GEMV) {
        vk_shader sh = weight_variant(c, w->type, VK_SH_MATVEC_F32, VK_SH_MATVEC_F16, VK_SH_MATVEC_U16, &spec[9]);
        if (c->tune_cpu && w->type == DRT_F16) sh = VK_SH_MATVEC_U16; /* 2 weights per load */
        /* the *_NOSG module follows each one */
        sh = vk_sg_variant(c, sh);
        spec[2] = K % 4 == 0 && eo_x % 4 == 0 && eo_w % 4 == 0;
        spec[3] = p->tt;
        /* CPU devices, packed f16/bf16: a row per thread, 16 weights per
         * step in 64-bit words */
        if (c->tune_cpu && c->use_i64 && sh == VK_SH_MATVEC_U16 && K % 16 == 0 && eo_x % 8 == 0 && eo_w % 16 == 0) {
            sh = VK_SH_MATVEC_U16_I64;
            spec[2] = 2;
        }
        return sh;
    }
    vk_shader sh = weight_variant(c, w->type, VK_SH_MATMUL_F32, VK_SH_MATMUL_F16, VK_SH_MATMUL_U16, &spec[9]);
    /* the register kernel reads f16 as packed words: two weights per load */
    if (p->kind == MM_REG && w->type == DRT_F16) sh = VK_SH_MATMUL_U16;
    spec[2] = p->bm;
    spec[3] = p->bn;
    spec[4] = p->bk;
    spec[5] = p->tm;
    spec[6] = p->tn;
    spec[7] = p->kind == MM_REG;
    spec[8] = p->kind == MM_REG && !trans && K % 4 == 0 && eo_x % 4 == 0 && eo_w % 4 == 0;
    return sh;
}

/* element offset of a tensor whose place may not be decided yet: the
 * runtime's arena puts intermediates at multiples of VK_BIND_ALIGN */
static uint32_t eoff_guess(const drt_tensor *t) {
    return t->buf ? vk_eoff(t) : 0;
}

void vk_matmul_prepare(vk_ctx *c, const drt_tensor *t) {
    if (drt_dtype_block(t->src[1]->type) > 1) return;
    mm_plan p;
    uint32_t spec[10];
    VkPipeline pipe;
    vk_shader sh = matmul_select(c, t, eoff_guess(t->src[0]), eoff_guess(t->src[1]), &p, spec);
    (void)vk_pipeline(c, sh, spec, 10, &pipe);
}

/* bytes of w one binding covers, from its offset rounded down (vk_eoff) to
 * its end rounded up to 16 */
static uint64_t bind_bytes(const drt_tensor *w) {
    return w->offs % VK_BIND_ALIGN + drt_nbytes(w) + 16;
}

bool vk_matmul_splits(const vk_ctx *c, const drt_tensor *t) {
    if (t->op != DRT_OP_MATMUL || drt_dtype_block(t->src[1]->type) > 1) return false;
    const drt_matmul_shape m = drt_matmul_dims(t);
    /* a block of 16 rows must fit one binding */
    return m.B == 1 && m.Bw == 1 && m.T == 1 && !m.trans_w &&
           16 * (uint64_t)m.K * drt_dtype_size(t->src[1]->type) + VK_BIND_ALIGN + 16 <= c->split_bytes;
}

/* A GEMV whose weight is bound in blocks of rows: the node t again for
 * rows [n0, n0 + nr) of W (a tensor over those bytes) and the same slice of
 * y (B = T = 1: contiguous), one dispatch each. The blocks are multiples of
 * 16 rows, so the 64-bit path's alignment holds in every block when it
 * holds in the first. */
static drt_status matvec_split(vk_ctx *c, const drt_tensor *t, const drt_exec *ex) {
    const drt_tensor *w = t->src[1];
    const drt_matmul_shape m = drt_matmul_dims(t); /* B = T = 1, w (N,K) */
    const uint64_t K = (uint64_t)m.K, N = (uint64_t)m.N;
    const uint64_t row = K * drt_dtype_size(w->type);
    const uint64_t rows = (c->split_bytes - VK_BIND_ALIGN - 16) / row / 16 * 16;
    if (rows == 0)
        return drt_set_error(DRT_ERR_UNSUPPORTED,
                             "vulkan: a weight row of %llu bytes "
                             "does not fit a binding",
                             (unsigned long long)row);
    for (uint64_t n0 = 0; n0 < N; n0 += rows) {
        const uint64_t nr = N - n0 < rows ? N - n0 : rows;
        drt_tensor wv = *w, yv = *t;
        wv.nd = 2;
        wv.ne[0] = (int64_t)nr;
        wv.ne[1] = (int64_t)K;
        wv.offs = w->offs + n0 * row;
        yv.ne[yv.nd - 1] = (int64_t)nr;
        yv.offs = t->offs + n0 * sizeof(float);
        yv.src[1] = &wv;
        drt_status s = vk_matmul(c, &yv, ex);
        if (s != DRT_OK) return s;
    }
    return DRT_OK;
}

/* y (B,T,N) = scale * x (B,T,K) w^T; w (Bw,N,K) or (Bw,K,N) when t->ip[0] */
drt_status vk_matmul(vk_ctx *c, const drt_tensor *t, const drt_exec *ex) {
    if (drt_dtype_block(t->src[1]->type) > 1) return vk_matmul_q(c, t);
    const drt_tensor *a = t->src[0], *w = t->src[1];
    if (bind_bytes(w) > c->split_bytes && vk_matmul_splits(c, t)) return matvec_split(c, t, ex);
    const drt_matmul_shape m = drt_matmul_dims(t);
    const uint32_t B = (uint32_t)m.B, Bw = (uint32_t)m.Bw, T = (uint32_t)m.T, K = (uint32_t)m.K, N = (uint32_t)m.N,
                   trans = m.trans_w != 0;
    mm_plan p;
    uint32_t spec[10];
    vk_shader sh = matmul_select(c, t, vk_eoff(a), vk_eoff(w), &p, spec);
    vk_binds b = {.src = {a, w}, .dst = t};
    if (p.kind == MM_GEMV) {
        matvec_pc pc = {vk_eoff(a), vk_eoff(w), vk_eoff(t), B, Bw, T, N, K, t->fp[0]};
        /* CPU devices: two workgroups per core, each striding over N
         * (measured on lavapipe, 2 cores, diff-v1-tiny decode: 4 groups
         * beat 2, 16 and one per 4 rows) */
        uint32_t gx = spec[2] == 2 ? (N + p.wg - 1) / p.wg : (N + 3) / 4; /* N once */
        if (c->tune_cpu && gx > 2 * c->n_cpus) gx = 2 * c->n_cpus;
        return vk_dispatch(c, sh, spec, 10, &b, &pc, sizeof pc, gx, (T + p.tt - 1) / p.tt, B);
    }
    matmul_pc pc = {vk_eoff(a), vk_eoff(w), vk_eoff(t), B, Bw, T, N, K, trans ? 1 : K, trans ? N : 1, trans, t->fp[0]};
    uint32_t gn = (N + p.bn - 1) / p.bn, gm = (T + p.bm - 1) / p.bm;
    /* reg: grid x walks the rows (shaders/matmul.comp) */
    if (p.kind == MM_REG) return vk_dispatch(c, sh, spec, 10, &b, &pc, sizeof pc, gm, gn, B);
    return vk_dispatch(c, sh, spec, 10, &b, &pc, sizeof pc, gn, gm, B);
}

static vk_shader embed_select(const vk_ctx *c, const drt_tensor *t, uint32_t spec[10]) {
    memset(spec, 0, sizeof(uint32_t) * 10);
    spec[0] = vk_wg(c, 256, vk_cpu_lanes(c));
    spec[1] = c->use_sg;
    return weight_variant(c, t->src[1]->type, VK_SH_EMBED_F32, VK_SH_EMBED_F16, VK_SH_EMBED_U16, &spec[9]);
}

void vk_embed_prepare(vk_ctx *c, const drt_tensor *t) {
    uint32_t spec[10];
    VkPipeline pipe;
    vk_shader sh = embed_select(c, t, spec);
    (void)vk_pipeline(c, sh, spec, 10, &pipe);
}

/* y (T,D) = E (V,D) rows ids (T) */
drt_status vk_embed(vk_ctx *c, const drt_tensor *t, const drt_exec *ex) {
    (void)ex;
    const drt_tensor *ids = t->src[0], *E = t->src[1];
    uint32_t T = (uint32_t)ids->ne[0], V = (uint32_t)E->ne[0], D = (uint32_t)E->ne[1];
    uint32_t spec[10];
    vk_shader sh = embed_select(c, t, spec);
    embed_pc pc = {vk_eoff(ids), vk_eoff(E), vk_eoff(t), T, V, D};
    vk_binds b = {.src = {ids, E}, .dst = t, .status = true};
    return vk_dispatch(c, sh, spec, 10, &b, &pc, sizeof pc, vk_groups(c, (uint64_t)T * D, spec[0]), 1, 1);
}

/* drt_backend_ops.kernel_variant: MATMUL and attention nodes (NULL: not told) */
const char *vk_kernel_variant(drt_backend *be, const drt_tensor *t) {
    if (t->op == DRT_OP_DIFF_ATTN || t->op == DRT_OP_ATTN) return vk_attention_variant(be->ctx, t);
    return t->op == DRT_OP_MATMUL ? vk_matmul_variant(be->ctx, t) : NULL;
}
