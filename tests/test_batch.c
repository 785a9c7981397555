/* Batch sessions (diffrt.h, drt_batch_session) at their edges, on ref and
 * cpu with the hf_llama_gqa fixture (V = 256):
 *   - the options: out of range is DRT_ERR_INVALID_ARG naming the field; the
 *     defaults as decided (drt_batch_session_get_opts);
 *   - every rule of a batch is DRT_ERR_INVALID_ARG naming the row, and a
 *     refused batch changes no sequence;
 *   - drt_seq_truncate and drt_seq_len at their edges;
 *   - a batch of rows of three sequences, after truncates and a freed slot,
 *     gives each row what a drt_session fed that sequence's tokens gives
 *     (bit for bit on ref; within 1e-6 NMSE on cpu).
 * conform's batch_* cases check the same on every backend. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffrt/diffrt.h"
#include "drt_test.h"

#define MODEL DRT_FIXTURES_DIR "/hf_llama_gqa"
#define V 256

#define CHECK_ERR(st, must_say, what)                                                                                  \
    do {                                                                                                               \
        drt_status st_ = (st);                                                                                         \
        const char *m_ = drt_last_error();                                                                             \
        DRT_CHECK(st_ == DRT_ERR_INVALID_ARG && !strchr(m_, '\n') && strstr(m_, must_say),                             \
                  "%s: status %d, message \"%s\" (want \"%s\")", what, st_, m_, must_say);                             \
    } while (0)

static void options(drt_model *m) {
    static const struct {
        drt_batch_opts o;
        const char *says;
    } bad[] = {
        {{.max_seqs = -1}, "max_seqs -1"},
        {{.max_seqs = DRT_MAX_SEQS + 1}, "max_seqs 4097"},
        {{.ctx_per_seq = -3}, "ctx_per_seq -3"},
        {{.max_batch_rows = DRT_MAX_BATCH_ROWS + 1}, "max_batch_rows 65537"},
    };
    drt_session_opts so = {.backend = "ref", .max_ctx = 16};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        drt_batch_session *b = (drt_batch_session *)1;
        CHECK_ERR(drt_batch_session_create(m, &so, &bad[i].o, &b), bad[i].says, bad[i].says);
        DRT_CHECK(b == NULL, "%s: *out not cleared", bad[i].says);
    }
    drt_batch_session *b;
    DRT_CHECK(drt_batch_session_create(m, &so, NULL, &b) == DRT_OK, "defaults: %s", drt_last_error());
    drt_batch_opts got;
    DRT_CHECK(drt_batch_session_get_opts(b, &got) == DRT_OK && got.max_seqs == 1 && got.ctx_per_seq == 16 &&
                  got.max_batch_rows == DRT_DEFAULT_BATCH_ROWS,
              "defaults: %d seqs x %d, %d rows", got.max_seqs, got.ctx_per_seq, got.max_batch_rows);
    drt_batch_session_free(b);
}

static void rules(drt_model *m) {
    drt_session_opts so = {.backend = "ref"};
    drt_batch_opts bo = {.max_seqs = 3, .ctx_per_seq = 6, .max_batch_rows = 5};
    drt_batch_session *b;
    DRT_CHECK(drt_batch_session_create(m, &so, &bo, &b) == DRT_OK, "create: %s", drt_last_error());
    if (!b) return;
    float *lg = malloc(sizeof(float) * 5 * V);
    static const struct {
        int n;
        int32_t tok[6], seq[6], pos[6];
        int with_pos;
        const char *says;
    } bad[] = {
        {0, {0}, {0}, {0}, 0, "0 rows"},
        {6, {1, 1, 1, 1, 1, 1}, {0, 0, 0, 0, 0, 0}, {0}, 0, "6 rows"},
        {2, {1, V}, {0, 0}, {0}, 0, "row 1: token id 256 is outside the vocabulary"},
        {2, {1, -1}, {0, 0}, {0}, 0, "row 1: token id -1"},
        {2, {1, 2}, {0, 3}, {0}, 0, "row 1: sequence 3 is not a slot"},
        {2, {1, 2}, {-1, 0}, {0}, 0, "row 0: sequence -1"},
        {3, {1, 2, 3}, {0, 1, 0}, {0}, 0, "row 2: sequence 0 also has rows 0 .. 1"},
        {2, {1, 2}, {1, 1}, {0, 2}, 1, "row 1: position 2 of sequence 1"},
        {1, {1}, {2}, {1}, 1, "continue at 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        drt_batch bt = {
            .n = bad[i].n, .token = bad[i].tok, .seq = bad[i].seq, .pos = bad[i].with_pos ? bad[i].pos : NULL};
        CHECK_ERR(drt_batch_forward(b, &bt, lg), bad[i].says, bad[i].says);
        for (int q = 0; q < 3; q++) DRT_CHECK(drt_seq_len(b, q) == 0, "%s: sequence %d moved", bad[i].says, q);
    }
    drt_batch nul = {.n = 1, .token = (int32_t[]){1}};
    CHECK_ERR(drt_batch_forward(b, &nul, lg), "seq is NULL", "seq NULL");
    CHECK_ERR(drt_batch_forward(b, NULL, lg), "the batch is NULL", "batch NULL");
    /* the context: 6 positions, then position 6 is refused */
    drt_batch full = {.n = 5, .token = (int32_t[]){1, 2, 3, 4, 5}, .seq = (int32_t[]){1, 1, 1, 1, 1}};
    DRT_CHECK(drt_batch_forward(b, &full, lg) == DRT_OK, "5 rows: %s", drt_last_error());
    drt_batch two = {.n = 2, .token = (int32_t[]){6, 7}, .seq = (int32_t[]){1, 1}};
    CHECK_ERR(drt_batch_forward(b, &two, lg), "row 1: position 6 of sequence 1 is past its context of 6", "context");
    DRT_CHECK(drt_seq_len(b, 1) == 5, "a refused batch moved sequence 1 to %d", drt_seq_len(b, 1));
    /* truncate and seq_len at their edges */
    CHECK_ERR(drt_seq_truncate(b, 1, 6), "holds 5 positions", "truncate past the length");
    CHECK_ERR(drt_seq_truncate(b, 1, -1), "not -1", "truncate to -1");
    CHECK_ERR(drt_seq_truncate(b, 3, 0), "sequence 3 is not a slot", "truncate slot 3");
    CHECK_ERR(drt_seq_truncate(NULL, 0, 0), "the session is NULL", "truncate NULL");
    DRT_CHECK(drt_seq_len(b, 3) == -1 && drt_seq_len(b, -1) == -1 && drt_seq_len(NULL, 0) == -1,
              "seq_len out of range");
    DRT_CHECK(drt_seq_truncate(b, 1, 2) == DRT_OK && drt_seq_len(b, 1) == 2, "truncate to 2");
    free(lg);
    drt_batch_session_free(b);
}

