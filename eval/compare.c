/* niah --compare (compare.h). */
#include "compare.h"

#include <stdlib.h>
#include <string.h>

#include "diffrt/diffrt.h"
#include "drt_error.h"
#include "safetensors.h" /* drt_read_text_file */

static int json_int(const cJSON *o, const char *key, int *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x)) return 0;
    *out = x->valueint;
    return 1;
}

int drt_niah_compare(const char *path, const cJSON *ours, int needles, int queries, unsigned long long seed,
                     double min_agree, FILE *out) {
    char *txt = NULL;
    if (drt_read_text_file(path, &txt, NULL) != DRT_OK) {
        drt_set_error(DRT_ERR_IO, "--compare %s: cannot read: %s", path, drt_last_error());
        return 2;
    }
    /* the whole file is the one value: cJSON_Parse stops after it */
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(txt, &end, 1);
    if (!root) {
        drt_set_error(DRT_ERR_FORMAT, "--compare %s: not valid JSON (error near byte %zu)", path,
                      end && end >= txt ? (size_t)(end - txt) : (size_t)0);
        free(txt);
        return 2;
    }
    free(txt);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "samples");
    const cJSON *summ = cJSON_GetObjectItemCaseSensitive(root, "summary");
    int rc = 2;
    if (!cJSON_IsArray(arr) || !cJSON_IsObject(summ)) {
        drt_set_error(DRT_ERR_FORMAT,
                      "--compare %s: not a niah result (expected an object with "
                      "\"summary\" and \"samples\")",
                      path);
        goto done;
    }
    {
        int fn = 0, fr = 0;
        const cJSON *fs = cJSON_GetObjectItemCaseSensitive(summ, "seed");
        if (!json_int(summ, "needles", &fn) || !json_int(summ, "queries", &fr) || !cJSON_IsNumber(fs) ||
            fn != needles || fr != queries || fs->valuedouble != (double)seed) {
            drt_set_error(DRT_ERR_INVALID_ARG,
                          "--compare %s: made with other settings (N, R or seed) than this run "
                          "(N=%d R=%d seed %llu)",
                          path, needles, queries, seed);
            goto done;
        }
    }
    int n = 0, agree = 0, same_ids = 0, shown = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, ours) {
        int c = 0, d = 0, k = 0, q = 0;
        json_int(o, "ctx", &c), json_int(o, "depth", &d), json_int(o, "index", &k), json_int(o, "query", &q);
        const cJSON *t = NULL, *x;
        cJSON_ArrayForEach(x, arr) {
            int c2, d2, k2, q2;
            if (json_int(x, "ctx", &c2) && json_int(x, "depth", &d2) && json_int(x, "index", &k2) &&
                json_int(x, "query", &q2) && c2 == c && d2 == d && k2 == k && q2 == q) {
                t = x;
                break;
            }
        }
        const cJSON *tp = t ? cJSON_GetObjectItemCaseSensitive(t, "predicted") : NULL;
        if (!cJSON_IsString(tp)) {
            drt_set_error(DRT_ERR_INVALID_ARG,
                          "--compare %s: has no sample ctx %d depth %d%% index %d query %d "
                          "(evaluate the same ctx/depths/samples)",
                          path, c, d, k, q);
            goto done;
        }
        const char *mine = cJSON_GetObjectItemCaseSensitive(o, "predicted")->valuestring;
        int ok = strcmp(mine, tp->valuestring) == 0;
        agree += ok;
        n++;
        const cJSON *ga = cJSON_GetObjectItemCaseSensitive(o, "generated_ids");
        const cJSON *gb = cJSON_GetObjectItemCaseSensitive(t, "generated_ids");
        same_ids += cJSON_Compare(ga, gb, 1);
        if (!ok && shown++ < 10)
            fprintf(out, "  differs: ctx %d depth %d%% index %d query %d: this run \"%s\", %s \"%s\"\n", c, d, k, q,
                    mine, path, tp->valuestring);
    }
    fprintf(out, "\nper-sample agreement with %s: answers %d/%d (%.3f), identical generated tokens %d/%d\n", path,
            agree, n, n ? (double)agree / n : 0.0, same_ids, n);
    rc = n && (double)agree >= min_agree * n ? 0 : 1;
    if (rc) fprintf(out, "FAIL: agreement %.3f is below --min-agree %.3f\n", n ? (double)agree / n : 0.0, min_agree);
done:
    cJSON_Delete(root);
    return rc;
}
