/* A backend's peaks by microbenchmark (include/diffrt/backend.h): streaming
 * bandwidth (a big ADD, a big GEMV with the model's weight dtype, and on
 * host-memory backends a threaded host read loop like bench/membw.c) and
 * GEMM FLOP/s (MATMUL n^3, n = 1024 grown or shrunk to the device). Every
 * figure is the best of several steady samples, each sample the mean of
 * enough back-to-back runs to last min_sample_s. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "drt_graph.h"
#include "drt_half.h"
#include "diffrt/backend.h"
#include "drt_util.h"

/* ---- one op on the backend, planned once ----------------------------------- */

typedef enum { P_ADD, P_MATMUL } probe_kind;

typedef struct {
    drt_graph *g;
    drt_plan *plan;
    drt_tensor *node;
    double work; /* bytes (bandwidth probes) or FLOPs (GEMM) of one run */
} probe;

static void probe_free(probe *pr) {
    drt_plan_free(pr->plan);
    drt_graph_free(pr->g);
    memset(pr, 0, sizeof *pr);
}

/* Fills t with small values of its dtype, 1 MiB at a time (no host copy of
 * the whole tensor): x_i = ((i * 37) % 17 - 8) / 64. */
static drt_status fill(drt_tensor *t) {
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf) return drt_set_error(DRT_ERR_OOM, "out of memory");
    size_t es = drt_dtype_size(t->type), total = drt_nbytes(t), per = CHUNK / es;
    for (size_t i = 0; i < per; i++) {
        float v = (float)((int)((i * 37) % 17) - 8) / 64.0f;
        if (t->type == DRT_F32)
            ((float *)buf)[i] = v;
        else if (t->type == DRT_F16)
            ((uint16_t *)buf)[i] = drt_f32_to_f16(v);
        else
            ((uint16_t *)buf)[i] = drt_f32_to_bf16(v);
    }
    drt_status s = DRT_OK;
    for (size_t off = 0; s == DRT_OK && off < total; off += per * es) {
        size_t n = total - off < per * es ? total - off : per * es;
        s = t->buf->be->ops->upload(t->buf->be, t->buf, t->offs + off, buf, n);
    }
    free(buf);
    return s;
}

/* ADD: a, b, y of n f32 elements. MATMUL: x (m,k) f32, w (n,k) wt, y (m,n).
 * *supported = 0 (and nothing built) when the backend lacks the node. */
static drt_status probe_build(drt_backend *be, probe_kind kind, int64_t m, int64_t n, int64_t k, drt_dtype wt,
                              probe *pr, int *supported) {
    memset(pr, 0, sizeof *pr);
    *supported = 0;
    pr->g = drt_graph_new();
    if (!pr->g) return drt_set_error(DRT_ERR_OOM, "out of memory");
    drt_tensor *a, *b;
    if (kind == P_ADD) {
        a = drt_new_tensor_1d(pr->g, DRT_F32, n, "peak.a");
        b = drt_new_tensor_1d(pr->g, DRT_F32, n, "peak.b");
        pr->node = drt_add(pr->g, a, b);
    } else {
        a = drt_new_tensor_2d(pr->g, DRT_F32, m, k, "peak.x");
        b = drt_new_tensor_2d(pr->g, wt, n, k, "peak.w");
        pr->node = drt_matmul(pr->g, a, b);
    }
    if (!pr->node) {
        drt_status s = pr->g->err;
        probe_free(pr);
        return s;
    }
    a->flags |= DRT_TF_INPUT;
    b->flags |= kind == P_ADD ? DRT_TF_INPUT : DRT_TF_WEIGHT;
    if (!be->ops->supports(be, pr->node)) {
        probe_free(pr);
        return DRT_OK;
    }
    drt_status s = drt_plan_create(pr->g, be, &pr->plan);
    if (s == DRT_OK) s = fill(a);
    if (s == DRT_OK) s = fill(b);
    if (s != DRT_OK) {
        probe_free(pr);
        return s;
    }
    drt_exec ex = {0};
    const drt_op_info *info = drt_op_get(pr->node->op);
    pr->work = kind == P_ADD || m == 1 ? info->bytes(pr->node, &ex) : info->flops(pr->node, &ex);
    *supported = 1;
    return DRT_OK;
}

static drt_status time_run(probe *pr, double *dt) {
    drt_exec ex = {0};
    double t0 = drt_now_s();
    drt_status s = drt_plan_run(pr->plan, &ex);
    *dt = drt_now_s() - t0;
    return s;
}

/* The best of runs samples (work per second); each sample is the mean of
 * iters back-to-back runs, iters chosen from one run's time t1. */
static drt_status best_rate(probe *pr, double t1, const drt_peak_opts *o, double *best) {
    int iters = t1 > 0 ? (int)ceil(o->min_sample_s / t1) : 1;
    if (iters < 1) iters = 1;
    if (iters > 10000) iters = 10000;
    *best = 0;
    drt_exec ex = {0};
    for (int r = 0; r < o->runs; r++) {
        double t0 = drt_now_s();
        for (int i = 0; i < iters; i++) {
            drt_status s = drt_plan_run(pr->plan, &ex);
            if (s != DRT_OK) return s;
        }
        double dt = (drt_now_s() - t0) / iters;
        if (dt > 0 && pr->work / dt > *best) *best = pr->work / dt;
    }
    return DRT_OK;
}

