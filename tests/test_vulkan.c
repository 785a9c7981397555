/* The Vulkan backend's own check (backends/vulkan and its shaders/):
 *   - availability: with no loader (DIFFRT_VK_LOADER pointing nowhere) and
 *     with no driver (VK_DRIVER_FILES / VK_ICD_FILENAMES pointing nowhere),
 *     each in a fresh child process, vulkan is "unavailable: <reason>" and
 *     nothing crashes;
 *   - devices: the description `diffrt info` prints, selection by index and
 *     by name substring, a clear error for a name that matches nothing;
 *   - settings: a bad value of each DIFFRT_VK_* switch is an error naming it;
 *   - init and shutdown: each open makes the three fixed buffers and the
 *     prewarmed pipelines, the same on a second open after a close;
 *   - the whole conformance table (every op case, and with --full every
 *     fixture model, docs/design.md section 6; ctest test_vulkan_full, label
 *     slow: ctest conform has them all on vulkan with --quick) through
 *     drt_conform_run with cpu and vulkan both
 *     required: any failure, unsupported case or CPU fallback fails; then
 *     the op table again with the workgroup shapes chosen for GPUs
 *     (DIFFRT_VK_TUNE=gpu: 64x64 GEMM tiles of 256 threads, 256-wide
 *     reductions), and once more with shared-memory reductions and packed
 *     f16 weights too (DIFFRT_VK_SUBGROUP=0 DIFFRT_VK_FP16=0), the paths a
 *     device without subgroup arithmetic or 16-bit storage takes; and the
 *     attention cases with CPU shapes but no subgroup operations (the rows
 *     kernel where the lanes kernel would run);
 *   - recording: independent dispatches share no barrier, a dependent one
 *     gets one; the decomposed DIFF_ATTN lowering (PERMUTE, views, batched
 *     and transposed MATMUL, DUAL_SOFTMAX) chained in one command buffer
 *     equals the fused kernel on the CPU;
 *   - split-key attention (decode): the split path runs (two dispatches),
 *     matches the CPU at S = 11 (no split), 101 and 300 keys, and a growing
 *     cache never reallocates its scratch;
 *   - steady state: a decode step is exactly one compute submission and
 *     creates no pipeline, descriptor set or buffer;
 *   - an out-of-range EMBED id is an error, not a read, also from the second
 *     of two EMBEDs in one pass.
 * When Vulkan is unavailable this test passes with a note, unless the
 * environment variable DIFFRT_REQUIRE names vulkan. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "diffrt/diffrt.h"
#include "drt_conform.h"
#include "drt_graph.h"
#include "drt_test.h"
#ifdef DIFFRT_HAVE_VULKAN
#include "../backends/vulkan/drt_vulkan.h"
#include "drt_module.h"

/* The Vulkan module's process-wide counters: the module is opened at run
 * time, so its functions are reached through the registry. */
static void vk_counters(drt_vk_counters *out) {
    void (*get)(drt_vk_counters *);
    *(void **)&get = drt_backend_module_symbol("vulkan", "drt_vk_get_counters");
    if (!get) {
        fprintf(stderr, "FAIL: the vulkan module is not loaded or lacks drt_vk_get_counters\n");
        exit(1);
    }
    get(out);
}
#endif

static int required(void) {
    const char *req = getenv("DIFFRT_REQUIRE");
    return req && strstr(req, "vulkan");
}

/* exit status of a child that expects vulkan to be unavailable under env */
static int check_unavailable_child(const char *env1, const char *env2, const char *val) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        setenv(env1, val, 1);
        if (env2) setenv(env2, val, 1);
        int idx = -1;
        for (int i = 0; i < drt_backend_count(); i++) {
            drt_backend_info bi;
            drt_backend_get_info(i, &bi);
            if (strcmp(bi.name, "vulkan") == 0) idx = i;
        }
        drt_backend_info bi;
        if (idx < 0 || drt_backend_get_info(idx, &bi) != DRT_OK) _exit(2);
        if (bi.available || !bi.reason || !bi.reason[0]) _exit(3);
        drt_backend *be = NULL;
        drt_status s = drt_backend_open("vulkan", NULL, &be);
        if (s != DRT_ERR_UNAVAILABLE || be) _exit(4);
        printf("  %s=%s: vulkan unavailable: %s\n", env1, val, bi.reason);
        fflush(stdout);
        _exit(0);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

