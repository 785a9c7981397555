/* --models: whole models on every backend against the CPU reference: the
 * prefill logits (NMSE <= 1e-6) and CF_GREEDY_N greedy tokens that must be
 * identical; a node that fell back to the reference is noted, and fails a
 * required backend. */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "conform_internal.h"
#include "drt_settings.h"
#include "drt_util.h"
#include "safetensors.h"

#define FIXED_PROMPT_T 16

typedef struct {
    int n_tok;
    int32_t tok[64];
    int from_file; /* expected.safetensors' "tokens", else the fixed prompt */
} prompt_t;

static int is_file(const char *path) {
    struct stat s;
    return stat(path, &s) == 0 && S_ISREG(s.st_mode);
}

static int is_dir(const char *path) {
    struct stat s;
    return stat(path, &s) == 0 && S_ISDIR(s.st_mode);
}

/* a model directory holds config.json */
static int is_model_dir(const char *dir) {
    char *p = drt_path_join(dir, "config.json");
    int r = p && is_file(p);
    free(p);
    return r;
}

/* The prompt: the "tokens" of path, a directory's expected.safetensors (the
 * fixtures made by python/make_fixtures.py), else (no such file) a fixed
 * one: bos (when the config has one), then FIXED_PROMPT_T - 1 ids spread
 * over the vocabulary. */
static drt_status read_prompt_file(const char *path, const drt_model_info *I, prompt_t *p) {
    memset(p, 0, sizeof *p);
    if (!is_file(path)) {
        p->n_tok = FIXED_PROMPT_T;
        for (int i = 0; i < p->n_tok; i++) p->tok[i] = (int32_t)(((uint64_t)i * 7919u + 17u) % (uint64_t)I->vocab);
        if (I->bos_id >= 0 && I->bos_id < I->vocab) p->tok[0] = I->bos_id;
        return DRT_OK;
    }
    drt_st_file f;
    drt_status s = drt_st_open(path, &f);
    if (s != DRT_OK) return s;
    const drt_st_tensor *t = drt_st_find(&f, "tokens");
    if (!t || t->dtype != DRT_I32 || t->ndim != 1 || t->shape[0] < 1 || t->shape[0] > 64) {
        drt_st_close(&f);
        return drt_set_error(DRT_ERR_FORMAT, "%s: no i32 \"tokens\" of 1..64 ids", path);
    }
    p->n_tok = (int)t->shape[0];
    p->from_file = 1;
    memcpy(p->tok, t->data, sizeof(int32_t) * (size_t)p->n_tok);
    drt_st_close(&f);
    for (int i = 0; i < p->n_tok; i++)
        if (p->tok[i] < 0 || p->tok[i] >= I->vocab)
            return drt_set_error(DRT_ERR_FORMAT, "%s: token %d is outside the vocabulary [0, %d)", path, p->tok[i],
                                 I->vocab);
    return DRT_OK;
}

/* The prompt of model directory dir (read_prompt_file) */
static drt_status read_prompt(const char *dir, const drt_model_info *I, prompt_t *p) {
    char *path = drt_path_join(dir, "expected.safetensors");
    if (!path) return drt_set_error(DRT_ERR_OOM, "out of memory");
    drt_status s = read_prompt_file(path, I, p);
    free(path);
    return s;
}

/* prefill logits (T,V), CF_GREEDY_N greedy tokens, and the fallback count */
static drt_status model_run(drt_model *m, const char *backend, const char *device, const drt_settings *set,
                            const char *kv, const prompt_t *p, float *logits, int32_t *greedy, int *fallbacks, char *fb,
                            size_t fbn) {
    drt_model_info I;
    drt_model_get_info(m, &I);
    drt_session *s;
    drt_session_opts so = {
        .backend = backend, .device = device, .max_ctx = p->n_tok + CF_GREEDY_N + 1, .settings = set, .kv_type = kv};
    *fallbacks = 0;
    drt_status st = drt_session_create(m, &so, &s);
    if (st != DRT_OK) return st;
    for (int64_t i = 0; i < (int64_t)p->n_tok * I.vocab; i++) logits[i] = NAN;
    st = drt_session_forward(s, p->tok, p->n_tok, logits, 1);
    float *last = malloc(sizeof(float) * (size_t)I.vocab);
    if (!last) st = drt_set_error(DRT_ERR_OOM, "out of memory");
    if (st == DRT_OK) memcpy(last, logits + (size_t)(p->n_tok - 1) * I.vocab, sizeof(float) * (size_t)I.vocab);
    for (int i = 0; st == DRT_OK && i < CF_GREEDY_N; i++) {
        int best = 0;
        for (int v = 1; v < I.vocab; v++)
            if (last[v] > last[best]) best = v;
        greedy[i] = best;
        if (i + 1 < CF_GREEDY_N) st = drt_session_forward(s, &greedy[i], 1, last, 0);
    }
    *fallbacks = drt_session_fallbacks(s, fb, fbn);
    free(last);
    drt_session_free(s);
    return st;
}

