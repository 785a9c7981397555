/* drt_quantize_model (include/diffrt/quantize.h) as a library call (issue 42):
 *
 *   - every model directory the loader takes quantizes (q8_0 and q4_0): each
 *     fixture family in tests/fixtures (every directory with a config.json:
 *     HF Llama and DiffLlama, the authors' V1 and V2, axolotl's, diff-mlx's
 *     under both file names, with optimizer state, a tied checkpoint that
 *     stores its lm_head copy), and variants made here of what the loader
 *     accepts and the fixtures lack (a sharded index, a RoPE table, a tied
 *     lm_head copy, an optimizer tensor with a 700-byte name). For each:
 *     the result loads with the weight dtype asked for; it holds exactly
 *     the tensors the source model reads (its element count is the source
 *     model's n_params, so nothing the loader skips is written); each
 *     tensor is the source's bytes or, quantized, within its block's
 *     rounding bound of the source (docs/quantization.md); its prefill
 *     logits are within QBOUND (NMSE) of the source model's;
 *   - the output directory, whole or not at all: a non-empty out_dir is
 *     refused and byte-identical; out_dir = the source however spelled
 *     (trailing slash, "/.", "..", "./", a symlink, a parent) is refused,
 *     with force too, and the source byte-identical; a symlinked out_dir is
 *     refused; an out_dir holding a file the source is read from (through a
 *     symlink) is refused, one holding a hard link of it is replaced and
 *     the source's bytes stay (never truncated); a failure mid-way (a NaN
 *     weight) leaves out_dir as it was and no temp; force replaces the
 *     whole directory; a killed run's temp is removed, with a note.
 * Every check of a directory also looks for temps left beside it. */
#define _GNU_SOURCE /* nftw, FTW_PHYS, readlink, strdup, utimensat */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "diffrt/diffrt.h"
#include "diffrt/quantize.h"
#include "drt_quant.h"
#include "drt_test.h"
#include "safetensors.h"

#define FIX DRT_FIXTURES_DIR
#define TMP DRT_TMP_DIR "/qlib"
#define T_PROMPT 12
/* prefill logits NMSE of the quantized model against the source model: the
 * fixtures' measured worst is 6.3e-4 (q8_0) and 0.124 (q4_0) (see the
 * printed figures); a tensor left out, quantized twice or mis-ordered gives
 * NMSE near 1 or more */
static const double QBOUND[2] = {3e-3, 0.25};
static const drt_dtype TYPES[2] = {DRT_Q8_0, DRT_Q4_0};

#define CHECK_ERR(st, want, must_say, ...)                                                                             \
    do {                                                                                                               \
        drt_status st_ = (st);                                                                                         \
        const char *m_ = drt_last_error();                                                                             \
        DRT_CHECK(st_ == (want) && !strchr(m_, '\n') && strstr(m_, must_say), __VA_ARGS__);                            \
        if (!(st_ == (want) && strstr(m_, must_say)))                                                                  \
            fprintf(stderr, "  got %s \"%s\", want %s holding \"%s\"\n", drt_status_str(st_), m_,                      \
                    drt_status_str(want), must_say);                                                                   \
    } while (0)

/* runs a shell command; 0 when it exits 0 */
static int sh(const char *fmt, const char *a, const char *b) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, fmt, a, b ? b : "");
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- a directory's signature: every entry, its type, link target, bytes --- */

