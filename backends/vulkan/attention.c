/* Vulkan: DIFF_ATTN and ATTN, fused, no S x S matrix: on CPU devices
 * shaders/attention_lanes.comp (a lane per query row, keys shared by
 * subgroup shuffles) where a kv group has a subgroup of rows of one
 * sequence, else shaders/attention_rows.comp (one invocation per query
 * row); elsewhere, or for heads too large for registers,
 * shaders/attention.comp (tiled); split keys merged by
 * shaders/attention_combine.comp. And DUAL_SOFTMAX
 * (shaders/dual_softmax.comp, the decomposed path). CPU reference:
 * backends/ref/attention.c; node dims -> kernel arguments as in
 * backends/ref/backend.c.
 *
 * Every kernel reads each query row's cache base and position from the
 * rows (binding 5). The lanes and tiled kernels share keys between the
 * query rows of a workgroup: they walk its rows run by run (rows of one
 * sequence at consecutive positions), so a workgroup of one sequence's
 * prefill walks its keys once and one that holds rows of several sequences
 * walks each one's keys in turn. The host sizes the workgroups from the
 * longest run (run_rows): decode rows of many sequences, runs of one row,
 * take the tiles (or the rows kernel) of one query row.
 *
 * KV caches of f32, f16 or q8_0 (runtime/drt_kv.h): each kernel reads k
 * and v in their stored type (shaders/kv.glsl, the KV specialization
 * constant) and widens every value exactly as it loads it; no pass makes
 * an f32 copy of the cache. f16 needs even dk, dv and k, v at even element
 * offsets (two halves a word); q8_0 (rows of whole blocks, runtime/ops.c)
 * even byte offsets.
 *
 * Checked against the reference (exit status 0: every case within bound):
 *   diffrt conform --backend vulkan --op DIFF_ATTN,ATTN,DUAL_SOFTMAX
 *   and with --set vulkan.fp16=0, vulkan.subgroup=0, vulkan.tune=gpu (cpu); --kv-type f16 (q8_0) for each cache type
 *   for the variants those pick (lavapipe runs it here; ctest conform)
 */
#include <math.h>

#include "drt_error.h"
#include "vk_internal.h"

typedef struct {
    uint32_t o_q, o_k, o_v, o_l, o_o;
    uint32_t T, o_r, H, G, km;
    uint32_t has_l;
    float lambda, scale;
    uint32_t chunk;
} attn_pc;

typedef struct {
    uint32_t o_l, o_o;
    uint32_t T, H, DV, nsplit;
    uint32_t has_l;
    float lambda;
    uint32_t chunk, o_r;
} combine_pc;

typedef struct {
    uint32_t o_s1, o_s2, o_l, o_a;
    uint32_t H, T, S, p0;
    uint32_t has_l;
    float lambda;
} dual_softmax_pc;

#define ATTN_WG 64u /* every device allows 128 */

typedef struct {
    uint32_t maps, dk, dv, H, G, km, T;
    uint32_t kv; /* the caches' type, kv.glsl's KV: 0 f32, 1 f16, 2 q8_0 */
} attn_dims;

static attn_dims dims_of(const drt_tensor *t) {
    const drt_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2];
    attn_dims d;
    d.maps = t->op == DRT_OP_DIFF_ATTN ? 2 : 1;
    d.T = (uint32_t)q->ne[0];
    d.H = (uint32_t)q->ne[1];
    d.dk = (uint32_t)q->ne[q->nd - 1];
    d.G = (uint32_t)k->ne[1];
    d.km = d.maps == 2 ? (uint32_t)k->ne[2] : 1;
    d.dv = (uint32_t)v->ne[2];
    d.kv = k->type == DRT_F16 ? 1 : k->type == DRT_Q8_0 ? 2 : 0;
    return d;
}

static uint32_t smem_bytes(const attn_dims *d, uint32_t br, uint32_t bc) {
    uint32_t qs = d->maps * d->dk + 1;
    return 4 * (br * qs + bc * qs + bc * d->dv + br * bc * d->maps + 2 * br * d->maps);
}

