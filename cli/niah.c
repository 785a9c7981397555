/* diffrt niah: multi-needle retrieval evaluation (docs/niah_spec.md), the
 * paper's Table 2 / Figure 5 accuracy per depth x context length and, with
 * --attention, its Table 3 attention to the answer span vs the rest. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "opts.h"
#include "outfile.h"
#include "diffrt/diffrt.h"
#include "diffrt/util.h"
#include "analysis.h"
#include "compare.h"
#include "niah.h"

#define MAX_LIST DRT_NIAH_MAX_LIST

typedef struct {
    const char *model, *backend, *device, *json, *compare, *set, *kv_type;
    const char *logits_vs; /* a reference model whose last-token logits each prompt is compared with */
    int attn_bits;         /* > 0: the reference path's attention logits quantized (eval/analysis.h) */
    int needles, queries, samples, attention, no_fallback, threads;
    double min_accuracy, min_agree;
    int ctxs[MAX_LIST], n_ctx, depths[MAX_LIST], n_depth;
    unsigned long long seed;
    int64_t n_prompts; /* with no --ctx, the model's one default length */
} niah_args;

/* the options, then the checks that need no model; CLI_PARSED or the exit status */
static int niah_parse(int argc, char **argv, niah_args *a) {
    *a = (niah_args){.backend = "cpu",
                     .needles = 1,
                     .queries = 1,
                     .samples = 40,
                     .min_accuracy = -1,
                     .min_agree = 0.99,
                     .depths = {0, 25, 50, 75, 100},
                     .n_depth = 5};
    const cli_opt opts[] = {
        {.name = "--model", .kind = CLI_STR, .dst = &a->model, .meta = "DIR", .help = "the model directory"},
        {.name = "--needles",
         .kind = CLI_INT,
         .dst = &a->needles,
         .meta = "N",
         .lo = 1,
         .hi = 64,
         .bad = "--needles wants 1..64",
         .help = "needles per prompt (default 1)"},
        {.name = "--queries",
         .kind = CLI_INT,
         .dst = &a->queries,
         .meta = "R",
         .lo = 1,
         .hi = 64,
         .bad = "--queries wants 1..64",
         .help = "needles asked about, at most N (default 1)"},
        {.name = "--ctx",
         .kind = CLI_LIST,
         .dst = a->ctxs,
         .count = &a->n_ctx,
         .max = MAX_LIST,
         .lo = 1,
         .hi = 1 << 20,
         .meta = "L,...",
         .bad = "--ctx wants comma-separated lengths",
         .help = "context lengths (default: the model's max positions, at most 4096)"},
        {.name = "--depths",
         .kind = CLI_LIST,
         .dst = a->depths,
         .count = &a->n_depth,
         .max = MAX_LIST,
         .lo = 0,
         .hi = 100,
         .meta = "P,...",
         .bad = "--depths wants comma-separated percents 0..100",
         .help = "needle depths in percent (default 0,25,50,75,100)"},
        {.name = "--samples",
         .kind = CLI_INT,
         .dst = &a->samples,
         .meta = "K",
         .lo = 1,
         .hi = 1000000,
         .bad = "--samples wants an integer >= 1",
         .help = "samples per depth and length (default 40)"},
        {.name = "--seed",
         .kind = CLI_U64,
         .dst = &a->seed,
         .meta = "S",
         .bad = "--seed wants an integer >= 0",
         .help = "prompt seed (default 0)"},
        {.name = "--backend", .kind = CLI_STR, .dst = &a->backend, .meta = "B", .help = "backend (default cpu)"},
        {.name = "--device", .kind = CLI_STR, .dst = &a->device, .meta = "D", .help = "device index or name substring"},
        {.name = "--threads",
         .kind = CLI_INT,
         .dst = &a->threads,
         .meta = "N",
         .lo = 1,
         .hi = 1024,
         .help = "CPU threads for cpu"},
        CLI_OPT_SET(&a->set),
        CLI_OPT_KV_TYPE(&a->kv_type),
        {.name = "--attention",
         .kind = CLI_FLAG,
         .dst = &a->attention,
         .help = "also the mean attention of the final query token to the answer\nneedle and to the rest of the "
                 "context (for diff models the\ndifferential map A1 - lambda A2)"},
        {.name = "--json",
         .kind = CLI_STR,
         .dst = &a->json,
         .meta = "FILE",
         .help = "the summary and every sample as JSON"},
        {.name = "--compare",
         .kind = CLI_STR,
         .dst = &a->compare,
         .meta = "FILE",
         .help = "match every sample with another run of the same settings\n(python/niah/eval.py's "
                 "niah_python.json, or --json output) and\nprint the per-sample answer agreement"},
        {.name = "--min-accuracy",
         .kind = CLI_DOUBLE,
         .dst = &a->min_accuracy,
         .meta = "X",
         .ok = cli_fraction,
         .bad = "--min-accuracy wants a fraction 0..1",
         .help = "exit status 1 when the accuracy is below X"},
        {.name = "--min-agree",
         .kind = CLI_DOUBLE,
         .dst = &a->min_agree,
         .meta = "X",
         .ok = cli_fraction,
         .bad = "--min-agree wants a fraction 0..1",
         .help = "exit status 1 when the --compare agreement is below X (default 0.99)"},
        {.name = "--no-fallback",
         .kind = CLI_FLAG,
         .dst = &a->no_fallback,
         .help = "exit status 1 when any node ran on the CPU reference instead of B"},
        {.name = "--logits-vs",
         .kind = CLI_STR,
         .dst = &a->logits_vs,
         .meta = "DIR2",
         .help = "also run every prompt through the model in DIR2 (e.g. the f16\nmodel a quantized DIR was made "
                 "from) and print the NMSE of the last\ntoken's logits and how often their top-1 token agrees"},
        {.name = "--attn-bits",
         .kind = CLI_INT,
         .dst = &a->attn_bits,
         .meta = "B",
         .lo = 2,
         .hi = 24,
         .bad = "--attn-bits wants 2..24",
         .help = "(--backend ref only) every row of attention logits quantized to\nB bits (symmetric, per-row "
                 "absmax) before its softmax, as in the paper's Fig. 8"},
        {0}};
    const cli_cmd cmd = {.name = "niah",
                         .synopsis = "--model DIR [options]",
                         .about = "Multi-needle retrieval (docs/niah_spec.md): accuracy per depth x context length.\n"
                                  "At most 10000000 prompts (lengths x depths x samples x queries).\n",
                         .opts = opts};
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_PARSED) return rc;
    if (!a->model) return cli_die("niah: --model DIR is required%s", "");
    if (drt_niah_prompt_count(a->n_ctx ? a->n_ctx : 1, a->n_depth, a->samples, a->queries, &a->n_prompts) != DRT_OK)
        return cli_die("%s", drt_last_error());
    if (a->queries > a->needles) return cli_die("niah: --queries must not exceed --needles%s", "");
    if (a->attn_bits && strcmp(a->backend, "ref") != 0)
        return cli_die("niah: --attn-bits quantizes the reference path's attention logits: it needs --backend ref, "
                       "not %s",
                       a->backend);
    if (a->compare && access(a->compare, R_OK) != 0) return cli_die("niah: --compare %s: cannot read", a->compare);
    return CLI_PARSED;
}

