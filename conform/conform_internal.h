/* Internal to conform/, one idea a file:
 *   cases.c          the op case table (named cases) and building a case's graph
 *   runner.c         running a case on a backend against the reference: inputs,
 *                    NaN sentinels, NMSE verdicts
 *   select.c         names in the options: ops, backends, devices
 *   models.c         --models: whole models against the reference
 *   perf.c           --perf: timings against each backend's measured peaks
 *   report_text.c    the op x backend text table and the summary line
 *   conform_report.c the records as --json and --junit (conform_report.h)
 *   conform.c        drt_conform_run: the driver */
#ifndef DRT_CONFORM_INTERNAL_H
#define DRT_CONFORM_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "conform_report.h"
#include "drt_conform.h"
#include "drt_error.h"
#include "drt_graph.h"

/* ---- the case table (cases.c) ---------------------------------------------- */

/* One op case. The shape fields are named as the op's tensors name their
 * axes (drt_graph.h); a field the op does not read stays 0, which
 * cf_case_check enforces. Where a default is noted, 0 means it. */
typedef struct {
    drt_op op;
    drt_dtype wt;           /* weight dtype: MATMUL w, EMBED E (0 = f32) */
    int T;                  /* token rows: x, q, ids, the rows KV_WRITE writes */
    int B, Bw;              /* MATMUL: batches of x and of w (0 = 1; Bw divides B) */
    int K, N;               /* MATMUL: x (B,T,K) times w (Bw,N,K), or w (Bw,K,N) with trans_w */
    int trans_w;            /* MATMUL */
    int V, D;               /* EMBED: E is (V, D) */
    int C;                  /* RMSNORM: x is (T, C) */
    int H, G, m;            /* heads; kv groups; kv maps per group (DIFF_ATTN 1 or 2,
                             * KV_WRITE: 0 = a 3-d cache (cap, G, d)) */
    int d;                  /* ROPE x (T, H, d); KV_WRITE rows of (G, m, d) */
    int dk, dv;             /* attention: q/k and v widths; GROUPNORM x (T, H, dv) */
    int S;                  /* DUAL_SOFTMAX: scores (H, T, S), p0 = S - T */
    int cap;                /* KV_WRITE: cache rows */
    int rows, cols;         /* SWIGLU, SIGMOID, ADD */
    int nd, ne[4], perm[4]; /* PERMUTE: x (ne[0..nd)), axes perm[0..nd) */
    int p0;                 /* position of the first row (attention S = p0 + T,
                             * ROPE, KV_WRITE) */
    int runs[8];            /* ROPE, KV_WRITE, attention: the T rows are the
                             * sequences of runs[] (row counts, ending at a 0),
                             * sequence i at positions p0*i/(n-1).. in slot n-1-i
                             * of the cache (cases.c, case_rows); unset: one
                             * sequence at p0 */
    float mag;              /* inputs uniform in [-mag, mag]; attention: of q (the
                             * logit scale) (0 = 1) */
    float scale;            /* MATMUL, GROUPNORM */
    float eps;              /* RMSNORM */
    float lambda;           /* DUAL_SOFTMAX, DIFF_ATTN: the scalar lambda */
    int lambda_th;          /* DUAL_SOFTMAX, DIFF_ATTN: a per-token lambda (T, H) instead */
    int no_weight;          /* RMSNORM, GROUPNORM: no weight vector */
    int decomposed;         /* DIFF_ATTN: the decomposed lowering */
    drt_dtype kvt;          /* KV_WRITE: the cache's type; ATTN, DIFF_ATTN: k and v's
                             * (0 = f32; f16, q8_0: drt_kv.h) */
} cf_opcase;

extern const cf_opcase CF_CASES[]; /* the conformance table */
extern const int CF_N_CASES;
extern const cf_opcase CF_PERF_CASES[]; /* --perf shapes */
extern const int CF_N_PERF;

#define CF_MAX_ROWS 1024 /* rows of a position op's case */

/* How a case's inputs are drawn (runner.c). IN_UNIT: uniform in [0,1)
 * (lambda); IN_INV_FREQ: theta-10000 RoPE frequencies; IN_CACHE: rows no row of the case
 * attends are NaN, never to be read; IN_KV_DST: the rows KV_WRITE must write
 * start as NaN */
enum { IN_UNIFORM, IN_IDS, IN_UNIT, IN_INV_FREQ, IN_CACHE, IN_KV_DST };

/* A case built as a graph. */
typedef struct {
    drt_graph *g;
    drt_tensor *node; /* the op under test */
    drt_tensor *out;  /* what is compared: the node (for KV_WRITE, the cache) */
    drt_tensor *in[5];
    int kind[5];
    float mag[5];
    int bound[5]; /* IN_IDS: exclusive upper bound */
    int n_in;
    int p0;
    /* the position ops' rows (drt_exec): n_rows of base, pos; slot_rows:
     * cache rows of each sequence's slot */
    int n_rows, slot_rows;
    int32_t rows[2 * CF_MAX_ROWS];
    char desc[320];
} cf_built;

