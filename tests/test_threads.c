/* Threads (include/diffrt/diffrt.h, "Threads"): a model is shared, a session
 * is one thread's at a time, and misuse is an error, never wrong logits.
 *   - shared model: sessions of one model created, run and freed on 4
 *     threads at once give logits bit-identical to one thread's (cpu, ref);
 *   - one session, two threads calling forward as fast as they can: every
 *     call either succeeds with logits bit-identical to a single-threaded
 *     run's or fails with DRT_ERR_BUSY ("session is in use by another
 *     thread"); before the lock most came out wrong;
 *   - drt_session_free while another thread is inside a forward waits for
 *     that forward: no crash, no use after free (the ASan and TSan builds
 *     watch), and the forward's logits are right;
 *   - one batch session, two threads each decoding its own sequence: every
 *     forward succeeds with its sequence's right logits or is BUSY, and a
 *     thread's sequence never moves when its call was refused.
 *   - one tokenizer shared by N_TOK threads at once (read-only once loaded):
 *     each encodes a long text, decodes the ids and decodes them again
 *     through a stream of its own, and gets what one thread gets, byte for
 *     byte, for each tokenizer.json kind (a Split regex, ByteLevel's,
 *     RoBERTa-like flags, the model's);
 *   - samplers on N_SAMP threads at once, one each (a sampler is one
 *     thread's at a time, and samplers share nothing): each draws what its
 *     seed draws on one thread.
 * Threads record what they saw; the checks run on the main thread
 * (DRT_CHECK counts in plain ints). Models: the bundled fixtures (V = 256,
 * 64 positions), and one quantized to q4_0 here: on a CPU with AVX512-VNNI
 * the cpu backend's sessions share one repacked copy of its weights, made
 * by whichever session comes first (backends/cpu/backend.c, shared_get).
 * Clean under ThreadSanitizer: -DDIFFRT_TSAN=ON (tests/README.md). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "diffrt/diffrt.h"
#include "diffrt/tokenizer.h"
#include "diffrt/util.h"
#include "drt_test.h"

#define V 256
#define T 8        /* tokens of the hammer prompt */
#define LAPS 3     /* the hammer session holds LAPS prompts (ctx LAPS * T) */
#define T_LONG 48  /* the forward a free waits for */
#define N_DECODE 4 /* decode steps after the prefill, shared-model case */
#define N_SHARED 4 /* threads of the shared-model case */

static void prompt(int32_t *ids, int n, int salt) {
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 37 + salt * 11 + 3) % V);
}

static drt_model *load(const char *dir) {
    drt_model *m = NULL;
    if (drt_model_load(dir, &m) != DRT_OK) DRT_CHECK(0, "load %s: %s", dir, drt_last_error());
    return m;
}

static drt_session *session(drt_model *m, const char *backend, int ctx) {
    /* one worker: a single-threaded reference and the threads' runs take
     * the same reduction order, so equal means bit-identical */
    drt_session_opts o = {.backend = backend, .max_ctx = ctx, .threads = 1};
    drt_session *s = NULL;
    if (drt_session_create(m, &o, &s) != DRT_OK) DRT_CHECK(0, "session on %s: %s", backend, drt_last_error());
    return s;
}

/* ---- sessions of one shared model on N_SHARED threads ------------------- */

/* prefill [T, V] all logits, then N_DECODE greedy-free decode steps of fixed
 * ids, [V] each: (T + N_DECODE) * V floats */
#define RUN_FLOATS ((T + N_DECODE) * V)

typedef struct {
    drt_model *m;
    const char *backend;
    int salt;
    drt_status st;
    char err[256];
    float out[RUN_FLOATS];
} shared_job;

static drt_status run_session(drt_model *m, const char *backend, int salt, float *out) {
    drt_session *s = NULL;
    drt_session_opts o = {.backend = backend, .max_ctx = T + N_DECODE, .threads = 1};
    drt_status st = drt_session_create(m, &o, &s);
    int32_t ids[T];
    prompt(ids, T, salt);
    if (st == DRT_OK) st = drt_session_forward(s, ids, T, out, 1);
    for (int i = 0; st == DRT_OK && i < N_DECODE; i++) {
        int32_t id = (int32_t)((salt * 7 + i * 13) % V);
        st = drt_session_forward(s, &id, 1, out + (size_t)(T + i) * V, 0);
    }
    drt_session_free(s);
    return st;
}

