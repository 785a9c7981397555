/* config.json (and generation_config.json) into a drt_model's info: every
 * field range-checked against CFG_INT_RANGES / CFG_NUM_RANGES before it is
 * converted from JSON's double, the layout chosen from model_type (and
 * axolotl's and diff-mlx's own fields), the eos ids, RoPE's table. Every
 * mismatch is one line naming the file and the field. The tensors the
 * config implies are looked up later (layouts.c). */
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

/* ---- config.json ----------------------------------------------------- */

/* Allowed range of each integer field. The bounds sit far above every real
 * checkpoint (Llama 3.1 405B: hidden 16384, ffn 53248, 126 layers, 128 heads,
 * head_dim 128, vocab 128256, 131072 positions; Llama 4 Scout: 10M positions)
 * and low enough that every product the loader and the graph form from them
 * (heads x head_dim <= 2^24, vocab x hidden <= 2^44, layers x per-layer
 * state) stays far from int64 overflow and fits the int fields of
 * drt_model_info. Nested keys (rope_scaling) are listed by their own name. */
typedef struct {
    const char *key;
    int64_t lo, hi;
} cfg_int_range;

static const cfg_int_range CFG_INT_RANGES[] = {
    {"vocab_size", 1, 1 << 24},
    {"hidden_size", 1, 1 << 20},
    {"intermediate_size", 1, 1 << 22},
    {"num_hidden_layers", 1, 4096},
    {"num_attention_heads", 1, 4096},
    {"num_key_value_heads", 1, 4096},
    {"head_dim", 2, 4096},
    {"max_position_embeddings", 1, 1 << 24},
    {"bos_token_id", 0, INT32_MAX}, /* also each entry of a list */
    {"eos_token_id", 0, INT32_MAX},
    {"original_max_position_embeddings", 1, 1 << 24}, /* rope_scaling (llama3) */
    /* diff-mlx's config.json "model" object */
    {"dim", 1, 1 << 20},
    {"n_layers", 1, 4096},
    {"n_heads_vanilla", 1, 4096},
    {"qk_head_dim", 2, 4096},
    {"mlp_intermediate", 1, 1 << 22},
    {"block_size", 1, 1 << 24},
};

/* Allowed range (lo, hi] of each real-valued field: finite, positive, and
 * small enough that the conversion to float is defined (a double beyond
 * FLT_MAX converted to float is undefined behaviour). */
typedef struct {
    const char *key;
    double lo, hi;
} cfg_num_range;

static const cfg_num_range CFG_NUM_RANGES[] = {
    {"rope_theta", 0, 1e12},       {"rms_norm_eps", 0, 1},
    {"factor", 1e-3, 65536}, /* rope_scaling: inv_freq / factor stays a float */
    {"low_freq_factor", 0, 65536}, {"high_freq_factor", 0, 65536},
    {"rope_base", 0, 1e12},        {"rms_eps", 0, 1}, /* diff-mlx */
};

typedef struct {
    const char *path;
    cJSON *root;
} cfg_t;

static const cfg_int_range *int_range(const char *key) {
    for (size_t i = 0; i < sizeof CFG_INT_RANGES / sizeof CFG_INT_RANGES[0]; i++)
        if (strcmp(CFG_INT_RANGES[i].key, key) == 0) return &CFG_INT_RANGES[i];
    return NULL;
}

static const cfg_num_range *num_range(const char *key) {
    for (size_t i = 0; i < sizeof CFG_NUM_RANGES / sizeof CFG_NUM_RANGES[0]; i++)
        if (strcmp(CFG_NUM_RANGES[i].key, key) == 0) return &CFG_NUM_RANGES[i];
    return NULL;
}

static const char *json_kind(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsArray(v)) return "a list";
    if (cJSON_IsObject(v)) return "an object";
    if (cJSON_IsNull(v)) return "null";
    return "not a number";
}

/* The JSON value v of field `name` as an integer in r. The double is compared
 * with the bounds before any conversion, so -1, 2.5, 1e300 or an infinity
 * never reach an integer cast. */