static char *sig_buf;
static size_t sig_len, sig_cap, sig_root;
static void sig_add(const char *s) {
    size_t k = strlen(s);
    if (sig_len + k + 1 > sig_cap) {
        sig_cap = (sig_len + k + 1) * 2;
        sig_buf = realloc(sig_buf, sig_cap);
    }
    memcpy(sig_buf + sig_len, s, k + 1);
    sig_len += k;
}
static uint64_t fnv_file(const char *p) {
    uint64_t h = 1469598103934665603ull;
    FILE *f = fopen(p, "rb");
    int c;
    while (f && (c = getc(f)) != EOF) h = (h ^ (uint64_t)(unsigned char)c) * 1099511628211ull;
    if (f) fclose(f);
    return h;
}
static int sig_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)ftw;
    char line[5000], target[1024] = "";
    if (flag == FTW_SL) {
        ssize_t k = readlink(p, target, sizeof target - 1);
        target[k > 0 ? k : 0] = 0;
    }
    snprintf(line, sizeof line, "%s %o %lld %s %016llx\n", p + sig_root, (unsigned)sb->st_mode, (long long)sb->st_size,
             target, flag == FTW_F ? (unsigned long long)fnv_file(p) : 0ull);
    sig_add(line);
    return 0;
}
static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}
/* a malloc'd text naming every entry under dir (not following symlinks),
 * sorted; "(missing)" when dir is not there */
static char *tree_sig(const char *dir) {
    struct stat sb;
    if (lstat(dir, &sb) != 0) return strdup("(missing)");
    sig_buf = NULL, sig_len = sig_cap = 0, sig_root = strlen(dir);
    sig_add("");
    nftw(dir, sig_one, 16, FTW_PHYS);
    /* sorted lines: readdir's order is no promise */
    int n = 0;
    for (char *c = sig_buf; *c; c++) n += *c == '\n';
    char **lines = calloc((size_t)n + 1, sizeof *lines), *out = calloc(sig_len + 1, 1);
    int i = 0;
    for (char *tok = strtok(sig_buf, "\n"); tok && i < n; tok = strtok(NULL, "\n")) lines[i++] = tok;
    qsort(lines, (size_t)i, sizeof *lines, cmp_str);
    for (int k = 0; k < i; k++) strcat(strcat(out, lines[k]), "\n");
    free(lines);
    free(sig_buf);
    sig_buf = NULL;
    return out;
}

/* entries beside path named ".<its name>." something: temps left behind */
static int temps_beside(const char *path) {
    char dir[4096];
    const char *base;
    if (!drt_split_path(path, dir, sizeof dir, &base)) return -1;
    char pre[600];
    snprintf(pre, sizeof pre, ".%s.", base);
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) n += strncmp(e->d_name, pre, strlen(pre)) == 0;
    if (d) closedir(d);
    return n;
}

/* ---- models --------------------------------------------------------------- */

/* the prefill logits (T_PROMPT x V, malloc'd) of dir on the ref backend */
static float *prefill(const char *dir, int *vocab) {
    drt_model *m = NULL;
    drt_session *s = NULL;
    drt_model_info info;
    float *lg = NULL;
    if (drt_model_load(dir, &m) != DRT_OK || drt_model_get_info(m, &info) != DRT_OK) {
        DRT_CHECK(0, "%s: load: %s", dir, drt_last_error());
        drt_model_free(m);
        return NULL;
    }
    drt_session_opts so = {.backend = "ref", .max_ctx = T_PROMPT + 1, .kv_type = "f32"};
    int32_t ids[T_PROMPT];
    for (int t = 0; t < T_PROMPT; t++) ids[t] = 3 + (int32_t)((t * 37 + 11) % (info.vocab - 3));
    lg = malloc(sizeof *lg * (size_t)T_PROMPT * (size_t)info.vocab);
    if (!lg || drt_session_create(m, &so, &s) != DRT_OK || drt_session_forward(s, ids, T_PROMPT, lg, 1) != DRT_OK) {
        DRT_CHECK(0, "%s: prefill: %s", dir, drt_last_error());
        free(lg);
        lg = NULL;
    }
    *vocab = info.vocab;
    drt_session_free(s);
    drt_model_free(m);
    return lg;
}

/* The set of dir's weights, found where the loader looks: model.safetensors
 * or its index, else diff-mlx's latest.safetensors */
