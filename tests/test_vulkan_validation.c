/* The Vulkan backend under the Khronos validation layer (with synchronization
 * validation): DIFFRT_VK_VALIDATION=1 makes the backend enable
 * VK_LAYER_KHRONOS_validation and a debug-utils messenger that counts every
 * warning and error (backends/vulkan/drt_vulkan.h). Runs every op case of
 * the conformance table (both reduction paths, both f16 paths), whole
 * fixture models (prefill, then decode steps over the KV cache) and batch
 * sessions (several sequences in one forward, checked against ref), and
 * fails on ANY message.
 * When Vulkan is unavailable this test passes with a note, unless the
 * environment variable DIFFRT_REQUIRE names vulkan; the same holds when the
 * validation layer is not installed.
 *
 * Under LeakSanitizer (DIFFRT_SANITIZE=ON): the layer's synchronization
 * validation (Debian vulkan-validationlayers 1.3.239) leaks ~60 KB of C++
 * objects per run: same run without VkValidationFeaturesEXT, no leak;
 * test_vulkan, the same backend code without the layer, no leak. By the time
 * LSan reports, the loader has unloaded the layer and the frames are
 * "<unknown module>", which no suppression can name. So once the layer is
 * loaded this test pins it (RTLD_NOLOAD | RTLD_NODELETE) and suppresses
 * leaks whose stack is in that library, and nothing else: a leak in diffrt
 * or in the driver still fails. */
#define _GNU_SOURCE /* RTLD_NOLOAD, RTLD_NODELETE */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#define LAYER_LIB "libVkLayer_khronos_validation.so"

/* LeakSanitizer reads this at exit (no effect in other builds) */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
    return "leak:" LAYER_LIB "\n";
}

static int required(void) {
    const char *req = getenv("DIFFRT_REQUIRE");
    return req && strstr(req, "vulkan");
}

#ifdef DIFFRT_HAVE_VULKAN
static int64_t messages(void) {
    drt_vk_counters c;
    vk_counters(&c);
    return c.validation_messages;
}

static void ops(const char *what) {
    drt_conform_opts o = {.backends = "cpu,vulkan", .require = "cpu,vulkan", .out = NULL};
    drt_conform_result r;
    int64_t m0 = messages();
    drt_status s = drt_conform_run(&o, &r);
    int64_t m = messages() - m0;
    printf("  op cases, %s: %d passed, %d failed, %lld validation messages\n", what, r.pass, r.fail, (long long)m);
    DRT_CHECK(s == DRT_OK && r.fail == 0 && r.unavailable_required == 0 && r.pass > 0, "%s: conform failed: %s", what,
              s == DRT_OK ? "see above" : drt_last_error());
    DRT_CHECK(m == 0, "%s: %lld validation messages (printed above)", what, (long long)m);
}

/* prefill of 6 tokens, then 4 decode steps at p0 = 6.. */
static void model(const char *name) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", DRT_FIXTURES_DIR, name);
    drt_model *m = NULL;
    DRT_CHECK(drt_model_load(dir, &m) == DRT_OK, "load %s: %s", dir, drt_last_error());
    if (!m) return;
    drt_model_info I;
    drt_model_get_info(m, &I);
    int64_t m0 = messages();
    drt_session *s = NULL;
    drt_session_opts so = {.backend = "vulkan", .max_ctx = 16};
    DRT_CHECK(drt_session_create(m, &so, &s) == DRT_OK, "%s: session: %s", name, drt_last_error());
    if (s) {
        float *logits = malloc(sizeof(float) * (size_t)I.vocab * 6);
        int32_t prompt[6] = {1, 5, 9, 33, 70, 2};
        DRT_CHECK(drt_session_forward(s, prompt, 6, logits, 1) == DRT_OK, "%s: prefill: %s", name, drt_last_error());
        for (int i = 0; i < 4; i++) {
            int32_t tok = 3 + 7 * i;
            DRT_CHECK(drt_session_forward(s, &tok, 1, logits, 0) == DRT_OK, "%s: decode: %s", name, drt_last_error());
        }
        char fb[256];
        DRT_CHECK(drt_session_fallbacks(s, fb, sizeof fb) == 0, "%s: CPU fallbacks: %s", name, fb);
        free(logits);
    }
    drt_session_free(s);
    drt_model_free(m);
    int64_t n = messages() - m0;
    printf("  model %s (%s): prefill 6 + decode 4, %lld validation messages\n", name, I.layout_name, (long long)n);
    DRT_CHECK(n == 0, "%s: %lld validation messages (printed above)", name, (long long)n);
}

/* Three sequences in one forward: prompts of 5, 3 and 1 tokens (9 rows: a
 * graph of 16, whose 7 padding rows all write one scratch cache row), then
 * two decode steps of the three together (3 rows and one of padding). Each
 * sequence's logits against a ref session fed its tokens alone: NMSE <=
 * 1e-6 (docs/design.md section 6). */
