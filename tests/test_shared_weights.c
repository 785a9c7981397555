/* One copy of a model's weights per device (session/device_weights.c): on a
 * backend that copies the weights (no buf_wrap: ref, opencl, vulkan, cuda),
 * the sessions of one model with the same backend, device, threads and
 * settings share one backend instance and one copy of the weights; others
 * get their own.
 *   - two sessions and a batch session of one model: one shared entry held
 *     three times; another setting value: a second entry; the entries go
 *     with their last session, in any order;
 *   - sessions on a shared entry give a lone session's logits bit for bit,
 *     also when two threads run them at once (they take turns on the
 *     instance; none fails or mixes with the other);
 *   - cpu (weights read in place from the checkpoint) shares nothing.
 * A backend that is unavailable is skipped with a note, unless
 * DIFFRT_REQUIRE names it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffrt/diffrt.h"
#include "drt_test.h"
#include "session.h"

#define MODEL DRT_FIXTURES_DIR "/hf_diffllama_gqa"
#define V 256
#define T 6
#define STEPS 20

static void prompt(int32_t *ids, int salt) {
    for (int i = 0; i < T; i++) ids[i] = (int32_t)((i * 37 + salt * 11 + 3) % V);
}

/* the prompt's last logits, then `steps` decode steps of fixed ids: the last logits */
static drt_status run(drt_session *s, int salt, int steps, float *out) {
    int32_t ids[T];
    prompt(ids, salt);
    drt_session_reset(s);
    drt_status st = drt_session_forward(s, ids, T, out, 0);
    for (int i = 0; st == DRT_OK && i < steps; i++) {
        int32_t t = (int32_t)((i * 13 + salt) % V);
        st = drt_session_forward(s, &t, 1, out, 0);
    }
    return st;
}

typedef struct {
    drt_session *s;
    int salt;
    drt_status st;
    float lg[V];
} job;

static void *thread_run(void *p) {
    job *j = p;
    j->st = run(j->s, j->salt, STEPS, j->lg);
    return NULL;
}

static int required(const char *be) {
    const char *req = getenv("DIFFRT_REQUIRE");
    if (!req) return 0;
    size_t n = strlen(be);
    for (const char *p = req; (p = strstr(p, be)); p += n)
        if ((p == req || p[-1] == ',') && (p[n] == ',' || !p[n])) return 1;
    return 0;
}

static void shared(drt_model *m, const char *be) {
    drt_session_opts o = {.backend = be, .max_ctx = T + STEPS + 1};
    drt_session *a = NULL, *b = NULL, *c = NULL;
    drt_batch_session *bs = NULL;
    drt_status st = drt_session_create(m, &o, &a);
    if (st == DRT_ERR_UNAVAILABLE && !required(be)) {
        printf("test_shared_weights: %s unavailable, skipped: %s\n", be, drt_last_error());
        return;
    }
    DRT_CHECK(st == DRT_OK, "%s: session: %s", be, drt_last_error());
    if (st != DRT_OK) return;
    drt_batch_opts bo = {.max_seqs = 2, .ctx_per_seq = T + STEPS + 1};
    DRT_CHECK(drt_session_create(m, &o, &b) == DRT_OK && drt_batch_session_create(m, &o, &bo, &bs) == DRT_OK,
              "%s: more sessions: %s", be, drt_last_error());
    int refs;
    int n = drt_device_weights_count(m, &refs);
    DRT_CHECK(n == 1 && refs == 3, "%s: %d weight copies held %d times, want 1 held 3 times", be, n, refs);
    /* another setting value: another instance (vulkan.fp16 and opencl.gemm are
     * debug knobs each backend reads; any setting changes the key) */
    drt_settings *set = NULL;
    drt_settings_create(&set);
    drt_settings_set(set, "check_finite", "1");
    drt_session_opts o2 = o;
    o2.settings = set;
    DRT_CHECK(drt_session_create(m, &o2, &c) == DRT_OK, "%s: session with settings: %s", be, drt_last_error());
    n = drt_device_weights_count(m, &refs);
    DRT_CHECK(n == 2 && refs == 4, "%s: %d copies held %d times, want 2 held 4 times", be, n, refs);

    /* a lone session's logits, then the shared ones, on two threads at once */
    float lone[2][V];
    DRT_CHECK(run(c, 1, STEPS, lone[0]) == DRT_OK && run(c, 2, STEPS, lone[1]) == DRT_OK, "%s: lone runs: %s", be,
              drt_last_error());
    job j[2] = {{.s = a, .salt = 1}, {.s = b, .salt = 2}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) DRT_CHECK(pthread_create(&th[i], NULL, thread_run, &j[i]) == 0, "thread %d", i);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++)
        DRT_CHECK(j[i].st == DRT_OK && !memcmp(j[i].lg, lone[i], sizeof lone[i]),
                  "%s: shared session %d on its thread: status %d, logits %s the lone session's", be, i, j[i].st,
                  j[i].st == DRT_OK ? "differ from" : "not");
    /* the batch session on the same copy */
    int32_t ids[T], seq[T] = {0};
    prompt(ids, 1);
    float got[V], want[V];
    drt_batch bt = {.n = T, .token = ids, .seq = seq};
    drt_session_reset(c);
    DRT_CHECK(drt_batch_forward(bs, &bt, got) == DRT_OK && drt_session_forward(c, ids, T, want, 0) == DRT_OK,
              "%s: batch forward: %s", be, drt_last_error());
    double num = 0, den = 0;
    for (int v = 0; v < V; v++)
        num += (double)(got[v] - want[v]) * (got[v] - want[v]), den += (double)want[v] * want[v];
    DRT_CHECK(num <= 1e-6 * den, "%s: the batch session on the shared copy: NMSE %.3e", be, num / den);

    /* freed in any order: an entry goes with its last session */
    drt_session_free(a);
    n = drt_device_weights_count(m, &refs);
    DRT_CHECK(n == 2 && refs == 3, "%s: after one free: %d copies held %d times", be, n, refs);
    drt_session_free(c);
    n = drt_device_weights_count(m, &refs);
    DRT_CHECK(n == 1 && refs == 2, "%s: after the settings session: %d copies held %d times", be, n, refs);
    drt_batch_session_free(bs);
    drt_session_free(b);
    n = drt_device_weights_count(m, &refs);
    DRT_CHECK(n == 0 && refs == 0, "%s: after all: %d copies held %d times", be, n, refs);
    drt_settings_free(set);
}

/* host backends read the weights in place: no entry is shared */
static void host(drt_model *m, const char *be) {
    drt_session_opts o = {.backend = be, .max_ctx = 8};
    drt_session *a = NULL, *b = NULL;
    DRT_CHECK(drt_session_create(m, &o, &a) == DRT_OK && drt_session_create(m, &o, &b) == DRT_OK, "%s: %s", be,
              drt_last_error());
    int refs, n = drt_device_weights_count(m, &refs);
    DRT_CHECK(n == 0, "%s: %d shared copies, want none", be, n);
    drt_session_free(a);
    drt_session_free(b);
}

int main(void) {
    drt_model *m = NULL;
    if (drt_model_load(MODEL, &m) != DRT_OK) {
        fprintf(stderr, "test_shared_weights: %s\n", drt_last_error());
        return 1;
    }
    host(m, "cpu");
    shared(m, "ref");
    shared(m, "opencl");
    shared(m, "vulkan");
    drt_model_free(m);
    return drt_test_summary("test_shared_weights");
}
