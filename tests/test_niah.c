/* The C multi-needle generator (eval/niah.c) against the python reference's
 * committed test vectors (python/niah/samples.jsonl, docs/niah_spec.md):
 * byte-identical prompt text, identical prompt ids, the same answer, answer
 * span and question start, for every sample. Also the judging rule, the
 * attention split and the statistics of eval/analysis.h. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "compare.h"
#include "drt_test.h"
#include "niah.h"
#include "safetensors.h"

#ifndef NIAH_DIR
#define NIAH_DIR DRT_FIXTURES_DIR "/../../python/niah"
#endif

static int near(double a, double b, double rel) {
    return fabs(a - b) <= rel * fabs(b) + 1e-12;
}

/* the scorer's attention split and logits comparison, the Table 5 statistics */
static void check_scoring(void) {
    const float attn[7] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f};
    drt_niah_prompt p = {.answer_start = 2, .answer_end = 4, .question_start = 6};
    double ans = -1, noise = -1;
    drt_niah_attention(attn, &p, &ans, &noise); /* the question (index 6 on) counts for neither */
    DRT_CHECK(near(ans, 0.7, 1e-6) && near(noise, 1.4, 1e-6), "attention split %g / %g, expected 0.7 / 1.4", ans,
              noise);

    static const struct {
        float a[3], ref[3];
        double nmse;
        int same;
    } lc[] = {
        {{1, 2, 3}, {1, 2, 3}, 0, 1},
        {{0, 0, 1}, {0, 1, 0}, 2, 0},       /* sum (a-r)^2 / sum r^2 = 2 / 1 */
        {{1, 0, 0}, {0, 0, 0}, 1, 1},       /* r all zero: the plain sum; both argmax 0 */
        {{2, 2, 1}, {1, 2, 2}, 2.0 / 9, 0}, /* first maximum: 0 vs 1 */
    };
    for (size_t i = 0; i < sizeof lc / sizeof lc[0]; i++) {
        double nmse = -1;
        int same = -1;
        drt_logits_compare(lc[i].a, lc[i].ref, 3, &nmse, &same);
        DRT_CHECK(near(nmse, lc[i].nmse, 1e-9) && same == lc[i].same,
                  "logits case %zu: nmse %g same %d, expected %g %d", i, nmse, same, lc[i].nmse, lc[i].same);
    }

    drt_mag_stats a, b, both;
    DRT_CHECK(drt_mag_stats_init(&a) == DRT_OK && drt_mag_stats_init(&b) == DRT_OK, "%s", drt_last_error());
    DRT_CHECK(drt_mag_stats_median(&a) == 0, "median of nothing %g", drt_mag_stats_median(&a));
    for (int i = 1; i <= 12; i++) drt_mag_stats_add(&a, i % 2 ? i : -i); /* |x| = 1..12 */
    DRT_CHECK(a.n == 12 && a.top[0] == 12 && a.top[DRT_STATS_TOPK - 1] == 3, "top-1 %g top-10 %g of 1..12", a.top[0],
              a.top[DRT_STATS_TOPK - 1]);
    DRT_CHECK(near(drt_mag_stats_median(&a), 6, 0.0012), "median of 1..12 %g, expected 6 (the lower middle)",
              drt_mag_stats_median(&a));
    const double out_of_range[] = {0, 1e-20, 1e20};
    for (int i = 0; i < 3; i++) drt_mag_stats_add(&b, out_of_range[i]);
    DRT_CHECK(b.zeros == 1 && b.below == 1 && b.above == 1 && b.top[0] == 1e20, "zeros %llu below %llu above %llu",
              (unsigned long long)b.zeros, (unsigned long long)b.below, (unsigned long long)b.above);
    DRT_CHECK(drt_mag_stats_pool(&a, &b, &both) == DRT_OK, "%s", drt_last_error());
    DRT_CHECK(both.n == 15 && both.top[0] == 1e20 && both.top[1] == 12 && both.top[DRT_STATS_TOPK - 1] == 4,
              "pooled n %llu top %g %g .. %g", (unsigned long long)both.n, both.top[0], both.top[1],
              both.top[DRT_STATS_TOPK - 1]);
    /* 15 values: 0, 1e-20 (the two below every bin), 1..12, 1e20: the 8th is 6 */
    DRT_CHECK(near(drt_mag_stats_median(&both), 6, 0.0012), "pooled median %g, expected 6",
              drt_mag_stats_median(&both));
    drt_mag_stats_free(&a);
    drt_mag_stats_free(&b);
    drt_mag_stats_free(&both);
}

/* niah --compare against a file of two samples: agreement, its threshold,
 * and the files it refuses */
