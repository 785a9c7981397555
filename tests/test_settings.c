/* The settings registry (runtime/settings.c, drt_settings.h, diffrt.h):
 *   - every setting by its variable: a good value is in force (from env), a
 *     bad one is an error naming the variable (a table of cases);
 *   - the deprecated names (DIFFRT_VK_*) still work, print one deprecation
 *     line on stderr, once per process, and lose to the new name;
 *   - the library API: set, get, refused values and names, and a caller's
 *     value winning over the environment's (through a backend and a session);
 *   - range checks that used to clamp (vulkan.mm_tm, _tn, _wg) are errors;
 *   - the table and docs/environment.md agree, the names follow one scheme;
 *   - the CLI: --set wins over the variable (diffrt info shows where each
 *     value came from), a bad --set is a usage error. */
#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "diffrt/diffrt.h"
#include "drt_error.h"
#include "drt_graph.h"
#include "drt_settings.h"
#include "drt_test.h"

/* one case per setting: its variable, a value it takes, one it refuses
 * (NULL: a string, every value is taken) */
static const struct {
    const char *name, *env, *good, *bad;
} CASES[] = {
    {"cpu.threads", "DIFFRT_THREADS", "3", "0"},
    {"cpu.isa", "DIFFRT_CPU_ISA", "generic", "sse9"},
    {"cpu.precision", "DIFFRT_CPU_PRECISION", "bf16", "f16"},
    {"cpu.qdot", "DIFFRT_CPU_QDOT", "0", "off"},
    {"cpu.repack", "DIFFRT_CPU_REPACK", "0", "no"},
    {"cuda.precision", "DIFFRT_CUDA_PRECISION", "fast", "tf32"},
    {"cuda.gemv", "DIFFRT_CUDA_GEMV", "1", "3"},
    {"cuda.staged", "DIFFRT_CUDA_STAGED", "0", "on"},
    {"cuda.graph", "DIFFRT_CUDA_GRAPH", "0", "yes"},
    {"cuda.verbose", "DIFFRT_CUDA_VERBOSE", "1", "2"},
    {"opencl.gemm", "DIFFRT_OPENCL_GEMM", "regs", "magic"},
    {"opencl.attn_split", "DIFFRT_OPENCL_ATTN_SPLIT", "16", "12x"},
    {"opencl.build_options", "DIFFRT_OPENCL_BUILD_OPTIONS", "-DX=1", NULL},
    {"vulkan.loader", "DIFFRT_VULKAN_LOADER", "/x/libvulkan.so.1", NULL},
    {"vulkan.validation", "DIFFRT_VULKAN_VALIDATION", "1", "on"},
    {"vulkan.subgroup", "DIFFRT_VULKAN_SUBGROUP", "0", "false"},
    {"vulkan.fp16", "DIFFRT_VULKAN_FP16", "0", "no"},
    {"vulkan.int64", "DIFFRT_VULKAN_INT64", "0", "-1"},
    {"vulkan.copy", "DIFFRT_VULKAN_COPY", "0", "2"},
    {"vulkan.mm_tm", "DIFFRT_VULKAN_MM_TM", "16", "33"},
    {"vulkan.mm_tn", "DIFFRT_VULKAN_MM_TN", "2", "0"},
    {"vulkan.mm_wg", "DIFFRT_VULKAN_MM_WG", "64", "65"},
    {"vulkan.split_bytes", "DIFFRT_VULKAN_SPLIT_BYTES", "40960", "512"},
    {"vulkan.tune", "DIFFRT_VULKAN_TUNE", "cpu", "fast"},
    {"vulkan.denorm", "DIFFRT_VULKAN_DENORM", "force", "keep"},
    {"device", "DIFFRT_DEVICE", "0", NULL},
    {"backend_path", "DIFFRT_BACKEND_PATH", "/nowhere", NULL},
    {"no_mmap", "DIFFRT_NO_MMAP", "1", "yes"},
    {"kv_type", "DIFFRT_KV_TYPE", "q8_0", "q4_0"},
    {"check_finite", "DIFFRT_CHECK_FINITE", "1", "on"},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

static void unset_all(void) {
    for (int i = 0; i < drt_setting_count(); i++) {
        drt_setting_info si;
        drt_setting_describe(i, &si);
        unsetenv(si.env);
        if (si.old_env) unsetenv(si.old_env);
    }
}

/* every row has a case above, the variable follows the scheme, and the docs
 * name the variable and its deprecated alias */
static void table(void) {
    DRT_CHECK(drt_setting_count() == N_CASES, "%d settings, %d cases: a setting without a case", drt_setting_count(),
              N_CASES);
    char *doc = drt_test_read_file(DRT_MODELS_DIR "/../docs/environment.md");
    DRT_CHECK(doc != NULL, "cannot read docs/environment.md");
    for (int i = 0; i < drt_setting_count(); i++) {
        drt_setting_info si;
        DRT_CHECK(drt_setting_describe(i, &si) == DRT_OK, "describe %d: %s", i, drt_last_error());
        int found = 0;
        for (int c = 0; c < N_CASES; c++)
            found |= strcmp(CASES[c].name, si.name) == 0 && strcmp(CASES[c].env, si.env) == 0;
        DRT_CHECK(found, "setting %s (%s) has no case here", si.name, si.env);
        char want[96] = "DIFFRT_";
        for (const char *p = si.name; *p && strlen(want) < sizeof want - 1; p++)
            want[strlen(want) + 1] = 0, want[strlen(want)] = *p == '.' ? '_' : (char)toupper((unsigned char)*p);
        if (strcmp(si.name, "cpu.threads") != 0) /* DIFFRT_THREADS keeps its name */
            DRT_CHECK(strcmp(si.env, want) == 0, "setting %s: variable %s, want %s", si.name, si.env, want);
        DRT_CHECK(si.doc && *si.doc && si.values && *si.values && si.def, "setting %s: no doc or values", si.name);
        if (doc) {
            char cell[100];
            snprintf(cell, sizeof cell, "`%s`", si.env);
            DRT_CHECK(strstr(doc, cell) != NULL, "docs/environment.md does not list %s", si.env);
            if (si.old_env) {
                snprintf(cell, sizeof cell, "`%s`", si.old_env);
                DRT_CHECK(strstr(doc, cell) != NULL, "docs/environment.md does not list the alias %s", si.old_env);
            }
        }
    }
    free(doc);
    drt_setting_info si;
    DRT_CHECK(drt_setting_describe(N_CASES, &si) == DRT_ERR_INVALID_ARG, "describe past the table");
}

/* each variable: a good value in force, a bad one an error naming it; the same
 * through drt_settings_set (naming the setting) */
static void by_env_and_api(void) {
    unset_all();
    for (int c = 0; c < N_CASES; c++) {
        char v[256];
        drt_setting_source src = DRT_SETTING_ENV;
        DRT_CHECK(drt_settings_get(NULL, CASES[c].name, v, sizeof v, &src) == DRT_OK && src == DRT_SETTING_DEFAULT,
                  "%s unset: source %d, %s", CASES[c].name, (int)src, drt_last_error());
        setenv(CASES[c].env, CASES[c].good, 1);
        drt_status s = drt_settings_get(NULL, CASES[c].name, v, sizeof v, &src);
        DRT_CHECK(s == DRT_OK && src == DRT_SETTING_ENV && strcmp(v, CASES[c].good) == 0, "%s=%s: status %d, \"%s\"",
                  CASES[c].env, CASES[c].good, (int)s, v);
        drt_settings *set = NULL;
        DRT_CHECK(drt_settings_create(&set) == DRT_OK, "create");
        if (CASES[c].bad) {
            setenv(CASES[c].env, CASES[c].bad, 1);
            s = drt_settings_get(NULL, CASES[c].name, v, sizeof v, &src);
            DRT_CHECK(s == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), CASES[c].env) &&
                          strstr(drt_last_error(), CASES[c].bad),
                      "%s=%s: status %d, message \"%s\"", CASES[c].env, CASES[c].bad, (int)s, drt_last_error());
            char setting[80];
            snprintf(setting, sizeof setting, "setting %s", CASES[c].name);
            s = drt_settings_set(set, CASES[c].name, CASES[c].bad);
            if (strcmp(CASES[c].name, "no_mmap") == 0) /* environment only: refused whatever the value */
                DRT_CHECK(s == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), "environment only"),
                          "set no_mmap: %d, %s", (int)s, drt_last_error());
            else
                DRT_CHECK(s == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), setting),
                          "set %s=%s: status %d, message \"%s\"", CASES[c].name, CASES[c].bad, (int)s,
                          drt_last_error());
        }
        drt_setting_info si;
        drt_setting_describe(c, &si);
        /* a caller's value wins over the environment's (a bad one included:
         * it is not read) */
        if (!si.env_only) {
            DRT_CHECK(drt_settings_set(set, CASES[c].name, CASES[c].good) == DRT_OK, "set %s=%s: %s", CASES[c].name,
                      CASES[c].good, drt_last_error());
            s = drt_settings_get(set, CASES[c].name, v, sizeof v, &src);
            DRT_CHECK(s == DRT_OK && src == DRT_SETTING_CALLER && strcmp(v, CASES[c].good) == 0,
                      "%s set over the variable: status %d, source %d, \"%s\"", CASES[c].name, (int)s, (int)src, v);
            DRT_CHECK(drt_settings_set(set, CASES[c].name, NULL) == DRT_OK, "unset %s", CASES[c].name);
            s = drt_settings_get(set, CASES[c].name, v, sizeof v, &src);
            DRT_CHECK(CASES[c].bad ? s == DRT_ERR_INVALID_ARG : src == DRT_SETTING_ENV,
                      "%s unset again: the variable is not read (%d)", CASES[c].name, (int)s);
        } else {
            DRT_CHECK(drt_settings_set(set, CASES[c].name, CASES[c].good) == DRT_ERR_INVALID_ARG,
                      "%s is environment only, yet set", CASES[c].name);
        }
        drt_settings_free(set);
        unsetenv(CASES[c].env);
    }
    drt_settings *set = NULL;
    drt_settings_create(&set);
    DRT_CHECK(drt_settings_set(set, "cpu.thread", "4") == DRT_ERR_INVALID_ARG &&
                  strstr(drt_last_error(), "unknown setting \"cpu.thread\"") && strstr(drt_last_error(), "cpu.threads"),
              "unknown name: %s", drt_last_error());
    DRT_CHECK(drt_settings_set(set, "cpu.threads", "") == DRT_ERR_INVALID_ARG, "an empty value is taken");
    DRT_CHECK(drt_settings_set(NULL, "cpu.threads", "2") == DRT_ERR_INVALID_ARG, "NULL settings taken");
    char tiny[2];
    drt_settings_set(set, "cpu.precision", "bf16");
    DRT_CHECK(drt_settings_get(set, "cpu.precision", tiny, sizeof tiny, NULL) == DRT_ERR_INVALID_ARG,
              "a value longer than the buffer");
    /* the typed getters */
    long long n = -1;
    int b = -1;
    drt_settings_set(set, "vulkan.mm_wg", "7");
    drt_settings_set(set, "cuda.graph", "0");
    DRT_CHECK(drt_setting_int(set, "vulkan.mm_wg", &n) == DRT_OK && n == 7, "int getter: %lld", n);
    DRT_CHECK(drt_setting_int(set, "vulkan.mm_tm", &n) == DRT_OK && n == 8, "int default: %lld", n);
    DRT_CHECK(drt_setting_int(set, "cpu.threads", &n) == DRT_OK && n == 0, "automatic default reads 0: %lld", n);
    DRT_CHECK(drt_setting_bool(set, "cuda.graph", &b) == DRT_OK && b == 0, "bool getter: %d", b);
    DRT_CHECK(drt_setting_bool(set, "cuda.verbose", &b) == DRT_OK && b == 0, "bool default: %d", b);
    DRT_CHECK(drt_setting_bool(set, "no.such", &b) == DRT_ERR_INVALID_ARG, "getter of an unknown name");
    drt_settings *copy = NULL;
    DRT_CHECK(drt_settings_copy(set, &copy) == DRT_OK && drt_setting_int(copy, "vulkan.mm_wg", &n) == DRT_OK && n == 7,
              "copy: %lld", n);
    drt_settings_free(copy);
    drt_settings_free(set);
}