static void *shared_thread(void *p) {
    shared_job *j = p;
    j->st = run_session(j->m, j->backend, j->salt, j->out);
    if (j->st != DRT_OK) snprintf(j->err, sizeof j->err, "%s", drt_last_error());
    return NULL;
}

static void shared_model(const char *dir, const char *backend) {
    drt_model *m = load(dir);
    if (!m) return;
    static shared_job jobs[N_SHARED];
    static float ref[N_SHARED][RUN_FLOATS];
    for (int i = 0; i < N_SHARED; i++) {
        /* two prompts, each on two threads: equal prompts must agree, and
         * different ones must not be mixed up */
        drt_status st = run_session(m, backend, i % 2, ref[i]);
        DRT_CHECK(st == DRT_OK, "%s on %s, one thread: %s", dir, backend, drt_last_error());
        jobs[i] = (shared_job){.m = m, .backend = backend, .salt = i % 2};
    }
    pthread_t th[N_SHARED];
    int started[N_SHARED];
    for (int i = 0; i < N_SHARED; i++) started[i] = pthread_create(&th[i], NULL, shared_thread, &jobs[i]) == 0;
    for (int i = 0; i < N_SHARED; i++)
        if (started[i]) pthread_join(th[i], NULL);
    for (int i = 0; i < N_SHARED; i++) {
        DRT_CHECK(started[i], "%s on %s: thread %d did not start", dir, backend, i);
        if (!started[i]) continue;
        DRT_CHECK(jobs[i].st == DRT_OK, "%s on %s, thread %d: %s", dir, backend, i, jobs[i].err);
        DRT_CHECK(jobs[i].st != DRT_OK || memcmp(jobs[i].out, ref[i], sizeof ref[i]) == 0,
                  "%s on %s, thread %d: logits differ from one thread's run", dir, backend, i);
    }
    drt_model_free(m);
}

/* ---- one session, two threads ------------------------------------------- */

#define HAMMER_CALLS 300

typedef struct {
    drt_session *s;
    const float (*laps)[V]; /* the logits of the prompt at lap 0 .. LAPS-1 */
    int ok, busy, full, wrong, other;
    char other_err[256], busy_err[256];
} hammer_job;

static void *hammer_thread(void *p) {
    hammer_job *j = p;
    int32_t ids[T];
    float lg[V];
    prompt(ids, T, 0);
    for (int c = 0; c < HAMMER_CALLS; c++) {
        drt_status st = drt_session_forward(j->s, ids, T, lg, 0);
        if (st == DRT_OK) {
            /* both threads run the same prompt, so the cache always holds
             * it k times: the logits must be one lap's exactly */
            int lap = -1;
            for (int k = 0; k < LAPS && lap < 0; k++)
                if (memcmp(lg, j->laps[k], sizeof lg) == 0) lap = k;
            if (lap < 0)
                j->wrong++;
            else
                j->ok++;
        } else if (st == DRT_ERR_BUSY) {
            if (!strstr(drt_last_error(), "session is in use by another thread"))
                snprintf(j->busy_err, sizeof j->busy_err, "%s", drt_last_error());
            j->busy++;
            sched_yield(); /* let the other thread finish, so that both get forwards in */
        } else if (st == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), "exceed the context")) {
            j->full++; /* the context is full: start over */
            drt_session_reset(j->s);
        } else {
            j->other++;
            snprintf(j->other_err, sizeof j->other_err, "%s: %s", drt_status_str(st), drt_last_error());
        }
    }
    return NULL;
}

