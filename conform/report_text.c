/* conform's text report: one row per op and per model, one column per
 * backend, then the worst failure per op and backend and every model note.
 * Written from the same records as --json and --junit. */
#include <math.h>
#include <string.h>

#include "conform_internal.h"
#include "safetensors.h" /* drt_printable */

/* ---- per (op, backend) aggregates ------------------------------------------------ */

typedef struct {
    int n_pass, n_fail, n_unsup, n_unavail, any;
    double worst_key;
    const cf_case *worst;
} cell;

static void cell_add(cell *c, const cf_case *cs) {
    c->any = 1;
    if (cs->st == CF_PASS) c->n_pass++;
    if (cs->st == CF_UNSUPPORTED) c->n_unsup++;
    if (cs->st == CF_UNAVAILABLE) c->n_unavail++;
    if (cs->st != CF_FAIL) return;
    c->n_fail++;
    /* the worst failure: unmeasured ones (errors, unsupported) first, then by NMSE */
    double key = cs->measured && !cs->nonfinite ? cs->nmse : INFINITY;
    if (!c->worst || !(key <= c->worst_key)) {
        c->worst_key = key;
        c->worst = cs;
    }
}

static void cell_text(const cell *c, int available, char *txt, size_t n) {
    if (!available)
        snprintf(txt, n, "n/a");
    else if (c->n_fail)
        snprintf(txt, n, "FAIL %d/%d", c->n_fail, c->n_fail + c->n_pass + c->n_unsup);
    else if (c->n_unsup)
        snprintf(txt, n, "unsupported");
    else if (c->n_pass)
        snprintf(txt, n, "pass %d", c->n_pass);
    else
        snprintf(txt, n, "-");
}

/* the row of op: a cell per backend */
static void print_op_row(const cf_run *run, drt_op op, FILE *out) {
    cell cl[CF_MAX_BE] = {0};
    int any = 0;
    for (int i = 0; i < run->n_cases; i++) {
        const cf_case *c = &run->cases[i];
        if (c->kind == CF_KIND_OP && strcmp(c->op, drt_op_name(op)) == 0) cell_add(&cl[c->be], c), any = 1;
    }
    if (!any) return;
    fprintf(out, "%-24s", drt_op_name(op));
    for (int k = 0; k < run->nbe; k++) {
        char txt[32];
        cell_text(&cl[k], run->be[k].be != NULL, txt, sizeof txt);
        fprintf(out, " %-12s", txt);
    }
    fprintf(out, "\n");
}

/* the rows of the models: their records come a backend each, in order. A
 * model's name is its folder's, shown escaped (drt_printable) as every
 * string from a file: no ESC or C1 control in it reaches the terminal. */
static void print_model_rows(const cf_run *run, FILE *out) {
    for (int i = 0; i < run->n_cases; i += run->nbe) {
        const cf_case *c = &run->cases[i];
        if (c->kind == CF_KIND_OP) continue;
        char shown[4 * sizeof c->model];
        if (c->kind == CF_KIND_MODEL)
            fprintf(out, "model:%-18s", drt_printable(c->model, shown, sizeof shown));
        else
            fprintf(out, "  %-22s", c->op); /* a batch case of the model above */
        for (int k = 0; k < run->nbe; k++) {
            const cf_case *ck = &run->cases[i + k];
            const char *txt = !run->be[k].be      ? "n/a"
                              : ck->st == CF_FAIL ? "FAIL"
                              : ck->st == CF_PASS ? (ck->detail[0] ? "pass*" : "pass")
                                                  : CF_STATUS_NAME[ck->st];
            fprintf(out, " %-12s", txt);
        }
        fprintf(out, "\n");
    }
}

/* the worst failure per op and backend, then every model's note or failure
 * (its line holds the folder's name and path: shown escaped) */
static void print_failures(const cf_run *run, FILE *out) {
    int hdr = 0;
    char line[1400], shown[4 * sizeof line];
    for (int op = 1; op < DRT_OP_COUNT; op++)
        for (int k = 0; k < run->nbe; k++) {
            cell cl = {0};
            for (int i = 0; i < run->n_cases; i++) {
                const cf_case *c = &run->cases[i];
                if (c->be == k && c->kind == CF_KIND_OP && strcmp(c->op, drt_op_name((drt_op)op)) == 0)
                    cell_add(&cl, c);
            }
            if (!cl.worst || !run->be[k].be) continue;
            if (!hdr++) fprintf(out, "\nfailures (worst case per op and backend):\n");
            cf_case_line(run, cl.worst, line, sizeof line);
            fprintf(out, "  FAIL %s: %s\n", run->be[k].name, line);
        }
    for (int i = 0; i < run->n_cases; i++) {
        const cf_case *c = &run->cases[i];
        if (c->kind == CF_KIND_OP || !run->be[c->be].be || !c->detail[0]) continue;
        cf_case_line(run, c, line, sizeof line);
        fprintf(out, "  %s %s: %s\n", c->st == CF_FAIL ? "FAIL" : "note", run->be[c->be].name,
                drt_printable(line, shown, sizeof shown));
    }
}

void cf_print_table(const cf_run *run, FILE *out) {
    fprintf(out, "\n%-24s", "op \\ backend");
    for (int k = 0; k < run->nbe; k++) fprintf(out, " %-12s", run->be[k].name);
    fprintf(out, "\n");
    for (int op = 1; op < DRT_OP_COUNT; op++) print_op_row(run, (drt_op)op, out);
    print_model_rows(run, out);
    print_failures(run, out);
}
