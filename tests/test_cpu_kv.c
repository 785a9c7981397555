/* KV_WRITE into f16 and q8_0 caches on the cpu backend, with each kernel
 * set this machine runs (cpu.isa: avx512, avx2, neon, generic), against
 * the reference's bytes (drt_kv_store), bit for bit, on rows a random
 * test rarely holds: NaN and Inf lanes, q8_0 values exactly half-way
 * between two integers, f16 rounding ties, subnormals, overflow, -0, an
 * all-zero block, a block whose scale underflows. The row widths leave a
 * tail past the last whole vector of every set. A set the CPU has must run;
 * one it lacks is named and not counted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "drt_graph.h"
#include "drt_kv.h"
#include "drt_test.h"

#define T 8 /* rows written */
#define P0 3

/* row i (n floats) of the cases in the header comment */
static void fill_row(float *x, int i, int n, drt_rng *r) {
    for (int j = 0; j < n; j++) {
        switch (i) {
        case 0: x[j] = drt_rng_uniform(r, -3.0f, 3.0f); break;
        case 1: /* amax 127 per block of 32: d = 1, x * (1/d) = x, ties at k + 0.5 */
            x[j] = j % 32 == 5 ? 127.0f : (float)((j * 7) % 253 - 126) + (j % 2 ? 0.5f : -0.5f);
            break;
        case 2: /* f16 ties: half-way between neighbours, both rounding directions */
            x[j] = ldexpf(1.0f + (float)(2 * (j % 8) + 1) * 0x1p-11f, j % 5 - 2) * (j % 3 ? 1.0f : -1.0f);
            break;
        case 3: { /* NaNs with payloads in the low bits (a signalling one too), Inf */
            static const uint32_t sp[] = {0x7fc00000u, 0x7f800000u, 0xff800000u, 0x7f800001u,
                                          0x80000000u, 0x7fa00123u, 0xffc00001u, 0x40000000u};
            if (j % 11 == 0)
                memcpy(&x[j], &sp[(j / 11) % 8], sizeof(float));
            else
                x[j] = drt_rng_uniform(r, -1.0f, 1.0f);
            break;
        }
        case 4: { /* f16 subnormals, underflow to 0, 65504, overflow to Inf */
            static const float sp[] = {1e-6f, 3e-8f, -2.9802322e-8f, 6e-8f, 65504.0f, 65520.0f, -1e5f, 1e-40f, 7e-5f};
            x[j] = sp[j % 9];
            break;
        }
        case 5: x[j] = 0.0f; break;
        case 6: x[j] = j % 32 == 0 ? 1e-40f : 0.0f; break; /* scale underflows to a subnormal, 1/d to Inf */
        default: x[j] = j % 7 == 0 ? 3e38f : drt_rng_uniform(r, -3e38f, 3e38f); break;
        }
    }
}

/* KV_WRITE of T rows of n floats into rows P0.. of a (cap, n) cache of type
 * kvt on backend be; the cache's bytes against drt_kv_store's */
