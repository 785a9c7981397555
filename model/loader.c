/* config.json + safetensors -> drt_model, for the four layouts of DESIGN.md
 * section 4. Every mismatch is one line naming the file, field or tensor. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "drt_half.h"
#include "model.h"

/* ---- config.json ----------------------------------------------------- */

typedef struct {
    const char *path;
    cJSON *root;
} cfg_t;

static drt_status cfg_int(cfg_t *c, const char *key, int required, int dflt, int *out) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(c->root, key);
    if (!v || cJSON_IsNull(v)) {
        if (required)
            return drt_set_error(DRT_ERR_FORMAT, "%s: missing field \"%s\" (expected an integer)",
                                 c->path, key);
        *out = dflt;
        return DRT_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble > 1e9)
        return drt_set_error(DRT_ERR_FORMAT, "%s: field \"%s\" must be a non-negative integer",
                             c->path, key);
    *out = (int)v->valuedouble;
    return DRT_OK;
}

static drt_status num_field(const char *path, cJSON *obj, const char *key, int required,
                            double dflt, double *out) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        if (required)
            return drt_set_error(DRT_ERR_FORMAT, "%s: missing field \"%s\" (expected a number)",
                                 path, key);
        *out = dflt;
        return DRT_OK;
    }
    if (!cJSON_IsNumber(v))
        return drt_set_error(DRT_ERR_FORMAT, "%s: field \"%s\" must be a number", path, key);
    *out = v->valuedouble;
    return DRT_OK;
}

static drt_status cfg_bool(cfg_t *c, const char *key, int dflt, int *out) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(c->root, key);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return DRT_OK;
    }
    if (!cJSON_IsBool(v))
        return drt_set_error(DRT_ERR_FORMAT, "%s: field \"%s\" must be true or false", c->path, key);
    *out = cJSON_IsTrue(v);
    return DRT_OK;
}

/* bos/eos may be an integer, a list (first entry is used) or null */
static int cfg_token(cfg_t *c, const char *key) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(c->root, key);
    if (cJSON_IsArray(v)) v = cJSON_GetArrayItem(v, 0);
    if (cJSON_IsNumber(v) && v->valuedouble >= 0) return (int)v->valuedouble;
    return -1;
}

/* ---- RoPE ------------------------------------------------------------ */

