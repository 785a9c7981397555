/* The OpenCL backend's own check (backends/opencl), against the CPU reference:
 *   - every op, as a one-node graph built identically on "ref" and "opencl"
 *     from the same seeded inputs, outputs poisoned with NaN: NMSE <= 1e-8
 *     (every OpenCL path is f32: f16/bf16 weights are upcast exactly), no
 *     NaN/Inf where the reference has none, and zero CPU fallbacks. Shapes:
 *     T = 1, odd sizes (37, 129), GQA, p0 > 0, logits of +-300 and more,
 *     dk 64/128, dv 64/128/256, f16/bf16 weights; cache rows past S = p0+T
 *     hold NaN, so a kernel that reads one fails;
 *   - MATMUL cases through both GEMM paths (tiled, and CLBlast when built);
 *   - attention cases again with the keys split into ranges of 16 (the
 *     split-S path a decode step takes on a GPU, forced here on any device);
 *   - the decomposed DIFF_ATTN lowering (PERMUTE, batched MATMUL with trans_w,
 *     DUAL_SOFTMAX, views) run on OpenCL against the same graph on the CPU;
 *   - errors: an out-of-range EMBED id, malformed DIFFRT_OPENCL_* settings, a
 *     program that fails to build (the message carries the log), no ICD;
 *   - every fixture model: an OpenCL session against a CPU session (prefill,
 *     prefill at p0 > 0, decode), logits NMSE <= 1e-6, zero fallbacks.
 * When OpenCL is unavailable this test passes with a note, unless
 * DIFFRT_REQUIRE names opencl. `test_opencl --bench` times MATMUL 1024^3. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "diffrt/diffrt.h"
#include "drt_conform.h"
#include "drt_graph.h"
#include "drt_half.h"
#include "drt_test.h"

#define OP_NMSE 1e-8
#define MODEL_NMSE 1e-6
#define SEED 20241105u

/* ---- the op cases: the conformance table (conform/cases.c), on OpenCL ---------- */

/* Runs the shared op-case table (and, with models, every fixture) on
 * "opencl" against the CPU reference, opencl required: an unsupported op or
 * a CPU fallback fails. env NAME=VALUE (or NULL) selects a kernel path for
 * the backend opened inside the run. */
static void conform(const char *label, const char *ops, const char *env_name, const char *env_value,
                    const char *models) {
    if (env_name) setenv(env_name, env_value, 1);
    char *report = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&report, &len);
    drt_conform_opts o = {.backends = "opencl", .require = "opencl", .ops = ops, .models_dir = models, .out = mem};
    drt_conform_result r;
    drt_status s = drt_conform_run(&o, &r);
    fclose(mem);
    if (env_name) unsetenv(env_name);
    DRT_CHECK(s == DRT_OK, "%s: conform: %s", label, drt_last_error());
    DRT_CHECK(r.fail == 0 && r.unavailable_required == 0 && r.pass > 0, "%s: %d passed, %d failed, %d unsupported:\n%s",
              label, r.pass, r.fail, r.unsupported, report);
    printf("%-8s %d op/model cases pass on opencl\n", label, r.pass);
    free(report);
}

/* ---- errors --------------------------------------------------------------------- */

/* an id outside [0,V) is an error from the run, and the kernel reads nothing */
static void embed_bad_id(drt_backend *ocl) {
    drt_graph *g = drt_graph_new();
    drt_tensor *ids = drt_new_tensor_1d(g, DRT_I32, 3, "ids");
    drt_tensor *E = drt_new_tensor_2d(g, DRT_F32, 10, 8, "E");
    drt_tensor *y = drt_embed(g, ids, E);
    drt_plan *p = NULL;
    drt_status s = drt_plan_create(g, ocl, &p);
    DRT_CHECK(s == DRT_OK && y, "embed_bad_id: plan: %s", drt_last_error());
    if (s == DRT_OK) {
        float e[80] = {0};
        int32_t bad[3] = {1, 10, 2}, good[3] = {1, 9, 2};
        drt_tensor_set(E, e, sizeof e);
        drt_tensor_set(ids, bad, sizeof bad);
        drt_exec ex = {0};
        s = drt_plan_run(p, &ex);
        DRT_CHECK(s == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), "EMBED") && strstr(drt_last_error(), "10"),
                  "EMBED with id 10 of V=10: status %d, \"%s\"", (int)s, drt_last_error());
        /* the flag is cleared: the next good run succeeds */
        drt_tensor_set(ids, good, sizeof good);
        s = drt_plan_run(p, &ex);
        DRT_CHECK(s == DRT_OK, "EMBED after a bad id: %s", drt_last_error());
    }
    drt_plan_free(p);
    drt_graph_free(g);
}