/* Query rows per workgroup (BR) and keys per tile (BC): BR up to the rows a
 * kv group has (T*H/G, capped at 16) while each thread keeps at most 32
 * outputs per map (DV/(WG/BR)), then the largest BC of 32, 16, 8 that fits
 * in shared memory, else smaller BR and BC. */
static bool pick_tiles(const vk_ctx *c, const attn_dims *d, uint32_t *br, uint32_t *bc) {
    uint32_t limit = c->props.limits.maxComputeSharedMemorySize;
    uint32_t rows = d->T * (d->H / d->G);
    uint32_t b0 = 1;
    while (b0 < rows && b0 < 16) b0 *= 2;
    while (b0 > 1 && d->dv > 32 * (ATTN_WG / b0)) b0 /= 2;
    for (uint32_t r = b0; r >= 1; r /= 2) {
        for (uint32_t k = 32; k >= (r == 1 ? 1u : 8u); k /= 2) {
            if (smem_bytes(d, r, k) <= limit) {
                *br = r;
                *bc = k;
                return true;
            }
        }
    }
    return false;
}

bool vk_attention_supported(const vk_ctx *c, const drt_tensor *t) {
    attn_dims d = dims_of(t), d1 = d;
    uint32_t br, bc;
    if (d.dk > 512 || d.dv > 1024 || !pick_tiles(c, &d, &br, &bc)) return false;
    if (d.kv == 1 && (d.dk | d.dv) % 2) return false; /* f16: two halves a word */
    d1.T = 1; /* runs of one row take the tiles of one query row: the most workgroups */
    if (!pick_tiles(c, &d1, &br, &bc)) return false;
    uint64_t gx = ((uint64_t)d.T * (d.H / d.G) + br - 1) / br;
    return gx <= c->props.limits.maxComputeWorkGroupCount[0] && d.G <= c->props.limits.maxComputeWorkGroupCount[1];
}

/* The most rows of one run in ex's rows: rows of one sequence (one cache
 * base) at consecutive positions, which share their keys. */
static uint32_t run_rows(const drt_exec *ex) {
    uint32_t best = 1, n = 0;
    for (int i = 0; i < ex->n_rows; i++) {
        const int32_t *r = ex->rows + 2 * i;
        n = i > 0 && r[0] == r[-2] && r[1] == r[-1] + 1 ? n + 1 : 1;
        if (n > best) best = n;
    }
    return best;
}

/* The one-invocation-per-row kernel (shaders/attention_rows.comp) on CPU
 * devices where the lanes kernel does not apply: there the tiled kernel's
 * workgroup barriers (coroutine switches on llvmpipe) cost more than its
 * shared tiles save. Its q row and two accumulators live in registers, so
 * DK and DV are bounded; larger heads take the tiled kernel. */
static bool use_rows(const vk_ctx *c, const attn_dims *d) {
    return c->tune_cpu && d->maps * d->dk <= 256 && d->dv <= 256;
}

/* rows kernel workgroup: the rows (T*H) rounded up to a power of two, 8..64 */
static uint32_t rows_wg(const vk_ctx *c, const attn_dims *d) {
    uint32_t w = 8, rows = d->T * d->H;
    while (w < rows && w < 64) w *= 2;
    return vk_wg(c, w, w);
}

/* The lanes kernel (shaders/attention_lanes.comp) on CPU devices: a
 * workgroup is one subgroup, a lane one query row, keys and values shared
 * between lanes by subgroup shuffles. Its unrolled loops bound DK and DV
 * like the rows kernel's registers; vec4 loads need multiples of 4. It
 * wastes lanes when a kv group has fewer rows than lanes (decode), where
 * the rows kernel packs the heads instead. DIFFRT_VK_SUBGROUP=0 (no
 * subgroup operations) turns it off. */
static bool use_lanes(const vk_ctx *c, const attn_dims *d) {
    const uint32_t sg = c->subgroup_size;
    return c->tune_cpu && c->use_sg && sg >= 4 && sg <= 16 && d->maps * d->dk <= 256 && d->dv <= 256 &&
           d->dk % 4 == 0 && d->dv % 4 == 0 && d->T * (d->H / d->G) >= sg && vk_wg(c, sg, sg) == sg && c->has_shuffle;
}