static drt_status open_src(const char *dir, drt_st_set *set) {
    char one[2048], idx[2048], latest[2048];
    snprintf(one, sizeof one, "%s/model.safetensors", dir);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    snprintf(latest, sizeof latest, "%s/latest.safetensors", dir);
    struct stat sb;
    if (stat(one, &sb) != 0 && stat(idx, &sb) != 0 && stat(latest, &sb) == 0) return drt_st_set_open_file(latest, set);
    return drt_st_set_open_dir(dir, set);
}

/* out's tensors against src's: each from the source, as stored or within
 * the rounding bound of its block; *elems their logical element count */
static void check_tensors(const char *name, const char *src, const char *out, drt_dtype type, int64_t *elems) {
    drt_st_set s, q;
    *elems = 0;
    if (open_src(src, &s) != DRT_OK || drt_st_set_open_dir(out, &q) != DRT_OK) {
        DRT_CHECK(0, "%s: open: %s", name, drt_last_error());
        return;
    }
    int nq = 0;
    for (int i = 0; i < q.n_names; i++) {
        const drt_st_tensor *o = q.by_name[i], *t = drt_st_set_find(&s, o->name);
        int quant = drt_dtype_block(o->dtype) > 1;
        *elems += quant ? o->shape[0] * o->shape[1] : (int64_t)(o->nbytes / drt_dtype_size(o->dtype));
        if (!t) {
            DRT_CHECK(0, "%s %s: tensor \"%.80s\" is not in the source", name, drt_dtype_name(type), o->name);
            continue;
        }
        if (!quant) {
            DRT_CHECK(o->dtype == t->dtype && o->nbytes == t->nbytes && memcmp(o->data, t->data, t->nbytes) == 0,
                      "%s: \"%s\" is not copied as stored", name, o->name);
            continue;
        }
        nq++;
        DRT_CHECK(o->dtype == type && o->shape[0] == t->shape[0] && o->shape[1] == t->shape[1],
                  "%s: \"%s\" is %s, expected %s of the source's shape", name, o->name, drt_dtype_name(o->dtype),
                  drt_dtype_name(type));
        int64_t rows = t->shape[0], cols = t->shape[1], bad = 0;
        float *y = malloc(sizeof *y * (size_t)cols);
        size_t rb = drt_row_bytes(type, cols);
        /* q8_0: half a step of amax/127; q4_0: one step of amax/8 (the
         * 16th level is missing); both plus the f16 rounding of the scale */
        double step = type == DRT_Q8_0 ? 0.5 / 127 : 1.0 / 8;
        for (int64_t r = 0; y && r < rows; r++) {
            drt_dequantize_row((const char *)o->data + rb * (size_t)r, type, y, cols);
            for (int64_t b = 0; b < cols; b += DRT_QK) {
                double amax = 0;
                for (int64_t c = b; c < b + DRT_QK; c++) amax = fmax(amax, fabs(drt_st_elem_f32(t, r * cols + c)));
                for (int64_t c = b; c < b + DRT_QK; c++)
                    bad += fabs(y[c] - drt_st_elem_f32(t, r * cols + c)) > amax * (step + 1.0 / 512) + 1e-30;
            }
        }
        free(y);
        DRT_CHECK(bad == 0, "%s %s: \"%s\": %lld values outside the rounding bound", name, drt_dtype_name(type),
                  o->name, (long long)bad);
    }
    DRT_CHECK(nq > 0, "%s %s: no tensor quantized", name, drt_dtype_name(type));
    drt_st_set_close(&s);
    drt_st_set_close(&q);
}

