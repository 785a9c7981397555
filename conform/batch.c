/* --models, batched: the batch_* cases. Each drives a batch session
 * (drt_batch_forward) on a backend through a script of forwards that mix
 * sequences, and checks every row with logits against a drt_session fed the
 * same prefix on the same backend: bit for bit on ref (its kernels compute
 * each row alone), within the backend's model bound elsewhere (a GEMM of
 * another row count may sum in another order). A kernel that reads a row's
 * slot or position wrong fails them (tests/test_conform_catches.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conform_internal.h"
#include "drt_util.h"

#define B_SEQS 4  /* slots of the batch session */
#define B_CTX 64  /* positions of each */
#define B_ROWS 32 /* rows per forward */

/* one case's state: the batch session, the tokens each slot holds, and the
 * rows' error against the single-sequence forwards */
typedef struct {
    drt_batch_session *bs;
    drt_session *one; /* the single-sequence forwards, reset before each */
    const cf_model_ref *mref;
    int V;
    int32_t hist[B_SEQS][B_CTX];
    int len[B_SEQS];
    float *got, *want; /* (B_ROWS, V), (V) */
    double num, den, maxd;
    int nonfinite, rows;
    const int32_t *src; /* the model's prompt, the tokens the sequences are made of */
    int n_src;
} bctx;

/* token j of sequence variant k: the prompt's tokens, shifted per variant so
 * that sequences differ */
static int32_t tok_of(const bctx *c, int k, int j) {
    return (int32_t)(((int64_t)c->src[j % c->n_src] + 131 * k) % c->V);
}

/* One forward of n rows (seq, tok, flag each) and the check of its flagged
 * rows: each against the last logits of a drt_session fed its sequence's
 * tokens up to it. */
static drt_status step(bctx *c, int n, const int32_t *seq, const int32_t *tok, const int8_t *flag) {
    drt_batch b = {.n = n, .token = tok, .seq = seq, .logits = flag};
    for (int i = 0; i < n * c->V; i++) c->got[i] = NAN;
    drt_status st = drt_batch_forward(c->bs, &b, c->got);
    if (st != DRT_OK) return st;
    for (int i = 0, k = 0; i < n; i++) {
        int s = seq[i];
        c->hist[s][c->len[s]++] = tok[i];
        if (!flag[i]) continue;
        drt_session_reset(c->one);
        st = drt_session_forward(c->one, c->hist[s], c->len[s], c->want, 0);
        if (st != DRT_OK) return st;
        const float *g = c->got + (size_t)k++ * c->V;
        for (int v = 0; v < c->V; v++) {
            if (!isfinite(g[v])) c->nonfinite = 1;
            double d = (double)g[v] - c->want[v];
            c->num += d * d;
            c->den += (double)c->want[v] * c->want[v];
            if (fabs(d) > c->maxd) c->maxd = fabs(d);
        }
        c->rows++;
    }
    return DRT_OK;
}

/* a forward of runs: sequence seqs[r] gets lens[r] tokens of variant
 * vars[r] (continuing its own), flags: 1 every row, 0 its last row only */
static drt_status runs(bctx *c, int nr, const int *seqs, const int *lens, const int *vars, int every) {
    int32_t seq[B_ROWS], tok[B_ROWS];
    int8_t flag[B_ROWS];
    int n = 0;
    for (int r = 0; r < nr; r++)
        for (int j = 0; j < lens[r]; j++, n++) {
            seq[n] = seqs[r];
            tok[n] = tok_of(c, vars[r], c->len[seqs[r]] + j);
            flag[n] = (int8_t)(every || j + 1 == lens[r]);
        }
    return step(c, n, seq, tok, flag);
}

static drt_status cut(bctx *c, int s, int len) {
    drt_status st = drt_seq_truncate(c->bs, s, len);
    if (st == DRT_OK) c->len[s] = len;
    return st;
}

/* K sequences of different lengths in one forward, every row's logits */
static drt_status case_lengths(bctx *c) {
    return runs(c, 3, (int[]){2, 0, 3}, (int[]){7, 1, 12}, (int[]){0, 1, 2}, 1);
}

