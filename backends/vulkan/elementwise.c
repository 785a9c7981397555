/* Vulkan: ADD, SIGMOID, SWIGLU (shaders/elementwise.comp, the op a
 * specialization constant), ROPE (shaders/rope.comp), KV_WRITE
 * (vkCmdCopyBuffer regions, or shaders/kv_write.comp; an f16 or q8_0 cache
 * always the shader, which rounds as runtime/quant.c) and PERMUTE (vkCmdCopyBuffer
 * regions when the permutation keeps the inner axes, else
 * shaders/permute.comp).
 * CPU reference: backends/ref/elementwise.c; node dims -> kernel arguments
 * as in backends/ref/backend.c.
 *
 * Checked against the reference (exit status 0: every case within bound):
 *   diffrt conform --backend vulkan --op ADD,SIGMOID,SWIGLU,ROPE,KV_WRITE,PERMUTE
 *   and with --set vulkan.fp16=0, vulkan.subgroup=0, vulkan.tune=gpu (cpu), vulkan.copy=0
 *   for the variants those pick (lavapipe runs it here; ctest conform)
 */
#include <stdlib.h>

#include "drt_error.h"
#include "vk_internal.h"

/* PERMUTE as copies. A driver walks the regions one by one: lavapipe
 * spends about 0.14 us on each (Mesa 22.3, 2-core EPYC), so the copies
 * beat the shader (which moves 1-3 GB/s there) from runs of 64 bytes
 * (PERMUTE (512,128,2,16) perm (2,1,0,3): 15 ms vs 24 ms; 512-byte runs:
 * 2.6 ms vs 6.2 ms; one region of the same bytes: 0.34 ms). A GPU's
 * shader is fast and its driver may run a region per internal dispatch,
 * so there only a few regions are copies. */
#define COPY_MIN_RUN_BYTES 64
#define COPY_MAX_REGIONS (1 << 20)
#define COPY_MAX_REGIONS_GPU 16
/* KV_WRITE's regions on a CPU device (one per run of rows: per sequence):
 * past this many the shader runs, which reads the rows on the device */
#define COPY_MAX_KV_REGIONS 256

typedef struct {
    uint32_t o_a, o_b, o_y, n;
} elementwise_pc;

typedef struct {
    uint32_t o_x, o_f, o_y, T, Hn, half_d, o_r;
} rope_pc;

typedef struct {
    uint32_t o_src, o_dst, n, row, o_r;
} kv_write_pc;

typedef struct {
    uint32_t o_x, o_y, n0, n1, n2, n3, g0, g1, g2, g3;
} permute_pc;

/* PERMUTE of x (ne[0..3], row-major, contiguous) into y, as copies when
 * the permutation keeps the trailing input axes k..3 in place: each of y's
 * runs of ne[k]*..*ne[3] elements is contiguous in x too, so it is one
 * region (runs that follow each other in x as well are merged).
 * *done = false: not a copy worth making (the caller runs the shader). */