static void check_compare(void) {
    const char *path = DRT_TMP_DIR "/test_niah_compare.json";
    FILE *f = fopen(path, "w");
    DRT_CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs("{\"summary\": {\"needles\": 1, \"queries\": 1, \"seed\": 7}, \"samples\": ["
          "{\"ctx\": 64, \"depth\": 0, \"index\": 0, \"query\": 0, \"predicted\": \"123\", \"generated_ids\": [1]},"
          "{\"ctx\": 64, \"depth\": 0, \"index\": 1, \"query\": 0, \"predicted\": \"456\", \"generated_ids\": [2]}]}",
          f);
    fclose(f);
    static const struct {
        const char *second; /* this run's prediction of sample 1 */
        int index1, needles;
        double min_agree;
        int rc;
        const char *says; /* in the output (rc 0, 1) or the error (rc 2) */
    } cases[] = {
        {"456", 1, 1, 1.0, 0, "answers 2/2 (1.000), identical generated tokens 1/2"},
        {"999", 1, 1, 0.5, 0, "differs: ctx 64 depth 0% index 1 query 0: this run \"999\""},
        {"999", 1, 1, 0.9, 1, "FAIL: agreement 0.500 is below --min-agree 0.900"},
        {"456", 1, 2, 0.9, 2, "made with other settings (N, R or seed) than this run (N=2 R=1 seed 7)"},
        {"456", 5, 1, 0.9, 2, "has no sample ctx 64 depth 0% index 5 query 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *ours = cJSON_CreateArray();
        for (int k = 0; k < 2; k++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "ctx", 64);
            cJSON_AddNumberToObject(o, "depth", 0);
            cJSON_AddNumberToObject(o, "index", k ? cases[i].index1 : 0);
            cJSON_AddNumberToObject(o, "query", 0);
            cJSON_AddStringToObject(o, "predicted", k ? cases[i].second : "123");
            int id = 1;
            cJSON_AddItemToObject(o, "generated_ids", cJSON_CreateIntArray(&id, 1));
            cJSON_AddItemToArray(ours, o);
        }
        char buf[2048] = "";
        FILE *out = fmemopen(buf, sizeof buf - 1, "w");
        int rc = drt_niah_compare(path, ours, cases[i].needles, 1, 7, cases[i].min_agree, out);
        fclose(out);
        const char *text = rc == 2 ? drt_last_error() : buf;
        DRT_CHECK(rc == cases[i].rc && strstr(text, cases[i].says), "compare case %zu: rc %d (expected %d), \"%s\"", i,
                  rc, cases[i].rc, text);
        cJSON_Delete(ours);
    }
    cJSON *none = cJSON_CreateArray();
    int rc = drt_niah_compare(DRT_FIXTURES_DIR "/hf_llama_gqa/config.json", none, 1, 1, 7, 0.9, stdout);
    DRT_CHECK(rc == 2 && strstr(drt_last_error(), "not a niah result"), "a config.json compared: rc %d, %s", rc,
              drt_last_error());
    /* a second value after the result (cJSON_Parse stopped after the first) */
    f = fopen(path, "w");
    if (f) {
        fputs("{\"summary\": {\"needles\": 1, \"queries\": 1, \"seed\": 7}, \"samples\": []}\n{}", f);
        fclose(f);
    }
    rc = drt_niah_compare(path, none, 1, 1, 7, 0.9, stdout);
    DRT_CHECK(rc == 2 && strstr(drt_last_error(), "test_niah_compare.json: not valid JSON"),
              "a result with text after it: rc %d, %s", rc, drt_last_error());
    rc = drt_niah_compare(DRT_TMP_DIR "/no_such_file.json", none, 1, 1, 7, 0.9, stdout);
    DRT_CHECK(rc == 2 && strstr(drt_last_error(), "no_such_file.json: cannot read"), "a missing file: rc %d, %s", rc,
              drt_last_error());
    cJSON_Delete(none);
    remove(path);
}

