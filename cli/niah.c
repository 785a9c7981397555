/* diffrt niah: multi-needle retrieval evaluation (docs/niah_spec.md), the
 * paper's Table 2 / Figure 5 accuracy per depth x context length and, with
 * --attention, its Table 3 attention to the answer span vs the rest. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "outfile.h"
#include "diffrt/diffrt.h"
#include "niah.h"
#include "ref_ops.h"
#include "safetensors.h" /* drt_read_text_file */

#define MAX_LIST 32

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int json_int(const cJSON *o, const char *key, int *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x)) return 0;
    *out = x->valueint;
    return 1;
}

/* Per-sample agreement of this run's records with another run's (python/niah/eval.py's
 * niah_python.json, or a `diffrt niah --json` file): samples are matched by (ctx, depth,
 * index, query); every sample of this run must be in the file. Prints the agreement;
 * returns 0 when the answers agree on >= min_agree of the samples, 1 when they do not,
 * 2 when the file cannot be used. */
static int compare_runs(const char *path, const cJSON *ours, int needles, int queries,
                        unsigned long long seed, double min_agree) {
    char *txt = NULL;
    if (drt_read_text_file(path, &txt, NULL) != DRT_OK) {
        fprintf(stderr, "diffrt: niah: --compare %s: cannot read: %s\n", path, drt_last_error());
        return 2;
    }
    cJSON *root = cJSON_Parse(txt);
    free(txt);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "samples");
    const cJSON *summ = cJSON_GetObjectItemCaseSensitive(root, "summary");
    int rc = 2;
    if (!cJSON_IsArray(arr) || !cJSON_IsObject(summ)) {
        fprintf(stderr, "diffrt: niah: --compare %s: not a niah result (expected an object with "
                        "\"summary\" and \"samples\")\n", path);
        goto out;
    }
    {
        int fn = 0, fr = 0;
        const cJSON *fs = cJSON_GetObjectItemCaseSensitive(summ, "seed");
        if (!json_int(summ, "needles", &fn) || !json_int(summ, "queries", &fr) || !cJSON_IsNumber(fs) ||
            fn != needles || fr != queries || fs->valuedouble != (double)seed) {
            fprintf(stderr, "diffrt: niah: --compare %s: made with other settings (N, R or seed) than this run "
                            "(N=%d R=%d seed %llu)\n", path, needles, queries, seed);
            goto out;
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
            fprintf(stderr, "diffrt: niah: --compare %s: has no sample ctx %d depth %d%% index %d query %d "
                            "(evaluate the same ctx/depths/samples)\n", path, c, d, k, q);
            goto out;
        }
        const char *mine = cJSON_GetObjectItemCaseSensitive(o, "predicted")->valuestring;
        int ok = strcmp(mine, tp->valuestring) == 0;
        agree += ok;
        n++;
        const cJSON *ga = cJSON_GetObjectItemCaseSensitive(o, "generated_ids");
        const cJSON *gb = cJSON_GetObjectItemCaseSensitive(t, "generated_ids");
        same_ids += cJSON_Compare(ga, gb, 1);
        if (!ok && shown++ < 10)
            printf("  differs: ctx %d depth %d%% index %d query %d: this run \"%s\", %s \"%s\"\n", c, d, k, q,
                   mine, path, tp->valuestring);
    }
    printf("\nper-sample agreement with %s: answers %d/%d (%.3f), identical generated tokens %d/%d\n", path, agree,
           n, n ? (double)agree / n : 0.0, same_ids, n);
    rc = n && (double)agree >= min_agree * n ? 0 : 1;
    if (rc) printf("FAIL: agreement %.3f is below --min-agree %.3f\n", n ? (double)agree / n : 0.0, min_agree);
out:
    cJSON_Delete(root);
    return rc;
}

