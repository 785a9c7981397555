/* Vulkan: MATMUL with q8_0 / q4_0 weights (shaders/matmul_q.comp), one
 * invocation per output. CPU reference: backends/ref/matmul.c. */
#include "drt_error.h"
#include "vk_internal.h"

/* push constants: the mirror of matmul_q.comp's PC block (o_w in bytes) */
typedef struct {
    uint32_t o_x, o_w, o_y, B, Bw, T, N, K;
    float scale;
} matmul_q_pc;

drt_status vk_matmul_q(vk_ctx *c, const drt_tensor *t) {
    const drt_tensor *a = t->src[0], *w = t->src[1];
    uint32_t B = a->nd == 3 ? (uint32_t)a->ne[0] : 1, Bw = w->nd == 3 ? (uint32_t)w->ne[0] : 1;
    uint32_t T = (uint32_t)a->ne[a->nd - 2], K = (uint32_t)a->ne[a->nd - 1];
    uint32_t N = (uint32_t)t->ne[t->nd - 1];
    uint32_t spec[2] = {vk_wg(c, 64, 64), c->use_sg};
    vk_binds b = {.src = {a, w}, .dst = t};
    matmul_q_pc pc = {vk_eoff(a), vk_eoff(w), vk_eoff(t), B, Bw, T, N, K, t->fp[0]};
    return vk_dispatch(c, w->type == DRT_Q8_0 ? VK_SH_MATMUL_Q8 : VK_SH_MATMUL_Q4, spec, 2, &b, &pc, sizeof pc,
                       (N + spec[0] - 1) / spec[0], T, B);
}
