/* The checkpoint layouts of docs/design.md section 4: which tensors make
 * each layer and the globals, and how they map onto drt_layer_weights
 * (Hugging Face Llama and DiffLlama, the authors' unilm V1, DIFF V2,
 * axolotl; diff-mlx's own names in the second half). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "drt_checked.h"
#include "drt_error.h"
#include "drt_half.h"
#include "drt_quant.h"
#include "drt_util.h"
#include "loader_internal.h"
#include "model.h"

/* rows of the largest row map load_attention builds: q has 2 H dk rows, k at
 * most 2 G dk (dims from the bounded config, checked anyway) */
static int map_rows(const drt_model_info *I, int64_t *out) {
    int64_t q, k;
    if (!drt_mul_ok(2 * (int64_t)I->n_heads, I->dk, &q) || !drt_mul_ok(2 * (int64_t)I->n_kv_groups, I->dk, &k))
        return 0;
    *out = q > k ? q : k;
    return 1;
}

/* V1's scalar lambda of layer l from the vectors PRE lambda_q1 .. lambda_k2
 * (dk each): exp(q1 . k1) - exp(q2 . k2) + lambda_init(l) */
static drt_status load_v1_lambda(ld_t *L, int l, drt_layer_weights *lw, const char *pre) {
    drt_model *m = L->m;
    int64_t dk = m->info.dk;
    char nm[200];
    const drt_st_tensor *lq1, *lk1, *lq2, *lk2;
    const char *names[4] = {"lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"};
    const drt_st_tensor **dst[4] = {&lq1, &lk1, &lq2, &lk2};
    drt_status s;
    for (int i = 0; i < 4; i++) {
        snprintf(nm, sizeof nm, "%s%s", pre, names[i]);
        if ((s = ld_get_tensor(L, nm, 1, dk, 0, dst[i])) != DRT_OK) return s;
    }
    /* axolotl stores lambda_init (0-dim): 0 after a zero-init conversion,
     * rounded in a bf16 file; the others compute it from the layer index */
    const drt_st_tensor *li = NULL;
    if (m->info.layout == DRT_LAYOUT_AXOLOTL_DIFF) {
        snprintf(nm, sizeof nm, "%slambda_init", pre);
        if ((s = ld_get_tensor(L, nm, 0, 0, 0, &li)) != DRT_OK) return s;
    }
    if (L->dry) return DRT_OK;
    lw->lambda_init = li ? drt_st_elem_f32(li, 0) : (float)(0.8 - 0.6 * exp(-0.3 * l));
    if (!isfinite(lw->lambda_init))
        return drt_set_error(DRT_ERR_FORMAT, "%s: tensor \"%s\" is not finite", L->st_name, nm);
    lw->gn_scale = m->info.out_scale ? 1.0f - lw->lambda_init : 1.0f;
    /* no GROUPNORM to carry the scale: o_proj(s x) = (s o_proj) x */
    if (!m->info.subnorm && lw->gn_scale != 1.0f && (s = ld_scale_weight(L, &lw->wo, lw->gn_scale)) != DRT_OK) return s;
    /* HF: exp of the float32 sum, then lambda_1 - lambda_2 + lambda_init */
    lw->lambda = ld_dot_exp(lq1, lk1, dk) - ld_dot_exp(lq2, lk2, dk) + lw->lambda_init;
    if (!isfinite(lw->lambda))
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: layer %d: lambda = exp(lambda_q1 . lambda_k1) - "
                             "exp(lambda_q2 . lambda_k2) + lambda_init is not finite",
                             L->st_name, l);
    m->lambda_v[l] = lw->lambda;
    m->lambda_init_v[l] = lw->lambda_init;
    return DRT_OK;
}

