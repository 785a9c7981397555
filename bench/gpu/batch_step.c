/* bench_gpu_batch_step: the decode step of a batch session of N sequences
 * on one backend, for the batched-decode target of issue 31 (32 sequences
 * vs 1), and a short program to put under a profiler (ncu) to see where a
 * step's time goes.
 *
 * For each N of --seqs: a batch session of N sequences, each prompted with
 * P random tokens (forwards of up to 512 rows), then S decode steps of one
 * row per sequence, every row asking for its logits (as a server's
 * sampling does: a step copies N x vocab floats to the host). Reported per
 * N: the median step time (steps 0 and 1 capture graphs, so not counted)
 * and tokens/s over all sequences; then the same S steps again with no row
 * asking for logits (no LM head, nothing copied back): the difference is
 * what the logits cost.
 *
 *   bench_gpu_batch_step --model DIR [--backend cuda] [--seqs 1,8,32]
 *                        [--prompt P] [--steps S] [--json FILE]
 * (--backend cpu with a small model checks it on a machine without a GPU.) */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffrt/diffrt.h"
#include "drt_util.h"

#define MAX_N 8

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int usage(void) {
    fprintf(stderr, "usage: bench_gpu_batch_step --model DIR [--backend B] [--seqs N,...] [--prompt P] "
                    "[--steps S] [--json FILE]\n");
    return 2;
}

/* one N: *step_s the median decode step */
static int run(drt_model *m, const drt_model_info *I, const char *backend, int N, int P, int S, double *step_s,
               double *bare_s) {
    drt_session_opts so = {.backend = backend};
    drt_batch_opts bo = {.max_seqs = N, .ctx_per_seq = P + 2 * S + 4, .max_batch_rows = 512};
    drt_batch_session *s = NULL;
    int32_t *tok = malloc(sizeof(int32_t) * 512), *seq = malloc(sizeof(int32_t) * 512);
    int8_t *flag = malloc(512);
    float *logits = malloc(sizeof(float) * (size_t)I->vocab * (size_t)N);
    double *t = malloc(sizeof(double) * (size_t)S);
    int rc = 1;
    if (!tok || !seq || !flag || !logits || !t) goto done;
    if (drt_batch_session_create(m, &so, &bo, &s) != DRT_OK) {
        fprintf(stderr, "batch session: %s\n", drt_last_error());
        goto done;
    }
    uint64_t seed = 11;
    int n = 0;
    for (int q = 0; q < N; q++)
        for (int i = 0; i < P; i++) {
            tok[n] = (int32_t)(drt_splitmix64(&seed) % (uint64_t)I->vocab);
            seq[n] = q;
            flag[n] = (int8_t)(i + 1 == P);
            if (++n == 512 || (q + 1 == N && i + 1 == P)) {
                drt_batch b = {.n = n, .token = tok, .seq = seq, .logits = flag};
                if (drt_batch_forward(s, &b, logits) != DRT_OK) {
                    fprintf(stderr, "prefill: %s\n", drt_last_error());
                    goto done;
                }
                n = 0;
            }
        }
    /* S steps with every row's logits, then S without any */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < S; i++) {
            for (int q = 0; q < N; q++) {
                tok[q] = (int32_t)(drt_splitmix64(&seed) % (uint64_t)I->vocab);
                seq[q] = q;
                flag[q] = (int8_t)(pass == 0);
            }
            drt_batch b = {.n = N, .token = tok, .seq = seq, .logits = flag};
            double a = drt_now_s();
            if (drt_batch_forward(s, &b, pass == 0 ? logits : NULL) != DRT_OK) {
                fprintf(stderr, "decode step %d: %s\n", i, drt_last_error());
                goto done;
            }
            t[i] = drt_now_s() - a;
        }
        qsort(t + 2, (size_t)(S - 2), sizeof(double), cmp_d);
        *(pass == 0 ? step_s : bare_s) = t[2 + (S - 2) / 2];
    }
    rc = 0;
done:
    drt_batch_session_free(s);
    free(tok);
    free(seq);
    free(flag);
    free(logits);
    free(t);
    return rc;
}

int main(int argc, char **argv) {
    const char *dir = NULL, *backend = "cuda", *json = NULL, *seqs = "1,8,32";
    int P = 128, S = 16;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) return usage();
        if (strcmp(argv[i], "--model") == 0)
            dir = argv[++i];
        else if (strcmp(argv[i], "--backend") == 0)
            backend = argv[++i];
        else if (strcmp(argv[i], "--seqs") == 0)
            seqs = argv[++i];
        else if (strcmp(argv[i], "--prompt") == 0)
            P = atoi(argv[++i]);
        else if (strcmp(argv[i], "--steps") == 0)
            S = atoi(argv[++i]);
        else if (strcmp(argv[i], "--json") == 0)
            json = argv[++i];
        else
            return usage();
    }
    int ns = 0, nv[MAX_N];
    for (const char *p = seqs; *p && ns < MAX_N;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 512) {
            fprintf(stderr, "bench_gpu_batch_step: --seqs wants counts 1 .. 512, comma-separated (got \"%s\")\n", seqs);
            return 2;
        }
        nv[ns++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    if (!dir || P < 1 || S < 3 || ns == 0) return usage();
    drt_model *m = NULL;
    if (drt_model_load(dir, &m) != DRT_OK) {
        fprintf(stderr, "load: %s\n", drt_last_error());
        return 1;
    }
    drt_model_info I;
    drt_model_get_info(m, &I);
    printf("model %s (%s, %lld parameters), backend %s, prompts of %d tokens, %d steps\n", dir, I.arch_name,
           (long long)I.n_params, backend, P, S);
    printf("%6s %12s %12s %12s %22s\n", "seqs", "step ms", "tok/s", "vs 1 seq", "step ms, no logits");
    cJSON *arr = cJSON_CreateArray();
    double first = 0;
    int rc = 0;
    for (int k = 0; k < ns; k++) {
        double st = 0, bare = 0;
        if (run(m, &I, backend, nv[k], P, S, &st, &bare)) {
            rc = 1;
            break;
        }
        const double tps = nv[k] / st;
        if (k == 0) first = tps;
        printf("%6d %12.3f %12.1f %11.2fx %22.3f\n", nv[k], st * 1e3, tps, tps / first, bare * 1e3);
        fflush(stdout);
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "seqs", nv[k]);
        cJSON_AddNumberToObject(j, "step_s", st);
        cJSON_AddNumberToObject(j, "tokens_per_s", tps);
        cJSON_AddNumberToObject(j, "step_s_no_logits", bare);
        cJSON_AddItemToArray(arr, j);
    }
    if (json && rc == 0) {
        char *txt = cJSON_Print(arr);
        FILE *f = fopen(json, "w");
        if (!f || !txt || fputs(txt, f) < 0) rc = 1;
        if (f) fclose(f);
        free(txt);
    }
    cJSON_Delete(arr);
    drt_model_free(m);
    return rc;
}