/* One model directory, both types: quantized, loaded back, checked */
static void family(const char *name, const char *src) {
    drt_model *m = NULL;
    drt_model_info si;
    if (drt_model_load(src, &m) != DRT_OK || drt_model_get_info(m, &si) != DRT_OK) {
        DRT_CHECK(0, "%s: the source does not load: %s", name, drt_last_error());
        drt_model_free(m);
        return;
    }
    int64_t n_params = si.n_params;
    drt_model_free(m);
    int V = 0, V2 = 0;
    float *ref = prefill(src, &V);
    for (int k = 0; k < 2; k++) {
        char out[1024];
        snprintf(out, sizeof out, TMP "/fam_%s_%s", name, drt_dtype_name(TYPES[k]));
        sh("rm -rf '%s'", out, NULL);
        drt_quantize_result r;
        drt_status st = drt_quantize_model(src, TYPES[k], out, NULL, &r);
        DRT_CHECK(st == DRT_OK, "%s %s: quantize: %s", name, drt_dtype_name(TYPES[k]), drt_last_error());
        if (st != DRT_OK) continue;
        DRT_CHECK(temps_beside(out) == 0, "%s: a temp left beside %s", name, out);
        drt_model_info qi;
        if (drt_model_load(out, &m) != DRT_OK || drt_model_get_info(m, &qi) != DRT_OK) {
            DRT_CHECK(0, "%s %s: the result does not load: %s", name, drt_dtype_name(TYPES[k]), drt_last_error());
            drt_model_free(m);
            continue;
        }
        drt_model_free(m);
        DRT_CHECK(qi.weight_dtype == TYPES[k], "%s: weight dtype %s", name, drt_dtype_name(qi.weight_dtype));
        int64_t elems = 0;
        check_tensors(name, src, out, TYPES[k], &elems);
        DRT_CHECK(elems == n_params && qi.n_params == n_params,
                  "%s %s: %lld elements written, %lld loaded, the source model has %lld: what the loader skips "
                  "must not be written",
                  name, drt_dtype_name(TYPES[k]), (long long)elems, (long long)qi.n_params, (long long)n_params);
        float *lg = prefill(out, &V2);
        if (ref && lg && V2 == V) {
            double e = drt_nmse(lg, ref, (int64_t)T_PROMPT * V);
            DRT_CHECK(e <= QBOUND[k], "%s %s: prefill logits NMSE %.3e > %.0e against the source", name,
                      drt_dtype_name(TYPES[k]), e, QBOUND[k]);
            printf("  %-28s %s: %d of %d tensors quantized, logits NMSE %.2e\n", name, drt_dtype_name(TYPES[k]),
                   r.n_quantized, r.n_tensors, e);
        }
        free(lg);
    }
    free(ref);
}

/* ---- variants: what the loader takes and no fixture holds ---------------- */

typedef struct {
    const char *name, *base; /* the variant, and the fixture it is made from */
    const char *file;        /* the weights' file name; NULL: two shards and an index */
    const char *extra;       /* a tensor added: "@head" a copy of the embedding as lm_head.weight, "@rope" a
                              * RoPE table, else a 2-D F32 tensor of that name; NULL: none */
    const char *poison;      /* this tensor's element 0 made NaN (F32); NULL: none */
} variant;

static float g_extra[64 * 64];

/* writes w[0..n) to dir/file, or as two shards and an index (file NULL) */
static int write_weights(const char *dir, const char *file, const drt_st_write_tensor *w, int n) {
    char p[2048];
    if (file) {
        snprintf(p, sizeof p, "%s/%s", dir, file);
        return drt_st_write(p, w, n) == DRT_OK;
    }
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(p, "wb");
    if (!f) return 0;
    fprintf(f, "{\"metadata\": {}, \"weight_map\": {");
    for (int i = 0; i < n; i++)
        fprintf(f, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "", w[i].name, i < n / 2 ? 1 : 2);
    fprintf(f, "}}\n");
    int ok = fclose(f) == 0;
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    ok = ok && drt_st_write(p, w, n / 2) == DRT_OK;
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    return ok && drt_st_write(p, w + n / 2, n - n / 2) == DRT_OK;
}