#ifdef DIFFRT_HAVE_VULKAN

/* ---- small graphs ---------------------------------------------------------------- */

static void fill(drt_tensor *t, drt_rng *r, float mag) {
    int64_t n = drt_nelem(t);
    float *h = malloc(sizeof(float) * (size_t)n + 4);
    drt_fill_uniform(h, n, r, -mag, mag);
    DRT_CHECK(drt_tensor_set(t, h, sizeof(float) * (size_t)n) == DRT_OK, "upload %s: %s", t->name, drt_last_error());
    free(h);
}

static float *get(const drt_tensor *t) {
    int64_t n = drt_nelem(t);
    float *h = malloc(sizeof(float) * (size_t)n + 4);
    drt_fill_nan(h, n);
    DRT_CHECK(drt_tensor_get(t, h, sizeof(float) * (size_t)n) == DRT_OK, "download %s: %s", t->name, drt_last_error());
    return h;
}

/* y1 = a + b and y2 = a + c are independent: one barrier-free batch; y3 =
 * y1 + y2 reads both: exactly one barrier before it. */
/* backend.c's init runs device.c, pipeline.c, dispatch.c and memory.c in
 * turn and shutdown releases each: every open makes exactly the fixed
 * buffers (staging, status, dummy) and the shape-independent pipelines
 * (prewarm), as many on the second open as on the first, and a failed open
 * (a bad setting) in between makes neither. */
static void test_init_parts(void) {
    int64_t bufs[2] = {0, 0}, pipes[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        drt_vk_counters c0, c1, c2;
        drt_backend *b = NULL;
        vk_counters(&c0);
        DRT_CHECK(drt_backend_open("vulkan", NULL, &b) == DRT_OK, "open %d: %s", k, drt_last_error());
        vk_counters(&c1);
        if (b) drt_backend_close(b);
        bufs[k] = c1.buffers - c0.buffers;
        pipes[k] = c1.pipelines - c0.pipelines;
        DRT_CHECK(bufs[k] == 3, "open %d made %lld buffers, expected 3 (staging, status, dummy)", k,
                  (long long)bufs[k]);
        DRT_CHECK(pipes[k] > 0, "open %d made no pipeline: prewarm did not run", k);
        setenv("DIFFRT_VK_TUNE", "fast", 1);
        b = NULL;
        drt_status s = drt_backend_open("vulkan", NULL, &b);
        unsetenv("DIFFRT_VK_TUNE");
        DRT_CHECK(s != DRT_OK, "DIFFRT_VK_TUNE=fast opened");
        if (s == DRT_OK) drt_backend_close(b);
        vk_counters(&c2);
        DRT_CHECK(c2.buffers == c1.buffers && c2.pipelines == c1.pipelines,
                  "a failed open made %lld buffers and %lld pipelines", (long long)(c2.buffers - c1.buffers),
                  (long long)(c2.pipelines - c1.pipelines));
    }
    DRT_CHECK(pipes[1] == pipes[0], "the second open made %lld pipelines, the first %lld", (long long)pipes[1],
              (long long)pipes[0]);
}

static void test_barriers(drt_backend *vk) {
    drt_graph *g = drt_graph_new();
    drt_tensor *a = drt_new_tensor_1d(g, DRT_F32, 1000, "a");
    drt_tensor *b = drt_new_tensor_1d(g, DRT_F32, 1000, "b");
    drt_tensor *c = drt_new_tensor_1d(g, DRT_F32, 1000, "c");
    drt_tensor *y1 = drt_add(g, a, b), *y2 = drt_add(g, a, c);
    drt_tensor *y3 = drt_add(g, y1, y2);
    drt_plan *p = NULL;
    DRT_CHECK(drt_plan_create(g, vk, &p) == DRT_OK, "plan: %s", drt_last_error());
    if (!p) {
        drt_graph_free(g);
        return;
    }
    drt_rng r;
    drt_rng_seed(&r, 7);
    fill(a, &r, 1);
    fill(b, &r, 1);
    fill(c, &r, 1);
    drt_vk_counters c0, c1;
    vk_counters(&c0);
    drt_exec ex = {0};
    DRT_CHECK(drt_plan_run(p, &ex) == DRT_OK, "run: %s", drt_last_error());
    vk_counters(&c1);
    DRT_CHECK(c1.dispatches - c0.dispatches == 3, "3 dispatches expected, got %lld",
              (long long)(c1.dispatches - c0.dispatches));
    DRT_CHECK(c1.barriers - c0.barriers == 1, "exactly 1 barrier expected (before y3), got %lld",
              (long long)(c1.barriers - c0.barriers));
    DRT_CHECK(c1.compute_submits - c0.compute_submits == 1, "one submission per run, got %lld",
              (long long)(c1.compute_submits - c0.compute_submits));
    float *ha = get(a), *hb = get(b), *hc = get(c), *h3 = get(y3);
    int bad = 0;
    for (int i = 0; i < 1000; i++) bad += h3[i] != (ha[i] + hb[i]) + (ha[i] + hc[i]);
    DRT_CHECK(bad == 0, "y3 = (a+b)+(a+c) wrong in %d of 1000 elements", bad);
    free(ha);
    free(hb);
    free(hc);
    free(h3);
    drt_plan_free(p);
    drt_graph_free(g);
}