static drt_status permute_copy(vk_ctx *c, const drt_tensor *t, const int64_t ne[4], const int perm[4], bool *done) {
    const drt_tensor *x = t->src[0];
    const size_t es = sizeof(float);
    *done = false;
    int k = 4;
    uint64_t run = 1;
    while (k > 0 && perm[k - 1] == k - 1) run *= (uint64_t)ne[--k];
    const uint64_t n = (uint64_t)drt_nelem(t);
    if (!c->use_copy || n == 0 || run * es < COPY_MIN_RUN_BYTES ||
        n / run > (c->tune_cpu ? COPY_MAX_REGIONS : COPY_MAX_REGIONS_GPU))
        return DRT_OK;
    const int64_t xs[4] = {ne[1] * ne[2] * ne[3], ne[2] * ne[3], ne[3], 1};
    /* y's outer axes 0..k-1: sizes and x's strides, padded with 1s */
    uint64_t on[3] = {1, 1, 1}, og[3] = {0, 0, 0};
    for (int a = 0; a < k; a++) {
        on[3 - k + a] = (uint64_t)ne[perm[a]];
        og[3 - k + a] = (uint64_t)xs[perm[a]];
    }
    VkBufferCopy *reg = malloc(sizeof *reg * (size_t)(n / run));
    if (!reg) return drt_set_error(DRT_ERR_OOM, "out of memory");
    uint32_t nr = 0;
    uint64_t yi = 0;
    for (uint64_t i0 = 0; i0 < on[0]; i0++)
        for (uint64_t i1 = 0; i1 < on[1]; i1++)
            for (uint64_t i2 = 0; i2 < on[2]; i2++, yi += run) {
                VkDeviceSize so = x->offs + (i0 * og[0] + i1 * og[1] + i2 * og[2]) * es;
                if (nr > 0 && reg[nr - 1].srcOffset + reg[nr - 1].size == so) {
                    reg[nr - 1].size += run * es; /* y is contiguous: only x decides */
                    continue;
                }
                reg[nr++] = (VkBufferCopy){so, t->offs + yi * es, run * es};
            }
    drt_status s = vk_copy(c, x, t, reg, nr);
    free(reg);
    *done = s == DRT_OK;
    return s;
}

static uint32_t pow2_at_least(uint64_t n, uint32_t cap) {
    uint32_t p = 1;
    while (p < n && p < cap) p *= 2;
    return p;
}

/* ADD, SIGMOID, SWIGLU: elementwise.comp, the op a specialization constant */
static drt_status rec_binary(vk_ctx *c, const drt_tensor *t) {
    const drt_tensor *a = t->src[0], *b = t->src[1];
    const uint32_t wg = vk_wg(c, 256, vk_cpu_lanes(c));
    uint32_t spec4[4] = {wg, c->use_sg, t->op == DRT_OP_ADD ? 0 : t->op == DRT_OP_SIGMOID ? 1 : 2, 0};
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
    return vk_dispatch(c, VK_SH_ELEMENTWISE, spec4, 4, &bd, &pc, sizeof pc, vk_groups(c, pc.n, wg), 1, 1);
}

static drt_status rec_rope(vk_ctx *c, const drt_tensor *t, const drt_exec *ex) {
    const drt_tensor *a = t->src[0], *b = t->src[1], *rows = t->src[DRT_SRC_ROWS];
    const uint32_t wg = vk_wg(c, 256, vk_cpu_lanes(c));
    const uint32_t spec[2] = {wg, c->use_sg};
    /* x (T,Hn,d), inv_freq (d/2); row t at its position (rows) */
    uint32_t T = (uint32_t)a->ne[0], Hn = (uint32_t)a->ne[1], half = (uint32_t)a->ne[2] / 2;
    if (ex->max_keys > 65536)
        return drt_set_error(DRT_ERR_UNSUPPORTED,
                             "vulkan: ROPE positions up to %d (the shader's exact angle needs < 65536)",
                             ex->max_keys - 1);
    rope_pc pc = {vk_eoff(a), vk_eoff(b), vk_eoff(t), T, Hn, half, vk_eoff(rows)};
    vk_binds bd = {.src = {a, b}, .dst = t, .rows = rows};
    return vk_dispatch(c, VK_SH_ROPE, spec, 2, &bd, &pc, sizeof pc, vk_groups(c, (uint64_t)T * Hn * half, wg), 1, 1);
}

/* KV_WRITE as copies: one region per run of rows that land on consecutive
 * cache rows (a prefill: one region; decode rows of n sequences: n), built
 * from the host copy of the rows; the pass is recorded anew for every run
 * (vk_compute), so the regions never outlive the rows they came from. The
 * regions of one vkCmdCopyBuffer must not overlap: an earlier region inside
 * a later one (the batch session's padding rows, which all write one
 * scratch row) is dropped, as the later row's write is the one that stays
 * (backends/ref: rows are written in order). *done = false: more regions
 * than max, or regions that overlap otherwise (the shader runs). */
