/* diffrt analyze: activation statistics of a model over the NIAH prompts, as
 * in the DIFF Transformer paper's Table 5 (arXiv 2410.05258): the largest and
 * the median magnitudes of the attention logits (q.k/sqrt(dk), both maps of
 * every DIFF head) and of the hidden states (each layer's output, the
 * residual stream after its MLP).
 *
 * The prompts are `diffrt niah`'s (docs/niah_spec.md: one needle, one query,
 * the given depths and samples, seed), prefilled on the reference backend,
 * observed (eval/analysis.h gathers the statistics from each layer's q, K
 * cache and output). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "opts.h"
#include "outfile.h"
#include "diffrt/diffrt.h"
#include "diffrt/tokenizer.h"
#include "analysis.h"
#include "niah.h"

static cJSON *stats_json(const drt_mag_stats *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "top1", s->top[0]);
    cJSON_AddNumberToObject(o, "top10", s->top[DRT_STATS_TOPK - 1]);
    cJSON_AddNumberToObject(o, "median", drt_mag_stats_median(s));
    cJSON_AddNumberToObject(o, "count", (double)s->n);
    return o;
}

static const char ABOUT_A[] = "The paper's Table 5 quantities over diffrt niah's prompts (one needle; K samples per\n"
                              "depth), prefilled on the reference backend: top-1, top-10 and median |value| of the\n"
                              "attention logits (q.k/sqrt(dk); both maps of a DIFF head) and of the hidden states\n"
                              "(every layer's output).\n";

typedef struct {
    const char *model, *json, *set;
    long samples, seed, ctx;
    int depths[16], n_depth;
} analyze_args;

static int analyze_parse(int argc, char **argv, analyze_args *a) {
    *a = (analyze_args){.samples = 40, .depths = {0, 25, 50, 75, 100}, .n_depth = 5};
    const cli_opt opts[] = {
        {.name = "--model", .kind = CLI_STR, .dst = &a->model, .meta = "DIR", .help = "the model directory"},
        {.name = "--samples",
         .kind = CLI_LONG,
         .dst = &a->samples,
         .meta = "K",
         .lo = 1,
         .hi = 100000,
         .bad = "--samples wants 1..100000",
         .help = "prompts per depth (default 40)"},
        {.name = "--depths",
         .kind = CLI_LIST,
         .dst = a->depths,
         .count = &a->n_depth,
         .max = 16,
         .lo = 0,
         .hi = 100,
         .meta = "P,...",
         .bad = "--depths wants percents 0..100",
         .help = "needle depths in percent (default 0,25,50,75,100)"},
        {.name = "--seed",
         .kind = CLI_LONG,
         .dst = &a->seed,
         .meta = "S",
         .lo = 0,
         .hi = 1L << 40,
         .bad = "--seed wants an integer >= 0",
         .help = "prompt seed (default 0)"},
        {.name = "--ctx",
         .kind = CLI_LONG,
         .dst = &a->ctx,
         .meta = "L",
         .lo = 16,
         .hi = 1 << 20,
         .bad = "--ctx wants 16..1048576",
         .help = "prompt length (default: the model's max positions, at most 4096)"},
        {.name = "--json",
         .kind = CLI_STR,
         .dst = &a->json,
         .meta = "FILE",
         .help = "also write the statistics as JSON"},
        CLI_OPT_SET(&a->set),
        {0}};
    const cli_cmd cmd = {.name = "analyze", .synopsis = "--model DIR [options]", .about = ABOUT_A, .opts = opts};
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_PARSED) return rc;
    if (!a->model) return cli_die("analyze: --model DIR is required%s", "");
    return CLI_PARSED;
}

/* every prompt prefilled on s, observed into an; 0, else the exit status */
static int analyze_prompts(const analyze_args *a, drt_session *s, drt_tokenizer *tok, float *logits, drt_act_stats *an,
                           int total) {
    int done_n = 0, tty = isatty(2);
    if (drt_act_stats_observe(an, s) != DRT_OK) return cli_fail("analyze");
    for (int d = 0; d < a->n_depth; d++)
        for (int k = 0; k < a->samples; k++) {
            drt_niah_prompt p;
            drt_status st = drt_niah_make(tok, (uint64_t)a->seed, (int)a->ctx, 1, 1, a->depths[d], k, &p);
            if (st == DRT_OK) {
                drt_session_reset(s);
                st = drt_session_forward(s, p.ids, p.n_ids, logits, 0);
                drt_niah_prompt_free(&p);
            }
            if (st == DRT_OK) st = an->err;
            if (st != DRT_OK) {
                drt_session_set_observer(s, NULL);
                return cli_fail("analyze");
            }
            done_n++;
            if (tty || done_n == total || done_n % (total / 10 > 0 ? total / 10 : 1) == 0)
                fprintf(stderr, "%sanalyze: %d/%d prompts%s", tty ? "\r" : "", done_n, total, tty ? "" : "\n");
        }
    drt_session_set_observer(s, NULL);
    if (tty) fprintf(stderr, "\n");
    return 0;
}