/* the tables, printed from a tally: lengths as columns, depths as rows */
static void check_tables(void) {
    static const int ctxs[2] = {128, 256}, depths[3] = {0, 50, 100};
    const drt_niah_grid g = {
        .needles = 2, .queries = 2, .samples = 5, .seed = 9, .ctxs = ctxs, .depths = depths, .n_ctx = 2, .n_depth = 3};
    drt_niah_tally t;
    memset(&t, 0, sizeof t);
    t.correct[0][0] = 10, t.correct[1][0] = 5, t.correct[0][2] = 1; /* of 10 per cell */
    for (int d = 0; d < 3; d++) t.att_ans[d] = 0.5 * (d + 1), t.att_noise[d] = 1, t.att_n[d] = 2;
    char buf[4096] = "";
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    int all = drt_niah_print_accuracy(f, &g, &t, 60);
    drt_niah_print_attention(f, &g, &t, 1);
    fclose(f);
    static const char *const says[] = {
        "multi-needle retrieval accuracy (N=2, R=2, 5 samples x 2 queries per cell, seed 9)\n",
        "depth    ctx 128    ctx 256   \n",
        "  0%     1.000      0.500     \n",
        " 50%     0.000      0.000     \n",
        "100%     0.100      0.000     \n",
        "overall  0.267 (16/60)\n",
        "(differential map A1 - lambda A2)\n",
        " 50%     0.5000       0.5000      \n", /* 1.0 / 2, 1 / 2 */
        "all      0.5000       0.5000      \n", /* 3.0 / 6, 3 / 6 */
    };
    DRT_CHECK(all == 16, "%d correct, expected 16", all);
    for (size_t i = 0; i < sizeof says / sizeof says[0]; i++)
        DRT_CHECK(strstr(buf, says[i]) != NULL, "the tables lack \"%s\":\n%s", says[i], buf);

    drt_act_stats a;
    drt_mag_stats both;
    DRT_CHECK(drt_act_stats_init(&a) == DRT_OK && drt_mag_stats_init(&both) == DRT_OK, "%s", drt_last_error());
    drt_mag_stats_add(&both, -3);
    drt_mag_stats_add(&a.hidden, 2);
    for (int diff = 0; diff < 2; diff++) {
        f = fmemopen(buf, sizeof buf - 1, "w");
        drt_act_stats_print(f, &a, &both, diff);
        fclose(f);
        const char *row = diff ? "attention logits (both maps)            3            0"
                               : "attention logits                        3            0";
        DRT_CHECK(strstr(buf, row) && strstr(buf, "hidden states                           2            0") &&
                      !strstr(buf, "map 2 (q2.k2)") == !diff,
                  "Table 5 (diff %d):\n%s", diff, buf);
    }
    drt_act_stats_free(&a);
    drt_mag_stats_free(&both);
}

static int get_int(cJSON *o, const char *k) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? (int)v->valuedouble : -1;
}

/* drt_niah_answer stops at any of the eos ids it is given, not only one
 * (Llama 3 lists three): on a fixture's greedy path, eos {x, g} where x
 * never comes and g is the path's j-th token ends the answer before g. */
static void answer_stops_at_every_eos(void) {
    drt_model *m = NULL;
    drt_session *s = NULL;
    drt_tokenizer *t = NULL;
    drt_session_opts so = {.backend = "ref"};
    if (drt_model_load(DRT_FIXTURES_DIR "/hf_llama_gqa", &m) != DRT_OK || drt_session_create(m, &so, &s) != DRT_OK ||
        drt_tokenizer_load(DRT_FIXTURES_DIR "/../tokenizer/bytes256.json", &t) != DRT_OK) {
        DRT_CHECK(0, "answer eos: %s", drt_last_error());
        drt_session_free(s);
        drt_model_free(m);
        return;
    }
    drt_model_info I;
    drt_model_get_info(m, &I);
    float *logits = malloc(sizeof(float) * (size_t)I.vocab);
    const int32_t prompt[3] = {5, 6, 7};
    int32_t path[DRT_NIAH_MAX_NEW_TOKENS], gen[DRT_NIAH_MAX_NEW_TOKENS];
    int n_path = 0, ng = -1;
    char pred[32];
    drt_status st = drt_session_forward(s, prompt, 3, logits, 0);
    if (st == DRT_OK) st = drt_niah_answer(s, t, I.vocab, NULL, 0, logits, path, &n_path, pred, sizeof pred);
    DRT_CHECK(st == DRT_OK && n_path == DRT_NIAH_MAX_NEW_TOKENS, "answer without eos: %d tokens: %s", n_path,
              drt_last_error());
    int j = 1; /* the first token that is new on the path */
    for (int dup = 1; j < n_path && dup; j += dup) {
        dup = 0;
        for (int i = 0; i < j; i++) dup |= path[i] == path[j];
    }
    int32_t x = 3; /* an id the path never takes */
    for (int again = 1; again;) {
        again = 0;
        for (int i = 0; i < n_path; i++) again |= path[i] == x;
        x += again;
    }
    DRT_CHECK(j < n_path, "answer eos: the greedy path repeats one token");
    if (j < n_path) {
        const int32_t eos[2] = {x, path[j]};
        drt_session_reset(s);
        st = drt_session_forward(s, prompt, 3, logits, 0);
        if (st == DRT_OK) st = drt_niah_answer(s, t, I.vocab, eos, 2, logits, gen, &ng, pred, sizeof pred);
        DRT_CHECK(st == DRT_OK && ng == j && memcmp(gen, path, sizeof *gen * (size_t)j) == 0,
                  "answer with eos {%d, %d}: %d tokens, expected %d", x, path[j], ng, j);
    }
    free(logits);
    drt_tokenizer_free(t);
    drt_session_free(s);
    drt_model_free(m);
}