/* DRT_OK, or DRT_ERR_INVALID_ARG naming a field c's op does not read. */
drt_status cf_case_check(const cf_opcase *c);
/* Builds c into b->g (freed with drt_graph_free(b->g) whatever the status). */
drt_status cf_build_case(const cf_opcase *c, cf_built *b);
/* The dtype the reports give a case: the weights' (MATMUL, EMBED), else f32. */
const char *cf_case_dtype(const cf_opcase *c);

/* ---- running (runner.c) ------------------------------------------------------ */

/* Runs c on be; *out_host receives the output (malloc'd) when it ran. With
 * times != NULL, runs warmup + repeats times and writes each duration. With
 * keep, the built case is kept there (the caller frees keep->g). */
drt_status cf_run_case(drt_backend *be, const cf_opcase *c, uint64_t seed, float **out_host, int64_t *n_out,
                       int *supported, double *times, int warmup, int repeats, cf_built *keep);
/* Is cache row r one that a row of b attends (base .. base + pos)? */
int cf_row_visible(const cf_built *b, int64_t r);
/* The verdict of out against the reference: NMSE within bound, and no NaN/Inf
 * where the reference is finite (a poisoned element left unwritten). */
void cf_compare(const float *out, const float *ref, int64_t n, double bound, cf_case *c);
/* Every selected case of the table on every backend against ref. */
drt_status cf_run_op_cases(cf_run *run, drt_backend *ref);

/* ---- records (results.c) ----------------------------------------------------- */

/* a new record, zeroed but for its kind and backend; NULL when out of memory */
cf_case *cf_add_case(cf_run *run, int kind, int be);
/* the verdict for a backend that did not run the case: unavailable, or
 * (required) a failure */
void cf_not_run(const cf_backend *b, cf_case *c);

/* ---- names (select.c) -------------------------------------------------------- */

/* is name in the comma list (case-insensitive) */
int cf_in_list(const char *list, const char *name);
/* does --op select op (no list: every op) */
int cf_op_selected(const drt_conform_opts *o, drt_op op);
/* does the run select case c: its op, and for KV_WRITE, ATTN and DIFF_ATTN
 * its KV cache type is the run's (--kv-type, cf_kv_type) */
int cf_case_selected(const drt_conform_opts *o, const cf_opcase *c);
/* a usage error: sets r->usage_error, returns DRT_ERR_INVALID_ARG */
drt_status DRT_PRINTF(2, 3) cf_usage(drt_conform_result *r, const char *fmt, ...);
/* Checks the names in o (ops, backends, --require, --device) against the op
 * table and the registry; fills run->be with the selected backends, opened
 * on their devices. */
drt_status cf_select_backends(const drt_conform_opts *o, cf_run *run, drt_conform_result *r);

/* The KV cache type of every model session (select.c): the kv_type
 * setting, else f32 (the reference's), so that each backend is compared at
 * the same type. */
const char *cf_kv_type(const drt_settings *set);

/* ---- whole models (models.c) ------------------------------------------------- */

typedef struct {
    char name[256], path[1024];
} cf_model_ref;

/* --models DIR: DIR itself when it is a model, else every model directory in
 * it (sorted); other directories are recorded in run->skipped. No model at
 * all is a usage error. */
drt_status cf_find_models(const char *dir, cf_run *run, cf_model_ref **out, int *n_out, drt_conform_result *r);
/* One session of model m on each available backend of run, kept open while
 * a model's cases run (*out: run->nbe entries, NULL where none opened): the
 * cases' own sessions then share its weights and backend instance
 * (session/device_weights.c) instead of each making a new one, which costs
 * every pipeline again on Vulkan (lavapipe compiles each one for tens of ms).
 * A backend that cannot open one is left to the cases to report. */
drt_session **cf_keep_open(const cf_run *run, drt_model *m);
void cf_keep_close(const cf_run *run, drt_session **keep);
/* The batch_* cases of model m (conform/batch.c) on every backend, its
 * sequences made of prompt's tokens; the caller holds cf_keep_open's
 * sessions around them. */
drt_status cf_run_batch_cases(cf_run *run, drt_model *m, const cf_model_ref *mref, const int32_t *prompt, int n_prompt);
/* Every model on every backend against the reference's logits and greedy
 * tokens, then its batch_* cases. */
drt_status cf_run_models(cf_run *run, const cf_model_ref *models, int n_models);

/* ---- --perf (perf.c) --------------------------------------------------------- */

drt_status cf_run_perf(cf_run *run);

/* ---- the text report (report_text.c) ----------------------------------------- */

/* one row per op and per model, one column per backend, then the failures */
void cf_print_table(const cf_run *run, FILE *out);

#endif
