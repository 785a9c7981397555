/* Bad checkpoints and bad arguments: each must give one clear error (the
 * expected status, a message naming the file/field/tensor) and no crash.
 * Every case starts from a copy of the hf_llama_gqa fixture with one thing
 * broken. The messages are printed so the issue note can list them. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "diffrt/diffrt.h"
#include "drt_test.h"
#include "safetensors.h"

#define BASE DRT_FIXTURES_DIR "/hf_llama_gqa"

static char *read_all(const char *path, size_t *len) {
    char *t = NULL;
    if (drt_read_text_file(path, &t, len) != DRT_OK) return NULL;
    return t;
}

/* Offset of the first byte of m that could act on a terminal (a C0 control,
 * DEL, a C1 control U+0080..U+009F, a byte that is not UTF-8), or -1. */
static long raw_control_at(const char *m) {
    const unsigned char *u = (const unsigned char *)m;
    for (size_t i = 0; u[i];) {
        unsigned c = u[i];
        size_t len = c < 0x80                 ? 1
                     : c >= 0xc2 && c <= 0xdf ? 2
                     : c >= 0xe0 && c <= 0xef ? 3
                     : c >= 0xf0 && c <= 0xf4 ? 4
                                              : 0;
        if (c < 0x20 || c == 0x7f || len == 0 || (c == 0xc2 && u[i + 1] >= 0x80 && u[i + 1] <= 0x9f)) return (long)i;
        for (size_t j = 1; j < len; j++)
            if ((u[i + j] & 0xc0) != 0x80) return (long)i;
        i += len;
    }
    return -1;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, n, f);
    fclose(f);
}

/* dst: the tensors of the checkpoint src, with `drop` left out, `reshape`
 * declared with its first dim halved and `oddshape` stored as a (1) vector
 * holding NaN (each NULL: none) */
static void copy_weights(const char *src, const char *dst, const char *drop, const char *reshape,
                         const char *oddshape) {
    drt_st_file f;
    if (drt_st_open(src, &f) != DRT_OK) return;
    drt_st_write_tensor *w = calloc((size_t)f.n_tensors, sizeof *w);
    static const float nan_val = (float)NAN;
    int k = 0;
    for (int i = 0; i < f.n_tensors; i++) {
        const drt_st_tensor *t = &f.tensors[i];
        if (drop && strcmp(t->name, drop) == 0) continue;
        w[k] = (drt_st_write_tensor){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(w[k].shape, t->shape, sizeof w[k].shape);
        if (reshape && strcmp(t->name, reshape) == 0) w[k].shape[0] /= 2;
        if (oddshape && strcmp(t->name, oddshape) == 0) {
            w[k].ndim = 1;
            w[k].shape[0] = 1;
            w[k].data = &nan_val;
        }
        k++;
    }
    drt_st_write(dst, w, k);
    free(w);
    drt_st_close(&f);
}

/* Makes DRT_TMP_DIR/merr_<name>/ with the given config text (NULL: none)
 * and a model.safetensors with tensor `drop` left out and tensor `reshape`
 * declared with its first dim halved (NULL: unchanged); copy = 0 writes none. */
static void make_dir(char *dir, size_t n, const char *name, const char *config, int copy, const char *drop,
                     const char *reshape) {
    snprintf(dir, n, "%s/merr_%s", DRT_TMP_DIR, name);
    mkdir(dir, 0755);
    char p[1200];
    snprintf(p, sizeof p, "%s/config.json", dir);
    remove(p);
    if (config) write_file(p, config, strlen(config));
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    remove(p);
    if (copy) copy_weights(BASE "/model.safetensors", p, drop, reshape, NULL);
}

/* the base config with one field replaced (value NULL: removed) */
static char *config_with(const char *key, const char *json_value) {
    size_t len;
    char *text = read_all(BASE "/config.json", &len);
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) return NULL;
    cJSON_DeleteItemFromObjectCaseSensitive(root, key);
    if (json_value) cJSON_AddItemToObject(root, key, cJSON_Parse(json_value));
    char *out = cJSON_Print(root);
    cJSON_Delete(root);
    return out;
}

typedef struct {
    const char *name;
    const char *key, *value; /* config change; key NULL = unchanged */
    const char *raw_config;  /* replaces config.json text when non-NULL */
    int no_config, no_weights;
    const char *drop, *reshape;
    drt_status want;
    const char *must_say[2]; /* substrings of the message */
    const char *prepend;     /* put right after the base config's opening brace */
} load_case;

#define LC_CFG(name, prepend, ...)                                                                                     \
    { name, NULL, NULL, NULL, 0, 0, NULL, NULL, DRT_ERR_FORMAT, {__VA_ARGS__}, prepend }

