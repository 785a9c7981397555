/* The public API (include/diffrt/diffrt.h, backend.h, quantize.h) at its edges:
 *   - every entry point called with NULL pointers and counts out of range
 *     returns DRT_ERR_INVALID_ARG with a one-line message (or, for the few
 *     without a status, the documented value), and nothing crashes;
 *   - a rejected forward leaves the position where it was;
 *   - a session outlives its model: drt_model_free while sessions are alive
 *     drops the caller's reference only, the sessions keep computing the same
 *     logits, and the last session to go frees the model (ASan builds check
 *     that nothing is read after it is freed and nothing leaks);
 *   - a forward whose logits are NaN is DRT_ERR_NUMERIC naming the position,
 *     and with check_finite the first op and layer, and does not advance;
 *   - a checkpoint truncated under a loaded model (docs/library.md, "Using diffrt as a
 *     library"): read into memory (DIFFRT_NO_MMAP=1) the forward goes on
 *     unharmed; mapped (the default) the process dies of SIGBUS, as
 *     documented (in a child process).
 * Models are the bundled hf_llama_gqa fixture (V = 256, 64 positions) and
 * copies of it made here. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "diffrt/backend.h"
#include "diffrt/diffrt.h"
#include "diffrt/quantize.h"
#include "drt_test.h"
#include "safetensors.h"

#define BASE DRT_FIXTURES_DIR "/hf_llama_gqa"
#define V 256

/* st == want and the message is one non-empty line holding must_say */
#define CHECK_ERR(st, want, must_say, what)                                                                            \
    do {                                                                                                               \
        drt_status st_ = (st);                                                                                         \
        const char *m_ = drt_last_error();                                                                             \
        DRT_CHECK(st_ == (want) && m_[0] && !strchr(m_, '\n') && strstr(m_, must_say),                                 \
                  "%s: %s \"%s\", expected %s holding \"%s\"", what, drt_status_str(st_), m_, drt_status_str(want),    \
                  must_say);                                                                                           \
    } while (0)

/* DRT_TMP_DIR/api_<name>: BASE's config.json with `from` replaced by `to`
 * (NULL: as is), and its weights with element 0 of `poison` set to NaN
 * (NULL: as is) */
