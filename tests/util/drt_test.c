#include "drt_test.h"
#include "drt_util.h"
#include "safetensors.h"

#include <math.h>

int drt_test_failures = 0;
int drt_test_checks = 0;

void drt_rng_seed(drt_rng *r, uint64_t seed) {
    r->s = seed;
}

uint64_t drt_rng_next(drt_rng *r) {
    return drt_splitmix64(&r->s);
}

float drt_rng_uniform(drt_rng *r, float lo, float hi) {
    double u = (double)(drt_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(lo + (hi - lo) * u);
}

void drt_fill_uniform(float *x, int64_t n, drt_rng *r, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = drt_rng_uniform(r, lo, hi);
}

void drt_fill_nan(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = NAN;
}

double drt_nmse(const float *out, const float *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isfinite(ref[i]) && !isfinite(out[i])) return INFINITY;
        double d = (double)out[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * (double)ref[i];
    }
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return num / den;
}

double drt_max_abs_err(const float *out, const float *ref, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)out[i] - (double)ref[i]);
        if (!(d <= m)) m = d; /* NaN propagates */
    }
    return m;
}

int drt_all_finite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

int drt_test_summary(const char *name) {
    int passed = drt_test_checks - drt_test_failures;
    printf("%s: %d passed, %d failed\n", name, passed, drt_test_failures);
    return drt_test_failures ? 1 : 0;
}

char *drt_test_read_file(const char *path) {
    char *s = NULL;
    return drt_read_text_file(path, &s, NULL) == DRT_OK ? s : NULL;
}
