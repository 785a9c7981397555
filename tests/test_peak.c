/* The two runtime pieces under diffrt bench:
 *   - drt_session_forward_profiled computes the same logits as
 *     drt_session_forward (ref and cpu, every fixture architecture), advances
 *     the position the same way, and counts every node of the graph once
 *     per op type (MATMUL: 7 or 8 per layer + the LM head);
 *   - drt_measure_peak gives positive, self-consistent peaks (the best probe
 *     is the reported one), and on a backend whose allocations stop at
 *     48 MiB, made to grow its probes past that, it measures the largest
 *     size that fits instead of failing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "drt_graph.h"
#include "diffrt/backend.h"
#include "drt_test.h"

static void profile_matches(const char *fixture, const char *backend, int matmuls_per_layer) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", DRT_FIXTURES_DIR, fixture);
    drt_model *m = NULL;
    drt_session *s = NULL;
    if (drt_model_load(dir, &m) != DRT_OK) {
        DRT_CHECK(0, "%s: %s", fixture, drt_last_error());
        return;
    }
    drt_model_info I;
    drt_model_get_info(m, &I);
    drt_session_opts so = {.backend = backend, .max_ctx = 16};
    if (drt_session_create(m, &so, &s) != DRT_OK) {
        DRT_CHECK(0, "%s on %s: %s", fixture, backend, drt_last_error());
        drt_model_free(m);
        return;
    }
    int32_t ids[5] = {3, 1, 4, 1, 5};
    size_t V = (size_t)I.vocab;
    float *a = malloc(sizeof(float) * V * 2), *b = malloc(sizeof(float) * V * 2);
    /* plain: a prefill of 5 and a decode step; then the same profiled */
    drt_status st = drt_session_forward(s, ids, 5, a, 0);
    if (st == DRT_OK) st = drt_session_forward(s, ids + 4, 1, a + V, 0);
    drt_session_reset(s);
    drt_profile pp = {0}, pd = {0};
    if (st == DRT_OK) st = drt_session_forward_profiled(s, ids, 5, b, &pp);
    if (st == DRT_OK) st = drt_session_forward_profiled(s, ids + 4, 1, b + V, &pd);
    DRT_CHECK(st == DRT_OK, "%s on %s: %s", fixture, backend, drt_last_error());
    if (st == DRT_OK) {
        double e = drt_nmse(b, a, (int64_t)(2 * V));
        DRT_CHECK(e <= 1e-12, "%s on %s: profiled logits differ from the plain forward's (NMSE %.3g)", fixture, backend,
                  e);
        DRT_CHECK(drt_session_pos(s) == 6, "%s on %s: position %d after the profiled forwards, expected 6", fixture,
                  backend, drt_session_pos(s));
        int mm = -1;
        double secs = 0;
        for (int i = 0; i < pd.n_ops; i++) {
            if (strcmp(pd.op[i], "MATMUL") == 0) mm = i;
            secs += pd.seconds[i];
        }
        int want = matmuls_per_layer * I.n_layers + 1;
        DRT_CHECK(mm >= 0 && pd.nodes[mm] == want && pp.nodes[mm] == want,
                  "%s on %s: MATMUL nodes %d (prefill %d), expected %d", fixture, backend, mm >= 0 ? pd.nodes[mm] : -1,
                  mm >= 0 ? pp.nodes[mm] : -1, want);
        DRT_CHECK(pd.forwards == 1 && pp.forwards == 1 && secs > 0, "%s on %s: forwards %d/%d, %.3g s", fixture,
                  backend, pp.forwards, pd.forwards, secs);
        DRT_CHECK(mm >= 0 && pp.flops[mm] > pd.flops[mm] && pd.bytes[mm] > 0,
                  "%s on %s: napkin FLOPs of the prefill's MATMULs %.3g vs the decode step's %.3g", fixture, backend,
                  mm >= 0 ? pp.flops[mm] : 0, mm >= 0 ? pd.flops[mm] : 0);
    }
    DRT_CHECK(drt_session_forward_profiled(s, ids, 1, b, NULL) == DRT_ERR_INVALID_ARG, "NULL prof accepted");
    free(a);
    free(b);
    drt_session_free(s);
    drt_model_free(m);
}