static drt_status int_value(const char *path, const char *name, const cJSON *v, const cfg_int_range *r, int64_t *out) {
    if (!cJSON_IsNumber(v))
        return drt_set_error(DRT_ERR_FORMAT, "%s: field \"%s\" is %s, expected an integer in %lld..%lld", path, name,
                             json_kind(v), (long long)r->lo, (long long)r->hi);
    double d = v->valuedouble;
    if (!(d >= (double)r->lo && d <= (double)r->hi))
        return drt_set_error(DRT_ERR_FORMAT, "%s: field \"%s\" is %.15g, allowed %lld..%lld", path, name, d,
                             (long long)r->lo, (long long)r->hi);
    if (d != floor(d))
        return drt_set_error(DRT_ERR_FORMAT, "%s: field \"%s\" is %.15g, expected an integer in %lld..%lld", path, name,
                             d, (long long)r->lo, (long long)r->hi);
    *out = (int64_t)d;
    return DRT_OK;
}

/* Integer field `key` of obj (shown as `name`), within its CFG_INT_RANGES
 * entry; absent or null gives dflt unless required. */
static drt_status get_int(const char *path, const cJSON *obj, const char *key, const char *name, int required,
                          int64_t dflt, int64_t *out) {
    const cfg_int_range *r = int_range(key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        if (required)
            return drt_set_error(DRT_ERR_FORMAT, "%s: missing field \"%s\" (expected an integer in %lld..%lld)", path,
                                 name, (long long)r->lo, (long long)r->hi);
        *out = dflt;
        return DRT_OK;
    }
    return int_value(path, name, v, r, out);
}

static drt_status cfg_int(cfg_t *c, const char *key, int required, int64_t dflt, int *out) {
    int64_t v;
    drt_status s = get_int(c->path, c->root, key, key, required, dflt, &v);
    if (s == DRT_OK) *out = (int)v; /* every range in the table fits an int */
    return s;
}

/* Real-valued field `key` of obj (shown as `name`): finite and within its
 * CFG_NUM_RANGES entry; absent or null gives dflt unless required. */
static drt_status num_field(const char *path, const cJSON *obj, const char *key, const char *name, int required,
                            double dflt, double *out) {
    const cfg_num_range *r = num_range(key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        if (required)
            return drt_set_error(DRT_ERR_FORMAT, "%s: missing field \"%s\" (expected a number in (%g, %g])", path, name,
                                 r->lo, r->hi);
        *out = dflt;
        return DRT_OK;
    }
    if (!cJSON_IsNumber(v))
        return drt_set_error(DRT_ERR_FORMAT, "%s: field \"%s\" is %s, expected a number in (%g, %g]", path, name,
                             json_kind(v), r->lo, r->hi);
    double d = v->valuedouble;
    if (!(d > r->lo && d <= r->hi)) /* also false for NaN */
        return drt_set_error(DRT_ERR_FORMAT, "%s: field \"%s\" is %g, allowed (%g, %g]", path, name, d, r->lo, r->hi);
    *out = d;
    return DRT_OK;
}

static drt_status cfg_bool(cfg_t *c, const char *key, int dflt, int *out) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(c->root, key);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return DRT_OK;
    }
    if (!cJSON_IsBool(v)) return drt_set_error(DRT_ERR_FORMAT, "%s: field \"%s\" must be true or false", c->path, key);
    *out = cJSON_IsTrue(v);
    return DRT_OK;
}

/* bos/eos: an integer, a list of integers (the first is used; every entry is
 * checked) or null/absent (-1) */
static drt_status cfg_token(cfg_t *c, const char *key, int *out) {
    const cfg_int_range *r = int_range(key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->root, key);
    int64_t id = -1;
    *out = -1;
    if (!v || cJSON_IsNull(v)) return DRT_OK;
    if (cJSON_IsArray(v)) {
        int i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            char name[64];
            int64_t x;
            snprintf(name, sizeof name, "%s[%d]", key, i);
            drt_status s = int_value(c->path, name, e, r, &x);
            if (s != DRT_OK) return s;
            if (i++ == 0) id = x;
        }
    } else {
        drt_status s = int_value(c->path, key, v, r, &id);
        if (s != DRT_OK) return s;
    }
    *out = (int)id;
    return DRT_OK;
}

/* ---- eos ids: config.json, then generation_config.json ------------------ */

#define EOS_LIST_MAX 1024 /* entries of one eos_token_id list (Llama 3 has 3) */