/* The decomposed DIFF_ATTN lowering on vulkan against the fused kernel on
 * the CPU, same inputs: T=9 new tokens after p0 = S - T = 15, H=4, G=2. */
static void test_decomposed(drt_backend *vk, drt_backend *cpu, int m, int lambda_th) {
    const int T = 9, S = 24, H = 4, G = 2, dk = 32, dv = 64;
    drt_graph *g[2];
    drt_tensor *o[2], *in[2][4];
    drt_backend *bes[2] = {vk, cpu};
    drt_plan *p[2] = {0};
    for (int i = 0; i < 2; i++) {
        g[i] = drt_graph_new();
        in[i][0] = drt_new_tensor_4d(g[i], DRT_F32, T, H, 2, dk, "q");
        in[i][1] = drt_new_tensor_4d(g[i], DRT_F32, S, G, m, dk, "k");
        in[i][2] = drt_new_tensor_3d(g[i], DRT_F32, S, G, dv, "v");
        in[i][3] = lambda_th ? drt_new_tensor_2d(g[i], DRT_F32, T, H, "lambda") : NULL;
        o[i] = i == 0 ? drt_diff_attn_decomposed(g[i], in[i][0], in[i][1], in[i][2], 0.7f, in[i][3])
                      : drt_diff_attn(g[i], in[i][0], in[i][1], in[i][2], 0.7f, in[i][3], drt_new_rows(g[i], T));
        DRT_CHECK(o[i] != NULL, "build: %s", drt_last_error());
        if (o[i]) DRT_CHECK(drt_plan_create(g[i], bes[i], &p[i]) == DRT_OK, "plan: %s", drt_last_error());
    }
    if (p[0] && p[1]) {
        for (int i = 0; i < 2; i++) {
            drt_rng r;
            drt_rng_seed(&r, 1234);
            for (int j = 0; j < 4; j++)
                if (in[i][j]) fill(in[i][j], &r, j == 3 ? 0.5f : 1.0f);
            drt_exec ex;
            int32_t rows[2 * 9]; /* (T, 2) */
            drt_exec_seq(&ex, rows, T, 0, S - T);
            DRT_CHECK(drt_plan_run(p[i], &ex) == DRT_OK, "run on %s: %s", bes[i]->ops->name, drt_last_error());
        }
        DRT_CHECK(drt_plan_fallback_count(p[0], DRT_OP_PERMUTE) + drt_plan_fallback_count(p[0], DRT_OP_MATMUL) +
                          drt_plan_fallback_count(p[0], DRT_OP_DUAL_SOFTMAX) ==
                      0,
                  "decomposed path fell back to the CPU");
        float *a = get(o[0]), *b = get(o[1]);
        int64_t n = drt_nelem(o[1]);
        double e = drt_nmse(a, b, n);
        printf("  decomposed DIFF_ATTN (m=%d, lambda %s) on vulkan vs fused on cpu: NMSE %.3e\n", m,
               lambda_th ? "per-token" : "scalar", e);
        DRT_CHECK(e <= 1e-8, "decomposed vs fused NMSE %.3e > 1e-8 (m=%d)", e, m);
        free(a);
        free(b);
    }
    for (int i = 0; i < 2; i++) {
        drt_plan_free(p[i]);
        drt_graph_free(g[i]);
    }
}

