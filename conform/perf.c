/* conform --perf: the perf shapes (cases.c) timed on every backend, as GFLOP/s
 * and GB/s from the op table's napkin math, and as fractions of the
 * backend's own measured peaks. */
#include <stdlib.h>
#include <string.h>

#include "conform_internal.h"
#include "diffrt/backend.h"
#include "drt_util.h"

typedef struct {
    double bw[CF_MAX_BE], fl[CF_MAX_BE]; /* GB/s, GFLOP/s; 0 = none */
    int reps, warm;
    double *times; /* reps */
    int any_over;  /* a case ran faster than a peak */
} perf_state;

/* Each backend's own peaks (drt_measure_peak, as diffrt bench): streaming
 * bandwidth and GEMM FLOP/s, each the best of steady runs of growing size,
 * so a kernel rarely beats them; one that does is flagged, never printed as
 * more than 100%. */
static drt_status measure_peaks(const cf_run *run, perf_state *ps, FILE *out) {
    for (int k = 0; k < run->nbe; k++) {
        drt_backend *be = run->be[k].be;
        if (!be) continue;
        drt_peak_opts po = {.weight_dtype = DRT_F16};
        if (be->ops->buf_wrap) /* host memory: also a threaded host read loop */
            po.host_threads = strcmp(run->be[k].name, "ref") == 0 ? 1 : be->threads > 0 ? be->threads : drt_cpu_count();
        drt_peak pk;
        drt_status st = drt_measure_peak(be, &po, &pk);
        if (st != DRT_OK) return st;
        ps->bw[k] = pk.gbytes_per_s;
        ps->fl[k] = pk.gflops;
        if (out)
            fprintf(out, "peak %-8s %.2f GB/s (%s), %.2f GFLOP/s (%s), best of %d\n", run->be[k].name, ps->bw[k],
                    pk.bw_probe, ps->fl[k], pk.flops_probe, pk.runs);
    }
    return DRT_OK;
}

static int median_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* a percentage of a peak, or ">peak" when above 100 (a measurement
 * problem, not a fact), "-" when there is no peak */
static void pct_txt(double p, char *buf, size_t n) {
    if (p <= 0)
        snprintf(buf, n, "-");
    else if (p > 100)
        snprintf(buf, n, ">peak");
    else
        snprintf(buf, n, "%.1f%%", p);
}

/* one timing as a --json "perf" record (docs/conform-json.md) */
static cJSON *perf_record(const char *op, const char *backend, const char *desc, double med, int reps, double gf,
                          double gb, double peak_fl, double peak_bw, const char *kv) {
    double pf = peak_fl > 0 ? 100 * gf / peak_fl : 0, pb = peak_bw > 0 ? 100 * gb / peak_bw : 0;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", "perf");
    cJSON_AddStringToObject(j, "op", op);
    cJSON_AddStringToObject(j, "backend", backend);
    cJSON_AddStringToObject(j, "description", desc);
    cJSON_AddNumberToObject(j, "median_s", med);
    cJSON_AddNumberToObject(j, "repeats", reps);
    cJSON_AddNumberToObject(j, "gflops", gf);
    cJSON_AddNumberToObject(j, "gbytes_per_s", gb);
    cJSON_AddNumberToObject(j, "peak_gflops", peak_fl);
    cJSON_AddNumberToObject(j, "peak_gbytes_per_s", peak_bw);
    /* a fraction of a peak, or null with a flag when above 1 */
    cJSON_AddItemToObject(j, "fraction_of_peak_flops",
                          pf > 0 && pf <= 100 ? cJSON_CreateNumber(pf / 100) : cJSON_CreateNull());
    cJSON_AddItemToObject(j, "fraction_of_peak_bw",
                          pb > 0 && pb <= 100 ? cJSON_CreateNumber(pb / 100) : cJSON_CreateNull());
    cJSON_AddBoolToObject(j, "above_peak", pf > 100 || pb > 100);
    if (kv[0]) cJSON_AddStringToObject(j, "kernel", kv);
    return j;
}

