/* diffrt analyze: activation statistics of a model over the NIAH prompts, as
 * in the DIFF Transformer paper's Table 5 (arXiv 2410.05258): the largest and
 * the median magnitudes of the attention logits (q.k/sqrt(dk), both maps of
 * every DIFF head) and of the hidden states (each layer's output, the
 * residual stream after its MLP).
 *
 * The prompts are `diffrt niah`'s (docs/niah_spec.md: one needle, one query,
 * the given depths and samples, seed), prefilled on the reference backend,
 * whose analysis hooks (backends/ref/ref_ops.h) see every logit row and every
 * node output. Per quantity: top-1 and top-10 (the 10th largest) |value|,
 * exact; the median |value| from a histogram of 1000 bins per decade
 * (relative error below 0.12%). */
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
#include "drt_graph.h"
#include "niah.h"
#include "ref_ops.h"

#define TOPK 10
#define DECADES 24 /* |x| in [1e-12, 1e12) */
#define PER_DECADE 1000
#define NBINS (DECADES * PER_DECADE)

typedef struct {
    double top[TOPK]; /* descending */
    uint64_t n, zeros, below, above;
    uint64_t *bins;
} mag_stats;

static void stats_add(mag_stats *s, double x) {
    double a = fabs(x);
    s->n++;
    if (a > s->top[TOPK - 1]) { /* insert into the descending top list */
        int i = TOPK - 1;
        while (i > 0 && s->top[i - 1] < a) {
            s->top[i] = s->top[i - 1];
            i--;
        }
        s->top[i] = a;
    }
    if (a == 0) {
        s->zeros++;
        return;
    }
    double b = (log10(a) + DECADES / 2) * PER_DECADE;
    if (b < 0)
        s->below++;
    else if (b >= NBINS)
        s->above++;
    else
        s->bins[(int)b]++;
}

/* the median |value|: the centre of the histogram bin holding it */
static double stats_median(const mag_stats *s) {
    if (!s->n) return 0;
    uint64_t half = (s->n + 1) / 2, c = s->zeros + s->below;
    if (c >= half) return 0;
    for (int i = 0; i < NBINS; i++) {
        c += s->bins[i];
        if (c >= half) return pow(10, (i + 0.5) / PER_DECADE - DECADES / 2);
    }
    return s->top[0];
}

typedef struct {
    mag_stats logits[2]; /* map 0 (the only one for ATTN), map 1 (DIFF's second) */
    mag_stats hidden;
} analysis;

static void on_logits(void *ctx, const double *l, int n, int map) {
    analysis *a = ctx;
    for (int j = 0; j < n; j++) stats_add(&a->logits[map & 1], l[j]);
}

static void on_node(void *ctx, const drt_tensor *t, const void *out) {
    analysis *a = ctx;
    if (!out || t->type != DRT_F32 || !cli_ends_with(t->name, ".mlp_residual")) return;
    const float *x = out;
    for (int64_t i = 0, n = drt_nelem(t); i < n; i++) stats_add(&a->hidden, x[i]);
}

static void print_row(const char *what, const mag_stats *s) {
    printf("%-28s %12.4g %12.4g %12.4g %14llu\n", what, s->top[0], s->top[TOPK - 1], stats_median(s),
           (unsigned long long)s->n);
}

static cJSON *stats_json(const mag_stats *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "top1", s->top[0]);
    cJSON_AddNumberToObject(o, "top10", s->top[TOPK - 1]);
    cJSON_AddNumberToObject(o, "median", stats_median(s));
    cJSON_AddNumberToObject(o, "count", (double)s->n);
    return o;
}

static const char ABOUT_A[] =
    "The paper's Table 5 quantities over diffrt niah's prompts (one needle; K samples per\n"
    "depth), prefilled on the reference backend: top-1, top-10 and median |value| of the\n"
    "attention logits (q.k/sqrt(dk); both maps of a DIFF head) and of the hidden states\n"
    "(every layer's output).\n";

typedef struct {
    const char *model, *json;
    long samples, seed, ctx;
    int depths[16], n_depth;
} analyze_args;

static int analyze_parse(int argc, char **argv, analyze_args *a) {
    *a = (analyze_args){.samples = 40, .depths = {0, 25, 50, 75, 100}, .n_depth = 5};
    const cli_opt opts[] = {
        {.name = "--model", .kind = CLI_STR, .dst = &a->model, .meta = "DIR", .help = "the model directory"},
        {.name = "--samples", .kind = CLI_LONG, .dst = &a->samples, .meta = "K", .lo = 1, .hi = 100000,
         .bad = "--samples wants 1..100000", .help = "prompts per depth (default 40)"},
        {.name = "--depths", .kind = CLI_LIST, .dst = a->depths, .count = &a->n_depth, .max = 16, .lo = 0,
         .hi = 100, .meta = "P,...", .bad = "--depths wants percents 0..100",
         .help = "needle depths in percent (default 0,25,50,75,100)"},
        {.name = "--seed", .kind = CLI_LONG, .dst = &a->seed, .meta = "S", .lo = 0, .hi = 1L << 40,
         .bad = "--seed wants an integer >= 0", .help = "prompt seed (default 0)"},
        {.name = "--ctx", .kind = CLI_LONG, .dst = &a->ctx, .meta = "L", .lo = 16, .hi = 1 << 20,
         .bad = "--ctx wants 16..1048576", .help = "prompt length (default: the model's max positions, at most 4096)"},
        {.name = "--json", .kind = CLI_STR, .dst = &a->json, .meta = "FILE",
         .help = "also write the statistics as JSON"},
        {0}};
    const cli_cmd cmd = {.name = "analyze", .synopsis = "--model DIR [options]", .about = ABOUT_A, .opts = opts};
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_PARSED) return rc;
    if (!a->model) return cli_die("analyze: --model DIR is required%s", "");
    return CLI_PARSED;
}

