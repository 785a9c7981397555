/* KV cache types (drt_session_opts.kv_type, docs/design.md "KV cache
 * types"), on the bundled models (every architecture):
 *   - the defaults: f16 on cpu, f32 on ref; the kv_type setting and the
 *     option (which wins); a type the runtime does not store is
 *     DRT_ERR_INVALID_ARG naming it;
 *   - the cache's bytes: f16 half of f32's, q8_0 34/128 of them;
 *   - the declared accuracy of each type against the reference with an f32
 *     cache, prompt logits over 48 positions: NMSE <= 1e-5 for f16, 1e-3
 *     for q8_0, on ref and on cpu; and cpu against ref at the same type
 *     within the f32 bound (1e-6, conform's model bound);
 *   - greedy decoding of 24 tokens after the prompt, cpu at f16 against ref
 *     at f16: the same tokens. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffrt/diffrt.h"
#include "drt_test.h"

#define T_PROMPT 48
#define N_GREEDY 24

static const char *MODELS[] = {"transformer-tiny", "diff-v1-tiny", "diff-v2-tiny"};
static const char *TYPES[] = {"f32", "f16", "q8_0"};
static const double BOUND[] = {0, 1e-5, 1e-3}; /* against an f32 cache */

static double nmse(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? num / den : num;
}

/* prompt logits (T_PROMPT, V) and N_GREEDY greedy tokens after it */
static int run(drt_model *m, const char *backend, const char *kv, int V, float *logits, int32_t *greedy,
               size_t *kv_bytes) {
    drt_session_opts so = {.backend = backend, .max_ctx = T_PROMPT + N_GREEDY + 1, .kv_type = kv};
    drt_session *s;
    if (drt_session_create(m, &so, &s) != DRT_OK) {
        DRT_CHECK(0, "%s kv_type %s: %s", backend, kv, drt_last_error());
        return 0;
    }
    *kv_bytes = drt_session_kv_bytes(s);
    int32_t ids[T_PROMPT];
    for (int i = 0; i < T_PROMPT; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
    for (size_t i = 0; i < (size_t)T_PROMPT * V; i++) logits[i] = NAN;
    drt_status st = drt_session_forward(s, ids, T_PROMPT, logits, 1);
    float *last = malloc(sizeof(float) * (size_t)V);
    if (last) memcpy(last, logits + (size_t)(T_PROMPT - 1) * V, sizeof(float) * (size_t)V);
    for (int i = 0; last && st == DRT_OK && i < N_GREEDY; i++) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (last[v] > last[best]) best = v;
        greedy[i] = best;
        st = drt_session_forward(s, &greedy[i], 1, last, 0);
    }
    DRT_CHECK(st == DRT_OK && last, "%s kv_type %s: forward: %s", backend, kv, drt_last_error());
    free(last);
    drt_session_free(s);
    return st == DRT_OK;
}