/* TMP/var_<name>: the base fixture's config.json and tensors as v says */
static const char *make_variant(const variant *v, char *dir, size_t dn) {
    char base[1024];
    snprintf(base, sizeof base, FIX "/%s", v->base);
    snprintf(dir, dn, TMP "/var_%s", v->name);
    drt_st_set s;
    if (sh("rm -rf '%s' && mkdir -p '%s'", dir, dir) || sh("cp '%s/config.json' '%s/'", base, dir) ||
        open_src(base, &s) != DRT_OK)
        return NULL;
    drt_st_write_tensor *w = calloc((size_t)s.n_names + 1, sizeof *w);
    float *copy = NULL;
    int n = 0;
    for (int i = 0; w && i < s.n_names; i++, n++) {
        const drt_st_tensor *t = s.by_name[i];
        w[n] = (drt_st_write_tensor){t->name, t->dtype, t->ndim, {t->shape[0], t->shape[1], t->shape[2]}, t->data};
        if (v->poison && strcmp(t->name, v->poison) == 0 && t->dtype == DRT_F32 && (copy = malloc(t->nbytes))) {
            memcpy(copy, t->data, t->nbytes);
            copy[0] = NAN;
            w[n].data = copy;
        }
        if (v->extra && strcmp(v->extra, "@head") == 0 && strcmp(t->name, "model.embed_tokens.weight") == 0)
            w[s.n_names] = (drt_st_write_tensor){"lm_head.weight", t->dtype, 2, {t->shape[0], t->shape[1]}, t->data};
    }
    if (w && v->extra && strcmp(v->extra, "@rope") == 0)
        w[n++] = (drt_st_write_tensor){"model.layers.0.self_attn.rotary_emb.inv_freq", DRT_F32, 1, {4}, g_extra};
    else if (w && v->extra && strcmp(v->extra, "@head") == 0)
        n++;
    else if (w && v->extra)
        w[n++] = (drt_st_write_tensor){v->extra, DRT_F32, 2, {64, 64}, g_extra};
    int ok = w && (!v->poison || copy) && write_weights(dir, v->file, w, n);
    if (!ok) DRT_CHECK(0, "variant %s: cannot write it: %s", v->name, drt_last_error());
    free(copy);
    free(w);
    drt_st_set_close(&s);
    return ok ? dir : NULL;
}

static char g_long_name[800];

static void families(void) {
    DIR *d = opendir(FIX);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) {
        char p[1024];
        struct stat sb;
        snprintf(p, sizeof p, FIX "/%s/config.json", e->d_name);
        if (e->d_name[0] == '.' || stat(p, &sb) != 0) continue;
        snprintf(p, sizeof p, FIX "/%s", e->d_name);
        family(e->d_name, p);
        n++;
    }
    if (d) closedir(d);
    DRT_CHECK(n >= 20, "only %d fixture families found in %s", n, FIX);
    /* an optimizer tensor with a long name: skipped, so it cannot break
     * the output */
    snprintf(g_long_name, sizeof g_long_name, "opt.%0700d.weight", 0);
    for (int i = 0; i < 64 * 64; i++) g_extra[i] = (float)((i * 7919) % 101) / 101.0f - 0.5f;
    const variant vs[] = {
        {"sharded", "hf_llama_gqa", NULL, NULL, NULL},
        {"rope_table", "hf_llama_gqa", "model.safetensors", "@rope", NULL},
        {"tied_head_copy", "hf_llama_bf16", "model.safetensors", "@head", NULL},
        {"opt_long_name", "mlx_diff_opt", "latest.safetensors", g_long_name, NULL},
    };
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        char dir[1024];
        if (make_variant(&vs[i], dir, sizeof dir)) family(vs[i].name, dir);
    }
}