static const load_case LOAD_CASES[] = {
    {"config_not_json",
     NULL,
     NULL,
     "{ \"model_type\": \"llama\", ",
     0,
     0,
     NULL,
     NULL,
     DRT_ERR_FORMAT,
     {"config.json", "JSON"},
     NULL},
    {"config_array",
     NULL,
     NULL,
     "[1, 2, 3]",
     0,
     0,
     NULL,
     NULL,
     DRT_ERR_FORMAT,
     {"config.json: expected a JSON object, got an array", NULL},
     NULL},
    {"config_string",
     NULL,
     NULL,
     "\"llama\"",
     0,
     0,
     NULL,
     NULL,
     DRT_ERR_FORMAT,
     {"config.json: expected a JSON object, got a string", NULL},
     NULL},
    {"config_number",
     NULL,
     NULL,
     "4",
     0,
     0,
     NULL,
     NULL,
     DRT_ERR_FORMAT,
     {"config.json: expected a JSON object, got a number", NULL},
     NULL},
    /* one reading, the one Python's json and HF make: a key twice (HF takes
     * the last: 4 layers where cJSON's first lookup gave the fixture's 2) or a
     * key cut short by a NUL is refused, naming the key and where it is */
    LC_CFG("dup_top_key", "\"num_hidden_layers\": 4,",
           "config.json: duplicate key \"num_hidden_layers\" (at $.num_hidden_layers)"),
    LC_CFG("dup_nested_key", "\"quantization_config\": {\"bits\": 4, \"bits\": 8},",
           "config.json: duplicate key \"bits\"", "(at $.quantization_config.bits)"),
    LC_CFG("dup_deep_key", "\"x\": [0, {\"a\": {\"b\": 1, \"b\": 1}}],", "duplicate key \"b\" (at $.x[1].a.b)"),
    LC_CFG("nul_in_key", "\"num_hidden_layers\\u0000junk\": 4,", "config.json: key \"num_hidden_layers\\u0000junk\"",
           "holds a NUL"),
    LC_CFG("nul_in_value", "\"torch_dtype\": \"bf\\u000016\",", "config.json: string \"bf\\u000016\"", "holds a NUL"),
    /* strings of the file are shown escaped: no raw control reaches a terminal */
    {"model_type_esc",
     "model_type",
     "\"gpt2\\u001b[2J\\u009b1m\\u0085\"",
     NULL,
     0,
     0,
     NULL,
     NULL,
     DRT_ERR_UNSUPPORTED,
     {"model_type \"gpt2\\x1b[2J\\u009b1m\\u0085\"", NULL},
     NULL},
    {"model_type_raw_bytes",
     "model_type",
     "\"gpt2\xc2\x9b\xff\xe2\x80\xae\"",
     NULL,
     0,
     0,
     NULL,
     NULL,
     DRT_ERR_UNSUPPORTED,
     {"model_type \"gpt2\\u009b\\xff\\u202e\"", NULL},
     NULL},
    {"config_missing", NULL, NULL, NULL, 1, 0, NULL, NULL, DRT_ERR_IO, {"config.json", NULL}, NULL},
    {"no_hidden_size",
     "hidden_size",
     NULL,
     NULL,
     0,
     0,
     NULL,
     NULL,
     DRT_ERR_FORMAT,
     {"config.json", "hidden_size"},
     NULL},
    {"hidden_size_string",
     "hidden_size",
     "\"64\"",
     NULL,
     0,
     0,
     NULL,
     NULL,
     DRT_ERR_FORMAT,
     {"hidden_size", "integer"},
     NULL},
    {"negative_layers",
     "num_hidden_layers",
     "-2",
     NULL,
     0,
     0,
     NULL,
     NULL,
     DRT_ERR_FORMAT,
     {"num_hidden_layers", NULL},
     NULL},
    {"unknown_model_type",
     "model_type",
     "\"gpt2\"",
     NULL,
     0,
     0,
     NULL,
     NULL,
     DRT_ERR_UNSUPPORTED,
     {"gpt2", "model_type"},
     NULL},
    {"rope_yarn",
     "rope_parameters",
     "{\"rope_type\": \"yarn\", \"factor\": 4.0, \"rope_theta\": 10000.0}",
     NULL,
     0,
     0,
     NULL,
     NULL,
     DRT_ERR_UNSUPPORTED,
     {"yarn", NULL},
     NULL},
    {"heads_not_multiple",
     "num_key_value_heads",
     "3",
     NULL,
     0,
     0,
     NULL,
     NULL,
     DRT_ERR_FORMAT,
     {"num_key_value_heads", NULL},
     NULL},
    {"attention_bias",
     "attention_bias",
     "true",
     NULL,
     0,
     0,
     NULL,
     NULL,
     DRT_ERR_UNSUPPORTED,
     {"attention_bias", NULL},
     NULL},
    {"shape_vs_config",
     "intermediate_size",
     "128",
     NULL,
     0,
     0,
     NULL,
     NULL,
     DRT_ERR_FORMAT,
     {"gate_proj", "config.json implies"},
     NULL},
    {"weights_missing", NULL, NULL, NULL, 0, 1, NULL, NULL, DRT_ERR_IO, {"model.safetensors", NULL}, NULL},
    {"missing_tensor",
     NULL,
     NULL,
     NULL,
     0,
     0,
     "model.norm.weight",
     NULL,
     DRT_ERR_FORMAT,
     {"missing tensor", "model.norm.weight"},
     NULL},
    {"missing_lm_head", NULL, NULL, NULL, 0, 0, "lm_head.weight", NULL, DRT_ERR_FORMAT, {"lm_head.weight", NULL}, NULL},
    {"tensor_shape_wrong",
     NULL,
     NULL,
     NULL,
     0,
     0,
     NULL,
     "model.layers.1.self_attn.k_proj.weight",
     DRT_ERR_FORMAT,
     {"k_proj", "shape"},
     NULL},
};