/* stderr of fn() into buf */
static void capture_stderr(void (*fn)(void), char *buf, size_t n) {
    char path[] = DRT_TMP_DIR "/test_settings_stderr_XXXXXX";
    int fd = mkstemp(path);
    DRT_CHECK(fd >= 0, "mkstemp %s", path);
    if (fd < 0) return;
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t got = pread(fd, buf, n - 1, 0);
    buf[got > 0 ? got : 0] = 0;
    close(fd);
    unlink(path);
}

static drt_status g_s1, g_s2;
static char g_v[64];
static void read_fp16_twice(void) {
    g_s1 = drt_settings_get(NULL, "vulkan.fp16", g_v, sizeof g_v, NULL);
    g_s2 = drt_settings_get(NULL, "vulkan.fp16", g_v, sizeof g_v, NULL);
}

/* the old names: in force, one deprecation line per process, and the new
 * name wins over the old */
static void aliases(void) {
    unset_all();
    /* the deprecation line, exactly once for two reads: in a child, whose
     * "once" is still unspent (no alias is read before this) */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("DIFFRT_VK_FP16", "0", 1);
        char err[512];
        capture_stderr(read_fp16_twice, err, sizeof err);
        int ok = g_s1 == DRT_OK && g_s2 == DRT_OK && strcmp(g_v, "0") == 0 &&
                 strcmp(err, "diffrt: DIFFRT_VK_FP16 is deprecated, use DIFFRT_VULKAN_FP16\n") == 0;
        if (!ok) fprintf(stderr, "deprecation: status %d %d, value %s, stderr \"%s\"\n", g_s1, g_s2, g_v, err);
        _exit(ok ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    DRT_CHECK(st == 0, "the deprecation line (child status %d)", st);
    int n_alias = 0;
    for (int i = 0; i < drt_setting_count(); i++) {
        drt_setting_info si;
        drt_setting_describe(i, &si);
        if (!si.old_env) continue;
        n_alias++;
        int c = 0;
        while (c < N_CASES && strcmp(CASES[c].name, si.name) != 0) c++;
        setenv(si.old_env, CASES[c].good, 1);
        char v[256];
        drt_setting_source src;
        drt_status s = drt_settings_get(NULL, si.name, v, sizeof v, &src);
        DRT_CHECK(s == DRT_OK && src == DRT_SETTING_ENV && strcmp(v, CASES[c].good) == 0, "%s=%s: %d \"%s\"",
                  si.old_env, CASES[c].good, (int)s, v);
        if (CASES[c].bad) {
            setenv(si.old_env, CASES[c].bad, 1);
            s = drt_settings_get(NULL, si.name, v, sizeof v, &src);
            DRT_CHECK(s == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), si.old_env),
                      "%s=%s: the error names the variable set: %s", si.old_env, CASES[c].bad, drt_last_error());
            /* the new name wins (the old one is not read) */
            setenv(si.env, CASES[c].good, 1);
            s = drt_settings_get(NULL, si.name, v, sizeof v, &src);
            DRT_CHECK(s == DRT_OK && strcmp(v, CASES[c].good) == 0, "%s over %s: %d", si.env, si.old_env, (int)s);
            unsetenv(si.env);
        }
        unsetenv(si.old_env);
        DRT_CHECK(strncmp(si.old_env, "DIFFRT_VK_", 10) == 0 && strncmp(si.env, "DIFFRT_VULKAN_", 14) == 0 &&
                      strcmp(si.old_env + 10, si.env + 14) == 0,
                  "alias %s of %s", si.old_env, si.env);
    }
    DRT_CHECK(n_alias == 11, "%d deprecated aliases, want the 11 DIFFRT_VK_* names", n_alias);
}

