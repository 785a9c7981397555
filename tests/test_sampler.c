/* The sampler: greedy is argmax (lowest id on ties); top-k 1 and a tiny
 * top-p are argmax at any temperature; temperature 1 reproduces softmax
 * frequencies; top-k and top-p never emit a token outside their set; the
 * same seed gives the same sequence; bad options are rejected; logits with
 * a NaN or +Inf (or all -Inf) are refused (-1), never sampled as a token,
 * while a -Inf logit alone is a masked token that is never drawn. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "diffrt/diffrt.h"
#include "drt_test.h"

static int draw(drt_sampler_opts o, const float *lg, int V) {
    drt_sampler *s;
    if (drt_sampler_create(&o, V, &s) != DRT_OK) return -1;
    int t = drt_sampler_sample(s, lg);
    drt_sampler_free(s);
    return t;
}

int main(void) {
    const float lg[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, -30.0f};
    DRT_CHECK(draw((drt_sampler_opts){0, 0, 1, 1}, lg, 6) == 1, "greedy must pick the first max (id 1)");
    DRT_CHECK(draw((drt_sampler_opts){5.0f, 1, 1, 3}, lg, 6) == 1, "top-k 1 must be argmax");
    DRT_CHECK(draw((drt_sampler_opts){5.0f, 0, 1e-6f, 3}, lg, 6) == 1, "tiny top-p must be argmax");

    /* frequencies: logits {0, ln 3} -> p = {0.25, 0.75} */
    const float two[2] = {0.0f, logf(3.0f)};
    drt_sampler *s;
    drt_sampler_opts o = {1.0f, 0, 1.0f, 12345};
    drt_sampler_create(&o, 2, &s);
    int n1 = 0, N = 40000;
    for (int i = 0; i < N; i++) n1 += drt_sampler_sample(s, two) == 1;
    drt_sampler_free(s);
    double f = (double)n1 / N;
    DRT_CHECK(fabs(f - 0.75) < 0.01, "temperature 1: token 1 drawn %.4f of the time, expected 0.75 (seed 12345)", f);

    /* top-k 3 over lg: only ids {1,3,4}; top-p 0.5: only the ids covering half the mass */
    drt_sampler_opts ok = {3.0f, 3, 1.0f, 7};
    drt_sampler_create(&ok, 6, &s);
    int bad = 0;
    for (int i = 0; i < 5000; i++) {
        int t = drt_sampler_sample(s, lg);
        bad += !(t == 1 || t == 3 || t == 4);
    }
    drt_sampler_free(s);
    DRT_CHECK(bad == 0, "top-k 3 emitted %d tokens outside {1,3,4}", bad);
    drt_sampler_opts op = {1.0f, 0, 0.5f, 9};
    drt_sampler_create(&op, 6, &s);
    bad = 0;
    for (int i = 0; i < 5000; i++) {
        int t = drt_sampler_sample(s, lg);
        bad += !(t == 1 || t == 3); /* p(1)=p(3)~0.34 each: {1,3} is the smallest set with mass >= 0.5 */
    }
    drt_sampler_free(s);
    DRT_CHECK(bad == 0, "top-p 0.5 emitted %d tokens outside {1,3}", bad);

    /* reproducible */
    int a[20], b[20];
    drt_sampler_opts r = {1.5f, 0, 0.95f, 2024};
    for (int pass = 0; pass < 2; pass++) {
        drt_sampler_create(&r, 6, &s);
        for (int i = 0; i < 20; i++) (pass ? b : a)[i] = drt_sampler_sample(s, lg);
        drt_sampler_free(s);
    }
    int same = 1;
    for (int i = 0; i < 20; i++) same &= a[i] == b[i];
    DRT_CHECK(same, "seed 2024 gave two different sequences");

    drt_sampler_opts badopts[4] = {{-1, 0, 1, 0}, {1, -2, 1, 0}, {1, 0, 0, 0}, {1, 0, 1.5f, 0}};
    for (int i = 0; i < 4; i++) {
        DRT_CHECK(drt_sampler_create(&badopts[i], 6, &s) == DRT_ERR_INVALID_ARG, "bad sampler options %d accepted", i);
    }
    DRT_CHECK(drt_sampler_create(&o, 0, &s) == DRT_ERR_INVALID_ARG, "vocab 0 accepted");

    /* non-finite logits: refused at every temperature, the message names the token */
    struct {
        const char *name;
        float lg[6];
        const char *must_say;
    } nonfinite[] = {
        {"NaN first", {NAN, 1, 2, 3, 4, 5}, "token 0 is NaN"},
        {"NaN last", {0, 1, 2, 3, 4, NAN}, "token 5 is NaN"},
        {"+Inf", {0, 1, INFINITY, 3, 4, 5}, "token 2 is Inf"},
        {"all -Inf", {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY}, "every logit is -Inf"},
    };
    drt_sampler_opts temps[3] = {{0, 0, 1, 1}, {1.0f, 0, 1, 1}, {0.7f, 3, 0.9f, 1}};
    for (size_t i = 0; i < sizeof nonfinite / sizeof nonfinite[0]; i++)
        for (int k = 0; k < 3; k++) {
            int t = draw(temps[k], nonfinite[i].lg, 6);
            DRT_CHECK(t == -1 && strstr(drt_last_error(), nonfinite[i].must_say),
                      "%s (temperature %.1f): sampled %d, message \"%s\" (expected -1, \"%s\")", nonfinite[i].name,
                      (double)temps[k].temperature, t, drt_last_error(), nonfinite[i].must_say);
        }
    /* -Inf masks a token: greedy and sampling pick among the others only */
    const float masked[6] = {-INFINITY, 0.5f, -INFINITY, 0.4f, -INFINITY, -INFINITY};
    DRT_CHECK(draw((drt_sampler_opts){0, 0, 1, 1}, masked, 6) == 1, "greedy with -Inf masks");
    drt_sampler_opts om = {2.0f, 0, 1.0f, 5};
    drt_sampler_create(&om, 6, &s);
    bad = 0;
    for (int i = 0; i < 5000; i++) {
        int t = drt_sampler_sample(s, masked);
        bad += !(t == 1 || t == 3);
    }
    drt_sampler_free(s);
    DRT_CHECK(bad == 0, "%d draws hit a -Inf (masked) token", bad);

    /* a long vocabulary (the greedy pass runs 8 lanes, then a tail): the
     * first max wherever it falls, ties across lanes, a NaN or +Inf in the
     * tail or mid-lane */
    enum { LV = 1003 };
    static float lv[LV];
    const int spots[] = {0, 5, 7, 8, 500, 994, 995, 1001, 1002};
    for (size_t k = 0; k < sizeof spots / sizeof spots[0]; k++) {
        for (int i = 0; i < LV; i++) lv[i] = (float)((i * 7919) % 1000) / 100.0f - 5.0f;
        lv[spots[k]] = 6.0f;
        if (spots[k] + 3 < LV) lv[spots[k] + 3] = 6.0f; /* a later tie, in another lane */
        int t = draw((drt_sampler_opts){0, 0, 1, 1}, lv, LV);
        DRT_CHECK(t == spots[k], "greedy over %d logits: max first at %d, sampled %d", LV, spots[k], t);
    }
    for (int i = 0; i < LV; i++) lv[i] = -INFINITY;
    lv[999] = -3.0f;
    DRT_CHECK(draw((drt_sampler_opts){0, 0, 1, 1}, lv, LV) == 999, "greedy over -Inf masks, one finite in the tail");
    const int bads[] = {3, 998, 1002};
    for (size_t k = 0; k < sizeof bads / sizeof bads[0]; k++)
        for (int inf = 0; inf < 2; inf++) {
            for (int i = 0; i < LV; i++) lv[i] = (float)(i % 13);
            lv[bads[k]] = inf ? INFINITY : NAN;
            char want[64];
            snprintf(want, sizeof want, "token %d is %s", bads[k], inf ? "Inf" : "NaN");
            int t = draw((drt_sampler_opts){0, 0, 1, 1}, lv, LV);
            DRT_CHECK(t == -1 && strstr(drt_last_error(), want), "%s at %d of %d: sampled %d, message \"%s\"",
                      inf ? "Inf" : "NaN", bads[k], LV, t, drt_last_error());
        }

    /* NULL arguments */
    DRT_CHECK(drt_sampler_create(NULL, 6, &s) == DRT_ERR_INVALID_ARG, "NULL options accepted");
    DRT_CHECK(drt_sampler_create(&o, 6, NULL) == DRT_ERR_INVALID_ARG, "NULL out accepted");
    DRT_CHECK(drt_sampler_sample(NULL, lg) == -1, "NULL sampler sampled");
    drt_sampler_create(&o, 6, &s);
    DRT_CHECK(drt_sampler_sample(s, NULL) == -1 && strstr(drt_last_error(), "logits"), "NULL logits sampled");
    drt_sampler_free(s);
    drt_sampler_free(NULL);
    return drt_test_summary("test_sampler");
}