/* Appends to m->eos_ids the ids of root's "eos_token_id" (an integer, a list
 * of integers, null or absent) that it lacks, in file order. Each is an
 * integer in CFG_INT_RANGES and below vocab_size (parse_config has set it). */
static drt_status add_eos_ids(const char *path, const cJSON *root, drt_model *m) {
    const cfg_int_range *r = int_range("eos_token_id");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
    if (!v || cJSON_IsNull(v)) return DRT_OK;
    int list = cJSON_IsArray(v), n = list ? cJSON_GetArraySize(v) : 1;
    if (n > EOS_LIST_MAX)
        return drt_set_error(DRT_ERR_FORMAT, "%s: field \"eos_token_id\" lists %d ids, at most %d", path, n,
                             EOS_LIST_MAX);
    if (n == 0) return DRT_OK;
    int32_t *ids = realloc(m->eos_ids, sizeof *ids * (size_t)(m->n_eos + n)); /* <= 2 * EOS_LIST_MAX */
    if (!ids) return drt_set_error(DRT_ERR_OOM, "out of memory");
    m->eos_ids = ids;
    const cJSON *e = list ? v->child : v;
    for (int i = 0; i < n && e; i++, e = e->next) {
        char name[64];
        int64_t x;
        if (list)
            snprintf(name, sizeof name, "eos_token_id[%d]", i);
        else
            snprintf(name, sizeof name, "eos_token_id");
        drt_status s = int_value(path, name, e, r, &x);
        if (s != DRT_OK) return s;
        if (x >= m->info.vocab)
            return drt_set_error(DRT_ERR_FORMAT, "%s: field \"%s\" is %lld, not below vocab_size %d", path, name,
                                 (long long)x, m->info.vocab);
        int k = 0;
        while (k < m->n_eos && ids[k] != (int32_t)x) k++;
        if (k == m->n_eos) ids[m->n_eos++] = (int32_t)x;
    }
    return DRT_OK;
}

/* DIR/generation_config.json, optional, read under config.json's rules (a
 * regular file, symbolic links followed, the text-file size limit, strict
 * JSON, no duplicate keys, an object): its eos ids join m's. Absent (no
 * directory entry): nothing. */
static drt_status read_generation_config(const char *dir, drt_model *m) {
    char *path = drt_path_join(dir, "generation_config.json");
    if (!path) return drt_set_error(DRT_ERR_OOM, "out of memory");
    struct stat sb;
    if (lstat(path, &sb) != 0 && errno == ENOENT) {
        free(path);
        return DRT_OK;
    }
    char *text = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    drt_status s = drt_read_text_file(path, &text, &len);
    if (s == DRT_OK) s = drt_json_parse(text, len, path, NULL, &root);
    if (s == DRT_OK && !cJSON_IsObject(root))
        s = drt_set_error(DRT_ERR_FORMAT, "%s: expected a JSON object, got %s", path,
                          cJSON_IsArray(root)    ? "an array"
                          : cJSON_IsNumber(root) ? "a number"
                                                 : json_kind(root));
    if (s == DRT_OK) s = add_eos_ids(path, root, m);
    cJSON_Delete(root);
    free(text);
    free(path);
    return s;
}

int drt_model_eos_ids(const drt_model *m, int32_t *ids, int cap) {
    if (!m || cap < 0 || (!ids && cap > 0)) {
        drt_set_error(DRT_ERR_INVALID_ARG, "drt_model_eos_ids: %s",
                      !m        ? "m is NULL"
                      : cap < 0 ? "cap < 0"
                                : "ids is NULL");
        return -1;
    }
    for (int i = 0; i < m->n_eos && i < cap; i++) ids[i] = m->eos_ids[i];
    return m->n_eos;
}

/* ---- RoPE ------------------------------------------------------------ */