/* a prompt chunk of one sequence among decode rows of others */
static drt_status case_mixed(bctx *c) {
    drt_status st = runs(c, 2, (int[]){0, 1}, (int[]){5, 3}, (int[]){0, 1}, 0);
    if (st == DRT_OK) st = runs(c, 3, (int[]){1, 2, 0}, (int[]){1, 9, 1}, (int[]){1, 2, 0}, 1);
    if (st == DRT_OK) st = runs(c, 3, (int[]){0, 1, 2}, (int[]){1, 1, 1}, (int[]){0, 1, 2}, 1);
    return st;
}

/* a sequence cut back and rewritten with other tokens */
static drt_status case_truncate(bctx *c) {
    drt_status st = runs(c, 2, (int[]){1, 0}, (int[]){12, 4}, (int[]){1, 0}, 0);
    if (st == DRT_OK) st = cut(c, 1, 5);
    if (st == DRT_OK) st = runs(c, 2, (int[]){1, 0}, (int[]){4, 1}, (int[]){3, 0}, 1);
    return st;
}

/* a slot freed and taken by a new sequence while the others decode */
static drt_status case_reuse(bctx *c) {
    drt_status st = runs(c, 3, (int[]){0, 1, 2}, (int[]){6, 8, 3}, (int[]){0, 1, 2}, 0);
    if (st == DRT_OK) st = cut(c, 1, 0);
    if (st == DRT_OK) st = runs(c, 3, (int[]){0, 1, 2}, (int[]){1, 5, 1}, (int[]){0, 3, 2}, 1);
    for (int i = 0; st == DRT_OK && i < 2; i++)
        st = runs(c, 3, (int[]){2, 1, 0}, (int[]){1, 1, 1}, (int[]){2, 3, 0}, 1);
    return st;
}

static const struct {
    const char *name, *what;
    drt_status (*run)(bctx *c);
} CASES[] = {
    {"batch_lengths", "3 sequences of 7, 1 and 12 tokens in one forward, every row", case_lengths},
    {"batch_mixed", "a 9-token chunk among decode rows of 2 sequences, then 3 decode rows", case_mixed},
    {"batch_truncate", "a sequence cut from 12 to 5 positions and rewritten with 4 other tokens", case_truncate},
    {"batch_reuse", "a slot freed and reused by a new 5-token sequence while 2 others decode", case_reuse},
};

/* the verdict of c's rows into cc; fbn node runs fell back to the reference
 * (fb: which), which fails a required backend */
static void verdict(const bctx *c, const cf_backend *bk, int fbn, const char *fb, cf_case *cc) {
    cc->measured = 1;
    cc->nonfinite = c->nonfinite;
    cc->nmse = c->nonfinite ? INFINITY : c->den > 0 ? c->num / c->den : (c->num > 0 ? INFINITY : 0);
    cc->maxerr = c->maxd;
    /* ref computes each row alone: a batch is bit for bit one sequence */
    int exact = strcmp(bk->name, "ref") == 0;
    cc->bound = exact ? 0 : bk->model_bound;
    cc->st = CF_PASS;
    if (c->nonfinite) {
        cc->st = CF_FAIL;
        cc->fail_type = "nonfinite";
        snprintf(cc->detail, sizeof cc->detail, "non-finite logits in %d checked rows", c->rows);
    } else if (exact ? c->maxd != 0 : !(cc->nmse <= cc->bound)) {
        cc->st = CF_FAIL;
        cc->fail_type = "nmse";
        snprintf(cc->detail, sizeof cc->detail, "%d rows against single-sequence forwards: NMSE %.3e%s", c->rows,
                 cc->nmse, exact ? ", not bit-identical" : "");
    } else if (fbn > 0) {
        if (bk->required) {
            cc->st = CF_FAIL;
            cc->fail_type = "fallback";
        }
        snprintf(cc->detail, sizeof cc->detail, "%d node runs fell back to the CPU reference%s: %.170s", fbn,
                 bk->required ? " on a required backend" : "", fb);
    }
}

