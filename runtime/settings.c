/* The settings registry: every backend and session knob in one table, so that
 * parsing, validation, the environment names, docs/environment.md and
 * `diffrt info` come from the same rows (drt_settings.h, diffrt.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "drt_settings.h"

typedef enum { T_BOOL, T_INT, T_CHOICE, T_STR } stype;

typedef struct {
    const char *name, *env, *old_env;
    stype type;
    drt_setting_kind kind;
    int env_only;       /* read where no drt_settings reaches (probe, model load) */
    const char *def;    /* "" : automatic */
    long long lo, hi;   /* T_INT */
    const char *values; /* T_CHOICE: the choices, ", "-separated; else the text for messages */
    const char *doc;
} row;

#define U DRT_SETTING_USER
#define D DRT_SETTING_DEBUG
/* Names: DIFFRT_<BACKEND>_<NAME> with the backend's own name for a backend's
 * setting, DIFFRT_<NAME> for a session's; DIFFRT_THREADS keeps its name (it
 * was the cpu backend's thread count from the start, and bench reads it too). */
static const row ROWS[] = {
    {"cpu.threads", "DIFFRT_THREADS", NULL, T_INT, U, 0, "", 1, 1024, "an integer in [1, 1024]",
     "cpu backend worker threads (default: the physical cores the process may run on)"},
    {"cpu.isa", "DIFFRT_CPU_ISA", NULL, T_CHOICE, D, 0, "", 0, 0, "avx512, avx2, neon, generic",
     "cpu kernel set (default: the best the CPU supports; a set the CPU lacks is an error)"},
    {"cpu.precision", "DIFFRT_CPU_PRECISION", NULL, T_CHOICE, U, 0, "f32", 0, 0, "f32, bf16, int8",
     "bf16: prefill GEMMs on AVX512-BF16; int8: x in one int8 level in the q8_0/q4_0 GEMVs (as llama.cpp); "
     "declared bound 5e-4"},
    {"cpu.qdot", "DIFFRT_CPU_QDOT", NULL, T_BOOL, D, 0, "1", 0, 1, "0 or 1",
     "q8_0/q4_0 GEMVs on int8 dot products where the CPU has AVX512-VNNI and VBMI (0: the block kernel)"},
    {"cpu.repack", "DIFFRT_CPU_REPACK", NULL, T_BOOL, U, 0, "1", 0, 1, "0 or 1",
     "repack q8_0/q4_0 weights for the int8-dot GEMV (a second copy in memory; 0: slower decode)"},
    {"cuda.precision", "DIFFRT_CUDA_PRECISION", NULL, T_CHOICE, U, 0, "f32", 0, 0, "f32, fast",
     "fast: tensor cores, declared bound 5e-4"},
    {"cuda.gemv", "DIFFRT_CUDA_GEMV", NULL, T_INT, D, 0, "2", 1, 2, "1 or 2",
     "the f16/bf16 decode GEMV: 1 = a warp per row, 2 = rows per block with K over its warps"},
    {"cuda.staged", "DIFFRT_CUDA_STAGED", NULL, T_BOOL, D, 0, "1", 0, 1, "0 or 1",
     "0: downloads of 1 MiB and more straight into the caller's memory, not through pinned chunks"},
    {"cuda.graph", "DIFFRT_CUDA_GRAPH", NULL, T_BOOL, D, 0, "1", 0, 1, "0 or 1", "0: no CUDA graphs"},
    {"cuda.verbose", "DIFFRT_CUDA_VERBOSE", NULL, T_BOOL, D, 0, "0", 0, 1, "0 or 1",
     "1: one line of statistics per instance on stderr at shutdown"},
    {"opencl.gemm", "DIFFRT_OPENCL_GEMM", NULL, T_CHOICE, D, 0, "tiled", 0, 0, "tiled, regs, local, clblast",
     "MATMUL family (tiled: by device class; clblast needs a build with CLBlast)"},
    {"opencl.attn_split", "DIFFRT_OPENCL_ATTN_SPLIT", NULL, T_INT, D, 0, "0", 0, 1 << 30,
     "keys per split (0 = automatic)", "keys per split of the decode attention (0: automatic)"},
    {"opencl.build_options", "DIFFRT_OPENCL_BUILD_OPTIONS", NULL, T_STR, D, 0, "", 0, 0, "text",
     "extra options appended to the OpenCL C compiler's"},
    {"vulkan.loader", "DIFFRT_VULKAN_LOADER", "DIFFRT_VK_LOADER", T_STR, U, 1, "", 0, 0, "a file name or path",
     "the Vulkan loader to dlopen (default: libvulkan.so.1)"},
    {"vulkan.validation", "DIFFRT_VULKAN_VALIDATION", "DIFFRT_VK_VALIDATION", T_BOOL, D, 1, "0", 0, 1, "0 or 1",
     "1: the Khronos validation layer with synchronization validation, messages on stderr"},
    {"vulkan.subgroup", "DIFFRT_VULKAN_SUBGROUP", "DIFFRT_VK_SUBGROUP", T_BOOL, D, 0, "1", 0, 1, "0 or 1",
     "0: reductions through shared memory, no subgroup operations"},
    {"vulkan.fp16", "DIFFRT_VULKAN_FP16", "DIFFRT_VK_FP16", T_BOOL, D, 0, "1", 0, 1, "0 or 1",
     "0: f16 weights read as packed 32-bit words even with 16-bit storage"},
    {"vulkan.int64", "DIFFRT_VULKAN_INT64", "DIFFRT_VK_INT64", T_BOOL, D, 0, "1", 0, 1, "0 or 1",
     "0: the CPU-device GEMV reads packed weights in 32-bit words even with shaderInt64"},
    {"vulkan.copy", "DIFFRT_VULKAN_COPY", "DIFFRT_VK_COPY", T_BOOL, D, 0, "1", 0, 1, "0 or 1",
     "0: KV_WRITE and PERMUTE through their shaders even where they are plain copies"},
    {"vulkan.mm_tm", "DIFFRT_VULKAN_MM_TM", "DIFFRT_VK_MM_TM", T_INT, D, 0, "8", 1, 32, "an integer in [1, 32]",
     "rows per lane of the register-tiled MATMUL (CPU devices; TM x TN at most 64)"},
    {"vulkan.mm_tn", "DIFFRT_VULKAN_MM_TN", "DIFFRT_VK_MM_TN", T_INT, D, 0, "4", 1, 16, "an integer in [1, 16]",
     "columns per lane of the register-tiled MATMUL (CPU devices; TM x TN at most 64)"},
    {"vulkan.mm_wg", "DIFFRT_VULKAN_MM_WG", "DIFFRT_VK_MM_WG", T_INT, D, 0, "1", 1, 64, "an integer in [1, 64]",
     "subgroups per workgroup of the register-tiled MATMUL (CPU devices)"},
    {"vulkan.split_bytes", "DIFFRT_VULKAN_SPLIT_BYTES", "DIFFRT_VK_SPLIT_BYTES", T_INT, D, 0, "", 1024, LLONG_MAX,
     "a byte count of at least 1024",
     "bind decode GEMV weights larger than this in blocks of rows (default: maxStorageBufferRange)"},
    {"vulkan.tune", "DIFFRT_VULKAN_TUNE", "DIFFRT_VK_TUNE", T_CHOICE, D, 0, "", 0, 0, "gpu, cpu",
     "workgroup sizes and tiles as for that kind of device (default: by the device's type)"},
    {"vulkan.denorm", "DIFFRT_VULKAN_DENORM", NULL, T_CHOICE, D, 0, "", 0, 0, "off, force",
     "f32 subnormals: off = no DenormPreserve in the shaders, force = declared even where the device does "
     "not say it keeps them (tests; default: where it does)"},
    {"device", "DIFFRT_DEVICE", NULL, T_STR, U, 0, "", 0, 0, "an index or a name substring",
     "the device of a backend opened without one (default: its first GPU, else its first device)"},
    {"backend_path", "DIFFRT_BACKEND_PATH", NULL, T_STR, U, 1, "", 0, 0, "colon-separated directories",
     "where backend modules are searched after the core's own directory"},
    {"no_mmap", "DIFFRT_NO_MMAP", NULL, T_BOOL, U, 1, "0", 0, 1, "0 or 1",
     "1: read model.safetensors into memory instead of mapping it"},
    {"kv_type", "DIFFRT_KV_TYPE", NULL, T_CHOICE, U, 0, "", 0, 0, "f32, f16, q8_0",
     "the KV cache's type (default: f16 on cpu, f32 elsewhere; q8_0 needs head widths that are multiples of 32)"},
    {"check_finite", "DIFFRT_CHECK_FINITE", NULL, T_BOOL, U, 0, "0", 0, 1, "0 or 1",
     "1: on non-finite logits, re-run the forward op by op and name the first op that made one"},
};
#undef U
#undef D
#define N_ROWS ((int)(sizeof ROWS / sizeof ROWS[0]))

