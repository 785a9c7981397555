/* Golden tests: every checkpoint under tests/fixtures/ against the logits and
 * greedy tokens its source implementation (transformers, the authors'
 * modules re-written in python/diff_modules.py, or diff-mlx's own code)
 * computed, see
 * tests/fixtures/README.md. On the CPU reference backend:
 *   - prefill logits NMSE <= 1e-6 (f32 compute against the float32 source run;
 *     f16/bf16 checkpoints are upcast exactly, so the same bound holds);
 *   - token-by-token decode logits against the source's cached decode;
 *   - prefill-then-decode equals the full-sequence prefill (our own cache);
 *   - the same 32 greedy tokens;
 *   - f16/bf16 checkpoints (and diff-mlx's amp_dtype bfloat16 one) also
 *     against the source run in its own dtype, with the looser bound
 *     NATIVE_BOUND below (the source rounds every activation). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffrt/diffrt.h"
#include "drt_test.h"
#include "safetensors.h"

#define F32_BOUND 1e-6
#define SELF_BOUND 1e-10
/* bf16 keeps 8 mantissa bits: activations rounded per layer give NMSE ~1e-4
 * (torch), 1.4e-3 where MLX rounds every op's output (mlx_diff_amp_bf16);
 * f16 (11 bits) gives ~1e-6. One bound for all. */
#define NATIVE_BOUND 2e-3

static const float *get_f32(drt_st_file *f, const char *name, int64_t n) {
    const drt_st_tensor *t = drt_st_find(f, name);
    if (!t || t->dtype != DRT_F32 || (int64_t)(t->nbytes / 4) != n) return NULL;
    return t->data;
}