static const char *model_copy(char *dir, size_t n, const char *name, const char *from, const char *to,
                              const char *poison) {
    snprintf(dir, n, "%s/api_%s", DRT_TMP_DIR, name);
    mkdir(dir, 0755);
    char *cfg = NULL, p[1200];
    if (drt_read_text_file(BASE "/config.json", &cfg, NULL) != DRT_OK) return NULL;
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "wb");
    char *at = from ? strstr(cfg, from) : NULL;
    if (f && at) {
        fwrite(cfg, 1, (size_t)(at - cfg), f);
        fputs(to, f);
        fputs(at + strlen(from), f);
    } else if (f) {
        fputs(cfg, f);
    }
    int ok = f && fclose(f) == 0 && (!from || at);
    free(cfg);
    drt_st_file st;
    if (!ok || drt_st_open(BASE "/model.safetensors", &st) != DRT_OK) return NULL;
    drt_st_write_tensor *w = calloc((size_t)st.n_tensors, sizeof *w);
    float *copy = NULL;
    for (int i = 0; w && i < st.n_tensors; i++) {
        const drt_st_tensor *t = &st.tensors[i];
        w[i] = (drt_st_write_tensor){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(w[i].shape, t->shape, sizeof w[i].shape);
        if (poison && strcmp(t->name, poison) == 0 && t->dtype == DRT_F32 && (copy = malloc(t->nbytes))) {
            memcpy(copy, t->data, t->nbytes);
            copy[0] = NAN;
            w[i].data = copy;
        }
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    ok = w && (!poison || copy) && drt_st_write(p, w, st.n_tensors) == DRT_OK;
    free(copy);
    free(w);
    drt_st_close(&st);
    return ok ? dir : NULL;
}

static void status_and_dtypes(void) {
    DRT_CHECK(strcmp(drt_status_str(DRT_ERR_NUMERIC), "non-finite values") == 0, "NUMERIC: %s",
              drt_status_str(DRT_ERR_NUMERIC));
    DRT_CHECK(strcmp(drt_status_str((drt_status)99), "unknown status") == 0, "status 99");
    DRT_CHECK(strcmp(drt_dtype_name((drt_dtype)-1), "?") == 0 && drt_dtype_size((drt_dtype)99) == 0, "bad dtype");
    DRT_CHECK(drt_last_error() != NULL, "drt_last_error is NULL");
}

static void backends(void) {
    drt_backend_info bi;
    char buf[256];
    int n = drt_backend_count();
    DRT_CHECK(n >= 2, "%d backends", n);
    CHECK_ERR(drt_backend_get_info(-1, &bi), DRT_ERR_INVALID_ARG, "out of range", "get_info(-1)");
    CHECK_ERR(drt_backend_get_info(n, &bi), DRT_ERR_INVALID_ARG, "out of range", "get_info(count)");
    CHECK_ERR(drt_backend_get_info(0, NULL), DRT_ERR_INVALID_ARG, "out is NULL", "get_info(0, NULL)");
    CHECK_ERR(drt_backend_device_name(-1, 0, buf, sizeof buf), DRT_ERR_INVALID_ARG, "backend index", "device_name(-1)");
    CHECK_ERR(drt_backend_device_name(0, 0, NULL, 16), DRT_ERR_INVALID_ARG, "no buffer", "device_name(buf NULL)");
    CHECK_ERR(drt_backend_device_name(0, 0, buf, 0), DRT_ERR_INVALID_ARG, "no buffer", "device_name(n 0)");
    CHECK_ERR(drt_backend_device_name(0, -1, buf, sizeof buf), DRT_ERR_INVALID_ARG, "out of range",
              "device_name(dev -1)");
    CHECK_ERR(drt_backend_device_name(0, 1000, buf, sizeof buf), DRT_ERR_INVALID_ARG, "out of range",
              "device_name(dev 1000)");
    DRT_CHECK(drt_backend_device_name(0, 0, buf, sizeof buf) == DRT_OK && buf[0], "cpu device 0: %s", drt_last_error());
}

/* The tools' headers (backend.h, quantize.h) at their edges */
static void tools(void) {
    drt_backend *be = (drt_backend *)&be;
    drt_peak pk;
    CHECK_ERR(drt_backend_open_settings("cpu", NULL, 0, NULL, NULL), DRT_ERR_INVALID_ARG, "out is NULL",
              "open_settings(out NULL)");
    CHECK_ERR(drt_backend_open_settings("nosuch", NULL, 0, NULL, &be), DRT_ERR_INVALID_ARG, "unknown backend",
              "open_settings(nosuch)");
    DRT_CHECK(be == NULL, "open_settings(nosuch) left *out set");
    CHECK_ERR(drt_backend_open_settings("cpu", NULL, -1, NULL, &be), DRT_ERR_INVALID_ARG, "threads -1",
              "open_settings(threads -1)");
    CHECK_ERR(drt_measure_peak(NULL, NULL, &pk), DRT_ERR_INVALID_ARG, "no backend", "measure_peak(NULL)");
    DRT_CHECK(drt_backend_device(NULL) == -1, "drt_backend_device(NULL)");
    char name[256];
    CHECK_ERR(drt_backend_instance_name(NULL, name, sizeof name), DRT_ERR_INVALID_ARG, "no backend",
              "instance_name(NULL)");
    drt_backend_close(NULL);
    /* the instance's name tells the threads it was opened with, whatever the
     * default (the device's name) says */
    for (int th = 1; th <= 3; th += 2) {
        drt_backend *b = NULL;
        if (drt_backend_open_settings("cpu", NULL, th, NULL, &b) != DRT_OK) {
            DRT_CHECK(0, "open cpu, %d threads: %s", th, drt_last_error());
            continue;
        }
        char want[32];
        snprintf(want, sizeof want, "(%d threads,", th);
        DRT_CHECK(drt_backend_instance_name(b, name, sizeof name) == DRT_OK && strstr(name, want),
                  "cpu opened with %d threads is named \"%s\"", th, name);
        CHECK_ERR(drt_backend_instance_name(b, NULL, 8), DRT_ERR_INVALID_ARG, "no buffer", "instance_name(buf NULL)");
        drt_backend_close(b);
    }
    if (drt_backend_open_settings("cpu", NULL, 1, NULL, &be) == DRT_OK) {
        DRT_CHECK(drt_backend_device(be) == 0, "cpu: device %d", drt_backend_device(be));
        CHECK_ERR(drt_measure_peak(be, NULL, NULL), DRT_ERR_INVALID_ARG, "out is NULL", "measure_peak(out NULL)");
        drt_backend_close(be);
    } else {
        DRT_CHECK(0, "open cpu: %s", drt_last_error());
    }

    drt_quantize_result r = {.n_tensors = 7};
    CHECK_ERR(drt_quantize_model(NULL, DRT_Q8_0, "/tmp", NULL, &r), DRT_ERR_INVALID_ARG, "dir is NULL",
              "quantize(dir NULL)");
    DRT_CHECK(r.n_tensors == 0, "quantize(dir NULL) left the result set");
    CHECK_ERR(drt_quantize_model(BASE, DRT_Q8_0, NULL, NULL, NULL), DRT_ERR_INVALID_ARG, "out_dir is NULL",
              "quantize(out_dir NULL)");
    CHECK_ERR(drt_quantize_model(BASE, DRT_F16, "/tmp", NULL, NULL), DRT_ERR_INVALID_ARG, "q8_0 or q4_0, got f16",
              "quantize(f16)");
    CHECK_ERR(drt_quantize_model(BASE "/nonexistent", DRT_Q4_0, "/tmp", NULL, NULL), DRT_ERR_IO, "nonexistent",
              "quantize(a missing model)");
}

static void models(void) {
    drt_model *m = (drt_model *)1;
    drt_model_info I;
    CHECK_ERR(drt_model_load(NULL, &m), DRT_ERR_INVALID_ARG, "no model directory", "load(NULL)");
    DRT_CHECK(m == NULL, "load(NULL) left *out set");
    CHECK_ERR(drt_model_load("", &m), DRT_ERR_INVALID_ARG, "no model directory", "load(\"\")");
    CHECK_ERR(drt_model_load(BASE, NULL), DRT_ERR_INVALID_ARG, "out is NULL", "load(dir, NULL)");
    CHECK_ERR(drt_model_get_info(NULL, &I), DRT_ERR_INVALID_ARG, "NULL", "get_info(NULL)");
    drt_model_free(NULL);
    if (drt_model_load(BASE, &m) != DRT_OK) {
        DRT_CHECK(0, "%s", drt_last_error());
        return;
    }
    CHECK_ERR(drt_model_get_info(m, NULL), DRT_ERR_INVALID_ARG, "out is NULL", "get_info(m, NULL)");
    drt_model_free(m); /* no session: freed at once (a leak under ASan otherwise) */
}

static void sessions(void) {
    drt_model *m;
    drt_session *s = (drt_session *)1;
    if (drt_model_load(BASE, &m) != DRT_OK) {
        DRT_CHECK(0, "%s", drt_last_error());
        return;
    }
    drt_session_opts o = {.backend = "cpu", .max_ctx = 8};
    CHECK_ERR(drt_session_create(NULL, &o, &s), DRT_ERR_INVALID_ARG, "no model", "create(NULL)");
    DRT_CHECK(s == NULL, "create(NULL) left *out set");
    CHECK_ERR(drt_session_create(m, &o, NULL), DRT_ERR_INVALID_ARG, "out is NULL", "create(out NULL)");
    struct {
        int max_ctx, threads;
        const char *must_say;
    } bad[] = {
        {-1, 0, "max_ctx -1 is out of range"},
        {INT_MIN, 0, "out of range"},
        {DRT_MAX_CTX + 1, 0, "out of range: 1 .. 16777216"},
        {INT_MAX, 0, "out of range"},
        {8, -1, "threads -1"},
        {8, 100000, "100000 threads"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        drt_session_opts b = {.backend = "cpu", .max_ctx = bad[i].max_ctx, .threads = bad[i].threads};
        char what[64];
        snprintf(what, sizeof what, "create(max_ctx %d, threads %d)", bad[i].max_ctx, bad[i].threads);
        CHECK_ERR(drt_session_create(m, &b, &s), DRT_ERR_INVALID_ARG, bad[i].must_say, what);
        DRT_CHECK(s == NULL, "%s: a session came back", what);
    }
    /* a config that says 0 positions is refused by the loader (its bounds
     * table), so no session can resolve a default context of 0 rows */
    char dir[1100];
    drt_model *m0 = NULL;
    if (model_copy(dir, sizeof dir, "zero_positions", "\"max_position_embeddings\": 64",
                   "\"max_position_embeddings\": 0", NULL)) {
        CHECK_ERR(drt_model_load(dir, &m0), DRT_ERR_FORMAT, "\"max_position_embeddings\" is 0",
                  "load(max_position_embeddings 0)");
        DRT_CHECK(m0 == NULL, "zero_positions: a model came back");
    } else {
        DRT_CHECK(0, "zero_positions: cannot make the model copy");
    }
    drt_model_free(m0);
    /* past max_position_embeddings is the caller's choice */
    drt_session_opts past = {.backend = "ref", .max_ctx = 100};
    DRT_CHECK(drt_session_create(m, &past, &s) == DRT_OK, "ctx 100 > 64: %s", drt_last_error());
    drt_session_free(s);

    if (drt_session_create(m, &o, &s) != DRT_OK) {
        DRT_CHECK(0, "session: %s", drt_last_error());
        drt_model_free(m);
        return;
    }
    int32_t ids[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    float *lg = malloc(sizeof(float) * V * 9), w[16];
    CHECK_ERR(drt_session_forward(NULL, ids, 1, lg, 0), DRT_ERR_INVALID_ARG, "session is NULL", "forward(NULL)");
    CHECK_ERR(drt_session_forward(s, NULL, 1, lg, 0), DRT_ERR_INVALID_ARG, "ids is NULL", "forward(ids NULL)");
    CHECK_ERR(drt_session_forward(s, ids, 1, NULL, 0), DRT_ERR_INVALID_ARG, "logits is NULL", "forward(logits NULL)");
    CHECK_ERR(drt_session_forward(s, ids, 0, lg, 0), DRT_ERR_INVALID_ARG, "0 tokens", "forward(T 0)");
    CHECK_ERR(drt_session_forward(s, ids, -3, lg, 0), DRT_ERR_INVALID_ARG, "-3 tokens", "forward(T -3)");
    CHECK_ERR(drt_session_forward(s, ids, 9, lg, 0), DRT_ERR_INVALID_ARG, "context of 8", "forward(T 9 > ctx 8)");
    DRT_CHECK(drt_session_forward(s, ids, 5, lg, 0) == DRT_OK, "5 tokens: %s", drt_last_error());
    /* pos + T past the context, T near INT_MAX (no overflow) */
    CHECK_ERR(drt_session_forward(s, ids, 4, lg, 0), DRT_ERR_INVALID_ARG, "5 + 4 tokens exceed", "forward(5 + 4 > 8)");
    CHECK_ERR(drt_session_forward(s, ids, INT_MAX, lg, 0), DRT_ERR_INVALID_ARG, "exceed", "forward(T INT_MAX)");
    DRT_CHECK(drt_session_pos(s) == 5, "rejected forwards moved the position to %d", drt_session_pos(s));
    CHECK_ERR(drt_session_last_attention(NULL, w), DRT_ERR_INVALID_ARG, "session is NULL", "last_attention(NULL)");
    CHECK_ERR(drt_session_last_attention(s, NULL), DRT_ERR_INVALID_ARG, "weights is NULL",
              "last_attention(weights NULL)");
    DRT_CHECK(drt_session_last_attention(s, w) == DRT_OK, "probe: %s", drt_last_error());
    CHECK_ERR(drt_session_keep_attention(NULL, 1), DRT_ERR_INVALID_ARG, "session is NULL", "keep_attention(NULL)");
    char fb[64] = "x";
    DRT_CHECK(drt_session_fallbacks(NULL, fb, sizeof fb) == 0 && fb[0] == 0, "fallbacks(NULL)");
    size_t un = 7;
    DRT_CHECK(drt_session_activation_bytes(NULL, &un) == 0 && un == 0, "activation_bytes(NULL)");
    DRT_CHECK(drt_session_pos(NULL) == -1, "pos(NULL)");
    drt_session_reset(NULL);
    drt_session_free(NULL);
    free(lg);
    drt_session_free(s);
    drt_model_free(m);
}

/* drt_model_free with two live sessions: both keep computing the logits they
 * computed before, a second free is ignored, and the last session frees it */
static void session_outlives_model(void) {
    drt_model *m;
    drt_session *a = NULL, *b = NULL;
    if (drt_model_load(BASE, &m) != DRT_OK) {
        DRT_CHECK(0, "%s", drt_last_error());
        return;
    }
    drt_session_opts oa = {.backend = "cpu", .max_ctx = 16}, ob = {.backend = "ref", .max_ctx = 16};
    int32_t ids[4] = {5, 17, 99, 3};
    float *ref_a = malloc(sizeof(float) * V * 4), *ref_b = malloc(sizeof(float) * V * 4);
    float *lg = malloc(sizeof(float) * V * 4);
    drt_status st = drt_session_create(m, &oa, &a);
    if (st == DRT_OK) st = drt_session_create(m, &ob, &b);
    if (st == DRT_OK) st = drt_session_forward(a, ids, 4, ref_a, 1);
    if (st == DRT_OK) st = drt_session_forward(b, ids, 4, ref_b, 1);
    DRT_CHECK(st == DRT_OK, "before the free: %s", drt_last_error());
    drt_session_reset(a);
    drt_session_reset(b);

    drt_model_free(m);
    drt_model_free(m); /* the caller's reference is gone already: ignored while sessions live */
    DRT_CHECK(drt_session_forward(a, ids, 4, lg, 1) == DRT_OK, "cpu after the model's free: %s", drt_last_error());
    DRT_CHECK(memcmp(lg, ref_a, sizeof(float) * V * 4) == 0, "cpu logits changed after the free");
    drt_session_free(a);
    DRT_CHECK(drt_session_forward(b, ids, 4, lg, 1) == DRT_OK, "ref after the model's free: %s", drt_last_error());
    DRT_CHECK(memcmp(lg, ref_b, sizeof(float) * V * 4) == 0, "ref logits changed after the free");
    DRT_CHECK(drt_session_forward(b, ids, 1, lg, 0) == DRT_OK && drt_session_pos(b) == 5, "decode after the free: %s",
              drt_last_error());
    drt_session_free(b); /* the last reference: the model goes now */
    free(ref_a);
    free(ref_b);
    free(lg);
}

/* NaN weights: the forward is an error naming the position (and with the
 * finite check the first op, its layer and its weight) and does not advance */
static void nonfinite_forward(void) {
    char dir[1100];
    drt_model *m = NULL;
    if (!model_copy(dir, sizeof dir, "nan", NULL, NULL, "model.layers.1.mlp.down_proj.weight") ||
        drt_model_load(dir, &m) != DRT_OK) {
        DRT_CHECK(0, "nan model: %s", drt_last_error());
        return;
    }
    const char *backends[2] = {"cpu", "ref"};
    for (int k = 0; k < 2; k++)
        for (int check = 0; check < 2; check++) {
            drt_session *s = NULL;
            drt_session_opts o = {.backend = backends[k], .max_ctx = 16, .check_finite = check};
            if (drt_session_create(m, &o, &s) != DRT_OK) {
                DRT_CHECK(0, "%s: %s", backends[k], drt_last_error());
                continue;
            }
            int32_t ids[3] = {1, 2, 3};
            float lg[V * 3];
            char what[64];
            snprintf(what, sizeof what, "%s, check_finite %d, last logits", backends[k], check);
            CHECK_ERR(drt_session_forward(s, ids, 3, lg, 0), DRT_ERR_NUMERIC,
                      check ? "logits at position 2 are not finite (NaN); first non-finite output: "
                              "MATMUL 'layers.1.mlp.down' (layer 1), whose weight "
                              "'model.layers.1.mlp.down_proj.weight' holds NaN"
                            : "logits at position 2 are not finite (NaN); the model's weights or "
                              "activations overflowed",
                      what);
            snprintf(what, sizeof what, "%s, check_finite %d, all logits", backends[k], check);
            CHECK_ERR(drt_session_forward(s, ids, 3, lg, 1), DRT_ERR_NUMERIC, "logits at position 0 are not finite",
                      what);
            DRT_CHECK(drt_session_pos(s) == 0, "%s: a NaN forward moved the position to %d", what, drt_session_pos(s));
            drt_session_free(s);
        }
    drt_model_free(m);
}

/* In a child: load dir's model with DIFFRT_NO_MMAP=no_mmap, truncate its
 * checkpoint to 0 bytes, run a forward; exits 0 when it ran and matched
 * `want` (the logits of the same forward on the intact file). */
static void truncate_child(const char *dir, int no_mmap, const float *want) {
    setenv("DIFFRT_NO_MMAP", no_mmap ? "1" : "0", 1);
    drt_model *m = NULL;
    drt_session *s = NULL;
    drt_session_opts o = {.backend = "cpu", .max_ctx = 8, .threads = 1};
    char p[1200];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    int32_t ids[3] = {1, 2, 3};
    float lg[V];
    if (drt_model_load(dir, &m) != DRT_OK || drt_session_create(m, &o, &s) != DRT_OK) _exit(3);
    if (truncate(p, 0) != 0) _exit(4);
    if (drt_session_forward(s, ids, 3, lg, 0) != DRT_OK) _exit(5);
    _exit(memcmp(lg, want, sizeof lg) == 0 ? 0 : 6);
}

static void truncated_checkpoint(void) {
    drt_model *m = NULL;
    drt_session *s = NULL;
    drt_session_opts o = {.backend = "cpu", .max_ctx = 8, .threads = 1};
    int32_t ids[3] = {1, 2, 3};
    float want[V];
    if (drt_model_load(BASE, &m) != DRT_OK || drt_session_create(m, &o, &s) != DRT_OK ||
        drt_session_forward(s, ids, 3, want, 0) != DRT_OK) {
        DRT_CHECK(0, "truncate reference: %s", drt_last_error());
        drt_session_free(s);
        drt_model_free(m);
        return;
    }
    drt_session_free(s);
    drt_model_free(m);
    for (int no_mmap = 1; no_mmap >= 0; no_mmap--) {
        char dir[1100];
        if (!model_copy(dir, sizeof dir, no_mmap ? "truncate_read" : "truncate_mapped", NULL, NULL, NULL)) {
            DRT_CHECK(0, "truncate: cannot copy the model");
            continue;
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) truncate_child(dir, no_mmap, want);
        int ws = 0;
        DRT_CHECK(pid > 0 && waitpid(pid, &ws, 0) == pid, "truncate: fork/wait failed");
        if (no_mmap) {
            DRT_CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
                      "DIFFRT_NO_MMAP=1, checkpoint truncated after load: the forward %s (status %d)",
                      WIFSIGNALED(ws) ? "crashed" : "failed", ws);
        } else {
#ifdef DIFFRT_SANITIZE_BUILD
            /* ASan reports the SIGBUS itself and exits non-zero */
            DRT_CHECK(!(WIFEXITED(ws) && WEXITSTATUS(ws) == 0), "mapped, truncated: the forward survived");
#else
            DRT_CHECK(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGBUS,
                      "mapped, truncated after load: expected the documented SIGBUS, got status %d", ws);
#endif
        }
    }
}

int main(void) {
    status_and_dtypes();
    backends();
    tools();
    models();
    sessions();
    session_outlives_model();
    nonfinite_forward();
    truncated_checkpoint();
    return drt_test_summary("test_api");
}
