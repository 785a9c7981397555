/* Activation statistics of the DIFF Transformer paper's Table 5 (arXiv
 * 2410.05258), gathered by a session observer (drt_session_set_observer):
 * the largest and the median magnitudes of the attention logits
 * (q.k/sqrt(dk), both maps of every DIFF head) and of the hidden states
 * (each layer's output, the residual stream after its MLP). Also the
 * logits comparison of niah --logits-vs. */
#ifndef DRT_EVAL_ANALYSIS_H
#define DRT_EVAL_ANALYSIS_H

#include <stdint.h>
#include <stdio.h>

#include "diffrt/diffrt.h"

#define DRT_STATS_TOPK 10

/* Magnitudes |x| of a stream of values: top-1 and top-10 (top[TOPK-1])
 * exact; the median from a histogram of 1000 bins per decade over
 * [1e-12, 1e12) (relative error below 0.12%). */
typedef struct {
    double top[DRT_STATS_TOPK]; /* descending */
    uint64_t n, zeros, below, above;
    uint64_t *bins;
} drt_mag_stats;

/* zeroed, with its bins; DRT_ERR_OOM */
drt_status drt_mag_stats_init(drt_mag_stats *s);
void drt_mag_stats_free(drt_mag_stats *s);
void drt_mag_stats_add(drt_mag_stats *s, double x);
/* the centre of the histogram bin holding the median |value|; 0 when empty */
double drt_mag_stats_median(const drt_mag_stats *s);
/* a and b pooled into *both (its own bins); DRT_ERR_OOM */
drt_status drt_mag_stats_pool(const drt_mag_stats *a, const drt_mag_stats *b, drt_mag_stats *both);

/* the Table 5 quantities of a run */
typedef struct {
    drt_mag_stats logits[2]; /* map 0 (the only one for ATTN), map 1 (DIFF's second) */
    drt_mag_stats hidden;    /* every node named *.mlp_residual */
    /* the observer's: the last layer's q after RoPE until its K cache is
     * written, and the first error */
    float *q;
    size_t q_n, q_cap;
    int q_T;
    drt_status err;
} drt_act_stats;

drt_status drt_act_stats_init(drt_act_stats *a);
void drt_act_stats_free(drt_act_stats *a);
/* Sets a as the observer of s: from now on every forward of s feeds it
 * (a->err: the first failure), until drt_session_set_observer(s, NULL).
 * The attention logits are computed from each layer's q after RoPE and K
 * cache exactly as the reference kernels compute them (in double), so
 * the statistics are those of the reference backend's own logits; the K
 * cache must be in host memory (the cpu and ref backends). */
drt_status drt_act_stats_observe(drt_act_stats *a, drt_session *s);

/* Table 5: the column header, then a row of top-1, top-10 and median |x|
 * and the count for the attention logits (both: the two maps pooled, for a
 * DIFF model), each map of a DIFF model (diff), and the hidden states */
void drt_act_stats_print(FILE *f, const drt_act_stats *a, const drt_mag_stats *both, int diff);

/* NIAH with low-bit attention logits (the paper's Fig. 8; diffrt niah
 * --attn-bits): every ATTN / DIFF_ATTN node of s's graphs, built and to be
 * built, quantizes its attention logits to bits (> 0; 0: off; symmetric,
 * per-row absmax) before the softmax. A parameter of the attention node
 * that the reference kernels read, not an observer: the ref backend only,
 * DRT_ERR_UNSUPPORTED elsewhere (session/session.h). */
drt_status drt_analysis_set_attn_bits(drt_session *s, int bits);

/* logits against reference logits (n values each): NMSE sum((a-r)^2) /
 * sum(r^2) (the plain sum when r is all zero), and whether their argmax
 * (the first maximum) agrees */
void drt_logits_compare(const float *a, const float *ref, int n, double *nmse, int *same_top1);

#endif
