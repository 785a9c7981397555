/* Per-sample agreement of a `diffrt niah` run with another run of the same
 * settings (python/niah/eval.py's niah_python.json, or `diffrt niah --json`
 * output): niah --compare. */
#ifndef DRT_EVAL_COMPARE_H
#define DRT_EVAL_COMPARE_H

#include <stdio.h>

#include <cjson/cJSON.h>

/* ours: this run's sample records (the "samples" array of --json). Samples
 * are matched by (ctx, depth, index, query); every one of ours must be in
 * the file at path. Writes the first 10 differing answers and the
 * agreement to out. 0: the answers agree on >= min_agree of the samples;
 * 1: they do not (a FAIL line on out); 2: the file cannot be used, the
 * reason in drt_last_error() ("--compare PATH: ..."). */
int drt_niah_compare(const char *path, const cJSON *ours, int needles, int queries, unsigned long long seed,
                     double min_agree, FILE *out);

#endif
