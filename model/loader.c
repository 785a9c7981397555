/* config.json + safetensors -> drt_model, for the five layouts of docs/design.md
 * section 4. Every mismatch is one line naming the file, field or tensor.
 *
 * A model directory is untrusted input. Every number read from config.json is
 * range-checked against CFG_INT_RANGES / CFG_NUM_RANGES before it is converted
 * from JSON's double; every size derived from one goes through drt_checked.h;
 * and every tensor the config implies is looked up (name and shape) before
 * anything sized from the config is allocated, so the work done before an
 * error is proportional to the checkpoint, not to a number in a file. */
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

/* ---- tensors ----------------------------------------------------------- */

typedef struct {
    drt_model *m;
    char *st_name; /* for messages: DIR/model.safetensors, however long DIR is */
    /* the checking pass: look every tensor up and check its shape, allocate
     * and copy nothing; the loading pass runs only after it succeeded */
    int dry;
    /* by m->st.by_name index: the tensor was looked up (either pass), so
     * the layout uses it; anything else must be harmless (check_strays) */
    unsigned char *used;
    const char *mlx_pre; /* diff-mlx: "model." or "" (older files) */
    /* the checkpoint's pages stay as they are (no drt_st_release): it is
     * read again after the load (drt_checkpoint_open) */
    int keep;
} ld_t;

/* t's pages will not be read again by this load (its data was copied) */
static void release(const ld_t *L, const drt_st_tensor *t) {
    if (!L->keep) drt_st_release(t);
}

static void shape_txt(int nd, const int64_t *ne, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < nd && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, i ? ", %lld" : "%lld", (long long)ne[i]);
    if (o < n) snprintf(buf + o, n - o, ")");
}

/* Finds `name` with exactly the given shape (nd 0, 1 or 2). */
static drt_status get_tensor(ld_t *L, const char *name, int nd, int64_t n0, int64_t n1, const drt_st_tensor **out) {
    int idx = drt_st_set_index(&L->m->st, name);
    const drt_st_tensor *t = idx >= 0 ? L->m->st.by_name[idx] : NULL;
    if (!t) {
        const drt_st_tensor *f = drt_st_set_find_foreign(&L->m->st, name);
        if (f)
            return drt_set_error(DRT_ERR_UNSUPPORTED, "%s: tensor \"%s\" is %s; expected F32, F16 or BF16", L->st_name,
                                 name, f->foreign_dtype);
        return drt_set_error(DRT_ERR_FORMAT, "%s: missing tensor \"%s\"", L->st_name, name);
    }
    if (L->used) L->used[idx] = 1;
    int64_t want[2] = {n0, n1};
    int ok = t->ndim == nd && (nd < 1 || t->shape[0] == n0) && (nd < 2 || t->shape[1] == n1);
    if (!ok) {
        char a[96], b[96];
        shape_txt(t->ndim, t->shape, a, sizeof a);
        shape_txt(nd, want, b, sizeof b);
        return drt_set_error(DRT_ERR_FORMAT, "%s: tensor \"%s\" has shape %s but config.json implies %s", L->st_name,
                             name, a, b);
    }
    if (t->dtype == DRT_I32)
        return drt_set_error(DRT_ERR_FORMAT, "%s: tensor \"%s\" is i32; expected F32, F16 or BF16", L->st_name, name);
    *out = t;
    return DRT_OK;
}

/* As stored. Aligned data (every checkpoint a normal writer makes) is used in
 * place: the weight points into the mapping and the CPU backend reads it
 * there. Data not aligned for its dtype (a header length that puts the data
 * at an odd offset) is copied once into aligned memory and its mapped pages
 * released, so no kernel ever makes a misaligned load and there is still one
 * resident copy. */