static void one_session_two_threads(const char *dir, const char *backend) {
    drt_model *m = load(dir);
    drt_session *s = m ? session(m, backend, LAPS * T) : NULL;
    if (!s) {
        drt_model_free(m);
        return;
    }
    static float laps[LAPS][V];
    int32_t ids[T];
    prompt(ids, T, 0);
    for (int k = 0; k < LAPS; k++)
        DRT_CHECK(drt_session_forward(s, ids, T, laps[k], 0) == DRT_OK, "%s lap %d: %s", dir, k, drt_last_error());
    drt_session_reset(s);
    hammer_job j[2] = {{.s = s, .laps = (const float(*)[V])laps}, {.s = s, .laps = (const float(*)[V])laps}};
    pthread_t th[2];
    int started[2];
    for (int i = 0; i < 2; i++) started[i] = pthread_create(&th[i], NULL, hammer_thread, &j[i]) == 0;
    for (int i = 0; i < 2; i++)
        if (started[i]) pthread_join(th[i], NULL);
    int ok = 0, busy = 0;
    for (int i = 0; i < 2; i++) {
        DRT_CHECK(started[i], "%s: hammer thread %d did not start", dir, i);
        DRT_CHECK(j[i].wrong == 0, "%s on %s, thread %d: %d of %d forwards gave wrong logits", dir, backend, i,
                  j[i].wrong, HAMMER_CALLS);
        DRT_CHECK(j[i].other == 0, "%s on %s, thread %d: %d calls failed otherwise, last: %s", dir, backend, i,
                  j[i].other, j[i].other_err);
        DRT_CHECK(!j[i].busy_err[0], "%s, thread %d: the busy error says \"%s\"", dir, i, j[i].busy_err);
        ok += j[i].ok;
        busy += j[i].busy;
    }
    DRT_CHECK(ok > 0, "%s on %s: no forward of two threads succeeded", dir, backend);
    if (getenv("DRT_TEST_VERBOSE"))
        fprintf(stderr, "%s on %s: %d ok, %d busy, %d context full\n", dir, backend, ok, busy, j[0].full + j[1].full);
    /* after the threads, the session is whole: one more lap from 0 */
    float lg[V];
    drt_session_reset(s);
    DRT_CHECK(drt_session_forward(s, ids, T, lg, 0) == DRT_OK && memcmp(lg, laps[0], sizeof lg) == 0,
              "%s: the session after the threads: %s", dir, drt_last_error());
    drt_session_free(s);
    drt_model_free(m);
}

/* ---- drt_session_free during another thread's forward ------------------- */

/* rounds until FREE_INSIDE frees came during a forward, at most
 * FREE_ROUNDS. Every other round holds its forward inside, at its first
 * node, until the main thread has seen it busy (an observer: a gate), so
 * frees during a forward happen on every machine however it schedules the
 * threads (a cpu forward of the fixtures is shorter than a time slice, and
 * on a loaded machine the race alone can miss it for hundreds of rounds);
 * the rounds between race as they come. */
#define FREE_ROUNDS 400
#define FREE_INSIDE 5
#define GATE_WAIT_S 2.0 /* the gate opens by itself after this */

typedef struct {
    drt_session *s;
    atomic_int started, done;
    atomic_int probed; /* the main thread saw the forward busy */
    drt_status st;
    float lg[T_LONG * V];
} long_job;

static int gate_want(void *ctx, const char *op, const char *name, int layer) {
    (void)ctx, (void)op, (void)layer;
    return strcmp(name, "embed") == 0;
}