static void batch(const char *name) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", DRT_FIXTURES_DIR, name);
    drt_model *m = NULL;
    DRT_CHECK(drt_model_load(dir, &m) == DRT_OK, "load %s: %s", dir, drt_last_error());
    if (!m) return;
    drt_model_info I;
    drt_model_get_info(m, &I);
    const int32_t prompt[9] = {1, 5, 9, 33, 70, 2, 8, 13, 4}, pseq[9] = {0, 0, 0, 0, 0, 1, 1, 1, 2};
    const int32_t step[2][3] = {{3, 10, 17}, {6, 12, 21}}, sseq[3] = {0, 1, 2};
    const int plen[3] = {5, 3, 1}, pat[3] = {0, 5, 8};
    float *got = malloc(sizeof(float) * (size_t)I.vocab * 9), *want = malloc(sizeof(float) * (size_t)I.vocab);
    int64_t m0 = messages();
    drt_batch_session *bs = NULL;
    drt_session *ref[3] = {0};
    drt_session_opts so = {.backend = "vulkan", .max_ctx = 16}, ro = {.backend = "ref", .max_ctx = 16};
    drt_batch_opts bo = {.max_seqs = 3, .ctx_per_seq = 16, .max_batch_rows = 16};
    DRT_CHECK(drt_batch_session_create(m, &so, &bo, &bs) == DRT_OK, "%s: batch session: %s", name, drt_last_error());
    for (int i = 0; i < 3; i++)
        DRT_CHECK(drt_session_create(m, &ro, &ref[i]) == DRT_OK, "%s: ref session: %s", name, drt_last_error());
    double worst = 0;
    for (int k = 0; bs && ref[2] && got && want && k < 3; k++) {
        drt_batch b = {.n = k == 0 ? 9 : 3, .token = k == 0 ? prompt : step[k - 1], .seq = k == 0 ? pseq : sseq};
        drt_status st = drt_batch_forward(bs, &b, got);
        DRT_CHECK(st == DRT_OK, "%s: batch forward %d: %s", name, k, drt_last_error());
        if (st != DRT_OK) break;
        for (int i = 0; i < 3; i++) {
            st = k == 0 ? drt_session_forward(ref[i], prompt + pat[i], plen[i], want, 0)
                        : drt_session_forward(ref[i], &step[k - 1][i], 1, want, 0);
            DRT_CHECK(st == DRT_OK, "%s: ref forward: %s", name, drt_last_error());
            double e = drt_nmse(got + (size_t)i * I.vocab, want, I.vocab);
            if (e > worst) worst = e;
            DRT_CHECK(e <= 1e-6, "%s: forward %d, sequence %d: logits NMSE %.3e against ref > 1e-6", name, k, i, e);
        }
    }
    for (int i = 0; i < 3; i++) drt_session_free(ref[i]);
    drt_batch_session_free(bs);
    drt_model_free(m);
    free(got);
    free(want);
    int64_t n = messages() - m0;
    printf("  model %s: 3 sequences in one forward, then 2 decode steps together: worst NMSE %.3e against ref, "
           "%lld validation messages\n",
           name, worst, (long long)n);
    DRT_CHECK(n == 0, "%s: %lld validation messages (printed above)", name, (long long)n);
}
#endif

int main(void) {
    setenv("DIFFRT_VK_VALIDATION", "1", 1);
#ifndef DIFFRT_HAVE_VULKAN
    if (required())
        DRT_CHECK(0, "vulkan is required (DIFFRT_REQUIRE=%s) but not compiled in", getenv("DIFFRT_REQUIRE"));
    else
        printf("vulkan unavailable: not compiled into this build\n");
    return drt_test_summary("test_vulkan_validation");
#else
    drt_backend *vk = NULL;
    if (drt_backend_open("vulkan", NULL, &vk) != DRT_OK) {
        if (required()) {
            DRT_CHECK(0, "vulkan is required (DIFFRT_REQUIRE=%s) but unavailable under validation: %s",
                      getenv("DIFFRT_REQUIRE"), drt_last_error());
            return drt_test_summary("test_vulkan_validation");
        }
        printf("vulkan unavailable: %s\n", drt_last_error());
        return drt_test_summary("test_vulkan_validation");
    }
    /* the layer is loaded now: keep it mapped until exit (see the top) */
    void *layer = dlopen(LAYER_LIB, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    (void)layer;
    drt_backend_close(vk);
    drt_vk_counters c;
    vk_counters(&c);
    DRT_CHECK(c.validation_enabled, "the backend opened without the validation layer: this test would prove nothing");
    DRT_CHECK(c.validation_messages == 0, "%lld validation messages creating and destroying a device",
              (long long)c.validation_messages);

    ops("subgroup reductions, f16 storage where the device has them");
    setenv("DIFFRT_VK_SUBGROUP", "0", 1);
    setenv("DIFFRT_VK_FP16", "0", 1);
    ops("shared-memory reductions, packed f16");
    unsetenv("DIFFRT_VK_SUBGROUP");
    unsetenv("DIFFRT_VK_FP16");
    model("diff_v2");          /* DIFF_ATTN m=1, per-token lambda (SIGMOID), GQA */
    model("unilm_v1");         /* DIFF_ATTN m=2, scalar lambda, GROUPNORM */
    model("hf_diffllama_f16"); /* f16 weights */
    model("hf_llama_bf16");    /* ATTN, bf16 weights */
    batch("diff_v2");
    batch("hf_llama_bf16");
    return drt_test_summary("test_vulkan_validation");
#endif
}