static void run_load_case(const load_case *c) {
    char dir[1024];
    char *cfg = NULL;
    const char *text = NULL;
    if (c->raw_config) {
        text = c->raw_config;
    } else if (c->prepend) {
        size_t bl;
        char *base = read_all(BASE "/config.json", &bl);
        char *brace = base ? strchr(base, '{') : NULL;
        if (brace) {
            size_t pl = strlen(c->prepend), at = (size_t)(brace - base) + 1;
            cfg = malloc(bl + pl + 1);
            memcpy(cfg, base, at);
            memcpy(cfg + at, c->prepend, pl);
            memcpy(cfg + at + pl, base + at, bl - at + 1);
        }
        free(base);
        text = cfg;
    } else if (!c->no_config) {
        cfg = c->key ? config_with(c->key, c->value) : read_all(BASE "/config.json", &(size_t){0});
        text = cfg;
    }
    make_dir(dir, sizeof dir, c->name, text, !c->no_weights, c->drop, c->reshape);
    free(cfg);
    drt_model *m = NULL;
    drt_status s = drt_model_load(dir, &m);
    const char *msg = drt_last_error();
    printf("%-20s -> %s: %s\n", c->name, drt_status_str(s), s == DRT_OK ? "(loaded)" : msg);
    DRT_CHECK(s == c->want, "case %s: status %s, expected %s (%s)", c->name, drt_status_str(s), drt_status_str(c->want),
              msg);
    for (int i = 0; i < 2; i++)
        if (c->must_say[i])
            DRT_CHECK(s != DRT_OK && strstr(msg, c->must_say[i]), "case %s: message \"%s\" lacks \"%s\"", c->name, msg,
                      c->must_say[i]);
    DRT_CHECK(strchr(msg, '\n') == NULL, "case %s: message spans lines", c->name);
    long raw = raw_control_at(msg);
    DRT_CHECK(raw < 0, "case %s: message holds the raw byte 0x%02x at %ld: %s", c->name,
              raw < 0 ? 0 : (unsigned char)msg[raw], raw, msg);
    DRT_CHECK(m == NULL || s == DRT_OK, "case %s: a model came back with an error", c->name);
    drt_model_free(m);
}

/* config.json read as strictly as transformers reads it (json.loads of the
 * text decoded as utf-8): cJSON alone took a second value after the first,
 * skipped a BOM and took any control byte as blank. Each case is the base
 * config with text put before it, after its opening brace, or after it. */
static void config_json_strict(void) {
    static const struct {
        const char *name, *before, *inside, *after;
        drt_status want;
        const char *says;
    } cases[] = {
        {"config_trailing_data", "", "", "\n{\"num_hidden_layers\": 4}\n", DRT_ERR_FORMAT,
         "config.json: not valid JSON: text after the value at byte"},
        {"config_trailing_blank", "", "", " \r\n\t\n", DRT_OK, NULL},
        {"config_bom", "\xEF\xBB\xBF", "", "", DRT_ERR_FORMAT,
         "config.json: starts with a UTF-8 byte order mark (EF BB BF)"},
        {"config_control_blank", "", "\x0b", "", DRT_ERR_FORMAT,
         "config.json: not valid JSON: control byte 0x0B at byte 1"},
        {"config_control_in_string", "", "\"x\": \"a\x1b[2J\",", "", DRT_ERR_FORMAT,
         "config.json: not valid JSON: control byte 0x1B at byte 8"},
    };
    size_t bl;
    char *base = read_all(BASE "/config.json", &bl);
    if (!base || base[0] != '{') {
        DRT_CHECK(0, "test bug: the base config does not start with '{'");
        free(base);
        return;
    }
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t b = strlen(cases[i].before), n = strlen(cases[i].inside), a = strlen(cases[i].after);
        char *cfg = malloc(b + bl + n + a + 1);
        memcpy(cfg, cases[i].before, b);
        cfg[b] = '{';
        memcpy(cfg + b + 1, cases[i].inside, n);
        memcpy(cfg + b + 1 + n, base + 1, bl - 1);
        memcpy(cfg + b + bl + n, cases[i].after, a + 1);
        char dir[1024];
        make_dir(dir, sizeof dir, cases[i].name, cfg, 1, NULL, NULL);
        free(cfg);
        drt_model *m = NULL;
        drt_status s = drt_model_load(dir, &m);
        const char *msg = drt_last_error();
        printf("%-20s -> %s: %s\n", cases[i].name, drt_status_str(s), s == DRT_OK ? "(loaded)" : msg);
        DRT_CHECK(s == cases[i].want && (!cases[i].says || strstr(msg, cases[i].says)),
                  "case %s: %s: \"%s\", expected %s saying \"%s\"", cases[i].name, drt_status_str(s),
                  s == DRT_OK ? "(loaded)" : msg, drt_status_str(cases[i].want), cases[i].says ? cases[i].says : "");
        drt_model_free(m);
    }
    free(base);
}