/* every prompt prefilled on s with the analysis hooks on; 0, else the exit status */
static int analyze_prompts(const analyze_args *a, drt_session *s, drt_tokenizer *tok, float *logits, analysis *an,
                           int total) {
    int done_n = 0, tty = isatty(2);
    drt_ref_analysis hooks = {.logit_row = on_logits, .node_done = on_node, .ctx = an};
    drt_ref_set_analysis(&hooks);
    for (int d = 0; d < a->n_depth; d++)
        for (int k = 0; k < a->samples; k++) {
            drt_niah_prompt p;
            drt_status st = drt_niah_make(tok, (uint64_t)a->seed, (int)a->ctx, 1, 1, a->depths[d], k, &p);
            if (st == DRT_OK) {
                drt_session_reset(s);
                st = drt_session_forward(s, p.ids, p.n_ids, logits, 0);
                drt_niah_prompt_free(&p);
            }
            if (st != DRT_OK) {
                drt_ref_set_analysis(NULL);
                return cli_fail("analyze");
            }
            done_n++;
            if (tty || done_n == total || done_n % (total / 10 > 0 ? total / 10 : 1) == 0)
                fprintf(stderr, "%sanalyze: %d/%d prompts%s", tty ? "\r" : "", done_n, total, tty ? "" : "\n");
        }
    drt_ref_set_analysis(NULL);
    if (tty) fprintf(stderr, "\n");
    return 0;
}

/* a DIFF model's two maps pooled into *both (its own bins); 0 when out of memory */
static int pool_maps(const analysis *an, mag_stats *both) {
    *both = an->logits[0];
    both->bins = calloc(NBINS, sizeof(uint64_t));
    if (!both->bins) return 0;
    for (int i = 0; i < NBINS; i++) both->bins[i] = an->logits[0].bins[i] + an->logits[1].bins[i];
    both->n += an->logits[1].n;
    both->zeros += an->logits[1].zeros;
    both->below += an->logits[1].below;
    both->above += an->logits[1].above;
    double merged[2 * TOPK];
    memcpy(merged, an->logits[0].top, sizeof an->logits[0].top);
    memcpy(merged + TOPK, an->logits[1].top, sizeof an->logits[1].top);
    for (int i = 0; i < 2 * TOPK; i++) /* descending selection of the 10 largest */
        for (int j = i + 1; j < 2 * TOPK; j++)
            if (merged[j] > merged[i]) {
                double t = merged[i];
                merged[i] = merged[j];
                merged[j] = t;
            }
    memcpy(both->top, merged, sizeof both->top);
    return 1;
}

/* the table on stdout and --json; the exit status */
static int analyze_report(const analyze_args *a, const drt_model_info *I, const analysis *an, const mag_stats *both,
                          int total) {
    const int diff = I->arch != DRT_ARCH_TRANSFORMER;
    printf("activation statistics, %s (%s), %d NIAH prompts (ctx %ld, seed %ld), reference backend\n", a->model,
           I->arch_name, total, a->ctx, a->seed);
    printf("%-28s %12s %12s %12s %14s\n", "activation", "top-1 |x|", "top-10 |x|", "median |x|", "values");
    print_row(diff ? "attention logits (both maps)" : "attention logits", both);
    if (diff) {
        print_row("  map 1 (q1.k1)", &an->logits[0]);
        print_row("  map 2 (q2.k2)", &an->logits[1]);
    }
    print_row("hidden states", &an->hidden);
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

    rc = 1;
    drt_model *m = NULL;
    drt_session *s = NULL;
    drt_tokenizer *tok = NULL;
    float *logits = NULL;
    analysis an;
    memset(&an, 0, sizeof an);
    mag_stats *all[3] = {&an.logits[0], &an.logits[1], &an.hidden};
    for (int i = 0; i < 3; i++) {
        all[i]->bins = calloc(NBINS, sizeof(uint64_t));
        if (!all[i]->bins) {
            fprintf(stderr, "diffrt: analyze: out of memory\n");
            goto done;
        }
    }
    char tpath[4096];
    snprintf(tpath, sizeof tpath, "%s/tokenizer.json", a.model);
    if (drt_model_load(a.model, &m) != DRT_OK || drt_tokenizer_load(tpath, &tok) != DRT_OK) {
        rc = cli_fail("analyze");
        goto done;
    }
    drt_model_info I;
    drt_model_get_info(m, &I);
    if (!a.ctx) a.ctx = I.max_ctx < 4096 ? I.max_ctx : 4096;
    drt_session_opts so = {.backend = "ref", .max_ctx = (int)a.ctx};
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
        mag_stats both;
        if (!pool_maps(&an, &both)) goto done;
        rc = analyze_report(&a, &I, &an, &both, total);
        free(both.bins);
    } else {
        rc = analyze_report(&a, &I, &an, &an.logits[0], total);
    }
done:
    for (int i = 0; i < 3; i++) free(all[i]->bins);
    free(logits);
    drt_session_free(s);
    drt_model_free(m);
    drt_tokenizer_free(tok);
    return rc;
}