/* inv_freq[i] = theta^(-2i/d), then rope_scaling as Hugging Face computes it */
static drt_status rope_setup(cfg_t *c, drt_model *m, int d) {
    cJSON *params = cJSON_GetObjectItemCaseSensitive(c->root, "rope_parameters");
    cJSON *scaling = cJSON_GetObjectItemCaseSensitive(c->root, "rope_scaling");
    const char *sname = "rope_scaling"; /* where the scaling fields are, for messages */
    double theta;
    drt_status s = num_field(c->path, c->root, "rope_theta", "rope_theta", 0, 10000.0, &theta);
    if (s != DRT_OK) return s;
    if (cJSON_IsObject(params)) {
        s = num_field(c->path, params, "rope_theta", "rope_parameters.rope_theta", 0, theta, &theta);
        if (s != DRT_OK) return s;
        if (!cJSON_IsObject(scaling)) {
            scaling = params;
            sname = "rope_parameters";
        }
    } else if (params && !cJSON_IsNull(params)) {
        return drt_set_error(DRT_ERR_FORMAT, "%s: field \"rope_parameters\" must be an object", c->path);
    }
    if (scaling && !cJSON_IsNull(scaling) && !cJSON_IsObject(scaling))
        return drt_set_error(DRT_ERR_FORMAT, "%s: field \"rope_scaling\" must be an object or null", c->path);
    m->rope_theta = (float)theta; /* in (0, 1e12]: representable */
    const char *type = "default";
    if (cJSON_IsObject(scaling)) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(scaling, "rope_type");
        if (!cJSON_IsString(t)) t = cJSON_GetObjectItemCaseSensitive(scaling, "type");
        if (cJSON_IsString(t)) type = t->valuestring;
    }
    m->inv_freq = malloc(sizeof(float) * (size_t)(d / 2)); /* d in 2..4096 */
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
    char nm[64];
    double factor;
    snprintf(nm, sizeof nm, "%s.factor", sname);
    s = num_field(c->path, scaling, "factor", nm, 1, 1.0, &factor);
    if (s != DRT_OK) return s;
    if (strcmp(type, "linear") == 0) {
        m->info.rope_scaling = "linear";
        for (int i = 0; i < d / 2; i++) m->inv_freq[i] = (float)(m->inv_freq[i] / factor);
        return DRT_OK;
    }
    if (strcmp(type, "llama3") == 0) {
        double lo, hi;
        int64_t old_i;
        snprintf(nm, sizeof nm, "%s.low_freq_factor", sname);
        if ((s = num_field(c->path, scaling, "low_freq_factor", nm, 1, 0, &lo)) != DRT_OK) return s;
        snprintf(nm, sizeof nm, "%s.high_freq_factor", sname);
        if ((s = num_field(c->path, scaling, "high_freq_factor", nm, 1, 0, &hi)) != DRT_OK) return s;
        snprintf(nm, sizeof nm, "%s.original_max_position_embeddings", sname);
        if ((s = get_int(c->path, scaling, "original_max_position_embeddings", nm, 1, 0, &old_i)) != DRT_OK) return s;
        if (!(hi > lo))
            return drt_set_error(DRT_ERR_FORMAT,
                                 "%s: llama3 rope_scaling needs high_freq_factor > low_freq_factor "
                                 "(got %g and %g)",
                                 c->path, hi, lo);
        m->info.rope_scaling = "llama3";
        double old = (double)old_i;
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
    char tb[64]; /* the type is file text: one line, bounded */
    return drt_set_error(DRT_ERR_UNSUPPORTED,
                         "%s: rope_scaling type \"%s\" is not supported (supported: linear, llama3)", c->path,
                         drt_printable(type, tb, sizeof tb));
}

const char *const ld_arch_names[] = {"transformer", "diff-v1", "diff-v2"};
const char *const ld_layout_names[] = {"hf-llama",     "hf-diffllama", "unilm-v1",   "diff-v2",
                                       "axolotl-diff", "mlx-diff",     "mlx-vanilla"};

/* A boolean field that, when present, must be one (null included: no writer
 * of these files writes null). */
static drt_status opt_bool(cfg_t *c, const char *key, int *present, int *value) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->root, key);
    *present = v != NULL;
    *value = cJSON_IsTrue(v);
    if (v && !cJSON_IsBool(v))
        return drt_set_error(DRT_ERR_FORMAT, "%s: field \"%s\" is %s, expected true or false", c->path, key,
                             cJSON_IsNumber(v) ? "a number" : json_kind(v));
    return DRT_OK;
}