/* the table on stdout and --json; the exit status */
static int analyze_report(const analyze_args *a, const drt_model_info *I, const drt_act_stats *an,
                          const drt_mag_stats *both, int total) {
    const int diff = I->arch != DRT_ARCH_TRANSFORMER;
    printf("activation statistics, %s (%s), %d NIAH prompts (ctx %ld, seed %ld), reference backend\n", a->model,
           I->arch_name, total, a->ctx, a->seed);
    drt_act_stats_print(stdout, an, both, diff);
    if (!a->json) return 0;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "model", a->model);
    cJSON_AddStringToObject(root, "arch", I->arch_name);
    cJSON_AddNumberToObject(root, "prompts", total);
    cJSON_AddNumberToObject(root, "ctx", (double)a->ctx);
    cJSON_AddNumberToObject(root, "seed", (double)a->seed);
    cJSON_AddItemToObject(root, "attention_logits", stats_json(both));
    if (diff) {
        cJSON_AddItemToObject(root, "attention_logits_map1", stats_json(&an->logits[0]));
        cJSON_AddItemToObject(root, "attention_logits_map2", stats_json(&an->logits[1]));
    }
    cJSON_AddItemToObject(root, "hidden_states", stats_json(&an->hidden));
    char *txt = cJSON_Print(root);
    cJSON_Delete(root);
    int rc = cli_out_write_text("analyze: --json", a->json, txt) ? 1 : 0;
    free(txt);
    return rc;
}

int cmd_analyze(int argc, char **argv) {
    analyze_args a;
    int rc = analyze_parse(argc, argv, &a);
    if (rc != CLI_PARSED) return rc;

    drt_model *m = NULL;
    drt_session *s = NULL;
    drt_tokenizer *tok = NULL;
    float *logits = NULL;
    drt_settings *set = NULL;
    if ((rc = cli_settings("analyze", a.set, &set)) != 0) { /* 2: a usage error, before any work */
        drt_settings_free(set);
        return rc;
    }
    rc = 1;
    drt_act_stats an;
    if (drt_act_stats_init(&an) != DRT_OK) {
        fprintf(stderr, "diffrt: analyze: out of memory\n");
        drt_settings_free(set);
        return 1;
    }
    char *tpath = drt_path_join(a.model, "tokenizer.json");
    if (!tpath) {
        fprintf(stderr, "diffrt: analyze: out of memory\n");
        rc = 1;
        goto done;
    }
    int bad = drt_model_load(a.model, &m) != DRT_OK || drt_tokenizer_load(tpath, &tok) != DRT_OK;
    drt_free(tpath);
    if (bad) {
        rc = cli_fail("analyze");
        goto done;
    }
    drt_model_info I;
    drt_model_get_info(m, &I);
    if (!a.ctx) a.ctx = I.max_ctx < 4096 ? I.max_ctx : 4096;
    drt_session_opts so = {.backend = "ref", .max_ctx = (int)a.ctx, .settings = set};
    if (drt_session_create(m, &so, &s) != DRT_OK) {
        rc = cli_fail("analyze");
        goto done;
    }
    logits = malloc(sizeof(float) * (size_t)I.vocab);
    if (!logits) goto done;
    int total = a.n_depth * (int)a.samples;
    fprintf(stderr, "analyze: %s (%s): %d prompts of ctx %ld on ref\n", a.model, I.arch_name, total, a.ctx);
    if ((rc = analyze_prompts(&a, s, tok, logits, &an, total)) != 0) goto done;
    rc = 1;
    if (I.arch != DRT_ARCH_TRANSFORMER) {
        drt_mag_stats both;
        if (drt_mag_stats_pool(&an.logits[0], &an.logits[1], &both) != DRT_OK) goto done;
        rc = analyze_report(&a, &I, &an, &both, total);
        drt_mag_stats_free(&both);
    } else {
        rc = analyze_report(&a, &I, &an, &an.logits[0], total);
    }
done:
    drt_settings_free(set);
    drt_act_stats_free(&an);
    free(logits);
    drt_session_free(s);
    drt_model_free(m);
    drt_tokenizer_free(tok);
    return rc;
}