/* inv_freq[i] = theta^(-2i/d), then rope_scaling as Hugging Face computes it */
static drt_status rope_setup(cfg_t *c, drt_model *m, int d) {
    cJSON *params = cJSON_GetObjectItemCaseSensitive(c->root, "rope_parameters");
    cJSON *scaling = cJSON_GetObjectItemCaseSensitive(c->root, "rope_scaling");
    double theta;
    drt_status s = num_field(c->path, c->root, "rope_theta", 0, 10000.0, &theta);
    if (s != DRT_OK) return s;
    if (cJSON_IsObject(params)) {
        s = num_field(c->path, params, "rope_theta", 0, theta, &theta);
        if (s != DRT_OK) return s;
        if (!cJSON_IsObject(scaling)) scaling = params;
    } else if (params && !cJSON_IsNull(params)) {
        return drt_set_error(DRT_ERR_FORMAT, "%s: field \"rope_parameters\" must be an object", c->path);
    }
    if (scaling && !cJSON_IsNull(scaling) && !cJSON_IsObject(scaling))
        return drt_set_error(DRT_ERR_FORMAT, "%s: field \"rope_scaling\" must be an object or null", c->path);
    if (!(theta > 0)) return drt_set_error(DRT_ERR_FORMAT, "%s: rope_theta must be > 0", c->path);
    m->rope_theta = (float)theta;
    const char *type = "default";
    if (cJSON_IsObject(scaling)) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(scaling, "rope_type");
        if (!cJSON_IsString(t)) t = cJSON_GetObjectItemCaseSensitive(scaling, "type");
        if (cJSON_IsString(t)) type = t->valuestring;
    }
    m->inv_freq = malloc(sizeof(float) * (size_t)(d / 2));
    if (!m->inv_freq) return drt_set_error(DRT_ERR_OOM, "out of memory");
    for (int i = 0; i < d / 2; i++) {
        /* Hugging Face computes this in float32: match it */
        float e = (float)(2 * i) / (float)d;
        m->inv_freq[i] = (float)(1.0 / pow((double)(float)theta, (double)e));
    }
    if (strcmp(type, "default") == 0) {
        m->info.rope_scaling = "none";
        return DRT_OK;
    }
    double factor;
    s = num_field(c->path, scaling, "factor", 1, 1.0, &factor);
    if (s != DRT_OK) return s;
    if (!(factor > 0)) return drt_set_error(DRT_ERR_FORMAT, "%s: rope_scaling.factor must be > 0", c->path);
    if (strcmp(type, "linear") == 0) {
        m->info.rope_scaling = "linear";
        for (int i = 0; i < d / 2; i++) m->inv_freq[i] = (float)(m->inv_freq[i] / factor);
        return DRT_OK;
    }
    if (strcmp(type, "llama3") == 0) {
        double lo, hi, old;
        if ((s = num_field(c->path, scaling, "low_freq_factor", 1, 0, &lo)) != DRT_OK) return s;
        if ((s = num_field(c->path, scaling, "high_freq_factor", 1, 0, &hi)) != DRT_OK) return s;
        if ((s = num_field(c->path, scaling, "original_max_position_embeddings", 1, 0, &old)) != DRT_OK)
            return s;
        if (!(hi > lo) || !(old > 0))
            return drt_set_error(DRT_ERR_FORMAT,
                                 "%s: llama3 rope_scaling needs high_freq_factor > low_freq_factor and "
                                 "original_max_position_embeddings > 0", c->path);
        m->info.rope_scaling = "llama3";
        double lo_wl = old / lo, hi_wl = old / hi;
        for (int i = 0; i < d / 2; i++) {
            double f = m->inv_freq[i];
            double wl = 2 * 3.14159265358979323846 / f;
            double nf;
            if (wl < hi_wl)
                nf = f;
            else if (wl > lo_wl)
                nf = f / factor;
            else {
                double smooth = (old / wl - lo) / (hi - lo);
                nf = (1 - smooth) * f / factor + smooth * f;
            }
            m->inv_freq[i] = (float)nf;
        }
        return DRT_OK;
    }
    return drt_set_error(DRT_ERR_UNSUPPORTED,
                         "%s: rope_scaling type \"%s\" is not supported (supported: linear, llama3)",
                         c->path, type);
}

/* ---- tensors ----------------------------------------------------------- */

typedef struct {
    drt_model *m;
    char st_name[600]; /* for messages */
} ld_t;

static void shape_txt(int nd, const int64_t *ne, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < nd && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, i ? ", %lld" : "%lld", (long long)ne[i]);
    if (o < n) snprintf(buf + o, n - o, ")");
}

/* Finds `name` with exactly the given shape (nd 1 or 2). */
static drt_status get_tensor(ld_t *L, const char *name, int nd, int64_t n0, int64_t n1,
                             const drt_st_tensor **out) {
    const drt_st_tensor *t = drt_st_set_find(&L->m->st, name);
    if (!t)
        return drt_set_error(DRT_ERR_FORMAT, "%s: missing tensor \"%s\"", L->st_name, name);
    int64_t want[2] = {n0, n1};
    int ok = t->ndim == nd && t->shape[0] == n0 && (nd == 1 || t->shape[1] == n1);
    if (!ok) {
        char a[96], b[96];
        shape_txt(t->ndim, t->shape, a, sizeof a);
        shape_txt(nd, want, b, sizeof b);
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: tensor \"%s\" has shape %s but config.json implies %s", L->st_name,
                             name, a, b);
    }
    if (t->dtype == DRT_I32)
        return drt_set_error(DRT_ERR_FORMAT, "%s: tensor \"%s\" is i32; expected F32, F16 or BF16",
                             L->st_name, name);
    *out = t;
    return DRT_OK;
}