/* malformed settings are errors naming the variable, not silent defaults */
static void bad_env(void) {
    static const struct {
        const char *var, *val;
    } cases[] = {{"DIFFRT_OPENCL_GEMM", "magic"}, {"DIFFRT_OPENCL_ATTN_SPLIT", "12x"}};
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        setenv(cases[i].var, cases[i].val, 1);
        drt_backend *be = NULL;
        drt_status s = drt_backend_open("opencl", NULL, &be);
        DRT_CHECK(s == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), cases[i].var), "%s=%s: status %d, \"%s\"",
                  cases[i].var, cases[i].val, (int)s, drt_last_error());
        drt_backend_close(be);
        unsetenv(cases[i].var);
    }
}

/* A program that does not compile: the error carries the compiler's log
 * (here a macro the kernels use, broken through the build options). */
static void build_failure(void) {
    setenv("DIFFRT_OPENCL_BUILD_OPTIONS", "-DATT_NT=(", 1);
    drt_backend *be = NULL;
    drt_status s = drt_backend_open("opencl", NULL, &be);
    const char *msg = drt_last_error();
    DRT_CHECK(s == DRT_ERR_BACKEND && strstr(msg, "building") && strstr(msg, ".cl") && strstr(msg, "attention.cl") &&
                  strlen(msg) > 120,
              "broken build options: status %d, \"%.300s\"", (int)s, msg);
    printf("build failure reported as: %.160s...\n", msg);
    drt_backend_close(be);
    unsetenv("DIFFRT_OPENCL_BUILD_OPTIONS");
}

/* No ICD: a child process points the ICD loader at an empty vendor folder
 * (before this process ever touched OpenCL, so nothing is cached) and asks
 * the registry: the answer must be "unavailable" with the reason, no crash. */
