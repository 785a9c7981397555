/* Vulkan: RMSNORM and GROUPNORM, one shader (shaders/norm.comp): a GROUPNORM
 * row is one head's dv outputs, with the extra scale (1 - lambda_init).
 * CPU reference: backends/ref/norm.c.
 *
 * Checked against the reference (exit status 0: every case within bound):
 *   diffrt conform --backend vulkan --op RMSNORM,GROUPNORM
 *   and with --set vulkan.fp16=0, vulkan.subgroup=0, vulkan.tune=gpu (cpu)
 *   for the variants those pick (lavapipe runs it here; ctest conform)
 */
#include "drt_error.h"
#include "vk_internal.h"

typedef struct {
    uint32_t o_x, o_w, o_y;
    uint32_t rows, C, has_w;
    float eps, scale;
} norm_pc;

/* RMSNORM: x (rows,C) with C the last dim; GROUPNORM: x (T,H,dv), rows T*H */
drt_status vk_norm(vk_ctx *c, const drt_tensor *t, const drt_exec *ex) {
    (void)ex;
    const drt_tensor *x = t->src[0], *w = t->src[1];
    uint32_t C = (uint32_t)x->ne[x->nd - 1];
    uint32_t rows = C ? (uint32_t)(drt_nelem(x) / C) : 0;
    float scale = t->op == DRT_OP_GROUPNORM ? t->fp[1] : 1.0f;
    uint32_t spec[2] = {vk_wg(c, 256, vk_cpu_lanes(c)), c->use_sg};
    norm_pc pc = {vk_eoff(x), w ? vk_eoff(w) : 0, vk_eoff(t), rows, C, w != NULL, t->fp[0], scale};
    vk_binds b = {.src = {x, w}, .dst = t};
    uint32_t gx, gy;
    vk_grid_2d(rows, &gx, &gy);
    return vk_dispatch(c, vk_sg_variant(c, VK_SH_NORM), spec, 2, &b, &pc, sizeof pc, gx, gy, 1);
}