static drt_status load_attention(ld_t *L, int l, drt_layer_weights *lw, int n_q_heads, int n_kv_heads) {
    drt_model *m = L->m;
    drt_model_info *I = &m->info;
    int64_t D = I->dim, H = I->n_heads, G = I->n_kv_groups, dk = I->dk, dv = I->dv;
    char nm[160];
    drt_status s = DRT_OK;
    const char *pre = "model.layers";
    /* the row maps are built in the loading pass only: the checking pass has
     * not yet proven the shapes, so nothing is sized from H, G, dk before it */
    int64_t *map = NULL, n_map;
    size_t map_bytes;
    if (!L->dry) {
        if (map_rows(I, &n_map) && drt_bytes_ok(n_map, sizeof *map, &map_bytes)) map = malloc(map_bytes);
        if (!map) return drt_set_error(DRT_ERR_OOM, "out of memory");
    }
    int64_t r;

    /* products of bounded config dims (each <= 4096, so < 2^26): no overflow;
     * the tensors' shapes are compared with them before anything is read */
    switch (I->layout) {
    case DRT_LAYOUT_HF_LLAMA:
        snprintf(nm, sizeof nm, "%s.%d.self_attn.q_proj.weight", pre, l);
        s = ld_load_as_is(L, &lw->wq, nm, H * dk, D);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.k_proj.weight", pre, l);
        if (s == DRT_OK) s = ld_load_as_is(L, &lw->wk, nm, G * dk, D);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.v_proj.weight", pre, l);
        if (s == DRT_OK) s = ld_load_as_is(L, &lw->wv, nm, G * dv, D);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.o_proj.weight", pre, l);
        if (s == DRT_OK) s = ld_load_as_is(L, &lw->wo, nm, D, H * dv);
        break;
    case DRT_LAYOUT_HF_DIFFLLAMA:
    case DRT_LAYOUT_AXOLOTL_DIFF: {
        /* sub-head n of HF: diff-head n % H, map n / H; kv head j: group j % G, map j / G.
         * axolotl: the first and second halves of the q and k rows are the two
         * maps, heads (diff-heads) and kv heads in order within each: the same
         * row map, over 2 H dk and 2 G dk source rows */
        int ax = I->layout == DRT_LAYOUT_AXOLOTL_DIFF;
        int64_t d = dk;
        r = 0;
        for (int64_t h = 0; map && h < H; h++)
            for (int64_t c2 = 0; c2 < 2; c2++)
                for (int64_t i = 0; i < d; i++) map[r++] = (c2 * H + h) * d + i;
        snprintf(nm, sizeof nm, "%s.%d.self_attn.q_proj.weight", pre, l);
        s = ld_load_rows(L, &lw->wq, nm, 2 * H * d, D, map, ax ? 2 * H * d : (int64_t)n_q_heads * d);
        r = 0;
        for (int64_t g = 0; map && g < G; g++)
            for (int64_t c2 = 0; c2 < 2; c2++)
                for (int64_t i = 0; i < d; i++) map[r++] = (c2 * G + g) * d + i;
        snprintf(nm, sizeof nm, "%s.%d.self_attn.k_proj.weight", pre, l);
        if (s == DRT_OK) s = ld_load_rows(L, &lw->wk, nm, 2 * G * d, D, map, ax ? 2 * G * d : (int64_t)n_kv_heads * d);
        /* V of group g = [v_g ; v_{g+G}]: the same row order as k (axolotl's
         * split_heads regroups its V so too); axolotl's default layout has one
         * V of width dk per kv head, read by both maps, used as stored */
        snprintf(nm, sizeof nm, "%s.%d.self_attn.v_proj.weight", pre, l);
        if (s == DRT_OK && ax && dv == d)
            s = ld_load_as_is(L, &lw->wv, nm, G * dv, D);
        else if (s == DRT_OK)
            s = ld_load_rows(L, &lw->wv, nm, 2 * G * d, D, map, 2 * G * d);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.o_proj.weight", pre, l);
        if (s == DRT_OK) s = ld_load_as_is(L, &lw->wo, nm, D, H * dv);
        if (s == DRT_OK && ax && I->subnorm) {
            snprintf(nm, sizeof nm, "%s.%d.self_attn.subln.weight", pre, l);
            s = ld_load_f32_vec(L, &lw->subln, nm, dv);
        }
        break;
    }
    case DRT_LAYOUT_UNILM_V1:
    case DRT_LAYOUT_DIFF_V2: {
        int v1 = I->layout == DRT_LAYOUT_UNILM_V1;
        int64_t d = dk;
        /* q: sub-heads 2h, 2h+1 are already diff-head h's two maps; only the
         * interleaved RoPE rows need reordering */
        for (r = 0; map && r < 2 * H * d; r++) map[r] = (r / d) * d + ld_deinterleave(r % d, d);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.q_proj.weight", pre, l);
        s = ld_load_rows(L, &lw->wq, nm, 2 * H * d, D, map, 2 * H * d);
        int64_t krows = G * I->kv_m * d;
        for (r = 0; map && r < krows; r++) map[r] = (r / d) * d + ld_deinterleave(r % d, d);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.k_proj.weight", pre, l);
        if (s == DRT_OK) s = ld_load_rows(L, &lw->wk, nm, krows, D, map, krows);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.v_proj.weight", pre, l);
        if (s == DRT_OK) s = ld_load_as_is(L, &lw->wv, nm, G * dv, D);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.%s.weight", pre, l, v1 ? "out_proj" : "o_proj");
        if (s == DRT_OK) s = ld_load_as_is(L, &lw->wo, nm, D, H * dv);
        if (s == DRT_OK && v1) {
            snprintf(nm, sizeof nm, "%s.%d.self_attn.subln.weight", pre, l);
            s = ld_load_f32_vec(L, &lw->subln, nm, dv);
        }
        if (s == DRT_OK && !v1) {
            snprintf(nm, sizeof nm, "%s.%d.self_attn.lambda_proj.weight", pre, l);
            s = ld_load_as_is(L, &lw->w_lambda, nm, H, D);
        }
        break;
    }
    case DRT_LAYOUT_MLX_DIFF:
    case DRT_LAYOUT_MLX_VANILLA: /* ld_load_mlx_layers */ break;
    }
    free(map);
    if (s != DRT_OK) return s;

    if (I->arch == DRT_ARCH_DIFF_V1) {
        snprintf(nm, sizeof nm, "%s.%d.self_attn.", pre, l);
        return load_v1_lambda(L, l, lw, nm);
    }
    return DRT_OK;
}

