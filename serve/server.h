/* The server's state and the parts that share it (serve/): the HTTP layer
 * (http.c, on the connections of httpd.c), the scheduler (sched.c),
 * responses (respond.c), metrics (metrics.c) and startup/shutdown (run.c).
 *
 * Threads: the HTTP thread (httpd.c) runs every HTTP callback;
 * --tokenizer-threads threads parse, render and tokenize request bodies
 * while their connections are suspended; one scheduler thread owns the
 * batch session; the main thread waits for SIGTERM/SIGINT. Locks: srv.mu
 * guards the queue, the slots and the metrics; job.mu guards a job's output
 * and its connection; srv.prep_mu the tokenizer threads' queue. Order:
 * srv.mu before job.mu; prep_mu is never held with either. Nothing calls
 * srv_conn_* while holding srv.mu; only the HTTP thread calls it while
 * holding job.mu (to suspend); prep_mu is held to suspend (HTTP thread) a
 * preparing connection. */
#ifndef DRT_SRV_SERVER_H
#define DRT_SRV_SERVER_H

#include <pthread.h>
#include <stdatomic.h>

#include "chat.h"
#include "diffrt/diffrt.h"
#include "diffrt/tokenizer.h"
#include "httpd.h"
#include "request.h"
#include "serve.h"

struct conn_state;

typedef enum { JOB_QUEUED = 0, JOB_PREFILL, JOB_DECODE, JOB_DONE } srv_job_state;

#define SRV_HIST_BUCKETS 16
typedef struct {
    const double *bounds; /* SRV_HIST_BUCKETS upper bounds, the last +Inf */
    unsigned long long count[SRV_HIST_BUCKETS];
    double sum;
    unsigned long long n;
} srv_hist;

typedef struct {
    unsigned long long prompt_tokens, generation_tokens, forwards, disconnects;
    unsigned long long success_stop, success_length, success_error, success_abort;
    unsigned long long rejected_queue_full, rejected_too_large, rejected_bad_request, rejected_auth;
    srv_hist ttft, itl, e2e, iteration_tokens, forward_s;
} srv_metrics;

typedef struct srv_job srv_job;
struct srv_job {
    pthread_mutex_t mu;
    atomic_int refs;
    struct srv *S;
    srv_request req;
    char id[48];
    long long created;
    int32_t *prompt; /* the prompt's ids */
    int n_prompt;
    long max_tokens;
    drt_sampler *smp;

    /* scheduler's (under srv.mu) */
    srv_job_state state;
    srv_job *next; /* the wait queue */
    int slot;
    int n_fed; /* prompt ids already in the slot */
    int n_gen;
    int32_t last;
    drt_tokenizer_stream st;
    char *text; /* generated text so far (whole characters) */
    size_t text_len, text_cap, emitted;
    const char *finish; /* "stop", "length" */
    double t_arrival, t_first, t_last, t_ping;

    /* output (under job.mu) */
    char *out; /* bytes for the client: SSE events, or the whole body */
    size_t out_len, out_off, out_cap;
    int out_done;   /* nothing more will be appended */
    int status;     /* non-streaming: the response's status when out_done */
    int no_retry;   /* non-streaming error: x-should-retry: false */
    srv_conn *conn; /* NULL once the HTTP thread is done with it */
    int fd;         /* its socket, to see a client that left */
    int http10;     /* an HTTP/1.0 client (no interim responses) */
    int eof_probed; /* the client shut its side; a 100 Continue went out to see whether it is still there */
    int suspended;
    int cancelled; /* the client left, the slow reader, the deadline, shutdown */
    const char *cancel_why;
};

typedef struct srv {
    srv_opts o;
    const char *aliases[SRV_MAX_ALIASES];
    int n_aliases;
    drt_model *model;
    drt_model_info info;
    drt_tokenizer *tok;
    srv_chat_template chat;
    int32_t eos[16];
    int n_eos;
    int32_t end_of_turn; /* the chat template's turn end id, -1 for none */
    char **keys;
    int n_keys;
    drt_batch_session *bs;
    srv_httpd *httpd;
    int loopback; /* listening on a loopback address */
    long long started;

    pthread_mutex_t mu;
    pthread_cond_t wake;
    srv_job *q_head, *q_tail;
    int n_queued;
    srv_job **slots; /* [parallel] the job in each slot, or NULL */
    int n_active;
    int draining, stop;
    srv_metrics m;
    float *logits;
    pthread_t sched;

    /* the tokenizer threads (http.c): requests waiting to be parsed and
     * tokenized, under prep_mu */
    pthread_mutex_t prep_mu;
    pthread_cond_t prep_wake;
    struct conn_state *prep_head, *prep_tail;
    int prep_stop;
    pthread_t *prep_threads;
    int n_prep_threads;
    volatile int tok_cancel; /* set at shutdown: encodes in progress stop (drt_encode_opts.cancel) */

    /* signals (run.c): counted by the signal thread, under sig_mu */
    pthread_mutex_t sig_mu;
    pthread_cond_t sig_cv;
    int n_signals, last_signal;
    int ready; /* listening: a signal drains instead of ending the process */
} srv;

/* ---- jobs (sched.c) ---- */
srv_job *srv_job_new(srv *S);
void srv_job_unref(srv_job *j);
/* Queues j for a slot (takes a reference). -1 when the queue is full or the
 * server is draining: the caller answers 503. */
int srv_enqueue(srv *S, srv_job *j);
void *srv_sched_main(void *arg);
/* Appends n bytes to j's output and wakes its connection (job.mu taken
 * here). */
void srv_job_emit(srv_job *j, const char *bytes, size_t n, int done);
/* Marks j cancelled (why: for the log and metrics) and wakes the scheduler. */
void srv_job_cancel(srv_job *j, const char *why);

/* ---- responses (respond.c) ---- */
/* The JSON of a finished non-streaming job, the SSE chunk for new text, the
 * final chunk(s). malloc'd; NULL when out of memory. */
char *srv_body_final(const srv_job *j);
char *srv_sse_chunk(const srv_job *j, const char *text, size_t n, int role_chunk);
char *srv_sse_finish(const srv_job *j);
char *srv_sse_error(const srv_error *e);

/* ---- metrics (metrics.c) ---- */
void srv_metrics_init(srv_metrics *m);
void srv_hist_add(srv_hist *h, double v);
/* Prometheus text; malloc'd. Takes srv.mu. */
char *srv_metrics_text(srv *S);

/* ---- HTTP (http.c) ---- */
int srv_http_start(srv *S);
int srv_http_connections(srv *S); /* open connections */
void srv_http_stop(srv *S);

#endif