/* name is "backend:fixture" in every message */
static void check_fixture(const char *dir, const char *name, const char *backend) {
    char path[1200];
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    drt_st_file ex;
    if (drt_st_open(path, &ex) != DRT_OK) {
        DRT_CHECK(0, "%s: %s", name, drt_last_error());
        return;
    }
    drt_model *m = NULL;
    drt_session *s = NULL;
    float *lg = NULL, *lg2 = NULL, *w = NULL, *w2 = NULL;
    if (drt_model_load(dir, &m) != DRT_OK) {
        DRT_CHECK(0, "%s: load: %s", name, drt_last_error());
        goto done;
    }
    drt_model_info I;
    drt_model_get_info(m, &I);
    const drt_st_tensor *tok = drt_st_find(&ex, "tokens"), *gr = drt_st_find(&ex, "greedy");
    DRT_CHECK(tok && tok->dtype == DRT_I32 && gr && gr->dtype == DRT_I32,
              "%s: expected.safetensors lacks tokens/greedy", name);
    if (!tok || !gr) goto done;
    int T = (int)tok->shape[0], NG = (int)gr->shape[0], V = I.vocab;
    const int32_t *ids = tok->data, *greedy = gr->data;
    const float *ref_pre = get_f32(&ex, "logits_prefill", (int64_t)T * V);
    const float *ref_dec = get_f32(&ex, "logits_decode", (int64_t)T * V);
    const float *ref_nat = get_f32(&ex, "logits_prefill_native", (int64_t)T * V);
    DRT_CHECK(ref_pre && ref_dec, "%s: expected.safetensors lacks logits (T=%d V=%d)", name, T, V);
    if (!ref_pre || !ref_dec) goto done;

    /* the reference's f32 KV cache (cpu's default is f16: tests/test_kv_types.c) */
    drt_session_opts so = {.backend = backend, .max_ctx = T + NG + 1, .kv_type = "f32"};
    if (drt_session_create(m, &so, &s) != DRT_OK) {
        DRT_CHECK(0, "%s: session: %s", name, drt_last_error());
        goto done;
    }
    lg = malloc(sizeof(float) * (size_t)T * V);
    lg2 = malloc(sizeof(float) * (size_t)T * V);

    /* 1. full prefill */
    drt_fill_nan(lg, (int64_t)T * V);
    DRT_CHECK(drt_session_forward(s, ids, T, lg, 1) == DRT_OK, "%s: prefill: %s", name, drt_last_error());
    double e = drt_nmse(lg, ref_pre, (int64_t)T * V);
    printf("%-24s %-12s %-5s prefill NMSE %.3e  max|d| %.3e\n", name, I.layout_name, drt_dtype_name(I.weight_dtype), e,
           drt_max_abs_err(lg, ref_pre, (int64_t)T * V));
    DRT_CHECK(e <= F32_BOUND, "%s: prefill logits NMSE %.3e > %.0e (T=%d)", name, e, F32_BOUND, T);
    if (ref_nat) {
        double en = drt_nmse(lg, ref_nat, (int64_t)T * V);
        /* the source in its storage dtype, or (diff-mlx amp_dtype bfloat16)
         * its compute dtype */
        printf("%-24s %-12s %-5s vs native-dtype source: NMSE %.3e (bound %.0e)\n", name, I.layout_name,
               drt_dtype_name(I.weight_dtype), en, NATIVE_BOUND);
        DRT_CHECK(en <= NATIVE_BOUND, "%s: prefill vs native-dtype source NMSE %.3e > %.0e", name, en, NATIVE_BOUND);
    }

    /* 1b. attention probe of the last token: a distribution over positions
     * (transformer: sums to 1; diff-v1: sums to 1 - mean lambda) */
    {
        w = malloc(sizeof(float) * (size_t)T);
        drt_fill_nan(w, T);
        DRT_CHECK(drt_session_last_attention(s, w) == DRT_OK, "%s: probe: %s", name, drt_last_error());
        double sum = 0, want = 1;
        for (int j = 0; j < T; j++) sum += w[j];
        if (I.arch == DRT_ARCH_DIFF_V1) {
            want = 0;
            for (int l = 0; l < I.n_layers; l++) want += 1.0 - I.lambda[l];
            want /= I.n_layers;
        }
        DRT_CHECK(drt_all_finite(w, T), "%s: probe has non-finite weights", name);
        if (I.arch != DRT_ARCH_DIFF_V2)
            DRT_CHECK(fabs(sum - want) < 1e-5, "%s: probe sums to %.6f, expected %.6f", name, sum, want);
    }

    /* 2. token by token through our cache, against the source's cached decode */
    drt_session_reset(s);
    drt_fill_nan(lg2, (int64_t)T * V);
    for (int t = 0; t < T; t++)
        if (drt_session_forward(s, ids + t, 1, lg2 + (size_t)t * V, 1) != DRT_OK) {
            DRT_CHECK(0, "%s: decode step %d: %s", name, t, drt_last_error());
            break;
        }
    e = drt_nmse(lg2, ref_dec, (int64_t)T * V);
    printf("%-24s %-12s %-5s decode  NMSE %.3e\n", name, I.layout_name, drt_dtype_name(I.weight_dtype), e);
    DRT_CHECK(e <= F32_BOUND, "%s: decode logits NMSE %.3e > %.0e", name, e, F32_BOUND);

    /* 2b. the probe after decoding token by token equals the one after the
     * prefill: both read the last token's q (and lambda) that the graph kept
     * for the host, which the sum check above cannot tell */
    w2 = malloc(sizeof(float) * (size_t)T);
    drt_fill_nan(w2, T);
    DRT_CHECK(drt_session_last_attention(s, w2) == DRT_OK, "%s: probe after decode: %s", name, drt_last_error());
    e = drt_nmse(w2, w, T);
    DRT_CHECK(e <= SELF_BOUND, "%s: probe after decode vs after prefill NMSE %.3e > %.0e", name, e, SELF_BOUND);

    /* 3. prefill of the first half, then decode: equals the full prefill */
    drt_session_reset(s);
    int half = T / 2;
    drt_fill_nan(lg2, (int64_t)T * V);
    DRT_CHECK(drt_session_forward(s, ids, half, lg2, 1) == DRT_OK, "%s: half prefill: %s", name, drt_last_error());
    for (int t = half; t < T; t++)
        DRT_CHECK(drt_session_forward(s, ids + t, 1, lg2 + (size_t)t * V, 1) == DRT_OK, "%s: step %d", name, t);
    e = drt_nmse(lg2, lg, (int64_t)T * V);
    DRT_CHECK(e <= SELF_BOUND, "%s: prefill(%d)+decode vs full prefill NMSE %.3e > %.0e", name, half, e, SELF_BOUND);

    /* 4. greedy continuation */
    drt_session_reset(s);
    DRT_CHECK(drt_session_forward(s, ids, T, lg, 0) == DRT_OK, "%s: prefill: %s", name, drt_last_error());
    int first_bad = -1;
    for (int i = 0; i < NG; i++) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (lg[v] > lg[best]) best = v;
        if (best != greedy[i]) {
            first_bad = i;
            break;
        }
        int32_t tk = best;
        if (i + 1 < NG && drt_session_forward(s, &tk, 1, lg, 0) != DRT_OK) {
            DRT_CHECK(0, "%s: greedy step %d: %s", name, i, drt_last_error());
            break;
        }
    }
    DRT_CHECK(first_bad < 0, "%s: greedy token %d differs from the source's (%d)", name, first_bad,
              first_bad >= 0 ? greedy[first_bad] : 0);
    printf("%-24s %-12s %-5s greedy  %d/%d tokens identical\n", name, I.layout_name, drt_dtype_name(I.weight_dtype),
           first_bad < 0 ? NG : first_bad, NG);
done:
    free(lg);
    free(lg2);
    free(w);
    free(w2);
    drt_session_free(s);
    drt_model_free(m);
    drt_st_close(&ex);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(void) {
    DIR *d = opendir(DRT_FIXTURES_DIR);
    DRT_CHECK(d != NULL, "cannot open %s", DRT_FIXTURES_DIR);
    if (!d) return drt_test_summary("test_golden");
    char *names[64];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 64) {
        char p[1300];
        snprintf(p, sizeof p, "%s/%s/expected.safetensors", DRT_FIXTURES_DIR, e->d_name);
        FILE *f = fopen(p, "rb");
        if (!f) continue;
        fclose(f);
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    DRT_CHECK(n >= 4, "only %d fixtures found under %s", n, DRT_FIXTURES_DIR);
    for (int i = 0; i < n; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", DRT_FIXTURES_DIR, names[i]);
        /* the reference and the fast CPU backend, each against the source */
        static const char *const backends[] = {"ref", "cpu"};
        for (int b = 0; b < 2; b++) {
            char label[300];
            snprintf(label, sizeof label, "%s:%s", backends[b], names[i]);
            check_fixture(p, label, backends[b]);
        }
        free(names[i]);
    }
    return drt_test_summary("test_golden");
}