/* Layer by layer, so a config claiming more layers than the checkpoint holds
 * stops at the first missing tensor: the checking pass (L->dry, writing into
 * one scratch layer) costs what the checkpoint has, not what the config
 * claims. */
drt_status ld_load_layers(ld_t *L, int n_q_heads, int n_kv_heads) {
    drt_model *m = L->m;
    drt_model_info *I = &m->info;
    int64_t D = I->dim, F = I->ffn;
    char nm[160];
    drt_layer_weights scratch;
    for (int l = 0; l < I->n_layers; l++) {
        drt_layer_weights *lw = L->dry ? &scratch : &m->layers[l];
        drt_status s;
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        if ((s = ld_load_f32_vec(L, &lw->attn_norm, nm, D)) != DRT_OK) return s;
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
        if ((s = ld_load_f32_vec(L, &lw->ffn_norm, nm, D)) != DRT_OK) return s;
        if ((s = load_attention(L, l, lw, n_q_heads, n_kv_heads)) != DRT_OK) return s;
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.gate_proj.weight", l);
        if ((s = ld_load_as_is(L, &lw->wg, nm, F, D)) != DRT_OK) return s;
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.up_proj.weight", l);
        if ((s = ld_load_as_is(L, &lw->wu, nm, F, D)) != DRT_OK) return s;
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.down_proj.weight", l);
        if ((s = ld_load_as_is(L, &lw->wd, nm, D, F)) != DRT_OK) return s;
    }
    return DRT_OK;
}