struct drt_settings {
    char *val[N_ROWS]; /* NULL: not set */
};

static int warned[N_ROWS]; /* the deprecation line, once per alias per process */

int drt_setting_count(void) {
    return N_ROWS;
}

drt_status drt_setting_describe(int i, drt_setting_info *out) {
    if (!out || i < 0 || i >= N_ROWS)
        return drt_set_error(DRT_ERR_INVALID_ARG, "setting index %d: expected [0, %d)", i, N_ROWS);
    const row *r = &ROWS[i];
    *out = (drt_setting_info){r->name, r->env, r->old_env, r->values, r->def, r->doc, r->kind, r->env_only};
    return DRT_OK;
}

static int find(const char *name) {
    for (int i = 0; name && i < N_ROWS; i++)
        if (strcmp(ROWS[i].name, name) == 0) return i;
    return -1;
}

static int is_choice(const char *choices, const char *v) {
    size_t n = strlen(v);
    for (const char *p = choices; n && *p;) {
        size_t k = strcspn(p, ",");
        if (k == n && strncmp(p, v, n) == 0) return 1;
        p += k;
        while (*p == ',' || *p == ' ') p++;
    }
    return 0;
}

static int parse_int(const char *v, long long *out) {
    if (!((*v >= '0' && *v <= '9') || (*v == '-' && v[1] >= '0' && v[1] <= '9'))) return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end) return 0;
    *out = x;
    return 1;
}