/* Decode (T=1) DIFF_ATTN over a cache of 300 rows at p0 = 10, 100, 299:
 * few workgroups, so from 64 keys on the keys are split (attention pass +
 * combine pass); every p0 against the CPU on the same inputs. */
static void test_split_attention(drt_backend *vk, drt_backend *cpu) {
    const int Sc = 300, H = 8, G = 2, dk = 64, dv = 128;
    const int p0s[3] = {10, 100, 299};
    const int64_t want_dispatches[3] = {1, 2, 2};
    drt_graph *g[2];
    drt_tensor *o[2], *in[2][3];
    drt_plan *p[2] = {0};
    drt_backend *bes[2] = {vk, cpu};
    for (int i = 0; i < 2; i++) {
        g[i] = drt_graph_new();
        in[i][0] = drt_new_tensor_4d(g[i], DRT_F32, 1, H, 2, dk, "q");
        in[i][1] = drt_new_tensor_4d(g[i], DRT_F32, Sc, G, 2, dk, "k");
        in[i][2] = drt_new_tensor_3d(g[i], DRT_F32, Sc, G, dv, "v");
        o[i] = drt_diff_attn(g[i], in[i][0], in[i][1], in[i][2], 0.6f, NULL, drt_new_rows(g[i], 1));
        DRT_CHECK(o[i] && drt_plan_create(g[i], bes[i], &p[i]) == DRT_OK, "plan: %s", drt_last_error());
        if (!p[i]) continue;
        drt_rng r;
        drt_rng_seed(&r, 99);
        for (int j = 0; j < 3; j++) fill(in[i][j], &r, j == 0 ? 4.0f : 1.0f);
    }
    for (int k = 0; p[0] && p[1] && k < 3; k++) {
        drt_exec ex;
        int32_t rows[2];
        drt_exec_seq(&ex, rows, 1, 0, p0s[k]);
        drt_vk_counters c0, c1;
        vk_counters(&c0);
        DRT_CHECK(drt_plan_run(p[0], &ex) == DRT_OK, "vulkan p0=%d: %s", p0s[k], drt_last_error());
        vk_counters(&c1);
        DRT_CHECK(drt_plan_run(p[1], &ex) == DRT_OK, "cpu p0=%d: %s", p0s[k], drt_last_error());
        DRT_CHECK(c1.dispatches - c0.dispatches == want_dispatches[k], "S=%d: %lld dispatches, expected %lld",
                  p0s[k] + 1, (long long)(c1.dispatches - c0.dispatches), (long long)want_dispatches[k]);
        if (k == 2)
            DRT_CHECK(c1.buffers == c0.buffers && c1.pipelines == c0.pipelines,
                      "S=300 after S=101: %lld buffers and %lld pipelines created (the scratch must be sized "
                      "for the whole cache once)",
                      (long long)(c1.buffers - c0.buffers), (long long)(c1.pipelines - c0.pipelines));
        float *a = get(o[0]), *b = get(o[1]);
        double e = drt_nmse(a, b, drt_nelem(o[1]));
        printf("  decode DIFF_ATTN S=%d (%s): NMSE %.3e\n", p0s[k] + 1,
               want_dispatches[k] > 1 ? "split keys" : "one pass", e);
        DRT_CHECK(e <= 1e-8, "decode DIFF_ATTN S=%d: NMSE %.3e > 1e-8", p0s[k] + 1, e);
        free(a);
        free(b);
    }
    for (int i = 0; i < 2; i++) {
        drt_plan_free(p[i]);
        drt_graph_free(g[i]);
    }
}

/* An id outside [0, V) is never read: the run fails and says which. Two
 * EMBEDs in one pass both report through the status buffer: the second
 * (from a 12-row table, so that id 10 is fine there) must be ordered after
 * the first. */