/* One probe whose size doubles while one run lasts under grow_below (and
 * the next size fits max_bytes), or halves while it lasts over
 * shrink_above (down to min_scale), then is measured. scale is the number
 * of base units: ADD n = scale Mi elements; GEMV w = (scale * 1024, 4096);
 * GEMM n = m = k = scale. *rate = 0 when the backend lacks the op. */
static drt_status measure(drt_backend *be, probe_kind kind, int gemv, drt_dtype wt, int64_t scale, int64_t min_scale,
                          int64_t max_scale, double grow_below, double shrink_above, const drt_peak_opts *o,
                          double *rate, char *desc, size_t ndesc) {
    *rate = 0;
    int dir = 0;    /* +1 growing, -1 shrinking: never both */
    int capped = 0; /* a larger size failed (a device's allocation limit): stay below it */
    for (;;) {
        int64_t m, n, k;
        if (kind == P_ADD)
            m = 1, n = scale << 20, k = 0;
        else if (gemv)
            m = 1, n = scale * 1024, k = 4096;
        else
            m = n = k = scale;
        probe pr;
        int sup;
        drt_status s = probe_build(be, kind, m, n, k, wt, &pr, &sup);
        if (s == DRT_OK && !sup) return s;
        double t1 = 0;
        if (s == DRT_OK) s = time_run(&pr, &t1); /* warm-up: kernel compilation, first touch */
        if (s == DRT_OK) s = time_run(&pr, &t1);
        if (s != DRT_OK) {
            probe_free(&pr);
            if (dir <= 0) return s;
            /* the doubled size did not fit (e.g. an iGPU's largest allocation):
             * measure the last size that ran */
            scale /= 2, capped = 1;
            continue;
        }
        if (dir >= 0 && !capped && t1 < grow_below && scale * 2 <= max_scale) {
            probe_free(&pr);
            scale *= 2, dir = 1;
            continue;
        }
        if (dir <= 0 && t1 > shrink_above && scale / 2 >= min_scale) {
            probe_free(&pr);
            scale /= 2, dir = -1;
            continue;
        }
        s = best_rate(&pr, t1, o, rate);
        if (kind == P_ADD)
            snprintf(desc, ndesc, "ADD f32, 3 x %lld MiB", (long long)(n * 4 >> 20));
        else if (gemv)
            snprintf(desc, ndesc, "MATMUL GEMV (1,%lld)x(%lld,%lld)^T %s, %lld MiB", (long long)k, (long long)n,
                     (long long)k, drt_dtype_name(wt), (long long)(n * k * (int64_t)drt_dtype_size(wt) >> 20));
        else
            snprintf(desc, ndesc, "MATMUL %lld^3, x f32, w %s", (long long)n, drt_dtype_name(wt));
        probe_free(&pr);
        return s;
    }
}

/* ---- the host read loop (bench/membw.c) ------------------------------------ */

typedef struct {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
    double t0, t1; /* when this thread started and finished reading */
} reader_job;

static void *reader(void *arg) {
    reader_job *j = arg;
    j->t0 = drt_now_s();
    /* four independent sums so the loads are not serialised by one add chain */
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= j->n; i += 4) {
        s0 += j->p[i];
        s1 += j->p[i + 1];
        s2 += j->p[i + 2];
        s3 += j->p[i + 3];
    }
    for (; i < j->n; i++) s0 += j->p[i];
    j->sum = s0 + s1 + s2 + s3;
    j->t1 = drt_now_s();
    return NULL;
}

/* nth threads each sum their share of `bytes`; a round lasts from the
 * first thread's start to the last one's end (thread creation is outside
 * it); the best of runs rounds after one warm-up round */
static drt_status host_read(int nth, size_t bytes, int runs, double *gbps) {
    enum { MAX_TH = 256 };
    *gbps = 0;
    if (nth > MAX_TH) nth = MAX_TH;
    size_t n = bytes / sizeof(uint64_t);
    uint64_t *buf = malloc(n * sizeof *buf);
    if (!buf) return drt_set_error(DRT_ERR_OOM, "peak: cannot allocate %zu MiB for the host read loop", bytes >> 20);
    for (size_t i = 0; i < n; i++) buf[i] = i; /* touch every page */
    pthread_t th[MAX_TH];
    reader_job jobs[MAX_TH];
    drt_status s = DRT_OK;
    for (int r = 0; s == DRT_OK && r < runs + 1; r++) {
        int started = 0;
        for (int t = 0; t < nth; t++) {
            size_t lo = n * (size_t)t / (size_t)nth, hi = n * (size_t)(t + 1) / (size_t)nth;
            jobs[t] = (reader_job){buf + lo, hi - lo, 0, 0, 0};
            if (pthread_create(&th[t], NULL, reader, &jobs[t]) != 0) break;
            started++;
        }
        for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
        if (started < nth) {
            s = drt_set_error(DRT_ERR_OOM, "peak: cannot start %d reader threads", nth);
            break;
        }
        double t0 = jobs[0].t0, t1 = jobs[0].t1;
        for (int t = 1; t < nth; t++) {
            if (jobs[t].t0 < t0) t0 = jobs[t].t0;
            if (jobs[t].t1 > t1) t1 = jobs[t].t1;
        }
        double g = t1 > t0 ? (double)(n * sizeof *buf) / (t1 - t0) * 1e-9 : 0;
        if (r > 0 && g > *gbps) *gbps = g;
    }
    free(buf);
    return s;
}