static void check(drt_backend *be, const char *isa, drt_dtype kvt, int n) {
    const int cap = P0 + T + 2;
    drt_graph *g = drt_graph_new();
    drt_tensor *src = drt_new_tensor_2d(g, DRT_F32, T, n, "src");
    drt_tensor *cache = drt_new_tensor_2d(g, kvt, cap, n, "cache");
    cache->flags |= DRT_TF_CACHE;
    drt_tensor *y = drt_kv_write(g, src, cache, drt_new_rows(g, T));
    drt_plan *p = NULL;
    drt_status st = y ? drt_plan_create(g, be, &p) : DRT_ERR_INVALID_ARG;
    DRT_CHECK(st == DRT_OK, "%s %s n=%d: plan: %s", isa, drt_dtype_name(kvt), n, drt_last_error());
    const size_t rb = drt_row_bytes(kvt, n), cb = rb * (size_t)cap;
    float *x = malloc(sizeof(float) * (size_t)T * (size_t)n);
    unsigned char *want = malloc(cb), *got = malloc(cb);
    drt_rng r;
    drt_rng_seed(&r, 7);
    for (int i = 0; i < T; i++) fill_row(x + (size_t)i * (size_t)n, i, n, &r);
    memset(want, 0x5a, cb); /* poison: rows the write must leave alone stay so */
    for (int i = 0; i < T; i++) drt_kv_store(kvt, x + (size_t)i * (size_t)n, want + (size_t)(P0 + i) * rb, n);
    if (st == DRT_OK) {
        memset(got, 0x5a, cb);
        int32_t rows[2 * T];
        drt_exec ex;
        st = drt_tensor_set(cache, got, cb);
        if (st == DRT_OK) st = drt_tensor_set(src, x, sizeof(float) * (size_t)T * (size_t)n);
        if (st == DRT_OK) st = drt_exec_seq(&ex, rows, T, 0, P0);
        if (st == DRT_OK) st = drt_plan_run(p, &ex);
        if (st == DRT_OK) st = drt_tensor_get(cache, got, cb);
        DRT_CHECK(st == DRT_OK, "%s %s n=%d: run: %s", isa, drt_dtype_name(kvt), n, drt_last_error());
        int bad_row = -1;
        for (int i = 0; st == DRT_OK && i < cap && bad_row < 0; i++)
            if (memcmp(got + (size_t)i * rb, want + (size_t)i * rb, rb)) bad_row = i;
        if (bad_row >= 0) {
            size_t b = 0;
            while (got[(size_t)bad_row * rb + b] == want[(size_t)bad_row * rb + b]) b++;
            DRT_CHECK(0,
                      "%s %s n=%d (seed 7, rows %d..%d of %d): cache row %d differs from the reference at byte %zu "
                      "(0x%02x, want 0x%02x; source row case %d)",
                      isa, drt_dtype_name(kvt), n, P0, P0 + T - 1, cap, bad_row, b, got[(size_t)bad_row * rb + b],
                      want[(size_t)bad_row * rb + b], bad_row - P0);
        }
    }
    printf("  %-8s %-5s n=%3d: %s\n", isa, drt_dtype_name(kvt), n,
           st != DRT_OK            ? "error"
           : memcmp(got, want, cb) ? "differs"
                                   : "same bytes as the reference");
    free(x);
    free(want);
    free(got);
    drt_plan_free(p);
    drt_graph_free(g);
}

/* whether this CPU has what kernel set isa needs (backends/cpu/backend.c) */
static int cpu_has(const char *isa) {
#if defined(__x86_64__)
    if (!strcmp(isa, "avx512"))
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
    if (!strcmp(isa, "avx2")) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (!strcmp(isa, "neon")) return 0;
#elif defined(__aarch64__)
    if (!strcmp(isa, "neon")) return 1;
    if (strcmp(isa, "generic")) return 0;
#else
    if (strcmp(isa, "generic")) return 0;
#endif
    return 1;
}

int main(void) {
    static const char *isas[] = {"avx512", "avx2", "neon", "generic"};
    for (int k = 0; k < 4; k++) {
        if (!cpu_has(isas[k])) {
            printf("  %-8s not on this CPU: not checked\n", isas[k]);
            continue;
        }
        drt_settings *set = NULL;
        drt_backend *be = NULL;
        drt_status st = drt_settings_create(&set);
        if (st == DRT_OK) st = drt_settings_set(set, "cpu.isa", isas[k]);
        if (st == DRT_OK) st = drt_backend_open_settings("cpu", NULL, 2, set, &be);
        DRT_CHECK(st == DRT_OK, "cpu with cpu.isa=%s: %s", isas[k], drt_last_error());
        if (st == DRT_OK) {
            check(be, isas[k], DRT_F16, 77); /* 4 AVX-512 vectors and 13 more */
            check(be, isas[k], DRT_F16, 8);
            check(be, isas[k], DRT_Q8_0, 96);
            check(be, isas[k], DRT_Q8_0, 32);
        }
        drt_backend_close(be);
        drt_settings_free(set);
    }
    return drt_test_summary("test_cpu_kv");
}
