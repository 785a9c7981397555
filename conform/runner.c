/* Running one op case on one backend against the CPU reference.
 *
 * A case builds a one-node graph on each backend from the same seeded inputs
 * (weights rounded to their dtype first, so every backend sees the same
 * numbers), poisons the output with NaN, runs, and compares with the CPU
 * reference: NMSE = sum((out-ref)^2)/sum(ref^2) <= 1e-8 for f32 paths, any
 * NaN/Inf where the reference is finite fails. A backend whose supports()
 * refuses the node is "unsupported", never "pass". */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conform_internal.h"
#include "drt_half.h"
#include "drt_kv.h"
#include "drt_quant.h"
#include "drt_util.h"

/* ---- inputs ------------------------------------------------------------------- */

static double unif(uint64_t *s) {
    return (double)(drt_splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* one input's values from its seed, in its dtype: malloc'd, NULL when out of memory */
static void *input_values(const cf_built *b, int i, uint64_t seed) {
    drt_tensor *t = b->in[i];
    int64_t n = drt_nelem(t);
    uint64_t s = seed * 1000003ull + (uint64_t)i * 7919ull;
    void *h = malloc((size_t)n * 4 + 4);
    if (!h) return NULL;
    for (int64_t j = 0; j < n; j++) {
        double u = unif(&s);
        float f;
        switch (b->kind[i]) {
        case IN_IDS: ((int32_t *)h)[j] = (int32_t)(u * b->bound[i]); continue;
        case IN_UNIT: f = (float)u; break;
        case IN_INV_FREQ: f = (float)pow(10000.0, -2.0 * (double)j / (double)b->bound[i]); break;
        default: f = (float)((2 * u - 1) * b->mag[i]); break;
        }
        if (t->type == DRT_F16)
            ((uint16_t *)h)[j] = drt_f32_to_f16(f);
        else if (t->type == DRT_BF16)
            ((uint16_t *)h)[j] = drt_f32_to_bf16(f);
        else
            ((float *)h)[j] = f;
    }
    /* block formats: the f32 values quantized (rows are contiguous, K a
     * multiple of 32); every backend then reads the same blocks */
    if (drt_dtype_block(t->type) > 1) {
        void *q = malloc(drt_nbytes(t) + 1);
        if (q) drt_quantize_row((const float *)h, t->type, q, n);
        free(h);
        return q;
    }
    return h;
}

/* Row r (of n elements) of an f32, f16 or q8_0 array as NaN: every value,
 * or every q8_0 block's scale, so that any of its values read is NaN */
static void poison_row(void *h, drt_dtype t, int64_t r, int64_t n) {
    char *p = (char *)h + drt_row_bytes(t, r * n);
    if (t == DRT_F32)
        for (int64_t j = 0; j < n; j++) ((float *)p)[j] = NAN;
    else if (t == DRT_F16)
        for (int64_t j = 0; j < n; j++) ((uint16_t *)p)[j] = 0x7e00;
    else
        for (int64_t j = 0; j < n / DRT_QK; j++) { /* d, little-endian */
            p[j * 34] = 0x00;
            p[j * 34 + 1] = 0x7e;
        }
}

/* Fills every input of b from seed, converted to its dtype, and uploads it;
 * poisons the output (and the cache rows KV_WRITE must write) with NaN. */
static drt_status fill_inputs(cf_built *b, uint64_t seed) {
    for (int i = 0; i < b->n_in; i++) {
        drt_tensor *t = b->in[i];
        int64_t n = drt_nelem(t);
        void *h = input_values(b, i, seed);
        if (!h) return drt_set_error(DRT_ERR_OOM, "out of memory");
        int64_t row = t->ne[0] ? n / t->ne[0] : 0;
        if (b->kind[i] == IN_KV_DST) /* the rows KV_WRITE must write are poisoned: unwritten rows fail */
            for (int r = 0; r < b->n_rows; r++)
                poison_row(h, t->type, (int64_t)b->rows[2 * r] + b->rows[2 * r + 1], row);
        if (b->kind[i] == IN_CACHE) /* rows no row attends must never be read */
            for (int64_t r = 0; r < t->ne[0]; r++)
                if (b->bound[i] ? r >= b->bound[i] : !cf_row_visible(b, r)) poison_row(h, t->type, r, row);
        drt_status st = drt_tensor_set(t, h, drt_nbytes(t));
        free(h);
        if (st != DRT_OK) return st;
    }
    if (b->node->op != DRT_OP_KV_WRITE) {
        int64_t n = drt_nelem(b->out);
        float *p = malloc((size_t)n * 4 + 4);
        if (!p) return drt_set_error(DRT_ERR_OOM, "out of memory");
        for (int64_t j = 0; j < n; j++) p[j] = NAN;
        drt_status st = drt_tensor_set(b->out, p, (size_t)n * 4);
        free(p);
        if (st != DRT_OK) return st;
    }
    return DRT_OK;
}

/* ---- one case on one backend ---------------------------------------------------- */

drt_status cf_run_case(drt_backend *be, const cf_opcase *c, uint64_t seed, float **out_host, int64_t *n_out,
                       int *supported, double *times, int warmup, int repeats, cf_built *keep) {
    cf_built b;
    *out_host = NULL;
    if (keep) keep->g = NULL;
    drt_status st = cf_build_case(c, &b);
    if (st != DRT_OK) {
        drt_graph_free(b.g);
        return st;
    }
    /* a case is supported when the backend runs every node of it itself */
    *supported = 1;
    for (int i = 0; i < b.g->n_nodes; i++) *supported &= be->ops->supports(be, b.g->nodes[i]) ? 1 : 0;
    if (!*supported) {
        if (keep)
            *keep = b;
        else
            drt_graph_free(b.g);
        return DRT_OK;
    }
    drt_plan *p = NULL;
    st = drt_plan_create(b.g, be, &p);
    if (st == DRT_OK) st = fill_inputs(&b, seed);
    drt_exec ex;
    if (st == DRT_OK) st = drt_exec_rows(&ex, b.n_rows ? b.rows : NULL, b.n_rows);
    if (st == DRT_OK && !times) st = drt_plan_run(p, &ex);
    if (st == DRT_OK && times) {
        for (int i = 0; st == DRT_OK && i < warmup; i++) st = drt_plan_run(p, &ex);
        for (int i = 0; st == DRT_OK && i < repeats; i++) {
            double t0 = drt_now_s();
            st = drt_plan_run(p, &ex);
            times[i] = drt_now_s() - t0;
        }
    }
    if (st == DRT_OK) {
        *n_out = drt_nelem(b.out);
        *out_host = malloc((size_t)*n_out * 4 + 4);
        /* a KV_WRITE's cache of f16 or q8_0: its values widened */
        void *raw = b.out->type == DRT_F32 ? *out_host : malloc(drt_nbytes(b.out) + 1);
        if (!*out_host || !raw)
            st = drt_set_error(DRT_ERR_OOM, "out of memory");
        else
            st = drt_tensor_get(b.out, raw, drt_nbytes(b.out));
        if (st == DRT_OK && raw != *out_host) drt_kv_load(b.out->type, raw, *out_host, *n_out);
        if (raw != *out_host) free(raw);
    }
    drt_plan_free(p);
    if (keep)
        *keep = b;
    else
        drt_graph_free(b.g);
    return st;
}

void cf_compare(const float *out, const float *ref, int64_t n, double bound, cf_case *c) {
    double num = 0, den = 0, mx = 0;
    int64_t bad = -1;
    for (int64_t i = 0; i < n; i++) {
        if (isfinite(ref[i]) && !isfinite(out[i])) {
            if (bad < 0) bad = i;
            continue;
        }
        double d = (double)out[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        if (fabs(d) > mx) mx = fabs(d);
    }
    c->measured = 1;
    c->bound = bound;
    c->nmse = den > 0 ? num / den : (num > 0 ? INFINITY : 0);
    c->maxerr = mx;
    if (bad >= 0) {
        c->st = CF_FAIL;
        c->nonfinite = 1;
        c->nmse = INFINITY;
        c->fail_type = "nonfinite";
        snprintf(c->detail, sizeof c->detail, "non-finite output at element %lld (reference %g)", (long long)bad,
                 (double)ref[bad]);
    } else if (!(c->nmse <= bound)) {
        c->st = CF_FAIL;
        c->fail_type = "nmse";
        snprintf(c->detail, sizeof c->detail, "NMSE %.3e > bound %.0e", c->nmse, bound);
    } else {
        c->st = CF_PASS;
    }
}

/* ---- the table on every backend ------------------------------------------------- */

/* Case c (seed) on backend k against the reference's output refout (n). */
static void op_case_on(const cf_opcase *c, uint64_t seed, const cf_backend *bk, const float *refout, int64_t n,
                       cf_case *cc) {
    if (!bk->be) {
        cf_not_run(bk, cc);
        return;
    }
    float *res = NULL;
    int64_t n2 = 0;
    int sup;
    cf_built bb = {0};
    double t0 = drt_now_s();
    drt_status s2 = cf_run_case(bk->be, c, seed, &res, &n2, &sup, NULL, 0, 0, &bb);
    cc->time_s = drt_now_s() - t0;
    /* the bound the backend declares for this node in its precision
     * mode; docs/design.md section 6: none may be looser than 5e-4 */
    double bound = CF_F32_NMSE;
    if (bb.node && bk->be->ops->nmse_bound) bound = bk->be->ops->nmse_bound(bk->be, bb.node);
    if (!(bound <= CF_REDUCED_NMSE)) bound = CF_REDUCED_NMSE;
    drt_graph_free(bb.g);
    cc->bound = bound;
    if (s2 != DRT_OK) {
        cc->st = CF_FAIL;
        cc->fail_type = "error";
        snprintf(cc->detail, sizeof cc->detail, "run failed: %s", drt_last_error());
    } else if (!sup) {
        cc->unsupported = 1;
        if (bk->required) {
            cc->st = CF_FAIL;
            cc->fail_type = "unsupported";
            snprintf(cc->detail, sizeof cc->detail, "unsupported on a required backend");
        } else {
            cc->st = CF_UNSUPPORTED;
            snprintf(cc->detail, sizeof cc->detail, "unsupported: the backend does not run this op");
        }
    } else {
        cf_compare(res, refout, n, bound, cc);
    }
    free(res);
}

drt_status cf_run_op_cases(cf_run *run, drt_backend *ref) {
    if (cf_in_list(run->o->ops, "none")) return DRT_OK;
    for (int i = 0; i < CF_N_CASES; i++) {
        const cf_opcase *c = &CF_CASES[i];
        if (!cf_case_selected(run->o, c)) continue;
        uint64_t seed = 0x5eed0000ull + (uint64_t)i;
        float *refout = NULL;
        int64_t n;
        int sup;
        cf_built b;
        drt_status st = cf_run_case(ref, c, seed, &refout, &n, &sup, NULL, 0, 0, &b);
        if (st != DRT_OK) return st;
        char desc[320];
        snprintf(desc, sizeof desc, "%s", b.desc);
        drt_graph_free(b.g);
        for (int k = 0; k < run->nbe; k++) {
            cf_case *cc = cf_add_case(run, CF_KIND_OP, k);
            if (!cc) {
                free(refout);
                return drt_set_error(DRT_ERR_OOM, "out of memory");
            }
            cc->op = drt_op_name(c->op);
            snprintf(cc->desc, sizeof cc->desc, "%s", desc);
            cc->dtype = cf_case_dtype(c);
            cc->seed = seed;
            cc->has_seed = 1;
            op_case_on(c, seed, &run->be[k], refout, n, cc);
        }
        free(refout);
    }
    return DRT_OK;
}
