/* What one conform run found, as records: one per backend and one per
 * (case, backend); runner.c and models.c fill them, conform_report.c writes
 * them as the --json object (docs/conform-json.md) and the --junit XML,
 * report_text.c as the text table. Internal. */
#ifndef DRT_CONFORM_REPORT_H
#define DRT_CONFORM_REPORT_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>

#include "drt_conform.h"
#include "drt_graph.h"

#define CF_F32_NMSE 1e-8     /* f32 paths, every op */
#define CF_REDUCED_NMSE 5e-4 /* the loosest bound a declared reduced-precision mode may have */
#define CF_MODEL_NMSE 1e-6   /* whole-model logits */
#define CF_GREEDY_N 32       /* greedy tokens that must be identical */
#define CF_MAX_BE 16

/* One vocabulary for every case, lowercase (docs/conform-json.md):
 *   pass         ran and met its bound
 *   fail         did not, or ran into an error; on a required backend also an
 *                unsupported op, a model node that fell back to the CPU, or
 *                the backend being unavailable
 *   unsupported  the backend does not run this op (not required)
 *   unavailable  the backend is not compiled in, has no device or did not
 *                start (not required) */
typedef enum { CF_PASS, CF_FAIL, CF_UNSUPPORTED, CF_UNAVAILABLE, CF_N_STATUS } cf_status;
extern const char *const CF_STATUS_NAME[CF_N_STATUS];

typedef struct {
    const char *name;
    drt_backend *be; /* NULL: unavailable */
    int required;
    char why[300];        /* unavailable: why */
    int device;           /* the device index in use; -1 when unavailable */
    const char *dev_from; /* "--device", "DIFFRT_DEVICE" or "default" */
    char dev_sel[128];    /* the selector as given ("" for the default) */
    char dev_desc[256];   /* the backend's one-line description of it */
    drt_device_props props;
    int have_props;
    const char *precision; /* "f32", "bf16", "fast", ... */
    double model_bound;
} cf_backend;

/* an op case; a whole model against the reference; a batch_* case of a
 * model (conform/batch.c: its op field holds the case's name) */
enum { CF_KIND_OP, CF_KIND_MODEL, CF_KIND_BATCH };

typedef struct {
    int kind;
    const char *op;    /* op name (CF_KIND_OP), batch case name (CF_KIND_BATCH) */
    char model[256];   /* model name (CF_KIND_MODEL, CF_KIND_BATCH) */
    char path[1024];   /* model directory */
    int be;            /* index into cf_run.be */
    char desc[320];    /* shapes and parameters (ops), layout, dtype and prompt (models) */
    const char *dtype; /* weight dtype (MATMUL w, EMBED E, the model's), else f32 */
    uint64_t seed;
    int has_seed;
    cf_status st;
    int measured; /* nmse and max_abs_err are set */
    double nmse, maxerr;
    int nonfinite; /* the output had NaN/Inf where the reference had none */
    double bound;  /* the NMSE bound in force; 0 when nothing ran */
    double time_s;
    int fallbacks;         /* models: node runs on the CPU reference instead of the backend */
    int greedy_first_diff; /* models: first differing greedy token, -1 none */
    int unsupported;       /* the backend refused a node of the case (supports()) */
    /* fail: what failed, the JUnit failure type: "nmse", "nonfinite",
     * "greedy", "error", "fallback", "unsupported", "unavailable" */
    const char *fail_type;
    char detail[400];
} cf_case;

typedef struct {
    char path[1024], why[200];
} cf_skipped;

typedef struct {
    const drt_conform_opts *o;
    cf_backend be[CF_MAX_BE];
    int nbe;
    cf_case *cases;
    int n_cases, cap_cases;
    cf_skipped *skipped; /* --models: directories that are not models */
    int n_skipped;
    char (*batch_skipped)[256]; /* --quick: models whose batch cases did not run */
    int n_batch_skipped;
    cJSON *perf;         /* --perf records (an array), else NULL */
    double t_start;      /* CLOCK_MONOTONIC */
    char started_at[32]; /* UTC, ISO 8601 */
    char error[400];     /* the harness stopped: why ("" when it did not) */
} cf_run;

/* counts of cases per status, over all backends (be < 0) or one */
void cf_count(const cf_run *run, int be, int counts[CF_N_STATUS]);
/* Writes the reports; DRT_OK or an I/O error naming the file. */
drt_status cf_write_json(const cf_run *run, FILE *f, const char *path);
drt_status cf_write_junit(const cf_run *run, FILE *f, const char *path);
/* One line naming a case completely (op or model, shape, dtype, seed, the
 * error against its bound): failure messages, in the text report too. */
void cf_case_line(const cf_run *run, const cf_case *c, char *buf, size_t n);

#endif