/* the lanes kernel's query rows per lane: 4 when a kv group has that many
 * rows per workgroup of lanes (measured best on lavapipe, 6 and 8 no
 * better), fewer for short prompts so that lanes do not redo rows */
static uint32_t lanes_rpl(const vk_ctx *c, const attn_dims *d) {
    const uint32_t rows = d->T * (d->H / d->G);
    return rows >= 4 * c->subgroup_size ? 4 : rows >= 2 * c->subgroup_size ? 2 : 1;
}

/* the lanes kernel also needs q, k, v at element offsets that are multiples
 * of 4 (q8_0 k, v: at even bytes, read a block at a time) */
static bool lanes_aligned(const drt_tensor *t) {
    if (t->src[1]->type == DRT_Q8_0) return vk_eoff(t->src[0]) % 4 == 0;
    return (vk_eoff(t->src[0]) | vk_eoff(t->src[1]) | vk_eoff(t->src[2])) % 4 == 0;
}

/* Key splits for S keys when the grid has only wgs workgroups: enough to
 * give the device ~target workgroups, at least 64 keys each (two tiles of
 * 32); 1 = no split. */
static uint32_t split_count(const vk_ctx *c, uint64_t wgs, uint32_t S) {
    uint64_t target = c->tune_cpu ? 16 : 256;
    uint64_t n = target / (wgs ? wgs : 1), by_keys = (S + 63) / 64;
    if (n > by_keys) n = by_keys;
    return n < 2 ? 1 : (uint32_t)n;
}

void vk_attention_prepare(vk_ctx *c, const drt_tensor *t) {
    attn_dims d = dims_of(t);
    const uint32_t S_cap = (uint32_t)t->src[1]->ne[0], T = d.T;
    /* this node's T (both split variants: decode splits once the cache is
     * long enough), then a prefill long enough for the largest tiles, then
     * (T > 1) the decode rows of T sequences: the rows kernel, or the tiles
     * of one query row, both split variants */
    const uint32_t Ts[3] = {d.T, 1024, 1};
    VkPipeline p;
    for (int i = 0; i < (T > 1 ? 3 : 2); i++) {
        d.T = Ts[i];
        for (uint32_t split = 0; split < (i != 1 ? 2u : 1u); split++) {
            if (i == 2) { /* what vk_attention takes for runs of one row */
                d.T = T;
                if (use_rows(c, &d)) {
                    uint32_t spec[7] = {rows_wg(c, &d), c->use_sg, d.maps, d.dk, d.dv, split, d.kv};
                    (void)vk_pipeline(c, VK_SH_ATTENTION_ROWS, spec, 7, &p);
                    continue;
                }
                d.T = 1;
                uint32_t br, bc;
                if (!pick_tiles(c, &d, &br, &bc)) continue;
                uint32_t spec[9] = {ATTN_WG, c->use_sg, d.maps, d.dk, d.dv, br, bc, split, d.kv};
                (void)vk_pipeline(c, VK_SH_ATTENTION, spec, 9, &p);
                continue;
            }
            if (use_lanes(c, &d)) {
                /* its unrolled code compiles in seconds: only this node's
                 * T (a longer prefill is another graph, prepared then),
                 * and the split variant only where this node can split */
                const uint32_t rpl = lanes_rpl(c, &d), lbr = c->subgroup_size * rpl;
                const uint64_t wgs = (uint64_t)(d.T * (d.H / d.G) + lbr - 1) / lbr * d.G;
                if (i > 0 || (split && split_count(c, wgs, S_cap) < 2)) continue;
                uint32_t spec[8] = {c->subgroup_size, c->use_sg, d.maps, d.dk, d.dv, split, rpl, d.kv};
                (void)vk_pipeline(c, VK_SH_ATTENTION_LANES, spec, 8, &p);
                continue;
            }
            if (use_rows(c, &d)) {
                uint32_t spec[7] = {rows_wg(c, &d), c->use_sg, d.maps, d.dk, d.dv, split, d.kv};
                (void)vk_pipeline(c, VK_SH_ATTENTION_ROWS, spec, 7, &p);
                continue;
            }
            uint32_t br, bc;
            if (!pick_tiles(c, &d, &br, &bc)) continue;
            uint32_t spec[9] = {ATTN_WG, c->use_sg, d.maps, d.dk, d.dv, br, bc, split, d.kv};
            (void)vk_pipeline(c, VK_SH_ATTENTION, spec, 9, &p);
        }
    }
}