/* drt_st_write keeps a long name whole in a block format's metadata key */
static void long_names(void) {
    static char name[1200];
    memset(name, 'n', sizeof name - 1);
    memcpy(name + sizeof name - 8, ".weight", 8);
    unsigned char blocks[2 * 34] = {0};
    drt_st_write_tensor w = {name, DRT_Q8_0, 2, {2, 32}, blocks};
    drt_st_file f;
    int ok = drt_st_write(TMP "/long.safetensors", &w, 1) == DRT_OK &&
             drt_st_open(TMP "/long.safetensors", &f) == DRT_OK;
    DRT_CHECK(ok && f.n_tensors == 1 && f.tensors[0].dtype == DRT_Q8_0 && strcmp(f.tensors[0].name, name) == 0,
              "a q8_0 tensor with a %zu-byte name does not read back: %s", strlen(name), drt_last_error());
    if (ok) drt_st_close(&f);
}

/* ---- the output directory: whole or not at all ----------------------------- */

#define SRC TMP "/src"

/* quantizing src into out is refused (want, saying say); watch (and the
 * source) byte-identical after, no temp beside watch */
static void refused(const char *what, const char *src, const char *out, int force, drt_status want, const char *say,
                    const char *watch) {
    char *before = tree_sig(watch), *src_before = tree_sig(src);
    drt_quantize_opts o = {.force = force};
    drt_quantize_result r = {.n_tensors = 7};
    CHECK_ERR(drt_quantize_model(src, DRT_Q8_0, out, &o, &r), want, say, "%s (out_dir \"%s\", force %d)", what, out,
              force);
    char *after = tree_sig(watch), *src_after = tree_sig(src);
    DRT_CHECK(strcmp(before, after) == 0, "%s: %s changed:\n%s---\n%s", what, watch, before, after);
    DRT_CHECK(strcmp(src_before, src_after) == 0, "%s: the source %s changed", what, src);
    DRT_CHECK(temps_beside(watch) == 0, "%s: a temp left beside %s", what, watch);
    DRT_CHECK(r.n_tensors == 0, "%s: the result is set after a failure", what);
    free(before);
    free(after);
    free(src_before);
    free(src_after);
}

/* out_dir = the source, or around it, however spelled */
static void not_the_source(void) {
    static const struct {
        const char *out, *say;
    } same[] = {
        {SRC, "is the model directory itself"},           {SRC "/", "is the model directory itself"},
        {SRC "///", "is the model directory itself"},     {SRC "/.", "is the model directory itself"},
        {SRC "/../src", "is the model directory itself"}, {TMP "//src", "is the model directory itself"},
        {"./qlib/src", "is the model directory itself"}, /* the cwd is DRT_TMP_DIR */
        {"qlib/src/", "is the model directory itself"},   {TMP "/srclink", "is a symbolic link"},
        {TMP "/srclink/", "is a symbolic link"},          {TMP, "contains the model directory"},
        {TMP "/", "contains the model directory"},        {DRT_TMP_DIR, "contains the model directory"},
    };
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        for (int force = 0; force < 2; force++)
            refused("out_dir = the source", SRC, same[i].out, force, DRT_ERR_INVALID_ARG, same[i].say, SRC);
    /* the source named through a symlink, out_dir the real one */
    refused("the source through a symlink", TMP "/srclink", SRC, 1, DRT_ERR_INVALID_ARG,
            "is the model directory itself", SRC);
}