/* axolotl's "llama-differential" (docs/checkpoints.md): the per-head width is
 * hidden_size / num_attention_heads; split_heads picks the layout,
 * sublayer_norm the GROUPNORM; the (1 - lambda_init) output scale is applied
 * by the versions of late Dec 2024 to 10 Jan 2025, whose config.json has no
 * "mirror_weights" key, unless "diffrt_output_scale" says otherwise. */
static drt_status axolotl_config(cfg_t *c, drt_model_info *I, int heads, int kv, int hd) {
    drt_status s;
    if (I->dim % heads || hd != I->dim / heads)
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: llama-differential takes the head width from hidden_size / "
                             "num_attention_heads (%d / %d), which must be a whole number equal to head_dim (%d)",
                             c->path, I->dim, heads, hd);
    int split, mirror, present;
    if ((s = cfg_bool(c, "split_heads", 0, &split)) != DRT_OK) return s;
    if ((s = cfg_bool(c, "sublayer_norm", 1, &I->subnorm)) != DRT_OK) return s;
    if ((s = opt_bool(c, "mirror_weights", &present, &mirror)) != DRT_OK) return s;
    I->out_scale = !present;
    int over;
    if ((s = opt_bool(c, "diffrt_output_scale", &present, &over)) != DRT_OK) return s;
    if (present) I->out_scale = over;
    if (heads % kv)
        return drt_set_error(DRT_ERR_FORMAT, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                             c->path, heads, kv);
    if (!split) {
        I->n_heads = heads, I->n_kv_groups = kv, I->kv_m = 2, I->dk = I->dv = hd;
        return DRT_OK;
    }
    if (heads % 2 || kv % 2)
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: split_heads needs even num_attention_heads and num_key_value_heads (got %d and %d)",
                             c->path, heads, kv);
    I->n_heads = heads / 2, I->n_kv_groups = kv / 2, I->kv_m = 2, I->dk = hd, I->dv = 2 * hd;
    return DRT_OK;
}

/* ---- diff-mlx (guygrigsby/diff-mlx) -------------------------------------
 * config.json is save_run_metadata's {"model": ModelConfig, "train": ...},
 * with no model_type. Weights: checkpoint.py's save_checkpoint names them
 * "model.<param path>" (beside "opt.<path>" optimizer state); older files
 * have the bare path. The variant is not in config.json (train.py writes it
 * to variant.txt): a "diff" model has blocks.N.attn.lambda_q1, "vanilla"
 * has not. Math (model.py): pre-norm blocks, RMSNorm with a learned `scale`
 * and eps model.rms_eps everywhere (subln too), SwiGLU gate/up/down, RoPE
 * mx.fast.rope(traditional=True) = interleaved pairs, tied embeddings
 * (Transformer ties whatever tie_embeddings says). diff: the authors' V1 as
 * MHA: q/k heads 2h, 2h+1 are diff-head h's two maps, V (H, 2 dk), lambda =
 * exp(q1.k1) - exp(q2.k2) + lambda_init(layer), out = (1 - lambda_init)
 * subln(o1 - lambda o2). vanilla: plain MHA. */

/* config.json is diff-mlx's: no model_type, a "model" object with
 * n_heads_vanilla */
static int is_mlx_config(const cJSON *root) {
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(root, "model");
    return !cJSON_GetObjectItemCaseSensitive(root, "model_type") && cJSON_IsObject(mo) &&
           cJSON_GetObjectItemCaseSensitive(mo, "n_heads_vanilla") != NULL;
}

/* Reads config.json's "model" object. The variant (and with it arch, layout
 * and the head split) waits for the tensors: ld_mlx_variant. */