static void gate_on_node(void *ctx, const drt_node_event *ev) {
    (void)ev;
    long_job *j = ctx;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        sched_yield();
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (!atomic_load(&j->probed) && (t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9 < GATE_WAIT_S);
}

static void *long_thread(void *p) {
    long_job *j = p;
    int32_t ids[T_LONG];
    prompt(ids, T_LONG, 5);
    atomic_store(&j->started, 1);
    j->st = drt_session_forward(j->s, ids, T_LONG, j->lg, 1);
    atomic_store(&j->done, 1); /* s is not touched after this */
    return NULL;
}

static void free_during_forward(const char *dir, const char *backend) {
    drt_model *m = load(dir);
    if (!m) return;
    static float ref[T_LONG * V];
    int32_t ids[T_LONG];
    prompt(ids, T_LONG, 5);
    drt_session *s = session(m, backend, T_LONG);
    DRT_CHECK(s && drt_session_forward(s, ids, T_LONG, ref, 1) == DRT_OK, "%s reference: %s", dir, drt_last_error());
    drt_session_free(s);
    static long_job j;
    int inside = 0, busy = 0;
    int r = 0;
    for (; r < FREE_ROUNDS && inside < FREE_INSIDE; r++) {
        j.s = session(m, backend, T_LONG);
        if (!j.s) break;
        int gated = r % 2 == 0;
        if (gated) {
            drt_observer gate = {.want = gate_want, .on_node = gate_on_node, .ctx = &j};
            DRT_CHECK(drt_session_set_observer(j.s, &gate) == DRT_OK, "%s: set the gate: %s", dir, drt_last_error());
        }
        atomic_store(&j.started, 0);
        atomic_store(&j.done, 0);
        atomic_store(&j.probed, 0);
        pthread_t th;
        if (pthread_create(&th, NULL, long_thread, &j) != 0) {
            DRT_CHECK(0, "%s: cannot start a thread", dir);
            drt_session_free(j.s);
            break;
        }
        while (!atomic_load(&j.started)) sched_yield();
        /* free only once the forward is known to be inside (a probe that
         * is busy: 0 tokens, rejected without running when it gets in) or
         * over; freeing before it entered would be a use after free of the
         * caller's making */
        int in = 0;
        float probe_lg[V];
        while (!atomic_load(&j.done) && !in) in = drt_session_forward(j.s, ids, 0, probe_lg, 0) == DRT_ERR_BUSY;
        atomic_store(&j.probed, 1); /* opens the gate */
        drt_session_free(j.s);      /* waits for the forward when it is inside */
        pthread_join(th, NULL);
        inside += in;
        if (j.st == DRT_ERR_BUSY) { /* it came in during a probe: nothing ran */
            busy++;
            continue;
        }
        DRT_CHECK(!gated || in, "%s on %s round %d: the gated forward was not seen busy", dir, backend, r);
        DRT_CHECK(j.st == DRT_OK && memcmp(j.lg, ref, sizeof ref) == 0, "%s round %d (%s): %s", dir, r,
                  in ? "freed during the forward" : "freed after it", j.st ? drt_last_error() : "wrong logits");
    }
    /* the case must have happened, or the test tested nothing */
    DRT_CHECK(inside > 0, "%s on %s: in %d rounds no free came during a forward", dir, backend, r);
    if (getenv("DRT_TEST_VERBOSE"))
        fprintf(stderr, "%s on %s: %d of %d frees during a forward (%d forwards busy)\n", dir, backend, inside, r,
                busy);
    drt_model_free(m);
}

/* ---- one batch session, two threads, a sequence each ---------------------- */

#define B_LEN 12 /* positions a sequence holds before it is cut back to 0 */

typedef struct {
    drt_batch_session *b;
    int seq;
    const float (*want)[V]; /* the logits of the sequence's token at position 0 .. B_LEN-1 */
    int ok, busy, wrong, other;
    char other_err[256];
} batch_job;

static void *batch_thread(void *p) {
    batch_job *j = p;
    int32_t tok = 5 + j->seq, seq = j->seq;
    float lg[V];
    for (int c = 0; c < HAMMER_CALLS; c++) {
        int len = drt_seq_len(j->b, seq);
        drt_batch bt = {.n = 1, .token = &tok, .seq = &seq};
        drt_status st = len == B_LEN ? drt_seq_truncate(j->b, seq, 0) : drt_batch_forward(j->b, &bt, lg);
        if (st == DRT_OK && len < B_LEN) {
            if (memcmp(lg, j->want[len], sizeof lg) != 0)
                j->wrong++;
            else
                j->ok++;
        } else if (st == DRT_ERR_BUSY) {
            j->busy++;
            sched_yield();
        } else if (st != DRT_OK) {
            j->other++;
            snprintf(j->other_err, sizeof j->other_err, "%s: %s", drt_status_str(st), drt_last_error());
        }
    }
    return NULL;
}

static void batch_two_threads(const char *dir, const char *backend) {
    drt_model *m = load(dir);
    drt_session_opts o = {.backend = backend, .threads = 1};
    drt_batch_opts bo = {.max_seqs = 2, .ctx_per_seq = B_LEN, .max_batch_rows = 2};
    drt_batch_session *b = NULL;
    if (!m || drt_batch_session_create(m, &o, &bo, &b) != DRT_OK) {
        DRT_CHECK(0, "%s: batch session on %s: %s", dir, backend, drt_last_error());
        drt_model_free(m);
        return;
    }
    /* each sequence's logits, one thread, the same one-row forwards */
    static float want[2][B_LEN][V];
    for (int32_t q = 0; q < 2; q++)
        for (int k = 0; k < B_LEN; k++) {
            int32_t tok = 5 + q;
            drt_batch bt = {.n = 1, .token = &tok, .seq = &q};
            DRT_CHECK(drt_batch_forward(b, &bt, want[q][k]) == DRT_OK, "%s: reference row: %s", dir, drt_last_error());
        }
    drt_seq_truncate(b, 0, 0);
    drt_seq_truncate(b, 1, 0);
    batch_job j[2] = {{.b = b, .seq = 0, .want = (const float(*)[V])want[0]},
                      {.b = b, .seq = 1, .want = (const float(*)[V])want[1]}};
    pthread_t th[2];
    int started[2];
    for (int i = 0; i < 2; i++) started[i] = pthread_create(&th[i], NULL, batch_thread, &j[i]) == 0;
    for (int i = 0; i < 2; i++)
        if (started[i]) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        DRT_CHECK(started[i], "%s: batch thread %d did not start", dir, i);
        DRT_CHECK(j[i].wrong == 0, "%s on %s, batch thread %d: %d forwards gave wrong logits", dir, backend, i,
                  j[i].wrong);
        DRT_CHECK(j[i].other == 0, "%s on %s, batch thread %d: %d calls failed otherwise, last: %s", dir, backend, i,
                  j[i].other, j[i].other_err);
        DRT_CHECK(j[i].ok > 0, "%s on %s: batch thread %d got no forward in", dir, backend, i);
    }
    drt_batch_session_free(b);
    drt_model_free(m);
}