static drt_status load_as_is(ld_t *L, drt_host_weight *w, const char *name, int64_t n0, int64_t n1) {
    const drt_st_tensor *t;
    drt_status s = get_tensor(L, name, n1 ? 2 : 1, n0, n1, &t);
    if (s != DRT_OK || L->dry) return s;
    snprintf(w->name, sizeof w->name, "%s", name);
    w->type = t->dtype;
    w->nd = n1 ? 2 : 1;
    w->ne[0] = n0;
    w->ne[1] = n1;
    /* block formats are read a byte at a time: any address will do */
    if ((uintptr_t)t->data % drt_dtype_align(t->dtype) == 0) {
        w->data = t->data;
        w->mapped = t->mapped;
        return DRT_OK;
    }
    void *d = malloc(t->nbytes); /* nbytes == the bytes of n0 x n1 of dtype: the header was checked */
    if (!d) return drt_set_error(DRT_ERR_OOM, "%s: out of memory copying misaligned tensor \"%s\"", L->st_name, name);
    memcpy(d, t->data, t->nbytes);
    release(L, t);
    w->data = w->owned = d;
    return DRT_OK;
}

/* Vectors (norm weights) are converted to f32. */
static drt_status load_f32_vec(ld_t *L, drt_host_weight *w, const char *name, int64_t n0) {
    const drt_st_tensor *t;
    drt_status s = get_tensor(L, name, 1, n0, 0, &t);
    if (s != DRT_OK || L->dry) return s;
    size_t bytes;
    float *d = drt_bytes_ok(n0, sizeof(float), &bytes) ? malloc(bytes) : NULL;
    if (!d) return drt_set_error(DRT_ERR_OOM, "out of memory");
    for (int64_t i = 0; i < n0; i++) d[i] = drt_st_elem_f32(t, i);
    snprintf(w->name, sizeof w->name, "%s", name);
    w->type = DRT_F32;
    w->nd = 1;
    w->ne[0] = n0;
    w->data = w->owned = d;
    return DRT_OK;
}