/* A model directory ~3000 bytes deep: the whole path is in the message,
 * never cut (messages were formatted into 600- and 1024-byte buffers). */
static void long_path(void) {
    char dir[4096];
    int n = snprintf(dir, sizeof dir, "%s/merr_long_path", DRT_TMP_DIR);
    mkdir(dir, 0755);
    for (int i = 0; n < 3000; i++) {
        n += snprintf(dir + n, sizeof dir - (size_t)n, "/%02d", i);
        memset(dir + n, 'd', 200);
        n += 200;
        dir[n] = 0;
        mkdir(dir, 0755);
    }
    static const struct {
        const char *config; /* NULL: the base config, no weights */
        const char *file, *says;
    } cases[] = {
        {"{\"model_type\": \"gpt2\"}", "/config.json", "model_type \"gpt2\" is not supported"},
        {"{\"a\": 1, \"a\": 2}", "/config.json", "duplicate key \"a\""},
        {NULL, "", "no model.safetensors"},
    };
    for (int i = 0; i < 3; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/config.json", dir);
        size_t bl;
        char *base = cases[i].config ? NULL : read_all(BASE "/config.json", &bl);
        const char *cfg = cases[i].config ? cases[i].config : base;
        if (cfg) write_file(p, cfg, strlen(cfg));
        free(base);
        drt_model *m = NULL;
        drt_status s = drt_model_load(dir, &m);
        const char *msg = drt_last_error();
        char want[4200];
        snprintf(want, sizeof want, "%s%s: ", dir, cases[i].file);
        DRT_CHECK(s != DRT_OK && strstr(msg, want) && strstr(msg, cases[i].says),
                  "long path (%zu bytes), case %d: the message lacks the whole path %s or \"%s\": %s", strlen(dir), i,
                  cases[i].file, cases[i].says, msg);
        printf("%-20s -> %s: %.60s...%s\n", "long_path", drt_status_str(s), msg, msg + strlen(msg) - 60);
        drt_model_free(m);
    }
}

/* DiffLlama with an odd kv-head count: both maps would read one kv head */
static void diffllama_odd_kv(void) {
    char dir[1024];
    size_t len;
    char *text = read_all(DRT_FIXTURES_DIR "/hf_diffllama_gqa/config.json", &len);
    cJSON *root = cJSON_Parse(text);
    free(text);
    cJSON_ReplaceItemInObjectCaseSensitive(root, "num_key_value_heads", cJSON_CreateNumber(1));
    char *cfg = cJSON_Print(root);
    cJSON_Delete(root);
    make_dir(dir, sizeof dir, "diffllama_odd_kv", cfg, 0, NULL, NULL);
    free(cfg);
    drt_model *m = NULL;
    drt_status s = drt_model_load(dir, &m);
    printf("%-20s -> %s: %s\n", "diffllama_odd_kv", drt_status_str(s), drt_last_error());
    DRT_CHECK(s == DRT_ERR_UNSUPPORTED && strstr(drt_last_error(), "num_key_value_heads"), "odd kv heads: %s: %s",
              drt_status_str(s), drt_last_error());
    drt_model_free(m);
}

/* ---- axolotl's llama-differential ------------------------------------------ */

#define AX_BASE DRT_FIXTURES_DIR "/axolotl_gqa"

/* DRT_TMP_DIR/merr_<name>/: base's config with `key` set to the JSON
 * `value` (NULL: removed; a name starting "ax_split" sets split_heads true
 * too), and its tensors with `drop` left out and `oddshape` stored as a (1)
 * vector holding NaN */
