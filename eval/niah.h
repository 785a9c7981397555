/* Synthetic multi-needle retrieval ("needle in a haystack"), the C side of
 * docs/niah_spec.md: the same seeds give byte-identical prompts to
 * python/niah/generate.py. */
#ifndef DRT_NIAH_H
#define DRT_NIAH_H

#include <stdint.h>
#include <stdio.h>

#include "diffrt/diffrt.h"
#include "diffrt/tokenizer.h"

#define DRT_NIAH_MAX_NEW_TOKENS 12

typedef struct {
    char *prompt; /* haystack + question + prefix, NUL-terminated */
    int32_t *ids; /* its encoding with special tokens (BOS first) */
    int n_ids;
    char city[24];
    char answer[16];  /* the number, decimal ASCII */
    int answer_start; /* the queried needle's tokens: [answer_start, answer_end) */
    int answer_end;
    int question_start; /* first token of the question */
} drt_niah_prompt;

/* Builds haystack `index` for (seed, ctx, needles, queries) at `depth`
 * percent and its `queries` prompts into out[0..queries). Errors name the
 * setting (e.g. a ctx too small for the needles and question). */
drt_status drt_niah_make(const drt_tokenizer *tok, uint64_t seed, int ctx, int needles, int queries, int depth,
                         int index, drt_niah_prompt *out);
void drt_niah_prompt_free(drt_niah_prompt *p);

/* the most prompts one run evaluates: each is a prefill of up to ctx tokens, and the
 * counts of a run (per cell, in total) stay well inside an int */
#define DRT_NIAH_MAX_PROMPTS 10000000

/* The prompts of a run: n_ctx lengths x n_depth depths x samples x queries,
 * multiplied in 64-bit. DRT_ERR_INVALID_ARG naming the factors when one is
 * below 1 or the product is past DRT_NIAH_MAX_PROMPTS. */
drt_status drt_niah_prompt_count(int64_t n_ctx, int64_t n_depth, int64_t samples, int64_t queries, int64_t *out);

/* The spec's judging: generated text, leading spaces stripped, longest
 * prefix of ASCII digits, into pred (at most n-1 chars). */
void drt_niah_predicted(const char *generated, char *pred, size_t n);

/* The scorer, after the prompt's prefill on s left its last-token logits in
 * logits[vocab]: greedy continuation until any of the n_eos ids eos[] (the
 * model's drt_model_eos_ids: Llama 3 has three) or DRT_NIAH_MAX_NEW_TOKENS
 * (its ids in gen, their count in *ng), decoded and judged into pred (n
 * bytes); logits is overwritten. */
drt_status drt_niah_answer(drt_session *s, const drt_tokenizer *tok, int vocab, const int32_t *eos, int n_eos,
                           float *logits, int32_t gen[DRT_NIAH_MAX_NEW_TOKENS], int *ng, char *pred, size_t n);

/* The final query token's attention over the context before the question
 * (attn as drt_session_last_attention gives it), split into the answer
 * needle's tokens and the rest (the paper's Table 3). */
void drt_niah_attention(const float *attn, const drt_niah_prompt *p, double *answer, double *noise);

/* ---- the paper's tables ---------------------------------------------- */
#define DRT_NIAH_MAX_LIST 32

/* the settings of a run: every (length, depth) cell holds samples x queries answers */
typedef struct {
    int needles, queries, samples;
    unsigned long long seed;
    const int *ctxs, *depths; /* at most DRT_NIAH_MAX_LIST each */
    int n_ctx, n_depth;
} drt_niah_grid;

/* what a run counts */
typedef struct {
    int correct[DRT_NIAH_MAX_LIST][DRT_NIAH_MAX_LIST]; /* [ctx][depth] */
    /* --attention: per depth, the sums of drt_niah_attention over att_n queries */
    double att_ans[DRT_NIAH_MAX_LIST], att_noise[DRT_NIAH_MAX_LIST];
    int att_n[DRT_NIAH_MAX_LIST];
} drt_niah_tally;

/* Table 2 / Figure 5: accuracy per depth (rows) x context length (columns)
 * and overall, over total answers; returns the correct ones */
int drt_niah_print_accuracy(FILE *f, const drt_niah_grid *g, const drt_niah_tally *t, int total);
/* Table 3: mean attention of the final query token to the answer needle
 * and to the rest, per depth and over all (diff: of the differential map) */
void drt_niah_print_attention(FILE *f, const drt_niah_grid *g, const drt_niah_tally *t, int diff);

#endif