static int cmp_model(const void *a, const void *b) {
    return strcmp(((const cf_model_ref *)a)->name, ((const cf_model_ref *)b)->name);
}

/* --models DIR: the other directories in it are recorded as skipped, never
 * dropped in silence. */
drt_status cf_find_models(const char *dir, cf_run *run, cf_model_ref **out, int *n_out, drt_conform_result *r) {
    *out = NULL;
    *n_out = 0;
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/') dl--;
    if (is_model_dir(dir)) {
        cf_model_ref *m = calloc(1, sizeof *m);
        if (!m) return drt_set_error(DRT_ERR_OOM, "out of memory");
        const char *base = dir + dl;
        while (base > dir && base[-1] != '/') base--;
        snprintf(m->name, sizeof m->name, "%.*s", (int)(dir + dl - base), base);
        snprintf(m->path, sizeof m->path, "%.*s", (int)dl, dir);
        *out = m;
        *n_out = 1;
        return DRT_OK;
    }
    DIR *d = opendir(dir);
    if (!d) return cf_usage(r, "conform: --models %s: not a model directory (no config.json) and not a folder", dir);
    cf_model_ref *ms = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    drt_status st = DRT_OK;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[1024];
        snprintf(p, sizeof p, "%.*s/%s", (int)dl, dir, e->d_name);
        if (!is_dir(p)) continue; /* files next to the models (README.md, ...) */
        if (!is_model_dir(p)) {
            cf_skipped *ns = realloc(run->skipped, sizeof *ns * (size_t)(run->n_skipped + 1));
            if (!ns) {
                st = drt_set_error(DRT_ERR_OOM, "out of memory");
                break;
            }
            run->skipped = ns;
            snprintf(ns[run->n_skipped].path, sizeof ns->path, "%s", p);
            snprintf(ns[run->n_skipped].why, sizeof ns->why, "not a model directory (no config.json)");
            run->n_skipped++;
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            cf_model_ref *nm = realloc(ms, sizeof *nm * (size_t)cap);
            if (!nm) {
                st = drt_set_error(DRT_ERR_OOM, "out of memory");
                break;
            }
            ms = nm;
        }
        snprintf(ms[n].name, sizeof ms[n].name, "%s", e->d_name);
        snprintf(ms[n].path, sizeof ms[n].path, "%s", p);
        n++;
    }
    closedir(d);
    if (st == DRT_OK && n == 0)
        st = cf_usage(r, "conform: --models %s: not a model directory (no config.json), and no model directory in it",
                      dir);
    if (st != DRT_OK) {
        free(ms);
        return st;
    }
    qsort(ms, (size_t)n, sizeof *ms, cmp_model);
    *out = ms;
    *n_out = n;
    return DRT_OK;
}

/* ---- the run ------------------------------------------------------------------- */

/* one model, loaded, with the reference's logits and greedy tokens */
typedef struct {
    drt_model *m;
    drt_model_info I;
    prompt_t pr;
    char why[700];  /* it cannot be checked: why (every backend's case fails) */
    float *rl, *bl; /* logits (T, V): the reference's, a backend's */
    size_t nl;
    int32_t rg[CF_GREEDY_N];
    char desc[240];
} model_ref_run;

/* Loads the model and runs the reference; a model that does not load or run
 * is mr->why, not an error. DRT_ERR_OOM is. */