static void test_embed_error(drt_backend *vk) {
    drt_graph *g = drt_graph_new();
    drt_tensor *ids = drt_new_tensor_1d(g, DRT_I32, 3, "ids");
    drt_tensor *E = drt_new_tensor_2d(g, DRT_F32, 10, 8, "E");
    drt_tensor *E2 = drt_new_tensor_2d(g, DRT_F32, 12, 8, "E2");
    drt_tensor *y2 = drt_embed(g, ids, E2);
    drt_tensor *y = drt_embed(g, ids, E);
    drt_plan *p = NULL;
    DRT_CHECK(y && y2 && drt_plan_create(g, vk, &p) == DRT_OK, "plan: %s", drt_last_error());
    if (p) {
        drt_rng r;
        drt_rng_seed(&r, 3);
        fill(E, &r, 1);
        fill(E2, &r, 1);
        int32_t bad[3] = {1, 10, 2};
        drt_tensor_set(ids, bad, sizeof bad);
        drt_exec ex = {0};
        drt_status s = drt_plan_run(p, &ex);
        DRT_CHECK(s == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), "10") && strstr(drt_last_error(), "[0, 10)"),
                  "bad EMBED id: expected an error naming id 10 and [0, 10), got %s: %s", drt_status_str(s),
                  drt_last_error());
        /* and the backend is usable afterwards */
        int32_t good[3] = {1, 9, 0};
        drt_tensor_set(ids, good, sizeof good);
        DRT_CHECK(drt_plan_run(p, &ex) == DRT_OK, "run after an error: %s", drt_last_error());
        float *hy = get(y), *he = get(E);
        DRT_CHECK(hy[8] == he[9 * 8] && hy[0] == he[8], "EMBED rows wrong after the error");
        free(hy);
        free(he);
    }
    drt_plan_free(p);
    drt_graph_free(g);
}

/* A decode step: one compute submission, nothing created. */
/* KV_WRITE is one copy; PERMUTE keeping runs of 64 bytes or more is copy
 * regions (on a CPU device; on a GPU only up to 16 regions), a shorter run
 * goes through the shader; each against the CPU. The counts are not
 * checked under DIFFRT_VK_COPY=0 (everything is a dispatch then). */