static void ax_dir(char *dir, size_t n, const char *name, const char *base, const char *key, const char *value,
                   const char *drop, const char *oddshape) {
    snprintf(dir, n, "%s/merr_%s", DRT_TMP_DIR, name);
    mkdir(dir, 0755);
    char src[1200], p[1200];
    size_t len;
    snprintf(src, sizeof src, "%s/config.json", base);
    char *text = read_all(src, &len);
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (key) cJSON_DeleteItemFromObjectCaseSensitive(root, key);
    if (key && value) cJSON_AddItemToObject(root, key, cJSON_Parse(value));
    if (strncmp(name, "ax_split_", 9) == 0 && strcmp(name, "ax_split_str") != 0)
        cJSON_ReplaceItemInObjectCaseSensitive(root, "split_heads", cJSON_CreateTrue());
    char *cfg = cJSON_Print(root);
    cJSON_Delete(root);
    snprintf(p, sizeof p, "%s/config.json", dir);
    remove(p);
    write_file(p, cfg, strlen(cfg));
    free(cfg);
    snprintf(src, sizeof src, "%s/model.safetensors", base);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    remove(p);
    copy_weights(src, p, drop, NULL, oddshape);
}

static void axolotl_errors(void) {
    static const struct {
        const char *name, *key, *value, *drop, *oddshape;
        drt_status want;
        const char *says[2];
    } cases[] = {
        {"ax_head_dim", "head_dim", "8", NULL, NULL, DRT_ERR_FORMAT, {"hidden_size / num_attention_heads", "(8)"}},
        {"ax_heads_uneven", "num_attention_heads", "3", NULL, NULL, DRT_ERR_FORMAT, {"(64 / 3)", "whole number"}},
        {"ax_split_odd_kv", "num_key_value_heads", "1", NULL, NULL, DRT_ERR_FORMAT, {"split_heads needs even", NULL}},
        {"ax_split_str", "split_heads", "\"yes\"", NULL, NULL, DRT_ERR_FORMAT, {"\"split_heads\"", NULL}},
        {"ax_subln_num", "sublayer_norm", "1", NULL, NULL, DRT_ERR_FORMAT, {"\"sublayer_norm\"", NULL}},
        {"ax_mirror_null", "mirror_weights", "null", NULL, NULL, DRT_ERR_FORMAT, {"\"mirror_weights\" is null", NULL}},
        {"ax_scale_num", "diffrt_output_scale", "1", NULL, NULL, DRT_ERR_FORMAT, {"\"diffrt_output_scale\"", NULL}},
        {"ax_no_lambda_init",
         NULL,
         NULL,
         "model.layers.1.self_attn.lambda_init",
         NULL,
         DRT_ERR_FORMAT,
         {"missing tensor \"model.layers.1.self_attn.lambda_init\"", NULL}},
        {"ax_lambda_init_1d",
         NULL,
         NULL,
         NULL,
         "model.layers.0.self_attn.lambda_init",
         DRT_ERR_FORMAT,
         {"has shape (1) but config.json implies ()", NULL}},
        {"ax_no_subln",
         NULL,
         NULL,
         "model.layers.0.self_attn.subln.weight",
         NULL,
         DRT_ERR_FORMAT,
         {"missing tensor \"model.layers.0.self_attn.subln.weight\"", NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[1024];
        ax_dir(dir, sizeof dir, cases[i].name, AX_BASE, cases[i].key, cases[i].value, cases[i].drop, cases[i].oddshape);
        drt_model *m = NULL;
        drt_status s = drt_model_load(dir, &m);
        const char *msg = drt_last_error();
        printf("%-20s -> %s: %s\n", cases[i].name, drt_status_str(s), s == DRT_OK ? "(loaded)" : msg);
        DRT_CHECK(s == cases[i].want, "case %s: status %s (%s)", cases[i].name, drt_status_str(s), msg);
        for (int k = 0; k < 2; k++)
            if (cases[i].says[k])
                DRT_CHECK(s != DRT_OK && strstr(msg, cases[i].says[k]), "case %s: message \"%s\" lacks \"%s\"",
                          cases[i].name, msg, cases[i].says[k]);
        DRT_CHECK(strchr(msg, '\n') == NULL, "case %s: message spans lines", cases[i].name);
        drt_model_free(m);
    }
    /* lambda_init holding NaN, stored 0-dim */
    {
        char dir[1024];
        ax_dir(dir, sizeof dir, "ax_lambda_init_nan", AX_BASE, NULL, NULL, NULL, NULL);
        /* the same tensors, layer 1's lambda_init a 0-dim NaN */
        char p[1200];
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        drt_st_file f;
        if (drt_st_open(AX_BASE "/model.safetensors", &f) == DRT_OK) {
            drt_st_write_tensor *w = calloc((size_t)f.n_tensors, sizeof *w);
            static const float nan_val = (float)NAN;
            for (int i = 0; i < f.n_tensors; i++) {
                const drt_st_tensor *t = &f.tensors[i];
                w[i] = (drt_st_write_tensor){t->name, t->dtype, t->ndim, {0}, t->data};
                memcpy(w[i].shape, t->shape, sizeof w[i].shape);
                if (strcmp(t->name, "model.layers.1.self_attn.lambda_init") == 0) w[i].data = &nan_val;
            }
            remove(p);
            drt_st_write(p, w, f.n_tensors);
            free(w);
            drt_st_close(&f);
        }
        drt_model *m = NULL;
        drt_status s = drt_model_load(dir, &m);
        printf("%-20s -> %s: %s\n", "ax_lambda_init_nan", drt_status_str(s), drt_last_error());
        DRT_CHECK(s == DRT_ERR_FORMAT && strstr(drt_last_error(), "lambda_init\" is not finite"), "nan lambda_init: %s",
                  drt_last_error());
        drt_model_free(m);
    }
    /* the override key belongs to llama-differential alone */
    {
        char dir[1024];
        ax_dir(dir, sizeof dir, "ax_scale_on_llama", BASE, "diffrt_output_scale", "true", NULL, NULL);
        drt_model *m = NULL;
        drt_status s = drt_model_load(dir, &m);
        printf("%-20s -> %s: %s\n", "ax_scale_on_llama", drt_status_str(s), drt_last_error());
        DRT_CHECK(s == DRT_ERR_FORMAT && strstr(drt_last_error(), "applies to model_type \"llama-differential\" only"),
                  "diffrt_output_scale on llama: %s", drt_last_error());
        drt_model_free(m);
    }
}

/* prefill logits of the model in dir on ref (T tokens of expected.safetensors) */
static int ax_logits(const char *dir, const int32_t *ids, int T, float *out, drt_model_info *info) {
    drt_model *m = NULL;
    drt_session *s = NULL;
    drt_session_opts so = {.backend = "ref", .max_ctx = T + 1};
    int ok = drt_model_load(dir, &m) == DRT_OK && drt_session_create(m, &so, &s) == DRT_OK &&
             drt_session_forward(s, ids, T, out, 1) == DRT_OK;
    if (ok && info) drt_model_get_info(m, info);
    DRT_CHECK(ok, "%s: %s", dir, drt_last_error());
    drt_session_free(s);
    drt_model_free(m);
    return ok;
}

/* The (1 - lambda_init) scale: no "mirror_weights" key applies it, and
 * "diffrt_output_scale" overrides that either way. Each variant is compared
 * with the family's own output (expected.safetensors). */
static void axolotl_output_scale(void) {
    static const struct {
        const char *name, *base, *key, *value;
        int want_scale, matches;
    } cases[] = {
        {"ax_scale_default", AX_BASE, NULL, NULL, 0, 1},
        {"ax_no_mirror_key", AX_BASE, "mirror_weights", NULL, 1, 0},
        {"ax_override_off", AX_BASE, "diffrt_output_scale", "false", 0, 1},
        {"ax_override_on", AX_BASE, "diffrt_output_scale", "true", 1, 0},
        {"ax_old_default", DRT_FIXTURES_DIR "/axolotl_scale_2501", NULL, NULL, 1, 1},
        {"ax_old_override_off", DRT_FIXTURES_DIR "/axolotl_scale_2501", "diffrt_output_scale", "false", 0, 0},
        {"ax_old_mirror_key", DRT_FIXTURES_DIR "/axolotl_scale_2501", "mirror_weights", "false", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[1024], ep[1200];
        ax_dir(dir, sizeof dir, cases[i].name, cases[i].base, cases[i].key, cases[i].value, NULL, NULL);
        snprintf(ep, sizeof ep, "%s/expected.safetensors", cases[i].base);
        drt_st_file ex;
        if (drt_st_open(ep, &ex) != DRT_OK) {
            DRT_CHECK(0, "%s: %s", ep, drt_last_error());
            continue;
        }
        const drt_st_tensor *tok = drt_st_find(&ex, "tokens"), *lp = drt_st_find(&ex, "logits_prefill");
        int T = (int)tok->shape[0];
        int64_t n = (int64_t)lp->nbytes / 4;
        float *lg = malloc(sizeof(float) * (size_t)n);
        drt_model_info I;
        if (ax_logits(dir, tok->data, T, lg, &I)) {
            double e = drt_nmse(lg, lp->data, n);
            printf("%-20s -> output scale %s, NMSE vs the family's output %.3e\n", cases[i].name,
                   I.out_scale ? "1 - lambda_init" : "none", e);
            DRT_CHECK(I.out_scale == cases[i].want_scale, "%s: out_scale %d, expected %d", cases[i].name, I.out_scale,
                      cases[i].want_scale);
            DRT_CHECK(cases[i].matches ? e <= 1e-6 : e > 1e-4, "%s: NMSE %.3e, expected %s", cases[i].name, e,
                      cases[i].matches ? "a match" : "a mismatch");
        }
        free(lg);
        drt_st_close(&ex);
    }
}

/* run-time argument errors on a good model */
static void forward_errors(void) {
    drt_model *m = NULL;
    drt_session *s = NULL;
    if (drt_model_load(BASE, &m) != DRT_OK) {
        DRT_CHECK(0, "base fixture: %s", drt_last_error());
        return;
    }
    drt_session_opts so = {.backend = "cpu", .max_ctx = 8};
    DRT_CHECK(drt_session_create(m, &so, &s) == DRT_OK, "session: %s", drt_last_error());
    if (!s) goto out;
    float *lg = malloc(sizeof(float) * 256 * 8);
    int32_t big[2] = {3, 256}, neg[1] = {-1}, ok[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    drt_status st = drt_session_forward(s, big, 2, lg, 0);
    printf("%-20s -> %s: %s\n", "token_ge_vocab", drt_status_str(st), drt_last_error());
    DRT_CHECK(st == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), "256"), "id 256 of 256: %s", drt_last_error());
    DRT_CHECK(drt_session_pos(s) == 0, "a rejected forward moved the position");
    st = drt_session_forward(s, neg, 1, lg, 0);
    DRT_CHECK(st == DRT_ERR_INVALID_ARG, "id -1: %s", drt_last_error());
    st = drt_session_forward(s, ok, 9, lg, 0);
    printf("%-20s -> %s: %s\n", "context_overflow", drt_status_str(st), drt_last_error());
    DRT_CHECK(st == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), "context"), "9 tokens into 8: %s",
              drt_last_error());
    st = drt_session_forward(s, ok, 0, lg, 0);
    DRT_CHECK(st == DRT_ERR_INVALID_ARG, "0 tokens accepted");
    free(lg);
    drt_session_free(s);
    s = NULL;
    drt_session_opts bad = {.backend = "nosuch"};
    st = drt_session_create(m, &bad, &s);
    printf("%-20s -> %s: %s\n", "unknown_backend", drt_status_str(st), drt_last_error());
    DRT_CHECK(st == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), "nosuch"), "backend nosuch: %s", drt_last_error());
    drt_session_opts baddev = {.backend = "cpu", .device = "7"};
    st = drt_session_create(m, &baddev, &s);
    DRT_CHECK(st == DRT_ERR_INVALID_ARG, "cpu device 7 accepted");
