/* The conformance harness: ONE table of op cases (cases.c), run on every
 * selected backend against the CPU reference (runner.c), whole models
 * (models.c), or --perf timings (perf.c) (docs/design.md section 6).
 *
 * Every verdict is a record (conform_report.h): the text table
 * (report_text.c), --json and --junit (conform_report.c) are all written
 * from the same records. This file is the driver. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conform_internal.h"
#include "drt_outfile.h"
#include "drt_util.h"
#include "safetensors.h" /* drt_printable */

/* ---- the steps of a run ------------------------------------------------------------- */

/* The options' names (backends, devices, models) and the report paths: a
 * usage error when one is wrong, and nothing has been written then. */
static drt_status prepare(cf_run *run, cf_model_ref **models, int *n_models, drt_outfile *jo, drt_outfile *xo,
                          drt_conform_result *r) {
    const drt_conform_opts *o = run->o;
    if (o->perf && o->junit_path) return cf_usage(r, "conform: --junit reports conformance, not --perf timings");
    if (o->list && (o->json_path || o->junit_path)) return cf_usage(r, "conform: --list prints the case table only");
    drt_status st = cf_select_backends(o, run, r);
    if (st == DRT_OK && o->models_dir && !o->list && !o->perf)
        st = cf_find_models(o->models_dir, run, models, n_models, r);
    if (st == DRT_OK && o->json_path && o->junit_path && drt_same_file(o->json_path, o->junit_path))
        st = cf_usage(r, "conform: --json %s and --junit %s name the same file", o->json_path, o->junit_path);
    if (st == DRT_OK && o->json_path && drt_outfile_open(jo, o->json_path) != DRT_OK)
        st = cf_usage(r, "conform: --json: %s", drt_last_error());
    if (st == DRT_OK && o->junit_path && drt_outfile_open(xo, o->junit_path) != DRT_OK)
        st = cf_usage(r, "conform: --junit: %s", drt_last_error());
    return st;
}

/* a line per selected backend (its device, or why it is unavailable) and per
 * skipped --models directory; counts the required ones that are unavailable */
static void print_backends(const cf_run *run, drt_conform_result *r) {
    const drt_conform_opts *o = run->o;
    FILE *out = o->out;
    for (int k = 0; k < run->nbe; k++) {
        const cf_backend *b = &run->be[k];
        if (!b->be) {
            if (b->required) r->unavailable_required++;
            if (out && !o->list)
                fprintf(out, "backend %-8s unavailable%s: %s\n", b->name, b->required ? " (REQUIRED)" : "", b->why);
        } else if (out && !o->list) {
            fprintf(out, "backend %-8s device %d (%s%s%s): %s; precision %s\n", b->name, b->device, b->dev_from,
                    b->dev_sel[0] ? " " : "", b->dev_sel, b->dev_desc[0] ? b->dev_desc : "?", b->precision);
        }
    }
    for (int i = 0; out && i < run->n_skipped; i++) { /* a folder's name: shown escaped */
        char shown[4 * sizeof run->skipped[i].path];
        fprintf(out, "models: %s: %s, skipped\n", drt_printable(run->skipped[i].path, shown, sizeof shown),
                run->skipped[i].why);
    }
}

/* --list: the selected cases of the table, as the reports describe them */
static void list_cases(const drt_conform_opts *o) {
    for (int i = 0; i < CF_N_CASES; i++) {
        if (!cf_case_selected(o, &CF_CASES[i])) continue;
        cf_built b;
        if (cf_build_case(&CF_CASES[i], &b) == DRT_OK && o->out)
            fprintf(o->out, "%-13s %s\n", drt_op_name(CF_CASES[i].op), b.desc);
        drt_graph_free(b.g);
    }
}