static void refusals(void) {
    sh("mkdir -p '%s' && echo 'keep me' > '%s/notes.txt'", TMP "/notes", TMP "/notes");
    refused("non-empty out_dir", SRC, TMP "/notes", 0, DRT_ERR_INVALID_ARG,
            "already exists and is not empty; pass force to replace it as a whole", TMP "/notes");
    sh("mkdir -p '%s' && ln -sfn empty '%s'", TMP "/empty", TMP "/link");
    refused("out_dir a symlink", SRC, TMP "/link", 1, DRT_ERR_INVALID_ARG, "is a symbolic link", TMP "/empty");
    struct stat sb;
    DRT_CHECK(lstat(TMP "/link", &sb) == 0 && S_ISLNK(sb.st_mode), "out_dir a symlink: the link was replaced");
    sh("echo x > '%s'", TMP "/afile", NULL);
    refused("out_dir a file", SRC, TMP "/afile", 1, DRT_ERR_INVALID_ARG, "exists and is not a directory", TMP "/afile");
    refused("out_dir's parent missing", SRC, TMP "/nope/x", 0, DRT_ERR_IO, "cannot use its parent", TMP "/nope");
    refused("out_dir the root", SRC, "/", 0, DRT_ERR_INVALID_ARG, "is the root directory", TMP "/notes");
    refused("out_dir \"\"", SRC, "", 0, DRT_ERR_INVALID_ARG, "is not a directory name", TMP "/notes");
    /* nothing is written for a source that does not load */
    sh("mkdir -p '%s'", TMP "/notamodel", NULL);
    refused("a source that is no model", TMP "/notamodel", TMP "/never", 0, DRT_ERR_IO, "config.json", TMP "/never");
    not_the_source();
    /* a file the source is read from lies in out_dir (its model.safetensors
     * a symlink there): replacing out_dir would delete it */
    sh("rm -rf '%s' && cp -r '" SRC "' '%s'", TMP "/held", TMP "/held");
    sh("rm -rf '%s' && mkdir -p '%s'", TMP "/src3", TMP "/src3");
    sh("cp '%s/config.json' '%s/'", SRC, TMP "/src3");
    sh("ln -s ../held/model.safetensors '%s/model.safetensors'", TMP "/src3", NULL);
    refused("out_dir holding the source's file", TMP "/src3", TMP "/held", 1, DRT_ERR_INVALID_ARG,
            "holds the input " TMP "/src3/model.safetensors", TMP "/held");
}

/* names in dir, sorted, space-separated, into buf */
static const char *listing(const char *dir, char *buf, size_t n) {
    char *names[64];
    int k = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && k < 64 && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) names[k++] = strdup(e->d_name);
    if (d) closedir(d);
    qsort(names, (size_t)k, sizeof *names, cmp_str);
    buf[0] = 0;
    for (int i = 0; i < k; i++) {
        snprintf(buf + strlen(buf), n - strlen(buf), "%s ", names[i]);
        free(names[i]);
    }
    return buf;
}

static void note_cb(void *ctx, const char *line) {
    char *seen = ctx;
    snprintf(seen + strlen(seen), 2048 - strlen(seen), "%s\n", line);
}

/* out_dir written: it loads, holds just the new files, no temp beside */
static void written(const char *what, const char *out, int force) {
    drt_quantize_opts o = {.force = force};
    drt_status st = drt_quantize_model(SRC, DRT_Q8_0, out, &o, NULL);
    DRT_CHECK(st == DRT_OK, "%s: %s", what, drt_last_error());
    char buf[1024], dir[1024];
    snprintf(dir, sizeof dir, "%s", out);
    while (strlen(dir) > 1 && dir[strlen(dir) - 1] == '/') dir[strlen(dir) - 1] = 0;
    DRT_CHECK(strcmp(listing(dir, buf, sizeof buf), "config.json model.safetensors ") == 0,
              "%s: %s holds [%s], expected just the new model", what, dir, buf);
    DRT_CHECK(temps_beside(dir) == 0, "%s: a temp left beside %s", what, dir);
    drt_model *m = NULL;
    DRT_CHECK(drt_model_load(dir, &m) == DRT_OK, "%s: the result does not load: %s", what, drt_last_error());
    drt_model_free(m);
}