/* one evaluation: the model, its sessions and buffers, and the tallies */
typedef struct {
    niah_args *a;
    drt_model *m, *rm;
    drt_session *s, *rs;
    drt_tokenizer *tok;
    drt_settings *set; /* --set: both models' sessions */
    drt_model_info I;
    float *logits, *attn, *rlogits;
    int32_t *eos; /* every id that ends an answer (drt_model_eos_ids) */
    int n_eos;
    double nmse_sum, nmse_max;
    int top1_same, n_cmp;
    cJSON *jarr;
    int total, done_n, tty, all;
    drt_niah_tally t;
    double t0;
} niah_eval;

/* the model, the tokenizer, the sessions (and --logits-vs's); 0, else the exit status */
static int niah_setup(niah_eval *e) {
    niah_args *a = e->a;
    char *tpath = drt_path_join(a->model, "tokenizer.json");
    if (!tpath) {
        fprintf(stderr, "diffrt: niah: out of memory\n");
        return 1;
    }
    int bad = drt_model_load(a->model, &e->m) != DRT_OK || drt_tokenizer_load(tpath, &e->tok) != DRT_OK;
    drt_free(tpath);
    if (bad) return cli_fail("niah");
    drt_model_get_info(e->m, &e->I);
    e->n_eos = drt_model_eos_ids(e->m, NULL, 0);
    e->eos = malloc(sizeof *e->eos * (size_t)(e->n_eos > 0 ? e->n_eos : 1));
    if (!e->eos || drt_model_eos_ids(e->m, e->eos, e->n_eos) != e->n_eos) {
        fprintf(stderr, "diffrt: niah: out of memory\n");
        return 1;
    }
    if (!a->n_ctx) a->ctxs[a->n_ctx++] = e->I.max_ctx < 4096 ? e->I.max_ctx : 4096;
    int max_ctx = 0;
    for (int i = 0; i < a->n_ctx; i++) max_ctx = a->ctxs[i] > max_ctx ? a->ctxs[i] : max_ctx;
    if (max_ctx > e->I.max_ctx)
        fprintf(stderr,
                "diffrt: warning: niah --ctx %d is past the model's max_position_embeddings %d: "
                "positions from %d on were never trained and retrieval there may degrade\n",
                max_ctx, e->I.max_ctx, e->I.max_ctx);
    drt_session_opts so = {.backend = a->backend,
                           .device = a->device,
                           .max_ctx = max_ctx + DRT_NIAH_MAX_NEW_TOKENS,
                           .threads = a->threads,
                           .settings = e->set};
    if (drt_session_create(e->m, &so, &e->s) != DRT_OK) return cli_fail("niah");
    /* the probe's rows copied during each forward: no re-run per prompt */
    if (a->attention && drt_session_keep_attention(e->s, 1) != DRT_OK) return cli_fail("niah");
    e->logits = malloc(sizeof(float) * (size_t)e->I.vocab);
    e->attn = malloc(sizeof(float) * (size_t)(max_ctx + DRT_NIAH_MAX_NEW_TOKENS));
    if (a->logits_vs) { /* the same prompts through a reference model, on the same backend */
        drt_model_info RI;
        if (drt_model_load(a->logits_vs, &e->rm) != DRT_OK || drt_session_create(e->rm, &so, &e->rs) != DRT_OK)
            return cli_fail("niah: --logits-vs");
        drt_model_get_info(e->rm, &RI);
        if (RI.vocab != e->I.vocab) {
            fprintf(stderr, "diffrt: niah: --logits-vs %s has vocab %d, %s has %d: not comparable\n", a->logits_vs,
                    RI.vocab, a->model, e->I.vocab);
            return 2;
        }
        e->rlogits = malloc(sizeof(float) * (size_t)e->I.vocab);
    }
    return 0;
}