/* the settings reach the backend and the session: a caller's good value wins
 * over a bad variable, which alone is an error naming it */
static void through_backend_and_session(void) {
    unset_all();
    setenv("DIFFRT_CPU_QDOT", "off", 1);
    drt_backend *be = NULL;
    drt_status s = drt_backend_open("cpu", NULL, &be);
    DRT_CHECK(s == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), "DIFFRT_CPU_QDOT"), "bad variable: %d %s", (int)s,
              drt_last_error());
    drt_backend_close(be);
    be = NULL;
    drt_settings *set = NULL;
    drt_settings_create(&set);
    drt_settings_set(set, "cpu.qdot", "0");
    drt_settings_set(set, "cpu.threads", "3");
    s = drt_backend_open_settings("cpu", NULL, 0, set, &be);
    DRT_CHECK(s == DRT_OK, "cpu.qdot=0 over DIFFRT_CPU_QDOT=off: %s", drt_last_error());
    /* the instance keeps its own copy */
    DRT_CHECK(be && be->settings && be->settings != set, "the backend's copy of the settings");
    drt_backend_close(be);
    be = NULL;
    /* int8 is a mode of the int8-dot GEMV: with it turned off, refused (on a
     * CPU without the GEMV, unavailable), never a silent f32 */
    drt_settings_set(set, "cpu.precision", "int8");
    s = drt_backend_open_settings("cpu", NULL, 0, set, &be);
    DRT_CHECK((s == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), "cpu.qdot=0")) ||
                  (s == DRT_ERR_UNAVAILABLE && strstr(drt_last_error(), "cpu.precision=int8")),
              "int8 without the int8-dot GEMV: %d %s", (int)s, drt_last_error());
    drt_backend_close(be);
    be = NULL;
    drt_settings_set(set, "cpu.precision", NULL);
    unsetenv("DIFFRT_CPU_QDOT");

    drt_model *m = NULL;
    DRT_CHECK(drt_model_load(DRT_MODELS_DIR "/diff-v1-tiny", &m) == DRT_OK, "load: %s", drt_last_error());
    setenv("DIFFRT_CHECK_FINITE", "on", 1);
    drt_session *ss = NULL;
    drt_session_opts so = {.backend = "cpu", .max_ctx = 8};
    s = drt_session_create(m, &so, &ss);
    DRT_CHECK(s == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), "DIFFRT_CHECK_FINITE"), "session, bad variable: %s",
              drt_last_error());
    drt_session_free(ss);
    ss = NULL;
    drt_settings_set(set, "check_finite", "1");
    so.settings = set;
    s = drt_session_create(m, &so, &ss);
    DRT_CHECK(s == DRT_OK, "session with check_finite=1 over DIFFRT_CHECK_FINITE=on: %s", drt_last_error());
    drt_settings_free(set); /* the session does not need it any more */
    if (s == DRT_OK) {
        int32_t ids[2] = {1, 2};
        float *lg = malloc(sizeof(float) * 70000);
        DRT_CHECK(drt_session_forward(ss, ids, 2, lg, 0) == DRT_OK, "forward after the settings were freed: %s",
                  drt_last_error());
        free(lg);
    }
    drt_session_free(ss);
    drt_model_free(m);
    unsetenv("DIFFRT_CHECK_FINITE");
}

