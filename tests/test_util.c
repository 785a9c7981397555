/* runtime/drt_util.h, the helpers every layer shares:
 *   - splitmix64 gives the golden values of the implementation it replaced
 *     (the sampler's, NIAH's and drt_rng's streams stay bit-identical);
 *   - drt_mix64 is its output function;
 *   - the CPU counts are sane and ordered: physical <= affinity <= online;
 *   - DIFFRT_THREADS: a table of values, accepted or refused with the value
 *     named, and the caller's default when unset;
 *   - the clock does not step back;
 *   - drt_path_join: one slash between the parts, none doubled, never cut. */
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "drt_test.h"
#include "drt_util.h"

static void splitmix(void) {
    /* from the copies in model/sampler.c and model/niah.c before they were
     * replaced; seed 20250 is the NIAH spec's */
    static const struct {
        uint64_t seed, first[3], state_after;
    } cases[] = {
        {0, {0xe220a8397b1dcdafull, 0x6e789e6aa1b965f4ull, 0x06c45d188009454full}, 0xdaa66d2c7ddf743full},
        {20250, {0x52202adfbb5b0a7dull, 0x3f261bc83722be31ull, 0xb1fb15e92dd68d28ull}, 0xdaa66d2c7ddfc359ull},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint64_t s = cases[c].seed;
        for (int i = 0; i < 3; i++) {
            uint64_t v = drt_splitmix64(&s);
            DRT_CHECK(v == cases[c].first[i], "splitmix64 seed %llu draw %d: got 0x%016llx, want 0x%016llx",
                      (unsigned long long)cases[c].seed, i, (unsigned long long)v,
                      (unsigned long long)cases[c].first[i]);
        }
        DRT_CHECK(s == cases[c].state_after, "splitmix64 seed %llu: state 0x%016llx after 3 draws",
                  (unsigned long long)cases[c].seed, (unsigned long long)s);
        /* the tests' drt_rng is the same stream */
        drt_rng r;
        drt_rng_seed(&r, cases[c].seed);
        DRT_CHECK(drt_rng_next(&r) == cases[c].first[0], "drt_rng seed %llu differs from drt_splitmix64",
                  (unsigned long long)cases[c].seed);
        uint64_t g = cases[c].seed + 0x9e3779b97f4a7c15ull;
        DRT_CHECK(drt_mix64(g) == cases[c].first[0], "drt_mix64 is not splitmix64's output function");
    }
}

static void cpu_counts(void) {
    int online = drt_cpu_online(), mask = drt_cpu_count(), phys = drt_physical_cores();
    DRT_CHECK(online >= 1 && mask >= 1 && phys >= 1, "cpu counts: online %d, affinity %d, physical %d", online, mask,
              phys);
    DRT_CHECK(phys <= mask && mask <= online, "cpu counts out of order: physical %d, affinity %d, online %d", phys,
              mask, online);
}

static void threads_env(void) {
    static const struct {
        const char *value; /* NULL: unset */
        drt_status want;
        int threads;
    } cases[] = {
        {NULL, DRT_OK, 7},
        {"", DRT_OK, 7},
        {"1", DRT_OK, 1},
        {"3", DRT_OK, 3},
        {"1024", DRT_OK, 1024},
        {"0", DRT_ERR_INVALID_ARG, 0},
        {"-2", DRT_ERR_INVALID_ARG, 0},
        {"1025", DRT_ERR_INVALID_ARG, 0},
        {"4x", DRT_ERR_INVALID_ARG, 0},
        {"many", DRT_ERR_INVALID_ARG, 0},
        {"100000", DRT_ERR_INVALID_ARG, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *v = cases[c].value;
        if (v)
            setenv("DIFFRT_THREADS", v, 1);
        else
            unsetenv("DIFFRT_THREADS");
        int n = -1;
        drt_status s = drt_threads_env(7, &n);
        DRT_CHECK(s == cases[c].want, "DIFFRT_THREADS=%s: status %d, want %d", v ? v : "(unset)", (int)s,
                  (int)cases[c].want);
        if (s == DRT_OK && cases[c].want == DRT_OK)
            DRT_CHECK(n == cases[c].threads, "DIFFRT_THREADS=%s: %d threads, want %d", v ? v : "(unset)", n,
                      cases[c].threads);
        if (s != DRT_OK) {
            char want[64];
            snprintf(want, sizeof want, "DIFFRT_THREADS=%s: expected an integer in [1, 1024]", v);
            DRT_CHECK(strcmp(drt_last_error(), want) == 0, "DIFFRT_THREADS=%s: message \"%s\"", v, drt_last_error());
        }
    }
    unsetenv("DIFFRT_THREADS");
}

static void clock_steps(void) {
    double t0 = drt_now_s(), t1 = t0;
    for (int i = 0; i < 1000; i++) {
        double t = drt_now_s();
        DRT_CHECK(t >= t1, "drt_now_s stepped back: %.9f after %.9f", t, t1);
        t1 = t;
    }
    DRT_CHECK(t0 > 0 && t1 - t0 < 10, "drt_now_s: %.9f .. %.9f", t0, t1);
}

static void path_join(void) {
    static const struct {
        const char *dir, *name, *want;
    } cases[] = {
        {"m", "config.json", "m/config.json"},
        {"m/", "config.json", "m/config.json"},
        {"/", "x", "/x"},
        {"", "x", "x"},
        {"a/b", "", "a/b/"},
        {"a//", "c", "a//c"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = drt_path_join(cases[i].dir, cases[i].name);
        DRT_CHECK(got && strcmp(got, cases[i].want) == 0, "drt_path_join(\"%s\", \"%s\"): \"%s\", want \"%s\"",
                  cases[i].dir, cases[i].name, got ? got : "(null)", cases[i].want);
        free(got);
    }
    DRT_CHECK(!drt_path_join(NULL, "x") && !drt_path_join("x", NULL), "drt_path_join of NULL is not NULL");
    /* a path longer than PATH_MAX is joined whole: the open refuses it, not a cut */
    size_t n = 10000;
    char *dir = malloc(n + 1);
    DRT_CHECK(dir != NULL, "out of memory");
    if (!dir) return;
    memset(dir, 'd', n);
    dir[n] = 0;
    char *got = drt_path_join(dir, "tokenizer.json");
    DRT_CHECK(got && strlen(got) == n + 1 + strlen("tokenizer.json") && strcmp(got + n, "/tokenizer.json") == 0,
              "drt_path_join of a %zu-byte dir: %zu bytes", n, got ? strlen(got) : 0);
    free(got);
    free(dir);
}

int main(void) {
    splitmix();
    cpu_counts();
    threads_env();
    clock_steps();
    path_join();
    return drt_test_summary("test_util");
}