/* A matrix of `rows` rows of `cols` whose internal row r is source row map[r]. */
static drt_status load_rows(ld_t *L, drt_host_weight *w, const char *name, int64_t rows, int64_t cols,
                            const int64_t *map, int64_t src_rows) {
    const drt_st_tensor *t;
    drt_status s = get_tensor(L, name, 2, src_rows, cols, &t);
    if (s != DRT_OK || L->dry) return s;
    size_t rb, bytes;
    char *d = NULL;
    /* a row of a block format is cols / 32 blocks (the reader made cols a
     * multiple of 32) */
    if (drt_bytes_ok(cols / drt_dtype_block(t->dtype), drt_dtype_size(t->dtype), &rb) && drt_bytes_ok(rows, rb, &bytes))
        d = malloc(bytes);
    if (!d) return drt_set_error(DRT_ERR_OOM, "out of memory");
    for (int64_t r = 0; r < rows; r++) memcpy(d + rb * (size_t)r, (const char *)t->data + rb * (size_t)map[r], rb);
    release(L, t); /* the copy replaces the mapped original: no second resident copy */
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
static int64_t deinterleave(int64_t i, int64_t d) {
    return i < d / 2 ? 2 * i : 2 * (i - d / 2) + 1;
}

/* exp of the dot product rounded to float32, as HF computes it. A sum or an
 * exp beyond the float range becomes what float32 arithmetic gives (0 or
 * infinity) instead of a conversion C leaves undefined; the caller rejects a
 * lambda that is not finite. */
static float dot_exp(const drt_st_tensor *a, const drt_st_tensor *b, int64_t n) {
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (double)drt_st_elem_f32(a, i) * (double)drt_st_elem_f32(b, i);
    if (isnan(acc)) return NAN;
    if (acc > FLT_MAX) return INFINITY;
    if (acc < -FLT_MAX) return 0.0f;
    double e = exp((double)(float)acc);
    return e > FLT_MAX ? INFINITY : (float)e;
}

/* w times s, as an f32 copy (f32, f16, bf16 or a block format): the
 * (1 - lambda_init) output scale of a model without GROUPNORM, folded into
 * its o_proj. */
static drt_status scale_weight(ld_t *L, drt_host_weight *w, float s) {
    int64_t rows = w->ne[0], cols = w->ne[1], n;
    size_t rb = (size_t)(cols / drt_dtype_block(w->type)) * drt_dtype_size(w->type), bytes;
    float *d = drt_mul_ok(rows, cols, &n) && drt_bytes_ok(n, sizeof(float), &bytes) ? malloc(bytes) : NULL;
    if (!d) return drt_set_error(DRT_ERR_OOM, "%s: out of memory scaling \"%s\"", L->st_name, w->name);
    for (int64_t r = 0; r < rows; r++) {
        const char *src = (const char *)w->data + rb * (size_t)r;
        float *y = d + (size_t)(r * cols);
        if (drt_dtype_block(w->type) > 1)
            drt_dequantize_row(src, w->type, y, cols);
        else
            for (int64_t c = 0; c < cols; c++)
                y[c] = w->type == DRT_F32   ? ((const float *)(const void *)src)[c]
                       : w->type == DRT_F16 ? drt_f16_to_f32(((const uint16_t *)(const void *)src)[c])
                                            : drt_bf16_to_f32(((const uint16_t *)(const void *)src)[c]);
        for (int64_t c = 0; c < cols; c++) y[c] *= s;
    }
    /* the copy replaces the original: a mapped one's pages go (as load_rows') */
    if (w->mapped && !w->owned && !L->keep) drt_release_pages(w->data, rb * (size_t)rows);
    free(w->owned);
    w->type = DRT_F32;
    w->data = w->owned = d;
    w->mapped = 0; /* no longer the file's bytes: never to be dropped (DRT_TF_MAPPED) */
    return DRT_OK;
}

/* ---- the model ----------------------------------------------------------- */

void drt_model_destroy(drt_model *m) {
    if (!m) return;
    if (m->layers)
        for (int l = 0; l < m->info.n_layers; l++) {
            drt_layer_weights *lw = &m->layers[l];
            drt_host_weight *ws[] = {&lw->attn_norm, &lw->ffn_norm, &lw->wq, &lw->wk, &lw->wv, &lw->wo,
                                     &lw->w_lambda,  &lw->subln,    &lw->wg, &lw->wu, &lw->wd};
            for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) free_weight(ws[i]);
        }
    free(m->layers);
    free_weight(&m->embed);
    free_weight(&m->final_norm);
    free_weight(&m->lm_head);
    free(m->inv_freq);
    free(m->lambda_v);
    free(m->lambda_init_v);
    free(m->eos_ids);
    drt_st_set_close(&m->st);
    free(m);
}

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
        if ((s = get_tensor(L, nm, 1, dk, 0, dst[i])) != DRT_OK) return s;
    }
    /* axolotl stores lambda_init (0-dim): 0 after a zero-init conversion,
     * rounded in a bf16 file; the others compute it from the layer index */
    const drt_st_tensor *li = NULL;
    if (m->info.layout == DRT_LAYOUT_AXOLOTL_DIFF) {
        snprintf(nm, sizeof nm, "%slambda_init", pre);
        if ((s = get_tensor(L, nm, 0, 0, 0, &li)) != DRT_OK) return s;
    }
    if (L->dry) return DRT_OK;
    lw->lambda_init = li ? drt_st_elem_f32(li, 0) : (float)(0.8 - 0.6 * exp(-0.3 * l));
    if (!isfinite(lw->lambda_init))
        return drt_set_error(DRT_ERR_FORMAT, "%s: tensor \"%s\" is not finite", L->st_name, nm);
    lw->gn_scale = m->info.out_scale ? 1.0f - lw->lambda_init : 1.0f;
    /* no GROUPNORM to carry the scale: o_proj(s x) = (s o_proj) x */
    if (!m->info.subnorm && lw->gn_scale != 1.0f && (s = scale_weight(L, &lw->wo, lw->gn_scale)) != DRT_OK) return s;
    /* HF: exp of the float32 sum, then lambda_1 - lambda_2 + lambda_init */
    lw->lambda = dot_exp(lq1, lk1, dk) - dot_exp(lq2, lk2, dk) + lw->lambda_init;
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
        s = load_as_is(L, &lw->wq, nm, H * dk, D);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.k_proj.weight", pre, l);
        if (s == DRT_OK) s = load_as_is(L, &lw->wk, nm, G * dk, D);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.v_proj.weight", pre, l);
        if (s == DRT_OK) s = load_as_is(L, &lw->wv, nm, G * dv, D);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.o_proj.weight", pre, l);
        if (s == DRT_OK) s = load_as_is(L, &lw->wo, nm, D, H * dv);
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
        s = load_rows(L, &lw->wq, nm, 2 * H * d, D, map, ax ? 2 * H * d : (int64_t)n_q_heads * d);
        r = 0;
        for (int64_t g = 0; map && g < G; g++)
            for (int64_t c2 = 0; c2 < 2; c2++)
                for (int64_t i = 0; i < d; i++) map[r++] = (c2 * G + g) * d + i;
        snprintf(nm, sizeof nm, "%s.%d.self_attn.k_proj.weight", pre, l);
        if (s == DRT_OK) s = load_rows(L, &lw->wk, nm, 2 * G * d, D, map, ax ? 2 * G * d : (int64_t)n_kv_heads * d);
        /* V of group g = [v_g ; v_{g+G}]: the same row order as k (axolotl's
         * split_heads regroups its V so too); axolotl's default layout has one
         * V of width dk per kv head, read by both maps, used as stored */
        snprintf(nm, sizeof nm, "%s.%d.self_attn.v_proj.weight", pre, l);
        if (s == DRT_OK && ax && dv == d)
            s = load_as_is(L, &lw->wv, nm, G * dv, D);
        else if (s == DRT_OK)
            s = load_rows(L, &lw->wv, nm, 2 * G * d, D, map, 2 * G * d);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.o_proj.weight", pre, l);
        if (s == DRT_OK) s = load_as_is(L, &lw->wo, nm, D, H * dv);
        if (s == DRT_OK && ax && I->subnorm) {
            snprintf(nm, sizeof nm, "%s.%d.self_attn.subln.weight", pre, l);
            s = load_f32_vec(L, &lw->subln, nm, dv);
        }
        break;
    }
    case DRT_LAYOUT_UNILM_V1:
    case DRT_LAYOUT_DIFF_V2: {
        int v1 = I->layout == DRT_LAYOUT_UNILM_V1;
        int64_t d = dk;
        /* q: sub-heads 2h, 2h+1 are already diff-head h's two maps; only the
         * interleaved RoPE rows need reordering */
        for (r = 0; map && r < 2 * H * d; r++) map[r] = (r / d) * d + deinterleave(r % d, d);
        snprintf(nm, sizeof nm, "%s.%d.self_attn.q_proj.weight", pre, l);
        s = load_rows(L, &lw->wq, nm, 2 * H * d, D, map, 2 * H * d);
        int64_t krows = G * I->kv_m * d;
        for (r = 0; map && r < krows; r++) map[r] = (r / d) * d + deinterleave(r % d, d);
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
    case DRT_LAYOUT_MLX_DIFF:
    case DRT_LAYOUT_MLX_VANILLA: /* load_mlx_layers */ break;
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
static drt_status load_layers(ld_t *L, int n_q_heads, int n_kv_heads) {
    drt_model *m = L->m;
    drt_model_info *I = &m->info;
    int64_t D = I->dim, F = I->ffn;
    char nm[160];
    drt_layer_weights scratch;
    for (int l = 0; l < I->n_layers; l++) {
        drt_layer_weights *lw = L->dry ? &scratch : &m->layers[l];
        drt_status s;
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        if ((s = load_f32_vec(L, &lw->attn_norm, nm, D)) != DRT_OK) return s;
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
        if ((s = load_f32_vec(L, &lw->ffn_norm, nm, D)) != DRT_OK) return s;
        if ((s = load_attention(L, l, lw, n_q_heads, n_kv_heads)) != DRT_OK) return s;
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.gate_proj.weight", l);
        if ((s = load_as_is(L, &lw->wg, nm, F, D)) != DRT_OK) return s;
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.up_proj.weight", l);
        if ((s = load_as_is(L, &lw->wu, nm, F, D)) != DRT_OK) return s;
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.down_proj.weight", l);
        if ((s = load_as_is(L, &lw->wd, nm, D, F)) != DRT_OK) return s;
    }
    return DRT_OK;
}

/* embedding, final norm, LM head */
static drt_status load_globals(ld_t *L) {
    drt_model *m = L->m;
    drt_model_info *I = &m->info;
    drt_status s = load_as_is(L, &m->embed, "model.embed_tokens.weight", I->vocab, I->dim);
    if (s == DRT_OK && !L->dry && drt_dtype_block(m->embed.type) > 1)
        s = drt_set_error(DRT_ERR_UNSUPPORTED,
                          "%s: tensor \"model.embed_tokens.weight\" is %s: the embedding must be f32, f16 or "
                          "bf16 (diffrt quantize keeps it f16)",
                          L->st_name, drt_dtype_name(m->embed.type));
    if (s == DRT_OK) s = load_f32_vec(L, &m->final_norm, "model.norm.weight", I->dim);
    if (s != DRT_OK) return s;
    if (!I->tied_embeddings) s = load_as_is(L, &m->lm_head, "lm_head.weight", I->vocab, I->dim);
    if (s != DRT_OK || L->dry) return s;
    if (I->tied_embeddings)
        m->lm_head = (drt_host_weight){.type = m->embed.type, .nd = 2, .ne = {I->vocab, I->dim}, .data = m->embed.data};
    snprintf(m->lm_head.name, sizeof m->lm_head.name, "%s", I->tied_embeddings ? "lm_head (tied)" : "lm_head.weight");
    return DRT_OK;
}

static const char *arch_names[] = {"transformer", "diff-v1", "diff-v2"};
static const char *layout_names[] = {"hf-llama",     "hf-diffllama", "unilm-v1",   "diff-v2",
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
 * and the head split) waits for the tensors: mlx_variant. */
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
    I->n_heads = nh, I->dk = I->dv = hd; /* mlx_variant finishes the split */
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

/* The name prefix ("model." or "") and the variant, from the tensors. */
static drt_status mlx_variant(ld_t *L) {
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
    I->arch_name = arch_names[I->arch];
    I->layout_name = layout_names[I->layout];
    return DRT_OK;
}

static drt_status load_mlx_globals(ld_t *L) {
    drt_model *m = L->m;
    drt_model_info *I = &m->info;
    char nm[64];
    snprintf(nm, sizeof nm, "%stok_embed.weight", L->mlx_pre);
    drt_status s = load_as_is(L, &m->embed, nm, I->vocab, I->dim);
    if (s == DRT_OK && !L->dry && drt_dtype_block(m->embed.type) > 1)
        s = drt_set_error(DRT_ERR_UNSUPPORTED, "%s: tensor \"%s\" is %s: the embedding must be f32, f16 or bf16",
                          L->st_name, nm, drt_dtype_name(m->embed.type));
    snprintf(nm, sizeof nm, "%sfinal_norm.scale", L->mlx_pre);
    if (s == DRT_OK) s = load_f32_vec(L, &m->final_norm, nm, I->dim);
    if (s != DRT_OK || L->dry) return s;
    m->lm_head = (drt_host_weight){.type = m->embed.type, .nd = 2, .ne = {I->vocab, I->dim}, .data = m->embed.data};
    snprintf(m->lm_head.name, sizeof m->lm_head.name, "lm_head (tied)");
    return DRT_OK;
}

static drt_status load_mlx_layers(ld_t *L) {
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
        for (int64_t r = 0; r < D; r++) map[r] = (r / dk) * dk + deinterleave(r % dk, dk);
    }
    char pre[96], nm[200];
    drt_layer_weights scratch;
    drt_status s = DRT_OK;
    for (int l = 0; s == DRT_OK && l < I->n_layers; l++) {
        drt_layer_weights *lw = L->dry ? &scratch : &m->layers[l];
        snprintf(pre, sizeof pre, "%sblocks.%d.", L->mlx_pre, l);
#define MLX_NAME(fmt) (snprintf(nm, sizeof nm, "%s" fmt, pre), nm)
        s = load_f32_vec(L, &lw->attn_norm, MLX_NAME("norm_attn.scale"), D);
        if (s == DRT_OK) s = load_f32_vec(L, &lw->ffn_norm, MLX_NAME("norm_mlp.scale"), D);
        if (s == DRT_OK) s = load_rows(L, &lw->wq, MLX_NAME("attn.q_proj.weight"), D, D, map, D);
        if (s == DRT_OK) s = load_rows(L, &lw->wk, MLX_NAME("attn.k_proj.weight"), D, D, map, D);
        if (s == DRT_OK) s = load_as_is(L, &lw->wv, MLX_NAME("attn.v_proj.weight"), D, D);
        if (s == DRT_OK) s = load_as_is(L, &lw->wo, MLX_NAME("attn.o_proj.weight"), D, D);
        if (s == DRT_OK && diff) s = load_f32_vec(L, &lw->subln, MLX_NAME("attn.subln.scale"), dv);
        if (s == DRT_OK && diff) s = load_v1_lambda(L, l, lw, MLX_NAME("attn."));
        if (s == DRT_OK) s = load_as_is(L, &lw->wg, MLX_NAME("mlp.gate.weight"), F, D);
        if (s == DRT_OK) s = load_as_is(L, &lw->wu, MLX_NAME("mlp.up.weight"), F, D);
        if (s == DRT_OK) s = load_as_is(L, &lw->wd, MLX_NAME("mlp.down.weight"), D, F);
#undef MLX_NAME
    }
    free(map);
    return s;
}