/* ---- all probes -------------------------------------------------------------- */

drt_status drt_measure_peak(drt_backend *be, const drt_peak_opts *opts, drt_peak *out) {
    drt_peak_opts o = {0};
    if (opts) o = *opts;
    if (o.runs <= 0) o.runs = 5;
    if (!(o.min_sample_s > 0)) o.min_sample_s = 0.02;
    if (!o.max_bytes) o.max_bytes = (size_t)1 << 30;
    if (o.gemm_max <= 0) o.gemm_max = 4096;
    if (o.weight_dtype != DRT_F16 && o.weight_dtype != DRT_BF16) o.weight_dtype = DRT_F32;
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_measure_peak: out is NULL");
    memset(out, 0, sizeof *out);
    out->runs = o.runs;
    if (!be) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_measure_peak: no backend");

    double bw_run = o.min_run_s > 0 ? o.min_run_s : 2e-3, gemm_run = o.min_run_s > 0 ? o.min_run_s : 1e-2;
    /* bandwidth: ADD from 3 x 32 MiB and GEMV from 32 MiB of weights (past
     * most last-level caches), doubled until a run lasts 2 ms */
    char d_add[96] = "", d_gemv[96] = "", d_f32[96] = "", d_w[96] = "";
    int64_t add_max = (int64_t)(o.max_bytes / 12 >> 20);
    int64_t gemv_max = (int64_t)(o.max_bytes / (4096 * drt_dtype_size(o.weight_dtype) * 1024));
    drt_status s = DRT_OK;
    if (add_max >= 8)
        s = measure(be, P_ADD, 0, DRT_F32, 8, 8, add_max, bw_run, INFINITY, &o, &out->add_gbps, d_add, sizeof d_add);
    if (s == DRT_OK && gemv_max >= 4)
        s = measure(be, P_MATMUL, 1, o.weight_dtype, 4, 4, gemv_max, bw_run, INFINITY, &o, &out->gemv_gbps, d_gemv,
                    sizeof d_gemv);
    out->add_gbps *= 1e-9;
    out->gemv_gbps *= 1e-9;
    if (s == DRT_OK && o.host_threads > 0 && be->ops->buf_wrap) {
        size_t hb = o.max_bytes / 2;
        s = host_read(o.host_threads, hb, o.runs, &out->host_gbps);
    }
    /* GEMM: 1024^3, doubled while a run lasts under 10 ms (a GPU), halved
     * while it lasts over 0.25 s (the reference), side 256 .. gemm_max */
    if (s == DRT_OK)
        s = measure(be, P_MATMUL, 0, DRT_F32, 1024, 256, o.gemm_max, gemm_run, 0.25, &o, &out->gemm_f32_gflops, d_f32,
                    sizeof d_f32);
    if (s == DRT_OK && o.weight_dtype != DRT_F32)
        s = measure(be, P_MATMUL, 0, o.weight_dtype, 1024, 256, o.gemm_max, gemm_run, 0.25, &o, &out->gemm_w_gflops,
                    d_w, sizeof d_w);
    out->gemm_f32_gflops *= 1e-9;
    out->gemm_w_gflops *= 1e-9;
    if (s != DRT_OK) return s;

    out->gbytes_per_s = out->add_gbps;
    snprintf(out->bw_probe, sizeof out->bw_probe, "%s", d_add);
    if (out->gemv_gbps > out->gbytes_per_s) {
        out->gbytes_per_s = out->gemv_gbps;
        snprintf(out->bw_probe, sizeof out->bw_probe, "%s", d_gemv);
    }
    if (out->host_gbps > out->gbytes_per_s) {
        out->gbytes_per_s = out->host_gbps;
        snprintf(out->bw_probe, sizeof out->bw_probe, "host read loop, %d threads, %zu MiB", o.host_threads,
                 o.max_bytes / 2 >> 20);
    }
    out->gflops = out->gemm_f32_gflops;
    snprintf(out->flops_probe, sizeof out->flops_probe, "%s", d_f32);
    if (out->gemm_w_gflops > out->gflops) {
        out->gflops = out->gemm_w_gflops;
        snprintf(out->flops_probe, sizeof out->flops_probe, "%s", d_w);
    }
    return DRT_OK;
}