/* the last logits of a drt_session fed ids */
static void single(drt_session *s, const int32_t *ids, int n, float *out) {
    drt_session_reset(s);
    DRT_CHECK(drt_session_forward(s, ids, n, out, 0) == DRT_OK, "single forward: %s", drt_last_error());
}

static void against_single(drt_model *m, const char *be) {
    drt_session_opts so = {.backend = be, .max_ctx = 32};
    drt_batch_opts bo = {.max_seqs = 3, .ctx_per_seq = 32, .max_batch_rows = 16};
    drt_batch_session *b;
    drt_session *s;
    if (drt_batch_session_create(m, &so, &bo, &b) != DRT_OK || drt_session_create(m, &so, &s) != DRT_OK) {
        DRT_CHECK(0, "%s: create: %s", be, drt_last_error());
        return;
    }
    int32_t hist[3][32];
    for (int q = 0; q < 3; q++)
        for (int j = 0; j < 32; j++) hist[q][j] = (int32_t)((j * 37 + q * 101 + 5) % V);
    float *lg = malloc(sizeof(float) * 16 * V), *want = malloc(sizeof(float) * V);
    /* step 1: 7 of sequence 2, 3 of sequence 0; step 2, after cutting 2 to 4
     * and freeing 0 (rewritten with other tokens from position 0): 2 of
     * sequence 0, a decode row of 2, 5 of a new sequence 1 */
    drt_batch s1 = {.n = 10,
                    .token = (int32_t[]){hist[2][0], hist[2][1], hist[2][2], hist[2][3], hist[2][4], hist[2][5],
                                         hist[2][6], hist[0][0], hist[0][1], hist[0][2]},
                    .seq = (int32_t[]){2, 2, 2, 2, 2, 2, 2, 0, 0, 0},
                    .logits = (int8_t[]){1, 0, 0, 1, 0, 0, 1, 0, 1, 1}};
    DRT_CHECK(drt_batch_forward(b, &s1, lg) == DRT_OK, "%s: step 1: %s", be, drt_last_error());
    const int rows1[][2] = {{2, 1}, {2, 4}, {2, 7}, {0, 2}, {0, 3}}; /* (seq, prefix) per flagged row */
    double num = 0, den = 0;
    for (int k = 0; k < 5; k++) {
        single(s, hist[rows1[k][0]], rows1[k][1], want);
        for (int v = 0; v < V; v++) {
            double d = (double)lg[k * V + v] - want[v];
            num += d * d;
            den += (double)want[v] * want[v];
        }
    }
    DRT_CHECK(drt_seq_truncate(b, 2, 4) == DRT_OK && drt_seq_truncate(b, 0, 0) == DRT_OK, "%s: truncate: %s", be,
              drt_last_error());
    for (int j = 0; j < 8; j++) hist[0][j] = (int32_t)((j * 11 + 200) % V); /* slot 0's new sequence */
    hist[2][4] = 9;                                                         /* 2 goes on differently */
    drt_batch s2 = {.n = 8,
                    .token = (int32_t[]){hist[0][0], hist[0][1], hist[2][4], hist[1][0], hist[1][1], hist[1][2],
                                         hist[1][3], hist[1][4]},
                    .seq = (int32_t[]){0, 0, 2, 1, 1, 1, 1, 1},
                    .pos = (int32_t[]){0, 1, 4, 0, 1, 2, 3, 4},
                    .logits = (int8_t[]){1, 1, 1, 0, 0, 1, 0, 1}};
    DRT_CHECK(drt_batch_forward(b, &s2, lg) == DRT_OK, "%s: step 2: %s", be, drt_last_error());
    const int rows2[][2] = {{0, 1}, {0, 2}, {2, 5}, {1, 3}, {1, 5}};
    for (int k = 0; k < 5; k++) {
        single(s, hist[rows2[k][0]], rows2[k][1], want);
        for (int v = 0; v < V; v++) {
            double d = (double)lg[k * V + v] - want[v];
            num += d * d;
            den += (double)want[v] * want[v];
        }
    }
    DRT_CHECK(drt_seq_len(b, 0) == 2 && drt_seq_len(b, 1) == 5 && drt_seq_len(b, 2) == 5, "%s: lengths %d %d %d", be,
              drt_seq_len(b, 0), drt_seq_len(b, 1), drt_seq_len(b, 2));
    double nmse = num / den;
    if (!strcmp(be, "ref"))
        DRT_CHECK(num == 0, "ref: batched rows differ from single sequences (NMSE %.3e): not bit-identical", nmse);
    else
        DRT_CHECK(nmse <= 1e-6, "%s: batched rows against single sequences: NMSE %.3e > 1e-6", be, nmse);
    free(lg);
    free(want);
    drt_session_free(s);
    drt_batch_session_free(b);
}