/* the op cases and the models, the text table, and the counts in r */
static drt_status run_checks(cf_run *run, drt_backend *ref, const cf_model_ref *models, int n_models,
                             drt_conform_result *r) {
    FILE *out = run->o->out;
    drt_status st = cf_run_op_cases(run, ref);
    if (st == DRT_OK) st = cf_run_models(run, models, n_models);
    if (st != DRT_OK) return st;
    if (out) cf_print_table(run, out);
    int counts[CF_N_STATUS];
    cf_count(run, -1, counts);
    r->pass = counts[CF_PASS];
    r->fail = counts[CF_FAIL];
    r->unsupported = counts[CF_UNSUPPORTED];
    if (out) {
        fprintf(out, "\n%d passed, %d failed, %d unsupported, %d unavailable", r->pass, r->fail, r->unsupported,
                counts[CF_UNAVAILABLE]);
        for (int k = 0; k < run->nbe; k++)
            if (run->be[k].required && !run->be[k].be)
                fprintf(out, "; required backend %s unavailable", run->be[k].name);
        fprintf(out, "\n");
        if (run->n_batch_skipped) {
            fprintf(out, "--quick: the batch cases ran on one model of each architecture; not on");
            for (int i = 0; i < run->n_batch_skipped; i++) fprintf(out, "%s %s", i ? "," : "", run->batch_skipped[i]);
            fprintf(out, "\n");
        }
    }
    return DRT_OK;
}

/* All or nothing: both reports are complete before either replaces the file
 * at its path; when one cannot be written, neither path changes. */
static void write_reports(cf_run *run, drt_outfile *jo, drt_outfile *xo, drt_status *st) {
    const drt_conform_opts *o = run->o;
    if (*st != DRT_OK && !run->error[0]) snprintf(run->error, sizeof run->error, "%s", drt_last_error());
    drt_status s = DRT_OK;
    if (jo->f) s = cf_write_json(run, jo->f, o->json_path);
    if (xo->f && s == DRT_OK) s = cf_write_junit(run, xo->f, o->junit_path);
    if (s == DRT_OK) s = drt_outfile_finish(jo);
    if (s == DRT_OK) s = drt_outfile_finish(xo);
    if (s == DRT_OK) s = drt_outfile_commit(jo);
    if (s == DRT_OK) s = drt_outfile_commit(xo);
    drt_outfile_discard(jo);
    drt_outfile_discard(xo);
    if (*st == DRT_OK) *st = s;
}

drt_status drt_conform_run(const drt_conform_opts *o, drt_conform_result *r) {
    memset(r, 0, sizeof *r);
    cf_run run = {.o = o, .t_start = drt_now_s()};
    time_t now = time(NULL);
    struct tm tmv;
    if (gmtime_r(&now, &tmv)) strftime(run.started_at, sizeof run.started_at, "%Y-%m-%dT%H:%M:%SZ", &tmv);
    cf_model_ref *models = NULL;
    int n_models = 0;
    drt_outfile jo = {0}, xo = {0};

    drt_status st = prepare(&run, &models, &n_models, &jo, &xo, r);
    if (st == DRT_OK) {
        print_backends(&run, r);
        /* the oracle: the reference on its one device, whatever DIFFRT_DEVICE says */
        drt_backend *ref = NULL;
        st = drt_backend_open("ref", "", &ref);
        if (st == DRT_OK && o->list)
            list_cases(o);
        else if (st == DRT_OK && o->perf)
            st = cf_run_perf(&run);
        else if (st == DRT_OK)
            st = run_checks(&run, ref, models, n_models, r);
        write_reports(&run, &jo, &xo, &st);
        drt_backend_close(ref);
    }
    /* a usage error writes no report, and leaves any file at its path as it was */
    drt_outfile_discard(&jo);
    drt_outfile_discard(&xo);
    for (int k = 0; k < run.nbe; k++) drt_backend_close(run.be[k].be);
    free(models);
    free(run.cases);
    free(run.skipped);
    free(run.batch_skipped);
    cJSON_Delete(run.perf);
    return st;
}