static float elem_f32(const drt_st_tensor *t, int64_t i) {
    const void *p = t->data;
    switch (t->dtype) {
    case DRT_F16: return drt_f16_to_f32(((const uint16_t *)p)[i]);
    case DRT_BF16: return drt_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* As stored: points into the mapping. */
static drt_status load_as_is(ld_t *L, drt_host_weight *w, const char *name, int64_t n0, int64_t n1) {
    const drt_st_tensor *t;
    drt_status s = get_tensor(L, name, n1 ? 2 : 1, n0, n1, &t);
    if (s != DRT_OK) return s;
    snprintf(w->name, sizeof w->name, "%s", name);
    w->type = t->dtype;
    w->nd = n1 ? 2 : 1;
    w->ne[0] = n0;
    w->ne[1] = n1;
    w->data = t->data;
    return DRT_OK;
}

/* Vectors (norm weights) are converted to f32. */
static drt_status load_f32_vec(ld_t *L, drt_host_weight *w, const char *name, int64_t n0) {
    const drt_st_tensor *t;
    drt_status s = get_tensor(L, name, 1, n0, 0, &t);
    if (s != DRT_OK) return s;
    float *d = malloc(sizeof(float) * (size_t)n0);
    if (!d) return drt_set_error(DRT_ERR_OOM, "out of memory");
    for (int64_t i = 0; i < n0; i++) d[i] = elem_f32(t, i);
    snprintf(w->name, sizeof w->name, "%s", name);
    w->type = DRT_F32;
    w->nd = 1;
    w->ne[0] = n0;
    w->data = w->owned = d;
    return DRT_OK;
}

/* A matrix of `rows` rows of `cols` whose internal row r is source row map[r]. */
static drt_status load_rows(ld_t *L, drt_host_weight *w, const char *name, int64_t rows,
                            int64_t cols, const int64_t *map, int64_t src_rows) {
    const drt_st_tensor *t;
    drt_status s = get_tensor(L, name, 2, src_rows, cols, &t);
    if (s != DRT_OK) return s;
    size_t es = drt_dtype_size(t->dtype), rb = es * (size_t)cols;
    char *d = malloc(rb * (size_t)rows);
    if (!d) return drt_set_error(DRT_ERR_OOM, "out of memory");
    for (int64_t r = 0; r < rows; r++) memcpy(d + rb * (size_t)r, (const char *)t->data + rb * (size_t)map[r], rb);
    drt_st_release(t); /* the copy replaces the mapped original: no second resident copy */
    snprintf(w->name, sizeof w->name, "%s", name);
    w->type = t->dtype;
    w->nd = 2;
    w->ne[0] = rows;
    w->ne[1] = cols;
    w->data = w->owned = d;
    return DRT_OK;
}

static void free_weight(drt_host_weight *w) {
    free(w->owned);
    memset(w, 0, sizeof *w);
}

/* Row index within one head of width d: rotate_half order from interleaved.
 * New row i < d/2 is old row 2i; new row d/2+i is old row 2i+1, so that
 * rotate_half pairs (i, i+d/2) are the interleaved pairs (2i, 2i+1). */
static int64_t deinterleave(int64_t i, int64_t d) { return i < d / 2 ? 2 * i : 2 * (i - d / 2) + 1; }

static float dot_exp(const drt_st_tensor *a, const drt_st_tensor *b, int64_t n) {
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (double)elem_f32(a, i) * (double)elem_f32(b, i);
    return (float)exp((double)(float)acc);
}

/* ---- the model ----------------------------------------------------------- */

void drt_model_destroy(drt_model *m) {
    if (!m) return;
    if (m->layers)
        for (int l = 0; l < m->info.n_layers; l++) {
            drt_layer_weights *lw = &m->layers[l];
            drt_host_weight *ws[] = {&lw->attn_norm, &lw->ffn_norm, &lw->wq, &lw->wk, &lw->wv, &lw->wo,
                                     &lw->w_lambda, &lw->subln, &lw->wg, &lw->wu, &lw->wd};
            for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) free_weight(ws[i]);
        }
    free(m->layers);
    free_weight(&m->embed);
    free_weight(&m->final_norm);
    free_weight(&m->lm_head);
    free(m->inv_freq);
    free(m->lambda_v);
    free(m->lambda_init_v);
    drt_st_set_close(&m->st);
    free(m);
}

static drt_status load_attention(ld_t *L, cfg_t *c, int l, int n_q_heads, int n_kv_heads) {
    drt_model *m = L->m;
    drt_model_info *I = &m->info;
    drt_layer_weights *lw = &m->layers[l];
    int64_t D = I->dim, H = I->n_heads, G = I->n_kv_groups, dk = I->dk, dv = I->dv;
    char nm[160];
    drt_status s = DRT_OK;
    const char *pre = "model.layers";
    int64_t *map = malloc(sizeof(int64_t) * (size_t)(2 * H * dk + 2 * G * dv + 8));
    if (!map) return drt_set_error(DRT_ERR_OOM, "out of memory");
    int64_t r;

    switch (I->layout) {
    case DRT_LAYOUT_HF_LLAMA:
        snprintf(nm, sizeof nm, "%s.%d.self_attn.q_proj.weight", pre, l);
        s = load_as_is(L, &lw->wq, nm, H * dk, D);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.k_proj.weight", pre, l);
        if (s == DRT_OK) s = load_as_is(L, &lw->wk, nm, G * dk, D);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.v_proj.weight", pre, l);
        if (s == DRT_OK) s = load_as_is(L, &lw->wv, nm, G * dv, D);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.o_proj.weight", pre, l);
        if (s == DRT_OK) s = load_as_is(L, &lw->wo, nm, D, H * dv);
        break;
    case DRT_LAYOUT_HF_DIFFLLAMA: {
        /* sub-head n of HF: diff-head n % H, map n / H; kv head j: group j % G, map j / G */
        int64_t d = dk;
        r = 0;
        for (int64_t h = 0; h < H; h++)
            for (int64_t c2 = 0; c2 < 2; c2++)
                for (int64_t i = 0; i < d; i++) map[r++] = (c2 * H + h) * d + i;
        snprintf(nm, sizeof nm, "%s.%d.self_attn.q_proj.weight", pre, l);
        s = load_rows(L, &lw->wq, nm, 2 * H * d, D, map, (int64_t)n_q_heads * d);
        r = 0;
        for (int64_t g = 0; g < G; g++)
            for (int64_t c2 = 0; c2 < 2; c2++)
                for (int64_t i = 0; i < d; i++) map[r++] = (c2 * G + g) * d + i;
        snprintf(nm, sizeof nm, "%s.%d.self_attn.k_proj.weight", pre, l);
        if (s == DRT_OK) s = load_rows(L, &lw->wk, nm, 2 * G * d, D, map, (int64_t)n_kv_heads * d);
        /* V of group g = [v_g ; v_{g+G}]: the same row order as k */
        snprintf(nm, sizeof nm, "%s.%d.self_attn.v_proj.weight", pre, l);
        if (s == DRT_OK) s = load_rows(L, &lw->wv, nm, 2 * G * d, D, map, (int64_t)n_kv_heads * d);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.o_proj.weight", pre, l);
        if (s == DRT_OK) s = load_as_is(L, &lw->wo, nm, D, H * dv);
        break;
    }
    case DRT_LAYOUT_UNILM_V1:
    case DRT_LAYOUT_DIFF_V2: {
        int v1 = I->layout == DRT_LAYOUT_UNILM_V1;
        int64_t d = dk;
        /* q: sub-heads 2h, 2h+1 are already diff-head h's two maps; only the
         * interleaved RoPE rows need reordering */
        for (r = 0; r < 2 * H * d; r++) map[r] = (r / d) * d + deinterleave(r % d, d);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.q_proj.weight", pre, l);
        s = load_rows(L, &lw->wq, nm, 2 * H * d, D, map, 2 * H * d);
        int64_t krows = G * I->kv_m * d;
        for (r = 0; r < krows; r++) map[r] = (r / d) * d + deinterleave(r % d, d);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.k_proj.weight", pre, l);
        if (s == DRT_OK) s = load_rows(L, &lw->wk, nm, krows, D, map, krows);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.v_proj.weight", pre, l);
        if (s == DRT_OK) s = load_as_is(L, &lw->wv, nm, G * dv, D);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.%s.weight", pre, l, v1 ? "out_proj" : "o_proj");
        if (s == DRT_OK) s = load_as_is(L, &lw->wo, nm, D, H * dv);
        if (s == DRT_OK && v1) {
            snprintf(nm, sizeof nm, "%s.%d.self_attn.subln.weight", pre, l);
            s = load_f32_vec(L, &lw->subln, nm, dv);
        }
        if (s == DRT_OK && !v1) {
            snprintf(nm, sizeof nm, "%s.%d.self_attn.lambda_proj.weight", pre, l);
            s = load_as_is(L, &lw->w_lambda, nm, H, D);
        }
        break;
    }
    }
    free(map);
    if (s != DRT_OK) return s;

    if (I->arch == DRT_ARCH_DIFF_V1) {
        const drt_st_tensor *lq1, *lk1, *lq2, *lk2;
        const char *names[4] = {"lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"};
        const drt_st_tensor **dst[4] = {&lq1, &lk1, &lq2, &lk2};
        for (int i = 0; i < 4; i++) {
            snprintf(nm, sizeof nm, "%s.%d.self_attn.%s", pre, l, names[i]);
            s = get_tensor(L, nm, 1, dk, 0, dst[i]);
            if (s != DRT_OK) return s;
        }
        lw->lambda_init = (float)(0.8 - 0.6 * exp(-0.3 * l));
        /* HF: exp of the float32 sum, then lambda_1 - lambda_2 + lambda_init */
        lw->lambda = dot_exp(lq1, lk1, dk) - dot_exp(lq2, lk2, dk) + lw->lambda_init;
        m->lambda_v[l] = lw->lambda;
        m->lambda_init_v[l] = lw->lambda_init;
    }
    return DRT_OK;
}

static drt_status load_layers(ld_t *L, cfg_t *c, int n_q_heads, int n_kv_heads) {
    drt_model *m = L->m;
    drt_model_info *I = &m->info;
    int64_t D = I->dim, F = I->ffn;
    char nm[160];
    for (int l = 0; l < I->n_layers; l++) {
        drt_layer_weights *lw = &m->layers[l];
        drt_status s;
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        if ((s = load_f32_vec(L, &lw->attn_norm, nm, D)) != DRT_OK) return s;
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
        if ((s = load_f32_vec(L, &lw->ffn_norm, nm, D)) != DRT_OK) return s;
        if ((s = load_attention(L, c, l, n_q_heads, n_kv_heads)) != DRT_OK) return s;
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.gate_proj.weight", l);
        if ((s = load_as_is(L, &lw->wg, nm, F, D)) != DRT_OK) return s;
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.up_proj.weight", l);
        if ((s = load_as_is(L, &lw->wu, nm, F, D)) != DRT_OK) return s;
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.down_proj.weight", l);
        if ((s = load_as_is(L, &lw->wd, nm, D, F)) != DRT_OK) return s;
    }
    return DRT_OK;
}

static const char *arch_names[] = {"transformer", "diff-v1", "diff-v2"};
static const char *layout_names[] = {"hf-llama", "hf-diffllama", "unilm-v1", "diff-v2"};

static drt_status parse_config(cfg_t *c, drt_model *m, int *n_q_heads, int *n_kv_heads) {
    drt_model_info *I = &m->info;
    cJSON *mt = cJSON_GetObjectItemCaseSensitive(c->root, "model_type");
    if (!cJSON_IsString(mt))
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: missing field \"model_type\" (expected \"llama\", \"diffllama\", "
                             "\"diff_transformer_v1\" or \"diff_transformer_v2\")", c->path);
    const char *t = mt->valuestring;
    if (strcmp(t, "llama") == 0) {
        I->arch = DRT_ARCH_TRANSFORMER;
        I->layout = DRT_LAYOUT_HF_LLAMA;
    } else if (strcmp(t, "diffllama") == 0) {
        I->arch = DRT_ARCH_DIFF_V1;
        I->layout = DRT_LAYOUT_HF_DIFFLLAMA;
    } else if (strcmp(t, "diff_transformer_v1") == 0) {
        I->arch = DRT_ARCH_DIFF_V1;
        I->layout = DRT_LAYOUT_UNILM_V1;
    } else if (strcmp(t, "diff_transformer_v2") == 0) {
        I->arch = DRT_ARCH_DIFF_V2;
        I->layout = DRT_LAYOUT_DIFF_V2;
    } else {
        return drt_set_error(DRT_ERR_UNSUPPORTED,
                             "%s: model_type \"%s\" is not supported (supported: llama, diffllama, "
                             "diff_transformer_v1, diff_transformer_v2)", c->path, t);
    }
    I->arch_name = arch_names[I->arch];
    I->layout_name = layout_names[I->layout];

    drt_status s;
    int heads, kv, hd;
    if ((s = cfg_int(c, "vocab_size", 1, 0, &I->vocab)) != DRT_OK) return s;
    if ((s = cfg_int(c, "hidden_size", 1, 0, &I->dim)) != DRT_OK) return s;
    if ((s = cfg_int(c, "intermediate_size", 1, 0, &I->ffn)) != DRT_OK) return s;
    if ((s = cfg_int(c, "num_hidden_layers", 1, 0, &I->n_layers)) != DRT_OK) return s;
    if ((s = cfg_int(c, "num_attention_heads", 1, 0, &heads)) != DRT_OK) return s;
    if ((s = cfg_int(c, "num_key_value_heads", 0, heads, &kv)) != DRT_OK) return s;
    int hd_default = heads ? I->dim / heads : 0;
    if (I->layout == DRT_LAYOUT_UNILM_V1 && heads) hd_default = I->dim / heads / 2;
    if ((s = cfg_int(c, "head_dim", 0, hd_default, &hd)) != DRT_OK) return s;
    if ((s = cfg_int(c, "max_position_embeddings", 0, 2048, &I->max_ctx)) != DRT_OK) return s;
    if ((s = cfg_bool(c, "tie_word_embeddings", 0, &I->tied_embeddings)) != DRT_OK) return s;
    const char *pos[] = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                         "num_attention_heads", "num_key_value_heads", "head_dim"};
    int vals[] = {I->vocab, I->dim, I->ffn, I->n_layers, heads, kv, hd};
    for (int i = 0; i < 7; i++)
        if (vals[i] <= 0)
            return drt_set_error(DRT_ERR_FORMAT, "%s: field \"%s\" must be > 0", c->path, pos[i]);
    if (hd % 2)
        return drt_set_error(DRT_ERR_FORMAT, "%s: head_dim %d must be even for RoPE", c->path, hd);
    int b;
    if (cfg_bool(c, "attention_bias", 0, &b) != DRT_OK || b)
        return drt_set_error(DRT_ERR_UNSUPPORTED, "%s: attention_bias=true is not supported", c->path);
    if (cfg_bool(c, "mlp_bias", 0, &b) != DRT_OK || b)
        return drt_set_error(DRT_ERR_UNSUPPORTED, "%s: mlp_bias=true is not supported", c->path);
    cJSON *act = cJSON_GetObjectItemCaseSensitive(c->root, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0))
        return drt_set_error(DRT_ERR_UNSUPPORTED, "%s: hidden_act must be \"silu\"", c->path);
    double eps;
    if ((s = num_field(c->path, c->root, "rms_norm_eps", 0, 1e-6, &eps)) != DRT_OK) return s;
    m->rms_eps = (float)eps;
    m->gn_eps = I->layout == DRT_LAYOUT_UNILM_V1 ? 1e-5f : (float)eps;
    I->bos_id = cfg_token(c, "bos_token_id");
    I->eos_id = cfg_token(c, "eos_token_id");
    *n_q_heads = heads;
    *n_kv_heads = kv;

    switch (I->layout) {
    case DRT_LAYOUT_HF_LLAMA:
        if (heads % kv)
            return drt_set_error(DRT_ERR_FORMAT,
                                 "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                                 c->path, heads, kv);
        I->n_heads = heads, I->n_kv_groups = kv, I->kv_m = 1, I->dk = I->dv = hd;
        break;
    case DRT_LAYOUT_HF_DIFFLLAMA:
        if (heads % 2 || kv % 2)
            return drt_set_error(DRT_ERR_UNSUPPORTED,
                                 "%s: DiffLlama needs even num_attention_heads and num_key_value_heads "
                                 "(got %d and %d): with an odd kv head count both maps of a diff-head "
                                 "would read the same kv head, which this loader does not pair",
                                 c->path, heads, kv);
        if (heads % kv)
            return drt_set_error(DRT_ERR_FORMAT,
                                 "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                                 c->path, heads, kv);
        I->n_heads = heads / 2, I->n_kv_groups = kv / 2, I->kv_m = 2, I->dk = hd, I->dv = 2 * hd;
        break;
    case DRT_LAYOUT_UNILM_V1:
        if (heads % kv)
            return drt_set_error(DRT_ERR_FORMAT,
                                 "%s: num_attention_heads %d (diff-heads) is not a multiple of "
                                 "num_key_value_heads %d", c->path, heads, kv);
        I->n_heads = heads, I->n_kv_groups = kv, I->kv_m = 2, I->dk = hd, I->dv = 2 * hd;
        break;
    case DRT_LAYOUT_DIFF_V2:
        if (heads % 2 || (heads / 2) % kv)
            return drt_set_error(DRT_ERR_FORMAT,
                                 "%s: DIFF V2 needs num_attention_heads %d even and query heads 2j, 2j+1 "
                                 "in one GQA group (num_attention_heads/2 a multiple of "
                                 "num_key_value_heads %d)", c->path, heads, kv);
        I->n_heads = heads / 2, I->n_kv_groups = kv, I->kv_m = 1, I->dk = I->dv = hd;
        break;
    }
    return rope_setup(c, m, hd);
}

drt_status drt_model_load(const char *dir, drt_model **out) {
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_model_load: out is NULL");
    *out = NULL;
    if (!dir || !*dir) return drt_set_error(DRT_ERR_INVALID_ARG, "no model directory given");
    drt_model *m = calloc(1, sizeof *m);
    if (!m) return drt_set_error(DRT_ERR_OOM, "out of memory");
    snprintf(m->dir, sizeof m->dir, "%s", dir);

    char cpath[600];
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    char *text = NULL;
    size_t len = 0;
    drt_status s = drt_read_text_file(cpath, &text, &len);
    cfg_t c = {cpath, NULL};
    if (s == DRT_OK) {
        c.root = cJSON_ParseWithLength(text, len);
        if (!c.root || !cJSON_IsObject(c.root)) {
            const char *at = cJSON_GetErrorPtr();
            long off = (at && text && at >= text && at <= text + len) ? (long)(at - text) : -1;
            s = drt_set_error(DRT_ERR_FORMAT, "%s: not a JSON object (parse error near byte %ld)",
                              cpath, off);
        }
    }
    int nq = 0, nkv = 0;
    if (s == DRT_OK) s = parse_config(&c, m, &nq, &nkv);
    cJSON_Delete(c.root);
    free(text);
    if (s == DRT_OK) s = drt_st_set_open_dir(dir, &m->st);
    if (s != DRT_OK) {
        drt_model_free(m);
        return s;
    }
    drt_model_info *I = &m->info;
    ld_t L = {m, ""};
    snprintf(L.st_name, sizeof L.st_name, "%s/model.safetensors", dir);
    m->layers = calloc((size_t)I->n_layers, sizeof *m->layers);
    m->lambda_v = calloc((size_t)I->n_layers, sizeof(float));
    m->lambda_init_v = calloc((size_t)I->n_layers, sizeof(float));
    if (!m->layers || !m->lambda_v || !m->lambda_init_v) s = drt_set_error(DRT_ERR_OOM, "out of memory");
    if (s == DRT_OK) s = load_as_is(&L, &m->embed, "model.embed_tokens.weight", I->vocab, I->dim);
    if (s == DRT_OK) s = load_f32_vec(&L, &m->final_norm, "model.norm.weight", I->dim);
    if (s == DRT_OK) {
        if (I->tied_embeddings)
            m->lm_head = (drt_host_weight){.type = m->embed.type, .nd = 2, .ne = {I->vocab, I->dim},
                                           .data = m->embed.data};
        else
            s = load_as_is(&L, &m->lm_head, "lm_head.weight", I->vocab, I->dim);
        snprintf(m->lm_head.name, sizeof m->lm_head.name, "%s",
                 I->tied_embeddings ? "lm_head (tied)" : "lm_head.weight");
    }
    if (s == DRT_OK) s = load_layers(&L, &c, nq, nkv);
    if (s != DRT_OK) {
        drt_model_free(m);
        return s;
    }
    I->weight_dtype = m->embed.type;
    I->n_params = 0;
    for (int f = 0; f < m->st.n_files; f++)
        for (int i = 0; i < m->st.files[f].n_tensors; i++) {
            const drt_st_tensor *t = &m->st.files[f].tensors[i];
            int64_t n = 1;
            for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
            I->n_params += n;
        }
    I->lambda = I->arch == DRT_ARCH_DIFF_V1 ? m->lambda_v : NULL;
    I->lambda_init = I->arch == DRT_ARCH_DIFF_V1 ? m->lambda_init_v : NULL;
    *out = m;
    return DRT_OK;
}

drt_status drt_model_get_info(const drt_model *m, drt_model_info *out) {
    if (!m || !out)
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_model_get_info: %s is NULL",
                             m ? "out" : "m");
    *out = m->info;
    return DRT_OK;
}