/* the prompt's last-token logits against the reference model's: their NMSE, top-1 agreement in
 * *same; 1 when the reference run fails */
static int niah_logits_vs(niah_eval *e, const drt_niah_prompt *p, double *nmse, int *same) {
    drt_session_reset(e->rs);
    if (drt_session_forward(e->rs, p->ids, p->n_ids, e->rlogits, 0) != DRT_OK) return 1;
    drt_logits_compare(e->logits, e->rlogits, e->I.vocab, nmse, same);
    e->nmse_sum += *nmse;
    e->nmse_max = *nmse > e->nmse_max ? *nmse : e->nmse_max;
    e->top1_same += *same;
    e->n_cmp++;
    return 0;
}

/* one query of a prompt: prefill, greedy answer, tallies and its JSON record; 0, else the exit status */
static int niah_query(niah_eval *e, const drt_niah_prompt *p, int c, int d, int k, int r) {
    const niah_args *a = e->a;
    int32_t gen[DRT_NIAH_MAX_NEW_TOKENS];
    int ng = 0, same = 0;
    double ans = 0, noise = 0, nmse = 0;
    drt_session_reset(e->s);
    drt_status st = drt_session_forward(e->s, p->ids, p->n_ids, e->logits, 0);
    if (st == DRT_OK && e->rs && niah_logits_vs(e, p, &nmse, &same)) return cli_fail("niah: --logits-vs");
    if (st == DRT_OK && a->attention) {
        st = drt_session_last_attention(e->s, e->attn);
        if (st == DRT_OK) drt_niah_attention(e->attn, p, &ans, &noise);
    }
    char pred[32] = "";
    if (st == DRT_OK)
        st = drt_niah_answer(e->s, e->tok, e->I.vocab, e->eos, e->n_eos, e->logits, gen, &ng, pred, sizeof pred);
    if (st != DRT_OK) return cli_fail("niah");
    int ok = strcmp(pred, p->answer) == 0;
    e->t.correct[c][d] += ok;
    if (a->attention) {
        e->t.att_ans[d] += ans;
        e->t.att_noise[d] += noise;
        e->t.att_n[d]++;
    }
    if (e->jarr) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "ctx", a->ctxs[c]);
        cJSON_AddNumberToObject(o, "depth", a->depths[d]);
        cJSON_AddNumberToObject(o, "index", k);
        cJSON_AddNumberToObject(o, "query", r);
        cJSON_AddStringToObject(o, "city", p->city);
        cJSON_AddStringToObject(o, "answer", p->answer);
        cJSON_AddStringToObject(o, "predicted", pred);
        cJSON_AddBoolToObject(o, "correct", ok);
        cJSON_AddItemToObject(o, "generated_ids", cJSON_CreateIntArray(gen, ng));
        if (e->rs) {
            cJSON_AddNumberToObject(o, "logits_nmse", nmse);
            cJSON_AddBoolToObject(o, "top1_agree", same);
        }
        if (a->attention) {
            cJSON_AddNumberToObject(o, "attn_answer", ans);
            cJSON_AddNumberToObject(o, "attn_noise", noise);
        }
        cJSON_AddItemToArray(e->jarr, o);
    }
    e->done_n++;
    if (e->tty || e->done_n == e->total || e->done_n % (e->total / 20 > 0 ? e->total / 20 : 1) == 0)
        fprintf(stderr, "%s[%d/%d] ctx %d depth %d%%: %d correct so far, %.1f s%s", e->tty ? "\r" : "", e->done_n,
                e->total, a->ctxs[c], a->depths[d], e->t.correct[c][d], drt_clock_s() - e->t0, e->tty ? "" : "\n");
    return 0;
}