/* ---- tensors no layout uses ------------------------------------------- */

/* Tensors a checkpoint may carry beside the model, known to change nothing:
 * the RoPE table older Hugging Face checkpoints stored (diffrt computes it
 * from config.json) and diff-mlx's optimizer state. */
static int harmless_tensor(const drt_model *m, const char *name) {
    static const char inv[] = ".rotary_emb.inv_freq";
    size_t n = strlen(name), k = sizeof inv - 1;
    if (n >= k && strcmp(name + n - k, inv) == 0) return 1;
    int mlx = m->info.layout == DRT_LAYOUT_MLX_DIFF || m->info.layout == DRT_LAYOUT_MLX_VANILLA;
    return mlx && strncmp(name, "opt.", 4) == 0;
}

/* A tied Hugging Face checkpoint that stores lm_head.weight anyway (some
 * converters write both): harmless when it is the embedding, byte for
 * byte; 1 then, 0 when it is no such copy. */
static int hf_tied_head(const drt_model *m, const char *name) {
    drt_layout l = m->info.layout;
    return m->info.tied_embeddings && l != DRT_LAYOUT_MLX_DIFF && l != DRT_LAYOUT_MLX_VANILLA &&
           strcmp(name, "lm_head.weight") == 0;
}
static int tied_copy(const drt_model *m, const drt_st_tensor *t) {
    if (!hf_tied_head(m, t->name)) return 0;
    const drt_st_tensor *e = drt_st_set_find(&m->st, "model.embed_tokens.weight");
    return e && e->dtype == t->dtype && e->ndim == t->ndim && e->shape[0] == t->shape[0] &&
           (t->ndim < 2 || e->shape[1] == t->shape[1]) && e->nbytes == t->nbytes &&
           memcmp(e->data, t->data, t->nbytes) == 0;
}

