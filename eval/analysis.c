/* Activation statistics gathered by a session observer (analysis.h). */
#include "analysis.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "session.h" /* drt_session_set_attn_bits */

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
    free(a->q);
    a->q = NULL;
    drt_mag_stats_free(&a->logits[0]);
    drt_mag_stats_free(&a->logits[1]);
    drt_mag_stats_free(&a->hidden);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int act_want(void *ctx, const char *op, const char *name, int layer) {
    return ends_with(name, ".attn.q_rope") || ends_with(name, ".attn.k_cache") || ends_with(name, ".mlp_residual");
}

/* a, b are (n): as the reference kernels take a dot product (ref attention.c) */
static double dot(const float *a, const float *b, int n) {
    double acc = 0.0;
    for (int i = 0; i < n; i++) acc += (double)a[i] * (double)b[i];
    return acc;
}

/* The attention logits of one layer, exactly as the reference ATTN /
 * DIFF_ATTN compute them before their softmax: q (T, H*maps, dk) after
 * RoPE, the K cache k (S_cap, G, m, dk) (ATTN: (S_cap, G, dk)) holding
 * rows 0 .. p0+T-1; query t sees keys j <= p0+t; scale 1/sqrt(dk). */
static void layer_logits(drt_act_stats *a, const float *q, int T, const drt_node_tensor *kc, int p0) {
    const float *k = kc->data;
    int diff = kc->nd == 4, maps = diff ? 2 : 1;
    int G = (int)kc->ne[1], m = diff ? (int)kc->ne[2] : 1, dk = (int)kc->ne[kc->nd - 1];
    int H = (int)(a->q_n / ((size_t)T * (size_t)maps * (size_t)dk));
    const double s = 1.0 / sqrt((double)dk);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const int64_t g = (int64_t)h * G / H;
            for (int c = 0; c < maps; c++) {
                const float *qq = q + (((int64_t)t * H + h) * maps + c) * dk;
                for (int j = 0; j <= p0 + t; j++) {
                    const float *kk = k + ((int64_t)j * G + g) * m * dk + (int64_t)(c ? m - 1 : 0) * dk;
                    drt_mag_stats_add(&a->logits[c], s * dot(qq, kk, dk));
                }
            }
        }
}

static void act_node(void *ctx, const drt_node_event *ev) {
    drt_act_stats *a = ctx;
    if (a->err || ev->out.type != DRT_F32 || !ev->out.data) return;
    size_t n = 1;
    for (int d = 0; d < ev->out.nd; d++) n *= (size_t)ev->out.ne[d];
    if (ends_with(ev->out.name, ".mlp_residual")) {
        const float *x = ev->out.data;
        for (size_t i = 0; i < n; i++) drt_mag_stats_add(&a->hidden, x[i]);
    } else if (ends_with(ev->out.name, ".attn.q_rope")) {
        /* kept until the layer's K cache is written, the node after next */
        if (n > a->q_cap) {
            float *nq = realloc(a->q, n * sizeof(float));
            if (!nq) {
                a->err = drt_set_error(DRT_ERR_OOM, "out of memory (attention logits)");
                return;
            }
            a->q = nq;
            a->q_cap = n;
        }
        memcpy(a->q, ev->out.data, n * sizeof(float));
        a->q_n = n;
        a->q_T = (int)ev->out.ne[0];
    } else if (ends_with(ev->out.name, ".attn.k_cache") && a->q_n && ev->n_src >= 2) {
        /* the whole cache, its rows before p0 included: the KV_WRITE's second input */
        if (!ev->src[1].data) {
            a->err = drt_set_error(DRT_ERR_UNSUPPORTED, "attention logits: the K cache is not in host memory");
            return;
        }
        layer_logits(a, a->q, a->q_T, &ev->src[1], ev->p0);
        a->q_n = 0;
    }
}

drt_status drt_act_stats_observe(drt_act_stats *a, drt_session *s) {
    drt_observer o = {.want = act_want, .on_node = act_node, .ctx = a};
    return drt_session_set_observer(s, &o);
}

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

static void print_row(FILE *f, const char *what, const drt_mag_stats *s) {
    fprintf(f, "%-28s %12.4g %12.4g %12.4g %14llu\n", what, s->top[0], s->top[DRT_STATS_TOPK - 1],
            drt_mag_stats_median(s), (unsigned long long)s->n);
}

void drt_act_stats_print(FILE *f, const drt_act_stats *a, const drt_mag_stats *both, int diff) {
    fprintf(f, "%-28s %12s %12s %12s %14s\n", "activation", "top-1 |x|", "top-10 |x|", "median |x|", "values");
    print_row(f, diff ? "attention logits (both maps)" : "attention logits", both);
    if (diff) {
        print_row(f, "  map 1 (q1.k1)", &a->logits[0]);
        print_row(f, "  map 2 (q2.k2)", &a->logits[1]);
    }
    print_row(f, "hidden states", &a->hidden);
}

drt_status drt_analysis_set_attn_bits(drt_session *s, int bits) {
    return drt_session_set_attn_bits(s, bits);
}