/* every prompt: lengths x depths x samples, each with its queries; 0, else the exit status */
static int niah_eval_all(niah_eval *e) {
    const niah_args *a = e->a;
    e->total = (int)a->n_prompts;
    e->tty = isatty(2);
    fprintf(stderr, "niah: %s (%s) on %s: %d prompts (ctx", a->model, e->I.arch_name, a->backend, e->total);
    for (int c = 0; c < a->n_ctx; c++) fprintf(stderr, "%s%d", c ? "," : " ", a->ctxs[c]);
    fprintf(stderr, ", N=%d R=%d, %d samples per depth, seed %llu)\n", a->needles, a->queries, a->samples, a->seed);
    e->t0 = drt_clock_s();
    if (a->attn_bits) {
        /* on both models' sessions, as the --logits-vs comparison always had it */
        if (drt_analysis_set_attn_bits(e->s, a->attn_bits) != DRT_OK ||
            (e->rs && drt_analysis_set_attn_bits(e->rs, a->attn_bits) != DRT_OK))
            return cli_fail("niah");
        fprintf(stderr, "niah: attention logits quantized to %d bits (symmetric, per-row absmax) before softmax\n",
                a->attn_bits);
    }
    for (int c = 0; c < a->n_ctx; c++)
        for (int d = 0; d < a->n_depth; d++)
            for (int k = 0; k < a->samples; k++) {
                drt_niah_prompt p[64];
                if (drt_niah_make(e->tok, a->seed, a->ctxs[c], a->needles, a->queries, a->depths[d], k, p) != DRT_OK)
                    return cli_fail("niah");
                int rc = 0;
                for (int r = 0; r < a->queries && !rc; r++) rc = niah_query(e, &p[r], c, d, k, r);
                for (int q = 0; q < a->queries; q++) drt_niah_prompt_free(&p[q]);
                if (rc) return rc;
            }
    if (e->tty) fprintf(stderr, "\n");
    return 0;
}

/* the accuracy table, the attention table, the --logits-vs line */
static void niah_print(niah_eval *e) {
    const niah_args *a = e->a;
    const drt_niah_grid g = {.needles = a->needles,
                             .queries = a->queries,
                             .samples = a->samples,
                             .seed = a->seed,
                             .ctxs = a->ctxs,
                             .depths = a->depths,
                             .n_ctx = a->n_ctx,
                             .n_depth = a->n_depth};
    e->all = drt_niah_print_accuracy(stdout, &g, &e->t, e->total);
    if (a->attention) drt_niah_print_attention(stdout, &g, &e->t, e->I.arch != DRT_ARCH_TRANSFORMER);
    if (e->rs && e->n_cmp)
        printf("\nlogits of the prompt's last token vs %s: NMSE mean %.3g, max %.3g; top-1 agreement %.3f "
               "(%d/%d)\n",
               a->logits_vs, e->nmse_sum / e->n_cmp, e->nmse_max, (double)e->top1_same / e->n_cmp, e->top1_same,
               e->n_cmp);
}