/* Perf case i on backend k: one line of the table, one record. */
static drt_status perf_case_on(cf_run *run, int i, int k, perf_state *ps, FILE *out) {
    const cf_opcase *c = &CF_PERF_CASES[i];
    drt_backend *be = run->be[k].be;
    float *res = NULL;
    int64_t n;
    int sup;
    cf_built b;
    drt_status st = cf_run_case(be, c, 1000 + (uint64_t)i, &res, &n, &sup, ps->times, ps->warm, ps->reps, &b);
    free(res);
    if (st != DRT_OK || !sup) {
        if (st == DRT_OK && out)
            fprintf(out, "%-13s %-8s %-58s %10s\n", drt_op_name(c->op), run->be[k].name, b.desc, "unsupported");
        drt_graph_free(b.g);
        return st;
    }
    qsort(ps->times, (size_t)ps->reps, sizeof(double), median_cmp);
    double med = ps->times[ps->reps / 2];
    drt_exec ex;
    drt_exec_rows(&ex, b.n_rows ? b.rows : NULL, b.n_rows);
    double fl = 0, by = 0; /* every node's napkin math: a decomposed case counts its own work */
    for (int q = 0; q < b.g->n_nodes; q++) {
        const drt_op_info *info = drt_op_get(b.g->nodes[q]->op);
        fl += info->flops(b.g->nodes[q], &ex);
        by += info->bytes(b.g->nodes[q], &ex);
    }
    double gf = fl / med * 1e-9, gb = by / med * 1e-9;
    /* the kernel variants the backend says it ran, in node order */
    char kv[160] = "";
    size_t kvn = 0;
    for (int q = 0; q < b.g->n_nodes && be->ops->kernel_variant; q++) {
        const char *v = be->ops->kernel_variant(be, b.g->nodes[q]);
        if (v && kvn < sizeof kv) kvn += (size_t)snprintf(kv + kvn, sizeof kv - kvn, "%s%.60s", kvn ? " + " : "", v);
    }
    double pf = ps->fl[k] > 0 ? 100 * gf / ps->fl[k] : 0, pb = ps->bw[k] > 0 ? 100 * gb / ps->bw[k] : 0;
    char tf[16], tb[16];
    pct_txt(pf, tf, sizeof tf);
    pct_txt(pb, tb, sizeof tb);
    ps->any_over |= pf > 100 || pb > 100;
    if (out)
        fprintf(out, "%-13s %-8s %-58s %10.3f %10.2f %9.2f %7s %7s%s%s\n", drt_op_name(c->op), run->be[k].name, b.desc,
                med * 1e3, gf, gb, tf, tb, kv[0] ? "  " : "", kv);
    cJSON_AddItemToArray(run->perf, perf_record(drt_op_name(c->op), run->be[k].name, b.desc, med, ps->reps, gf, gb,
                                                ps->fl[k], ps->bw[k], kv));
    drt_graph_free(b.g);
    return DRT_OK;
}

drt_status cf_run_perf(cf_run *run) {
    const drt_conform_opts *o = run->o;
    FILE *out = o->out;
    const int no_ops = cf_in_list(o->ops, "none");
    perf_state ps = {.reps = o->repeats > 0 ? o->repeats : 5, .warm = o->warmup >= 0 ? o->warmup : 1};
    run->perf = cJSON_CreateArray();
    ps.times = malloc(sizeof(double) * (size_t)ps.reps);
    if (!ps.times || !run->perf) {
        free(ps.times);
        return drt_set_error(DRT_ERR_OOM, "out of memory");
    }
    drt_status st = no_ops ? DRT_OK : measure_peaks(run, &ps, out);
    if (out && st == DRT_OK)
        fprintf(out, "%-13s %-8s %-58s %10s %10s %9s %7s %7s  %s\n", "op", "backend", "shape", "median ms", "GFLOP/s",
                "GB/s", "%FLOP", "%BW", "kernel (when the backend names it)");
    for (int i = 0; i < CF_N_PERF && st == DRT_OK && !no_ops; i++) {
        if (!cf_op_selected(o, CF_PERF_CASES[i].op)) continue;
        for (int k = 0; k < run->nbe && st == DRT_OK; k++)
            if (run->be[k].be) st = perf_case_on(run, i, k, &ps, out);
    }
    free(ps.times);
    if (out && ps.any_over)
        fprintf(out, "(>peak: faster than the measured peak: the working set stayed in cache between runs, or "
                     "the peak was under-measured; not a fraction)\n");
    return st;
}