/* vulkan.mm_tm / _tn / _wg were clamped: out of range, or TM x TN past 64,
 * they are errors now (where vulkan is here) */
static void vulkan_ranges(void) {
    unset_all();
    drt_backend *be = NULL;
    if (drt_backend_open("vulkan", NULL, &be) != DRT_OK) {
        printf("vulkan unavailable (%s): its range cases skipped\n", drt_last_error());
        return;
    }
    drt_backend_close(be);
    static const struct {
        const char *env, *val, *says;
    } cases[] = {
        {"DIFFRT_VULKAN_MM_TM", "33", "DIFFRT_VULKAN_MM_TM=33: expected an integer in [1, 32]"},
        {"DIFFRT_VK_MM_TN", "17", "DIFFRT_VK_MM_TN=17: expected an integer in [1, 16]"},
        {"DIFFRT_VK_MM_WG", "0", "DIFFRT_VK_MM_WG=0: expected an integer in [1, 64]"},
        {"DIFFRT_VULKAN_MM_TM", "32", "expected at most 64, got 32 x 4"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv(cases[i].env, cases[i].val, 1);
        be = NULL;
        drt_status s = drt_backend_open("vulkan", NULL, &be);
        DRT_CHECK(s == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), cases[i].says), "%s=%s: %d \"%s\"", cases[i].env,
                  cases[i].val, (int)s, s == DRT_OK ? "" : drt_last_error());
        drt_backend_close(be);
        unsetenv(cases[i].env);
    }
    /* a caller's value in range opens */
    drt_settings *set = NULL;
    drt_settings_create(&set);
    drt_settings_set(set, "vulkan.mm_tm", "16");
    setenv("DIFFRT_VULKAN_MM_TM", "99", 1);
    be = NULL;
    DRT_CHECK(drt_backend_open_settings("vulkan", NULL, 0, set, &be) == DRT_OK, "vulkan.mm_tm=16: %s",
              drt_last_error());
    drt_backend_close(be);
    unsetenv("DIFFRT_VULKAN_MM_TM");
    drt_settings_free(set);
}

