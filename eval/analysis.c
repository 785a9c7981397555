/* Activation statistics and the reference analysis hooks (analysis.h). */
#include "analysis.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "drt_graph.h"
#include "ref_ops.h"

#define DECADES 24 /* |x| in [1e-12, 1e12) */
#define PER_DECADE 1000
#define NBINS (DECADES * PER_DECADE)
#define TOPK DRT_STATS_TOPK

drt_status drt_mag_stats_init(drt_mag_stats *s) {
    memset(s, 0, sizeof *s);
    s->bins = calloc(NBINS, sizeof(uint64_t));
    return s->bins ? DRT_OK : drt_set_error(DRT_ERR_OOM, "out of memory (activation histogram)");
}

void drt_mag_stats_free(drt_mag_stats *s) {
    free(s->bins);
    s->bins = NULL;
}

void drt_mag_stats_add(drt_mag_stats *s, double x) {
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

double drt_mag_stats_median(const drt_mag_stats *s) {
    if (!s->n) return 0;
    uint64_t half = (s->n + 1) / 2, c = s->zeros + s->below;
    if (c >= half) return 0;
    for (int i = 0; i < NBINS; i++) {
        c += s->bins[i];
        if (c >= half) return pow(10, (i + 0.5) / PER_DECADE - DECADES / 2);
    }
    return s->top[0];
}

drt_status drt_mag_stats_pool(const drt_mag_stats *a, const drt_mag_stats *b, drt_mag_stats *both) {
    *both = *a;
    both->bins = calloc(NBINS, sizeof(uint64_t));
    if (!both->bins) return drt_set_error(DRT_ERR_OOM, "out of memory (activation histogram)");
    for (int i = 0; i < NBINS; i++) both->bins[i] = a->bins[i] + b->bins[i];
    both->n += b->n;
    both->zeros += b->zeros;
    both->below += b->below;
    both->above += b->above;
    double merged[2 * TOPK];
    memcpy(merged, a->top, sizeof a->top);
    memcpy(merged + TOPK, b->top, sizeof b->top);
    for (int i = 0; i < 2 * TOPK; i++) /* descending selection of the 10 largest */
        for (int j = i + 1; j < 2 * TOPK; j++)
            if (merged[j] > merged[i]) {
                double t = merged[i];
                merged[i] = merged[j];
                merged[j] = t;
            }
    memcpy(both->top, merged, sizeof both->top);
    return DRT_OK;
}

drt_status drt_act_stats_init(drt_act_stats *a) {
    memset(a, 0, sizeof *a);
    drt_mag_stats *all[3] = {&a->logits[0], &a->logits[1], &a->hidden};
    for (int i = 0; i < 3; i++)
        if (drt_mag_stats_init(all[i]) != DRT_OK) {
            drt_act_stats_free(a);
            return DRT_ERR_OOM;
        }
    return DRT_OK;
}

void drt_act_stats_free(drt_act_stats *a) {
    drt_mag_stats_free(&a->logits[0]);
    drt_mag_stats_free(&a->logits[1]);
    drt_mag_stats_free(&a->hidden);
}

static void on_logits(void *ctx, const double *l, int n, int map) {
    drt_act_stats *a = ctx;
    for (int j = 0; j < n; j++) drt_mag_stats_add(&a->logits[map & 1], l[j]);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void on_node(void *ctx, const drt_tensor *t, const void *out) {
    drt_act_stats *a = ctx;
    if (!out || t->type != DRT_F32 || !ends_with(t->name, ".mlp_residual")) return;
    const float *x = out;
    for (int64_t i = 0, n = drt_nelem(t); i < n; i++) drt_mag_stats_add(&a->hidden, x[i]);
}

void drt_act_stats_start(drt_act_stats *a) {
    drt_ref_analysis hooks = {.logit_row = on_logits, .node_done = on_node, .ctx = a};
    drt_ref_set_analysis(&hooks);
}

void drt_eval_attn_bits(int bits) {
    drt_ref_analysis hooks = {.attn_bits = bits};
    drt_ref_set_analysis(&hooks);
}

void drt_eval_hooks_off(void) { drt_ref_set_analysis(NULL); }

void drt_logits_compare(const float *a, const float *ref, int n, double *nmse, int *same_top1) {
    double num = 0, den = 0;
    int a1 = 0, a2 = 0;
    for (int v = 0; v < n; v++) {
        double d = (double)a[v] - ref[v];
        num += d * d;
        den += (double)ref[v] * ref[v];
        if (a[v] > a[a1]) a1 = v;
        if (ref[v] > ref[a2]) a2 = v;
    }
    *nmse = den > 0 ? num / den : num;
    *same_top1 = a1 == a2;
}
