/* Vulkan: ADD, SIGMOID, SWIGLU (shaders/elementwise.comp, the op a
 * specialization constant), ROPE (shaders/rope.comp), KV_WRITE
 * (shaders/kv_write.comp) and PERMUTE (shaders/permute.comp).
 * CPU reference: backends/ref/elementwise.c; node dims -> kernel arguments
 * as in backends/ref/backend.c. */
#include "drt_error.h"
#include "vk_internal.h"

typedef struct {
    uint32_t o_a, o_b, o_y, n;
} elementwise_pc;

typedef struct {
    uint32_t o_x, o_f, o_y, T, Hn, half_d, p0;
} rope_pc;

typedef struct {
    uint32_t o_src, o_dst, n;
} kv_write_pc;

typedef struct {
    uint32_t o_x, o_y, n1, n2, n3, g0, g1, g2, g3, n;
} permute_pc;

/* grid-stride ops: enough workgroups of wg to cover n once, at most 65535 */
static uint32_t groups_for(uint64_t n, uint32_t wg) {
    uint64_t g = (n + wg - 1) / wg;
    return g < 65535 ? (uint32_t)g : 65535;
}

drt_status vk_elementwise(vk_ctx *c, const drt_tensor *t, const drt_exec *ex) {
    const drt_tensor *a = t->src[0], *b = t->src[1];
    const uint32_t wg = vk_wg(c, 256, 256);
    uint32_t spec[3] = {wg, c->use_sg, 0};
    switch (t->op) {
    case DRT_OP_ADD:
    case DRT_OP_SIGMOID:
    case DRT_OP_SWIGLU: {
        spec[2] = t->op == DRT_OP_ADD ? 0 : t->op == DRT_OP_SIGMOID ? 1 : 2;
        uint64_t n = (uint64_t)drt_nelem(t);
        elementwise_pc pc = {vk_eoff(a), b ? vk_eoff(b) : 0, vk_eoff(t), (uint32_t)n};
        vk_binds bd = {.src = {a, b}, .dst = t};
        return vk_dispatch(c, VK_SH_ELEMENTWISE, spec, 3, &bd, &pc, sizeof pc, groups_for(n, wg), 1,
                           1);
    }
    case DRT_OP_ROPE: {
        /* x (T,Hn,d), inv_freq (d/2); positions p0 .. p0+T-1 */
        uint32_t T = (uint32_t)a->ne[0], Hn = (uint32_t)a->ne[1], half = (uint32_t)a->ne[2] / 2;
        if ((uint64_t)ex->p0 + T > 65536)
            return drt_set_error(
                DRT_ERR_UNSUPPORTED,
                "vulkan: ROPE positions up to %d (the shader's exact angle needs < 65536)",
                ex->p0 + (int)T - 1);
        rope_pc pc = {vk_eoff(a), vk_eoff(b), vk_eoff(t), T, Hn, half, (uint32_t)ex->p0};
        vk_binds bd = {.src = {a, b}, .dst = t};
        return vk_dispatch(c, VK_SH_ROPE, spec, 2, &bd, &pc, sizeof pc,
                           groups_for((uint64_t)T * Hn * half, wg), 1, 1);
    }
    case DRT_OP_KV_WRITE: {
        /* src (T, row...) -> rows p0.. of the cache; t is a view of the cache */
        int64_t T = a->ne[0], row = T ? drt_nelem(a) / T : 0;
        uint64_t n = (uint64_t)(T * row);
        kv_write_pc pc = {vk_eoff(a), vk_eoff(t) + (uint32_t)(ex->p0 * row), (uint32_t)n};
        vk_binds bd = {.src = {a}, .dst = t};
        if (n == 0) return DRT_OK;
        return vk_dispatch(c, VK_SH_KV_WRITE, spec, 2, &bd, &pc, sizeof pc, groups_for(n, wg), 1,
                           1);
    }
    case DRT_OP_PERMUTE: {
        int64_t ne[4];
        int perm[4];
        drt_permute_4d(t, ne, perm); /* padded at the front to 4 dims */
        const int64_t xs[4] = {ne[1] * ne[2] * ne[3], ne[2] * ne[3], ne[3], 1};
        uint64_t n = (uint64_t)drt_nelem(t);
        permute_pc pc = {vk_eoff(a),
                         vk_eoff(t),
                         (uint32_t)ne[perm[1]],
                         (uint32_t)ne[perm[2]],
                         (uint32_t)ne[perm[3]],
                         (uint32_t)xs[perm[0]],
                         (uint32_t)xs[perm[1]],
                         (uint32_t)xs[perm[2]],
                         (uint32_t)xs[perm[3]],
                         (uint32_t)n};
        if (n == 0) return DRT_OK;
        vk_binds bd = {.src = {a}, .dst = t};
        return vk_dispatch(c, VK_SH_PERMUTE, spec, 2, &bd, &pc, sizeof pc, groups_for(n, wg), 1, 1);
    }
    default:
        return drt_set_error(DRT_ERR_UNSUPPORTED, "vulkan: no kernel for %s", drt_op_name(t->op));
    }
}