static void writes(void) {
    sh("rm -rf '%s' && mkdir '%s'", TMP "/fill", TMP "/fill");
    written("an empty out_dir", TMP "/fill", 0);
    sh("rm -rf '%s'", TMP "/fresh", NULL);
    written("a missing out_dir, spelled with a slash", TMP "/fresh/", 0);
    /* force replaces the whole directory: no stale file survives */
    sh("rm -rf '%s' && mkdir '%s'", TMP "/whole", TMP "/whole");
    sh("echo stale > '%s/stale.txt' && echo '{}' > '%s/tokenizer.json'", TMP "/whole", TMP "/whole");
    written("force over a full out_dir", TMP "/whole", 1);
    /* out_dir holding a hard link of the source's weights: replaced, and
     * the source's bytes stay (the file was never opened for writing) */
    sh("rm -rf '%s' && mkdir '%s'", TMP "/hard", TMP "/hard");
    sh("ln '%s/model.safetensors' '%s/model.safetensors'", SRC, TMP "/hard");
    char *before = tree_sig(SRC);
    written("force over a hard link of the source's file", TMP "/hard", 1);
    char *after = tree_sig(SRC);
    DRT_CHECK(strcmp(before, after) == 0, "a hard link of the source's file in out_dir: the source changed");
    free(before);
    free(after);
    /* a killed run's temp is removed, saying so; a near name is not */
    sh("rm -rf '%s' && mkdir -p '%s'", TMP "/noted", TMP "/.noted.tmp.Ab12Cd");
    sh("mkdir -p '%s'", TMP "/.noted.tmp.abc12", NULL);
    struct timespec old[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};
    utimensat(AT_FDCWD, TMP "/.noted.tmp.Ab12Cd", old, 0);
    utimensat(AT_FDCWD, TMP "/.noted.tmp.abc12", old, 0);
    char seen[2048] = "";
    drt_quantize_opts o = {.note = note_cb, .ctx = seen};
    DRT_CHECK(drt_quantize_model(SRC, DRT_Q8_0, TMP "/noted", &o, NULL) == DRT_OK, "noted: %s", drt_last_error());
    struct stat sb;
    DRT_CHECK(strstr(seen, "removed " TMP "/.noted.tmp.Ab12Cd, left by a run that did not finish") &&
                  lstat(TMP "/.noted.tmp.Ab12Cd", &sb) != 0 && lstat(TMP "/.noted.tmp.abc12", &sb) == 0,
              "a killed run's temp: notes [%s]", seen);
    sh("rm -rf '%s'", TMP "/.noted.tmp.abc12", NULL);
}

/* a failure mid-way (a NaN weight, found while quantizing) leaves out_dir
 * as it was, missing or a previous output, and no temp */
static void failures(void) {
    const variant nan = {"nan", "hf_llama_gqa", "model.safetensors", NULL, "model.layers.1.mlp.down_proj.weight"};
    char dir[1024];
    if (!make_variant(&nan, dir, sizeof dir)) return;
    sh("rm -rf '%s'", TMP "/prev", NULL);
    drt_status st = drt_quantize_model(SRC, DRT_Q4_0, TMP "/prev", NULL, NULL);
    DRT_CHECK(st == DRT_OK, "the previous output: %s", drt_last_error());
    refused("a NaN weight mid-way, force", dir, TMP "/prev", 1, DRT_ERR_FORMAT, "non-finite value", TMP "/prev");
    refused("a NaN weight mid-way, out_dir missing", dir, TMP "/absent", 0, DRT_ERR_FORMAT,
            "\"model.layers.1.mlp.down_proj.weight\" holds a non-finite value at [0, 0]", TMP "/absent");
}

int main(void) {
    if (chdir(DRT_TMP_DIR) != 0 || sh("rm -rf '%s' && mkdir -p '%s'", TMP, TMP) ||
        sh("cp -r '%s' '%s'", FIX "/hf_llama_gqa", SRC) || sh("ln -s src '%s'", TMP "/srclink", NULL)) {
        fprintf(stderr, "test_quantize_lib: cannot set up %s\n", TMP);
        return 1;
    }
    refusals();
    writes();
    failures();
    long_names();
    families();
    return drt_test_summary("test_quantize_lib");
}
