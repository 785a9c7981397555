/* Vulkan: MATMUL (shaders/matmul.comp tiled, shaders/matvec.comp for few
 * rows) and EMBED (shaders/embed.comp), the two ops that read weights of
 * dtype f32/f16/bf16 (shaders/weights.glsl). CPU reference:
 * backends/ref/matmul.c and elementwise.c; node dims -> kernel arguments as
 * in backends/ref/backend.c (drt_ref_run_node). */
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

/* Rows up to this go through matvec (one workgroup per 4 outputs of a row:
 * W is re-read per row, from cache), more through the tiled GEMM. */
#define MATVEC_MAX_T 4

/* Picks the module for weight dtype wt out of its three compiled forms
 * (f32; f16 through 16-bit storage; f16/bf16 as packed words) and sets the
 * W_BF16 specialization constant (id 9). */
static vk_shader weight_variant(const vk_ctx *c, drt_dtype wt, vk_shader f32, vk_shader f16,
                                vk_shader u16, uint32_t *bf16) {
    *bf16 = wt == DRT_BF16;
    if (wt == DRT_F32) return f32;
    if (wt == DRT_F16 && c->use_f16) return f16;
    return u16;
}

/* y (B,T,N) = scale * x (B,T,K) w^T; w (Bw,N,K) or (Bw,K,N) when t->ip[0] */
drt_status vk_matmul(vk_ctx *c, const drt_tensor *t, const drt_exec *ex) {
    (void)ex;
    if (drt_dtype_block(t->src[1]->type) > 1) return vk_matmul_q(c, t);
    const drt_tensor *a = t->src[0], *w = t->src[1];
    uint32_t B = a->nd == 3 ? (uint32_t)a->ne[0] : 1, Bw = w->nd == 3 ? (uint32_t)w->ne[0] : 1;
    uint32_t T = (uint32_t)a->ne[a->nd - 2], K = (uint32_t)a->ne[a->nd - 1];
    uint32_t N = (uint32_t)t->ne[t->nd - 1];
    uint32_t trans = t->ip[0] != 0;
    vk_binds b = {.src = {a, w}, .dst = t};
    uint32_t spec[10] = {0};
    spec[1] = c->use_sg;
    if (!trans && T <= MATVEC_MAX_T) {
        vk_shader sh = weight_variant(c, w->type, VK_SH_MATVEC_F32, VK_SH_MATVEC_F16,
                                      VK_SH_MATVEC_U16, &spec[9]);
        /* the *_NOSG module follows each one */
        sh = vk_sg_variant(c, sh);
        spec[0] = vk_wg(c, 128, 64);
        matvec_pc pc = {vk_eoff(a), vk_eoff(w), vk_eoff(t), B, Bw, T, N, K, t->fp[0]};
        return vk_dispatch(c, sh, spec, 10, &b, &pc, sizeof pc, (N + 3) / 4, T, B);
    }
    vk_shader sh =
        weight_variant(c, w->type, VK_SH_MATMUL_F32, VK_SH_MATMUL_F16, VK_SH_MATMUL_U16, &spec[9]);
    /* BM, BN, BK, TM, TN: 64x64 tiles of 4x4 per thread (256 threads) on
     * GPUs, 32x32 (64 threads) on CPU devices, where fewer, longer
     * invocations win, and where 256 invocations are not allowed */
    uint32_t bm = vk_wg(c, 256, 64) >= 256 ? 64 : 32, bn = bm, bk = 16, tm = 4, tn = 4;
    spec[0] = (bm / tm) * (bn / tn);
    spec[2] = bm;
    spec[3] = bn;
    spec[4] = bk;
    spec[5] = tm;
    spec[6] = tn;
    matmul_pc pc = {vk_eoff(a), vk_eoff(w),    vk_eoff(t),    B,     Bw,      T, N,
                    K,          trans ? 1 : K, trans ? N : 1, trans, t->fp[0]};
    return vk_dispatch(c, sh, spec, 10, &b, &pc, sizeof pc, (N + bn - 1) / bn, (T + bm - 1) / bm,
                       B);
}

/* y (T,D) = E (V,D) rows ids (T) */
drt_status vk_embed(vk_ctx *c, const drt_tensor *t, const drt_exec *ex) {
    (void)ex;
    const drt_tensor *ids = t->src[0], *E = t->src[1];
    uint32_t T = (uint32_t)ids->ne[0], V = (uint32_t)E->ne[0], D = (uint32_t)E->ne[1];
    uint32_t spec[10] = {0};
    spec[0] = vk_wg(c, 256, 64);
    spec[1] = c->use_sg;
    vk_shader sh =
        weight_variant(c, E->type, VK_SH_EMBED_F32, VK_SH_EMBED_F16, VK_SH_EMBED_U16, &spec[9]);
    embed_pc pc = {vk_eoff(ids), vk_eoff(E), vk_eoff(t), T, V, D};
    vk_binds b = {.src = {ids, E}, .dst = t, .status = true};
    uint64_t groups = ((uint64_t)T * D + spec[0] - 1) / spec[0];
    return vk_dispatch(c, sh, spec, 10, &b, &pc, sizeof pc,
                       groups < 65535 ? (uint32_t)groups : 65535, 1, 1);
}