/* ---- one tokenizer, N_TOK threads at once ----------------------------------- */

#define N_TOK 4
#define TOK_REPEAT 8 /* the corpus this many times: a long text to encode */
#define TOK_LAPS 2

typedef struct {
    int32_t *ids;
    int n;
    char *text; /* decode of ids */
    size_t len;
    char *streamed; /* the stream's pieces joined */
    size_t s_len;
} tok_result;

static void tok_result_free(tok_result *r) {
    drt_free(r->ids);
    drt_free(r->text);
    drt_free(r->streamed);
    *r = (tok_result){0};
}

/* encode, decode, then a stream of its own over the same ids */
static drt_status tok_run(const drt_tokenizer *t, const char *text, size_t len, tok_result *r) {
    *r = (tok_result){0};
    drt_status st = drt_tokenizer_encode_max(t, text, len, 1, 0, &r->ids, &r->n);
    if (st == DRT_OK) st = drt_tokenizer_decode(t, r->ids, r->n, 0, &r->text, &r->len);
    drt_tokenizer_stream ts;
    drt_tokenizer_stream_init(&ts);
    size_t cap = 0;
    for (int i = 0; st == DRT_OK && i < r->n; i++)
        st = drt_tokenizer_stream_push(t, &ts, r->ids[i], 0, &r->streamed, &r->s_len, &cap);
    if (st == DRT_OK) st = drt_tokenizer_stream_flush(t, &ts, &r->streamed, &r->s_len, &cap);
    return st;
}

typedef struct {
    const drt_tokenizer *t;
    const char *text;
    size_t len;
    const tok_result *want;
    int wrong;
    drt_status st;
    char err[256];
} tok_job;