static drt_status parse_mlx_config(cfg_t *c, drt_model *m) {
    drt_model_info *I = &m->info;
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(c->root, "model");
    const char *p = c->path;
    int64_t v[7];
    static const char *const keys[7] = {"vocab_size",       "dim",         "n_layers",  "n_heads_vanilla",
                                        "mlp_intermediate", "qk_head_dim", "block_size"};
    char nm[64];
    drt_status s;
    for (int i = 0; i < 7; i++) {
        snprintf(nm, sizeof nm, "model.%s", keys[i]);
        if ((s = get_int(p, mo, keys[i], nm, i < 6, 2048, &v[i])) != DRT_OK) return s;
    }
    I->vocab = (int)v[0], I->dim = (int)v[1], I->ffn = (int)v[4], I->n_layers = (int)v[2];
    I->max_ctx = (int)v[6];
    int nh = (int)v[3], hd = (int)v[5];
    /* model.py asserts dim == n_heads_vanilla * qk_head_dim (both variants) */
    if ((int64_t)nh * hd != I->dim)
        return drt_set_error(DRT_ERR_FORMAT, "%s: model.n_heads_vanilla %d x model.qk_head_dim %d != model.dim %d", p,
                             nh, hd, I->dim);
    if (hd % 2) return drt_set_error(DRT_ERR_FORMAT, "%s: model.qk_head_dim %d must be even for RoPE", p, hd);
    double eps, theta;
    if ((s = num_field(p, mo, "rms_eps", "model.rms_eps", 0, 1e-5, &eps)) != DRT_OK) return s;
    if ((s = num_field(p, mo, "rope_base", "model.rope_base", 0, 10000.0, &theta)) != DRT_OK) return s;
    m->rms_eps = m->gn_eps = (float)eps; /* subln is RMSNorm(2 dk, eps=rms_eps) */
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(mo, "tie_embeddings");
    if (t && !cJSON_IsBool(t))
        return drt_set_error(DRT_ERR_FORMAT, "%s: field \"model.tie_embeddings\" must be true or false", p);
    I->tied_embeddings = 1; /* Transformer uses tok_embed.weight.T either way */
    const cJSON *amp = cJSON_GetObjectItemCaseSensitive(mo, "amp_dtype");
    if (amp && !(cJSON_IsString(amp) &&
                 (strcmp(amp->valuestring, "float32") == 0 || strcmp(amp->valuestring, "bfloat16") == 0)))
        return drt_set_error(DRT_ERR_FORMAT, "%s: field \"model.amp_dtype\" must be \"float32\" or \"bfloat16\"", p);
    I->bos_id = I->eos_id = -1;          /* diff-mlx's config names no special tokens */
    I->n_heads = nh, I->dk = I->dv = hd; /* ld_mlx_variant finishes the split */
    m->rope_theta = (float)theta;
    m->info.rope_scaling = "none";
    m->inv_freq = malloc(sizeof(float) * (size_t)(hd / 2));
    if (!m->inv_freq) return drt_set_error(DRT_ERR_OOM, "out of memory");
    for (int i = 0; i < hd / 2; i++) {
        float e = (float)(2 * i) / (float)hd;
        m->inv_freq[i] = (float)(1.0 / pow((double)(float)theta, (double)e));
    }
    return DRT_OK;
}

/* model_type "diff_llama" names two unrelated families, neither run here:
 * one line naming the family and why. */
static drt_status refuse_diff_llama(const cfg_t *c) {
    const cJSON *r = c->root;
    if (cJSON_GetObjectItemCaseSensitive(r, "attn_family"))
        return drt_set_error(DRT_ERR_UNSUPPORTED,
                             "%s: model_type \"diff_llama\" with \"attn_family\" is peihaowang's differential "
                             "Llama, which has no public modeling code: its tensor layout and math are unknown, "
                             "so diffrt does not load it",
                             c->path);
    if (cJSON_GetObjectItemCaseSensitive(r, "num_kv_heads"))
        return drt_set_error(DRT_ERR_UNSUPPORTED,
                             "%s: model_type \"diff_llama\" with \"num_kv_heads\" is amazingvince/diff-llama, "
                             "which is not differential attention (it subtracts each key's score from its "
                             "neighbour's and has no causal mask): diffrt does not run it",
                             c->path);
    return drt_set_error(DRT_ERR_UNSUPPORTED,
                         "%s: model_type \"diff_llama\" is used by two unrelated families diffrt does not run "
                         "(peihaowang's, with \"attn_family\": no public modeling code; amazingvince/diff-llama, "
                         "with \"num_kv_heads\": not differential attention), and this config has neither key",
                         c->path);
}

