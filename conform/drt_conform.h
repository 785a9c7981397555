/* The conformance harness (docs/design.md section 6): every op case on every
 * selected backend against the CPU reference, whole models, and (with perf)
 * timings from the op table's napkin math. */
#ifndef DRT_CONFORM_H
#define DRT_CONFORM_H

#include <stdio.h>

#include "diffrt/diffrt.h"

typedef struct {
    const char *backends;         /* comma list; NULL/"" = every compiled-in/registered backend */
    const char *ops;              /* comma list of op names, "none" = no op cases; NULL/"" = all */
    const char *require;          /* comma list: unavailable, unsupported or fallback = failure */
    const char *devices;          /* "BACKEND=SEL[,BACKEND=SEL]": SEL an index or a case-insensitive
                                   * name substring; never ref. A backend not named here takes
                                   * DIFFRT_DEVICE (ref never does), else its default device */
    const char *models_dir;       /* a model directory (config.json), or a folder of them; NULL = none */
    const char *json_path;        /* the run as one JSON object (docs/conform-json.md); NULL = none */
    const char *junit_path;       /* JUnit XML: a testsuite per backend, a testcase per case; NULL = none */
    int perf;                     /* time the perf shapes instead of checking the conformance table */
    int repeats, warmup;          /* perf: median of repeats after warmup runs */
    int list;                     /* print the case table and exit */
    int quick;                    /* --models: the batch_* cases on the first model of each
                                   * architecture only (every model's logits and greedy
                                   * tokens still); the others are named in the report */
    const drt_settings *settings; /* for every backend checked and its model sessions (the
                                   * CLI's --set); NULL = none. The oracle ref never takes them */
    FILE *out;                    /* where the report goes; NULL = silent */
} drt_conform_opts;

typedef struct {
    int pass, fail, unsupported; /* cases (per backend); fail includes a required
                                  * backend's unsupported ops, fallbacks and absence */
    int unavailable_required;    /* required backends that are unavailable */
    int usage_error;             /* the options name an op, backend, device or model
                                  * directory that does not exist: nothing ran, the
                                  * status is DRT_ERR_INVALID_ARG (the CLI exits 2) */
} drt_conform_result;

/* DRT_OK when the harness itself ran (see r for verdicts); r->fail > 0 or
 * r->unavailable_required > 0 means the run failed. */
drt_status drt_conform_run(const drt_conform_opts *o, drt_conform_result *r);

#endif