static void *tok_thread(void *p) {
    tok_job *j = p;
    for (int lap = 0; lap < TOK_LAPS && j->st == DRT_OK; lap++) {
        tok_result r;
        j->st = tok_run(j->t, j->text, j->len, &r);
        if (j->st != DRT_OK)
            snprintf(j->err, sizeof j->err, "%s", drt_last_error());
        else if (r.n != j->want->n || memcmp(r.ids, j->want->ids, sizeof *r.ids * (size_t)r.n) != 0 ||
                 r.len != j->want->len || memcmp(r.text, j->want->text, r.len) != 0 || r.s_len != j->want->s_len ||
                 memcmp(r.streamed, j->want->streamed, r.s_len) != 0)
            j->wrong++;
        tok_result_free(&r);
    }
    return NULL;
}

static void tokenizer_threads(const char *path, const char *corpus, size_t corpus_len) {
    drt_tokenizer *t = NULL;
    if (drt_tokenizer_load(path, &t) != DRT_OK) {
        DRT_CHECK(0, "load %s: %s", path, drt_last_error());
        return;
    }
    size_t len = corpus_len * TOK_REPEAT;
    char *text = malloc(len + 1);
    if (!text) {
        DRT_CHECK(0, "out of memory");
        drt_tokenizer_free(t);
        return;
    }
    for (int k = 0; k < TOK_REPEAT; k++) memcpy(text + (size_t)k * corpus_len, corpus, corpus_len);
    text[len] = 0;
    tok_result want;
    drt_status st = tok_run(t, text, len, &want);
    DRT_CHECK(st == DRT_OK, "%s, one thread: %s", path, drt_last_error());
    DRT_CHECK(st != DRT_OK || (want.len == want.s_len && memcmp(want.text, want.streamed, want.len) == 0),
              "%s: the stream's pieces differ from decode", path);
    if (st == DRT_OK) {
        tok_job jobs[N_TOK];
        pthread_t th[N_TOK];
        int started[N_TOK];
        for (int i = 0; i < N_TOK; i++) {
            jobs[i] = (tok_job){.t = t, .text = text, .len = len, .want = &want};
            started[i] = pthread_create(&th[i], NULL, tok_thread, &jobs[i]) == 0;
        }
        for (int i = 0; i < N_TOK; i++)
            if (started[i]) pthread_join(th[i], NULL);
        for (int i = 0; i < N_TOK; i++) {
            DRT_CHECK(started[i], "%s: tokenizer thread %d did not start", path, i);
            DRT_CHECK(jobs[i].st == DRT_OK, "%s, thread %d: %s", path, i, jobs[i].err);
            DRT_CHECK(jobs[i].wrong == 0, "%s, thread %d: %d of %d laps differ from one thread's ids or text", path, i,
                      jobs[i].wrong, TOK_LAPS);
        }
    }
    tok_result_free(&want);
    free(text);
    drt_tokenizer_free(t);
}

/* ---- samplers on N_SAMP threads at once, one each ------------------------- */

#define N_SAMP 4
#define SAMP_V 32000 /* a real vocabulary's logits */
#define SAMP_DRAWS 64

typedef struct {
    drt_sampler_opts o;
    const float *logits;
    int draws[SAMP_DRAWS];
    drt_status st;
} samp_job;

static void samp_run(samp_job *j) {
    drt_sampler *s = NULL;
    j->st = drt_sampler_create(&j->o, SAMP_V, &s);
    for (int i = 0; j->st == DRT_OK && i < SAMP_DRAWS; i++) {
        /* a different distribution each draw: the logits shifted along */
        j->draws[i] = drt_sampler_sample(s, j->logits + i);
        if (j->draws[i] < 0) j->st = DRT_ERR_NUMERIC;
    }
    drt_sampler_free(s);
}

static void *samp_thread(void *p) {
    samp_run(p);
    return NULL;
}