static void no_icd_probe(void) {
    pid_t pid = fork();
    if (pid == 0) {
        setenv("OCL_ICD_VENDORS", "/nonexistent-diffrt-test", 1);
        setenv("OCL_ICD_FILENAMES", "", 1);
        for (int i = 0; i < drt_backend_count(); i++) {
            drt_backend_info info;
            drt_backend_get_info(i, &info);
            if (strcmp(info.name, "opencl") != 0 || !info.compiled_in) continue;
            if (info.available) _exit(3); /* this loader ignores OCL_ICD_VENDORS */
            _exit(strstr(info.reason, "no OpenCL platform found") ? 0 : 2);
        }
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    if (code == 3)
        printf("no-ICD probe: skipped (the ICD loader ignores OCL_ICD_VENDORS)\n");
    else
        printf("no-ICD probe: %s\n", code == 0 ? "unavailable with its reason, as expected" : "FAILED");
    DRT_CHECK(code == 0 || code == 3, "probe without an ICD: child exit %d (2: wrong reason, >100: crashed)", code);
}

/* ---- whole models ------------------------------------------------------------------ */

static int session_run(drt_session *s, const int32_t *ids, int T, float *lg, int all) {
    return drt_session_forward(s, ids, T, lg, all) == DRT_OK ? 0 : -1;
}

static void check_model(const char *dir, const char *name, const char *gemm) {
    drt_model *m = NULL;
    drt_session *sc = NULL, *so = NULL;
    float *ref = NULL, *out = NULL;
    if (drt_model_load(dir, &m) != DRT_OK) {
        DRT_CHECK(0, "%s: load: %s", name, drt_last_error());
        return;
    }
    drt_model_info I;
    drt_model_get_info(m, &I);
    enum { T = 12, HALF = 5, DEC = 4 };
    int V = I.vocab;
    int32_t ids[T + DEC];
    drt_rng r;
    drt_rng_seed(&r, SEED);
    for (int i = 0; i < T; i++) ids[i] = 3 + (int32_t)(drt_rng_next(&r) % (uint64_t)(V - 3));
    drt_session_opts oc = {.backend = "ref", .max_ctx = T + DEC + 1};
    drt_session_opts oo = {.backend = "opencl", .max_ctx = T + DEC + 1};
    setenv("DIFFRT_OPENCL_GEMM", gemm, 1);
    drt_status s = drt_session_create(m, &oc, &sc);
    if (s == DRT_OK) s = drt_session_create(m, &oo, &so);
    unsetenv("DIFFRT_OPENCL_GEMM");
    if (s != DRT_OK) {
        DRT_CHECK(0, "%s (%s): session: %s", name, gemm, drt_last_error());
        goto done;
    }
    ref = malloc(sizeof(float) * (size_t)(T + DEC) * V);
    out = malloc(sizeof(float) * (size_t)(T + DEC) * V);
    drt_fill_nan(out, (int64_t)(T + DEC) * V);
    /* prefill of the whole prompt; then DEC greedy decode steps (the CPU's tokens) */
    int ok = session_run(sc, ids, T, ref, 1) == 0 && session_run(so, ids, T, out, 1) == 0;
    for (int i = 0; ok && i < DEC; i++) {
        const float *last = ref + (size_t)(T + i - 1) * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (last[v] > last[best]) best = v;
        ids[T + i] = best;
        ok = session_run(sc, ids + T + i, 1, ref + (size_t)(T + i) * V, 1) == 0 &&
             session_run(so, ids + T + i, 1, out + (size_t)(T + i) * V, 1) == 0;
    }
    DRT_CHECK(ok, "%s (%s): forward: %s", name, gemm, drt_last_error());
    if (!ok) goto done;
    double ep = drt_nmse(out, ref, (int64_t)T * V);
    double ed = drt_nmse(out + (size_t)T * V, ref + (size_t)T * V, (int64_t)DEC * V);
    /* prefill of HALF tokens, then the rest as one chunk at p0 = HALF */
    drt_session_reset(so);
    drt_fill_nan(out, (int64_t)T * V);
    ok = session_run(so, ids, HALF, out, 1) == 0 &&
         session_run(so, ids + HALF, T - HALF, out + (size_t)HALF * V, 1) == 0;
    double ec = ok ? drt_nmse(out, ref, (int64_t)T * V) : INFINITY;
    char fbs[256];
    int fb = drt_session_fallbacks(so, fbs, sizeof fbs);
    printf("model   %-20s gemm=%-7s prefill NMSE %.2e  decode NMSE %.2e  chunked NMSE %.2e  "
           "fallbacks %d\n",
           name, gemm, ep, ed, ec, fb);
    DRT_CHECK(ep <= MODEL_NMSE && ed <= MODEL_NMSE && ec <= MODEL_NMSE,
              "%s (%s): logits NMSE prefill %.3e decode %.3e chunked %.3e (bound %.0e)", name, gemm, ep, ed, ec,
              MODEL_NMSE);
    DRT_CHECK(fb == 0, "%s (%s): %d CPU fallbacks: %s", name, gemm, fb, fbs);
done:
    free(ref);
    free(out);
    drt_session_free(so);
    drt_session_free(sc);
    drt_model_free(m);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void check_models(const char *gemm) {
    DIR *d = opendir(DRT_FIXTURES_DIR);
    DRT_CHECK(d != NULL, "cannot open %s", DRT_FIXTURES_DIR);
    if (!d) return;
    char *names[64];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 64) {
        char p[1300];
        snprintf(p, sizeof p, "%s/%s/config.json", DRT_FIXTURES_DIR, e->d_name);
        if (access(p, R_OK) == 0) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    DRT_CHECK(n >= 1, "no fixture models under %s", DRT_FIXTURES_DIR);
    for (int i = 0; i < n; i++) {
        char p[1300];
        snprintf(p, sizeof p, "%s/%s", DRT_FIXTURES_DIR, names[i]);
        check_model(p, names[i], gemm);
        free(names[i]);
    }
}

/* ---- bench: MATMUL 1024^3 through each GEMM path ------------------------------------ */

/* conform --perf's MATMUL shapes through each GEMM path */
static int bench(void) {
    static const char *const gemms[] = {"tiled",
#ifdef DIFFRT_HAVE_CLBLAST
                                        "clblast"
#endif
    };
    for (size_t i = 0; i < sizeof gemms / sizeof gemms[0]; i++) {
        printf("DIFFRT_OPENCL_GEMM=%s\n", gemms[i]);
        setenv("DIFFRT_OPENCL_GEMM", gemms[i], 1);
        drt_conform_opts o = {
            .backends = "opencl", .ops = "MATMUL", .perf = 1, .repeats = 10, .warmup = 1, .out = stdout};
        drt_conform_result r;
        if (drt_conform_run(&o, &r) != DRT_OK) printf("bench %s: %s\n", gemms[i], drt_last_error());
        unsetenv("DIFFRT_OPENCL_GEMM");
    }
    return 0;
}

/* ---- main ---------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    no_icd_probe(); /* first: in a child, before this process loads any ICD */
    drt_backend *cpu = NULL, *ocl = NULL;
    drt_status s = drt_backend_open("opencl", NULL, &ocl);
    if (s != DRT_OK) {
        const char *req = getenv("DIFFRT_REQUIRE");
        if (req && strstr(req, "opencl")) {
            DRT_CHECK(0, "opencl is required (DIFFRT_REQUIRE=%s) but unavailable: %s", req, drt_last_error());
            return drt_test_summary("test_opencl");
        }
        printf("opencl unavailable: %s\n", drt_last_error());
        return 0;
    }
    int idx = -1;
    for (int i = 0; i < drt_backend_count(); i++) {
        drt_backend_info info;
        drt_backend_get_info(i, &info);
        if (strcmp(info.name, "opencl") == 0) idx = i;
    }
    char dn[256] = "";
    drt_backend_device_name(idx, ocl->device, dn, sizeof dn);
    printf("opencl device %d: %s\n", ocl->device, dn);
    DRT_CHECK(strstr(dn, " (") && strstr(dn, "OpenCL ") &&
                  (strstr(dn, "GPU)") || strstr(dn, "CPU)") || strstr(dn, "accelerator)") || strstr(dn, "other)")),
              "device name \"%s\" is not \"name (platform, OpenCL x.y, type)\"", dn);
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        drt_backend_close(ocl);
        return bench();
    }
    s = drt_backend_open("ref", NULL, &cpu);
    DRT_CHECK(s == DRT_OK, "cpu backend: %s", drt_last_error());
    if (s != DRT_OK) return drt_test_summary("test_opencl");

    conform("tiled", NULL, NULL, NULL, NULL);
    /* the split-S (flash decoding) attention path, forced on any device */
    conform("split16", "DIFF_ATTN,ATTN", "DIFFRT_OPENCL_ATTN_SPLIT", "16", NULL);
#ifdef DIFFRT_HAVE_CLBLAST
    conform("clblast", "MATMUL,DIFF_ATTN", "DIFFRT_OPENCL_GEMM", "clblast", NULL);
#else
    printf("clblast: not built (CLBlast was not found at configure time)\n");
#endif

    embed_bad_id(ocl);
    bad_env();
    build_failure();
    drt_backend_close(ocl);
    drt_backend_close(cpu);

    check_models("tiled");
#ifdef DIFFRT_HAVE_CLBLAST
    check_models("clblast");
#endif
    return drt_test_summary("test_opencl");
}