const char *vk_attention_variant(vk_ctx *c, const drt_tensor *t) {
    (void)c;
    attn_dims d = dims_of(t);
    /* the split decision depends on the position: name the kernel only */
    if (use_lanes(c, &d) && lanes_aligned(t)) return "attention_lanes (a lane per query row)";
    return use_rows(c, &d) ? "attention_rows (one invocation per query row)" : "attention (tiled, BR rows x BC keys)";
}

/* o (T,H,dv) from q (T,H,maps,dk), k (S_cap,G,km,dk), v (S_cap,G,dv); row t
 * reads the keys base .. base + pos of its rows entry. The kernel and its
 * workgroups are chosen from the longest run (run_rows) where the node's T
 * would group rows that share no keys: decode rows of many sequences take
 * the rows kernel, or the tiles of one query row. With few workgroups
 * (decode, short prompts) the keys are split over the grid's z, each split
 * a range of every row's own keys, and a second pass merges the splits
 * (flash-decoding). */
drt_status vk_attention(vk_ctx *c, const drt_tensor *t, const drt_exec *ex) {
    attn_dims d = dims_of(t);
    const uint32_t run = run_rows(ex);
    attn_dims dl = d; /* lanes: the rows one sequence gives a kv group */
    dl.T = run;
    attn_dims dt = d; /* tiles: of one query row when every run is one row */
    dt.T = run > 1 ? d.T : 1;
    uint32_t br, bc;
    if (!pick_tiles(c, &dt, &br, &bc))
        return drt_set_error(DRT_ERR_UNSUPPORTED, "vulkan: %s dk=%u dv=%u does not fit in shared memory",
                             drt_op_name(t->op), d.dk, d.dv);
    if (d.kv && (vk_eoff(t->src[1]) | vk_eoff(t->src[2])) % 2)
        return drt_set_error(DRT_ERR_UNSUPPORTED, "vulkan: %s reads an %s cache at an odd offset", drt_op_name(t->op),
                             drt_dtype_name(t->src[1]->type));
    const drt_tensor *l = t->op == DRT_OP_DIFF_ATTN ? t->src[3] : NULL;
    const drt_tensor *rws = t->src[DRT_SRC_ROWS];
    /* lanes: the node's rows per lane (its prepared pipeline) */
    const bool lanes = use_lanes(c, &dl) && lanes_aligned(t);
    const bool rows = !lanes && use_rows(c, &d);
    const uint32_t rwg = rows ? rows_wg(c, &d) : 0, lwg = c->subgroup_size;
    const uint32_t lbr = lanes ? lwg * lanes_rpl(c, &d) : 0; /* lanes: rows per workgroup */
    const uint32_t gx = lanes  ? (d.T * (d.H / d.G) + lbr - 1) / lbr
                        : rows ? (d.T * d.H + rwg - 1) / rwg
                               : (d.T * (d.H / d.G) + br - 1) / br;
    const uint32_t gy = rows ? 1 : d.G;
    const uint32_t S = (uint32_t)ex->max_keys, S_cap = (uint32_t)t->src[1]->ne[0];
    /* a split's keys: a multiple of this */
    const uint32_t step = lanes ? lwg : rows ? 1 : bc;
    uint32_t nsplit = split_count(c, (uint64_t)gx * gy, S), chunk = 0;
    if (nsplit > 1) {
        chunk = ((S + nsplit - 1) / nsplit + step - 1) / step * step;
        nsplit = (S + chunk - 1) / chunk;
    }
    uint32_t spec[9] = {ATTN_WG, c->use_sg, d.maps, d.dk, d.dv, br, bc, nsplit > 1, d.kv};
    const vk_shader sh = lanes ? VK_SH_ATTENTION_LANES : rows ? VK_SH_ATTENTION_ROWS : VK_SH_ATTENTION;
    int nspec = 9;
    if (rows || lanes) { /* rows: ..., split, KV; lanes: ..., split, rpl, KV */
        spec[0] = lanes ? lwg : rwg;
        spec[5] = nsplit > 1;
        spec[6] = lanes ? lanes_rpl(c, &d) : d.kv;
        spec[7] = d.kv;
        nspec = lanes ? 8 : 7;
    }
    attn_pc pc = {vk_eoff(t->src[0]),
                  vk_eoff(t->src[1]),
                  vk_eoff(t->src[2]),
                  l ? vk_eoff(l) : 0,
                  vk_eoff(t),
                  d.T,
                  vk_eoff(rws),
                  d.H,
                  d.G,
                  d.km,
                  l != NULL,
                  t->fp[0],
                  (float)(1.0 / sqrt((double)d.dk)),
                  chunk};
    vk_binds b = {.src = {t->src[0], t->src[1], t->src[2], l}, .dst = t, .rows = rws};
    if (nsplit <= 1) return vk_dispatch(c, sh, spec, nspec, &b, &pc, sizeof pc, gx, gy, 1);

    /* sized for the most splits this node can ever take (S = S_cap), so a
     * growing cache never reallocates it */
    const uint32_t nmax = split_count(c, (uint64_t)gx * gy, S_cap);
    const size_t part = (size_t)d.T * d.H * d.maps * (d.dv + 2) * sizeof(float);
    const drt_tensor *scratch;
    drt_status s = vk_scratch(c, (size_t)(nmax > nsplit ? nmax : nsplit) * part, &scratch);
    if (s != DRT_OK) return s;
    b.dst = scratch;
    pc.o_o = 0;
    s = vk_dispatch(c, sh, spec, nspec, &b, &pc, sizeof pc, gx, gy, nsplit);
    if (s != DRT_OK) return s;
    const uint32_t wg = vk_wg(c, 256, 64);
    uint32_t cspec[3] = {wg, c->use_sg, d.maps};
    combine_pc cpc = {l ? vk_eoff(l) : 0, vk_eoff(t), d.T, d.H, d.dv, nsplit, l != NULL, t->fp[0], chunk, vk_eoff(rws)};
    vk_binds cb = {.src = {scratch, NULL, NULL, l}, .dst = t, .rows = rws};
    uint64_t groups = ((uint64_t)d.T * d.H * d.dv + wg - 1) / wg;
    return vk_dispatch(c, VK_SH_ATTENTION_COMBINE, cspec, 3, &cb, &cpc, sizeof cpc,
                       groups < 65535 ? (uint32_t)groups : 65535, 1, 1);
}

/* a (H,T,S) from s1, s2 (H,T,S) and lambda / lambda_th (T,H); p0 = S - T */
drt_status vk_dual_softmax(vk_ctx *c, const drt_tensor *t, const drt_exec *ex) {
    (void)ex;
    const drt_tensor *s1 = t->src[0], *s2 = t->src[1], *l = t->src[2];
    uint32_t H = (uint32_t)s1->ne[0], T = (uint32_t)s1->ne[1], S = (uint32_t)s1->ne[2];
    uint32_t spec[2] = {vk_wg(c, 256, 64), c->use_sg};
    dual_softmax_pc pc = {vk_eoff(s1), vk_eoff(s2), l ? vk_eoff(l) : 0, vk_eoff(t), H, T,
                          S,           S - T,       l != NULL,          t->fp[0]};
    vk_binds b = {.src = {s1, s2, l}, .dst = t};
    uint32_t gx, gy;
    vk_grid_2d((uint64_t)H * T, &gx, &gy);
    return vk_dispatch(c, vk_sg_variant(c, VK_SH_DUAL_SOFTMAX), spec, 2, &b, &pc, sizeof pc, gx, gy, 1);
}
