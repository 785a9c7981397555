/* Small helpers shared by the tests: a seeded RNG, error metrics, checks
 * that name the failing case. */
#ifndef DRT_TEST_H
#define DRT_TEST_H

#include <stdint.h>
#include <stdio.h>

/* splitmix64 (drt_splitmix64): the same seed gives the same numbers on every
 * machine */
typedef struct {
    uint64_t s;
} drt_rng;

void drt_rng_seed(drt_rng *r, uint64_t seed);
uint64_t drt_rng_next(drt_rng *r);
/* uniform in [lo, hi) */
float drt_rng_uniform(drt_rng *r, float lo, float hi);
void drt_fill_uniform(float *x, int64_t n, drt_rng *r, float lo, float hi);
void drt_fill_nan(float *x, int64_t n);

/* sum((out-ref)^2) / sum(ref^2) in double; 0 when both are all zero; +inf
 * when out has a NaN/Inf where ref has none. */
double drt_nmse(const float *out, const float *ref, int64_t n);
double drt_max_abs_err(const float *out, const float *ref, int64_t n);
int drt_all_finite(const float *x, int64_t n);

/* Counts failures; each failing check prints file:line and the message. */
extern int drt_test_failures;
extern int drt_test_checks;

#define DRT_CHECK(cond, ...)                                                                                           \
    do {                                                                                                               \
        drt_test_checks++;                                                                                             \
        if (!(cond)) {                                                                                                 \
            drt_test_failures++;                                                                                       \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                       \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fprintf(stderr, "\n");                                                                                     \
        }                                                                                                              \
    } while (0)

/* Prints "N passed, N failed" and returns the process exit code. */
int drt_test_summary(const char *name);

/* The whole file as a NUL-terminated string (drt_read_text_file), or NULL;
 * free() it. */
char *drt_test_read_file(const char *path);

#endif