static void defaults(drt_model *m) {
    static const struct {
        const char *backend, *setting, *option;
        drt_dtype want;
    } cases[] = {
        {"cpu", NULL, NULL, DRT_F16},    {"ref", NULL, NULL, DRT_F32},     {"cpu", "f32", NULL, DRT_F32},
        {"ref", "q8_0", NULL, DRT_Q8_0}, {"cpu", "f32", "q8_0", DRT_Q8_0}, {"ref", "f16", "", DRT_F16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        drt_settings *set = NULL;
        drt_settings_create(&set);
        if (cases[i].setting) drt_settings_set(set, "kv_type", cases[i].setting);
        drt_session_opts so = {.backend = cases[i].backend, .max_ctx = 8, .settings = set, .kv_type = cases[i].option};
        drt_session *s;
        drt_status st = drt_session_create(m, &so, &s);
        DRT_CHECK(st == DRT_OK && drt_session_kv_type(s) == cases[i].want,
                  "case %zu (%s, setting %s, option %s): status %d, type %s (want %s): %s", i, cases[i].backend,
                  cases[i].setting ? cases[i].setting : "-", cases[i].option ? cases[i].option : "-", st,
                  st == DRT_OK ? drt_dtype_name(drt_session_kv_type(s)) : "-", drt_dtype_name(cases[i].want),
                  drt_last_error());
        if (st == DRT_OK) drt_session_free(s);
        drt_settings_free(set);
    }
    static const char *bad[] = {"q4_0", "F16", "bf16", "f16 "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        drt_session_opts so = {.backend = "cpu", .max_ctx = 8, .kv_type = bad[i]};
        drt_session *s = (drt_session *)1;
        drt_status st = drt_session_create(m, &so, &s);
        const char *msg = drt_last_error();
        DRT_CHECK(st == DRT_ERR_INVALID_ARG && s == NULL && strstr(msg, "kv_type") && strstr(msg, bad[i]) &&
                      !strchr(msg, '\n'),
                  "kv_type \"%s\": status %d, \"%s\"", bad[i], st, msg);
    }
    DRT_CHECK(drt_session_kv_type(NULL) == DRT_F32, "drt_session_kv_type(NULL)");
}

static void model(const char *name) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", DRT_MODELS_DIR, name);
    drt_model *m;
    if (drt_model_load(dir, &m) != DRT_OK) {
        DRT_CHECK(0, "%s: %s", dir, drt_last_error());
        return;
    }
    drt_model_info I;
    drt_model_get_info(m, &I);
    const int V = I.vocab;
    const size_t n = (size_t)T_PROMPT * V;
    float *ref32 = malloc(sizeof(float) * n), *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    int32_t g32[N_GREEDY], ga[N_GREEDY], gb[N_GREEDY];
    size_t bytes32 = 0, ba = 0, bb = 0;
    if (!ref32 || !a || !b || !run(m, "ref", "f32", V, ref32, g32, &bytes32)) goto out;
    for (int k = 1; k < 3; k++) {
        const char *kv = TYPES[k];
        if (!run(m, "ref", kv, V, a, ga, &ba) || !run(m, "cpu", kv, V, b, gb, &bb)) continue;
        const double e_ref = nmse(a, ref32, n), e_cpu = nmse(b, ref32, n), e_same = nmse(b, a, n);
        printf("%s kv %s: NMSE vs f32 cache: ref %.3e, cpu %.3e; cpu vs ref at %s %.3e\n", name, kv, e_ref, e_cpu, kv,
               e_same);
        DRT_CHECK(e_ref <= BOUND[k] && e_cpu <= BOUND[k], "%s kv %s: NMSE against the f32 cache ref %.3e cpu %.3e > %g",
                  name, kv, e_ref, e_cpu, BOUND[k]);
        DRT_CHECK(e_same <= 1e-6, "%s kv %s: cpu against ref at the same type: NMSE %.3e > 1e-6", name, kv, e_same);
        const size_t want = k == 1 ? bytes32 / 2 : bytes32 / 128 * 34;
        DRT_CHECK(ba == want && bb == want, "%s kv %s: %zu and %zu cache bytes, want %zu (f32: %zu)", name, kv, ba, bb,
                  want, bytes32);
        if (k == 1)
            for (int i = 0; i < N_GREEDY; i++)
                DRT_CHECK(ga[i] == gb[i], "%s kv f16: greedy token %d is %d on cpu, %d on ref", name, i, gb[i], ga[i]);
    }
out:
    free(ref32);
    free(a);
    free(b);
    drt_model_free(m);
}

int main(void) {
    drt_model *m;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", DRT_MODELS_DIR, MODELS[0]);
    DRT_CHECK(drt_model_load(dir, &m) == DRT_OK, "%s: %s", dir, drt_last_error());
    if (m) {
        defaults(m);
        drt_model_free(m);
    }
    for (size_t i = 0; i < sizeof MODELS / sizeof MODELS[0]; i++) model(MODELS[i]);
    return drt_test_summary("test_kv_types");
}
