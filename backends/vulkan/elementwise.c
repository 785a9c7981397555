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
    uint32_t o_x, o_y, n0, n1, n2, n3, g0, g1, g2, g3;
} permute_pc;

static uint32_t pow2_at_least(uint64_t n, uint32_t cap) {
    uint32_t p = 1;
    while (p < n && p < cap)
        p *= 2;
    return p;
}


drt_status vk_elementwise(vk_ctx *c, const drt_tensor *t, const drt_exec *ex) {
    const drt_tensor *a = t->src[0], *b = t->src[1];
    const uint32_t wg = vk_wg(c, 256, vk_cpu_lanes(c));
    uint32_t spec[3] = {wg, c->use_sg, 0};
    switch (t->op) {
    case DRT_OP_ADD:
    case DRT_OP_SIGMOID:
    case DRT_OP_SWIGLU: {
        uint32_t spec4[4] = {wg, c->use_sg, t->op == DRT_OP_ADD ? 0 : t->op == DRT_OP_SIGMOID ? 1 : 2,
                             0};
        uint64_t n = (uint64_t)drt_nelem(t);
        elementwise_pc pc = {vk_eoff(a), b ? vk_eoff(b) : 0, vk_eoff(t), (uint32_t)n};
        /* 16 bytes per step when n and every offset are multiples of 4 */
        if (n % 4 == 0 && pc.o_a % 4 == 0 && pc.o_b % 4 == 0 && pc.o_y % 4 == 0) {
            spec4[3] = 1;
            pc.o_a /= 4;
            pc.o_b /= 4;
            pc.o_y /= 4;
            pc.n /= 4;
        }
        vk_binds bd = {.src = {a, b}, .dst = t};
        return vk_dispatch(c, VK_SH_ELEMENTWISE, spec4, 4, &bd, &pc, sizeof pc,
                           vk_groups(c, pc.n, wg), 1, 1);
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
                           vk_groups(c, (uint64_t)T * Hn * half, wg), 1, 1);
    }
    case DRT_OP_KV_WRITE: {
        /* src (T, row...) -> rows p0.. of the cache; t is a view of the cache */
        int64_t T = a->ne[0], row = T ? drt_nelem(a) / T : 0;
        uint64_t n = (uint64_t)(T * row);
        kv_write_pc pc = {vk_eoff(a), vk_eoff(t) + (uint32_t)(ex->p0 * row), (uint32_t)n};
        vk_binds bd = {.src = {a}, .dst = t};
        if (n == 0) return DRT_OK;
        spec[2] = 0;
        if (n % 4 == 0 && pc.o_src % 4 == 0 && pc.o_dst % 4 == 0) {
            spec[2] = 1;
            pc.o_src /= 4;
            pc.o_dst /= 4;
            pc.n /= 4;
        }
        return vk_dispatch(c, VK_SH_KV_WRITE, spec, 3, &bd, &pc, sizeof pc, vk_groups(c, pc.n, wg), 1,
                           1);
    }
    case DRT_OP_PERMUTE: {
        int64_t ne[4];
        int perm[4];
        drt_permute_4d(t, ne, perm); /* padded at the front to 4 dims */
        const int64_t xs[4] = {ne[1] * ne[2] * ne[3], ne[2] * ne[3], ne[3], 1};
        if (drt_nelem(t) == 0) return DRT_OK;
        permute_pc pc = {vk_eoff(a),
                         vk_eoff(t),
                         (uint32_t)ne[perm[0]],
                         (uint32_t)ne[perm[1]],
                         (uint32_t)ne[perm[2]],
                         (uint32_t)ne[perm[3]],
                         (uint32_t)xs[perm[0]],
                         (uint32_t)xs[perm[1]],
                         (uint32_t)xs[perm[2]],
                         (uint32_t)xs[perm[3]]};
        /* the inner axis contiguous on both sides, everything in 4s: vec4 */
        bool v4 = pc.g3 == 1 && pc.n3 % 4 == 0 && pc.g0 % 4 == 0 && pc.g1 % 4 == 0 &&
                  pc.g2 % 4 == 0 && pc.o_x % 4 == 0 && pc.o_y % 4 == 0;
        if (v4) {
            pc.o_x /= 4;
            pc.o_y /= 4;
            pc.n3 /= 4;
            pc.g0 /= 4;
            pc.g1 /= 4;
            pc.g2 /= 4;
        }
        /* a WG x WGY workgroup: x fitted to the inner axis, y the rest */
        const VkPhysicalDeviceLimits *lim = &c->props.limits;
        uint32_t wx = pow2_at_least(pc.n3, wg);
        uint32_t wy = pow2_at_least(pc.n2, wg / wx);
        while (wy > 1 && wy > lim->maxComputeWorkGroupSize[1])
            wy /= 2;
        uint32_t pspec[4] = {wx, c->use_sg, wy, v4};
        uint64_t gx = (pc.n3 + wx - 1) / wx, gy = (pc.n2 + wy - 1) / wy;
        vk_binds bd = {.src = {a}, .dst = t};
        return vk_dispatch(c, VK_SH_PERMUTE, pspec, 4, &bd, &pc, sizeof pc,
                           gx < 65535 ? (uint32_t)gx : 65535, gy < 65535 ? (uint32_t)gy : 65535,
                           pc.n1 < 65535 ? pc.n1 : 65535);
    }
    default:
        return drt_set_error(DRT_ERR_UNSUPPORTED, "vulkan: no kernel for %s", drt_op_name(t->op));
    }
}