/* checks v (not "") for row r; label names where it came from */
static drt_status check(const row *r, const char *v, const char *label) {
    long long x;
    switch (r->type) {
    case T_BOOL:
        if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
            return drt_set_error(DRT_ERR_INVALID_ARG, "%s: expected 0 or 1, got \"%.40s\"", label, v);
        return DRT_OK;
    case T_INT:
        if (!parse_int(v, &x) || x < r->lo || x > r->hi)
            return drt_set_error(DRT_ERR_INVALID_ARG, "%s=%.40s: expected %s", label, v, r->values);
        return DRT_OK;
    case T_CHOICE:
        if (!is_choice(r->values, v))
            return drt_set_error(DRT_ERR_INVALID_ARG, "%s: expected one of %s, got \"%.40s\"", label, r->values, v);
        return DRT_OK;
    case T_STR: return DRT_OK;
    }
    return DRT_OK;
}

/* The value in force for row i: the caller's, the variable's, the alias's or
 * the default, checked. */
static drt_status resolve(const drt_settings *s, int i, const char **val, drt_setting_source *src) {
    const row *r = &ROWS[i];
    char label[96];
    const char *v = s && !r->env_only ? s->val[i] : NULL;
    if (v) {
        *src = DRT_SETTING_CALLER;
        snprintf(label, sizeof label, "setting %s", r->name);
    } else if ((v = getenv(r->env)) && *v) {
        *src = DRT_SETTING_ENV;
        snprintf(label, sizeof label, "%s", r->env);
    } else if (r->old_env && (v = getenv(r->old_env)) && *v) {
        *src = DRT_SETTING_ENV;
        snprintf(label, sizeof label, "%s", r->old_env);
        /* the library prints only this: a deprecation, once per alias */
        if (!__atomic_exchange_n(&warned[i], 1, __ATOMIC_RELAXED))
            fprintf(stderr, "diffrt: %s is deprecated, use %s\n", r->old_env, r->env);
    } else {
        *src = DRT_SETTING_DEFAULT;
        *val = r->def;
        return DRT_OK;
    }
    *val = v;
    return check(r, v, label);
}