static void test_copies(drt_backend *vk, drt_backend *cpu, bool cpu_device) {
    const char *env = getenv("DIFFRT_VK_COPY");
    const bool copies = !(env && strcmp(env, "0") == 0);
    static const struct {
        int ne[4], perm[4];
        int64_t copies_cpu, copies_gpu;
        const char *what;
    } C[] = {
        {{5, 3, 7, 16}, {2, 1, 0, 3}, 1, 0, "PERMUTE (5,3,7,16) perm (2,1,0,3): 105 runs of 64 bytes"},
        {{5, 3, 7, 15}, {2, 1, 0, 3}, 0, 0, "PERMUTE (5,3,7,15) perm (2,1,0,3): 60-byte runs, shader"},
        {{4, 1, 3, 32}, {1, 0, 2, 3}, 1, 1, "PERMUTE (4,1,3,32) perm (1,0,2,3): 4 runs merged into 1"},
        {{0, 0, 0, 0}, {0, 0, 0, 0}, 1, 1, "KV_WRITE 5 rows of 2x24 into a cache of 12 at p0 = 6"},
    };
    for (int k = 0; k < 4; k++) {
        drt_graph *g[2];
        drt_tensor *y[2], *in[2][2];
        drt_plan *p[2] = {0};
        drt_backend *bes[2] = {vk, cpu};
        for (int i = 0; i < 2; i++) {
            g[i] = drt_graph_new();
            if (k < 3) {
                in[i][0] = drt_new_tensor_4d(g[i], DRT_F32, C[k].ne[0], C[k].ne[1], C[k].ne[2], C[k].ne[3], "x");
                in[i][1] = NULL;
                y[i] = drt_permute(g[i], in[i][0], C[k].perm[0], C[k].perm[1], C[k].perm[2], C[k].perm[3]);
            } else {
                in[i][0] = drt_new_tensor_3d(g[i], DRT_F32, 5, 2, 24, "src");
                in[i][1] = drt_new_tensor_3d(g[i], DRT_F32, 12, 2, 24, "cache");
                y[i] = drt_kv_write(g[i], in[i][0], in[i][1], drt_new_rows(g[i], 5));
            }
            DRT_CHECK(y[i] && drt_plan_create(g[i], bes[i], &p[i]) == DRT_OK, "plan: %s", drt_last_error());
        }
        const int64_t want = cpu_device ? C[k].copies_cpu : C[k].copies_gpu;
        for (int i = 0; i < 2 && p[0] && p[1]; i++) {
            drt_rng r;
            drt_rng_seed(&r, 31);
            for (int j = 0; j < 2; j++)
                if (in[i][j]) fill(in[i][j], &r, 1);
            drt_vk_counters c0, c1;
            vk_counters(&c0);
            drt_exec ex;
            int32_t rows[2 * 5];
            drt_exec_seq(&ex, rows, 5, 0, 6);
            DRT_CHECK(drt_plan_run(p[i], &ex) == DRT_OK, "%s: run: %s", C[k].what, drt_last_error());
            vk_counters(&c1);
            if (i == 0 && copies)
                DRT_CHECK(c1.copies - c0.copies == want && c1.dispatches - c0.dispatches == 1 - want,
                          "%s: %lld copies and %lld dispatches, expected %lld copies", C[k].what,
                          (long long)(c1.copies - c0.copies), (long long)(c1.dispatches - c0.dispatches),
                          (long long)want);
        }
        if (p[0] && p[1]) {
            float *a = get(y[0]), *b = get(y[1]);
            int64_t n = drt_nelem(y[1]), bad = 0;
            for (int64_t i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
            printf("  %s: %s, %lld of %lld elements differ from ref\n", C[k].what, copies && want ? "copies" : "shader",
                   (long long)bad, (long long)n);
            DRT_CHECK(bad == 0, "%s: %lld elements differ", C[k].what, (long long)bad);
            free(a);
            free(b);
        }
        for (int i = 0; i < 2; i++) {
            drt_plan_free(p[i]);
            drt_graph_free(g[i]);
        }
    }
}

static void test_steady_state(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/diff_v2", DRT_FIXTURES_DIR);
    drt_model *m = NULL;
    DRT_CHECK(drt_model_load(dir, &m) == DRT_OK, "load %s: %s", dir, drt_last_error());
    if (!m) return;
    drt_model_info I;
    drt_model_get_info(m, &I);
    drt_session *s = NULL;
    drt_session_opts so = {.backend = "vulkan", .max_ctx = 32};
    DRT_CHECK(drt_session_create(m, &so, &s) == DRT_OK, "session: %s", drt_last_error());
    if (s) {
        float *logits = malloc(sizeof(float) * (size_t)I.vocab * 4);
        int32_t prompt[4] = {1, 17, 42, 99}, tok = 5;
        /* the decode plan's pipelines were made with the session: a first
         * one-token step compiles nothing */
        drt_vk_counters w0, w1;
        vk_counters(&w0);
        DRT_CHECK(drt_session_forward(s, &tok, 1, logits, 0) == DRT_OK, "first step: %s", drt_last_error());
        vk_counters(&w1);
        DRT_CHECK(w1.pipelines == w0.pipelines, "the first decode step created %lld pipelines",
                  (long long)(w1.pipelines - w0.pipelines));
        drt_session_reset(s);
        DRT_CHECK(drt_session_forward(s, prompt, 4, logits, 1) == DRT_OK, "prefill: %s", drt_last_error());
        DRT_CHECK(drt_session_forward(s, &tok, 1, logits, 0) == DRT_OK, "decode: %s", drt_last_error());
        drt_vk_counters c0, c1;
        vk_counters(&c0);
        for (int i = 0; i < 3; i++)
            DRT_CHECK(drt_session_forward(s, &tok, 1, logits, 0) == DRT_OK, "decode: %s", drt_last_error());
        vk_counters(&c1);
        printf("  3 decode steps: %lld compute submissions, %lld dispatches, %lld barriers, %lld new pipelines, "
               "%lld new descriptor sets, %lld new buffers\n",
               (long long)(c1.compute_submits - c0.compute_submits), (long long)(c1.dispatches - c0.dispatches),
               (long long)(c1.barriers - c0.barriers), (long long)(c1.pipelines - c0.pipelines),
               (long long)(c1.descriptor_sets - c0.descriptor_sets), (long long)(c1.buffers - c0.buffers));
        DRT_CHECK(c1.compute_submits - c0.compute_submits == 3, "one compute submission per decode step");
        DRT_CHECK(c1.pipelines == c0.pipelines, "a decode step created pipelines");
        DRT_CHECK(c1.descriptor_sets == c0.descriptor_sets, "a decode step wrote descriptor sets");
        DRT_CHECK(c1.buffers == c0.buffers, "a decode step created buffers");
        char fb[256];
        DRT_CHECK(drt_session_fallbacks(s, fb, sizeof fb) == 0, "CPU fallbacks: %s", fb);
        free(logits);
    }
    drt_session_free(s);
    drt_model_free(m);
}

static void run_conform(const char *what, const char *models, const char *ops) {
    drt_conform_opts o = {
        .backends = "cpu,vulkan", .ops = ops, .require = "cpu,vulkan", .models_dir = models, .out = stdout};
    drt_conform_result r;
    printf("== conformance: %s ==\n", what);
    drt_status s = drt_conform_run(&o, &r);
    DRT_CHECK(s == DRT_OK, "%s: the harness failed: %s", what, drt_last_error());
    DRT_CHECK(r.fail == 0 && r.unavailable_required == 0 && r.unsupported == 0,
              "%s: %d failed, %d unsupported, required unavailable %d", what, r.fail, r.unsupported,
              r.unavailable_required);
    DRT_CHECK(r.pass > 0, "%s: nothing passed", what);
}

#endif /* DIFFRT_HAVE_VULKAN */

int main(int argc, char **argv) {
    /* first, before this process loads any Vulkan library */
    printf("availability without a loader / without a driver:\n");
    int rc = check_unavailable_child("DIFFRT_VK_LOADER", NULL, "/nonexistent/libvulkan.so.1");
    DRT_CHECK(rc == 0, "no loader: child exited with %d (2: no entry, 3: available or no reason, 4: open)", rc);
    rc = check_unavailable_child("VK_DRIVER_FILES", "VK_ICD_FILENAMES", "/nonexistent/icd.json");
    DRT_CHECK(rc == 0, "no driver: child exited with %d", rc);

#ifndef DIFFRT_HAVE_VULKAN
    if (required())
        DRT_CHECK(0, "vulkan is required (DIFFRT_REQUIRE=%s) but not compiled in", getenv("DIFFRT_REQUIRE"));
    else
        printf("vulkan unavailable: not compiled into this build\n");
    (void)argc;
    (void)argv;
    return drt_test_summary("test_vulkan");
#else
    const int full = argc > 1 && strcmp(argv[1], "--full") == 0;
    drt_backend *vk = NULL, *cpu = NULL;
    if (drt_backend_open("vulkan", NULL, &vk) != DRT_OK) {
        if (required()) {
            DRT_CHECK(0, "vulkan is required (DIFFRT_REQUIRE=%s) but unavailable: %s", getenv("DIFFRT_REQUIRE"),
                      drt_last_error());
            return drt_test_summary("test_vulkan");
        }
        printf("vulkan unavailable: %s\n", drt_last_error());
        return drt_test_summary("test_vulkan");
    }
    DRT_CHECK(drt_backend_open("ref", NULL, &cpu) == DRT_OK, "ref: %s", drt_last_error());

    /* devices: what `diffrt info` prints, and selection */
    int idx = -1, ndev = 0;
    for (int i = 0; i < drt_backend_count(); i++) {
        drt_backend_info bi;
        drt_backend_get_info(i, &bi);
        if (strcmp(bi.name, "vulkan") == 0) {
            idx = i;
            ndev = bi.device_count;
        }
    }
    char dn[256] = "";
    drt_backend_device_name(idx, vk->device, dn, sizeof dn);
    printf("vulkan device %d of %d: %s\n", vk->device, ndev, dn);
    DRT_CHECK(vk->device >= 0 && vk->device < ndev, "opened device index %d of %d", vk->device, ndev);
    DRT_CHECK(strstr(dn, "; vendor 0x") && strstr(dn, "; driver ") && strstr(dn, "; Vulkan 1.") &&
                  strstr(dn, "; subgroup ") && strstr(dn, "; fp16 ") && strstr(dn, "; int8 ") && strstr(dn, "; heaps "),
              "device description \"%s\" lacks a field", dn);
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(dn, ";("), dn);
    drt_backend *b2 = NULL;
    DRT_CHECK(drt_backend_open("vulkan", name, &b2) == DRT_OK, "select by name \"%s\": %s", name, drt_last_error());
    drt_backend_close(b2);
    b2 = NULL;
    DRT_CHECK(drt_backend_open("vulkan", "0", &b2) == DRT_OK && b2->device == 0, "select by index 0: %s",
              drt_last_error());
    drt_backend_close(b2);
    b2 = NULL;
    drt_status s = drt_backend_open("vulkan", "no-such-gpu-xyz", &b2);
    DRT_CHECK(s == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), "no-such-gpu-xyz"),
              "a device name that matches nothing: %s", drt_last_error());

    /* settings: a value a switch does not take is an error naming it, never
     * the default (DIFFRT_VK_FP16=off used to leave f16 on) */
    static const char *bad_env[][2] = {
        {"DIFFRT_VK_SUBGROUP", "off"},    {"DIFFRT_VK_FP16", "no"},       {"DIFFRT_VK_COPY", "2"},
        {"DIFFRT_VK_INT64", "false"},     {"DIFFRT_VK_TUNE", "fast"},     {"DIFFRT_VK_SPLIT_BYTES", "12k"},
        {"DIFFRT_VK_SPLIT_BYTES", "512"}, {"DIFFRT_VK_VALIDATION", "on"},
    };
    for (size_t i = 0; i < sizeof bad_env / sizeof bad_env[0]; i++) {
        setenv(bad_env[i][0], bad_env[i][1], 1);
        b2 = NULL;
        s = drt_backend_open("vulkan", NULL, &b2);
        DRT_CHECK(s != DRT_OK && strstr(drt_last_error(), bad_env[i][0]),
                  "%s=%s: opened with status %d, message \"%s\"", bad_env[i][0], bad_env[i][1], (int)s,
                  s == DRT_OK ? "" : drt_last_error());
        if (s == DRT_OK) drt_backend_close(b2);
        unsetenv(bad_env[i][0]);
    }
    test_init_parts();

    printf("recording:\n");
    test_barriers(vk);
    test_decomposed(vk, cpu, 2, 0);
    test_decomposed(vk, cpu, 1, 1);
    test_split_attention(vk, cpu);
    test_embed_error(vk);
    drt_device_props dp;
    DRT_CHECK(drt_backend_device_props(idx, vk->device, &dp) == DRT_OK, "device props: %s", drt_last_error());
    test_copies(vk, cpu, strcmp(dp.type, "CPU") == 0);
    test_steady_state();
    drt_backend_close(vk);
    drt_backend_close(cpu);

    if (full)
        run_conform("every op case and every fixture model", DRT_FIXTURES_DIR, NULL);
    else
        run_conform("every op case (--full: and every fixture model)", NULL, NULL);
    /* on a CPU device without subgroup operations, attention prefill takes
     * the rows kernel instead of the lanes kernel */
    setenv("DIFFRT_VK_TUNE", "cpu", 1);
    setenv("DIFFRT_VK_SUBGROUP", "0", 1);
    run_conform("attention with CPU shapes, no subgroup operations (DIFFRT_VK_TUNE=cpu DIFFRT_VK_SUBGROUP=0)", NULL,
                "DIFF_ATTN,ATTN");
    unsetenv("DIFFRT_VK_SUBGROUP");
    /* the shapes chosen for GPUs, then the paths of devices without
     * subgroup arithmetic / 16-bit storage */
    setenv("DIFFRT_VK_TUNE", "gpu", 1);
    run_conform("op cases with GPU workgroup shapes (DIFFRT_VK_TUNE=gpu)", NULL, NULL);
    setenv("DIFFRT_VK_SUBGROUP", "0", 1);
    setenv("DIFFRT_VK_FP16", "0", 1);
    run_conform("op cases, GPU shapes, shared-memory reductions, packed f16 (DIFFRT_VK_SUBGROUP=0 DIFFRT_VK_FP16=0)",
                NULL, NULL);
    unsetenv("DIFFRT_VK_TUNE");
    unsetenv("DIFFRT_VK_SUBGROUP");
    unsetenv("DIFFRT_VK_FP16");
    /* GEMV weights bound in blocks of rows, as past maxStorageBufferRange
     * (K=1000 and K=1024 f16/bf16 weights of 37-129 rows: 3-9 blocks) */
    setenv("DIFFRT_VK_SPLIT_BYTES", "40960", 1);
    run_conform("op cases with GEMV weights split into 40 KiB bindings (DIFFRT_VK_SPLIT_BYTES=40960)", NULL, NULL);
    unsetenv("DIFFRT_VK_SPLIT_BYTES");
    /* KV_WRITE and PERMUTE through their shaders, not copies */
    setenv("DIFFRT_VK_COPY", "0", 1);
    run_conform("op cases without copies (DIFFRT_VK_COPY=0)", NULL, NULL);
    unsetenv("DIFFRT_VK_COPY");
    return drt_test_summary("test_vulkan");
#endif
}