int main(int argc, char **argv) {
    const char *samples = argc > 1 ? argv[1] : NIAH_DIR "/samples.jsonl";
    const char *tokpath = argc > 2 ? argv[2] : NIAH_DIR "/tokenizer.json";
    drt_tokenizer *tok = NULL;
    answer_stops_at_every_eos();
    DRT_CHECK(drt_tokenizer_load(tokpath, &tok) == DRT_OK, "%s", drt_last_error());
    char *text = NULL;
    size_t len = 0;
    DRT_CHECK(drt_read_text_file(samples, &text, &len) == DRT_OK, "%s", drt_last_error());
    if (!tok || !text) return drt_test_summary("test_niah");
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        DRT_CHECK(o != NULL, "sample %d: not JSON", n);
        if (!o) continue;
        /* seeds go up to 2^64-1: read the exact integer from the text */
        const char *sp = strstr(line, "\"seed\": ");
        uint64_t seed = sp ? strtoull(sp + 8, NULL, 10) : 0;
        int ctx = get_int(o, "ctx"), N = get_int(o, "needles"), R = get_int(o, "queries");
        int depth = get_int(o, "depth"), index = get_int(o, "index"), q = get_int(o, "query");
        drt_niah_prompt p[64];
        drt_status s = drt_niah_make(tok, seed, ctx, N, R, depth, index, p);
        DRT_CHECK(s == DRT_OK, "sample %d (seed %llu ctx %d N %d R %d depth %d index %d): %s", n,
                  (unsigned long long)seed, ctx, N, R, depth, index, drt_last_error());
        if (s == DRT_OK) {
            const char *want = cJSON_GetObjectItemCaseSensitive(o, "prompt")->valuestring;
            cJSON *span = cJSON_GetObjectItemCaseSensitive(o, "answer_span");
            cJSON *ids = cJSON_GetObjectItemCaseSensitive(o, "prompt_ids");
            DRT_CHECK(strcmp(p[q].prompt, want) == 0,
                      "sample %d (seed %llu ctx %d N %d R %d depth %d index %d "
                      "query %d): prompt text differs",
                      n, (unsigned long long)seed, ctx, N, R, depth, index, q);
            DRT_CHECK(strcmp(p[q].answer, cJSON_GetObjectItemCaseSensitive(o, "answer")->valuestring) == 0,
                      "sample %d: answer %s", n, p[q].answer);
            DRT_CHECK(p[q].answer_start == (int)cJSON_GetArrayItem(span, 0)->valuedouble &&
                          p[q].answer_end == (int)cJSON_GetArrayItem(span, 1)->valuedouble &&
                          p[q].question_start == get_int(o, "question_start"),
                      "sample %d: spans [%d,%d) q %d differ", n, p[q].answer_start, p[q].answer_end,
                      p[q].question_start);
            int same = cJSON_GetArraySize(ids) == p[q].n_ids;
            for (int i = 0; same && i < p[q].n_ids; i++)
                same = (int)cJSON_GetArrayItem(ids, i)->valuedouble == p[q].ids[i];
            DRT_CHECK(same, "sample %d: prompt ids differ (%d vs %d ids)", n, p[q].n_ids, cJSON_GetArraySize(ids));
            for (int r = 0; r < R; r++) drt_niah_prompt_free(&p[r]);
        }
        cJSON_Delete(o);
        n++;
    }
    printf("%d samples compared\n", n);
    DRT_CHECK(n >= 20, "only %d samples in %s", n, samples);

    /* judging: leading spaces, the longest digit prefix */
    char pred[16];
    const char *cases[][2] = {
        {" 4720391.", "4720391"}, {"  4720391 and", "4720391"}, {"x12", ""}, {" ", ""}, {"47203910", "47203910"}};
    for (int i = 0; i < 5; i++) {
        drt_niah_predicted(cases[i][0], pred, sizeof pred);
        DRT_CHECK(strcmp(pred, cases[i][1]) == 0, "predicted(\"%s\") = \"%s\", expected \"%s\"", cases[i][0], pred,
                  cases[i][1]);
    }
    /* a context too small is an error naming it */
    drt_niah_prompt p1;
    DRT_CHECK(drt_niah_make(tok, 0, 8, 1, 1, 50, 0, &p1) == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), "ctx 8"),
              "ctx 8 accepted: %s", drt_last_error());
    check_scoring();
    check_compare();
    check_tables();
    free(text);
    drt_tokenizer_free(tok);
    return drt_test_summary("test_niah");
}