static drt_status lookup(const char *name, int *i) {
    *i = find(name);
    if (*i < 0) return drt_set_error(DRT_ERR_INVALID_ARG, "unknown setting \"%.60s\"", name ? name : "(null)");
    return DRT_OK;
}

drt_status drt_setting_bool(const drt_settings *s, const char *name, int *out) {
    int i;
    const char *v;
    drt_setting_source src;
    drt_status st = lookup(name, &i);
    if (st == DRT_OK) st = resolve(s, i, &v, &src);
    if (st != DRT_OK) return st;
    *out = v[0] == '1';
    return DRT_OK;
}

drt_status drt_setting_int(const drt_settings *s, const char *name, long long *out) {
    int i;
    const char *v;
    drt_setting_source src;
    drt_status st = lookup(name, &i);
    if (st == DRT_OK) st = resolve(s, i, &v, &src);
    if (st != DRT_OK) return st;
    *out = 0;
    if (*v) parse_int(v, out);
    return DRT_OK;
}

drt_status drt_setting_str(const drt_settings *s, const char *name, const char **out) {
    int i;
    drt_setting_source src;
    drt_status st = lookup(name, &i);
    if (st == DRT_OK) st = resolve(s, i, out, &src);
    return st;
}

drt_status drt_settings_create(drt_settings **out) {
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_settings_create: out is NULL");
    *out = calloc(1, sizeof **out);
    return *out ? DRT_OK : drt_set_error(DRT_ERR_OOM, "out of memory");
}

void drt_settings_free(drt_settings *s) {
    if (!s) return;
    for (int i = 0; i < N_ROWS; i++) free(s->val[i]);
    free(s);
}

drt_status drt_settings_set(drt_settings *s, const char *name, const char *value) {
    if (!s) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_settings_set: settings is NULL");
    int i = find(name);
    if (i < 0) {
        char known[1024] = "";
        for (int k = 0; k < N_ROWS; k++)
            if (!ROWS[k].env_only)
                snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", known[0] ? ", " : "",
                         ROWS[k].name);
        return drt_set_error(DRT_ERR_INVALID_ARG, "unknown setting \"%.60s\" (known: %s)", name ? name : "(null)",
                             known);
    }
    const row *r = &ROWS[i];
    if (r->env_only)
        return drt_set_error(DRT_ERR_INVALID_ARG, "setting %s is read from the environment only (%s)", r->name, r->env);
    char label[96];
    snprintf(label, sizeof label, "setting %s", r->name);
    if (value) {
        if (!*value) return drt_set_error(DRT_ERR_INVALID_ARG, "%s: empty value", label);
        drt_status st = check(r, value, label);
        if (st != DRT_OK) return st;
    }
    char *copy = NULL;
    if (value && !(copy = strdup(value))) return drt_set_error(DRT_ERR_OOM, "out of memory");
    free(s->val[i]);
    s->val[i] = copy;
    return DRT_OK;
}

drt_status drt_settings_get(const drt_settings *s, const char *name, char *buf, size_t n, drt_setting_source *src) {
    if (!buf || n == 0) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_settings_get: no buffer");
    buf[0] = 0;
    int i = find(name);
    if (i < 0) return drt_set_error(DRT_ERR_INVALID_ARG, "unknown setting \"%.60s\"", name ? name : "(null)");
    const char *v;
    drt_setting_source from;
    drt_status st = resolve(s, i, &v, &from);
    if (st != DRT_OK) return st;
    if (strlen(v) >= n) return drt_set_error(DRT_ERR_INVALID_ARG, "setting %s: value longer than the buffer", name);
    memcpy(buf, v, strlen(v) + 1);
    if (src) *src = from;
    return DRT_OK;
}

drt_status drt_settings_copy(const drt_settings *s, drt_settings **out) {
    *out = NULL;
    if (!s) return DRT_OK;
    drt_status st = drt_settings_create(out);
    for (int i = 0; st == DRT_OK && i < N_ROWS; i++)
        if (s->val[i]) st = drt_settings_set(*out, ROWS[i].name, s->val[i]);
    if (st != DRT_OK) {
        drt_settings_free(*out);
        *out = NULL;
    }
    return st;
}