/* embedding, final norm, LM head */
drt_status ld_load_globals(ld_t *L) {
    drt_model *m = L->m;
    drt_model_info *I = &m->info;
    drt_status s = ld_load_as_is(L, &m->embed, "model.embed_tokens.weight", I->vocab, I->dim);
    if (s == DRT_OK && !L->dry && drt_dtype_block(m->embed.type) > 1)
        s = drt_set_error(DRT_ERR_UNSUPPORTED,
                          "%s: tensor \"model.embed_tokens.weight\" is %s: the embedding must be f32, f16 or "
                          "bf16 (diffrt quantize keeps it f16)",
                          L->st_name, drt_dtype_name(m->embed.type));
    if (s == DRT_OK) s = ld_load_f32_vec(L, &m->final_norm, "model.norm.weight", I->dim);
    if (s != DRT_OK) return s;
    if (!I->tied_embeddings) s = ld_load_as_is(L, &m->lm_head, "lm_head.weight", I->vocab, I->dim);
    if (s != DRT_OK || L->dry) return s;
    if (I->tied_embeddings)
        m->lm_head = (drt_host_weight){.type = m->embed.type, .nd = 2, .ne = {I->vocab, I->dim}, .data = m->embed.data};
    snprintf(m->lm_head.name, sizeof m->lm_head.name, "%s", I->tied_embeddings ? "lm_head (tied)" : "lm_head.weight");
    return DRT_OK;
}

/* ---- diff-mlx: the tensors (config.c reads its config) ------------- */

/* The name prefix ("model." or "") and the variant, from the tensors. */
drt_status ld_mlx_variant(ld_t *L) {
    drt_model *m = L->m;
    drt_model_info *I = &m->info;
    int pre = drt_st_set_find(&m->st, "model.tok_embed.weight") != NULL;
    int bare = drt_st_set_find(&m->st, "tok_embed.weight") != NULL;
    if (!pre && !bare)
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: missing tensor \"model.tok_embed.weight\" (or \"tok_embed.weight\" of an older "
                             "diff-mlx checkpoint)",
                             L->st_name);
    if (pre && bare)
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: both \"model.tok_embed.weight\" and \"tok_embed.weight\": which names are the "
                             "model is ambiguous",
                             L->st_name);
    L->mlx_pre = pre ? "model." : "";
    char nm[64];
    snprintf(nm, sizeof nm, "%sblocks.0.attn.lambda_q1", L->mlx_pre);
    int nh = I->n_heads, hd = I->dk;
    if (drt_st_set_find(&m->st, nm) || drt_st_set_find_foreign(&m->st, nm)) {
        if (nh % 2)
            return drt_set_error(DRT_ERR_FORMAT,
                                 "%s: a diff model (it has \"%s\") needs an even model.n_heads_vanilla, got %d",
                                 L->st_name, nm, nh);
        I->arch = DRT_ARCH_DIFF_V1, I->layout = DRT_LAYOUT_MLX_DIFF;
        I->subnorm = I->out_scale = 1; /* the authors' V1: weighted subln, x (1 - lambda_init) */
        I->n_heads = I->n_kv_groups = nh / 2, I->kv_m = 2, I->dk = hd, I->dv = 2 * hd;
    } else {
        I->arch = DRT_ARCH_TRANSFORMER, I->layout = DRT_LAYOUT_MLX_VANILLA;
        I->n_heads = I->n_kv_groups = nh, I->kv_m = 1, I->dk = I->dv = hd;
    }
    I->arch_name = ld_arch_names[I->arch];
    I->layout_name = ld_layout_names[I->layout];
    return DRT_OK;
}