/* ref with a 48 MiB allocation limit */
static drt_backend_ops g_small;
static drt_status small_alloc(drt_backend *be, size_t size, drt_buffer *out) {
    if (size > ((size_t)48 << 20))
        return drt_set_error(DRT_ERR_OOM, "ref_small: %zu bytes, over its 48 MiB limit", size);
    return drt_registry_find("ref")->buf_alloc(be, size, out);
}

/* min_run_s > 0: grow every probe toward max_bytes (the allocation-limit path) */
static void check_peak(const char *backend, int host_threads, double min_run_s) {
    drt_backend *be = NULL;
    if (drt_backend_open(backend, NULL, &be) != DRT_OK) {
        DRT_CHECK(0, "open %s: %s", backend, drt_last_error());
        return;
    }
    drt_peak_opts o = {.runs = 2,
                       .min_sample_s = 0.005,
                       .weight_dtype = DRT_F16,
                       .host_threads = host_threads,
                       .max_bytes = (size_t)256 << 20,
                       .min_run_s = min_run_s,
                       .gemm_max = 1024};
    drt_peak p;
    drt_status st = drt_measure_peak(be, &o, &p);
    DRT_CHECK(st == DRT_OK, "peak on %s: %s", backend, drt_last_error());
    if (st == DRT_OK) {
        DRT_CHECK(p.add_gbps > 0 && p.gemv_gbps > 0 && p.gemm_f32_gflops > 0 && p.gemm_w_gflops > 0,
                  "%s: a probe gave nothing: add %.3g gemv %.3g gemm %.3g/%.3g", backend, p.add_gbps, p.gemv_gbps,
                  p.gemm_f32_gflops, p.gemm_w_gflops);
        DRT_CHECK(p.gbytes_per_s == fmax(fmax(p.add_gbps, p.gemv_gbps), p.host_gbps) &&
                      p.gflops == fmax(p.gemm_f32_gflops, p.gemm_w_gflops) && p.bw_probe[0] && p.flops_probe[0],
                  "%s: the peak is not the best probe: %.3g GB/s (%s), %.3g GFLOP/s (%s)", backend, p.gbytes_per_s,
                  p.bw_probe, p.gflops, p.flops_probe);
        /* the host read loop runs on host-memory backends only */
        int host = host_threads > 0 && be->ops->buf_wrap;
        DRT_CHECK(host == (p.host_gbps > 0), "%s: host read loop %.3g GB/s with %d threads (expected %s)", backend,
                  p.host_gbps, host_threads, host ? "one" : "none");
        if (strcmp(backend, "ref_small") == 0)
            DRT_CHECK(strstr(p.bw_probe, "32 MiB") != NULL || p.host_gbps > 0,
                      "ref_small: the bandwidth probe should stay at 32 MiB buffers: %s", p.bw_probe);
    }
    drt_backend_close(be);
}

int main(void) {
    profile_matches("diff_v2", "ref", 8);
    profile_matches("diff_v2", "cpu", 8);
    profile_matches("unilm_v1", "cpu", 7);
    profile_matches("hf_llama_gqa", "cpu", 7);

    g_small = *drt_registry_find("ref");
    g_small.name = "ref_small";
    g_small.buf_alloc = small_alloc;
    g_small.buf_wrap = NULL; /* not a host backend for the peak: no host read loop */
    DRT_CHECK(drt_registry_add(&g_small) == DRT_OK, "register ref_small: %s", drt_last_error());
    check_peak("ref_small", 2, 100.0);
    check_peak("cpu", 2, 0);
    return drt_test_summary("test_peak");
}