/* the shape of python/niah/eval.py's output: {"summary": {...}, "samples": [...]}; 0, else 1 */
static int niah_write_json(const niah_eval *e) {
    const niah_args *a = e->a;
    cJSON *root = cJSON_CreateObject(), *sm = cJSON_AddObjectToObject(root, "summary");
    cJSON_AddStringToObject(sm, "model", a->model);
    cJSON_AddStringToObject(sm, "backend", a->backend);
    cJSON_AddNumberToObject(sm, "needles", a->needles);
    cJSON_AddNumberToObject(sm, "queries", a->queries);
    cJSON_AddItemToObject(sm, "ctx", cJSON_CreateIntArray(a->ctxs, a->n_ctx));
    cJSON_AddItemToObject(sm, "depths", cJSON_CreateIntArray(a->depths, a->n_depth));
    cJSON_AddNumberToObject(sm, "samples", a->samples);
    cJSON_AddNumberToObject(sm, "seed", (double)a->seed);
    cJSON_AddNumberToObject(sm, "n_prompts", e->total);
    cJSON_AddNumberToObject(sm, "accuracy", (double)e->all / e->total);
    if (a->attn_bits) cJSON_AddNumberToObject(sm, "attn_bits", a->attn_bits);
    if (e->rs && e->n_cmp) {
        cJSON_AddStringToObject(sm, "logits_vs", a->logits_vs);
        cJSON_AddNumberToObject(sm, "logits_nmse_mean", e->nmse_sum / e->n_cmp);
        cJSON_AddNumberToObject(sm, "logits_nmse_max", e->nmse_max);
        cJSON_AddNumberToObject(sm, "top1_agreement", (double)e->top1_same / e->n_cmp);
    }
    cJSON_AddItemReferenceToObject(root, "samples", e->jarr);
    char *txt = cJSON_Print(root);
    cJSON_Delete(root);
    int bad = cli_out_write_text("niah: --json", a->json, txt);
    free(txt);
    return bad ? 1 : 0;
}

/* --min-accuracy, --no-fallback, --compare: the exit status */
static int niah_verdict(const niah_eval *e) {
    const niah_args *a = e->a;
    int rc = 0;
    if (a->min_accuracy >= 0 && (double)e->all < a->min_accuracy * e->total) {
        printf("FAIL: accuracy %.3f is below --min-accuracy %.3f\n", (double)e->all / e->total, a->min_accuracy);
        rc = 1;
    }
    char fb[512];
    int nfb = drt_session_fallbacks(e->s, fb, sizeof fb);
    if (nfb) {
        printf("backend %s: %d node runs fell back to the CPU reference: %s\n", a->backend, nfb, fb);
        if (a->no_fallback) {
            printf("FAIL: --no-fallback\n");
            rc = 1;
        }
    }
    if (a->compare) {
        int crc = drt_niah_compare(a->compare, e->jarr, a->needles, a->queries, a->seed, a->min_agree, stdout);
        if (crc == 2) fprintf(stderr, "diffrt: niah: %s\n", drt_last_error());
        if (crc > rc) rc = crc;
    }
    return rc;
}

int cmd_niah(int argc, char **argv) {
    niah_args a;
    int rc = niah_parse(argc, argv, &a);
    if (rc != CLI_PARSED) return rc;
    niah_eval *e = calloc(1, sizeof *e);
    if (!e) return cli_die("niah: out of memory%s", "");
    e->a = &a;
    e->jarr = a.json || a.compare ? cJSON_CreateArray() : NULL;
    /* a bad --set is a usage error (2) before any work */
    if (!(rc = cli_settings("niah", a.set, &e->set)) && !(rc = cli_kv_type("niah", a.kv_type, &e->set)) &&
        !(rc = niah_setup(e)) && !(rc = niah_eval_all(e))) {
        niah_print(e);
        rc = a.json ? niah_write_json(e) : 0;
        if (!rc) rc = niah_verdict(e);
    }
    cJSON_Delete(e->jarr);
    free(e->logits);
    free(e->eos);
    free(e->rlogits);
    free(e->attn);
    drt_tokenizer_free(e->tok);
    drt_session_free(e->s);
    drt_session_free(e->rs);
    drt_model_free(e->m);
    drt_model_free(e->rm);
    drt_settings_free(e->set);
    free(e);
    return rc;
}