/* Every tensor of the checkpoint is one the layout read (L->used) or a
 * harmless one: any other means config.json describes another model than
 * the weights (a wrong layout guess must not load silently). */
static drt_status check_strays(ld_t *L) {
    const drt_st_set *st = &L->m->st;
    const char *lname = L->m->info.layout_name;
    char nb[160];
    for (int i = 0; i < st->n_names; i++) {
        const drt_st_tensor *t = st->by_name[i];
        if (L->used[i] || harmless_tensor(L->m, t->name) || tied_copy(L->m, t)) continue;
        if (hf_tied_head(L->m, t->name))
            return drt_set_error(DRT_ERR_FORMAT,
                                 "%s: tensor \"lm_head.weight\" is not a copy of \"model.embed_tokens.weight\", "
                                 "but config.json says tie_word_embeddings: which LM head is meant is ambiguous",
                                 L->st_name);
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: tensor \"%s\" is not part of the %s layout (config.json describes another "
                             "model than the weights?)",
                             L->st_name, drt_printable(t->name, nb, sizeof nb), lname);
    }
    for (int f = 0; f < st->n_files; f++)
        for (int i = 0; i < st->files[f].n_foreign; i++) {
            const drt_st_tensor *t = &st->files[f].foreign[i];
            if (!harmless_tensor(L->m, t->name))
                return drt_set_error(DRT_ERR_FORMAT, "%s: tensor \"%s\" (%s) is not part of the %s layout",
                                     st->files[f].path, drt_printable(t->name, nb, sizeof nb), t->foreign_dtype, lname);
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
    I->arch_name = arch_names[I->arch];
    I->layout_name = layout_names[I->layout];

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

/* an entry named NAME in DIR (lstat: any kind, even a dangling link) */
static int dir_has(const char *dir, const char *name) {
    size_t dl = strlen(dir), nl = strlen(name);
    char *p = malloc(dl + nl + 2);
    if (!p) return 1; /* the open that follows reports it */
    memcpy(p, dir, dl);
    p[dl] = '/';
    memcpy(p + dl + 1, name, nl + 1);
    struct stat sb;
    int has = lstat(p, &sb) == 0 || errno != ENOENT;
    free(p);
    return has;
}

/* The weights: DIR/model.safetensors or its sharded index; a diff-mlx model
 * may instead have the name its trainer writes, DIR/latest.safetensors, when
 * neither of those exists. st_name (room for either name) gets the file's
 * path for messages. */
static drt_status open_weights(const char *dir, int mlx, char *st_name, drt_st_set *out) {
    if (mlx && !dir_has(dir, "model.safetensors") && !dir_has(dir, "model.safetensors.index.json")) {
        memcpy(st_name + strlen(dir), "/latest.safetensors", sizeof "/latest.safetensors");
        if (dir_has(dir, "latest.safetensors")) return drt_st_set_open_file(st_name, out);
        return drt_set_error(DRT_ERR_IO, "%s: no model.safetensors, model.safetensors.index.json or latest.safetensors",
                             dir);
    }
    return drt_st_set_open_dir(dir, out);
}

/* config.json (and generation_config.json) of dir into m: the layout and
 * its sizes; *mlx when it is diff-mlx's */
static drt_status read_config(const char *dir, drt_model *m, int *nq, int *nkv, int *mlx) {
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

/* drt_model_load; with keep, the checkpoint's pages are left as they are
 * (L.keep), and *used_out (when not NULL) gets L.used */
static drt_status load_model(const char *dir, int keep, drt_model **out, unsigned char **used_out) {
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_model_load: out is NULL");
    *out = NULL;
    if (used_out) *used_out = NULL;
    if (!dir || !*dir) return drt_set_error(DRT_ERR_INVALID_ARG, "no model directory given");
    drt_model *m = calloc(1, sizeof *m);
    size_t dl = strlen(dir);
    char *st_name = malloc(dl + sizeof "/latest.safetensors"); /* room for either name */
    if (!m || !st_name) {
        free(m);
        free(st_name);
        return drt_set_error(DRT_ERR_OOM, "out of memory");
    }
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    memcpy(st_name, dir, dl);
    memcpy(st_name + dl, "/model.safetensors", sizeof "/model.safetensors");
    int nq = 0, nkv = 0, mlx = 0;
    drt_status s = read_config(dir, m, &nq, &nkv, &mlx);
    if (s == DRT_OK) s = open_weights(dir, mlx, st_name, &m->st);
    drt_model_info *I = &m->info;
    ld_t L = {m, st_name, 1, NULL, NULL, keep};
    if (s == DRT_OK && mlx) s = mlx_variant(&L);
    if (s == DRT_OK) {
        L.used = calloc((size_t)(m->st.n_names > 0 ? m->st.n_names : 1), 1);
        if (!L.used) s = drt_set_error(DRT_ERR_OOM, "out of memory");
    }
    /* checking pass: every tensor the config implies, with its shape, before
     * anything sized from the config is allocated; then nothing else */
    if (s == DRT_OK) s = mlx ? load_mlx_globals(&L) : load_globals(&L);
    if (s == DRT_OK) s = mlx ? load_mlx_layers(&L) : load_layers(&L, nq, nkv);
    if (s == DRT_OK) s = check_strays(&L);
    if (s == DRT_OK) {
        L.dry = 0;
        m->layers = calloc((size_t)I->n_layers, sizeof *m->layers); /* calloc checks n * size */
        m->lambda_v = calloc((size_t)I->n_layers, sizeof(float));
        m->lambda_init_v = calloc((size_t)I->n_layers, sizeof(float));
        if (!m->layers || !m->lambda_v || !m->lambda_init_v) s = drt_set_error(DRT_ERR_OOM, "out of memory");
    }
    if (s == DRT_OK) s = mlx ? load_mlx_globals(&L) : load_globals(&L);
    if (s == DRT_OK) s = mlx ? load_mlx_layers(&L) : load_layers(&L, nq, nkv);
    /* the element count of each tensor the model uses is its checked byte
     * count over its dtype size; the sum is checked too (an optimizer's
     * state is not the model's) */
    I->n_params = 0;
    for (int i = 0; s == DRT_OK && i < m->st.n_names; i++) {
        const drt_st_tensor *t = m->st.by_name[i];
        int64_t n = (int64_t)(t->nbytes / drt_dtype_size(t->dtype)) * drt_dtype_block(t->dtype);
        if (L.used[i] && !drt_add_ok(I->n_params, n, &I->n_params))
            s = drt_set_error(DRT_ERR_FORMAT, "%s: parameter count overflows int64", dir);
    }
    free(st_name);
    if (s != DRT_OK) {
        free(L.used);
        drt_model_free(m);
        return s;
    }
    if (used_out)
        *used_out = L.used;
    else
        free(L.used);
    /* the matmul weights' dtype (a quantized model keeps its embedding f16) */
    I->weight_dtype = I->n_layers > 0 && m->layers[0].wq.data ? m->layers[0].wq.type : m->embed.type;
    I->embed_dtype = m->embed.type;
    I->lambda = I->arch == DRT_ARCH_DIFF_V1 ? m->lambda_v : NULL;
    I->lambda_init = I->arch == DRT_ARCH_DIFF_V1 ? m->lambda_init_v : NULL;
    *out = m;
    return DRT_OK;
}

drt_status drt_model_load(const char *dir, drt_model **out) {
    return load_model(dir, 0, out, NULL);
}

drt_status drt_checkpoint_open(const char *dir, drt_checkpoint *out) {
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_checkpoint_open: out is NULL");
    memset(out, 0, sizeof *out);
    drt_model *m = NULL;
    drt_status s = load_model(dir, 1, &m, &out->used);
    if (s != DRT_OK) return s;
    out->st = m->st; /* the model's weights point into it or into their own copies: */
    memset(&m->st, 0, sizeof m->st);
    drt_model_free(m); /* ... which go with the model */
    return DRT_OK;
}

void drt_checkpoint_close(drt_checkpoint *c) {
    if (!c) return;
    drt_st_set_close(&c->st);
    free(c->used);
    memset(c, 0, sizeof *c);
}

drt_status drt_model_get_info(const drt_model *m, drt_model_info *out) {
    if (!m || !out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_model_get_info: %s is NULL", m ? "out" : "m");
    *out = m->info;
    return DRT_OK;
}