/* the CLI: flag > env > default in diffrt info, and a bad --set exits 2
 * naming the setting, before any work (every command that opens a backend or
 * a session has the flag: info, run, bench, conform, niah, analyze); conform
 * hands it to the backends it checks */
static void cli(void) {
    static const struct {
        const char *cmd, *want; /* want: a line of stdout (exit 0) */
        const char *says;       /* else: exit 2, and this in its output */
    } cases[] = {
        {"DIFFRT_THREADS=5 " DRT_CLI_PATH " info --set cpu.threads=2", "cpu.threads            2        (flag)", NULL},
        {"DIFFRT_THREADS=5 " DRT_CLI_PATH " info", "cpu.threads            5        (env DIFFRT_THREADS)", NULL},
        {"DIFFRT_VK_TUNE=gpu " DRT_CLI_PATH " info 2>/dev/null",
         "vulkan.tune            gpu      (env DIFFRT_VK_TUNE, deprecated: use DIFFRT_VULKAN_TUNE) [debug]", NULL},
        {DRT_CLI_PATH " info", "cpu.precision          f32      (default)", NULL},
        {DRT_CLI_PATH " info --set cpu.precision=f16 2>&1", NULL,
         "diffrt: info: --set: setting cpu.precision: expected one of f32, bf16, int8, got \"f16\""},
        {DRT_CLI_PATH " info --set no_mmap=1 2>&1", NULL, "environment only"},
        {DRT_CLI_PATH " run --model " DRT_MODELS_DIR "/diff-v1-tiny --tokens 1 --set cpu.threads 2>&1", NULL,
         "diffrt: run: --set wants NAME=VALUE[,NAME=VALUE...], got \"cpu.threads\""},
        {DRT_CLI_PATH " bench --model " DRT_MODELS_DIR "/diff-v1-tiny --backend cpu --set cpu.thread=1 2>&1", NULL,
         "diffrt: bench: --set: unknown setting \"cpu.thread\""},
        {DRT_CLI_PATH " niah --model /nonexistent --set cpu.thread=1 2>&1", NULL,
         "diffrt: niah: --set: unknown setting \"cpu.thread\""},
        {DRT_CLI_PATH " analyze --model /nonexistent --set vulkan.fp17=1 2>&1", NULL,
         "diffrt: analyze: --set: unknown setting \"vulkan.fp17\""},
        {DRT_CLI_PATH " conform --backend cpu --set cpu.precision=f64 2>&1", NULL,
         "diffrt: conform: --set: setting cpu.precision: expected one of f32, bf16, int8, got \"f64\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = popen(cases[i].cmd, "r");
        DRT_CHECK(f != NULL, "popen %s", cases[i].cmd);
        if (!f) continue;
        char line[2048];
        int found = 0;
        while (fgets(line, sizeof line, f)) {
            line[strcspn(line, "\n")] = 0;
            if (cases[i].want && strcmp(line + strspn(line, " "), cases[i].want) == 0) found = 1;
            if (cases[i].says && strstr(line, cases[i].says)) found = 1;
        }
        int st = pclose(f);
        int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        DRT_CHECK(rc == (cases[i].want ? 0 : 2) && found, "%s: exit %d, \"%s\" %s", cases[i].cmd, rc,
                  cases[i].want ? cases[i].want : cases[i].says, found ? "found" : "missing");
    }
    /* conform --set reaches the backend it checks: its header line says
     * "precision bf16", or (a CPU without AVX512-BF16) why cpu.precision=bf16
     * cannot run; without the flag it says neither */
    for (int with = 0; with < 2; with++) {
        char cmd[1024], out[4096] = "";
        snprintf(cmd, sizeof cmd, "%s conform --backend cpu --op none%s 2>&1", DRT_CLI_PATH,
                 with ? " --set cpu.precision=bf16" : "");
        FILE *f = popen(cmd, "r");
        size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
        out[n] = 0;
        int st = f ? pclose(f) : -1;
        int said = strstr(out, "precision bf16") || strstr(out, "cpu.precision=bf16");
        DRT_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0 && said == with, "%s: exit %d, bf16 %s:\n%s", cmd,
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1, said ? "named" : "not named", out);
    }
}

int main(void) {
    table();
    by_env_and_api();
    aliases();
    through_backend_and_session();
    vulkan_ranges();
    cli();
    return drt_test_summary("test_settings");
}