static drt_status kv_write_copy(vk_ctx *c, const drt_tensor *t, const drt_exec *ex, uint64_t row, uint32_t max,
                                bool *done) {
    const drt_tensor *a = t->src[0];
    const uint64_t rb = row * sizeof(float), cap = (uint64_t)t->ne[0];
    *done = false;
    VkBufferCopy reg[COPY_MAX_KV_REGIONS];
    uint32_t n = 0;
    for (int i = 0; i < ex->n_rows; i++) {
        const uint64_t at = (uint64_t)ex->rows[2 * i] + (uint64_t)ex->rows[2 * i + 1];
        if (at >= cap)
            return drt_set_error(DRT_ERR_INVALID_ARG,
                                 "KV_WRITE: row %d (cache base %d, position %d) past the cache's %lld rows", i,
                                 ex->rows[2 * i], ex->rows[2 * i + 1], (long long)cap);
        const VkDeviceSize so = a->offs + (uint64_t)i * rb, dof = t->offs + at * rb;
        if (n > 0 && reg[n - 1].dstOffset + reg[n - 1].size == dof) { /* src follows too */
            reg[n - 1].size += rb;
            continue;
        }
        if (n == max) return DRT_OK;
        reg[n++] = (VkBufferCopy){so, dof, rb};
    }
    uint32_t keep = 0;
    for (uint32_t i = 0; i < n; i++) {
        bool drop = false;
        for (uint32_t j = i + 1; j < n && !drop; j++) {
            const VkDeviceSize b0 = reg[i].dstOffset, e0 = b0 + reg[i].size;
            const VkDeviceSize b1 = reg[j].dstOffset, e1 = b1 + reg[j].size;
            if (b0 >= e1 || b1 >= e0) continue;
            if (b0 < b1 || e0 > e1) return DRT_OK; /* a partial overlap */
            drop = true;
        }
        if (!drop) reg[keep++] = reg[i];
    }
    drt_status s = vk_copy(c, a, t, reg, keep);
    *done = s == DRT_OK;
    return s;
}

/* kv_write.comp's KV specialization constant for a cache type (kv.glsl) */
static uint32_t kv_code(drt_dtype t) {
    return t == DRT_F16 ? 1 : t == DRT_Q8_0 ? 2 : 0;
}

void vk_kv_write_prepare(vk_ctx *c, const drt_tensor *t) {
    VkPipeline p;
    const uint32_t kv = kv_code(t->src[1]->type);
    if (kv)
        (void)vk_pipeline(c, VK_SH_KV_WRITE, (const uint32_t[]){vk_wg(c, 256, vk_cpu_lanes(c)), c->use_sg, 0, kv}, 4,
                          &p);
}

static drt_status rec_kv_write(vk_ctx *c, const drt_tensor *t, const drt_exec *ex) {
    const drt_tensor *a = t->src[0], *rows = t->src[DRT_SRC_ROWS];
    const uint32_t wg = vk_wg(c, 256, vk_cpu_lanes(c));
    const uint32_t kv = kv_code(t->src[1]->type);
    uint32_t spec[4] = {wg, c->use_sg, 0, kv};
    /* src (T, row...) -> row t to cache row base + pos; t is a view of the cache */
    int64_t T = a->ne[0], row = T ? drt_nelem(a) / T : 0;
    uint64_t n = (uint64_t)(T * row);
    if (n == 0) return DRT_OK;
    if (kv) {
        /* f16: an item per 4 of a row's elements; q8_0: per block of 32,
         * at even bytes (34-byte blocks from an even offset) */
        if (kv == 2 && vk_eoff(t) % 2)
            return drt_set_error(DRT_ERR_UNSUPPORTED, "vulkan: KV_WRITE into a q8_0 cache at an odd byte offset");
        const uint64_t items = (uint64_t)T * (uint64_t)(kv == 1 ? (row + 3) / 4 : row / 32);
        kv_write_pc pc = {vk_eoff(a), vk_eoff(t), (uint32_t)items, (uint32_t)row, vk_eoff(rows)};
        vk_binds bd = {.src = {a}, .dst = t, .rows = rows};
        return vk_dispatch(c, VK_SH_KV_WRITE, spec, 4, &bd, &pc, sizeof pc, vk_groups(c, items, wg), 1, 1);
    }
    if (c->use_copy) {
        bool done;
        drt_status s = kv_write_copy(c, t, ex, (uint64_t)row, c->tune_cpu ? COPY_MAX_KV_REGIONS : COPY_MAX_REGIONS_GPU,
                                     &done);
        if (s != DRT_OK || done) return s;
    }
    kv_write_pc pc = {vk_eoff(a), vk_eoff(t), (uint32_t)n, (uint32_t)row, vk_eoff(rows)};
    vk_binds bd = {.src = {a}, .dst = t, .rows = rows};
    if (row % 4 == 0 && pc.o_src % 4 == 0 && pc.o_dst % 4 == 0) {
        spec[2] = 1;
        pc.o_src /= 4;
        pc.o_dst /= 4;
        pc.n /= 4;
        pc.row /= 4;
    }
    return vk_dispatch(c, VK_SH_KV_WRITE, spec, 4, &bd, &pc, sizeof pc, vk_groups(c, pc.n, wg), 1, 1);
}