int cmd_niah(int argc, char **argv) {
    const char *model = NULL, *backend = "cpu", *device = NULL, *json = NULL, *compare = NULL;
    const char *logits_vs = NULL; /* a reference model whose last-token logits each prompt is compared with */
    int attn_bits = 0;            /* > 0: the reference path's attention logits quantized (ref_ops.h) */
    int needles = 1, queries = 1, samples = 40, attention = 0, no_fallback = 0, threads = 0;
    double min_accuracy = -1, min_agree = 0.99;
    int ctxs[MAX_LIST], n_ctx = 0, depths[MAX_LIST] = {0, 25, 50, 75, 100}, n_depth = 5;
    unsigned long long seed = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli_usage(stdout);
            return 0;
        } else if (strcmp(a, "--attention") == 0) {
            attention = 1;
            continue;
        } else if (strcmp(a, "--no-fallback") == 0) {
            no_fallback = 1;
            continue;
        } else if (!v) {
            if (!cli_word_in(a, "--model --backend --device --threads --json --compare --logits-vs --attn-bits "
                                "--min-accuracy --min-agree --needles --queries --samples --seed --ctx --depths"))
                return cli_die("niah: unknown argument \"%s\" (see diffrt --help)", a);
            return cli_die("niah: %s needs a value (see diffrt --help)", a);
        } else if (strcmp(a, "--model") == 0) {
            model = v;
        } else if (strcmp(a, "--backend") == 0) {
            backend = v;
        } else if (strcmp(a, "--device") == 0) {
            device = v;
        } else if (strcmp(a, "--threads") == 0) {
            if (!cli_parse_long(v, 1, 1024, &n)) return cli_die("niah: --threads wants an integer in [1, 1024], got \"%s\"", v);
            threads = (int)n;
        } else if (strcmp(a, "--json") == 0) {
            json = v;
        } else if (strcmp(a, "--compare") == 0) {
            compare = v;
        } else if (strcmp(a, "--logits-vs") == 0) {
            logits_vs = v;
        } else if (strcmp(a, "--attn-bits") == 0) {
            if (!cli_parse_long(v, 2, 24, &n)) return cli_die("niah: --attn-bits wants 2..24, got \"%s\"", v);
            attn_bits = (int)n;
        } else if (strcmp(a, "--min-accuracy") == 0 || strcmp(a, "--min-agree") == 0) {
            int is_acc = strcmp(a, "--min-accuracy") == 0;
            char *end;
            errno = 0;
            double x = strtod(v, &end);
            if (errno || end == v || *end || !(x >= 0 && x <= 1))
                return cli_die(is_acc ? "niah: --min-accuracy wants a fraction 0..1, got \"%s\""
                                      : "niah: --min-agree wants a fraction 0..1, got \"%s\"",
                               v);
            *(is_acc ? &min_accuracy : &min_agree) = x;
        } else if (strcmp(a, "--needles") == 0) {
            if (!cli_parse_long(v, 1, 64, &n)) return cli_die("niah: --needles wants 1..64, got \"%s\"", v);
            needles = (int)n;
        } else if (strcmp(a, "--queries") == 0) {
            if (!cli_parse_long(v, 1, 64, &n)) return cli_die("niah: --queries wants 1..64, got \"%s\"", v);
            queries = (int)n;
        } else if (strcmp(a, "--samples") == 0) {
            if (!cli_parse_long(v, 1, 1000000, &n)) return cli_die("niah: --samples wants an integer >= 1, got \"%s\"", v);
            samples = (int)n;
        } else if (strcmp(a, "--seed") == 0) {
            char *end;
            errno = 0;
            seed = strtoull(v, &end, 10);
            if (errno || end == v || *end || v[0] == '-') return cli_die("niah: --seed wants an integer >= 0, got \"%s\"", v);
        } else if (strcmp(a, "--ctx") == 0) {
            if (!cli_parse_list(v, 1, 1 << 20, ctxs, MAX_LIST, &n_ctx)) return cli_die("niah: --ctx wants comma-separated lengths, got \"%s\"", v);
        } else if (strcmp(a, "--depths") == 0) {
            if (!cli_parse_list(v, 0, 100, depths, MAX_LIST, &n_depth)) return cli_die("niah: --depths wants comma-separated percents 0..100, got \"%s\"", v);
        } else {
            return cli_die("niah: unknown argument \"%s\" (see diffrt --help)", a);
        }
        i++;
    }
    if (!model) return cli_die("niah: --model DIR is required%s", "");
    int64_t n_prompts; /* with no --ctx, the model's one default length below */
    if (drt_niah_prompt_count(n_ctx ? n_ctx : 1, n_depth, samples, queries, &n_prompts) != DRT_OK)
        return cli_die("%s", drt_last_error());
    if (queries > needles) return cli_die("niah: --queries must not exceed --needles%s", "");
    if (attn_bits && strcmp(backend, "ref") != 0)
        return cli_die("niah: --attn-bits quantizes the reference path's attention logits: it needs --backend ref, "
                       "not %s", backend);
    if (compare && access(compare, R_OK) != 0) return cli_die("niah: --compare %s: cannot read", compare);

    int rc = 1;
    drt_model *m = NULL, *rm = NULL;
    drt_session *s = NULL, *rs = NULL;
    drt_tokenizer *tok = NULL;
    float *logits = NULL, *attn = NULL, *rlogits = NULL;
    double nmse_sum = 0, nmse_max = 0;
    int top1_same = 0, n_cmp = 0;
    cJSON *jarr = json || compare ? cJSON_CreateArray() : NULL;
    char tpath[4096];
    snprintf(tpath, sizeof tpath, "%s/tokenizer.json", model);
    if (drt_model_load(model, &m) != DRT_OK || drt_tokenizer_load(tpath, &tok) != DRT_OK) {
        rc = cli_fail("niah");
        goto done;
    }
    drt_model_info I;
    drt_model_get_info(m, &I);
    if (!n_ctx) ctxs[n_ctx++] = I.max_ctx < 4096 ? I.max_ctx : 4096;
    int max_ctx = 0;
    for (int i = 0; i < n_ctx; i++) max_ctx = ctxs[i] > max_ctx ? ctxs[i] : max_ctx;
    if (max_ctx > I.max_ctx)
        fprintf(stderr,
                "diffrt: warning: niah --ctx %d is past the model's max_position_embeddings %d: "
                "positions from %d on were never trained and retrieval there may degrade\n",
                max_ctx, I.max_ctx, I.max_ctx);
    drt_session_opts so = {.backend = backend, .device = device, .max_ctx = max_ctx + DRT_NIAH_MAX_NEW_TOKENS,
                           .threads = threads};
    if (drt_session_create(m, &so, &s) != DRT_OK) {
        rc = cli_fail("niah");
        goto done;
    }
    logits = malloc(sizeof(float) * (size_t)I.vocab);
    attn = malloc(sizeof(float) * (size_t)(max_ctx + DRT_NIAH_MAX_NEW_TOKENS));
    if (logits_vs) { /* the same prompts through a reference model, on the same backend */
        drt_model_info RI;
        if (drt_model_load(logits_vs, &rm) != DRT_OK || drt_session_create(rm, &so, &rs) != DRT_OK) {
            rc = cli_fail("niah: --logits-vs");
            goto done;
        }
        drt_model_get_info(rm, &RI);
        if (RI.vocab != I.vocab) {
            fprintf(stderr, "diffrt: niah: --logits-vs %s has vocab %d, %s has %d: not comparable\n", logits_vs,
                    RI.vocab, model, I.vocab);
            rc = 2;
            goto done;
        }
        rlogits = malloc(sizeof(float) * (size_t)I.vocab);
    }
    int total = (int)n_prompts, done_n = 0, tty = isatty(2);
    int correct[MAX_LIST][MAX_LIST] = {{0}};
    double att_ans[MAX_LIST] = {0}, att_noise[MAX_LIST] = {0};
    int att_n[MAX_LIST] = {0};
    fprintf(stderr, "niah: %s (%s) on %s: %d prompts (ctx", model, I.arch_name, backend, total);
    for (int c = 0; c < n_ctx; c++) fprintf(stderr, "%s%d", c ? "," : " ", ctxs[c]);
    fprintf(stderr, ", N=%d R=%d, %d samples per depth, seed %llu)\n", needles, queries, samples, seed);
    double t0 = now_s();
    if (attn_bits) {
        drt_ref_analysis hooks = {.attn_bits = attn_bits};
        drt_ref_set_analysis(&hooks);
        fprintf(stderr, "niah: attention logits quantized to %d bits (symmetric, per-row absmax) before softmax\n",
                attn_bits);
    }
    for (int c = 0; c < n_ctx; c++)
        for (int d = 0; d < n_depth; d++)
            for (int k = 0; k < samples; k++) {
                drt_niah_prompt p[64];
                if (drt_niah_make(tok, seed, ctxs[c], needles, queries, depths[d], k, p) != DRT_OK) {
                    rc = cli_fail("niah");
                    goto done;
                }
                for (int r = 0; r < queries; r++) {
                    int32_t gen[DRT_NIAH_MAX_NEW_TOKENS];
                    int ng = 0;
                    drt_session_reset(s);
                    drt_status st = drt_session_forward(s, p[r].ids, p[r].n_ids, logits, 0);
                    double ans = 0, noise = 0, nmse = 0;
                    int same = 0;
                    if (st == DRT_OK && rs) {
                        /* the prompt's last-token logits against the reference model's */
                        drt_session_reset(rs);
                        if (drt_session_forward(rs, p[r].ids, p[r].n_ids, rlogits, 0) != DRT_OK) {
                            for (int q = 0; q < queries; q++) drt_niah_prompt_free(&p[q]);
                            rc = cli_fail("niah: --logits-vs");
                            goto done;
                        }
                        double num = 0, den = 0;
                        int a1 = 0, a2 = 0;
                        for (int v = 0; v < I.vocab; v++) {
                            double e = (double)logits[v] - rlogits[v];
                            num += e * e;
                            den += (double)rlogits[v] * rlogits[v];
                            if (logits[v] > logits[a1]) a1 = v;
                            if (rlogits[v] > rlogits[a2]) a2 = v;
                        }
                        nmse = den > 0 ? num / den : num;
                        same = a1 == a2;
                        nmse_sum += nmse;
                        nmse_max = nmse > nmse_max ? nmse : nmse_max;
                        top1_same += same;
                        n_cmp++;
                    }
                    if (st == DRT_OK && attention) {
                        st = drt_session_last_attention(s, attn);
                        for (int j = 0; j < p[r].question_start; j++) {
                            if (j >= p[r].answer_start && j < p[r].answer_end) ans += attn[j];
                            else noise += attn[j];
                        }
                    }
                    while (st == DRT_OK && ng < DRT_NIAH_MAX_NEW_TOKENS) {
                        int best = 0;
                        for (int v = 1; v < I.vocab; v++)
                            if (logits[v] > logits[best]) best = v;
                        if (best == I.eos_id) break;
                        gen[ng++] = best;
                        if (ng < DRT_NIAH_MAX_NEW_TOKENS) st = drt_session_forward(s, &gen[ng - 1], 1, logits, 0);
                    }
                    char *text = NULL, pred[32] = "";
                    if (st == DRT_OK) st = drt_tokenizer_decode(tok, gen, ng, 1, &text, NULL);
                    if (st != DRT_OK) {
                        for (int q = 0; q < queries; q++) drt_niah_prompt_free(&p[q]);
                        rc = cli_fail("niah");
                        goto done;
                    }
                    drt_niah_predicted(text, pred, sizeof pred);
                    int ok = strcmp(pred, p[r].answer) == 0;
                    correct[c][d] += ok;
                    if (attention) {
                        att_ans[d] += ans;
                        att_noise[d] += noise;
                        att_n[d]++;
                    }
                    if (jarr) {
                        cJSON *o = cJSON_CreateObject();
                        cJSON_AddNumberToObject(o, "ctx", ctxs[c]);
                        cJSON_AddNumberToObject(o, "depth", depths[d]);
                        cJSON_AddNumberToObject(o, "index", k);
                        cJSON_AddNumberToObject(o, "query", r);
                        cJSON_AddStringToObject(o, "city", p[r].city);
                        cJSON_AddStringToObject(o, "answer", p[r].answer);
                        cJSON_AddStringToObject(o, "predicted", pred);
                        cJSON_AddBoolToObject(o, "correct", ok);
                        cJSON_AddItemToObject(o, "generated_ids", cJSON_CreateIntArray(gen, ng));
                        if (rs) {
                            cJSON_AddNumberToObject(o, "logits_nmse", nmse);
                            cJSON_AddBoolToObject(o, "top1_agree", same);
                        }
                        if (attention) {
                            cJSON_AddNumberToObject(o, "attn_answer", ans);
                            cJSON_AddNumberToObject(o, "attn_noise", noise);
                        }
                        cJSON_AddItemToArray(jarr, o);
                    }
                    free(text);
                    done_n++;
                    if (tty || done_n == total || done_n % (total / 20 > 0 ? total / 20 : 1) == 0)
                        fprintf(stderr, "%s[%d/%d] ctx %d depth %d%%: %d correct so far, %.1f s%s", tty ? "\r" : "",
                                done_n, total, ctxs[c], depths[d], correct[c][d], now_s() - t0, tty ? "" : "\n");
                }
                for (int q = 0; q < queries; q++) drt_niah_prompt_free(&p[q]);
            }
    drt_ref_set_analysis(NULL);
    if (tty) fprintf(stderr, "\n");

    printf("multi-needle retrieval accuracy (N=%d, R=%d, %d samples x %d queries per cell, seed %llu)\n", needles,
           queries, samples, queries, seed);
    printf("%-8s", "depth");
    for (int c = 0; c < n_ctx; c++) printf(" ctx %-6d", ctxs[c]);
    printf("\n");
    int all = 0;
    for (int d = 0; d < n_depth; d++) {
        printf("%3d%%    ", depths[d]);
        for (int c = 0; c < n_ctx; c++) {
            printf(" %-10.3f", (double)correct[c][d] / (samples * queries));
            all += correct[c][d];
        }
        printf("\n");
    }
    printf("overall  %.3f (%d/%d)\n", (double)all / total, all, total);
    if (attention) {
        printf("\nattention at the final query token, mean over heads and layers (%s)\n",
               I.arch == DRT_ARCH_TRANSFORMER ? "softmax map" : "differential map A1 - lambda A2");
        printf("%-8s %-12s %-12s\n", "depth", "answer", "noise");
        double ta = 0, tn = 0;
        int tc = 0;
        for (int d = 0; d < n_depth; d++) {
            printf("%3d%%     %-12.4f %-12.4f\n", depths[d], att_ans[d] / att_n[d], att_noise[d] / att_n[d]);
            ta += att_ans[d];
            tn += att_noise[d];
            tc += att_n[d];
        }
        printf("all      %-12.4f %-12.4f\n", ta / tc, tn / tc);
    }
    if (rs && n_cmp)
        printf("\nlogits of the prompt's last token vs %s: NMSE mean %.3g, max %.3g; top-1 agreement %.3f "
               "(%d/%d)\n",
               logits_vs, nmse_sum / n_cmp, nmse_max, (double)top1_same / n_cmp, top1_same, n_cmp);
    if (json) {
        /* the shape of python/niah/eval.py's output: {"summary": {...}, "samples": [...]} */
        cJSON *root = cJSON_CreateObject(), *sm = cJSON_AddObjectToObject(root, "summary");
        cJSON_AddStringToObject(sm, "model", model);
        cJSON_AddStringToObject(sm, "backend", backend);
        cJSON_AddNumberToObject(sm, "needles", needles);
        cJSON_AddNumberToObject(sm, "queries", queries);
        cJSON_AddItemToObject(sm, "ctx", cJSON_CreateIntArray(ctxs, n_ctx));
        cJSON_AddItemToObject(sm, "depths", cJSON_CreateIntArray(depths, n_depth));
        cJSON_AddNumberToObject(sm, "samples", samples);
        cJSON_AddNumberToObject(sm, "seed", (double)seed);
        cJSON_AddNumberToObject(sm, "n_prompts", total);
        cJSON_AddNumberToObject(sm, "accuracy", (double)all / total);
        if (attn_bits) cJSON_AddNumberToObject(sm, "attn_bits", attn_bits);
        if (rs && n_cmp) {
            cJSON_AddStringToObject(sm, "logits_vs", logits_vs);
            cJSON_AddNumberToObject(sm, "logits_nmse_mean", nmse_sum / n_cmp);
            cJSON_AddNumberToObject(sm, "logits_nmse_max", nmse_max);
            cJSON_AddNumberToObject(sm, "top1_agreement", (double)top1_same / n_cmp);
        }
        cJSON_AddItemReferenceToObject(root, "samples", jarr);
        char *txt = cJSON_Print(root);
        cJSON_Delete(root);
        int bad = cli_out_write_text("niah: --json", json, txt);
        free(txt);
        if (bad) goto done;
    }
    rc = 0;
    if (min_accuracy >= 0 && (double)all < min_accuracy * total) {
        printf("FAIL: accuracy %.3f is below --min-accuracy %.3f\n", (double)all / total, min_accuracy);
        rc = 1;
    }
    char fb[512];
    int nfb = drt_session_fallbacks(s, fb, sizeof fb);
    if (nfb) {
        printf("backend %s: %d node runs fell back to the CPU reference: %s\n", backend, nfb, fb);
        if (no_fallback) {
            printf("FAIL: --no-fallback\n");
            rc = 1;
        }
    }
    if (compare) {
        int crc = compare_runs(compare, jarr, needles, queries, seed, min_agree);
        if (crc > rc) rc = crc;
    }
done:
    drt_ref_set_analysis(NULL);
    cJSON_Delete(jarr);
    free(logits);
    free(rlogits);
    free(attn);
    drt_tokenizer_free(tok);
    drt_session_free(s);
    drt_session_free(rs);
    drt_model_free(m);
    drt_model_free(rm);
    return rc;
}