out:
    drt_model_free(m);
}

/* drt_model_eos_ids: config.json's eos_token_id and generation_config.json's,
 * distinct, in file order. Each case is the base model with config.json's
 * eos_token_id replaced (NULL: removed) and a generation_config.json
 * (NULL: none; "<dir>": a directory by that name). */
static void eos_ids(void) {
    static const struct {
        const char *name;
        const char *eos; /* config.json's eos_token_id, as JSON */
        const char *gen; /* generation_config.json's text */
        drt_status want;
        int eos_id;       /* drt_model_info.eos_id */
        const char *says; /* DRT_OK: drt_model_eos_ids' ids ("2,5"); else in the message */
    } C[] = {
        {"int_no_gen", "2", NULL, DRT_OK, 2, "2"},
        {"none", NULL, NULL, DRT_OK, -1, ""},
        {"list_no_gen", "[7, 3, 7, 9]", NULL, DRT_OK, 7, "7,3,9"},
        {"list_and_gen", "[2, 5]", "{\"bos_token_id\": 1, \"eos_token_id\": [5, 7, 2, 9], \"do_sample\": true}", DRT_OK,
         2, "2,5,7,9"},
        {"gen_int", "2", "{\"eos_token_id\": 255}", DRT_OK, 2, "2,255"},
        {"gen_only", NULL, "{\"eos_token_id\": [4, 4]}", DRT_OK, -1, "4"},
        {"gen_null", "2", "{\"eos_token_id\": null}", DRT_OK, 2, "2"},
        {"gen_empty_list", "2", "{\"eos_token_id\": []}", DRT_OK, 2, "2"},
        {"gen_no_eos", "2", "{\"temperature\": 0.6}", DRT_OK, 2, "2"},
        {"gen_past_vocab", "2", "{\"eos_token_id\": [3, 256]}", DRT_ERR_FORMAT, 0,
         "generation_config.json: field \"eos_token_id[1]\" is 256, not below vocab_size 256"},
        {"config_past_vocab", "[2, 300]", NULL, DRT_ERR_FORMAT, 0,
         "/config.json: field \"eos_token_id[1]\" is 300, not below vocab_size 256"},
        {"gen_negative", "2", "{\"eos_token_id\": -1}", DRT_ERR_FORMAT, 0,
         "generation_config.json: field \"eos_token_id\" is -1, allowed 0..2147483647"},
        {"gen_string", "2", "{\"eos_token_id\": [\"</s>\"]}", DRT_ERR_FORMAT, 0,
         "generation_config.json: field \"eos_token_id[0]\" is a string"},
        {"gen_bad_json", "2", "{\"eos_token_id\": [3,", DRT_ERR_FORMAT, 0, "generation_config.json: not valid JSON"},
        {"gen_not_object", "2", "[3]", DRT_ERR_FORMAT, 0,
         "generation_config.json: expected a JSON object, got an array"},
        {"gen_duplicate_key", "2", "{\"eos_token_id\": 3, \"eos_token_id\": 4}", DRT_ERR_FORMAT, 0,
         "generation_config.json: duplicate key \"eos_token_id\""},
        {"gen_directory", "2", "<dir>", DRT_ERR_IO, 0, "generation_config.json: not a regular file"},
    };
    char dir[1024], p[1200];
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "eos_%s", C[i].name);
        char *cfg = config_with("eos_token_id", C[i].eos);
        make_dir(dir, sizeof dir, name, cfg, 1, NULL, NULL);
        free(cfg);
        snprintf(p, sizeof p, "%s/generation_config.json", dir);
        remove(p);
        if (C[i].gen && strcmp(C[i].gen, "<dir>") == 0)
            mkdir(p, 0755);
        else if (C[i].gen)
            write_file(p, C[i].gen, strlen(C[i].gen));
        drt_model *m = NULL;
        drt_status s = drt_model_load(dir, &m);
        const char *msg = drt_last_error();
        printf("%-20s -> %s: %s\n", name, drt_status_str(s), s == DRT_OK ? "(loaded)" : msg);
        DRT_CHECK(s == C[i].want, "eos %s: status %s, expected %s (%s)", C[i].name, drt_status_str(s),
                  drt_status_str(C[i].want), msg);
        if (C[i].want != DRT_OK)
            DRT_CHECK(s != DRT_OK && strstr(msg, C[i].says) && strstr(msg, dir), "eos %s: message \"%s\" lacks \"%s\"",
                      C[i].name, msg, C[i].says);
        if (s == DRT_OK) {
            drt_model_info I;
            drt_model_get_info(m, &I);
            int32_t ids[8];
            for (int k = 0; k < 8; k++) ids[k] = -5;
            int n = drt_model_eos_ids(m, ids, 8);
            char got[128] = "";
            for (int k = 0; k < n && k < 8; k++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%d", k ? "," : "", ids[k]);
            DRT_CHECK(strcmp(got, C[i].says) == 0 && (n >= 8 || ids[n] == -5), "eos %s: %d ids \"%s\", want \"%s\"",
                      C[i].name, n, got, C[i].says);
            DRT_CHECK(I.eos_id == C[i].eos_id, "eos %s: info.eos_id %d, want %d", C[i].name, I.eos_id, C[i].eos_id);
            /* a short buffer gets the first cap ids and the whole count */
            int32_t one[2] = {-5, -5};
            DRT_CHECK(drt_model_eos_ids(m, one, 1) == n && one[0] == (n ? ids[0] : -5) && one[1] == -5, "eos %s: cap 1",
                      C[i].name);
            DRT_CHECK(drt_model_eos_ids(m, NULL, 0) == n, "eos %s: count only", C[i].name);
            DRT_CHECK(drt_model_eos_ids(m, NULL, 1) == -1 && drt_model_eos_ids(m, one, -1) == -1,
                      "eos %s: NULL ids or cap < 0 accepted", C[i].name);
        }
        drt_model_free(m);
        remove(p);
    }
    DRT_CHECK(drt_model_eos_ids(NULL, NULL, 0) == -1 && strstr(drt_last_error(), "m is NULL"), "NULL model");

    /* a list longer than 1024 entries */
    char *cfg = config_with("eos_token_id", "2");
    make_dir(dir, sizeof dir, "eos_long_list", cfg, 1, NULL, NULL);
    free(cfg);
    char *gen = malloc(32 + 1025 * 4);
    size_t gl = (size_t)sprintf(gen, "{\"eos_token_id\": [");
    for (int k = 0; k < 1025; k++) gl += (size_t)sprintf(gen + gl, "%s%d", k ? "," : "", k % 200);
    sprintf(gen + gl, "]}");
    snprintf(p, sizeof p, "%s/generation_config.json", dir);
    write_file(p, gen, strlen(gen));
    free(gen);
    drt_model *m = NULL;
    drt_status s = drt_model_load(dir, &m);
    printf("%-20s -> %s: %s\n", "eos_long_list", drt_status_str(s), drt_last_error());
    DRT_CHECK(s == DRT_ERR_FORMAT && strstr(drt_last_error(), "\"eos_token_id\" lists 1025 ids, at most 1024"),
              "eos long list: %s", drt_last_error());
    drt_model_free(m);
    remove(p);
}

int main(void) {
    for (size_t i = 0; i < sizeof LOAD_CASES / sizeof LOAD_CASES[0]; i++) run_load_case(&LOAD_CASES[i]);
    eos_ids();
    config_json_strict();
    diffllama_odd_kv();
    axolotl_errors();
    axolotl_output_scale();
    long_path();
    forward_errors();
    return drt_test_summary("test_model_errors");
}