static drt_status parse_config(cfg_t *c, drt_model *m, int *n_q_heads, int *n_kv_heads) {
    drt_model_info *I = &m->info;
    if (is_mlx_config(c->root)) return parse_mlx_config(c, m);
    cJSON *mt = cJSON_GetObjectItemCaseSensitive(c->root, "model_type");
    if (!cJSON_IsString(mt))
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: missing field \"model_type\" (expected \"llama\", \"diffllama\", "
                             "\"diff_transformer_v1\", \"diff_transformer_v2\" or \"llama-differential\"; "
                             "diff-mlx's config.json has none but a \"model\" object with \"n_heads_vanilla\")",
                             c->path);
    const char *t = mt->valuestring;
    if (strcmp(t, "diff_llama") == 0) return refuse_diff_llama(c);
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
    } else if (strcmp(t, "llama-differential") == 0) {
        I->arch = DRT_ARCH_DIFF_V1;
        I->layout = DRT_LAYOUT_AXOLOTL_DIFF;
    } else {
        char tb[64]; /* file text: one line, bounded */
        return drt_set_error(DRT_ERR_UNSUPPORTED,
                             "%s: model_type \"%s\" is not supported (supported: llama, diffllama, "
                             "diff_transformer_v1, diff_transformer_v2, llama-differential)",
                             c->path, drt_printable(t, tb, sizeof tb));
    }
    I->arch_name = ld_arch_names[I->arch];
    I->layout_name = ld_layout_names[I->layout];

    /* every integer is range-checked by cfg_int (CFG_INT_RANGES) before it
     * is converted; the cross checks below then only see bounded values */
    drt_status s;
    int heads, kv, hd;
    if ((s = cfg_int(c, "vocab_size", 1, 0, &I->vocab)) != DRT_OK) return s;
    if ((s = cfg_int(c, "hidden_size", 1, 0, &I->dim)) != DRT_OK) return s;
    if ((s = cfg_int(c, "intermediate_size", 1, 0, &I->ffn)) != DRT_OK) return s;
    if ((s = cfg_int(c, "num_hidden_layers", 1, 0, &I->n_layers)) != DRT_OK) return s;
    if ((s = cfg_int(c, "num_attention_heads", 1, 0, &heads)) != DRT_OK) return s;
    if ((s = cfg_int(c, "num_key_value_heads", 0, heads, &kv)) != DRT_OK) return s;
    int hd_default = I->dim / heads;
    if (I->layout == DRT_LAYOUT_UNILM_V1) hd_default = I->dim / heads / 2;
    if ((s = cfg_int(c, "head_dim", 0, -1, &hd)) != DRT_OK) return s;
    if (hd < 0) {
        const cfg_int_range *r = int_range("head_dim");
        if (hd_default < r->lo || hd_default > r->hi)
            return drt_set_error(DRT_ERR_FORMAT,
                                 "%s: no field \"head_dim\", and the default hidden_size / "
                                 "num_attention_heads%s = %d is outside %lld..%lld",
                                 c->path, I->layout == DRT_LAYOUT_UNILM_V1 ? " / 2" : "", hd_default, (long long)r->lo,
                                 (long long)r->hi);
        hd = hd_default;
    }
    if ((s = cfg_int(c, "max_position_embeddings", 0, 2048, &I->max_ctx)) != DRT_OK) return s;
    if ((s = cfg_bool(c, "tie_word_embeddings", 0, &I->tied_embeddings)) != DRT_OK) return s;
    if (hd % 2) return drt_set_error(DRT_ERR_FORMAT, "%s: head_dim %d must be even for RoPE", c->path, hd);
    int b;
    if ((s = cfg_bool(c, "attention_bias", 0, &b)) != DRT_OK) return s;
    if (b) return drt_set_error(DRT_ERR_UNSUPPORTED, "%s: attention_bias=true is not supported", c->path);
    if ((s = cfg_bool(c, "mlp_bias", 0, &b)) != DRT_OK) return s;
    if (b) return drt_set_error(DRT_ERR_UNSUPPORTED, "%s: mlp_bias=true is not supported", c->path);
    cJSON *act = cJSON_GetObjectItemCaseSensitive(c->root, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0))
        return drt_set_error(DRT_ERR_UNSUPPORTED, "%s: hidden_act must be \"silu\"", c->path);
    double eps;
    if ((s = num_field(c->path, c->root, "rms_norm_eps", "rms_norm_eps", 0, 1e-6, &eps)) != DRT_OK) return s;
    m->rms_eps = (float)eps; /* in (0, 1]: representable */
    m->gn_eps = I->layout == DRT_LAYOUT_UNILM_V1 ? 1e-5f : (float)eps;
    if ((s = cfg_token(c, "bos_token_id", &I->bos_id)) != DRT_OK) return s;
    if ((s = cfg_token(c, "eos_token_id", &I->eos_id)) != DRT_OK) return s;
    *n_q_heads = heads;
    *n_kv_heads = kv;
    I->subnorm = I->out_scale = I->arch == DRT_ARCH_DIFF_V1; /* axolotl_config decides its own */
    if (I->layout != DRT_LAYOUT_AXOLOTL_DIFF && cJSON_GetObjectItemCaseSensitive(c->root, "diffrt_output_scale"))
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: field \"diffrt_output_scale\" applies to model_type "
                             "\"llama-differential\" only",
                             c->path);

    switch (I->layout) {
    case DRT_LAYOUT_HF_LLAMA:
        if (heads % kv)
            return drt_set_error(DRT_ERR_FORMAT,
                                 "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", c->path,
                                 heads, kv);
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
                                 "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", c->path,
                                 heads, kv);
        I->n_heads = heads / 2, I->n_kv_groups = kv / 2, I->kv_m = 2, I->dk = hd, I->dv = 2 * hd;
        break;
    case DRT_LAYOUT_UNILM_V1:
        if (heads % kv)
            return drt_set_error(DRT_ERR_FORMAT,
                                 "%s: num_attention_heads %d (diff-heads) is not a multiple of "
                                 "num_key_value_heads %d",
                                 c->path, heads, kv);
        I->n_heads = heads, I->n_kv_groups = kv, I->kv_m = 2, I->dk = hd, I->dv = 2 * hd;
        break;
    case DRT_LAYOUT_DIFF_V2:
        if (heads % 2 || (heads / 2) % kv)
            return drt_set_error(DRT_ERR_FORMAT,
                                 "%s: DIFF V2 needs num_attention_heads %d even and query heads 2j, 2j+1 "
                                 "in one GQA group (num_attention_heads/2 a multiple of "
                                 "num_key_value_heads %d)",
                                 c->path, heads, kv);
        I->n_heads = heads / 2, I->n_kv_groups = kv, I->kv_m = 1, I->dk = I->dv = hd;
        break;
    case DRT_LAYOUT_AXOLOTL_DIFF:
        if ((s = axolotl_config(c, I, heads, kv, hd)) != DRT_OK) return s;
        break;
    case DRT_LAYOUT_MLX_DIFF:
    case DRT_LAYOUT_MLX_VANILLA: /* parse_mlx_config */ break;
    }
    return rope_setup(c, m, hd);
}