/* case ci of model m on backend bk into cc */
static void batch_case_on(drt_model *m, const int32_t *prompt, int n_prompt, const cf_backend *bk,
                          const drt_settings *set, int ci, cf_case *cc) {
    if (!bk->be) {
        cf_not_run(bk, cc);
        return;
    }
    drt_model_info I;
    drt_model_get_info(m, &I);
    char dev[16];
    snprintf(dev, sizeof dev, "%d", bk->device);
    drt_session_opts so = {.backend = bk->name,
                           .device = bk->be->device >= 0 ? dev : "",
                           .max_ctx = B_CTX,
                           .settings = set,
                           .kv_type = cf_kv_type(set)};
    drt_batch_opts bo = {.max_seqs = B_SEQS, .ctx_per_seq = B_CTX, .max_batch_rows = B_ROWS};
    bctx c = {.V = I.vocab, .src = prompt, .n_src = n_prompt};
    c.got = malloc(sizeof(float) * (size_t)B_ROWS * (size_t)I.vocab);
    c.want = malloc(sizeof(float) * (size_t)I.vocab);
    double t0 = drt_now_s();
    drt_status st = c.got && c.want ? DRT_OK : drt_set_error(DRT_ERR_OOM, "out of memory");
    if (st == DRT_OK) st = drt_batch_session_create(m, &so, &bo, &c.bs);
    if (st == DRT_OK) st = drt_session_create(m, &so, &c.one);
    if (st == DRT_OK) st = CASES[ci].run(&c);
    cc->time_s = drt_now_s() - t0;
    if (st != DRT_OK) {
        cc->st = CF_FAIL;
        cc->fail_type = "error";
        snprintf(cc->detail, sizeof cc->detail, "run failed: %s", drt_last_error());
    } else {
        char fb[300] = "";
        cc->fallbacks = drt_batch_session_fallbacks(c.bs, fb, sizeof fb);
        verdict(&c, bk, cc->fallbacks, fb, cc);
    }
    drt_session_free(c.one);
    drt_batch_session_free(c.bs);
    free(c.got);
    free(c.want);
}

drt_session **cf_keep_open(const cf_run *run, drt_model *m) {
    drt_session **keep = calloc((size_t)(run->nbe > 0 ? run->nbe : 1), sizeof *keep);
    for (int k = 0; keep && k < run->nbe; k++) {
        const cf_backend *bk = &run->be[k];
        if (!bk->be) continue;
        char dev[16];
        snprintf(dev, sizeof dev, "%d", bk->device);
        /* the options the cases' sessions use, but for the length: one
         * position is enough to hold the weights */
        drt_session_opts so = {.backend = bk->name,
                               .device = bk->be->device >= 0 ? dev : "",
                               .max_ctx = 1,
                               .settings = run->o->settings,
                               .kv_type = cf_kv_type(run->o->settings)};
        if (drt_session_create(m, &so, &keep[k]) != DRT_OK) keep[k] = NULL;
    }
    return keep;
}

void cf_keep_close(const cf_run *run, drt_session **keep) {
    for (int k = 0; keep && k < run->nbe; k++) drt_session_free(keep[k]);
    free(keep);
}

drt_status cf_run_batch_cases(cf_run *run, drt_model *m, const cf_model_ref *mref, const int32_t *prompt,
                              int n_prompt) {
    drt_model_info I;
    drt_model_get_info(m, &I);
    for (size_t ci = 0; ci < sizeof CASES / sizeof CASES[0]; ci++)
        for (int k = 0; k < run->nbe; k++) {
            cf_case *cc = cf_add_case(run, CF_KIND_BATCH, k);
            if (!cc) return drt_set_error(DRT_ERR_OOM, "out of memory");
            cc->op = CASES[ci].name;
            snprintf(cc->model, sizeof cc->model, "%s", mref->name);
            snprintf(cc->path, sizeof cc->path, "%s", mref->path);
            snprintf(cc->desc, sizeof cc->desc, "%s layout, %s weights: %s", I.layout_name,
                     drt_dtype_name(I.weight_dtype), CASES[ci].what);
            cc->dtype = drt_dtype_name(I.weight_dtype);
            batch_case_on(m, prompt, n_prompt, &run->be[k], run->o->settings, (int)ci, cc);
        }
    return DRT_OK;
}