drt_status ld_load_mlx_globals(ld_t *L) {
    drt_model *m = L->m;
    drt_model_info *I = &m->info;
    char nm[64];
    snprintf(nm, sizeof nm, "%stok_embed.weight", L->mlx_pre);
    drt_status s = ld_load_as_is(L, &m->embed, nm, I->vocab, I->dim);
    if (s == DRT_OK && !L->dry && drt_dtype_block(m->embed.type) > 1)
        s = drt_set_error(DRT_ERR_UNSUPPORTED, "%s: tensor \"%s\" is %s: the embedding must be f32, f16 or bf16",
                          L->st_name, nm, drt_dtype_name(m->embed.type));
    snprintf(nm, sizeof nm, "%sfinal_norm.scale", L->mlx_pre);
    if (s == DRT_OK) s = ld_load_f32_vec(L, &m->final_norm, nm, I->dim);
    if (s != DRT_OK || L->dry) return s;
    m->lm_head = (drt_host_weight){.type = m->embed.type, .nd = 2, .ne = {I->vocab, I->dim}, .data = m->embed.data};
    snprintf(m->lm_head.name, sizeof m->lm_head.name, "lm_head (tied)");
    return DRT_OK;
}

drt_status ld_load_mlx_layers(ld_t *L) {
    drt_model *m = L->m;
    drt_model_info *I = &m->info;
    int64_t D = I->dim, F = I->ffn, dk = I->dk, dv = I->dv;
    int diff = I->layout == DRT_LAYOUT_MLX_DIFF;
    /* q and k: D rows either way (2H dk = H dk of vanilla = D); only the
     * interleaved RoPE rows of each dk-wide head are reordered */
    int64_t *map = NULL;
    if (!L->dry) {
        size_t bytes;
        if (drt_bytes_ok(D, sizeof *map, &bytes)) map = malloc(bytes);
        if (!map) return drt_set_error(DRT_ERR_OOM, "out of memory");
        for (int64_t r = 0; r < D; r++) map[r] = (r / dk) * dk + ld_deinterleave(r % dk, dk);
    }
    char pre[96], nm[200];
    drt_layer_weights scratch;
    drt_status s = DRT_OK;
    for (int l = 0; s == DRT_OK && l < I->n_layers; l++) {
        drt_layer_weights *lw = L->dry ? &scratch : &m->layers[l];
        snprintf(pre, sizeof pre, "%sblocks.%d.", L->mlx_pre, l);
#define MLX_NAME(fmt) (snprintf(nm, sizeof nm, "%s" fmt, pre), nm)
        s = ld_load_f32_vec(L, &lw->attn_norm, MLX_NAME("norm_attn.scale"), D);
        if (s == DRT_OK) s = ld_load_f32_vec(L, &lw->ffn_norm, MLX_NAME("norm_mlp.scale"), D);
        if (s == DRT_OK) s = ld_load_rows(L, &lw->wq, MLX_NAME("attn.q_proj.weight"), D, D, map, D);
        if (s == DRT_OK) s = ld_load_rows(L, &lw->wk, MLX_NAME("attn.k_proj.weight"), D, D, map, D);
        if (s == DRT_OK) s = ld_load_as_is(L, &lw->wv, MLX_NAME("attn.v_proj.weight"), D, D);
        if (s == DRT_OK) s = ld_load_as_is(L, &lw->wo, MLX_NAME("attn.o_proj.weight"), D, D);
        if (s == DRT_OK && diff) s = ld_load_f32_vec(L, &lw->subln, MLX_NAME("attn.subln.scale"), dv);
        if (s == DRT_OK && diff) s = load_v1_lambda(L, l, lw, MLX_NAME("attn."));
        if (s == DRT_OK) s = ld_load_as_is(L, &lw->wg, MLX_NAME("mlp.gate.weight"), F, D);
        if (s == DRT_OK) s = ld_load_as_is(L, &lw->wu, MLX_NAME("mlp.up.weight"), F, D);
        if (s == DRT_OK) s = ld_load_as_is(L, &lw->wd, MLX_NAME("mlp.down.weight"), D, F);
#undef MLX_NAME
    }
    free(map);
    return s;
}