/* config.json (and generation_config.json) of dir into m: the layout and
 * its sizes; *mlx when it is diff-mlx's */
drt_status ld_read_config(const char *dir, drt_model *m, int *nq, int *nkv, int *mlx) {
    /* the paths in messages are never cut, however long dir is */
    char *cpath = drt_path_join(dir, "config.json");
    if (!cpath) return drt_set_error(DRT_ERR_OOM, "out of memory");
    char *text = NULL;
    size_t len = 0;
    drt_status s = drt_read_text_file(cpath, &text, &len);
    cfg_t c = {cpath, NULL};
    if (s == DRT_OK) {
        s = drt_json_parse(text, len, cpath, NULL, &c.root);
        if (s == DRT_OK && !cJSON_IsObject(c.root)) {
            const cJSON *r = c.root;
            s = drt_set_error(DRT_ERR_FORMAT, "%s: expected a JSON object, got %s", cpath,
                              cJSON_IsArray(r)    ? "an array"
                              : cJSON_IsNumber(r) ? "a number"
                                                  : json_kind(r));
        }
    }
    *mlx = s == DRT_OK && is_mlx_config(c.root);
    if (s == DRT_OK) s = parse_config(&c, m, nq, nkv);
    if (s == DRT_OK) s = add_eos_ids(cpath, c.root, m);
    cJSON_Delete(c.root);
    free(text);
    free(cpath);
    if (s == DRT_OK) s = read_generation_config(dir, m);
    return s;
}