static drt_status rec_permute(vk_ctx *c, const drt_tensor *t) {
    const drt_tensor *a = t->src[0];
    const uint32_t wg = vk_wg(c, 256, vk_cpu_lanes(c));
    int64_t ne[4];
    int perm[4];
    drt_permute_4d(t, ne, perm); /* padded at the front to 4 dims */
    const int64_t xs[4] = {ne[1] * ne[2] * ne[3], ne[2] * ne[3], ne[3], 1};
    if (drt_nelem(t) == 0) return DRT_OK;
    bool done;
    drt_status s = permute_copy(c, t, ne, perm, &done);
    if (s != DRT_OK || done) return s;
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
    bool v4 = pc.g3 == 1 && pc.n3 % 4 == 0 && pc.g0 % 4 == 0 && pc.g1 % 4 == 0 && pc.g2 % 4 == 0 && pc.o_x % 4 == 0 &&
              pc.o_y % 4 == 0;
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
    while (wy > 1 && wy > lim->maxComputeWorkGroupSize[1]) wy /= 2;
    uint32_t pspec[4] = {wx, c->use_sg, wy, v4};
    uint64_t gx = (pc.n3 + wx - 1) / wx, gy = (pc.n2 + wy - 1) / wy, gz = pc.n1;
    if (c->tune_cpu) {
        /* few workgroups (a coroutine start each on llvmpipe), 4 per
         * core; each copies whole inner runs and walks the rest */
        uint64_t budget = 4 * (uint64_t)c->n_cpus;
        gx = 1;
        gy = gy < budget ? gy : budget;
        gz = gz < budget / gy ? gz : budget / gy > 0 ? budget / gy : 1;
    }
    vk_binds bd = {.src = {a}, .dst = t};
    return vk_dispatch(c, VK_SH_PERMUTE, pspec, 4, &bd, &pc, sizeof pc, gx < 65535 ? (uint32_t)gx : 65535,
                       gy < 65535 ? (uint32_t)gy : 65535, gz < 65535 ? (uint32_t)gz : 65535);
}

drt_status vk_elementwise(vk_ctx *c, const drt_tensor *t, const drt_exec *ex) {
    switch (t->op) {
    case DRT_OP_ADD:
    case DRT_OP_SIGMOID:
    case DRT_OP_SWIGLU: return rec_binary(c, t);
    case DRT_OP_ROPE: return rec_rope(c, t, ex);
    case DRT_OP_KV_WRITE: return rec_kv_write(c, t, ex);
    case DRT_OP_PERMUTE: return rec_permute(c, t);
    default: return drt_set_error(DRT_ERR_UNSUPPORTED, "vulkan: no kernel for %s", drt_op_name(t->op));
    }
}