static drt_status model_reference(const char *dir, const char *kv, model_ref_run *mr) {
    memset(mr, 0, sizeof *mr);
    if (drt_model_load(dir, &mr->m) != DRT_OK) {
        snprintf(mr->why, sizeof mr->why, "cannot load the model: %s", drt_last_error());
    } else {
        drt_model_get_info(mr->m, &mr->I);
        if (read_prompt(dir, &mr->I, &mr->pr) != DRT_OK)
            snprintf(mr->why, sizeof mr->why, "no prompt: %s", drt_last_error());
    }
    mr->nl = (size_t)mr->pr.n_tok * (size_t)(mr->I.vocab > 0 ? mr->I.vocab : 1);
    if (!mr->why[0]) {
        mr->rl = malloc(mr->nl * 4);
        mr->bl = malloc(mr->nl * 4);
        if (!mr->rl || !mr->bl) return drt_set_error(DRT_ERR_OOM, "out of memory");
        int fbn;
        char fb[300] = "";
        if (model_run(mr->m, "ref", "", NULL, kv, &mr->pr, mr->rl, mr->rg, &fbn, fb, sizeof fb) != DRT_OK)
            snprintf(mr->why, sizeof mr->why, "the reference run failed: %s", drt_last_error());
    }
    if (mr->m)
        snprintf(mr->desc, sizeof mr->desc, "%s layout, %s weights, T=%d %s + %d greedy", mr->I.layout_name,
                 drt_dtype_name(mr->I.weight_dtype), mr->pr.n_tok,
                 mr->pr.from_file ? "prompt of expected.safetensors" : "fixed prompt", CF_GREEDY_N);
    else
        snprintf(mr->desc, sizeof mr->desc, "not loaded");
    return DRT_OK;
}

static void model_ref_free(model_ref_run *mr) {
    free(mr->rl);
    free(mr->bl);
    drt_model_free(mr->m);
}

/* The verdict of a backend's logits (mr->bl) and greedy tokens bg against
 * the reference's: finite, NMSE within the bound, the same tokens; fallbacks
 * to the reference fail a required backend, else are noted. */
static void model_verdict(const model_ref_run *mr, const int32_t *bg, const cf_backend *bk, int fbn, const char *fb,
                          cf_case *cc) {
    double num = 0, den = 0, mx = 0;
    int nonfinite = 0;
    for (size_t i = 0; i < mr->nl; i++) {
        if (!isfinite(mr->bl[i])) nonfinite = 1;
        double dd = (double)mr->bl[i] - mr->rl[i];
        num += dd * dd;
        den += (double)mr->rl[i] * mr->rl[i];
        if (fabs(dd) > mx) mx = fabs(dd);
    }
    cc->measured = 1;
    cc->nonfinite = nonfinite;
    cc->nmse = nonfinite ? INFINITY : den > 0 ? num / den : (num > 0 ? INFINITY : 0);
    cc->maxerr = mx;
    for (int i = 0; i < CF_GREEDY_N && cc->greedy_first_diff < 0; i++)
        if (bg[i] != mr->rg[i]) cc->greedy_first_diff = i;
    cc->st = CF_PASS;
    if (nonfinite) {
        cc->st = CF_FAIL;
        cc->fail_type = "nonfinite";
        snprintf(cc->detail, sizeof cc->detail, "non-finite logits");
    } else if (!(cc->nmse <= cc->bound)) {
        cc->st = CF_FAIL;
        cc->fail_type = "nmse";
        snprintf(cc->detail, sizeof cc->detail, "logits NMSE %.3e > bound %.0e", cc->nmse, cc->bound);
    } else if (cc->greedy_first_diff >= 0) {
        int g = cc->greedy_first_diff;
        cc->st = CF_FAIL;
        cc->fail_type = "greedy";
        snprintf(cc->detail, sizeof cc->detail, "greedy token %d is %d, reference %d", g, bg[g], mr->rg[g]);
    } else if (fbn > 0) {
        if (bk->required) {
            cc->st = CF_FAIL;
            cc->fail_type = "fallback";
        }
        snprintf(cc->detail, sizeof cc->detail, "%d node runs fell back to the CPU reference%s: %.170s", fbn,
                 bk->required ? " on a required backend" : "", fb);
    }
}

/* the model of mr on backend bk (with the run's settings), into the record cc */
static void model_case_on(model_ref_run *mr, const cf_backend *bk, const drt_settings *set, cf_case *cc) {
    if (!bk->be) {
        cf_not_run(bk, cc);
        return;
    }
    cc->bound = bk->model_bound;
    if (mr->why[0]) {
        cc->st = CF_FAIL;
        cc->fail_type = "error";
        snprintf(cc->detail, sizeof cc->detail, "%.*s", (int)sizeof cc->detail - 1, mr->why);
        return;
    }
    char dev[16];
    snprintf(dev, sizeof dev, "%d", bk->device);
    int32_t bg[CF_GREEDY_N];
    int fbn = 0;
    char fb[300] = "";
    double t0 = drt_now_s();
    drt_status s2 = model_run(mr->m, bk->name, bk->be->device >= 0 ? dev : "", set, cf_kv_type(set), &mr->pr, mr->bl,
                              bg, &fbn, fb, sizeof fb);
    cc->time_s = drt_now_s() - t0;
    cc->fallbacks = fbn;
    if (s2 != DRT_OK) {
        cc->st = CF_FAIL;
        cc->fail_type = "error";
        snprintf(cc->detail, sizeof cc->detail, "run failed: %s", drt_last_error());
        return;
    }
    model_verdict(mr, bg, bk, fbn, fb, cc);
}