static void sampler_threads(void) {
    static float logits[SAMP_V + SAMP_DRAWS];
    drt_rng r;
    drt_rng_seed(&r, 11);
    drt_fill_uniform(logits, SAMP_V + SAMP_DRAWS, &r, -4.0f, 4.0f);
    /* two option sets, each on two threads: equal seeds must agree */
    const drt_sampler_opts opts[2] = {{.temperature = 0.8f, .top_k = 40, .top_p = 0.9f, .seed = 7},
                                      {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 1234}};
    static samp_job want[2], jobs[N_SAMP];
    for (int k = 0; k < 2; k++) {
        want[k] = (samp_job){.o = opts[k], .logits = logits};
        samp_run(&want[k]);
        DRT_CHECK(want[k].st == DRT_OK, "sampler %d, one thread: %s", k, drt_last_error());
    }
    pthread_t th[N_SAMP];
    int started[N_SAMP];
    for (int i = 0; i < N_SAMP; i++) {
        jobs[i] = (samp_job){.o = opts[i % 2], .logits = logits};
        started[i] = pthread_create(&th[i], NULL, samp_thread, &jobs[i]) == 0;
    }
    for (int i = 0; i < N_SAMP; i++)
        if (started[i]) pthread_join(th[i], NULL);
    for (int i = 0; i < N_SAMP; i++) {
        DRT_CHECK(started[i], "sampler thread %d did not start", i);
        DRT_CHECK(jobs[i].st == DRT_OK, "sampler thread %d: %s", i, drt_status_str(jobs[i].st));
        DRT_CHECK(memcmp(jobs[i].draws, want[i % 2].draws, sizeof jobs[i].draws) == 0,
                  "sampler thread %d: its draws differ from one thread's with the same seed", i);
    }
}

int main(void) {
    const char *q4 = DRT_TMP_DIR "/threads_q4_0";
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' quantize --model '%s' --type q4_0 --out '%s' --force >/dev/null 2>&1", DRT_CLI_PATH,
             DRT_FIXTURES_DIR "/hf_llama_gqa", q4);
    int q_ok = system(cmd) == 0;
    DRT_CHECK(q_ok, "%s failed", cmd);
    const char *models[] = {
        DRT_FIXTURES_DIR "/hf_llama_gqa",                                          /* transformer */
        DRT_FIXTURES_DIR "/hf_diffllama_gqa",                                      /* diff V1 */
        DRT_FIXTURES_DIR "/diff_v2", q_ok ? q4 : DRT_FIXTURES_DIR "/hf_llama_gqa", /* q4_0: the shared repacked copy */
    };
    static const char *backends[] = {"cpu", "ref"};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++)
        for (size_t b = 0; b < sizeof backends / sizeof *backends; b++) {
            shared_model(models[i], backends[b]);
            one_session_two_threads(models[i], backends[b]);
            free_during_forward(models[i], backends[b]);
            batch_two_threads(models[i], backends[b]);
        }
    char *corpus = NULL;
    size_t corpus_len = 0;
    if (drt_read_text_file(DRT_FIXTURES_DIR "/../tokenizer/corpus.txt", &corpus, &corpus_len) != DRT_OK) {
        DRT_CHECK(0, "corpus: %s", drt_last_error());
    } else {
        static const char *tokenizers[] = {
            DRT_FIXTURES_DIR "/../tokenizer/llama3.json", /* a Split regex, ignore_merges */
            DRT_FIXTURES_DIR "/../tokenizer/gpt2.json",   /* ByteLevel's regex */
            DRT_FIXTURES_DIR "/../tokenizer/flags.json",  /* lstrip/rstrip/single_word added tokens */
            DRT_MODELS_DIR "/diff-v1-tiny/tokenizer.json",
        };
        for (size_t i = 0; i < sizeof tokenizers / sizeof *tokenizers; i++)
            tokenizer_threads(tokenizers[i], corpus, corpus_len);
        drt_free(corpus);
    }
    sampler_threads();
    DRT_CHECK(strcmp(drt_status_str(DRT_ERR_BUSY), "busy") == 0, "BUSY: %s", drt_status_str(DRT_ERR_BUSY));
    return drt_test_summary("test_threads");
}