/* A drt_session prompt of more than DRT_DEFAULT_BATCH_ROWS tokens runs in
 * forwards of that many rows: every row's logits as one whole forward gives
 * them (a session that keeps its attention probe runs the prompt whole;
 * bit for bit on ref), the last row's the same with all_logits 0, one
 * profiled forward counted, and activations planned for 512 rows. The
 * tokens go past the model's positions (allowed; only the arithmetic is
 * compared). */
#define CHUNK_T (2 * DRT_DEFAULT_BATCH_ROWS + 77)
static void chunks(drt_model *m, const char *be) {
    drt_model_info I;
    drt_model_get_info(m, &I);
    const int V_ = I.vocab;
    drt_session_opts so = {.backend = be, .max_ctx = CHUNK_T + 1};
    drt_session *whole, *part;
    if (drt_session_create(m, &so, &whole) != DRT_OK || drt_session_create(m, &so, &part) != DRT_OK) {
        DRT_CHECK(0, "%s: create: %s", be, drt_last_error());
        return;
    }
    int32_t *ids = malloc(sizeof(int32_t) * CHUNK_T);
    float *a = malloc(sizeof(float) * (size_t)CHUNK_T * V_), *b = malloc(sizeof(float) * (size_t)CHUNK_T * V_);
    float *last = malloc(sizeof(float) * V_);
    for (int j = 0; j < CHUNK_T; j++) ids[j] = (int32_t)((j * 7919 + 13) % V_);
    for (size_t i = 0; i < (size_t)CHUNK_T * V_; i++) a[i] = b[i] = NAN;
    DRT_CHECK(drt_session_keep_attention(whole, 1) == DRT_OK, "%s: keep_attention: %s", be, drt_last_error());
    DRT_CHECK(drt_session_forward(whole, ids, CHUNK_T, a, 1) == DRT_OK, "%s: whole: %s", be, drt_last_error());
    const size_t act_whole = drt_session_activation_bytes(whole, NULL);
    DRT_CHECK(drt_session_forward(part, ids, CHUNK_T, b, 1) == DRT_OK, "%s: chunked: %s", be, drt_last_error());
    const size_t act_part = drt_session_activation_bytes(part, NULL);
    DRT_CHECK(drt_session_pos(part) == CHUNK_T, "%s: chunked: position %d, want %d", be, drt_session_pos(part),
              CHUNK_T);
    double num = 0, den = 0;
    for (size_t i = 0; i < (size_t)CHUNK_T * V_; i++) {
        double d = (double)b[i] - a[i];
        num += d * d;
        den += (double)a[i] * a[i];
    }
    if (!strcmp(be, "ref"))
        DRT_CHECK(num == 0, "ref: %s: T=%d chunked logits differ from one forward (NMSE %.3e)", I.arch_name, CHUNK_T,
                  num / den);
    else
        DRT_CHECK(num <= 1e-8 * den, "%s: %s: T=%d chunked logits against one forward: NMSE %.3e > 1e-8", be,
                  I.arch_name, CHUNK_T, num / den);
    DRT_CHECK(act_part < act_whole, "%s: activations %zu B chunked, %zu B whole: not smaller", be, act_part, act_whole);
    drt_session_reset(part);
    DRT_CHECK(drt_session_forward(part, ids, CHUNK_T, last, 0) == DRT_OK, "%s: chunked, last: %s", be,
              drt_last_error());
    /* all_logits 0 takes the last row alone through the LM head (a GEMV), 1
     * all rows (a GEMM): the same bits on ref; elsewhere the two kernels may
     * sum in another order (the AVX2 set does), as batch composition may
     * (docs/library.md) */
    const float *lb = b + (size_t)(CHUNK_T - 1) * V_;
    double ln = 0, ld = 0;
    for (int i = 0; i < V_; i++)
        ln += ((double)last[i] - lb[i]) * ((double)last[i] - lb[i]), ld += (double)lb[i] * lb[i];
    if (!strcmp(be, "ref"))
        DRT_CHECK(memcmp(last, lb, sizeof(float) * V_) == 0, "ref: the last row's logits differ between all_logits 1 "
                                                             "and 0");
    else
        DRT_CHECK(ln <= 1e-10 * ld, "%s: the last row's logits between all_logits 1 and 0: NMSE %.3e > 1e-10", be,
                  ln / ld);
    drt_profile prof = {0};
    drt_session_reset(part);
    DRT_CHECK(drt_session_forward_profiled(part, ids, CHUNK_T, last, &prof) == DRT_OK && prof.forwards == 1,
              "%s: profiled chunked forward: %d forwards counted (%s)", be, prof.forwards, drt_last_error());
    free(ids);
    free(a);
    free(b);
    free(last);
    drt_session_free(whole);
    drt_session_free(part);
}

int main(void) {
    drt_model *m;
    if (drt_model_load(MODEL, &m) != DRT_OK) {
        fprintf(stderr, "test_batch: %s\n", drt_last_error());
        return 1;
    }
    options(m);
    rules(m);
    against_single(m, "ref");
    against_single(m, "cpu");
    chunks(m, "ref");
    chunks(m, "cpu");
    drt_model_free(m);
    if (drt_model_load(DRT_MODELS_DIR "/diff-v2-tiny", &m) != DRT_OK) {
        fprintf(stderr, "test_batch: %s\n", drt_last_error());
        return 1;
    }
    chunks(m, "ref");
    chunks(m, "cpu");
    drt_model_free(m);
    return drt_test_summary("test_batch");
}