/* --quick: a model whose batch cases are left out, for the reports */
static drt_status note_batch_skipped(cf_run *run, const char *name) {
    char(*nb)[256] = realloc(run->batch_skipped, sizeof *nb * (size_t)(run->n_batch_skipped + 1));
    if (!nb) return drt_set_error(DRT_ERR_OOM, "out of memory");
    run->batch_skipped = nb;
    snprintf(nb[run->n_batch_skipped++], sizeof nb[0], "%s", name);
    return DRT_OK;
}

/* --quick: an architecture's batch cases wait for a model with f32 weights
 * (the reference's precision and the cheapest for the CUDA emulator, where
 * bf16 fixtures take 20x longer); the first model of another type is kept
 * here meanwhile, and runs them only if the architecture has no f32 one. */
typedef struct {
    drt_model *m; /* NULL: none waiting */
    int mi;
    prompt_t pr;
} batch_wait;

/* the batch cases of model mi, or (--quick) the wait for a better one */
static drt_status batch_or_wait(cf_run *run, const cf_model_ref *models, int mi, model_ref_run *mr,
                                unsigned *batch_archs, batch_wait *wait) {
    if (!run->o->quick) return cf_run_batch_cases(run, mr->m, &models[mi], mr->pr.tok, mr->pr.n_tok);
    unsigned a = (unsigned)mr->I.arch & 31u, bit = 1u << a;
    batch_wait *w = &wait[a];
    if (*batch_archs & bit) return note_batch_skipped(run, models[mi].name);
    if (mr->I.weight_dtype == DRT_F32) {
        *batch_archs |= bit;
        drt_status st = cf_run_batch_cases(run, mr->m, &models[mi], mr->pr.tok, mr->pr.n_tok);
        if (w->m) {
            if (st == DRT_OK) st = note_batch_skipped(run, models[w->mi].name);
            drt_model_free(w->m);
            w->m = NULL;
        }
        return st;
    }
    if (w->m) return note_batch_skipped(run, models[mi].name);
    w->m = mr->m; /* kept until the end or an f32 model of the architecture */
    w->mi = mi;
    w->pr = mr->pr;
    mr->m = NULL;
    return DRT_OK;
}

drt_status cf_run_models(cf_run *run, const cf_model_ref *models, int n_models) {
    unsigned batch_archs = 0; /* --quick: the architectures whose batch cases ran */
    batch_wait wait[32];
    memset(wait, 0, sizeof wait);
    drt_status st = DRT_OK;
    for (int mi = 0; st == DRT_OK && mi < n_models; mi++) {
        model_ref_run mr;
        st = model_reference(models[mi].path, cf_kv_type(run->o->settings), &mr);
        /* the model case and the batch cases on one backend instance each */
        drt_session **keep = st == DRT_OK && mr.m && !mr.why[0] ? cf_keep_open(run, mr.m) : NULL;
        for (int k = 0; st == DRT_OK && k < run->nbe; k++) {
            cf_case *cc = cf_add_case(run, CF_KIND_MODEL, k);
            if (!cc) {
                st = drt_set_error(DRT_ERR_OOM, "out of memory");
                break;
            }
            snprintf(cc->model, sizeof cc->model, "%s", models[mi].name);
            snprintf(cc->path, sizeof cc->path, "%s", models[mi].path);
            snprintf(cc->desc, sizeof cc->desc, "%s", mr.desc);
            cc->dtype = mr.m ? drt_dtype_name(mr.I.weight_dtype) : "f32";
            model_case_on(&mr, &run->be[k], run->o->settings, cc);
        }
        if (st == DRT_OK && mr.m && !mr.why[0]) st = batch_or_wait(run, models, mi, &mr, &batch_archs, wait);
        cf_keep_close(run, keep);
        model_ref_free(&mr);
    }
    /* the architectures without an f32 model: their first model's */
    for (int a = 0; a < 32; a++) {
        batch_wait *w = &wait[a];
        if (!w->m) continue;
        drt_session **keep = st == DRT_OK ? cf_keep_open(run, w->m) : NULL;
        if (st == DRT_OK) st = cf_run_batch_cases(run, w->m, &models[w->mi], w->pr.tok, w->pr.n_tok);
        cf_keep_close(run, keep);
        drt_model_free(w->m);
    }
    return st;
}
